// Direct tests of models/graph/schedule_graph.h, the contract between the builder and the two
// executors: op and group de-duplication, the per-task memory-effect ranges, the stream-order
// edges finalize() adds (and the ones it must not add), edge de-duplication, cycle detection,
// the per-rank task lists, and the building/reading phase rules. Every graph here is built by
// hand, so every expected edge and list is written out.
#include "models/graph/schedule_graph.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <set>
#include <stdexcept>
#include <utility>
#include <vector>

namespace trainsim {
namespace {

using Edges = std::set<std::pair<TaskId, TaskId>>;

/// Every edge of the finalized graph, as (from, to).
Edges edges_of(const ScheduleGraph& g) {
  Edges out;
  const DependencyGraph& d = g.dependencies();
  for (TaskId u = 0; u < g.num_tasks(); ++u)
    for (auto [it, end] = boost::out_edges(u, d); it != end; ++it)
      out.insert({u, TaskId(boost::target(*it, d))});
  return out;
}

OpDesc compute_op(std::int64_t hidden = 64) {
  OpDesc op;
  op.kind = OpKind::AttnFwd;
  op.micro_batch = 1;
  op.seq = 16;
  op.hidden = hidden;
  op.heads = 4;
  op.head_dim = 16;
  op.flops = 1000;
  op.bytes_accessed = 200;
  return op;
}

Task task_on(std::uint32_t op, RankId rank, StreamId stream) {
  Task t;
  t.op = op;
  t.rank = rank;
  t.stream = stream;
  return t;
}

// ------------------------------------------------------------------ de-duplication

TEST(ScheduleGraph, EqualOpsShareOneDescriptor) {
  ScheduleGraph g;
  const std::uint32_t a = g.add_op(compute_op());
  const std::uint32_t b = g.add_op(compute_op());
  EXPECT_EQ(a, b);
  EXPECT_EQ(g.ops().size(), 1u);
}

TEST(ScheduleGraph, OpsThatDifferInAnyFieldAreDistinct) {
  // One field changed at a time: each must give a new descriptor (a duration or a byte count
  // silently shared between different ops would be wrong in every trace).
  std::vector<OpDesc> variants;
  auto vary = [&](auto&& change) {
    OpDesc op = compute_op();
    change(op);
    variants.push_back(op);
  };
  vary([](OpDesc&) {});
  vary([](OpDesc& o) { o.kind = OpKind::MlpFwd; });
  vary([](OpDesc& o) { o.precision = Precision::BF16; });
  vary([](OpDesc& o) { o.group = GroupKind::Tensor; });
  vary([](OpDesc& o) { o.micro_batch = 2; });
  vary([](OpDesc& o) { o.seq = 32; });
  vary([](OpDesc& o) { o.hidden = 128; });
  vary([](OpDesc& o) { o.heads = 8; });
  vary([](OpDesc& o) { o.head_dim = 8; });
  vary([](OpDesc& o) { o.ffn = 256; });
  vary([](OpDesc& o) { o.vocab = 512; });
  vary([](OpDesc& o) { o.tp = 2; });
  vary([](OpDesc& o) { o.sequence_parallel = true; });
  vary([](OpDesc& o) { o.recompute_core_attention = true; });
  vary([](OpDesc& o) { o.params = 7; });
  vary([](OpDesc& o) { o.bytes = 7; });
  vary([](OpDesc& o) { o.group_size = 2; });
  vary([](OpDesc& o) { o.flops = 1001; });
  vary([](OpDesc& o) { o.bytes_accessed = 201; });
  ScheduleGraph g;
  std::set<std::uint32_t> ids;
  for (const OpDesc& op : variants) ids.insert(g.add_op(op));
  EXPECT_EQ(ids.size(), variants.size());
  EXPECT_EQ(g.ops().size(), variants.size());
  // Adding them all again adds nothing.
  for (std::size_t i = 0; i < variants.size(); ++i) EXPECT_EQ(g.add_op(variants[i]), i);
  EXPECT_EQ(g.ops().size(), variants.size());
}

TEST(ScheduleGraph, GroupsAreDeduplicatedByKindAndRingOrder) {
  ScheduleGraph g;
  const std::uint32_t tp01 = g.add_group(GroupKind::Tensor, {0, 1});
  EXPECT_EQ(g.add_group(GroupKind::Tensor, {0, 1}), tp01);
  // Same ranks, another communicator kind: another group.
  const std::uint32_t dp01 = g.add_group(GroupKind::Data, {0, 1});
  EXPECT_NE(dp01, tp01);
  // Ring order is part of the group (the executor sends to the ring successor).
  const std::uint32_t tp10 = g.add_group(GroupKind::Tensor, {1, 0});
  EXPECT_NE(tp10, tp01);
  // {1, 23} and {12, 3} must not collide through their text form.
  const std::uint32_t a = g.add_group(GroupKind::Data, {1, 23});
  const std::uint32_t b = g.add_group(GroupKind::Data, {12, 3});
  EXPECT_NE(a, b);
  ASSERT_EQ(g.groups().size(), 5u);
  EXPECT_EQ(g.group(tp10).kind, GroupKind::Tensor);
  EXPECT_EQ(g.group(tp10).ranks, (std::vector<RankId>{1, 0}));
  EXPECT_EQ(g.group(dp01).kind, GroupKind::Data);
}

// ------------------------------------------------------------------ memory effects

TEST(ScheduleGraph, MemoryEffectsBelongToTheirTask) {
  ScheduleGraph g;
  const std::uint32_t op = g.add_op(compute_op());
  const TaskId t0 = g.add_task(task_on(op, 0, StreamId::Compute));
  g.add_memory_effect(t0, {100, MemCategory::Activations, false, false});
  g.add_memory_effect(t0, {-40, MemCategory::Activations, true, false});
  const TaskId t1 = g.add_task(task_on(op, 0, StreamId::Compute));  // no effects
  const TaskId t2 = g.add_task(task_on(op, 0, StreamId::Compute));
  g.add_memory_effect(t2, {8, MemCategory::OffloadBuffers, false, true});
  // Only the last added task may receive effects.
  EXPECT_THROW(g.add_memory_effect(t0, {1, MemCategory::Parameters, false, false}),
               trainsim::InvariantError);
  g.finalize();
  ASSERT_EQ(g.effects_end(t0) - g.effects_begin(t0), 2);
  EXPECT_EQ(g.effects_begin(t0)[0].bytes, 100);
  EXPECT_FALSE(g.effects_begin(t0)[0].at_end);
  EXPECT_EQ(g.effects_begin(t0)[1].bytes, -40);
  EXPECT_TRUE(g.effects_begin(t0)[1].at_end);
  EXPECT_EQ(g.effects_end(t1) - g.effects_begin(t1), 0);
  ASSERT_EQ(g.effects_end(t2) - g.effects_begin(t2), 1);
  EXPECT_EQ(g.effects_begin(t2)->category, MemCategory::OffloadBuffers);
  EXPECT_TRUE(g.effects_begin(t2)->on_host);
}

// ------------------------------------------------------------------ edges

TEST(ScheduleGraph, FinalizeAddsStreamOrderWithinOneRankAndStreamOnly) {
  // rank 0: c0 (compute), x1 (tp-comm), c2 (compute), x3 (tp-comm), c4 (compute)
  // rank 1: c5 (compute), c6 (compute)
  // rank 0 again, after rank 1's tasks: d7 (dp-comm)
  ScheduleGraph g;
  const std::uint32_t op = g.add_op(compute_op());
  const StreamId C = StreamId::Compute, X = StreamId::TpComm, D = StreamId::DpComm;
  for (auto [rank, stream] : std::vector<std::pair<RankId, StreamId>>{
           {0, C}, {0, X}, {0, C}, {0, X}, {0, C}, {1, C}, {1, C}, {0, D}})
    g.add_task(task_on(op, rank, stream));
  g.add_dependency(1, 2);  // data: the collective's result feeds the next compute
  g.finalize();
  // Stream order: 0->2->4 (rank 0 compute), 1->3 (rank 0 tp-comm), 5->6 (rank 1 compute);
  // nothing across ranks (4 and 5 are both compute, on different ranks), nothing into the
  // lone dp-comm task 7.
  EXPECT_EQ(edges_of(g), (Edges{{0, 2}, {2, 4}, {1, 3}, {5, 6}, {1, 2}}));
  EXPECT_EQ(boost::num_edges(g.dependencies()), 5u);
}

TEST(ScheduleGraph, DuplicateEdgesAreStoredOnce) {
  ScheduleGraph g;
  const std::uint32_t op = g.add_op(compute_op());
  g.add_task(task_on(op, 0, StreamId::Compute));
  g.add_task(task_on(op, 0, StreamId::Compute));
  g.add_task(task_on(op, 0, StreamId::Cpu));
  g.add_dependency(0, 1);  // the same edge stream order adds
  g.add_dependency(0, 2);
  g.add_dependency(0, 2);  // twice
  g.finalize();
  EXPECT_EQ(edges_of(g), (Edges{{0, 1}, {0, 2}}));
  EXPECT_EQ(boost::num_edges(g.dependencies()), 2u);
  // In-edges are available too (bidirectional graph): task 2 waits for task 0 only.
  EXPECT_EQ(boost::in_degree(TaskId{2}, g.dependencies()), 1u);
}

TEST(ScheduleGraph, CycleThroughStreamOrderIsDetected) {
  // Program order on one stream says 0 before 1; a dependency 1 -> 0 contradicts it.
  ScheduleGraph g;
  const std::uint32_t op = g.add_op(compute_op());
  g.add_task(task_on(op, 0, StreamId::Compute));
  g.add_task(task_on(op, 0, StreamId::Compute));
  g.add_dependency(1, 0);
  try {
    g.finalize();
    FAIL() << "finalize accepted a cycle";
  } catch (const trainsim::InvariantError& e) {
    EXPECT_NE(std::string(e.what()).find("cycle"), std::string::npos) << e.what();
  }
}

TEST(ScheduleGraph, CycleAcrossRanksIsDetected) {
  // Two ranks each receive before they send to the other (a deadlock), three tasks long.
  ScheduleGraph g;
  const std::uint32_t op = g.add_op(compute_op());
  g.add_task(task_on(op, 0, StreamId::PpComm));  // 0: rank 0 recv
  g.add_task(task_on(op, 0, StreamId::Compute));  // 1: rank 0 compute
  g.add_task(task_on(op, 1, StreamId::PpComm));  // 2: rank 1 recv
  g.add_dependency(0, 1);
  g.add_dependency(1, 2);
  g.add_dependency(2, 0);
  EXPECT_THROW(g.finalize(), trainsim::InvariantError);
}

TEST(ScheduleGraph, AcyclicCrossRankGraphIsAccepted) {
  ScheduleGraph g;
  const std::uint32_t op = g.add_op(compute_op());
  g.add_task(task_on(op, 0, StreamId::PpComm));
  g.add_task(task_on(op, 1, StreamId::PpComm));
  g.add_dependency(0, 1);
  EXPECT_NO_THROW(g.finalize());
  EXPECT_EQ(edges_of(g), (Edges{{0, 1}}));
}

// ------------------------------------------------------------------ ranks and phases

TEST(ScheduleGraph, RanksAndTheirTasksInProgramOrder) {
  ScheduleGraph g;
  const std::uint32_t op = g.add_op(compute_op());
  // Ranks added out of order and interleaved: 5, 2, 5, 9, 2.
  for (RankId r : {5u, 2u, 5u, 9u, 2u}) g.add_task(task_on(op, r, StreamId::Compute));
  g.initial_gpu_memory.assign(1, MemVector{});  // wrong size: finalize fixes it
  g.finalize();
  EXPECT_EQ(g.simulated_ranks(), (std::vector<RankId>{2, 5, 9}));
  EXPECT_EQ(g.tasks_of_rank(2), (std::vector<TaskId>{1, 4}));
  EXPECT_EQ(g.tasks_of_rank(5), (std::vector<TaskId>{0, 2}));
  EXPECT_EQ(g.tasks_of_rank(9), (std::vector<TaskId>{3}));
  EXPECT_TRUE(g.tasks_of_rank(3).empty());
  EXPECT_EQ(g.rank_index(2), 0u);
  EXPECT_EQ(g.rank_index(9), 2u);
  EXPECT_EQ(g.rank_index(3), kNone);
  EXPECT_EQ(g.rank_index(100), kNone);
  EXPECT_EQ(g.initial_gpu_memory.size(), 3u);
  EXPECT_EQ(g.initial_host_memory.size(), 3u);
  // Stream order follows each rank's own program order: 5: 0->2, 2: 1->4.
  EXPECT_EQ(edges_of(g), (Edges{{0, 2}, {1, 4}}));
}

TEST(ScheduleGraph, EmptyGraphFinalizes) {
  ScheduleGraph g;
  EXPECT_NO_THROW(g.finalize());
  EXPECT_EQ(g.num_tasks(), 0u);
  EXPECT_TRUE(g.simulated_ranks().empty());
  EXPECT_EQ(boost::num_vertices(g.dependencies()), 0u);
}

TEST(ScheduleGraph, BuildingRulesAreEnforced) {
  ScheduleGraph g;
  const std::uint32_t op = g.add_op(compute_op());
  Task bad = task_on(op + 1, 0, StreamId::Compute);
  EXPECT_THROW(g.add_task(bad), trainsim::InvariantError);  // op index out of range
  const TaskId t = g.add_task(task_on(op, 0, StreamId::Compute));
  EXPECT_THROW(g.add_dependency(t, t), trainsim::InvariantError);      // self edge
  EXPECT_THROW(g.add_dependency(t, t + 1), trainsim::InvariantError);  // unknown task
  EXPECT_THROW(g.add_dependency(t + 1, t), trainsim::InvariantError);
  g.finalize();
  EXPECT_THROW(g.finalize(), trainsim::InvariantError);
  EXPECT_THROW(g.add_op(compute_op(128)), trainsim::InvariantError);
  EXPECT_THROW(g.add_group(GroupKind::Data, {0}), trainsim::InvariantError);
  EXPECT_THROW(g.add_task(task_on(op, 0, StreamId::Compute)), trainsim::InvariantError);
}

// ------------------------------------------------------------------ folding

TEST(ScheduleGraph, RepresentativesOfAFoldedGraph) {
  // TP 2 x DP 2 x PP 2 = 8 ranks (Megatron layout: rank = stage * 4 + dp * 2 + tp), folded:
  // one task on each stage's representative, rank 0 (stage 0) and rank 4 (stage 1).
  ScheduleGraph g;
  const std::uint32_t op = g.add_op(compute_op());
  g.add_task(task_on(op, 0, StreamId::Compute));
  g.add_task(task_on(op, 4, StreamId::Compute));
  g.world_size = 8;
  g.fold_factor = 4;
  g.layout = ParallelLayout{2, 2, 2};
  g.finalize();
  const RankId expected[8] = {0, 0, 0, 0, 4, 4, 4, 4};
  for (std::int64_t r = 0; r < 8; ++r) EXPECT_EQ(g.representative_of(r), expected[r]) << r;
  EXPECT_THROW(g.representative_of(8), InputError);
  EXPECT_THROW(g.representative_of(-1), InputError);
}

TEST(ScheduleGraph, UnfoldedRanksRepresentThemselvesAndMissingOnesAreABug) {
  ScheduleGraph g;
  const std::uint32_t op = g.add_op(compute_op());
  g.add_task(task_on(op, 0, StreamId::Compute));
  g.add_task(task_on(op, 1, StreamId::Compute));
  g.world_size = 3;  // rank 2 has no tasks
  g.layout = ParallelLayout{1, 3, 1};
  g.finalize();
  EXPECT_EQ(g.representative_of(0), 0u);
  EXPECT_EQ(g.representative_of(1), 1u);
  EXPECT_THROW(g.representative_of(2), trainsim::InvariantError);  // a builder/fold mismatch
}

// ------------------------------------------------------------------ labels

TEST(ScheduleGraph, LabelsSayKindPhaseAndPlace) {
  ScheduleGraph g;
  const std::uint32_t fwd = g.add_op(compute_op());
  OpDesc ar;
  ar.kind = OpKind::AllReduce;
  ar.group = GroupKind::Tensor;
  ar.bytes = 1024;
  ar.group_size = 2;
  const std::uint32_t allreduce = g.add_op(ar);
  OpDesc msg;
  msg.kind = OpKind::SendRecv;
  msg.group = GroupKind::Pipeline;
  msg.bytes = 1024;
  const std::uint32_t sendrecv = g.add_op(msg);

  Task c = task_on(fwd, 0, StreamId::Compute);
  c.microbatch = 3;
  c.layer = 12;
  c.part = Part::Attn;
  const TaskId tc = g.add_task(c);

  Task x = task_on(allreduce, 0, StreamId::TpComm);
  x.kind = TaskKind::Collective;
  x.microbatch = 3;
  x.layer = 12;
  x.part = Part::Attn;
  const TaskId tx = g.add_task(x);

  Task s = task_on(sendrecv, 0, StreamId::PpComm);
  s.kind = TaskKind::Send;
  s.microbatch = 3;
  s.peer = 8;
  const TaskId ts = g.add_task(s);

  Task r = task_on(sendrecv, 0, StreamId::PpComm);
  r.kind = TaskKind::Recv;
  r.phase = Phase::Backward;
  r.microbatch = 4;
  r.chunk = 1;
  r.peer = 8;
  const TaskId tr = g.add_task(r);

  Task opt = task_on(fwd, 0, StreamId::Cpu);
  opt.kind = TaskKind::OptimizerCpu;
  opt.phase = Phase::Optimizer;
  opt.bucket = 2;
  const TaskId to = g.add_task(opt);

  g.finalize();
  EXPECT_EQ(g.label(tc), "fwd mb3 layer12 attn");
  EXPECT_EQ(g.label(tx), "all_reduce tensor fwd mb3 layer12 attn");
  EXPECT_EQ(g.label(ts), "send fwd mb3 -> rank 8");
  EXPECT_EQ(g.label(tr), "recv bwd mb4 chunk1 <- rank 8");
  EXPECT_EQ(g.label(to), "adam cpu bucket2");
}

}  // namespace
}  // namespace trainsim
