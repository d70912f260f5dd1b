// Token dropping (Megatron-Core --moe-expert-capacity-factor, --moe-pad-expert-input-to-capacity,
// docs/scenario.md): each expert accepts at most capacity = ceil(T k / E x factor) token
// copies from each rank (moe_utils.py get_capacity), so the busiest expert rank's experts
// process at most E x capacity copies, and exactly that when padded. Checked against hand
// counts on the grouped GEMM shapes and FLOPs, the dispatch all-to-all bytes and the MoE
// activation bytes; dropless scenarios keep their counts; each bad input names the file, the
// field and the value.
#include <gtest/gtest.h>

#include <string>

#include "models/builder/graph_builder.h"
#include "models/hardware/hardware.h"
#include "models/memory/memory_model.h"
#include "models/perf/flops.h"
#include "models/input/scenario.h"
#include "tests/support/moe_scenario.h"

namespace trainsim {
namespace {

// test_support::kSmallMoeModel: the balanced share of an expert from one rank is
// 4096 x 2 / 8 = 1024 token copies.
Scenario moe(const std::string& extra, int ep) {
  return test_support::small_moe_scenario(extra, ep, "capacity.yaml");
}

using test_support::first_rank_op;

OpDesc moe_forward(const Scenario& sc) {
  return first_rank_op(sc, [](const OpDesc& o) {
    return o.kind == OpKind::MlpFwd && o.features.experts_local > 0;
  });
}

/// The bytes of the expert-parallel all-to-alls (dispatch, combine and their adjoints carry
/// the same copies: each is checked to).
double dispatch_bytes(const Scenario& sc) {
  BuildOptions opt;
  opt.fold = false;
  const ScheduleGraph g = build_schedule_graph(validated(sc), cluster_system(sc.cluster), opt);
  double bytes = -1;
  int exchanges = 0;
  for (TaskId id = 0; id < g.num_tasks(); ++id) {
    const OpDesc& o = g.op(id);
    if (g.task(id).rank != g.simulated_ranks().front() || o.kind != OpKind::AllToAll ||
        o.group != GroupKind::Expert)
      continue;
    if (bytes >= 0) EXPECT_EQ(double(o.bytes), bytes);
    bytes = double(o.bytes);
    ++exchanges;
  }
  EXPECT_EQ(exchanges, 2 * 4);  // 2 MoE layers x (dispatch, combine) x (forward, backward)
  return bytes;
}

KernelWork kernel(const OpDesc& op, const std::string& name) {
  for (const KernelWork& k : op_kernels(op))
    if (name == k.name) return k;
  ADD_FAILURE() << "no kernel " << name;
  return {};
}

TEST(MoeCapacity, CapacityIsMegatronsCeilOfTheBalancedShareTimesTheFactor) {
  ModelConfig m;
  m.num_experts = 8;
  m.moe_router_topk = 2;
  EXPECT_EQ(m.moe_expert_capacity(4096), 0);  // dropless
  m.moe_expert_capacity_factor = 1.0;
  EXPECT_EQ(m.moe_expert_capacity(4096), 1024);  // 4096 x 2 / 8
  m.moe_expert_capacity_factor = 0.3;
  EXPECT_EQ(m.moe_expert_capacity(4096), 308);  // ceil(307.2)
  m.num_experts = 6;
  m.moe_expert_capacity_factor = 1.0;
  EXPECT_EQ(m.moe_expert_capacity(4096), 1366);  // ceil(8192 / 6 = 1365.33)
}

TEST(MoeCapacity, TheBusiestExpertIsCappedAtCapacityInTheGroupedGemms) {
  // EP 1, imbalance 1.5: the busiest expert gets 1.5 x 1024 = 1536 copies dropless; a capacity
  // factor of 1.0 caps it at 1024.
  const OpDesc dropless = moe_forward(moe(", moe_token_imbalance_factor: 1.5", 1));
  const OpDesc capped =
      moe_forward(moe(", moe_token_imbalance_factor: 1.5, moe_expert_capacity_factor: 1.0", 1));
  const KernelWork d = kernel(dropless, "expert_fc1_gemm"), c = kernel(capped, "expert_fc1_gemm");
  EXPECT_EQ(d.m, 1536);
  EXPECT_EQ(c.m, 1024);
  for (const KernelWork* k : {&d, &c}) {
    EXPECT_EQ(k->n, 512);  // SwiGLU fc1: 2 x 256
    EXPECT_EQ(k->k, 512);
    EXPECT_EQ(k->batch, 8);
  }
  EXPECT_DOUBLE_EQ(c.flops, 2.0 * 1024 * 512 * 512 * 8);
  EXPECT_DOUBLE_EQ(kernel(capped, "expert_fc2_gemm").flops, 2.0 * 1024 * 512 * 256 * 8);
  // A factor the busiest expert stays under drops nothing: 1.5 x 1024 = 1536 <= capacity 2048.
  EXPECT_EQ(kernel(moe_forward(moe(", moe_token_imbalance_factor: 1.5, "
                                   "moe_expert_capacity_factor: 2.0", 1)),
                   "expert_fc1_gemm").m,
            1536);
  // Padded: every expert processes exactly its capacity, here ceil(1024 x 1.25) = 1280 on a
  // balanced load of 1024 (the padding costs work).
  const OpDesc padded = moe_forward(moe(", moe_expert_capacity_factor: 1.25, "
                                        "moe_pad_expert_input_to_capacity: true", 1));
  EXPECT_EQ(kernel(padded, "expert_fc1_gemm").m, 1280);
  EXPECT_DOUBLE_EQ(kernel(padded, "expert_fc1_gemm").flops, 2.0 * 1280 * 512 * 512 * 8);
  // The backward's GEMMs take the same count (fc2's wgrad: k = the expert's tokens).
  const OpDesc padded_bwd = first_rank_op(
      moe(", moe_expert_capacity_factor: 1.25, moe_pad_expert_input_to_capacity: true", 1),
      [](const OpDesc& o) { return o.kind == OpKind::MlpBwd && o.features.experts_local > 0; });
  EXPECT_EQ(kernel(padded_bwd, "expert_fc2_wgrad").k, 1280);
}

TEST(MoeCapacity, ExpertParallelRanksEachSendCapacityPerExpert) {
  // EP 2: 4 local experts, each receiving from 2 ranks. Dropless with imbalance 1.5 the busiest
  // rank receives 4096 x 2 x 1.5 = 12288 copies (3072 per expert); capped, each expert takes
  // at most 1024 from each rank: 2048 per expert, 8 x 1024 = 8192 copies on the rank.
  const Scenario dropless = moe(", moe_token_imbalance_factor: 1.5", 2);
  const Scenario capped =
      moe(", moe_token_imbalance_factor: 1.5, moe_expert_capacity_factor: 1.0", 2);
  EXPECT_EQ(kernel(moe_forward(dropless), "expert_fc1_gemm").m, 3072);
  EXPECT_EQ(kernel(moe_forward(capped), "expert_fc1_gemm").m, 2048);
  EXPECT_EQ(kernel(moe_forward(capped), "expert_fc1_gemm").batch, 4);
  // The dispatch all-to-all: copies x hidden 512 x 2 bytes.
  EXPECT_EQ(dispatch_bytes(dropless), 12288.0 * 512 * 2);
  EXPECT_EQ(dispatch_bytes(capped), 8192.0 * 512 * 2);
  // Padded to capacity 1280 on a balanced load: 8 x 1280 = 10240 copies, more than the 8192
  // routed (drop_and_pad sends capacity per expert).
  const Scenario padded =
      moe(", moe_expert_capacity_factor: 1.25, moe_pad_expert_input_to_capacity: true", 2);
  EXPECT_EQ(dispatch_bytes(padded), 10240.0 * 512 * 2);
  EXPECT_EQ(dispatch_bytes(moe("", 2)), 8192.0 * 512 * 2);
  EXPECT_EQ(kernel(moe_forward(padded), "expert_fc1_gemm").m, 2560);  // 2 ranks x 1280
}

TEST(MoeCapacity, ActivationBytesKeepTheCappedTokenCopies) {
  // An MoE layer keeps per token copy (Tk of them): the expert fc1 input q h, the fc1 output
  // e 2 Fe, the fp32 routing weight 4 and the fc2 input q Fe; bf16 without FP8, q = e = 2:
  // 2 x 512 + 2 x 512 + 4 + 2 x 256 = 2564 bytes. Dropless with imbalance 1.5, Tk = 12288;
  // capped at factor 1.0, Tk = 8192: 4096 x 2564 bytes fewer.
  const std::int64_t dropless =
      layer_activation_bytes(moe(", moe_token_imbalance_factor: 1.5", 1)).mlp;
  const std::int64_t capped = layer_activation_bytes(
      moe(", moe_token_imbalance_factor: 1.5, moe_expert_capacity_factor: 1.0", 1)).mlp;
  EXPECT_EQ(dropless - capped, 4096LL * 2564);
  // The capped layer keeps what the balanced dropless one keeps (both 8192 copies).
  EXPECT_EQ(capped, layer_activation_bytes(moe("", 1)).mlp);
  // Padded to 1280 per expert: 10240 copies, 2048 x 2564 bytes more than balanced.
  const std::int64_t padded = layer_activation_bytes(
      moe(", moe_expert_capacity_factor: 1.25, moe_pad_expert_input_to_capacity: true", 1)).mlp;
  EXPECT_EQ(padded - layer_activation_bytes(moe("", 1)).mlp, 2048LL * 2564);
}

TEST(MoeCapacity, TheDropPolicyChangesNoCount) {
  const Scenario probs = moe(", moe_token_imbalance_factor: 1.5, moe_expert_capacity_factor: 1.0", 2);
  const Scenario position = moe(", moe_token_imbalance_factor: 1.5, moe_expert_capacity_factor: "
                                "1.0, moe_token_drop_policy: position", 2);
  EXPECT_EQ(position.model.moe_token_drop_policy, MoeTokenDropPolicy::Position);
  EXPECT_EQ(dispatch_bytes(probs), dispatch_bytes(position));
  EXPECT_EQ(kernel(moe_forward(probs), "expert_fc1_gemm").m,
            kernel(moe_forward(position), "expert_fc1_gemm").m);
}

TEST(MoeCapacity, BadInputsNameTheFileTheFieldAndTheValue) {
  const std::pair<std::string, std::vector<std::string>> cases[] = {
      {", moe_expert_capacity_factor: 0",
       {"field 'model.moe_expert_capacity_factor' = '0'", "must be within (0, 1024]"}},
      {", moe_expert_capacity_factor: -1",
       {"field 'model.moe_expert_capacity_factor' = '-1'", "must be within (0, 1024]"}},
      {", moe_expert_capacity_factor: many",
       {"field 'model.moe_expert_capacity_factor' = 'many'", "expected a number"}},
      {", moe_pad_expert_input_to_capacity: true",
       {"model.moe_pad_expert_input_to_capacity (true) needs model.moe_expert_capacity_factor"}},
      {", moe_token_drop_policy: random",
       {"field 'model.moe_token_drop_policy' = 'random'", "expected one of: probs, position"}},
  };
  for (const auto& [extra, expects] : cases) {
    try {
      moe(extra, 1);
      ADD_FAILURE() << extra << " accepted";
    } catch (const InputError& e) {
      const std::string what = e.what();
      EXPECT_NE(what.find("capacity.yaml"), std::string::npos) << what;
      for (const std::string& x : expects)
        EXPECT_NE(what.find(x), std::string::npos) << extra << ": " << what;
    }
  }
  // On a dense model the factor has no experts to cap.
  try {
    parse_scenario("model: {num_layers: 4, hidden_size: 512, num_attention_heads: 8, "
                   "seq_length: 512, padded_vocab_size: 4096, moe_expert_capacity_factor: 1.5}\n"
                   "parallel: {micro_batch_size: 1, global_batch_size: 8}\n"
                   "cluster: {system: dgx-h100, nodes: 1}\n",
                   "dense.yaml");
    ADD_FAILURE() << "moe_expert_capacity_factor accepted on a dense model";
  } catch (const InputError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("dense.yaml"), std::string::npos) << what;
    EXPECT_NE(what.find("model.moe_expert_capacity_factor (1.5) needs a mixture-of-experts"),
              std::string::npos) << what;
  }
}

}  // namespace
}  // namespace trainsim
