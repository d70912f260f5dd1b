// GPU fused Adam (kernels/fused_adam.h) against the scalar CPU reference, element by element
// over many random steps, and the bandwidth probe's self-check. Every test skips, with the
// CUDA runtime's reason, when no GPU (or no driver) is present.
#include "kernels/fused_adam.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <cstdint>
#include <random>
#include <sstream>
#include <string>
#include <tuple>
#include <vector>

#include "kernels/adam_reference.h"
#include "kernels/bandwidth_probe.h"
#include "kernels/half.h"

namespace tk = trainsim::kernels;
namespace tc = trainsim::kernels::cuda;

namespace {

constexpr double kRelTol = 1e-6;

#define SKIP_WITHOUT_GPU()                                                  \
  do {                                                                      \
    std::string why;                                                        \
    if (tc::device_count(&why) == 0) GTEST_SKIP() << "no CUDA device: " << why; \
  } while (0)

double max_rel(const std::vector<float>& got, const std::vector<float>& ref, std::size_t* where,
               std::size_t* bit_mismatches) {
  double worst = 0.0;
  *where = 0;
  *bit_mismatches = 0;
  for (std::size_t i = 0; i < ref.size(); ++i) {
    if (tk::float_bits(got[i]) != tk::float_bits(ref[i])) ++*bit_mismatches;
    const double a = got[i], b = ref[i];
    const double rel = b == 0.0 ? (a == 0.0 ? 0.0 : INFINITY) : std::fabs(a - b) / std::fabs(b);
    if (!(rel <= worst)) {
      worst = std::isnan(rel) ? INFINITY : rel;
      *where = i;
    }
  }
  return worst;
}

// Gradient values over decades (1e-7 .. 1, a few exact zeros), generated once; each step walks
// through the pool with a random start and odd stride.
const std::vector<float>& gradient_pool() {
  static const std::vector<float> pool = [] {
    std::mt19937 rng(2024);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    std::uniform_int_distribution<int> decade(-7, 0);
    std::vector<float> out(1 << 20);
    for (std::size_t i = 0; i < out.size(); ++i)
      out[i] = i % 97 == 0 ? 0.0f : normal(rng) * std::pow(10.0f, static_cast<float>(decade(rng)));
    return out;
  }();
  return pool;
}

struct Case {
  std::size_t n;
  tk::DType grad;
  int mode;            // 0: no weight decay, 1: Adam L2, 2: AdamW
  bool with_out;
  tk::DType out;
  std::size_t offset;  // elements by which every device pointer is shifted (1: unaligned, scalar path)
};

std::string dtype_name(tk::DType t) { return t == tk::DType::F16 ? "f16" : t == tk::DType::BF16 ? "bf16" : "f32"; }

std::string case_name(const Case& c) {
  static const char* modes[] = {"nowd", "adam_l2", "adamw"};
  std::ostringstream os;
  os << "n" << c.n << "_g" << dtype_name(c.grad) << "_" << modes[c.mode] << "_out"
     << (c.with_out ? dtype_name(c.out) : std::string("none")) << "_off" << c.offset;
  return os.str();
}
void PrintTo(const Case& c, std::ostream* os) { *os << case_name(c); }

std::vector<Case> all_cases() {
  std::vector<Case> cases;
  for (std::size_t n : {std::size_t{1}, std::size_t{7}, std::size_t{1000}, std::size_t{100003}, std::size_t{(1 << 20) + 5}})
    for (auto g : {tk::DType::F32, tk::DType::F16, tk::DType::BF16})
      for (int mode : {0, 1, 2}) {
        const bool with_out = g != tk::DType::F32 || mode == 1;
        const tk::DType out = g == tk::DType::F32 ? tk::DType::BF16 : (mode == 2 && g == tk::DType::F16 ? tk::DType::F32 : g);
        cases.push_back({n, g, mode, with_out, out, 0});
      }
  cases.push_back({100003, tk::DType::F16, 2, true, tk::DType::F16, 1});
  cases.push_back({1001, tk::DType::BF16, 1, true, tk::DType::BF16, 1});
  return cases;
}

class FusedAdamVsReference : public ::testing::TestWithParam<Case> {};

TEST_P(FusedAdamVsReference, ManyRandomSteps) {
  SKIP_WITHOUT_GPU();
  const Case c = GetParam();
  const std::size_t n = c.n, off = c.offset, total = n + off;
  const int steps = n > 200000 ? 50 : 200;  // the host reference dominates the run time
  std::mt19937 rng(static_cast<unsigned>(n * 31 + c.mode));
  std::normal_distribution<float> normal(0.0f, 1.0f);

  std::vector<float> p(n), m(n, 0.0f), v(n, 0.0f), g32(n);
  std::vector<std::uint16_t> g16(n), out16(n);
  std::vector<float> out32(n);
  for (float& x : p) x = 0.05f * normal(rng);
  if (c.mode == 1)
    for (std::size_t i = 0; i < n; ++i) {
      m[i] = 1e-3f * normal(rng);
      v[i] = 1e-4f * std::fabs(normal(rng));
    }

  tc::DeviceBuffer dp(total * 4), dm(total * 4), dv(total * 4), dg(total * 4), dout(total * 4);
  dp.upload(p.data(), 0);  // no-op, exercises the zero-byte path
  auto at = [off](const tc::DeviceBuffer& b, std::size_t elem_bytes) {
    return static_cast<void*>(static_cast<char*>(b.data()) + off * elem_bytes);
  };
  // Device copies of the state, shifted by `off` elements.
  auto upload_shifted = [&](tc::DeviceBuffer& b, const void* src, std::size_t elem_bytes) {
    std::vector<char> tmp(total * elem_bytes, 0);
    std::memcpy(tmp.data() + off * elem_bytes, src, n * elem_bytes);
    b.upload(tmp.data(), tmp.size());
  };
  auto download_shifted = [&](const tc::DeviceBuffer& b, void* dst, std::size_t elem_bytes) {
    std::vector<char> tmp(total * elem_bytes);
    b.download(tmp.data(), tmp.size());
    std::memcpy(dst, tmp.data() + off * elem_bytes, n * elem_bytes);
  };
  upload_shifted(dp, p.data(), 4);
  upload_shifted(dm, m.data(), 4);
  upload_shifted(dv, v.data(), 4);

  tk::AdamHyperParams hp;
  hp.weight_decay = c.mode == 0 ? 0.0 : 0.01;
  hp.decoupled_weight_decay = c.mode == 2;
  const float loss_scale = c.grad == tk::DType::F16 ? 1024.0f : 1.0f;
  const std::size_t gbytes = tk::dtype_size_bytes(c.grad), obytes = tk::dtype_size_bytes(c.out);

  tk::AdamTensors host;
  host.params = p.data();
  host.exp_avg = m.data();
  host.exp_avg_sq = v.data();
  host.grad_dtype = c.grad;
  host.grads = c.grad == tk::DType::F32 ? static_cast<const void*>(g32.data()) : g16.data();
  host.params_out = c.with_out ? (c.out == tk::DType::F32 ? static_cast<void*>(out32.data()) : out16.data()) : nullptr;
  host.params_out_dtype = c.out;
  host.count = n;
  tk::AdamTensors dev = host;
  dev.params = static_cast<float*>(at(dp, 4));
  dev.exp_avg = static_cast<float*>(at(dm, 4));
  dev.exp_avg_sq = static_cast<float*>(at(dv, 4));
  dev.grads = at(dg, gbytes);
  dev.params_out = c.with_out ? at(dout, obytes) : nullptr;

  for (int step = 1; step <= steps; ++step) {
    const std::vector<float>& pool = gradient_pool();
    const std::size_t mask = pool.size() - 1;
    std::size_t j = rng() & mask;
    const std::size_t stride = (rng() & mask) | 1;
    for (std::size_t i = 0; i < n; ++i, j = (j + stride) & mask) {
      const float g = pool[j] * loss_scale;
      if (c.grad == tk::DType::F16) g16[i] = tk::float_to_fp16(g);
      else if (c.grad == tk::DType::BF16) g16[i] = tk::float_to_bf16(g);
      else g32[i] = g;
    }
    upload_shifted(dg, host.grads, gbytes);
    tk::adam_reference_step(hp, step, 1.0f / loss_scale, host);
    tc::fused_adam_step(hp, step, 1.0f / loss_scale, dev);
  }
  tc::synchronize();
  std::vector<float> gp(n), gm(n), gv(n);
  download_shifted(dp, gp.data(), 4);
  download_shifted(dm, gm.data(), 4);
  download_shifted(dv, gv.data(), 4);
  for (auto [name, got, ref] : {std::tuple{"params", &gp, &p}, std::tuple{"exp_avg", &gm, &m},
                                std::tuple{"exp_avg_sq", &gv, &v}}) {
    std::size_t where = 0, mismatches = 0;
    const double worst = max_rel(*got, *ref, &where, &mismatches);
    EXPECT_LE(worst, kRelTol) << name << " element " << where << ": GPU " << (*got)[where] << " vs reference "
                              << (*ref)[where];
    EXPECT_EQ(mismatches, 0u) << name << ": elements whose bits differ from the reference";
  }
  if (c.with_out) {
    if (c.out == tk::DType::F32) {
      std::vector<float> got(n);
      download_shifted(dout, got.data(), 4);
      for (std::size_t i = 0; i < n; ++i) ASSERT_EQ(tk::float_bits(got[i]), tk::float_bits(out32[i])) << i;
    } else {
      std::vector<std::uint16_t> got(n);
      download_shifted(dout, got.data(), 2);
      for (std::size_t i = 0; i < n; ++i) ASSERT_EQ(got[i], out16[i]) << i;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Kernels, FusedAdamVsReference, ::testing::ValuesIn(all_cases()),
                         [](const ::testing::TestParamInfo<Case>& info) { return case_name(info.param); });

TEST(FusedAdam, RejectsInvalidArgumentsBeforeTouchingTheDevice) {
  // Argument checks come first, so this runs (and must throw) with or without a GPU.
  tk::AdamTensors t;
  t.count = 10;  // null pointers
  EXPECT_THROW(tc::fused_adam_step(tk::AdamHyperParams{}, 1, 1.0f, t), std::invalid_argument);
  t.count = 0;
  EXPECT_THROW(tc::fused_adam_step(tk::AdamHyperParams{}, 0, 1.0f, t), std::invalid_argument);
}

TEST(FusedAdam, DeviceCountExplainsAbsence) {
  std::string why;
  const int n = tc::device_count(&why);
  if (n == 0) {
    EXPECT_FALSE(why.empty());
  } else {
    EXPECT_GT(n, 0);
  }
}

TEST(BandwidthProbe, CopyIsCorrectAndBelowPeak) {
  SKIP_WITHOUT_GPU();
  tc::set_device(0);
  const tc::CopyBandwidth bw = tc::measure_copy_bandwidth(std::size_t{256} << 20, 10);
  const double peak = tc::device_peak_bandwidth_bytes_per_s(0);
  EXPECT_EQ(bw.wrong_elements, 0u);
  EXPECT_EQ(bw.bytes_moved_per_iteration, std::size_t{512} << 20);
  EXPECT_GT(peak, 1e11) << tc::device_name(0);   // every GPU this project targets has > 100 GB/s
  // The measured rate is reported (bench_fused_adam_cuda prints it against the peak), never
  // asserted: a shared GPU can be arbitrarily slow.
  EXPECT_GT(bw.bytes_per_s, 0.0);
  RecordProperty("device", tc::device_name(0));
  RecordProperty("copy_GBps", std::to_string(bw.bytes_per_s / 1e9));
  RecordProperty("peak_GBps", std::to_string(peak / 1e9));
}

}  // namespace
