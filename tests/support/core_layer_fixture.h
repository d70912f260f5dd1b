// What the tests of the replay's Megatron-Core layers (hw_backend/core_layer.h) share:
// counting a layer's parameters, fixed-seed fp64 weights, the RMSNorm reference
// (tests/hw_backend/test_core_layer.cpp, test_core_layer_grads.cpp, test_core_mla.cpp).
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include <torch/torch.h>

#include "hw_backend/core_layer.h"

namespace trainsim::test_support {

/// The elements of every (name, shape) of `shapes` (hw::core_param_shapes).
inline std::int64_t param_count(
    const std::vector<std::pair<std::string, std::vector<std::int64_t>>>& shapes) {
  std::int64_t n = 0;
  for (const auto& [name, shape] : shapes) {
    std::int64_t k = 1;
    for (auto s : shape) k *= s;
    n += k;
  }
  return n;
}

/// Weights of `c` as standalone fp64 leaves (normal(0, 0.3), norms 1 + noise) from `seed`.
inline hw::CoreWeights make_core_weights(const hw::CoreLayerSpec& c, std::uint64_t seed) {
  torch::manual_seed(seed);
  hw::CoreWeights w;
  for (const auto& [name, shape] : hw::core_param_shapes(c)) {
    torch::Tensor t = torch::randn(shape, torch::kFloat64) * 0.3;
    if (name.find("layernorm") != std::string::npos) t = t + 1.0;
    w.t[name] = t.requires_grad_(true);
  }
  return w;
}

/// Runs backward of `out` with `grad` and returns the gradients of `x` and of every weight of
/// `w` (zeros where a weight has none), clearing them for the next run.
inline std::vector<torch::Tensor> backward_grads(const torch::Tensor& out,
                                                 const torch::Tensor& grad, torch::Tensor& x,
                                                 hw::CoreWeights& w) {
  out.backward(grad);
  std::vector<torch::Tensor> g{x.grad().clone()};
  x.mutable_grad() = torch::Tensor();
  for (auto& [name, t] : w.t) {
    g.push_back(t.grad().defined() ? t.grad().clone() : torch::zeros_like(t));
    t.mutable_grad() = torch::Tensor();
  }
  return g;
}

/// RMSNorm over the last dimension, eps 1e-5, scaled by `g`: the composite reference the
/// replay's fused RMSNorm is checked against.
inline torch::Tensor rms_reference(const torch::Tensor& x, const torch::Tensor& g) {
  return x / (x.pow(2).mean(-1, true) + 1e-5).sqrt() * g;
}

}  // namespace trainsim::test_support
