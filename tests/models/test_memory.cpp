// Memory model and ZeRO / offload schedule (models/zero_offload.h, models/graph_builder.cpp):
// the GPU peak of a rank, from the graph's memory effects (models/memory_timeline.h with a
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

#include "models/calibration.h"
#include "models/graph_builder.h"
#include "models/hardware.h"
#include "models/memory_timeline.h"
#include "models/pipeline_schedule.h"
#include "models/scenario.h"
#include "models/run.h"
#include "models/zero_offload.h"

using namespace trainsim;

namespace {

// Small GPT: l = 8, h = 512, a = 8, s = 512, V = 4096, micro batch 2.
constexpr std::int64_t L = 8, H = 512, A = 8, S = 512, V = 4096, B = 2;

Scenario make(const std::string& parallel, const std::string& zero, std::int64_t gpus,
              const std::string& system = "dgx-a100-80gb") {
  const std::string yaml = "name: mem\nmodel: {num_layers: " + std::to_string(L) +
                           ", hidden_size: " + std::to_string(H) +
                           ", num_attention_heads: " + std::to_string(A) +
                           ", seq_length: " + std::to_string(S) +
                           ", padded_vocab_size: " + std::to_string(V) + "}\nparallel: " + parallel +
                           "\ndeepspeed: {zero_optimization: " + zero + "}\ncluster: {system: " +
                           system + ", nodes: 1, gpus_per_node: " + std::to_string(gpus) + "}\n";
  return parse_scenario(yaml, "mem.yaml");
}

const CalibrationProfile& profile() {
  static const CalibrationProfile p = default_calibration("A100-SXM4-80GB");
  return p;
}

ScheduleGraph build(const Scenario& sc) {
  BuildOptions o;
  o.calibration = &profile();
  return build_schedule_graph(sc, find_system(sc.cluster.system), o);
}

/// Every rank runs its tasks back to back in program order: task k of a rank in [k, k+1).
ExecutionRecord serial_record(const ScheduleGraph& g) {
  ExecutionRecord r;
  r.start_s.assign(g.num_tasks(), NAN);
  r.end_s.assign(g.num_tasks(), NAN);
  for (RankId rank : g.simulated_ranks()) {
    double t = 0;
    for (TaskId id : g.tasks_of_rank(rank)) {
      r.start_s[id] = t;
      r.end_s[id] = t + 1;
      t += 1;
    }
  }
  return r;
}

std::int64_t graph_peak(const Scenario& sc, RankId rank) {
  const ScheduleGraph g = build(sc);
  const MemoryTimeline m =
      build_memory_timeline(g, serial_record(g), sc.cluster.gpus_per_node);
  return m.gpu_of(rank).peak_bytes;
}

// ------------------------------------------------------------------ independent calculation
// Parameters (tp = 1): per layer QKV 3h^2+3h, projection h^2+h, fc1 4h^2+4h, fc2 4h^2+h, two
// LayerNorms 4h = 12h^2 + 13h; embedding V h + s h; final LayerNorm 2h; a second copy of the
// word embedding on the last stage when pp > 1 (tied).
std::int64_t layer_params() { return 12 * H * H + 13 * H; }
std::int64_t stage_params(std::int64_t pp, std::int64_t stage) {
  std::int64_t p = (L / pp) * layer_params();
  if (stage == 0) p += V * H + S * H;
  if (stage == pp - 1) p += 2 * H + (pp > 1 ? V * H : 0);
  return p;
}

// Activations in bytes (Korthikanti et al. Table 2, t = 1): attention 13sbh + 5as^2b, MLP
// 21sbh; selective recomputation drops 5as^2b; full recomputation stashes 2sbh per layer and
// materializes one layer's full activations during its backward.
constexpr std::int64_t sbh = S * B * H;
std::int64_t attn_full() { return 13 * sbh + 5 * A * S * S * B; }
std::int64_t mlp_full() { return 21 * sbh; }
std::int64_t logits_act() { return 2 * sbh + 4 * S * B * V; }  // final LN input + fp32 logits
std::int64_t embed_act() { return sbh; }                        // embedding dropout output mask

/// A running total with its maximum.
struct Ledger {
  std::int64_t cur = 0, peak = 0;
  void add(std::int64_t b) {
    cur += b;
    peak = std::max(peak, cur);
  }
};

struct Config {
  int stage = 0;
  std::int64_t pp = 1, dp = 1, v = 1, m = 1;
  Recompute rc = Recompute::None;
  double ratio = -1;  // < 0: no offload
  std::int64_t rank_stage = 0;
  std::int64_t reduce_bucket = 500'000'000;
  std::int64_t prefetch = 50'000'000;  // stage3_prefetch_bucket_size
  int communicators = 0;  // counted by hand per configuration
};

/// Peak GPU bytes of the rank at pipeline stage c.rank_stage, walking Megatron's pipeline order
/// with DeepSpeed's allocation rules (stated in models/zero_offload.h), written independently
/// of the builder.
std::int64_t expected_peak(const Config& c) {
  const std::int64_t P = stage_params(c.pp, c.rank_stage);
  const std::int64_t Pp = c.stage >= 1 ? (P + c.dp - 1) / c.dp : P;
  const bool offload = c.ratio >= 0;
  const std::int64_t cpu = offload ? std::int64_t(std::floor(c.ratio * double(Pp))) : 0;
  const std::int64_t gpu = Pp - cpu;
  // Model states.
  std::int64_t states = 0;
  states += (c.stage >= 3 ? Pp : P) * 2;                                   // fp16 parameters
  if (c.stage <= 1) states += P * 2;                                        // fp16 gradients
  else if (c.stage == 2) states += gpu * 2;                                 // partition
  else states += offload ? gpu * 4 : Pp * 2;                                // fp32 / fp16 partition
  states += (c.stage == 0 ? P : gpu) * 12;                                  // Adam
  states += std::int64_t(profile().framework_overhead_bytes);
  states += c.communicators * std::int64_t(profile().nccl_buffer_bytes_per_communicator);

  Ledger led;
  led.add(states);
  const bool full = c.rc == Recompute::Full;
  const std::int64_t attn_kept = c.rc == Recompute::Selective ? 13 * sbh : attn_full();
  const std::int64_t lpc = L / (c.pp * c.v);
  const std::int64_t buckets = c.stage >= 2 ? 2 * std::min(c.reduce_bucket, P) * 2 : 0;
  const std::int64_t share = (std::min(c.reduce_bucket, P) + c.dp - 1) / c.dp;
  const std::int64_t staging =
      c.stage >= 3 && offload ? 2 * share : (offload && cpu > 0 ? 4 * share : 0);
  const bool gathers = c.stage >= 3 && c.dp > 1;
  auto gathered = [&](std::int64_t elems) { return gathers ? 2 * elems - (2 * elems) / c.dp : 0; };
  // Layers gathered ahead: ceil(stage3_prefetch_bucket_size (5e7) / layer params).
  const std::int64_t depth = (c.prefetch + layer_params() - 1) / layer_params();
  bool buffers = false;

  // ZeRO-3 pass: issue the gathers of units up to k + depth, release unit k later.
  std::vector<std::int64_t> units;
  std::size_t issued = 0;
  auto need = [&](std::size_t k) {
    for (; issued < std::min(units.size(), k + 1 + depth); ++issued) led.add(gathered(units[issued]));
  };

  const auto order = pipeline_order(
      c.v > 1 ? PipelineSchedule::Interleaved : PipelineSchedule::OneFOneB, int(c.pp),
      int(c.rank_stage), int(c.m), int(c.v));
  for (const PipelineStep& st : order) {
    const std::int64_t vstage = st.chunk * c.pp + c.rank_stage;
    const bool first = vstage == 0, last = vstage == c.pp * c.v - 1;
    if (st.forward) {
      units.clear();
      issued = 0;
      if (c.stage >= 3) {
        units.push_back(V * H + S * H);
        for (int l = 0; l < L; ++l) units.push_back(layer_params());
        units.push_back(V * H);
      }
      if (first) {
        if (gathers) need(0);
        led.add(embed_act());
        led.add(-gathered(units.empty() ? 0 : units[0]));
      }
      for (std::int64_t l = 0; l < lpc; ++l) {
        if (gathers) need(std::size_t(1 + vstage * lpc + l));
        if (full) {
          led.add(2 * sbh);
          led.add(attn_full());
          led.add(-attn_full());
          led.add(mlp_full());
          led.add(-mlp_full());
        } else {
          led.add(attn_kept);
          led.add(mlp_full());
        }
        if (gathers) led.add(-gathered(layer_params()));
      }
      if (last) {
        if (gathers) need(std::size_t(1 + L));
        led.add(logits_act());
        if (gathers) led.add(-gathered(V * H));
      }
    } else {
      units.clear();
      issued = 0;
      if (c.stage >= 3) {
        units.push_back(V * H);
        for (int l = 0; l < L; ++l) units.push_back(layer_params());
        units.push_back(V * H + S * H);
      }
      if (last) {
        if (gathers) need(0);
        if (c.stage >= 2 && !buffers) {
          led.add(buckets);
          led.add(staging);
          buffers = true;
        }
        if (c.stage >= 2) led.add(V * H * 2);  // tied word-embedding gradient
        led.add(2 * S * B * V);                  // gradient of the logits, during their backward
        led.add(-logits_act() - 2 * S * B * V);
        if (gathers) led.add(-gathered(V * H));
      }
      for (std::int64_t l = lpc - 1; l >= 0; --l) {
        const std::int64_t gl = vstage * lpc + l;
        if (gathers) need(std::size_t(L - gl));
        if (full) {
          led.add(attn_full());
          led.add(mlp_full());
        }
        if (c.stage >= 2) led.add(2 * layer_params());  // the layer's gradients
        led.add(-mlp_full());
        led.add(-(full ? attn_full() + 2 * sbh : attn_kept));
        if (c.stage >= 2) led.add(-2 * layer_params());
        if (gathers) led.add(-gathered(layer_params()));
      }
      if (first) {
        if (gathers) need(std::size_t(1 + L));
        if (c.stage >= 2) led.add(2 * S * H);
        led.add(-embed_act());
        if (c.stage >= 2) led.add(-2 * (V * H + S * H));
        if (gathers) led.add(-gathered(V * H + S * H));
      }
    }
  }
  // Stage 1: the buffers appear with the first reduction (offload staging only).
  if (c.stage == 1 && !buffers) led.add(staging);
  // Optimizer step: fp32 gradients of the stepped part (Megatron fp16 main_grad.float();
  // DeepSpeed's fp32 partition; persistent already with ZeRO-3 offload), then the bucket
  // buffers are released.
  const std::int64_t fp32 = c.stage == 0 ? 4 * P : (c.stage >= 3 && offload ? 0 : 4 * gpu);
  if (gpu > 0) led.add(fp32);
  return led.peak;
}

void expect_peak(const std::string& what, const Scenario& sc, RankId rank, const Config& c) {
  const double got = double(graph_peak(sc, rank));
  const double want = double(expected_peak(c));
  EXPECT_NEAR(got / want, 1.0, 0.02) << what << ": graph " << got << " B, closed form " << want << " B";
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
      build_memory_timeline(g, serial_record(g), sc.cluster.gpus_per_node);
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
  const Scenario sc = make(
      "{pipeline_model_parallel_size: 2, micro_batch_size: 2, global_batch_size: 8, "
      "num_layers_per_virtual_pipeline_stage: 2, recompute_granularity: full}",
      "{stage: 0}", 2);
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
  // A model whose optimizer cannot stay on a 40 GB GPU: the 13B OPT scenario's shape on 2 GPUs.
  Scenario sc = load_scenario(std::string(TRAINSIM_SOURCE_DIR) +
                              "/scenarios/offload/opt-13b_zero3_dp8_offload-auto.yaml");
  const SystemSpec& sys = find_system(sc.cluster.system);
  const CalibrationProfile prof = default_calibration(sys.gpu.name);
  Scenario small = load_scenario(
      std::string(TRAINSIM_SOURCE_DIR) + "/scenarios/offload/opt-13b_zero3_dp8_offload-auto.yaml",
      {{"cluster.gpus_per_node", "4"}, {"parallel.global_batch_size", "12"}});
  const double r = resolve_offload_ratio(small, sys, prof);
  EXPECT_TRUE(small.zero.offload_optimizer.ratio_resolved);
  EXPECT_GT(r, 0.0);
  EXPECT_LT(r, 1.0);
  BuildOptions o;
  o.calibration = &prof;
  auto peak_at = [&](double ratio) {
    Scenario t = small;
    t.zero.offload_optimizer.ratio = ratio;
    return double(program_order_peak_gpu_bytes(build_schedule_graph(t, sys, o)));
  };
  EXPECT_LE(peak_at(r), sys.gpu.hbm_bytes);
  EXPECT_GT(peak_at(r - 0.01), sys.gpu.hbm_bytes);
  // The GPU peak falls as the ratio rises (12 B of Adam state and 4 B of fp32 gradient per
  // parameter leave the GPU).
  EXPECT_GT(peak_at(0.2), peak_at(0.6));
  // `auto` is a planning step above the builder (models/run.h): the builder refuses a
  // scenario whose ratio was not resolved.
  EXPECT_THROW(build_schedule_graph(sc, sys, o), std::logic_error);
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
