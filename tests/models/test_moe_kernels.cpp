// The MoE layer's kernels as Megatron-Core runs them (models/perf/flops_moe.cpp): the expert
// GEMMs at a profile's measured rate by tokens per expert (calibration.h
// moe_grouped_gemm_efficiency), and the token permutation fused (Transformer Engine) or unfused
// (index_select / scatter_add_, the scatter-adds at the profile's moe_scatter_add_bytes_per_s).
// Each expected number is computed here by hand; each bad input names the file, the field and
// the value.
#include <gtest/gtest.h>

#include <cmath>
#include <string>

#include "models/builder/graph_builder.h"
#include "models/errors.h"
#include "models/hardware/calibration.h"
#include "models/hardware/hardware.h"
#include "models/input/scenario.h"
#include "models/memory/memory_model.h"
#include "models/perf/cost_model.h"
#include "models/perf/flops.h"
#include "tests/support/moe_scenario.h"

namespace trainsim {
namespace {

// test_support::kSmallMoeModel on EP 1: 8192 token copies on the rank, 1024 per expert.
Scenario moe(const std::string& extra) {
  return test_support::small_moe_scenario(extra, 1, "kernels.yaml");
}

/// Rank 0's first MoE MLP op of `kind`.
OpDesc moe_op(const Scenario& sc, OpKind kind) {
  return test_support::first_rank_op(
      sc, [kind](const OpDesc& o) { return o.kind == kind && o.features.experts_local > 0; });
}

KernelWork kernel(const OpDesc& op, const std::string& name) {
  for (const KernelWork& k : op_kernels(op))
    if (name == k.name) return k;
  ADD_FAILURE() << "no kernel " << name;
  return {};
}

TEST(MoeKernels, ExpertGemmEfficiencyIsPiecewiseLinearInLog2Tokens) {
  const std::vector<CalibrationProfile::MoeGemmPoint> table = {{2048, 0.4}, {512, 0.2}};
  EXPECT_DOUBLE_EQ(interpolate_moe_gemm_efficiency(table, 1024), 0.3);  // halfway in log2
  EXPECT_DOUBLE_EQ(interpolate_moe_gemm_efficiency(table, 512), 0.2);
  EXPECT_DOUBLE_EQ(interpolate_moe_gemm_efficiency(table, 64), 0.2);    // held below
  EXPECT_DOUBLE_EQ(interpolate_moe_gemm_efficiency(table, 8192), 0.4);  // held above
}

TEST(MoeKernels, ExpertGemmsCarryTheirTokensPerExpert) {
  const OpDesc fwd = moe_op(moe(""), OpKind::MlpFwd);
  const KernelWork fc1 = kernel(fwd, "expert_fc1_gemm");
  EXPECT_EQ(fc1.tokens_per_expert, 1024);  // 4096 x 2 / 8
  EXPECT_EQ(fc1.batch, 8);
  EXPECT_EQ(kernel(moe_op(moe(""), OpKind::MlpBwd), "expert_fc1_wgrad").tokens_per_expert, 1024);
  EXPECT_EQ(kernel(fwd, "router_gemm").tokens_per_expert, 0);  // not an expert GEMM
}

TEST(MoeKernels, ExpertGemmsRunAtTheTableRate) {
  const OpDesc fwd = moe_op(moe(""), OpKind::MlpFwd);
  const KernelWork fc1 = kernel(fwd, "expert_fc1_gemm");
  const SystemSpec& sys = find_system("dgx-h100");
  CalibrationProfile p = default_calibration(sys.gpu.name);
  const double wave_s = CostModel(sys, p).kernel_time_s(fc1);
  p.moe_grouped_gemm_efficiency = {{512, 0.2}, {2048, 0.4}};
  // 1024 tokens per expert: 0.3 of the 989 TFLOP/s BF16 peak; fc1 is 8 experts x 1024 x
  // (2 x 256) x 512 x 2 FLOPs.
  const double flops = 8.0 * 1024 * 512 * 512 * 2;
  EXPECT_EQ(fc1.flops, flops);
  const double expected = flops / (sys.gpu.peak_dense_fp16_flops * 0.3) + p.kernel_launch_overhead_s;
  EXPECT_NEAR(CostModel(sys, p).kernel_time_s(fc1), expected, expected * 1e-12);
  EXPECT_NE(CostModel(sys, p).kernel_time_s(fc1), wave_s);
}

TEST(MoeKernels, UnfusedUnpermuteScatterAddsAtTheMeasuredRate) {
  const OpDesc unfused_fwd = moe_op(moe(""), OpKind::MlpFwd);
  const OpDesc fused_fwd = moe_op(moe(", moe_permute_fusion: true"), OpKind::MlpFwd);
  // 8192 copies x 512 x 2 bytes are added into the 4096 token rows.
  const double added = 8192.0 * 512 * 2;
  EXPECT_EQ(kernel(unfused_fwd, "moe_unpermute").scatter_add_bytes, added);
  EXPECT_EQ(kernel(unfused_fwd, "moe_permute").scatter_add_bytes, 0);  // index_select: a gather
  EXPECT_EQ(kernel(fused_fwd, "moe_unpermute").scatter_add_bytes, 0);
  const OpDesc unfused_bwd = moe_op(moe(""), OpKind::MlpBwd);
  EXPECT_EQ(kernel(unfused_bwd, "moe_permute_bwd").scatter_add_bytes, added);  // index_add_
  EXPECT_EQ(kernel(unfused_bwd, "moe_unpermute_bwd").scatter_add_bytes, 0);
  // Both move the same bytes; only the unfused one's scatter runs at the measured rate.
  const KernelWork u = kernel(unfused_fwd, "moe_unpermute");
  EXPECT_EQ(u.bytes, kernel(fused_fwd, "moe_unpermute").bytes);
  const SystemSpec& sys = find_system("dgx-h100");
  const CalibrationProfile p = default_calibration(sys.gpu.name);
  ASSERT_GT(p.moe_scatter_add_bytes_per_s, 0);
  const double expected = added / p.moe_scatter_add_bytes_per_s + p.kernel_launch_overhead_s;
  EXPECT_NEAR(CostModel(sys, p).kernel_time_s(u), expected, expected * 1e-12);
  // Without the measured rate, the HBM rate (as the fused kernel).
  CalibrationProfile no_rate = p;
  no_rate.moe_scatter_add_bytes_per_s = 0;
  EXPECT_EQ(CostModel(sys, no_rate).kernel_time_s(u),
            CostModel(sys, no_rate).kernel_time_s(kernel(fused_fwd, "moe_unpermute")));
}

TEST(MoeKernels, BadInputsNameTheFileTheFieldAndTheValue) {
  try {
    moe(", moe_permute_fusion: sometimes");
    ADD_FAILURE() << "moe_permute_fusion: sometimes accepted";
  } catch (const InputError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("kernels.yaml"), std::string::npos) << what;
    EXPECT_NE(what.find("model.moe_permute_fusion"), std::string::npos) << what;
    EXPECT_NE(what.find("sometimes"), std::string::npos) << what;
  }
  const std::string head =
      R"({"version": 1, "device": "H100-SXM5-80GB", "source": "t", "date": "2026-11-27",
          "parameters": {"gemm_max_efficiency": 0.8, "gemm_tile_m": 256, "gemm_tile_n": 128,
          "sm_count": 132, "hbm_efficiency": 0.8, "kernel_launch_overhead_s": 4e-6,
          "nvlink_efficiency": 0.8, "network_efficiency": 0.9, "pcie_efficiency": 0.7,
          "nccl_launch_latency_s": 8e-6, "nccl_step_latency_intra_node_s": 3e-6,
          "nccl_step_latency_inter_node_s": 1e-5, "host_memory_bw_bytes_per_s": 6e11,
          "host_memory_efficiency": 0.1, "cpu_flops_per_core_per_s": 6e10,
          "framework_overhead_bytes": 1e9, "nccl_buffer_bytes_per_communicator": 6e7)";
  const std::pair<std::string, std::vector<std::string>> cases[] = {
      {head + R"(, "moe_scatter_add_bytes_per_s": -1}})",
       {"parameters.moe_scatter_add_bytes_per_s", "-1"}},
      {head + R"(}, "moe_grouped_gemm_efficiency": {"source": "s", "points": [[0, 0.5]]}})",
       {"moe_grouped_gemm_efficiency.points[0]", "[0,0.5]"}},
      {head + R"(}, "moe_grouped_gemm_efficiency": {"source": "s", "points": [[512, 1.5]]}})",
       {"moe_grouped_gemm_efficiency.points[0]", "[512,1.5]", "(0, 1]"}},
      {head + R"(}, "moe_grouped_gemm_efficiency": {"points": [[512, 0.5]]}})",
       {"moe_grouped_gemm_efficiency.source", "required"}},
      {head + R"(}, "moe_grouped_gemm_efficiency": {"source": "s", "points": [[512, 0.5], [512, 0.4]]}})",
       {"moe_grouped_gemm_efficiency.points[1]", "a second point"}},
  };
  for (const auto& [text, expects] : cases) {
    try {
      parse_calibration(text, "moe_profile.json");
      ADD_FAILURE() << text << " accepted";
    } catch (const InputError& e) {
      const std::string what = e.what();
      EXPECT_NE(what.find("moe_profile.json"), std::string::npos) << what;
      for (const std::string& x : expects)
        EXPECT_NE(what.find(x), std::string::npos) << x << " in: " << what;
    }
  }
  // A profile with a table round-trips through its JSON.
  CalibrationProfile p = parse_calibration(
      head + R"(}, "moe_grouped_gemm_efficiency": {"source": "s", "points": [[512, 0.25]]}})",
      "moe_profile.json");
  ASSERT_EQ(p.moe_grouped_gemm_efficiency.size(), 1u);
  EXPECT_EQ(parse_calibration(calibration_to_json(p), "again.json"), p);
}

// Expert tensor parallelism: EP 2 x ETP 2 on 8 GPUs. Each rank dispatches its 4096 x 2 = 8192
// copies over the EP all-to-all, then the ETP all-gather brings 2 x 8192 copies of 512 bf16
// (1024 bytes) plus a 4-byte fp32 probability each; the combine's reduce-scatter takes the
// 2 x 8192 x 1024 bytes of the experts' outputs. The 8 / 2 = 4 local experts run 16384 / 4 =
// 4096 tokens each on 256 / 2 = 128 columns of the expert MLP.
TEST(MoeKernels, ExpertTensorParallelCollectivesByHand) {
  const Scenario sc = parse_scenario(
      test_support::core_scenario_yaml(std::string(test_support::kSmallMoeModel),
                                       "precision: bf16, micro_batch_size: 1, "
                                       "global_batch_size: 8, expert_model_parallel_size: 2, "
                                       "expert_tensor_parallel_size: 2"),
      "etp.yaml");
  BuildOptions opt;
  opt.fold = false;
  const ScheduleGraph g = build_schedule_graph(validated(sc), cluster_system(sc.cluster), opt);
  int gathers = 0, scatters = 0, all_to_alls = 0;
  for (TaskId id = 0; id < g.num_tasks(); ++id) {
    const OpDesc& o = g.op(id);
    if (g.task(id).rank != g.simulated_ranks().front() || o.group != GroupKind::Expert) continue;
    if (o.kind == OpKind::AllGather) {
      ++gathers;
      EXPECT_EQ(o.group_size, 2);
      EXPECT_EQ(o.bytes, 2 * 8192 * (1024 + 4));
    } else if (o.kind == OpKind::ReduceScatter) {
      ++scatters;
      EXPECT_EQ(o.group_size, 2);
      EXPECT_EQ(o.bytes, 2 * 8192 * 1024);
    } else if (o.kind == OpKind::AllToAll) {
      ++all_to_alls;
      EXPECT_EQ(o.bytes, 8192 * 1024);  // unchanged by ETP: this rank's copies
    }
  }
  // 2 MoE layers x (forward, backward) x one microbatch (8 / (1 x DP 8)).
  EXPECT_EQ(gathers, 4);
  EXPECT_EQ(scatters, 4);
  EXPECT_EQ(all_to_alls, 8);
  const OpDesc fwd = moe_op(sc, OpKind::MlpFwd);
  const KernelWork fc1 = kernel(fwd, "expert_fc1_gemm");
  EXPECT_EQ(fc1.batch, 4);
  EXPECT_EQ(fc1.m, 4096);
  EXPECT_EQ(fc1.n, 2 * 128);
  EXPECT_EQ(fc1.tokens_per_expert, 4096);
  // The permutations stay on this rank's 8192 copies.
  EXPECT_EQ(kernel(fwd, "moe_permute").bytes, (8192.0 + 4096) * 512 * 2);
}

// The MoE layer's activations with ETP 2: the experts keep their 2 x 8192 = 16384 gathered
// copies (bf16, no FP8): the fc1 input 2 x 16384 x 512, the fc1 output 2 x 16384 x (2 x 128),
// the fp32 probabilities 4 x 16384 and the fc2 input 2 x 16384 x 128 = 29,425,664 bytes,
// against 2 x 8192 x 512 + 2 x 8192 x 512 + 4 x 8192 + 2 x 8192 x 256 = 21,004,288 with ETP 1
// (expert MLP 256); the layer's other terms do not change.
TEST(MoeKernels, ExpertTensorParallelActivationsByHand) {
  auto mlp_bytes = [](int etp) {
    const Scenario sc = parse_scenario(
        test_support::core_scenario_yaml(
            std::string(test_support::kSmallMoeModel),
            "precision: bf16, micro_batch_size: 1, global_batch_size: 8, "
            "expert_model_parallel_size: 2, expert_tensor_parallel_size: " + std::to_string(etp)),
        "etp.yaml");
    return layer_activation_bytes(validated(sc), true).mlp;
  };
  EXPECT_EQ(mlp_bytes(2) - mlp_bytes(1), 29425664 - 21004288);
}

TEST(MoeKernels, ExpertTensorParallelismWithTheAllgatherDispatcherIsRefused) {
  try {
    parse_scenario(test_support::core_scenario_yaml(
                       std::string(test_support::kSmallMoeModel) + ", moe_token_dispatcher_type: allgather",
                       "precision: bf16, micro_batch_size: 1, global_batch_size: 8, "
                       "expert_model_parallel_size: 2, expert_tensor_parallel_size: 2"),
                   "etp.yaml");
    ADD_FAILURE() << "ETP 2 with the allgather dispatcher accepted";
  } catch (const InputError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("etp.yaml"), std::string::npos) << what;
    EXPECT_NE(what.find("parallel.expert_tensor_parallel_size"), std::string::npos) << what;
    EXPECT_NE(what.find("allgather"), std::string::npos) << what;
  }
}

}  // namespace
}  // namespace trainsim
