// gemm_ops.h with the operators of LibTorch >= 2.8 on CUDA: FP8 linears through at::_scaled_mm
// with per-tensor current scaling, the experts through at::_grouped_mm. Compiled only when
// TRAINSIM_REPLAY_NEW_TORCH_OPS is on (hw_backend/CMakeLists.txt); validation/gpu_check.sh
// rebuilds with it OFF (gemm_ops_fallback.cpp) when this file does not compile against the
// LibTorch at hand, and says so in its log.
//
// Transformer Engine's Float8CurrentScaling (transformer_engine/common/recipe/__init__.py):
// every GEMM operand is quantized with its own amax, taken just before the cast:
//   amax = max |t| (its own reduction kernel here: at::linalg_vector_norm with ord inf),
//   scale = fp8_max / amax (transformer_engine/common/recipe/recipe_common.cuh
//   compute_scale_from_amax: amax 0, inf or NaN -> 1; an infinite scale -> the largest float),
//   t_fp8 = cast(t scale) (saturated to +-fp8_max),
// and the GEMM dequantizes with 1 / scale of each operand. Formats (recipe Format): E4M3 is
// e4m3 everywhere (max 448); HYBRID (TE's default) casts the output gradient of the backward to
// e5m2 (max 57344). Accumulation: fprop without the split accumulator (use_fast_accum), dgrad
// and wgrad with it (fp8_gemm_fprop / dgrad / wgrad MMParams).
// What differs from TE: the amax, scale and cast are separate LibTorch kernels (TE fuses the
// cast and its transpose), weights are re-quantized in every forward (TE caches the weight's
// cast over the microbatches of a step, is_first_microbatch), and the delayed and MXFP8 recipes
// run as current scaling too (the notes say so).
#include "hw_backend/gemm_ops.h"

#include <atomic>
#include <cfloat>
#include <limits>
#include <mutex>
#include <optional>

#include <torch/version.h>

#include "models/errors.h"

#if TORCH_VERSION_MAJOR < 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR < 8)
#error "gemm_cuda_ops.cpp needs LibTorch >= 2.8 (at::_scaled_mm, at::_grouped_mm): configure with -DTRAINSIM_REPLAY_NEW_TORCH_OPS=OFF"
#endif

namespace trainsim::hw {
namespace {

constexpr c10::ScalarType kE4m3 = c10::ScalarType::Float8_e4m3fn;
constexpr c10::ScalarType kE5m2 = c10::ScalarType::Float8_e5m2;

std::atomic<std::int64_t> g_fp8{0}, g_amax{0}, g_shape_fallbacks{0}, g_grouped{0};

/// One probe per process of what this GPU's LibTorch accepts (a 16 x 16 x 16 problem of each
/// operand pair and a two-group grouped GEMM with its backward): an sm_80 GPU refuses FP8, a
/// build may lack a kernel or a derivative. The error text goes to the notes, and the replay runs
/// torch::linear / per-expert GEMMs instead.
struct Probe {
  bool done = false;
  bool fp8 = false, grouped = false;
  std::string fp8_error, grouped_error;
};
Probe g_probe;
std::mutex g_probe_mutex;

/// The message of a LibTorch error without its backtrace: its first line.
std::string first_line(const std::exception& e) {
  if (const auto* c = dynamic_cast<const c10::Error*>(&e)) return c->what_without_backtrace();
  const std::string what = e.what();
  return what.substr(0, what.find('\n'));
}

const Probe& probe(const torch::Device& device) {
  std::lock_guard<std::mutex> lock(g_probe_mutex);
  if (g_probe.done) return g_probe;
  g_probe.done = true;
  const auto bf16 = torch::TensorOptions().dtype(torch::kBFloat16).device(device);
  const auto f32 = torch::TensorOptions().dtype(torch::kFloat32).device(device);
  const torch::Tensor a = torch::ones({16, 16}, bf16), one = torch::ones({}, f32);
  try {
    const torch::Tensor a8 = a.to(kE4m3), g8 = a.to(kE5m2);
    (void)at::_scaled_mm(a8, a8.t(), one, one, {}, {}, torch::kBFloat16, true);
    (void)at::_scaled_mm(g8, a8.t(), one, one, {}, {}, torch::kBFloat16, false);
    g_probe.fp8 = true;
  } catch (const std::exception& e) {
    g_probe.fp8_error = first_line(e);
  }
  try {
    // Forward and autograd's backward (the replay's expert GEMMs train), groups of 8 rows.
    torch::AutoGradMode grad(true);
    const torch::Tensor x = a.clone().requires_grad_(true);
    const torch::Tensor w = torch::ones({2, 16, 16}, bf16).requires_grad_(true);
    const torch::Tensor offs =
        torch::tensor({8, 16}, torch::TensorOptions().dtype(torch::kInt32)).to(device);
    at::_grouped_mm(x, w.transpose(1, 2), offs, {}, {}).sum().backward();
    g_probe.grouped = true;
  } catch (const std::exception& e) {
    g_probe.grouped_error = first_line(e);
  }
  return g_probe;
}

/// scale = fp8_max / amax(t) as an fp32 scalar on t's device, with TE's guards (see the file
/// comment); the amax is one reduction kernel.
torch::Tensor current_scale(const torch::Tensor& t, double fp8_max) {
  const torch::Tensor amax = at::linalg_vector_norm(t, std::numeric_limits<double>::infinity(),
                                                    at::OptionalIntArrayRef(), false, torch::kFloat32);
  ++g_amax;
  return amax.reciprocal().mul_(fp8_max).nan_to_num_(1.0, FLT_MAX);
}

/// cast(t scale) saturated to +-fp8_max, in `type`.
torch::Tensor quantize(const torch::Tensor& t, const torch::Tensor& scale, double fp8_max,
                       c10::ScalarType type) {
  return t.mul(scale).clamp_(-fp8_max, fp8_max).to(type);
}

/// A column-major view of the row-major [r, c] tensor's copy: what _scaled_mm's mat2 takes.
torch::Tensor column_major(const torch::Tensor& t) { return t.t().contiguous().t(); }

/// x [M, K] W [N, K]^T with current scaling; see gemm_ops.h gemm_linear.
class Fp8Linear : public torch::autograd::Function<Fp8Linear> {
 public:
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& x,
                               const torch::Tensor& w, bool hybrid) {
    const torch::Tensor sx = current_scale(x, kFp8E4m3Max), sw = current_scale(w, kFp8E4m3Max);
    const torch::Tensor xq = quantize(x, sx, kFp8E4m3Max, kE4m3);
    const torch::Tensor wq = quantize(w, sw, kFp8E4m3Max, kE4m3);
    // w [N, K] row-major: w^T [K, N] is the column-major mat2 as it stands.
    const torch::Tensor y = at::_scaled_mm(xq, wq.t(), sx.reciprocal(), sw.reciprocal(), {}, {},
                                           x.scalar_type(), /*use_fast_accum=*/true);
    ++g_fp8;
    // What TE keeps for the backward: the FP8 casts of the input and the weight and their scales.
    ctx->save_for_backward({xq, wq, sx, sw});
    ctx->saved_data["hybrid"] = hybrid;
    ctx->saved_data["x_dtype"] = static_cast<std::int64_t>(x.scalar_type());
    ctx->saved_data["w_dtype"] = static_cast<std::int64_t>(w.scalar_type());
    return y;
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const torch::Tensor &xq = saved[0], &wq = saved[1], &sx = saved[2], &sw = saved[3];
    const bool hybrid = ctx->saved_data["hybrid"].toBool();
    const auto x_dtype = static_cast<c10::ScalarType>(ctx->saved_data["x_dtype"].toInt());
    const auto w_dtype = static_cast<c10::ScalarType>(ctx->saved_data["w_dtype"].toInt());
    const double gmax = hybrid ? kFp8E5m2Max : kFp8E4m3Max;
    const torch::Tensor dy = grads[0].contiguous();  // [M, N]
    const torch::Tensor sg = current_scale(dy, gmax);
    const torch::Tensor gq = quantize(dy, sg, gmax, hybrid ? kE5m2 : kE4m3);
    // dgrad: dX [M, K] = dY [M, N] W [N, K] (mat2 W column-major).
    const torch::Tensor dx = at::_scaled_mm(gq, column_major(wq), sg.reciprocal(),
                                            sw.reciprocal(), {}, {}, x_dtype, false);
    // wgrad: dW [N, K] = dY^T [N, M] X [M, K] (self dY^T row-major, mat2 X column-major).
    const torch::Tensor dw = at::_scaled_mm(gq.t().contiguous(), column_major(xq),
                                            sg.reciprocal(), sx.reciprocal(), {}, {}, w_dtype,
                                            false);
    g_fp8 += 2;
    return {dx, dw, torch::Tensor()};
  }
};

bool multiple_of(std::int64_t n, std::int64_t m) { return n % m == 0; }

}  // namespace

bool new_torch_ops_built() { return true; }

std::string new_torch_ops_unavailable_reason(const torch::Device& device) {
  if (!device.is_cuda())
    return "the replay runs FP8 and grouped GEMMs on CUDA only (the CPU has no FP8 GEMMs)";
  (void)probe(device);
  std::lock_guard<std::mutex> lock(g_probe_mutex);
  std::string why;
  if (!g_probe.fp8) why += "at::_scaled_mm refused a 16x16x16 FP8 probe (" + g_probe.fp8_error + ")";
  if (!g_probe.grouped)
    why += std::string(why.empty() ? "" : "; ") + "at::_grouped_mm refused a two-group probe (" +
           g_probe.grouped_error + ")";
  return why;
}

torch::Tensor gemm_linear(const torch::Tensor& x, const torch::Tensor& w, const torch::Tensor& b,
                          GemmFp8 fp8) {
  const bool low = x.scalar_type() == torch::kBFloat16 || x.scalar_type() == torch::kHalf;
  if (fp8 == GemmFp8::Off || !x.is_cuda() || !low || !probe(x.device()).fp8)
    return torch::linear(x, w, b);
  const std::int64_t in = w.size(1), out = w.size(0), rows = x.numel() / std::max<std::int64_t>(1, in);
  // _scaled_mm's dims: K and N of each of the three GEMMs multiples of 16 (rows is the wgrad's K).
  if (!multiple_of(in, 16) || !multiple_of(out, 16) || !multiple_of(rows, 16) || rows == 0) {
    ++g_shape_fallbacks;
    return torch::linear(x, w, b);
  }
  std::vector<std::int64_t> shape = x.sizes().vec();
  shape.back() = out;
  torch::Tensor y =
      Fp8Linear::apply(x.reshape({rows, in}).contiguous(), w, fp8 == GemmFp8::Hybrid).view(shape);
  return b.defined() ? y + b : y;
}

bool grouped_gemm_available(const torch::Tensor& x, std::int64_t in_features,
                            std::int64_t out_features) {
  return x.is_cuda() && x.scalar_type() == torch::kBFloat16 && multiple_of(in_features, 8) &&
         multiple_of(out_features, 8) && probe(x.device()).grouped;
}

torch::Tensor grouped_linear(const torch::Tensor& x, const torch::Tensor& w,
                             const std::vector<std::int64_t>& rows_per_group) {
  TRAINSIM_CHECK(grouped_gemm_available(x, w.size(2), w.size(1)),
                 "replay: grouped_linear where at::_grouped_mm is not available");
  TRAINSIM_CHECK(static_cast<std::int64_t>(rows_per_group.size()) == w.size(0),
                 "replay: grouped_linear needs one row count per group");
  std::vector<std::int32_t> ends;
  std::int64_t end = 0;
  for (std::int64_t n : rows_per_group) ends.push_back(static_cast<std::int32_t>(end += n));
  TRAINSIM_CHECK(end == x.size(0), "replay: grouped_linear row counts do not sum to the rows");
  const torch::Tensor offs =
      torch::tensor(ends, torch::TensorOptions().dtype(torch::kInt32)).to(x.device());
  ++g_grouped;
  // w [G, out, in] -> [G, in, out], column-major per group as _grouped_mm's mat2 wants.
  return at::_grouped_mm(x.contiguous(), w.transpose(1, 2), offs, {}, {});
}

GemmCounts gemm_counts() {
  GemmCounts c;
  c.fp8_gemms = g_fp8, c.amax_reductions = g_amax, c.fp8_shape_fallbacks = g_shape_fallbacks;
  c.grouped_gemms = g_grouped;
  return c;
}

void reset_gemm_counts() { g_fp8 = 0, g_amax = 0, g_shape_fallbacks = 0, g_grouped = 0; }

}  // namespace trainsim::hw
