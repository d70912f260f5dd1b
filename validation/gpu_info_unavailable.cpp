// gpu_info() in a build without the CUDA kernels (validation/gpu_info.h): unknown.
#include "validation/gpu_info.h"

namespace trainsim::validation {

GpuInfo gpu_info(int) { return {}; }

}  // namespace trainsim::validation
