// The replay's GEMMs (hw_backend/gemm_ops.h). Everywhere: on the CPU (and in a build without the
// new LibTorch ops) gemm_linear is torch::linear exactly and no grouped GEMM is offered. On a GPU
// whose build has at::_scaled_mm and at::_grouped_mm (LibTorch >= 2.8, validation/gpu_check.sh):
// the FP8 linear against the same product in fp32, within the quantization error of the formats
// (e4m3: 3 mantissa bits, a relative rounding error of at most 2^-4 per element; e5m2: 2 bits,
// 2^-3), forward and backward; the grouped GEMM against one torch::linear per group.
#include <gtest/gtest.h>

#include <vector>

#include <torch/torch.h>

#include "hw_backend/gemm_ops.h"

using namespace trainsim::hw;

namespace {

double rel_err(const torch::Tensor& got, const torch::Tensor& want) {
  const torch::Tensor g = got.to(torch::kFloat64), w = want.to(torch::kFloat64);
  return ((g - w).norm() / w.norm()).item<double>();
}

bool gpu_new_ops() {
  return torch::cuda::is_available() && new_torch_ops_built() &&
         new_torch_ops_unavailable_reason(torch::Device(torch::kCUDA, 0)).empty();
}

}  // namespace

TEST(GemmOps, CpuLinearIsTorchLinearExactly) {
  torch::manual_seed(1);
  const torch::Tensor x = torch::randn({3, 5, 32}), w = torch::randn({48, 32}), b = torch::randn({48});
  for (GemmFp8 f : {GemmFp8::Off, GemmFp8::E4M3, GemmFp8::Hybrid}) {
    EXPECT_TRUE(torch::equal(gemm_linear(x, w, b, f), torch::linear(x, w, b)));
    EXPECT_TRUE(torch::equal(gemm_linear(x, w, {}, f), torch::linear(x, w)));
  }
  EXPECT_FALSE(grouped_gemm_available(x, 32, 48));
  EXPECT_NE(new_torch_ops_unavailable_reason(torch::Device(torch::kCPU)), "");
}

TEST(GemmOps, Fp8LinearWithinTheFormatsRoundingOnTheGpu) {
  if (!gpu_new_ops()) GTEST_SKIP() << "needs a CUDA LibTorch >= 2.8 with FP8 GEMMs";
  torch::manual_seed(2);
  const auto bf16 = torch::TensorOptions().dtype(torch::kBFloat16).device(torch::kCUDA);
  const torch::Tensor x0 = torch::randn({4, 64, 256}, bf16), w0 = torch::randn({128, 256}, bf16) * 0.02;
  const torch::Tensor dy = torch::randn({4, 64, 128}, bf16);
  for (GemmFp8 f : {GemmFp8::E4M3, GemmFp8::Hybrid}) {
    torch::Tensor x = x0.clone().requires_grad_(true), w = w0.clone().requires_grad_(true);
    const torch::Tensor y = gemm_linear(x, w, {}, f);
    EXPECT_EQ(y.sizes(), (std::vector<std::int64_t>{4, 64, 128}));
    y.backward(dy);
    // Reference in fp32 from the same bf16 operands.
    torch::Tensor xr = x0.to(torch::kFloat32).requires_grad_(true);
    torch::Tensor wr = w0.to(torch::kFloat32).requires_grad_(true);
    const torch::Tensor yr = torch::linear(xr, wr);
    yr.backward(dy.to(torch::kFloat32));
    // Each operand element within 2^-4 (e4m3) of its value, so the product of two within ~2^-3;
    // summed over K = 256 random signs the relative error of the whole is far below.
    EXPECT_LT(rel_err(y, yr), 0.125);
    const double grad_bound = f == GemmFp8::Hybrid ? 0.25 : 0.125;  // e5m2 gradients: 2^-3
    EXPECT_LT(rel_err(x.grad(), xr.grad()), grad_bound);
    EXPECT_LT(rel_err(w.grad(), wr.grad()), grad_bound);
  }
  const GemmCounts n = gemm_counts();
  EXPECT_GE(n.fp8_gemms, 6);  // per format: 1 forward + dgrad + wgrad
  EXPECT_GE(n.amax_reductions, 6);  // x, w forward; dy backward
}

TEST(GemmOps, GroupedLinearIsOneLinearPerGroupOnTheGpu) {
  if (!gpu_new_ops()) GTEST_SKIP() << "needs a CUDA LibTorch >= 2.8 with at::_grouped_mm";
  torch::manual_seed(3);
  const auto bf16 = torch::TensorOptions().dtype(torch::kBFloat16).device(torch::kCUDA);
  const std::vector<std::int64_t> rows = {5, 0, 17, 10};
  const torch::Tensor x = torch::randn({32, 64}, bf16), w = torch::randn({4, 48, 64}, bf16);
  ASSERT_TRUE(grouped_gemm_available(x, 64, 48));
  const torch::Tensor y = grouped_linear(x, w, rows);
  std::int64_t row = 0;
  for (std::size_t g = 0; g < rows.size(); ++g) {
    if (rows[g] == 0) continue;
    const torch::Tensor want = torch::linear(x.narrow(0, row, rows[g]).to(torch::kFloat32),
                                             w[g].to(torch::kFloat32));
    EXPECT_LT(rel_err(y.narrow(0, row, rows[g]), want), 1e-2) << "group " << g;
    row += rows[g];
  }
}
