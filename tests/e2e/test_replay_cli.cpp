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

#include "models/graph_builder.h"
#include "models/hardware.h"
#include "models/scenario.h"
#include "tests/support/paths.h"

using trainsim::test_support::source_path;

using namespace trainsim;

namespace {

using trainsim_e2e::run;
using trainsim_e2e::slurp;

const std::string kScenario =
    source_path("scenarios/small/gpt-tiny_tp2_pp2_dp2.yaml");
const std::string kOut = std::string(TRAINSIM_BINARY_DIR) + "/e2e_replay_cli";

/// (task id, label) of the complete events of process `pid` in a Chrome trace.
std::set<std::pair<std::uint32_t, std::string>> spans(const std::string& path, int pid) {
  const auto trace = nlohmann::json::parse(slurp(path));
  std::set<std::pair<std::uint32_t, std::string>> out;
  for (const auto& e : trace.at("traceEvents"))
    if (e.at("ph") == "X" && e.at("pid") == pid)
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
  const ScheduleGraph g = build_schedule_graph(sc, find_system(sc.cluster.system), BuildOptions{});
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
