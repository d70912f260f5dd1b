// The replay's notes on what the Megatron-Core layers' tasks ran (replay_notes.h).
#include "hw_backend/replay_notes.h"

#include <sstream>

#include "hw_backend/gemm_ops.h"
#include "hw_backend/replay.h"

namespace trainsim::hw {

/// What the FP8 GEMMs of the layers ran (gemm_ops.h), decided before the run: the linears of
/// AttnFwd/AttnBwd (linear_qkv, linear_proj) and MlpFwd/MlpBwd (linear_fc1, linear_fc2, the
/// experts, the shared expert); gemm_count_note adds what ran.
std::string fp8_gemm_note(const NoteContext& x) {
  const bool hybrid = x.fp8_format != 1;
  const char* recipe = x.fp8_recipe == 1   ? "the delayed-scaling recipe (amax history) "
                       : x.fp8_recipe == 3 ? "the MXFP8 recipe (E8M0 scales per 32 elements) "
                                          : "";
  const std::string why = new_torch_ops_unavailable_reason(x.device);
  const bool runs = x.cuda && new_torch_ops_built() && why.empty() &&
                    (x.dtype == torch::kBFloat16 || x.dtype == torch::kHalf);
  if (runs)
    return std::string("FP8: AttnFwd/AttnBwd (linear_qkv, linear_proj) and MlpFwd/MlpBwd "
                       "(linear_fc1, linear_fc2, per-expert GEMMs, shared expert) ran "
                       "torch._scaled_mm "
                       "with per-tensor current scaling") +
           (*recipe ? std::string(" in place of ") + recipe : std::string()) +
           " (Transformer Engine Float8CurrentScaling: an amax reduction kernel per operand, "
           "scale = fp8_max / amax, cast to e4m3 (max 448), the GEMM with the inverse scales, "
           "output " + x.dtype_name + "; backward dgrad and wgrad in FP8 with the output "
           "gradient in " + (hybrid ? "e5m2 (max 57344, --fp8-format hybrid)" : "e4m3 (--fp8-format e4m3)") +
           "); amax, scale and cast are separate kernels (TE fuses cast and transpose) and "
           "weights are re-cast every microbatch; GEMMs whose dimensions are not multiples of "
           "16 ran in " + x.dtype_name + " (counted below); the router ran in " +
           x.dtype_name +
           (experts_grouped(x) ? std::string("; the experts' torch._grouped_mm ran in ") +
                                    x.dtype_name + " (not FP8: Transformer Engine's FP8 "
                                    "grouped GEMM has no LibTorch counterpart here)"
                              : std::string());
  return std::string("FP8: the layers' GEMMs (AttnFwd/AttnBwd linear_qkv, linear_proj; "
                     "MlpFwd/MlpBwd linear_fc1, linear_fc2, experts) ran torch::linear in ") +
         x.dtype_name + ", not torch._scaled_mm: " +
         (!why.empty() ? why : std::string("the replay's dtype is not bf16/fp16"));
}

/// Whether the MoE layers' experts run as grouped GEMMs (core_layer.cpp moe_experts' test).
bool experts_grouped(const NoteContext& x) {
  for (const auto& [layer, m] : *x.specs) {
    if (!m.moe) continue;
    const std::int64_t gate = m.swiglu ? 2 : 1;
    const torch::Tensor probe = torch::empty({0}, x.fopts);
    return m.grouped_gemm && grouped_gemm_available(probe, m.h, gate * m.expert_ffn) &&
           grouped_gemm_available(probe, m.expert_ffn, m.h);
  }
  return false;
}

/// How the local experts' GEMMs ran (MoE note): one grouped GEMM per linear where the build,
/// the device and the shapes allow (gemm_ops.h grouped_gemm_available), else a pair per expert.
std::string expert_gemm_phrase(const NoteContext& x) {
  if (experts_grouped(x))
    return " as two torch._grouped_mm calls (fc1, fc2) over the local experts (moe_grouped_gemm)";
  if (!x.grouped_requested) return " as one GEMM pair each";
  std::string why = !x.cuda ? "the replay runs it on CUDA only (LibTorch " + torch_version() +
                                     " on the CPU)"
                               : new_torch_ops_unavailable_reason(x.device);
  if (why.empty()) why = "it needs bf16 and widths that are multiples of 8";
  return " as one GEMM pair each (not one grouped GEMM, torch._grouped_mm: " + why + ")";
}

/// What the GEMMs of the last iteration ran (gemm_ops.h counts), where FP8 or grouped GEMMs
/// ran at all.
std::string gemm_count_note(const NoteContext& x) {
  const GemmCounts n = gemm_counts();
  if (n.fp8_gemms == 0 && n.grouped_gemms == 0 && n.fp8_shape_fallbacks == 0) return {};
  std::ostringstream o;
  o << "GEMMs of the last iteration: " << n.fp8_gemms << " torch._scaled_mm (FP8), "
    << n.amax_reductions << " amax reductions, " << n.fp8_shape_fallbacks
    << " FP8 linears in " << x.dtype_name << " (a dimension not a multiple of 16), "
    << n.grouped_gemms << " torch._grouped_mm (forward; their backward is autograd's)";
  return o.str();
}

/// What AttnFwd / AttnBwd ran for multi-head latent attention (core_layer.h
/// core_mla_forward), in the simulated kernel list's order (models/perf/flops_mla.cpp).
std::string mla_note(const NoteContext& x, const CoreLayerSpec& c) {
  const std::int64_t dr = c.qk_rope, dn = c.head_dim - dr, a = c.heads;
  const std::string nrm = c.rmsnorm ? "RMSNorm" : "LayerNorm";
  std::ostringstream o;
  o << "multi-head latent attention (Megatron-Core MLASelfAttention): AttnFwd ran the input "
    << nrm << ", ";
  if (c.q_lora > 0)
    o << "linear_q_down_proj (" << x.hidden << " -> " << c.q_lora << "), "
      << (c.latent_norm ? "the q latent's " + nrm + ", " : std::string())
      << "linear_q_up_proj (" << c.q_lora << " -> " << a << " x " << dn + dr << "), ";
  else
    o << "linear_q_proj (" << x.hidden << " -> " << a << " x " << dn + dr << "), ";
  o << "linear_kv_down_proj (" << x.hidden << " -> " << c.kv_lora << " + " << dr << "), "
    << (c.latent_norm ? "the kv latent's " + nrm + ", " : std::string())
    << "linear_kv_up_proj (" << c.kv_lora << " -> " << a << " x (" << dn << " + " << c.v_dim
    << ")), RoPE on q's " << dr << " rope columns and the shared k_pe (MLA's de-interleaved "
       "rotate-half, rope_type rope, base 10000), attention with query/key head dim "
    << dn + dr << " and value head dim " << c.v_dim << " (scale 1/sqrt(" << dn + dr << "), "
    << (c.up_rerun || (!have_sdpa() && x.attention_dropout == 0)
            ? "FlashAttention-2's arithmetic and saved state"
        : have_sdpa() ? "at::scaled_dot_product_attention"
                      : "the explicit math path with attention dropout: Q K^T, masked fp32 "
                        "softmax, dropout, P V")
    << "), linear_proj (" << a << " x " << c.v_dim << " -> " << x.hidden << "); AttnBwd ran "
    << (c.up_rerun ? "the re-run of the up projections, their latent norms and RoPE "
                     "(--recompute-modules mla_up_proj: q, k, v not kept from the forward), "
                     "then "
                   : "")
    << "their autograd backward";
  return o.str();
}

/// The token-dropping part of the MoE note (core_layer.h apply_token_dropping).
std::string drop_note(const CoreLayerSpec& m) {
  std::ostringstream o;
  o << "; token dropping: per-expert capacity ceil(T k / " << m.num_experts << " x "
    << m.capacity_factor << ") of the T = " << m.b * m.s
    << " tokens the router saw (moe_utils.py get_capacity), the copies over capacity dropped "
       "by "
    << (m.drop_by_position ? "position (the latest tokens)" : "probability (the lowest)")
    << (m.pad_to_capacity ? ", every expert padded to its capacity with zero-probability "
                            "copies"
                          : "");
  return o.str();
}

std::string moe_note(const NoteContext& x, const CoreLayerSpec& m, bool token_drop) {
  std::ostringstream e;
  e << "MoE: MlpFwd/MlpBwd ran router (" << m.num_experts << " experts, top-" << m.topk
    << (m.sigmoid ? ", sigmoid scores normalized over the k" : ", softmax");
  if (m.router_group_topk > 0)
    e << ", group-limited: the top " << m.router_group_topk << " of " << m.router_groups
      << " expert groups";
  if (m.expert_bias)
    e << ", the expert bias steering the choice, updated after each iteration by "
         "sign(mean load - load) x 1e-3 from this rank's loads";
  e << "), sort-based permutation, the token counts' device-to-host copy, " << m.experts_local
    << " local experts of " << m.expert_ffn << expert_gemm_phrase(x) << ", unpermute"
    << (m.shared_ffn > 0 ? ", shared expert" : "")
    << "; the experts of absent expert-parallel ranks ran as this rank's (global expert e as "
       "local expert e mod "
    << m.experts_local << ")" << (token_drop ? drop_note(m) : std::string());
  return e.str();
}

std::string moe_split_note(const NoteContext& x) {
  bool delayed = false, apart = false;
  for (const auto& [layer, c] : *x.specs) {
    delayed = delayed || (c.moe && c.delay_wgrad);
    apart = apart || (c.moe && c.shared_apart);
  }
  std::ostringstream o;
  if (delayed)
    o << "MoE backward split (parallel.delay_wgrad_compute): where the schedule splits it, the "
         "MlpBwd task ran the layer's backward without the local experts' weight gradients and "
         "the next MlpBwd task ran those (dW = dY^T X per expert, held back as Transformer "
         "Engine's wgrad store holds them; expert_wgrad.h); the held-back data and weight "
         "gradient GEMMs ran in "
      << x.dtype_name << (x.fp8_recipe != 0 ? " (not FP8)" : "")
      << "; an MlpBwd the schedule runs whole ran them itself";
  if (delayed && apart) o << ". ";
  if (apart)
    o << "MoE shared expert apart (model.moe_shared_expert_overlap): its fc1 and activation "
         "ran as their own MlpFwd task beside the dispatch and fc2 beside the combine, and "
         "their backwards as MlpBwd tasks beside the adjoints; the pre-MLP norm ran in the "
         "shared fc1 tasks (the first of each direction), where the simulator costs it in the "
         "MoE MLP op";
  return o.str();
}

}  // namespace trainsim::hw
