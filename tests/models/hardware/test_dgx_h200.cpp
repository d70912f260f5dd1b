// dgx-h200 (systems/dgx-h200.yaml, calibration/h200-sxm-141gb.json): the H200's figures, a
// memory-bound kernel faster than on dgx-h100 by the achieved-bandwidth ratio, and a model
// that does not fit an 80 GiB H100 but fits the 141 GiB H200.
#include <gtest/gtest.h>

#include <string>

#include "models/builder/graph_builder.h"
#include "models/hardware/calibration.h"
#include "models/hardware/hardware.h"
#include "models/input/scenario.h"
#include "models/memory/zero_offload.h"
#include "models/perf/cost_model.h"
#include "tests/support/paths.h"

using trainsim::CalibrationProfile;
using trainsim::default_calibration;
using trainsim::find_system;
using trainsim::SystemSpec;

namespace {
constexpr double GiB = 1073741824.0;  // 2^30
}  // namespace

TEST(DgxH200, DatasheetFiguresAndCarriedOverOnes) {
  const SystemSpec& h200 = find_system("dgx-h200");
  const SystemSpec& h100 = find_system("dgx-h100");
  EXPECT_EQ(h200.gpu.name, "H200-SXM-141GB");
  EXPECT_EQ(h200.gpu.hbm_bytes, 141 * GiB);          // H200 datasheet: 141 GB HBM3e
  EXPECT_EQ(h200.gpu.hbm_bw_bytes_per_s, 4.8e12);    // 4.8 TB/s
  EXPECT_EQ(h200.gpu.peak_dense_fp16_flops, 989e12);  // GH100 compute, as H100
  EXPECT_EQ(h200.gpu.peak_dense_fp8_flops, 1979e12);
  EXPECT_EQ(h200.gpu.nvlink_bw_bytes_per_s, 900e9 / 2);
  EXPECT_EQ(h200.nic_bw_bytes_per_s, 400e9 / 8);
  EXPECT_EQ(h200.nics_per_node, h100.nics_per_node);
  EXPECT_EQ(h200.nvlink_sharp, h100.nvlink_sharp);
  // The profile: H100's values except the HBM efficiency (4.01 of 4.8 TB/s, Azure ND H200 v5).
  const CalibrationProfile p200 = default_calibration("H200-SXM-141GB");
  const CalibrationProfile p100 = default_calibration("H100-SXM5-80GB");
  EXPECT_EQ(p200.hbm_efficiency, 0.835);
  EXPECT_EQ(p200.gemm_max_efficiency, p100.gemm_max_efficiency);
  EXPECT_EQ(p200.nvlink_efficiency, p100.nvlink_efficiency);
  EXPECT_EQ(p200.flash_attention_efficiency, p100.flash_attention_efficiency);
  for (const auto& [name, source] : p200.sources) {
    if (name == "hbm_efficiency") continue;
    EXPECT_EQ(source.rfind("carried over from H100 (", 0), 0u) << name;
  }
}

TEST(DgxH200, MemoryBoundKernelFasterByTheAchievedBandwidthRatio) {
  const trainsim::CostModel h200(find_system("dgx-h200"), default_calibration("H200-SXM-141GB"));
  const trainsim::CostModel h100(find_system("dgx-h100"), default_calibration("H100-SXM5-80GB"));
  const double bytes = 8 * GiB;
  const double launch_s = 4e-6;  // both profiles: kernel_launch_overhead_s (carried over)
  // Closed form: bytes / (datasheet bandwidth x stream efficiency) + launch.
  EXPECT_DOUBLE_EQ(h200.memory_bound_time_s(bytes), bytes / (4800e9 * 0.835) + launch_s);
  EXPECT_DOUBLE_EQ(h100.memory_bound_time_s(bytes), bytes / (3350e9 * 0.866) + launch_s);
  EXPECT_NEAR((h100.memory_bound_time_s(bytes) - launch_s) /
                  (h200.memory_bound_time_s(bytes) - launch_s),
              (4800 * 0.835) / (3350 * 0.866), 1e-12);
}

// Llama 3 8B on one node, FSDP over 8 GPUs, micro-batch 2 of 8192 tokens, no recomputation: its
// peak exceeds an H100's 80 GiB; the H200's 141 GiB hold it.
TEST(DgxH200, ModelThatDoesNotFitAnH100FitsTheH200) {
  const std::string path = trainsim::test_support::source_path(
      "scenarios/h100/llama3-8b_fp8-cs_fsdp8_tp1_pp1_dp8_r25.11.yaml");
  auto peak = [&](const std::string& system) {
    const trainsim::Scenario sc = trainsim::load_scenario(
        path, {{"cluster.system", system}, {"parallel.micro_batch_size", "2"},
               {"parallel.global_batch_size", "32"}});
    const SystemSpec& sys = find_system(system);
    const CalibrationProfile profile = default_calibration(sys.gpu.name);
    trainsim::BuildOptions opt;
    opt.fold = true;
    opt.calibration = &profile;
    return double(trainsim::program_order_peak_gpu_bytes(trainsim::build_schedule_graph(validated(sc), sys, opt)));
  };
  const double on_h100 = peak("dgx-h100");
  const double on_h200 = peak("dgx-h200");
  SCOPED_TRACE("peak on H100 " + std::to_string(on_h100 / GiB) + " GiB, on H200 " +
               std::to_string(on_h200 / GiB) + " GiB");
  EXPECT_GT(on_h100, 80 * GiB);
  EXPECT_LT(on_h200, 141 * GiB);
  // Same model, same plan: the peak differs by nothing that depends on the HBM size.
  EXPECT_NEAR(on_h200, on_h100, 0.01 * on_h100);
}
