// Types shared by every Adam implementation in kernels/: the scalar reference
// (adam_reference.h), the CPU Adam of ZeRO-Offload (cpu_adam.h) and the GPU fused Adam
// (fused_adam.h). Header-only, no CUDA, no SIMD.
#pragma once

#include <cstddef>
#include <cstdint>

namespace trainsim::kernels {

/// Element type of a gradient or of a low-precision parameter copy.
enum class DType : std::uint8_t {
  F32,   ///< IEEE binary32
  F16,   ///< IEEE binary16 (bit pattern in a std::uint16_t)
  BF16,  ///< bfloat16: the upper 16 bits of a binary32 (bit pattern in a std::uint16_t)
};

/// Size in bytes of one element of `t`.
constexpr std::size_t dtype_size_bytes(DType t) { return t == DType::F32 ? 4 : 2; }

/// Hyper-parameters of Adam / AdamW with PyTorch semantics (torch.optim.Adam and
/// torch.optim.AdamW, Kingma & Ba, ICLR 2015, Algorithm 1; Loshchilov & Hutter, ICLR 2019,
/// Algorithm 2 for the decoupled weight decay):
///
///   g  = grad * grad_unscale                       (undo the loss scale of mixed precision)
///   g  = g + weight_decay * p                      (L2 mode only: torch.optim.Adam)
///   p  = p * (1 - lr * weight_decay)               (decoupled mode only: torch.optim.AdamW)
///   m  = beta1 * m + (1 - beta1) * g
///   v  = beta2 * v + (1 - beta2) * (g * g)
///   bc1 = 1 - beta1^t,  bc2 = 1 - beta2^t          (t = step, 1-based; both 1 without bias correction)
///   denom = sqrt(v) / sqrt(bc2) + eps              (eps added after the bias-corrected sqrt)
///   p  = p - (lr / bc1) * (m / denom)
///
/// As in PyTorch, the hyper-parameters are doubles and every scalar factor (beta1, 1 - beta1,
/// beta2, 1 - beta2, eps, weight_decay, 1 - lr * weight_decay, lr / bc1, sqrt(bc2)) is computed
/// in double and rounded to float once (PyTorch passes Python floats as scalars to float
/// tensor ops); everything per element is float arithmetic. (1 - beta2 computed in float from
/// 0.999f would be 0.000999987, off by 1.3e-5 relative.)
struct AdamHyperParams {
  double lr = 1e-3;            ///< learning rate
  double beta1 = 0.9;          ///< decay of the first moment (exp_avg)
  double beta2 = 0.999;        ///< decay of the second moment (exp_avg_sq)
  double eps = 1e-8;           ///< added to the bias-corrected sqrt(v)
  double weight_decay = 0.0;   ///< L2 coefficient (Adam) or decoupled decay (AdamW)
  bool decoupled_weight_decay = false;  ///< false: Adam with L2 term in g; true: AdamW
  bool bias_correction = true;          ///< false: bc1 = bc2 = 1 (DeepSpeed's option)
};

/// The tensors one Adam step reads and writes, all of `count` elements, all distinct buffers.
/// On the CPU they are host pointers; for the GPU kernel they are device pointers.
struct AdamTensors {
  float* params = nullptr;            ///< fp32 master parameters, updated in place
  float* exp_avg = nullptr;           ///< fp32 first moment m, updated in place
  float* exp_avg_sq = nullptr;        ///< fp32 second moment v, updated in place
  const void* grads = nullptr;        ///< gradients, element type `grad_dtype` (read only)
  DType grad_dtype = DType::F32;
  void* params_out = nullptr;         ///< optional low-precision copy of the updated params
  DType params_out_dtype = DType::F16;  ///< F16 or BF16 (F32 also accepted: a plain copy)
  std::size_t count = 0;              ///< number of elements
};

/// Per-step float scalars of the update above, computed once per step on the host.
struct AdamStepScalars {
  float beta1, beta2;     ///< the betas, rounded to float
  float one_minus_beta1;  ///< float(1 - beta1)
  float one_minus_beta2;  ///< float(1 - beta2)
  float eps;              ///< float(eps)
  float weight_decay;     ///< float(weight_decay) (used in L2 mode)
  float decay_factor;     ///< float(1 - lr * weight_decay) (used in decoupled mode)
  float step_size;        ///< float(lr / bc1)
  float bc2_sqrt;         ///< float(sqrt(bc2))
  bool l2;                ///< weight_decay != 0 and not decoupled
  bool decoupled;         ///< weight_decay != 0 and decoupled
};

/// The per-step scalars for 1-based `step`, as the optimized kernels use them.
/// Throws std::invalid_argument when step < 1.
AdamStepScalars adam_step_scalars(const AdamHyperParams& hp, std::int64_t step);

/// Checks what every implementation requires and throws std::invalid_argument naming the
/// field and value otherwise: step >= 1; 0 <= beta1, beta2 < 1; eps > 0; lr >= 0;
/// weight_decay >= 0; grad_unscale finite and > 0; params, exp_avg, exp_avg_sq and grads
/// non-null when count > 0.
void check_adam_arguments(const AdamHyperParams& hp, std::int64_t step, float grad_unscale,
                          const AdamTensors& t);

}  // namespace trainsim::kernels
