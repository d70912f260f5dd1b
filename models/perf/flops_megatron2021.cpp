// Kernel lists of Megatron-LM's 2021 transformer layer (the code SC'21 ran: commit 6985e58,
// container nvcr.io pytorch:20.12): runtime megatron-2021 (models/input/runtime.h
// KernelLists::Megatron2021). Fused LayerNorm, cuBLAS GEMMs, baddbmm/bmm core attention,
// FusedScaleMaskSoftmax, PyTorch dropout, JIT-fused bias-GeLU and bias-dropout-add,
// vocab-parallel cross entropy.
//
// Notation (one rank): T = b*s tokens; Tsp = T/tp in the LayerNorm / dropout regions when
// sequence parallelism is on, else T; H = hidden; P = heads*head_dim (this rank's attention
// width); F = ffn (this rank's); Vr = vocab rows on this rank; N = b*heads*s*s attention-score
// elements; e = bytes per fp16/bf16 element (2). A GEMM moves its operands and result once:
// (m*k + k*n + m*n)*e, more only when it also reads C.
#include <stdexcept>
#include <string>

#include "models/errors.h"
#include "models/perf/kernel_lists.h"

namespace trainsim::kernel_lists {

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

namespace {

// Weight-gradient accumulation into Megatron's contiguous grad buffer (local DDP:
// `param.main_grad.add_(param.grad)`): read grad (e), read + write main_grad. main_grad is
// fp32 with bf16 (arguments.py forces accumulate_allreduce_grads_in_fp32) and fp16 otherwise
// (the SC'21 default).
double main_grad_bytes(Precision p) { return p == Precision::FP16 ? 2.0 : kFp32Bytes; }
KernelWork grad_accumulate(const char* name, double weights, Precision p) {
  return mem(name, weights * (element_bytes(p) + 2 * main_grad_bytes(p)));
}

}  // namespace

// ---------------------------------------------------------------- transformer layer, forward
// Attention block (ParallelAttention + the surrounding residual of ParallelTransformerLayer).
void attn_core_forward(const Shape& x, std::vector<KernelWork>& out) {
  // baddbmm(beta=0, alpha=1/sqrt(hd)) into a fresh [b*heads, s, s] buffer: Q K^T per head;
  // q and k are strided views of the QKV output (split + view, no copy), C is not read.
  out.push_back(gemm("qk_baddbmm", GemmPass::Forward, x.s, x.s, x.hd, x.e, x.b * x.heads));
  // FusedScaleMaskSoftmax, upper-triangular (causal) fused kernel: read scores, write probs.
  out.push_back(mem("softmax_fwd", 2 * x.N * x.e));
  // torch dropout on the probabilities: read probs, write output and a bool mask.
  out.push_back(mem("attn_dropout_fwd", x.N * (2 * x.e + kMaskBytes)));
  // bmm(probs, V): [s x s] x [s x hd] per head.
  out.push_back(gemm("pv_bmm", GemmPass::Forward, x.s, x.hd, x.s, x.e, x.b * x.heads));
  // context [b, heads, s, hd] -> [s, b, heads*hd]: permute(...).contiguous(), one copy.
  out.push_back(mem("context_permute", 2 * x.T * x.P * x.e));
}

namespace {

void attn_forward(const Shape& x, std::vector<KernelWork>& out) {
  // apex FusedLayerNorm: read x, write y, save fp32 mean/invvar.
  out.push_back(mem("input_layernorm_fwd", x.Tsp * (2 * x.H * x.e + kLayerNormStatsBytes)));
  // ColumnParallelLinear QKV [T x H] x [H x 3P]; F.linear on a 3-D input = matmul, then an
  // in-place bias add (read + write the output, read the bias).
  out.push_back(gemm("qkv_gemm", GemmPass::Forward, x.T, 3 * x.P, x.H, x.e));
  out.push_back(mem("qkv_bias_add", (2 * x.T * 3 * x.P + 3 * x.P) * x.e));
  attn_core_forward(x, out);
  // RowParallelLinear dense [T x P] x [P x H], skip_bias_add (bias goes to the fused kernel).
  out.push_back(gemm("proj_gemm", GemmPass::Forward, x.T, x.H, x.P, x.e));
  // JIT-fused bias-dropout-add: read x, bias, residual; write out and the mask.
  out.push_back(mem("bias_dropout_add_fwd", x.Tsp * x.H * (4 * x.e + kMaskBytes) + x.H * x.e));
}

void mlp_forward(const Shape& x, std::vector<KernelWork>& out) {
  out.push_back(mem("post_attention_layernorm_fwd",
                    x.Tsp * (2 * x.H * x.e + kLayerNormStatsBytes)));
  out.push_back(gemm("fc1_gemm", GemmPass::Forward, x.T, x.F, x.H, x.e));  // skip_bias_add
  out.push_back(mem("bias_gelu_fwd", (2 * x.T * x.F + x.F) * x.e));  // JIT-fused bias + GeLU
  out.push_back(gemm("fc2_gemm", GemmPass::Forward, x.T, x.H, x.F, x.e));  // skip_bias_add
  out.push_back(mem("bias_dropout_add_fwd", x.Tsp * x.H * (4 * x.e + kMaskBytes) + x.H * x.e));
}

// --------------------------------------------------------------- transformer layer, backward
// Backward of a linear layer Y[m x n] = X[m x k] W[k x n]: dgrad dX = dY W^T (m x k, inner n),
// wgrad dW = X^T dY (k x n, inner m), then accumulate dW into the grad buffer.
void linear_backward(const char* dgrad, const char* wgrad, const char* acc, double m, double n,
                     double k, const Shape& x, Precision p, std::vector<KernelWork>& out) {
  out.push_back(gemm(dgrad, GemmPass::Dgrad, m, k, n, x.e));
  out.push_back(gemm(wgrad, GemmPass::Wgrad, k, n, m, x.e));
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

}  // namespace

void attn_core_backward(const Shape& x, std::vector<KernelWork>& out) {
  out.push_back(mem("context_permute_bwd", 2 * x.T * x.P * x.e));
  // bmm(probs, V) backward: dProbs = dCtx V^T ([s x hd] x [hd x s]), dV = probs^T dCtx.
  out.push_back(gemm("pv_bmm_dgrad_probs", GemmPass::Dgrad, x.s, x.s, x.hd, x.e, x.b * x.heads));
  out.push_back(gemm("pv_bmm_dgrad_v", GemmPass::Dgrad, x.s, x.hd, x.s, x.e, x.b * x.heads));
  // dropout backward: read dy and mask, write dx.
  out.push_back(mem("attn_dropout_bwd", x.N * (2 * x.e + kMaskBytes)));
  // fused softmax backward: read dy and the saved softmax output, write dx (scale fused).
  out.push_back(mem("softmax_bwd", 3 * x.N * x.e));
  // baddbmm backward: dQ = dS K ([s x s] x [s x hd]), dK = dS^T Q.
  out.push_back(gemm("qk_baddbmm_dgrad_q", GemmPass::Dgrad, x.s, x.hd, x.s, x.e, x.b * x.heads));
  out.push_back(gemm("qk_baddbmm_dgrad_k", GemmPass::Dgrad, x.s, x.hd, x.s, x.e, x.b * x.heads));
  // dQ, dK, dV come back as [b*heads, s, hd]; split/view backward assembles them into the
  // interleaved [s, b, heads, 3*hd] gradient of the QKV output: one copy of 3*T*P elements.
  out.push_back(mem("qkv_grad_assemble", 2 * 3 * x.T * x.P * x.e));
}

namespace {

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
  out.push_back(gemm("logits_gemm", GemmPass::Forward, x.T, x.Vr, x.H, x.e));
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
  out.push_back(gemm("logits_dgrad", GemmPass::Dgrad, x.T, x.H, x.Vr, x.e));
  out.push_back(gemm("logits_wgrad", GemmPass::Wgrad, x.Vr, x.H, x.T, x.e));
  out.push_back(grad_accumulate("logits_grad_accumulate", x.Vr * x.H, op.precision));
  out.push_back(mem("output_transpose_bwd", 2 * x.T * x.H * x.e));
  out.push_back(mem("final_layernorm_bwd", x.Tsp * (5 * x.H * x.e + 2 * kLayerNormStatsBytes)));
}

}  // namespace

std::vector<KernelWork> megatron2021_op_kernels(const OpDesc& op) {
  std::vector<KernelWork> out;
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
    default:
      TRAINSIM_CHECK(false, std::string("megatron2021_op_kernels: ") + to_string(op.kind) +
                                " is not a compute op");
  }
  return out;
}

}  // namespace trainsim::kernel_lists
