// The pure helpers of validation/gpu_info.h (no CUDA, no LibTorch).
#include <algorithm>
#include <cctype>
#include <sstream>

#include "validation/gpu_info.h"

namespace trainsim::validation {

namespace {

std::string upper(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(),
                 [](unsigned char c) { return static_cast<char>(std::toupper(c)); });
  return s;
}

}  // namespace

bool gpu_name_matches(const std::string& device_name, const std::string& catalog_name) {
  const std::string device = upper(device_name);
  std::istringstream tokens(upper(catalog_name));
  std::string token, model;
  bool ok = true;
  for (int i = 0; std::getline(tokens, token, '-'); ++i) {
    if (i == 0) model = token;
    const bool memory = token.size() > 2 && token.compare(token.size() - 2, 2, "GB") == 0;
    if ((i == 0 || memory) && device.find(token) == std::string::npos) ok = false;
  }
  return ok && !model.empty();
}

std::string cuda_profile_device(const GpuInfo& gpu, const std::string& torch_version,
                                const std::string& precision) {
  return (gpu.name.empty() ? std::string("cuda") : "cuda: " + gpu.name) + " (LibTorch " +
         torch_version + ", " + precision + ")";
}

std::string gpu_name_of_profile_device(const std::string& device) {
  const std::string prefix = "cuda: ", suffix = " (LibTorch ";
  if (device.rfind(prefix, 0) != 0) return "";
  const std::size_t end = device.find(suffix, prefix.size());
  return end == std::string::npos ? "" : device.substr(prefix.size(), end - prefix.size());
}

}  // namespace trainsim::validation
