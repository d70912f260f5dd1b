// Megatron-Core --recompute-modules mlp and moe (selective recomputation of a whole MLP
// module: TransformerLayer.recompute_mlp on dense layers, MoELayer.moe_layer_recompute on MoE
// layers; the Megatron-Bridge H100 recipes of Kimi K2 / DeepSeek-V3 and Nemotron-H set them).
// Checked by hand: what a checkpointed module keeps (its input, and what runs outside it), what
// its re-run materializes again, which kernels the re-run has (the module's forward without the
// bias-dropout-add after it, and for an MoE layer without its separate pre-MLP norm), that the
// re-run repeats the module's collectives (the sequence-parallel gather and reduce-scatter of a
// dense MLP, the dispatch and combine of an MoE layer), and the bad inputs.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "models/perf/flops.h"
#include "models/builder/graph_builder.h"
#include "models/hardware/hardware.h"
#include "models/memory/memory_model.h"
#include "models/input/scenario.h"
#include "tests/support/scenario_yaml.h"

namespace trainsim {
namespace {

// A small model: h 512, SwiGLU MLP 1536, GQA 8 heads / 4 groups, seq 512; with experts (8 of
// 256, top-2) on layers 2..7 and dense MLPs on layers 0-1.
const std::string kDense =
    "num_layers: 8, hidden_size: 512, num_attention_heads: 8, num_query_groups: 4, "
    "kv_channels: 64, ffn_hidden_size: 1536, swiglu: true, normalization: RMSNorm, "
    "position_embedding_type: rope, untie_embeddings_and_output_weights: true, "
    "add_bias_linear: false, hidden_dropout: 0.0, attention_dropout: 0.0, "
    "attention_backend: flash, seq_length: 512, padded_vocab_size: 4096";
const std::string kMoe = kDense + ", num_experts: 8, moe_router_topk: 2, moe_ffn_hidden_size: 256, "
                                  "moe_grouped_gemm: true, moe_layer_freq: \"[0]*2+[1]*6\"";

Scenario scenario(const std::string& model, const std::string& parallel) {
  return parse_scenario(test_support::core_scenario_yaml(model, parallel), "modules.yaml");
}

ScheduleGraph unfolded(const Scenario& sc) {
  BuildOptions opt;
  opt.fold = false;
  return build_schedule_graph(validated(sc), find_system(sc.cluster.system), opt);
}

std::vector<std::string> kernel_names(const OpDesc& op) {
  std::vector<std::string> out;
  for (const KernelWork& k : op_kernels(op)) out.push_back(k.name);
  return out;
}

/// What rank `r` does for layer `layer`, microbatch 0, by phase: its compute tasks' ops and
/// Activations allocations, and its collectives by (group, kind).
struct LayerTasks {
  std::vector<const OpDesc*> recompute_ops;
  std::int64_t recompute_alloc = 0, forward_alloc = 0, backward_free = 0;
  std::map<std::pair<GroupKind, OpKind>, int> recompute_collectives;
};
LayerTasks layer_tasks(const ScheduleGraph& g, RankId r, int layer) {
  LayerTasks out;
  for (TaskId id = 0; id < g.num_tasks(); ++id) {
    const Task& t = g.task(id);
    if (t.rank != r || t.layer != layer || t.microbatch != 0) continue;
    const OpDesc& op = g.op(id);
    if (t.kind != TaskKind::Compute) {
      if (t.phase == Phase::Recompute) ++out.recompute_collectives[{op.group, op.kind}];
      continue;
    }
    std::int64_t alloc = 0, freed = 0;
    for (const MemEffect* e = g.effects_begin(id); e != g.effects_end(id); ++e)
      if (e->category == MemCategory::Activations) (e->bytes > 0 ? alloc : freed) += e->bytes;
    if (t.phase == Phase::Recompute) {
      out.recompute_ops.push_back(&op);
      out.recompute_alloc += alloc;
    } else if (t.phase == Phase::Forward) {
      out.forward_alloc += alloc;
    } else {
      out.backward_free -= freed;
    }
  }
  return out;
}

const char* kBatch = "micro_batch_size: 1, global_batch_size: 8, precision: bf16";

// A dense layer's MLP module (norm fused into fc1, fc1, SwiGLU, fc2) checkpointed on its input:
// at TP 2 with sequence parallelism the layer keeps e Tsp h = 2 x 256 x 512 of it, and the
// re-run gathers the input, runs norm, fc1, SwiGLU, fc2 and reduce-scatters, as the forward did.
TEST(MlpRecomputeModules, DenseMlpModuleKeepsItsInputAndReRunsItsForward) {
  const std::string par = std::string(kBatch) +
                          ", tensor_model_parallel_size: 2, sequence_parallel: true";
  const Scenario keep = scenario(kDense, par);
  const Scenario rec =
      scenario(kDense, par + ", recompute_granularity: selective, recompute_modules: [mlp]");
  const LayerActivationBytes k = layer_activation_bytes(keep), c = layer_activation_bytes(rec);
  EXPECT_EQ(c.mlp, 2 * 256 * 512);
  EXPECT_EQ(c.mlp + c.mlp_rerun, k.mlp);
  EXPECT_EQ(c.attn, k.attn);
  EXPECT_EQ(k.mlp_rerun, 0);

  const ScheduleGraph g = unfolded(rec);
  const RankId r = g.simulated_ranks().front();
  for (int l = 0; l < 8; ++l) {
    const LayerTasks t = layer_tasks(g, r, l);
    ASSERT_EQ(t.recompute_ops.size(), 1u) << l;
    const OpDesc& rerun = *t.recompute_ops.front();
    EXPECT_EQ(rerun.kind, OpKind::MlpFwd);
    EXPECT_TRUE(rerun.features.checkpoint_rerun);
    EXPECT_EQ(t.recompute_alloc, c.mlp_rerun) << l;
    EXPECT_EQ(t.forward_alloc, c.total()) << l;
    EXPECT_EQ(t.backward_free, c.total() + c.mlp_rerun) << l;
    EXPECT_EQ((t.recompute_collectives.at({GroupKind::Tensor, OpKind::AllGather})), 1);
    EXPECT_EQ((t.recompute_collectives.at({GroupKind::Tensor, OpKind::ReduceScatter})), 1);
  }
  // The re-run's kernels are the forward MLP's without the bias-dropout-add after the module.
  const ScheduleGraph gk = unfolded(keep);
  std::vector<std::string> forward;
  for (const OpDesc& o : gk.ops())
    if (o.kind == OpKind::MlpFwd) forward = kernel_names(o);
  ASSERT_FALSE(forward.empty());
  EXPECT_EQ(forward.back(), "bias_dropout_add_fwd");
  forward.pop_back();
  EXPECT_EQ(kernel_names(*layer_tasks(g, r, 0).recompute_ops.front()), forward);
  EXPECT_EQ(forward.front(), "pre_mlp_norm_fwd");  // fused into fc1: inside the checkpoint
}

// An MoE layer's MoELayer checkpointed: the separate pre-MLP norm before it keeps its input and
// statistics, the checkpoint its input (the norm's output; dropped too with layernorm); the
// re-run routes, dispatches, runs the experts and combines again. Layers 0-1 are dense: [mlp, moe]
// re-runs each with its own module.
TEST(MlpRecomputeModules, MoeModuleReRunsRouterExchangesAndExperts) {
  const std::string par = std::string(kBatch) + ", expert_model_parallel_size: 4";
  const Scenario keep = scenario(kMoe, par);
  const Scenario rec = scenario(
      kMoe, par + ", recompute_granularity: selective, recompute_modules: [mlp, moe]");
  const Scenario rec_ln = scenario(
      kMoe, par + ", recompute_granularity: selective, recompute_modules: [moe, layernorm]");
  const std::int64_t T = 512, h = 512, e = 2, stats = 4 * T;  // RMSNorm: fp32 rstd per token
  const LayerActivationBytes k = layer_activation_bytes(keep, true), c = layer_activation_bytes(rec, true);
  EXPECT_EQ(c.mlp, e * T * h + stats + e * T * h);
  EXPECT_EQ(c.mlp + c.mlp_rerun, k.mlp);
  EXPECT_EQ(layer_activation_bytes(rec_ln, true).mlp, e * T * h + stats);
  EXPECT_EQ(layer_activation_bytes(rec, false).mlp, e * T * h);  // the dense layers' module

  const ScheduleGraph g = unfolded(rec);
  const RankId r = g.simulated_ranks().front();
  for (int l = 0; l < 8; ++l) {
    const bool moe = l >= 2;
    const LayerTasks t = layer_tasks(g, r, l);
    ASSERT_EQ(t.recompute_ops.size(), 1u) << l;
    EXPECT_EQ(t.recompute_ops.front()->features.experts_local, moe ? 2 : 0) << l;
    EXPECT_EQ(t.recompute_alloc, layer_activation_bytes(rec, moe).mlp_rerun) << l;
    // Dispatch and combine again (TP 1: no tensor-parallel collective).
    EXPECT_EQ(t.recompute_collectives.size(), moe ? 1u : 0u) << l;
    if (moe) EXPECT_EQ((t.recompute_collectives.at({GroupKind::Expert, OpKind::AllToAll})), 2);
  }
  const std::vector<std::string> rerun = kernel_names(*layer_tasks(g, r, 2).recompute_ops.front());
  const std::set<std::string> names(rerun.begin(), rerun.end());
  EXPECT_EQ(names.count("pre_mlp_norm_fwd"), 0u);  // outside the checkpoint
  EXPECT_EQ(names.count("bias_dropout_add_fwd"), 0u);
  for (const char* n : {"router_gemm", "moe_permute", "expert_fc1_gemm", "expert_swiglu_fwd",
                        "expert_fc2_gemm", "moe_unpermute"})
    EXPECT_EQ(names.count(n), 1u) << n;
  // The iteration gets slower and its peak lower.
  EXPECT_LT(layer_activation_bytes(rec, true).total(), layer_activation_bytes(keep, true).total());
}

TEST(MlpRecomputeModules, ModulesWithoutALayerOfTheirKindAreRefused) {
  const std::string all_moe = kMoe.substr(0, kMoe.find(", moe_layer_freq"));
  struct Case {
    std::string model, modules, expect;
  };
  const Case cases[] = {
      {kDense, "[moe]", "'moe' recomputes MoE layers and the model has none"},
      {all_moe, "[mlp]", "'mlp' recomputes dense layers' MLPs and every layer of the model is an "
                         "MoE layer"},
  };
  for (const Case& c : cases) {
    try {
      scenario(c.model, std::string(kBatch) + ", recompute_granularity: selective, "
                                              "recompute_modules: " + c.modules);
      ADD_FAILURE() << c.modules << " accepted";
    } catch (const InputError& e) {
      EXPECT_NE(std::string(e.what()).find("modules.yaml: parallel.recompute_modules: " + c.expect),
                std::string::npos) << e.what();
    }
  }
  // shared_experts on an MoE model without a shared expert.
  try {
    scenario(kMoe, std::string(kBatch) + ", recompute_granularity: selective, "
                                         "recompute_modules: [shared_experts]");
    ADD_FAILURE() << "shared_experts accepted";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("'shared_experts' recomputes MoE layers' shared experts "
                                         "and the model has none"),
              std::string::npos) << e.what();
  }
}

// --recompute-modules shared_experts (Megatron-Core MoELayer.shared_experts_compute under
// tensor_parallel.checkpoint): the shared expert's fc1 output (2 Fs with SwiGLU) and fc2 input
// are not kept; its forward (fc1, SwiGLU, fc2) re-runs before its backward, and at TP 2 with
// sequence parallelism the re-run gathers its input and reduce-scatters fc2's output again.
TEST(MlpRecomputeModules, SharedExpertsReRunTheSharedExpertBeforeItsBackward) {
  const std::string model = kMoe + ", moe_shared_expert_intermediate_size: 512";
  const std::string par = std::string(kBatch) + ", tensor_model_parallel_size: 2, "
                          "sequence_parallel: true, expert_model_parallel_size: 2, "
                          "expert_tensor_parallel_size: 1";
  const Scenario keep = scenario(model, par);
  const Scenario rec = scenario(model, par + ", recompute_granularity: selective, "
                                             "recompute_modules: [shared_experts]");
  const std::int64_t T = 512, Fs = 512 / 2, e = 2;  // the shared expert split by TP 2
  EXPECT_EQ(layer_activation_bytes(keep, true).mlp - layer_activation_bytes(rec, true).mlp,
            e * T * 2 * Fs + e * T * Fs);
  EXPECT_EQ(layer_activation_bytes(keep, false).mlp, layer_activation_bytes(rec, false).mlp);
  const ScheduleGraph g = unfolded(rec);
  const RankId r = g.simulated_ranks().front();
  std::vector<std::string> bwd;
  std::map<OpKind, int> tp_bwd, tp_bwd_keep;
  auto count_tp = [&](const ScheduleGraph& graph, std::map<OpKind, int>& out) {
    for (TaskId id = 0; id < graph.num_tasks(); ++id) {
      const Task& t = graph.task(id);
      if (t.rank == r && t.layer == 2 && t.microbatch == 0 && t.phase == Phase::Backward &&
          t.part == Part::Mlp && graph.op(id).group == GroupKind::Tensor)
        ++out[graph.op(id).kind];
    }
  };
  for (TaskId id = 0; id < g.num_tasks(); ++id) {
    const Task& t = g.task(id);
    if (t.rank == r && t.layer == 2 && t.microbatch == 0 && t.kind == TaskKind::Compute &&
        t.phase == Phase::Backward && t.part == Part::Mlp)
      bwd = kernel_names(g.op(id));
  }
  auto at = [&](const char* n) { return std::find(bwd.begin(), bwd.end(), n) - bwd.begin(); };
  ASSERT_LT(at("shared_fc1_gemm_recompute"), std::ptrdiff_t(bwd.size()));
  EXPECT_LT(at("shared_fc1_gemm_recompute"), at("shared_swiglu_recompute"));
  EXPECT_LT(at("shared_fc2_gemm_recompute"), at("shared_fc2_dgrad"));
  count_tp(g, tp_bwd);
  count_tp(unfolded(keep), tp_bwd_keep);
  EXPECT_EQ(tp_bwd[OpKind::AllGather], tp_bwd_keep[OpKind::AllGather] + 1);
  EXPECT_EQ(tp_bwd[OpKind::ReduceScatter], tp_bwd_keep[OpKind::ReduceScatter] + 1);
}

// A recomputed forward runs the same Transformer Engine modules as the forward: under FP8 with
// sequence parallelism its input gathers carry FP8 too (full recomputation re-runs them all).
TEST(MlpRecomputeModules, RecomputedGathersUnderFp8AreFp8LikeTheForwards) {
  const Scenario sc = scenario(kDense, std::string(kBatch) +
                                           ", tensor_model_parallel_size: 2, "
                                           "sequence_parallel: true, fp8: hybrid, "
                                           "recompute_granularity: full");
  const ScheduleGraph g = unfolded(sc);
  std::map<Phase, std::set<std::int64_t>> gather_bytes;
  for (TaskId id = 0; id < g.num_tasks(); ++id) {
    const Task& t = g.task(id);
    const OpDesc& op = g.op(id);
    if (t.layer != kNoIndex && op.group == GroupKind::Tensor && op.kind == OpKind::AllGather)
      gather_bytes[t.phase].insert(op.bytes);
  }
  // One FP8 byte per element of the s b h activation in both (the backward gathers bf16).
  EXPECT_EQ(gather_bytes[Phase::Forward], (std::set<std::int64_t>{512 * 512}));
  EXPECT_EQ(gather_bytes[Phase::Recompute], gather_bytes[Phase::Forward]);
}

}  // namespace
}  // namespace trainsim
