// `trainsim replay --device cpu --nprocs N` end to end: N processes replay ranks 0..N-1 and
// communicate through the host backend (hw_backend/host_comm.h). Each process's trace has
// exactly its rank's tasks of the schedule graph (the replay paired every task), the
// communication tasks among the launched ranks ran between the processes (their
// replayed_as), and the summary has every process's figures.
#include <gtest/gtest.h>

#include "tests/e2e/cli_helpers.h"

#include <cstdlib>
#include <map>
#include <set>
#include <string>
#include <utility>

#include <nlohmann/json.hpp>

#include "models/run.h"
#include "tests/support/paths.h"

using trainsim::test_support::source_path;
using namespace trainsim;

namespace {

using trainsim_e2e::run;
using trainsim_e2e::slurp;

const std::string kOut = std::string(TRAINSIM_BINARY_DIR) + "/e2e_replay_nprocs_cpu";

struct RankTrace {
  std::set<std::pair<std::uint32_t, std::string>> spans;  // (task id, label)
  std::map<std::uint32_t, std::string> replayed_as;       // per task id
};

RankTrace read_trace(const std::string& path, int pid) {
  const auto trace = nlohmann::json::parse(slurp(path));
  RankTrace out;
  for (const auto& e : trace.at("traceEvents")) {
    if (e.at("ph") != "X" || e.at("pid") != pid) continue;
    const std::string cat = e.value("cat", "");
    if (cat.rfind("host_", 0) == 0 || cat == "wait") continue;
    const auto id = e.at("args").at("task").get<std::uint32_t>();
    out.spans.emplace(id, e.at("name").get<std::string>());
    if (e.at("args").contains("replayed_as"))
      out.replayed_as[id] = e.at("args").at("replayed_as").get<std::string>();
  }
  return out;
}

/// Replays `scenario` with `nprocs` CPU processes and checks every process's trace against
/// the graph: every task of its rank, and each communication task whose group lies among the
/// launched ranks ran between the processes. Returns how many such tasks of each op kind
/// rank 0 ran between the processes.
std::map<OpKind, int> replay_and_check(const std::string& scenario, int nprocs,
                                       const std::string& tag) {
  std::system(("mkdir -p " + kOut).c_str());
  const std::string trace = kOut + "/" + tag + ".json", summary = kOut + "/" + tag + "_summary.json",
                    log = kOut + "/" + tag + ".log";
  const int rc = run("replay " + scenario + " --device cpu --nprocs " + std::to_string(nprocs) +
                         " --trace " + trace + " --json " + summary,
                     log, "TRAINSIM_NCCL_TIMEOUT_S=120");
  EXPECT_EQ(rc, 0) << slurp(log);
  if (rc != 0) return {};

  // The graph the replay runs (apps/replay.cpp): prepared for a replay on the CPU, unfolded.
  RunRequest req;
  req.purpose = RunPurpose::Replay;
  req.scenario_path = scenario;
  req.device = "cpu";
  req.unfolded = true;
  const PreparedRun prepared = prepare_run(req);
  const ScheduleGraph& g = prepared.graph;
  std::map<OpKind, int> between;
  for (int r = 0; r < nprocs; ++r) {
    const std::string path =
        r == 0 ? trace : kOut + "/" + tag + ".rank" + std::to_string(r) + ".json";
    const RankTrace t = read_trace(path, r);
    std::set<std::pair<std::uint32_t, std::string>> expected;
    for (TaskId id : g.tasks_of_rank(RankId(r))) {
      expected.emplace(id, g.label(id));
      const Task& task = g.task(id);
      if (task.kind != TaskKind::Collective && task.kind != TaskKind::Send &&
          task.kind != TaskKind::Recv)
        continue;
      const auto& ranks = g.group(task.group).ranks;
      bool present = ranks.size() > 1;
      for (RankId m : ranks) present = present && m < RankId(nprocs);
      if (!present) continue;
      auto it = t.replayed_as.find(id);
      EXPECT_TRUE(it != t.replayed_as.end() && it->second == "host processes")
          << "rank " << r << " task " << g.label(id) << " ran as "
          << (it == t.replayed_as.end() ? "(nothing)" : it->second);
      if (r == 0) ++between[g.op(id).kind];
    }
    EXPECT_EQ(t.spans, expected) << "rank " << r;
  }
  const auto s = nlohmann::json::parse(slurp(summary));
  EXPECT_EQ(s.at("measured_per_rank").size(), std::size_t(nprocs));
  bool noted = false;
  for (const auto& n : s.at("notes"))
    noted |= n.get<std::string>().find("multi-process CPU replay") != std::string::npos;
  EXPECT_TRUE(noted) << s.at("notes").dump(1);
  return between;
}

}  // namespace

// EP 2 over DP 2: the MoE dispatch / combine all-to-alls and the distributed optimizer's
// reduce-scatter / all-gather buckets run between the two processes.
TEST(ReplayNprocsCpu, MoeAllToAllsAndBucketsBetweenTwoProcesses) {
#ifndef TRAINSIM_HAVE_REPLAY
  GTEST_SKIP() << "the replay verb is not in this build (LibTorch was not found)";
#endif
  const auto between =
      replay_and_check(source_path("scenarios/small/qwen3-moe-tiny_tp1_pp1_ep2_dp2.yaml"), 2, "moe");
  EXPECT_GT(between.count(OpKind::AllToAll) ? between.at(OpKind::AllToAll) : 0, 0);
  EXPECT_GT(between.count(OpKind::ReduceScatter) ? between.at(OpKind::ReduceScatter) : 0, 0);
  EXPECT_GT(between.count(OpKind::AllGather) ? between.at(OpKind::AllGather) : 0, 0);
}

// Two stages x DP 2 in four processes: the pipeline messages (the real activations and
// gradients) and the buckets run between the processes.
TEST(ReplayNprocsCpu, PipelineMessagesAndBucketsBetweenFourProcesses) {
#ifndef TRAINSIM_HAVE_REPLAY
  GTEST_SKIP() << "the replay verb is not in this build (LibTorch was not found)";
#endif
  const auto between =
      replay_and_check(source_path("scenarios/small/llama-tiny_tp1_pp2_dp2_distopt.yaml"), 4, "pp2");
  EXPECT_GT(between.count(OpKind::SendRecv) ? between.at(OpKind::SendRecv) : 0, 0);
  EXPECT_GT(between.count(OpKind::ReduceScatter) ? between.at(OpKind::ReduceScatter) : 0, 0);
}

TEST(ReplayNprocsCpu, MoreProcessesThanRanksExitsOne) {
#ifndef TRAINSIM_HAVE_REPLAY
  GTEST_SKIP() << "the replay verb is not in this build (LibTorch was not found)";
#endif
  std::system(("mkdir -p " + kOut).c_str());
  const std::string log = kOut + "/too_many.log";
  EXPECT_EQ(run("replay " + source_path("scenarios/small/qwen3-moe-tiny_tp1_pp1_ep2_dp2.yaml") +
                    " --device cpu --nprocs 3",
                log),
            1);
  EXPECT_NE(slurp(log).find("--nprocs 3"), std::string::npos) << slurp(log);
}
