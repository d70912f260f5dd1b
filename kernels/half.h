// fp16 / bf16 <-> fp32 conversions, scalar (portable, header-only) and over arrays (SIMD,
// chosen at run time), plus the SIMD level detection that cpu_adam.h uses.
//
// Rounding: fp32 -> fp16 and fp32 -> bf16 round to nearest, ties to even (IEEE 754-2008
// roundTiesToEven), keep subnormals (no flush to zero), overflow to +-inf, and turn any NaN
// into a quiet NaN of the same sign with the payload's upper bits (what x86 F16C VCVTPS2PH
// does). fp16 -> fp32 and bf16 -> fp32 are exact; a signaling fp16 NaN becomes quiet (as
// VCVTPH2PS does).
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

namespace trainsim::kernels {

inline std::uint32_t float_bits(float f) {
  std::uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
}
inline float bits_float(std::uint32_t u) {
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

/// fp16 bit pattern -> fp32 (exact).
inline float fp16_to_float(std::uint16_t h) {
  const std::uint32_t sign = static_cast<std::uint32_t>(h & 0x8000u) << 16;
  const std::uint32_t exp = (h >> 10) & 0x1fu;
  std::uint32_t mant = h & 0x3ffu;
  if (exp == 0) {
    if (mant == 0) return bits_float(sign);
    // Subnormal: value = mant * 2^-24. Normalize into an fp32 normal.
    std::uint32_t e = 127 - 15 + 1;
    while ((mant & 0x400u) == 0) {
      mant <<= 1;
      --e;
    }
    return bits_float(sign | (e << 23) | ((mant & 0x3ffu) << 13));
  }
  if (exp == 0x1f) {
    if (mant == 0) return bits_float(sign | 0x7f800000u);
    return bits_float(sign | 0x7fc00000u | (mant << 13));  // quiet NaN, payload kept
  }
  return bits_float(sign | ((exp + 127 - 15) << 23) | (mant << 13));
}

/// fp32 -> fp16 bit pattern, round to nearest even.
inline std::uint16_t float_to_fp16(float f) {
  std::uint32_t x = float_bits(f);
  const std::uint16_t sign = static_cast<std::uint16_t>((x >> 16) & 0x8000u);
  x &= 0x7fffffffu;
  if (x >= 0x7f800000u) {  // inf or NaN
    if (x == 0x7f800000u) return sign | 0x7c00u;
    return static_cast<std::uint16_t>(sign | 0x7e00u | ((x >> 13) & 0x3ffu));
  }
  // 65520 = 65504 (largest fp16) + half an ulp (16): ties to even round up to 2^16 -> inf.
  if (x >= 0x477ff000u) return sign | 0x7c00u;
  if (x < 0x38800000u) {  // below 2^-14: fp16 subnormal or zero, quantum 2^-24
    const std::uint32_t e = x >> 23;
    if (e < 102) return sign;  // below 2^-25 (half the smallest subnormal): rounds to 0
    const std::uint32_t mant = (x & 0x7fffffu) | 0x800000u;  // value = mant * 2^(e-150)
    const std::uint32_t shift = 126 - e;                       // value * 2^24 = mant >> shift
    std::uint32_t r = mant >> shift;
    const std::uint32_t rem = mant & ((1u << shift) - 1);
    const std::uint32_t halfway = 1u << (shift - 1);
    if (rem > halfway || (rem == halfway && (r & 1u))) ++r;
    return static_cast<std::uint16_t>(sign | r);  // r == 0x400 encodes 2^-14 correctly
  }
  std::uint32_t r = (x >> 13) - ((127u - 15u) << 10);
  const std::uint32_t rem = x & 0x1fffu;
  if (rem > 0x1000u || (rem == 0x1000u && (r & 1u))) ++r;  // may carry into the exponent: fine
  return static_cast<std::uint16_t>(sign | r);
}

/// bf16 bit pattern -> fp32 (exact).
inline float bf16_to_float(std::uint16_t b) { return bits_float(static_cast<std::uint32_t>(b) << 16); }

/// fp32 -> bf16 bit pattern, round to nearest even.
inline std::uint16_t float_to_bf16(float f) {
  const std::uint32_t x = float_bits(f);
  if ((x & 0x7fffffffu) > 0x7f800000u) return static_cast<std::uint16_t>((x >> 16) | 0x40u);  // quiet NaN
  // Adding 0x7fff plus the lowest kept bit rounds to nearest, ties to even; a carry out of the
  // mantissa bumps the exponent, and past the largest finite value it reaches inf (as it must).
  return static_cast<std::uint16_t>((x + 0x7fffu + ((x >> 16) & 1u)) >> 16);
}

/// Instruction-set level of the vectorized CPU code.
enum class SimdLevel : std::uint8_t {
  Scalar,  ///< portable C++
  Avx2,    ///< AVX2 + F16C, 8 floats per vector
  Avx512,  ///< AVX-512F, 16 floats per vector
};

/// Name for logs and test names: "scalar", "avx2", "avx512".
const char* simd_level_name(SimdLevel level);

/// The best level this CPU supports (cpuid through __builtin_cpu_supports; Scalar on
/// compilers or targets without it).
SimdLevel detect_simd_level();

/// True when `level` can run on this CPU.
bool simd_level_supported(SimdLevel level);

/// Array conversions using `level` (throws std::invalid_argument if this CPU lacks it).
/// Results are bit-identical across levels and to the scalar functions above.
void convert_fp16_to_float(const std::uint16_t* in, float* out, std::size_t n, SimdLevel level);
void convert_float_to_fp16(const float* in, std::uint16_t* out, std::size_t n, SimdLevel level);
void convert_bf16_to_float(const std::uint16_t* in, float* out, std::size_t n, SimdLevel level);
void convert_float_to_bf16(const float* in, std::uint16_t* out, std::size_t n, SimdLevel level);

}  // namespace trainsim::kernels
