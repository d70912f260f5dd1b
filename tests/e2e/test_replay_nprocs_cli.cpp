// `trainsim replay --nprocs` end to end (hw_backend/launch.h, comm_plan.h): the trace says how
// each communication task ran (args.replayed_as, otherData.notes); bad combinations exit 1
// with the reason; and, where this build and machine can (a CUDA LibTorch, NCCL, 2 GPUs), a
// real two-process NCCL replay of a tp2 scenario, whose rank 0 writes the summary with both
// ranks' figures and a trace whose tensor-parallel collectives ran through NCCL. Elsewhere that
// case skips with the CLI's own reason.
#include <gtest/gtest.h>

#include "tests/e2e/cli_helpers.h"

#include <cstdlib>
#include <fstream>
#include <map>
#include <sstream>
#include <string>

#include <nlohmann/json.hpp>
#include "tests/support/paths.h"

using trainsim::test_support::source_path;

namespace {

using trainsim_e2e::run;
using trainsim_e2e::slurp;

const std::string kScenario =
    source_path("scenarios/small/gpt-tiny_tp2_pp2_dp2.yaml");
const std::string kOut = std::string(TRAINSIM_BINARY_DIR) + "/e2e_replay_nprocs_cli";

/// How the complete events of `pid` ran: count per args.replayed_as ("" for the task's own
/// work), only for events of `kind` ("collective", "send", ...) when given.
std::map<std::string, int> replayed_as(const nlohmann::json& trace, int pid, const std::string& cat = "") {
  std::map<std::string, int> out;
  for (const auto& e : trace.at("traceEvents"))
    if (e.at("ph") == "X" && e.at("pid") == pid && (cat.empty() || e.value("cat", "") == cat))
      ++out[e.at("args").value("replayed_as", "")];
  return out;
}

}  // namespace

TEST(ReplayNprocsCli, SingleProcessTraceMarksCopiedCommunication) {
#ifndef TRAINSIM_HAVE_REPLAY
  GTEST_SKIP() << "the replay verb is not in this build (LibTorch was not found)";
#endif
  std::system(("mkdir -p " + kOut).c_str());
  const std::string trace = kOut + "/single.json", log = kOut + "/single.log";
  ASSERT_EQ(run("replay " + kScenario + " --device cpu --trace " + trace, log), 0) << slurp(log);
  const auto j = nlohmann::json::parse(slurp(trace));
  // Rank 0 of tp2 x pp2 x dp2 alone: every collective and message has absent peers.
  const auto coll = replayed_as(j, 0, "collective");
  EXPECT_GT(coll.count("device-local copy") ? coll.at("device-local copy") : 0, 0);
  EXPECT_EQ(coll.count("nccl"), 0u);
  EXPECT_EQ(coll.count(""), 0u) << "a collective without a replayed_as mark";
  const auto compute = replayed_as(j, 0, "compute");
  EXPECT_EQ(compute.size(), 1u);
  EXPECT_EQ(compute.count(""), 1u) << "compute tasks ran their own work";
  bool note = false;
  for (const auto& n : j.at("otherData").at("notes"))
    note |= n.get<std::string>().find("device-local copies") != std::string::npos;
  EXPECT_TRUE(note) << j.at("otherData").dump();
}

TEST(ReplayNprocsCli, BadCombinationsExitOneWithTheReason) {
#ifndef TRAINSIM_HAVE_REPLAY
  GTEST_SKIP() << "the replay verb is not in this build (LibTorch was not found)";
#endif
  std::system(("mkdir -p " + kOut).c_str());
  const std::string log = kOut + "/bad.log";
  // --device cpu --nprocs N runs N CPU processes through the host backend
  // (tests/e2e/test_replay_nprocs_cpu.cpp); more processes than ranks is still refused.
  EXPECT_EQ(run("replay " + kScenario + " --nprocs 9", log), 1);
  EXPECT_NE(slurp(log).find("--nprocs 9"), std::string::npos) << slurp(log);
  EXPECT_EQ(run("replay " + kScenario + " --nprocs 4", log, "env RANK=0 WORLD_SIZE=2"), 1);
  EXPECT_NE(slurp(log).find("WORLD_SIZE=2"), std::string::npos) << slurp(log);
  EXPECT_EQ(run("replay " + kScenario, log, "env RANK=2 WORLD_SIZE=2"), 1);
  EXPECT_NE(slurp(log).find("RANK=2"), std::string::npos) << slurp(log);
}

TEST(ReplayNprocsCli, TwoProcessesThroughNcclWhereTwoGpusExist) {
#ifndef TRAINSIM_HAVE_REPLAY
  GTEST_SKIP() << "the replay verb is not in this build (LibTorch was not found)";
#endif
  std::system(("mkdir -p " + kOut).c_str());
  const std::string trace = kOut + "/two.json", summary = kOut + "/two-summary.json",
                    log = kOut + "/two.log";
  const int rc = run("replay " + kScenario + " --device cuda --nprocs 2 --trace " + trace +
                         " --json " + summary,
                     log, "env TRAINSIM_NCCL_TIMEOUT_S=120");
  const std::string out = slurp(log);
  if (rc != 0) {
    // Only the documented reasons a machine cannot run it: no CUDA LibTorch, no NCCL, fewer
    // than two GPUs.
    const bool known = out.find("built without CUDA") != std::string::npos ||
                       out.find("no CUDA device") != std::string::npos ||
                       out.find("CUDA device(s) visible") != std::string::npos ||
                       out.find("has no NCCL") != std::string::npos ||
                       out.find("NCCL library cannot be loaded") != std::string::npos;
    ASSERT_TRUE(known) << "exit " << rc << ": " << out;
    GTEST_SKIP() << out;
  }
  const auto s = nlohmann::json::parse(slurp(summary));
  EXPECT_EQ(s.at("processes"), 2);
  ASSERT_EQ(s.at("measured_per_rank").size(), 2u);
  for (int r = 0; r < 2; ++r) {
    EXPECT_EQ(s["measured_per_rank"][r].at("rank"), r);
    EXPECT_GT(s["measured_per_rank"][r].at("iteration_time_s").get<double>(), 0.0);
    EXPECT_GT(s["measured_per_rank"][r].at("peak_allocated_bytes").get<std::int64_t>(), 0);
  }
  // Rank 0's trace: its tensor-parallel collectives (group [0, 1], both present) ran through
  // NCCL; data-parallel, embedding and pipeline communication (peers 2..7 absent) are copies.
  const auto j = nlohmann::json::parse(slurp(trace));
  const auto coll = replayed_as(j, 0, "collective");
  EXPECT_GT(coll.count("nccl") ? coll.at("nccl") : 0, 0) << j.at("otherData").dump();
  EXPECT_GT(coll.count("device-local copy") ? coll.at("device-local copy") : 0, 0);
  // Rank 1 wrote its own trace next to rank 0's.
  const auto j1 = nlohmann::json::parse(slurp(kOut + "/two.rank1.json"));
  const auto coll1 = replayed_as(j1, 1, "collective");
  EXPECT_EQ(coll1.count("nccl") ? coll1.at("nccl") : 0, coll.at("nccl"));
}
