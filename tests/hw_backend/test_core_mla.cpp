// The replay's multi-head latent attention and MoE token dropping (hw_backend/core_layer.h):
// MLA's parameter shapes against a hand count; its block output against a token-by-token
// computation written here from Megatron-Core's MLASelfAttention; its gradients (with and
// without the re-run of --recompute-modules mla_up_proj) against LibTorch's autograd of that
// computation; the expert capacity and the dropped copies of a fixed routing against hand
// counts; the router (sigmoid, group-limited, expert bias) by hand; tiny MLA, token-dropping
// and sigmoid-router models that train over 20 replayed iterations.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "hw_backend/core_layer.h"
#include "tests/support/core_layer_fixture.h"
#include "tests/support/replay_fixture.h"
#include "hw_backend/replay.h"
#include "models/builder/graph_builder.h"
#include "models/hardware/hardware.h"
#include "models/input/scenario.h"

using namespace trainsim;

namespace {

using test_support::backward_grads;
using test_support::rms_reference;
using test_support::param_count;
using test_support::make_core_weights;

/// h 16, 4 heads, q latent 8, kv latent 6, dn 4 + dr 2 query/key, dv 3 value.
hw::CoreLayerSpec mla_tiny() {
  hw::CoreLayerSpec c;
  c.b = 2, c.s = 6, c.h = 16, c.heads = 4, c.kv_heads = 4, c.head_dim = 6, c.ffn = 8;
  c.rmsnorm = c.rope = c.swiglu = true, c.bias = false;
  c.mla = c.latent_norm = true;
  c.q_lora = 8, c.kv_lora = 6, c.qk_rope = 2, c.v_dim = 3;
  return c;
}

/// RoPE of one rope vector v [dr] at position `pos` as MLA applies it (rope_utils.py
/// _apply_rotary_pos_emb_bshd, mla_rotary_interleaved): the pairs (v[2i], v[2i+1]) rotated by
/// pos / 10000^(2i/dr), the result laid out [rotated evens, rotated odds].
torch::Tensor mla_rope_ref(const torch::Tensor& v, std::int64_t pos) {
  const std::int64_t dr = v.size(0), half = dr / 2;
  std::vector<torch::Tensor> even, odd;
  for (std::int64_t i = 0; i < half; ++i) {
    const double th = double(pos) * std::pow(10000.0, -2.0 * double(i) / double(dr));
    even.push_back(v[2 * i] * std::cos(th) - v[2 * i + 1] * std::sin(th));
    odd.push_back(v[2 * i + 1] * std::cos(th) + v[2 * i] * std::sin(th));
  }
  std::vector<torch::Tensor> all(even);
  all.insert(all.end(), odd.begin(), odd.end());
  return torch::stack(all);
}

/// The MLA block token by token (differentiable): input RMSNorm, q down / norm / up, kv down
/// / norm / up, RoPE on the rope columns, causal softmax attention of scale 1/sqrt(dn + dr),
/// linear_proj, residual.
torch::Tensor mla_reference(const hw::CoreWeights& w, const torch::Tensor& x, const hw::CoreLayerSpec& c) {
  const std::int64_t a = c.heads, dr = c.qk_rope, dn = c.head_dim - dr, dv = c.v_dim;
  std::vector<torch::Tensor> outs;
  for (std::int64_t bi = 0; bi < c.b; ++bi) {
    std::vector<torch::Tensor> q(c.s), k(c.s), v(c.s);  // [a, dn + dr], [a, dn + dr], [a, dv]
    for (std::int64_t i = 0; i < c.s; ++i) {
      const torch::Tensor xi = rms_reference(x[i][bi], w.at("input_layernorm.weight"));
      const torch::Tensor ql = rms_reference(torch::mv(w.at("linear_q_down_proj.weight"), xi),
                                             w.at("q_layernorm.weight"));
      const torch::Tensor qa = torch::mv(w.at("linear_q_up_proj.weight"), ql).view({a, dn + dr});
      const torch::Tensor kvd = torch::mv(w.at("linear_kv_down_proj.weight"), xi);
      const torch::Tensor kvl =
          rms_reference(kvd.narrow(0, 0, c.kv_lora), w.at("kv_layernorm.weight"));
      const torch::Tensor kpe = mla_rope_ref(kvd.narrow(0, c.kv_lora, dr), i);
      const torch::Tensor kva = torch::mv(w.at("linear_kv_up_proj.weight"), kvl).view({a, dn + dv});
      std::vector<torch::Tensor> qh, kh;
      for (std::int64_t hd = 0; hd < a; ++hd) {
        qh.push_back(torch::cat({qa[hd].narrow(0, 0, dn), mla_rope_ref(qa[hd].narrow(0, dn, dr), i)}));
        kh.push_back(torch::cat({kva[hd].narrow(0, 0, dn), kpe}));
      }
      q[i] = torch::stack(qh), k[i] = torch::stack(kh), v[i] = kva.narrow(1, dn, dv);
    }
    std::vector<torch::Tensor> rows;
    for (std::int64_t i = 0; i < c.s; ++i) {
      std::vector<torch::Tensor> heads;
      for (std::int64_t hd = 0; hd < a; ++hd) {
        std::vector<torch::Tensor> sc, vs;
        for (std::int64_t j = 0; j <= i; ++j) {
          sc.push_back(torch::dot(q[i][hd], k[j][hd]) / std::sqrt(double(dn + dr)));
          vs.push_back(v[j][hd]);
        }
        const torch::Tensor p = torch::softmax(torch::stack(sc), 0);
        heads.push_back(torch::mv(torch::stack(vs).t(), p));
      }
      rows.push_back(x[i][bi] + torch::mv(w.at("linear_proj.weight"), torch::cat(heads)));
    }
    outs.push_back(torch::stack(rows));  // [s, h]
  }
  return torch::stack(outs, 1);  // [s, b, h]
}

using test_support::expect_loss_falls;
using test_support::joined_notes;
using test_support::scenario_path;

ScheduleGraph build(const Scenario& sc) { return test_support::replay_graph(sc); }
hw::ReplayOptions cpu_opts() { return test_support::cpu_replay_options(); }

}  // namespace

// Parameter shapes (Megatron-Core's MLASelfAttention with the TE spec: no biases on the down
// and up projections, the latent norms with qk_layernorm) against a hand count.
TEST(CoreMla, ParameterShapesMatchAHandCount) {
  hw::CoreLayerSpec c = mla_tiny();
  c.ffn = 8;
  // input norm 16; q_down 8 x 16; kv_down (6 + 2) x 16; q_up 4 (4 + 2) x 8; q norm 8;
  // kv_up 4 (4 + 3) x 6; kv norm 6; proj 16 x 4 x 3; pre-MLP norm 16; fc1 2 x 8 x 16; fc2 16 x 8
  const std::int64_t attn = 16 + 128 + 128 + 192 + 8 + 168 + 6 + 192;
  EXPECT_EQ(param_count(hw::core_param_shapes(c)), attn + 16 + 256 + 128);
  bool saw_kv_up = false;
  for (const auto& [name, shape] : hw::core_param_shapes(c)) {
    if (name == "linear_kv_up_proj.weight") {
      saw_kv_up = true;
      EXPECT_EQ(shape, (std::vector<std::int64_t>{28, 6}));
    }
    if (name == "linear_proj.weight") EXPECT_EQ(shape, (std::vector<std::int64_t>{16, 12}));
    EXPECT_EQ(name.find("linear_qkv"), std::string::npos) << name;
  }
  EXPECT_TRUE(saw_kv_up);
  // Without q_lora: one linear_q_proj 4 (4 + 2) x 16 in place of q_down, its norm, q_up.
  c.q_lora = 0;
  EXPECT_EQ(param_count(hw::core_param_shapes(c)), 16 + 128 + 384 + 168 + 6 + 192 + 16 + 256 + 128);
  // LayerNorm latents carry a bias each; a biased projection its h.
  c.q_lora = 8, c.rmsnorm = false, c.bias = true;
  const std::int64_t biases = 16 /*input*/ + 8 + 6 /*latents*/ + 16 /*proj*/ + 16 /*pre-MLP*/ + 16 + 16 /*fc1, fc2*/;
  EXPECT_EQ(param_count(hw::core_param_shapes(c)), attn + 16 + 256 + 128 + biases);
}

// The block's output against the token-by-token computation, to 1e-10 in fp64; the
// gradients (x and every weight) against LibTorch's autograd of that computation, both for
// the plain forward and for the re-run of the up projections in the backward.
TEST(CoreMla, OutputAndGradientsMatchATokenByTokenComputation) {
  for (bool rerun : {false, true}) {
    SCOPED_TRACE(rerun ? "mla_up_proj re-run" : "plain");
    hw::CoreLayerSpec c = mla_tiny();
    c.up_rerun = rerun;
    hw::CoreWeights w = make_core_weights(c, 5);
    torch::manual_seed(6);
    torch::Tensor x = torch::randn({c.s, c.b, c.h}, torch::kFloat64).requires_grad_(true);
    const auto opt = torch::TensorOptions().dtype(torch::kFloat64);
    const auto [cos, sin] = hw::rope_tables(c.s, c.qk_rope, opt);
    hw::BlockState st = hw::core_attn_forward(w, x, c, hw::window_mask(c.s, 0, opt), cos, sin,
                                              hw::Dropout{0, 0});
    const torch::Tensor want = mla_reference(w, x, c);
    ASSERT_EQ(st.output.sizes(), want.sizes());
    EXPECT_TRUE(torch::allclose(st.output, want, 1e-10, 1e-10))
        << (st.output - want).abs().max().item<double>();
    const torch::Tensor grad = torch::randn({c.s, c.b, c.h}, torch::kFloat64);
    // core_attn_forward's input is a fresh leaf (BlockState::input): its gradient is x's.
    // The other block's weights have no gradient: zeros.
    const std::vector<torch::Tensor> got = backward_grads(st.output, grad, st.input, w);
    const auto ref = backward_grads(want, grad, x, w);
    ASSERT_EQ(got.size(), ref.size());
    std::size_t i = 0;
    for (const auto& [name, t] : w.t) {
      ++i;
      EXPECT_TRUE(torch::allclose(got[i], ref[i], 1e-9, 1e-10))
          << name << " " << (got[i] - ref[i]).abs().max().item<double>();
    }
    EXPECT_TRUE(torch::allclose(got[0], ref[0], 1e-9, 1e-10)) << "input gradient";
  }
}

// get_capacity: ceil(T k / E x factor).
TEST(TokenDropping, CapacityIsMegatronsCeiling) {
  EXPECT_EQ(hw::expert_capacity(8, 1, 2, 1.0), 4);
  EXPECT_EQ(hw::expert_capacity(8, 2, 3, 1.0), 6);   // ceil(16 / 3)
  EXPECT_EQ(hw::expert_capacity(10, 2, 4, 1.5), 8);  // ceil(5 x 1.5) = ceil(7.5)
  EXPECT_EQ(hw::expert_capacity(7, 1, 7, 0.5), 1);   // ceil(0.5)
}

// A fixed routing of 8 tokens to 2 experts (top-1): tokens 0..5 to expert 0, 6 and 7 to
// expert 1; capacity ceil(8 / 2 x 1.0) = 4. Expert 0 drops 2 copies: by probability the two
// lowest (tokens 1 and 3), by position the two latest (4 and 5); expert 1 drops none. With
// padding expert 1 takes 2 zero-probability copies (tokens 0 and 1: ties go to earlier tokens).
TEST(TokenDropping, DroppedCopiesMatchAHandCount) {
  const std::vector<double> p0 = {0.9, 0.2, 0.8, 0.3, 0.7, 0.6};
  torch::Tensor probs = torch::zeros({8, 2}, torch::kFloat64);
  torch::Tensor map = torch::zeros({8, 2}, torch::kBool);
  for (int t = 0; t < 6; ++t) probs[t][0] = p0[t], map[t][0] = true;
  probs[6][1] = 0.5, probs[7][1] = 0.4, map[6][1] = true, map[7][1] = true;
  auto kept_of = [](const torch::Tensor& m, int e) {
    std::vector<int> rows;
    for (int t = 0; t < 8; ++t)
      if (m[t][e].item<bool>()) rows.push_back(t);
    return rows;
  };
  {
    const auto [fp, fm] = hw::apply_token_dropping(probs, map, 1, 1.0, false, false);
    EXPECT_EQ(kept_of(fm, 0), (std::vector<int>{0, 2, 4, 5}));
    EXPECT_EQ(kept_of(fm, 1), (std::vector<int>{6, 7}));
    EXPECT_EQ(map.sum().item<std::int64_t>() - fm.sum().item<std::int64_t>(), 2);
    EXPECT_DOUBLE_EQ(fp[1][0].item<double>(), 0.0);
    EXPECT_DOUBLE_EQ(fp[2][0].item<double>(), 0.8);
  }
  {
    const auto [fp, fm] = hw::apply_token_dropping(probs, map, 1, 1.0, true, false);
    EXPECT_EQ(kept_of(fm, 0), (std::vector<int>{0, 1, 2, 3}));
    EXPECT_EQ(kept_of(fm, 1), (std::vector<int>{6, 7}));
  }
  {
    const auto [fp, fm] = hw::apply_token_dropping(probs, map, 1, 1.0, false, true);
    EXPECT_EQ(kept_of(fm, 0), (std::vector<int>{0, 2, 4, 5}));
    EXPECT_EQ(kept_of(fm, 1), (std::vector<int>{0, 1, 6, 7}));
    EXPECT_DOUBLE_EQ(fp[0][1].item<double>(), 0.0);  // padding carries probability 0
    EXPECT_DOUBLE_EQ(fp[6][1].item<double>(), 0.5);
  }
  {  // capacity ceil(4 x 0.5) = 2: expert 0 drops 4, expert 1 none
    const auto [fp, fm] = hw::apply_token_dropping(probs, map, 1, 0.5, false, false);
    EXPECT_EQ(kept_of(fm, 0), (std::vector<int>{0, 2}));
    EXPECT_EQ(map.sum().item<std::int64_t>() - fm.sum().item<std::int64_t>(), 4);
  }
  {  // capacity ceil(4 x 3) = 12 > 8 tokens: nothing dropped
    const auto [fp, fm] = hw::apply_token_dropping(probs, map, 1, 3.0, false, false);
    EXPECT_TRUE(torch::equal(fm, map));
  }
}

// The MoE block with a capacity: the dropped count is sum over experts of max(0, n_e - C),
// n_e the top-k choices per expert of the router computed here, C = ceil(T k / E f).
TEST(TokenDropping, MoeBlockDropsTheCopiesOverCapacity) {
  hw::CoreLayerSpec c;
  c.b = 2, c.s = 8, c.h = 16, c.rmsnorm = c.swiglu = true, c.bias = false;
  c.moe = true, c.num_experts = c.experts_local = 4, c.topk = 2, c.expert_ffn = 8;
  c.capacity_factor = 0.5;
  hw::CoreWeights w = make_core_weights(c, 9);
  torch::manual_seed(10);
  const torch::Tensor x = torch::randn({c.s, c.b, c.h}, torch::kFloat64);
  for (bool pad : {false, true}) {
    c.pad_to_capacity = pad;
    hw::MoeStats stats;
    hw::BlockState st = hw::core_mlp_forward(w, x, c, hw::Dropout{0, 0}, &stats);
    EXPECT_TRUE(torch::isfinite(st.output).all().item<bool>());
    torch::NoGradGuard no_grad;
    const torch::Tensor xn = rms_reference(x, w.at("pre_mlp_layernorm.weight")).reshape({-1, c.h});
    const torch::Tensor chosen = std::get<1>(torch::mm(xn, w.at("router.weight").t()).topk(2, -1));
    const std::int64_t T = c.s * c.b, cap = (T * 2 + 4 * 2 - 1) / (4 * 2);  // ceil(T k / E x 0.5)
    std::int64_t dropped = 0;
    for (int e = 0; e < 4; ++e)
      dropped += std::max<std::int64_t>(0, chosen.eq(e).sum().item<std::int64_t>() - cap);
    EXPECT_EQ(stats.capacity, cap);
    EXPECT_EQ(stats.routed_copies, T * 2);
    EXPECT_EQ(stats.dropped_copies, dropped);
    // Padding: every expert processes exactly its capacity (4 experts x cap copies).
    EXPECT_EQ(stats.padded_copies, pad ? 4 * cap - (T * 2 - dropped) : 0);
  }
}

// Tiny models train: over 20 replayed iterations of llama-tiny turned into MLA (with the
// up-projection re-run) and of qwen3-moe-tiny with a capacity factor, the loss falls; the
// notes say what ran and nothing substituted.
TEST(CoreMlaReplay, TinyMlaModelLossFallsOver20Iterations) {
  Scenario sc = load_scenario(scenario_path("small/llama-tiny_tp1_pp1_dp1.yaml"));
  sc.model.multi_latent_attention = true;
  sc.model.num_query_groups = 0, sc.model.kv_channels = 0;
  sc.model.q_lora_rank = 48, sc.model.kv_lora_rank = 32;
  sc.model.qk_head_dim = 16, sc.model.qk_pos_emb_head_dim = 8, sc.model.v_head_dim = 16;
  sc.model.qk_layernorm = true;
  sc.parallel.recompute_granularity = Recompute::Selective;
  sc.parallel.recompute_modules = kRecomputeMlaUpProj;
  const ScheduleGraph g = build(sc);
  const hw::TrainingReplay t = hw::replay_training(g, cpu_opts(), 20);
  ASSERT_EQ(t.losses.size(), 20u);
  EXPECT_NEAR(t.losses.front(), std::log(512.0), 0.3);
  expect_loss_falls(t.losses);
  const std::string notes = joined_notes(t.record.notes);
  EXPECT_NE(notes.find("linear_kv_up_proj (32 -> 4 x (16 + 16))"), std::string::npos) << notes;
  EXPECT_NE(notes.find("the re-run of the up projections"), std::string::npos) << notes;
  EXPECT_EQ(notes.find("grouped-query attention"), std::string::npos) << notes;
  EXPECT_EQ(notes.find("not replayed"), std::string::npos) << notes;
  EXPECT_EQ(notes.find("parameters: the replay holds"), std::string::npos) << notes;
}

TEST(CoreMlaReplay, TokenDroppingMoeModelLossFallsOver20Iterations) {
  Scenario sc = load_scenario(scenario_path("small/qwen3-moe-tiny_tp1_pp1_ep2_dp2.yaml"));
  sc.model.moe_expert_capacity_factor = 1.0;
  sc.model.moe_pad_expert_input_to_capacity = true;
  const ScheduleGraph g = build(sc);
  const hw::TrainingReplay t = hw::replay_training(g, cpu_opts(), 20);
  ASSERT_EQ(t.losses.size(), 20u);
  expect_loss_falls(t.losses);
  const std::string notes = joined_notes(t.record.notes);
  EXPECT_NE(notes.find("token dropping: per-expert capacity"), std::string::npos) << notes;
  EXPECT_NE(notes.find("MoE token dropping: capacity"), std::string::npos) << notes;
  EXPECT_EQ(notes.find("dropless"), std::string::npos) << notes;
}

// The router (route_topk) on one token's logits [0, 3, 1, 2] over 4 experts, top-2, against
// hand values: sigmoid scores s = (0.5, 0.9526, 0.7311, 0.8808).
TEST(Router, SigmoidGroupLimitedAndBiasedChoicesMatchAHandCount) {
  const torch::Tensor logits = torch::tensor({{0.0, 3.0, 1.0, 2.0}}, torch::kFloat64);
  auto sig = [](double v) { return 1 / (1 + std::exp(-v)); };
  hw::CoreLayerSpec c;
  c.topk = 2;
  auto experts = [](const torch::Tensor& idx) {
    return std::vector<std::int64_t>{idx[0][0].item<std::int64_t>(), idx[0][1].item<std::int64_t>()};
  };
  {  // softmax over the two largest logits (3 and 2): e^1 / (e^1 + 1)
    const auto [p, idx] = hw::route_topk(logits, c, torch::Tensor());
    EXPECT_EQ(experts(idx), (std::vector<std::int64_t>{1, 3}));
    EXPECT_NEAR(p[0][0].item<double>(), std::exp(1.0) / (std::exp(1.0) + 1), 1e-12);
  }
  c.sigmoid = true;
  {  // sigmoid: experts 1 and 3, s1 / (s1 + s3)
    const auto [p, idx] = hw::route_topk(logits, c, torch::Tensor());
    EXPECT_EQ(experts(idx), (std::vector<std::int64_t>{1, 3}));
    EXPECT_NEAR(p[0][0].item<double>(), sig(3) / (sig(3) + sig(2)), 1e-12);
  }
  {  // bias 0.5 on expert 2 steers the choice (s2 + 0.5 = 1.23 first), not the probabilities
    const auto [p, idx] = hw::route_topk(logits, c, torch::tensor({0.0, 0.0, 0.5, 0.0}, torch::kFloat64));
    EXPECT_EQ(experts(idx), (std::vector<std::int64_t>{2, 1}));
    EXPECT_NEAR(p[0][0].item<double>(), sig(1) / (sig(1) + sig(3)), 1e-12);
  }
  // Two groups {0, 1}, {2, 3}, one per token, each scored by its top-2 sum: s0 + s1 = 1.4526
  // < s2 + s3 = 1.6119, so experts 3 and 2 although expert 1 scores highest.
  c.router_groups = 2, c.router_group_topk = 1;
  {
    const auto [p, idx] = hw::route_topk(logits, c, torch::Tensor());
    EXPECT_EQ(experts(idx), (std::vector<std::int64_t>{3, 2}));
    EXPECT_NEAR(p[0][1].item<double>(), sig(1) / (sig(1) + sig(2)), 1e-12);
  }
}

// get_updated_expert_bias: loads (4, 0, 2, 2), mean 2: bias += sign(2 - load) x rate.
TEST(Router, ExpertBiasUpdateIsTheSignOfTheLoadGap) {
  torch::Tensor bias = torch::tensor({0.1, 0.0, 0.0, -0.2}, torch::kFloat32);
  torch::Tensor load = torch::tensor({4.0, 0.0, 2.0, 2.0}, torch::kFloat32);
  hw::update_expert_bias(bias, load, 1e-3);
  EXPECT_NEAR(bias[0].item<double>(), 0.1 - 1e-3, 1e-7);
  EXPECT_NEAR(bias[1].item<double>(), 1e-3, 1e-7);
  EXPECT_NEAR(bias[2].item<double>(), 0.0, 1e-7);
  EXPECT_NEAR(bias[3].item<double>(), -0.2, 1e-7);
  EXPECT_EQ(load.abs().sum().item<double>(), 0.0);
}

// A tiny DeepSeek-style MoE (sigmoid router, expert bias, group-limited routing) trains.
TEST(CoreMlaReplay, SigmoidRouterMoeModelLossFallsOver20Iterations) {
  Scenario sc = load_scenario(scenario_path("small/qwen3-moe-tiny_tp1_pp1_ep2_dp2.yaml"));
  sc.model.moe_router_score_function = RouterScore::Sigmoid;
  sc.model.moe_router_enable_expert_bias = true;
  sc.model.moe_router_num_groups = 4, sc.model.moe_router_group_topk = 2;
  const ScheduleGraph g = build(sc);
  const hw::TrainingReplay t = hw::replay_training(g, cpu_opts(), 20);
  ASSERT_EQ(t.losses.size(), 20u);
  expect_loss_falls(t.losses);
  const std::string notes = joined_notes(t.record.notes);
  EXPECT_NE(notes.find("sigmoid scores normalized over the k, group-limited: the top 2 of 4 "
                       "expert groups, the expert bias"),
            std::string::npos)
      << notes;
}
