// Strategy none (models/builder/dp_none.cpp): one data-parallel rank synchronizes nothing and
// steps all its parameters on the GPU.
#include <gtest/gtest.h>

#include "models/builder/dp_strategy.h"
#include "tests/support/tiny_scenario.h"

using namespace trainsim;
using namespace trainsim::testing;

TEST(DpNone, FactoryPicksItForOneDataParallelRank) {
  const Scenario sc = tiny_scenario("parallel: {micro_batch_size: 1, global_batch_size: 2}\n", 1);
  builder::GraphBuild build(sc, default_calibration(find_system(sc.cluster.system).gpu.name));
  const builder::RankContext ctx(build, {0, 0, 0});
  EXPECT_STREQ(builder::make_data_parallel_strategy(ctx)->name(), "none");
}

TEST(DpNone, NoSynchronizationAndOneGpuStepOverAllParameters) {
  const ScheduleGraph g =
      build_graph(tiny_scenario("parallel: {micro_batch_size: 1, global_batch_size: 2}\n", 1));
  int steps = 0;
  for (TaskId id : g.tasks_of_rank(0)) {
    const Task& t = g.task(id);
    EXPECT_NE(t.phase, Phase::GradSync);
    EXPECT_NE(t.phase, Phase::ParamSync);
    if (t.kind == TaskKind::OptimizerGpu) {
      ++steps;
      EXPECT_EQ(g.op(id).params, kTinyParams);
      // fp16: Megatron's main_grad.float() makes 4 B/param of fp32 gradients for the step.
      std::int64_t grads = 0;
      for (auto e = g.effects_begin(id); e != g.effects_end(id); ++e)
        if (e->category == MemCategory::Gradients && e->bytes > 0) grads += e->bytes;
      EXPECT_EQ(grads, 4 * kTinyParams);
    }
  }
  EXPECT_EQ(steps, 1);
}
