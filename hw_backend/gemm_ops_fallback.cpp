// gemm_ops.h without the new LibTorch operators (Debian's LibTorch 1.13 has neither
// at::_scaled_mm nor at::_grouped_mm; or TRAINSIM_REPLAY_NEW_TORCH_OPS=OFF): every linear is
// torch::linear in the model's dtype, and the caller runs one GEMM pair per expert.
#include "hw_backend/gemm_ops.h"

#include <torch/version.h>

#include "models/errors.h"

namespace trainsim::hw {

bool new_torch_ops_built() { return false; }

std::string new_torch_ops_unavailable_reason(const torch::Device& device) {
  if (!device.is_cuda())
    return "the replay runs FP8 and grouped GEMMs on CUDA only (the CPU has no FP8 GEMMs)";
  return std::string("this build's LibTorch (") + TORCH_VERSION +
         ") was compiled without the new-op GEMMs (at::_scaled_mm, at::_grouped_mm: CMake "
         "TRAINSIM_REPLAY_NEW_TORCH_OPS needs LibTorch >= 2.8 with CUDA)";
}

torch::Tensor gemm_linear(const torch::Tensor& x, const torch::Tensor& w, const torch::Tensor& b,
                          GemmFp8) {
  return torch::linear(x, w, b);
}

bool grouped_gemm_available(const torch::Tensor&, std::int64_t, std::int64_t) { return false; }

torch::Tensor grouped_linear(const torch::Tensor&, const torch::Tensor&,
                             const std::vector<std::int64_t>&) {
  TRAINSIM_CHECK(false, "replay: grouped_linear called in a build without at::_grouped_mm");
  return {};
}

GemmCounts gemm_counts() { return {}; }
void reset_gemm_counts() {}

}  // namespace trainsim::hw
