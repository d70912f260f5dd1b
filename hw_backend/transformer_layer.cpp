// Megatron-LM's 2021 ParallelTransformerLayer (megatron/model/transformer.py, the code SC'21
// ran) as LibTorch calls; see transformer_layer.h for the kernel list of each block.
#include "hw_backend/transformer_layer.h"

#include <cmath>
#include <stdexcept>

#include "hw_backend/core_layer.h"
#include "models/errors.h"

namespace trainsim::hw {
namespace {

/// Cross entropy of logits [N, V] against labels [N] per token, as Megatron's
/// _VocabParallelCrossEntropy (megatron/core/tensor_parallel/cross_entropy.py) at one TP rank:
/// the forward keeps only the softmax (exp(logits - max) normalized in place), the loss is
/// log(sum exp) - (logit of the label - max); the backward turns the saved softmax into the
/// gradient in place (softmax - one-hot, times the incoming gradient). LibTorch's log_softmax +
/// nll_loss would keep log-probabilities and allocate a zero-filled gradient, the softmax and
/// the logits' gradient on top of them in the backward (three [N, V] buffers where Megatron
/// allocates none; docs/validation.md "CPU validation of the small scenarios").
class FusedCrossEntropy : public torch::autograd::Function<FusedCrossEntropy> {
 public:
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& logits,
                               const torch::Tensor& labels) {
    const torch::Tensor max = std::get<0>(logits.max(-1, /*keepdim=*/true));
    torch::Tensor softmax = logits - max;
    const torch::Tensor label_logit = softmax.gather(-1, labels.unsqueeze(-1)).squeeze(-1);
    softmax.exp_();
    const torch::Tensor sum = softmax.sum(-1, /*keepdim=*/true);
    softmax.div_(sum);
    ctx->save_for_backward({softmax, labels});
    return sum.squeeze(-1).log() - label_logit;
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    torch::Tensor grad = saved[0];  // the softmax, turned into the gradient in place
    const torch::Tensor& labels = saved[1];
    grad.scatter_add_(-1, labels.unsqueeze(-1),
                      torch::full({labels.size(0), 1}, -1.0, grad.options()));
    grad.mul_(grads[0].unsqueeze(-1));
    return {grad, torch::Tensor()};
  }
};

// Megatron's FusedScaleMaskSoftmax fills masked scores with -10000 before the softmax.
constexpr double kMaskValue = -10000.0;
// init_method_normal(sigma) with Megatron's --init-method-std default.
constexpr double kInitStd = 0.02;

/// Core attention on the QKV output [s, b, 3P] -> context [s, b, P] (Megatron
/// ParallelAttention.forward: view as [s, b, heads, 3 hd], split, baddbmm, softmax, dropout, bmm,
/// permute).
torch::Tensor core_attention(const torch::Tensor& qkv, const torch::Tensor& mask, const LayerDims& d,
                             const Dropout& p) {
  const std::int64_t s = qkv.size(0), b = qkv.size(1), hd = d.head_dim, np = d.heads;
  const auto parts = qkv.view({s, b, np, 3 * hd}).split(hd, -1);
  // [s, b, np, hd] -> [s, b*np, hd] -> [b*np, s, hd]
  const torch::Tensor q = parts[0].reshape({s, b * np, hd}).transpose(0, 1);
  const torch::Tensor k = parts[1].reshape({s, b * np, hd}).transpose(0, 1);
  const torch::Tensor v = parts[2].reshape({s, b * np, hd}).transpose(0, 1);
  // baddbmm(beta = 0) into a fresh buffer: scores = Q K^T / sqrt(hd).
  torch::Tensor scores = torch::baddbmm(torch::empty({b * np, s, s}, qkv.options()), q,
                                        k.transpose(1, 2), /*beta=*/0.0,
                                        /*alpha=*/1.0 / std::sqrt(static_cast<double>(hd)));
  torch::Tensor probs =
      torch::softmax(scores.view({b, np, s, s}).masked_fill(mask, kMaskValue), -1);
  probs = torch::dropout(probs, p.attention, /*train=*/true);
  const torch::Tensor ctx = torch::bmm(probs.view({b * np, s, s}), v);  // [b*np, s, hd]
  return ctx.view({b, np, s, hd}).permute({2, 0, 1, 3}).contiguous().view({s, b, np * hd});
}

/// Megatron's bias_dropout_add: residual + dropout(x + bias).
torch::Tensor bias_dropout_add(const torch::Tensor& x, const torch::Tensor& bias,
                               const torch::Tensor& residual, double prob) {
  return residual + torch::dropout(x + bias, prob, /*train=*/true);
}

torch::Tensor as_leaf(const torch::Tensor& t) {
  return t.detach().requires_grad_(torch::GradMode::is_enabled());
}

}  // namespace

std::vector<torch::Tensor> LayerWeights::all() const {
  return {ln1_w, ln1_b, qkv_w, qkv_b, proj_w, proj_b, ln2_w, ln2_b, fc1_w, fc1_b, fc2_w, fc2_b};
}

std::vector<std::pair<std::string, std::vector<std::int64_t>>> layer_param_shapes(const LayerDims& d) {
  const std::int64_t h = d.h, P = d.attn_width(), f = d.ffn;
  return {{"input_layernorm.weight", {h}},
          {"input_layernorm.bias", {h}},
          {"attention.query_key_value.weight", {3 * P, h}},
          {"attention.query_key_value.bias", {3 * P}},
          {"attention.dense.weight", {h, P}},
          {"attention.dense.bias", {h}},
          {"post_attention_layernorm.weight", {h}},
          {"post_attention_layernorm.bias", {h}},
          {"mlp.dense_h_to_4h.weight", {f, h}},
          {"mlp.dense_h_to_4h.bias", {f}},
          {"mlp.dense_4h_to_h.weight", {h, f}},
          {"mlp.dense_4h_to_h.bias", {h}}};
}

LayerWeights bind_layer_weights(const std::vector<torch::Tensor>& t) {
  TRAINSIM_CHECK(t.size() == 12, "bind_layer_weights: a layer has 12 parameter tensors, got " +
                                     std::to_string(t.size()));
  LayerWeights w;
  w.ln1_w = t[0], w.ln1_b = t[1], w.qkv_w = t[2], w.qkv_b = t[3], w.proj_w = t[4], w.proj_b = t[5];
  w.ln2_w = t[6], w.ln2_b = t[7], w.fc1_w = t[8], w.fc1_b = t[9], w.fc2_w = t[10], w.fc2_b = t[11];
  return w;
}

void init_layer_weights(LayerWeights& w, std::int64_t num_layers, torch::Generator& gen) {
  torch::NoGradGuard no_grad;
  const double scaled_std = kInitStd / std::sqrt(2.0 * static_cast<double>(num_layers));
  auto normal = [&](torch::Tensor& t, double std) {
    t.copy_(torch::empty(t.sizes(), torch::kFloat32).normal_(0.0, std, gen));
  };
  w.ln1_w.fill_(1.0), w.ln1_b.zero_(), w.ln2_w.fill_(1.0), w.ln2_b.zero_();
  normal(w.qkv_w, kInitStd), w.qkv_b.zero_();
  normal(w.proj_w, scaled_std), w.proj_b.zero_();
  normal(w.fc1_w, kInitStd), w.fc1_b.zero_();
  normal(w.fc2_w, scaled_std), w.fc2_b.zero_();
}

torch::Tensor causal_mask(std::int64_t s, const torch::TensorOptions& options) {
  return torch::triu(torch::ones({s, s}, options.dtype(torch::kBool)), /*diagonal=*/1);
}

std::int64_t BlockState::bytes() const {
  std::int64_t total = 0;
  for (const torch::Tensor* t : {&input, &output, &qkv, &ctx_leaf})
    if (t->defined()) total += static_cast<std::int64_t>(t->nbytes());
  return total;
}

BlockState attn_forward(const LayerWeights& w, const torch::Tensor& input, const torch::Tensor& mask,
                        const LayerDims& d, const Dropout& p, bool selective) {
  BlockState st;
  st.input = as_leaf(input);
  st.selective = selective && torch::GradMode::is_enabled();
  const torch::Tensor ln =
      torch::layer_norm(st.input, {d.h}, w.ln1_w, w.ln1_b, kLayerNormEps, /*cudnn_enable=*/true);
  const torch::Tensor qkv = torch::linear(ln, w.qkv_w, w.qkv_b);  // [s, b, 3P]
  torch::Tensor ctx;
  if (st.selective) {
    {
      torch::NoGradGuard no_grad;
      ctx = core_attention(qkv, mask, d, p);
    }
    st.qkv = qkv;
    st.ctx_leaf = ctx.requires_grad_(true);
  } else {
    ctx = core_attention(qkv, mask, d, p);
  }
  const torch::Tensor proj = torch::linear(ctx, w.proj_w);  // skip_bias_add
  st.output = bias_dropout_add(proj, w.proj_b, st.input, p.hidden);
  return st;
}

BlockState mlp_forward(const LayerWeights& w, const torch::Tensor& input, const LayerDims& d,
                       const Dropout& p) {
  BlockState st;
  st.input = as_leaf(input);
  const torch::Tensor ln =
      torch::layer_norm(st.input, {d.h}, w.ln2_w, w.ln2_b, kLayerNormEps, /*cudnn_enable=*/true);
  const torch::Tensor fc1 = torch::linear(ln, w.fc1_w);             // skip_bias_add
  const torch::Tensor act = torch::gelu(fc1 + w.fc1_b, "tanh");     // Megatron bias_gelu (tanh)
  const torch::Tensor fc2 = torch::linear(act, w.fc2_w);            // skip_bias_add
  st.output = bias_dropout_add(fc2, w.fc2_b, st.input, p.hidden);
  return st;
}

torch::Tensor block_backward(BlockState& st, const torch::Tensor& grad_output,
                             const torch::Tensor& mask, const LayerDims& d, const Dropout& p) {
  TRAINSIM_CHECK(st.output.defined() && st.output.requires_grad(),
                 "block_backward: the block's forward ran without autograd state");
  torch::autograd::backward({st.output}, {grad_output});
  if (st.selective) {
    // Recompute the core attention from the saved QKV output, then back-propagate through it
    // and through LayerNorm + QKV.
    const torch::Tensor qkv_leaf = st.qkv.detach().requires_grad_(true);
    const torch::Tensor ctx = core_attention(qkv_leaf, mask, d, p);
    torch::autograd::backward({ctx}, {st.ctx_leaf.grad()});
    torch::autograd::backward({st.qkv}, {qkv_leaf.grad()});
  }
  torch::Tensor grad_input = st.input.grad();
  st = BlockState{};
  return grad_input;
}

torch::Tensor embed_forward(const torch::Tensor& word, const torch::Tensor& pos,
                            const torch::Tensor& tokens, const LayerDims& d, const Dropout& p) {
  torch::Tensor words;
  if (d.tp > 1) {
    // VocabParallelEmbedding: ids outside this rank's rows are looked up as 0 and zeroed.
    const torch::Tensor outside = (tokens < 0).logical_or(tokens >= d.vocab);
    words = torch::embedding(word, tokens.masked_fill(outside, 0));
    words = words.masked_fill(outside.unsqueeze(-1), 0.0);
  } else {
    words = torch::embedding(word, tokens);  // [b, s, h]
  }
  if (pos.defined())  // learned absolute positions (none with RoPE)
    words = words + torch::embedding(pos, torch::arange(tokens.size(1), tokens.options()));  // [s, h]
  const torch::Tensor emb = p.hidden > 0 ? torch::dropout(words, p.hidden, /*train=*/true) : words;
  return emb.transpose(0, 1).contiguous();  // [s, b, h]
}

torch::Tensor logits_loss_forward(const torch::Tensor& input, const torch::Tensor& ln_w,
                                  const torch::Tensor& ln_b, const torch::Tensor& word,
                                  const torch::Tensor& labels, double loss_scale) {
  const std::int64_t h = input.size(2);
  const torch::Tensor ln = ln_b.defined()
                               ? torch::layer_norm(input, {h}, ln_w, ln_b, kLayerNormEps, true)
                               : rms_norm(input, ln_w);  // RMSNorm: no bias
  const torch::Tensor x = ln.transpose(0, 1).contiguous();  // [b, s, h]
  const std::int64_t vocab = word.size(0);
  // Logits in fp32 (or wider) for the loss, as Megatron casts them before the cross entropy.
  const torch::Tensor logits = torch::linear(x, word).view({-1, vocab});
  const torch::Tensor loss = FusedCrossEntropy::apply(
      logits.to(at::promote_types(logits.scalar_type(), torch::kFloat32)), labels.reshape(-1));
  return loss.mean() * loss_scale;
}

}  // namespace trainsim::hw
