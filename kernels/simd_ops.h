// Internal to kernels/: per-ISA vector loads and stores of fp32 / fp16 / bf16 data, shared by
// half.cpp and cpu_adam.cpp. Every function carries its own target attribute, so this file
// compiles without -mavx2 and the caller picks the level at run time (half.h: SimdLevel).
// The rounding matches the scalar functions of half.h bit for bit (see there).
#pragma once

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define TRAINSIM_KERNELS_X86 1
#include <immintrin.h>
#else
#define TRAINSIM_KERNELS_X86 0
#endif

#include <cstdint>

#include "kernels/adam_types.h"

#if TRAINSIM_KERNELS_X86
#define TRAINSIM_TARGET_AVX2 __attribute__((target("avx2,f16c")))
#define TRAINSIM_TARGET_AVX512 __attribute__((target("avx512f,avx2,f16c")))

namespace trainsim::kernels::simd {

// ---------------------------------------------------------------- AVX2 + F16C, 8 lanes
TRAINSIM_TARGET_AVX2 static inline __m256 load8_f16(const std::uint16_t* p) {
  return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
}
TRAINSIM_TARGET_AVX2 static inline __m256 load8_bf16(const std::uint16_t* p) {
  const __m256i w = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  return _mm256_castsi256_ps(_mm256_slli_epi32(w, 16));
}
TRAINSIM_TARGET_AVX2 static inline __m256 load8(const void* base, std::size_t i, DType t) {
  switch (t) {
    case DType::F16: return load8_f16(static_cast<const std::uint16_t*>(base) + i);
    case DType::BF16: return load8_bf16(static_cast<const std::uint16_t*>(base) + i);
    case DType::F32: break;
  }
  return _mm256_loadu_ps(static_cast<const float*>(base) + i);
}
TRAINSIM_TARGET_AVX2 static inline void store8_f16(std::uint16_t* p, __m256 x) {
  _mm_storeu_si128(reinterpret_cast<__m128i*>(p), _mm256_cvtps_ph(x, _MM_FROUND_TO_NEAREST_INT));
}
TRAINSIM_TARGET_AVX2 static inline void store8_bf16(std::uint16_t* p, __m256 x) {
  const __m256i xi = _mm256_castps_si256(x);
  const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(xi, 16), _mm256_set1_epi32(1));
  const __m256i rounded =
      _mm256_srli_epi32(_mm256_add_epi32(xi, _mm256_add_epi32(_mm256_set1_epi32(0x7fff), lsb)), 16);
  const __m256i quiet_nan = _mm256_or_si256(_mm256_srli_epi32(xi, 16), _mm256_set1_epi32(0x40));
  const __m256i is_nan = _mm256_castps_si256(_mm256_cmp_ps(x, x, _CMP_UNORD_Q));
  const __m256i r = _mm256_blendv_epi8(rounded, quiet_nan, is_nan);  // 8 x u32, each < 2^16
  // packus works within 128-bit lanes: [r0..r3 r0..r3 | r4..r7 r4..r7]; gather qwords 0 and 2.
  const __m256i packed = _mm256_permute4x64_epi64(_mm256_packus_epi32(r, r), 0x08);
  _mm_storeu_si128(reinterpret_cast<__m128i*>(p), _mm256_castsi256_si128(packed));
}
TRAINSIM_TARGET_AVX2 static inline void store8(void* base, std::size_t i, DType t, __m256 x) {
  switch (t) {
    case DType::F16: store8_f16(static_cast<std::uint16_t*>(base) + i, x); return;
    case DType::BF16: store8_bf16(static_cast<std::uint16_t*>(base) + i, x); return;
    case DType::F32: break;
  }
  _mm256_storeu_ps(static_cast<float*>(base) + i, x);
}

// ---------------------------------------------------------------- AVX-512F, 16 lanes
TRAINSIM_TARGET_AVX512 static inline __m512 load16_f16(const std::uint16_t* p) {
  return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
}
TRAINSIM_TARGET_AVX512 static inline __m512 load16_bf16(const std::uint16_t* p) {
  const __m512i w = _mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
  return _mm512_castsi512_ps(_mm512_slli_epi32(w, 16));
}
TRAINSIM_TARGET_AVX512 static inline __m512 load16(const void* base, std::size_t i, DType t) {
  switch (t) {
    case DType::F16: return load16_f16(static_cast<const std::uint16_t*>(base) + i);
    case DType::BF16: return load16_bf16(static_cast<const std::uint16_t*>(base) + i);
    case DType::F32: break;
  }
  return _mm512_loadu_ps(static_cast<const float*>(base) + i);
}
TRAINSIM_TARGET_AVX512 static inline void store16_f16(std::uint16_t* p, __m512 x) {
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(p),
                      _mm512_cvtps_ph(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
}
TRAINSIM_TARGET_AVX512 static inline void store16_bf16(std::uint16_t* p, __m512 x) {
  const __m512i xi = _mm512_castps_si512(x);
  const __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(xi, 16), _mm512_set1_epi32(1));
  const __m512i rounded =
      _mm512_srli_epi32(_mm512_add_epi32(xi, _mm512_add_epi32(_mm512_set1_epi32(0x7fff), lsb)), 16);
  const __m512i quiet_nan = _mm512_or_si512(_mm512_srli_epi32(xi, 16), _mm512_set1_epi32(0x40));
  const __mmask16 is_nan = _mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q);
  const __m512i r = _mm512_mask_blend_epi32(is_nan, rounded, quiet_nan);
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), _mm512_cvtepi32_epi16(r));  // truncating pack
}
TRAINSIM_TARGET_AVX512 static inline void store16(void* base, std::size_t i, DType t, __m512 x) {
  switch (t) {
    case DType::F16: store16_f16(static_cast<std::uint16_t*>(base) + i, x); return;
    case DType::BF16: store16_bf16(static_cast<std::uint16_t*>(base) + i, x); return;
    case DType::F32: break;
  }
  _mm512_storeu_ps(static_cast<float*>(base) + i, x);
}

}  // namespace trainsim::kernels::simd
#endif  // TRAINSIM_KERNELS_X86
