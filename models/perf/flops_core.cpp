// The kernels of Megatron-Core's TransformerLayer with Transformer Engine modules
// (megatron/core/models/gpt/gpt_layer_specs.py get_gpt_layer_with_transformer_engine_spec:
// TELayerNormColumnParallelLinear for QKV and fc1 (the norm is its first kernel), TE
// DotProductAttention, TERowParallelLinear for proj and fc2; fused bias-dropout-add,
// fused RoPE (apply_rope_fusion), fused bias-SwiGLU / bias-GeLU (bias_swiglu_fusion,
// bias_activation_fusion), gradient_accumulation_fusion: the weight-gradient GEMM accumulates
// into the fp32 main_grad directly (beta = 1), so there is no separate accumulate kernel).
//
// Core shapes (one rank): T = b s / cp tokens; Tsp = T / tp with sequence parallelism; P =
// heads_r hd (query width), Pkv = groups_r hd (key/value width, GQA); F = ffn / tp; a linear
// layer's bias goes to its GEMM epilogue (no kernel). FP8 (TE): the linear GEMMs run on FP8
// operands; each GEMM input is quantized by a cast-transpose kernel (read e, write the FP8
// row-wise and column-wise copies: 2 bytes per element); current scaling ("tensorwise")
// first reduces the tensor's amax (one more read of e per element), delayed scaling uses the
// amax history instead. MXFP8 (TE MXFP8BlockScaling) computes one E8M0 scale per 32
// consecutive elements, along rows for the row-wise copy and along columns for the
// column-wise one, inside the same cast kernel (no amax pass): 1/32 byte more per element and
// copy, and its GEMMs read those scales with their operands. The weights are quantized once
// per iteration (TE caches them after the first microbatch): each microbatch's op carries
// 1 / microbatches of that.
//
// Runtime megatron-core (models/input/runtime.h KernelLists::TransformerEngine); multi-head
// latent attention and MoE MLPs are flops_mla.cpp's and flops_moe.cpp's.
#include <algorithm>
#include <string_view>

#include "models/perf/kernel_lists.h"

namespace trainsim::kernel_lists {

CoreShape core_shape_of(const OpDesc& op) {
  const ModelFeatures& f = op.features;
  CoreShape c{};
  c.b = double(op.micro_batch);
  c.cp = double(std::max<std::int64_t>(f.cp, 1));
  c.s = double(op.seq);
  c.T = c.b * c.s / c.cp;
  c.tp = double(op.tp);
  c.Tsp = op.sequence_parallel ? c.T / c.tp : c.T;
  c.H = double(op.hidden);
  c.heads = double(op.heads);
  c.groups = f.kv_heads > 0 ? double(f.kv_heads) : c.heads;
  c.hd = double(op.head_dim);
  c.P = c.heads * c.hd;
  c.Pkv = c.groups * c.hd;
  c.F = double(op.ffn);
  c.Vr = double(op.vocab);
  c.e = element_bytes(op.precision);
  c.mk = kMaskBytes;
  c.stats = f.rmsnorm ? kFp32Bytes : 2 * kFp32Bytes;  // rstd; LayerNorm adds the mean
  // main_grad: fp32 unless parallel.grad_reduce_in_fp32 is false (then the training precision)
  c.mg = f.main_grad_bytes ? double(f.main_grad_bytes) : kFp32Bytes;
  c.fp8 = f.fp8 != 0;
  c.current = f.fp8 == 2;
  c.mx = f.fp8 == 3;
  c.split_fprop = f.fp8_split_fprop;
  c.swiglu = f.swiglu;
  c.rope = f.rope;
  c.hdrop = f.hidden_dropout;
  c.adrop = f.attention_dropout;
  c.flash = f.attention != 0;
  c.window = double(f.window);
  c.microbatches = double(std::max<std::int64_t>(f.microbatches, 1));
  c.mla = f.mla;
  c.qk_norm = f.qk_norm;
  c.mla_up_rerun = f.recompute_mla_up;
  c.lq = double(f.q_lora);
  c.lkv = double(f.kv_lora);
  c.dr = double(f.qk_rope);
  c.dv = f.mla ? double(f.v_dim) : c.hd;
  return c;
}

KernelWork core_gemm(const char* name, GemmPass pass, double m, double n, double k,
                     const CoreShape& c, bool linear) {
  // FP8 GEMMs read 1-byte operands and write e-byte outputs; a weight-gradient GEMM with
  // gradient-accumulation fusion reads and writes its main_grad output (fp32 by default).
  const bool f8 = linear && c.fp8;
  const bool wgrad = pass == GemmPass::Wgrad;
  KernelWork w = gemm(name, pass, m, n, k, c.e);
  // MXFP8 operands carry one E8M0 scale byte per 32 elements along k.
  const double in = f8 ? (c.mx ? 1.0 + kMxfp8ScaleBytesPerElement : 1.0) : c.e;
  w.bytes = (m * k + k * n) * in + m * n * (wgrad ? 2 * c.mg : c.e);
  w.fp8 = f8;
  // Transformer Engine's FP8 recipes set cuBLASLt's fast accumulation off for the gradient
  // GEMMs (v2.7 and v2.9, the releases of the NeMo 25.09 and 25.11 containers:
  // common/recipe/__init__.py, DelayedScaling and Float8CurrentScaling fp8_gemm_fprop
  // use_split_accumulator=False, fp8_gemm_dgrad and fp8_gemm_wgrad True, Float8BlockScaling
  // True for all three; module/base.py _2X_ACC_FPROP/_DGRAD/_WGRAD; common/gemm/
  // cublaslt_gemm.cu: fastAccuMode = use_split_accumulator ? 0 : 1).
  w.split_accumulator = f8 && (pass != GemmPass::Forward || c.split_fprop);
  return w;
}

/// Transformer Engine's MXFP8 quantize of `elements` into `copies` FP8 copies (2: row-wise and
/// column-wise; 1: row-wise only): read e, write per copy 1 byte and 1/32 byte of E8M0 scale
/// per element (TE common/cast/mxfp8/quantize_mxfp8.cuh: one kernel writes both copies and
/// their scales), at the profile's measured MXFP8 quantize rate (KernelWork::mxfp8_quantize).
KernelWork mxfp8_cast(const char* name, double elements, double copies, const CoreShape& c) {
  KernelWork w = mem(name, elements * (c.e + copies * (1.0 + kMxfp8ScaleBytesPerElement)));
  w.mxfp8_quantize = true;
  return w;
}

/// TE quantization of a GEMM input of `elements` (nothing without FP8): with current
/// scaling an amax pass first; the cast writes the FP8 data and its transpose (the weight
/// gradient's operand).
void quantize(const char* name, const char* amax_name, double elements, const CoreShape& c,
              std::vector<KernelWork>& out) {
  if (!c.fp8) return;
  if (c.mx) return out.push_back(mxfp8_cast(name, elements, 2, c));
  if (c.current) out.push_back(mem(amax_name, elements * c.e));
  out.push_back(mem(name, elements * (c.e + 2.0)));
}

/// The input of a dense column-parallel layer (QKV, fc1) under FP8. With sequence parallelism
/// Transformer Engine casts the local shard (Tsp rows) to FP8, row-wise only, before the
/// all-gather, which then carries FP8 (TE v2.7 module/layernorm_linear.py: the quantizer's
/// column-wise usage is switched off for gather_along_first_dim; builder/tensor_parallel.cpp);
/// the backward re-gathers it and builds the transpose for the weight gradient
/// (column_parallel_input_transpose). Without it: quantize() on all T rows.
void quantize_column_parallel_input(const char* name, const char* amax_name, double width,
                                    const CoreShape& c, std::vector<KernelWork>& out) {
  if (!c.fp8) return;
  if (c.Tsp == c.T) return quantize(name, amax_name, c.T * width, c, out);
  if (c.mx) return out.push_back(mxfp8_cast(name, c.Tsp * width, 1, c));
  if (c.current) out.push_back(mem(amax_name, c.Tsp * width * c.e));
  out.push_back(mem(name, c.Tsp * width * (c.e + 1.0)));
}

/// Backward of a sequence-parallel FP8 column-parallel layer: the transpose of the gathered
/// FP8 input (read and write one byte per element) for its weight-gradient GEMM.
void column_parallel_input_transpose(const char* name, double width, const CoreShape& c,
                                     std::vector<KernelWork>& out) {
  if (c.fp8 && c.Tsp < c.T) out.push_back(mem(name, c.T * width * 2.0));
}

/// A TE (RMS/Layer)Norm kernel over `rows` rows of `width`: forward reads x, writes y and saves
/// the fp32 statistics per row; backward reads dy, x and the statistics and writes dx (the
/// weight-gradient partials are reduced inside the kernel).
void norm_pass(const char* name, double rows, double width, bool forward, const CoreShape& c,
               std::vector<KernelWork>& out) {
  out.push_back(mem(name, rows * ((forward ? 2 : 3) * width * c.e + c.stats)));
}

void core_norm_fwd(const char* name, const CoreShape& c, std::vector<KernelWork>& out) {
  norm_pass(name, c.Tsp, c.H, true, c, out);
}

void core_norm_bwd(const char* name, const CoreShape& c, std::vector<KernelWork>& out) {
  // then autograd adds the residual branch's gradient
  norm_pass(name, c.Tsp, c.H, false, c, out);
  out.push_back(mem("residual_grad_add", 3 * c.Tsp * c.H * c.e));
}

void core_residual_fwd(const CoreShape& c, std::vector<KernelWork>& out) {
  // Fused bias-dropout-add: read x and residual, write out (and the mask with dropout).
  out.push_back(mem("bias_dropout_add_fwd", c.Tsp * c.H * (3 * c.e + (c.hdrop ? c.mk : 0))));
}

void core_residual_bwd(const CoreShape& c, std::vector<KernelWork>& out) {
  // Without dropout the residual gradient passes through unchanged (no kernel).
  if (c.hdrop) out.push_back(mem("bias_dropout_add_bwd", c.Tsp * c.H * (2 * c.e + c.mk)));
}

namespace {

/// Keys summed over the queries of one sequence: causal s^2 / 2; a sliding window of w keys
/// back: s w - w^2 / 2 (every query after the first w sees w keys).
double causal_keys(double s, double w) {
  if (w <= 0 || w >= s) return s * s / 2;
  return s * w - w * w / 2;
}

KernelWork flash(const char* name, const CoreShape& c, bool backward) {
  // Forward: S = Q K^T and O = P V over the causal keys, 2 matmuls x 2 FLOPs per multiply-add
  // (4 b heads hd keys); backward 2.5x that (FlashAttention-2 Sec. 3.1.2: it recomputes S and
  // P, then dV, dP, dQ, dK: 5 matmuls against the forward's 2). With context parallelism each
  // rank holds 1/cp of the (load-balanced) causal work. Bytes: q, k, v, o and the fp32 log-sum-
  // exp read or written once (backward: also do, dq, dk, dv).
  KernelWork w;
  w.name = name;
  w.cls = KernelClass::Attention;
  w.backward = backward;
  // MLA: S = Q K^T over the query/key head dimension hd, O = P V over the value's dv.
  const double fwd = c.mla ? 2 * c.b * c.heads * (c.hd + c.dv) * causal_keys(c.s, c.window) / c.cp
                           : 4 * c.b * c.heads * c.hd * causal_keys(c.s, c.window) / c.cp;
  w.head_dim = c.hd;
  // The benchmark's sequence length this kernel's blocks resemble: ring attention runs s / cp
  // queries against s / cp keys per step; a sliding window bounds the keys per query.
  w.seq_length = c.s / c.cp;
  if (c.window > 0) w.seq_length = std::min(w.seq_length, c.window);
  w.flops = backward ? 2.5 * fwd : fwd;
  // q and k of hd per head, v and o of dv (MLA: every head its own key and value).
  const double qkvo = c.mla ? 2 * c.P + 2 * c.heads * c.dv : 2 * c.P + 2 * c.Pkv;
  const double io = c.T * qkvo * c.e + c.b * c.heads * (c.s / c.cp) * kFp32Bytes;
  w.bytes = backward ? 2 * io : io;
  return w;
}

}  // namespace

void core_attention_fwd(const OpDesc& op, const CoreShape& c, std::vector<KernelWork>& out) {
  if (c.flash) {
    out.push_back(flash("flash_attn_fwd", c, false));
    return;
  }
  // Megatron-Core's unfused DotProductAttention: K and V expanded to every query head
  // (repeat_interleave) with GQA, then the 2021 kernels (baddbmm, fused softmax, dropout, bmm).
  if (c.groups < c.heads) out.push_back(mem("kv_expand", 2 * c.T * (c.Pkv + c.P) * c.e));
  const Shape x = shape_of(op);
  attn_core_forward(x, out);
}

void core_attention_bwd(const OpDesc& op, const CoreShape& c, std::vector<KernelWork>& out) {
  if (c.flash) {
    out.push_back(flash("flash_attn_bwd", c, true));
    return;
  }
  const Shape x = shape_of(op);
  if (op.recompute_core_attention) attn_core_forward(x, out);
  attn_core_backward(x, out);
  if (c.groups < c.heads) out.push_back(mem("kv_expand_bwd", 2 * c.T * (c.P + c.Pkv) * c.e));
}

namespace {

/// --qk-layernorm on standard attention (Megatron-Core SelfAttention q_layernorm / k_layernorm,
/// TENorm over each head's kv_channels, between the QKV split and RoPE): the query's and the
/// key's rows of one head each, read and written (backward: read dy, x, write dx) with the
/// row statistic; weight-gradient partials reduced inside the kernel.
void qk_norms(const CoreShape& c, bool forward, std::vector<KernelWork>& out) {
  if (!c.qk_norm) return;
  norm_pass(forward ? "q_layernorm_fwd" : "q_layernorm_bwd", c.T * c.heads, c.hd, forward, c, out);
  norm_pass(forward ? "k_layernorm_fwd" : "k_layernorm_bwd", c.T * c.groups, c.hd, forward, c, out);
}

void core_attn_forward(const OpDesc& op, const CoreShape& c, std::vector<KernelWork>& out) {
  if (c.mla) return mla_attn_forward(op, c, out);
  const double qkv = c.P + 2 * c.Pkv;
  core_norm_fwd("input_norm_fwd", c, out);
  quantize_column_parallel_input("qkv_input_cast", "qkv_input_amax", c.H, c, out);
  quantize("qkv_weight_cast", "qkv_weight_amax", c.H * qkv / c.microbatches, c, out);
  out.push_back(core_gemm("qkv_gemm", GemmPass::Forward, c.T, qkv, c.H, c, true));
  qk_norms(c, true, out);
  if (c.rope) out.push_back(mem("rope_fwd", 2 * c.T * (c.P + c.Pkv) * c.e));
  core_attention_fwd(op, c, out);
  quantize("proj_input_cast", "proj_input_amax", c.T * c.P, c, out);
  quantize("proj_weight_cast", "proj_weight_amax", c.P * c.H / c.microbatches, c, out);
  out.push_back(core_gemm("proj_gemm", GemmPass::Forward, c.T, c.H, c.P, c, true));
  core_residual_fwd(c, out);
}

}  // namespace

/// dgrad and wgrad of a linear layer Y[m x n] = X[m x k] W[k x n], with the quantization of
/// dY under FP8.
void core_linear_bwd(const char* cast, const char* amax, const char* dgrad, const char* wgrad,
                     double m, double n, double k, const CoreShape& c,
                     std::vector<KernelWork>& out) {
  quantize(cast, amax, m * n, c, out);
  out.push_back(core_gemm(dgrad, GemmPass::Dgrad, m, k, n, c, true));
  out.push_back(core_gemm(wgrad, GemmPass::Wgrad, k, n, m, c, true));
}

namespace {

void core_attn_backward(const OpDesc& op, const CoreShape& c, std::vector<KernelWork>& out) {
  if (c.mla) return mla_attn_backward(op, c, out);
  const double qkv = c.P + 2 * c.Pkv;
  core_residual_bwd(c, out);
  core_linear_bwd("proj_grad_cast", "proj_grad_amax", "proj_dgrad", "proj_wgrad", c.T, c.H, c.P,
                  c, out);
  core_attention_bwd(op, c, out);
  if (c.rope) out.push_back(mem("rope_bwd", 2 * c.T * (c.P + c.Pkv) * c.e));
  qk_norms(c, false, out);
  column_parallel_input_transpose("qkv_input_transpose", c.H, c, out);
  core_linear_bwd("qkv_grad_cast", "qkv_grad_amax", "qkv_dgrad", "qkv_wgrad", c.T, qkv, c.H, c,
                  out);
  core_norm_bwd("input_norm_bwd", c, out);
}

/// `rerun`: the re-run of a checkpointed MLP module (--recompute-modules mlp), whose norm is
/// fused into fc1 (Transformer Engine's LayerNormColumnParallelLinear) and so inside it.
void core_mlp_forward(const CoreShape& c, bool rerun, std::vector<KernelWork>& out) {
  const double fc1 = c.swiglu ? 2 * c.F : c.F;
  core_norm_fwd("pre_mlp_norm_fwd", c, out);
  quantize_column_parallel_input("fc1_input_cast", "fc1_input_amax", c.H, c, out);
  quantize("fc1_weight_cast", "fc1_weight_amax", c.H * fc1 / c.microbatches, c, out);
  out.push_back(core_gemm("fc1_gemm", GemmPass::Forward, c.T, fc1, c.H, c, true));
  // Fused bias-SwiGLU reads both halves and writes one; bias-GeLU reads and writes F.
  out.push_back(mem(c.swiglu ? "swiglu_fwd" : "bias_gelu_fwd", c.T * (fc1 + c.F) * c.e));
  quantize("fc2_input_cast", "fc2_input_amax", c.T * c.F, c, out);
  quantize("fc2_weight_cast", "fc2_weight_amax", c.F * c.H / c.microbatches, c, out);
  out.push_back(core_gemm("fc2_gemm", GemmPass::Forward, c.T, c.H, c.F, c, true));
  if (!rerun) core_residual_fwd(c, out);  // outside the module (TransformerLayer's BDA)
}

void core_mlp_backward(const CoreShape& c, std::vector<KernelWork>& out) {
  const double fc1 = c.swiglu ? 2 * c.F : c.F;
  core_residual_bwd(c, out);
  core_linear_bwd("fc2_grad_cast", "fc2_grad_amax", "fc2_dgrad", "fc2_wgrad", c.T, c.H, c.F, c,
                  out);
  // Activation backward: read dy (F) and the saved input (fc1 wide), write d(input).
  out.push_back(mem(c.swiglu ? "swiglu_bwd" : "bias_gelu_bwd", c.T * (c.F + 2 * fc1) * c.e));
  column_parallel_input_transpose("fc1_input_transpose", c.H, c, out);
  core_linear_bwd("fc1_grad_cast", "fc1_grad_amax", "fc1_dgrad", "fc1_wgrad", c.T, fc1, c.H, c,
                  out);
  core_norm_bwd("pre_mlp_norm_bwd", c, out);
}

void core_embed(const CoreShape& c, bool forward, std::vector<KernelWork>& out) {
  // LanguageModelEmbedding: word embedding gather (masked per vocab shard with TP), learned
  // positions only without RoPE, dropout only when p > 0, transpose to [s, b, h].
  const double TH = c.T * c.H;
  if (forward) {
    out.push_back(mem("word_embedding_gather", 2 * TH * c.e));
    if (c.tp > 1) out.push_back(mem("word_embedding_mask", 2 * TH * c.e));
    if (!c.rope) {
      out.push_back(mem("position_embedding_gather", 2 * TH * c.e));
      out.push_back(mem("embedding_add", 3 * TH * c.e));
    }
    if (c.hdrop) out.push_back(mem("embedding_dropout_fwd", c.Tsp * c.H * (2 * c.e + c.mk)));
    out.push_back(mem("embedding_transpose", 2 * c.Tsp * c.H * c.e));
    return;
  }
  out.push_back(mem("embedding_transpose_bwd", 2 * c.Tsp * c.H * c.e));
  if (c.hdrop) out.push_back(mem("embedding_dropout_bwd", c.Tsp * c.H * (2 * c.e + c.mk)));
  out.push_back(mem("word_embedding_bwd", (c.Vr * c.H + 3 * TH) * c.e));
  // The distributed data-parallel hook adds the dense gradient into the parameter's main_grad
  // (read both, write main_grad), in the main_grad's type: fp32, or bf16 with
  // grad_reduce_in_fp32 false (c.mg, as the layers' weight-gradient GEMMs write it).
  out.push_back(mem("embedding_grad_accumulate", c.Vr * c.H * (c.e + 2 * c.mg)));
  if (!c.rope) {
    out.push_back(mem("position_embedding_bwd", (c.s * c.H + 3 * TH) * c.e));
    out.push_back(mem("position_grad_accumulate", c.s * c.H * (c.e + 2 * c.mg)));
  }
}

/// A multi-token prediction layer's input (Megatron-Core multi_token_prediction.py
/// MultiTokenPredictionLayer.forward): the shifted tokens' embedding (core_embed), enorm over
/// it and hnorm over the decoder's hidden states, their concatenation, and eh_proj, a
/// column-parallel 2h -> h / tp linear over all T tokens (the input gathered under sequence
/// parallelism; that gather and the all-gather of its output are not modelled). Backward in
/// reverse order.
void core_mtp_input(const CoreShape& c, bool forward, std::vector<KernelWork>& out) {
  const double cat = 2 * c.H;  // [enorm(embedding), hnorm(hidden)]
  if (forward) {
    core_embed(c, true, out);
    norm_pass("mtp_enorm_fwd", c.Tsp, c.H, true, c, out);
    norm_pass("mtp_hnorm_fwd", c.Tsp, c.H, true, c, out);
    out.push_back(mem("mtp_concat", 2 * c.Tsp * cat * c.e));
    quantize("mtp_eh_proj_input_cast", "mtp_eh_proj_input_amax", c.T * cat, c, out);
    out.push_back(core_gemm("mtp_eh_proj", GemmPass::Forward, c.T, c.H / c.tp, cat, c, true));
    return;
  }
  core_linear_bwd("mtp_eh_proj_grad_cast", "mtp_eh_proj_grad_amax", "mtp_eh_proj_dgrad",
                  "mtp_eh_proj_wgrad", c.T, c.H / c.tp, cat, c, out);
  out.push_back(mem("mtp_concat_bwd", 2 * c.Tsp * cat * c.e));
  norm_pass("mtp_hnorm_bwd", c.Tsp, c.H, false, c, out);
  norm_pass("mtp_enorm_bwd", c.Tsp, c.H, false, c, out);
  core_embed(c, false, out);
}

void core_logits(const CoreShape& c, bool forward, std::vector<KernelWork>& out) {
  // Final norm, the output layer (bf16: TE keeps it out of FP8), and Megatron-Core's fused
  // vocab-parallel cross entropy (cross_entropy_loss_fusion): forward reads the bf16 logits
  // for the max and for the exp-sum; backward reads them and writes the gradient.
  const double TV = c.T * c.Vr;
  if (forward) {
    core_norm_fwd("final_norm_fwd", c, out);
    out.push_back(core_gemm("logits_gemm", GemmPass::Forward, c.T, c.Vr, c.H, c, false));
    out.push_back(mem("fused_xent_fwd", 2 * TV * c.e));
    return;
  }
  out.push_back(mem("fused_xent_bwd", 2 * TV * c.e));
  out.push_back(core_gemm("logits_dgrad", GemmPass::Dgrad, c.T, c.H, c.Vr, c, false));
  out.push_back(core_gemm("logits_wgrad", GemmPass::Wgrad, c.Vr, c.H, c.T, c, false));
  core_norm_bwd("final_norm_bwd", c, out);
}

/// Transformer Engine's userbuffers overlap (parallel.tp_comm_overlap): every tensor-parallel
/// collective of a dense block runs inside one of its GEMMs. TE's default methods (v2.9
/// pytorch/module/base.py initialize_ub, get_default_config):
///  - ring exchange, the GEMM in t pieces with each piece's peer-to-peer transfer (copy engines)
///    beside the previous piece: qkv_fprop / fc1_fprop all-gather the input (FP8 under FP8),
///    proj_dgrad / fc2_dgrad all-gather the output gradient (FP8 under FP8);
///  - pipeline, the GEMM in 4 pieces on the SMs the reduce-scatter kernels (16) leave, each
///    piece's reduce-scatter beside the next piece: proj_fprop / fc2_fprop; Megatron-Bridge's
///    FP8 H100 configurations run these as ring exchanges too (src/megatron/bridge/training/
///    comm_overlap.py userbuffers_fp8_h100_h8192_tp4_mbs1_seqlen8192:
///    RingExchangeOverlapCfg), parallel.tp_comm_overlap_rs_method: ring_exchange;
///  - bulk, the collective beside the whole GEMM: qkv_dgrad / fc1_dgrad re-gather the saved
///    input for the weight gradient (FP8 under FP8), qkv_wgrad / fc1_wgrad reduce-scatter the
///    input gradient. Their SMs are not reserved (Megatron-Bridge's H100 configurations:
///    BulkOverlapCfg set_sm_margin=False).
/// Per rank each collective moves the other ranks' T - Tsp rows of an h-wide tensor.
void tp_overlap(const CoreShape& c, bool rs_ring, std::vector<KernelWork>& out) {
  const double rows = c.T - c.Tsp, quantized = c.fp8 ? 1.0 : c.e;
  enum class Method { Ring, Pipeline, Bulk };
  const Method rs = rs_ring ? Method::Ring : Method::Pipeline;
  struct Pair {
    const char* gemm;
    double bytes_per_element;
    Method method;
  };
  const Pair pairs[] = {
      {"qkv_gemm", quantized, Method::Ring},   {"fc1_gemm", quantized, Method::Ring},
      {"proj_gemm", c.e, rs},                  {"fc2_gemm", c.e, rs},
      {"proj_dgrad", quantized, Method::Ring}, {"fc2_dgrad", quantized, Method::Ring},
      {"qkv_dgrad", quantized, Method::Bulk},  {"fc1_dgrad", quantized, Method::Bulk},
      {"qkv_wgrad", c.e, Method::Bulk},        {"fc1_wgrad", c.e, Method::Bulk}};
  constexpr double kPipelineSplits = 4, kPipelineSms = 16;  // TE get_default_config
  for (KernelWork& k : out)
    for (const Pair& p : pairs) {
      if (std::string_view(k.name) != p.gemm) continue;
      k.overlap_comm_bytes = rows * c.H * p.bytes_per_element;
      k.overlap_chunks = p.method == Method::Ring       ? c.tp
                         : p.method == Method::Pipeline ? kPipelineSplits
                                                        : 0;
      k.overlap_pipeline = p.method == Method::Pipeline;
      k.overlap_sms = p.method == Method::Pipeline ? kPipelineSms : 0;
    }
}

}  // namespace

}  // namespace trainsim::kernel_lists

namespace trainsim {

std::vector<KernelWork> core_op_kernels(const OpDesc& op) {
  using namespace kernel_lists;
  std::vector<KernelWork> out;
  const CoreShape c = core_shape_of(op);
  switch (op.kind) {
    case OpKind::AttnFwd: core_attn_forward(op, c, out); break;
    case OpKind::AttnBwd: core_attn_backward(op, c, out); break;
    case OpKind::MlpFwd:
      if (op.features.experts_local > 0) core_moe(op, c, true, out);
      else core_mlp_forward(c, op.features.checkpoint_rerun, out);
      break;
    case OpKind::MlpBwd:
      if (op.features.experts_local > 0) core_moe(op, c, false, out);
      else core_mlp_backward(c, out);
      break;
    case OpKind::EmbedFwd:
    case OpKind::EmbedBwd:
      if (op.features.mtp_input) core_mtp_input(c, op.kind == OpKind::EmbedFwd, out);
      else core_embed(c, op.kind == OpKind::EmbedFwd, out);
      break;
    case OpKind::LogitsLossFwd: core_logits(c, true, out); break;
    case OpKind::LogitsLossBwd: core_logits(c, false, out); break;
    default: break;
  }
  const bool dense_block = op.kind == OpKind::AttnFwd || op.kind == OpKind::AttnBwd ||
                           ((op.kind == OpKind::MlpFwd || op.kind == OpKind::MlpBwd) &&
                            op.features.experts_local == 0);
  if (op.features.tp_overlap && dense_block) tp_overlap(c, op.features.tp_overlap_rs_ring, out);
  return out;
}

}  // namespace trainsim
