// The replay's MoE layer split into the schedule graph's tasks (hw_backend/expert_wgrad.h,
// core_layer.h SharedApartState): held-back expert weight gradients (delay_wgrad_compute) and
// the shared expert apart (moe_shared_expert_overlap) give the output and every gradient of
// the whole layer (core_mlp_forward with the shared expert inline and its backward whole), in
// fp64 to 1e-10; the held-back gradients are absent until their task runs them.
#include <gtest/gtest.h>

#include <stdexcept>
#include <string>
#include <vector>

#include "hw_backend/core_layer.h"
#include "hw_backend/expert_wgrad.h"
#include "tests/support/core_layer_fixture.h"

using namespace trainsim;

namespace {

using test_support::backward_grads;
using test_support::make_core_weights;

/// A tiny MoE layer: 4 experts (top-2) of 6, a shared expert of 5, RMSNorm, SwiGLU.
hw::CoreLayerSpec moe_layer() {
  hw::CoreLayerSpec c;
  c.b = 2, c.s = 4, c.h = 16, c.ffn = 10;
  c.rmsnorm = c.swiglu = true, c.bias = false;
  c.moe = true, c.num_experts = 4, c.experts_local = 4, c.topk = 2, c.expert_ffn = 6;
  c.shared_ffn = 5;
  return c;
}

bool is_expert_weight(const std::string& name) { return name.rfind("experts.", 0) == 0; }

/// A weight's gradient, zeros where it has none (the attention block's weights here).
torch::Tensor grad_of(const torch::Tensor& t) {
  return t.grad().defined() ? t.grad() : torch::zeros_like(t);
}

void expect_close(const torch::Tensor& a, const torch::Tensor& b, const std::string& what) {
  EXPECT_TRUE(torch::allclose(a, b, 1e-10, 1e-12))
      << what << ": max difference " << (a - b).abs().max().item<double>();
}

/// The tiny layer's weights from `seed`, an input and an output gradient, and the whole
/// layer's output and gradients (input first, then the weights in name order).
struct WholeLayer {
  hw::CoreLayerSpec c = moe_layer();
  hw::CoreWeights w;
  torch::Tensor x, g, out;
  std::vector<torch::Tensor> grads;
};
WholeLayer whole_layer(std::uint64_t seed) {
  WholeLayer r;
  r.w = make_core_weights(r.c, seed);
  const auto opt = torch::TensorOptions().dtype(torch::kFloat64);
  r.x = torch::randn({r.c.s, r.c.b, r.c.h}, opt), r.g = torch::randn({r.c.s, r.c.b, r.c.h}, opt);
  hw::BlockState st = hw::core_mlp_forward(r.w, r.x, r.c, hw::Dropout{0, 0}, nullptr);
  r.out = st.output.detach();
  r.grads = backward_grads(st.output, r.g, st.input, r.w);
  return r;
}

}  // namespace

TEST(MoeSplit, HeldBackExpertWeightGradientsMatchTheWholeBackwardOnceRun) {
  WholeLayer r = whole_layer(21);
  hw::CoreLayerSpec& c = r.c;
  hw::CoreWeights& w = r.w;
  const torch::Tensor &x = r.x, &g = r.g, &ref_out = r.out;
  const std::vector<torch::Tensor>& ref = r.grads;

  c.delay_wgrad = true;
  hw::DeferredWgrad held;
  hw::BlockState st = hw::core_mlp_forward(w, x, c, hw::Dropout{0, 0}, nullptr, &held);
  expect_close(st.output, ref_out, "output");
  st.output.backward(g);
  expect_close(st.input.grad(), ref[0], "input gradient");
  // After the data-gradient part: every weight but the experts' has its gradient; the
  // experts' have none yet, and the store holds one GEMM per expert linear that saw tokens.
  std::size_t i = 1;
  for (auto& [name, t] : w.t) {
    if (is_expert_weight(name))
      EXPECT_FALSE(t.grad().defined() && t.grad().abs().max().item<double>() > 0) << name;
    else
      expect_close(grad_of(t), ref[i], name);
    ++i;
  }
  EXPECT_FALSE(held.empty());
  const std::int64_t ran = held.run();
  EXPECT_GE(ran, 2);  // at least one expert got tokens: its fc1 and fc2
  EXPECT_LE(ran, 2 * c.experts_local);
  EXPECT_EQ(ran % 2, 0);
  EXPECT_TRUE(held.empty());
  i = 1;
  for (auto& [name, t] : w.t) {
    if (is_expert_weight(name)) expect_close(grad_of(t), ref[i], name);
    ++i;
  }
}

TEST(MoeSplit, TheSharedExpertApartGivesTheInlineLayer) {
  for (const bool delay : {false, true}) {
    SCOPED_TRACE(delay ? "with delay_wgrad" : "without delay_wgrad");
    WholeLayer r = whole_layer(22);
    hw::CoreLayerSpec& c = r.c;
    hw::CoreWeights& w = r.w;
    const torch::Tensor &x = r.x, &g = r.g, &ref_out = r.out;
    const std::vector<torch::Tensor>& ref = r.grads;

    c.shared_apart = true, c.delay_wgrad = delay;
    hw::DeferredWgrad held;
    hw::SharedApartState st;
    // Program order: forward fc1, MoE, fc2; backward fc2, MoE, fc1.
    hw::shared_fc1_forward(w, x, c, st);
    hw::shared_moe_forward(w, c, nullptr, delay ? &held : nullptr, st);
    const torch::Tensor out = hw::shared_fc2_forward(w, c, hw::Dropout{0, 0}, st);
    expect_close(out, ref_out, "output");
    EXPECT_FALSE(out.requires_grad());  // the next block's input, detached
    hw::shared_fc2_backward(st, g);
    hw::shared_moe_backward(st);
    const torch::Tensor gx = hw::shared_fc1_backward(st);
    EXPECT_FALSE(st.input.defined());  // the state is released
    if (delay) held.run();
    expect_close(gx, ref[0], "input gradient");
    std::size_t i = 1;
    for (auto& [name, t] : w.t) expect_close(grad_of(t), ref[i++], name);
  }
}

TEST(MoeSplit, TheSharedExpertTasksRefuseAnotherOrder) {
  hw::CoreLayerSpec c = moe_layer();
  c.shared_apart = true;
  hw::CoreWeights w = make_core_weights(c, 23);
  const auto opt = torch::TensorOptions().dtype(torch::kFloat64);
  const torch::Tensor x = torch::randn({c.s, c.b, c.h}, opt);
  hw::SharedApartState st;
  EXPECT_THROW(hw::shared_moe_forward(w, c, nullptr, nullptr, st), std::logic_error);
  hw::shared_fc1_forward(w, x, c, st);
  EXPECT_THROW(hw::shared_fc2_forward(w, c, hw::Dropout{0, 0}, st), std::logic_error);
  hw::shared_moe_forward(w, c, nullptr, nullptr, st);
  hw::shared_fc2_forward(w, c, hw::Dropout{0, 0}, st);
  EXPECT_THROW(hw::shared_fc1_backward(st), std::logic_error);
  EXPECT_THROW(hw::shared_moe_backward(st), std::logic_error);
}
