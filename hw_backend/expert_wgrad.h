// parallel.delay_wgrad_compute in the replay: the local experts' weight-gradient GEMMs held back
// from the MoE MLP backward and run by a task of their own, as the schedule graph splits the op
// (models/graph/ops.h ModelFeatures::expert_wgrad: 1 the backward without them, 2 those GEMMs).
//
// Megatron-Core's combined 1F1B schedule (TransformerLayerSchedulePlan.run: mlp.backward, then
// mlp.backward_dw, NVIDIA/Megatron-LM d98e8a6 models/common/model_chunk_schedule_plan.py)
// calls backward_dw on Transformer Engine's GroupedLinear, whose delay_wgrad_compute keeps each
// weight-gradient GEMM's operands (the input and the output gradient) in a wgrad store during
// the backward and runs the GEMMs when backward_dw is called. The expert linears below do the
// same: their backward computes the data gradient dX = dY W and pushes dW += dY^T X into a
// DeferredWgrad; the MlpBwd task with expert_wgrad 2 runs it.
//
// Arithmetic: the forward is gemm_linear / grouped_linear (gemm_ops.h: FP8 or grouped where
// the build and device have them); the held-back backward GEMMs run in the model's dtype
// (torch::matmul), where the whole backward's would run in FP8 under an FP8 recipe: the
// replay's notes say so (replay_notes.h).
//
// Internal to hw_backend/: includes LibTorch.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include <torch/torch.h>

#include "hw_backend/gemm_ops.h"

namespace trainsim::hw {

/// The weight-gradient GEMMs one MoE MLP backward held back, in the order its backward reached
/// them (TE's wgrad store).
class DeferredWgrad {
 public:
  void push(std::function<void()> gemm) { gemms_.push_back(std::move(gemm)); }
  /// Runs the held GEMMs in order (each adds dY^T X into its weight's gradient) and forgets
  /// them; returns how many ran.
  std::int64_t run();
  bool empty() const { return gemms_.empty(); }

 private:
  std::vector<std::function<void()>> gemms_;
};

/// Expert e's linear y = x W[e]^T, W [E, out, in] the layer's expert weights (a leaf), x
/// [rows, in], through gemm_linear(x, W[e], none, fp8). Backward: dX = dY W[e] now; dW[e] +=
/// dY^T X pushed into `deferred` (which must outlive the backward and be run before the
/// optimizer reads W's gradient).
torch::Tensor delayed_expert_linear(const torch::Tensor& x, const torch::Tensor& w, std::int64_t e,
                                    GemmFp8 fp8, DeferredWgrad* deferred);

/// The local experts' linear as one grouped GEMM (grouped_linear: rows of x grouped by expert,
/// `rows_per_group` of them each; only where grouped_gemm_available for both directions).
/// Backward: dX by one grouped GEMM with W transposed; per group dW[g] += dY_g^T X_g pushed
/// into `deferred`.
torch::Tensor delayed_grouped_linear(const torch::Tensor& x, const torch::Tensor& w,
                                     const std::vector<std::int64_t>& rows_per_group,
                                     DeferredWgrad* deferred);

}  // namespace trainsim::hw
