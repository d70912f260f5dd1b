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
/// FlashAttention's arithmetic on q [s, b, a, dq], k [s, b, g, dq], v [s, b, g, dv] (g query
/// groups of a/g heads; MLA: g = a and dv may differ from dq) with `mask` [s, s] (true =
/// masked), scale 1 / sqrt(dq): the forward (out [s, b, a, dv] and the fp32 log-sum-exp of
/// each query row [b, g, per s, 1]) and the backward from dO (Dao, "FlashAttention-2", 2023,
/// Algorithms 1 and 2): P = exp(Q K^T scale - lse), dV = P^T dO, dS = P (dO V^T -
/// rowsum(dO O)), dQ = dS K scale, dK = dS^T Q scale, the a/g query heads of each group summed
/// into their key and value.
struct Flash {
  static std::pair<torch::Tensor, torch::Tensor> forward(const torch::Tensor& q, const torch::Tensor& k,
                                                         const torch::Tensor& v,
                                                         const torch::Tensor& mask) {
    const auto [qh, kh, vh] = grouped(q, k, v);
    const torch::Tensor scores = masked_scores(qh, kh, mask, q.size(2) / k.size(2));
    const torch::Tensor lse = scores.logsumexp(-1, /*keepdim=*/true);  // [b, g, per s, 1]
    const torch::Tensor probs = (scores - lse).exp().to(q.scalar_type());
    const std::int64_t s = q.size(0), b = q.size(1), a = q.size(2), dv = v.size(3);
    // [b, g, per s, dv] -> [b, a, s, dv] -> [s, b, a, dv]: the layout linear_proj reads.
    const torch::Tensor out =
        torch::matmul(probs, vh).view({b, a, s, dv}).permute({2, 0, 1, 3}).contiguous();
    return {out, lse};
  }

  /// dq, dk, dv of the forward's `out` and `lse` for the output gradient `grad`.
  static torch::autograd::variable_list backward(const torch::Tensor& q, const torch::Tensor& k,
                                                 const torch::Tensor& v, const torch::Tensor& out,
                                                 const torch::Tensor& lse, const torch::Tensor& mask,
                                                 const torch::Tensor& grad) {
    const std::int64_t s = q.size(0), b = q.size(1), a = q.size(2), d = q.size(3), g = k.size(2);
    const std::int64_t per = a / g, dvh = v.size(3);
    const double scale = 1.0 / std::sqrt(static_cast<double>(d));
    const auto [qh, kh, vh] = grouped(q, k, v);
    auto rows = [&](const torch::Tensor& t) {  // [s, b, a, dv] -> [b, g, per s, dv]
      return t.permute({1, 2, 0, 3}).reshape({b, g, per * s, dvh});
    };
    const torch::Tensor dout = rows(grad), o = rows(out);
    const auto acc = at::promote_types(q.scalar_type(), torch::kFloat32);
    const torch::Tensor p = (masked_scores(qh, kh, mask, per) - lse).exp();  // [b, g, per s, s]
    const torch::Tensor dv = torch::matmul(p.to(q.scalar_type()).transpose(-2, -1), dout);
    const torch::Tensor dp = torch::matmul(dout, vh.transpose(-2, -1)).to(acc);
    const torch::Tensor delta = (dout.to(acc) * o.to(acc)).sum(-1, /*keepdim=*/true);
    const torch::Tensor ds = (p * (dp - delta)).to(q.scalar_type());
    const torch::Tensor dq = torch::matmul(ds, kh) * scale;                    // [b, g, per s, d]
    const torch::Tensor dk = torch::matmul(ds.transpose(-2, -1), qh) * scale;  // [b, g, s, d]
    auto seq_first = [](const torch::Tensor& t) { return t.permute({2, 0, 1, 3}).contiguous(); };
    return {seq_first(dq.view({b, a, s, d})), seq_first(dk), seq_first(dv)};
  }

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

/// Fused attention as an autograd function with FlashAttention's saved state (Transformer
/// Engine's FusedAttnFunc saves q, k, v, out and the softmax statistics): the forward keeps
/// q [s, b, a, d], k, v [s, b, g, d] (GQA: not repeated), the output and the log-sum-exp of
/// each query row (fp32 [b, a, s]); the backward recomputes the probabilities (Flash). The
/// arithmetic is the math path's; what stays alive between forward and backward is the fused
/// kernel's, which models/memory/memory_model.cpp counts for attention_backend flash / fused
/// (docs/validation.md "CPU validation of the small scenarios").
class FusedAttention : public torch::autograd::Function<FusedAttention> {
 public:
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& q,
                               const torch::Tensor& k, const torch::Tensor& v,
                               const torch::Tensor& mask) {
    auto [out, lse] = Flash::forward(q, k, v, mask);
    ctx->save_for_backward({q, k, v, out, lse});
    ctx->saved_data["mask"] = mask;
    return out;
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const torch::Tensor mask = ctx->saved_data["mask"].toTensor();
    auto g = Flash::backward(saved[0], saved[1], saved[2], saved[3], saved[4], mask, grads[0]);
    g.push_back(torch::Tensor());
    return g;
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

// ---------------------------------------------------------------- multi-head latent attention

/// MLA's latents as the up projections read them: the q latent (the input norm's output
/// without q_lora), the kv latent (before their norms) and the RoPE key k_pe [s, b, dr].
struct MlaLatents {
  torch::Tensor q, kv, k_pe;
};

/// The up-projection weights in one place (undefined where the layer has none).
struct MlaUpWeights {
  torch::Tensor q_norm_w, q_norm_b, q_up, kv_norm_w, kv_norm_b, kv_up;
};

MlaUpWeights mla_up_weights(const CoreWeights& w, const CoreLayerSpec& c) {
  MlaUpWeights u;
  if (c.latent_norm && c.q_lora > 0)
    u.q_norm_w = w.at("q_layernorm.weight"), u.q_norm_b = w.get("q_layernorm.bias");
  if (c.latent_norm) u.kv_norm_w = w.at("kv_layernorm.weight"), u.kv_norm_b = w.get("kv_layernorm.bias");
  u.q_up = w.at(c.q_lora > 0 ? "linear_q_up_proj.weight" : "linear_q_proj.weight");
  u.kv_up = w.at("linear_kv_up_proj.weight");
  return u;
}

/// The up projections (with their latents' norms) and RoPE: query [s, b, a, dn + dr], key
/// [s, b, a, dn + dr] (k_pe repeated per head), value [s, b, a, dv]; multi_latent_attention.py
/// qkv_up_proj_and_rope_apply (l.855-979).
std::tuple<torch::Tensor, torch::Tensor, torch::Tensor> mla_up(const MlaLatents& l, const MlaUpWeights& u,
                                                               const CoreLayerSpec& c,
                                                               const torch::Tensor& cos,
                                                               const torch::Tensor& sin) {
  const std::int64_t s = l.kv.size(0), b = l.kv.size(1), a = c.heads, dr = c.qk_rope;
  const std::int64_t dn = c.head_dim - dr;
  const torch::Tensor q_in = u.q_norm_w.defined() ? norm(l.q, u.q_norm_w, u.q_norm_b, c.rmsnorm) : l.q;
  const torch::Tensor kv_in = u.kv_norm_w.defined() ? norm(l.kv, u.kv_norm_w, u.kv_norm_b, c.rmsnorm) : l.kv;
  const auto q = torch::linear(q_in, u.q_up).view({s, b, a, dn + dr}).split({dn, dr}, -1);
  const auto kv = torch::linear(kv_in, u.kv_up).view({s, b, a, dn + c.v_dim}).split({dn, c.v_dim}, -1);
  const torch::Tensor q_pe = mla_rope(q[1], cos, sin);
  const torch::Tensor k_pe = mla_rope(l.k_pe.unsqueeze(2), cos, sin).expand({s, b, a, dr});
  return {torch::cat({q[0], q_pe}, -1), torch::cat({kv[0], k_pe}, -1), kv[1].contiguous()};
}

/// --recompute-modules mla_up_proj: the up projections and RoPE, then the fused attention, as
/// one autograd function whose saved state is the latents, the up-projection weights, the
/// attention output and its softmax statistics (Megatron-Core CheckpointWithoutOutput frees
/// q, k, v once the core attention has run, multi_latent_attention.py l.984-989); the backward
/// re-runs the up projections and RoPE (with autograd state), runs the attention backward
/// (Flash) and back-propagates dq, dk, dv through the re-run.
class MlaUpRerunAttention : public torch::autograd::Function<MlaUpRerunAttention> {
 public:
  /// The optional weights (latent norms) go in as optionals: an absent one is no input.
  using Opt = c10::optional<torch::Tensor>;
  static Opt opt(const torch::Tensor& t) { return t.defined() ? Opt(t) : Opt(); }
  static torch::Tensor get(const Opt& t) { return t.has_value() ? *t : torch::Tensor(); }

  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& q_lat,
                               const torch::Tensor& kv_lat, const torch::Tensor& k_pe,
                               const Opt& q_norm_w, const Opt& q_norm_b, const torch::Tensor& q_up,
                               const Opt& kv_norm_w, const Opt& kv_norm_b,
                               const torch::Tensor& kv_up, const torch::Tensor& mask,
                               const torch::Tensor& cos, const torch::Tensor& sin,
                               const CoreLayerSpec& c) {
    const MlaUpWeights u{get(q_norm_w), get(q_norm_b), q_up, get(kv_norm_w), get(kv_norm_b), kv_up};
    const auto [q, k, v] = mla_up({q_lat, kv_lat, k_pe}, u, c, cos, sin);
    auto [out, lse] = Flash::forward(q, k, v, mask);
    ctx->save_for_backward({q_lat, kv_lat, k_pe, u.q_norm_w, u.q_norm_b, q_up, u.kv_norm_w,
                            u.kv_norm_b, kv_up, out, lse});
    ctx->saved_data["mask"] = mask;
    ctx->saved_data["cos"] = cos;
    ctx->saved_data["sin"] = sin;
    ctx->saved_data["spec"] = std::vector<std::int64_t>{c.heads, c.head_dim, c.qk_rope, c.v_dim,
                                                        c.rmsnorm ? 1 : 0};
    return out;
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const auto spec = ctx->saved_data["spec"].toIntVector();
    CoreLayerSpec c;
    c.heads = spec[0], c.head_dim = spec[1], c.qk_rope = spec[2], c.v_dim = spec[3];
    c.rmsnorm = spec[4] != 0;
    // The re-run: fresh leaves for the inputs, so that autograd gives their gradients.
    torch::AutoGradMode grad_mode(true);
    std::vector<torch::Tensor> in(saved.begin(), saved.begin() + 9), leaves;
    for (torch::Tensor& t : in)
      if (t.defined()) t = t.detach().requires_grad_(true), leaves.push_back(t);
    const MlaUpWeights u{in[3], in[4], in[5], in[6], in[7], in[8]};
    const auto [q, k, v] = mla_up({in[0], in[1], in[2]}, u, c, ctx->saved_data["cos"].toTensor(),
                                  ctx->saved_data["sin"].toTensor());
    const auto d = Flash::backward(q.detach(), k.detach(), v.detach(), saved[9], saved[10],
                                   ctx->saved_data["mask"].toTensor(), grads[0]);
    const auto g = torch::autograd::grad({q, k, v}, leaves, {d[0], d[1], d[2]},
                                         /*retain_graph=*/false, /*create_graph=*/false,
                                         /*allow_unused=*/true);
    torch::autograd::variable_list out(13);
    std::size_t j = 0;
    for (std::size_t i = 0; i < in.size(); ++i)
      if (in[i].defined()) out[i] = g[j++];
    return out;
  }
};

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
                          MoeStats* stats, DeferredWgrad* deferred) {
  TRAINSIM_CHECK(!c.delay_wgrad || deferred, "replay: delay_wgrad_compute without a wgrad store");
  const std::int64_t T = x.size(0), k = c.topk, E = c.experts_local;
  // Router: logits in fp32, top-k, softmax over the k (moe_router_pre_softmax off).
  const torch::Tensor logits = torch::linear(x, w.at("router.weight"))
                                  .to(at::promote_types(x.scalar_type(), torch::kFloat32));
  const torch::Tensor bias = w.get("router.expert_bias");
  auto [top_probs, top_idx] = route_topk(logits, c, bias);
  const auto top = std::make_tuple(top_probs, top_idx);
  const torch::Tensor probs = top_probs.to(x.scalar_type());  // [T, k]
  // The token copies the experts process: (token, global expert, probability). Dropless: the
  // T k top-k choices, token-major.
  torch::Tensor pair_token = torch::arange(T, x.options().dtype(torch::kInt64)).repeat_interleave(k);
  torch::Tensor pair_expert = std::get<1>(top).reshape({-1}), pair_prob = probs.reshape({-1});
  torch::Tensor dropped;  // copies over capacity, counted with the token counts
  if (c.capacity_factor > 0) {
    // Token dropping on the [T, num_experts] routing map (router.py TopKRouter.routing):
    // the kept copies in token-major order, padding copies with probability 0.
    const auto i64 = x.options().dtype(torch::kInt64);
    const torch::Tensor map = torch::zeros({T, c.num_experts}, x.options().dtype(torch::kBool))
                                  .scatter(1, std::get<1>(top), true);
    const torch::Tensor dense = torch::zeros({T, c.num_experts}, probs.options()).scatter(1, std::get<1>(top), probs);
    const auto [fprobs, fmap] =
        apply_token_dropping(dense, map, k, c.capacity_factor, c.drop_by_position, c.pad_to_capacity);
    const torch::Tensor kept = fmap.nonzero();  // [N, 2] (token, expert), token-major
    pair_token = kept.select(1, 0), pair_expert = kept.select(1, 1);
    pair_prob = fprobs.index({pair_token, pair_expert});
    dropped = map.logical_and(fmap.logical_not()).sum().to(i64).reshape({1});
    if (stats) stats->capacity = expert_capacity(T, k, c.num_experts, c.capacity_factor);
  }
  // The experts of absent expert-parallel ranks fold onto this rank's: global id e runs as local
  // expert e mod E (same token copies per rank as the dispatch delivers, T k on average).
  const torch::Tensor local = pair_expert.remainder(E);  // [N]
  const std::int64_t N = local.size(0);
  // Sort-based permutation (Megatron-Core moe_utils.permute): token copies grouped by expert.
  const torch::Tensor order = std::get<1>(local.sort(/*stable=*/true, 0, false));
  const torch::Tensor token_of = pair_token.index_select(0, order);
  const torch::Tensor permuted = x.index_select(0, token_of);  // [N, h]
  // The probability of each token copy, applied in the experts' activation (Megatron-Core
  // experts.py activation_func_with_probs): [N, 1] in expert order.
  const torch::Tensor permuted_probs = pair_prob.index_select(0, order).unsqueeze(1);
  // Tokens per expert to the host: the split sizes of the expert GEMMs (a D2H sync on CUDA);
  // with token dropping the dropped count rides along in the same copy.
  torch::Tensor counts = torch::bincount(local, {}, E);
  if (dropped.defined()) counts = torch::cat({counts, dropped});
  counts = counts.to(torch::kCPU);
  if (stats) ++stats->d2h_copies;
  const auto* n = counts.data_ptr<std::int64_t>();
  if (stats && dropped.defined()) {
    stats->routed_copies += T * k, stats->dropped_copies += n[E];
    stats->padded_copies += N - (T * k - n[E]);
  }
  const torch::Tensor fc1 = w.at("experts.fc1.weight"), fc2 = w.at("experts.fc2.weight");
  torch::Tensor y;
  if (N > 0 && c.grouped_gemm && grouped_gemm_available(permuted, fc1.size(2), fc1.size(1)) &&
      grouped_gemm_available(permuted, fc2.size(2), fc2.size(1))) {
    // TEGroupedMLP: one grouped GEMM per linear over all local experts (gemm_ops.h).
    const std::vector<std::int64_t> rows(n, n + E);
    auto linear = [&](const torch::Tensor& in, const torch::Tensor& wt) {
      return deferred ? delayed_grouped_linear(in, wt, rows, deferred) : grouped_linear(in, wt, rows);
    };
    y = linear(activation(linear(permuted, fc1), c, permuted_probs), fc2);
    if (stats) stats->expert_gemms += 2, stats->grouped = true;
  } else {
    // Expert e's linear: its weight's slice e, or with the weight gradient held back.
    auto linear = [&](const torch::Tensor& in, const torch::Tensor& wt, std::int64_t e) {
      return deferred ? delayed_expert_linear(in, wt, e, c.fp8, deferred)
                      : gemm_linear(in, wt[e], {}, c.fp8);
    };
    std::vector<torch::Tensor> outs;
    std::int64_t at = 0;
    for (std::int64_t e = 0; e < E; ++e) {
      if (n[e] == 0) continue;
      const torch::Tensor h = linear(permuted.narrow(0, at, n[e]), fc1, e);
      outs.push_back(linear(activation(h, c, permuted_probs.narrow(0, at, n[e])), fc2, e));
      at += n[e];
      if (stats) stats->expert_gemms += 2;
    }
    TRAINSIM_CHECK(at == N, "replay: MoE permutation lost token copies");
    if (!outs.empty()) y = torch::cat(outs, 0);
  }
  // The expert bias's load: the copies each expert received, counted where autograd records
  // (router.py _apply_expert_bias: not in a re-run under no_grad).
  const torch::Tensor load = w.get("router.tokens_per_expert");
  if (load.defined() && torch::GradMode::is_enabled()) {
    torch::NoGradGuard no_grad;
    load.add_(torch::bincount(pair_expert, {}, c.num_experts).to(load.scalar_type()));
  }
  // Unpermute: sum each token's copies (weighted in the activation) back in place; a token
  // whose copies all dropped gets 0 (the residual carries it). scatter_add keeps only its index
  // map for the backward (Megatron-Core moe_utils.unpermute; index_add would keep `y` too).
  torch::Tensor out = torch::zeros({T, x.size(1)}, x.options());
  if (y.defined())
    out = out.scatter_add(0, token_of.unsqueeze(1).expand({-1, x.size(1)}), y);
  if (c.shared_ffn > 0 && !c.shared_apart)
    out = out + mlp(x, w.at("shared.fc1.weight"), {}, w.at("shared.fc2.weight"), {}, c);
  return out;
}

}  // namespace

bool have_sdpa() { return TORCH_VERSION_MAJOR >= 2; }

std::pair<torch::Tensor, torch::Tensor> route_topk(const torch::Tensor& logits, const CoreLayerSpec& c,
                                                   const torch::Tensor& bias) {
  const std::int64_t k = c.topk;
  // The top-k of `scores` among the chosen groups' experts (group_limited_topk) or all.
  auto choose = [&](const torch::Tensor& scores) {
    if (c.router_group_topk <= 0) return std::get<1>(scores.topk(k, -1));
    const std::int64_t T = scores.size(0), G = c.router_groups, E = scores.size(1);
    const torch::Tensor group_scores =
        std::get<0>(scores.view({T, G, E / G}).topk(k / c.router_group_topk, -1)).sum(-1);
    const torch::Tensor groups = std::get<1>(group_scores.topk(c.router_group_topk, -1));
    const torch::Tensor keep = torch::zeros({T, G}, scores.options().dtype(torch::kBool))
                                   .scatter(1, groups, true)
                                   .unsqueeze(-1)
                                   .expand({T, G, E / G})
                                   .reshape({T, E});
    return std::get<1>(
        scores.masked_fill(keep.logical_not(), -std::numeric_limits<double>::infinity()).topk(k, -1));
  };
  if (!c.sigmoid) {
    const torch::Tensor idx = choose(logits);
    return {torch::softmax(logits.gather(1, idx), -1), idx};
  }
  const torch::Tensor scores = torch::sigmoid(logits);
  torch::Tensor idx;
  {
    torch::NoGradGuard no_grad;  // the choice is not differentiated
    idx = choose(bias.defined() ? scores + bias.to(scores.scalar_type()) : scores);
  }
  torch::Tensor p = scores.gather(1, idx);
  if (k > 1) p = p / (p.sum(-1, /*keepdim=*/true) + 1e-20);
  return {p, idx};
}

void update_expert_bias(torch::Tensor& bias, torch::Tensor& tokens, double rate) {
  torch::NoGradGuard no_grad;
  bias.add_(torch::sign(tokens.mean() - tokens) * rate);
  tokens.zero_();
}

std::int64_t expert_capacity(std::int64_t tokens, std::int64_t topk, std::int64_t num_experts,
                             double factor) {
  // moe_utils.py get_capacity: ceil((num_tokens / num_experts) * capacity_factor).
  return static_cast<std::int64_t>(
      std::ceil(static_cast<double>(tokens * topk) / static_cast<double>(num_experts) * factor));
}

std::pair<torch::Tensor, torch::Tensor> apply_token_dropping(const torch::Tensor& probs,
                                                             const torch::Tensor& map,
                                                             std::int64_t topk, double factor,
                                                             bool by_position, bool pad) {
  const std::int64_t T = probs.size(0), E = probs.size(1);
  const std::int64_t cap = expert_capacity(T, topk, E, factor);
  torch::Tensor keep;
  if (cap > T) {
    keep = torch::ones_like(map);  // moe_utils.py: no need to drop
  } else {
    // Per expert column, the rows a descending stable sort puts first: the highest
    // probabilities (policy probs), or the routed tokens in token order (policy position).
    const torch::Tensor key = by_position ? map.to(torch::kInt32) : probs.detach();
    const torch::Tensor rows = std::get<1>(key.sort(/*stable=*/true, 0, /*descending=*/true)).narrow(0, 0, cap);
    keep = torch::zeros_like(map).scatter(0, rows, true);
  }
  const torch::Tensor final_map = pad ? keep : map.logical_and(keep);
  return {probs * final_map.to(probs.scalar_type()), final_map};
}

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
  if (c.mla) {
    // models/memory/memory_model.cpp attention_submodules_per_rank order: the down
    // projections, the up projections each with its latent norm, the projection.
    const std::int64_t a = c.heads, dr = c.qk_rope, dn = d - dr;
    if (c.q_lora > 0) add_linear("linear_q_down_proj", c.q_lora, h, false);
    add_linear("linear_kv_down_proj", c.kv_lora + dr, h, false);
    add_linear(c.q_lora > 0 ? "linear_q_up_proj" : "linear_q_proj", a * d, c.q_lora > 0 ? c.q_lora : h, false);
    if (c.latent_norm && c.q_lora > 0) add_norm("q_layernorm", c.q_lora);
    add_linear("linear_kv_up_proj", a * (dn + c.v_dim), c.kv_lora, false);
    if (c.latent_norm) add_norm("kv_layernorm", c.kv_lora);
    add_linear("linear_proj", h, a * c.v_dim, c.bias);
  } else {
    add_linear("linear_qkv", qkv, h, c.bias);
    if (c.qk_norm) add_norm("q_layernorm", d), add_norm("k_layernorm", d);
    add_linear("linear_proj", h, P, c.bias);
  }
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
      // output_layer_init_method: linear_proj and the fc2s (MLA's down / up projections
      // take init_method, multi_latent_attention.py MLASelfAttention.__init__).
      const bool output = name.rfind("linear_proj.", 0) == 0 || name.find("fc2") != std::string::npos;
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

torch::Tensor mla_rope(const torch::Tensor& x, const torch::Tensor& cos, const torch::Tensor& sin) {
  // rope_utils.py _apply_rotary_pos_emb_bshd with mla_rotary_interleaved (even, then odd).
  const torch::Tensor t = torch::cat({x.slice(-1, 0, c10::nullopt, 2), x.slice(-1, 1, c10::nullopt, 2)}, -1);
  return apply_rope(t, cos, sin);
}

BlockState core_mla_forward(const CoreWeights& w, const torch::Tensor& input, const CoreLayerSpec& c,
                            const torch::Tensor& mask, const torch::Tensor& cos,
                            const torch::Tensor& sin, const Dropout& p) {
  BlockState st;
  st.input = as_leaf(input);
  const std::int64_t s = input.size(0), b = input.size(1);
  const torch::Tensor x =
      norm(st.input, w.at("input_layernorm.weight"), w.get("input_layernorm.bias"), c.rmsnorm);
  // The down projections (duplicated over TP ranks: whole here), _qkv_down_projection.
  MlaLatents l;
  l.q = c.q_lora > 0 ? linear(w, "linear_q_down_proj", x, c) : x;
  const auto kv = linear(w, "linear_kv_down_proj", x, c).split({c.kv_lora, c.qk_rope}, -1);
  l.kv = kv[0], l.k_pe = kv[1];
  const MlaUpWeights u = mla_up_weights(w, c);
  torch::Tensor ctx;  // [s, b, a, dv]
  if (c.up_rerun) {
    if (p.attention > 0)
      throw InputError("replay: --recompute-modules mla_up_proj with attention dropout " +
                       std::to_string(p.attention) + ": the replay's re-run of the up "
                       "projections runs the fused attention, which has no dropout; set "
                       "model.attention_dropout 0");
    using F = MlaUpRerunAttention;
    ctx = F::apply(l.q, l.kv, l.k_pe, F::opt(u.q_norm_w), F::opt(u.q_norm_b), u.q_up,
                   F::opt(u.kv_norm_w), F::opt(u.kv_norm_b), u.kv_up, mask, cos, sin, c);
  } else {
    const auto [q, k, v] = mla_up(l, u, c, cos, sin);
    ctx = attention(q, k, v, mask, c.window, p.attention);
  }
  const torch::Tensor flat = ctx.reshape({s, b, c.heads * c.v_dim});
  st.output = dropout_add(linear(w, "linear_proj", flat, c), st.input, p.hidden);
  return st;
}

BlockState core_attn_forward(const CoreWeights& w, const torch::Tensor& input, const CoreLayerSpec& c,
                             const torch::Tensor& mask, const torch::Tensor& cos,
                             const torch::Tensor& sin, const Dropout& p) {
  if (c.mla) return core_mla_forward(w, input, c, mask, cos, sin, p);
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
                            const Dropout& p, MoeStats* stats, DeferredWgrad* deferred) {
  BlockState st;
  st.input = as_leaf(input);
  const torch::Tensor x =
      norm(st.input, w.at("pre_mlp_layernorm.weight"), w.get("pre_mlp_layernorm.bias"), c.rmsnorm);
  torch::Tensor y;
  if (c.moe) {
    const std::int64_t s = x.size(0), b = x.size(1);
    y = moe_experts(w, x.reshape({s * b, c.h}), c, stats, deferred).view({s, b, c.h});
  } else {
    y = mlp(x, w.at("linear_fc1.weight"), w.get("linear_fc1.bias"), w.at("linear_fc2.weight"),
            w.get("linear_fc2.bias"), c);
  }
  st.output = dropout_add(y, st.input, p.hidden);
  return st;
}

// ---------------------------------------------------------------- the shared expert apart

void shared_fc1_forward(const CoreWeights& w, const torch::Tensor& input, const CoreLayerSpec& c,
                        SharedApartState& st) {
  st = SharedApartState{};
  st.input = as_leaf(input);
  st.normed = norm(st.input, w.at("pre_mlp_layernorm.weight"), w.get("pre_mlp_layernorm.bias"), c.rmsnorm);
  st.fc1_in = as_leaf(st.normed);
  st.fc1_out = activation(gemm_linear(st.fc1_in, w.at("shared.fc1.weight"), {}, c.fp8), c, {});
}

void shared_moe_forward(const CoreWeights& w, const CoreLayerSpec& c, MoeStats* stats,
                        DeferredWgrad* deferred, SharedApartState& st) {
  TRAINSIM_CHECK(st.normed.defined(), "replay: the MoE MLP task ran before its shared fc1 task");
  st.moe_in = as_leaf(st.normed);
  const std::int64_t s = st.moe_in.size(0), b = st.moe_in.size(1);
  st.moe_out = moe_experts(w, st.moe_in.reshape({s * b, c.h}), c, stats, deferred).view({s, b, c.h});
}

torch::Tensor shared_fc2_forward(const CoreWeights& w, const CoreLayerSpec& c, const Dropout& p,
                                 SharedApartState& st) {
  TRAINSIM_CHECK(st.fc1_out.defined() && st.moe_out.defined(),
                 "replay: the shared fc2 task ran before the shared fc1 or the MoE MLP task");
  st.fc2_in = as_leaf(st.fc1_out);
  st.moe_sum = as_leaf(st.moe_out);
  const torch::Tensor shared = gemm_linear(st.fc2_in, w.at("shared.fc2.weight"), {}, c.fp8);
  st.output = dropout_add(st.moe_sum + shared, st.input, p.hidden);
  return st.output.detach();
}

void shared_fc2_backward(SharedApartState& st, const torch::Tensor& grad_output) {
  TRAINSIM_CHECK(st.output.defined(), "replay: the shared fc2 backward has no forward state");
  torch::autograd::backward({st.output}, {grad_output});
  st.output = torch::Tensor();
}

void shared_moe_backward(SharedApartState& st) {
  TRAINSIM_CHECK(st.moe_sum.defined() && st.moe_sum.grad().defined(),
                 "replay: the MoE MLP backward ran before the shared fc2 backward");
  // No token copy routed (an empty expert set): the output is zeros without a graph.
  if (st.moe_out.requires_grad()) torch::autograd::backward({st.moe_out}, {st.moe_sum.grad()});
  st.moe_out = st.moe_sum = torch::Tensor();
}

torch::Tensor shared_fc1_backward(SharedApartState& st) {
  TRAINSIM_CHECK(st.fc2_in.defined() && st.fc2_in.grad().defined() && !st.moe_out.defined(),
                 "replay: the shared fc1 backward ran before the shared fc2 or the MoE MLP backward");
  torch::autograd::backward({st.fc1_out}, {st.fc2_in.grad()});
  torch::Tensor g = st.fc1_in.grad();
  if (st.moe_in.grad().defined()) g = g + st.moe_in.grad();
  torch::autograd::backward({st.normed}, {g});
  torch::Tensor grad_input = st.input.grad();
  st = SharedApartState{};
  return grad_input;
}

}  // namespace trainsim::hw
