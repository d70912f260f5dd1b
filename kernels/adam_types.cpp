#include "kernels/adam_types.h"

#include <cmath>
#include <stdexcept>
#include <string>

namespace trainsim::kernels {

AdamStepScalars adam_step_scalars(const AdamHyperParams& hp, std::int64_t step) {
  if (step < 1) throw std::invalid_argument("Adam: step must be >= 1 (1-based), got " + std::to_string(step));
  // As torch/csrc/api/src/optim/adam.cpp (LibTorch 1.13): bias corrections and scalar
  // factors in double, rounded to float when applied to float tensors.
  const double t = static_cast<double>(step);
  const double bc1 = hp.bias_correction ? 1.0 - std::pow(hp.beta1, t) : 1.0;
  const double bc2 = hp.bias_correction ? 1.0 - std::pow(hp.beta2, t) : 1.0;
  AdamStepScalars s;
  s.beta1 = static_cast<float>(hp.beta1);
  s.beta2 = static_cast<float>(hp.beta2);
  s.one_minus_beta1 = static_cast<float>(1.0 - hp.beta1);
  s.one_minus_beta2 = static_cast<float>(1.0 - hp.beta2);
  s.eps = static_cast<float>(hp.eps);
  s.weight_decay = static_cast<float>(hp.weight_decay);
  s.decay_factor = static_cast<float>(1.0 - hp.lr * hp.weight_decay);
  s.step_size = static_cast<float>(hp.lr / bc1);
  s.bc2_sqrt = static_cast<float>(std::sqrt(bc2));
  s.l2 = hp.weight_decay != 0.0 && !hp.decoupled_weight_decay;
  s.decoupled = hp.weight_decay != 0.0 && hp.decoupled_weight_decay;
  return s;
}

void check_adam_arguments(const AdamHyperParams& hp, std::int64_t step, float grad_unscale,
                          const AdamTensors& t) {
  auto fail = [](const std::string& field, double value, const char* rule) {
    throw std::invalid_argument("Adam: " + field + " = " + std::to_string(value) + " violates " + rule);
  };
  if (step < 1) fail("step", static_cast<double>(step), "step >= 1");
  if (!(hp.beta1 >= 0.0 && hp.beta1 < 1.0)) fail("beta1", hp.beta1, "0 <= beta1 < 1");
  if (!(hp.beta2 >= 0.0 && hp.beta2 < 1.0)) fail("beta2", hp.beta2, "0 <= beta2 < 1");
  if (!(static_cast<float>(hp.eps) > 0.0f)) fail("eps", hp.eps, "eps > 0 (also once rounded to float)");
  if (!(hp.lr >= 0.0)) fail("lr", hp.lr, "lr >= 0");
  if (!(hp.weight_decay >= 0.0)) fail("weight_decay", hp.weight_decay, "weight_decay >= 0");
  if (!(std::isfinite(grad_unscale) && grad_unscale > 0.0))
    fail("grad_unscale", grad_unscale, "finite and > 0");
  if (t.count > 0 && (t.params == nullptr || t.exp_avg == nullptr || t.exp_avg_sq == nullptr ||
                      t.grads == nullptr))
    throw std::invalid_argument("Adam: params, exp_avg, exp_avg_sq and grads must be non-null for count = " +
                                std::to_string(t.count));
}

}  // namespace trainsim::kernels
