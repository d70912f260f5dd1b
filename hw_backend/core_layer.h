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
//            Multi-head latent attention (c.mla; Megatron-Core multi_latent_attention.py
//            MLASelfAttention, see core_mla_attention below) in place of linear_qkv .. RoPE:
//            down projections, latent norms, up projections, RoPE on the rope columns only
//   MlpFwd   pre-MLP norm -> dense: linear_fc1 (2 ffn with SwiGLU: silu(gate) * up) -> linear_fc2
//            -> bias-dropout-add; MoE (moe_mlp_forward): router GEMM -> top-k (route_topk:
//            softmax over the k logits, or sigmoid scores with the expert bias; group-limited
//            where set; Megatron-Core's TopKRouter with moe_router_pre_softmax off) -> sort-based
//            token dropping where the model has a capacity factor (apply_token_dropping) ->
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

#include "hw_backend/expert_wgrad.h"
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
  /// Token dropping (model.moe_expert_capacity_factor; 0: dropless), which copies drop
  /// (moe_token_drop_policy position: the latest tokens; else the lowest probabilities) and
  /// padding every expert to its capacity (moe_pad_expert_input_to_capacity).
  double capacity_factor = 0;
  bool drop_by_position = false, pad_to_capacity = false;
  /// The router (route_topk): sigmoid scores (else softmax over the k chosen logits),
  /// group-limited top-k (router_groups groups, router_group_topk of them per token; 0: none),
  /// the expert bias of aux-loss-free balancing (CoreWeights "router.expert_bias").
  bool sigmoid = false, expert_bias = false;
  std::int64_t router_groups = 0, router_group_topk = 0;
  // Multi-head latent attention (mla): head_dim is the query/key head dimension qk_head_dim +
  // qk_pos_emb_head_dim; q_lora 0: no q compression (one linear_q_proj); kv_lora, the RoPE
  // width qk_rope and the value head dimension v_dim; latent_norm: qk_layernorm's norms of
  // the q and kv latents (fused into the up projections in Transformer Engine's spec);
  // up_rerun: --recompute-modules mla_up_proj (the up projections, their norms and RoPE
  // re-run in the backward, q, k, v not kept).
  bool mla = false, latent_norm = false, up_rerun = false;
  std::int64_t q_lora = 0, kv_lora = 0, qk_rope = 0, v_dim = 0;
  /// parallel.delay_wgrad_compute (expert_wgrad.h): the experts' weight gradients held back
  /// from the MoE MLP backward in a DeferredWgrad.
  bool delay_wgrad = false;
  /// model.moe_shared_expert_overlap: the shared expert (shared_ffn wide) runs in tasks of its
  /// own (SharedApartState below), not inside moe_experts.
  bool shared_apart = false;
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
  /// Token dropping: routed copies (T k per forward), those dropped over capacity, the
  /// zero-probability padding copies, and the last forward's per-expert capacity.
  std::int64_t routed_copies = 0, dropped_copies = 0, padded_copies = 0, capacity = 0;
};

/// The router's choice (Megatron-Core moe_utils.py topk_routing_with_score_function, NVIDIA/
/// Megatron-LM commit d98e8a64 l.766-960, with group_limited_topk l.673-728): from fp32 logits
/// [T, E], the experts [T, k] and their probabilities [T, k] (fp32).
///   softmax: the top-k logits (in the chosen groups), softmax over the k
///            (moe_router_pre_softmax off);
///   sigmoid: scores = sigmoid(logits); the top-k of scores + `bias` (when defined: the expert
///            bias only steers the choice), probabilities the chosen scores normalized to sum 1
///            (k > 1; + 1e-20).
/// Group-limited (c.router_group_topk > 0): the experts split into c.router_groups equal
/// groups, each scored by the sum of its top k / group_topk scores; the top group_topk groups'
/// experts are the only candidates. No topk scaling factor (not a scenario key).
std::pair<torch::Tensor, torch::Tensor> route_topk(const torch::Tensor& logits, const CoreLayerSpec& c,
                                                   const torch::Tensor& bias);

/// Aux-loss-free balancing's bias update (moe_utils.py get_updated_expert_bias, called after
/// each iteration's gradients by finalize_model_grads): bias += sign(mean(tokens) - tokens) x
/// rate, tokens the copies each expert received over the iteration (routing map after
/// dropping; re-runs under no autograd state not counted); `tokens` is then zeroed.
void update_expert_bias(torch::Tensor& bias, torch::Tensor& tokens, double rate);

/// Per-expert capacity (Megatron-Core moe_utils.py get_capacity with num_tokens = T k, no
/// minimum, as the router calls it): ceil(T k / num_experts * factor).
std::int64_t expert_capacity(std::int64_t tokens, std::int64_t topk, std::int64_t num_experts,
                             double factor);

/// Megatron-Core's token dropping (moe_utils.py apply_router_token_dropping, called by
/// router.py TopKRouter.routing when moe_expert_capacity_factor is set): `probs` [T, E] the
/// routing probabilities scattered at the chosen experts (0 elsewhere), `map` [T, E] bool the
/// chosen experts. With capacity C = expert_capacity(T, topk, E, factor) <= T, each expert
/// column keeps C rows: the C highest probabilities, or (by_position) its routed tokens first,
/// in token order; ties go to the earlier token (a stable sort; Megatron's torch.topk leaves
/// them unspecified). Returns (probs * final_map, final_map), final_map = map & kept, or with
/// `pad` the kept rows themselves (unrouted ones join with probability 0). C > T: nothing
/// dropped (and with `pad` every token goes to every expert, as Megatron's all-ones mask).
std::pair<torch::Tensor, torch::Tensor> apply_token_dropping(const torch::Tensor& probs,
                                                             const torch::Tensor& map,
                                                             std::int64_t topk, double factor,
                                                             bool by_position, bool pad);

/// Attention block forward (see the file comment). `mask` from window_mask for the layer's
/// window; `cos`/`sin` from rope_tables (unused without RoPE).
BlockState core_attn_forward(const CoreWeights& w, const torch::Tensor& input, const CoreLayerSpec& c,
                             const torch::Tensor& mask, const torch::Tensor& cos,
                             const torch::Tensor& sin, const Dropout& p);
/// Multi-head latent attention's q, k, v and output (Megatron-Core multi_latent_attention.py
/// MLASelfAttention, NVIDIA/Megatron-LM commit d98e8a64, get_query_key_value_tensors l.666-1002,
/// _qkv_down_projection l.638-664): on the input norm's output x [s, b, h],
///   q latent   linear_q_down_proj h -> q_lora, its norm (latent_norm), linear_q_up_proj
///              q_lora -> a (dn + dr); without q_lora one linear_q_proj h -> a (dn + dr)
///   kv latent  linear_kv_down_proj h -> kv_lora + dr, split into the kv latent and k_pe (one
///              RoPE key shared by every head), the latent's norm, linear_kv_up_proj
///              kv_lora -> a (dn + dv), split per head into k_nope and v
///   RoPE       on q's dr columns and on k_pe only (apply_rotary_pos_emb with
///              mla_rotary_interleaved: even then odd columns, then rotate-half)
///   attention  query [q_nope, q_pe] and key [k_nope, k_pe] of dn + dr per head, value of dv,
///              scale 1 / sqrt(dn + dr) (rope_type rope: mscale 1), causal
///   linear_proj a dv -> h, bias-dropout-add.
/// With c.up_rerun the up projections, their norms and RoPE run under no autograd state and re-run
/// in the backward before the attention's (CheckpointWithoutOutput, l.984-989): q, k, v are not
/// kept, the attention keeps the latents, its output and the softmax statistics.
BlockState core_mla_forward(const CoreWeights& w, const torch::Tensor& input, const CoreLayerSpec& c,
                            const torch::Tensor& mask, const torch::Tensor& cos,
                            const torch::Tensor& sin, const Dropout& p);

/// MLA's RoPE on x [.., dr] (mla_rotary_interleaved): x de-interleaved into [x0, x2, .., x1,
/// x3, ..], then x cos + rotate_half(x) sin with tables of width dr (rope_tables).
torch::Tensor mla_rope(const torch::Tensor& x, const torch::Tensor& cos, const torch::Tensor& sin);

/// MLP block forward: dense or MoE by c.moe. With c.delay_wgrad the experts' linears hold
/// their weight gradients back in `deferred` (expert_wgrad.h; required then).
BlockState core_mlp_forward(const CoreWeights& w, const torch::Tensor& input, const CoreLayerSpec& c,
                            const Dropout& p, MoeStats* stats, DeferredWgrad* deferred = nullptr);

/// An MoE layer whose shared expert runs apart (model.moe_shared_expert_overlap; Megatron-Core
/// shared_experts.py SharedExpertMLP with overlap: fc1 and its activation on a side stream
/// beside the dispatch, fc2 beside the combine, its output added to the routed experts' before
/// the bias-dropout-add), as the schedule graph's six tasks run it (ModelFeatures::shared_part,
/// in program order):
///   forward   kSharedFc1: the pre-MLP norm, then the shared fc1 and activation;
///             kSharedApart: router, permutation, experts, unpermute on the norm's output;
///             kSharedFc2: the shared fc2, the sum, bias-dropout-add -> the block output;
///   backward  kSharedFc2: from the output gradient to the sum's two terms (fc2's gradients);
///             kSharedApart: the routed experts' backward;
///             kSharedFc1: fc1's backward, then the pre-MLP norm's on the two branches' summed
///             gradients -> the block input's gradient.
/// The norm runs in the fc1 tasks (the first of each direction in program order); the
/// simulator costs it in the MoE MLP op (the replay's notes say so). Each boundary between
/// tasks is a detached leaf, so each task's backward runs its own part of the graph once.
struct SharedApartState {
  torch::Tensor input;    ///< the block input, a leaf with requires_grad
  torch::Tensor normed;   ///< the pre-MLP norm's output (autograd from input)
  torch::Tensor fc1_in;   ///< normed, detached: the shared fc1's input (leaf)
  torch::Tensor moe_in;   ///< normed, detached: the router's and the experts' input (leaf)
  torch::Tensor fc1_out;  ///< the shared expert's activation output (autograd from fc1_in)
  torch::Tensor fc2_in;   ///< fc1_out, detached (leaf)
  torch::Tensor moe_out;  ///< the routed experts' unpermuted output [s, b, h] (from moe_in)
  torch::Tensor moe_sum;  ///< moe_out, detached (leaf): one term of the sum
  torch::Tensor output;   ///< bias-dropout-add(moe_sum + fc2(fc2_in), input)
};
void shared_fc1_forward(const CoreWeights& w, const torch::Tensor& input, const CoreLayerSpec& c,
                        SharedApartState& st);
void shared_moe_forward(const CoreWeights& w, const CoreLayerSpec& c, MoeStats* stats,
                        DeferredWgrad* deferred, SharedApartState& st);
/// Returns the block output, detached (the next block's input).
torch::Tensor shared_fc2_forward(const CoreWeights& w, const CoreLayerSpec& c, const Dropout& p,
                                 SharedApartState& st);
void shared_fc2_backward(SharedApartState& st, const torch::Tensor& grad_output);
void shared_moe_backward(SharedApartState& st);
/// Returns the block input's gradient and clears the state.
torch::Tensor shared_fc1_backward(SharedApartState& st);

}  // namespace trainsim::hw
