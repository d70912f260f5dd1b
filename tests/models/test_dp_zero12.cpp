// Strategy zero12 (models/builder/dp_zero12.cpp, zero_buckets.cpp): DeepSpeed ZeRO-1/2
// reduce-scatter buckets and the parameter all-gather, against hand-computed values.
#include <gtest/gtest.h>

#include <vector>

#include "models/builder/dp_strategy.h"
#include "tests/support/tiny_scenario.h"

using namespace trainsim;
using namespace trainsim::testing;

namespace {

std::vector<TaskId> tasks_where(const ScheduleGraph& g, RankId rank, Phase phase, OpKind kind) {
  std::vector<TaskId> out;
  for (TaskId id : g.tasks_of_rank(rank))
    if (g.task(id).phase == phase && g.op(id).kind == kind) out.push_back(id);
  return out;
}

// dp = 2, one stage, 2 microbatches, 1M-element buckets.
Scenario zero(int stage) {
  return tiny_scenario(R"(
parallel: {micro_batch_size: 1, global_batch_size: 4}
deepspeed:
  zero_optimization: {stage: )" + std::to_string(stage) +
                           R"(, reduce_bucket_size: 1000000, overlap_comm: true}
)", 2);
}

}  // namespace

TEST(DpZero12, FactoryPicksItForStagesOneAndTwo) {
  for (int stage : {1, 2}) {
    const Scenario sc = zero(stage);
    builder::GraphBuild build(sc, default_calibration(find_system(sc.cluster.system).gpu.name));
    const builder::RankContext ctx(build, {0, 0, 0});
    EXPECT_STREQ(builder::make_data_parallel_strategy(ctx)->name(), "zero12");
  }
}

TEST(DpZero12, StageTwoReduceScattersEveryMicrobatchInBuckets) {
  const Scenario sc = zero(2);
  ASSERT_EQ(sc.parallel.num_microbatches, 2);
  const ScheduleGraph g = build_graph(sc);
  // 6,613,504 parameters: 7 buckets (6 x 1M + 613,504) per microbatch, 2 B per element.
  const auto rs = tasks_where(g, 0, Phase::GradSync, OpKind::ReduceScatter);
  ASSERT_EQ(rs.size(), 14u);
  for (std::size_t k = 0; k < rs.size(); ++k) {
    EXPECT_EQ(std::size_t(g.task(rs[k]).bucket), k);
    EXPECT_EQ(g.op(rs[k]).bytes, k % 7 < 6 ? 2'000'000 : 2 * (kTinyParams - 6'000'000)) << k;
    EXPECT_EQ(g.group(g.task(rs[k]).group).ranks, (std::vector<RankId>{0, 1}));
  }
  // The first bucket of the first microbatch is issued during its backward, before the second
  // microbatch's forward.
  const auto tasks = g.tasks_of_rank(0);
  std::size_t first_fwd_mb1 = 0;
  for (std::size_t i = 0; i < tasks.size(); ++i)
    if (g.task(tasks[i]).phase == Phase::Forward && g.task(tasks[i]).microbatch == 1) {
      first_fwd_mb1 = tasks[i];
      break;
    }
  EXPECT_LT(rs[0], first_fwd_mb1);
  // Two bucket buffers (overlap_comm) of 1M fp16 elements appear at the first logits backward.
  std::int64_t comm_buffers = 0;
  for (TaskId id : tasks)
    for (auto e = g.effects_begin(id); e != g.effects_end(id); ++e)
      if (e->category == MemCategory::CommBuffers && e->bytes > 0) {
        EXPECT_EQ(g.task(id).part, Part::Logits);
        comm_buffers += e->bytes;
      }
  EXPECT_EQ(comm_buffers, 2 * 1'000'000 * 2);
}

TEST(DpZero12, StageOneReducesOnceAfterTheLastMicrobatch) {
  const ScheduleGraph g = build_graph(zero(1));
  const auto rs = tasks_where(g, 0, Phase::GradSync, OpKind::ReduceScatter);
  ASSERT_EQ(rs.size(), 7u);
  std::size_t last_backward = 0;
  for (TaskId id : g.tasks_of_rank(0))
    if (g.task(id).phase == Phase::Backward) last_backward = id;
  for (TaskId id : rs) EXPECT_GT(id, last_backward);
}

TEST(DpZero12, UpdatedParametersAreAllGatheredAfterTheStep) {
  for (int stage : {1, 2}) {
    const ScheduleGraph g = build_graph(zero(stage));
    const auto ag = tasks_where(g, 0, Phase::ParamSync, OpKind::AllGather);
    ASSERT_EQ(ag.size(), 1u);
    EXPECT_EQ(g.op(ag[0]).bytes, 2 * kTinyParams);
    const auto step = tasks_where(g, 0, Phase::Optimizer, OpKind::OptimizerStepGpu);
    ASSERT_EQ(step.size(), 1u);
    // Each rank steps its half: ceil(P / 2) parameters.
    EXPECT_EQ(g.op(step[0]).params, (kTinyParams + 1) / 2);
    EXPECT_GT(ag[0], step[0]);
  }
}
