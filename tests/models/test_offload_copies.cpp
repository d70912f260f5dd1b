// Offload (models/builder/offload.cpp): the gradient copies of each reduced bucket and the CPU
// Adam sub-groups, against hand-computed bytes.
#include <gtest/gtest.h>

#include <vector>

#include "tests/support/tiny_scenario.h"

using namespace trainsim;
using namespace trainsim::testing;

namespace {

std::vector<TaskId> of_kind(const ScheduleGraph& g, RankId rank, TaskKind kind, Phase phase) {
  std::vector<TaskId> out;
  for (TaskId id : g.tasks_of_rank(rank))
    if (g.task(id).kind == kind && g.task(id).phase == phase) out.push_back(id);
  return out;
}

}  // namespace

TEST(OffloadCopies, ZeroTwoOneGpuCopiesEveryBucketAsFp32AndStepsOnTheCpu) {
  // Classic ZeRO-Offload: one GPU, ratio 1, 1M-element buckets, 3M-parameter sub-groups.
  const ScheduleGraph g = build_graph(tiny_scenario(R"(
parallel: {micro_batch_size: 1, global_batch_size: 2}
deepspeed:
  zero_optimization:
    stage: 2
    reduce_bucket_size: 1000000
    sub_group_size: 3000000
    offload_optimizer: {device: cpu, ratio: 1.0}
)", 1));
  // Per microbatch 7 buckets (6 x 1M + 613,504), each cast to fp32: 4 B/element.
  const auto d2h = of_kind(g, 0, TaskKind::CopyD2H, Phase::Offload);
  ASSERT_EQ(d2h.size(), 2u * 7);
  for (std::size_t k = 0; k < d2h.size(); ++k)
    EXPECT_EQ(g.op(d2h[k]).bytes, k % 7 < 6 ? 4'000'000 : 4 * (kTinyParams - 6'000'000)) << k;
  // One bucket's fp32 staging buffer (4 B x 1M) lives from the first backward (stage 2: with
  // the bucket buffers) to the first CPU step.
  std::vector<std::int64_t> staging;
  for (TaskId id : g.tasks_of_rank(0))
    for (auto e = g.effects_begin(id); e != g.effects_end(id); ++e)
      if (e->category == MemCategory::OffloadBuffers && !e->on_host) staging.push_back(e->bytes);
  EXPECT_EQ(staging, (std::vector<std::int64_t>{4'000'000, -4'000'000}));
  // CPU Adam in sub-groups of 3M, each followed by its fp16 parameters host->device; no GPU step.
  const auto cpu = of_kind(g, 0, TaskKind::OptimizerCpu, Phase::Optimizer);
  const auto h2d = of_kind(g, 0, TaskKind::CopyH2D, Phase::Offload);
  const std::vector<std::int64_t> sub = {3'000'000, 3'000'000, kTinyParams - 6'000'000};
  ASSERT_EQ(cpu.size(), sub.size());
  ASSERT_EQ(h2d.size(), sub.size());
  for (std::size_t k = 0; k < sub.size(); ++k) {
    EXPECT_EQ(g.op(cpu[k]).params, sub[k]);
    EXPECT_EQ(g.op(h2d[k]).bytes, 2 * sub[k]);
  }
  EXPECT_TRUE(of_kind(g, 0, TaskKind::OptimizerGpu, Phase::Optimizer).empty());
}

TEST(OffloadCopies, ZeroThreeTwinFlowRoundTripsTheGpuPart) {
  // dp = 2, ratio 0.5: parameters [0, 3,306,752) are stepped on the CPU.
  const ScheduleGraph g = build_graph(tiny_scenario(R"(
parallel: {micro_batch_size: 1, global_batch_size: 2}
deepspeed:
  zero_optimization:
    stage: 3
    reduce_bucket_size: 1000000
    offload_optimizer: {device: cpu, ratio: 0.5}
)", 2));
  // One microbatch. Buckets from the top: [5.61M, 6.61M), [4.61M, 5.61M), [3.61M, 4.61M),
  // [2.61M, 3.61M), [1.61M, 2.61M), [0.61M, 1.61M), [0, 0.61M). Each rank's fp16 half goes
  // to the host (2 B x n / 2); the GPU part's half comes back as fp32 (4 B): 1M of GPU part
  // in the first three, 3,613,504 - 3,306,752 = 306,752 in the fourth, none below.
  const auto d2h = of_kind(g, 0, TaskKind::CopyD2H, Phase::Offload);
  const auto h2d = of_kind(g, 0, TaskKind::CopyH2D, Phase::Offload);
  ASSERT_EQ(d2h.size(), 7u);
  for (std::size_t k = 0; k < 6; ++k) EXPECT_EQ(g.op(d2h[k]).bytes, 1'000'000) << k;
  EXPECT_EQ(g.op(d2h[6]).bytes, kTinyParams - 6'000'000);
  // Gradient copies back (Part::Gradients) precede the parameter copies of the CPU step.
  std::vector<std::int64_t> back;
  for (TaskId id : h2d)
    if (g.task(id).part == Part::Gradients) back.push_back(g.op(id).bytes);
  EXPECT_EQ(back, (std::vector<std::int64_t>{2'000'000, 2'000'000, 2'000'000, 4 * (306'752 / 2)}));
}
