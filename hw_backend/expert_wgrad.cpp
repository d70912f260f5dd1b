// The experts' held-back weight gradients (expert_wgrad.h).
#include "hw_backend/expert_wgrad.h"

#include <string>
#include <utility>

#include "models/errors.h"

namespace trainsim::hw {

namespace {

/// dW[g] += dY^T X (rows of both: the token copies of expert g), in W's gradient's dtype. The
/// replay's parameters have their gradients bound to its flat buffer (torch_executor.cpp);
/// a weight without one (a unit test's) gets zeros first.
void add_weight_gradient(const torch::Tensor& w, std::int64_t g, const torch::Tensor& dy,
                         const torch::Tensor& x) {
  torch::NoGradGuard no_grad;
  if (!w.grad().defined()) w.mutable_grad() = torch::zeros_like(w);
  const torch::Tensor dw = torch::matmul(dy.reshape({-1, dy.size(-1)}).t(), x.reshape({-1, x.size(-1)}));
  w.grad().select(0, g).add_(dw.to(w.grad().scalar_type()));
}

DeferredWgrad* deferred_of(torch::autograd::AutogradContext* ctx) {
  auto* d = reinterpret_cast<DeferredWgrad*>(ctx->saved_data["deferred"].toInt());
  TRAINSIM_CHECK(d != nullptr, "replay: a delayed expert linear has no wgrad store");
  return d;
}

struct DelayedExpertLinear : public torch::autograd::Function<DelayedExpertLinear> {
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& x,
                               const torch::Tensor& w, std::int64_t e, std::int64_t fp8,
                               DeferredWgrad* deferred) {
    ctx->save_for_backward({x, w});
    ctx->saved_data["e"] = e;
    ctx->saved_data["deferred"] = reinterpret_cast<std::int64_t>(deferred);
    return gemm_linear(x, w.select(0, e), {}, static_cast<GemmFp8>(fp8));
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const torch::Tensor x = saved[0], w = saved[1], dy = grads[0];
    const std::int64_t e = ctx->saved_data["e"].toInt();
    const torch::Tensor dx = torch::matmul(dy, w.select(0, e));  // dX = dY W[e]
    deferred_of(ctx)->push([x, w, e, dy] { add_weight_gradient(w, e, dy, x); });
    return {dx, torch::Tensor(), torch::Tensor(), torch::Tensor(), torch::Tensor()};
  }
};

struct DelayedGroupedLinear : public torch::autograd::Function<DelayedGroupedLinear> {
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& x,
                               const torch::Tensor& w, const std::vector<std::int64_t>& rows,
                               DeferredWgrad* deferred) {
    ctx->save_for_backward({x, w});
    ctx->saved_data["rows"] = rows;
    ctx->saved_data["deferred"] = reinterpret_cast<std::int64_t>(deferred);
    return grouped_linear(x, w, rows);
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const torch::Tensor x = saved[0], w = saved[1], dy = grads[0].contiguous();
    const std::vector<std::int64_t> rows = ctx->saved_data["rows"].toIntVector();
    // dX_g = dY_g W_g: grouped_linear multiplies by the transpose of its [G, out', in']
    // weight, here W^T [G, in, out].
    const torch::Tensor dx = grouped_linear(dy, w.transpose(1, 2).contiguous(), rows);
    deferred_of(ctx)->push([x, w, rows, dy] {
      std::int64_t at = 0;
      for (std::size_t g = 0; g < rows.size(); ++g) {
        if (rows[g] > 0)
          add_weight_gradient(w, std::int64_t(g), dy.narrow(0, at, rows[g]), x.narrow(0, at, rows[g]));
        at += rows[g];
      }
    });
    return {dx, torch::Tensor(), torch::Tensor(), torch::Tensor()};
  }
};

}  // namespace

std::int64_t DeferredWgrad::run() {
  std::vector<std::function<void()>> gemms = std::move(gemms_);
  gemms_.clear();
  for (const auto& gemm : gemms) gemm();
  return static_cast<std::int64_t>(gemms.size());
}

torch::Tensor delayed_expert_linear(const torch::Tensor& x, const torch::Tensor& w, std::int64_t e,
                                    GemmFp8 fp8, DeferredWgrad* deferred) {
  TRAINSIM_CHECK(deferred != nullptr, "replay: delayed_expert_linear without a wgrad store");
  return DelayedExpertLinear::apply(x, w, e, static_cast<std::int64_t>(fp8), deferred);
}

torch::Tensor delayed_grouped_linear(const torch::Tensor& x, const torch::Tensor& w,
                                     const std::vector<std::int64_t>& rows_per_group,
                                     DeferredWgrad* deferred) {
  TRAINSIM_CHECK(deferred != nullptr, "replay: delayed_grouped_linear without a wgrad store");
  return DelayedGroupedLinear::apply(x, w, rows_per_group, deferred);
}

}  // namespace trainsim::hw
