// The small MoE scenario of the MoE kernel and token-dropping tests (test_moe_kernels.cpp,
// test_moe_capacity.cpp) and the op of its graph they look at.
#pragma once

#include <string>

#include <gtest/gtest.h>

#include "models/builder/graph_builder.h"
#include "models/hardware/hardware.h"
#include "models/input/scenario.h"
#include "tests/support/scenario_yaml.h"

namespace trainsim::test_support {

/// 8 experts, top-2, 4096 tokens on a rank (micro batch 1, seq 4096, no TP / CP), hidden 512,
/// expert MLP 256 with SwiGLU (fc1 512 wide), grouped GEMMs, bf16: 4096 x 2 = 8192 token copies
/// on a rank, 1024 per expert when balanced.
inline const char* const kSmallMoeModel =
    "num_layers: 2, hidden_size: 512, num_attention_heads: 8, num_query_groups: 4, "
    "kv_channels: 64, ffn_hidden_size: 1536, num_experts: 8, moe_router_topk: 2, "
    "moe_ffn_hidden_size: 256, moe_grouped_gemm: true, swiglu: true, normalization: RMSNorm, "
    "position_embedding_type: rope, untie_embeddings_and_output_weights: true, "
    "add_bias_linear: false, hidden_dropout: 0.0, attention_dropout: 0.0, "
    "attention_backend: flash, seq_length: 4096, padded_vocab_size: 4096";

/// kSmallMoeModel with `model_extra` (", key: value" model keys) added, bf16, micro batch 1,
/// global batch 8, expert parallelism `ep`, read as the file `source`.
inline Scenario small_moe_scenario(const std::string& model_extra, int ep,
                                   const std::string& source) {
  return parse_scenario(
      core_scenario_yaml(std::string(kSmallMoeModel) + model_extra,
                         "precision: bf16, micro_batch_size: 1, global_batch_size: 8, "
                         "expert_model_parallel_size: " + std::to_string(ep)),
      source);
}

/// The first op of the first simulated rank, in the unfolded graph of `sc`, that `pick` accepts.
template <typename Pick>
OpDesc first_rank_op(const Scenario& sc, Pick pick) {
  BuildOptions opt;
  opt.fold = false;
  const ScheduleGraph g = build_schedule_graph(validated(sc), cluster_system(sc.cluster), opt);
  for (TaskId id = 0; id < g.num_tasks(); ++id)
    if (g.task(id).rank == g.simulated_ranks().front() && pick(g.op(id))) return g.op(id);
  ADD_FAILURE() << "no such op";
  return {};
}

}  // namespace trainsim::test_support
