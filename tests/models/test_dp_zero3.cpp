// Strategy zero3 (models/builder/dp_zero3.cpp): DeepSpeed ZeRO-3 parameter fetches per
// submodule with prefetch, persistence, reuse and their memory, against hand-computed counts
// and sizes.
#include <gtest/gtest.h>

#include <algorithm>
#include <vector>

#include "models/builder/dp_strategy.h"
#include "tests/support/tiny_scenario.h"

using namespace trainsim;
using namespace trainsim::testing;

namespace {

// dp = 2, one stage, 2 microbatches. With the tiny model (h = 256) and DeepSpeed's default
// persistence threshold (1e5 elements) the fetched tensors are: per layer QKV (3h^2 = 196,608)
// in the attention block, fc1 and fc2 (4h^2 = 262,144 each) in the MLP block; the projection
// (h^2 = 65,536), norms and biases stay gathered. The embedding fetches its word table
// (V h = 262,144; the position table s h = 32,768 stays), the output layer the tied word table.
constexpr std::int64_t kQkv = 3 * kTinyHidden * kTinyHidden, kFc = 4 * kTinyHidden * kTinyHidden;
constexpr std::int64_t kWord = kTinyVocab * kTinyHidden;

Scenario zero3(const std::string& recompute = "null", const std::string& extra = "") {
  return tiny_scenario(R"(
parallel: {micro_batch_size: 1, global_batch_size: 4, recompute_granularity: )" + recompute + R"(}
deepspeed:
  zero_optimization: {stage: 3, reduce_bucket_size: 1000000)" + extra + R"(}
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

TEST(DpZero3, OneGatherPerSubmoduleAndUse) {
  for (const char* recompute : {"null", "full"}) {
    const ScheduleGraph g = build_graph(zero3(recompute));
    // Forward: embedding, 8 x (QKV; fc1, fc2), output = 26. Backward: output, 8 x (fc2, fc1;
    // QKV), embedding = 26. With full recomputation the layer's forward runs again first, but
    // every submodule is reused within stage3_max_reuse_distance (1e9), so nothing is fetched
    // twice. Two microbatches.
    const auto ag = gathers(g, 0);
    EXPECT_EQ(ag.size(), 2u * (26 + 26)) << recompute;
    EXPECT_EQ(g.op(ag[0]).bytes, 2 * kWord);  // fp16, 2 B per element
    EXPECT_EQ(g.op(ag[1]).bytes, 2 * kQkv);
    EXPECT_EQ(g.op(ag[2]).bytes, 2 * kFc);
    for (TaskId id : ag) {  // the gathered copy is the other rank's half
      ASSERT_EQ(g.effects_end(id) - g.effects_begin(id), 1);
      EXPECT_EQ(g.effects_begin(id)->bytes, g.op(id).bytes / 2);
      EXPECT_EQ(g.effects_begin(id)->category, MemCategory::Parameters);
    }
  }
}

TEST(DpZero3, RecomputationFetchesAgainWhatWasReleased) {
  // stage3_max_reuse_distance 0 and a prefetch bucket of 1 (one submodule ahead). Backward of
  // layer l: recomputed attention (QKV), recomputed MLP (fc1, fc2), MLP backward (fc2, fc1),
  // attention backward (QKV). With no reuse window QKV is released after its recomputed use
  // and fetched again; fc1 and fc2 stay only because the prefetch scan at the recomputed
  // MLP's hook passed over their backward use while they were gathered (DeepSpeed keeps
  // those). So 4 fetches per layer: 1 + 8 x 4 + 1 = 34 in the backward, 26 in the forward.
  const ScheduleGraph g = build_graph(
      zero3("full", ", stage3_prefetch_bucket_size: 1, stage3_max_reuse_distance: 0"));
  EXPECT_EQ(gathers(g, 0).size(), 2u * (26 + 34));
  // With DeepSpeed's default window (1e9 elements) QKV is kept too: 3 per layer, as forward.
  const ScheduleGraph k = build_graph(zero3("full", ", stage3_prefetch_bucket_size: 1"));
  EXPECT_EQ(gathers(k, 0).size(), 2u * (26 + 26));
}

// Uniform recomputation in units of 2 layers: before the backward of a unit's last layer the
// unit re-runs the forward of both its layers, each with its own hooks, so the backward pass's
// submodule order is re-run(a), re-run(b), backward(b), backward(a). Every re-run block waits
// for a gather of its parameters (the backward pass fetches anew); with DeepSpeed's default
// reuse window nothing is fetched twice, as with units of one layer.
TEST(DpZero3, UniformRecomputationUnitsFetchForTheirReRun) {
  for (const char* recompute : {"full", "full, recompute_num_layers: 2",
                                "full, recompute_num_layers: 8"}) {
    SCOPED_TRACE(recompute);
    const ScheduleGraph g = build_graph(zero3(recompute));
    EXPECT_EQ(gathers(g, 0).size(), 2u * (26 + 26));
    std::size_t reruns = 0;
    for (TaskId id : g.tasks_of_rank(0)) {
      if (g.task(id).phase != Phase::Recompute || g.task(id).kind != TaskKind::Compute) continue;
      ++reruns;
      bool waits = false;
      for (auto [e, end] = boost::in_edges(id, g.dependencies()); e != end; ++e) {
        const TaskId from = boost::source(*e, g.dependencies());
        waits |= g.task(from).phase == Phase::ParamSync && g.op(from).kind == OpKind::AllGather;
      }
      EXPECT_TRUE(waits) << g.label(id);
    }
    EXPECT_EQ(reruns, 2u * 8 * 2);  // 2 microbatches x 8 layers x attention and MLP
  }
}

TEST(DpZero3, PersistenceThresholdDecidesWhatIsFetched) {
  // Threshold 300,000: nothing of the tiny model is fetched.
  EXPECT_EQ(gathers(build_graph(zero3("null", ", stage3_param_persistence_threshold: 300000")), 0)
                .size(), 0u);
  // Threshold 0: the projection, the norms, the biases and the position table too: QKV with its
  // bias 3h, projection h^2 + h, each norm 2h, fc1 4h^2 + 4h, fc2 4h^2 + h as their own fetches.
  const ScheduleGraph g = build_graph(zero3("null", ", stage3_param_persistence_threshold: 0"));
  const auto ag = gathers(g, 0);
  EXPECT_EQ(ag.size(), 2u * 2 * (1 + 8 * 6 + 1));
  EXPECT_EQ(g.op(ag[0]).bytes, 2 * kTinyEmbeddingParams);  // word and position tables
}

TEST(DpZero3, PrefetchFollowsTheBucketAndTheLiveLimit) {
  auto before_first_compute = [](const ScheduleGraph& g) {
    int n = 0;
    for (TaskId id : g.tasks_of_rank(0)) {
      if (g.task(id).kind == TaskKind::Compute) break;
      EXPECT_EQ(g.op(id).kind, OpKind::AllGather);
      ++n;
    }
    return n;
  };
  // Default bucket 5e7: the embedding's fetch, then prefetches of every later submodule of the
  // forward (8 x 3 + 1 = 25 tensors, 5.6 M elements < 5e7).
  EXPECT_EQ(before_first_compute(build_graph(zero3())), 1 + 25);
  // Bucket 1: DeepSpeed checks before adding, so exactly one submodule ahead.
  EXPECT_EQ(
      before_first_compute(build_graph(zero3("null", ", stage3_prefetch_bucket_size: 1"))), 2);
  // Bucket 300,000: QKV (196,608, still under), then fc1: two ahead.
  EXPECT_EQ(before_first_compute(
                build_graph(zero3("null", ", stage3_prefetch_bucket_size: 300000"))), 3);
  // Live limit = the embedding's table: no room to prefetch anything.
  EXPECT_EQ(before_first_compute(build_graph(zero3(
                "null", ", stage3_max_live_parameters: " + std::to_string(kWord)))), 1);
}

TEST(DpZero3, GradientsAreReduceScatteredLikeStageTwo) {
  const ScheduleGraph g = build_graph(zero3());
  int rs = 0;
  for (TaskId id : g.tasks_of_rank(0))
    if (g.task(id).phase == Phase::GradSync && g.op(id).kind == OpKind::ReduceScatter) ++rs;
  EXPECT_EQ(rs, 7 * 2);  // ceil(6,613,504 / 1M) buckets per microbatch
}

// The hooks' host work per fetch (builder::zero3_fetch_eager_ops, DeepSpeed's torch calls per
// fetched tensor: gather 3, wait 3, release 2 = 8), on the fetch's all-gather.
TEST(DpZero3, FetchHooksCostHostWorkPerFetchedTensor) {
  EXPECT_DOUBLE_EQ(builder::zero3_fetch_eager_ops(1), 8);
  EXPECT_DOUBLE_EQ(builder::zero3_fetch_eager_ops(3), 24);
  const ScheduleGraph g = build_graph(zero3());
  // Every fetched submodule of the tiny model has one non-persistent tensor (QKV, fc1, fc2 and
  // the word table; see the top of the file): one entry of 8 eager ops per gather. Only the
  // simulated ranks' gathers: rank 0 and rank 1 (dp 2).
  std::vector<TaskId> ag = gathers(g, 0);
  const std::vector<TaskId> ag1 = gathers(g, 1);
  ag.insert(ag.end(), ag1.begin(), ag1.end());
  ASSERT_EQ(g.host_work.size(), ag.size());
  std::vector<TaskId> hooked;
  for (const HostWork& w : g.host_work) {
    EXPECT_EQ(w.cause, HostWorkCause::Zero3FetchHook);
    EXPECT_DOUBLE_EQ(w.eager_ops, 8);
    hooked.push_back(w.task);
  }
  std::sort(hooked.begin(), hooked.end());
  std::sort(ag.begin(), ag.end());
  EXPECT_EQ(hooked, ag);
  // Persistence threshold 0: the QKV submodule fetches its weight and bias (2 tensors, 16 ops),
  // the embedding its word and position tables (2), fc1 and fc2 weight and bias (2 each), the
  // projection (2), the norms (weight and bias, 2 each).
  const ScheduleGraph all = build_graph(zero3("null", ", stage3_param_persistence_threshold: 0"));
  double max_ops = 0;
  for (const HostWork& w : all.host_work) max_ops = std::max(max_ops, w.eager_ops);
  EXPECT_DOUBLE_EQ(max_ops, 16);
  EXPECT_DOUBLE_EQ(all.host_work.front().eager_ops, 16);  // the embedding's first fetch
}

TEST(DpZero3, HostModelOffHasNoHookWork) {
  Scenario sc = zero3();
  sc.host_model = false;
  EXPECT_TRUE(build_graph(sc).host_work.empty());
}
