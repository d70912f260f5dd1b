// The GPU memory peak over a SimGrid-timed iteration equals the timing-independent
// program-order peak (models/zero_offload.h program_order_peak_gpu_bytes) that `ratio: auto`
// and tests/models/test_memory.cpp use: the builder attaches every release to a task that cannot
// end before the memory is free. Checked on ZeRO 0-3, Twin-Flow offload and a 1F1B pipeline,
// where streams overlap (prefetching all-gathers, bucket reduce-scatters, D2H copies, the
// concurrent CPU and GPU optimizer steps).
#include <gtest/gtest.h>

#include <string>

#include "models/calibration.h"
#include "models/cost_model.h"
#include "models/graph_builder.h"
#include "models/memory_timeline.h"
#include "models/zero_offload.h"
#include "sim/executor.h"

namespace trainsim::sim {
namespace {

Scenario make(const std::string& parallel, const std::string& zero, int gpus) {
  const std::string yaml =
      "name: memsim\nmodel: {num_layers: 8, hidden_size: 1024, num_attention_heads: 16, "
      "seq_length: 1024, padded_vocab_size: 8192}\nparallel: " + parallel +
      "\ndeepspeed: {zero_optimization: " + zero +
      "}\ncluster: {system: dgx-a100-80gb, nodes: 1, gpus_per_node: " + std::to_string(gpus) + "}\n";
  return parse_scenario(yaml, "memsim.yaml");
}

void check(const std::string& what, const Scenario& sc) {
  const SystemSpec& sys = find_system(sc.cluster.system);
  const CalibrationProfile prof = default_calibration(sys.gpu.name);
  BuildOptions o;
  o.calibration = &prof;
  const ScheduleGraph g = build_schedule_graph(sc, sys, o);
  const CostModel cost(sys, prof);
  const ExecutionRecord rec = simulate(g, sc, sys, cost);
  const MemoryTimeline m = build_memory_timeline(g, rec, sc.cluster.gpus_per_node);
  std::int64_t simulated = 0;
  for (const auto& s : m.gpu) simulated = std::max(simulated, s.peak_bytes);
  const std::int64_t program_order = program_order_peak_gpu_bytes(g);
  EXPECT_NEAR(double(simulated) / double(program_order), 1.0, 0.02)
      << what << ": simulated " << simulated << " B, program order " << program_order << " B";
}

TEST(MemorySim, SimulatedPeakEqualsProgramOrderPeak) {
  check("zero0 1f1b", make("{pipeline_model_parallel_size: 4, micro_batch_size: 1, global_batch_size: 8}",
                           "{stage: 0}", 4));
  check("zero1", make("{micro_batch_size: 1, global_batch_size: 4}", "{stage: 1}", 4));
  check("zero2", make("{micro_batch_size: 1, global_batch_size: 8}",
                      "{stage: 2, reduce_bucket_size: 5000000}", 4));
  check("zero3 prefetch 1",
        make("{micro_batch_size: 1, global_batch_size: 8, recompute_granularity: full}",
             "{stage: 3, reduce_bucket_size: 5000000, stage3_prefetch_bucket_size: 1000}", 4));
  check("zero3 twin-flow 0.3",
        make("{micro_batch_size: 2, global_batch_size: 8, recompute_granularity: full}",
             "{stage: 3, reduce_bucket_size: 5000000, sub_group_size: 10000000, "
             "offload_optimizer: {device: cpu, ratio: 0.3}}",
             4));
  check("zero2 offload 1 gpu",
        make("{micro_batch_size: 2, global_batch_size: 4}",
             "{stage: 2, reduce_bucket_size: 5000000, offload_optimizer: {device: cpu}}", 1));
}

}  // namespace
}  // namespace trainsim::sim
