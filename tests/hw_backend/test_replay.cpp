// Replay executor (hw_backend/): one rank of a schedule graph on the CPU through LibTorch, and
// the transformer layer against an independent eager LibTorch implementation.
#include <gtest/gtest.h>

#include <cmath>
#include <set>
#include <string>
#include <vector>

#include "hw_backend/replay.h"
#include "hw_backend/transformer_layer.h"
#include "models/builder/graph_builder.h"
#include "models/hardware/hardware.h"
#include "models/input/scenario.h"
#include "tests/support/replay_fixture.h"

using namespace trainsim;

namespace {

using test_support::scenario_path;

ScheduleGraph build(const Scenario& sc, bool fold = false) {
  BuildOptions o;
  o.fold = fold;
  return build_schedule_graph(validated(sc), find_system(sc.cluster.system), o);
}

hw::ReplayOptions cpu_opts(std::int64_t rank) { return test_support::cpu_replay_options(rank); }

bool has_note(const ExecutionRecord& r, const std::string& needle) {
  for (const auto& n : r.notes)
    if (n.find(needle) != std::string::npos) return true;
  return false;
}

/// Memory sample taken at the end of `id` (samples are (end time, bytes) after each task).
std::int64_t mem_after(const ExecutionRecord& r, TaskId id) {
  for (const auto& [t, b] : r.allocated_bytes_samples)
    if (t == r.end_s[id]) return b;
  ADD_FAILURE() << "no memory sample at the end of task " << id;
  return -1;
}

/// The checks every replay must pass: exactly the rank's tasks ran, each with start < end,
/// dependencies respected, a positive iteration time, memory samples present.
void check_record(const ScheduleGraph& g, const ExecutionRecord& r, RankId rank) {
  ASSERT_EQ(r.start_s.size(), g.num_tasks());
  ASSERT_EQ(r.end_s.size(), g.num_tasks());
  EXPECT_TRUE(r.measured);
  EXPECT_EQ(r.executor.rfind("libtorch-", 0), 0u) << r.executor;
  const auto mine = g.tasks_of_rank(rank);
  const std::set<TaskId> expected(mine.begin(), mine.end());
  std::set<TaskId> ran;
  for (TaskId id = 0; id < g.num_tasks(); ++id) {
    const bool did = !std::isnan(r.start_s[id]);
    EXPECT_EQ(did, !std::isnan(r.end_s[id])) << id;
    if (did) {
      ran.insert(id);
      EXPECT_LE(r.start_s[id], r.end_s[id]) << g.label(id);
      EXPECT_GE(r.start_s[id], 0.0);
    }
  }
  EXPECT_EQ(ran, expected);
  const auto& deps = g.dependencies();
  int checked = 0;
  for (TaskId id : mine)
    for (auto [e, end] = boost::in_edges(id, deps); e != end; ++e) {
      const auto from = static_cast<TaskId>(boost::source(*e, deps));
      if (!expected.count(from)) continue;
      EXPECT_LE(r.end_s[from], r.start_s[id]) << g.label(from) << " -> " << g.label(id);
      ++checked;
    }
  EXPECT_GT(checked, 0);
  EXPECT_GT(r.iteration_time_s(), 0.0);
  EXPECT_EQ(r.allocated_bytes_samples.size(), mine.size() + 1);
  EXPECT_EQ(r.reserved_bytes_samples.size(), mine.size() + 1);
  std::int64_t max_sample = 0;
  for (const auto& s : r.allocated_bytes_samples) max_sample = std::max(max_sample, s.second);
  EXPECT_GE(r.peak_allocated_bytes, max_sample);
  EXPECT_GT(max_sample, 0);
  EXPECT_FALSE(has_note(r, "parameters:")) << "replayed parameter count differs from the model";
  EXPECT_FALSE(has_note(r, "warning:"));
}

/// Compute tasks of `rank` for microbatch `mb`, of one phase, in program order.
std::vector<TaskId> compute_tasks(const ScheduleGraph& g, RankId rank, int mb, Phase phase) {
  std::vector<TaskId> out;
  for (TaskId id : g.tasks_of_rank(rank)) {
    const Task& t = g.task(id);
    if (t.kind == TaskKind::Compute && t.microbatch == mb && t.phase == phase) out.push_back(id);
  }
  return out;
}

}  // namespace

TEST(Replay, TinySingleRankOnCpu) {
  const Scenario sc = load_scenario(scenario_path("small/gpt-tiny_tp1_pp1_dp1.yaml"));
  const ScheduleGraph g = build(sc);
  const ExecutionRecord r = hw::replay(g, cpu_opts(0));
  check_record(g, r, 0);
  EXPECT_TRUE(has_note(r, "CPU Adam")) << "the GPU optimizer step must be noted as substituted";
  EXPECT_TRUE(has_note(r, "replayed as fp32"));

  // Memory rises through each microbatch's forward and falls through its backward: every
  // forward block keeps autograd state, every backward block releases it.
  for (int mb = 0; mb < sc.parallel.num_microbatches; ++mb) {
    const auto fwd = compute_tasks(g, 0, mb, Phase::Forward);
    const auto bwd = compute_tasks(g, 0, mb, Phase::Backward);
    ASSERT_EQ(fwd.size(), 2u + 2u * sc.model.num_layers);  // embed, 2 blocks per layer, logits
    ASSERT_EQ(bwd.size(), fwd.size());
    for (std::size_t i = 1; i < fwd.size(); ++i)
      EXPECT_GT(mem_after(r, fwd[i]), mem_after(r, fwd[i - 1])) << g.label(fwd[i]);
    for (std::size_t i = 1; i < bwd.size(); ++i)
      EXPECT_LT(mem_after(r, bwd[i]), mem_after(r, bwd[i - 1])) << g.label(bwd[i]);
    EXPECT_LT(mem_after(r, bwd.back()), mem_after(r, fwd.back()));
  }
}

TEST(Replay, RanksOfTp2Pp2Dp2) {
  const Scenario sc = load_scenario(scenario_path("small/gpt-tiny_tp2_pp2_dp2.yaml"));
  const ScheduleGraph g = build(sc);
  // Rank 5: last stage (logits, receives forward / sends backward), tensor rank 1.
  // Rank 2: first stage (embedding), data rank 1.
  for (std::int64_t rank : {5, 2}) {
    SCOPED_TRACE(rank);
    const ExecutionRecord r = hw::replay(g, cpu_opts(rank));
    check_record(g, r, static_cast<RankId>(rank));
    EXPECT_TRUE(has_note(r, "device-local copies of the bytes one rank sends"));
    EXPECT_TRUE(has_note(r, "pipeline sends and"));
  }
  EXPECT_THROW(hw::replay(g, cpu_opts(8)), InputError);
}

// The middle stages of a pipeline without scatter/gather (TP 1): each receives whole tensors.
// A pipeline message's bytes are in the scenario's precision (fp16 here) while the CPU replays
// fp32; reading the message as fp32 elements took it for half a tensor awaiting an all-gather
// that never comes ("uses a received tensor before its all-gather completed it").
TEST(Replay, MiddleStagesOfAnFp16PipelineOnTheCpu) {
  const Scenario sc = load_scenario(scenario_path("small/gpt-tiny_tp1_pp4_dp1_vp.yaml"));
  ASSERT_EQ(sc.parallel.precision, Precision::FP16);
  const ScheduleGraph g = build(sc);
  for (std::int64_t rank : {1, 2}) {
    SCOPED_TRACE(rank);
    const ExecutionRecord r = hw::replay(g, cpu_opts(rank));
    check_record(g, r, static_cast<RankId>(rank));
    EXPECT_TRUE(has_note(r, "pipeline sends and"));
  }
}

// Block recomputation (Megatron --recompute-method block): the checkpointed first layer of each
// stage keeps only its input and re-runs its forward before its backward; the other layer keeps
// its autograd state.
TEST(Replay, BlockRecomputationChecksOnlyTheFirstLayersOfAStage) {
  const Scenario sc = parse_scenario(
      "name: block\nmodel: {num_layers: 4, hidden_size: 128, num_attention_heads: 4, "
      "seq_length: 64, padded_vocab_size: 512}\nparallel: {micro_batch_size: 1, "
      "global_batch_size: 8, precision: fp16, pipeline_model_parallel_size: 2, "
      "recompute_granularity: full, recompute_method: block, recompute_num_layers: 1}\n"
      "cluster: {system: dgx-a100-80gb, nodes: 1, gpus_per_node: 4}\n",
      "block.yaml");
  const ScheduleGraph g = build(sc);
  for (std::int64_t rank : {0, 3}) {
    SCOPED_TRACE(rank);
    const ExecutionRecord r = hw::replay(g, cpu_opts(rank));
    check_record(g, r, static_cast<RankId>(rank));
    std::set<std::uint16_t> recomputed;
    for (TaskId id : g.tasks_of_rank(static_cast<RankId>(rank)))
      if (g.task(id).phase == Phase::Recompute) recomputed.insert(g.task(id).layer);
    EXPECT_EQ(recomputed, (std::set<std::uint16_t>{std::uint16_t(rank == 0 ? 0 : 2)}));
  }
}

// Uniform recomputation in units of 2 layers over 5 (units {0, 1}, {2, 3}, {4}): each unit keeps
// only its first layer's input; before the backward of its last layer the replay re-runs its
// layers in order, each inner layer taking the previous one's re-run output as its input.
TEST(Replay, UniformRecomputationReRunsUnitsOfSeveralLayers) {
  auto run = [&](const std::string& recompute) {
    const Scenario sc = parse_scenario(
        "name: uniform\nmodel: {num_layers: 5, hidden_size: 128, num_attention_heads: 4, "
        "seq_length: 64, padded_vocab_size: 512}\nparallel: {micro_batch_size: 1, "
        "global_batch_size: 2, precision: fp16" + recompute + "}\n"
        "cluster: {system: dgx-a100-80gb, nodes: 1, gpus_per_node: 1}\n",
        "uniform.yaml");
    const ScheduleGraph g = build(sc);
    const ExecutionRecord r = hw::replay(g, cpu_opts(0));
    check_record(g, r, 0);
    // The re-run layers in task order, for the first microbatch.
    std::vector<std::uint16_t> rerun;
    for (TaskId id : compute_tasks(g, 0, 0, Phase::Recompute))
      if (g.task(id).part == Part::Attn) rerun.push_back(g.task(id).layer);
    const auto fwd = compute_tasks(g, 0, 0, Phase::Forward);
    return std::make_pair(rerun, mem_after(r, fwd[fwd.size() - 2]) - mem_after(r, fwd[0]));
  };
  const auto [one, one_mem] = run(", recompute_granularity: full");
  const auto [two, two_mem] = run(", recompute_granularity: full, recompute_method: uniform, "
                                  "recompute_num_layers: 2");
  EXPECT_EQ(one, (std::vector<std::uint16_t>{4, 3, 2, 1, 0}));
  EXPECT_EQ(two, (std::vector<std::uint16_t>{4, 2, 3, 0, 1}));
  EXPECT_LT(two_mem, one_mem);  // 3 stashed inputs instead of 5
}

// Megatron-Core --recompute-modules mlp: each MLP module keeps only its input through the
// forward (no autograd state) and re-runs before its backward; attention keeps its state.
TEST(Replay, MlpModuleRecomputationKeepsOnlyTheModuleInput) {
  auto run = [&](const std::string& modules) {
    const Scenario sc = parse_scenario(
        "name: mlp\nruntime: megatron-core\nmodel: {num_layers: 2, hidden_size: 128, "
        "num_attention_heads: 4, seq_length: 64, padded_vocab_size: 512, attention_backend: "
        "flash}\nparallel: {micro_batch_size: 1, global_batch_size: 2, precision: bf16" +
            modules + "}\ncluster: {system: dgx-h100, nodes: 1, gpus_per_node: 1}\n",
        "mlp.yaml");
    const ScheduleGraph g = build(sc);
    const ExecutionRecord r = hw::replay(g, cpu_opts(0));
    check_record(g, r, 0);
    std::set<std::pair<std::uint16_t, Part>> recomputed;
    for (TaskId id : compute_tasks(g, 0, 0, Phase::Recompute))
      recomputed.insert({g.task(id).layer, g.task(id).part});
    const auto fwd = compute_tasks(g, 0, 0, Phase::Forward);
    return std::make_pair(recomputed, mem_after(r, fwd[fwd.size() - 2]) - mem_after(r, fwd[0]));
  };
  const auto [none_rec, none_mem] = run("");
  const auto [mlp_rec, mlp_mem] = run(", recompute_granularity: selective, "
                                      "recompute_modules: [mlp]");
  EXPECT_TRUE(none_rec.empty());
  EXPECT_EQ(mlp_rec, (std::set<std::pair<std::uint16_t, Part>>{{0, Part::Mlp}, {1, Part::Mlp}}));
  EXPECT_LT(mlp_mem, none_mem);
}

TEST(Replay, FoldedGraphUsesRepresentative) {
  const Scenario sc = load_scenario(scenario_path("small/gpt-tiny_tp2_pp2_dp2.yaml"));
  const ScheduleGraph g = build(sc, /*fold=*/true);
  // rank 7 = stage 1, dp 1, tp 1: represented by stage 1's tp 0 dp 0 rank, 1*(2*2) = 4.
  EXPECT_EQ(hw::representative_rank(g, 7), 4);
  EXPECT_EQ(hw::representative_rank(g, 0), 0);
  EXPECT_THROW(hw::representative_rank(g, 8), InputError);
  const ExecutionRecord r = hw::replay(g, cpu_opts(4));
  check_record(g, r, 4);
  EXPECT_TRUE(has_note(r, "folded graph"));
}

TEST(Replay, RecomputationKeepsLessMemoryDuringForward) {
  const std::string path = scenario_path("small/gpt-tiny_tp1_pp1_dp1.yaml");
  // Smaller shapes than the file's (h 128, s 64): three replays with LibTorch's CPU GEMMs.
  auto forward_peak = [&](const std::string& granularity) {
    const Scenario sc = load_scenario(path, {{"parallel.recompute_granularity", granularity},
                                             {"model.hidden_size", "128"},
                                             {"model.seq_length", "64"}});
    const ScheduleGraph g = build(sc);
    const ExecutionRecord r = hw::replay(g, cpu_opts(0));
    check_record(g, r, 0);
    const auto fwd = compute_tasks(g, 0, 0, Phase::Forward);
    if (granularity == "full") {
      EXPECT_FALSE(compute_tasks(g, 0, 0, Phase::Recompute).empty());
    }
    return mem_after(r, fwd[fwd.size() - 2]) - mem_after(r, fwd[0]);  // layers' activations
  };
  const std::int64_t none = forward_peak("null");
  const std::int64_t selective = forward_peak("selective");
  const std::int64_t full = forward_peak("full");
  EXPECT_LT(selective, none);
  EXPECT_LT(full, selective);
  // Full recomputation keeps only each layer's input: 4 layers x s b h fp32 elements (the
  // final MLP output is the one live activation, another s b h).
  const std::int64_t sbh_bytes = 64 * 2 * 128 * 4;
  EXPECT_EQ(full, 4 * sbh_bytes);
}

TEST(Replay, TwinFlowOffloadRunsCpuAdamAndCopies) {
  // ZeRO-3 with 40 % of the optimizer on the CPU (Twin-Flow), smaller hidden size for speed.
  const Scenario sc = load_scenario(scenario_path("small/gpt-tiny_tp1_pp1_dp1.yaml"),
                                    {{"deepspeed.zero_optimization.stage", "3"},
                                     {"deepspeed.zero_optimization.offload_optimizer.device", "cpu"},
                                     {"deepspeed.zero_optimization.offload_optimizer.ratio", "0.4"},
                                     {"model.hidden_size", "128"}});
  const ScheduleGraph g = build(sc);
  int cpu_steps = 0, copies = 0;
  for (TaskId id : g.tasks_of_rank(0)) {
    cpu_steps += g.task(id).kind == TaskKind::OptimizerCpu;
    copies += g.task(id).kind == TaskKind::CopyD2H || g.task(id).kind == TaskKind::CopyH2D;
  }
  ASSERT_GT(cpu_steps, 0);
  ASSERT_GT(copies, 0);
  const ExecutionRecord r = hw::replay(g, cpu_opts(0));
  check_record(g, r, 0);
  EXPECT_TRUE(has_note(r, std::to_string(cpu_steps) + " OptimizerStepCpu sub-groups"));
  EXPECT_TRUE(has_note(r, std::to_string(copies) + " host<->device copies"));
}

TEST(Replay, BadDeviceIsInputError) {
  const Scenario sc = load_scenario(scenario_path("small/gpt-tiny_tp1_pp1_dp1.yaml"));
  const ScheduleGraph g = build(sc);
  hw::ReplayOptions o = cpu_opts(0);
  o.device = "tpu";
  EXPECT_THROW(hw::replay(g, o), InputError);
  std::string why;
  if (!hw::cuda_available(&why)) {
    EXPECT_FALSE(why.empty());
    o.device = "cuda";
    EXPECT_THROW(hw::replay(g, o), InputError);
  }
}

TEST(Replay, RunsFromTheGraphAlone) {
  // The graph carries what the replay needs beyond its OpDescs (ScheduleGraph::replay_model):
  // the scenario it was built from is gone before the replay. Full recomputation and an
  // untied output layer are the two facts no OpDesc of a compute task carries.
  const ScheduleGraph g = [] {
    const Scenario sc = load_scenario(scenario_path("small/gpt-tiny_tp1_pp1_dp1.yaml"),
                                      {{"parallel.recompute_granularity", "full"},
                                       {"model.untie_embeddings_and_output_weights", "true"},
                                       {"model.hidden_size", "128"}});
    return build(sc);
  }();
  const ReplayModel& m = g.replay_model;
  EXPECT_EQ(m.num_layers, 4);  // gpt-tiny
  EXPECT_TRUE(m.recompute_full);
  EXPECT_FALSE(m.recompute_selective);
  EXPECT_TRUE(m.untie_embeddings_and_output_weights);
  ASSERT_EQ(m.params_per_stage.size(), 1u);
  const ExecutionRecord r = hw::replay(g, cpu_opts(0));
  // check_record: no "parameters:" note, so the replay held params_per_stage[0] parameters,
  // the untied output matrix included.
  check_record(g, r, 0);
  EXPECT_TRUE(has_note(r, "recomputation:"));
}

TEST(Replay, DeviceFreeMemory) {
  const std::int64_t cpu = hw::device_free_memory_bytes("cpu");
  EXPECT_GT(cpu, 0);
  EXPECT_THROW(hw::device_free_memory_bytes("tpu"), InputError);
  std::string why;
  if (hw::cuda_available(&why))
    EXPECT_GT(hw::device_free_memory_bytes("cuda"), 0);
  else
    EXPECT_THROW(hw::device_free_memory_bytes("cuda:0"), InputError) << why;
}

TEST(Replay, CudaReplay) {
  std::string why;
  if (!hw::cuda_available(&why)) GTEST_SKIP() << "CUDA replay not tested: " << why;
  const Scenario sc = load_scenario(scenario_path("small/gpt-tiny_tp1_pp1_dp1.yaml"));
  const ScheduleGraph g = build(sc);
  hw::ReplayOptions o = cpu_opts(0);
  o.device = "cuda";
  const ExecutionRecord r = hw::replay(g, o);
  ASSERT_EQ(r.start_s.size(), g.num_tasks());
  for (TaskId id : g.tasks_of_rank(0)) EXPECT_LE(r.start_s[id], r.end_s[id]) << g.label(id);
  EXPECT_GT(r.iteration_time_s(), 0.0);
  EXPECT_GT(r.peak_allocated_bytes, 0);
  EXPECT_EQ(r.executor.find("cuda") != std::string::npos, true);
}

// ---------------------------------------------------------------- numerical check of a layer
namespace {

/// An independent eager GPT layer in [b, s, h] layout, with an additive -inf causal mask and
/// the tanh GeLU written out: y = x + Attn(LN1(x)); z = y + MLP(LN2(y)).
torch::Tensor eager_layer(const torch::Tensor& x, const hw::LayerWeights& w, std::int64_t heads) {
  const std::int64_t b = x.size(0), s = x.size(1), h = x.size(2);
  const std::int64_t P = w.qkv_w.size(0) / 3, hd = P / heads;
  auto ln = [&](const torch::Tensor& t, const torch::Tensor& g, const torch::Tensor& be) {
    const auto mean = t.mean(-1, true);
    const auto var = (t - mean).pow(2).mean(-1, true);
    return (t - mean) / torch::sqrt(var + 1e-5) * g + be;
  };
  const auto qkv = torch::matmul(ln(x, w.ln1_w, w.ln1_b), w.qkv_w.t()) + w.qkv_b;  // [b,s,3P]
  const auto q4 = qkv.view({b, s, heads, 3 * hd});
  const auto q = q4.narrow(3, 0, hd).permute({0, 2, 1, 3});       // [b, heads, s, hd]
  const auto k = q4.narrow(3, hd, hd).permute({0, 2, 1, 3});
  const auto v = q4.narrow(3, 2 * hd, hd).permute({0, 2, 1, 3});
  const auto future = torch::full({s, s}, -INFINITY, x.options()).triu(1);  // 0 on/below the diagonal
  const auto att = torch::softmax(torch::matmul(q, k.transpose(2, 3)) / std::sqrt(double(hd)) + future, -1);
  const auto ctx = torch::matmul(att, v).permute({0, 2, 1, 3}).reshape({b, s, P});
  const auto y = x + torch::matmul(ctx, w.proj_w.t()) + w.proj_b;
  const auto f = torch::matmul(ln(y, w.ln2_w, w.ln2_b), w.fc1_w.t()) + w.fc1_b;
  const auto gelu = 0.5 * f * (1 + torch::tanh(std::sqrt(2.0 / M_PI) * (f + 0.044715 * f.pow(3))));
  return y + torch::matmul(gelu, w.fc2_w.t()) + w.fc2_b;
}

struct LayerFixture {
  hw::LayerDims d;
  std::vector<torch::Tensor> params;
  hw::LayerWeights w;
  torch::Tensor x, upstream;  // [s, b, h] input and output gradient
};

LayerFixture make_layer() {
  LayerFixture f;
  f.d.b = 2, f.d.s = 16, f.d.h = 32, f.d.heads = 4, f.d.head_dim = 8, f.d.ffn = 128, f.d.vocab = 64;
  auto gen = at::detail::createCPUGenerator(7);
  auto opt = torch::TensorOptions().dtype(torch::kFloat64);
  for (const auto& [name, shape] : hw::layer_param_shapes(f.d))
    f.params.push_back(torch::randn(shape, gen, opt).mul_(0.3).requires_grad_(true));
  f.w = hw::bind_layer_weights(f.params);
  f.x = torch::randn({f.d.s, f.d.b, f.d.h}, gen, opt);
  f.upstream = torch::randn({f.d.s, f.d.b, f.d.h}, gen, opt);
  return f;
}

}  // namespace

TEST(TransformerLayer, ParamCountMatchesMemoryModel) {
  hw::LayerDims d;
  d.h = 256, d.heads = 4, d.head_dim = 32, d.ffn = 512;  // tp 2 shard of h 256, a 8, ffn 1024
  std::int64_t n = 0;
  for (const auto& [name, shape] : hw::layer_param_shapes(d)) {
    std::int64_t k = 1;
    for (auto s : shape) k *= s;
    n += k;
  }
  // Megatron layer shard (tp = 2), counted by hand: QKV 256*384 + 384, proj 128*256 + 256,
  // fc1 256*512 + 512, fc2 512*256 + 256, two LayerNorms 4*256.
  EXPECT_EQ(n, 256 * 384 + 384 + 128 * 256 + 256 + 256 * 512 + 512 + 512 * 256 + 256 + 4 * 256);
}

TEST(TransformerLayer, ForwardBackwardMatchesEagerLayer) {
  for (bool selective : {false, true}) {
    SCOPED_TRACE(selective ? "selective recomputation" : "no recomputation");
    LayerFixture f = make_layer();
    const hw::Dropout no_dropout{0.0, 0.0};
    const auto mask = hw::causal_mask(f.d.s, torch::TensorOptions());

    // Replay path: two blocks, each its own autograd graph, backward block by block.
    hw::BlockState attn = hw::attn_forward(f.w, f.x, mask, f.d, no_dropout, selective);
    hw::BlockState mlp = hw::mlp_forward(f.w, attn.output.detach(), f.d, no_dropout);
    const torch::Tensor out = mlp.output.detach().clone();
    const torch::Tensor g_mid = hw::block_backward(mlp, f.upstream, mask, f.d, no_dropout);
    const torch::Tensor g_in = hw::block_backward(attn, g_mid, mask, f.d, no_dropout);
    std::vector<torch::Tensor> replay_grads;
    for (auto& p : f.params) {
      replay_grads.push_back(p.grad().clone());
      p.mutable_grad() = torch::Tensor();
    }

    // Eager path in [b, s, h].
    const torch::Tensor xe = f.x.transpose(0, 1).contiguous().requires_grad_(true);
    const torch::Tensor ye = eager_layer(xe, f.w, f.d.heads);
    torch::autograd::backward({ye}, {f.upstream.transpose(0, 1)});

    EXPECT_TRUE(torch::allclose(out, ye.detach().transpose(0, 1), 1e-9, 1e-10));
    EXPECT_TRUE(torch::allclose(g_in, xe.grad().transpose(0, 1), 1e-9, 1e-10));
    const auto names = hw::layer_param_shapes(f.d);
    for (std::size_t i = 0; i < f.params.size(); ++i) {
      ASSERT_TRUE(f.params[i].grad().defined()) << names[i].first;
      EXPECT_TRUE(torch::allclose(replay_grads[i], f.params[i].grad(), 1e-9, 1e-10))
          << names[i].first << " max diff "
          << (replay_grads[i] - f.params[i].grad()).abs().max().item<double>();
      EXPECT_GT(replay_grads[i].abs().max().item<double>(), 0.0) << names[i].first;
    }
  }
}
