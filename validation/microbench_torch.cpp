// The LibTorch microbenchmarks of `trainsim calibrate` (microbench.h).
#include <algorithm>
#include <chrono>
#include <cmath>
#include <ctime>
#include <fstream>
#include <functional>
#include <iostream>
#include <sstream>
#include <thread>
#include <vector>

#include <torch/torch.h>
#include <torch/version.h>

#include <nlohmann/json.hpp>

#include "kernels/cpu_adam.h"
#include "models/errors.h"
#include "models/perf/flops.h"
#include "validation/gpu_info.h"
#include "validation/microbench.h"

namespace trainsim::validation {

namespace {

using json = nlohmann::json;
using Clock = std::chrono::steady_clock;

struct Timer {
  bool cuda = false;
  double budget_s = 0.05;
  int min_reps = 3;
  bool median = false;  ///< MicrobenchOptions::median_of_repetitions
  void sync() const {
    if (cuda) torch::cuda::synchronize();
  }
  /// Fastest (or, with `median`, the median) of the repetitions of f after one warm-up call,
  /// in seconds.
  double time(const std::function<void()>& f) const {
    f();
    sync();
    std::vector<double> reps;
    double used = 0;
    for (int rep = 0; rep < min_reps || used < budget_s; ++rep) {
      const auto t0 = Clock::now();
      f();
      sync();
      const double dt = std::chrono::duration<double>(Clock::now() - t0).count();
      reps.push_back(dt);
      used += dt;
      if (rep > 1000) break;
    }
    if (!median) return *std::min_element(reps.begin(), reps.end());
    std::nth_element(reps.begin(), reps.begin() + reps.size() / 2, reps.end());
    return reps[reps.size() / 2];
  }
};

std::string cpu_model_name() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line))
    if (line.rfind("model name", 0) == 0) {
      auto colon = line.find(':');
      if (colon != std::string::npos) {
        std::string s = line.substr(colon + 1);
        s.erase(0, s.find_first_not_of(' '));
        return s;
      }
    }
  return "unknown CPU";
}

double host_memory_bytes() {
  std::ifstream in("/proc/meminfo");
  std::string key;
  double kib = 0;
  std::string unit;
  while (in >> key >> kib >> unit)
    if (key == "MemTotal:") return kib * 1024.0;
  return 0;
}

std::string today_utc() {
  const std::time_t t = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char b[16];
  std::strftime(b, sizeof b, "%Y-%m-%d", &tm);
  return b;
}

/// Least squares of y = a + c x in relative error (weights 1/y^2), so that the small operators,
/// whose time is mostly the fixed cost a, weigh as much as the large ones; false when degenerate.
bool fit_line_relative(const std::vector<std::pair<double, double>>& xy, double* a, double* c) {
  double sw = 0, sx = 0, sy = 0, sxx = 0, sxy = 0;
  for (auto [x, y] : xy) {
    if (!(y > 0)) continue;
    const double w = 1.0 / (y * y);
    sw += w, sx += w * x, sy += w * y, sxx += w * x * x, sxy += w * x * y;
  }
  const double det = sw * sxx - sx * sx;
  if (xy.size() < 3 || !(det > 0)) return false;
  *c = (sw * sxy - sx * sy) / det;
  *a = (sy - *c * sx) / sw;
  return true;
}

}  // namespace

CalibrationProfile run_microbenchmarks(const MicrobenchOptions& o) {
  torch::NoGradGuard no_grad;
  const bool cuda = o.device == "cuda" || o.device.rfind("cuda:", 0) == 0;
  if (!cuda && o.device != "cpu")
    throw InputError("calibrate: --device " + o.device + ": expected cpu or cuda");
  if (cuda && !torch::cuda::is_available())
    throw InputError("calibrate: --device cuda: LibTorch " + std::string(TORCH_VERSION) +
                     " has no CUDA or no GPU is visible");
  torch::Dtype dtype;
  const std::string dtype_name = !o.dtype.empty() ? o.dtype : cuda ? "bf16" : "fp32";
  if (dtype_name == "fp32")
    dtype = torch::kFloat32;
  else if (dtype_name == "bf16")
    dtype = torch::kBFloat16;
  else if (dtype_name == "fp16")
    dtype = torch::kHalf;
  else
    throw InputError("calibrate: dtype " + o.dtype + ": expected fp32, bf16 or fp16");
  if (o.threads > 0) at::set_num_threads(o.threads);
  const int threads = at::get_num_threads();
  const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  const torch::Device dev = cuda ? torch::Device(torch::kCUDA) : torch::Device(torch::kCPU);
  const auto opts = torch::TensorOptions().dtype(dtype).device(dev);
  const double e = dtype_name == "fp32" ? 4 : 2;
  Timer timer;
  timer.cuda = cuda;
  timer.budget_s = o.quick ? 0.05 : 0.2;
  timer.min_reps = 3;
  timer.median = o.median_of_repetitions;
  auto say = [&](const std::string& s) {
    if (o.progress) std::cerr << "trainsim calibrate: " << s << "\n";
  };
  json meas;
  if (timer.median) meas["statistic"] = "median of each timing's repetitions (calibrate --nprocs)";
  CalibrationProfile p;

  // ---------------------------------------------------------------- GEMM
  say("GEMM shapes of transformer layers");
  struct Point {
    double m, n, k, batch, rate;
    std::string op, role;
  };
  std::vector<Point> points;
  // A GPU's grid is the transformer shapes it trains (hidden and tokens to 8192, a GEMM of up to
  // 2 TFLOP): at a CPU's sizes (to 1024) an H100's GEMMs are launch-bound and say nothing of
  // its main loop.
  using Sizes = std::vector<std::int64_t>;
  const Sizes hidden = o.quick ? Sizes{128, 256}
                       : cuda  ? Sizes{1024, 2048, 4096, 8192}
                               : Sizes{128, 256, 512, 1024};
  const Sizes tokens = o.quick ? Sizes{128, 256}
                       : cuda  ? Sizes{1024, 4096, 8192}
                               : Sizes{128, 256, 512, 1024};
  const double flop_cap = o.quick ? 3e8 : cuda ? 2e12 : 4e9;
  auto add = [&](double m, double n, double k, double batch, const std::string& op, double t) {
    const std::string role = op.rfind("addmm", 0) == 0 ? "fwd"
                             : op == "mm(dY, W)"        ? "dgrad"
                             : op == "mm(dY^T, X)"      ? "wgrad"
                                                        : "bmm";
    points.push_back({m, n, k, batch, 2 * m * n * k * batch / t, op, role});
  };
  for (std::int64_t h : hidden)
    for (std::int64_t T : tokens) {
      // Linear layers of one transformer layer (in -> out): QKV h -> 3h, projection h -> h,
      // fc1 h -> 4h, fc2 4h -> h (Megatron ParallelTransformerLayer, tp = 1).
      const std::int64_t shapes[4][2] = {{h, 3 * h}, {h, h}, {h, 4 * h}, {4 * h, h}};
      for (const auto& io : shapes) {
        const std::int64_t in = io[0], out = io[1];
        if (2.0 * T * in * out > flop_cap) continue;
        const torch::Tensor x = torch::randn({T, in}, opts), w = torch::randn({out, in}, opts);
        const torch::Tensor bias = torch::randn({out}, opts), dy = torch::randn({T, out}, opts);
        // forward: addmm(bias, X, W^T): C[T x out] = X[T x in] W^T[in x out]
        add(double(T), double(out), double(in), 1, "addmm(b, X, W^T)",
            timer.time([&] { (void)torch::addmm(bias, x, w.t()); }));
        // input gradient: dY[T x out] W[out x in]
        add(double(T), double(in), double(out), 1, "mm(dY, W)",
            timer.time([&] { (void)torch::mm(dy, w); }));
        // weight gradient: dY^T[out x T] X[T x in]
        add(double(out), double(in), double(T), 1, "mm(dY^T, X)",
            timer.time([&] { (void)torch::mm(dy.t(), x); }));
      }
    }
  // Core attention: batch = b * heads products of [s x hd] x [hd x s] and [s x s] x [s x hd].
  const Sizes seqs = o.quick ? Sizes{64, 128} : cuda ? Sizes{512, 1024, 2048, 4096}
                                                   : Sizes{64, 128, 256, 512};
  const Sizes head_dims = o.quick ? Sizes{16, 32} : cuda ? Sizes{64, 128} : Sizes{32, 64, 128};
  const std::int64_t batch = 16;
  for (std::int64_t s : seqs)
    for (std::int64_t hd : head_dims) {
      const torch::Tensor q = torch::randn({batch, s, hd}, opts), k = torch::randn({batch, hd, s}, opts);
      const torch::Tensor pr = torch::randn({batch, s, s}, opts), v = torch::randn({batch, s, hd}, opts);
      add(double(s), double(s), double(hd), double(batch), "bmm(Q, K^T)",
          timer.time([&] { (void)torch::bmm(q, k); }));
      add(double(s), double(hd), double(s), double(batch), "bmm(P, V)",
          timer.time([&] { (void)torch::bmm(pr, v); }));
    }
  double best_rate = 0;
  for (const Point& pt : points) best_rate = std::max(best_rate, pt.rate);
  // Same shape and role measured through several calls (e.g. bmm(Q, K^T) and bmm(P, V) where
  // s = hd): the table keeps the mean of their efficiencies.
  json gemm_rows = json::array();
  std::vector<CalibrationProfile::GemmPoint> measured;
  for (const Point& pt : points) {
    gemm_rows.push_back({{"op", pt.op}, {"role", pt.role}, {"m", pt.m}, {"n", pt.n}, {"k", pt.k},
                         {"batch", pt.batch}, {"flops_per_s", pt.rate}});
    measured.push_back({pt.m, pt.n, pt.k, pt.batch, pt.rate / best_rate, pt.role});
  }
  p.gemm_efficiency = mean_gemm_points(measured);
  meas["gemm"] = gemm_rows;

  // ---------------------------------------------------------------- memory-bound
  say("streaming copy and memory-bound operators");
  // The copy must miss the cache: 2^24 elements (32-64 MiB) is past a CPU's last level, an
  // H100's L2 is 50 MB, so a GPU copies 2^27 (256 MiB at 16 bits).
  const std::int64_t big = o.quick ? (1 << 22) : cuda ? (1 << 27) : (1 << 24);
  const torch::Tensor src = torch::randn({big}, opts), dst = torch::empty({big}, opts);
  const double copy_s = timer.time([&] { dst.copy_(src); });
  const double stream_bw = 2.0 * big * e / copy_s;  // read + write
  meas["stream_copy"] = {{"elements", big}, {"bytes_moved", 2.0 * big * e}, {"seconds", copy_s},
                         {"bytes_per_s", stream_bw}};
  json mem_rows = json::array();
  Sizes sizes = o.quick ? Sizes{1 << 14, 1 << 16, 1 << 18, 1 << 20}
                        : Sizes{1 << 12, 1 << 14, 1 << 16, 1 << 18, 1 << 20, 1 << 22};
  if (cuda && !o.quick) sizes.insert(sizes.end(), {1 << 24, 1 << 26});  // past the L2
  const std::int64_t row = 128;  // softmax / LayerNorm row length
  for (std::int64_t n : sizes) {
    const torch::Tensor a = torch::randn({n / row, row}, opts), b = torch::randn({n / row, row}, opts);
    const torch::Tensor lw = torch::ones({row}, opts), lb = torch::zeros({row}, opts);
    struct Op {
      const char* name;
      double bytes;  // read + written (elements x e, masks at e as the CPU dropout keeps)
      std::function<void()> f;
    };
    const double ne = double(n) * e;
    const std::vector<Op> ops = {
        {"add", 3 * ne, [&] { (void)(a + b); }},
        {"mul", 3 * ne, [&] { (void)(a * b); }},
        {"softmax", 2 * ne, [&] { (void)torch::softmax(a, -1); }},
        {"gelu_tanh", 2 * ne, [&] { (void)torch::gelu(a, "tanh"); }},
        {"layer_norm", 2 * ne, [&] { (void)torch::layer_norm(a, {row}, lw, lb, 1e-5, true); }},
        // counted as models/perf/flops.cpp counts a dropout: input, output and a 1-byte mask
        {"dropout", double(n) * (2 * e + 1), [&] { (void)torch::dropout(a, 0.1, /*train=*/true); }},
    };
    for (const Op& op : ops) {
      const double t = timer.time(op.f);
      mem_rows.push_back({{"op", op.name}, {"elements", n}, {"bytes", op.bytes}, {"seconds", t}});
    }
  }
  meas["memory_bound"] = mem_rows;
  // Cost model (CostModel::kernel_time_s): time = kernel_launch_overhead_s + bytes / rate of the
  // kernel's class. The fixed cost per operator is the intercept of the element-wise (add, mul)
  // fit in relative error; each class's rate is then the median over sizes of
  // bytes / (time - that fixed cost), so the fixed cost is not counted twice.
  std::vector<std::pair<double, double>> eltwise_xy;
  for (const json& r : mem_rows)
    if (r["op"] == "add" || r["op"] == "mul")
      eltwise_xy.push_back({r["bytes"].get<double>(), r["seconds"].get<double>()});
  double overhead = 0, slope = 0;
  const bool line = fit_line_relative(eltwise_xy, &overhead, &slope) && slope > 0;
  overhead = std::max(0.0, overhead);
  const double eltwise_bw = line ? 1.0 / slope : stream_bw;
  const std::pair<const char*, std::vector<const char*>> classes[] = {
      {"elementwise", {"add", "mul"}}, {"layernorm", {"layer_norm"}}, {"softmax", {"softmax"}},
      {"gelu", {"gelu_tanh"}}, {"dropout", {"dropout"}}};
  for (const auto& [cls, names] : classes) {
    std::vector<double> rates;
    for (const json& r : mem_rows)
      for (const char* nm : names)
        if (r["op"] == nm) {
          const double t = r["seconds"].get<double>();
          rates.push_back(r["bytes"].get<double>() / std::max(t - overhead, 0.05 * t));
        }
    std::sort(rates.begin(), rates.end());
    if (!rates.empty()) p.memory_bound_bytes_per_s[cls] = rates[rates.size() / 2];
  }
  meas["memory_bound_fit"] = {{"overhead_s", overhead}, {"bytes_per_s", eltwise_bw},
                              {"method", "element-wise ops (add, mul): least squares in relative error of duration = overhead + bytes / bandwidth (overhead clamped at 0)"}};

  // ---------------------------------------------------------------- copies
  say("host <-> device copies");
  json copy_rows = json::array();
  const auto host_opts = torch::TensorOptions().dtype(torch::kUInt8).pinned_memory(cuda);
  const std::vector<std::int64_t> msgs =
      o.quick ? std::vector<std::int64_t>{1 << 16, 1 << 20, 1 << 24}
              : std::vector<std::int64_t>{1 << 12, 1 << 16, 1 << 20, 1 << 24, 1 << 26};
  double copy_bw_large = 0;
  for (std::int64_t bytes : msgs) {
    const torch::Tensor h1 = torch::ones({bytes}, host_opts), h2 = torch::ones({bytes}, host_opts);
    const torch::Tensor d1 = torch::ones({bytes}, opts.dtype(torch::kUInt8));
    const torch::Tensor d2 = torch::ones({bytes}, opts.dtype(torch::kUInt8));
    const double h2d = timer.time([&] { d1.copy_(h1, true); });
    const double d2h = timer.time([&] { h2.copy_(d2, true); });
    double both = 0;
    if (cuda) {
      both = timer.time([&] {  // one direction on a second thread (its own stream in LibTorch)
        std::thread t([&] { h2.copy_(d2, true); });
        d1.copy_(h1, true);
        t.join();
      });
    } else {
      both = timer.time([&] {
        std::thread t([&] { h2.copy_(d2); });
        d1.copy_(h1);
        t.join();
      });
    }
    copy_rows.push_back({{"bytes", bytes},
                         {"h2d_bytes_per_s", bytes / h2d},
                         {"d2h_bytes_per_s", bytes / d2h},
                         {"both_bytes_per_s_per_direction", bytes / both}});
    copy_bw_large = std::min(bytes / h2d, bytes / d2h);
  }
  meas["copies"] = copy_rows;

  // ---------------------------------------------------------------- CPU Adam vs threads
  say("CPU Adam against thread count");
  const std::size_t adam_n = o.quick ? (1u << 20) : (1u << 24);
  std::vector<float> prm(adam_n, 0.1f), m(adam_n, 0.f), v(adam_n, 0.f), g(adam_n, 0.01f), out(adam_n);
  kernels::AdamTensors at;
  at.params = prm.data(), at.exp_avg = m.data(), at.exp_avg_sq = v.data(), at.grads = g.data();
  at.grad_dtype = kernels::DType::F32;
  at.params_out = out.data(), at.params_out_dtype = kernels::DType::F32;
  at.count = adam_n;
  json adam_rows = json::array();
  double adam_1 = 0, adam_all = 0;
  for (int t = 1; t <= cores; ++t) {
    kernels::CpuAdamOptions ao;
    ao.num_threads = t;
    kernels::CpuAdam adam(ao);
    kernels::AdamHyperParams hp;
    std::int64_t step = 1;
    const double s = timer.time([&] { adam.step(hp, step++, 1.0f, at); });
    const double rate = double(adam_n) / s;
    adam_rows.push_back({{"threads", t}, {"params_per_s", rate}});
    if (t == 1) adam_1 = rate;
    adam_all = rate;
  }
  meas["cpu_adam"] = adam_rows;
  meas["nccl"] = "not measured: needs more than one GPU and a CUDA/NCCL build of LibTorch";

  // ---------------------------------------------------------------- the profile
  const GpuInfo gpu = cuda ? gpu_info(0) : GpuInfo{};
  const std::string dev_name =
      cuda ? cuda_profile_device(gpu, TORCH_VERSION, dtype_name)
           : "cpu: " + cpu_model_name() + " (" + std::to_string(cores) + " cores, LibTorch " +
                 TORCH_VERSION + " " + dtype_name + ", " + std::to_string(threads) + " threads)";
  p.version = 1;
  p.device = dev_name;
  p.source = std::string("measured: trainsim calibrate") + (o.quick ? " --quick" : "");
  p.date = today_utc();
  p.notes = std::string("Microbenchmarks of validation/microbench_torch.cpp; every timing is the ") +
            (o.median_of_repetitions ? "median" : "fastest") +
            " of its repetitions. Raw results under 'measurements'.";
  p.precision = dtype_name;
  p.local_device.peak_flops = best_rate;
  p.local_device.memory_bw_bytes_per_s = stream_bw;
  // A GPU's capacity from the CUDA runtime (0 where this build cannot tell: the profile then
  // cannot stand for the `local` system, whose memory model needs it).
  p.local_device.memory_bytes = cuda ? double(gpu.memory_bytes) : host_memory_bytes();
  p.local_device.copy_bw_bytes_per_s = copy_bw_large;
  p.local_device.cores = cores;
  p.local_device.threads = threads;
  auto set = [&](const char* name, double CalibrationProfile::*f, double v, const std::string& src) {
    p.*f = v;
    p.sources[name] = src;
  };
  set("gemm_max_efficiency", &CalibrationProfile::gemm_max_efficiency, 1.0,
      "1 by definition: local_device.peak_flops is the best measured GEMM rate; the "
      "gemm_efficiency table holds each shape's fraction of it");
  set("gemm_tile_m", &CalibrationProfile::gemm_tile_m, 1, "no tile quantization modelled: the measured table carries the shape dependence");
  set("gemm_tile_n", &CalibrationProfile::gemm_tile_n, 1, "same as gemm_tile_m");
  set("sm_count", &CalibrationProfile::sm_count, cores, "cores of this machine (not used while the GEMM table is present)");
  set("hbm_efficiency", &CalibrationProfile::hbm_efficiency, std::min(1.0, eltwise_bw / stream_bw),
      "memory-bound operators' fitted bandwidth / streaming copy bandwidth (measurements.memory_bound_fit)");
  set("kernel_launch_overhead_s", &CalibrationProfile::kernel_launch_overhead_s, overhead,
      "intercept of the element-wise fit (measurements.memory_bound_fit): fixed cost per operator (dispatch, threading)");
  set("nvlink_efficiency", &CalibrationProfile::nvlink_efficiency, 1.0,
      "local device: single-process collectives are device-local copies at copy_bw_bytes_per_s");
  set("network_efficiency", &CalibrationProfile::network_efficiency, 1.0, "local device: no network");
  set("pcie_efficiency", &CalibrationProfile::pcie_efficiency, 1.0,
      "local_device.copy_bw_bytes_per_s is itself the measured copy rate (measurements.copies)");
  set("nccl_launch_latency_s", &CalibrationProfile::nccl_launch_latency_s, 0, "no NCCL on the local device (not measured)");
  set("nccl_step_latency_intra_node_s", &CalibrationProfile::nccl_step_latency_intra_node_s, 0, "no NCCL on the local device");
  set("nccl_step_latency_inter_node_s", &CalibrationProfile::nccl_step_latency_inter_node_s, 0, "no NCCL on the local device");
  // CPU Adam's own byte rate can exceed the streaming copy's (its working set partly fits in
  // cache): the host bandwidth is then the larger one, so that efficiency stays <= 1 and
  // cpu_adam_time_s reproduces the measured Adam rate.
  const double adam_bytes_per_s = adam_all * optimizer_cpu_bytes_per_param();
  const double host_bw = std::max(stream_bw, adam_bytes_per_s);
  set("host_memory_bw_bytes_per_s", &CalibrationProfile::host_memory_bw_bytes_per_s, host_bw,
      "max(streaming copy (measurements.stream_copy), CPU Adam bytes/s with all threads)");
  set("host_memory_efficiency", &CalibrationProfile::host_memory_efficiency,
      adam_bytes_per_s / host_bw,
      "CPU Adam with all threads: params/s x 30 B/param (models/perf/flops.cpp) / host_memory_bw");
  set("cpu_flops_per_core_per_s", &CalibrationProfile::cpu_flops_per_core_per_s, adam_1 * adam_flops_per_param(),
      "CPU Adam on 1 thread: params/s x 15 FLOP/param (models/perf/flops.cpp)");
  set("framework_overhead_bytes", &CalibrationProfile::framework_overhead_bytes, 0,
      cuda ? "not measured on CUDA by this build" :
      "0: on the CPU the replay's memory figure counts live tensors only (hw_backend counting "
      "allocator); no framework bytes are in it");
  set("nccl_buffer_bytes_per_communicator", &CalibrationProfile::nccl_buffer_bytes_per_communicator, 0, "no NCCL on the local device");
  p.measurements_json = meas.dump();
  return p;
}

}  // namespace trainsim::validation
