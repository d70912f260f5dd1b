// Megatron-Core's TransformerLayer as LibTorch calls; see core_layer.h for the kernels of each
// block.
#include "hw_backend/core_layer.h"

#include <cmath>
#include <limits>

#include <torch/version.h>

#include "models/errors.h"

namespace trainsim::hw {
namespace {

constexpr double kInitStd = 0.02;        // Megatron-Core TransformerConfig.init_method_std
constexpr double kRotaryBase = 10000.0;  // Megatron-Core RotaryEmbedding rotary_base default

torch::Tensor as_leaf(const torch::Tensor& t) {
  return t.detach().requires_grad_(torch::GradMode::is_enabled());
}

torch::Tensor norm(const torch::Tensor& x, const torch::Tensor& w, const torch::Tensor& b,
                   bool rms) {
  if (rms) return rms_norm(x, w);
  return torch::layer_norm(x, {x.size(-1)}, w, b, kLayerNormEps, /*cudnn_enable=*/true);
}

torch::Tensor linear(const CoreWeights& w, const std::string& name, const torch::Tensor& x,
                     const CoreLayerSpec& c) {
  return gemm_linear(x, w.at(name + ".weight"), w.get(name + ".bias"), c.fp8);
}

/// rotate_half(x) = cat(-x2, x1) (Megatron-Core rope_utils._rotate_half, non-interleaved).
torch::Tensor rotate_half(const torch::Tensor& x) {
  const auto halves = x.chunk(2, -1);
  return torch::cat({-halves[1], halves[0]}, -1);
}

torch::Tensor apply_rope(const torch::Tensor& x, const torch::Tensor& cos, const torch::Tensor& sin) {
  return x * cos + rotate_half(x) * sin;
}

/// Residual + dropout(x): Megatron-Core's bias-dropout-add (the bias folded into the linear).
torch::Tensor dropout_add(const torch::Tensor& x, const torch::Tensor& residual, double p) {
  return residual + (p > 0 ? torch::dropout(x, p, /*train=*/true) : x);
}

/// RMSNorm as one autograd function with the fused kernel's saved state (Transformer Engine's
/// rmsnorm_fwd and Apex's FusedRMSNormAffineFunction save the input, the weight and the
/// per-row 1 / rms): y = x rstd w, rstd = 1 / sqrt(mean(x^2) + eps) in fp32; backward
/// x^ = x rstd, dw = sum over rows of dy x^, dx = rstd (dy w - x^ mean(dy w x^)). The
/// composite expression would keep x^2 and x rstd as well (2 s b h more per norm).
class FusedRmsNorm : public torch::autograd::Function<FusedRmsNorm> {
 public:
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& x,
                               const torch::Tensor& w, double eps) {
    const torch::Tensor xf = x.to(at::promote_types(x.scalar_type(), torch::kFloat32));
    const torch::Tensor rstd = torch::rsqrt(xf.pow(2).mean(-1, /*keepdim=*/true) + eps);
    ctx->save_for_backward({x, w, rstd});
    return (xf * rstd).to(x.scalar_type()) * w;
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const torch::Tensor &x = saved[0], &w = saved[1], &rstd = saved[2];
    const auto acc = rstd.scalar_type();
    const torch::Tensor xhat = x.to(acc) * rstd;
    const torch::Tensor dy = grads[0].to(acc);
    const torch::Tensor dxhat = dy * w.to(acc);
    const torch::Tensor dx = rstd * (dxhat - xhat * (dxhat * xhat).mean(-1, /*keepdim=*/true));
    const torch::Tensor dw = (dy * xhat).reshape({-1, x.size(-1)}).sum(0);
    return {dx.to(x.scalar_type()), dw.to(w.scalar_type()), torch::Tensor()};
  }
};

/// SwiGLU as one autograd function with Megatron-Core's fused kernel's saved state
/// (megatron/core/fusions/fused_bias_swiglu.py SwiGLUFunction saves only its input, the fc1
/// output [.., 2 f]): y = silu(a) u for [a, u] = input; backward with s = sigmoid(a):
/// da = dy u s (1 + a (1 - s)), du = dy silu(a). The composite silu(a) * u would keep silu(a)
/// as well (s b f more per MLP).
///
/// With routing probabilities `probs` [rows, 1] (an MoE expert's token copies), the weighted
/// form y = silu(a) u p of Megatron-Core's weighted_bias_swiglu_impl (the experts apply the
/// probabilities in the activation, activation_func_with_probs): it saves the input and p;
/// dp = rowsum(dy silu(a) u), and dy p flows into da, du.
/// The SwiGLU backward of both forms: d[a, u] (and dp where `probs` is defined).
torch::autograd::variable_list swiglu_backward(const torch::Tensor& y, const torch::Tensor& probs,
                                               const torch::Tensor& grad) {
  // Written into one [.., 2 f] output in place, with sigmoid(a) the only other buffer, as a
  // fused kernel writes its output alone (the composite expression would hold several s b f
  // intermediates at once).
  const auto parts = y.chunk(2, -1);
  const torch::Tensor &a = parts[0], &u = parts[1];
  const std::int64_t f = a.size(-1);
  const torch::Tensor sig = torch::sigmoid(a);
  torch::Tensor out = torch::empty_like(y);
  torch::Tensor da = out.narrow(-1, 0, f), du = out.narrow(-1, f, f);
  torch::mul_out(du, a, sig);  // silu(a)
  torch::Tensor dprobs;
  if (probs.defined()) dprobs = (grad * du * u).sum(-1, /*keepdim=*/true);
  torch::mul_out(da, grad, u);
  if (probs.defined()) da.mul_(probs), du.mul_(grad).mul_(probs);
  else du.mul_(grad);
  // da = dy u s (1 + a (1 - s)), with dy = grad p
  da.mul_(sig).mul_(torch::ones_like(sig).sub_(sig).mul_(a).add_(1));
  if (!probs.defined()) return {out};
  return {out, dprobs};
}

class FusedSwiglu : public torch::autograd::Function<FusedSwiglu> {
 public:
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& y) {
    ctx->save_for_backward({y});
    const auto parts = y.chunk(2, -1);
    return torch::silu(parts[0]) * parts[1];
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    return swiglu_backward(ctx->get_saved_variables()[0], torch::Tensor(), grads[0]);
  }
};

class FusedWeightedSwiglu : public torch::autograd::Function<FusedWeightedSwiglu> {
 public:
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& y,
                               const torch::Tensor& probs) {
    ctx->save_for_backward({y, probs});
    const auto parts = y.chunk(2, -1);
    return torch::silu(parts[0]) * parts[1] * probs;
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    return swiglu_backward(saved[0], saved[1], grads[0]);
  }
};

/// The explicit math path of attention (LibTorch 1.13 has no scaled_dot_product_attention):
/// q [b, a, s, d] against k, v [b, a, s, d] (repeated per query group) with `mask` [s, s]
/// (true = masked). Autograd saves what its ops need: the scores' softmax [b, a, s, s] and the
/// repeated k and v. Used where attention dropout is on (the fused function below has none).
torch::Tensor attention_math(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                             const torch::Tensor& mask, double dropout_p) {
  const double scale = 1.0 / std::sqrt(static_cast<double>(q.size(-1)));
  torch::Tensor scores = torch::matmul(q, k.transpose(-2, -1)) * scale;
  scores = scores.to(at::promote_types(scores.scalar_type(), torch::kFloat32))
               .masked_fill(mask, -std::numeric_limits<float>::infinity());
  torch::Tensor probs = torch::softmax(scores, -1).to(q.scalar_type());
  if (dropout_p > 0) probs = torch::dropout(probs, dropout_p, /*train=*/true);
  return torch::matmul(probs, v);
}

/// Fused attention as an autograd function with FlashAttention's saved state (Dao, "Flash-
/// Attention-2", 2023, Algorithms 1 and 2; Transformer Engine's FusedAttnFunc saves q, k, v, out
/// and the softmax statistics): the forward keeps q [s, b, a, d], k, v [s, b, g, d] (GQA: not
/// repeated), the output [s, b, a, d] and the log-sum-exp of each query row (fp32 [b, a, s]);
/// the backward recomputes the probabilities P = exp(Q K^T scale - lse) and forms
/// dV = P^T dO, dS = P (dO V^T - rowsum(dO O)), dQ = dS K scale, dK = dS^T Q scale, summing
/// the a/g query heads of each group into their key and value. The arithmetic is the math
/// path's; what stays alive between forward and backward is the fused kernel's, which
/// models/memory/memory_model.cpp counts for attention_backend flash / fused (docs/
/// validation.md "CPU validation of the small scenarios").
class FusedAttention : public torch::autograd::Function<FusedAttention> {
 public:
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& q,
                               const torch::Tensor& k, const torch::Tensor& v,
                               const torch::Tensor& mask) {
    const auto [qh, kh, vh] = grouped(q, k, v);
    const torch::Tensor scores = masked_scores(qh, kh, mask, q.size(2) / k.size(2));
    const torch::Tensor lse = scores.logsumexp(-1, /*keepdim=*/true);  // [b, g, per s, 1]
    const torch::Tensor probs = (scores - lse).exp().to(q.scalar_type());
    const std::int64_t s = q.size(0), b = q.size(1), a = q.size(2), d = q.size(3);
    // [b, g, per s, d] -> [b, a, s, d] -> [s, b, a, d]: the layout linear_proj reads.
    const torch::Tensor out =
        torch::matmul(probs, vh).view({b, a, s, d}).permute({2, 0, 1, 3}).contiguous();
    ctx->save_for_backward({q, k, v, out, lse});
    ctx->saved_data["mask"] = mask;
    return out;
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const torch::Tensor &q = saved[0], &k = saved[1], &v = saved[2], &out = saved[3], &lse = saved[4];
    const torch::Tensor mask = ctx->saved_data["mask"].toTensor();
    const std::int64_t s = q.size(0), b = q.size(1), a = q.size(2), d = q.size(3), g = k.size(2);
    const std::int64_t per = a / g;
    const double scale = 1.0 / std::sqrt(static_cast<double>(d));
    const auto [qh, kh, vh] = grouped(q, k, v);
    auto rows = [&](const torch::Tensor& t) {  // [s, b, a, d] -> [b, g, per s, d]
      return t.permute({1, 2, 0, 3}).reshape({b, g, per * s, d});
    };
    const torch::Tensor dout = rows(grads[0]), o = rows(out);
    const auto acc = at::promote_types(q.scalar_type(), torch::kFloat32);
    const torch::Tensor p = (masked_scores(qh, kh, mask, per) - lse).exp();  // [b, g, per s, s]
    const torch::Tensor dv = torch::matmul(p.to(q.scalar_type()).transpose(-2, -1), dout);
    const torch::Tensor dp = torch::matmul(dout, vh.transpose(-2, -1)).to(acc);
    const torch::Tensor delta = (dout.to(acc) * o.to(acc)).sum(-1, /*keepdim=*/true);
    const torch::Tensor ds = (p * (dp - delta)).to(q.scalar_type());
    const torch::Tensor dq = torch::matmul(ds, kh) * scale;                    // [b, g, per s, d]
    const torch::Tensor dk = torch::matmul(ds.transpose(-2, -1), qh) * scale;  // [b, g, s, d]
    auto seq_first = [](const torch::Tensor& t) { return t.permute({2, 0, 1, 3}).contiguous(); };
    return {seq_first(dq.view({b, a, s, d})), seq_first(dk), seq_first(dv), torch::Tensor()};
  }

 private:
  /// q [s, b, a, d] -> [b, g, per s, d] (the a/g heads of a group stacked along the rows);
  /// k, v [s, b, g, d] -> [b, g, s, d].
  static std::tuple<torch::Tensor, torch::Tensor, torch::Tensor> grouped(
      const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v) {
    const std::int64_t s = q.size(0), b = q.size(1), a = q.size(2), d = q.size(3), g = k.size(2);
    return {q.permute({1, 2, 0, 3}).reshape({b, g, (a / g) * s, d}), k.permute({1, 2, 0, 3}),
            v.permute({1, 2, 0, 3})};
  }
  /// Q K^T scale, masked (-inf where `mask` [s, s] is true), in fp32 or wider: [b, g, per s, s].
  static torch::Tensor masked_scores(const torch::Tensor& qh, const torch::Tensor& kh,
                                     const torch::Tensor& mask, std::int64_t per) {
    const double scale = 1.0 / std::sqrt(static_cast<double>(qh.size(-1)));
    torch::Tensor sc = torch::matmul(qh, kh.transpose(-2, -1)) * scale;
    sc = sc.to(at::promote_types(sc.scalar_type(), torch::kFloat32));
    const std::int64_t b = sc.size(0), g = sc.size(1), s = kh.size(2);
    return sc.view({b, g, per, s, s})
        .masked_fill(mask, -std::numeric_limits<float>::infinity())
        .view({b, g, per * s, s});
  }
};

/// Attention of q [s, b, a, d] against k, v [s, b, g, d] (g query groups of a/g heads each)
/// with `mask` [s, s] (true = masked; `window` 0: the causal one) -> [s, b, a, d].
torch::Tensor attention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                        const torch::Tensor& mask, std::int64_t window, double dropout_p) {
  const std::int64_t per = q.size(2) / k.size(2);
  // [s, b, n, d] <-> [b, n, s, d]; keys and values repeated for the a/g queries of each group.
  auto heads_first = [](const torch::Tensor& t) { return t.permute({1, 2, 0, 3}); };
  auto seq_first = [](const torch::Tensor& t) { return t.permute({2, 0, 1, 3}); };
#if TORCH_VERSION_MAJOR >= 2
  const torch::Tensor qh = heads_first(q), kh = heads_first(k).repeat_interleave(per, 1),
                      vh = heads_first(v).repeat_interleave(per, 1);
  // Causal: is_causal lets LibTorch pick its flash kernel; a window needs the explicit mask
  // (true = attend), which the memory-efficient or math backends take.
  if (window == 0)
    return seq_first(at::scaled_dot_product_attention(qh, kh, vh, {}, dropout_p, /*is_causal=*/true));
  return seq_first(at::scaled_dot_product_attention(qh, kh, vh, mask.logical_not(), dropout_p, false));
#else
  (void)window;
  // LibTorch 1.13: the math path's arithmetic with the fused kernel's saved state; with
  // attention dropout (whose mask a fused kernel regenerates from its RNG state) the plain
  // math path, which keeps the probabilities.
  if (dropout_p == 0) return FusedAttention::apply(q, k, v, mask);
  return seq_first(attention_math(heads_first(q), heads_first(k).repeat_interleave(per, 1),
                                  heads_first(v).repeat_interleave(per, 1), mask, dropout_p));
#endif
}

/// A gated or plain MLP: fc1 -> SwiGLU (silu(first half) * second half, Megatron-Core's
/// glu with bias_swiglu_impl), GPT-OSS's clamped quick-GeGLU (Megatron-Core mlp.py glu with
/// activation_func_clamp_value and glu_linear_offset; activations.py quick_gelu
/// x * sigmoid(1.702 x)) or GeLU -> fc2.
/// The activation between fc1 and fc2 of mlp (below) on fc1's output `y`, weighted by `probs`
/// where defined (an MoE expert's token copies).
torch::Tensor activation(torch::Tensor y, const CoreLayerSpec& c, const torch::Tensor& probs) {
  if (c.swiglu && c.quick_geglu) {
    const auto parts = y.chunk(2, -1);
    torch::Tensor gate = parts[0], lin = parts[1];
    if (c.glu_clamp > 0) {
      gate = gate.clamp_max(c.glu_clamp);
      lin = lin.clamp(-c.glu_clamp, c.glu_clamp);
    }
    y = gate * torch::sigmoid(1.702 * gate) * (lin + c.glu_offset);
    if (probs.defined()) y = y * probs;
  } else if (c.swiglu && c.glu_offset == 0) {
    y = probs.defined() ? FusedWeightedSwiglu::apply(y, probs) : FusedSwiglu::apply(y);
  } else if (c.swiglu) {
    const auto parts = y.chunk(2, -1);
    y = torch::silu(parts[0]) * (parts[1] + c.glu_offset);
    if (probs.defined()) y = y * probs;
  } else {
    y = torch::gelu(y, "tanh");
    if (probs.defined()) y = y * probs;
  }
  return y;
}

torch::Tensor mlp(const torch::Tensor& x, const torch::Tensor& fc1_w, const torch::Tensor& fc1_b,
                  const torch::Tensor& fc2_w, const torch::Tensor& fc2_b, const CoreLayerSpec& c,
                  const torch::Tensor& probs = torch::Tensor()) {
  const torch::Tensor y = activation(gemm_linear(x, fc1_w, fc1_b, c.fp8), c, probs);
  return gemm_linear(y, fc2_w, fc2_b, c.fp8);
}

/// The MoE layer's experts on the norm output `x` [T, h] -> [T, h].
torch::Tensor moe_experts(const CoreWeights& w, const torch::Tensor& x, const CoreLayerSpec& c,
                          MoeStats* stats) {
  const std::int64_t T = x.size(0), k = c.topk, E = c.experts_local;
  // Router: logits in fp32, top-k, softmax over the k (moe_router_pre_softmax off).
  const torch::Tensor logits = torch::linear(x, w.at("router.weight"))
                                  .to(at::promote_types(x.scalar_type(), torch::kFloat32));
  const auto top = logits.topk(k, -1);
  const torch::Tensor probs = torch::softmax(std::get<0>(top), -1).to(x.scalar_type());  // [T, k]
  // The experts of absent expert-parallel ranks fold onto this rank's: global id e runs as local
  // expert e mod E (same token copies per rank as the dispatch delivers, T k on average).
  const torch::Tensor local = std::get<1>(top).remainder(E).reshape({-1});  // [T k]
  // Sort-based permutation (Megatron-Core moe_utils.permute): token copies grouped by expert.
  const torch::Tensor order = std::get<1>(local.sort(/*stable=*/true, 0, false));
  const torch::Tensor token_of = order.div(k, "floor");
  const torch::Tensor permuted = x.index_select(0, token_of);  // [T k, h]
  // The probability of each token copy, applied in the experts' activation (Megatron-Core
  // experts.py activation_func_with_probs): [T k, 1] in expert order.
  const torch::Tensor permuted_probs = probs.reshape({-1}).index_select(0, order).unsqueeze(1);
  // Tokens per expert to the host: the split sizes of the expert GEMMs (a D2H sync on CUDA).
  const torch::Tensor counts = torch::bincount(local, {}, E).to(torch::kCPU);
  if (stats) ++stats->d2h_copies;
  const auto* n = counts.data_ptr<std::int64_t>();
  const torch::Tensor fc1 = w.at("experts.fc1.weight"), fc2 = w.at("experts.fc2.weight");
  torch::Tensor y;
  if (c.grouped_gemm && grouped_gemm_available(permuted, fc1.size(2), fc1.size(1)) &&
      grouped_gemm_available(permuted, fc2.size(2), fc2.size(1))) {
    // TEGroupedMLP: one grouped GEMM per linear over all local experts (gemm_ops.h).
    const std::vector<std::int64_t> rows(n, n + E);
    y = grouped_linear(activation(grouped_linear(permuted, fc1, rows), c, permuted_probs), fc2, rows);
    if (stats) stats->expert_gemms += 2, stats->grouped = true;
  } else {
    std::vector<torch::Tensor> outs;
    std::int64_t at = 0;
    for (std::int64_t e = 0; e < E; ++e) {
      if (n[e] == 0) continue;
      outs.push_back(mlp(permuted.narrow(0, at, n[e]), fc1[e], {}, fc2[e], {}, c,
                         permuted_probs.narrow(0, at, n[e])));
      at += n[e];
      if (stats) stats->expert_gemms += 2;
    }
    TRAINSIM_CHECK(at == T * k, "replay: MoE permutation lost token copies");
    y = torch::cat(outs, 0);
  }
  // Unpermute: sum each token's k copies (weighted in the activation) back in place.
  // scatter_add keeps only its index map for the backward (Megatron-Core moe_utils.unpermute;
  // index_add would keep `y` too).
  torch::Tensor out = torch::zeros({T, x.size(1)}, x.options())
                          .scatter_add(0, token_of.unsqueeze(1).expand({-1, x.size(1)}), y);
  if (c.shared_ffn > 0)
    out = out + mlp(x, w.at("shared.fc1.weight"), {}, w.at("shared.fc2.weight"), {}, c);
  return out;
}

}  // namespace

bool have_sdpa() { return TORCH_VERSION_MAJOR >= 2; }

torch::Tensor rms_norm(const torch::Tensor& x, const torch::Tensor& w, double eps) {
  return FusedRmsNorm::apply(x, w, eps);
}

std::vector<std::pair<std::string, std::vector<std::int64_t>>> core_param_shapes(const CoreLayerSpec& c) {
  std::vector<std::pair<std::string, std::vector<std::int64_t>>> out;
  const std::int64_t h = c.h, d = c.head_dim, P = c.heads * d, qkv = (c.heads + 2 * c.kv_heads) * d;
  auto add_norm = [&](const std::string& name, std::int64_t n) {
    out.push_back({name + ".weight", {n}});
    if (!c.rmsnorm) out.push_back({name + ".bias", {n}});
  };
  auto add_linear = [&](const std::string& name, std::int64_t o, std::int64_t i, bool bias) {
    out.push_back({name + ".weight", {o, i}});
    if (bias) out.push_back({name + ".bias", {o}});
  };
  add_norm("input_layernorm", h);
  add_linear("linear_qkv", qkv, h, c.bias);
  if (c.qk_norm) add_norm("q_layernorm", d), add_norm("k_layernorm", d);
  add_linear("linear_proj", h, P, c.bias);
  add_norm("pre_mlp_layernorm", h);
  const std::int64_t gate = c.swiglu ? 2 : 1;
  if (!c.moe) {
    add_linear("linear_fc1", gate * c.ffn, h, c.bias);
    add_linear("linear_fc2", h, c.ffn, c.bias);
    return out;
  }
  out.push_back({"router.weight", {c.num_experts, h}});
  out.push_back({"experts.fc1.weight", {c.experts_local, gate * c.expert_ffn, h}});
  out.push_back({"experts.fc2.weight", {c.experts_local, h, c.expert_ffn}});
  if (c.shared_ffn > 0) {
    out.push_back({"shared.fc1.weight", {gate * c.shared_ffn, h}});
    out.push_back({"shared.fc2.weight", {h, c.shared_ffn}});
  }
  return out;
}

void init_core_weights(CoreWeights& w, const CoreLayerSpec& c, std::int64_t num_layers,
                       torch::Generator& gen) {
  torch::NoGradGuard no_grad;
  const double out_std = kInitStd / std::sqrt(2.0 * static_cast<double>(num_layers));
  for (auto& [name, t] : w.t) {
    const bool is_norm = name.find("layernorm") != std::string::npos;
    const bool bias = name.size() > 5 && name.compare(name.size() - 5, 5, ".bias") == 0;
    if (is_norm && !bias) {
      t.fill_(1.0);
    } else if (bias) {
      t.zero_();
    } else {
      const bool output = name.find("proj") != std::string::npos || name.find("fc2") != std::string::npos;
      t.copy_(torch::empty(t.sizes(), torch::kFloat32).normal_(0.0, output ? out_std : kInitStd, gen));
    }
  }
  (void)c;
}

std::pair<torch::Tensor, torch::Tensor> rope_tables(std::int64_t s, std::int64_t head_dim,
                                                    const torch::TensorOptions& options) {
  auto f64 = torch::TensorOptions().dtype(torch::kFloat64);  // tables in fp64, then cast
  const torch::Tensor inv =
      1.0 / torch::pow(kRotaryBase, torch::arange(0, head_dim, 2, f64) / double(head_dim));
  const torch::Tensor freqs = torch::outer(torch::arange(s, f64), inv);  // [s, d/2]
  const torch::Tensor emb = torch::cat({freqs, freqs}, -1).view({s, 1, 1, head_dim});
  return {emb.cos().to(options), emb.sin().to(options)};
}

torch::Tensor window_mask(std::int64_t s, std::int64_t window, const torch::TensorOptions& options) {
  const auto o = options.dtype(torch::kBool);
  torch::Tensor m = torch::triu(torch::ones({s, s}, o), 1);
  if (window > 0) m = m.logical_or(torch::tril(torch::ones({s, s}, o), -window - 1));
  return m;
}

BlockState core_attn_forward(const CoreWeights& w, const torch::Tensor& input, const CoreLayerSpec& c,
                             const torch::Tensor& mask, const torch::Tensor& cos,
                             const torch::Tensor& sin, const Dropout& p) {
  BlockState st;
  st.input = as_leaf(input);
  const std::int64_t s = input.size(0), b = input.size(1), d = c.head_dim, g = c.kv_heads;
  const std::int64_t per = c.heads / g;
  const torch::Tensor x =
      norm(st.input, w.at("input_layernorm.weight"), w.get("input_layernorm.bias"), c.rmsnorm);
  // [s, b, g, (a/g + 2) d] split into q [s, b, a, d], k, v [s, b, g, d].
  const auto parts = linear(w, "linear_qkv", x, c).view({s, b, g, (per + 2) * d}).split({per * d, d, d}, -1);
  // Separate contiguous q, k, v (the memory model counts Q, K and V as three tensors,
  // Korthikanti et al. Sec. 4.1): a strided view of the QKV output kept for the backward (by
  // the k norm or the attention) would hold the whole [s, b, (a + 2 g) d] buffer alive.
  torch::Tensor q = parts[0].reshape({s, b, c.heads, d}), k = parts[1].contiguous(),
                v = parts[2].contiguous();
  if (c.qk_norm) {
    q = norm(q, w.at("q_layernorm.weight"), w.get("q_layernorm.bias"), c.rmsnorm);
    k = norm(k, w.at("k_layernorm.weight"), w.get("k_layernorm.bias"), c.rmsnorm);
  }
  if (c.rope) q = apply_rope(q, cos, sin), k = apply_rope(k, cos, sin);
  const torch::Tensor ctx = attention(q, k, v, mask, c.window, p.attention);  // [s, b, a, d]
  const torch::Tensor flat = ctx.reshape({s, b, c.heads * d});  // a view of a contiguous ctx
  st.output = dropout_add(linear(w, "linear_proj", flat, c), st.input, p.hidden);
  return st;
}

BlockState core_mlp_forward(const CoreWeights& w, const torch::Tensor& input, const CoreLayerSpec& c,
                            const Dropout& p, MoeStats* stats) {
  BlockState st;
  st.input = as_leaf(input);
  const torch::Tensor x =
      norm(st.input, w.at("pre_mlp_layernorm.weight"), w.get("pre_mlp_layernorm.bias"), c.rmsnorm);
  torch::Tensor y;
  if (c.moe) {
    const std::int64_t s = x.size(0), b = x.size(1);
    y = moe_experts(w, x.reshape({s * b, c.h}), c, stats).view({s, b, c.h});
  } else {
    y = mlp(x, w.at("linear_fc1.weight"), w.get("linear_fc1.bias"), w.at("linear_fc2.weight"),
            w.get("linear_fc2.bias"), c);
  }
  st.output = dropout_add(y, st.input, p.hidden);
  return st;
}

}  // namespace trainsim::hw
