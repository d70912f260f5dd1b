// `trainsim calibrate` then `trainsim validate` on the CPU, end to end, on a freshly measured
// run: the profile loads, `simulate` accepts it for the `local` system, the comparison's
// arithmetic holds on the recorded numbers and the peak memory (counted by the allocator, not
// timed) is within 5% of the replay's. The iteration-time error compares two wall-clock
// measurements of a shared machine: it is printed, never asserted (timing fidelity is the
// validation scripts' and benchmarks' business, not ctest's).
#include <gtest/gtest.h>

#include "tests/e2e/cli_helpers.h"

#include <cmath>
#include <iostream>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>

#include <nlohmann/json.hpp>

#include "models/calibration.h"
#include "tests/support/paths.h"

using trainsim::test_support::source_path;

namespace {

using trainsim_e2e::run;
using trainsim_e2e::slurp;

const std::string kScenario =
    source_path("scenarios/small/gpt-cpu_tp1_pp1_dp1.yaml");
const std::string kOut = std::string(TRAINSIM_BINARY_DIR) + "/e2e_validate_cli";

}  // namespace

TEST(ValidateCli, CalibrateThenValidateOnTheCpu) {
#ifndef TRAINSIM_HAVE_VALIDATE
  GTEST_SKIP() << "the calibrate and validate verbs are not in this build (LibTorch was not found)";
#endif
  std::system(("mkdir -p " + kOut).c_str());
  const std::string profile = kOut + "/cpu_profile.json";
  ASSERT_EQ(run("calibrate --device cpu --quick --out " + profile, kOut + "/calibrate.log"), 0)
      << slurp(kOut + "/calibrate.log");
  const trainsim::CalibrationProfile p = trainsim::load_calibration(profile);
  EXPECT_EQ(p.precision, "fp32");
  EXPECT_GT(p.local_device.peak_flops, 0);
  EXPECT_FALSE(p.gemm_efficiency.empty());
  EXPECT_NE(p.source.find("measured"), std::string::npos);

  // simulate accepts the profile for the `local` system.
  ASSERT_EQ(run("simulate " + kScenario + " --calibration " + profile + " --json " + kOut +
                    "/sim.json",
                kOut + "/simulate.log"),
            0)
      << slurp(kOut + "/simulate.log");
  const auto sim = nlohmann::json::parse(slurp(kOut + "/sim.json"));
  EXPECT_GT(sim["iteration_time_s"].get<double>(), 0);

  const std::string result = kOut + "/validate.json", report = kOut + "/validate.html";
  ASSERT_EQ(run("validate " + kScenario + " --device cpu --calibration " + profile +
                    " --repeat 2 --json " + result + " --report " + report,
                kOut + "/validate.log"),
            0)
      << slurp(kOut + "/validate.log");
  const auto r = nlohmann::json::parse(slurp(result));
  const double t_err = r["iteration_time_error"].get<double>();
  const double m_err = r["peak_memory_error"].get<double>();
  // Both errors are (simulated - measured) / measured of the numbers next to them.
  const double ts = r["iteration_time_s"]["simulated"], tm = r["iteration_time_s"]["measured"];
  const double ms = r["peak_memory_bytes"]["simulated"], mm = r["peak_memory_bytes"]["measured"];
  EXPECT_NEAR(t_err, (ts - tm) / tm, 1e-12);
  EXPECT_NEAR(m_err, (ms - mm) / mm, 1e-12);
  EXPECT_GT(tm, 0);
  EXPECT_GT(mm, 0);
  EXPECT_LE(std::abs(m_err), 0.05) << slurp(kOut + "/validate.log");
  std::cout << "[ NOTE ] iteration_time_error " << t_err << " (simulated " << ts
            << " s, measured " << tm << " s; printed, not asserted)\n";
  for (const char* k : {"compute", "copies", "collectives", "optimizer"})
    EXPECT_TRUE(r["per_kind"].contains(k)) << k;
  EXPECT_FALSE(r["largest_mismatches"].empty());
  const std::string html = slurp(report);
  EXPECT_NE(html.find("<svg"), std::string::npos);
  EXPECT_NE(html.find("simulated"), std::string::npos);
}

// A multi-rank scenario validates on the CPU the way replay runs it: the cluster becomes
// one-device `local` nodes (their links at the profile's copy bandwidth), rank 0 is replayed
// with its collectives and messages substituted, and the notes say all of it. Only the
// deterministic parts are asserted (the comparison's arithmetic, structure, notes).
TEST(ValidateCli, AMultiRankScenarioValidatesOnTheCpu) {
#ifndef TRAINSIM_HAVE_VALIDATE
  GTEST_SKIP() << "the validate verb is not in this build";
#endif
  std::system(("mkdir -p " + kOut).c_str());
  const std::string profile = std::string(TRAINSIM_SOURCE_DIR) + "/tests/golden/cpu_profile.json";
  const std::string result = kOut + "/multi.json";
  ASSERT_EQ(run("validate " + std::string(TRAINSIM_SOURCE_DIR) +
                    "/scenarios/small/gpt-tiny_tp2_pp2_dp2.yaml --device cpu --calibration " +
                    profile + " --repeat 1 --json " + result,
                kOut + "/multi.log"),
            0)
      << slurp(kOut + "/multi.log");
  const auto r = nlohmann::json::parse(slurp(result));
  const double ts = r["iteration_time_s"]["simulated"], tm = r["iteration_time_s"]["measured"];
  EXPECT_NEAR(r["iteration_time_error"].get<double>(), (ts - tm) / tm, 1e-12);
  EXPECT_EQ(r["rank"], 0);
  std::string notes;
  for (const auto& n : r["notes"]) notes += n.get<std::string>() + "\n";
  EXPECT_NE(notes.find("replaced by `local`"), std::string::npos) << notes;
  EXPECT_NE(notes.find("each of the 8 ranks is a one-device node"), std::string::npos) << notes;
  EXPECT_NE(notes.find("replayed as device-local copies"), std::string::npos) << notes;
}
