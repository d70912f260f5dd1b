// GPU fused Adam for mixed-precision training (the GPU half of Twin-Flow; the CPU half is
// cpu_adam.h): fp32 master params and fp32 moments on the device, fp16/bf16 (or fp32)
// gradients in, fp16/bf16 copy of the updated params out, all in one pass over memory
// (28 bytes per element with fp16 grads and fp16 params out: 3 x 4 B read + 2 B read,
// 3 x 4 B written + 2 B written). Grid-stride kernel with 16-byte vector loads.
//
// Every element is computed with the IEEE round-to-nearest intrinsics (__fmul_rn, __fadd_rn,
// __fdiv_rn, __fsqrt_rn), which nvcc never contracts into FMAs, in the order of
// adam_reference_step: the results match the CPU reference bit for bit (NaN payloads aside).
//
// This header has no CUDA types, so plain C++ code (hw_backend, tests, benchmarks) can include
// it; device pointers are plain pointers and a stream is an opaque handle.
#pragma once

#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>

#include "kernels/adam_types.h"
#include "kernels/cuda_error.h"

namespace trainsim::kernels::cuda {

/// A cudaStream_t passed as an opaque pointer; nullptr is the default stream.
using StreamHandle = void*;

/// Number of usable CUDA devices. Never throws: returns 0 when the driver is missing or no
/// device is visible, and stores the runtime's reason in `*why` when `why` is non-null.
int device_count(std::string* why = nullptr);

/// Selects the device the following calls use (cudaSetDevice).
void set_device(int device);

/// One fused Adam step (semantics: adam_types.h) on device pointers `t`, enqueued on `stream`
/// (asynchronous: synchronize before reading results). `t.count` may be any size; pointers
/// that are not 16-byte aligned (8-byte for 2-byte types) fall back to scalar accesses.
/// Throws std::invalid_argument on invalid arguments and CudaError on a launch failure.
void fused_adam_step(const AdamHyperParams& hp, std::int64_t step, float grad_unscale,
                     const AdamTensors& t, StreamHandle stream = nullptr);

/// Waits for `stream` (cudaStreamSynchronize); throws CudaError carrying any error raised
/// by the work it ran.
void synchronize(StreamHandle stream = nullptr);

/// Device memory owned by the object (cudaMalloc / cudaFree), with blocking copies.
class DeviceBuffer {
 public:
  explicit DeviceBuffer(std::size_t bytes);
  ~DeviceBuffer();
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  DeviceBuffer(DeviceBuffer&& other) noexcept;
  DeviceBuffer& operator=(DeviceBuffer&& other) noexcept;

  void* data() const { return ptr_; }
  std::size_t size_bytes() const { return bytes_; }
  /// Copies `bytes` from host `src` to the start of the buffer (bytes <= size_bytes()).
  void upload(const void* src, std::size_t bytes);
  /// Copies `bytes` from the start of the buffer to host `dst` (bytes <= size_bytes()).
  void download(void* dst, std::size_t bytes) const;

 private:
  void* ptr_ = nullptr;
  std::size_t bytes_ = 0;
};

}  // namespace trainsim::kernels::cuda
