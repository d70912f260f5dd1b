// CPU Adam (kernels/cpu_adam.h, the CPU-Adam of ZeRO-Offload) against LibTorch's own
// torch::optim::Adam on the CPU, same parameter count, same thread count, in one run.
// ZeRO-Offload (Ren et al., USENIX ATC 2021, Sec. 5.1 / Fig. 10) reports its CPU-Adam
// 5.1x - 6.4x faster than PyTorch's CPU Adam; this benchmark measures our ratio.
//
// Benchmarks, per parameter count N (1 Mi and 10 Mi; 100 Mi with TRAINSIM_BENCH_LARGE=1) and
// thread count T (1 and all hardware threads):
//   TorchAdam/N/T            torch::optim::Adam::step() over one fp32 tensor of N elements
//   CpuAdamF32/N/T           CpuAdam, fp32 gradients, no low-precision output (same work as torch)
//   CpuAdamF16/N/T           CpuAdam, fp16 gradients in, fp16 params out (the ZeRO-Offload case)
// Each reports items/s (parameters updated per second) and bytes/s; the CpuAdam ones add a
// counter speedup_vs_torch (torch's time / ours, same N and T, measured earlier in this run),
// and a summary table is printed at the end.
#include <benchmark/benchmark.h>
#include <torch/torch.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <random>
#include <string>
#include <thread>
#include <tuple>
#include <utility>
#include <vector>

#include "kernels/cpu_adam.h"
#include "kernels/half.h"

namespace tk = trainsim::kernels;

namespace {

// Seconds per step of torch::optim::Adam, by (N, T), filled by BM_TorchAdam.
std::map<std::pair<long, int>, double>& torch_seconds() {
  static std::map<std::pair<long, int>, double> m;
  return m;
}
// (name, N, T) -> seconds per step of our kernels, for the summary.
std::map<std::tuple<std::string, long, int>, double>& ours_seconds() {
  static std::map<std::tuple<std::string, long, int>, double> m;
  return m;
}

std::vector<float> random_floats(std::size_t n, float scale, unsigned seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, scale);
  std::vector<float> v(n);
  for (float& x : v) x = normal(rng);
  return v;
}

// The same hyper-parameters for both sides: torch::optim::AdamOptions defaults
// (lr 1e-3, betas 0.9/0.999, eps 1e-8, weight_decay 0).
tk::AdamHyperParams hyper() { return tk::AdamHyperParams{}; }

void BM_TorchAdam(benchmark::State& state) {
  const long n = state.range(0);
  const int threads = static_cast<int>(state.range(1));
  torch::set_num_threads(threads);
  const std::vector<float> p0 = random_floats(n, 0.05f, 1), g0 = random_floats(n, 1e-3f, 2);
  torch::Tensor param = torch::from_blob(const_cast<float*>(p0.data()), {n}, torch::kFloat32).clone().requires_grad_(true);
  param.mutable_grad() = torch::from_blob(const_cast<float*>(g0.data()), {n}, torch::kFloat32).clone();
  torch::optim::Adam opt({param}, torch::optim::AdamOptions(1e-3));
  opt.step();  // first step allocates exp_avg / exp_avg_sq: not timed
  for (auto _ : state) {
    opt.step();
    benchmark::ClobberMemory();
  }
  state.SetItemsProcessed(state.iterations() * n);
  state.SetBytesProcessed(state.iterations() * n * 28);  // 4 arrays read, 3 written, fp32 (lower bound: torch makes extra passes)
  state.counters["threads"] = threads;
}

template <tk::DType kGrad>
void BM_CpuAdam(benchmark::State& state) {
  const long n = state.range(0);
  const int threads = static_cast<int>(state.range(1));
  std::vector<float> p = random_floats(n, 0.05f, 1), m(n, 0.0f), v(n, 0.0f);
  const std::vector<float> g32 = random_floats(n, 1e-3f, 2);
  std::vector<std::uint16_t> g16(n), out16(n);
  tk::convert_float_to_fp16(g32.data(), g16.data(), n, tk::detect_simd_level());
  tk::CpuAdamOptions opt;
  opt.num_threads = threads;
  tk::CpuAdam adam(opt);
  tk::AdamTensors t;
  t.params = p.data();
  t.exp_avg = m.data();
  t.exp_avg_sq = v.data();
  t.grad_dtype = kGrad;
  t.grads = kGrad == tk::DType::F32 ? static_cast<const void*>(g32.data()) : g16.data();
  if (kGrad == tk::DType::F16) {
    t.params_out = out16.data();
    t.params_out_dtype = tk::DType::F16;
  }
  t.count = static_cast<std::size_t>(n);
  std::int64_t step = 1;
  adam.step(hyper(), step++, 1.0f, t);  // same warm-up as torch
  for (auto _ : state) {
    adam.step(hyper(), step++, 1.0f, t);
    benchmark::ClobberMemory();
  }
  // Bytes per element: p, m, v read and written (24) + gradient read + optional output written.
  const long bytes_per_elem = 24 + (kGrad == tk::DType::F32 ? 4 : 2 + 2);
  state.SetItemsProcessed(state.iterations() * n);
  state.SetBytesProcessed(state.iterations() * n * bytes_per_elem);
  state.counters["threads"] = threads;
  state.SetLabel(std::string("simd=") + tk::simd_level_name(adam.simd_level()));
}

// Captures every run's time per iteration to report the ratio at the end, and fills the
// speedup_vs_torch counter of CpuAdam runs from the TorchAdam run with the same N and T.
class RatioReporter : public benchmark::ConsoleReporter {
 public:
  void ReportRuns(const std::vector<Run>& runs) override {
    std::vector<Run> copy = runs;
    for (Run& r : copy) {
      if (r.run_type != Run::RT_Iteration || r.iterations == 0) continue;
      const double s = r.real_accumulated_time / static_cast<double>(r.iterations);
      const std::string name = r.run_name.function_name;
      const auto args = parse_args(r.run_name.args);
      if (name == "BM_TorchAdam") {
        torch_seconds()[args] = s;
      } else {
        ours_seconds()[{name, args.first, args.second}] = s;
        auto it = torch_seconds().find(args);
        if (it != torch_seconds().end()) r.counters["speedup_vs_torch"] = it->second / s;
      }
    }
    benchmark::ConsoleReporter::ReportRuns(copy);
  }

 private:
  static std::pair<long, int> parse_args(const std::string& args) {  // "N/T"
    const auto slash = args.find('/');
    return {std::stol(args.substr(0, slash)), std::stoi(args.substr(slash + 1))};
  }
};

// One step of both on the same data: how close our results are to torch's (different float
// operation order, so not bit-identical; expected within a few float ulps).
void print_agreement_with_torch() {
  const long n = 100003;
  const std::vector<float> p0 = random_floats(n, 0.05f, 3);
  torch::Tensor param = torch::from_blob(const_cast<float*>(p0.data()), {n}, torch::kFloat32).clone().requires_grad_(true);
  torch::optim::Adam opt({param}, torch::optim::AdamOptions(1e-3));
  std::vector<float> p = p0, m(n, 0.0f), v(n, 0.0f);
  tk::CpuAdam adam;
  tk::AdamTensors t;
  t.params = p.data();
  t.exp_avg = m.data();
  t.exp_avg_sq = v.data();
  t.count = n;
  const int steps = 20;
  for (int s = 1; s <= steps; ++s) {
    const std::vector<float> g = random_floats(n, 1e-3f, 100 + s);
    param.mutable_grad() = torch::from_blob(const_cast<float*>(g.data()), {n}, torch::kFloat32).clone();
    opt.step();
    t.grads = g.data();
    adam.step(hyper(), s, 1.0f, t);
  }
  // torch keeps its moments in opt.state(), keyed by the parameter's TensorImpl address.
  auto& st = static_cast<torch::optim::AdamParamState&>(
      *opt.state().at(c10::guts::to_string(param.unsafeGetTensorImpl())));
  auto report = [n](const char* what, const torch::Tensor& ref, const std::vector<float>& ours) {
    const torch::Tensor r = ref.detach().contiguous();
    const float* rp = r.data_ptr<float>();
    double max_diff = 0.0, max_ref = 0.0, max_rel = 0.0;
    for (long i = 0; i < n; ++i) {
      const double d = std::fabs(double{rp[i]} - ours[i]);
      max_diff = std::max(max_diff, d);
      max_ref = std::max(max_ref, std::fabs(double{rp[i]}));
      if (rp[i] != 0.0f) max_rel = std::max(max_rel, d / std::fabs(double{rp[i]}));
    }
    std::printf("  %-10s max |diff| = %.3g, max |diff| / max |torch| = %.3g, max relative diff = %.3g\n", what,
                max_diff, max_ref > 0 ? max_diff / max_ref : 0.0, max_rel);
  };
  std::printf("agreement with torch::optim::Adam after %d steps on %ld params (different float operation\n"
              "order, so not bit-identical):\n", steps, n);
  report("params", param, p);
  report("exp_avg", st.exp_avg(), m);
  report("exp_avg_sq", st.exp_avg_sq(), v);
}

}  // namespace

int main(int argc, char** argv) {
  const int hw = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  std::vector<long> sizes = {1L << 20, 10L << 20};
  const char* large = std::getenv("TRAINSIM_BENCH_LARGE");
  if (large != nullptr && std::string(large) == "1") sizes.push_back(100L << 20);
  std::vector<int> thread_counts = {1};
  if (hw > 1) thread_counts.push_back(hw);
  for (long n : sizes)
    for (int t : thread_counts) {
      // Torch first, so the ratio counter of the CpuAdam runs can be filled in.
      benchmark::RegisterBenchmark("BM_TorchAdam", BM_TorchAdam)->Args({n, t})->Unit(benchmark::kMillisecond)->UseRealTime();
      benchmark::RegisterBenchmark("BM_CpuAdamF32", BM_CpuAdam<tk::DType::F32>)->Args({n, t})->Unit(benchmark::kMillisecond)->UseRealTime();
      benchmark::RegisterBenchmark("BM_CpuAdamF16", BM_CpuAdam<tk::DType::F16>)->Args({n, t})->Unit(benchmark::kMillisecond)->UseRealTime();
    }
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  std::printf("CPU Adam vs torch::optim::Adam (LibTorch %s), SIMD level %s, %d hardware threads\n",
              TORCH_VERSION, tk::simd_level_name(tk::detect_simd_level()), hw);
  print_agreement_with_torch();
  RatioReporter reporter;
  benchmark::RunSpecifiedBenchmarks(&reporter);
  benchmark::Shutdown();

  std::printf("\nspeedup over torch::optim::Adam (same run, torch time / ours):\n");
  std::printf("%12s %8s %14s %14s %14s %10s %10s\n", "params", "threads", "torch ms", "ours f32 ms", "ours f16 ms",
              "ratio f32", "ratio f16");
  for (const auto& [key, torch_s] : torch_seconds()) {
    const auto f32 = ours_seconds().find({"BM_CpuAdamF32", key.first, key.second});
    const auto f16 = ours_seconds().find({"BM_CpuAdamF16", key.first, key.second});
    const double a = f32 == ours_seconds().end() ? 0.0 : f32->second;
    const double b = f16 == ours_seconds().end() ? 0.0 : f16->second;
    std::printf("%12ld %8d %14.3f %14.3f %14.3f %10.2f %10.2f\n", key.first, key.second, torch_s * 1e3, a * 1e3,
                b * 1e3, a > 0 ? torch_s / a : 0.0, b > 0 ? torch_s / b : 0.0);
  }
  return 0;
}
