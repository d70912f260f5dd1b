// The pieces the kernel lists of models/perf/ share; internal to models/perf/ (the interface
// is flops.h). The lists, by file:
//  - flops_megatron2021.cpp: Megatron-LM's 2021 transformer layer (runtime megatron-2021,
//    models/input/runtime.h KernelLists::Megatron2021), on Shape;
//  - flops_core.cpp: Megatron-Core's transformer layer with Transformer Engine modules (runtime
//    megatron-core): norms, dense attention (flash or unfused), MLP, embedding, logits, FP8
//    casts and the userbuffers overlap of tensor-parallel collectives, on CoreShape;
//  - flops_mla.cpp: multi-head latent attention, and flops_moe.cpp: mixture-of-experts MLPs,
//    both Megatron-Core's, built from flops_core.cpp's pieces;
//  - flops.cpp: the kernel makers (gemm, mem) and the entry points of flops.h.
// A kernel's GEMM pass (KernelWork::pass) is set here, where the kernel is made.
#pragma once

#include <cstdint>
#include <vector>

#include "models/perf/flops.h"

namespace trainsim::kernel_lists {

constexpr double kMaskBytes = 1.0;       // dropout masks are bool tensors (1 byte / element)
constexpr double kFp32Bytes = 4.0;
constexpr double kLayerNormStatsBytes = 2 * kFp32Bytes;  // apex saves fp32 mean and invvar per row
// MXFP8 (OCP Microscaling Formats v1.0): one 1-byte E8M0 scale per block of 32 elements.
constexpr double kMxfp8ScaleBytesPerElement = 1.0 / 32;

/// A GEMM C[m x n] = A[m x k] B[k x n], `batch` independent products, of the pass `pass`, on
/// e-byte operands: 2 m n k batch FLOPs; its operands and result moved once (flops.cpp).
KernelWork gemm(const char* name, GemmPass pass, double m, double n, double k, double e,
                double batch = 1);
/// A memory-bound kernel moving `bytes` (flops.cpp).
KernelWork mem(const char* name, double bytes);
/// Throws std::logic_error naming `field` of `op` when v <= 0 (flops.cpp).
void need_positive(const OpDesc& op, std::int64_t v, const char* field);

// ------------------------------------------------------ Megatron-LM 2021 (flops_megatron2021.cpp)
/// One rank's shard in the 2021 notation (flops_megatron2021.cpp's header).
struct Shape {
  double b, s, T, Tsp, H, heads, hd, P, F, Vr, N, e, tp;
};
/// The Shape of `op`; throws std::logic_error when micro_batch, seq, hidden or tp is not
/// positive.
Shape shape_of(const OpDesc& op);
/// The 2021 core attention (baddbmm Q K^T, fused scale-mask-softmax, dropout, bmm with V, the
/// context permute) and its backward; Megatron-Core's unfused attention runs them too.
void attn_core_forward(const Shape& x, std::vector<KernelWork>& out);
void attn_core_backward(const Shape& x, std::vector<KernelWork>& out);
/// The 2021 kernels of a compute op (AttnFwd .. LogitsLossBwd; shapes checked).
std::vector<KernelWork> megatron2021_op_kernels(const OpDesc& op);

// ------------------------------------- Megatron-Core, Transformer Engine modules (flops_core.cpp)
/// One rank's shard in the Megatron-Core notation (flops_core.cpp's header), with the features
/// of the op (ModelFeatures) the kernels depend on.
struct CoreShape {
  double b, s, cp, T, Tsp, H, heads, groups, hd, P, Pkv, F, Vr, e, tp, mk, stats, mg;
  bool fp8, current, split_fprop, swiglu, rope, hdrop, adrop, flash;
  bool mx;  ///< MXFP8 (fp8_recipe mxfp8): block scales, quantize kernels at their own rate
  double window, microbatches;
  // Multi-head latent attention: latent widths, RoPE key width, value head dimension (dv =
  // hd without MLA), the latent norms.
  bool mla, qk_norm, mla_up_rerun;
  double lq, lkv, dr, dv;
};
CoreShape core_shape_of(const OpDesc& op);
/// A GEMM of the pass `pass`; a `linear` layer's GEMM runs on FP8 operands under FP8; a
/// weight-gradient GEMM accumulates into main_grad (gradient-accumulation fusion).
KernelWork core_gemm(const char* name, GemmPass pass, double m, double n, double k,
                     const CoreShape& c, bool linear);
/// Transformer Engine's MXFP8 quantize of `elements` into `copies` (1 or 2) FP8 copies with
/// their E8M0 scales.
KernelWork mxfp8_cast(const char* name, double elements, double copies, const CoreShape& c);
/// Transformer Engine's FP8 cast of a GEMM input of `elements` (nothing without FP8).
void quantize(const char* name, const char* amax_name, double elements, const CoreShape& c,
              std::vector<KernelWork>& out);
/// The FP8 cast of a dense column-parallel layer's input (sequence parallelism: the local rows).
void quantize_column_parallel_input(const char* name, const char* amax_name, double width,
                                    const CoreShape& c, std::vector<KernelWork>& out);
/// The transpose of a gathered FP8 input for its weight-gradient GEMM (sequence parallelism).
void column_parallel_input_transpose(const char* name, double width, const CoreShape& c,
                                     std::vector<KernelWork>& out);
/// A Transformer Engine (RMS/Layer)Norm kernel over `rows` rows of `width`.
void norm_pass(const char* name, double rows, double width, bool forward, const CoreShape& c,
               std::vector<KernelWork>& out);
/// The hidden-size norm of a block, forward; backward with the residual branch's gradient add.
void core_norm_fwd(const char* name, const CoreShape& c, std::vector<KernelWork>& out);
void core_norm_bwd(const char* name, const CoreShape& c, std::vector<KernelWork>& out);
/// The fused bias-dropout-add after a block, forward and backward.
void core_residual_fwd(const CoreShape& c, std::vector<KernelWork>& out);
void core_residual_bwd(const CoreShape& c, std::vector<KernelWork>& out);
/// Core attention: the fused (flash) kernel, or the unfused 2021 kernels (with GQA's K/V
/// expansion), forward and backward.
void core_attention_fwd(const OpDesc& op, const CoreShape& c, std::vector<KernelWork>& out);
void core_attention_bwd(const OpDesc& op, const CoreShape& c, std::vector<KernelWork>& out);
/// dgrad and wgrad of a linear layer Y[m x n] = X[m x k] W[k x n], with dY's FP8 cast.
void core_linear_bwd(const char* cast, const char* amax, const char* dgrad, const char* wgrad,
                     double m, double n, double k, const CoreShape& c,
                     std::vector<KernelWork>& out);

// ------------------------------------------------------------ Megatron-Core MLA (flops_mla.cpp)
/// The attention block of multi-head latent attention, forward and backward.
void mla_attn_forward(const OpDesc& op, const CoreShape& c, std::vector<KernelWork>& out);
void mla_attn_backward(const OpDesc& op, const CoreShape& c, std::vector<KernelWork>& out);

// ------------------------------------------------------------ Megatron-Core MoE (flops_moe.cpp)
/// The MLP block of an MoE layer (router, permutes, local experts, shared expert), forward or
/// backward.
void core_moe(const OpDesc& op, const CoreShape& c, bool forward, std::vector<KernelWork>& out);

}  // namespace trainsim::kernel_lists
