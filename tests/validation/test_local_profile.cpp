// Measured-profile fields (local_device, gemm_efficiency, precision), the `local` system, the
// cost model's GEMM table and the fp32 memory model, each against numbers computed here.
#include <gtest/gtest.h>

#include <cmath>
#include <stdexcept>

#include "models/hardware/calibration.h"
#include "models/perf/cost_model.h"
#include "models/hardware/local_device.h"
#include "models/memory/memory_model.h"
#include "models/input/scenario.h"
#include "tests/support/calibration_errors.h"
#include "tests/support/paths.h"

using trainsim::test_support::source_path;

using namespace trainsim;

namespace {

CalibrationProfile local_profile() {
  CalibrationProfile p = default_calibration("A100-SXM4-80GB");  // every required parameter
  p.device = "cpu: test (2 cores, LibTorch fp32)";
  p.source = "test";
  p.precision = "fp32";
  p.kernel_launch_overhead_s = 0;
  p.local_device.peak_flops = 2e10;
  p.local_device.memory_bw_bytes_per_s = 1e10;
  p.local_device.memory_bytes = 8e9;
  p.local_device.copy_bw_bytes_per_s = 5e9;
  p.local_device.cores = 2;
  p.local_device.threads = 2;
  p.gemm_efficiency = {{128, 384, 128, 1, 0.5}, {128, 128, 128, 1, 0.25}};
  p.measurements_json = R"({"note":"x"})";
  p.memory_bound_bytes_per_s = {{"dropout", 1e9}, {"elementwise", 4e10}};
  return p;
}

}  // namespace

TEST(LocalProfile, JsonRoundTripKeepsMeasuredFields) {
  const CalibrationProfile p = local_profile();
  const CalibrationProfile q = parse_calibration(calibration_to_json(p), "roundtrip");
  EXPECT_EQ(p, q);
  EXPECT_EQ(q.precision, "fp32");
  EXPECT_EQ(q.local_device.peak_flops, 2e10);
  ASSERT_EQ(q.gemm_efficiency.size(), 2u);
  EXPECT_EQ(q.gemm_efficiency[1].efficiency, 0.25);
  EXPECT_EQ(q.memory_bound_bytes_per_s.at("dropout"), 1e9);
}

TEST(LocalProfile, GemmRolesSelectTheirPoints) {
  CalibrationProfile p = local_profile();
  // Same shape, two layouts: X W^T (fwd) at 0.3, dY W (dgrad) at 0.6.
  p.gemm_efficiency = {{128, 512, 128, 1, 0.3, "fwd"}, {128, 512, 128, 1, 0.6, "dgrad"},
                       {256, 512, 128, 1, 0.9, ""}};
  EXPECT_EQ(parse_calibration(calibration_to_json(p), "rt"), p);
  const CostModel cost(local_system(p, "p.json"), p);
  const double f = 2.0 * 128 * 512 * 128;
  EXPECT_DOUBLE_EQ(cost.gemm_compute_time_s(128, 512, 128, 1, "fwd"), f / (2e10 * 0.3));
  EXPECT_DOUBLE_EQ(cost.gemm_compute_time_s(128, 512, 128, 1, "dgrad"), f / (2e10 * 0.6));
  EXPECT_STREQ(CostModel::gemm_role(GemmPass::Forward, 1), "fwd");
  EXPECT_STREQ(CostModel::gemm_role(GemmPass::Dgrad, 1), "dgrad");
  EXPECT_STREQ(CostModel::gemm_role(GemmPass::Wgrad, 1), "wgrad");
  EXPECT_STREQ(CostModel::gemm_role(GemmPass::Wgrad, 8), "wgrad");  // grouped expert GEMMs
  EXPECT_STREQ(CostModel::gemm_role(GemmPass::Forward, 16), "bmm");
  EXPECT_STREQ(CostModel::gemm_role(GemmPass::Dgrad, 16), "bmm");
  EXPECT_THROW(CostModel::gemm_role(GemmPass::None, 1), std::logic_error);
  // No wgrad point: only the role-less (256, 512, 128) point counts.
  EXPECT_DOUBLE_EQ(cost.gemm_compute_time_s(128, 512, 128, 1, "wgrad"), f / (2e10 * 0.9));
}

TEST(LocalProfile, MemoryBoundKernelsUseTheirClassRate) {
  const CalibrationProfile p = local_profile();
  const CostModel cost(local_system(p, "p.json"), p);
  EXPECT_STREQ(CostModel::memory_bound_class("attn_dropout_fwd"), "dropout");
  EXPECT_STREQ(CostModel::memory_bound_class("attn_dropout_bwd"), "elementwise");  // a multiply
  EXPECT_STREQ(CostModel::memory_bound_class("input_layernorm_fwd"), "layernorm");
  EXPECT_STREQ(CostModel::memory_bound_class("bias_gelu_bwd"), "gelu");
  KernelWork k;
  k.name = "attn_dropout_fwd";
  k.bytes = 3e6;
  EXPECT_DOUBLE_EQ(cost.kernel_time_s(k), 3e6 / 1e9);
  k.name = "qkv_bias_add";
  EXPECT_DOUBLE_EQ(cost.kernel_time_s(k), 3e6 / 4e10);
  k.name = "softmax_fwd";  // no rate for this class: HBM bandwidth x hbm_efficiency
  EXPECT_DOUBLE_EQ(cost.kernel_time_s(k), 3e6 / (1e10 * p.hbm_efficiency));
}

TEST(LocalProfile, BadMeasuredFieldsAreInputErrors) {
  std::string j = calibration_to_json(local_profile());
  auto bad = [&](const std::string& from, const std::string& to) {
    std::string t = j;
    const auto at = t.find(from);
    ASSERT_NE(at, std::string::npos) << from;
    t.replace(at, from.size(), to);
    EXPECT_THROW(parse_calibration(t, "bad.json"), InputError) << to;
  };
  bad("\"precision\": \"fp32\"", "\"precision\": \"fp8\"");
  bad("\"cores\": 2.0", "\"cores\": -2.0");
  bad("\"peak_flops\"", "\"peak_flop\"");
  bad("0.25", "1.5");  // efficiency > 1
}

TEST(LocalProfile, LocalSystemTakesTheProfileFigures) {
  const CalibrationProfile p = local_profile();
  const SystemSpec s = local_system(p, "p.json");
  EXPECT_EQ(s.name, "local");
  EXPECT_EQ(s.gpu.name, p.device);
  EXPECT_EQ(s.gpu.peak_dense_fp16_flops, 2e10);
  EXPECT_EQ(s.gpu.hbm_bw_bytes_per_s, 1e10);
  EXPECT_EQ(s.gpu.hbm_bytes, 8e9);
  EXPECT_EQ(s.gpus_per_node, 1);
  EXPECT_THROW(local_system(default_calibration("A100-SXM4-80GB"), "a100.json"), InputError);
}

TEST(LocalProfile, CostModelUsesTheGemmTable) {
  const CalibrationProfile p = local_profile();
  const CostModel cost(local_system(p, "p.json"), p);
  // Exact table shapes: 2 m n k / (peak x efficiency).
  EXPECT_DOUBLE_EQ(cost.gemm_compute_time_s(128, 384, 128), 2.0 * 128 * 384 * 128 / (2e10 * 0.5));
  EXPECT_DOUBLE_EQ(cost.gemm_compute_time_s(128, 128, 128), 2.0 * 128 * 128 * 128 / (2e10 * 0.25));
  // Between the points (log2 distance 1 from (128,128,128) and log2(3)-1 = 0.585 from
  // (128,384,128)): inverse-distance weights 1/d^4.
  const double d1 = 1.0, d2 = std::log2(256.0 / 384.0);
  const double w1 = 1 / std::pow(d1, 4), w2 = 1 / std::pow(d2, 4);
  const double eff = (w1 * 0.25 + w2 * 0.5) / (w1 + w2);
  EXPECT_NEAR(cost.gemm_compute_time_s(128, 256, 128), 2.0 * 128 * 256 * 128 / (2e10 * eff), 1e-12);
}

TEST(LocalProfile, Fp32MemoryModel) {
  Scenario sc = load_scenario(source_path("scenarios/small/gpt-cpu_tp1_pp1_dp1.yaml"));
  ASSERT_EQ(sc.parallel.precision, Precision::FP32);
  const double s = 64, b = 2, h = 128, a = 4;
  // Korthikanti's terms with 4-byte activations and 4-byte CPU dropout masks:
  // attention (2*4+4) sbh + 4*4 sbh + (2*4+4) a s^2 b, MLP (2*4+4) sbh + 8*4 sbh.
  const LayerActivationBytes act = layer_activation_bytes(sc);
  EXPECT_EQ(act.attn, std::int64_t(12 * s * b * h + 16 * s * b * h + 12 * a * s * s * b));
  EXPECT_EQ(act.mlp, std::int64_t(12 * s * b * h + 32 * s * b * h));
  // fp16 keeps the paper's numbers: 34 sbh + 5 a s^2 b.
  sc.parallel.precision = Precision::FP16;
  const LayerActivationBytes half = layer_activation_bytes(sc);
  EXPECT_EQ(half.total(), std::int64_t(34 * s * b * h + 5 * a * s * s * b));
}

TEST(LocalProfile, HostTransportFieldsRoundTripAndOldProfilesLoad) {
  CalibrationProfile p = local_profile();
  // Without the fields (a profile from before they were measured): no host transport.
  EXPECT_FALSE(CostModel(local_system(p, "p.json", 2), p).host_transport());
  p.local_device.host_comm_latency_s = 2.5e-3;
  p.local_device.host_comm_bw_bytes_per_s = 1.5e9;
  p.local_device.processes = 2;
  const CalibrationProfile q = parse_calibration(calibration_to_json(p), "roundtrip");
  EXPECT_EQ(p, q);
  EXPECT_EQ(q.local_device.host_comm_latency_s, 2.5e-3);
  EXPECT_EQ(q.local_device.host_comm_bw_bytes_per_s, 1.5e9);
  EXPECT_EQ(q.local_device.processes, 2);
  EXPECT_TRUE(CostModel(local_system(q, "p.json", 2), q).host_transport());
  // A catalog system never uses it, whatever the profile says.
  EXPECT_FALSE(CostModel(find_system("dgx-a100-80gb"), q).host_transport());
}

TEST(LocalProfile, BadHostTransportAndProcessFieldsNameFileFieldAndValue) {
  using test_support::expect_profile_refused;
  CalibrationProfile p = local_profile();
  p.local_device.host_comm_latency_s = 2.5e-3;
  p.local_device.host_comm_bw_bytes_per_s = 1.5e9;
  p.local_device.processes = 2;
  const std::string j = calibration_to_json(p);
  auto with = [&](const std::string& from, const std::string& to) {
    std::string t = j;
    const auto at = t.find(from);
    EXPECT_NE(at, std::string::npos) << from;
    if (at != std::string::npos) t.replace(at, from.size(), to);
    return t;
  };
  expect_profile_refused(with("\"host_comm_latency_s\": 0.0025", "\"host_comm_latency_s\": -1"),
                         "local_device.host_comm_latency_s", "-1");
  expect_profile_refused(
      with("\"host_comm_bw_bytes_per_s\": 1500000000.0", "\"host_comm_bw_bytes_per_s\": \"fast\""),
      "local_device.host_comm_bw_bytes_per_s", "fast");
  // A latency without the bandwidth it was fitted with.
  expect_profile_refused(
      with("\"host_comm_bw_bytes_per_s\": 1500000000.0", "\"host_comm_bw_bytes_per_s\": 0"),
      "local_device.host_comm_latency_s", "0.0025");
  expect_profile_refused(with("\"processes\": 2.0", "\"processes\": 0"),
                         "local_device.processes", "0");
  expect_profile_refused(with("\"processes\": 2.0", "\"processes\": 1.5"),
                         "local_device.processes", "1.5");
}
