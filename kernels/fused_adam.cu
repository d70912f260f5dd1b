#include "kernels/fused_adam.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <utility>

#include "kernels/cuda_check.h"

namespace trainsim::kernels::cuda {
namespace {

struct KernelArgs {
  float* params;
  float* exp_avg;
  float* exp_avg_sq;
  const void* grads;
  void* params_out;
  std::size_t count;
  float beta1, beta2, one_minus_beta1, one_minus_beta2, eps, weight_decay, decay_factor;
  float grad_unscale, step_size, bc2_sqrt;
  bool l2, decoupled;
};

// Element types as template parameters; kNone marks "no params_out".
constexpr int kF32 = 0, kF16 = 1, kBF16 = 2, kNone = 3;

template <int T>
__device__ __forceinline__ float load_elem(const void* base, std::size_t i) {
  if constexpr (T == kF16) {
    return __half2float(static_cast<const __half*>(base)[i]);
  } else if constexpr (T == kBF16) {
    return __uint_as_float(static_cast<unsigned>(static_cast<const std::uint16_t*>(base)[i]) << 16);
  } else {
    return static_cast<const float*>(base)[i];
  }
}

template <int T>
__device__ __forceinline__ void store_elem(void* base, std::size_t i, float x) {
  if constexpr (T == kF16) {
    static_cast<__half*>(base)[i] = __float2half_rn(x);
  } else if constexpr (T == kBF16) {
    static_cast<__nv_bfloat16*>(base)[i] = __float2bfloat16_rn(x);
  } else if constexpr (T == kF32) {
    static_cast<float*>(base)[i] = x;
  }
}

// Four consecutive elements starting at 4*j (the pointer is aligned for the vector access).
template <int T>
__device__ __forceinline__ float4 load4(const void* base, std::size_t j) {
  if constexpr (T == kF32) {
    return static_cast<const float4*>(base)[j];
  } else {
    const uint2 w = static_cast<const uint2*>(base)[j];  // 4 x 16 bit
    const unsigned short h[4] = {static_cast<unsigned short>(w.x & 0xffffu), static_cast<unsigned short>(w.x >> 16),
                                 static_cast<unsigned short>(w.y & 0xffffu), static_cast<unsigned short>(w.y >> 16)};
    float f[4];
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      if constexpr (T == kF16)
        f[k] = __half2float(__ushort_as_half(h[k]));
      else
        f[k] = __uint_as_float(static_cast<unsigned>(h[k]) << 16);
    }
    return make_float4(f[0], f[1], f[2], f[3]);
  }
}

template <int T>
__device__ __forceinline__ void store4(void* base, std::size_t j, float4 x) {
  if constexpr (T == kF32) {
    static_cast<float4*>(base)[j] = x;
  } else if constexpr (T == kF16 || T == kBF16) {
    const float f[4] = {x.x, x.y, x.z, x.w};
    unsigned short h[4];
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      if constexpr (T == kF16)
        h[k] = __half_as_ushort(__float2half_rn(f[k]));
      else
        h[k] = __bfloat16_as_ushort(__float2bfloat16_rn(f[k]));
    }
    static_cast<uint2*>(base)[j] = make_uint2(h[0] | (static_cast<unsigned>(h[1]) << 16),
                                              h[2] | (static_cast<unsigned>(h[3]) << 16));
  }
}

// The update of adam_types.h, with the operations and their order of adam_reference_step.
// The _rn intrinsics are IEEE round-to-nearest and are never fused into FMAs.
__device__ __forceinline__ void adam_elem(const KernelArgs& a, float g, float& p, float& m, float& v) {
  g = __fmul_rn(g, a.grad_unscale);
  if (a.l2) g = __fadd_rn(g, __fmul_rn(a.weight_decay, p));
  if (a.decoupled) p = __fmul_rn(p, a.decay_factor);
  m = __fadd_rn(__fmul_rn(a.beta1, m), __fmul_rn(a.one_minus_beta1, g));
  v = __fadd_rn(__fmul_rn(a.beta2, v), __fmul_rn(a.one_minus_beta2, __fmul_rn(g, g)));
  const float denom = __fadd_rn(__fdiv_rn(__fsqrt_rn(v), a.bc2_sqrt), a.eps);
  p = __fsub_rn(p, __fmul_rn(a.step_size, __fdiv_rn(m, denom)));
}

template <int G, int O>
__global__ void fused_adam_kernel(KernelArgs a, bool vectorized) {
  const std::size_t stride = static_cast<std::size_t>(gridDim.x) * blockDim.x;
  const std::size_t tid = static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  std::size_t scalar_begin = 0;
  if (vectorized) {
    const std::size_t n4 = a.count / 4;
    for (std::size_t j = tid; j < n4; j += stride) {
      float4 p = reinterpret_cast<float4*>(a.params)[j];
      float4 m = reinterpret_cast<float4*>(a.exp_avg)[j];
      float4 v = reinterpret_cast<float4*>(a.exp_avg_sq)[j];
      const float4 g = load4<G>(a.grads, j);
      adam_elem(a, g.x, p.x, m.x, v.x);
      adam_elem(a, g.y, p.y, m.y, v.y);
      adam_elem(a, g.z, p.z, m.z, v.z);
      adam_elem(a, g.w, p.w, m.w, v.w);
      reinterpret_cast<float4*>(a.params)[j] = p;
      reinterpret_cast<float4*>(a.exp_avg)[j] = m;
      reinterpret_cast<float4*>(a.exp_avg_sq)[j] = v;
      if constexpr (O != kNone) store4<O>(a.params_out, j, p);
    }
    scalar_begin = n4 * 4;
  }
  for (std::size_t i = scalar_begin + tid; i < a.count; i += stride) {
    float p = a.params[i], m = a.exp_avg[i], v = a.exp_avg_sq[i];
    adam_elem(a, load_elem<G>(a.grads, i), p, m, v);
    a.params[i] = p;
    a.exp_avg[i] = m;
    a.exp_avg_sq[i] = v;
    if constexpr (O != kNone) store_elem<O>(a.params_out, i, p);
  }
}

bool aligned(const void* p, std::size_t bytes) { return reinterpret_cast<std::uintptr_t>(p) % bytes == 0; }

int to_code(DType t) { return t == DType::F16 ? kF16 : t == DType::BF16 ? kBF16 : kF32; }

template <int G, int O>
void launch(const KernelArgs& a, bool vectorized, int grid, int block, cudaStream_t s) {
  fused_adam_kernel<G, O><<<grid, block, 0, s>>>(a, vectorized);
}

template <int G>
void launch_out(int out, const KernelArgs& a, bool vectorized, int grid, int block, cudaStream_t s) {
  switch (out) {
    case kF32: launch<G, kF32>(a, vectorized, grid, block, s); break;
    case kF16: launch<G, kF16>(a, vectorized, grid, block, s); break;
    case kBF16: launch<G, kBF16>(a, vectorized, grid, block, s); break;
    default: launch<G, kNone>(a, vectorized, grid, block, s); break;
  }
}

}  // namespace

int device_count(std::string* why) {
  int n = 0;
  const cudaError_t err = cudaGetDeviceCount(&n);
  if (err != cudaSuccess) {
    if (why != nullptr) *why = std::string(cudaGetErrorName(err)) + ": " + cudaGetErrorString(err);
    (void)cudaGetLastError();  // clear the sticky-free error so later calls start clean
    return 0;
  }
  if (n == 0 && why != nullptr) *why = "cudaGetDeviceCount reports 0 devices";
  return n;
}

void set_device(int device) { CUDACHECK(cudaSetDevice(device)); }

void synchronize(StreamHandle stream) { CUDACHECK(cudaStreamSynchronize(static_cast<cudaStream_t>(stream))); }

void fused_adam_step(const AdamHyperParams& hp, std::int64_t step, float grad_unscale, const AdamTensors& t,
                     StreamHandle stream) {
  check_adam_arguments(hp, step, grad_unscale, t);
  if (t.count == 0) return;
  const AdamStepScalars s = adam_step_scalars(hp, step);
  const KernelArgs a{t.params, t.exp_avg, t.exp_avg_sq, t.grads, t.params_out, t.count,
                     s.beta1, s.beta2, s.one_minus_beta1, s.one_minus_beta2, s.eps, s.weight_decay,
                     s.decay_factor, grad_unscale, s.step_size, s.bc2_sqrt, s.l2, s.decoupled};
  const int out = t.params_out == nullptr ? kNone : to_code(t.params_out_dtype);
  // Vector path: float4 for the fp32 arrays, 4 elements (8 or 16 B) for grads and params_out.
  const bool vectorized = aligned(t.params, 16) && aligned(t.exp_avg, 16) && aligned(t.exp_avg_sq, 16) &&
                          aligned(t.grads, 4 * dtype_size_bytes(t.grad_dtype)) &&
                          (out == kNone || aligned(t.params_out, 4 * dtype_size_bytes(t.params_out_dtype)));

  int device = 0, sm_count = 0;
  CUDACHECK(cudaGetDevice(&device));
  CUDACHECK(cudaDeviceGetAttribute(&sm_count, cudaDevAttrMultiProcessorCount, device));
  constexpr int kBlock = 256;
  const std::size_t work_items = vectorized ? (t.count + 3) / 4 : t.count;
  // Grid-stride: enough blocks to fill every SM several times over, no more.
  const std::size_t max_blocks = static_cast<std::size_t>(std::max(1, sm_count)) * 8;
  const int grid = static_cast<int>(std::min(max_blocks, (work_items + kBlock - 1) / kBlock));
  const auto s_handle = static_cast<cudaStream_t>(stream);
  switch (to_code(t.grad_dtype)) {
    case kF16: launch_out<kF16>(out, a, vectorized, grid, kBlock, s_handle); break;
    case kBF16: launch_out<kBF16>(out, a, vectorized, grid, kBlock, s_handle); break;
    default: launch_out<kF32>(out, a, vectorized, grid, kBlock, s_handle); break;
  }
  CUDACHECK(cudaGetLastError());
}

DeviceBuffer::DeviceBuffer(std::size_t bytes) : bytes_(bytes) {
  if (bytes > 0) CUDACHECK(cudaMalloc(&ptr_, bytes));
}
DeviceBuffer::~DeviceBuffer() {
  if (ptr_ != nullptr) cudaFree(ptr_);  // no throw from a destructor
}
DeviceBuffer::DeviceBuffer(DeviceBuffer&& other) noexcept
    : ptr_(std::exchange(other.ptr_, nullptr)), bytes_(std::exchange(other.bytes_, 0)) {}
DeviceBuffer& DeviceBuffer::operator=(DeviceBuffer&& other) noexcept {
  if (this != &other) {
    if (ptr_ != nullptr) cudaFree(ptr_);
    ptr_ = std::exchange(other.ptr_, nullptr);
    bytes_ = std::exchange(other.bytes_, 0);
  }
  return *this;
}
void DeviceBuffer::upload(const void* src, std::size_t bytes) {
  if (bytes > bytes_) throw std::invalid_argument("DeviceBuffer::upload: " + std::to_string(bytes) +
                                                  " bytes into a buffer of " + std::to_string(bytes_));
  if (bytes > 0) CUDACHECK(cudaMemcpy(ptr_, src, bytes, cudaMemcpyHostToDevice));
}
void DeviceBuffer::download(void* dst, std::size_t bytes) const {
  if (bytes > bytes_) throw std::invalid_argument("DeviceBuffer::download: " + std::to_string(bytes) +
                                                  " bytes from a buffer of " + std::to_string(bytes_));
  if (bytes > 0) CUDACHECK(cudaMemcpy(dst, ptr_, bytes, cudaMemcpyDeviceToHost));
}

}  // namespace trainsim::kernels::cuda
