// Device memory bandwidth: the theoretical peak of a GPU and what a plain device-to-device
// copy kernel achieves on it (the yardstick for the fused Adam kernel, which is bound by
// memory bandwidth). No CUDA types in this header.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "kernels/cuda_error.h"

namespace trainsim::kernels::cuda {

/// Result of measure_copy_bandwidth.
struct CopyBandwidth {
  std::size_t bytes_moved_per_iteration = 0;  ///< 2 x buffer size: every byte read once, written once
  double seconds_per_iteration = 0.0;         ///< mean over the timed iterations (CUDA events)
  double bytes_per_s = 0.0;                   ///< bytes_moved_per_iteration / seconds_per_iteration
  std::uint64_t wrong_elements = 0;           ///< destination words that differ from the source (0 if correct)
};

/// Copies a `buffer_bytes` buffer (rounded down to 16 B) into another with a grid-stride
/// kernel of 16-byte loads and stores, `iterations` times after one warm-up, on the current
/// device; then checks the copy on the device. Throws CudaError on a CUDA failure and
/// std::invalid_argument when buffer_bytes < 16 or iterations < 1.
CopyBandwidth measure_copy_bandwidth(std::size_t buffer_bytes, int iterations);

/// Theoretical peak DRAM bandwidth of `device`, in bytes/s:
/// 2 (double data rate) x memory clock (cudaDevAttrMemoryClockRate, kHz) x bus width
/// (cudaDevAttrGlobalMemoryBusWidth, bits) / 8. H100 SXM5: 2 x 2.619 GHz x 5120 bit / 8 = 3.35e12.
double device_peak_bandwidth_bytes_per_s(int device);

/// cudaDeviceProp::name of `device`.
std::string device_name(int device);

/// cudaDeviceProp::totalGlobalMem of `device`: its memory capacity in bytes.
std::uint64_t device_memory_bytes(int device);

}  // namespace trainsim::kernels::cuda
