// Kernel lists of multi-head latent attention (DeepSeek-V2/V3) under Megatron-Core with
// Transformer Engine modules: the attention block's forward and backward (kernel_lists.h
// mla_attn_forward / mla_attn_backward), on flops_core.cpp's CoreShape and pieces.
#include "models/perf/kernel_lists.h"

namespace trainsim::kernel_lists {

namespace {

/// Multi-head latent attention (Megatron-Core multi_latent_attention.py MLASelfAttention, the
/// Transformer Engine layer spec of gpt_layer_specs.py): a separate input norm (TENorm); the
/// duplicated down projections (TELinear, parallel_mode "duplicated": whole on every TP rank,
/// on the rank's Tsp rows) h -> q latent Lq and h -> kv latent Lkv + RoPE key dr; the up
/// projections (column-parallel; with qk_layernorm a TE LayerNormColumnParallelLinear whose
/// norm runs on the local rows before the sequence-parallel gather) Lq -> a/t (dn + dr) and
/// Lkv -> a/t (dn + dv); without q_lora_rank one column-parallel linear_q_proj h -> a/t (dn +
/// dr) instead of the q pair; RoPE on the query's dr columns and the shared key, and the
/// assembly of q, k (dn + dr per head) and v (dv); fused attention; the row-parallel
/// projection a/t dv -> h. Rows: Tsp before the gathers, T after (models/builder/
/// tensor_parallel.cpp emits the latent gathers and reduce-scatters).
struct MlaShape {
  double qk, kv_up, v, q_in;  ///< per-rank widths: a/t (dn + dr), a/t (dn + dv), a/t dv, q input
};
MlaShape mla_shape(const CoreShape& c) {
  MlaShape m;
  m.qk = c.heads * c.hd;
  m.v = c.heads * c.dv;
  m.kv_up = c.heads * (c.hd - c.dr + c.dv);
  m.q_in = c.lq > 0 ? c.lq : c.H;
  return m;
}

/// A latent's norm fused into its up projection (qk_layernorm), on the local rows.
void mla_latent_norm(const char* name, double width, bool forward, const CoreShape& c,
                     std::vector<KernelWork>& out) {
  if (c.qk_norm && width > 0) norm_pass(name, c.Tsp, width, forward, c, out);
}

/// The up projections (their latent norms fused in) and RoPE: in the forward, and again before
/// the attention backward with --recompute-modules mla_up_proj (`rerun`; FP8 weights cast once
/// per iteration are reused).
void mla_up_forward(const CoreShape& c, bool rerun, std::vector<KernelWork>& out) {
  const MlaShape m = mla_shape(c);
  mla_latent_norm(rerun ? "q_latent_norm_recompute" : "q_latent_norm_fwd", c.lq, true, c, out);
  mla_latent_norm(rerun ? "kv_latent_norm_recompute" : "kv_latent_norm_fwd", c.lkv, true, c, out);
  quantize_column_parallel_input(rerun ? "q_up_input_cast_recompute" : "q_up_input_cast",
                                 rerun ? "q_up_input_amax_recompute" : "q_up_input_amax", m.q_in,
                                 c, out);
  if (!rerun)
    quantize("q_up_weight_cast", "q_up_weight_amax", m.q_in * m.qk / c.microbatches, c, out);
  out.push_back(core_gemm(rerun ? "q_up_gemm_recompute" : "q_up_gemm", GemmPass::Forward, c.T,
                          m.qk, m.q_in, c, true));
  quantize_column_parallel_input(rerun ? "kv_up_input_cast_recompute" : "kv_up_input_cast",
                                 rerun ? "kv_up_input_amax_recompute" : "kv_up_input_amax", c.lkv,
                                 c, out);
  if (!rerun)
    quantize("kv_up_weight_cast", "kv_up_weight_amax", c.lkv * m.kv_up / c.microbatches, c, out);
  out.push_back(core_gemm(rerun ? "kv_up_gemm_recompute" : "kv_up_gemm", GemmPass::Forward, c.T,
                          m.kv_up, c.lkv, c, true));
  // RoPE and assembly: the query read and written whole; the key built from the up
  // projection's dn columns and the shared RoPE key, the value copied out (read the up
  // projection's output and the RoPE key, write k and v).
  out.push_back(mem(rerun ? "mla_rope_q_recompute" : "mla_rope_q_fwd", 2 * c.T * m.qk * c.e));
  out.push_back(mem(rerun ? "mla_rope_kv_recompute" : "mla_rope_kv_fwd",
                    c.T * (m.kv_up + c.dr + m.qk + m.v) * c.e));
}

}  // namespace

void mla_attn_forward(const OpDesc& op, const CoreShape& c, std::vector<KernelWork>& out) {
  const MlaShape m = mla_shape(c);
  core_norm_fwd("input_norm_fwd", c, out);
  if (c.lq > 0) {
    quantize("q_down_input_cast", "q_down_input_amax", c.Tsp * c.H, c, out);
    quantize("q_down_weight_cast", "q_down_weight_amax", c.H * c.lq / c.microbatches, c, out);
    out.push_back(core_gemm("q_down_gemm", GemmPass::Forward, c.Tsp, c.lq, c.H, c, true));
  }
  quantize("kv_down_input_cast", "kv_down_input_amax", c.Tsp * c.H, c, out);
  quantize("kv_down_weight_cast", "kv_down_weight_amax", c.H * (c.lkv + c.dr) / c.microbatches, c,
           out);
  out.push_back(core_gemm("kv_down_gemm", GemmPass::Forward, c.Tsp, c.lkv + c.dr, c.H, c, true));
  mla_up_forward(c, false, out);
  core_attention_fwd(op, c, out);
  quantize("proj_input_cast", "proj_input_amax", c.T * m.v, c, out);
  quantize("proj_weight_cast", "proj_weight_amax", m.v * c.H / c.microbatches, c, out);
  out.push_back(core_gemm("proj_gemm", GemmPass::Forward, c.T, c.H, m.v, c, true));
  core_residual_fwd(c, out);
}

void mla_attn_backward(const OpDesc& op, const CoreShape& c, std::vector<KernelWork>& out) {
  const MlaShape m = mla_shape(c);
  core_residual_bwd(c, out);
  core_linear_bwd("proj_grad_cast", "proj_grad_amax", "proj_dgrad", "proj_wgrad", c.T, c.H, m.v,
                  c, out);
  // --recompute-modules mla_up_proj: q, k, v re-made when the attention output's gradient
  // arrives (multi_latent_attention.py discard_output_and_register_recompute).
  if (c.mla_up_rerun) mla_up_forward(c, true, out);
  core_attention_bwd(op, c, out);
  out.push_back(mem("mla_rope_kv_bwd", c.T * (m.qk + m.v + m.kv_up + c.dr) * c.e));
  out.push_back(mem("mla_rope_q_bwd", 2 * c.T * m.qk * c.e));
  column_parallel_input_transpose("kv_up_input_transpose", c.lkv, c, out);
  core_linear_bwd("kv_up_grad_cast", "kv_up_grad_amax", "kv_up_dgrad", "kv_up_wgrad", c.T,
                  m.kv_up, c.lkv, c, out);
  column_parallel_input_transpose("q_up_input_transpose", m.q_in, c, out);
  core_linear_bwd("q_up_grad_cast", "q_up_grad_amax", "q_up_dgrad", "q_up_wgrad", c.T, m.qk,
                  m.q_in, c, out);
  mla_latent_norm("kv_latent_norm_bwd", c.lkv, false, c, out);
  mla_latent_norm("q_latent_norm_bwd", c.lq, false, c, out);
  core_linear_bwd("kv_down_grad_cast", "kv_down_grad_amax", "kv_down_dgrad", "kv_down_wgrad",
                  c.Tsp, c.lkv + c.dr, c.H, c, out);
  if (c.lq > 0) {
    core_linear_bwd("q_down_grad_cast", "q_down_grad_amax", "q_down_dgrad", "q_down_wgrad", c.Tsp,
                    c.lq, c.H, c, out);
    // autograd sums the two down projections' input gradients
    out.push_back(mem("down_proj_grad_add", 3 * c.Tsp * c.H * c.e));
  }
  core_norm_bwd("input_norm_bwd", c, out);
}

}  // namespace trainsim::kernel_lists
