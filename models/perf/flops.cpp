// Kernel lists of Megatron-LM's 2021 transformer layer (the code SC'21 ran: commit 6985e58,
// container nvcr.io pytorch:20.12), and the closed-form FLOP counts of the papers.
//
// Notation (one rank): T = b*s tokens; Tsp = T/tp in the LayerNorm / dropout regions when
// sequence parallelism is on, else T; H = hidden; P = heads*head_dim (this rank's attention
// width); F = ffn (this rank's); Vr = vocab rows on this rank; N = b*heads*s*s attention-score
// elements; e = bytes per fp16/bf16 element (2). A GEMM moves its operands and result once:
// (m*k + k*n + m*n)*e, more only when it also reads C.
#include "models/perf/flops.h"

#include <stdexcept>
#include <string>
#include <string_view>

#include "models/errors.h"

namespace trainsim {
namespace {

constexpr double kMaskBytes = 1.0;       // dropout masks are bool tensors (1 byte / element)
constexpr double kFp32Bytes = 4.0;
constexpr double kLayerNormStatsBytes = 2 * kFp32Bytes;  // apex saves fp32 mean and invvar per row

struct Shape {
  double b, s, T, Tsp, H, heads, hd, P, F, Vr, N, e, tp;
};

Shape shape_of(const OpDesc& op) {
  auto need = [&](std::int64_t v, const char* field) {
    TRAINSIM_CHECK(v > 0, std::string("op_kernels: ") + to_string(op.kind) + " needs " + field +
                              " > 0, got " + std::to_string(v));
  };
  need(op.micro_batch, "micro_batch");
  need(op.seq, "seq");
  need(op.hidden, "hidden");
  need(op.tp, "tp");
  Shape sh{};
  sh.b = static_cast<double>(op.micro_batch);
  sh.s = static_cast<double>(op.seq);
  sh.T = sh.b * sh.s;
  sh.tp = static_cast<double>(op.tp);
  sh.Tsp = op.sequence_parallel ? sh.T / sh.tp : sh.T;
  sh.H = static_cast<double>(op.hidden);
  sh.heads = static_cast<double>(op.heads);
  sh.hd = static_cast<double>(op.head_dim);
  sh.P = sh.heads * sh.hd;
  sh.F = static_cast<double>(op.ffn);
  sh.Vr = static_cast<double>(op.vocab);
  sh.N = sh.b * sh.heads * sh.s * sh.s;
  sh.e = element_bytes(op.precision);
  return sh;
}

KernelWork gemm(const char* name, double m, double n, double k, double e, double batch = 1) {
  KernelWork w;
  w.name = name;
  w.cls = KernelClass::Gemm;
  w.m = m;
  w.n = n;
  w.k = k;
  w.batch = batch;
  w.flops = 2.0 * m * n * k * batch;
  w.bytes = (m * k + k * n + m * n) * e * batch;
  return w;
}

KernelWork mem(const char* name, double bytes) {
  KernelWork w;
  w.name = name;
  w.cls = KernelClass::MemoryBound;
  w.bytes = bytes;
  return w;
}

// Weight-gradient accumulation into Megatron's contiguous grad buffer (local DDP:
// `param.main_grad.add_(param.grad)`): read grad (e), read + write main_grad. main_grad is
// fp32 with bf16 (arguments.py forces accumulate_allreduce_grads_in_fp32) and fp16 otherwise
// (the SC'21 default).
double main_grad_bytes(Precision p) { return p == Precision::FP16 ? 2.0 : kFp32Bytes; }
KernelWork grad_accumulate(const char* name, double weights, Precision p) {
  return mem(name, weights * (element_bytes(p) + 2 * main_grad_bytes(p)));
}

// ---------------------------------------------------------------- transformer layer, forward
// Attention block (ParallelAttention + the surrounding residual of ParallelTransformerLayer).
void attn_core_forward(const Shape& x, std::vector<KernelWork>& out) {
  // baddbmm(beta=0, alpha=1/sqrt(hd)) into a fresh [b*heads, s, s] buffer: Q K^T per head;
  // q and k are strided views of the QKV output (split + view, no copy), C is not read.
  out.push_back(gemm("qk_baddbmm", x.s, x.s, x.hd, x.e, x.b * x.heads));
  // FusedScaleMaskSoftmax, upper-triangular (causal) fused kernel: read scores, write probs.
  out.push_back(mem("softmax_fwd", 2 * x.N * x.e));
  // torch dropout on the probabilities: read probs, write output and a bool mask.
  out.push_back(mem("attn_dropout_fwd", x.N * (2 * x.e + kMaskBytes)));
  // bmm(probs, V): [s x s] x [s x hd] per head.
  out.push_back(gemm("pv_bmm", x.s, x.hd, x.s, x.e, x.b * x.heads));
  // context [b, heads, s, hd] -> [s, b, heads*hd]: permute(...).contiguous(), one copy.
  out.push_back(mem("context_permute", 2 * x.T * x.P * x.e));
}

void attn_forward(const Shape& x, std::vector<KernelWork>& out) {
  // apex FusedLayerNorm: read x, write y, save fp32 mean/invvar.
  out.push_back(mem("input_layernorm_fwd", x.Tsp * (2 * x.H * x.e + kLayerNormStatsBytes)));
  // ColumnParallelLinear QKV [T x H] x [H x 3P]; F.linear on a 3-D input = matmul, then an
  // in-place bias add (read + write the output, read the bias).
  out.push_back(gemm("qkv_gemm", x.T, 3 * x.P, x.H, x.e));
  out.push_back(mem("qkv_bias_add", (2 * x.T * 3 * x.P + 3 * x.P) * x.e));
  attn_core_forward(x, out);
  // RowParallelLinear dense [T x P] x [P x H], skip_bias_add (bias goes to the fused kernel).
  out.push_back(gemm("proj_gemm", x.T, x.H, x.P, x.e));
  // JIT-fused bias-dropout-add: read x, bias, residual; write out and the mask.
  out.push_back(mem("bias_dropout_add_fwd", x.Tsp * x.H * (4 * x.e + kMaskBytes) + x.H * x.e));
}

void mlp_forward(const Shape& x, std::vector<KernelWork>& out) {
  out.push_back(mem("post_attention_layernorm_fwd",
                    x.Tsp * (2 * x.H * x.e + kLayerNormStatsBytes)));
  out.push_back(gemm("fc1_gemm", x.T, x.F, x.H, x.e));          // skip_bias_add
  out.push_back(mem("bias_gelu_fwd", (2 * x.T * x.F + x.F) * x.e));  // JIT-fused bias + GeLU
  out.push_back(gemm("fc2_gemm", x.T, x.H, x.F, x.e));          // skip_bias_add
  out.push_back(mem("bias_dropout_add_fwd", x.Tsp * x.H * (4 * x.e + kMaskBytes) + x.H * x.e));
}

// --------------------------------------------------------------- transformer layer, backward
// Backward of a linear layer Y[m x n] = X[m x k] W[k x n]: dgrad dX = dY W^T (m x k, inner n),
// wgrad dW = X^T dY (k x n, inner m), then accumulate dW into the grad buffer.
void linear_backward(const char* dgrad, const char* wgrad, const char* acc, double m, double n,
                     double k, const Shape& x, Precision p, std::vector<KernelWork>& out) {
  out.push_back(gemm(dgrad, m, k, n, x.e));
  out.push_back(gemm(wgrad, k, n, m, x.e));
  out.push_back(grad_accumulate(acc, k * n, p));
}

// bias-dropout-add backward: dx = dy * mask * scale (read dy and mask, write dx), bias grad =
// column sum of dx (read dx); the residual branch passes dy through.
void bias_dropout_add_backward(const Shape& x, std::vector<KernelWork>& out) {
  out.push_back(mem("bias_dropout_add_bwd", x.Tsp * x.H * (2 * x.e + kMaskBytes)));
  out.push_back(mem("bias_grad_reduce", x.Tsp * x.H * x.e + x.H * x.e));
}

// apex FusedLayerNorm backward: part-gamma/beta kernel reads dy and x; grad-input kernel reads
// dy and x and writes dx (mean/invvar reread); then autograd adds the residual branch's
// gradient to dx (read two, write one).
void layernorm_backward(const char* name, const char* residual_name, const Shape& x,
                        std::vector<KernelWork>& out) {
  out.push_back(mem(name, x.Tsp * (5 * x.H * x.e + 2 * kLayerNormStatsBytes)));
  out.push_back(mem(residual_name, 3 * x.Tsp * x.H * x.e));
}

void attn_core_backward(const Shape& x, std::vector<KernelWork>& out) {
  out.push_back(mem("context_permute_bwd", 2 * x.T * x.P * x.e));
  // bmm(probs, V) backward: dProbs = dCtx V^T ([s x hd] x [hd x s]), dV = probs^T dCtx.
  out.push_back(gemm("pv_bmm_dgrad_probs", x.s, x.s, x.hd, x.e, x.b * x.heads));
  out.push_back(gemm("pv_bmm_dgrad_v", x.s, x.hd, x.s, x.e, x.b * x.heads));
  // dropout backward: read dy and mask, write dx.
  out.push_back(mem("attn_dropout_bwd", x.N * (2 * x.e + kMaskBytes)));
  // fused softmax backward: read dy and the saved softmax output, write dx (scale fused).
  out.push_back(mem("softmax_bwd", 3 * x.N * x.e));
  // baddbmm backward: dQ = dS K ([s x s] x [s x hd]), dK = dS^T Q.
  out.push_back(gemm("qk_baddbmm_dgrad_q", x.s, x.hd, x.s, x.e, x.b * x.heads));
  out.push_back(gemm("qk_baddbmm_dgrad_k", x.s, x.hd, x.s, x.e, x.b * x.heads));
  // dQ, dK, dV come back as [b*heads, s, hd]; split/view backward assembles them into the
  // interleaved [s, b, heads, 3*hd] gradient of the QKV output: one copy of 3*T*P elements.
  out.push_back(mem("qkv_grad_assemble", 2 * 3 * x.T * x.P * x.e));
}

void attn_backward(const Shape& x, const OpDesc& op, std::vector<KernelWork>& out) {
  // Selective recomputation (Korthikanti et al. 2022): re-run the core attention forward.
  if (op.recompute_core_attention) attn_core_forward(x, out);
  bias_dropout_add_backward(x, out);
  linear_backward("proj_dgrad", "proj_wgrad", "proj_grad_accumulate", x.T, x.H, x.P, x,
                  op.precision, out);
  attn_core_backward(x, out);
  out.push_back(mem("qkv_bias_grad_reduce", (x.T * 3 * x.P + 3 * x.P) * x.e));
  linear_backward("qkv_dgrad", "qkv_wgrad", "qkv_grad_accumulate", x.T, 3 * x.P, x.H, x,
                  op.precision, out);
  layernorm_backward("input_layernorm_bwd", "residual_grad_add", x, out);
}

void mlp_backward(const Shape& x, const OpDesc& op, std::vector<KernelWork>& out) {
  bias_dropout_add_backward(x, out);
  linear_backward("fc2_dgrad", "fc2_wgrad", "fc2_grad_accumulate", x.T, x.H, x.F, x,
                  op.precision, out);
  // JIT-fused bias-GeLU backward: read dy and the saved pre-activation, write dx; fc1 bias
  // grad = column sum of dx.
  out.push_back(mem("bias_gelu_bwd", (3 * x.T * x.F + x.F) * x.e));
  out.push_back(mem("fc1_bias_grad_reduce", (x.T * x.F + x.F) * x.e));
  linear_backward("fc1_dgrad", "fc1_wgrad", "fc1_grad_accumulate", x.T, x.F, x.H, x,
                  op.precision, out);
  layernorm_backward("post_attention_layernorm_bwd", "residual_grad_add", x, out);
}

// --------------------------------------------------------------------- embedding and logits
void embed_forward(const Shape& x, std::vector<KernelWork>& out) {
  // VocabParallelEmbedding: gather T rows (read + write), zero the rows of ids owned by other
  // ranks (masked_fill, read + write); then position embedding gather; add; dropout; and the
  // [b, s, h] -> [s, b, h] transpose(...).contiguous() into the transformer's layout.
  out.push_back(mem("word_embedding_gather", 2 * x.T * x.H * x.e));
  if (x.tp > 1) out.push_back(mem("word_embedding_mask", 2 * x.T * x.H * x.e));
  out.push_back(mem("position_embedding_gather", 2 * x.T * x.H * x.e));
  out.push_back(mem("embedding_add", 3 * x.T * x.H * x.e));
  out.push_back(mem("embedding_dropout_fwd", x.Tsp * x.H * (2 * x.e + kMaskBytes)));
  out.push_back(mem("embedding_transpose", 2 * x.Tsp * x.H * x.e));
}

void embed_backward(const Shape& x, const OpDesc& op, std::vector<KernelWork>& out) {
  out.push_back(mem("embedding_transpose_bwd", 2 * x.Tsp * x.H * x.e));
  out.push_back(mem("embedding_dropout_bwd", x.Tsp * x.H * (2 * x.e + kMaskBytes)));
  // embedding_dense_backward: zero a [Vr x H] gradient, scatter-add T rows into it; the
  // position embedding likewise for [s x H]. Then accumulate both into the grad buffer.
  out.push_back(mem("word_embedding_bwd", (x.Vr * x.H + 3 * x.T * x.H) * x.e));
  out.push_back(mem("position_embedding_bwd", (x.s * x.H + 3 * x.T * x.H) * x.e));
  out.push_back(grad_accumulate("embedding_grad_accumulate", (x.Vr + x.s) * x.H, op.precision));
}

// Megatron 2021 GPT loss: final LayerNorm, transpose back to [b, s, h], parallel_lm_logits
// (F.linear with the tied word-embedding weight, no bias), then
// vocab_parallel_cross_entropy(output.float(), labels) (fp16_lm_cross_entropy off by
// default): every pass over the [T x Vr] logits below is a separate PyTorch kernel.
void logits_forward(const Shape& x, std::vector<KernelWork>& out) {
  const double TV = x.T * x.Vr;
  out.push_back(mem("final_layernorm_fwd", x.Tsp * (2 * x.H * x.e + kLayerNormStatsBytes)));
  out.push_back(mem("output_transpose", 2 * x.T * x.H * x.e));
  out.push_back(gemm("logits_gemm", x.T, x.Vr, x.H, x.e));
  out.push_back(mem("logits_to_fp32", TV * (x.e + kFp32Bytes)));
  out.push_back(mem("xent_max", TV * kFp32Bytes));                  // max over the vocab
  out.push_back(mem("xent_sub_max", 2 * TV * kFp32Bytes));          // in-place subtract
  out.push_back(mem("xent_exp", 2 * TV * kFp32Bytes));              // in-place exp
  out.push_back(mem("xent_sum", TV * kFp32Bytes));                  // sum over the vocab
  out.push_back(mem("xent_div", 2 * TV * kFp32Bytes));              // softmax, saved
}

void logits_backward(const Shape& x, const OpDesc& op, std::vector<KernelWork>& out) {
  const double TV = x.T * x.Vr;
  // grad = softmax - one_hot (the one-hot subtraction touches T elements), times dLoss.
  out.push_back(mem("xent_bwd_scale", 2 * TV * kFp32Bytes));
  out.push_back(mem("logits_grad_to_half", TV * (kFp32Bytes + x.e)));  // .float() backward
  // logits = X W^T with W the [Vr x H] embedding: dX = dL W (T x H, inner Vr), dW = dL^T X.
  out.push_back(gemm("logits_dgrad", x.T, x.H, x.Vr, x.e));
  out.push_back(gemm("logits_wgrad", x.Vr, x.H, x.T, x.e));
  out.push_back(grad_accumulate("logits_grad_accumulate", x.Vr * x.H, op.precision));
  out.push_back(mem("output_transpose_bwd", 2 * x.T * x.H * x.e));
  out.push_back(mem("final_layernorm_bwd", x.Tsp * (5 * x.H * x.e + 2 * kLayerNormStatsBytes)));
}

void need_positive(const OpDesc& op, std::int64_t v, const char* field) {
  TRAINSIM_CHECK(v > 0, std::string("op_kernels: ") + to_string(op.kind) + " needs " + field +
                            " > 0, got " + std::to_string(v));
}

}  // namespace

// ====================================================================== Megatron-Core runtime
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
// amax history instead. The weights are quantized once per iteration (TE caches them after
// the first microbatch): each microbatch's op carries 1 / microbatches of that.
namespace {

struct CoreShape {
  double b, s, cp, T, Tsp, H, heads, groups, hd, P, Pkv, F, Vr, e, tp, mk, stats, mg;
  bool fp8, current, split_fprop, swiglu, rope, hdrop, adrop, flash;
  double window, microbatches;
  // Multi-head latent attention: latent widths, RoPE key width, value head dimension (dv =
  // hd without MLA), the latent norms.
  bool mla, qk_norm, mla_up_rerun;
  double lq, lkv, dr, dv;
};

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

KernelWork core_gemm(const char* name, double m, double n, double k, const CoreShape& c,
                     bool linear, bool wgrad = false) {
  // FP8 GEMMs read 1-byte operands and write e-byte outputs; a weight-gradient GEMM with
  // gradient-accumulation fusion reads and writes its main_grad output (fp32 by default).
  const bool f8 = linear && c.fp8;
  KernelWork w = gemm(name, m, n, k, c.e);
  const double in = f8 ? 1.0 : c.e;
  w.bytes = (m * k + k * n) * in + m * n * (wgrad ? 2 * c.mg : c.e);
  w.fp8 = f8;
  // Transformer Engine's FP8 recipes set cuBLASLt's fast accumulation off for the gradient
  // GEMMs (v2.7 and v2.9, the releases of the NeMo 25.09 and 25.11 containers:
  // common/recipe/__init__.py, DelayedScaling and Float8CurrentScaling fp8_gemm_fprop
  // use_split_accumulator=False, fp8_gemm_dgrad and fp8_gemm_wgrad True, Float8BlockScaling
  // True for all three; module/base.py _2X_ACC_FPROP/_DGRAD/_WGRAD; common/gemm/
  // cublaslt_gemm.cu: fastAccuMode = use_split_accumulator ? 0 : 1).
  w.split_accumulator = f8 && (gemm_pass(name) != GemmPass::Forward || c.split_fprop);
  return w;
}

/// TE quantization of a GEMM input of `elements` (nothing without FP8): with current
/// scaling an amax pass first; the cast writes the FP8 data and its transpose (the weight
/// gradient's operand).
void quantize(const char* name, const char* amax_name, double elements, const CoreShape& c,
              std::vector<KernelWork>& out) {
  if (!c.fp8) return;
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

void core_linear_bwd(const char* cast, const char* amax, const char* dgrad, const char* wgrad,
                     double m, double n, double k, const CoreShape& c,
                     std::vector<KernelWork>& out);  // below

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
  if (!rerun) quantize("q_up_weight_cast", "q_up_weight_amax", m.q_in * m.qk / c.microbatches, c, out);
  out.push_back(core_gemm(rerun ? "q_up_gemm_recompute" : "q_up_gemm", c.T, m.qk, m.q_in, c, true));
  quantize_column_parallel_input(rerun ? "kv_up_input_cast_recompute" : "kv_up_input_cast",
                                 rerun ? "kv_up_input_amax_recompute" : "kv_up_input_amax", c.lkv,
                                 c, out);
  if (!rerun)
    quantize("kv_up_weight_cast", "kv_up_weight_amax", c.lkv * m.kv_up / c.microbatches, c, out);
  out.push_back(
      core_gemm(rerun ? "kv_up_gemm_recompute" : "kv_up_gemm", c.T, m.kv_up, c.lkv, c, true));
  // RoPE and assembly: the query read and written whole; the key built from the up
  // projection's dn columns and the shared RoPE key, the value copied out (read the up
  // projection's output and the RoPE key, write k and v).
  out.push_back(mem(rerun ? "mla_rope_q_recompute" : "mla_rope_q_fwd", 2 * c.T * m.qk * c.e));
  out.push_back(mem(rerun ? "mla_rope_kv_recompute" : "mla_rope_kv_fwd",
                    c.T * (m.kv_up + c.dr + m.qk + m.v) * c.e));
}

void mla_attn_forward(const OpDesc& op, const CoreShape& c, std::vector<KernelWork>& out) {
  const MlaShape m = mla_shape(c);
  core_norm_fwd("input_norm_fwd", c, out);
  if (c.lq > 0) {
    quantize("q_down_input_cast", "q_down_input_amax", c.Tsp * c.H, c, out);
    quantize("q_down_weight_cast", "q_down_weight_amax", c.H * c.lq / c.microbatches, c, out);
    out.push_back(core_gemm("q_down_gemm", c.Tsp, c.lq, c.H, c, true));
  }
  quantize("kv_down_input_cast", "kv_down_input_amax", c.Tsp * c.H, c, out);
  quantize("kv_down_weight_cast", "kv_down_weight_amax", c.H * (c.lkv + c.dr) / c.microbatches, c,
           out);
  out.push_back(core_gemm("kv_down_gemm", c.Tsp, c.lkv + c.dr, c.H, c, true));
  mla_up_forward(c, false, out);
  core_attention_fwd(op, c, out);
  quantize("proj_input_cast", "proj_input_amax", c.T * m.v, c, out);
  quantize("proj_weight_cast", "proj_weight_amax", m.v * c.H / c.microbatches, c, out);
  out.push_back(core_gemm("proj_gemm", c.T, c.H, m.v, c, true));
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
  out.push_back(core_gemm("qkv_gemm", c.T, qkv, c.H, c, true));
  qk_norms(c, true, out);
  if (c.rope) out.push_back(mem("rope_fwd", 2 * c.T * (c.P + c.Pkv) * c.e));
  core_attention_fwd(op, c, out);
  quantize("proj_input_cast", "proj_input_amax", c.T * c.P, c, out);
  quantize("proj_weight_cast", "proj_weight_amax", c.P * c.H / c.microbatches, c, out);
  out.push_back(core_gemm("proj_gemm", c.T, c.H, c.P, c, true));
  core_residual_fwd(c, out);
}

/// dgrad and wgrad of a linear layer Y[m x n] = X[m x k] W[k x n], with the quantization of
/// dY under FP8.
void core_linear_bwd(const char* cast, const char* amax, const char* dgrad, const char* wgrad,
                     double m, double n, double k, const CoreShape& c,
                     std::vector<KernelWork>& out) {
  quantize(cast, amax, m * n, c, out);
  out.push_back(core_gemm(dgrad, m, k, n, c, true));
  out.push_back(core_gemm(wgrad, k, n, m, c, true, true));
}

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
  out.push_back(core_gemm("fc1_gemm", c.T, fc1, c.H, c, true));
  // Fused bias-SwiGLU reads both halves and writes one; bias-GeLU reads and writes F.
  out.push_back(mem(c.swiglu ? "swiglu_fwd" : "bias_gelu_fwd", c.T * (fc1 + c.F) * c.e));
  quantize("fc2_input_cast", "fc2_input_amax", c.T * c.F, c, out);
  quantize("fc2_weight_cast", "fc2_weight_amax", c.F * c.H / c.microbatches, c, out);
  out.push_back(core_gemm("fc2_gemm", c.T, c.H, c.F, c, true));
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

void core_logits(const CoreShape& c, bool forward, std::vector<KernelWork>& out) {
  // Final norm, the output layer (bf16: TE keeps it out of FP8), and Megatron-Core's fused
  // vocab-parallel cross entropy (cross_entropy_loss_fusion): forward reads the bf16 logits
  // for the max and for the exp-sum; backward reads them and writes the gradient.
  const double TV = c.T * c.Vr;
  if (forward) {
    core_norm_fwd("final_norm_fwd", c, out);
    out.push_back(core_gemm("logits_gemm", c.T, c.Vr, c.H, c, false));
    out.push_back(mem("fused_xent_fwd", 2 * TV * c.e));
    return;
  }
  out.push_back(mem("fused_xent_bwd", 2 * TV * c.e));
  out.push_back(core_gemm("logits_dgrad", c.T, c.H, c.Vr, c, false));
  out.push_back(core_gemm("logits_wgrad", c.Vr, c.H, c.T, c, false, true));
  core_norm_bwd("final_norm_bwd", c, out);
}


// Mixture of experts (Megatron-Core MoELayer with the alltoall token dispatcher,
// megatron/core/transformer/moe/): the pre-MLP norm; the router (a bf16 GEMM h x E, softmax
// and top-k over E scores per token); permute (gather each token's k copies in expert order);
// [the dispatch all-to-all over the EP group: a collective of its own, models/builder]; the
// local experts' MLPs (one grouped GEMM over the E / EP experts with --moe-grouped-gemm, else
// one GEMM per expert), on T k tokens arriving per rank when balanced (each rank receives what
// it sends), times the imbalance factor on the busiest rank, the routing weights applied in
// the activation (experts.py activation_func_with_probs: it reads the fp32 weights, and its
// backward writes their gradient); [the combine all-to-all]; unpermute, an unweighted gather
// back to token order; the shared expert (a dense MLP) if any.
/// The GEMMs of the local experts, each C[m x n] = A[m x k] B[k x n] with the per-expert shape
/// (m or k is the expert's tokens: the token copies on this rank / its local experts).
void expert_gemms(const char* name, double m, double n, double k, const CoreShape& c,
                  const ModelFeatures& f, bool wgrad, std::vector<KernelWork>& out) {
  const double experts = double(f.experts_local);
  if (f.grouped_gemm) {
    KernelWork w = core_gemm(name, m, n, k, c, true, wgrad);
    w.batch = experts;
    w.flops *= experts;
    w.bytes *= experts;
    out.push_back(w);
  } else {
    for (std::int64_t e = 0; e < f.experts_local; ++e) out.push_back(core_gemm(name, m, n, k, c, true, wgrad));
  }
}

/// The shared expert's forward (a dense MLP of Fs on every token of the layer), or its re-run
/// before its backward (`rerun`, --recompute-modules shared_experts).
void shared_expert_forward(const CoreShape& c, double Fs, bool rerun, std::vector<KernelWork>& out) {
  const double Fs1 = c.swiglu ? 2 * Fs : Fs;
  out.push_back(core_gemm(rerun ? "shared_fc1_gemm_recompute" : "shared_fc1_gemm", c.T, Fs1, c.H,
                          c, true));
  out.push_back(mem(rerun ? "shared_swiglu_recompute" : "shared_swiglu_fwd", c.T * (Fs1 + Fs) * c.e));
  out.push_back(core_gemm(rerun ? "shared_fc2_gemm_recompute" : "shared_fc2_gemm", c.T, c.H, Fs, c,
                          true));
}

void core_moe(const OpDesc& op, const CoreShape& c, bool forward, std::vector<KernelWork>& out) {
  const ModelFeatures& f = op.features;
  const double E = double(f.num_experts), kk = double(f.topk);
  const double tokens = c.Tsp * kk * f.imbalance;  // token copies on this rank's experts
  const double te = tokens / double(f.experts_local);  // tokens per local expert
  const double Fe = double(f.expert_ffn), F1 = c.swiglu ? 2 * Fe : Fe;
  const double Fs = double(f.shared_ffn), Fs1 = c.swiglu ? 2 * Fs : Fs;
  if (forward) {
    // --recompute-modules moe re-runs the MoELayer alone: the pre-MLP norm (a separate TENorm
    // before it) and the bias-dropout-add after it are outside the checkpoint.
    const bool rerun = f.checkpoint_rerun;
    if (!rerun) core_norm_fwd("pre_mlp_norm_fwd", c, out);
    out.push_back(core_gemm("router_gemm", c.Tsp, E, c.H, c, false));
    out.push_back(mem("router_topk", c.Tsp * E * 2 * kFp32Bytes));
    out.push_back(mem("moe_permute", c.Tsp * c.H * c.e + tokens * c.H * c.e));
    quantize("expert_fc1_input_cast", "expert_fc1_input_amax", tokens * c.H, c, out);
    expert_gemms("expert_fc1_gemm", te, F1, c.H, c, f, false, out);
    out.push_back(mem(c.swiglu ? "expert_swiglu_fwd" : "expert_gelu_fwd",
                      tokens * ((F1 + Fe) * c.e + kFp32Bytes)));
    quantize("expert_fc2_input_cast", "expert_fc2_input_amax", tokens * Fe, c, out);
    expert_gemms("expert_fc2_gemm", te, c.H, Fe, c, f, false, out);
    out.push_back(mem("moe_unpermute", tokens * c.H * c.e + c.Tsp * c.H * c.e));
    if (Fs > 0) shared_expert_forward(c, Fs, false, out);
    if (!rerun) core_residual_fwd(c, out);
    return;
  }
  core_residual_bwd(c, out);
  // --recompute-modules layernorm: the pre-MLP norm re-runs when the MoE output's gradient
  // arrives (TransformerLayer's CheckpointWithoutOutput registers it on the MLP output).
  if (f.recompute_layernorm) core_norm_fwd("pre_mlp_norm_recompute", c, out);
  if (Fs > 0) {
    // --recompute-modules shared_experts: its checkpointed forward first.
    if (f.recompute_shared) shared_expert_forward(c, Fs, true, out);
    core_linear_bwd("shared_fc2_grad_cast", "shared_fc2_grad_amax", "shared_fc2_dgrad",
                    "shared_fc2_wgrad", c.T, c.H, Fs, c, out);
    out.push_back(mem("shared_swiglu_bwd", c.T * (Fs + 2 * Fs1) * c.e));
    core_linear_bwd("shared_fc1_grad_cast", "shared_fc1_grad_amax", "shared_fc1_dgrad",
                    "shared_fc1_wgrad", c.T, Fs1, c.H, c, out);
  }
  out.push_back(mem("moe_unpermute_bwd", tokens * c.H * c.e + c.Tsp * c.H * c.e));
  // --recompute-modules moe_act: the weighted activation (and its FP8 cast for fc2) re-runs
  // when fc2's output gradient arrives (experts.py discard_output_and_register_recompute).
  if (f.recompute_moe_act) {
    out.push_back(mem(c.swiglu ? "expert_swiglu_recompute" : "expert_gelu_recompute",
                      tokens * ((F1 + Fe) * c.e + kFp32Bytes)));
    quantize("expert_fc2_input_cast_recompute", "expert_fc2_input_amax_recompute", tokens * Fe, c,
             out);
  }
  quantize("expert_fc2_grad_cast", "expert_fc2_grad_amax", tokens * c.H, c, out);
  expert_gemms("expert_fc2_dgrad", te, Fe, c.H, c, f, false, out);
  expert_gemms("expert_fc2_wgrad", Fe, c.H, te, c, f, true, out);
  out.push_back(mem(c.swiglu ? "expert_swiglu_bwd" : "expert_gelu_bwd",
                    tokens * ((Fe + 2 * F1) * c.e + 2 * kFp32Bytes)));
  quantize("expert_fc1_grad_cast", "expert_fc1_grad_amax", tokens * F1, c, out);
  expert_gemms("expert_fc1_dgrad", te, c.H, F1, c, f, false, out);
  expert_gemms("expert_fc1_wgrad", c.H, F1, te, c, f, true, out);
  out.push_back(mem("moe_permute_bwd", c.Tsp * c.H * c.e + tokens * c.H * c.e));
  out.push_back(mem("router_topk_bwd", c.Tsp * E * 2 * kFp32Bytes));
  out.push_back(core_gemm("router_dgrad", c.Tsp, c.H, E, c, false));
  out.push_back(core_gemm("router_wgrad", E, c.H, c.Tsp, c, false, true));
  core_norm_bwd("pre_mlp_norm_bwd", c, out);
}

}  // namespace

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

std::vector<KernelWork> core_op_kernels(const OpDesc& op) {
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
    case OpKind::EmbedFwd: core_embed(c, true, out); break;
    case OpKind::EmbedBwd: core_embed(c, false, out); break;
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

GemmPass gemm_pass(const char* kernel_name) {
  const std::string_view n = kernel_name ? kernel_name : "";
  if (n.find("dgrad") != n.npos) return GemmPass::Dgrad;
  if (n.find("wgrad") != n.npos) return GemmPass::Wgrad;
  return GemmPass::Forward;
}

double element_bytes(Precision p) {
  switch (p) {
    case Precision::FP16:
    case Precision::BF16:
      return 2.0;
    case Precision::FP32:
      return kFp32Bytes;
  }
  TRAINSIM_CHECK(false, "element_bytes: Precision out of range");
}

std::vector<KernelWork> op_kernels(const OpDesc& op) {
  std::vector<KernelWork> out;
  if (op.features.core && is_compute(op.kind)) {
    if (op.kind == OpKind::AttnFwd || op.kind == OpKind::AttnBwd) {
      need_positive(op, op.heads, "heads");
      need_positive(op, op.head_dim, "head_dim");
    }
    shape_of(op);  // checks micro_batch, seq, hidden, tp
    return core_op_kernels(op);
  }
  switch (op.kind) {
    case OpKind::AttnFwd:
    case OpKind::AttnBwd: {
      need_positive(op, op.heads, "heads");
      need_positive(op, op.head_dim, "head_dim");
      const Shape x = shape_of(op);
      if (op.kind == OpKind::AttnFwd)
        attn_forward(x, out);
      else
        attn_backward(x, op, out);
      break;
    }
    case OpKind::MlpFwd:
    case OpKind::MlpBwd: {
      need_positive(op, op.ffn, "ffn");
      const Shape x = shape_of(op);
      if (op.kind == OpKind::MlpFwd)
        mlp_forward(x, out);
      else
        mlp_backward(x, op, out);
      break;
    }
    case OpKind::EmbedFwd:
    case OpKind::EmbedBwd: {
      need_positive(op, op.vocab, "vocab");
      const Shape x = shape_of(op);
      if (op.kind == OpKind::EmbedFwd)
        embed_forward(x, out);
      else
        embed_backward(x, op, out);
      break;
    }
    case OpKind::LogitsLossFwd:
    case OpKind::LogitsLossBwd: {
      need_positive(op, op.vocab, "vocab");
      const Shape x = shape_of(op);
      if (op.kind == OpKind::LogitsLossFwd)
        logits_forward(x, out);
      else
        logits_backward(x, op, out);
      break;
    }
    case OpKind::OptimizerStepGpu:
      // Megatron's optimizer launches multi-tensor kernels over all parameters; modelled as
      // one memory-bound pass of optimizer_gpu_bytes_per_param bytes per parameter.
      TRAINSIM_CHECK(op.params >= 0, "op_kernels: optimizer step with params < 0");
      out.push_back(mem("mixed_precision_adam",
                        static_cast<double>(op.params) *
                            optimizer_gpu_bytes_per_param(op.precision, op.features.main_grad_bytes)));
      break;
    case OpKind::OptimizerStepCpu:  // host memory, no device kernels
    case OpKind::AllReduce:
    case OpKind::ReduceScatter:
    case OpKind::AllGather:
    case OpKind::SendRecv:
    case OpKind::CopyH2D:
    case OpKind::CopyD2H:
    case OpKind::AllToAll:
      break;
  }
  return out;
}

void fill_work(OpDesc& op) {
  double flops = 0, bytes = 0;
  for (const KernelWork& k : op_kernels(op)) {
    flops += k.flops;
    bytes += k.bytes;
  }
  op.flops = flops;
  op.bytes_accessed = bytes;
}

// Megatron-LM 2021 Float16OptimizerWithFloat16Params + apex FusedAdam, HBM bytes per parameter:
//   fp16 (fp16 grad buffer, dynamic loss scaling):
//     zero the fp16 grad buffer before the iteration ........... 2 (write)
//     main_grad.float() into the fp32 main param's .grad ........ 2 + 4
//     _amp_foreach_non_finite_check_and_unscale_ ................ 4 + 4
//     multi_tensor_l2norm for clip_grad_norm .................... 4
//     multi_tensor_adam: read p, g, m, v; write p, m, v ......... 16 + 12
//     copy fp32 main params to fp16 model params ................ 4 + 2
//     total 54. (The clip multi_tensor_scale, 8 more, runs only when the norm exceeds the
//     threshold: data dependent, not counted.)
//   bf16 (fp32 grad buffer, no loss scaler): zero 4, no cast, no unscale, norm 4, Adam 28,
//     copy back 6: total 42.
//   In general, with a g-byte grad buffer (parallel.grad_reduce_in_fp32: g = 4 if true, else
//   the training precision's 2): zero g; cast g + 4 unless g = 4 (Megatron-Core's
//   _copy_model_grads_to_main_grads: main_param.grad = model_grad.float()); unscale 8 with
//   fp16's loss scaler only; norm 4; Adam 28; copy back 6. bf16 with g = 2: 46; fp16 with
//   g = 4: 50.
//   fp32 (the CPU replay's plain fp32 training, hw_backend/: fp32 grads, fp32 master copy kept
//     as with mixed precision, no cast, no unscale, no norm): Adam 28, copy back 4: total 32.
double optimizer_gpu_bytes_per_param(Precision p, int main_grad_bytes) {
  if (p == Precision::FP32) return 32.0;
  const double g = main_grad_bytes > 0 ? main_grad_bytes : (p == Precision::BF16 ? 4.0 : 2.0);
  const double cast = g < kFp32Bytes ? g + kFp32Bytes : 0.0;
  const double unscale = p == Precision::FP16 ? 2 * kFp32Bytes : 0.0;
  return g + cast + unscale + kFp32Bytes + 28.0 + 6.0;
}

double optimizer_cpu_bytes_per_param() { return 4 * kFp32Bytes + 3 * kFp32Bytes + 2.0; }

// Adam(W) per parameter, counting each add/mul/div/sqrt as one FLOP:
//   m = b1 m + (1-b1) g ........ 3      v = b2 v + (1-b2) g^2 ...... 4
//   denom = sqrt(v)/sqrt(bc2) + eps  3  p -= lr/bc1 * m / denom .... 3
//   decoupled weight decay p -= lr wd p  2   -> 15
double adam_flops_per_param() { return 15.0; }

namespace {

/// Megatron-Core's model FLOPs (megatron/training/training.py num_floating_point_operations,
/// the convention of NVIDIA's published model TFLOP/s, causal attention counted as half the
/// score matrix): per token 6 (forward 1 + backward 2, 2 FLOPs per multiply-add) times the
/// multiply-adds of
///   per layer: QKV h (a + 2g) d, attention a d s / 2 for Q K^T and again for P V, projection
///     a d h, MLP h f (x 1.5 with SwiGLU's gate) for fc1 + fc2, or on MoE layers top-k routed
///     experts h f_moe (x 1.5) each plus the shared expert;
///   once: the output layer h V.
/// With multi-head latent attention the attention terms are Megatron's MLA branch: q
///   Lq (h + a (dn + dr) + 1) (h a (dn + dr) without q_lora_rank), kv Lkv (h + a (dn + dv) + 1)
///   + h dr (the +1s are its norms), projection a dv h, core (a (dn + dr) + a dv) s / 2.
/// No recomputation; sliding windows are not subtracted (Megatron counts full causal).
double core_model_flops_per_iteration(const Scenario& sc) {
  const ModelConfig& m = sc.model;
  const double h = double(m.hidden_size), s = double(m.seq_length), d = double(m.kv_channels);
  const double a = double(m.num_attention_heads), g = double(m.num_query_groups);
  const double gate = m.swiglu ? 3.0 : 2.0;  // fc1 (gated: 2 columns per unit) + fc2
  double attn = h * (a + 2 * g) * d + a * d * s + a * d * h;
  if (m.multi_latent_attention) {
    const double dn = double(m.qk_head_dim), dr = double(m.qk_pos_emb_head_dim);
    const double dv = double(m.v_head_dim), lq = double(m.q_lora_rank);
    const double lkv = double(m.kv_lora_rank);
    const double q = m.q_lora_rank > 0 ? lq * (h + a * (dn + dr) + 1) : h * a * (dn + dr);
    attn = q + lkv * (h + a * (dn + dv) + 1) + h * dr + a * dv * h +
           (a * (dn + dr) + a * dv) * s / 2;
  }
  const double dense_mlp = gate * h * double(m.ffn_hidden_size);
  double moe_mlp = dense_mlp;
  if (m.is_moe())
    moe_mlp = gate * h *
              (double(m.moe_router_topk) * double(m.moe_ffn_hidden_size) +
               double(m.moe_shared_expert_intermediate_size));
  double layers_fma = 0;
  for (std::int64_t l = 0; l < m.num_layers; ++l)
    layers_fma += attn + (m.moe_layer(l) ? moe_mlp : dense_mlp);
  const double per_token = 6.0 * (layers_fma + h * double(m.padded_vocab_size));
  return per_token * double(sc.parallel.global_batch_size) * s;
}

}  // namespace

double model_flops_per_iteration(const Scenario& sc) {
  if (sc.runtime == Runtime::MegatronCore) return core_model_flops_per_iteration(sc);
  const double B = static_cast<double>(sc.parallel.global_batch_size);
  const double s = static_cast<double>(sc.model.seq_length);
  const double l = static_cast<double>(sc.model.num_layers);
  const double h = static_cast<double>(sc.model.hidden_size);
  const double V = static_cast<double>(sc.model.padded_vocab_size);
  return 72.0 * B * s * l * h * h * (1.0 + s / (6.0 * h) + V / (12.0 * l * h));
}

double paper_flops_per_iteration(const Scenario& sc) {
  const double B = static_cast<double>(sc.parallel.global_batch_size);
  const double s = static_cast<double>(sc.model.seq_length);
  const double l = static_cast<double>(sc.model.num_layers);
  const double h = static_cast<double>(sc.model.hidden_size);
  const double V = static_cast<double>(sc.model.padded_vocab_size);
  return 96.0 * B * s * l * h * h * (1.0 + s / (6.0 * h) + V / (16.0 * l * h));
}

}  // namespace trainsim
