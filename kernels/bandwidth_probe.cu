#include "kernels/bandwidth_probe.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <stdexcept>
#include <string>

#include "kernels/cuda_check.h"
#include "kernels/fused_adam.h"

namespace trainsim::kernels::cuda {
namespace {

// Word k of the source holds k * 2654435761 (mod 2^32): a pattern no stale buffer holds by chance.
__device__ __forceinline__ unsigned pattern(std::size_t k) { return static_cast<unsigned>(k) * 2654435761u; }

__global__ void fill_kernel(uint4* dst, std::size_t n4) {
  const std::size_t stride = static_cast<std::size_t>(gridDim.x) * blockDim.x;
  for (std::size_t j = static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x; j < n4; j += stride)
    dst[j] = make_uint4(pattern(4 * j), pattern(4 * j + 1), pattern(4 * j + 2), pattern(4 * j + 3));
}

__global__ void copy_kernel(const uint4* __restrict__ src, uint4* __restrict__ dst, std::size_t n4) {
  const std::size_t stride = static_cast<std::size_t>(gridDim.x) * blockDim.x;
  for (std::size_t j = static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x; j < n4; j += stride)
    dst[j] = src[j];
}

__global__ void check_kernel(const uint4* dst, std::size_t n4, unsigned long long* wrong) {
  const std::size_t stride = static_cast<std::size_t>(gridDim.x) * blockDim.x;
  unsigned long long local = 0;
  for (std::size_t j = static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x; j < n4; j += stride) {
    const uint4 w = dst[j];
    local += (w.x != pattern(4 * j)) + (w.y != pattern(4 * j + 1)) + (w.z != pattern(4 * j + 2)) +
             (w.w != pattern(4 * j + 3));
  }
  if (local != 0) atomicAdd(wrong, local);
}

struct Event {
  cudaEvent_t e = nullptr;
  Event() { CUDACHECK(cudaEventCreate(&e)); }
  ~Event() { cudaEventDestroy(e); }
};

}  // namespace

double device_peak_bandwidth_bytes_per_s(int device) {
  int clock_khz = 0, bus_bits = 0;
  CUDACHECK(cudaDeviceGetAttribute(&clock_khz, cudaDevAttrMemoryClockRate, device));
  CUDACHECK(cudaDeviceGetAttribute(&bus_bits, cudaDevAttrGlobalMemoryBusWidth, device));
  return 2.0 * static_cast<double>(clock_khz) * 1e3 * static_cast<double>(bus_bits) / 8.0;
}

std::string device_name(int device) {
  cudaDeviceProp prop{};
  CUDACHECK(cudaGetDeviceProperties(&prop, device));
  return prop.name;
}

std::uint64_t device_memory_bytes(int device) {
  cudaDeviceProp prop{};
  CUDACHECK(cudaGetDeviceProperties(&prop, device));
  return prop.totalGlobalMem;
}

CopyBandwidth measure_copy_bandwidth(std::size_t buffer_bytes, int iterations) {
  if (buffer_bytes < 16 || iterations < 1)
    throw std::invalid_argument("measure_copy_bandwidth: buffer_bytes = " + std::to_string(buffer_bytes) +
                                " (>= 16) and iterations = " + std::to_string(iterations) + " (>= 1) required");
  const std::size_t n4 = buffer_bytes / 16;
  DeviceBuffer src(n4 * 16), dst(n4 * 16), wrong(sizeof(unsigned long long));
  int device = 0, sm_count = 0;
  CUDACHECK(cudaGetDevice(&device));
  CUDACHECK(cudaDeviceGetAttribute(&sm_count, cudaDevAttrMultiProcessorCount, device));
  constexpr int kBlock = 256;
  const int grid = static_cast<int>(std::min<std::size_t>(static_cast<std::size_t>(std::max(1, sm_count)) * 8,
                                                          (n4 + kBlock - 1) / kBlock));
  auto* s = static_cast<uint4*>(src.data());
  auto* d = static_cast<uint4*>(dst.data());
  fill_kernel<<<grid, kBlock>>>(s, n4);
  CUDACHECK(cudaMemset(d, 0, n4 * 16));
  copy_kernel<<<grid, kBlock>>>(s, d, n4);  // warm-up
  CUDACHECK(cudaGetLastError());
  Event start, stop;
  CUDACHECK(cudaEventRecord(start.e));
  for (int k = 0; k < iterations; ++k) copy_kernel<<<grid, kBlock>>>(s, d, n4);
  CUDACHECK(cudaEventRecord(stop.e));
  CUDACHECK(cudaEventSynchronize(stop.e));
  CUDACHECK(cudaGetLastError());
  float ms = 0.0f;
  CUDACHECK(cudaEventElapsedTime(&ms, start.e, stop.e));

  CUDACHECK(cudaMemset(wrong.data(), 0, sizeof(unsigned long long)));
  check_kernel<<<grid, kBlock>>>(d, n4, static_cast<unsigned long long*>(wrong.data()));
  CUDACHECK(cudaGetLastError());
  unsigned long long wrong_host = 0;
  wrong.download(&wrong_host, sizeof wrong_host);

  CopyBandwidth r;
  r.bytes_moved_per_iteration = 2 * n4 * 16;
  r.seconds_per_iteration = static_cast<double>(ms) * 1e-3 / iterations;
  r.bytes_per_s = static_cast<double>(r.bytes_moved_per_iteration) / r.seconds_per_iteration;
  r.wrong_elements = wrong_host;
  return r;
}

}  // namespace trainsim::kernels::cuda
