// fp16 / bf16 <-> fp32 conversions of kernels/half.h, against reference conversions written
// here in double arithmetic (value = significand x 2^exponent, rounding by std::nearbyint in
// the default round-to-nearest-even mode), exhaustively over all 65536 16-bit patterns.
#include "kernels/half.h"

#include <gtest/gtest.h>

#include <cfloat>
#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

namespace tk = trainsim::kernels;

namespace {

// A 16-bit float format: `mant_bits` fraction bits, exponent bias, smallest normal exponent.
struct Format {
  int mant_bits;
  int exp_bits;
  int bias;
};
constexpr Format kFp16{10, 5, 15};
constexpr Format kBf16{7, 8, 127};

// Exact value of a 16-bit pattern (NaN for NaN patterns).
double ref_to_double(std::uint16_t h, Format f) {
  const int sign = h >> 15;
  const int e = (h >> f.mant_bits) & ((1 << f.exp_bits) - 1);
  const int m = h & ((1 << f.mant_bits) - 1);
  double v;
  if (e == (1 << f.exp_bits) - 1) {
    v = m == 0 ? INFINITY : NAN;
  } else if (e == 0) {
    v = std::ldexp(static_cast<double>(m), 1 - f.bias - f.mant_bits);
  } else {
    v = std::ldexp(static_cast<double>((1 << f.mant_bits) + m), e - f.bias - f.mant_bits);
  }
  return sign ? -v : v;
}

// Round a finite double to the nearest value of the format (ties to even) and encode it.
std::uint16_t ref_from_double(double x, Format f) {
  const std::uint16_t sign = std::signbit(x) ? 0x8000 : 0;
  const double a = std::fabs(x);
  const int emin = 1 - f.bias;                        // exponent of the smallest normal
  const int emax = (1 << f.exp_bits) - 2 - f.bias;    // exponent of the largest finite
  const std::uint16_t inf = sign | static_cast<std::uint16_t>(((1 << f.exp_bits) - 1) << f.mant_bits);
  // Halfway between the largest finite value and 2^(emax+1): ties go to the even neighbour,
  // which is 2^(emax+1) (the largest finite has an all-ones, odd, significand): overflow.
  const double overflow = std::ldexp(2.0 - std::ldexp(1.0, -f.mant_bits - 1), emax);
  if (a >= overflow) return inf;
  if (a == 0.0) return sign;
  int k;
  std::frexp(a, &k);  // a = fr * 2^k, fr in [0.5, 1): exponent of a is k - 1
  const int e = std::max(k - 1, emin);
  const double quantum = std::ldexp(1.0, e - f.mant_bits);
  const double r = std::nearbyint(a / quantum);  // exact division by a power of two
  const double value = r * quantum;
  if (value < std::ldexp(1.0, emin)) return sign | static_cast<std::uint16_t>(r);  // subnormal (or 0)
  std::frexp(value, &k);
  const int ev = k - 1;
  const double significand = std::ldexp(value, f.mant_bits - ev);  // in [2^m, 2^(m+1))
  return sign | static_cast<std::uint16_t>(((ev + f.bias) << f.mant_bits) |
                                           (static_cast<int>(significand) - (1 << f.mant_bits)));
}

std::vector<tk::SimdLevel> supported_levels() {
  std::vector<tk::SimdLevel> out;
  for (auto l : {tk::SimdLevel::Scalar, tk::SimdLevel::Avx2, tk::SimdLevel::Avx512})
    if (tk::simd_level_supported(l)) out.push_back(l);
  return out;
}

bool is_nan16(std::uint16_t h, Format f) {
  const int e = (h >> f.mant_bits) & ((1 << f.exp_bits) - 1);
  return e == (1 << f.exp_bits) - 1 && (h & ((1 << f.mant_bits) - 1)) != 0;
}

// Inputs around every representable value: the value, its float neighbours, the midpoints to
// the next value up and their float neighbours (ties and near-ties), for both signs.
std::vector<float> rounding_probes(Format f) {
  std::vector<float> xs;
  for (std::uint32_t h = 0; h < 0x8000u; ++h) {
    if (is_nan16(static_cast<std::uint16_t>(h), f)) continue;
    const double v = ref_to_double(static_cast<std::uint16_t>(h), f);
    if (std::isinf(v)) continue;
    const double next = (h + 1 < 0x8000u && !is_nan16(static_cast<std::uint16_t>(h + 1), f))
                            ? ref_to_double(static_cast<std::uint16_t>(h + 1), f)
                            : INFINITY;
    for (double c : {v, std::isinf(next) ? v : 0.5 * (v + next)}) {
      if (std::fabs(c) > FLT_MAX) continue;
      const float cf = static_cast<float>(c);  // exact: 16-bit formats' midpoints fit in float
      for (float x : {cf, std::nextafter(cf, 0.0f), std::nextafter(cf, INFINITY)}) {
        xs.push_back(x);
        xs.push_back(-x);
      }
    }
  }
  for (float x : {FLT_MAX, FLT_MIN, FLT_TRUE_MIN, 65504.0f, 65519.996f, 65520.0f, 1e-8f, 2.9802322e-8f,
                  5.9604645e-8f, INFINITY})
    for (float s : {1.0f, -1.0f}) xs.push_back(s * x);
  std::mt19937 rng(12345);
  for (int k = 0; k < (1 << 20); ++k) {  // random bit patterns, NaNs skipped
    const float x = tk::bits_float(static_cast<std::uint32_t>(rng()));
    if (!std::isnan(x)) xs.push_back(x);
  }
  return xs;
}

void expect_same_bits(float a, float b, std::uint32_t context) {
  ASSERT_EQ(tk::float_bits(a), tk::float_bits(b)) << "input pattern 0x" << std::hex << context;
}

}  // namespace

TEST(ReferenceConversion, SelfCheck) {
  // The test's own references against values known by hand.
  EXPECT_EQ(ref_from_double(1.0, kFp16), 0x3c00);
  EXPECT_EQ(ref_from_double(65504.0, kFp16), 0x7bff);
  EXPECT_EQ(ref_from_double(65520.0, kFp16), 0x7c00);
  EXPECT_EQ(ref_from_double(std::ldexp(1.0, -24), kFp16), 0x0001);
  EXPECT_EQ(ref_from_double(std::ldexp(1.0, -25), kFp16), 0x0000);         // tie -> even (0)
  EXPECT_EQ(ref_from_double(3 * std::ldexp(1.0, -25), kFp16), 0x0002);     // tie 1.5 -> 2
  EXPECT_EQ(ref_from_double(1.0 + std::ldexp(1.0, -11), kFp16), 0x3c00);   // tie -> even
  EXPECT_EQ(ref_from_double(1.0 + 3 * std::ldexp(1.0, -11), kFp16), 0x3c02);
  EXPECT_EQ(ref_from_double(-2.0, kFp16), 0xc000);
  EXPECT_EQ(ref_from_double(1.0, kBf16), 0x3f80);
  EXPECT_EQ(ref_from_double(1.0 + std::ldexp(1.0, -8), kBf16), 0x3f80);    // tie -> even
  EXPECT_EQ(ref_from_double(FLT_MAX, kBf16), 0x7f80);                      // rounds past max -> inf
  EXPECT_DOUBLE_EQ(ref_to_double(0x3555, kFp16), 0.333251953125);
  EXPECT_DOUBLE_EQ(ref_to_double(0x0001, kFp16), std::ldexp(1.0, -24));
  EXPECT_DOUBLE_EQ(ref_to_double(0x0001, kBf16), std::ldexp(1.0, -133));
}

TEST(HalfConversion, Fp16ToFloatAllPatterns) {
  std::vector<std::uint16_t> all(65536);
  for (std::uint32_t h = 0; h < 65536; ++h) all[h] = static_cast<std::uint16_t>(h);
  for (std::uint32_t h = 0; h < 65536; ++h) {
    const float got = tk::fp16_to_float(all[h]);
    const double want = ref_to_double(all[h], kFp16);
    if (std::isnan(want)) {
      ASSERT_TRUE(std::isnan(got)) << h;
      ASSERT_EQ(std::signbit(got), (h & 0x8000) != 0) << h;
      ASSERT_NE(tk::float_bits(got) & 0x400000u, 0u) << "NaN must come out quiet: " << h;
    } else {
      ASSERT_EQ(static_cast<double>(got), want) << h;
      ASSERT_EQ(std::signbit(got), std::signbit(want)) << h;  // -0 stays -0
    }
  }
  for (auto level : supported_levels()) {
    SCOPED_TRACE(tk::simd_level_name(level));
    std::vector<float> out(all.size());
    tk::convert_fp16_to_float(all.data(), out.data(), all.size(), level);
    for (std::uint32_t h = 0; h < 65536; ++h) expect_same_bits(out[h], tk::fp16_to_float(all[h]), h);
  }
}

TEST(HalfConversion, Bf16ToFloatAllPatterns) {
  std::vector<std::uint16_t> all(65536);
  for (std::uint32_t h = 0; h < 65536; ++h) all[h] = static_cast<std::uint16_t>(h);
  for (std::uint32_t h = 0; h < 65536; ++h) {
    const float got = tk::bf16_to_float(all[h]);
    const double want = ref_to_double(all[h], kBf16);
    if (std::isnan(want)) {
      ASSERT_TRUE(std::isnan(got)) << h;
    } else {
      ASSERT_EQ(static_cast<double>(got), want) << h;
      ASSERT_EQ(std::signbit(got), std::signbit(want)) << h;
    }
  }
  for (auto level : supported_levels()) {
    SCOPED_TRACE(tk::simd_level_name(level));
    std::vector<float> out(all.size());
    tk::convert_bf16_to_float(all.data(), out.data(), all.size(), level);
    for (std::uint32_t h = 0; h < 65536; ++h) expect_same_bits(out[h], tk::bf16_to_float(all[h]), h);
  }
}

TEST(HalfConversion, RoundTripAllPatterns) {
  for (std::uint32_t h = 0; h < 65536; ++h) {
    const auto b = static_cast<std::uint16_t>(h);
    if (!is_nan16(b, kFp16)) {
      ASSERT_EQ(tk::float_to_fp16(tk::fp16_to_float(b)), b) << h;
    }
    if (!is_nan16(b, kBf16)) {
      ASSERT_EQ(tk::float_to_bf16(tk::bf16_to_float(b)), b) << h;
    }
  }
}

TEST(HalfConversion, FloatToFp16RoundsToNearestEven) {
  const std::vector<float> xs = rounding_probes(kFp16);
  for (float x : xs) ASSERT_EQ(tk::float_to_fp16(x), ref_from_double(x, kFp16)) << x << " bits 0x" << std::hex << tk::float_bits(x);
  for (auto level : supported_levels()) {
    SCOPED_TRACE(tk::simd_level_name(level));
    std::vector<std::uint16_t> out(xs.size());
    tk::convert_float_to_fp16(xs.data(), out.data(), xs.size(), level);
    for (std::size_t i = 0; i < xs.size(); ++i)
      ASSERT_EQ(out[i], tk::float_to_fp16(xs[i])) << xs[i] << " at " << i;
  }
}

TEST(HalfConversion, FloatToBf16RoundsToNearestEven) {
  const std::vector<float> xs = rounding_probes(kBf16);
  for (float x : xs) ASSERT_EQ(tk::float_to_bf16(x), ref_from_double(x, kBf16)) << x << " bits 0x" << std::hex << tk::float_bits(x);
  for (auto level : supported_levels()) {
    SCOPED_TRACE(tk::simd_level_name(level));
    std::vector<std::uint16_t> out(xs.size());
    tk::convert_float_to_bf16(xs.data(), out.data(), xs.size(), level);
    for (std::size_t i = 0; i < xs.size(); ++i)
      ASSERT_EQ(out[i], tk::float_to_bf16(xs[i])) << xs[i] << " at " << i;
  }
}

TEST(HalfConversion, NanStaysNanWithSignAndQuietBit) {
  std::vector<float> nans;
  for (std::uint32_t bits : {0x7fc00000u, 0x7f800001u, 0x7fbfffffu, 0x7fe01234u, 0xffc00000u, 0xff800001u})
    nans.push_back(tk::bits_float(bits));
  for (auto level : supported_levels()) {
    SCOPED_TRACE(tk::simd_level_name(level));
    std::vector<std::uint16_t> h(nans.size()), b(nans.size());
    // Pad to a full vector so the SIMD path (not the scalar tail) handles them.
    std::vector<float> in(nans);
    in.resize(32, tk::bits_float(0x7fc00000u));
    h.resize(in.size());
    b.resize(in.size());
    tk::convert_float_to_fp16(in.data(), h.data(), in.size(), level);
    tk::convert_float_to_bf16(in.data(), b.data(), in.size(), level);
    for (std::size_t i = 0; i < nans.size(); ++i) {
      const bool neg = (tk::float_bits(nans[i]) >> 31) != 0;
      EXPECT_TRUE(is_nan16(h[i], kFp16)) << i;
      EXPECT_EQ((h[i] & 0x8000) != 0, neg) << i;
      EXPECT_NE(h[i] & 0x0200, 0) << "quiet bit, fp16, " << i;
      EXPECT_EQ(h[i], tk::float_to_fp16(nans[i])) << i;
      EXPECT_TRUE(is_nan16(b[i], kBf16)) << i;
      EXPECT_EQ((b[i] & 0x8000) != 0, neg) << i;
      EXPECT_NE(b[i] & 0x0040, 0) << "quiet bit, bf16, " << i;
      EXPECT_EQ(b[i], tk::float_to_bf16(nans[i])) << i;
    }
  }
}

TEST(HalfConversion, UnsupportedLevelThrows) {
  for (auto level : {tk::SimdLevel::Avx2, tk::SimdLevel::Avx512}) {
    if (tk::simd_level_supported(level)) continue;
    float f = 0;
    std::uint16_t h = 0;
    EXPECT_THROW(tk::convert_fp16_to_float(&h, &f, 1, level), std::invalid_argument);
  }
  EXPECT_TRUE(tk::simd_level_supported(tk::detect_simd_level()));
}
