// The replay's Megatron-Core layers (hw_backend/core_layer.h): parameter counts against hand
// counts, the attention mask and RoPE tables against their closed forms, the MoE block against
// an independent token-by-token computation, replays of the small Megatron-Core scenarios, and a
// tiny model that trains (its loss falls over 20 replayed iterations).
#include <gtest/gtest.h>

#include <cmath>
#include <set>
#include <string>

#include "hw_backend/core_layer.h"
#include "tests/support/core_layer_fixture.h"
#include "tests/support/replay_fixture.h"
#include "hw_backend/replay.h"
#include "models/builder/graph_builder.h"
#include "models/hardware/hardware.h"
#include "models/input/scenario.h"

using namespace trainsim;

namespace {

using test_support::param_count;
using test_support::make_core_weights;

using test_support::expect_loss_falls;
using test_support::scenario_path;

ScheduleGraph build(const Scenario& sc) { return test_support::replay_graph(sc); }
hw::ReplayOptions cpu_opts(std::int64_t rank) { return test_support::cpu_replay_options(rank); }
std::string all_notes(const ExecutionRecord& r) { return test_support::joined_notes(r.notes); }

hw::CoreLayerSpec llama_tiny() {
  hw::CoreLayerSpec c;
  c.b = 2, c.s = 8, c.h = 16, c.heads = 4, c.kv_heads = 2, c.head_dim = 4, c.ffn = 24;
  c.rmsnorm = c.rope = c.swiglu = true, c.bias = false;
  return c;
}

}  // namespace

TEST(CoreLayer, ParamCountsMatchHandCounts) {
  hw::CoreLayerSpec c = llama_tiny();
  // Two RMSNorms 2*16, QKV (4 + 2*2) heads * 4 * 16, proj 16 * 16, fc1 2*24 * 16, fc2 16 * 24.
  EXPECT_EQ(param_count(hw::core_param_shapes(c)),
            2 * 16 + 8 * 4 * 16 + 16 * 16 + 48 * 16 + 16 * 24);
  c.qk_norm = true;
  EXPECT_EQ(param_count(hw::core_param_shapes(c)),
            2 * 16 + 2 * 4 + 8 * 4 * 16 + 16 * 16 + 48 * 16 + 16 * 24);
  c.qk_norm = false, c.moe = true, c.num_experts = 8, c.experts_local = 4, c.expert_ffn = 6,
  c.shared_ffn = 0;
  // Router 8 * 16, 4 local experts of fc1 2*6 x 16 and fc2 16 x 6.
  EXPECT_EQ(param_count(hw::core_param_shapes(c)),
            2 * 16 + 8 * 4 * 16 + 16 * 16 + 8 * 16 + 4 * (12 * 16 + 16 * 6));
  c.rmsnorm = false, c.bias = true, c.moe = false;
  // LayerNorms with biases, biases on every linear.
  EXPECT_EQ(param_count(hw::core_param_shapes(c)),
            4 * 16 + 8 * 4 * 16 + 32 + 16 * 16 + 16 + 48 * 16 + 48 + 16 * 24 + 16);
}

TEST(CoreLayer, WindowMaskAndRopeTables) {
  const torch::Tensor m = hw::window_mask(5, 2, torch::TensorOptions());
  for (int i = 0; i < 5; ++i)
    for (int j = 0; j < 5; ++j)
      EXPECT_EQ(m[i][j].item<bool>(), j > i || j < i - 2) << i << "," << j;
  const auto [cos, sin] = hw::rope_tables(3, 4, torch::TensorOptions().dtype(torch::kFloat64));
  // theta_i = 10000^(-2i/d): position 2, i = 1 -> 2 * 10000^(-1/2) = 0.02.
  EXPECT_NEAR(cos[2][0][0][1].item<double>(), std::cos(0.02), 1e-7);
  EXPECT_NEAR(sin[2][0][0][3].item<double>(), std::sin(0.02), 1e-7);
  EXPECT_NEAR(cos[0][0][0][0].item<double>(), 1.0, 1e-12);
}

// The MoE block against a token-by-token computation: each token's output is the residual plus
// the softmax-over-top-k weighted sum of its experts' SwiGLU MLPs on its RMSNorm'd input.
TEST(CoreLayer, MoeBlockMatchesTokenByTokenExperts) {
  hw::CoreLayerSpec c = llama_tiny();
  c.moe = true, c.num_experts = 4, c.experts_local = 4, c.topk = 2, c.expert_ffn = 6;
  const hw::CoreWeights w = make_core_weights(c, 7);
  const torch::Tensor x = torch::randn({c.s, c.b, c.h}, torch::kFloat64);
  hw::MoeStats stats;
  hw::BlockState st = hw::core_mlp_forward(w, x, c, hw::Dropout{0, 0}, &stats);
  EXPECT_EQ(stats.d2h_copies, 1);
  torch::NoGradGuard no_grad;
  const torch::Tensor xn = x / (x.pow(2).mean(-1, true) + 1e-5).sqrt() * w.at("pre_mlp_layernorm.weight");
  for (std::int64_t i = 0; i < c.s; ++i)
    for (std::int64_t j = 0; j < c.b; ++j) {
      const torch::Tensor t = xn[i][j];
      const torch::Tensor logits = torch::mv(w.at("router.weight"), t);
      const auto top = logits.topk(2);
      const torch::Tensor p = torch::softmax(std::get<0>(top), 0);
      torch::Tensor want = x[i][j].clone();
      for (int k = 0; k < 2; ++k) {
        const std::int64_t e = std::get<1>(top)[k].item<std::int64_t>();
        const torch::Tensor h1 = torch::mv(w.at("experts.fc1.weight")[e], t);
        const torch::Tensor act = torch::silu(h1.narrow(0, 0, 6)) * h1.narrow(0, 6, 6);
        want += p[k] * torch::mv(w.at("experts.fc2.weight")[e], act);
      }
      EXPECT_TRUE(torch::allclose(st.output[i][j], want, 1e-9, 1e-10)) << i << "," << j;
    }
}

// GPT-OSS's clamped quick-GeGLU (model.quick_geglu, activation_func_clamp_value 7,
// glu_linear_offset 1) against a token-by-token computation of Megatron-Core's glu:
// g' = min(g, 7), l' = clamp(l, -7, 7), out = g' sigmoid(1.702 g') (l' + 1). The weights are
// scaled so that some of fc1's outputs pass the clamp.
TEST(CoreLayer, QuickGegluClampsAndOffsetsAsMegatronCore) {
  hw::CoreLayerSpec c = llama_tiny();
  c.quick_geglu = true, c.glu_clamp = 7, c.glu_offset = 1;
  hw::CoreWeights w = make_core_weights(c, 11);
  {
    torch::NoGradGuard no_grad;
    w.t.at("linear_fc1.weight").mul_(20.0);
  }
  const torch::Tensor x = torch::randn({c.s, c.b, c.h}, torch::kFloat64);
  const hw::BlockState st = hw::core_mlp_forward(w, x, c, hw::Dropout{0, 0}, nullptr);
  torch::NoGradGuard no_grad;
  const torch::Tensor xn = x / (x.pow(2).mean(-1, true) + 1e-5).sqrt() * w.at("pre_mlp_layernorm.weight");
  int clamped = 0;
  for (std::int64_t i = 0; i < c.s; ++i)
    for (std::int64_t j = 0; j < c.b; ++j) {
      const torch::Tensor h1 = torch::mv(w.at("linear_fc1.weight"), xn[i][j]);
      torch::Tensor act = torch::empty({c.ffn}, torch::kFloat64);
      for (std::int64_t f = 0; f < c.ffn; ++f) {
        const double g = h1[f].item<double>(), l = h1[c.ffn + f].item<double>();
        clamped += g > 7 || std::abs(l) > 7;
        const double gc = std::min(g, 7.0), lc = std::max(-7.0, std::min(l, 7.0));
        act[f] = gc / (1 + std::exp(-1.702 * gc)) * (lc + 1);
      }
      const torch::Tensor want = x[i][j] + torch::mv(w.at("linear_fc2.weight"), act);
      EXPECT_TRUE(torch::allclose(st.output[i][j], want, 1e-9, 1e-10)) << i << "," << j;
    }
  EXPECT_GT(clamped, 0);  // the clamp was exercised
}

// GQA with RoPE and a sliding window against an independent per-head computation.
TEST(CoreLayer, AttentionMatchesPerHeadComputation) {
  hw::CoreLayerSpec c = llama_tiny();
  c.window = 3, c.qk_norm = true;
  const hw::CoreWeights w = make_core_weights(c, 11);
  const torch::Tensor x = torch::randn({c.s, c.b, c.h}, torch::kFloat64);
  const auto opt = torch::TensorOptions().dtype(torch::kFloat64);
  const auto [cos, sin] = hw::rope_tables(c.s, c.head_dim, opt);
  hw::BlockState st = hw::core_attn_forward(w, x, c, hw::window_mask(c.s, c.window, opt), cos, sin,
                                            hw::Dropout{0, 0});
  torch::NoGradGuard no_grad;
  const auto rms = test_support::rms_reference;
  const std::int64_t d = c.head_dim;
  auto rope = [&](const torch::Tensor& v, std::int64_t pos) {  // v [d]
    torch::Tensor out = torch::empty_like(v);
    for (std::int64_t i = 0; i < d / 2; ++i) {
      const double th = double(pos) * std::pow(10000.0, -2.0 * double(i) / double(d));
      const double a = v[i].item<double>(), bb = v[i + d / 2].item<double>();
      out[i] = a * std::cos(th) - bb * std::sin(th);
      out[i + d / 2] = bb * std::cos(th) + a * std::sin(th);
    }
    return out;
  };
  const torch::Tensor qkv_w = w.at("linear_qkv.weight");  // rows per group: q q k v (d each)
  for (std::int64_t bi = 0; bi < c.b; ++bi) {
    torch::Tensor ctx = torch::zeros({c.s, c.heads * d}, opt);
    for (std::int64_t hd = 0; hd < c.heads; ++hd) {
      const std::int64_t g = hd / 2, qrow = g * 4 * d + (hd % 2) * d, krow = g * 4 * d + 2 * d;
      for (std::int64_t i = 0; i < c.s; ++i) {
        const torch::Tensor xi = rms(x[i][bi], w.at("input_layernorm.weight"));
        const torch::Tensor q = rope(rms(torch::mv(qkv_w.narrow(0, qrow, d), xi), w.at("q_layernorm.weight")), i);
        std::vector<double> sc;
        std::vector<torch::Tensor> vs;
        for (std::int64_t j = std::max<std::int64_t>(0, i - c.window); j <= i; ++j) {
          const torch::Tensor xj = rms(x[j][bi], w.at("input_layernorm.weight"));
          const torch::Tensor k = rope(rms(torch::mv(qkv_w.narrow(0, krow, d), xj), w.at("k_layernorm.weight")), j);
          sc.push_back(torch::dot(q, k).item<double>() / std::sqrt(double(d)));
          vs.push_back(torch::mv(qkv_w.narrow(0, krow + d, d), xj));
        }
        double mx = -1e300, z = 0;
        for (double v : sc) mx = std::max(mx, v);
        for (double v : sc) z += std::exp(v - mx);
        for (std::size_t k = 0; k < sc.size(); ++k)
          ctx[i].narrow(0, hd * d, d) += std::exp(sc[k] - mx) / z * vs[k];
      }
    }
    const torch::Tensor want = x.select(1, bi) + torch::mm(ctx, w.at("linear_proj.weight").t());
    EXPECT_TRUE(torch::allclose(st.output.select(1, bi), want, 1e-9, 1e-10))
        << (st.output.select(1, bi) - want).abs().max().item<double>();
  }
}

TEST(CoreReplay, SmallScenariosRunTheirOwnLayerTypes) {
  for (const char* name : {"small/llama-tiny_tp1_pp1_dp1.yaml", "small/qwen3-moe-tiny_tp1_pp1_ep2_dp2.yaml",
                           "small/llama-tiny_tp1_pp2_dp2_distopt.yaml"}) {
    SCOPED_TRACE(name);
    const Scenario sc = load_scenario(scenario_path(name));
    const ScheduleGraph g = build(sc);
    for (std::int64_t rank : {std::int64_t(0), g.world_size - 1}) {
      if (g.rank_index(RankId(rank)) == kNone) continue;
      const ExecutionRecord r = hw::replay(g, cpu_opts(rank));
      const std::string notes = all_notes(r);
      EXPECT_NE(notes.find("layers: Megatron-Core layers (RMSNorm"), std::string::npos) << notes;
      EXPECT_EQ(notes.find("substituted"), std::string::npos) << notes;
      EXPECT_EQ(notes.find("not replayed"), std::string::npos) << notes;
      // The replay's parameters are the memory model's (no "parameters:" mismatch note).
      EXPECT_EQ(notes.find("parameters: the replay holds"), std::string::npos) << notes;
      if (sc.model.is_moe()) EXPECT_NE(notes.find("MoE: MlpFwd/MlpBwd ran router (8 experts, top-2"),
                                       std::string::npos) << notes;
      for (TaskId id : g.tasks_of_rank(RankId(rank))) EXPECT_FALSE(std::isnan(r.end_s[id]));
    }
  }
}

// A tiny model trains: over 20 replayed iterations on a fixed batch its loss falls. It starts
// near ln(vocab) (near-uniform predictions of a freshly initialized model).
TEST(CoreReplay, TinyModelLossFallsOver20Iterations) {
  const Scenario sc = load_scenario(scenario_path("small/llama-tiny_tp1_pp1_dp1.yaml"));
  const ScheduleGraph g = build(sc);
  const hw::TrainingReplay t = hw::replay_training(g, cpu_opts(0), 20);
  ASSERT_EQ(t.losses.size(), 20u);
  EXPECT_NEAR(t.losses.front(), std::log(512.0), 0.3);
  expect_loss_falls(t.losses);
}
