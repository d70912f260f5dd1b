// Tests of models/cost_model and models/calibration: each expected number is computed here by
// hand from the formula the cost model documents, with a hand-made profile of round numbers.
#include "models/perf/cost_model.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <fstream>
#include <string>

#include "models/hardware/calibration.h"
#include "tests/support/calibration_errors.h"
#include "models/perf/flops.h"
#include "models/hardware/hardware.h"
#include "tests/support/paths.h"

using trainsim::test_support::source_path;

namespace trainsim {
namespace {

CalibrationProfile round_profile() {
  CalibrationProfile p;
  p.device = "A100-SXM4-80GB";
  p.source = "test";
  p.gemm_max_efficiency = 0.8;
  p.gemm_tile_m = 256;
  p.gemm_tile_n = 128;
  p.sm_count = 108;
  p.hbm_efficiency = 0.5;
  p.kernel_launch_overhead_s = 1e-6;
  p.nvlink_efficiency = 0.75;
  p.network_efficiency = 0.9;
  p.pcie_efficiency = 0.8;
  p.nccl_launch_latency_s = 10e-6;
  p.nccl_step_latency_intra_node_s = 2e-6;
  p.nccl_step_latency_inter_node_s = 5e-6;
  p.host_memory_bw_bytes_per_s = 400e9;
  p.host_memory_efficiency = 0.5;
  p.cpu_flops_per_core_per_s = 10e9;
  return p;
}

const SystemSpec& a100() { return find_system("dgx-a100-80gb"); }
constexpr double kPeak = 312e12;  // A100 datasheet dense FP16

double rel(double a, double b) { return std::fabs(a - b) / std::fabs(b); }

TEST(CostModel, LargeGemmRunsAtPeakTimesEfficiency) {
  CostModel cm(a100(), round_profile());
  const double m = 8192, n = 8192, k = 8192;
  // 32 x 64 = 2048 tiles of 256x128 -> ceil(2048/108) = 19 waves; 19*108/2048 = 1.00195.
  // Each wave ends with its epilogue: 108 tiles of 256 x 128 2-byte outputs stored at the
  // streaming HBM rate (2039 GB/s x 0.5): 7.08 MB / 1019.5 GB/s = 6.9 us.
  const double flops = 2 * m * n * k;
  const double epilogue_s = 108.0 * 256 * 128 * 2 / (2039e9 * 0.5);
  const double expected = flops / (kPeak * 0.8) * (19.0 * 108 / 2048) + 19 * epilogue_s + 1e-6;
  EXPECT_LT(rel(cm.gemm_time_s(m, n, k, Precision::FP16), expected), 1e-12);
  // ... which is within 3.5% of flops / (peak * efficiency): a 232 us main loop per wave
  // against a 6.9 us epilogue.
  EXPECT_LT(rel(cm.gemm_time_s(m, n, k, Precision::BF16), flops / (kPeak * 0.8)), 3.5e-2);
  EXPECT_GT(cm.gemm_time_s(m, n, k, Precision::BF16), flops / (kPeak * 0.8) * 1.02);
}

TEST(CostModel, WaveQuantizationByHand) {
  CalibrationProfile p = round_profile();
  p.hbm_efficiency = 1.0;
  p.kernel_launch_overhead_s = 0;
  SystemSpec sys = a100();
  sys.gpu.hbm_bw_bytes_per_s = 1e18;  // memory never binds here
  CostModel cm(sys, p);
  const double k = 4096;
  // One wave of one 256x128 tile per SM: 2*256*128*k FLOPs at peak*eff/108 per SM, then the
  // epilogue stores the 108 output tiles (2 bytes per element) at the HBM rate.
  const double epilogue_s = 108.0 * 256 * 128 * 2 / 1e18;
  const double wave_s = 2.0 * 256 * 128 * k / (kPeak * 0.8 / 108) + epilogue_s;
  // 108 tiles (m = 108*256, n = 128): exactly one wave.
  EXPECT_LT(rel(cm.gemm_time_s(108 * 256, 128, k, Precision::FP16), wave_s), 1e-12);
  // 109 tiles: a second, almost empty wave -> twice the time for 0.9% more work
  // (the 128x256 orientation needs 218 tiles of which half are padding: 3 waves, not chosen).
  EXPECT_LT(rel(cm.gemm_time_s(109 * 256, 128, k, Precision::FP16), 2 * wave_s), 1e-12);
  // Batched: 54 products of 2 tiles each = 108 tiles, one wave.
  EXPECT_LT(rel(cm.gemm_time_s(512, 128, k, Precision::FP16, 54), wave_s), 1e-12);
  // Tile quantization: n = 130 costs as much as n = 256 (two 128-wide tiles).
  EXPECT_LT(rel(cm.gemm_time_s(54 * 256, 130, k, Precision::FP16),
                cm.gemm_time_s(54 * 256, 256, k, Precision::FP16)),
            1e-12);
}

TEST(CostModel, EachWaveStoresItsTilesInTheEpilogue) {
  // The epilogue does not depend on k: with HBM at 7.0778 TB/s (x 1.0), storing 108 tiles of
  // 256 x 128 x 2 bytes takes exactly 1 us per wave, so a GEMM of 3 waves pays 3 us on top of
  // its main loops whatever its k.
  CalibrationProfile p = round_profile();
  p.hbm_efficiency = 1.0;
  p.kernel_launch_overhead_s = 0;
  SystemSpec sys = a100();
  sys.gpu.hbm_bw_bytes_per_s = 108.0 * 256 * 128 * 2 / 1e-6;
  CostModel cm(sys, p);
  for (double k : {256.0, 4096.0}) {
    const double main_loop_s = 2.0 * 256 * 128 * k / (kPeak * 0.8 / 108);
    // 3 x 108 tiles of 256x128 (m = 324 x 256, n = 128): three full waves.
    EXPECT_LT(rel(cm.gemm_compute_time_s(324 * 256, 128, k), 3 * (main_loop_s + 1e-6)), 1e-12)
        << k;
  }
  // A measured GEMM table replaces the wave model, epilogue included.
  p.gemm_efficiency = {{256, 256, 256, 1, 0.5, ""}};
  CostModel measured(sys, p);
  EXPECT_LT(rel(measured.gemm_compute_time_s(256, 256, 256), 2.0 * 256 * 256 * 256 / (kPeak * 0.5)),
            1e-12);
}

TEST(CostModel, GemmTableKeepsTheMeanOfEachShapeAndLayout) {
  // Three measurements of one shape in one layout average to their mean (not pairwise), the
  // same shape in another layout stays apart, points keep the order they were first measured.
  const std::vector<CalibrationProfile::GemmPoint> measured = {
      {256, 512, 1024, 1, 0.3, "fwd"},  {64, 64, 64, 16, 0.2, "bmm"},
      {256, 512, 1024, 1, 0.6, "fwd"},  {256, 512, 1024, 1, 0.45, "dgrad"},
      {256, 512, 1024, 1, 0.9, "fwd"},  {64, 64, 64, 16, 0.4, "bmm"}};
  const std::vector<CalibrationProfile::GemmPoint> table = mean_gemm_points(measured);
  ASSERT_EQ(table.size(), 3u);
  EXPECT_EQ(table[0].role, "fwd");
  EXPECT_NEAR(table[0].efficiency, (0.3 + 0.6 + 0.9) / 3, 1e-15);
  EXPECT_EQ(table[1].role, "bmm");
  EXPECT_NEAR(table[1].efficiency, 0.3, 1e-15);
  EXPECT_EQ(table[1].batch, 16);
  EXPECT_EQ(table[2].role, "dgrad");
  EXPECT_EQ(table[2].efficiency, 0.45);
  EXPECT_TRUE(mean_gemm_points({}).empty());
}

TEST(CostModel, SplitAccumulatorFp8GemmsWaitForTheirPromotions) {
  // H100 SXM datasheet: FP8 1979 TFLOP/s dense, FP32 67 TFLOP/s (an FMA counted twice, so
  // 33.5e12 FADDs/s). Per promotion every 128 k elements a 256 x 128 tile does
  // 2 x 256 x 128 x 128 FLOPs at 1979e12 x eff / 132 per SM, then 256 x 128 FADDs at
  // 33.5e12 / 132 per SM: the main loop grows by their ratio.
  const SystemSpec& sys = find_system("dgx-h100");
  const CalibrationProfile p = default_calibration("H100-SXM5-80GB");
  ASSERT_EQ(p.gemm_fp8_promotion_interval_k, 128);
  const double eff = p.gemm_fp8_max_efficiency;
  const double tile = 256.0 * 128;
  const double mma_s = 2 * tile * 128 / (1979e12 * eff / 132);
  const double fadd_s = tile / (67e12 / 2 / 132);
  CostModel cm(sys, p);
  EXPECT_NEAR(cm.fp8_promotion_overhead(), fadd_s / mma_s, 1e-12);
  EXPECT_NEAR(cm.fp8_promotion_overhead(), 0.164, 0.001);
  // The main loop is linear in k, the epilogue is not: t(2k) - t(k) is the main loop at k.
  const double m = 8192, n = 4096, k = 4096;
  const double fast = cm.gemm_compute_time_s(m, n, k, 1, "dgrad", true, false);
  const double main_loop = cm.gemm_compute_time_s(m, n, 2 * k, 1, "dgrad", true, false) - fast;
  const double split = cm.gemm_compute_time_s(m, n, k, 1, "dgrad", true, true);
  EXPECT_NEAR(split - fast, main_loop * fadd_s / mma_s, 1e-12 * fast);
  // Non-FP8 GEMMs and profiles without the interval are untouched.
  EXPECT_EQ(cm.gemm_compute_time_s(m, n, k, 1, "dgrad", false, true),
            cm.gemm_compute_time_s(m, n, k, 1, "dgrad", false, false));
  CalibrationProfile none = p;
  none.gemm_fp8_promotion_interval_k = 0;
  EXPECT_EQ(CostModel(sys, none).gemm_compute_time_s(m, n, k, 1, "dgrad", true, true), fast);
}

TEST(CostModel, OverlappedTensorParallelGemms) {
  // H100: NVLink 450 GB/s per direction x the profile's efficiency carries the bytes a rank
  // sends; the GEMM's pieces G (pieces of m / c rows each, with their own waves).
  const SystemSpec& sys = find_system("dgx-h100");
  const CalibrationProfile p = default_calibration("H100-SXM5-80GB");
  CostModel cm(sys, p);
  const double link = 450e9 * p.nvlink_efficiency, launch = p.kernel_launch_overhead_s;
  KernelWork k;
  k.name = "qkv_gemm";
  k.cls = KernelClass::Gemm;
  k.pass = GemmPass::Forward;
  k.m = 8192;
  k.n = 1536;
  k.k = 4096;
  k.fp8 = true;
  const double G = 4 * cm.gemm_compute_time_s(2048, 1536, 4096, 1, "fwd", true);
  for (double X : {0.1 * G, 3 * G}) {  // GEMM-bound, then communication-bound
    k.overlap_comm_bytes = X * link;
    k.overlap_chunks = 4;  // ring exchange: max(G, X + G / 4)
    k.overlap_pipeline = false;
    k.overlap_sms = 0;
    EXPECT_NEAR(cm.kernel_time_s(k), std::max(G, X + G / 4) + launch, 1e-12) << X;
    k.overlap_pipeline = true;  // pipelined reduce-scatter on 132 - 16 SMs
    k.overlap_sms = 16;
    const double Gp = G * 132 / 116;
    EXPECT_NEAR(cm.kernel_time_s(k), std::max(Gp + X / 4, X + Gp / 4) + launch, 1e-12) << X;
    k.overlap_chunks = 0;  // bulk: the unsplit GEMM beside the collective
    k.overlap_pipeline = false;
    k.overlap_sms = 0;
    const double whole = cm.gemm_compute_time_s(8192, 1536, 4096, 1, "fwd", true);
    EXPECT_NEAR(cm.kernel_time_s(k), std::max(whole, X) + launch, 1e-12) << X;
  }
}

TEST(CostModel, MemoryBoundKernelsAndSmallGemms) {
  CostModel cm(a100(), round_profile());
  const double bw = 2039e9 * 0.5;
  EXPECT_LT(rel(cm.memory_bound_time_s(1e9), 1e9 / bw + 1e-6), 1e-12);
  EXPECT_DOUBLE_EQ(cm.memory_bound_time_s(0), 1e-6);
  // Attention scores GEMM, k = head_dim = 64: arithmetic intensity ~ 64 FLOP/B, far below
  // the A100 ridge. 8 x 16 tiles x 32 products = 4096 tiles = 38 waves; each wave's main
  // loop is short (2 x 256 x 128 x 64 FLOPs per SM: 1.8 us) and its epilogue stores the
  // 108 output tiles (6.9 us), so the kernel takes main loops + stores, more than the
  // roofline's bytes / bandwidth (the loads of A and B and the stores of C do not overlap in
  // a one-tile-per-SM kernel).
  const double s = 2048, hd = 64, batch = 32;
  const double bytes = (s * hd + hd * s + s * s) * 2 * batch;
  const double waves = 38, main_loop_s = 2.0 * 256 * 128 * hd / (kPeak * 0.8 / 108);
  const double epilogue_s = 108.0 * 256 * 128 * 2 / bw;
  const double expected = waves * (main_loop_s + epilogue_s);
  EXPECT_GT(expected, bytes / bw);
  EXPECT_LT(expected, 1.25 * bytes / bw);
  EXPECT_LT(rel(cm.gemm_time_s(s, s, hd, Precision::FP16, batch), expected + 1e-6), 1e-12);
}

OpDesc layer_op(OpKind kind) {
  OpDesc op;
  op.kind = kind;
  op.micro_batch = 2;
  op.seq = 2048;
  op.hidden = 8192;
  op.heads = 8;
  op.head_dim = 128;
  op.ffn = 4096;
  op.vocab = 6400;
  op.tp = 8;
  fill_work(op);
  return op;
}

TEST(CostModel, ComputeTimeIsTheSumOfItsKernels) {
  CostModel cm(a100(), round_profile());
  // One op by hand: layer_op(MlpFwd) is b = 2, s = 2048 (T = b s = 4096 tokens), h = 8192,
  // ffn / tp = 4096, fp16. Megatron's ParallelMLP forward launches five kernels: LayerNorm,
  // fc1 GEMM, fused bias + GeLU, fc2 GEMM, fused bias-dropout-add. Each costs its roofline
  // time plus one launch; the GEMMs are compute-bound, with wave quantization over 108 SMs of
  // 256x128 tiles (either orientation gives the same count here).
  {
    const double bw = 2039e9 * 0.5, launch = 1e-6;
    const double tile_s_per_k = 2.0 * 256 * 128 / (kPeak * 0.8 / 108);  // one wave, per unit k
    const double epilogue_s = 108.0 * 256 * 128 * 2 / bw;  // each wave stores its tiles
    // read x, write y (2 B each), fp32 mean and inverse variance per token
    const double layernorm = 4096.0 * (2 * 8192 * 2 + 2 * 4) / bw + launch;
    // [4096 x 8192] x [8192 x 4096]: 16 x 32 = 512 tiles = 5 waves (HBM: 168 MB, 0.16 ms < 1.2 ms)
    const double fc1 = 5 * (tile_s_per_k * 8192 + epilogue_s) + launch;
    // read the fc1 output and the bias, write the activation
    const double bias_gelu = (2.0 * 4096 * 4096 + 4096) * 2 / bw + launch;
    // [4096 x 4096] x [4096 x 8192]: 16 x 64 = 1024 tiles = 10 waves (9 x 108 = 972 < 1024)
    const double fc2 = 10 * (tile_s_per_k * 4096 + epilogue_s) + launch;
    // read x, bias, residual, write out (2 B each) and a 1-byte dropout mask; read the bias
    const double bias_dropout_add = (4096.0 * 8192 * (4 * 2 + 1) + 8192 * 2) / bw + launch;
    EXPECT_LT(rel(cm.compute_time_s(layer_op(OpKind::MlpFwd)),
                  layernorm + fc1 + bias_gelu + fc2 + bias_dropout_add),
              1e-12);
  }
  for (OpKind kind : {OpKind::AttnFwd, OpKind::MlpFwd, OpKind::AttnBwd, OpKind::MlpBwd,
                      OpKind::EmbedFwd, OpKind::EmbedBwd, OpKind::LogitsLossFwd,
                      OpKind::LogitsLossBwd}) {
    const OpDesc op = layer_op(kind);
    double lower = 0;
    for (const KernelWork& k : op_kernels(op))
      lower += std::max(k.flops / (kPeak * 0.8), k.bytes / (2039e9 * 0.5));
    // No kernel runs faster than its roofline.
    EXPECT_GE(cm.compute_time_s(op), lower) << to_string(kind);
  }
  // Backward of a layer costs more than its forward (twice the FLOPs).
  EXPECT_GT(cm.compute_time_s(layer_op(OpKind::MlpBwd)),
            1.8 * cm.compute_time_s(layer_op(OpKind::MlpFwd)));
  OpDesc comm;
  comm.kind = OpKind::AllReduce;
  EXPECT_THROW(cm.compute_time_s(comm), trainsim::InvariantError);
}

TEST(CostModel, OptimizerSteps) {
  CostModel cm(a100(), round_profile());
  OpDesc gpu;
  gpu.kind = OpKind::OptimizerStepGpu;
  gpu.params = 100'000'000;
  EXPECT_LT(rel(cm.compute_time_s(gpu), 54.0 * 1e8 / (2039e9 * 0.5) + 1e-6), 1e-12);
  OpDesc cpu;
  cpu.kind = OpKind::OptimizerStepCpu;
  cpu.params = 100'000'000;
  // Memory side: 30 B/param over 400 GB/s * 0.5 / 8 GPUs = 25 GB/s -> 0.12 s.
  // Compute side: 15 FLOP/param over 128/8 = 16 cores * 10 GFLOP/s -> 0.0094 s.
  EXPECT_LT(rel(cm.compute_time_s(cpu), 30.0 * 1e8 / 25e9), 1e-12);
  CalibrationProfile slow = round_profile();
  slow.cpu_flops_per_core_per_s = 0.1e9;  // now compute-bound: 15e8 / (16 * 0.1e9) = 0.9375 s
  EXPECT_LT(rel(CostModel(a100(), slow).compute_time_s(cpu), 15.0 * 1e8 / (16 * 0.1e9)), 1e-12);
}

TEST(CostModel, RingBytesAndAlphaBeta) {
  CostModel cm(a100(), round_profile());
  const double S = 1e9;
  EXPECT_DOUBLE_EQ(CostModel::ring_bytes_per_rank(OpKind::AllReduce, S, 8), 2.0 * 7 / 8 * S);
  EXPECT_DOUBLE_EQ(CostModel::ring_bytes_per_rank(OpKind::ReduceScatter, S, 4), 3.0 / 4 * S);
  EXPECT_DOUBLE_EQ(CostModel::ring_bytes_per_rank(OpKind::AllGather, S, 4), 3.0 / 4 * S);
  EXPECT_DOUBLE_EQ(CostModel::ring_bytes_per_rank(OpKind::AllReduce, S, 1), 0.0);
  EXPECT_THROW(CostModel::ring_bytes_per_rank(OpKind::AttnFwd, S, 4), trainsim::InvariantError);

  // latency: launch + steps * per-step latency (all-reduce 2(n-1) steps, RS/AG n-1).
  EXPECT_DOUBLE_EQ(cm.collective_latency_s(OpKind::AllReduce, 8, true), 10e-6 + 14 * 2e-6);
  EXPECT_DOUBLE_EQ(cm.collective_latency_s(OpKind::AllGather, 8, true), 10e-6 + 7 * 2e-6);
  EXPECT_DOUBLE_EQ(cm.collective_latency_s(OpKind::ReduceScatter, 32, false), 10e-6 + 31 * 5e-6);
  EXPECT_DOUBLE_EQ(cm.collective_latency_s(OpKind::AllReduce, 1, true), 0.0);

  // alpha-beta: 8 GPUs on NVLink at 300 GB/s nominal, 75% achieved.
  const double t = cm.collective_time_s(OpKind::AllReduce, S, 8, 300e9, true);
  EXPECT_LT(rel(t, 10e-6 + 14 * 2e-6 + 2.0 * 7 / 8 * S / (300e9 * 0.75)), 1e-12);
  const double t_net = cm.collective_time_s(OpKind::AllReduce, S, 16, 25e9, false);
  EXPECT_LT(rel(t_net, 10e-6 + 30 * 5e-6 + 2.0 * 15 / 16 * S / (25e9 * 0.9)), 1e-12);
  EXPECT_DOUBLE_EQ(cm.nvlink_efficiency(), 0.75);
  EXPECT_DOUBLE_EQ(cm.network_efficiency(), 0.9);
  EXPECT_DOUBLE_EQ(cm.pcie_efficiency(), 0.8);
}

// ---------------------------------------------------------------------------- calibration
std::string temp_path(const std::string& name) {
  return testing::TempDir() + "trainsim_calib_" + name + ".json";
}

TEST(Calibration, DefaultsAreEmbeddedForEveryCatalogGpu) {
  for (const char* gpu : {"A100-SXM4-40GB", "A100-SXM4-80GB", "H100-SXM5-80GB"}) {
    CalibrationProfile p = default_calibration(gpu);
    EXPECT_EQ(p.device, gpu);
    EXPECT_GT(p.gemm_max_efficiency, 0.5);
    EXPECT_LE(p.gemm_max_efficiency, 1.0);
    // Every parameter of a shipped profile carries its source; the optional FP8 GEMM
    // parameters are absent exactly where the GPU has no FP8 tensor cores (A100), the NVLS
    // latency where its NVSwitch has no NVLink SHARP (A100), the MoE scatter-add rate where it
    // was not measured (A100: the HBM rate stands in), the MXFP8 quantize rate on GPUs
    // without MXFP8 (before Blackwell).
    const bool fp8 = std::string(gpu).rfind("H100", 0) == 0;
    for (const auto& name : calibration_parameter_names())
      if (name != "mxfp8_quantize_bytes_per_s" &&
          ((name.rfind("gemm_fp8_", 0) != 0 && name != "nccl_nvls_latency_s" &&
            name != "moe_scatter_add_bytes_per_s") ||
           fp8))
        EXPECT_FALSE(p.sources[name].empty()) << gpu << " " << name;
    EXPECT_EQ(p.gemm_fp8_max_efficiency > 0, fp8) << gpu;
    EXPECT_EQ(p.gemm_fp8_promotion_interval_k > 0, fp8) << gpu;
    EXPECT_EQ(p.nccl_nvls_latency_s > 0, fp8) << gpu;
  }
  EXPECT_EQ(default_calibration("A100-SXM4-80GB").sm_count, 108);
  EXPECT_EQ(default_calibration("H100-SXM5-80GB").sm_count, 132);
  try {
    default_calibration("V100-SXM2-32GB");
    FAIL() << "expected InputError";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("V100-SXM2-32GB"), std::string::npos);
    EXPECT_NE(std::string(e.what()).find("A100-SXM4-80GB"), std::string::npos);
  }
}

TEST(Calibration, EmbeddedTextMatchesTheSourceTree) {
  // The build embeds calibration/*.json; the embedded copy must equal the file on disk.
  for (const auto& [name, text] : detail::embedded_calibration_files()) {
    const std::string path = source_path("calibration/" + name);
    EXPECT_EQ(load_calibration(path), parse_calibration(text, name)) << path;
  }
  EXPECT_EQ(detail::embedded_calibration_files().size(), 6u);  // A100 40/80, H100, H200, B200, GB200
}

TEST(Calibration, RoundTrip) {
  CalibrationProfile p = round_profile();
  p.date = "2024-01-02";
  p.notes = "a note";
  p.sources["hbm_efficiency"] = "measured by hand";
  p.kernel_launch_overhead_s = 3.3e-6;  // not exactly representable: must round-trip anyway
  const std::string path = temp_path("roundtrip");
  save_calibration(p, path);
  EXPECT_EQ(load_calibration(path), p);
  const CalibrationProfile d = default_calibration("H100-SXM5-80GB");
  save_calibration(d, path);
  EXPECT_EQ(load_calibration(path), d);
  std::remove(path.c_str());
}

using test_support::expect_profile_refused;

// A valid profile's text with one parameter's entry replaced.
std::string with_param(const std::string& name, const std::string& entry) {
  std::string text = calibration_to_json(round_profile());
  const std::string key = "\"" + name + "\": ";
  const auto at = text.find(key);
  EXPECT_NE(at, std::string::npos);
  const auto end = text.find_first_of(",\n", at + key.size());
  return text.substr(0, at + key.size()) + entry + text.substr(end);
}

TEST(Calibration, ErrorsNameFileFieldAndValue) {
  expect_profile_refused(with_param("hbm_efficiency", "-0.5"), "parameters.hbm_efficiency", "-0.5");
  expect_profile_refused(with_param("hbm_efficiency", "1.5"), "parameters.hbm_efficiency", "1.5");
  expect_profile_refused(with_param("sm_count", "\"many\""), "parameters.sm_count", "\"many\"");
  expect_profile_refused(with_param("sm_count", "107.5"), "parameters.sm_count", "107.5");
  expect_profile_refused(with_param("kernel_launch_overhead_s", "-1e-06"),
                     "parameters.kernel_launch_overhead_s", "-1e-06");
  expect_profile_refused(with_param("gemm_max_efficiency", "{\"value\": 0.8, \"sorce\": \"x\"}"),
                     "parameters.gemm_max_efficiency.sorce", "\"x\"");
  expect_profile_refused(with_param("gemm_max_efficiency", "{\"value\": 0.8, \"source\": 3}"),
                     "parameters.gemm_max_efficiency.source", "3");
  expect_profile_refused(with_param("gemm_max_efficiency", "{\"value\": \"0.8\"}"),
                     "parameters.gemm_max_efficiency.value", "\"0.8\"");
  // Unknown parameter and unknown top-level key.
  std::string text = calibration_to_json(round_profile());
  std::string unknown = text;
  unknown.replace(unknown.find("\"parameters\": {") + 15, 0, "\"gemm_magic\": 1, ");
  expect_profile_refused(unknown, "parameters.gemm_magic", "1");
  std::string top = text;
  top.replace(top.find('{') + 1, 0, "\"devise\": \"A100\", ");
  expect_profile_refused(top, "devise", "\"A100\"");
  // A missing parameter.
  std::string missing = text;
  const auto at = missing.find("\"pcie_efficiency\"");
  missing.erase(at, missing.find('\n', at) - at + 1);
  expect_profile_refused(missing, "parameters.pcie_efficiency", "(missing)");
  // Not JSON at all, and a missing file.
  EXPECT_THROW(parse_calibration("{ not json", "bad.json"), InputError);
  EXPECT_THROW(load_calibration("/nonexistent/dir/profile.json"), InputError);
}

// A valid profile's text with a flash_attention_efficiency table (JSON text) added.
std::string with_attention_table(const std::string& table_json) {
  std::string text = calibration_to_json(round_profile());
  text.replace(text.find('{') + 1, 0, "\"flash_attention_efficiency\": " + table_json + ", ");
  return text;
}

TEST(Calibration, AttentionTableParsesRoundTripsAndNamesBadEntries) {
  const CalibrationProfile p = parse_calibration(
      with_attention_table("{\"source\": \"paper\", \"points\": [[64, 512, 0.3, 0.25], "
                           "[128, 512, 0.5, 0.3]]}"),
      "ok.json");
  ASSERT_EQ(p.flash_attention_efficiency.size(), 2u);
  EXPECT_EQ(p.flash_attention_efficiency[1],
            (CalibrationProfile::AttentionPoint{128, 512, 0.5, 0.3}));
  EXPECT_EQ(p.flash_attention_efficiency_source, "paper");
  EXPECT_EQ(parse_calibration(calibration_to_json(p), "again.json"), p);
  const std::string f = "flash_attention_efficiency";
  expect_profile_refused(with_attention_table("[1]"), f, "[1]");
  expect_profile_refused(with_attention_table("{\"points\": [[64, 512, 0.3, 0.2]]}"), f + ".source",
                     "(missing)");
  expect_profile_refused(with_attention_table("{\"source\": \"s\", \"pts\": []}"), f + ".pts",
                     "[]");
  expect_profile_refused(with_attention_table("{\"source\": \"s\", \"points\": []}"),
                     f + ".points", "[]");
  expect_profile_refused(with_attention_table("{\"source\": \"s\", \"points\": [[64, 512, 0.3]]}"),
                     f + ".points[0]", "[64,512,0.3]");
  expect_profile_refused(
      with_attention_table("{\"source\": \"s\", \"points\": [[64, 512, 1.3, 0.2]]}"),
      f + ".points[0]", "1.3");
  expect_profile_refused(
      with_attention_table("{\"source\": \"s\", \"points\": [[64, 0, 0.3, 0.2]]}"),
      f + ".points[0]", "[64,0,0.3,0.2]");
  expect_profile_refused(with_attention_table("{\"source\": \"s\", \"points\": [[64, 512, 0.3, "
                                          "0.2], [64, 512, 0.4, 0.2]]}"),
                     f + ".points[1]", "0.4");
}

TEST(Calibration, AttentionEfficiencyByHeadDimAndSequence) {
  const std::vector<CalibrationProfile::AttentionPoint> t = {
      {64, 1024, 0.30, 0.20}, {64, 4096, 0.40, 0.36}, {128, 1024, 0.50, 0.40},
      {128, 4096, 0.60, 0.50}};
  // Exact points.
  EXPECT_DOUBLE_EQ(interpolate_attention_efficiency(t, 64, 4096, false), 0.40);
  EXPECT_DOUBLE_EQ(interpolate_attention_efficiency(t, 128, 1024, true), 0.40);
  // 2048 is halfway between 1024 and 4096 in log2: the mean of the two.
  EXPECT_NEAR(interpolate_attention_efficiency(t, 128, 2048, false), 0.55, 1e-12);
  EXPECT_NEAR(interpolate_attention_efficiency(t, 64, 2048, true), 0.28, 1e-12);
  // Outside the measured sequences: the end values.
  EXPECT_DOUBLE_EQ(interpolate_attention_efficiency(t, 64, 128, false), 0.30);
  EXPECT_DOUBLE_EQ(interpolate_attention_efficiency(t, 128, 65536, true), 0.50);
  // Head dimensions: the nearest in log2 (256 -> 128, 80 -> 64, 96 -> 128: log2 distances
  // 0.585 to 64 and 0.415 to 128).
  EXPECT_DOUBLE_EQ(interpolate_attention_efficiency(t, 256, 4096, false), 0.60);
  EXPECT_DOUBLE_EQ(interpolate_attention_efficiency(t, 80, 4096, false), 0.40);
  EXPECT_DOUBLE_EQ(interpolate_attention_efficiency(t, 96, 4096, false), 0.60);
  EXPECT_THROW(interpolate_attention_efficiency({}, 64, 4096, false), trainsim::InvariantError);
  EXPECT_THROW(interpolate_attention_efficiency(t, 0, 4096, false), trainsim::InvariantError);
}

TEST(CostModel, FusedAttentionTakesTheTableRateOfItsShape) {
  CalibrationProfile p = round_profile();
  p.flash_attention_fwd_efficiency = 0.6;
  p.flash_attention_bwd_efficiency = 0.5;
  const double flops = 1e12;
  // Without a table: the scalars.
  EXPECT_DOUBLE_EQ(CostModel(a100(), p).attention_compute_time_s(flops, false, 64, 4096),
                   flops / (kPeak * 0.6));
  p.flash_attention_efficiency = {{64, 4096, 0.4, 0.3}, {128, 4096, 0.6, 0.5}};
  const CostModel cm(a100(), p);
  EXPECT_DOUBLE_EQ(cm.attention_compute_time_s(flops, false, 64, 4096), flops / (kPeak * 0.4));
  EXPECT_DOUBLE_EQ(cm.attention_compute_time_s(flops, true, 64, 4096), flops / (kPeak * 0.3));
  // A kernel without a shape (0) keeps the scalar.
  EXPECT_DOUBLE_EQ(cm.attention_compute_time_s(flops, true), flops / (kPeak * 0.5));
  // The flash kernels of a Megatron-Core op carry their head dimension and sequence: a
  // head-dim-64 attention forward at seq 4096 runs at the table's 0.4.
  OpDesc op;
  op.kind = OpKind::AttnFwd;
  op.micro_batch = 1;
  op.seq = 4096;
  op.hidden = 2048;
  op.heads = 32;
  op.head_dim = 64;
  op.ffn = 8192;
  op.vocab = 1024;
  op.tp = 1;
  op.features.core = true;
  op.features.attention = 2;  // AttentionBackend flash
  op.features.kv_heads = 32;
  op.features.hidden_dropout = false;
  op.features.attention_dropout = false;
  fill_work(op);
  bool found = false;
  for (const KernelWork& k : op_kernels(op)) {
    if (k.cls != KernelClass::Attention) continue;
    found = true;
    EXPECT_EQ(k.head_dim, 64);
    EXPECT_EQ(k.seq_length, 4096);
    EXPECT_DOUBLE_EQ(cm.kernel_time_s(k),
                     std::max(k.flops / (kPeak * 0.4), k.bytes / (2039e9 * 0.5)) + 1e-6);
  }
  EXPECT_TRUE(found);
}

TEST(Calibration, BareNumbersAreAccepted) {
  CalibrationProfile p = parse_calibration(with_param("hbm_efficiency", "0.9"), "ok.json");
  EXPECT_DOUBLE_EQ(p.hbm_efficiency, 0.9);
  p = parse_calibration(with_param("hbm_efficiency", "{\"value\": 0.7, \"source\": \"probe\"}"),
                        "ok.json");
  EXPECT_DOUBLE_EQ(p.hbm_efficiency, 0.7);
  EXPECT_EQ(p.sources.at("hbm_efficiency"), "probe");
}

}  // namespace
}  // namespace trainsim
