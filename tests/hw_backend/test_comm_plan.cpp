// The communicator plan of multi-process replays (hw_backend/comm_plan.h): which groups of a
// real scenario get an NCCL communicator for 1, 2, 4 and 8 processes (expected groups written
// here from Megatron's rank order), and the order checks that keep NCCL from hanging, on
// hand-built graphs. No GPU needed.
#include <gtest/gtest.h>

#include <algorithm>
#include <set>
#include <string>
#include <vector>

#include "hw_backend/comm_plan.h"
#include "models/builder/graph_builder.h"
#include "models/hardware/hardware.h"
#include "models/input/scenario.h"

using namespace trainsim;

namespace {

const std::string kTp2Pp2Dp2 =
    std::string(TRAINSIM_SOURCE_DIR) + "/scenarios/small/gpt-tiny_tp2_pp2_dp2.yaml";

ScheduleGraph build(const Scenario& sc) {
  BuildOptions o;
  o.fold = false;
  return build_schedule_graph(validated(sc), find_system(sc.cluster.system), o);
}

/// Megatron-LM's default rank order (tensor fastest, then data, then pipeline), written out
/// here: rank = pp * (dp_size * tp_size) + dp * tp_size + tp, for tp2 x dp2 x pp2.
int megatron_rank(int tp, int dp, int pp) { return pp * 4 + dp * 2 + tp; }

/// The member lists a tp2 x pp2 x dp2 job has, all ranks present: TP pairs, DP pairs, the
/// embedding pairs (first and last stage, tied embeddings), both directions of every
/// pipeline channel, and each replica's model-parallel group (TP x PP: the optimizer's
/// found-inf and gradient-norm all-reduces).
std::set<std::vector<int>> all_groups_tp2_pp2_dp2() {
  std::set<std::vector<int>> out;
  for (int pp = 0; pp < 2; ++pp)
    for (int dp = 0; dp < 2; ++dp) out.insert({megatron_rank(0, dp, pp), megatron_rank(1, dp, pp)});
  for (int pp = 0; pp < 2; ++pp)
    for (int tp = 0; tp < 2; ++tp) out.insert({megatron_rank(tp, 0, pp), megatron_rank(tp, 1, pp)});
  for (int dp = 0; dp < 2; ++dp)
    for (int tp = 0; tp < 2; ++tp) {
      const int first = megatron_rank(tp, dp, 0), last = megatron_rank(tp, dp, 1);
      out.insert({first, last});  // embedding all-reduce and forward channel share members
      out.insert({last, first});  // backward channel
    }
  for (int dp = 0; dp < 2; ++dp)
    out.insert({megatron_rank(0, dp, 0), megatron_rank(1, dp, 0), megatron_rank(0, dp, 1),
                megatron_rank(1, dp, 1)});
  return out;
}

std::multiset<std::vector<int>> planned(const ScheduleGraph& g, const hw::CommPlan& p) {
  const auto m = p.members(g);
  return {m.begin(), m.end()};
}

TEST(CommPlan, Tp2Pp2Dp2OnEightProcessesGetsEveryGroup) {
  const Scenario sc = load_scenario(kTp2Pp2Dp2);
  const ScheduleGraph g = build(sc);
  const hw::CommPlan p = hw::plan_communicators(g, 8);
  // 4 TP + 4 DP + 4 embedding + 8 channels + 2 model-parallel; the embedding group {first,
  // last} and the forward channel [first, last] have the same members but are distinct groups
  // (kinds differ).
  EXPECT_EQ(p.groups.size(), 22u);
  std::set<std::vector<int>> distinct;
  for (const auto& m : p.members(g)) distinct.insert(m);
  EXPECT_EQ(distinct, all_groups_tp2_pp2_dp2());
  EXPECT_TRUE(std::is_sorted(p.groups.begin(), p.groups.end()));
  // Every communication task of every rank runs through NCCL.
  for (RankId r = 0; r < 8; ++r)
    for (TaskId id : g.tasks_of_rank(r)) {
      const Task& t = g.task(id);
      const bool comm = t.kind == TaskKind::Collective || t.kind == TaskKind::Send || t.kind == TaskKind::Recv;
      if (comm) EXPECT_TRUE(p.uses_nccl(g, id)) << g.label(id);
      if (!comm) EXPECT_FALSE(p.uses_nccl(g, id)) << g.label(id);
    }
}

TEST(CommPlan, TwoProcessesShareOnlyTheirTensorGroup) {
  const Scenario sc = load_scenario(kTp2Pp2Dp2);
  const ScheduleGraph g = build(sc);
  const hw::CommPlan p = hw::plan_communicators(g, 2);
  // Ranks 0 and 1 are the two tensor ranks of (dp 0, stage 0); their DP partners (2, 3), the
  // last stage (4..7) are absent.
  EXPECT_EQ(planned(g, p), (std::multiset<std::vector<int>>{{0, 1}}));
  int nccl = 0, copies = 0;
  for (TaskId id : g.tasks_of_rank(0)) {
    const Task& t = g.task(id);
    if (t.kind != TaskKind::Collective && t.kind != TaskKind::Send && t.kind != TaskKind::Recv) continue;
    const CommGroup& grp = g.group(t.group);
    const bool all_present = std::all_of(grp.ranks.begin(), grp.ranks.end(), [](RankId r) { return r < 2; });
    EXPECT_EQ(p.uses_nccl(g, id), all_present && grp.ranks.size() > 1) << g.label(id);
    (p.uses_nccl(g, id) ? nccl : copies)++;
  }
  EXPECT_GT(nccl, 0);    // the tensor-parallel all-reduces
  EXPECT_GT(copies, 0);  // data-parallel, embedding, pipeline
  EXPECT_EQ(hw::CommPlan::rank_in_group(g, p.groups[0], 1), 1);
  EXPECT_EQ(hw::CommPlan::rank_in_group(g, p.groups[0], 5), -1);
}

TEST(CommPlan, FourProcessesHoldTheFirstStage) {
  const Scenario sc = load_scenario(kTp2Pp2Dp2);
  const ScheduleGraph g = build(sc);
  const hw::CommPlan p = hw::plan_communicators(g, 4);
  EXPECT_EQ(planned(g, p), (std::multiset<std::vector<int>>{{0, 1}, {2, 3}, {0, 2}, {1, 3}}));
  EXPECT_TRUE(hw::plan_communicators(g, 1).groups.empty());
}

TEST(CommPlan, RejectsMoreProcessesThanRanksAndFoldedGraphs) {
  const Scenario sc = load_scenario(kTp2Pp2Dp2);
  const ScheduleGraph g = build(sc);
  EXPECT_THROW(hw::plan_communicators(g, 9), InputError);
  EXPECT_THROW(hw::plan_communicators(g, 0), InputError);
  BuildOptions folded;
  folded.fold = true;
  const ScheduleGraph f = build_schedule_graph(validated(sc), find_system(sc.cluster.system), folded);
  if (f.fold_factor > 1) EXPECT_THROW(hw::plan_communicators(f, 2), InputError);
}

// ---- hand-built graphs: two ranks, one group, orders that NCCL could not complete
struct TwoRanks {
  ScheduleGraph g;
  std::uint32_t coll_op = 0, p2p_op = 0, group = 0, chan01 = 0;
  TwoRanks() {
    g.world_size = 2;
    OpDesc ar;
    ar.kind = OpKind::AllReduce;
    ar.group = GroupKind::Tensor;
    ar.bytes = 1024;
    ar.group_size = 2;
    coll_op = g.add_op(ar);
    OpDesc p2p;
    p2p.kind = OpKind::SendRecv;
    p2p.group = GroupKind::Pipeline;
    p2p.bytes = 1024;
    p2p.group_size = 2;
    p2p_op = g.add_op(p2p);
    group = g.add_group(GroupKind::Tensor, {0, 1});
    chan01 = g.add_group(GroupKind::Pipeline, {0, 1});
  }
  void collective(RankId rank, std::uint32_t match) {
    Task t;
    t.op = coll_op, t.rank = rank, t.kind = TaskKind::Collective, t.stream = StreamId::TpComm;
    t.group = group, t.match = match;
    g.add_task(t);
  }
  void message(RankId rank, bool send, std::uint32_t match) {
    Task t;
    t.op = p2p_op, t.rank = rank, t.kind = send ? TaskKind::Send : TaskKind::Recv;
    t.stream = StreamId::PpComm, t.group = chan01, t.match = match, t.peer = send ? 1 : 0;
    t.part = Part::Pipeline;
    g.add_task(t);
  }
};

TEST(CommPlan, SameOrderOnBothRanksIsAccepted) {
  TwoRanks s;
  s.collective(0, 10), s.collective(0, 11), s.message(0, true, 20), s.message(0, true, 21);
  s.collective(1, 10), s.collective(1, 11), s.message(1, false, 20), s.message(1, false, 21);
  s.g.finalize();
  const hw::CommPlan p = hw::plan_communicators(s.g, 2);
  EXPECT_EQ(planned(s.g, p), (std::multiset<std::vector<int>>{{0, 1}, {0, 1}}));
}

TEST(CommPlan, CollectivesInDifferentOrdersAreRejected) {
  TwoRanks s;
  s.collective(0, 10), s.collective(0, 11);
  s.collective(1, 11), s.collective(1, 10);
  s.g.finalize();
  try {
    hw::plan_communicators(s.g, 2);
    FAIL() << "accepted collectives issued in different orders";
  } catch (const trainsim::InvariantError& e) {
    EXPECT_NE(std::string(e.what()).find("different orders"), std::string::npos) << e.what();
  }
  // With one process the group is absent (copies): no communicator, nothing to check.
  EXPECT_TRUE(hw::plan_communicators(s.g, 1).groups.empty());
}

TEST(CommPlan, MessagesReceivedInAnotherOrderAreRejected) {
  TwoRanks s;
  s.message(0, true, 20), s.message(0, true, 21);
  s.message(1, false, 21), s.message(1, false, 20);
  s.g.finalize();
  EXPECT_THROW(hw::plan_communicators(s.g, 2), trainsim::InvariantError);
}

TEST(CommPlan, AMissingCollectiveIsRejected) {
  TwoRanks s;
  s.collective(0, 10), s.collective(0, 11);
  s.collective(1, 10);
  s.g.finalize();
  EXPECT_THROW(hw::plan_communicators(s.g, 2), trainsim::InvariantError);
}

}  // namespace
