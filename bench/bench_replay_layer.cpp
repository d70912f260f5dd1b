// One GPT transformer layer, forward + backward, as the replay executor runs it
// (hw_backend/transformer_layer.h: two blocks, each its own autograd graph, backward block by
// block) against the same layer written as plain LibTorch eager code (torch::nn modules, one
// autograd graph), on the same shapes: the tiny scenario's (b 2, s 128, h 256, 8 heads,
// ffn 1024) and a GPT-2 medium-like layer (b 1, s 512, h 1024, 16 heads, ffn 4096).
// CPU always; CUDA (fp16) when this LibTorch has CUDA and a GPU is visible. Also a whole
// replayed iteration of a scaled-down tiny scenario on the CPU.
#include <benchmark/benchmark.h>

#include <cmath>
#include <string>

#include "hw_backend/replay.h"
#include "hw_backend/transformer_layer.h"
#include "models/builder/graph_builder.h"
#include "models/hardware/hardware.h"

using namespace trainsim;

namespace {

hw::LayerDims dims(int which) {
  hw::LayerDims d;
  if (which == 0)
    d.b = 2, d.s = 128, d.h = 256, d.heads = 8, d.head_dim = 32, d.ffn = 1024;
  else
    d.b = 1, d.s = 512, d.h = 1024, d.heads = 16, d.head_dim = 64, d.ffn = 4096;
  return d;
}

bool skip_device(benchmark::State& state, bool cuda) {
  if (!cuda) return false;
  std::string why;
  if (hw::cuda_available(&why)) return false;
  state.SkipWithError(("CUDA: " + why).c_str());
  return true;
}

void sync(bool cuda) {
  if (cuda) torch::cuda::synchronize();
}

torch::TensorOptions options(bool cuda) {
  return cuda ? torch::TensorOptions().dtype(torch::kHalf).device(torch::kCUDA)
              : torch::TensorOptions().dtype(torch::kFloat32);
}

void set_counters(benchmark::State& state, const hw::LayerDims& d) {
  // Matmul FLOPs of forward + backward (3x forward): 24 b s h^2 (QKV, proj, MLP at ffn 4h)
  // + 4 b s^2 h (QK^T and PV), Narayanan et al. SC'21 Sec. 5.1.
  const double fwd = 2.0 * d.b * d.s * (3.0 * d.h * d.attn_width() + d.attn_width() * d.h +
                                        2.0 * d.h * d.ffn) +
                     4.0 * d.b * d.s * d.s * d.attn_width();
  state.counters["FLOP/s"] =
      benchmark::Counter(3 * fwd * double(state.iterations()), benchmark::Counter::kIsRate);
}

// ---- the replay executor's layer
void BM_ReplayLayer(benchmark::State& state) {
  const bool cuda = state.range(1) != 0;
  if (skip_device(state, cuda)) return;
  const hw::LayerDims d = dims(static_cast<int>(state.range(0)));
  const auto opt = options(cuda);
  std::vector<torch::Tensor> params;
  for (const auto& [name, shape] : hw::layer_param_shapes(d))
    params.push_back((torch::randn(shape, opt) * 0.02).requires_grad_(true));
  const hw::LayerWeights w = hw::bind_layer_weights(params);
  const torch::Tensor x = torch::randn({d.s, d.b, d.h}, opt);
  const torch::Tensor dy = torch::randn({d.s, d.b, d.h}, opt);
  const torch::Tensor mask = hw::causal_mask(d.s, torch::TensorOptions().device(opt.device()));
  const hw::Dropout p;
  for (auto _ : state) {
    hw::BlockState attn = hw::attn_forward(w, x, mask, d, p);
    hw::BlockState mlp = hw::mlp_forward(w, attn.output.detach(), d, p);
    const torch::Tensor g = hw::block_backward(mlp, dy, mask, d, p);
    benchmark::DoNotOptimize(hw::block_backward(attn, g, mask, d, p));
    sync(cuda);
  }
  set_counters(state, d);
}

// ---- the same layer as plain LibTorch eager code
struct EagerLayer : torch::nn::Module {
  EagerLayer(const hw::LayerDims& d)
      : ln1(register_module("ln1", torch::nn::LayerNorm(torch::nn::LayerNormOptions({d.h})))),
        qkv(register_module("qkv", torch::nn::Linear(d.h, 3 * d.attn_width()))),
        proj(register_module("proj", torch::nn::Linear(d.attn_width(), d.h))),
        ln2(register_module("ln2", torch::nn::LayerNorm(torch::nn::LayerNormOptions({d.h})))),
        fc1(register_module("fc1", torch::nn::Linear(d.h, d.ffn))),
        fc2(register_module("fc2", torch::nn::Linear(d.ffn, d.h))),
        heads(d.heads), hd(d.head_dim) {}

  torch::Tensor forward(const torch::Tensor& x, const torch::Tensor& future) {  // x [b, s, h]
    const auto b = x.size(0), s = x.size(1);
    auto t = qkv(ln1(x)).view({b, s, heads, 3 * hd}).permute({0, 2, 1, 3});
    auto parts = t.chunk(3, -1);
    auto att = torch::softmax(torch::matmul(parts[0], parts[1].transpose(2, 3)) / std::sqrt(double(hd)) +
                                  future, -1);
    att = torch::dropout(att, 0.1, true);
    auto ctx = torch::matmul(att, parts[2]).permute({0, 2, 1, 3}).reshape({b, s, heads * hd});
    auto y = x + torch::dropout(proj(ctx), 0.1, true);
    return y + torch::dropout(fc2(torch::gelu(fc1(ln2(y)), "tanh")), 0.1, true);
  }

  torch::nn::LayerNorm ln1;
  torch::nn::Linear qkv, proj;
  torch::nn::LayerNorm ln2;
  torch::nn::Linear fc1, fc2;
  std::int64_t heads, hd;
};

void BM_EagerLayer(benchmark::State& state) {
  const bool cuda = state.range(1) != 0;
  if (skip_device(state, cuda)) return;
  const hw::LayerDims d = dims(static_cast<int>(state.range(0)));
  const auto opt = options(cuda);
  EagerLayer layer(d);
  layer.to(opt.device(), opt.dtype().toScalarType());
  const torch::Tensor x = torch::randn({d.b, d.s, d.h}, opt).requires_grad_(true);
  const torch::Tensor dy = torch::randn({d.b, d.s, d.h}, opt);
  const torch::Tensor future = torch::full({d.s, d.s}, -10000.0, opt).triu(1);
  for (auto _ : state) {
    const torch::Tensor y = layer.forward(x, future);
    torch::autograd::backward({y}, {dy});
    sync(cuda);
  }
  set_counters(state, d);
}

// ---- a whole replayed iteration (tiny scenario at h 128, s 64 to keep it short)
void BM_ReplayIterationCpu(benchmark::State& state) {
  const Scenario sc = load_scenario(std::string(TRAINSIM_SOURCE_DIR) +
                                        "/scenarios/small/gpt-tiny_tp1_pp1_dp1.yaml",
                                    {{"model.hidden_size", "128"}, {"model.seq_length", "64"}});
  const ScheduleGraph g = build_schedule_graph(validated(sc), find_system(sc.cluster.system), BuildOptions{});
  hw::ReplayOptions o;
  double measured = 0;
  for (auto _ : state) {
    const ExecutionRecord r = hw::replay(g, o);
    measured += r.iteration_time_s();
  }
  state.counters["measured_iteration_s"] = measured / double(state.iterations());
}

}  // namespace

// Args: {shape (0 tiny, 1 medium), device (0 CPU, 1 CUDA)}
BENCHMARK(BM_ReplayLayer)->ArgsProduct({{0, 1}, {0, 1}})->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_EagerLayer)->ArgsProduct({{0, 1}, {0, 1}})->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_ReplayIterationCpu)->Unit(benchmark::kMillisecond)->Iterations(2)->UseRealTime();

BENCHMARK_MAIN();
