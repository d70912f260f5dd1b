// GPU fused Adam (kernels/fused_adam.h): achieved memory bandwidth against the device's peak
// and against a plain device-to-device copy (kernels/bandwidth_probe.h) on the same device.
//
// Bytes per element of one step (each array read once and written once, fused_adam.h):
//   p, m, v: 3 x 4 B read + 3 x 4 B written = 24 B, plus the gradient read (4 or 2 B) and the
//   low-precision params written (2 B) when asked: 28 B for fp16/bf16 grads + fp16/bf16 out,
//   28 B for fp32 grads without output.
// achieved bandwidth = bytes per element x N / seconds per step.
// Peak: 2 x memory clock x bus width / 8 from the device attributes (bandwidth_probe.h); the
// vendor figures for comparison: H100 SXM5 3.35 TB/s, H200 4.8 TB/s (NVIDIA datasheets).
//
// Skips (prints why, exits 0) when no CUDA device is present.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "kernels/bandwidth_probe.h"
#include "kernels/fused_adam.h"
#include "kernels/half.h"

namespace tk = trainsim::kernels;
namespace tc = trainsim::kernels::cuda;

namespace {

double g_peak_bytes_per_s = 0.0;
double g_copy_bytes_per_s = 0.0;

double catalog_peak_bytes_per_s(const std::string& name) {
  if (name.find("H200") != std::string::npos) return 4.8e12;
  if (name.find("H100") != std::string::npos) return 3.35e12;
  if (name.find("A100") != std::string::npos) return name.find("80GB") != std::string::npos ? 2.039e12 : 1.555e12;
  return 0.0;
}

// range(0): N; range(1): gradient type (0 f32 without output, 1 fp16 + fp16 out, 2 bf16 + bf16 out)
void BM_FusedAdam(benchmark::State& state) {
  const auto n = static_cast<std::size_t>(state.range(0));
  const int kind = static_cast<int>(state.range(1));
  const tk::DType grad = kind == 1 ? tk::DType::F16 : kind == 2 ? tk::DType::BF16 : tk::DType::F32;
  const bool with_out = kind != 0;
  tc::DeviceBuffer p(n * 4), m(n * 4), v(n * 4), g(n * tk::dtype_size_bytes(grad)), out(n * 2);
  {  // initial state: params ~ 0.05, zero moments, small gradients (values do not change the timing much)
    std::vector<float> host(n, 0.05f);
    p.upload(host.data(), n * 4);
    std::fill(host.begin(), host.end(), 0.0f);
    m.upload(host.data(), n * 4);
    v.upload(host.data(), n * 4);
    if (grad == tk::DType::F32) {
      std::fill(host.begin(), host.end(), 1e-3f);
      g.upload(host.data(), n * 4);
    } else {
      const std::uint16_t bits = grad == tk::DType::F16 ? tk::float_to_fp16(1e-3f) : tk::float_to_bf16(1e-3f);
      std::vector<std::uint16_t> h(n, bits);
      g.upload(h.data(), n * 2);
    }
  }
  tk::AdamTensors t;
  t.params = static_cast<float*>(p.data());
  t.exp_avg = static_cast<float*>(m.data());
  t.exp_avg_sq = static_cast<float*>(v.data());
  t.grads = g.data();
  t.grad_dtype = grad;
  t.params_out = with_out ? out.data() : nullptr;
  t.params_out_dtype = grad == tk::DType::BF16 ? tk::DType::BF16 : tk::DType::F16;
  t.count = n;
  const tk::AdamHyperParams hp;
  std::int64_t step = 1;
  tc::fused_adam_step(hp, step++, 1.0f, t);  // warm-up
  tc::synchronize();
  for (auto _ : state) {
    const auto start = std::chrono::steady_clock::now();
    tc::fused_adam_step(hp, step++, 1.0f, t);
    tc::synchronize();
    state.SetIterationTime(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  }
  const double bytes_per_elem = 24.0 + static_cast<double>(tk::dtype_size_bytes(grad)) + (with_out ? 2.0 : 0.0);
  state.SetItemsProcessed(static_cast<std::int64_t>(state.iterations() * n));
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations() * n * bytes_per_elem));
  // Rates over the measured time: (bytes per step / reference bandwidth) x steps / seconds.
  state.counters["frac_of_peak"] = benchmark::Counter(bytes_per_elem * static_cast<double>(n) / g_peak_bytes_per_s,
                                                      benchmark::Counter::kIsIterationInvariantRate);
  state.counters["frac_of_copy"] = benchmark::Counter(bytes_per_elem * static_cast<double>(n) / g_copy_bytes_per_s,
                                                      benchmark::Counter::kIsIterationInvariantRate);
  state.SetLabel(kind == 0 ? "grad f32, no out" : kind == 1 ? "grad f16, out f16" : "grad bf16, out bf16");
}

}  // namespace

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  std::string why;
  if (tc::device_count(&why) == 0) {
    std::printf("bench_fused_adam_cuda: skipped, no CUDA device (%s)\n", why.c_str());
    return 0;
  }
  tc::set_device(0);
  const std::string name = tc::device_name(0);
  g_peak_bytes_per_s = tc::device_peak_bandwidth_bytes_per_s(0);
  const tc::CopyBandwidth copy = tc::measure_copy_bandwidth(std::size_t{1} << 30, 20);
  g_copy_bytes_per_s = copy.bytes_per_s;
  std::printf("device %s: peak DRAM bandwidth %.0f GB/s (attributes), catalog %.0f GB/s; "
              "D2D copy kernel %.0f GB/s (%.1f%% of peak, %llu wrong words)\n",
              name.c_str(), g_peak_bytes_per_s / 1e9, catalog_peak_bytes_per_s(name) / 1e9, copy.bytes_per_s / 1e9,
              100.0 * copy.bytes_per_s / g_peak_bytes_per_s, static_cast<unsigned long long>(copy.wrong_elements));
  for (long n : {1L << 20, 16L << 20, 64L << 20, 256L << 20})
    for (int kind : {0, 1, 2})
      benchmark::RegisterBenchmark("BM_FusedAdam", BM_FusedAdam)
          ->Args({n, kind})
          ->UseManualTime()
          ->Unit(benchmark::kMicrosecond);
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
