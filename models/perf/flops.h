// Work of compute operations: matmul FLOPs and device-memory traffic, per kernel.
//
// The kernel list of each op (op_kernels) is the ONE place that says which CUDA kernels a
// transformer layer launches, per runtime (models/input/runtime.h KernelLists):
//  - flops_megatron2021.cpp: Megatron-LM's 2021 ParallelTransformerLayer that SC'21 ran (fused
//    LayerNorm, cuBLAS GEMMs, baddbmm/bmm core attention, FusedScaleMaskSoftmax, PyTorch
//    dropout, JIT-fused bias-GeLU and bias-dropout-add, vocab-parallel cross entropy);
//  - flops_core.cpp: Megatron-Core with Transformer Engine modules (core_op_kernels: norms
//    fused into their linear layers, GQA, SwiGLU, RoPE, flash attention, FP8 casts, the
//    userbuffers overlap of tensor-parallel collectives with GEMMs);
//  - flops_mla.cpp: Megatron-Core's multi-head latent attention; flops_moe.cpp: its
//    mixture-of-experts MLPs;
//  - flops.cpp: op_kernels and fill_work, the optimizer step's bytes and FLOPs per parameter,
//    and the iteration FLOP counts; kernel_lists.h: what the lists share.
// Both fill_work (the op's totals, stored in the schedule graph and the traces) and
// CostModel::compute_time_s (a time per kernel, summed) read the lists, so the FLOPs and bytes
// a trace reports are exactly the ones the time was computed from.
//
// Shapes are one rank's shard (OpDesc): heads = a/tp, ffn = ffn/tp, vocab = V/tp; hidden,
// micro batch b and sequence s are full (Megatron-Core: s / cp tokens per rank).
//
// FLOP convention: only matmuls count, 2*m*n*k each (Narayanan et al. SC'21 Sec. 5.1 and
// Appendix; Korthikanti et al. 2022 Sec. 4), so the sums over an iteration equal the papers'
// closed forms exactly (see model_flops_per_iteration / paper_flops_per_iteration).
#pragma once

#include <string>
#include <vector>

#include "models/graph/ops.h"
#include "models/input/scenario.h"

namespace trainsim {

/// How a kernel's time is modelled.
enum class KernelClass : std::uint8_t {
  Gemm,          ///< cuBLAS GEMM (batch = 1) or strided-batched GEMM (batch > 1)
  MemoryBound,   ///< elementwise / reduction / copy kernel: time from bytes moved
  Attention,     ///< fused (flash) attention: time from its FLOPs at the flash rate
};

/// The pass a GEMM kernel computes, set where the kernel lists make it: the forward product
/// (also the forward re-runs of recomputation), the data gradient dX = dY W^T (dgrad), or the
/// weight gradient dW = X^T dY (wgrad). None: the kernel is not a GEMM. The cost model picks a
/// measured GEMM table's role from it (CostModel::gemm_role), and Transformer Engine's FP8
/// recipes their accumulator (KernelWork::split_accumulator).
enum class GemmPass : std::uint8_t { None, Forward, Dgrad, Wgrad };

/// One CUDA kernel of an op.
struct KernelWork {
  const char* name = "";          ///< e.g. "qkv_gemm", "softmax_fwd" (static string)
  KernelClass cls = KernelClass::MemoryBound;
  GemmPass pass = GemmPass::None;  ///< a GEMM's pass (KernelClass::Gemm); None otherwise
  // GEMM shape: C[m x n] = A[m x k] * B[k x n], `batch` independent products.
  double m = 0, n = 0, k = 0, batch = 1;
  double flops = 0;               ///< matmul FLOPs: 2*m*n*k*batch (0 for memory-bound)
  double bytes = 0;               ///< device-memory bytes read + written
  bool fp8 = false;               ///< GEMM with FP8 operands (Transformer Engine)
  /// FP8 GEMM with the split accumulator (CUBLASLT_MATMUL_DESC_FAST_ACCUM = 0): Transformer
  /// Engine's dgrad and wgrad GEMMs (and the blockwise recipe's forward ones)
  bool split_accumulator = false;
  /// Transformer Engine's userbuffers overlap of a tensor-parallel all-gather or
  /// reduce-scatter with this GEMM (CostModel::overlapped_gemm_time_s): the bytes this rank
  /// sends over NVLink while the GEMM runs; the pieces the GEMM is split into (t for a ring
  /// exchange, 4 for a pipelined reduce-scatter, 0 for a bulk overlap beside the whole GEMM);
  /// whether the last piece's reduce-scatter follows the GEMM (pipeline); the SMs the
  /// communication kernels reserve (the GEMM runs on the others).
  double overlap_comm_bytes = 0;
  double overlap_chunks = 0;
  bool overlap_pipeline = false;
  double overlap_sms = 0;
  bool backward = false;          ///< Attention: the backward kernel
  /// Attention: head dimension, and the keys a query block runs over (the sequence, or the
  /// sliding window, on this rank's context-parallel share), for the profile's rate by shape.
  double head_dim = 0, seq_length = 0;
  /// A GEMM of a mixture-of-experts layer's local experts: the token copies each expert
  /// processes (the profile's expert-GEMM rate by tokens per expert, calibration.h
  /// moe_grouped_gemm_efficiency); 0: not an expert GEMM.
  double tokens_per_expert = 0;
  /// A memory-bound kernel that scatter-adds this many bytes of rows into fewer rows with
  /// atomic adds (the unfused MoE unpermutation): timed at the profile's
  /// moe_scatter_add_bytes_per_s when it has one; 0: a streaming kernel.
  double scatter_add_bytes = 0;
  /// A memory-bound kernel that is Transformer Engine's MXFP8 quantize (fp8_recipe mxfp8):
  /// timed at the profile's mxfp8_quantize_bytes_per_s when it has one, else a streaming kernel.
  bool mxfp8_quantize = false;
};

/// Bytes of one activation / weight element in `p` (fp16 and bf16: 2).
double element_bytes(Precision p);

/// The kernels of a compute op (AttnFwd .. LogitsLossBwd, OptimizerStepGpu/Cpu), in launch
/// order. Communication and copy ops have no kernels here (empty list). Throws
/// std::logic_error when a compute op's shape fields are missing (zero).
std::vector<KernelWork> op_kernels(const OpDesc& op);

/// The kernels of a compute op under the Megatron-Core runtime (op.features.core): Transformer
/// Engine modules, FP8, GQA, SwiGLU, RoPE, flash attention (models/perf/flops_core.cpp); op_kernels
/// calls it for such ops.
std::vector<KernelWork> core_op_kernels(const OpDesc& op);

/// Sets op.flops (matmul FLOPs, 2mnk) and op.bytes_accessed (device-memory bytes of all the
/// op's kernels) from its shapes. Communication / copy ops get 0 and 0. OptimizerStepGpu gets
/// its HBM bytes (optimizer_gpu_bytes_per_param per parameter) and 0 FLOPs; OptimizerStepCpu
/// gets 0 device bytes (it works in host memory) and 0 matmul FLOPs.
void fill_work(OpDesc& op);

/// HBM bytes per parameter of Megatron's mixed-precision optimizer step on the GPU (see
/// flops.cpp for the count, kernel by kernel); main_grad_bytes is the gradient buffer's
/// element size, 0 for the precision's default (bf16: 4, fp16: 2).
double optimizer_gpu_bytes_per_param(Precision p, int main_grad_bytes = 0);
/// Host-memory bytes per parameter of one CPU-Adam step (ZeRO-Offload): fp32 param, grad,
/// exp_avg, exp_avg_sq read, param/exp_avg/exp_avg_sq written, fp16 param written for the copy
/// back = 4*4 + 3*4 + 2 = 30.
double optimizer_cpu_bytes_per_param();
/// Floating-point operations per parameter of one Adam update (vector FLOPs, not matmul):
/// see flops.cpp for the count.
double adam_flops_per_param();

/// Model FLOPs of one iteration, no recomputation counted (Korthikanti et al. 2022 Eq. 8-9,
/// the PaLM MFU convention): 72 B s l h^2 (1 + s/(6h) + V/(12 l h)), B the global batch.
/// Assumes ffn_hidden_size = 4h and heads * kv_channels = h, as the closed form does; the
/// sum of fill_work over an iteration is the exact count for any shape.
double model_flops_per_iteration(const Scenario& scenario);

/// FLOPs per iteration as Narayanan et al. SC'21 count them (Eq. 3, full activation
/// recomputation: one extra forward per layer): 96 B s l h^2 (1 + s/(6h) + V/(16 l h)).
/// Same shape assumptions as model_flops_per_iteration.
double paper_flops_per_iteration(const Scenario& scenario);

}  // namespace trainsim
