// Test fixture: a synthetic pipeline-parallel schedule graph of any size, built by hand through the
// ScheduleGraph API, for the simulator's speed and memory benchmark (bench/bench_sim_scale)
// and its tests. Folded (the default) like the builder's folded graphs: one simulated rank per
// pipeline stage stands for a tensor-parallel group of `tp` GPUs in one node, whose TP
// all-reduces go to the (not simulated) ring successor; or unfolded, every GPU simulated.
//
// Per stage and microbatch (GPipe order: all forwards, then all backwards):
//   [recv from the previous stage] -> per layer: attn, TP all-reduce, mlp, TP all-reduce
//   -> [send to the next stage]; the backward mirrors it toward stage 0.
// Streams: compute (attn/mlp), tp-comm (all-reduces), pp-comm (send/recv).
#pragma once

#include <cstdint>

#include "models/input/scenario.h"
#include "models/graph/schedule_graph.h"

namespace trainsim::testing {

struct SyntheticPipelineSpec {
  std::int64_t stages = 64;            ///< pipeline stages = simulated ranks
  std::int64_t tp = 8;                 ///< GPUs each simulated rank stands for (one node)
  std::int64_t layers_per_stage = 2;
  std::int64_t tasks_per_rank = 16384;  ///< approximate; sets the number of microbatches
  std::int64_t gpus_per_node = 8;
  // Shapes of a GPT layer shard (Megatron names: b, s, h, a/tp).
  std::int64_t micro_batch = 1;
  std::int64_t seq = 2048;
  std::int64_t hidden = 4096;
  std::int64_t heads = 32;
  std::string system = "dgx-a100-80gb";
  /// true: one simulated rank per stage (TP rank 0); false: all tp ranks of every stage are
  /// simulated (TP rank i sends to TP rank i of the next stage), for folded-vs-unfolded tests.
  bool fold = true;
};

struct SyntheticPipeline {
  ScheduleGraph graph;
  Scenario scenario;           ///< cluster (system, nodes, gpus_per_node) that holds it
  std::int64_t microbatches = 0;
};

/// Builds (and finalizes) the graph. Throws InputError for sizes that do not fit (tp not
/// dividing gpus_per_node, more than 65535 microbatches, ...).
SyntheticPipeline synthetic_pipeline_graph(const SyntheticPipelineSpec& spec);

}  // namespace trainsim::testing
