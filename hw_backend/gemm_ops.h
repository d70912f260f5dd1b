// The GEMMs of the replay's Megatron-Core layers (core_layer.cpp): the dense linears, in FP8
// where the scenario trains in FP8 and the build can, and the experts' grouped GEMM.
//
// Two implementations of this header, one compiled (hw_backend/CMakeLists.txt, CMake option
// TRAINSIM_REPLAY_NEW_TORCH_OPS, AUTO: ON for a LibTorch >= 2.8 with CUDA):
//   gemm_cuda_ops.cpp  FP8 linears through at::_scaled_mm with per-tensor current scaling, as
//                      Transformer Engine's Float8CurrentScaling recipe does them, and the
//                      experts through at::_grouped_mm (bf16), on CUDA tensors;
//   gemm_ops_fallback.cpp  torch::linear, and one GEMM pair per expert (Debian's LibTorch 1.13,
//                      or any build with the option OFF).
// Either way the arithmetic is y = x W^T (+ b). What ran is counted (GemmCounts) for the
// replay's notes, which say which task ran what (torch_executor.cpp core_notes).
//
// ATen signatures used (pytorch aten/src/ATen/native/native_functions.yaml, torch 2.8 on):
//   _scaled_mm(Tensor self, Tensor mat2, Tensor scale_a, Tensor scale_b, Tensor? bias=None,
//              Tensor? scale_result=None, ScalarType? out_dtype=None,
//              bool use_fast_accum=False) -> Tensor
//     self row-major [M, K], mat2 column-major [K, N], K and N multiples of 16, scale_a and
//     scale_b fp32 scalars: the dequantizing (inverse) scales; e5m2 x e5m2 is refused.
//   _grouped_mm(Tensor self, Tensor mat2, Tensor? offs=None, Tensor? bias=None,
//               ScalarType? out_dtype=None) -> Tensor
//     self [rows, K] (rows grouped), mat2 [G, K, N] column-major per group, offs int32 [G]:
//     the end row of each group (cumulative); differentiable (derivatives.yaml).
//
// Internal to hw_backend/: includes LibTorch.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <torch/torch.h>

namespace trainsim::hw {

/// Megatron's --fp8-format for the replay's GEMMs (Transformer Engine common/recipe/__init__.py
/// Format): E4M3 everywhere (max 448), or HYBRID: e4m3 forward, e5m2 (max 57344) for the
/// gradients of the backward.
enum class GemmFp8 : std::uint8_t { Off, E4M3, Hybrid };

/// Largest finite values of the FP8 formats (OCP FP8 spec; TE Format.E4M3 / E5M2 max_fwd).
constexpr double kFp8E4m3Max = 448.0;
constexpr double kFp8E5m2Max = 57344.0;

/// What the GEMMs of this process ran since the last reset (the replay's notes).
struct GemmCounts {
  std::int64_t fp8_gemms = 0;         ///< at::_scaled_mm calls (forward and backward)
  std::int64_t amax_reductions = 0;   ///< per-tensor amax kernels feeding their scales
  std::int64_t fp8_shape_fallbacks = 0;  ///< FP8 asked, dims not multiples of 16: bf16 GEMM
  std::int64_t grouped_gemms = 0;     ///< at::_grouped_mm calls (forward)
};

/// Whether this build compiled the new-op implementation (gemm_cuda_ops.cpp).
bool new_torch_ops_built();
/// Why FP8 linears and grouped GEMMs do not run on `device` in this build (the CPU; a build
/// without the new ops; a GPU whose LibTorch refuses a small probe of each, run once per
/// process), for the notes; empty when they run.
std::string new_torch_ops_unavailable_reason(const torch::Device& device);

/// y = x W^T + b (b may be undefined) over the last dim of x (any leading dims), as
/// torch::linear. With `fp8` != Off, on a CUDA bf16/fp16 x, in the new-op build and with
/// in_features and out_features multiples of 16: Transformer Engine's current scaling (per-tensor
/// amax of x and W, scale = fp8_max / amax, cast to e4m3, at::_scaled_mm with the inverse
/// scales, output in x's dtype); the backward the same with the output gradient cast to e5m2
/// (Hybrid) or e4m3 (dgrad dY W, wgrad dY^T X, both FP8, as TE's fp8_gemm_dgrad / wgrad).
/// Otherwise torch::linear.
torch::Tensor gemm_linear(const torch::Tensor& x, const torch::Tensor& w, const torch::Tensor& b,
                          GemmFp8 fp8);

/// Whether grouped_linear runs one grouped GEMM for `x` (new-op build, CUDA bf16 x, in and out
/// features multiples of 8: _grouped_mm's 16-byte row alignment); false: the caller runs one
/// GEMM per group.
bool grouped_gemm_available(const torch::Tensor& x, std::int64_t in_features,
                            std::int64_t out_features);

/// Rows of x [rows, in] grouped by expert (`rows_per_group` on the host, summing to rows) times
/// each group's weight w [G, out, in] transposed -> [rows, out], one at::_grouped_mm. Only
/// where grouped_gemm_available (TRAINSIM_CHECK).
torch::Tensor grouped_linear(const torch::Tensor& x, const torch::Tensor& w,
                             const std::vector<std::int64_t>& rows_per_group);

GemmCounts gemm_counts();
void reset_gemm_counts();

}  // namespace trainsim::hw
