// The MoE router's optional kernels (models/perf/flops_moe.cpp router_extras; Megatron-Core
// core_v0.16.0 router.py / moe_utils.py): their bytes against a hand count of the rank's router
// scores, the default kernel list unchanged, and every new key's bad value refused with the
// file, the field and the value.
#include <gtest/gtest.h>

#include <map>
#include <string>
#include <vector>

#include "models/builder/graph_builder.h"
#include "models/errors.h"
#include "models/hardware/hardware.h"
#include "models/perf/flops.h"
#include "tests/support/scenario_yaml.h"

namespace trainsim {
namespace {

// s 2048, b 1, 8 experts (top-2): 2048 x 8 = 16,384 router scores per rank (TP 1, CP 1).
const std::string kMoe =
    "num_layers: 2, hidden_size: 1024, num_attention_heads: 8, swiglu: true, "
    "normalization: RMSNorm, position_embedding_type: rope, add_bias_linear: false, "
    "hidden_dropout: 0.0, attention_dropout: 0.0, attention_backend: flash, seq_length: 2048, "
    "padded_vocab_size: 32000, num_experts: 8, moe_router_topk: 2, moe_ffn_hidden_size: 512, "
    "moe_grouped_gemm: true";
const char* kParallel = "micro_batch_size: 1, global_batch_size: 8, precision: bf16";
constexpr double kScores = 2048.0 * 8;

Scenario scenario(const std::string& extra) {
  return parse_scenario(test_support::core_scenario_yaml(kMoe + extra, kParallel), "rt.yaml");
}

/// Bytes of the router kernels (names starting router_) of the MoE forward or backward op.
std::map<std::string, double> router_kernels(const std::string& extra, bool forward) {
  BuildOptions opt;
  opt.fold = true;
  const ScheduleGraph g =
      build_schedule_graph(validated(scenario(extra)), find_system("dgx-h100"), opt);
  std::map<std::string, double> out;
  for (const OpDesc& op : g.ops()) {
    if (op.features.experts_local == 0) continue;
    if (op.kind != (forward ? OpKind::MlpFwd : OpKind::MlpBwd)) continue;
    for (const KernelWork& k : op_kernels(op))
      if (std::string(k.name).rfind("router_", 0) == 0) out[k.name] += k.bytes;
    break;
  }
  return out;
}

TEST(RouterKernels, DefaultRouterIsTheGemmAndOneTopkPass) {
  const auto fwd = router_kernels("", true);
  EXPECT_EQ(fwd.size(), 2u);
  EXPECT_EQ(fwd.count("router_gemm"), 1u);
  EXPECT_DOUBLE_EQ(fwd.at("router_topk"), kScores * 8);
}

TEST(RouterKernels, AuxLossZLossAndExpertBiasAddTheirPasses) {
  const std::string extra =
      ", moe_aux_loss_coeff: 0.001, moe_z_loss_coeff: 0.001, "
      "moe_router_score_function: sigmoid, moe_router_enable_expert_bias: true";
  const auto fwd = router_kernels(extra, true);
  // Unfused: bias add (read + write fp32), tokens per expert (1 B map), aux scores (8 B), aux
  // top-k into the map (4 + 1 B), aux loss sums (4 + 1 B), z-loss logsumexp (4 B).
  EXPECT_DOUBLE_EQ(fwd.at("router_expert_bias_add"), kScores * 8);
  EXPECT_DOUBLE_EQ(fwd.at("router_tokens_per_expert"), kScores * 1);
  EXPECT_DOUBLE_EQ(fwd.at("router_aux_scores"), kScores * 8);
  EXPECT_DOUBLE_EQ(fwd.at("router_aux_topk"), kScores * 5);
  EXPECT_DOUBLE_EQ(fwd.at("router_aux_loss"), kScores * 5);
  EXPECT_DOUBLE_EQ(fwd.at("router_z_loss"), kScores * 4);
  const auto bwd = router_kernels(extra, false);
  EXPECT_DOUBLE_EQ(bwd.at("router_aux_loss_bwd"), kScores * 12);
  EXPECT_DOUBLE_EQ(bwd.at("router_z_loss_bwd"), kScores * 8);
  // Fused (TE): the bias inside the top-k kernel, the aux scores and map in one kernel (9 B).
  const auto fused = router_kernels(extra + ", moe_router_fusion: true", true);
  EXPECT_EQ(fused.count("router_expert_bias_add"), 0u);
  EXPECT_EQ(fused.count("router_aux_topk"), 0u);
  EXPECT_DOUBLE_EQ(fused.at("router_aux_scores"), kScores * 9);
  EXPECT_DOUBLE_EQ(fused.at("router_aux_loss"), kScores * 5);
}

TEST(RouterKernels, EveryBadValueNamesFileFieldAndValue) {
  struct Bad {
    std::string extra, field, value;
  };
  const std::vector<Bad> cases = {
      {", moe_aux_loss_coeff: -0.01", "model.moe_aux_loss_coeff", "-0.01"},
      {", moe_aux_loss_coeff: [0.01, 0.02]", "model.moe_aux_loss_coeff", "[0.01, 0.02]"},
      {", moe_z_loss_coeff: -3", "model.moe_z_loss_coeff", "-3"},
      {", moe_router_score_function: tanh", "model.moe_router_score_function", "tanh"},
      {", moe_router_enable_expert_bias: maybe", "model.moe_router_enable_expert_bias", "maybe"},
      {", moe_router_enable_expert_bias: true", "model.moe_router_enable_expert_bias", "true"},
      {", moe_router_fusion: 3", "model.moe_router_fusion", "3"},
  };
  for (const Bad& b : cases) {
    std::string msg;
    try {
      scenario(b.extra);
      ADD_FAILURE() << "accepted: " << b.extra;
    } catch (const InputError& e) {
      msg = e.what();
    }
    EXPECT_NE(msg.find("rt.yaml"), std::string::npos) << msg;
    EXPECT_NE(msg.find(b.field), std::string::npos) << b.field << "\n" << msg;
    EXPECT_NE(msg.find(b.value), std::string::npos) << b.value << "\n" << msg;
  }
}

}  // namespace
}  // namespace trainsim
