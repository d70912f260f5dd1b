// No GPU fused Adam in this build (kernels/ built without nvcc): the executor runs the update
// as LibTorch tensor operations. See backends.h.
#include "hw_backend/backends.h"

namespace trainsim::hw {

bool gpu_fused_adam_built() { return false; }

bool gpu_fused_adam_step(const kernels::AdamHyperParams&, std::int64_t, float,
                         const kernels::AdamTensors&, void*) {
  return false;
}

}  // namespace trainsim::hw
