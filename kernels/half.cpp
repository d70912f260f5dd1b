#include "kernels/half.h"

#include <stdexcept>
#include <string>

#include "kernels/simd_ops.h"

namespace trainsim::kernels {

const char* simd_level_name(SimdLevel level) {
  switch (level) {
    case SimdLevel::Scalar: return "scalar";
    case SimdLevel::Avx2: return "avx2";
    case SimdLevel::Avx512: return "avx512";
  }
  return "unknown";
}

bool simd_level_supported(SimdLevel level) {
  switch (level) {
    case SimdLevel::Scalar: return true;
#if TRAINSIM_KERNELS_X86
    case SimdLevel::Avx2:
      return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("f16c");
    case SimdLevel::Avx512:
      return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx2") &&
             __builtin_cpu_supports("f16c");
#else
    case SimdLevel::Avx2:
    case SimdLevel::Avx512:
      return false;
#endif
  }
  return false;
}

SimdLevel detect_simd_level() {
  if (simd_level_supported(SimdLevel::Avx512)) return SimdLevel::Avx512;
  if (simd_level_supported(SimdLevel::Avx2)) return SimdLevel::Avx2;
  return SimdLevel::Scalar;
}

namespace {

void require_level(SimdLevel level) {
  if (!simd_level_supported(level))
    throw std::invalid_argument(std::string("SIMD level '") + simd_level_name(level) +
                                "' is not supported by this CPU");
}

// Converts n elements from `in` (type `from`) to `out` (type `to`); one of them is F32.
void scalar_convert(const void* in, DType from, void* out, DType to, std::size_t begin, std::size_t n) {
  for (std::size_t i = begin; i < n; ++i) {
    float x;
    switch (from) {
      case DType::F16: x = fp16_to_float(static_cast<const std::uint16_t*>(in)[i]); break;
      case DType::BF16: x = bf16_to_float(static_cast<const std::uint16_t*>(in)[i]); break;
      default: x = static_cast<const float*>(in)[i]; break;
    }
    switch (to) {
      case DType::F16: static_cast<std::uint16_t*>(out)[i] = float_to_fp16(x); break;
      case DType::BF16: static_cast<std::uint16_t*>(out)[i] = float_to_bf16(x); break;
      default: static_cast<float*>(out)[i] = x; break;
    }
  }
}

#if TRAINSIM_KERNELS_X86
TRAINSIM_TARGET_AVX2 std::size_t avx2_convert(const void* in, DType from, void* out, DType to, std::size_t n) {
  std::size_t i = 0;
  for (; i + 8 <= n; i += 8) simd::store8(out, i, to, simd::load8(in, i, from));
  return i;
}
TRAINSIM_TARGET_AVX512 std::size_t avx512_convert(const void* in, DType from, void* out, DType to,
                                                  std::size_t n) {
  std::size_t i = 0;
  for (; i + 16 <= n; i += 16) simd::store16(out, i, to, simd::load16(in, i, from));
  return i;
}
#endif

void convert(const void* in, DType from, void* out, DType to, std::size_t n, SimdLevel level) {
  require_level(level);
  std::size_t done = 0;
#if TRAINSIM_KERNELS_X86
  if (level == SimdLevel::Avx512) done = avx512_convert(in, from, out, to, n);
  if (level == SimdLevel::Avx2) done = avx2_convert(in, from, out, to, n);
#endif
  scalar_convert(in, from, out, to, done, n);
}

}  // namespace

void convert_fp16_to_float(const std::uint16_t* in, float* out, std::size_t n, SimdLevel level) {
  convert(in, DType::F16, out, DType::F32, n, level);
}
void convert_float_to_fp16(const float* in, std::uint16_t* out, std::size_t n, SimdLevel level) {
  convert(in, DType::F32, out, DType::F16, n, level);
}
void convert_bf16_to_float(const std::uint16_t* in, float* out, std::size_t n, SimdLevel level) {
  convert(in, DType::BF16, out, DType::F32, n, level);
}
void convert_float_to_bf16(const float* in, std::uint16_t* out, std::size_t n, SimdLevel level) {
  convert(in, DType::F32, out, DType::BF16, n, level);
}

}  // namespace trainsim::kernels
