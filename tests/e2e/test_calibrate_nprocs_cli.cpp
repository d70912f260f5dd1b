// `calibrate --device cpu` measures the host transport (local_device.host_comm_*) and, with
// --nprocs N, the rates one of N concurrent processes sees (local_device.processes); validate
// warns when its --nprocs differs from the profile's. Bad values of the flag exit 1 naming it
// and the value. What is checked is what the profile holds, never how fast anything ran.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <string>
#include <vector>

#include "tests/e2e/cli_helpers.h"
#include "tests/support/paths.h"

namespace {

using trainsim::test_support::ScratchDir;
using trainsim::test_support::source_path;
using trainsim_e2e::run;
using trainsim_e2e::slurp;

const std::string kProfile = source_path("tests/golden/cpu_profile.json");

/// Runs `trainsim ARGS`: exit 1 and every needle in its output.
void expect_refused(const ScratchDir& dir, const std::string& args,
                    const std::vector<std::string>& needles) {
  const std::string log = dir.file("log.txt").string();
  EXPECT_EQ(run(args, log), 1) << args << "\n" << slurp(log);
  const std::string out = slurp(log);
  for (const auto& n : needles) EXPECT_NE(out.find(n), std::string::npos) << n << "\n" << out;
}

}  // namespace

TEST(CalibrateNprocsCli, BadNprocsIsRefusedNamingTheFlagAndValue) {
  ScratchDir dir("e2e_calibrate_nprocs_bad");
  expect_refused(dir, "calibrate --device cpu --quick --nprocs 0", {"--nprocs", "0"});
  expect_refused(dir, "calibrate --device cpu --quick --nprocs 65", {"--nprocs", "65"});
  expect_refused(dir, "calibrate --device cpu --quick --nprocs two", {"--nprocs", "two"});
#ifdef TRAINSIM_HAVE_VALIDATE_TRACE  // calibrate's fits
  const std::string trace = source_path("validation/data/replay_llama-tiny_cpu.trace.json");
  expect_refused(dir, "calibrate --from-trace " + trace + " --base " + kProfile + " --nprocs 2",
                 {"--from-trace", "--nprocs 2", "applies to"});
#endif
#ifdef TRAINSIM_HAVE_VALIDATE  // a build that measures
  expect_refused(dir, "calibrate --device cuda --nprocs 2", {"--device cuda", "--nprocs 2"});
#endif
}

TEST(CalibrateNprocsCli, QuickCpuProfileHasTheHostTransportAndItsProcessCount) {
#ifndef TRAINSIM_HAVE_VALIDATE
  GTEST_SKIP() << "calibrate's microbenchmarks need LibTorch in this build";
#endif
  ScratchDir dir("e2e_calibrate_nprocs");
  const std::string out = dir.file("p.json").string(), log = dir.file("p.log").string();
  ASSERT_EQ(run("calibrate --device cpu --quick --nprocs 2 --out " + out, log), 0) << slurp(log);
  const auto p = nlohmann::json::parse(slurp(out));
  const auto& d = p.at("local_device");
  EXPECT_EQ(d.at("processes").get<double>(), 2.0);
  EXPECT_GE(d.at("host_comm_latency_s").get<double>(), 0.0);
  EXPECT_GT(d.at("host_comm_bw_bytes_per_s").get<double>(), 0.0);
  const auto& hc = p.at("measurements").at("host_comm");
  EXPECT_EQ(hc.at("points").size(), 12u);  // 4 operations x 3 sizes (--quick)
  EXPECT_EQ(hc.at("latency_s"), d.at("host_comm_latency_s"));
  EXPECT_EQ(hc.at("bw_bytes_per_s"), d.at("host_comm_bw_bytes_per_s"));
}

TEST(CalibrateNprocsCli, ValidateWarnsWhenTheProfileWasMeasuredByOtherProcessCounts) {
#ifndef TRAINSIM_HAVE_VALIDATE
  GTEST_SKIP() << "validate needs LibTorch in this build";
#endif
  ScratchDir dir("e2e_calibrate_nprocs_warn");
  auto profile = nlohmann::json::parse(slurp(kProfile));
  profile["local_device"]["processes"] = 2;
  const std::string p2 = dir.write("p2.json", profile.dump(2));
  const std::string sc = source_path("scenarios/small/llama-tiny_tp1_pp1_dp1.yaml");
  const std::string json = dir.file("v.json").string(), log = dir.file("v.log").string();
  ASSERT_EQ(run("validate " + sc + " --device cpu --calibration " + p2 + " --repeat 1 --json " +
                    json,
                log),
            0)
      << slurp(log);
  const std::string err = slurp(log);
  EXPECT_NE(err.find("measured by 2 process(es) at once"), std::string::npos) << err;
  const auto r = nlohmann::json::parse(slurp(json));
  std::string notes;
  for (const auto& n : r.at("notes")) notes += n.get<std::string>();
  EXPECT_NE(notes.find("local_device.processes"), std::string::npos) << notes;
  EXPECT_NE(notes.find(p2), std::string::npos) << notes;
}
