// One rank's shard of a Megatron-Core transformer layer (megatron/core/transformer/
// transformer_layer.py TransformerLayer with the Transformer Engine layer spec) as LibTorch
// code with the real arithmetic, in Megatron's [s, b, h] layout. The simulator's kernel list of
// these blocks is models/perf/flops_core.cpp; what differs is said in the replay's notes
// (core_layer_notes):
//   AttnFwd  norm (LayerNorm or RMSNorm) -> linear_qkv ([s, b, g, (a/g + 2) d], split per query
//            group as Megatron-Core's SelfAttention.get_query_key_value_tensors) -> q/k norms
//            (RMSNorm / LayerNorm over head_dim, where set) -> RoPE on q and k (rotate-half,
//            Megatron-Core's apply_rotary_pos_emb, base 10000) -> attention: causal, with a
//            sliding window where the layer has one; at::scaled_dot_product_attention on
//            LibTorch >= 2.0, else the explicit math path (Q K^T * scale, masked softmax in fp32,
//            dropout, P V); keys and values repeated per query group (GQA) -> linear_proj ->
//            bias-dropout-add with the block input
//   MlpFwd   pre-MLP norm -> dense: linear_fc1 (2 ffn with SwiGLU: silu(gate) * up) -> linear_fc2
//            -> bias-dropout-add; MoE (moe_mlp_forward): router GEMM -> top-k (softmax over the
//            k logits, Megatron-Core's TopKRouter with moe_router_pre_softmax off) -> sort-based
//            permutation (stable argsort of the local expert ids) -> tokens per expert copied to
//            the host (a device-to-host synchronisation on CUDA, as MoEAlltoAllTokenDispatcher's
//            .cpu()) -> with moe_grouped_gemm where the build has at::_grouped_mm (gemm_ops.h:
//            LibTorch >= 2.8, CUDA, bf16) one grouped GEMM for fc1 and one for fc2 (TEGroupedMLP),
//            else one GEMM pair per local expert (SequentialMLP) -> unpermute (index_add of the probability-weighted
//            outputs) -> shared expert -> bias-dropout-add
// The linears (linear_qkv, linear_proj, linear_fc1/fc2, experts, shared expert) go through
// gemm_ops.h: FP8 at::_scaled_mm with per-tensor current scaling where the scenario trains in FP8
// and the build and device have it, else torch::linear in the model's dtype. The router stays in
// the model's dtype (Megatron-Core's TopKRouter is not a TE module).
// Backward: autograd, per block, as transformer_layer.h.
//
// Internal to hw_backend/: includes LibTorch.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include <torch/torch.h>

#include "hw_backend/gemm_ops.h"
#include "hw_backend/transformer_layer.h"

namespace trainsim::hw {

/// One layer's shapes and features as this rank sees them (from its AttnFwd and MlpFwd ops).
struct CoreLayerSpec {
  std::int64_t b = 1, s = 1, h = 1;  ///< s: this rank's tokens (s / cp)
  std::int64_t heads = 1, kv_heads = 1, head_dim = 1;
  std::int64_t ffn = 1;  ///< dense MLP width on this rank
  bool rmsnorm = false, rope = false, qk_norm = false, swiglu = false, bias = true;
  /// With swiglu (a gated MLP): GPT-OSS's quick-GELU gate, clamp (0: none) and linear offset
  /// (Megatron-Core mlp.py glu: quick_gelu(min(g, v)) * (clamp(l, -v, v) + offset)).
  bool quick_geglu = false;
  float glu_clamp = 0, glu_offset = 0;
  std::int64_t window = 0;  ///< keys back per query; 0 = full causal
  // Mixture of experts (moe = the layer's MLP is an MoE layer)
  bool moe = false;
  std::int64_t experts_local = 0, num_experts = 0, topk = 0, expert_ffn = 0, shared_ffn = 0;
  // GEMMs (gemm_ops.h): FP8 linears where the scenario trains in FP8, one grouped GEMM for the
  // local experts (moe_grouped_gemm); each only where the build and the device have it.
  GemmFp8 fp8 = GemmFp8::Off;
  bool grouped_gemm = false;
};

/// The parameters of one layer by name (Megatron-Core's state-dict names, shortened).
struct CoreWeights {
  std::map<std::string, torch::Tensor> t;
  const torch::Tensor& at(const std::string& name) const { return t.at(name); }
  torch::Tensor get(const std::string& name) const {  ///< undefined when absent
    auto it = t.find(name);
    return it == t.end() ? torch::Tensor() : it->second;
  }
};

/// Name and shape of each parameter of the layer, in flat-buffer order. Their element count is
/// models/memory/memory_model.h layer_params_at (MoE: moe_layer_params_per_rank).
std::vector<std::pair<std::string, std::vector<std::int64_t>>> core_param_shapes(const CoreLayerSpec& c);

/// Megatron-Core's initialization: init_method_normal(0.02) for the input-side GEMMs and the
/// router, output_layer_init_method (0.02 / sqrt(2 num_layers)) for linear_proj and linear_fc2,
/// norms weight 1 bias 0, biases 0; drawn from `gen` on the CPU.
void init_core_weights(CoreWeights& w, const CoreLayerSpec& c, std::int64_t num_layers,
                       torch::Generator& gen);

/// RoPE tables cos, sin [s, 1, 1, head_dim] for positions 0..s-1 (Megatron-Core
/// RotaryEmbedding, rotary_base 10000, rotary_percent 1).
std::pair<torch::Tensor, torch::Tensor> rope_tables(std::int64_t s, std::int64_t head_dim,
                                                    const torch::TensorOptions& options);

/// Attention mask [s, s], true where a query must not attend: above the diagonal, and with a
/// window w > 0 more than w keys back (Megatron-Core's window_size (w, 0)).
torch::Tensor window_mask(std::int64_t s, std::int64_t window, const torch::TensorOptions& options);

/// RMSNorm (Zhang & Sennrich 2019; Transformer Engine's RMSNorm, eps 1e-5): x / rms(x) * w,
/// computed in fp32.
torch::Tensor rms_norm(const torch::Tensor& x, const torch::Tensor& w, double eps = kLayerNormEps);

/// Whether this LibTorch has at::scaled_dot_product_attention (2.0 on), for the notes.
bool have_sdpa();

/// What the MoE forward saw (for the notes and the host timeline).
struct MoeStats {
  std::int64_t d2h_copies = 0;  ///< token-count device-to-host copies
  std::int64_t expert_gemms = 0;
  bool grouped = false;  ///< the experts ran as grouped GEMMs (gemm_ops.h grouped_linear)
};

/// Attention block forward (see the file comment). `mask` from window_mask for the layer's
/// window; `cos`/`sin` from rope_tables (unused without RoPE).
BlockState core_attn_forward(const CoreWeights& w, const torch::Tensor& input, const CoreLayerSpec& c,
                             const torch::Tensor& mask, const torch::Tensor& cos,
                             const torch::Tensor& sin, const Dropout& p);
/// MLP block forward: dense or MoE by c.moe.
BlockState core_mlp_forward(const CoreWeights& w, const torch::Tensor& input, const CoreLayerSpec& c,
                            const Dropout& p, MoeStats* stats);

}  // namespace trainsim::hw
