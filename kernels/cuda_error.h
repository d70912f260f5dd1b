// The error type of every failed CUDA runtime call in kernels/ (thrown by CUDACHECK,
// kernels/cuda_check.h). No CUDA header: code that only catches it needs none.
#pragma once

#include <stdexcept>
#include <string>

namespace trainsim::kernels::cuda {

/// A failed CUDA runtime call: what() holds "file:line: call: error name: error string".
class CudaError : public std::runtime_error {
 public:
  explicit CudaError(const std::string& message) : std::runtime_error(message) {}
};

}  // namespace trainsim::kernels::cuda
