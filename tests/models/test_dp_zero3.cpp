// Strategy zero3 (models/builder/dp_zero3.cpp): DeepSpeed ZeRO-3 parameter gathers with
// prefetch and their memory, against hand-computed counts and sizes.
#include <gtest/gtest.h>

#include <vector>

#include "models/builder/dp_strategy.h"
#include "tests/support/tiny_scenario.h"

using namespace trainsim;
using namespace trainsim::testing;

namespace {

// dp = 2, one stage, 2 microbatches; the prefetch bucket holds two layers' parameters.
Scenario zero3(const std::string& recompute = "null") {
  return tiny_scenario(R"(
parallel: {micro_batch_size: 1, global_batch_size: 4, recompute_granularity: )" + recompute + R"(}
deepspeed:
  zero_optimization: {stage: 3, reduce_bucket_size: 1000000, stage3_prefetch_bucket_size: )" +
                           std::to_string(2 * kTinyLayerParams) + R"(}
)", 2);
}

std::vector<TaskId> gathers(const ScheduleGraph& g, RankId rank) {
  std::vector<TaskId> out;
  for (TaskId id : g.tasks_of_rank(rank))
    if (g.task(id).phase == Phase::ParamSync && g.op(id).kind == OpKind::AllGather)
      out.push_back(id);
  return out;
}

}  // namespace

TEST(DpZero3, FactoryPicksItForStageThree) {
  const Scenario sc = zero3();
  builder::GraphBuild build(sc, default_calibration(find_system(sc.cluster.system).gpu.name));
  const builder::RankContext ctx(build, {0, 0, 0});
  EXPECT_STREQ(builder::make_data_parallel_strategy(ctx)->name(), "zero3");
}

TEST(DpZero3, OneGatherPerUnitAndPass) {
  for (const char* recompute : {"null", "full"}) {
    const Scenario sc = zero3(recompute);
    const ScheduleGraph g = build_graph(sc);
    // Units: embedding, 8 layers, output layer = 10; passes: forward and backward of each of
    // the 2 microbatches (a recomputed forward reuses the backward's gather).
    const auto ag = gathers(g, 0);
    EXPECT_EQ(ag.size(), 10u * 2 * 2) << recompute;
    // Forward order: embedding (fp16, 2 B/param), layers, the output layer's V x h.
    EXPECT_EQ(g.op(ag[0]).bytes, 2 * kTinyEmbeddingParams);
    EXPECT_EQ(g.op(ag[1]).bytes, 2 * kTinyLayerParams);
    EXPECT_EQ(g.op(ag[9]).bytes, 2 * kTinyVocab * kTinyHidden);
    // Backward order: the output layer first, the embedding last.
    EXPECT_EQ(g.op(ag[10]).bytes, 2 * kTinyVocab * kTinyHidden);
    EXPECT_EQ(g.op(ag[19]).bytes, 2 * kTinyEmbeddingParams);
    // The gathered copy is the other rank's half.
    for (TaskId id : ag) {
      ASSERT_EQ(g.effects_end(id) - g.effects_begin(id), 1);
      EXPECT_EQ(g.effects_begin(id)->bytes, g.op(id).bytes / 2);
      EXPECT_EQ(g.effects_begin(id)->category, MemCategory::Parameters);
    }
  }
}

TEST(DpZero3, PrefetchesTwoUnitsAhead) {
  const ScheduleGraph g = build_graph(zero3());
  // ceil(prefetch bucket / layer params) = 2: before the first compute the rank gathers the
  // unit it needs and the next two.
  const auto tasks = g.tasks_of_rank(0);
  int before_first_compute = 0;
  for (TaskId id : tasks) {
    if (g.task(id).kind == TaskKind::Compute) break;
    EXPECT_EQ(g.op(id).kind, OpKind::AllGather);
    ++before_first_compute;
  }
  EXPECT_EQ(before_first_compute, 3);
}

TEST(DpZero3, GradientsAreReduceScatteredLikeStageTwo) {
  const ScheduleGraph g = build_graph(zero3());
  int rs = 0;
  for (TaskId id : g.tasks_of_rank(0))
    if (g.task(id).phase == Phase::GradSync && g.op(id).kind == OpKind::ReduceScatter) ++rs;
  EXPECT_EQ(rs, 7 * 2);  // ceil(6,613,504 / 1M) buckets per microbatch
}
