#include "kernels/adam_reference.h"

#include <cmath>

#include "kernels/half.h"

namespace trainsim::kernels {

void adam_reference_step(const AdamHyperParams& hp, std::int64_t step, float grad_unscale,
                         const AdamTensors& t) {
  check_adam_arguments(hp, step, grad_unscale, t);
  // torch/csrc/api/src/optim/adam.cpp (LibTorch 1.13) and torch.optim.AdamW: the scalars
  // are computed in double and become float when they meet the float tensors.
  const double bias_correction1 = hp.bias_correction ? 1.0 - std::pow(hp.beta1, double(step)) : 1.0;
  const double bias_correction2 = hp.bias_correction ? 1.0 - std::pow(hp.beta2, double(step)) : 1.0;
  const float step_size = static_cast<float>(hp.lr / bias_correction1);
  const float bias_correction2_sqrt = static_cast<float>(std::sqrt(bias_correction2));
  const float beta1 = static_cast<float>(hp.beta1), one_minus_beta1 = static_cast<float>(1.0 - hp.beta1);
  const float beta2 = static_cast<float>(hp.beta2), one_minus_beta2 = static_cast<float>(1.0 - hp.beta2);
  const float eps = static_cast<float>(hp.eps);
  const float weight_decay = static_cast<float>(hp.weight_decay);
  const float decay = static_cast<float>(1.0 - hp.lr * hp.weight_decay);

  for (std::size_t i = 0; i < t.count; ++i) {
    float g;
    switch (t.grad_dtype) {
      case DType::F16: g = fp16_to_float(static_cast<const std::uint16_t*>(t.grads)[i]); break;
      case DType::BF16: g = bf16_to_float(static_cast<const std::uint16_t*>(t.grads)[i]); break;
      default: g = static_cast<const float*>(t.grads)[i]; break;
    }
    g = g * grad_unscale;
    float p = t.params[i];
    if (hp.weight_decay != 0.0) {
      if (hp.decoupled_weight_decay)
        p = p * decay;  // AdamW: param.mul_(1 - lr * weight_decay)
      else
        g = g + weight_decay * p;  // Adam: grad = grad.add(param, weight_decay)
    }
    const float m = beta1 * t.exp_avg[i] + one_minus_beta1 * g;
    const float v = beta2 * t.exp_avg_sq[i] + one_minus_beta2 * (g * g);
    const float denom = std::sqrt(v) / bias_correction2_sqrt + eps;
    p = p - step_size * (m / denom);
    t.exp_avg[i] = m;
    t.exp_avg_sq[i] = v;
    t.params[i] = p;
    if (t.params_out != nullptr) {
      switch (t.params_out_dtype) {
        case DType::F16: static_cast<std::uint16_t*>(t.params_out)[i] = float_to_fp16(p); break;
        case DType::BF16: static_cast<std::uint16_t*>(t.params_out)[i] = float_to_bf16(p); break;
        default: static_cast<float*>(t.params_out)[i] = p; break;
      }
    }
  }
}

}  // namespace trainsim::kernels
