// The GPU that `trainsim calibrate --device cuda` measures: its name and memory capacity, from
// the CUDA runtime (kernels/bandwidth_probe.h) where nvcc built trainsim_kernels_cuda
// (gpu_info_cuda.cpp), else unknown (gpu_info_unavailable.cpp). LibTorch's C++ API names
// neither in a way that compiles against a CPU-only LibTorch.
#pragma once

#include <cstdint>
#include <string>

namespace trainsim::validation {

struct GpuInfo {
  std::string name;                ///< e.g. "NVIDIA H100 80GB HBM3"; empty when unknown
  std::int64_t memory_bytes = 0;   ///< 0 when unknown
};

/// The GPU of CUDA device `index`; {"", 0} when this build or machine cannot tell.
GpuInfo gpu_info(int index);

/// Whether a CUDA device name (GpuInfo::name) is the catalog GPU `catalog_name`
/// (GpuSpec::name, e.g. "H100-SXM5-80GB"): its model ("H100") and, when the catalog name gives
/// one, its memory size ("80GB") both appear in the device name. "NVIDIA H100 80GB HBM3" is
/// H100-SXM5-80GB; "NVIDIA A100-SXM4-40GB" is not A100-SXM4-80GB.
bool gpu_name_matches(const std::string& device_name, const std::string& catalog_name);

/// The profile device string calibrate writes for a GPU: "cuda: <name> (LibTorch <version>,
/// <precision>)", or "cuda (LibTorch ...)" when the name is unknown (and in profiles written
/// before the name was recorded).
std::string cuda_profile_device(const GpuInfo& gpu, const std::string& torch_version,
                                const std::string& precision);
/// The GPU name in such a string; empty when it names none.
std::string gpu_name_of_profile_device(const std::string& device);

}  // namespace trainsim::validation
