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

#include "models/hardware/calibration.h"
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

// ---------------------------------------------------------------- --measured-trace
namespace {

const std::string kH100Dir = source_path("validation/data/h100_2026-11-26");
const std::string kH100Trace = kH100Dir + "/replay_gpt-1.7b.trace.json";
const std::string k17b = source_path("scenarios/gpt-1.7b_tp1_pp1_dp32.yaml");

}  // namespace

// A replay recorded on a real H100 (validation/gpu_check.sh) is compared here without replaying:
// every task of the trace pairs with the graph, the measured iteration is the trace's own span
// and the memory peak its largest allocator sample (the trace predates otherData's peaks), both
// read from the file by this test, and the simulated side is what `simulate` prints.
TEST(ValidateCli, AReplayRecordedOnAnH100ComparesWithoutReplaying) {
#ifndef TRAINSIM_HAVE_VALIDATE_TRACE
  GTEST_SKIP() << "validate --measured-trace needs the simulator in this build";
#endif
  std::system(("mkdir -p " + kOut).c_str());
  const std::string result = kOut + "/h100.json", sim_json = kOut + "/h100_sim.json";
  ASSERT_EQ(run("validate " + k17b + " --set cluster.system=dgx-h100 --measured-trace " +
                    kH100Trace + " --json " + result,
                kOut + "/h100.log"),
            0)
      << slurp(kOut + "/h100.log");
  ASSERT_EQ(run("simulate " + k17b + " --set cluster.system=dgx-h100 --json " + sim_json,
                kOut + "/h100_sim.log"),
            0);
  const auto trace = nlohmann::json::parse(slurp(kH100Trace));
  double lo = INFINITY, hi = -INFINITY;
  std::int64_t spans = 0, peak = 0;
  for (const auto& e : trace["traceEvents"]) {
    if (e["ph"] == "X") {
      ++spans;
      lo = std::min(lo, e["ts"].get<double>());
      hi = std::max(hi, e["ts"].get<double>() + e["dur"].get<double>());
    } else if (e["ph"] == "C" && e["name"] == "allocator") {
      peak = std::max(peak, e["args"]["allocated"].get<std::int64_t>());
    }
  }
  const auto r = nlohmann::json::parse(slurp(result));
  EXPECT_EQ(r["tasks_compared"].get<std::int64_t>(), spans);
  EXPECT_NEAR(r["iteration_time_s"]["measured"].get<double>(), (hi - lo) * 1e-6, 1e-9);
  EXPECT_EQ(r["peak_memory_bytes"]["measured"].get<std::int64_t>(), peak);
  const auto sim = nlohmann::json::parse(slurp(sim_json));
  EXPECT_DOUBLE_EQ(r["iteration_time_s"]["simulated"].get<double>(),
                   sim["iteration_time_s"].get<double>());
  EXPECT_EQ(r["device"], "libtorch-2.11.0-cuda");
  EXPECT_EQ(r["measured_trace"], kH100Trace);
  EXPECT_FALSE(r.contains("replay_iteration_times_s"));
  std::string notes;
  for (const auto& n : r["notes"]) notes += n.get<std::string>() + "\n";
  EXPECT_NE(notes.find("not replayed again"), std::string::npos) << notes;
  EXPECT_NE(notes.find("largest 'allocator' sample"), std::string::npos) << notes;
}

// A trace that does not belong to the scenario's graph is refused, naming the file and what
// differs; so is a simulated trace, and --device beside --measured-trace.
TEST(ValidateCli, AMeasuredTraceOfAnotherGraphIsRefused) {
#ifndef TRAINSIM_HAVE_VALIDATE_TRACE
  GTEST_SKIP() << "validate --measured-trace needs the simulator in this build";
#endif
  std::system(("mkdir -p " + kOut).c_str());
  const std::string h100 = " --set cluster.system=dgx-h100 --measured-trace " + kH100Trace;
  // Same scenario name, another graph: micro batch 8 makes two microbatches.
  const std::string mb = kOut + "/refuse_mb.log";
  EXPECT_EQ(run("validate " + k17b + h100 + " --set parallel.micro_batch_size=8", mb), 1);
  EXPECT_NE(slurp(mb).find(kH100Trace), std::string::npos) << slurp(mb);
  EXPECT_NE(slurp(mb).find("recorded from another graph"), std::string::npos) << slurp(mb);
  // Another scenario.
  const std::string other = kOut + "/refuse_other.log";
  EXPECT_EQ(run("validate " + source_path("scenarios/gpt-3.6b_tp2_pp1_dp32.yaml") + h100, other),
            1);
  EXPECT_NE(slurp(other).find("'otherData.scenario' = 'gpt-1.7b_tp1_pp1_dp32'"),
            std::string::npos)
      << slurp(other);
  // A simulated trace.
  const std::string simulated = kOut + "/simulated_trace.json", sim_log = kOut + "/refuse_sim.log";
  ASSERT_EQ(run("simulate " + k17b + " --trace " + simulated + " --trace-ranks 0",
                kOut + "/simulated_trace.log"),
            0);
  EXPECT_EQ(run("validate " + k17b + " --measured-trace " + simulated, sim_log), 1);
  EXPECT_NE(slurp(sim_log).find("'otherData.measured' = false"), std::string::npos)
      << slurp(sim_log);
  // --device chooses where to replay, which a recorded trace already did.
  const std::string dev = kOut + "/refuse_device.log";
  EXPECT_EQ(run("validate " + k17b + h100 + " --device cpu", dev), 1);
  EXPECT_NE(slurp(dev).find("--device chooses where to replay"), std::string::npos) << slurp(dev);
}

// A replay's trace carries the allocator's true peaks (otherData.peak_*_bytes), which
// --measured-trace compares: the same figure the replay's own summary reports.
TEST(ValidateCli, AReplayTraceCarriesItsPeakIntoValidate) {
#if !defined(TRAINSIM_HAVE_REPLAY) || !defined(TRAINSIM_HAVE_VALIDATE_TRACE)
  GTEST_SKIP() << "needs the replay verb (LibTorch) and the simulator";
#endif
  std::system(("mkdir -p " + kOut).c_str());
  const std::string profile = std::string(TRAINSIM_SOURCE_DIR) + "/tests/golden/cpu_profile.json";
  const std::string trace = kOut + "/cpu_replay.json", summary = kOut + "/cpu_replay_summary.json";
  ASSERT_EQ(run("replay " + kScenario + " --device cpu --trace " + trace + " --json " + summary,
                kOut + "/cpu_replay.log"),
            0)
      << slurp(kOut + "/cpu_replay.log");
  const auto t = nlohmann::json::parse(slurp(trace));
  const auto s = nlohmann::json::parse(slurp(summary));
  EXPECT_EQ(t["otherData"]["peak_allocated_bytes"], s["measured_peak_allocated_bytes"]);
  const std::string result = kOut + "/cpu_from_trace.json";
  ASSERT_EQ(run("validate " + kScenario + " --calibration " + profile + " --measured-trace " +
                    trace + " --json " + result,
                kOut + "/cpu_from_trace.log"),
            0)
      << slurp(kOut + "/cpu_from_trace.log");
  const auto r = nlohmann::json::parse(slurp(result));
  EXPECT_EQ(r["peak_memory_bytes"]["measured"], s["measured_peak_allocated_bytes"]);
  EXPECT_NEAR(r["iteration_time_s"]["measured"].get<double>(), s["iteration_time_s"].get<double>(),
              1e-9);
}

// calibrate --from-microbench: the shipped H100 profile fitted from what calibrate measured on
// a lent H100; simulate takes the result for the catalog system. The fitted GEMM table runs
// slower than the wave model (every measured big shape ran below the model's rate:
// validation/gemm_shapes.py), so the same run simulates longer.
TEST(CalibrateCli, FromMicrobenchFitsACatalogProfileThatSimulateUses) {
#ifndef TRAINSIM_HAVE_VALIDATE_TRACE
  GTEST_SKIP() << "calibrate's fits are not in this build (no trainsim_validation)";
#endif
  std::system(("mkdir -p " + kOut).c_str());
  const std::string measured = kH100Dir + "/calibrate_cuda.json";
  const std::string base = source_path("calibration/h100-sxm5-80gb.json");
  const std::string fitted = kOut + "/h100_fitted.json";
  ASSERT_EQ(run("calibrate --from-microbench " + measured + " --base " + base + " --out " + fitted,
                kOut + "/fit.log"),
            0)
      << slurp(kOut + "/fit.log");
  EXPECT_NE(slurp(kOut + "/fit.log").find("fitted from " + measured), std::string::npos);
  const trainsim::CalibrationProfile p = trainsim::load_calibration(fitted);
  EXPECT_FALSE(p.gemm_efficiency.empty());
  EXPECT_NE(p.source.find("calibrate_cuda.json"), std::string::npos);

  const std::string h100 = " --set cluster.system=dgx-h100 --format json";
  ASSERT_EQ(run("simulate " + k17b + h100 + " --calibration " + fitted, kOut + "/fit_sim.json"), 0)
      << slurp(kOut + "/fit_sim.json");
  ASSERT_EQ(run("simulate " + k17b + h100, kOut + "/default_sim.json"), 0);
  const auto with_fit = nlohmann::json::parse(slurp(kOut + "/fit_sim.json"));
  const auto with_default = nlohmann::json::parse(slurp(kOut + "/default_sim.json"));
  EXPECT_GT(with_fit["iteration_time_s"].get<double>(),
            with_default["iteration_time_s"].get<double>());

  // A fit needs its base, and measures nothing.
  EXPECT_EQ(run("calibrate --from-microbench " + measured, kOut + "/fit_nobase.log"), 1);
  EXPECT_NE(slurp(kOut + "/fit_nobase.log").find("needs --base"), std::string::npos);
  EXPECT_EQ(run("calibrate --from-microbench " + measured + " --base " + base + " --device cpu",
                kOut + "/fit_device.log"),
            1);
  EXPECT_NE(slurp(kOut + "/fit_device.log").find("--device cpu applies to measuring"),
            std::string::npos)
      << slurp(kOut + "/fit_device.log");
  // --allow-device-mismatch is --from-trace's: refused here, not ignored.
  EXPECT_EQ(run("calibrate --from-microbench " + measured + " --base " + base +
                    " --allow-device-mismatch",
                kOut + "/fit_mismatch.log"),
            1);
  EXPECT_NE(slurp(kOut + "/fit_mismatch.log").find("applies only with --from-trace"),
            std::string::npos);
}
