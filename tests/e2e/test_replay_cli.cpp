// `trainsim replay` end to end on the CPU: the measured trace has exactly the simulated
// trace's task ids and labels for the replayed rank, and the summary has a measured iteration
// time and peak memory.
#include <gtest/gtest.h>

#include "tests/e2e/cli_helpers.h"

#include <cstdlib>
#include <fstream>
#include <set>
#include <sstream>
#include <string>
#include <utility>

#include <nlohmann/json.hpp>

#include "models/builder/graph_builder.h"
#include "models/hardware/hardware.h"
#include "models/input/scenario.h"
#include "tests/support/paths.h"

using trainsim::test_support::source_path;

using namespace trainsim;

namespace {

using trainsim_e2e::run;
using trainsim_e2e::slurp;

const std::string kScenario =
    source_path("scenarios/small/gpt-tiny_tp2_pp2_dp2.yaml");
const std::string kOut = std::string(TRAINSIM_BINARY_DIR) + "/e2e_replay_cli";

/// (task id, label) of the complete task events of process `pid` in a Chrome trace (not the
/// replay's host thread, whose issue spans name their task too: docs/trace.md).
std::set<std::pair<std::uint32_t, std::string>> spans(const std::string& path, int pid) {
  const auto trace = nlohmann::json::parse(slurp(path));
  std::set<std::pair<std::uint32_t, std::string>> out;
  for (const auto& e : trace.at("traceEvents"))
    if (e.at("ph") == "X" && e.at("pid") == pid && e.value("cat", "").rfind("host_", 0) != 0 &&
        e.value("cat", "") != "wait")
      out.emplace(e.at("args").at("task").get<std::uint32_t>(), e.at("name").get<std::string>());
  return out;
}

}  // namespace

TEST(ReplayCli, TraceMatchesSimulatedTasksOfTheRank) {
#ifndef TRAINSIM_HAVE_REPLAY
  GTEST_SKIP() << "the replay verb is not in this build (LibTorch was not found)";
#endif
  std::system(("mkdir -p " + kOut).c_str());
  const int rank = 5;
  const std::string trace = kOut + "/replay.json", summary = kOut + "/summary.json";
  ASSERT_EQ(run("replay " + kScenario + " --device cpu --rank " + std::to_string(rank) +
                    " --trace " + trace + " --json " + summary,
                kOut + "/replay.log"),
            0)
      << slurp(kOut + "/replay.log");

  // Independent expectation: the schedule graph's tasks of the rank and their labels.
  const Scenario sc = load_scenario(kScenario);
  const ScheduleGraph g = build_schedule_graph(validated(sc), find_system(sc.cluster.system), BuildOptions{});
  std::set<std::pair<std::uint32_t, std::string>> expected;
  for (TaskId id : g.tasks_of_rank(rank)) expected.emplace(id, g.label(id));
  const auto replayed = spans(trace, rank);
  EXPECT_EQ(replayed, expected);

  // The simulated trace of the same rank, when this build has the simulator.
  const std::string sim_trace = kOut + "/simulated.json";
  const int sim = run("simulate " + kScenario + " --trace " + sim_trace + " --trace-ranks " +
                          std::to_string(rank),
                      kOut + "/simulate.log");
  if (sim == 0)
    EXPECT_EQ(replayed, spans(sim_trace, rank));
  else
    std::cout << "[ note ] simulate not available in this build (exit " << sim
              << "); compared with the schedule graph only\n";

  const auto s = nlohmann::json::parse(slurp(summary));
  EXPECT_TRUE(s.at("measured").get<bool>());
  EXPECT_GT(s.at("iteration_time_s").get<double>(), 0.0);
  EXPECT_GT(s.at("peak_memory_bytes").get<double>(), 0.0);
  EXPECT_EQ(s.at("replayed_rank").get<int>(), rank);
  bool says_replayed = false, says_substituted = false;
  for (const auto& n : s.at("notes")) {
    const std::string note = n.get<std::string>();
    says_replayed |= note.find("replayed rank 5") != std::string::npos;
    says_substituted |= note.find("device-local copies") != std::string::npos;
  }
  EXPECT_TRUE(says_replayed);
  EXPECT_TRUE(says_substituted);
}

TEST(ReplayCli, BadRankAndDeviceExitOne) {
#ifndef TRAINSIM_HAVE_REPLAY
  GTEST_SKIP() << "the replay verb is not in this build (LibTorch was not found)";
#endif
  std::system(("mkdir -p " + kOut).c_str());
  EXPECT_EQ(run("replay " + kScenario + " --device cpu --rank 8", kOut + "/bad_rank.log"), 1);
  EXPECT_NE(slurp(kOut + "/bad_rank.log").find("--rank 8"), std::string::npos);
  EXPECT_EQ(run("replay " + kScenario + " --device tpu", kOut + "/bad_device.log"), 1);
  EXPECT_NE(slurp(kOut + "/bad_device.log").find("tpu"), std::string::npos);
}

// A CPU replay describes the device it ran on (this machine's CPU and memory, no FLOP/s peak:
// MFU null), keeps the model's estimate apart from the allocator's measurement, and says so.
TEST(ReplayCli, TheSummaryDescribesTheCpuItRanOn) {
#ifndef TRAINSIM_HAVE_REPLAY
  GTEST_SKIP() << "the replay verb is not in this build (LibTorch was not found)";
#endif
  std::system(("mkdir -p " + kOut).c_str());
  const std::string json = kOut + "/cpu_summary.json";
  ASSERT_EQ(run("replay " + kScenario + " --device cpu --json " + json, kOut + "/cpu.log"), 0)
      << slurp(kOut + "/cpu.log");
  const auto s = nlohmann::json::parse(slurp(json));
  EXPECT_NE(s.at("gpu").get<std::string>().find("CPU of this machine"), std::string::npos);
  EXPECT_TRUE(s.at("mfu").is_null());
  EXPECT_EQ(s.at("peak_tflops_per_gpu").get<double>(), 0.0);
  EXPECT_NE(s.at("memory_capacity_bytes").get<std::int64_t>(), std::int64_t(80) << 30);
  EXPECT_TRUE(s.contains("modelled_peak_memory_bytes"));
  EXPECT_EQ(s.at("peak_memory_bytes"), s.at("measured_peak_allocated_bytes"));
  const std::string text = slurp(kOut + "/cpu.log");
  EXPECT_NE(text.find("replayed on"), std::string::npos) << text;
  EXPECT_NE(text.find("modelled GPU memory"), std::string::npos) << text;
  EXPECT_NE(text.find("measured peak memory"), std::string::npos) << text;
}

// A rank whose modelled memory cannot fit in this machine is refused before anything is
// allocated, with --force named as the way on. The 1T model without pipeline parallelism: a
// tensor-parallel rank holds 125B parameters, over 2 TB in fp32 with its gradients and Adam
// state, more than any machine these tests run on. (Its 64-stage layout, tens of GiB, fitted
// a GPU machine's 128 GiB and was replayed there.)
TEST(ReplayCli, ARankThatCannotFitIsRefusedCleanly) {
#ifndef TRAINSIM_HAVE_REPLAY
  GTEST_SKIP() << "the replay verb is not in this build (LibTorch was not found)";
#endif
  std::system(("mkdir -p " + kOut).c_str());
  const std::string log = kOut + "/refuse.log";
  EXPECT_EQ(run("replay " + std::string(TRAINSIM_SOURCE_DIR) +
                    "/scenarios/gpt-1t_tp8_pp64_dp6.yaml --device cpu --rank 0"
                    " --set parallel.pipeline_model_parallel_size=1",
                log),
            1);
  const std::string text = slurp(log);
  EXPECT_NE(text.find("of memory are available on this machine"), std::string::npos) << text;
  EXPECT_NE(text.find("--force"), std::string::npos) << text;
}
