// Memory model and ZeRO / offload schedule (models/memory/zero_offload.h, models/builder/graph_builder.cpp):
// the GPU peak of a rank, from the graph's memory effects (models/outputs/memory_timeline.h with a
// record that runs every rank's tasks one after another in program order), against an
// independent calculation written here from the formulas (Korthikanti et al. activations,
// ZeRO state bytes, DeepSpeed bucket / gather / offload buffers) and Megatron's pipeline orders.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <string>
#include <vector>

#include <boost/range/iterator_range.hpp>

#include "models/hardware/calibration.h"
#include "models/builder/graph_builder.h"
#include "models/hardware/hardware.h"
#include "models/outputs/memory_timeline.h"
#include "models/graph/pipeline_schedule.h"
#include "models/input/scenario.h"
#include "models/run.h"
#include "models/memory/zero_offload.h"
#include "tests/support/memory_closed_form.h"
#include "tests/support/records.h"
#include "tests/support/scenario_yaml.h"

using namespace trainsim;

namespace {

// Small GPT: l = 8, h = 512, a = 8, s = 512, V = 4096, micro batch 2.
constexpr std::int64_t L = 8, H = 512, A = 8, S = 512, V = 4096, B = 2;

Scenario make(const std::string& parallel, const std::string& zero, std::int64_t gpus,
              const std::string& system = "dgx-a100-80gb") {
  return test_support::gpt_scenario("mem", {L, H, A, S, V}, parallel, zero, gpus, system);
}

const CalibrationProfile& profile() {
  static const CalibrationProfile p = default_calibration("A100-SXM4-80GB");
  return p;
}

ScheduleGraph build(const Scenario& sc) {
  BuildOptions o;
  o.calibration = &profile();
  return build_schedule_graph(validated(sc), find_system(sc.cluster.system), o);
}

using test_support::program_order_record;

std::int64_t graph_peak(const Scenario& sc, RankId rank) {
  const ScheduleGraph g = build(sc);
  const MemoryTimeline m =
      build_memory_timeline(g, program_order_record(g), sc.cluster.gpus_per_node);
  return m.gpu_of(rank).peak_bytes;
}

// ------------------------------------------------------------------ independent calculation
// (tests/support/memory_closed_form.h, shared with tests/sim/test_memory_sim.cpp)

const test_support::ClosedFormMemory& closed_form() {
  static const test_support::ClosedFormMemory m(L, H, A, S, V, B, profile());
  return m;
}
using Config = test_support::PeakConfig;
constexpr std::int64_t sbh = S * B * H;
std::int64_t layer_params() { return closed_form().layer_params(); }
std::int64_t stage_params(std::int64_t pp, std::int64_t stage) {
  return closed_form().stage_params(pp, stage);
}
std::int64_t attn_full() { return closed_form().attn_full(); }
std::int64_t mlp_full() { return closed_form().mlp_full(); }
std::int64_t logits_act() { return closed_form().logits_act(); }
std::int64_t embed_act() { return closed_form().embed_act(); }
std::int64_t expected_peak(const Config& c) { return closed_form().expected_peak(c); }

void expect_peak(const std::string& what, const Scenario& sc, RankId rank, const Config& c) {
  // Byte for byte: the closed form counts every allocation the builder makes.
  EXPECT_EQ(graph_peak(sc, rank), expected_peak(c)) << what;
}

// ------------------------------------------------------------------ peaks, ZeRO 0-3

TEST(MemoryPeak, Zero0SingleGpuNoRecompute) {
  const Scenario sc = make("{micro_batch_size: 2, global_batch_size: 4}", "{stage: 0}", 1);
  Config c;
  c.m = 2;
  expect_peak("zero0 dp1", sc, 0, c);
}

TEST(MemoryPeak, Zero0OneFOneBHoldsPpMicrobatchesOnTheFirstStage) {
  const Scenario sc = make(
      "{pipeline_model_parallel_size: 4, micro_batch_size: 2, global_batch_size: 16, "
      "recompute_granularity: selective}",
      "{stage: 0}", 4);
  Config c;
  c.pp = 4;
  c.m = 8;
  c.rc = Recompute::Selective;
  c.rank_stage = 0;
  c.communicators = 2;  // next stage, tied-embedding group
  expect_peak("1f1b stage 0", sc, 0, c);
  c.rank_stage = 3;
  expect_peak("1f1b stage 3", sc, 3, c);

  // In-flight microbatches arise from the schedule: the first stage's activation peak is pp
  // microbatches' worth (warm-up pp-1 forwards + 1), the last stage's one microbatch's.
  const ScheduleGraph g = build(sc);
  const MemoryTimeline m =
      build_memory_timeline(g, program_order_record(g), sc.cluster.gpus_per_node);
  const std::int64_t per_mb_stage0 = embed_act() + (L / 4) * (13 * sbh + 21 * sbh);
  // (+ the logits' gradient during the logits backward, 2 s b V)
  const std::int64_t per_mb_stage3 = logits_act() + 2 * S * B * V + (L / 4) * (13 * sbh + 21 * sbh);
  std::int64_t act0 = 0, act3 = 0;
  m.gpu_of(0).for_each_step(0, [&](double, const MemVector& v) {
    act0 = std::max(act0, v[int(MemCategory::Activations)]);
  });
  m.gpu_of(3).for_each_step(0, [&](double, const MemVector& v) {
    act3 = std::max(act3, v[int(MemCategory::Activations)]);
  });
  EXPECT_EQ(act0, 4 * per_mb_stage0);
  EXPECT_EQ(act3, 1 * per_mb_stage3);
}

TEST(MemoryPeak, Zero0InterleavedFullRecompute) {
  // Two stages: Megatron-Core's interleaved schedule (Megatron-LM 2021 needs more than two).
  const Scenario sc = parse_scenario(
      "runtime: megatron-core\n" +
          test_support::gpt_scenario_yaml(
              "mem", {L, H, A, S, V},
              "{pipeline_model_parallel_size: 2, micro_batch_size: 2, global_batch_size: 8, "
              "num_layers_per_virtual_pipeline_stage: 2, recompute_granularity: full}",
              "{stage: 0}", 2),
      "mem.yaml");
  Config c;
  c.pp = 2;
  c.v = 2;
  c.m = 4;
  c.rc = Recompute::Full;
  c.communicators = 2;  // the other stage (both directions, one pair), tied-embedding group
  expect_peak("interleaved stage 0", sc, 0, c);
  c.rank_stage = 1;
  expect_peak("interleaved stage 1", sc, 1, c);
}

TEST(MemoryPeak, Zero1WithPipelineAndData) {
  const Scenario sc = make("{pipeline_model_parallel_size: 2, micro_batch_size: 2, global_batch_size: 8}",
                           "{stage: 1}", 4);
  Config c;
  c.stage = 1;
  c.pp = 2;
  c.dp = 2;
  c.m = 2;
  c.communicators = 3;  // data parallel, next stage, tied-embedding group
  expect_peak("zero1 stage 0", sc, 0, c);
}

TEST(MemoryPeak, Zero2OverlappedBuckets) {
  const Scenario sc = make("{micro_batch_size: 2, global_batch_size: 8}",
                           "{stage: 2, reduce_bucket_size: 1000000}", 2);
  Config c;
  c.stage = 2;
  c.dp = 2;
  c.m = 2;
  c.reduce_bucket = 1'000'000;
  c.communicators = 1;
  expect_peak("zero2", sc, 0, c);
}

TEST(MemoryPeak, Zero3GathersLayersWithFullRecompute) {
  const Scenario sc = make("{micro_batch_size: 2, global_batch_size: 8, recompute_granularity: full}",
                           "{stage: 3, reduce_bucket_size: 2000000}", 4);
  Config c;
  c.stage = 3;
  c.dp = 4;
  c.m = 1;
  c.rc = Recompute::Full;
  c.reduce_bucket = 2'000'000;
  c.communicators = 1;
  expect_peak("zero3 recompute", sc, 0, c);
  // Without recomputation as well.
  const Scenario sc2 = make("{micro_batch_size: 2, global_batch_size: 8}",
                            "{stage: 3, reduce_bucket_size: 2000000}", 4);
  c.rc = Recompute::None;
  expect_peak("zero3", sc2, 0, c);
  // Prefetching one layer ahead only (a prefetch bucket smaller than a layer).
  const Scenario sc3 = make("{micro_batch_size: 2, global_batch_size: 8}",
                            "{stage: 3, reduce_bucket_size: 2000000, stage3_prefetch_bucket_size: 1000}", 4);
  c.prefetch = 1000;
  expect_peak("zero3 prefetch 1", sc3, 0, c);
  EXPECT_LT(graph_peak(sc3, 0), graph_peak(sc2, 0));
}

TEST(MemoryPeak, Zero3TwinFlowOffload) {
  const Scenario sc = make("{micro_batch_size: 2, global_batch_size: 4, recompute_granularity: full}",
                           "{stage: 3, reduce_bucket_size: 2000000, offload_optimizer: "
                           "{device: cpu, ratio: 0.5}}",
                           2);
  Config c;
  c.stage = 3;
  c.dp = 2;
  c.m = 1;
  c.rc = Recompute::Full;
  c.ratio = 0.5;
  c.reduce_bucket = 2'000'000;
  c.communicators = 1;
  expect_peak("zero3 offload 0.5", sc, 0, c);
}

// ------------------------------------------------------------------ offload graph and host memory

TEST(Offload, TwinFlowStepsRunConcurrentlyAndMoveTheRightBytes) {
  Scenario sc = make("{micro_batch_size: 2, global_batch_size: 4}",
                     "{stage: 3, reduce_bucket_size: 2000000, sub_group_size: 1000000, "
                     "offload_optimizer: {device: cpu, ratio: 0.4}}",
                     2);
  const ScheduleGraph g = build(sc);
  const std::int64_t P = stage_params(1, 0), Pp = (P + 1) / 2;
  const std::int64_t cpu = std::int64_t(std::floor(0.4 * double(Pp)));
  std::int64_t cpu_params = 0, gpu_params = 0, d2h = 0, h2d_params = 0, h2d_grads = 0;
  TaskId gpu_step = kNone;
  std::vector<TaskId> cpu_steps;
  for (TaskId id : g.tasks_of_rank(0)) {
    const Task& t = g.task(id);
    if (t.kind == TaskKind::OptimizerCpu) {
      cpu_params += g.op(id).params;
      cpu_steps.push_back(id);
      EXPECT_EQ(t.stream, StreamId::Cpu);
      EXPECT_LE(g.op(id).params, 1'000'000);  // one sub-group per step
    }
    if (t.kind == TaskKind::OptimizerGpu) {
      gpu_params += g.op(id).params;
      gpu_step = id;
      EXPECT_EQ(t.stream, StreamId::Compute);
    }
    if (t.kind == TaskKind::CopyD2H) d2h += g.op(id).bytes;
    if (t.kind == TaskKind::CopyH2D) (t.part == Part::Params ? h2d_params : h2d_grads) += g.op(id).bytes;
  }
  EXPECT_EQ(cpu_params, cpu);
  EXPECT_EQ(gpu_params, Pp - cpu);
  EXPECT_EQ(h2d_params, 2 * cpu);  // updated fp16 parameters of the CPU part
  // Every reduced gradient goes to the pinned fp16 host buffer (2 B, per bucket rounded up to
  // a whole share), the GPU part comes back as fp32 (4 B).
  EXPECT_NEAR(double(d2h), 2.0 * double(Pp), 2.0 * 16);
  EXPECT_NEAR(double(h2d_grads), 4.0 * double(Pp - cpu), 4.0 * 16);
  // No path between the GPU step and any CPU step (Twin-Flow runs them concurrently).
  const auto& deps = g.dependencies();
  auto reaches = [&](TaskId from, TaskId to) {
    std::vector<char> seen(g.num_tasks(), 0);
    std::vector<TaskId> stack{from};
    while (!stack.empty()) {
      const TaskId u = stack.back();
      stack.pop_back();
      if (u == to) return true;
      for (auto e : boost::make_iterator_range(boost::out_edges(u, deps))) {
        const TaskId w = TaskId(boost::target(e, deps));
        if (!seen[w]) {
          seen[w] = 1;
          stack.push_back(w);
        }
      }
    }
    return false;
  };
  ASSERT_NE(gpu_step, kNone);
  ASSERT_FALSE(cpu_steps.empty());
  for (TaskId c : cpu_steps) {
    EXPECT_FALSE(reaches(gpu_step, c));
    EXPECT_FALSE(reaches(c, gpu_step));
  }
  // Host memory of the rank: 12 B Adam + 4 B fp32 gradients of the CPU part + the pinned fp16
  // gradient partition.
  const MemVector& host = g.initial_host_memory[g.rank_index(0)];
  EXPECT_EQ(host[int(MemCategory::OptimizerStates)], 12 * cpu);
  EXPECT_EQ(host[int(MemCategory::OffloadBuffers)], 4 * cpu + 2 * Pp);
}

TEST(Offload, AutoRatioIsTheSmallestThatFits) {
  // ZeRO-3 with `ratio: auto` on 2 GPUs, the small GPT above. Every parameter of the rank's
  // partition that moves to the CPU takes 12 B of Adam state and 4 B of fp32 gradient buffer
  // off the GPU (models/memory/zero_offload.h), so by the independent calculation
  //   peak(r) = expected_peak(r), and peak(r1) - peak(r2) = 16 (floor(r2 Pp) - floor(r1 Pp)).
  // A GPU whose capacity lies between peak(0.37) and peak(0.36) must get ratio 0.37, the
  // smallest on the 0.01 grid that fits.
  const std::string parallel =
      "{micro_batch_size: 2, global_batch_size: 4, recompute_granularity: full}";
  const std::string zero = "{stage: 3, reduce_bucket_size: 2000000, offload_optimizer: "
                           "{device: cpu, ratio: auto}}";
  const std::int64_t Pp = (stage_params(1, 0) + 1) / 2;
  auto cpu_params = [&](double r) { return std::int64_t(std::floor(r * double(Pp))); };
  auto expected_at = [&](double r) {
    Config c;
    c.stage = 3;
    c.dp = 2;
    c.m = 1;
    c.rc = Recompute::Full;
    c.ratio = r;
    c.reduce_bucket = 2'000'000;
    c.communicators = 1;
    return expected_peak(c);
  };
  // The independent peaks themselves fall by exactly 16 B per offloaded parameter.
  EXPECT_EQ(expected_at(0.36) - expected_at(0.37), 16 * (cpu_params(0.37) - cpu_params(0.36)));
  ASSERT_GT(expected_at(0.36) - expected_at(0.37), 1'000'000);  // a 1 MB gap to aim into

  SystemSpec sys = find_system("dgx-a100-80gb");
  sys.gpu.hbm_bytes = double(expected_at(0.37) + expected_at(0.36)) / 2;
  ValidScenario sc = validated(make(parallel, zero, 2));
  ASSERT_TRUE(sc->zero.offload_optimizer.ratio_auto);
  EXPECT_DOUBLE_EQ(resolve_offload_ratio(sc, sys, profile()), 0.37);
  EXPECT_TRUE(sc->zero.offload_optimizer.ratio_resolved);
  EXPECT_TRUE(sc->zero.offload_optimizer.ratio_auto);  // the summary says `auto` chose it

  // Capacity above the peak without offload: ratio 0. Below the peak with everything
  // offloaded: none fits, 1.0 (the run then reports oom).
  sys.gpu.hbm_bytes = double(expected_at(0.0));
  ValidScenario fits = validated(make(parallel, zero, 2));
  EXPECT_DOUBLE_EQ(resolve_offload_ratio(fits, sys, profile()), 0.0);
  sys.gpu.hbm_bytes = double(expected_at(1.0) - 1);
  ValidScenario never = validated(make(parallel, zero, 2));
  EXPECT_DOUBLE_EQ(resolve_offload_ratio(never, sys, profile()), 1.0);

  // `auto` is a planning step above the builder (models/run.h): the builder refuses a scenario
  // whose ratio was not resolved. Once resolved for the midpoint capacity, the graph steps
  // floor(0.37 Pp) parameters on the CPU (a hand count) and the rest on the GPU.
  sys.gpu.hbm_bytes = double(expected_at(0.37) + expected_at(0.36)) / 2;
  BuildOptions o;
  o.calibration = &profile();
  EXPECT_THROW(build_schedule_graph(validated(make(parallel, zero, 2)), sys, o), std::logic_error);
  ValidScenario resolved = validated(make(parallel, zero, 2));
  resolve_offload_ratio(resolved, sys, profile());
  const ScheduleGraph g = build_schedule_graph(resolved, sys, o);
  std::int64_t on_cpu = 0, on_gpu = 0;
  for (TaskId id : g.tasks_of_rank(0)) {
    if (g.task(id).kind == TaskKind::OptimizerCpu) on_cpu += g.op(id).params;
    if (g.task(id).kind == TaskKind::OptimizerGpu) on_gpu += g.op(id).params;
  }
  EXPECT_EQ(on_cpu, cpu_params(0.37));
  EXPECT_EQ(on_gpu, Pp - cpu_params(0.37));
}

TEST(Offload, BadSettingsAreInputErrors) {
  auto message = [](const std::function<void()>& f) -> std::string {
    try {
      f();
    } catch (const InputError& e) {
      return e.what();
    }
    return "(no error)";
  };
  const std::string ok_parallel = "{micro_batch_size: 2, global_batch_size: 4}";
  std::string m = message([&] {
    make(ok_parallel, "{stage: 3, offload_optimizer: {device: cpu, ratio: 1.5}}", 2);
  });
  EXPECT_NE(m.find("offload_optimizer.ratio"), std::string::npos) << m;
  EXPECT_NE(m.find("1.5"), std::string::npos) << m;
  m = message([&] { make(ok_parallel, "{stage: 3, offload_optimizer: {device: cpu, ratio: -0.1}}", 2); });
  EXPECT_NE(m.find("[0, 1]"), std::string::npos) << m;
  m = message([&] { make(ok_parallel, "{stage: 0, offload_optimizer: {device: cpu}}", 2); });
  EXPECT_NE(m.find("offload_optimizer.device"), std::string::npos) << m;
  EXPECT_NE(m.find("stage (0)"), std::string::npos) << m;
  m = message([&] { make(ok_parallel, "{stage: 2, offload_optimizer: {device: cpu, ratio: 0.5}}", 2); });
  EXPECT_NE(m.find("stage 3"), std::string::npos) << m;
  m = message([&] { make(ok_parallel, "{stage: 1, offload_optimizer: {device: cpu, ratio: auto}}", 2); });
  EXPECT_NE(m.find("auto"), std::string::npos) << m;
  // Host memory too small: a 175B-shaped model fully offloaded from one 8-GPU node needs
  // 18 B x 175e9 = 3.2 TB of host memory; a DGX A100 has 1-2 TB.
  const std::string yaml =
      "name: huge\nmodel: {num_layers: 96, hidden_size: 12288, num_attention_heads: 96, "
      "seq_length: 2048, padded_vocab_size: 51200}\nparallel: {micro_batch_size: 1, "
      "global_batch_size: 8, recompute_granularity: full}\ndeepspeed: {zero_optimization: "
      "{stage: 3, offload_optimizer: {device: cpu, ratio: 1.0}}}\ncluster: {system: "
      "dgx-a100-80gb, nodes: 1}\n";
  const Scenario huge = parse_scenario(yaml, "huge.yaml");
  m = message([&] { build(huge); });
  EXPECT_NE(m.find("huge.yaml"), std::string::npos) << m;
  EXPECT_NE(m.find("offload_optimizer.ratio"), std::string::npos) << m;
  EXPECT_NE(m.find("host memory"), std::string::npos) << m;
}

}  // namespace
