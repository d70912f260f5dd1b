// The host transport of a multi-process CPU replay in the simulator (CostModel::host_transport,
// models/hardware/local_device.h): on the `local` system of two one-device nodes with a profile
// that has local_device.host_comm_latency_s and host_comm_bw_bytes_per_s, one collective or
// pipeline message between the two ranks takes the measured latency plus the bytes a member
// writes and reads (hw_backend/host_comm.cpp: n S for an all-reduce or all-to-all of S over n
// members, S for an all-gather, 2 S for a message) at the measured rate. Every expected time is
// that hand formula with the figures set here; a profile without them keeps the old pricing.
#include "sim/executor.h"

#include <gtest/gtest.h>

#include "models/hardware/calibration.h"
#include "models/hardware/local_device.h"

namespace trainsim::sim {
namespace {

constexpr double kLatency_s = 2.5e-3;   // the profile's host_comm_latency_s (set here)
constexpr double kBw_bytes_per_s = 2e9;  // the profile's host_comm_bw_bytes_per_s (set here)
constexpr double kTol = 1e-12;

CalibrationProfile cpu_profile(bool host_comm) {
  CalibrationProfile p = default_calibration("A100-SXM4-80GB");  // every required parameter
  p.device = "cpu: test (2 cores, LibTorch fp32)";
  p.precision = "fp32";
  p.nvlink_efficiency = p.network_efficiency = p.pcie_efficiency = 1.0;
  p.local_device.peak_flops = 2e10;
  p.local_device.memory_bw_bytes_per_s = 1e10;
  p.local_device.memory_bytes = 8e9;
  p.local_device.copy_bw_bytes_per_s = 1.5e10;  // above the host rate: not the bottleneck
  p.local_device.cores = 2;
  p.local_device.threads = 1;
  if (host_comm) {
    p.local_device.host_comm_latency_s = kLatency_s;
    p.local_device.host_comm_bw_bytes_per_s = kBw_bytes_per_s;
  }
  return p;
}

struct Env {
  CalibrationProfile profile;
  SystemSpec system;
  CostModel cost;
  Scenario scenario;
  explicit Env(bool host_comm)
      : profile(cpu_profile(host_comm)), system(local_system(profile, "p.json", 2)),
        cost(system, profile) {
    scenario.cluster.system = "local";
    scenario.cluster.nodes = 2;
    scenario.cluster.gpus_per_node = 1;
    scenario.host_model = false;
  }
};

/// The end of one collective of `kind` and `bytes` between ranks 0 and 1 (both ranks' tasks).
double collective_end_s(const Env& env, OpKind kind, std::int64_t bytes) {
  ScheduleGraph g;
  OpDesc op;
  op.kind = kind;
  op.group = GroupKind::Data;
  op.bytes = bytes;
  op.group_size = 2;
  const auto id = g.add_op(op);
  const auto grp = g.add_group(GroupKind::Data, {0, 1});
  std::vector<TaskId> ids;
  for (RankId r : {0u, 1u}) {
    Task t;
    t.kind = TaskKind::Collective;
    t.rank = r;
    t.stream = StreamId::DpComm;
    t.op = id;
    t.group = grp;
    t.match = 1;
    ids.push_back(g.add_task(t));
  }
  g.finalize();
  const ExecutionRecord rec = simulate(g, env.scenario, env.system, env.cost);
  EXPECT_NEAR(rec.end_s[ids[0]], rec.end_s[ids[1]], kTol);
  return rec.end_s[ids[0]];
}

TEST(HostTransport, OneCollectiveBetweenTwoLocalRanksIsLatencyPlusBytesOverBandwidth) {
  const Env env(true);
  ASSERT_TRUE(env.cost.host_transport());
  const std::int64_t S = 1 << 20;
  // all-reduce and all-to-all: publish S, read the other's S: 2 S per member.
  EXPECT_NEAR(collective_end_s(env, OpKind::AllReduce, S), kLatency_s + 2.0 * S / kBw_bytes_per_s,
              kTol);
  EXPECT_NEAR(collective_end_s(env, OpKind::AllToAll, S), kLatency_s + 2.0 * S / kBw_bytes_per_s,
              kTol);
  // reduce-scatter of the full input S: the same exchange as the all-reduce.
  EXPECT_NEAR(collective_end_s(env, OpKind::ReduceScatter, S),
              kLatency_s + 2.0 * S / kBw_bytes_per_s, kTol);
  // all-gather of the gathered output S: publish S / 2, read S / 2.
  EXPECT_NEAR(collective_end_s(env, OpKind::AllGather, S), kLatency_s + 1.0 * S / kBw_bytes_per_s,
              kTol);
}

TEST(HostTransport, APipelineMessageIsLatencyPlusWriteAndRead) {
  const Env env(true);
  ScheduleGraph g;
  OpDesc op;
  op.kind = OpKind::SendRecv;
  op.group = GroupKind::Pipeline;
  op.bytes = 65536;
  op.group_size = 2;
  const auto id = g.add_op(op);
  Task send;
  send.kind = TaskKind::Send;
  send.rank = 0;
  send.stream = StreamId::PpComm;
  send.op = id;
  send.peer = 1;
  send.match = 1;
  Task recv = send;
  recv.kind = TaskKind::Recv;
  recv.rank = 1;
  recv.peer = 0;
  const TaskId s = g.add_task(send), r = g.add_task(recv);
  g.add_dependency(s, r);
  g.finalize();
  const ExecutionRecord rec = simulate(g, env.scenario, env.system, env.cost);
  // The sender writes S, the receiver reads it: 2 S at the host rate, one latency.
  EXPECT_NEAR(rec.end_s[r], kLatency_s + 2.0 * 65536 / kBw_bytes_per_s, kTol);
}

TEST(HostTransport, AProfileWithoutTheFiguresKeepsTheOldPricing) {
  const Env env(false);
  EXPECT_FALSE(env.cost.host_transport());
  // The links between the nodes stay at the copy bandwidth, and the latency is the NCCL model's
  // (0 here would make it a pure copy): far below the host transport's.
  EXPECT_EQ(env.system.nic_bw_bytes_per_s, 1.5e10);
  EXPECT_LT(collective_end_s(env, OpKind::AllReduce, 1 << 20), kLatency_s);
  // One node: nothing changes even with the figures.
  const CalibrationProfile p = cpu_profile(true);
  EXPECT_EQ(local_system(p, "p.json", 1).nic_bw_bytes_per_s, 1.5e10);
  EXPECT_EQ(local_system(p, "p.json", 2).nic_bw_bytes_per_s, kBw_bytes_per_s);
}

}  // namespace
}  // namespace trainsim::sim
