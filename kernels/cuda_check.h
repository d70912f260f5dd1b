// Internal to kernels/*.cu: the one wrapper of CUDA runtime calls (as CUDACHECK in
// nccl-tests), throwing CudaError with the file, line, call and the runtime's error string.
#pragma once

#include <cuda_runtime.h>

#include <string>

#include "kernels/cuda_error.h"

#define CUDACHECK(call)                                                                        \
  do {                                                                                         \
    const cudaError_t trainsim_cuda_err_ = (call);                                             \
    if (trainsim_cuda_err_ != cudaSuccess)                                                     \
      throw ::trainsim::kernels::cuda::CudaError(                                              \
          std::string(__FILE__) + ":" + std::to_string(__LINE__) + ": " + #call + ": " +       \
          cudaGetErrorName(trainsim_cuda_err_) + ": " + cudaGetErrorString(trainsim_cuda_err_)); \
  } while (0)
