#include "models/memory/memory_model.h"

#include <algorithm>
#include <stdexcept>

#include "models/errors.h"
#include "models/input/runtime.h"

namespace trainsim {

namespace {

/// Whether the scenario's runtime keeps Transformer Engine's activations
/// (core_layer_activation_bytes and the embedding / logits terms below) rather than Korthikanti
/// et al.'s (models/input/runtime.h ActivationTerms).
bool transformer_engine_activations(const Scenario& sc) {
  return runtime_spec(sc.runtime).activation_terms == ActivationTerms::TransformerEngine;
}

/// The --recompute-modules bit that checkpoints a layer's whole MLP module: `moe` for an MoE
/// layer, `mlp` for a dense one (Megatron-Core applies `mlp` to dense layers only).
std::uint8_t mlp_module_bit(bool moe_layer) { return moe_layer ? kRecomputeMoe : kRecomputeMlp; }

std::int64_t attn_width(const ModelConfig& m) { return m.num_attention_heads * m.kv_channels; }
/// Query, key and value columns: (heads + 2 groups) x kv_channels (GQA; groups = heads
/// without it).
std::int64_t qkv_width(const ModelConfig& m) {
  const std::int64_t groups = m.num_query_groups > 0 ? m.num_query_groups : m.num_attention_heads;
  return (m.num_attention_heads + 2 * groups) * m.kv_channels;
}
/// Weights of one norm of `width` (default: the hidden size): LayerNorm gamma and beta,
/// RMSNorm gamma.
std::int64_t norm_params(const ModelConfig& m, std::int64_t width = 0) {
  const std::int64_t w = width > 0 ? width : m.hidden_size;
  return m.normalization == Normalization::RMSNorm ? w : 2 * w;
}

/// Multi-head latent attention's linear layers (Megatron-Core multi_latent_attention.py
/// MLASelfAttention with the Transformer Engine spec of gpt_layer_specs.py): the down
/// projections are TELinear with parallel_mode "duplicated" (whole on every TP rank), the up
/// projections column-parallel (split by t), the output projection row-parallel; none carries a
/// bias but the projection's (add_bias_linear). Widths: q_lora Lq (0: one column-parallel
/// linear_q_proj h x a (dn + dr) instead of q_down and q_up), kv_lora Lkv, RoPE key dr, per head
/// dn + dr (query, key) and dv (value).
struct MlaWeights {
  std::int64_t q_down = 0, q_up = 0, kv_down = 0, kv_up = 0, proj = 0;
  std::int64_t q_norm = 0, kv_norm = 0;  ///< the latent norms (qk_layernorm), replicated
};
MlaWeights mla_weights_per_rank(const ModelConfig& m, std::int64_t tp) {
  const std::int64_t h = m.hidden_size, a = m.num_attention_heads;
  const std::int64_t qk = m.qk_head_dim + m.qk_pos_emb_head_dim;
  MlaWeights w;
  if (m.q_lora_rank > 0) {
    w.q_down = h * m.q_lora_rank;
    w.q_up = m.q_lora_rank * a * qk / tp;
    if (m.qk_layernorm) w.q_norm = norm_params(m, m.q_lora_rank);
  } else {
    w.q_up = h * a * qk / tp;  // linear_q_proj
  }
  w.kv_down = h * (m.kv_lora_rank + m.qk_pos_emb_head_dim);
  w.kv_up = m.kv_lora_rank * a * (m.qk_head_dim + m.v_head_dim) / tp;
  if (m.qk_layernorm) w.kv_norm = norm_params(m, m.kv_lora_rank);
  w.proj = a * m.v_head_dim * h / tp;
  return w;
}

/// A linear layer's parameter tensors: the weight, and the bias when it has one.
std::vector<std::int64_t> linear(std::int64_t weight, std::int64_t bias, bool with_bias) {
  return with_bias ? std::vector<std::int64_t>{weight, bias} : std::vector<std::int64_t>{weight};
}
/// A norm's parameter tensors over `width` (default: the hidden size; norm_params counts
/// them): LayerNorm gamma and beta, RMSNorm gamma.
std::vector<std::int64_t> norm_tensors(const ModelConfig& m, std::int64_t width = 0) {
  const std::int64_t w = width > 0 ? width : m.hidden_size;
  return m.normalization != Normalization::RMSNorm ? std::vector<std::int64_t>{w, w}
                                                   : std::vector<std::int64_t>{w};
}

/// The attention block's submodules on one TP rank, in forward order (ZeRO-3 / FSDP units;
/// their sum is the block's parameters): standard attention input norm, QKV, projection; MLA
/// input norm, the down projections, the up projections (their latent norms fused in), the
/// projection.
std::vector<LayerSubmodule> attention_submodules_per_rank(const ModelConfig& m, std::int64_t tp) {
  const std::int64_t h = m.hidden_size;
  const bool bias = m.add_bias_linear;
  const std::vector<std::int64_t> norm = norm_tensors(m);
  if (!m.multi_latent_attention) {
    const std::int64_t ad = attn_width(m), q = qkv_width(m);
    std::vector<LayerSubmodule> out{
        {"input_norm", false, norm},
        {"qkv", false, linear(h * q / tp, q / tp, bias || m.add_qkv_bias)}};
    if (m.qk_layernorm) {  // per-head norms over kv_channels (TENorm), replicated over TP
      out.push_back({"q_layernorm", false, norm_tensors(m, m.kv_channels)});
      out.push_back({"k_layernorm", false, norm_tensors(m, m.kv_channels)});
    }
    out.push_back({"proj", false, linear(ad * h / tp, h, bias)});
    return out;
  }
  const MlaWeights w = mla_weights_per_rank(m, tp);
  // An up projection's weight and, with qk_layernorm, its fused latent norm's tensors.
  auto with_norm = [&](std::int64_t weight, std::int64_t latent) {
    std::vector<std::int64_t> v{weight};
    if (m.qk_layernorm && latent > 0)
      for (std::int64_t t : norm_tensors(m, latent)) v.push_back(t);
    return v;
  };
  std::vector<LayerSubmodule> out{{"input_norm", false, norm}};
  if (w.q_down > 0) out.push_back({"q_down", false, {w.q_down}});
  out.push_back({"kv_down", false, {w.kv_down}});
  out.push_back({w.q_down > 0 ? "q_up" : "q_proj", false, with_norm(w.q_up, m.q_lora_rank)});
  out.push_back({"kv_up", false, with_norm(w.kv_up, m.kv_lora_rank)});
  out.push_back({"proj", false, linear(w.proj, h, bias)});
  return out;
}

std::int64_t sum_params(const std::vector<LayerSubmodule>& subs) {
  std::int64_t n = 0;
  for (const LayerSubmodule& sub : subs)
    for (std::int64_t p : sub.params) n += p;
  return n;
}

/// The attention block's linear-layer weights on one TP rank (the GEMM operands Transformer
/// Engine casts to FP8).
std::int64_t attention_linear_weights_per_rank(const ModelConfig& m, std::int64_t tp) {
  if (!m.multi_latent_attention)
    return (m.hidden_size * qkv_width(m) + attn_width(m) * m.hidden_size) / tp;
  const MlaWeights w = mla_weights_per_rank(m, tp);
  return w.q_down + w.q_up + w.kv_down + w.kv_up + w.proj;
}
}  // namespace

std::int64_t grad_element_bytes(const Scenario& sc) {
  if (sc.parallel.precision == Precision::FP32) return 4;  // fp32 training: fp32 gradients
  const std::int64_t e = precision_bytes(sc.parallel.precision);
  if (sc.zero.stage != 0) return e;  // DeepSpeed ZeRO partitions (FSDP runs as stage 3)
  if (sc.parallel.grad_reduce_in_fp32) return *sc.parallel.grad_reduce_in_fp32 ? 4 : e;
  return sc.parallel.precision == Precision::BF16 ? 4 : e;
}

ModelFeatures model_features(const Scenario& sc) {
  ModelFeatures f;
  if (runtime_spec(sc.runtime).kernels != KernelLists::TransformerEngine) return f;
  const ModelConfig& m = sc.model;
  const ParallelConfig& p = sc.parallel;
  f.core = true;
  const std::int64_t groups = m.num_query_groups > 0 ? m.num_query_groups : m.num_attention_heads;
  f.kv_heads = groups / p.tensor_model_parallel_size;
  f.swiglu = m.gated_linear_unit();
  f.quick_geglu = m.quick_geglu;
  f.glu_clamp = float(m.activation_func_clamp_value);
  f.glu_offset = float(m.glu_linear_offset);
  f.rmsnorm = m.normalization == Normalization::RMSNorm;
  f.rope = m.position_embedding_type == PositionEmbedding::Rope;
  f.bias = m.add_bias_linear;
  f.hidden_dropout = m.hidden_dropout > 0;
  f.attention_dropout = m.attention_dropout > 0;
  f.attention = static_cast<std::uint8_t>(m.attention_backend);
  // Current (tensorwise) and blockwise scaling compute their scales from the tensor itself: one
  // amax pass before each cast; delayed scaling reuses the amax history; MXFP8 computes its
  // block scales inside the cast kernel (3).
  f.fp8 = p.fp8 == Fp8Format::None                                                   ? 0
          : p.fp8_recipe == Fp8Recipe::Tensorwise || p.fp8_recipe == Fp8Recipe::Blockwise ? 2
          : p.fp8_recipe == Fp8Recipe::Mxfp8                                              ? 3
                                                                                       : 1;
  f.fp8_split_fprop = p.fp8 != Fp8Format::None && p.fp8_recipe == Fp8Recipe::Blockwise;
  f.qk_norm = m.qk_layernorm;
  if (m.multi_latent_attention) {
    f.mla = true;
    f.q_lora = m.q_lora_rank;
    f.kv_lora = m.kv_lora_rank;
    f.qk_rope = m.qk_pos_emb_head_dim;
    f.v_dim = m.v_head_dim;
    f.recompute_mla_up = (p.recompute_modules & kRecomputeMlaUpProj) != 0;
  }
  f.tp_overlap = p.uses_tp_comm_overlap();
  f.tp_overlap_rs_ring = f.tp_overlap && p.tp_comm_overlap_rs_ring;
  f.cp = p.context_parallel_size;
  f.microbatches = p.fp8 == Fp8Format::None ? 1 : p.num_microbatches;
  f.recompute_layernorm = (p.recompute_modules & kRecomputeLayernorm) != 0;
  f.recompute_moe_act = (p.recompute_modules & kRecomputeMoeAct) != 0;
  f.recompute_shared = (p.recompute_modules & kRecomputeSharedExperts) != 0;
  if (p.grad_reduce_in_fp32) f.main_grad_bytes = static_cast<std::uint8_t>(grad_element_bytes(sc));
  return f;
}

// Linear layers (Megatron ColumnParallelLinear / RowParallelLinear): QKV h x (a + 2g)d split
// by t (its bias too), projection ad x h by t (bias replicated), fc1 h x f (x 2 for SwiGLU's
// gate) by t (bias too), fc2 f x h by t (bias replicated); biases only with add_bias_linear,
// the QKV bias alone with add_qkv_bias; two norms of norm_params each, replicated.
std::int64_t layer_params_per_rank(const ModelConfig& m, std::int64_t tp) {
  return sum_params(layer_submodules_per_rank(m, tp));
}

std::vector<LayerSubmodule> layer_submodules_per_rank(const ModelConfig& m, std::int64_t tp) {
  const std::int64_t h = m.hidden_size, f = m.ffn_hidden_size;
  const std::int64_t f1 = m.gated_linear_unit() ? 2 * f : f;
  const bool bias = m.add_bias_linear;
  std::vector<LayerSubmodule> out = attention_submodules_per_rank(m, tp);
  out.push_back({"post_attention_norm", true, norm_tensors(m)});
  out.push_back({"fc1", true, linear(h * f1 / tp, f1 / tp, bias)});
  out.push_back({"fc2", true, linear(f * h / tp, h, bias)});
  return out;
}

namespace {
/// Dense parameters of a layer's attention part on one TP rank, and the two norms.
std::int64_t attention_params_per_rank(const ModelConfig& m, std::int64_t tp) {
  return sum_params(attention_submodules_per_rank(m, tp)) + norm_params(m);
}
}  // namespace

MoeLayerParams moe_layer_params_per_rank(const Scenario& sc) {
  const ModelConfig& m = sc.model;
  const ParallelConfig& p = sc.parallel;
  const std::int64_t h = m.hidden_size, tp = p.tensor_model_parallel_size;
  // fc1 (x2 gated) + fc2 columns per unit
  const std::int64_t gate = m.gated_linear_unit() ? 3 : 2;
  MoeLayerParams out;
  // Router h x E (replicated), the shared expert split by TP like a dense MLP.
  out.dense = attention_params_per_rank(m, tp) + h * m.num_experts +
              gate * h * m.moe_shared_expert_intermediate_size / tp;
  // The E / EP local experts, each split by ETP.
  out.expert = m.num_experts / p.expert_model_parallel_size * gate * h * m.moe_ffn_hidden_size /
               p.expert_tensor_parallel_size;
  return out;
}

std::int64_t embedding_params_per_rank(const ModelConfig& m, std::int64_t tp) {
  const bool learned = m.position_embedding_type == PositionEmbedding::LearnedAbsolute;
  return (m.padded_vocab_size / tp) * m.hidden_size + (learned ? m.seq_length * m.hidden_size : 0);
}

std::int64_t word_embedding_params_per_rank(const ModelConfig& m, std::int64_t tp) {
  return (m.padded_vocab_size / tp) * m.hidden_size;
}

std::int64_t mtp_extra_params_per_rank(const ModelConfig& m, std::int64_t tp) {
  return 3 * norm_params(m) + 2 * m.hidden_size * m.hidden_size / tp;
}

std::int64_t layer_params_at(const Scenario& sc, std::int64_t layer) {
  const std::int64_t tp = sc.parallel.tensor_model_parallel_size;
  const std::int64_t block = sc.model.moe_layer(layer) ? moe_layer_params_per_rank(sc).total()
                                                       : layer_params_per_rank(sc.model, tp);
  if (layer < sc.model.num_layers) return block;
  return block + mtp_extra_params_per_rank(sc.model, tp);
}

bool mlp_checkpointed(const Scenario& sc, std::int64_t layer) {
  return sc.parallel.recompute_granularity == Recompute::Selective &&
         (sc.parallel.recompute_modules & mlp_module_bit(sc.model.moe_layer(layer))) != 0;
}

std::int64_t largest_layer_params(const Scenario& sc) {
  const std::int64_t dense = layer_params_per_rank(sc.model, sc.parallel.tensor_model_parallel_size);
  if (!sc.model.is_moe()) return dense;
  const std::int64_t moe = moe_layer_params_per_rank(sc).total();
  return sc.model.has_dense_layers() ? std::max(dense, moe) : moe;
}

std::int64_t expert_params_per_rank(const Scenario& sc, std::int64_t stage) {
  if (!sc.model.is_moe()) return 0;
  std::int64_t moe_layers = 0;
  for (std::int64_t l : sc.parallel.stage_layers(stage)) moe_layers += sc.model.moe_layer(l);
  return moe_layers * moe_layer_params_per_rank(sc).expert;
}

std::int64_t params_per_rank(const Scenario& sc, std::int64_t stage) {
  const ModelConfig& m = sc.model;
  const ParallelConfig& p = sc.parallel;
  const std::int64_t tp = p.tensor_model_parallel_size, pp = p.pipeline_model_parallel_size;
  std::int64_t params = 0;
  for (std::int64_t l : p.stage_layers(stage)) params += layer_params_at(sc, l);
  if (stage == 0) params += embedding_params_per_rank(m, tp);
  if (stage == pp - 1) {
    params += norm_params(m);  // final norm
    // The output layer reuses the word embedding: a second copy on the last stage when
    // pp > 1 (kept in sync by the embedding-gradient all-reduce), its own matrix when untied.
    if (pp > 1 || m.untie_embeddings_and_output_weights)
      params += (m.padded_vocab_size / tp) * m.hidden_size;
    // Multi-token prediction looks up the shifted tokens in the word embedding: an untied
    // model's last stage holds a copy of it when pp > 1 (Megatron-Core GPTModel builds the
    // embedding where mtp_process; its gradient is all-reduced with the first stage's).
    if (m.mtp_num_layers > 0 && pp > 1 && m.untie_embeddings_and_output_weights)
      params += word_embedding_params_per_rank(m, tp);
  }
  return params;
}

std::int64_t linear_weights_per_rank(const Scenario& sc, std::int64_t stage) {
  const ModelConfig& m = sc.model;
  const std::int64_t tp = sc.parallel.tensor_model_parallel_size;
  const std::int64_t h = m.hidden_size, f = m.ffn_hidden_size;
  const std::int64_t attn = attention_linear_weights_per_rank(m, tp);
  const std::int64_t dense = attn + (h * (m.gated_linear_unit() ? 2 * f : f) + f * h) / tp;
  // An MoE layer's attention, local experts and shared expert run in FP8.
  const std::int64_t moe = attn + moe_layer_params_per_rank(sc).expert +
                           (m.gated_linear_unit() ? 3 : 2) * h *
                               m.moe_shared_expert_intermediate_size / tp;
  std::int64_t out = 0;
  for (std::int64_t l : sc.parallel.stage_layers(stage)) {
    out += m.moe_layer(l) ? moe : dense;
    if (l >= m.num_layers) out += 2 * h * h / tp;  // an MTP layer's eh_proj
  }
  return out;
}

std::int64_t tp_reduced_grad_params(const Scenario& sc, std::int64_t stage) {
  const ModelConfig& m = sc.model;
  const ParallelConfig& p = sc.parallel;
  const std::int64_t tp = p.tensor_model_parallel_size, h = m.hidden_size;
  if (tp <= 1) return 0;
  // Standard attention's q/k norms: by name (`q_layernorm`, `k_layernorm`), SP or not.
  const std::int64_t qk_norms =
      m.qk_layernorm && !m.multi_latent_attention ? 2 * norm_params(m, m.kv_channels) : 0;
  const bool bias = m.add_bias_linear;
  std::int64_t attn = qk_norms;
  if (p.sequence_parallel) {
    // The input norm, the projection's bias; MLA's down projections and latent norms.
    attn += norm_params(m) + (bias ? h : 0);
    if (m.multi_latent_attention) {
      const MlaWeights w = mla_weights_per_rank(m, tp);
      attn += w.q_down + w.kv_down + w.q_norm + w.kv_norm;
    }
  }
  std::int64_t out = 0;
  for (std::int64_t l : p.stage_layers(stage)) {
    out += attn;
    if (!p.sequence_parallel) continue;
    // The pre-MLP norm; a dense layer's fc2 bias; an MoE layer's router (its experts are
    // expert-parallel parameters, reduced elsewhere) and its shared expert's fc2 bias.
    out += norm_params(m);
    const bool fc2 = !m.moe_layer(l) || m.moe_shared_expert_intermediate_size > 0;
    if (bias && fc2) out += h;
    if (m.moe_layer(l)) out += h * m.num_experts;
    if (l >= m.num_layers) out += 3 * norm_params(m);  // an MTP layer's enorm, hnorm, final norm
  }
  if (p.sequence_parallel && stage == p.pipeline_model_parallel_size - 1) out += norm_params(m);
  return out;
}

std::int64_t total_params(const ModelConfig& m) {
  const std::int64_t dense = layer_params_per_rank(m, 1);
  std::int64_t moe = dense;
  if (m.is_moe()) {
    const std::int64_t gate = m.gated_linear_unit() ? 3 : 2, h = m.hidden_size;
    moe = attention_params_per_rank(m, 1) + h * m.num_experts +
          gate * h * (m.num_experts * m.moe_ffn_hidden_size + m.moe_shared_expert_intermediate_size);
  }
  std::int64_t total = embedding_params_per_rank(m, 1) + norm_params(m);
  for (std::int64_t l = 0; l < m.num_layers + m.mtp_num_layers; ++l)
    total += m.moe_layer(l) ? moe : dense;
  total += m.mtp_num_layers * mtp_extra_params_per_rank(m, 1);
  if (m.untie_embeddings_and_output_weights) total += m.padded_vocab_size * m.hidden_size;
  return total;
}

namespace {

/// Tokens of one microbatch on one rank (b s / cp) and in the sequence-parallel regions.
struct Tokens {
  std::int64_t T = 0, Tsp = 0;
};
Tokens tokens_of(const Scenario& sc) {
  const ParallelConfig& p = sc.parallel;
  Tokens t;
  t.T = sc.model.seq_length * p.micro_batch_size / p.context_parallel_size;
  t.Tsp = p.sequence_parallel ? t.T / p.tensor_model_parallel_size : t.T;
  return t;
}

/// The sizes the terms of core_layer_activation_bytes share (its comment names them).
struct CoreDims {
  Tokens tk;
  std::int64_t t = 0, h = 0, d = 0, P = 0, Pkv = 0, F = 0, F1 = 0, e = 0, q = 0;
  std::int64_t stats = 0;  ///< the norm's statistics: fp32 rstd (RMSNorm) or mean and rstd
  std::int64_t mask = 0;   ///< the hidden-dropout mask, Tsp h with hidden dropout
};
CoreDims core_dims(const Scenario& sc) {
  const ModelConfig& m = sc.model;
  const ParallelConfig& p = sc.parallel;
  CoreDims c;
  c.tk = tokens_of(sc);
  c.t = p.tensor_model_parallel_size, c.h = m.hidden_size, c.d = m.kv_channels;
  c.P = m.num_attention_heads / c.t * c.d, c.Pkv = m.num_query_groups / c.t * c.d;
  c.F = m.ffn_hidden_size / c.t, c.F1 = m.gated_linear_unit() ? 2 * c.F : c.F;
  c.e = precision_bytes(p.precision);
  c.q = p.fp8 != Fp8Format::None ? 1 : c.e;
  c.stats = (m.normalization == Normalization::RMSNorm ? 4 : 8) * c.tk.Tsp;
  c.mask = m.hidden_dropout > 0 ? c.tk.Tsp * c.h : 0;
  return c;
}

/// The attention block of a multi-latent-attention layer (core_layer_activation_bytes).
std::int64_t core_mla_attention_bytes(const Scenario& sc, const CoreDims& c) {
  const ModelConfig& m = sc.model;
  const ParallelConfig& p = sc.parallel;
  const Tokens& tk = c.tk;
  const std::int64_t t = c.t, h = c.h, e = c.e, q = c.q, stats = c.stats, mask = c.mask;
  // MLA: the norm input and statistics; the down projections' input (one bf16 tensor both
  // read, or each TELinear's own FP8 copy); the latents they write e Tsp (Lq + Lkv + dr),
  // the up projections' inputs (with qk_layernorm: the latent norms' outputs, q Tsp (Lq +
  // Lkv), and their statistics; without them the latents themselves, or their FP8 copies);
  // q, k after RoPE e T a/t (dn + dr) each and v e T a/t dv;
  // the flash output e T a/t dv and its log-sum-exp, plus the FP8 copy of the projection
  // input under FP8.
  const std::int64_t hq = m.num_attention_heads / t, qk = m.qk_head_dim + m.qk_pos_emb_head_dim;
  const std::int64_t lq = m.q_lora_rank, lkv = m.kv_lora_rank;
  const std::int64_t row_stats = m.normalization == Normalization::RMSNorm ? 4 : 8;
  std::int64_t attn = e * tk.Tsp * h + stats + (q != e ? 2 * q : e) * tk.Tsp * h +
                      e * tk.Tsp * (lq + lkv + m.qk_pos_emb_head_dim) +
                      e * tk.T * hq * (2 * qk + m.v_head_dim) + mask;
  // --recompute-modules mla_up_proj (Megatron-Core CheckpointWithoutOutput around the up
  // projections and RoPE): their saved inputs, norm statistics and outputs q, k, v are not
  // kept (the outputs' storage is freed after the attention); the checkpoint keeps its own
  // inputs, the latents, and the gathered RoPE key e T dr.
  const bool up_rerun = (p.recompute_modules & kRecomputeMlaUpProj) != 0;
  if (up_rerun) {
    attn -= e * tk.T * hq * (2 * qk + m.v_head_dim);
    attn += e * tk.T * m.qk_pos_emb_head_dim;
  } else {
    if (m.qk_layernorm || q != e) attn += q * tk.Tsp * (lq + lkv);  // else the latents
    if (m.qk_layernorm) attn += row_stats * tk.Tsp * ((lq > 0) + 1);
  }
  attn += e * tk.T * hq * m.v_head_dim +
          4 * p.micro_batch_size * hq * (m.seq_length / p.context_parallel_size);
  if (q != e) attn += q * tk.T * hq * m.v_head_dim;
  return attn;
}

/// The attention block (core_layer_activation_bytes).
std::int64_t core_attention_bytes(const Scenario& sc, const CoreDims& c) {
  const ModelConfig& m = sc.model;
  const ParallelConfig& p = sc.parallel;
  const Tokens& tk = c.tk;
  const std::int64_t t = c.t, h = c.h, d = c.d, P = c.P, Pkv = c.Pkv, e = c.e, q = c.q;
  const std::int64_t stats = c.stats;
  std::int64_t attn = e * tk.Tsp * h + stats + q * tk.Tsp * h + e * tk.T * (P + 2 * Pkv) + c.mask;
  if (m.multi_latent_attention) {
    attn = core_mla_attention_bytes(sc, c);
  } else if (m.attention_backend != AttentionBackend::Unfused) {
    attn += e * tk.T * P + 4 * p.micro_batch_size * (m.num_attention_heads / t) *
                               (m.seq_length / p.context_parallel_size);
    if (q != e) attn += q * tk.T * P;
  } else {
    const std::int64_t s = m.seq_length, b = p.micro_batch_size;
    const std::int64_t mk = m.attention_dropout > 0 ? e + 1 : 0;
    if (!(p.recompute_modules & kRecomputeCoreAttn))
      attn += (e + mk) * (m.num_attention_heads / t) * b * s * s;
    attn += e * tk.T * P;
  }
  // --qk-layernorm on standard attention: the per-head norms' inputs (q, k before the norm)
  // and a statistic per head and token.
  if (m.qk_layernorm && !m.multi_latent_attention)
    attn += e * tk.T * (P + Pkv) + (stats / tk.Tsp) * tk.T * (P + Pkv) / d;
  return attn;
}

/// The MLP block of an MoE layer (core_layer_activation_bytes).
std::int64_t core_moe_mlp_bytes(const Scenario& sc, const CoreDims& c) {
  const ModelConfig& m = sc.model;
  const ParallelConfig& p = sc.parallel;
  const Tokens& tk = c.tk;
  const std::int64_t t = c.t, h = c.h, e = c.e, q = c.q;
  // MoE: the norm input and statistics, the router input (the router is a bf16 linear, not
  // FP8) e Tsp h and its fp32 scores 4 Tsp E, the expert fc1 input q Tk h, the expert fc1
  // output e Tk F1e and the permuted fp32 routing probabilities 4 Tk (Megatron-Core
  // experts.py applies the probabilities in the activation, activation_func_with_probs, so
  // the unpermute after the combine is an unweighted gather that keeps only its index map),
  // the fc2 input q Tk Fe (Tk = Tsp topk x the busiest rank's imbalance, token dropping's cap
  // or padding applied: ModelConfig::moe_expert_token_copies; with expert tensor parallelism
  // the copies all-gathered over the ETP group, etp x); the shared expert's as dense.
  const std::int64_t Tk =
      std::int64_t(m.moe_expert_token_copies(tk.Tsp)) * p.expert_tensor_parallel_size;
  const std::int64_t Fe = m.moe_ffn_hidden_size / p.expert_tensor_parallel_size;
  const std::int64_t Fs = m.moe_shared_expert_intermediate_size / t;
  // --recompute-modules: layernorm discards the norm output (re-run in the backward), moe_act
  // the activation output (the fc2 input).
  const bool ln = (p.recompute_modules & kRecomputeLayernorm) != 0;
  const bool act = (p.recompute_modules & kRecomputeMoeAct) != 0;
  std::int64_t mlp = e * tk.Tsp * h + c.stats + (ln ? 0 : e * tk.Tsp * h) +
                     4 * tk.Tsp * m.num_experts + q * Tk * h +
                     e * Tk * (m.gated_linear_unit() ? 2 * Fe : Fe) +
                     4 * Tk + (act ? 0 : q * Tk * Fe) + c.mask;
  // --recompute-modules shared_experts: a checkpoint on the MoE layer's input (kept for the
  // router already) instead of the shared expert's activations.
  if (Fs > 0 && !(p.recompute_modules & kRecomputeSharedExperts))
    mlp += e * tk.T * (m.gated_linear_unit() ? 2 * Fs : Fs) + q * tk.T * Fs;
  return mlp;
}

/// Megatron-Core with Transformer Engine (the kernels of models/perf/flops_core.cpp
/// core_op_kernels): what each block keeps from its forward to its backward, per layer and
/// microbatch, term by term (Korthikanti et al. 2022 Sec. 4's accounting applied to these
/// kernels). T = b s / cp, Tsp = T / t with sequence parallelism, P = a d / t, Pkv = g d / t,
/// F = f / t, e the element bytes, q = 1 byte for an FP8 copy, else e.
///   attention: norm input e Tsp h + statistics; the QKV GEMM input (the local norm output,
///     all-gathered again in the backward with SP) q Tsp h; q, k, v after RoPE e T (P + 2 Pkv);
///     flash: the output e T P and the fp32 log-sum-exp 4 b (a/t) (s/cp); the projection
///     input: the flash output itself, plus its FP8 copy T P with FP8; unfused: the 2021 terms
///     (softmax output, dropout mask and output: (2e + mask) (a/t) b s^2, none with selective
///     recomputation) and the projection input e T P; dropout mask Tsp h with hidden dropout.
///   MLP: norm input e Tsp h + statistics; fc1 input q Tsp h; fc1 output e T F (2F with
///     SwiGLU); fc2 input q T F; dropout mask Tsp h with hidden dropout.
LayerActivationBytes core_layer_activation_bytes_q(const Scenario& sc, bool moe_layer,
                                                   const CoreDims& c) {
  const ParallelConfig& p = sc.parallel;
  const Tokens& tk = c.tk;
  const std::int64_t h = c.h, e = c.e, q = c.q, stats = c.stats, mask = c.mask;
  LayerActivationBytes out;
  out.attn = core_attention_bytes(sc, c);
  out.mlp = moe_layer ? core_moe_mlp_bytes(sc, c)
                      : e * tk.Tsp * h + stats + q * tk.Tsp * h + e * tk.T * c.F1 + q * tk.T * c.F +
                            mask;
  // --recompute-modules mlp (a dense layer) / moe (an MoE layer): Megatron-Core checkpoints the
  // MLP module on its input (tensor_parallel.checkpoint / te_checkpoint) and keeps that input,
  // e Tsp h, plus what runs outside the module: the hidden-dropout mask of the bias-dropout-add,
  // and for an MoE layer its separate pre-MLP norm, whose input and statistics stay and whose
  // output is the checkpoint's input (dropped too with the layernorm module). A dense layer's
  // norm is fused into fc1 (TELayerNormColumnParallelLinear), inside the checkpoint.
  if (p.recompute_modules & mlp_module_bit(moe_layer)) {
    const bool ln = (p.recompute_modules & kRecomputeLayernorm) != 0;
    const std::int64_t kept = moe_layer ? e * tk.Tsp * h + stats + (ln ? 0 : e * tk.Tsp * h) + mask
                                        : e * tk.Tsp * h + mask;
    out.mlp_rerun = out.mlp - kept;
    out.mlp = kept;
  }
  return out;
}

/// The layer's activations, and under MXFP8 the E8M0 scales of its saved FP8 copies: the
/// bytes are linear in q, so the FP8 copies' elements are the difference of the counts at
/// q = 1 and q = 0, each with one scale byte per 32 elements (TE MXFP8Tensor keeps the
/// column-wise copy the weight gradient reads with its _columnwise_scale_inv).
LayerActivationBytes core_layer_activation_bytes(const Scenario& sc, bool moe_layer) {
  const CoreDims c = core_dims(sc);
  LayerActivationBytes out = core_layer_activation_bytes_q(sc, moe_layer, c);
  const ParallelConfig& p = sc.parallel;
  if (p.fp8 == Fp8Format::None || p.fp8_recipe != Fp8Recipe::Mxfp8) return out;
  CoreDims one = c, zero = c;
  one.q = 1, zero.q = 0;
  const LayerActivationBytes a = core_layer_activation_bytes_q(sc, moe_layer, one);
  const LayerActivationBytes b = core_layer_activation_bytes_q(sc, moe_layer, zero);
  constexpr std::int64_t kBlock = 32;  // OCP Microscaling Formats v1.0: 32 elements per scale
  out.attn += (a.attn - b.attn) / kBlock;
  out.mlp += (a.mlp - b.mlp) / kBlock;
  out.mlp_rerun += (a.mlp_rerun - b.mlp_rerun) / kBlock;
  return out;
}

}  // namespace

LayerActivationBytes layer_activation_bytes_no_recompute(const Scenario& sc, bool moe_layer) {
  if (transformer_engine_activations(sc)) return core_layer_activation_bytes(sc, moe_layer);
  const std::int64_t s = sc.model.seq_length, b = sc.parallel.micro_batch_size;
  const std::int64_t h = sc.model.hidden_size, a = sc.model.num_attention_heads;
  const std::int64_t t = sc.parallel.tensor_model_parallel_size;
  const bool sp = sc.parallel.sequence_parallel;
  const std::int64_t sbh = s * b * h;
  // Korthikanti et al. count 2-byte activations (e) and 1-byte dropout masks (mk); written with
  // e and mk so that fp32 (e = 4, mk = 4, see dropout_mask_bytes) follows the same terms:
  // per block outside the TP region (2e + mk) sbh = 5sbh (LayerNorm input, GEMM input, mask),
  // split by t only with sequence parallelism (Sec. 4.1-4.2); attention TP region 4e sbh / t =
  // 8sbh/t (Q, K, V, projection input); scores (2e + mk) a s^2 b / t = 5as^2b/t (softmax
  // output, dropout mask, dropout output); MLP TP region 8e sbh / t = 16sbh/t.
  const std::int64_t e = precision_bytes(sc.parallel.precision);
  const std::int64_t mk = dropout_mask_bytes(sc.parallel.precision);
  const std::int64_t replicated = sp ? (2 * e + mk) * sbh / t : (2 * e + mk) * sbh;
  LayerActivationBytes out;
  const bool selective = sc.parallel.recompute_granularity == Recompute::Selective;
  const std::int64_t scores = selective ? 0 : (2 * e + mk) * a * s * s * b / t;
  out.attn = replicated + 4 * e * sbh / t + scores;
  out.mlp = replicated + 8 * e * sbh / t;
  return out;
}

LayerActivationBytes layer_activation_bytes_no_recompute(const Scenario& sc) {
  return layer_activation_bytes_no_recompute(sc, sc.model.is_moe());
}

LayerActivationBytes layer_activation_bytes(const Scenario& sc) {
  return layer_activation_bytes(sc, sc.model.is_moe());
}

LayerActivationBytes layer_activation_bytes(const Scenario& sc, bool moe_layer) {
  if (sc.parallel.recompute_granularity == Recompute::Full && transformer_engine_activations(sc)) {
    // Only the layer input is stashed (e Tsp h).
    LayerActivationBytes out;
    out.attn = precision_bytes(sc.parallel.precision) * tokens_of(sc).Tsp * sc.model.hidden_size;
    return out;
  }
  if (sc.parallel.recompute_granularity == Recompute::Full) {
    const std::int64_t sbh =
        sc.model.seq_length * sc.parallel.micro_batch_size * sc.model.hidden_size;
    // Only the layer input (e sbh = 2sbh, split by t with sequence parallelism) is stashed.
    const std::int64_t e = precision_bytes(sc.parallel.precision);
    LayerActivationBytes out;
    out.attn = sc.parallel.sequence_parallel ? e * sbh / sc.parallel.tensor_model_parallel_size
                                             : e * sbh;
    out.mlp = 0;
    return out;
  }
  return layer_activation_bytes_no_recompute(sc, moe_layer);
}

namespace {
/// Sequence parallelism splits the regions outside the tensor-parallel blocks by t.
std::int64_t sequence_split(const ParallelConfig& p) {
  return p.sequence_parallel && p.tensor_model_parallel_size > 1 ? p.tensor_model_parallel_size : 1;
}
}  // namespace

std::int64_t embedding_dropout_mask_bytes(const Scenario& sc) {
  if (transformer_engine_activations(sc))
    return sc.model.hidden_dropout > 0 ? tokens_of(sc).Tsp * sc.model.hidden_size : 0;
  const std::int64_t s = sc.model.seq_length, b = sc.parallel.micro_batch_size;
  return dropout_mask_bytes(sc.parallel.precision) * s * b * sc.model.hidden_size /
         sequence_split(sc.parallel);
}

std::int64_t logits_activation_bytes(const Scenario& sc) {
  if (transformer_engine_activations(sc)) {
    // Final norm input and the output layer's input (e Tsp h each), and the bf16 logits the
    // fused cross entropy keeps for its backward (e T V / t).
    const Tokens tk = tokens_of(sc);
    const std::int64_t e = precision_bytes(sc.parallel.precision);
    return 2 * e * tk.Tsp * sc.model.hidden_size +
           e * tk.T * (sc.model.padded_vocab_size / sc.parallel.tensor_model_parallel_size);
  }
  const std::int64_t s = sc.model.seq_length, b = sc.parallel.micro_batch_size;
  const std::int64_t t = sc.parallel.tensor_model_parallel_size;
  return precision_bytes(sc.parallel.precision) * s * b * sc.model.hidden_size /
             sequence_split(sc.parallel) +
         4 * s * b * (sc.model.padded_vocab_size / t);
}

std::int64_t logits_gradient_bytes(const Scenario& sc) {
  if (transformer_engine_activations(sc))
    return precision_bytes(sc.parallel.precision) * tokens_of(sc).T *
           (sc.model.padded_vocab_size / sc.parallel.tensor_model_parallel_size);
  const std::int64_t s = sc.model.seq_length, b = sc.parallel.micro_batch_size;
  const std::int64_t t = sc.parallel.tensor_model_parallel_size;
  return precision_bytes(sc.parallel.precision) * s * b * (sc.model.padded_vocab_size / t);
}

StateBytesPerParam state_bytes_per_param(int zero_stage, std::int64_t dp) {
  TRAINSIM_CHECK(zero_stage >= 0 && zero_stage <= 3 && dp >= 1,
                 "state_bytes_per_param: stage must be 0..3 and dp >= 1");
  StateBytesPerParam b;
  const double n = static_cast<double>(dp);
  if (zero_stage >= 1) b.optimizer /= n;
  if (zero_stage >= 2) b.grads /= n;
  if (zero_stage >= 3) b.params /= n;
  return b;
}

}  // namespace trainsim
