#include "kernels/cpu_adam.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "kernels/simd_ops.h"

namespace trainsim::kernels {
namespace {

/// Runs fn(0..n_tasks-1) on the caller plus `n_workers` persistent threads; run() returns
/// when every task is done.
class ThreadPool {
 public:
  explicit ThreadPool(int n_workers) {
    for (int w = 0; w < n_workers; ++w) threads_.emplace_back([this] { worker(); });
  }
  ~ThreadPool() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    work_cv_.notify_all();
    for (auto& th : threads_) th.join();
  }

  void run(int n_tasks, const std::function<void(int)>& fn) {
    if (threads_.empty() || n_tasks <= 1) {
      for (int k = 0; k < n_tasks; ++k) fn(k);
      return;
    }
    {
      std::lock_guard<std::mutex> lock(mu_);
      fn_ = &fn;
      n_tasks_ = n_tasks;
      next_.store(0);
      busy_workers_ = static_cast<int>(threads_.size());
      ++generation_;
    }
    work_cv_.notify_all();
    drain();
    std::unique_lock<std::mutex> lock(mu_);
    done_cv_.wait(lock, [this] { return busy_workers_ == 0; });
    fn_ = nullptr;
  }

 private:
  void drain() {
    for (int k = next_.fetch_add(1); k < n_tasks_; k = next_.fetch_add(1)) (*fn_)(k);
  }
  void worker() {
    std::uint64_t seen = 0;
    for (;;) {
      {
        std::unique_lock<std::mutex> lock(mu_);
        work_cv_.wait(lock, [&] { return stop_ || generation_ != seen; });
        if (stop_) return;
        seen = generation_;
      }
      drain();
      {
        std::lock_guard<std::mutex> lock(mu_);
        if (--busy_workers_ == 0) done_cv_.notify_one();
      }
    }
  }

  std::vector<std::thread> threads_;
  std::mutex mu_;
  std::condition_variable work_cv_, done_cv_;
  const std::function<void(int)>* fn_ = nullptr;
  int n_tasks_ = 0;
  std::atomic<int> next_{0};
  int busy_workers_ = 0;
  std::uint64_t generation_ = 0;
  bool stop_ = false;
};

/// Everything one step needs; per element the same operations as adam_reference_step.
struct StepArgs {
  AdamTensors t;
  AdamStepScalars s;
  float grad_unscale;
};

inline float load_scalar(const void* base, std::size_t i, DType dt) {
  switch (dt) {
    case DType::F16: return fp16_to_float(static_cast<const std::uint16_t*>(base)[i]);
    case DType::BF16: return bf16_to_float(static_cast<const std::uint16_t*>(base)[i]);
    case DType::F32: break;
  }
  return static_cast<const float*>(base)[i];
}
inline void store_scalar(void* base, std::size_t i, DType dt, float x) {
  switch (dt) {
    case DType::F16: static_cast<std::uint16_t*>(base)[i] = float_to_fp16(x); return;
    case DType::BF16: static_cast<std::uint16_t*>(base)[i] = float_to_bf16(x); return;
    case DType::F32: break;
  }
  static_cast<float*>(base)[i] = x;
}

void adam_scalar(const StepArgs& a, std::size_t begin, std::size_t end) {
  const AdamTensors& t = a.t;
  for (std::size_t i = begin; i < end; ++i) {
    float g = load_scalar(t.grads, i, t.grad_dtype) * a.grad_unscale;
    float p = t.params[i];
    if (a.s.l2) g = g + a.s.weight_decay * p;
    if (a.s.decoupled) p = p * a.s.decay_factor;
    const float m = a.s.beta1 * t.exp_avg[i] + a.s.one_minus_beta1 * g;
    const float v = a.s.beta2 * t.exp_avg_sq[i] + a.s.one_minus_beta2 * (g * g);
    const float denom = std::sqrt(v) / a.s.bc2_sqrt + a.s.eps;
    p = p - a.s.step_size * (m / denom);
    t.exp_avg[i] = m;
    t.exp_avg_sq[i] = v;
    t.params[i] = p;
    if (t.params_out != nullptr) store_scalar(t.params_out, i, t.params_out_dtype, p);
  }
}

#if TRAINSIM_KERNELS_X86
TRAINSIM_TARGET_AVX2 std::size_t adam_avx2(const StepArgs& a, std::size_t begin, std::size_t end) {
  const AdamTensors& t = a.t;
  const __m256 beta1 = _mm256_set1_ps(a.s.beta1), beta2 = _mm256_set1_ps(a.s.beta2);
  const __m256 omb1 = _mm256_set1_ps(a.s.one_minus_beta1), omb2 = _mm256_set1_ps(a.s.one_minus_beta2);
  const __m256 eps = _mm256_set1_ps(a.s.eps), wd = _mm256_set1_ps(a.s.weight_decay);
  const __m256 decay = _mm256_set1_ps(a.s.decay_factor), unscale = _mm256_set1_ps(a.grad_unscale);
  const __m256 bc2_sqrt = _mm256_set1_ps(a.s.bc2_sqrt), step_size = _mm256_set1_ps(a.s.step_size);
  std::size_t i = begin;
  for (; i + 8 <= end; i += 8) {
    __m256 g = _mm256_mul_ps(simd::load8(t.grads, i, t.grad_dtype), unscale);
    __m256 p = _mm256_loadu_ps(t.params + i);
    if (a.s.l2) g = _mm256_add_ps(g, _mm256_mul_ps(wd, p));
    if (a.s.decoupled) p = _mm256_mul_ps(p, decay);
    const __m256 m = _mm256_add_ps(_mm256_mul_ps(beta1, _mm256_loadu_ps(t.exp_avg + i)), _mm256_mul_ps(omb1, g));
    const __m256 v = _mm256_add_ps(_mm256_mul_ps(beta2, _mm256_loadu_ps(t.exp_avg_sq + i)),
                                   _mm256_mul_ps(omb2, _mm256_mul_ps(g, g)));
    const __m256 denom = _mm256_add_ps(_mm256_div_ps(_mm256_sqrt_ps(v), bc2_sqrt), eps);
    p = _mm256_sub_ps(p, _mm256_mul_ps(step_size, _mm256_div_ps(m, denom)));
    _mm256_storeu_ps(t.exp_avg + i, m);
    _mm256_storeu_ps(t.exp_avg_sq + i, v);
    _mm256_storeu_ps(t.params + i, p);
    if (t.params_out != nullptr) simd::store8(t.params_out, i, t.params_out_dtype, p);
  }
  return i;
}

TRAINSIM_TARGET_AVX512 std::size_t adam_avx512(const StepArgs& a, std::size_t begin, std::size_t end) {
  const AdamTensors& t = a.t;
  const __m512 beta1 = _mm512_set1_ps(a.s.beta1), beta2 = _mm512_set1_ps(a.s.beta2);
  const __m512 omb1 = _mm512_set1_ps(a.s.one_minus_beta1), omb2 = _mm512_set1_ps(a.s.one_minus_beta2);
  const __m512 eps = _mm512_set1_ps(a.s.eps), wd = _mm512_set1_ps(a.s.weight_decay);
  const __m512 decay = _mm512_set1_ps(a.s.decay_factor), unscale = _mm512_set1_ps(a.grad_unscale);
  const __m512 bc2_sqrt = _mm512_set1_ps(a.s.bc2_sqrt), step_size = _mm512_set1_ps(a.s.step_size);
  std::size_t i = begin;
  for (; i + 16 <= end; i += 16) {
    __m512 g = _mm512_mul_ps(simd::load16(t.grads, i, t.grad_dtype), unscale);
    __m512 p = _mm512_loadu_ps(t.params + i);
    if (a.s.l2) g = _mm512_add_ps(g, _mm512_mul_ps(wd, p));
    if (a.s.decoupled) p = _mm512_mul_ps(p, decay);
    const __m512 m = _mm512_add_ps(_mm512_mul_ps(beta1, _mm512_loadu_ps(t.exp_avg + i)), _mm512_mul_ps(omb1, g));
    const __m512 v = _mm512_add_ps(_mm512_mul_ps(beta2, _mm512_loadu_ps(t.exp_avg_sq + i)),
                                   _mm512_mul_ps(omb2, _mm512_mul_ps(g, g)));
    const __m512 denom = _mm512_add_ps(_mm512_div_ps(_mm512_sqrt_ps(v), bc2_sqrt), eps);
    p = _mm512_sub_ps(p, _mm512_mul_ps(step_size, _mm512_div_ps(m, denom)));
    _mm512_storeu_ps(t.exp_avg + i, m);
    _mm512_storeu_ps(t.exp_avg_sq + i, v);
    _mm512_storeu_ps(t.params + i, p);
    if (t.params_out != nullptr) simd::store16(t.params_out, i, t.params_out_dtype, p);
  }
  return i;
}
#endif

}  // namespace

struct CpuAdam::Impl {
  SimdLevel level;
  int num_threads;
  std::size_t min_elements_per_thread;
  ThreadPool pool;

  Impl(SimdLevel lvl, int n, std::size_t min_per_thread)
      : level(lvl), num_threads(n), min_elements_per_thread(min_per_thread), pool(n - 1) {}

  void run_range(const StepArgs& a, std::size_t begin, std::size_t end) const {
    std::size_t done = begin;
#if TRAINSIM_KERNELS_X86
    if (level == SimdLevel::Avx512) done = adam_avx512(a, begin, end);
    if (level == SimdLevel::Avx2) done = adam_avx2(a, begin, end);
#endif
    adam_scalar(a, done, end);
  }
};

CpuAdam::CpuAdam(const CpuAdamOptions& options) {
  if (options.num_threads < 0)
    throw std::invalid_argument("CpuAdam: num_threads = " + std::to_string(options.num_threads) +
                                " must be >= 0 (0 = hardware concurrency)");
  const SimdLevel level = options.detect ? detect_simd_level() : options.level;
  if (!simd_level_supported(level))
    throw std::invalid_argument(std::string("CpuAdam: SIMD level '") + simd_level_name(level) +
                                "' is not supported by this CPU");
  int n = options.num_threads;
  if (n == 0) n = std::max(1u, std::thread::hardware_concurrency());
  impl_ = std::make_unique<Impl>(level, n, std::max<std::size_t>(1, options.min_elements_per_thread));
}

CpuAdam::~CpuAdam() = default;

SimdLevel CpuAdam::simd_level() const { return impl_->level; }
int CpuAdam::num_threads() const { return impl_->num_threads; }

void CpuAdam::step(const AdamHyperParams& hp, std::int64_t step, float grad_unscale, const AdamTensors& t) {
  check_adam_arguments(hp, step, grad_unscale, t);
  const StepArgs a{t, adam_step_scalars(hp, step), grad_unscale};
  if (t.count == 0) return;

  // Contiguous chunks, one per thread, boundaries on 16 elements (64 B of fp32: one AVX-512
  // vector, one cache line) so no two threads write the same line.
  constexpr std::size_t kAlign = 16;
  const std::size_t max_chunks = std::max<std::size_t>(1, t.count / impl_->min_elements_per_thread);
  const std::size_t n_chunks = std::min<std::size_t>(static_cast<std::size_t>(impl_->num_threads), max_chunks);
  std::size_t chunk = (t.count + n_chunks - 1) / n_chunks;
  chunk = (chunk + kAlign - 1) / kAlign * kAlign;
  const Impl& impl = *impl_;
  impl_->pool.run(static_cast<int>(n_chunks), [&](int k) {
    const std::size_t begin = std::min(t.count, static_cast<std::size_t>(k) * chunk);
    const std::size_t end = std::min(t.count, begin + chunk);
    impl.run_range(a, begin, end);
  });
}

}  // namespace trainsim::kernels
