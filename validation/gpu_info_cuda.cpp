// gpu_info() through the CUDA runtime (validation/gpu_info.h).
#include "validation/gpu_info.h"

#include "kernels/bandwidth_probe.h"
#include "kernels/fused_adam.h"

namespace trainsim::validation {

GpuInfo gpu_info(int index) {
  GpuInfo info;
  if (index < 0 || index >= kernels::cuda::device_count()) return info;
  try {
    info.name = kernels::cuda::device_name(index);
    info.memory_bytes = static_cast<std::int64_t>(kernels::cuda::device_memory_bytes(index));
  } catch (const kernels::cuda::CudaError&) {
    return {};
  }
  return info;
}

}  // namespace trainsim::validation
