// The backward formulas of the replay's fused autograd functions (hw_backend/core_layer.cpp:
// RMSNorm, SwiGLU, FlashAttention-style attention with grouped keys and values) against
// LibTorch's autograd of the composite expressions they replace, in fp64: the block outputs
// and every gradient (input and weights) agree to 1e-10. What the fused functions change is
// what stays alive between forward and backward (docs/validation.md "CPU validation of the
// small scenarios"), not the arithmetic.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>

#include "hw_backend/core_layer.h"
#include "tests/support/core_layer_fixture.h"
#include "hw_backend/transformer_layer.h"

using namespace trainsim;

namespace {

using test_support::backward_grads;
using test_support::rms_reference;
using test_support::make_core_weights;

hw::CoreLayerSpec tiny() {
  hw::CoreLayerSpec c;
  c.b = 2, c.s = 7, c.h = 16, c.heads = 4, c.kv_heads = 2, c.head_dim = 4, c.ffn = 10;
  c.rmsnorm = c.rope = c.swiglu = true, c.bias = false;
  return c;
}

torch::Tensor rope(const torch::Tensor& x, const torch::Tensor& cos, const torch::Tensor& sin) {
  const auto h = x.chunk(2, -1);
  return x * cos + torch::cat({-h[1], h[0]}, -1) * sin;
}

/// The attention block as composite LibTorch ops (keys and values repeated per group, the
/// softmax materialized), on the same weights.
torch::Tensor attn_reference(const hw::CoreWeights& w, const torch::Tensor& x,
                             const hw::CoreLayerSpec& c, const torch::Tensor& mask,
                             const torch::Tensor& cos, const torch::Tensor& sin) {
  const std::int64_t s = c.s, b = c.b, d = c.head_dim, g = c.kv_heads, per = c.heads / g;
  const torch::Tensor xn = rms_reference(x, w.at("input_layernorm.weight"));
  const auto parts = torch::linear(xn, w.at("linear_qkv.weight"))
                         .view({s, b, g, (per + 2) * d})
                         .split({per * d, d, d}, -1);
  torch::Tensor q = parts[0].reshape({s, b, c.heads, d}), k = parts[1], v = parts[2];
  if (c.qk_norm)
    q = rms_reference(q, w.at("q_layernorm.weight")),
    k = rms_reference(k, w.at("k_layernorm.weight"));
  q = rope(q, cos, sin), k = rope(k, cos, sin);
  auto hf = [](const torch::Tensor& t) { return t.permute({1, 2, 0, 3}); };
  const torch::Tensor scores =
      torch::matmul(hf(q), hf(k).repeat_interleave(per, 1).transpose(-2, -1)) / std::sqrt(double(d));
  const torch::Tensor p =
      torch::softmax(scores.masked_fill(mask, -std::numeric_limits<double>::infinity()), -1);
  const torch::Tensor ctx = torch::matmul(p, hf(v).repeat_interleave(per, 1));
  return x + torch::linear(ctx.permute({2, 0, 1, 3}).reshape({s, b, c.heads * d}),
                           w.at("linear_proj.weight"));
}

void expect_same(const std::vector<torch::Tensor>& a, const std::vector<torch::Tensor>& b) {
  ASSERT_EQ(a.size(), b.size());
  for (std::size_t i = 0; i < a.size(); ++i)
    EXPECT_TRUE(torch::allclose(a[i], b[i], 1e-10, 1e-12))
        << "gradient " << i << ": max difference " << (a[i] - b[i]).abs().max().item<double>();
}

}  // namespace

TEST(CoreLayerGrads, RmsNormBackwardIsTheCompositeOne) {
  torch::manual_seed(3);
  torch::Tensor x = torch::randn({5, 3, 8}, torch::kFloat64).requires_grad_(true);
  torch::Tensor w = (torch::randn({8}, torch::kFloat64) + 1).requires_grad_(true);
  const torch::Tensor g = torch::randn({5, 3, 8}, torch::kFloat64);
  const torch::Tensor y = hw::rms_norm(x, w);
  y.backward(g);
  const torch::Tensor dx = x.grad().clone(), dw = w.grad().clone();
  x.mutable_grad() = torch::Tensor(), w.mutable_grad() = torch::Tensor();
  const torch::Tensor y_ref = rms_reference(x, w);
  y_ref.backward(g);
  EXPECT_TRUE(torch::allclose(y, y_ref, 1e-12, 1e-14));
  EXPECT_TRUE(torch::allclose(dx, x.grad(), 1e-10, 1e-12));
  EXPECT_TRUE(torch::allclose(dw, w.grad(), 1e-10, 1e-12));
}

// Causal and sliding-window GQA with q/k norms and RoPE: the fused attention's recomputing
// backward (dS = P (dP - rowsum(dO O)), group sums for dK and dV) gives autograd's gradients.
TEST(CoreLayerGrads, AttentionBlockBackwardIsTheMathPathOne) {
  for (std::int64_t window : {0, 3}) {
    SCOPED_TRACE(window);
    hw::CoreLayerSpec c = tiny();
    c.window = window, c.qk_norm = true;
    hw::CoreWeights w = make_core_weights(c, 11);
    const auto opt = torch::TensorOptions().dtype(torch::kFloat64);
    const auto [cos, sin] = hw::rope_tables(c.s, c.head_dim, opt);
    const torch::Tensor mask = hw::window_mask(c.s, c.window, opt);
    torch::Tensor x = torch::randn({c.s, c.b, c.h}, opt).requires_grad_(true);
    const torch::Tensor g = torch::randn({c.s, c.b, c.h}, opt);
    hw::BlockState st = hw::core_attn_forward(w, x, c, mask, cos, sin, hw::Dropout{0, 0});
    // The other block's weights have no gradient: zeros.
    const std::vector<torch::Tensor> fused = backward_grads(st.output, g, st.input, w);
    const torch::Tensor ref = attn_reference(w, x, c, mask, cos, sin);
    EXPECT_TRUE(torch::allclose(st.output, ref, 1e-10, 1e-12));
    expect_same(fused, backward_grads(ref, g, x, w));
  }
}

// The dense SwiGLU MLP block: the fused SwiGLU's backward (da = dy u s (1 + a (1 - s)),
// du = dy silu(a)) gives autograd's gradients of silu(a) * u.
TEST(CoreLayerGrads, SwigluMlpBlockBackwardIsTheCompositeOne) {
  const hw::CoreLayerSpec c = tiny();
  hw::CoreWeights w = make_core_weights(c, 5);
  const auto opt = torch::TensorOptions().dtype(torch::kFloat64);
  torch::Tensor x = torch::randn({c.s, c.b, c.h}, opt).requires_grad_(true);
  const torch::Tensor g = torch::randn({c.s, c.b, c.h}, opt);
  hw::BlockState st = hw::core_mlp_forward(w, x, c, hw::Dropout{0, 0}, nullptr);
  // The other block's weights have no gradient: zeros.
  const std::vector<torch::Tensor> fused = backward_grads(st.output, g, st.input, w);
  const auto h = torch::linear(rms_reference(x, w.at("pre_mlp_layernorm.weight")),
                               w.at("linear_fc1.weight"))
                     .chunk(2, -1);
  const torch::Tensor ref = x + torch::linear(torch::silu(h[0]) * h[1], w.at("linear_fc2.weight"));
  EXPECT_TRUE(torch::allclose(st.output, ref, 1e-12, 1e-14));
  expect_same(fused, backward_grads(ref, g, x, w));
}

// The output layer's fused cross entropy (Megatron's: the softmax kept, turned into the
// gradient in place) gives LibTorch's log_softmax + nll_loss loss and gradients.
TEST(CoreLayerGrads, CrossEntropyBackwardIsLogSoftmaxNllOne) {
  torch::manual_seed(9);
  const auto opt = torch::TensorOptions().dtype(torch::kFloat64);
  const std::int64_t s = 5, b = 2, h = 8, vocab = 11;
  torch::Tensor x = torch::randn({s, b, h}, opt).requires_grad_(true);
  torch::Tensor ln_w = (torch::randn({h}, opt) + 1).requires_grad_(true);
  torch::Tensor word = torch::randn({vocab, h}, opt).requires_grad_(true);
  const torch::Tensor labels = torch::randint(0, vocab, {b, s}, torch::kInt64);
  auto run = [&](const torch::Tensor& loss) {
    loss.backward();
    std::vector<torch::Tensor> g{loss.detach().clone(), x.grad().clone(), ln_w.grad().clone(),
                                 word.grad().clone()};
    for (torch::Tensor* t : {&x, &ln_w, &word}) t->mutable_grad() = torch::Tensor();
    return g;
  };
  const auto fused = run(hw::logits_loss_forward(x, ln_w, torch::Tensor(), word, labels, 0.5));
  const torch::Tensor logits = torch::linear(rms_reference(x, ln_w).transpose(0, 1), word);
  const auto ref = run(
      torch::nll_loss(torch::log_softmax(logits, -1).view({-1, vocab}), labels.view(-1)) * 0.5);
  expect_same(fused, ref);
}

// The MoE block with the routing probabilities applied in the experts' weighted SwiGLU and a
// scatter-add unpermute: output and gradients (input, router, experts, norm) are those of a
// token-by-token composite computation y = x + sum_k p_k fc2(silu(g) u) with autograd.
TEST(CoreLayerGrads, MoeBlockBackwardIsTheTokenByTokenOne) {
  hw::CoreLayerSpec c = tiny();
  c.s = 4, c.moe = true, c.num_experts = 4, c.experts_local = 4, c.topk = 2, c.expert_ffn = 6;
  hw::CoreWeights w = make_core_weights(c, 13);
  const auto opt = torch::TensorOptions().dtype(torch::kFloat64);
  torch::Tensor x = torch::randn({c.s, c.b, c.h}, opt).requires_grad_(true);
  const torch::Tensor g = torch::randn({c.s, c.b, c.h}, opt);
  hw::BlockState st = hw::core_mlp_forward(w, x, c, hw::Dropout{0, 0}, nullptr);
  // The other block's weights have no gradient: zeros.
  const std::vector<torch::Tensor> fused = backward_grads(st.output, g, st.input, w);
  const torch::Tensor xn = rms_reference(x, w.at("pre_mlp_layernorm.weight"));
  std::vector<torch::Tensor> rows;
  for (std::int64_t i = 0; i < c.s; ++i)
    for (std::int64_t j = 0; j < c.b; ++j) {
      const torch::Tensor t = xn[i][j];
      const auto top = torch::mv(w.at("router.weight"), t).topk(2);
      const torch::Tensor p = torch::softmax(std::get<0>(top), 0);
      torch::Tensor y = x[i][j];
      for (int k = 0; k < 2; ++k) {
        const std::int64_t e = std::get<1>(top)[k].item<std::int64_t>();
        const torch::Tensor h1 = torch::mv(w.at("experts.fc1.weight")[e], t);
        const torch::Tensor act = torch::silu(h1.narrow(0, 0, 6)) * h1.narrow(0, 6, 6);
        y = y + p[k] * torch::mv(w.at("experts.fc2.weight")[e], act);
      }
      rows.push_back(y);
    }
  const torch::Tensor ref = torch::stack(rows).view({c.s, c.b, c.h});
  EXPECT_TRUE(torch::allclose(st.output, ref, 1e-10, 1e-12));
  expect_same(fused, backward_grads(ref, g, x, w));
}
