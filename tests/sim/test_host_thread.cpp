// Tests of the host timeline (sim/host_thread.h) on graphs built by hand: each expected time
// is a closed form of the host cost h per task, the device time d per task (the cost model's,
// computed here), the task's kernel count K (its first kernel is issued h / K after the issue
// starts, its last one runs d / K), the sync cost and the queue depth.
#include "sim/host_thread.h"

#include <gtest/gtest.h>

#include <cmath>

#include "models/hardware/calibration.h"
#include "models/perf/flops.h"
#include "sim/executor.h"
#include "tests/support/host_thread_fixture.h"

namespace trainsim::sim {
namespace {

using Env = test_support::HostThreadEnv;
using test_support::chain;
using test_support::layer_op;

constexpr double kTol = 1e-12;

double kernels_of(const OpDesc& op) { return double(op_kernels(op).size()); }

TEST(HostThread, HostBoundLayerTakesNTimesTheHostCost) {
  Env env;
  const OpDesc op = layer_op();
  const CostModel probe(env.system, env.profile);
  const double d = probe.compute_time_s(op);
  ASSERT_GT(d, 0);
  const double h = 3 * d;  // host cost above the device's
  env.profile.host_module_overhead_s = h;
  const CostModel cost(env.system, env.profile);
  const int n = 20;
  ScheduleGraph g = chain(n, op);
  g.finalize();
  const ExecutionRecord r = simulate(g, env.scenario, env.system, cost);
  const double k = kernels_of(op);
  ASSERT_GT(k, 1);
  // Task i's issue runs from i h to (i + 1) h; it starts with its first kernel (h / k in) and
  // ends with its last, issued at (i + 1) h, which runs d / k.
  for (int i = 0; i < n; ++i) {
    EXPECT_NEAR(r.start_s[i], i * h + h / k, kTol) << i;
    EXPECT_NEAR(r.end_s[i], (i + 1) * h + d / k, kTol) << i;
    EXPECT_NEAR(r.host_issue_end_s[i], (i + 1) * h, kTol);
  }
  EXPECT_NEAR(r.end_s[n - 1], n * h + d / k, kTol);
  // The iteration time runs from the first start (h / k).
  EXPECT_NEAR(r.iteration_time_s(), n * h + d / k - h / k, kTol);
  // The device waited for the host: h / k for the first task, (h - d) / k for every other.
  EXPECT_NEAR(r.host_wait_s[0], h / k, kTol);
  EXPECT_NEAR(r.host_wait_s[5], (h - d) / k, kTol);
}

TEST(HostThread, HookHostWorkAddsToTheIssueOfAHostBoundChain) {
  // Forward tasks of K kernels at eager_op_s e each, plus a hook's w eager ops per task
  // (ScheduleGraph::host_work, e.g. ZeRO-3's fetch hooks): h = (K + w) e per task, above d.
  Env env;
  const OpDesc op = layer_op();
  const double d = CostModel(env.system, env.profile).compute_time_s(op);
  const double K = kernels_of(op), w = 8;
  const double h = 3 * d, e = h / (K + w);
  env.profile.host_eager_op_s = e;
  const CostModel cost(env.system, env.profile);
  const int n = 15;
  ScheduleGraph g = chain(n, op);
  for (int i = 0; i < n; ++i) g.host_work.push_back({TaskId(i), w, HostWorkCause::Zero3FetchHook});
  g.finalize();
  const ExecutionRecord r = simulate(g, env.scenario, env.system, cost);
  for (int i = 0; i < n; ++i) EXPECT_NEAR(r.host_issue_end_s[i], (i + 1) * h, kTol) << i;
  EXPECT_NEAR(r.end_s[n - 1], n * h + d / K, kTol);
  // Without the hook work the chain issues at K e per task.
  ScheduleGraph plain = chain(n, op);
  plain.finalize();
  const ExecutionRecord p = simulate(plain, env.scenario, env.system, cost);
  EXPECT_NEAR(p.host_issue_end_s[n - 1], n * K * e, kTol);
}

TEST(HostThread, HostAheadOfTheDeviceCostsOnlyTheFirstIssue) {
  Env env;
  const OpDesc op = layer_op();
  const double d = CostModel(env.system, env.profile).compute_time_s(op);
  const double h = d / 4;
  env.profile.host_module_overhead_s = h;
  const CostModel cost(env.system, env.profile);
  const int n = 12;
  ScheduleGraph g = chain(n, op);
  g.finalize();
  const ExecutionRecord r = simulate(g, env.scenario, env.system, cost);
  EXPECT_NEAR(r.end_s[n - 1], h / kernels_of(op) + n * d, kTol);
}

TEST(HostThread, SyncDrainsTheQueue) {
  Env env;
  const OpDesc op = layer_op();
  const double d = CostModel(env.system, env.profile).compute_time_s(op);
  const double h = d / 4, sync = d / 3;
  env.profile.host_module_overhead_s = h;
  env.profile.host_sync_s = sync;
  const CostModel cost(env.system, env.profile);
  const int n = 10, k = 4;  // a sync point after task k (0-based)
  ScheduleGraph g = chain(n, op);
  g.host_syncs.push_back({TaskId(k), SyncCause::MoeTokenCounts});
  g.finalize();
  const ExecutionRecord r = simulate(g, env.scenario, env.system, cost);
  // Tasks 0..k run back to back from h / K; the host waits for task k's end, pays the sync,
  // then issues task k + 1, which starts with its first kernel (h / K): the device is idle
  // sync + h / K, and the rest run back to back.
  const double K = kernels_of(op);
  const double end_k = h / K + (k + 1) * d;
  EXPECT_NEAR(r.end_s[k], end_k, kTol);
  EXPECT_NEAR(r.sync_wait_start_s[0], (k + 1) * h, kTol);
  EXPECT_NEAR(r.sync_wait_end_s[0], end_k + sync, kTol);
  EXPECT_NEAR(r.start_s[k + 1], end_k + sync + h / K, kTol);
  EXPECT_NEAR(r.end_s[n - 1], end_k + sync + h / K + (n - k - 1) * d, kTol);
}

TEST(HostThread, FullLaunchQueueBlocksTheHost) {
  Env env;
  const OpDesc op = layer_op();
  const double d = CostModel(env.system, env.profile).compute_time_s(op);
  const double h = d / 10;
  env.profile.host_module_overhead_s = h;
  env.profile.host_launch_queue_depth = 3;  // depth / 8 rounds to a wake-up per task
  const CostModel cost(env.system, env.profile);
  const int n = 9, depth = 3;
  ScheduleGraph g = chain(n, op);
  g.finalize();
  const ExecutionRecord r = simulate(g, env.scenario, env.system, cost);
  // The device never waits (end as without a limit), but task i >= depth is issued only once
  // task i - depth has ended (at h / K + (i - depth + 1) d), h later.
  const double K = kernels_of(op);
  EXPECT_NEAR(r.end_s[n - 1], h / K + n * d, kTol);
  for (int i = 0; i < depth; ++i) EXPECT_NEAR(r.host_issue_end_s[i], (i + 1) * h, kTol);
  for (int i = depth; i < n; ++i)
    EXPECT_NEAR(r.host_issue_end_s[i], h / K + (i - depth + 1) * d + h, kTol) << i;
}

TEST(HostThread, HostModelOffIsTheHardwareOnlyRun) {
  Env env;
  const OpDesc op = layer_op();
  const double d = CostModel(env.system, env.profile).compute_time_s(op);
  env.profile.host_module_overhead_s = 5 * d;
  const CostModel cost(env.system, env.profile);
  ScheduleGraph g = chain(6, op);
  g.host_syncs.push_back({TaskId(2), SyncCause::GradNormItem});
  g.finalize();
  env.scenario.host_model = false;
  const ExecutionRecord r = simulate(g, env.scenario, env.system, cost);
  for (int i = 0; i < 6; ++i) {
    EXPECT_NEAR(r.start_s[i], i * d, kTol);
    EXPECT_NEAR(r.end_s[i], (i + 1) * d, kTol);
  }
  EXPECT_TRUE(r.host_issue_end_s.empty());
  EXPECT_TRUE(r.host_wait_s.empty());
  EXPECT_TRUE(r.sync_wait_start_s.empty());
}

TEST(HostThread, HookedGradientSyncIsIssuedAfterItsGradients) {
  // Compute tasks 0..4, then (emitted last, as the builder emits DDP buckets) a GradSync
  // all-reduce on the DP stream that depends on task 1: the host issues it right after task 1,
  // as DDP's backward hook does.
  Env env;
  ScheduleGraph g = chain(5, layer_op());
  OpDesc ar;
  ar.kind = OpKind::AllReduce;
  ar.group = GroupKind::Data;
  ar.bytes = 1 << 20;
  ar.group_size = 1;
  Task t;
  t.kind = TaskKind::Collective;
  t.stream = StreamId::DpComm;
  t.phase = Phase::GradSync;
  t.op = g.add_op(ar);
  const TaskId bucket = g.add_task(t);
  g.add_dependency(1, bucket);
  g.finalize();
  std::vector<std::uint32_t> slot_of(g.num_tasks());
  std::vector<std::vector<TaskId>> slots(kNumStreams);
  std::vector<std::uint32_t> pos(g.num_tasks());
  for (TaskId id = 0; id < g.num_tasks(); ++id) {
    slot_of[id] = std::uint32_t(g.task(id).stream);
    pos[id] = std::uint32_t(slots[slot_of[id]].size());
    slots[slot_of[id]].push_back(id);
  }
  const std::vector<std::uint32_t> no_sync(g.num_tasks(), kNone);
  const std::vector<TaskId> order = host_issue_order(g, 0, slot_of, slots, pos, no_sync);
  EXPECT_EQ(order, (std::vector<TaskId>{0, 1, bucket, 2, 3, 4}));
}

TEST(HostThread, IssueCostCountsTheKernelsByClass) {
  Env env;
  CalibrationProfile& p = env.profile;
  p.host_eager_op_s = 1e-6;
  p.host_te_module_s = 10e-6;
  p.host_autograd_node_s = 100e-6;
  p.host_module_overhead_s = 1000e-6;
  p.host_nccl_call_s = 7e-6;
  ScheduleGraph g;
  OpDesc fwd = layer_op(), bwd = layer_op();
  bwd.kind = OpKind::MlpBwd;
  fill_work(bwd);
  OpDesc core = fwd;
  core.features.core = true;
  fill_work(core);
  OpDesc ar;
  ar.kind = OpKind::AllReduce;
  ar.group = GroupKind::Tensor;
  ar.bytes = 1024;
  ar.group_size = 1;
  const OpDesc* ops[] = {&fwd, &bwd, &core, &ar};
  std::vector<double> kernels, gemms;
  for (const OpDesc* o : ops) {
    Task t;
    t.kind = o == &ar ? TaskKind::Collective : TaskKind::Compute;
    t.phase = o == &bwd ? Phase::Backward : Phase::Forward;
    t.op = g.add_op(*o);
    g.add_task(t);
    double k = 0, m = 0;
    for (const KernelWork& w : op_kernels(*o)) {
      k += 1;
      m += w.cls == KernelClass::Gemm ? 1 : 0;
    }
    kernels.push_back(k);
    gemms.push_back(m);
  }
  ASSERT_GT(gemms[2], 0);
  EXPECT_NEAR(host_cost_s(g, 0, p, kernels, gemms), kernels[0] * 1e-6 + 1e-3, kTol);
  EXPECT_NEAR(host_cost_s(g, 1, p, kernels, gemms), kernels[1] * 100e-6 + 1e-3, kTol);
  EXPECT_NEAR(host_cost_s(g, 2, p, kernels, gemms),
              gemms[2] * 10e-6 + (kernels[2] - gemms[2]) * 1e-6 + 1e-3, kTol);
  EXPECT_NEAR(host_cost_s(g, 3, p, kernels, gemms), 7e-6, kTol);
}

}  // namespace
}  // namespace trainsim::sim
