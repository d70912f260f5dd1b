// The GPU optimizer step of a CUDA replay through kernels/fused_adam.h (kernels'
// trainsim_kernels_cuda was built). See backends.h.
#include "hw_backend/backends.h"
#include "kernels/fused_adam.h"

namespace trainsim::hw {

bool gpu_fused_adam_built() { return true; }

bool gpu_fused_adam_step(const kernels::AdamHyperParams& hp, std::int64_t step, float grad_unscale,
                         const kernels::AdamTensors& tensors, void* stream) {
  kernels::cuda::fused_adam_step(hp, step, grad_unscale, tensors,
                                 static_cast<kernels::cuda::StreamHandle>(stream));
  return true;
}

}  // namespace trainsim::hw
