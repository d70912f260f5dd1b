// dgx-b200 (systems/dgx-b200.yaml, calibration/b200-sxm-180gb.json): the B200's datasheet
// figures, the profile's published or carried-over values, Blackwell's FP8 GEMMs without the
// split accumulator's promotion, NCCL's NVLS on NVLink 5 from the cost model, and MXFP8 allowed
// on B200 only.
#include <gtest/gtest.h>

#include <string>

#include "models/errors.h"
#include "models/hardware/calibration.h"
#include "models/hardware/hardware.h"
#include "models/input/scenario.h"
#include "models/perf/cost_model.h"
#include "tests/support/paths.h"

using trainsim::CalibrationProfile;
using trainsim::default_calibration;
using trainsim::find_system;
using trainsim::SystemSpec;

namespace {
constexpr double GiB = 1073741824.0;  // 2^30
}  // namespace

TEST(DgxB200, DatasheetFigures) {
  const SystemSpec& b = find_system("dgx-b200");
  EXPECT_EQ(b.gpu.name, "B200-SXM-180GB");
  // HGX B200: 36 / 72 / 144 PFLOP/s BF16 / FP8 / FP4 with sparsity for 8 GPUs: / 2 / 8.
  EXPECT_EQ(b.gpu.peak_dense_fp16_flops, 36e15 / 2 / 8);
  EXPECT_EQ(b.gpu.peak_dense_fp8_flops, 72e15 / 2 / 8);
  EXPECT_EQ(b.gpu.peak_dense_fp4_flops, 144e15 / 2 / 8);
  EXPECT_EQ(b.gpu.peak_fp32_flops, 600e12 / 8);
  EXPECT_EQ(b.gpu.hbm_bytes, 180 * GiB);             // 1,440 GB / 8
  EXPECT_EQ(b.gpu.hbm_bw_bytes_per_s, 64e12 / 8);    // 64 TB/s / 8
  EXPECT_EQ(b.gpu.nvlink_bw_bytes_per_s, 1.8e12 / 2);  // NVLink 5: 1.8 TB/s both directions
  EXPECT_EQ(b.gpu.nvlinks, 18);
  EXPECT_EQ(b.gpu.compute_capability, 100);
  EXPECT_EQ(b.gpus_per_node, 8);
  EXPECT_EQ(b.nics_per_node, 8);
  EXPECT_EQ(b.nic_bw_bytes_per_s, 400e9 / 8);        // ConnectX-7 400 Gb/s
  EXPECT_TRUE(b.nvlink_sharp);
  EXPECT_EQ(b.cpu_cores, 112);                       // 2x Xeon Platinum 8570
}

TEST(DgxB200, ProfilePublishedOrCarriedOver) {
  const CalibrationProfile b = default_calibration("B200-SXM-180GB");
  const CalibrationProfile h = default_calibration("H100-SXM5-80GB");
  EXPECT_EQ(b.gemm_max_efficiency, 0.7755);  // MAMF 1745 / 2250, rounded down
  EXPECT_EQ(b.sm_count, 148);
  EXPECT_EQ(b.host_memory_bw_bytes_per_s, 2 * 8 * 44.8e9);  // 8 channels DDR5-5600 per socket
  EXPECT_EQ(b.gemm_fp8_promotion_interval_k, 0.0);          // no promotion on Blackwell
  EXPECT_EQ(b.gemm_fp8_max_efficiency, 0.7627);  // FP8 MAMF 3432.5 / 4500, rounded down
  EXPECT_EQ(b.mxfp8_quantize_bytes_per_s, 5.21e12);  // TE MXFP8 quantize: 272.6 MB in 52.34 us
  // A B200 stream: NVIDIA/cccl #7391's cub::DeviceTransform at 6.553 TB/s of the 8 TB/s datasheet.
  EXPECT_EQ(b.hbm_efficiency, 0.819);
  EXPECT_NEAR(b.hbm_efficiency, 6.553 / 8.0, 1e-3);
  EXPECT_EQ(b.nvlink_efficiency, h.nvlink_efficiency);
  // cuDNN 9.13.1 on a B200 (cudnn-frontend bb37575d), head dim 128 at 8k: 1384.2 forward and
  // 994.9 backward of 2250 TFLOP/s; the table is B200's own.
  EXPECT_NEAR(b.flash_attention_fwd_efficiency, 1384.2 / 2250, 1e-4);
  EXPECT_NEAR(b.flash_attention_bwd_efficiency, 994.9 / 2250, 1e-4);
  EXPECT_NE(b.flash_attention_efficiency, h.flash_attention_efficiency);
  for (const auto& [name, source] : b.sources) {
    if (name == "gemm_max_efficiency" || name == "sm_count" || name == "host_memory_bw_bytes_per_s" ||
        name == "cpu_flops_per_core_per_s" || name == "gemm_fp8_max_efficiency" ||
        name == "mxfp8_quantize_bytes_per_s" || name == "hbm_efficiency" ||
        name == "flash_attention_fwd_efficiency" || name == "flash_attention_bwd_efficiency")
      continue;
    EXPECT_EQ(source.rfind("carried over from H100", 0), 0u) << name;
  }
}

TEST(DgxB200, Fp8GemmsHaveNoPromotionOverhead) {
  const trainsim::CostModel b(find_system("dgx-b200"), default_calibration("B200-SXM-180GB"));
  EXPECT_EQ(b.fp8_promotion_overhead(), 0.0);
  // So the split-accumulator GEMM costs what the fast-accumulation one does.
  EXPECT_EQ(b.gemm_compute_time_s(8192, 8192, 8192, 1, "fwd", true, true),
            b.gemm_compute_time_s(8192, 8192, 8192, 1, "fwd", true, false));
}

TEST(DgxB200, EightGpuAllReduceRunsNvlsAtNcclsBlackwellRate) {
  const trainsim::CostModel b(find_system("dgx-b200"), default_calibration("B200-SXM-180GB"));
  // 64 MiB: NVLS (at 1 GiB the ring's 900 x 0.82 = 738 GB/s simulated bus edges out NVLS's 720;
  // NCCL's own ring estimate, 8 x 90 from its ring graph, ties it and NVLS wins on latency).
  const trainsim::NcclChoice c = b.nccl_collective(trainsim::OpKind::AllReduce, 1 << 26, 8, 1);
  EXPECT_EQ(c.algo, trainsim::NcclAlgo::Nvls);
  EXPECT_EQ(c.channels, 24);  // NVLS_NCHANNELS_SM100_NVL
  // NCCL v2.29.7: 8 channels x min(80 GB/s (18 x 40.1 = 721.8 >= 9 x 80) x 0.74 x 7/8 x 2,
  // bwInter 90 (search.cc's second pass)) = 8 x 90 (tuning.cc:291-301).
  EXPECT_NEAR(c.bus_bw_bytes_per_s, 8 * 90 * 1e9, 1e-3);
}

TEST(DgxB200, Mxfp8IsAllowedOnBlackwellOnly) {
  const std::string path = trainsim::test_support::source_path(
      "scenarios/b200/llama3-8b_fp8-mx_tp1_pp1_dp8_r25.11.yaml");
  EXPECT_NO_THROW(validated(trainsim::load_scenario(path)));
  try {
    validated(trainsim::load_scenario(path, {{"cluster.system", "dgx-h100"}}));
    FAIL() << "MXFP8 on H100 accepted";
  } catch (const trainsim::InputError& e) {
    EXPECT_NE(std::string(e.what()).find("MXFP8 block scaling needs Blackwell"), std::string::npos)
        << e.what();
  }
}

TEST(DgxB200, Nccl2185PredatesBlackwell) {
  const std::string path = trainsim::test_support::source_path(
      "scenarios/b200/llama3-8b_fp8-cs_tp1_pp1_dp8_r25.11.yaml");
  try {
    validated(trainsim::load_scenario(path, {{"nccl_version", "2.18.5"}}));
    FAIL() << "NCCL 2.18.5 on B200 accepted";
  } catch (const trainsim::InputError& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("nccl_version (2.18.5)"), std::string::npos) << msg;
    EXPECT_NE(msg.find("dgx-b200"), std::string::npos) << msg;
    EXPECT_NE(msg.find("predates Blackwell"), std::string::npos) << msg;
  }
}
