// A tiny GPT scenario for builder tests: 8 layers, hidden 256, 8 heads, 128 tokens, vocabulary
// 1024 on DGX-A100-80GB GPUs, with the parallel plan and DeepSpeed settings given as YAML.
// Closed forms for its sizes (Megatron GPT, tied embeddings, t = 1):
//   layer parameters 12 h^2 + 13 h = 789,760; embedding V h + s h = 294,912; final LayerNorm 2h.
#pragma once

#include <string>

#include "models/builder/graph_builder.h"
#include "models/hardware/hardware.h"
#include "models/input/scenario.h"

namespace trainsim::testing {

constexpr std::int64_t kTinyHidden = 256, kTinyLayers = 8, kTinySeq = 128, kTinyVocab = 1024;
constexpr std::int64_t kTinyLayerParams = 12 * kTinyHidden * kTinyHidden + 13 * kTinyHidden;
constexpr std::int64_t kTinyEmbeddingParams = kTinyVocab * kTinyHidden + kTinySeq * kTinyHidden;
/// All parameters of one pipeline stage holding the whole model (pp = 1, t = 1).
constexpr std::int64_t kTinyParams =
    kTinyLayers * kTinyLayerParams + kTinyEmbeddingParams + 2 * kTinyHidden;

/// `parallel_and_zero`: YAML for the `parallel:` and `deepspeed:` keys; `gpus`: GPUs of the node.
inline Scenario tiny_scenario(const std::string& parallel_and_zero, int gpus) {
  const std::string yaml = R"(
name: tiny
model: {num_layers: 8, hidden_size: 256, num_attention_heads: 8, seq_length: 128, padded_vocab_size: 1024}
cluster: {system: dgx-a100-80gb, nodes: 1, gpus_per_node: )" +
                           std::to_string(gpus) + "}\n" + parallel_and_zero;
  return parse_scenario(yaml, "tiny.yaml");
}

inline ScheduleGraph build_graph(const Scenario& sc, bool fold = false) {
  BuildOptions o;
  o.fold = fold;
  return build_schedule_graph(validated(sc), find_system(sc.cluster.system), o);
}

}  // namespace trainsim::testing
