// Internal to hw_backend/: what this build of the replay can do, answered by the files CMake
// picked (hw_backend/CMakeLists.txt), with no LibTorch, CUDA or NCCL types:
//
//   CUDA device loop   device_cuda.cpp (a CUDA LibTorch was found)
//                      or device_cuda_unavailable.cpp (CPU-only LibTorch)
//   NCCL comm backend  comm_nccl.cpp (kernels' trainsim_nccl was built)
//                      or comm_nccl_unavailable.cpp
//   GPU fused Adam     adam_gpu_fused.cpp (kernels' trainsim_kernels_cuda was built)
//                      or adam_gpu_unavailable.cpp
//
// Each pair defines the same functions, so the choice is made at link time and no source has
// an #ifdef on CUDA or NCCL. The interfaces these implementations fill in are device_loop.h
// and comm_backend.h.
#pragma once

#include <cstdint>
#include <string>

#include "kernels/adam_types.h"

namespace trainsim::hw {

/// A replay device: "cpu", or "cuda" / "cuda:N".
struct DeviceChoice {
  bool cuda = false;
  int index = 0;  ///< CUDA device index
};

/// Parses ReplayOptions::device. Throws InputError for another spelling, or for a CUDA device
/// when cuda_available() is false (with its reason).
DeviceChoice parse_device(const std::string& device);

/// MemAvailable of /proc/meminfo, in bytes (device.cpp). Throws std::runtime_error when
/// /proc/meminfo cannot be read.
std::int64_t cpu_free_memory_bytes();

// ---- device_cuda.cpp / device_cuda_unavailable.cpp

/// Whether this build's LibTorch has CUDA (a GPU may still be absent: cuda_available()).
bool cuda_torch_built();

/// Free bytes of CUDA device `index` (cudaMemGetInfo). Throws InputError when
/// cuda_available() is false.
std::int64_t cuda_free_memory_bytes(int index);

// ---- comm_nccl.cpp / comm_nccl_unavailable.cpp

/// Whether the NCCL communication backend is built and its library loadable; `why` (if
/// non-null) receives the reason when not.
bool nccl_comm_available(std::string* why);

// ---- adam_gpu_fused.cpp / adam_gpu_unavailable.cpp

/// Whether gpu_fused_adam_step runs kernels/fused_adam.h (false: not built, no nvcc).
bool gpu_fused_adam_built();

/// One fused Adam step on device pointers, enqueued on `stream` (a cudaStream_t). Returns
/// false, doing nothing, when !gpu_fused_adam_built() (the caller runs its own update).
bool gpu_fused_adam_step(const kernels::AdamHyperParams& hp, std::int64_t step, float grad_unscale,
                         const kernels::AdamTensors& tensors, void* stream);

}  // namespace trainsim::hw
