// CUDA graph regions on the host timeline (sim/host_thread.h apply_cuda_graphs), on graphs
// built by hand: N tasks of host cost h above their device time d take about N h issued one by
// one, and L + N d when one graph launch of host cost L issues them all (closed forms of
// h, d, L and the kernel count K, as tests/sim/test_host_thread.cpp).
#include <gtest/gtest.h>

#include "models/hardware/calibration.h"
#include "models/perf/flops.h"
#include "sim/executor.h"
#include "sim/host_thread.h"
#include "tests/support/host_thread_fixture.h"

namespace trainsim::sim {
namespace {

using Env = test_support::HostThreadEnv;
using test_support::chain;
using test_support::layer_op;

constexpr double kTol = 1e-12;

TEST(CudaGraphHost, OneLaunchIssuesAHostBoundRegion) {
  Env env;
  const OpDesc op = layer_op();
  const double d = CostModel(env.system, env.profile).compute_time_s(op);
  const double h = 3 * d, launch = 2 * d;
  env.profile.host_module_overhead_s = h;
  env.profile.host_graph_launch_s = launch;
  const CostModel cost(env.system, env.profile);
  const int n = 16;
  const double K = double(op_kernels(op).size());
  // Eager: host-bound, N h (+ the last kernel's d / K, from the first kernel's h / K).
  ScheduleGraph eager = chain(n, op);
  eager.finalize();
  const ExecutionRecord re = simulate(eager, env.scenario, env.system, cost);
  EXPECT_NEAR(re.end_s[n - 1], n * h + d / K, kTol);
  // Captured: the launch (L) makes every kernel available; the device runs N d after it.
  ScheduleGraph graphed = chain(n, op);
  graphed.finalize();
  graphed.cuda_graphs.push_back({0, TaskId(n - 1), GraphCapture::Whole});
  graphed.cuda_graph_of_task.assign(std::size_t(n), 0);
  const ExecutionRecord rg = simulate(graphed, env.scenario, env.system, cost);
  EXPECT_NEAR(rg.start_s[0], launch, kTol);
  EXPECT_NEAR(rg.end_s[n - 1], launch + n * d, kTol);
  EXPECT_NEAR(rg.host_issue_end_s[n - 1], launch, kTol);  // the host is done at the launch
  EXPECT_LT(rg.end_s[n - 1], 0.5 * re.end_s[n - 1]);
}

TEST(CudaGraphHost, TwoRegionsCostTwoLaunchesAndTasksOutsideStayEager) {
  Env env;
  const OpDesc op = layer_op();
  const double d = CostModel(env.system, env.profile).compute_time_s(op);
  const double h = 8 * d, launch = d / 2;
  env.profile.host_module_overhead_s = h;
  env.profile.host_graph_launch_s = launch;
  const CostModel cost(env.system, env.profile);
  // Tasks 0-3 one region, task 4 eager, tasks 5-7 a second region.
  ScheduleGraph g = chain(8, op);
  g.finalize();
  g.cuda_graphs = {{0, 3, GraphCapture::Whole}, {5, 7, GraphCapture::Whole}};
  g.cuda_graph_of_task = {0, 0, 0, 0, kNone, 1, 1, 1};
  const ExecutionRecord r = simulate(g, env.scenario, env.system, cost);
  const double K = double(op_kernels(op).size());
  // Host: launch to L, task 4 from L to L + h, launch to 2 L + h.
  EXPECT_NEAR(r.host_issue_end_s[3], launch, kTol);
  EXPECT_NEAR(r.host_issue_end_s[4], launch + h, kTol);
  EXPECT_NEAR(r.host_issue_end_s[7], 2 * launch + h, kTol);
  // Device: region 1 from L for 4 d; task 4 after it, its last kernel issued at L + h and
  // running d / K (h > 5 d: it waits for the host); region 2 after both task 4's end and its
  // launch, back to back.
  EXPECT_NEAR(r.end_s[3], launch + 4 * d, kTol);
  const double end4 = launch + h + d / K;
  EXPECT_NEAR(r.end_s[4], end4, kTol);
  EXPECT_NEAR(r.end_s[7], std::max(end4, 2 * launch + h) + 3 * d, kTol);
}

}  // namespace
}  // namespace trainsim::sim
