// Tests of sim/executor on schedule graphs built by hand: every expected time is computed here
// from the catalog (hardware.md numbers), the calibration profile and the cost model's
// formulas, independently of the simulator.
#include "sim/executor.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <string>

#include "models/hardware/calibration.h"
#include "models/perf/flops.h"
#include "tests/support/synthetic_graph.h"

namespace trainsim::sim {
using testing::SyntheticPipeline;
using testing::SyntheticPipelineSpec;
using testing::synthetic_pipeline_graph;
namespace {

struct Env {
  SystemSpec system = find_system("dgx-a100-80gb");
  CalibrationProfile profile = default_calibration(system.gpu.name);
  CostModel cost{system, profile};
  Scenario scenario;
  explicit Env(std::int64_t nodes = 4) {
    scenario.cluster.system = system.name;
    scenario.cluster.nodes = nodes;
    // Hardware-only closed forms: the host timeline is tests/sim/test_host_thread.cpp's.
    scenario.host_model = false;
    scenario.cluster.gpus_per_node = 8;
  }
  // Bandwidths as the platform applies them (nominal x calibration efficiency).
  double nvlink_bw() const { return 300e9 * profile.nvlink_efficiency; }   // 600 GB/s / 2
  double pcie_bw() const { return 32e9 * profile.pcie_efficiency; }        // Gen4 x16
  double nic_bw() const { return 25e9 * profile.network_efficiency; }      // HDR 200 Gb/s
};

OpDesc layer_op(OpKind kind) {
  OpDesc op;
  op.kind = kind;
  op.micro_batch = 1;
  op.seq = 2048;
  op.hidden = 4096;
  op.heads = 8;
  op.head_dim = 128;
  op.ffn = 4096;
  op.tp = 4;
  fill_work(op);
  return op;
}

OpDesc comm_op(OpKind kind, GroupKind group, std::int64_t bytes, std::int64_t size) {
  OpDesc op;
  op.kind = kind;
  op.group = group;
  op.bytes = bytes;
  op.group_size = size;
  return op;
}

Task task(TaskKind kind, RankId rank, StreamId stream, std::uint32_t op) {
  Task t;
  t.kind = kind;
  t.rank = rank;
  t.stream = stream;
  t.op = op;
  return t;
}

/// A pipeline message task: Send (rank -> peer) or Recv (rank <- peer) of message `match`.
Task message(TaskKind kind, RankId rank, std::int32_t peer, std::uint32_t match, std::uint32_t op) {
  Task t = task(kind, rank, StreamId::PpComm, op);
  t.peer = peer;
  t.match = match;
  return t;
}

constexpr double kTol = 1e-12;  // seconds: exact up to floating-point rounding

TEST(Executor, ComputeTasksTakeTheCostModelTime) {
  Env env;
  ScheduleGraph g;
  const OpDesc attn = layer_op(OpKind::AttnFwd), mlp = layer_op(OpKind::MlpFwd);
  const auto a = g.add_op(attn), m = g.add_op(mlp);
  OpDesc cpu_adam;
  cpu_adam.kind = OpKind::OptimizerStepCpu;
  cpu_adam.params = 50'000'000;
  const auto c = g.add_op(cpu_adam);
  const TaskId t0 = g.add_task(task(TaskKind::Compute, 0, StreamId::Compute, a));
  const TaskId t1 = g.add_task(task(TaskKind::Compute, 0, StreamId::Compute, m));
  const TaskId t2 = g.add_task(task(TaskKind::Compute, 0, StreamId::Compute, a));
  // CPU Adam of two ranks of one node: one core each of the node's CPU host, so concurrent,
  // each taking its full cost-model time.
  const TaskId c0 = g.add_task(task(TaskKind::OptimizerCpu, 0, StreamId::Cpu, c));
  const TaskId c1 = g.add_task(task(TaskKind::OptimizerCpu, 1, StreamId::Cpu, c));
  g.add_dependency(t2, c0);
  g.finalize();
  const ExecutionRecord r = simulate(g, env.scenario, env.system, env.cost);
  const double ta = env.cost.compute_time_s(attn), tm = env.cost.compute_time_s(mlp);
  const double tc = env.cost.compute_time_s(cpu_adam);
  ASSERT_GT(ta, 0);
  EXPECT_NEAR(r.start_s[t0], 0, kTol);
  EXPECT_NEAR(r.end_s[t0], ta, kTol);
  EXPECT_NEAR(r.start_s[t1], ta, kTol);
  EXPECT_NEAR(r.end_s[t1], ta + tm, kTol);
  EXPECT_NEAR(r.end_s[t2], 2 * ta + tm, kTol);
  EXPECT_NEAR(r.start_s[c0], 2 * ta + tm, kTol);
  EXPECT_NEAR(r.end_s[c0], 2 * ta + tm + tc, kTol);
  EXPECT_NEAR(r.start_s[c1], 0, kTol);
  EXPECT_NEAR(r.end_s[c1], tc, kTol);
  EXPECT_EQ(r.executor, "simgrid-3.32");
  EXPECT_EQ(r.device, "dgx-a100-80gb");
  EXPECT_FALSE(r.measured);
  EXPECT_EQ(r.activities, 5u);
  EXPECT_NEAR(r.iteration_time_s(), 2 * ta + tm + tc, kTol);
}

TEST(Executor, HostCopiesPayPcieLatencyPlusBandwidth) {
  Env env;
  ScheduleGraph g;
  const std::int64_t S = 512 << 20;
  const auto op = g.add_op(comm_op(OpKind::CopyH2D, GroupKind::None, S, 1));
  const auto op2 = g.add_op(comm_op(OpKind::CopyD2H, GroupKind::None, S, 1));
  const TaskId h0 = g.add_task(task(TaskKind::CopyH2D, 0, StreamId::H2D, op));
  const TaskId d0 = g.add_task(task(TaskKind::CopyD2H, 0, StreamId::D2H, op2));
  // GPUs 2 and 3 share PCIe switch 1: their simultaneous H2D copies split its uplink.
  const TaskId h2 = g.add_task(task(TaskKind::CopyH2D, 2, StreamId::H2D, op));
  const TaskId h3 = g.add_task(task(TaskKind::CopyH2D, 3, StreamId::H2D, op));
  g.finalize();
  const ExecutionRecord r = simulate(g, env.scenario, env.system, env.cost);
  const double lat = env.system.pcie_latency_s;
  EXPECT_NEAR(r.end_s[h0], lat + S / env.pcie_bw(), kTol);
  EXPECT_NEAR(r.end_s[d0], lat + S / env.pcie_bw(), kTol);  // other direction: no sharing
  EXPECT_NEAR(r.end_s[h2], lat + S / (env.pcie_bw() / 2), kTol);
  EXPECT_NEAR(r.end_s[h3], lat + S / (env.pcie_bw() / 2), kTol);
}

TEST(Executor, TwoStagePipelineSendRecv) {
  Env env;
  ScheduleGraph g;
  const OpDesc attn = layer_op(OpKind::AttnFwd);
  const auto a = g.add_op(attn);
  const std::int64_t S = 2048 * 4096 * 2;  // b s h fp16 activations
  const auto p2p = g.add_op(comm_op(OpKind::SendRecv, GroupKind::Pipeline, S, 2));
  // Rank 0 (node 0) -> rank 8 (node 1, same rail) and rank 0 -> rank 1 (NVLink).
  const TaskId c0 = g.add_task(task(TaskKind::Compute, 0, StreamId::Compute, a));
  const TaskId send = g.add_task(message(TaskKind::Send, 0, 8, 7, p2p));
  const TaskId send_nv = g.add_task(message(TaskKind::Send, 0, 1, 8, p2p));
  const TaskId recv = g.add_task(message(TaskKind::Recv, 8, 0, 7, p2p));
  const TaskId c8 = g.add_task(task(TaskKind::Compute, 8, StreamId::Compute, a));
  const TaskId recv_nv = g.add_task(message(TaskKind::Recv, 1, 0, 8, p2p));
  g.add_dependency(c0, send);
  g.add_dependency(send, recv);
  g.add_dependency(recv, c8);
  g.add_dependency(send_nv, recv_nv);
  g.finalize();
  const ExecutionRecord r = simulate(g, env.scenario, env.system, env.cost);
  const double tc = env.cost.compute_time_s(attn);
  const double inter_bw = std::min(env.nic_bw(), env.pcie_bw());
  const double lat_inter = env.cost.collective_latency_s(OpKind::SendRecv, 2, false);
  const double lat_intra = env.cost.collective_latency_s(OpKind::SendRecv, 2, true);
  EXPECT_NEAR(r.start_s[recv], 0, kTol);  // posted at once, waits for the data
  EXPECT_NEAR(r.start_s[send], tc, kTol);
  EXPECT_NEAR(r.end_s[recv], tc + S / inter_bw + lat_inter, kTol);
  EXPECT_NEAR(r.end_s[send], r.end_s[recv], kTol);
  EXPECT_NEAR(r.start_s[c8], r.end_s[recv], kTol);
  EXPECT_NEAR(r.end_s[c8], r.end_s[recv] + tc, kTol);
  // The second send is posted right after the first (non-blocking). Both leave GPU 0 but on
  // different links (PCIe to the NIC vs NVLink port), so neither slows the other.
  EXPECT_NEAR(r.start_s[send_nv], tc, kTol);
  EXPECT_NEAR(r.end_s[recv_nv], tc + S / env.nvlink_bw() + lat_intra, kTol);
}

TEST(Executor, ComputeAfterASendWaitsForItsDelivery) {
  // A task that depends on a send starts when the message is delivered (a CUDA stream waiting
  // on an NCCL send; Megatron waits on its batch_isend_irecv requests), not when it is posted.
  // The receiver posts its receive only after two computes, so the transfer starts then.
  Env env;
  ScheduleGraph g;
  const OpDesc attn = layer_op(OpKind::AttnFwd);
  const auto a = g.add_op(attn);
  const std::int64_t S = 2048 * 4096 * 2;
  const auto p2p = g.add_op(comm_op(OpKind::SendRecv, GroupKind::Pipeline, S, 2));
  const TaskId c0 = g.add_task(task(TaskKind::Compute, 0, StreamId::Compute, a));
  const TaskId send = g.add_task(message(TaskKind::Send, 0, 8, 1, p2p));
  const TaskId c1 = g.add_task(task(TaskKind::Compute, 0, StreamId::Compute, a));
  const TaskId c8a = g.add_task(task(TaskKind::Compute, 8, StreamId::Compute, a));
  const TaskId c8b = g.add_task(task(TaskKind::Compute, 8, StreamId::Compute, a));
  const TaskId recv = g.add_task(message(TaskKind::Recv, 8, 0, 1, p2p));
  g.add_dependency(c0, send);
  g.add_dependency(send, c1);
  g.add_dependency(send, recv);
  g.add_dependency(c8a, c8b);
  g.add_dependency(c8b, recv);
  g.finalize();
  const ExecutionRecord r = simulate(g, env.scenario, env.system, env.cost);
  const double tc = env.cost.compute_time_s(attn);
  const double inter_bw = std::min(env.nic_bw(), env.pcie_bw());
  const double lat = env.cost.collective_latency_s(OpKind::SendRecv, 2, false);
  const double delivered = 2 * tc + S / inter_bw + lat;
  EXPECT_NEAR(r.start_s[send], tc, kTol);
  EXPECT_NEAR(r.start_s[recv], 2 * tc, kTol);
  EXPECT_NEAR(r.end_s[recv], delivered, kTol);
  EXPECT_NEAR(r.end_s[send], delivered, kTol);
  EXPECT_NEAR(r.start_s[c1], delivered, kTol);  // not tc: the send was only posted then
  EXPECT_NEAR(r.end_s[c1], delivered + tc, kTol);
}

// Ring all-reduce of S bytes over `ranks`: the alpha-beta time of nccl-tests' bus bandwidth
// definition (busbw = algbw x 2(n-1)/n) with the cost model's NCCL latency.
double ring_allreduce_time(const Env& env, double S, int n, double bw, bool intra) {
  return 2.0 * (n - 1) / n * S / bw + env.cost.collective_latency_s(OpKind::AllReduce, n, intra);
}

ExecutionRecord run_allreduce(const Env& env, const std::vector<RankId>& ranks, std::int64_t S,
                              GroupKind kind, std::vector<TaskId>& ids) {
  ScheduleGraph g;
  const auto op = g.add_op(comm_op(OpKind::AllReduce, kind, S, std::int64_t(ranks.size())));
  const auto grp = g.add_group(kind, ranks);
  for (RankId r : ranks) {
    Task t = task(TaskKind::Collective, r, kind == GroupKind::Data ? StreamId::DpComm : StreamId::TpComm, op);
    t.group = grp;
    t.match = 42;
    ids.push_back(g.add_task(t));
  }
  g.finalize();
  return simulate(g, env.scenario, env.system, env.cost);
}

TEST(Executor, DataParallelRingAllReduceAcrossNodes) {
  Env env;
  const std::int64_t S = 1LL << 30;
  std::vector<TaskId> ids;
  // GPU 3 of nodes 0..3: one rail, one leaf switch.
  const ExecutionRecord r = run_allreduce(env, {3, 11, 19, 27}, S, GroupKind::Data, ids);
  const double bw = std::min(env.nic_bw(), env.pcie_bw());
  // NCCL's "plateau effect of ring" (tuning.cc ncclTopoGetAlgoTime): a Simple ring all-reduce
  // across nodes with >= 64 bytes per channel and rank pays 1.4x its latency on Ampere.
  const double expected = 2.0 * 3 / 4 * double(S) / bw +
                          1.4 * env.cost.collective_latency_s(OpKind::AllReduce, 4, false);
  for (TaskId id : ids) {
    EXPECT_NEAR(r.start_s[id], 0, kTol);
    EXPECT_NEAR(r.end_s[id], expected, 1e-9);
  }
}

TEST(Executor, MultiRailRingAcrossNodesUsesEveryNic) {
  // All 16 GPUs of two nodes in one DP group (tp = 1): NCCL runs one ring channel per NIC, so
  // each GPU sends (k-1)/k of the ring bytes over NVLink and 1/k over its own NIC (k = 8 GPUs
  // per node); the slower of the two sets the time. For S = 1 GiB that is the
  // ~8 x 24 GB/s per node bus bandwidth of nccl-tests on DGX A100, not one NIC's 24 GB/s.
  Env env(2);
  const std::int64_t S = 1LL << 30;
  std::vector<RankId> ranks;
  for (RankId r = 0; r < 16; ++r) ranks.push_back(r);
  std::vector<TaskId> ids;
  const ExecutionRecord r = run_allreduce(env, ranks, S, GroupKind::Data, ids);
  const double ring = 2.0 * 15 / 16 * double(S);
  const double k = 8;
  const double nic = std::min(env.nic_bw(), env.pcie_bw());
  // NCCL v2.29.7 tuning model, ring/Simple (the pair NCCL picks at 1 GiB): base 8.4 us; the
  // 2 x (2 - 1) inter-node steps at the NET latency 14 us; the other 28 steps at the NVLink
  // latency 3.4 us raised to the AMD host's network overhead 2 us x 3 = 6 us; all of it x 1.4,
  // the ring's "plateau effect" (1 GiB is far above 64 B per channel and rank).
  const double latency = 1.4 * (8.4e-6 + 28 * 6e-6 + 2 * 14e-6);
  const double expected = std::max(ring * (k - 1) / k / env.nvlink_bw(), ring / k / nic) + latency;
  for (TaskId id : ids) EXPECT_NEAR(r.end_s[id], expected, 1e-9);
  // A single ring would push all the ring bytes through one NIC: far slower.
  EXPECT_LT(expected * 4, ring / nic);
}

TEST(Executor, SmallAllReduceRunsAtNcclsLLBandwidthPerRelease) {
  // 1 MiB over the 8 GPUs of one node: NCCL picks ring/LL. Its wire format alone (16-byte
  // lines, half flags) would run at half the NVLink rate; NCCL's model gives LL less, and the
  // simulated flows are held to it: v2.29.7 min(87.7 GB/s, bus / 2), v2.18.5 min(87.7 GB/s,
  // bus / 4) for an all-reduce (tuning.cc). Latency: 6.6 + 14 x 0.6 us in both.
  const std::int64_t S = 1 << 20;
  const double ring = 2.0 * 7 / 8 * double(S);
  const double latency = (6.6 + 14 * 0.6) * 1e-6;
  std::vector<RankId> ranks = {0, 1, 2, 3, 4, 5, 6, 7};
  for (NcclVersion v : {NcclVersion::V2_29_7, NcclVersion::V2_18_5}) {
    Env env;
    env.cost = CostModel(env.system, env.profile, v);
    ASSERT_EQ(env.cost.nccl_collective(OpKind::AllReduce, double(S), 8, 1).proto, NcclProto::LL);
    const double bus = v == NcclVersion::V2_29_7 ? std::min(87.7e9, env.nvlink_bw() / 2)
                                                 : std::min(87.7e9, env.nvlink_bw() / 4);
    std::vector<TaskId> ids;
    const ExecutionRecord r = run_allreduce(env, ranks, S, GroupKind::Tensor, ids);
    for (TaskId id : ids) EXPECT_NEAR(r.end_s[id], latency + ring / bus, 1e-9) << to_string(v);
    // Slower than the wire format on an idle link would allow.
    EXPECT_GT(r.end_s[ids[0]], latency + 2 * ring / env.nvlink_bw() * 1.05);
  }
}

TEST(Executor, TensorParallelAllReduceInsideANode) {
  Env env;
  const std::int64_t S = 64 << 20;
  std::vector<TaskId> ids;
  const ExecutionRecord r = run_allreduce(env, {8, 9, 10, 11, 12, 13, 14, 15}, S, GroupKind::Tensor, ids);
  for (TaskId id : ids)
    EXPECT_NEAR(r.end_s[id], ring_allreduce_time(env, double(S), 8, env.nvlink_bw(), true), kTol);
  // Group of one: no time at all.
  std::vector<TaskId> one;
  const ExecutionRecord r1 = run_allreduce(env, {5}, S, GroupKind::Tensor, one);
  EXPECT_EQ(r1.end_s[one[0]], 0.0);
  EXPECT_EQ(r1.activities, 0u);
}

TEST(Executor, ComputeBesideACollectiveGetsTheSmsNcclDoesNotHold) {
  // A 64 MiB all-reduce over the 8 GPUs of a node runs beside an MLP forward on each rank.
  // NCCL runs it on all 24 of its channels (64 MiB >= 24 x 512 threads x 64 B), one CTA per
  // channel on 24 of the A100's 108 SMs, so while it runs the compute gets 84/108 of the GPU:
  // it ends f x C later than alone, C the collective's time, f = 24/108. The collective is
  // not slowed (its time is the network's).
  Env env;
  ScheduleGraph g;
  const OpDesc mlp = layer_op(OpKind::MlpFwd);
  const auto m = g.add_op(mlp);
  const std::int64_t S = 64 << 20;
  const auto ar = g.add_op(comm_op(OpKind::AllReduce, GroupKind::Tensor, S, 8));
  std::vector<RankId> ranks = {0, 1, 2, 3, 4, 5, 6, 7};
  const auto grp = g.add_group(GroupKind::Tensor, ranks);
  std::vector<TaskId> comp, coll;
  for (RankId r : ranks) {
    comp.push_back(g.add_task(task(TaskKind::Compute, r, StreamId::Compute, m)));
    Task t = task(TaskKind::Collective, r, StreamId::TpComm, ar);
    t.group = grp;
    t.match = 7;
    coll.push_back(g.add_task(t));
  }
  g.finalize();
  const ExecutionRecord r = simulate(g, env.scenario, env.system, env.cost);
  const NcclChoice c = env.cost.nccl_collective(OpKind::AllReduce, double(S), 8, 1);
  ASSERT_EQ(c.channels, 24);
  const double f = 24.0 / 108.0;
  EXPECT_NEAR(env.cost.nccl_sm_share(c), f, 1e-15);
  const double tm = env.cost.compute_time_s(mlp);
  const double C = r.end_s[coll[0]] - r.start_s[coll[0]];
  ASSERT_LT(C, tm);
  EXPECT_NEAR(C, ring_allreduce_time(env, double(S), 8, env.nvlink_bw(), true), 1e-9);
  for (std::size_t i = 0; i < ranks.size(); ++i)
    EXPECT_NEAR(r.end_s[comp[i]], tm + f * C, 1e-9);
}

TEST(Executor, FoldedCollectiveMatchesUnfolded) {
  Env env;
  const std::int64_t S = 1LL << 28;
  std::vector<TaskId> ids;
  // Folded: only rank 3 of the group is simulated; its successor and predecessor are flow
  // end points only.
  ScheduleGraph g;
  const auto op = g.add_op(comm_op(OpKind::AllReduce, GroupKind::Data, S, 4));
  Task t = task(TaskKind::Collective, 3, StreamId::DpComm, op);
  t.group = g.add_group(GroupKind::Data, {3, 11, 19, 27});
  t.match = 1;
  const TaskId id = g.add_task(t);
  g.fold_factor = 4;
  g.finalize();
  const ExecutionRecord folded = simulate(g, env.scenario, env.system, env.cost);
  const ExecutionRecord unfolded = run_allreduce(env, {3, 11, 19, 27}, S, GroupKind::Data, ids);
  EXPECT_NEAR(folded.end_s[id], unfolded.end_s[ids[0]], kTol);
}

TEST(Executor, FoldedPipelineMatchesUnfolded) {
  Env env(2);
  // 4 stages x TP 4: stages 0-1 in node 0, 2-3 in node 1; NVLink and IB pipeline hops, TP
  // all-reduces, GPipe order.
  SyntheticPipelineSpec spec;
  spec.stages = 4;
  spec.tp = 4;
  spec.layers_per_stage = 2;
  spec.tasks_per_rank = 8 * 20;
  spec.hidden = 2048;
  spec.heads = 16;
  spec.seq = 1024;
  spec.fold = false;
  const SyntheticPipeline unfolded = synthetic_pipeline_graph(spec);
  spec.fold = true;
  const SyntheticPipeline folded = synthetic_pipeline_graph(spec);
  ASSERT_EQ(unfolded.microbatches, folded.microbatches);
  EXPECT_EQ(unfolded.graph.simulated_ranks().size(), 16u);
  EXPECT_EQ(folded.graph.simulated_ranks().size(), 4u);
  const ExecutionRecord ru = simulate(unfolded.graph, unfolded.scenario, env.system, env.cost);
  const ExecutionRecord rf = simulate(folded.graph, folded.scenario, env.system, env.cost);
  const double T = ru.iteration_time_s();
  EXPECT_NEAR(rf.iteration_time_s(), T, 0.01 * T);
  // Task by task for the representatives: same tasks in the same program order.
  for (RankId rank : folded.graph.simulated_ranks()) {
    const auto fu = unfolded.graph.tasks_of_rank(rank);
    const auto ff = folded.graph.tasks_of_rank(rank);
    ASSERT_EQ(fu.size(), ff.size());
    for (std::size_t i = 0; i < ff.size(); ++i) {
      ASSERT_EQ(unfolded.graph.label(fu[i]), folded.graph.label(ff[i]));
      EXPECT_NEAR(rf.end_s[ff[i]], ru.end_s[fu[i]], 0.01 * T) << folded.graph.label(ff[i]);
    }
  }
}

TEST(Executor, DeterministicRecords) {
  Env env;
  SyntheticPipelineSpec spec;
  spec.stages = 4;
  spec.tp = 2;
  spec.tasks_per_rank = 400;
  spec.fold = false;
  const SyntheticPipeline p = synthetic_pipeline_graph(spec);
  const ExecutionRecord a = simulate(p.graph, p.scenario, env.system, env.cost);
  const ExecutionRecord b = simulate(p.graph, p.scenario, env.system, env.cost);
  ASSERT_EQ(a.start_s.size(), p.graph.num_tasks());
  EXPECT_EQ(0, std::memcmp(a.start_s.data(), b.start_s.data(), a.start_s.size() * sizeof(double)));
  EXPECT_EQ(0, std::memcmp(a.end_s.data(), b.end_s.data(), a.end_s.size() * sizeof(double)));
  EXPECT_EQ(a.activities, b.activities);
  for (std::size_t i = 0; i < a.end_s.size(); ++i) {
    ASSERT_FALSE(std::isnan(a.end_s[i])) << p.graph.label(TaskId(i));
    ASSERT_LE(a.start_s[i], a.end_s[i]);
  }
}

TEST(Executor, DeadlockNamesBlockedTasks) {
  Env env;
  ScheduleGraph g;
  const auto p2p = g.add_op(comm_op(OpKind::SendRecv, GroupKind::Pipeline, 1000, 2));
  const auto a = g.add_op(layer_op(OpKind::AttnFwd));
  Task rv = task(TaskKind::Recv, 0, StreamId::PpComm, p2p);
  rv.peer = 1;
  rv.match = 3;
  rv.microbatch = 5;
  const TaskId recv = g.add_task(rv);
  const TaskId c = g.add_task(task(TaskKind::Compute, 0, StreamId::Compute, a));
  g.add_dependency(recv, c);
  g.add_task(task(TaskKind::Compute, 1, StreamId::Compute, a));  // rank 1 never sends
  g.finalize();
  try {
    simulate(g, env.scenario, env.system, env.cost);
    FAIL() << "expected a deadlock error";
  } catch (const InvariantError& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("deadlock"), std::string::npos) << msg;
    EXPECT_NE(msg.find(g.label(recv)), std::string::npos) << msg;
    EXPECT_NE(msg.find(g.label(c)), std::string::npos) << msg;
  }
}

TEST(Executor, MessagesOutOfOrderAreAnError) {
  Env env;
  ScheduleGraph g;
  const auto p2p = g.add_op(comm_op(OpKind::SendRecv, GroupKind::Pipeline, 1000, 2));
  const TaskId s1 = g.add_task(message(TaskKind::Send, 0, 1, 1, p2p));
  const TaskId s2 = g.add_task(message(TaskKind::Send, 0, 1, 2, p2p));
  // Receives message 2 first: breaks FIFO matching.
  const TaskId r2 = g.add_task(message(TaskKind::Recv, 1, 0, 2, p2p));
  const TaskId r1 = g.add_task(message(TaskKind::Recv, 1, 0, 1, p2p));
  g.add_dependency(s1, r1);
  g.add_dependency(s2, r2);
  g.finalize();
  try {
    simulate(g, env.scenario, env.system, env.cost);
    FAIL() << "expected a mismatch error";
  } catch (const InvariantError& e) {
    EXPECT_NE(std::string(e.what()).find("mismatch"), std::string::npos) << e.what();
  }
}

TEST(Executor, CrossRankEdgesOtherThanSendRecvAreRejected) {
  Env env;
  ScheduleGraph g;
  const auto a = g.add_op(layer_op(OpKind::AttnFwd));
  const TaskId x = g.add_task(task(TaskKind::Compute, 0, StreamId::Compute, a));
  const TaskId y = g.add_task(task(TaskKind::Compute, 1, StreamId::Compute, a));
  g.add_dependency(x, y);
  g.finalize();
  EXPECT_THROW(simulate(g, env.scenario, env.system, env.cost), std::logic_error);
}

TEST(Executor, RankOutsideTheClusterIsRejected) {
  Env env(1);
  ScheduleGraph g;
  const auto a = g.add_op(layer_op(OpKind::AttnFwd));
  g.add_task(task(TaskKind::Compute, 8, StreamId::Compute, a));
  g.finalize();
  EXPECT_THROW(simulate(g, env.scenario, env.system, env.cost), std::logic_error);
}

TEST(Executor, ProgressAndStats) {
  Env env;
  SyntheticPipelineSpec spec;
  spec.stages = 8;
  spec.tp = 8;
  spec.tasks_per_rank = 200;
  const SyntheticPipeline p = synthetic_pipeline_graph(spec);
  SimStats stats;
  SimOptions opt;
  opt.progress = true;
  opt.stats = &stats;
  Env big(8);
  const ExecutionRecord r = simulate(p.graph, p.scenario, big.system, big.cost, opt);
  EXPECT_EQ(stats.actors, 8u * 3u);  // compute, tp-comm, pp-comm per stage
  EXPECT_GT(stats.child_peak_rss_bytes, 0);
  EXPECT_GT(r.activities, p.graph.num_tasks() / 2);
}

}  // namespace
}  // namespace trainsim::sim
