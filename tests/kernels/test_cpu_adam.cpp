// CPU Adam (kernels/cpu_adam.h) against the scalar reference (kernels/adam_reference.h),
// element by element over many random steps; and the reference itself against closed forms
// and a double-precision Adam written here.
#include "kernels/cpu_adam.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <random>
#include <sstream>
#include <string>
#include <tuple>
#include <vector>

#include "kernels/adam_reference.h"
#include "kernels/half.h"

namespace tk = trainsim::kernels;

namespace {

constexpr double kRelTol = 1e-6;  // the acceptance bound: relative error on fp32 states/params

// Optimizer state of `n` elements plus one step's gradients and the low-precision output.
struct State {
  std::vector<float> p, m, v;
  std::vector<float> g32;
  std::vector<std::uint16_t> g16;
  std::vector<std::uint16_t> out16;
  std::vector<float> out32;

  tk::AdamTensors tensors(tk::DType grad_dtype, bool with_out, tk::DType out_dtype) {
    tk::AdamTensors t;
    t.params = p.data();
    t.exp_avg = m.data();
    t.exp_avg_sq = v.data();
    t.grad_dtype = grad_dtype;
    t.grads = grad_dtype == tk::DType::F32 ? static_cast<const void*>(g32.data()) : g16.data();
    t.params_out_dtype = out_dtype;
    if (with_out) t.params_out = out_dtype == tk::DType::F32 ? static_cast<void*>(out32.data()) : out16.data();
    t.count = p.size();
    return t;
  }
};

State make_state(std::size_t n, std::mt19937& rng, bool random_moments) {
  State s;
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::uniform_real_distribution<float> uni(0.0f, 1e-4f);
  s.p.resize(n);
  s.m.assign(n, 0.0f);
  s.v.assign(n, 0.0f);
  for (std::size_t i = 0; i < n; ++i) {
    s.p[i] = 0.05f * normal(rng);
    if (random_moments) {
      s.m[i] = 1e-3f * normal(rng);
      s.v[i] = uni(rng);
    }
  }
  s.g32.resize(n);
  s.g16.resize(n);
  s.out16.assign(n, 0);
  s.out32.assign(n, 0.0f);
  return s;
}

// A pool of gradient values spread over decades: some exactly zero, some tiny (fp16
// subnormals after loss scaling), normal-distributed magnitudes from 1e-7 to 1.
const std::vector<float>& gradient_pool() {
  static const std::vector<float> pool = [] {
    std::mt19937 rng(2024);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    std::uniform_int_distribution<int> decade(-7, 0);
    std::uniform_int_distribution<int> pick(0, 99);
    std::vector<float> out(1 << 20);
    for (float& g : out) {
      const int k = pick(rng);
      g = k == 0 ? 0.0f : k == 1 ? 1e-12f : normal(rng) * std::pow(10.0f, static_cast<float>(decade(rng)));
    }
    return out;
  }();
  return pool;
}

// Fresh gradients for one step (a random walk through the pool), multiplied by `loss_scale`
// as mixed precision does, stored as `dt`.
void fill_grads(State& s, tk::DType dt, float loss_scale, std::mt19937& rng) {
  const std::vector<float>& pool = gradient_pool();
  const std::size_t mask = pool.size() - 1;
  std::size_t j = rng() & mask;
  const std::size_t stride = (rng() & mask) | 1;  // odd: visits the whole pool
  for (std::size_t i = 0; i < s.g32.size(); ++i, j = (j + stride) & mask) {
    const float g = pool[j] * loss_scale;
    if (dt == tk::DType::F16) {
      s.g16[i] = tk::float_to_fp16(g);
    } else if (dt == tk::DType::BF16) {
      s.g16[i] = tk::float_to_bf16(g);
    } else {
      s.g32[i] = g;
    }
  }
}

// Largest relative difference |a - b| / |b| (b the reference; exact zeros must match exactly),
// plus how many elements differ in their bits.
struct Diff {
  double max_rel = 0.0;
  std::size_t first_bad = SIZE_MAX;
  std::size_t bit_mismatches = 0;
};
Diff compare(const std::vector<float>& got, const std::vector<float>& ref) {
  Diff d;
  for (std::size_t i = 0; i < ref.size(); ++i) {
    if (tk::float_bits(got[i]) != tk::float_bits(ref[i])) ++d.bit_mismatches;
    const double a = got[i], b = ref[i];
    double rel;
    if (b == 0.0)
      rel = a == 0.0 ? 0.0 : INFINITY;
    else
      rel = std::fabs(a - b) / std::fabs(b);
    if (!(rel <= d.max_rel)) {  // NaN counts as worst
      d.max_rel = std::isnan(rel) ? INFINITY : rel;
      if (!(rel <= kRelTol) && d.first_bad == SIZE_MAX) d.first_bad = i;
    }
  }
  return d;
}

struct Case {
  std::size_t n;
  tk::DType grad;
  int mode;  // 0: no weight decay, 1: Adam with L2, 2: AdamW (decoupled)
  tk::SimdLevel level;
  int threads;
  bool with_out;
  tk::DType out;
};

std::string dtype_name(tk::DType t) { return t == tk::DType::F16 ? "f16" : t == tk::DType::BF16 ? "bf16" : "f32"; }

std::string case_name(const Case& c) {
  static const char* modes[] = {"nowd", "adam_l2", "adamw"};
  std::ostringstream os;
  os << "n" << c.n << "_g" << dtype_name(c.grad) << "_" << modes[c.mode] << "_" << tk::simd_level_name(c.level) << "_t"
     << c.threads << "_out" << (c.with_out ? dtype_name(c.out) : std::string("none"));
  return os.str();
}

void PrintTo(const Case& c, std::ostream* os) { *os << case_name(c); }

tk::AdamHyperParams hyper(int mode) {
  tk::AdamHyperParams hp;
  hp.lr = 1e-3;
  hp.beta1 = 0.9;
  hp.beta2 = 0.999;
  hp.eps = 1e-8;
  hp.weight_decay = mode == 0 ? 0.0 : 0.01;
  hp.decoupled_weight_decay = mode == 2;
  return hp;
}

std::vector<Case> all_cases() {
  std::vector<Case> cases;
  std::vector<tk::SimdLevel> levels;
  for (auto l : {tk::SimdLevel::Scalar, tk::SimdLevel::Avx2, tk::SimdLevel::Avx512})
    if (tk::simd_level_supported(l)) levels.push_back(l);
  for (std::size_t n : {std::size_t{1}, std::size_t{7}, std::size_t{1000}, std::size_t{100003}})
    for (auto g : {tk::DType::F32, tk::DType::F16, tk::DType::BF16})
      for (int mode : {0, 1, 2})
        for (auto l : levels)
          for (int threads : {1, 3}) {
            if (n > 10000 && threads == 1) continue;  // one chunk: the n = 1000 cases cover it
            // Output copy: none for fp32 grads, the gradients' type otherwise (what ZeRO-Offload
            // sends back to the GPU), and fp32 for fp16 grads in AdamW (the plain-copy path).
            bool with_out = g != tk::DType::F32;
            tk::DType out = g;
            if (g == tk::DType::F16 && mode == 2) out = tk::DType::F32;
            if (g == tk::DType::F32 && mode == 1) {
              with_out = true;
              out = tk::DType::BF16;
            }
            cases.push_back({n, g, mode, l, threads, with_out, out});
          }
  return cases;
}

class CpuAdamVsReference : public ::testing::TestWithParam<Case> {};

TEST_P(CpuAdamVsReference, ManyRandomSteps) {
  const Case c = GetParam();
  const int steps = c.n >= 100000 ? 200 : 300;
  std::mt19937 rng(static_cast<unsigned>(c.n * 131 + c.mode * 7 + static_cast<int>(c.grad)));
  State ref = make_state(c.n, rng, /*random_moments=*/c.mode == 1);
  State got = ref;
  tk::CpuAdamOptions opt;
  opt.num_threads = c.threads;
  opt.detect = false;
  opt.level = c.level;
  opt.min_elements_per_thread = 1;  // split even small arrays into chunks
  tk::CpuAdam adam(opt);
  const tk::AdamHyperParams hp = hyper(c.mode);
  const float loss_scale = c.grad == tk::DType::F16 ? 1024.0f : 1.0f;
  for (int step = 1; step <= steps; ++step) {
    fill_grads(ref, c.grad, loss_scale, rng);
    got.g16 = ref.g16;
    got.g32 = ref.g32;
    tk::adam_reference_step(hp, step, 1.0f / loss_scale, ref.tensors(c.grad, c.with_out, c.out));
    adam.step(hp, step, 1.0f / loss_scale, got.tensors(c.grad, c.with_out, c.out));
    if (step % 50 == 0 || step == steps) {  // compare along the way, not only at the end
      for (auto [name, g, r] : {std::tuple{"params", &got.p, &ref.p}, std::tuple{"exp_avg", &got.m, &ref.m},
                                std::tuple{"exp_avg_sq", &got.v, &ref.v}}) {
        const Diff d = compare(*g, *r);
        ASSERT_LE(d.max_rel, kRelTol) << name << " at step " << step << ", element " << d.first_bad << ": "
                                      << (*g)[d.first_bad] << " vs reference " << (*r)[d.first_bad];
        // The design claim of cpu_adam.h: same operations, same order, so the same bits.
        EXPECT_EQ(d.bit_mismatches, 0u) << name << " at step " << step;
      }
    }
  }
  if (c.with_out) {
    for (std::size_t i = 0; i < c.n; ++i) {
      if (c.out == tk::DType::F32) {
        ASSERT_EQ(tk::float_bits(got.out32[i]), tk::float_bits(got.p[i])) << i;
      } else {
        const std::uint16_t want = c.out == tk::DType::F16 ? tk::float_to_fp16(got.p[i]) : tk::float_to_bf16(got.p[i]);
        ASSERT_EQ(got.out16[i], want) << i;
        ASSERT_EQ(got.out16[i], ref.out16[i]) << i;
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Kernels, CpuAdamVsReference, ::testing::ValuesIn(all_cases()),
                         [](const ::testing::TestParamInfo<Case>& info) { return case_name(info.param); });

// ---------------------------------------------------------------- the reference itself

// First step from zero moments: m1 = (1-b1) g, v1 = (1-b2) g^2, so with bias correction the
// update is lr * g / (|g| + eps) (Kingma & Ba, Sec. 2: the first step has magnitude ~ lr).
TEST(AdamReference, FirstStepClosedForm) {
  const std::vector<float> grads = {1.0f, -2.0f, 1e-3f, -3e-7f, 0.0f, 5.0f};
  for (int mode : {0, 1, 2}) {
    const tk::AdamHyperParams hp = hyper(mode);
    std::vector<float> p = {0.5f, -0.25f, 1.0f, 2.0f, -1.0f, 0.0f}, m(6, 0.0f), v(6, 0.0f);
    const std::vector<float> p0 = p;
    tk::AdamTensors t;
    t.params = p.data();
    t.exp_avg = m.data();
    t.exp_avg_sq = v.data();
    t.grads = grads.data();
    t.count = p.size();
    tk::adam_reference_step(hp, 1, 1.0f, t);
    for (std::size_t i = 0; i < p.size(); ++i) {
      const double lr = 1e-3, wd = 0.01, eps = 1e-8, omb1 = 0.1, omb2 = 0.001;
      double g = grads[i], p_start = p0[i];
      if (mode == 1) g += wd * p_start;          // L2: the decay enters the gradient
      if (mode == 2) p_start *= 1.0 - lr * wd;   // AdamW: the decay applies to the weight
      // m1 / bc1 = g and sqrt(v1 / bc2) = |g|.
      const double want = p_start - lr * g / (std::fabs(g) + eps);
      EXPECT_NEAR(p[i], want, 1e-6 * std::fabs(want) + 1e-12) << "mode " << mode << " i " << i;
      EXPECT_NEAR(m[i], omb1 * g, 1e-6 * std::fabs(omb1 * g)) << i;
      EXPECT_NEAR(v[i], omb2 * g * g, 1e-6 * omb2 * g * g) << i;
    }
  }
}

// Many steps against Adam in double precision written out here from Kingma & Ba, Algorithm 1.
// Float rounding drifts a little over the steps, so the bound is 1e-5 of each quantity's scale.
TEST(AdamReference, MatchesDoublePrecisionAdam) {
  const std::size_t n = 257;
  std::mt19937 rng(7);
  std::normal_distribution<double> normal(0.0, 1.0);
  for (int mode : {0, 1, 2}) {
    const tk::AdamHyperParams hp = hyper(mode);
    std::vector<float> p(n), m(n, 0.0f), v(n, 0.0f), g(n);
    std::vector<double> pd(n), md(n, 0.0), vd(n, 0.0);
    for (std::size_t i = 0; i < n; ++i) pd[i] = p[i] = static_cast<float>(0.1 * normal(rng));
    tk::AdamTensors t;
    t.params = p.data();
    t.exp_avg = m.data();
    t.exp_avg_sq = v.data();
    t.grads = g.data();
    t.count = n;
    for (int step = 1; step <= 100; ++step) {
      for (std::size_t i = 0; i < n; ++i) g[i] = static_cast<float>(0.01 * normal(rng));
      tk::adam_reference_step(hp, step, 1.0f, t);
      const double b1 = 0.9, b2 = 0.999, lr = 1e-3, wd = 0.01, eps = 1e-8;
      for (std::size_t i = 0; i < n; ++i) {
        double gi = g[i];
        if (mode == 1) gi += wd * pd[i];
        if (mode == 2) pd[i] *= 1.0 - lr * wd;
        md[i] = b1 * md[i] + (1 - b1) * gi;
        vd[i] = b2 * vd[i] + (1 - b2) * gi * gi;
        const double mhat = md[i] / (1 - std::pow(b1, step)), vhat = vd[i] / (1 - std::pow(b2, step));
        pd[i] -= lr * mhat / (std::sqrt(vhat) + eps);
      }
    }
    for (std::size_t i = 0; i < n; ++i) {
      EXPECT_NEAR(p[i], pd[i], 1e-5 * std::max(std::fabs(pd[i]), 1e-3)) << "mode " << mode << " i " << i;
      EXPECT_NEAR(m[i], md[i], 1e-5 * 1e-2) << i;  // |m| ~ gradient scale 1e-2
      EXPECT_NEAR(v[i], vd[i], 1e-5 * std::fabs(vd[i])) << i;
    }
  }
}

// The comparison used above does catch a kernel that computes something else.
TEST(CpuAdam, ComparisonDetectsDifferentHyperParameters) {
  std::mt19937 rng(3);
  State ref = make_state(1000, rng, false);
  State got = ref;
  tk::CpuAdam adam;
  tk::AdamHyperParams hp = hyper(0), wrong = hp;
  wrong.beta1 = 0.9001;
  for (int step = 1; step <= 5; ++step) {
    fill_grads(ref, tk::DType::F32, 1.0f, rng);
    got.g32 = ref.g32;
    tk::adam_reference_step(hp, step, 1.0f, ref.tensors(tk::DType::F32, false, tk::DType::F16));
    adam.step(wrong, step, 1.0f, got.tensors(tk::DType::F32, false, tk::DType::F16));
  }
  EXPECT_GT(compare(got.m, ref.m).max_rel, kRelTol);
}

TEST(CpuAdam, ThreadCountsGiveIdenticalBits) {
  std::mt19937 rng(11);
  State base = make_state(50001, rng, true);
  fill_grads(base, tk::DType::BF16, 1.0f, rng);
  std::vector<State> results;
  for (int threads : {1, 2, 3, 8}) {
    State s = base;
    tk::CpuAdamOptions opt;
    opt.num_threads = threads;
    opt.min_elements_per_thread = 1;
    tk::CpuAdam adam(opt);
    EXPECT_EQ(adam.num_threads(), threads);
    for (int step = 1; step <= 3; ++step) adam.step(hyper(2), step, 1.0f, s.tensors(tk::DType::BF16, true, tk::DType::BF16));
    results.push_back(std::move(s));
  }
  for (std::size_t k = 1; k < results.size(); ++k) {
    EXPECT_EQ(compare(results[k].p, results[0].p).bit_mismatches, 0u) << k;
    EXPECT_EQ(compare(results[k].v, results[0].v).bit_mismatches, 0u) << k;
    EXPECT_EQ(results[k].out16, results[0].out16) << k;
  }
}

TEST(CpuAdam, RejectsInvalidArguments) {
  tk::CpuAdam adam;
  float p = 0, m = 0, v = 0, g = 0;
  tk::AdamTensors t;
  t.params = &p;
  t.exp_avg = &m;
  t.exp_avg_sq = &v;
  t.grads = &g;
  t.count = 1;
  tk::AdamHyperParams hp;
  EXPECT_THROW(adam.step(hp, 0, 1.0f, t), std::invalid_argument);            // steps are 1-based
  EXPECT_THROW(adam.step(hp, 1, 0.0f, t), std::invalid_argument);            // no unscale by 0
  EXPECT_THROW(adam.step(hp, 1, NAN, t), std::invalid_argument);
  EXPECT_THROW(tk::adam_reference_step(hp, 0, 1.0f, t), std::invalid_argument);
  tk::AdamHyperParams bad = hp;
  bad.beta2 = 1.0f;
  EXPECT_THROW(adam.step(bad, 1, 1.0f, t), std::invalid_argument);
  bad = hp;
  bad.eps = 0.0f;
  EXPECT_THROW(adam.step(bad, 1, 1.0f, t), std::invalid_argument);
  t.grads = nullptr;
  EXPECT_THROW(adam.step(hp, 1, 1.0f, t), std::invalid_argument);
  t.count = 0;
  EXPECT_NO_THROW(adam.step(hp, 1, 1.0f, t));  // nothing to do, nothing to read
  tk::CpuAdamOptions opt;
  opt.num_threads = -1;
  EXPECT_THROW(tk::CpuAdam{opt}, std::invalid_argument);
  for (auto level : {tk::SimdLevel::Avx2, tk::SimdLevel::Avx512}) {
    if (tk::simd_level_supported(level)) continue;
    tk::CpuAdamOptions o;
    o.detect = false;
    o.level = level;
    EXPECT_THROW(tk::CpuAdam{o}, std::invalid_argument) << tk::simd_level_name(level);
  }
}

TEST(CpuAdam, DetectsBestLevel) {
  tk::CpuAdam adam;
  EXPECT_EQ(adam.simd_level(), tk::detect_simd_level());
  EXPECT_GE(adam.num_threads(), 1);
}

}  // namespace
