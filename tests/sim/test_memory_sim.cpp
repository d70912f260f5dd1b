// The GPU memory peak over a SimGrid-timed iteration, against the independent closed form of
// tests/support/memory_closed_form.h (Korthikanti et al. activations, ZeRO state bytes,
// DeepSpeed bucket / gather / offload buffers along Megatron's pipeline order). The closed form
// is the peak of a rank that runs its tasks one after another; the builder attaches every
// release to a task that cannot end before the memory is free, so the timed peak, where streams
// overlap (prefetching all-gathers, bucket reduce-scatters, D2H copies, the concurrent CPU and
// GPU optimizer steps), must be the same, byte for byte. Checked on ZeRO 0-3, Twin-Flow offload and a 1F1B
// pipeline (every stage).
#include <gtest/gtest.h>

#include <algorithm>
#include <string>

#include "models/hardware/calibration.h"
#include "models/perf/cost_model.h"
#include "models/builder/graph_builder.h"
#include "models/outputs/memory_timeline.h"
#include "sim/executor.h"
#include "tests/support/memory_closed_form.h"
#include "tests/support/scenario_yaml.h"

namespace trainsim::sim {
namespace {

using test_support::PeakConfig;

// GPT: l = 8, h = 1024, a = 16, s = 1024, V = 8192.
constexpr test_support::GptModel kModel{8, 1024, 16, 1024, 8192};

Scenario make(const std::string& parallel, const std::string& zero, int gpus) {
  return test_support::gpt_scenario("memsim", kModel, parallel, zero, gpus);
}

/// SimGrid's largest GPU peak over the ranks against the largest closed-form peak over the
/// pipeline stages (`c` with rank_stage set per stage; `communicators(stage)` counted by hand).
template <class Communicators>
void check(const std::string& what, const Scenario& sc, PeakConfig c,
           Communicators communicators) {
  const SystemSpec& sys = find_system(sc.cluster.system);
  const CalibrationProfile prof = default_calibration(sys.gpu.name);
  BuildOptions o;
  o.calibration = &prof;
  const ScheduleGraph g = build_schedule_graph(validated(sc), sys, o);
  const CostModel cost(sys, prof);
  const ExecutionRecord rec = simulate(g, sc, sys, cost);
  const MemoryTimeline m = build_memory_timeline(g, rec, sc.cluster.gpus_per_node);
  std::int64_t simulated = 0;
  for (const auto& s : m.gpu) simulated = std::max(simulated, s.peak_bytes);

  const test_support::ClosedFormMemory closed(kModel.num_layers, kModel.hidden_size,
                                              kModel.num_attention_heads, kModel.seq_length,
                                              kModel.padded_vocab_size,
                                              sc.parallel.micro_batch_size, prof);
  std::int64_t expected = 0;
  for (std::int64_t stage = 0; stage < c.pp; ++stage) {
    c.rank_stage = stage;
    c.communicators = communicators(stage);
    expected = std::max(expected, closed.expected_peak(c));
  }
  // Byte for byte: the closed form counts every allocation the builder makes.
  EXPECT_EQ(simulated, expected) << what;
}

PeakConfig config(int stage, std::int64_t dp, std::int64_t microbatches) {
  PeakConfig c;
  c.stage = stage;
  c.dp = dp;
  c.m = microbatches;
  return c;
}

TEST(MemorySim, SimulatedPeakEqualsTheClosedForm) {
  {
    PeakConfig c = config(0, 1, 8);
    c.pp = 4;
    // Every stage: two NCCL communicators (stage 0: next stage + tied embedding; 1, 2: previous
    // and next stage; 3: previous stage + tied embedding).
    check("zero0 1f1b", make("{pipeline_model_parallel_size: 4, micro_batch_size: 1, "
                             "global_batch_size: 8}", "{stage: 0}", 4),
          c, [](std::int64_t) { return 2; });
  }
  auto dp_only = [](std::int64_t) { return 1; };  // the data-parallel communicator
  check("zero1", make("{micro_batch_size: 1, global_batch_size: 4}", "{stage: 1}", 4),
        config(1, 4, 1), dp_only);
  {
    PeakConfig c = config(2, 4, 2);
    c.reduce_bucket = 5'000'000;
    check("zero2", make("{micro_batch_size: 1, global_batch_size: 8}",
                        "{stage: 2, reduce_bucket_size: 5000000}", 4),
          c, dp_only);
  }
  {
    PeakConfig c = config(3, 4, 2);
    c.rc = Recompute::Full;
    c.reduce_bucket = 5'000'000;
    c.prefetch = 1000;
    check("zero3 prefetch 1",
          make("{micro_batch_size: 1, global_batch_size: 8, recompute_granularity: full}",
               "{stage: 3, reduce_bucket_size: 5000000, stage3_prefetch_bucket_size: 1000}", 4),
          c, dp_only);
  }
  {
    PeakConfig c = config(3, 4, 1);
    c.rc = Recompute::Full;
    c.reduce_bucket = 5'000'000;
    c.ratio = 0.3;
    check("zero3 twin-flow 0.3",
          make("{micro_batch_size: 2, global_batch_size: 8, recompute_granularity: full}",
               "{stage: 3, reduce_bucket_size: 5000000, sub_group_size: 10000000, "
               "offload_optimizer: {device: cpu, ratio: 0.3}}",
               4),
          c, dp_only);
  }
  {
    PeakConfig c = config(2, 1, 2);
    c.reduce_bucket = 5'000'000;
    c.ratio = 1.0;
    check("zero2 offload 1 gpu",
          make("{micro_batch_size: 2, global_batch_size: 4}",
               "{stage: 2, reduce_bucket_size: 5000000, offload_optimizer: {device: cpu}}", 1),
          c, [](std::int64_t) { return 0; });
  }
}

}  // namespace
}  // namespace trainsim::sim
