// DeepSeek-V3 as a Megatron-Core model section, and the bad-input table runner the MLA and
// MTP / DeepEP tests share (tests/models/test_mla.cpp, test_mtp_deepep.cpp).
#pragma once

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "models/errors.h"
#include "models/input/scenario.h"
#include "tests/support/paths.h"

namespace trainsim::test_support {

/// DeepSeek-V3 (its config.json): 61 layers, the first 3 dense, hidden 7168, 128 heads, q_lora
/// 1536, kv_lora 512, qk_nope 128, qk_rope 64, v 128, dense ffn 18432, 256 routed experts of
/// 2048 (top 8) and one shared expert of 2048, vocab 129280, untied; the keys of a `model:`
/// flow mapping, without braces.
inline const std::string kDeepSeekV3Model =
    "num_layers: 61, hidden_size: 7168, num_attention_heads: 128, multi_latent_attention: true, "
    "q_lora_rank: 1536, kv_lora_rank: 512, qk_head_dim: 128, qk_pos_emb_head_dim: 64, "
    "v_head_dim: 128, qk_layernorm: true, ffn_hidden_size: 18432, num_experts: 256, "
    "moe_router_topk: 8, moe_ffn_hidden_size: 2048, moe_shared_expert_intermediate_size: 2048, "
    "moe_layer_freq: '([0]*3+[1]*58)', moe_grouped_gemm: true, swiglu: true, "
    "normalization: RMSNorm, position_embedding_type: rope, "
    "untie_embeddings_and_output_weights: true, add_bias_linear: false, hidden_dropout: 0.0, "
    "attention_dropout: 0.0, attention_backend: flash, seq_length: 4096, "
    "padded_vocab_size: 129280";

/// A scenario the loader must refuse: its runtime, model and parallel mappings (keys without
/// braces), and a part of the message it must give.
struct RefusedScenario {
  std::string runtime, model, parallel, expect;
};

/// Loads each case on 4 DGX-H100 nodes from a file in `dir`; each must throw InputError naming
/// that file and holding `expect`.
inline void expect_each_refused(const ScratchDir& dir, const std::vector<RefusedScenario>& cases) {
  for (const RefusedScenario& c : cases) {
    const std::string path =
        dir.write("s.yaml", "runtime: " + c.runtime + "\nmodel: {" + c.model + "}\nparallel: {" +
                                c.parallel + "}\ncluster: {system: dgx-h100, nodes: 4}\n");
    try {
      load_scenario(path);
      ADD_FAILURE() << "accepted: " << c.model << " / " << c.parallel;
    } catch (const InputError& e) {
      const std::string msg = e.what();
      EXPECT_NE(msg.find(path), std::string::npos) << msg;
      EXPECT_NE(msg.find(c.expect), std::string::npos) << msg;
    }
  }
}

}  // namespace trainsim::test_support
