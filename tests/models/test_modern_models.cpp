// Models trained today against hand calculations: parameter counts of Llama 3 8B, Llama 3.1
// 405B and Qwen3-30B-A3B from their published shapes, Megatron-Core's model FLOPs per token,
// Megatron-Core's uneven pipeline split, the context-parallel KV exchange and the MoE
// all-to-all sizes in the built graph, flash attention's causal FLOPs, and the bad inputs of the
// new keys (each error names the file, the field and the value).
#include <gtest/gtest.h>

#include <fstream>
#include <iterator>
#include <map>
#include <set>
#include <string>
#include <utility>

#include "models/perf/cost_model.h"
#include "models/perf/flops.h"
#include "models/builder/graph_builder.h"
#include "models/hardware/hardware.h"
#include "models/input/hf_config.h"
#include "models/memory/memory_model.h"
#include "models/input/scenario.h"
#include "models/memory/zero_offload.h"
#include "tests/support/paths.h"
#include "tests/support/scenario_yaml.h"

namespace trainsim {
namespace {

using test_support::ScratchDir;

const char* kLlama8b =
    "num_layers: 32, hidden_size: 4096, num_attention_heads: 32, num_query_groups: 8, "
    "ffn_hidden_size: 14336, swiglu: true, normalization: RMSNorm, position_embedding_type: rope, "
    "untie_embeddings_and_output_weights: true, add_bias_linear: false, hidden_dropout: 0.0, "
    "attention_dropout: 0.0, attention_backend: flash, seq_length: 8192, padded_vocab_size: 128256";

Scenario core(const std::string& model, const std::string& parallel, std::int64_t nodes = 1,
              const std::string& system = "dgx-h100") {
  return parse_scenario(test_support::core_scenario_yaml(model, parallel, nodes, system),
                        "modern.yaml");
}

/// The scenario's schedule graph, folded (one representative rank per TP/DP class), on the
/// system the scenario names.
ScheduleGraph folded_graph(const Scenario& sc) {
  BuildOptions opt;
  opt.fold = true;
  return build_schedule_graph(validated(sc), find_system(sc.cluster.system), opt);
}

TEST(ModernModels, Llama3_8bHas8_03BillionParameters) {
  const Scenario sc = core(kLlama8b, "micro_batch_size: 1, global_batch_size: 8");
  // Per layer: QKV 4096 x (32 + 2 x 8) x 128 = 25,165,824; projection 4096^2 = 16,777,216;
  // fc1 4096 x 2 x 14336 = 117,440,512; fc2 14336 x 4096 = 58,720,256; two RMSNorms 8,192:
  // 218,112,000 x 32 layers, + untied embedding and output 2 x 128256 x 4096, + final norm.
  EXPECT_EQ(total_params(sc.model), 218112000LL * 32 + 2LL * 128256 * 4096 + 4096);
  EXPECT_EQ(total_params(sc.model), 8030261248LL);
}

TEST(ModernModels, Llama31_405bHas405_85BillionParameters) {
  const Scenario sc = core(
      "num_layers: 126, hidden_size: 16384, num_attention_heads: 128, num_query_groups: 8, "
      "ffn_hidden_size: 53248, swiglu: true, normalization: RMSNorm, position_embedding_type: rope, "
      "untie_embeddings_and_output_weights: true, add_bias_linear: false, seq_length: 8192, "
      "padded_vocab_size: 128256",
      "tensor_model_parallel_size: 8, micro_batch_size: 1, global_batch_size: 1");
  // Layer: 16384 x 18432 + 16384^2 + 16384 x 106496 + 53248 x 16384 + 2 x 16384.
  const std::int64_t layer = 16384LL * 18432 + 16384LL * 16384 + 16384LL * 106496 +
                             53248LL * 16384 + 2 * 16384;
  EXPECT_EQ(layer, 3187703808LL);
  EXPECT_EQ(total_params(sc.model), 126 * layer + 2LL * 128256 * 16384 + 16384);
  EXPECT_NEAR(double(total_params(sc.model)) / 1e9, 405.85, 0.005);
}

TEST(ModernModels, Qwen3MoeTotalAndActiveParameters) {
  const Scenario sc = core(
      "num_layers: 48, hidden_size: 2048, num_attention_heads: 32, num_query_groups: 4, "
      "kv_channels: 128, ffn_hidden_size: 6144, num_experts: 128, moe_router_topk: 8, "
      "moe_ffn_hidden_size: 768, swiglu: true, normalization: RMSNorm, "
      "position_embedding_type: rope, untie_embeddings_and_output_weights: true, "
      "add_bias_linear: false, seq_length: 4096, padded_vocab_size: 151936",
      "expert_model_parallel_size: 8, expert_tensor_parallel_size: 1, micro_batch_size: 1, "
      "global_batch_size: 8");
  // Attention 2048 x 5120 + 4096 x 2048, norms 2 x 2048, router 2048 x 128, 128 experts of
  // 3 x 2048 x 768.
  const std::int64_t attn = 2048LL * 5120 + 4096LL * 2048 + 2 * 2048 + 2048LL * 128;
  const std::int64_t expert = 3LL * 2048 * 768;
  const std::int64_t embed = 2LL * 151936 * 2048 + 2048;
  EXPECT_EQ(total_params(sc.model), 48 * (attn + 128 * expert) + embed);
  EXPECT_NEAR(double(total_params(sc.model)) / 1e9, 30.53, 0.01);
  // Active: 8 experts per token (Qwen: 3.3 B activated).
  EXPECT_NEAR(double(48 * (attn + 8 * expert) + embed) / 1e9, 3.35, 0.01);
  // One rank of EP 8 holds 16 experts per layer; the dense part whole.
  const MoeLayerParams p = moe_layer_params_per_rank(sc);
  EXPECT_EQ(p.expert, 16 * expert);
  EXPECT_EQ(p.dense, attn);
}

TEST(ModernModels, ModelFlopsFollowMegatronCoreCausalConvention) {
  const Scenario sc = core(kLlama8b, "micro_batch_size: 1, global_batch_size: 8");
  // Per token 6 x (32 x (QKV 25,165,824 + causal attention 4096 x 8192 / 2 x 2 + projection
  // 16,777,216 + SwiGLU MLP 3 x 4096 x 14336) + output layer 4096 x 128256).
  const double per_token =
      6.0 * (32.0 * (25165824.0 + 4096.0 * 8192 + 16777216.0 + 3.0 * 4096 * 14336) +
             4096.0 * 128256);
  EXPECT_DOUBLE_EQ(per_token, 51470401536.0);
  EXPECT_DOUBLE_EQ(model_flops_per_iteration(sc), per_token * 8 * 8192);
  // The published 744 TFLOP/s at 14,451 tokens/s per GPU is 5.148e10 FLOPs per token.
  EXPECT_NEAR(744e12 / 14451 / per_token, 1.0, 0.001);
}

TEST(ModernModels, FlashAttentionCountsHalfTheCausalScoreMatrix) {
  const Scenario sc = core(kLlama8b, "micro_batch_size: 1, global_batch_size: 8");
  OpDesc op;
  op.kind = OpKind::AttnFwd;
  op.precision = Precision::BF16;
  op.micro_batch = 1;
  op.seq = 8192;
  op.hidden = 4096;
  op.heads = 32;
  op.head_dim = 128;
  op.tp = 1;
  op.features = model_features(sc);
  fill_work(op);
  const double T = 8192, gemms = 2 * T * 4096 * 6144 + 2 * T * 4096 * 4096;  // QKV, projection
  const double flash = 4.0 * 32 * 128 * 8192.0 * 8192 / 2;                   // S and O, causal
  EXPECT_DOUBLE_EQ(op.flops, gemms + flash);
  op.kind = OpKind::AttnBwd;
  fill_work(op);
  EXPECT_DOUBLE_EQ(op.flops, 2 * gemms + 2.5 * flash);  // dgrad + wgrad; flash backward 2.5x
}

TEST(ModernModels, UnevenSplitOf126LayersOnPp8Vp8) {
  const Scenario sc = core(
      "num_layers: 126, hidden_size: 1024, num_attention_heads: 8, num_query_groups: 8, "
      "seq_length: 1024, padded_vocab_size: 1024, swiglu: true",
      "pipeline_model_parallel_size: 8, num_layers_per_virtual_pipeline_stage: 2, "
      "account_for_embedding_in_pipeline_split: true, account_for_loss_in_pipeline_split: true, "
      "micro_batch_size: 1, global_batch_size: 64",
      8);
  const ParallelConfig& p = sc.parallel;
  // 126 + embedding + loss = 128 slots over 64 virtual stages: 2 each; the first holds the
  // embedding and 1 layer, the last 1 layer and the loss.
  ASSERT_EQ(p.virtual_pipeline_size, 8);
  EXPECT_EQ(p.layers_of_virtual_stage(0), 1);
  EXPECT_EQ(p.layers_of_virtual_stage(63), 1);
  for (int v = 1; v < 63; ++v) EXPECT_EQ(p.layers_of_virtual_stage(v), 2) << v;
  EXPECT_EQ(p.first_layer_of_virtual_stage(63), 125);
  EXPECT_EQ(p.layers_of_stage(0), 15);  // chunk 0: 1 layer, chunks 1-7: 2 each
  EXPECT_EQ(p.layers_of_stage(7), 15);
  for (int s = 1; s < 7; ++s) EXPECT_EQ(p.layers_of_stage(s), 16);
  // decoder_first / last: 30 layers, PP 4, first 6, last 6: the middle stages 9 each.
  const Scenario d = core(
      "num_layers: 30, hidden_size: 1024, num_attention_heads: 8, seq_length: 1024, "
      "padded_vocab_size: 1024",
      "pipeline_model_parallel_size: 4, decoder_first_pipeline_num_layers: 6, "
      "decoder_last_pipeline_num_layers: 6, micro_batch_size: 1, global_batch_size: 8");
  EXPECT_EQ(d.parallel.layers_of_stage(0), 6);
  EXPECT_EQ(d.parallel.layers_of_stage(1), 9);
  EXPECT_EQ(d.parallel.layers_of_stage(2), 9);
  EXPECT_EQ(d.parallel.layers_of_stage(3), 6);
}

/// The first op of `kind` in the group kind `group` of a built (folded) graph.
const OpDesc* find_op(const ScheduleGraph& g, OpKind kind, GroupKind group) {
  for (const OpDesc& o : g.ops())
    if (o.kind == kind && o.group == group) return &o;
  return nullptr;
}

// What a Qwen3-30B-A3B MoE layer keeps from forward to backward (micro batch 2 x 4096 tokens,
// no TP/SP, FP8): Megatron-Core's MoELayer with TEGroupedMLP, term by term.
const char* kQwen30b =
    "num_layers: 48, hidden_size: 2048, num_attention_heads: 32, num_query_groups: 4, "
    "kv_channels: 128, ffn_hidden_size: 6144, num_experts: 128, moe_router_topk: 8, "
    "moe_ffn_hidden_size: 768, moe_grouped_gemm: true, swiglu: true, normalization: RMSNorm, "
    "position_embedding_type: rope, untie_embeddings_and_output_weights: true, "
    "add_bias_linear: false, hidden_dropout: 0.0, attention_dropout: 0.0, "
    "attention_backend: flash, seq_length: 4096, padded_vocab_size: 151936";

/// The kernels named `name` in the MoE layer's forward or backward op of a built graph.
double moe_kernel_bytes(const ScheduleGraph& g, OpKind kind, const std::string& name) {
  double bytes = -1;
  for (const OpDesc& o : g.ops())
    if (o.kind == kind && o.features.experts_local > 0)
      for (const KernelWork& k : op_kernels(o))
        if (name == k.name) bytes = k.bytes;
  return bytes;
}

// Transformer Engine under FP8 with sequence parallelism (TE v2.7 layernorm_linear.py): the
// QKV and fc1 inputs are cast on the local shard (T / tp rows, row-wise FP8 only) and the
// forward all-gather before them carries FP8, one byte per element; the backward builds the
// transpose of the gathered input for the weight gradient, and its gathers keep the
// activation's size. Llama 3 8B shapes at TP 4, micro batch 1, seq 8192: T = 8192, Tsp = 2048.
TEST(ModernModels, Fp8GradientGemmsUseTheSplitAccumulator) {
  // Transformer Engine v2.7 recipes: delayed and current (tensorwise) scaling accumulate the
  // forward GEMMs fast and the dgrad / wgrad GEMMs split; blockwise splits all three. The
  // output layer stays in bf16 (no FP8, no flag), as does everything without fp8.
  for (const char* recipe : {"delayed", "tensorwise", "blockwise", ""}) {
    const std::string par = std::string("micro_batch_size: 1, global_batch_size: 8, "
                                        "precision: bf16") +
                            (*recipe ? std::string(", fp8: hybrid, fp8_recipe: ") + recipe : "");
    const ScheduleGraph g =
        folded_graph(core(kLlama8b, par));
    std::map<std::string, bool> split;
    for (const OpDesc& o : g.ops())
      for (const KernelWork& k : op_kernels(o))
        if (k.cls == KernelClass::Gemm) split[k.name] = k.split_accumulator;
    const bool fp8 = *recipe != 0, all = std::string(recipe) == "blockwise";
    for (const char* name : {"qkv_gemm", "proj_gemm", "fc1_gemm", "fc2_gemm"})
      EXPECT_EQ(split.at(name), all) << recipe << " " << name;
    for (const char* name : {"qkv_dgrad", "qkv_wgrad", "proj_dgrad", "proj_wgrad", "fc1_dgrad",
                             "fc1_wgrad", "fc2_dgrad", "fc2_wgrad"})
      EXPECT_EQ(split.at(name), fp8) << recipe << " " << name;
    for (const char* name : {"logits_gemm", "logits_dgrad", "logits_wgrad"})
      EXPECT_FALSE(split.at(name)) << recipe << " " << name;
  }
}

TEST(ModernModels, TpCommOverlapRunsTheDenseBlocksCollectivesInsideTheirGemms) {
  // Llama 3 8B shape, TP 4 with sequence parallelism, FP8: T = 8192 tokens, each rank holds
  // Tsp = 2048 and receives (or sends) the other T - Tsp = 6144 rows of h = 4096 per collective.
  const double T = 8192, h = 4096, rows = T - T / 4;
  const std::string par = "tensor_model_parallel_size: 4, sequence_parallel: true, "
                          "micro_batch_size: 1, global_batch_size: 8, precision: bf16, "
                          "fp8: hybrid, fp8_recipe: tensorwise, tp_comm_overlap: true";
  for (const char* rs : {"pipeline", "ring_exchange"}) {
    const ScheduleGraph g =
        folded_graph(core(kLlama8b, par + ", tp_comm_overlap_rs_method: " + rs));
    const bool ring_rs = std::string(rs) == "ring_exchange";
    std::map<std::string, KernelWork> gemm;
    for (const OpDesc& o : g.ops())
      for (const KernelWork& k : op_kernels(o))
        if (k.cls == KernelClass::Gemm) gemm[k.name] = k;
    struct Want {
      const char* name;
      double bytes, chunks;
      bool pipeline;
      double sms;
    };
    const Want want[] = {
        {"qkv_gemm", rows * h * 1, 4, false, 0},  // FP8 input, ring exchange
        {"fc1_gemm", rows * h * 1, 4, false, 0},
        {"proj_gemm", rows * h * 2, 4, !ring_rs, ring_rs ? 0.0 : 16.0},  // BF16 output
        {"fc2_gemm", rows * h * 2, 4, !ring_rs, ring_rs ? 0.0 : 16.0},
        {"proj_dgrad", rows * h * 1, 4, false, 0},  // FP8 output gradient
        {"fc2_dgrad", rows * h * 1, 4, false, 0},
        {"qkv_dgrad", rows * h * 1, 0, false, 0},  // bulk: the saved input re-gathered
        {"fc1_dgrad", rows * h * 1, 0, false, 0},
        {"qkv_wgrad", rows * h * 2, 0, false, 0},  // bulk: the input gradient scattered
        {"fc1_wgrad", rows * h * 2, 0, false, 0},
        {"proj_wgrad", 0, 0, false, 0},
        {"fc2_wgrad", 0, 0, false, 0},
        {"logits_gemm", 0, 0, false, 0}};
    for (const Want& w : want) {
      const KernelWork& k = gemm.at(w.name);
      EXPECT_DOUBLE_EQ(k.overlap_comm_bytes, w.bytes) << rs << " " << w.name;
      EXPECT_DOUBLE_EQ(k.overlap_chunks, w.chunks) << rs << " " << w.name;
      EXPECT_EQ(k.overlap_pipeline, w.pipeline) << rs << " " << w.name;
      EXPECT_DOUBLE_EQ(k.overlap_sms, w.sms) << rs << " " << w.name;
    }
    // No tensor-parallel gather or reduce-scatter is left around the attention and MLP blocks
    // (the current-scaling amax all-reduces stay); the output layer keeps its gathers and its
    // cross-entropy all-reduce.
    int layer_collectives = 0, logits_collectives = 0;
    for (const Task& t : g.tasks()) {
      const OpDesc& o = g.ops()[t.op];
      if (o.group != GroupKind::Tensor || (o.kind == OpKind::AllReduce && o.bytes == 4)) continue;
      if (t.layer != kNoIndex) ++layer_collectives;
      if (t.part == Part::Logits) ++logits_collectives;
    }
    EXPECT_EQ(layer_collectives, 0) << rs;
    EXPECT_GT(logits_collectives, 0) << rs;
  }
}

TEST(ModernModels, CurrentScalingReducesTheAmaxOfEachGatheredCastOverTp) {
  // TE v2.9 current scaling under sequence parallelism: the QKV and fc1 input casts (forward)
  // and the proj and fc2 output-gradient casts (backward) all-reduce their amax, one fp32,
  // over the TP group: 2 per layer and microbatch each way. Delayed scaling uses its amax
  // history instead; with the userbuffers overlap the reductions stay.
  const auto amax_reductions = [](const std::string& recipe, const std::string& extra) {
    const Scenario sc = core(kLlama8b, "tensor_model_parallel_size: 4, sequence_parallel: true, "
                                       "micro_batch_size: 1, global_batch_size: 8, precision: "
                                       "bf16, fp8: hybrid, fp8_recipe: " + recipe + extra);
    const ScheduleGraph g = folded_graph(sc);
    std::map<Phase, int> n;
    for (const Task& t : g.tasks()) {
      const OpDesc& o = g.ops()[t.op];
      if (t.rank == 0 && o.kind == OpKind::AllReduce && o.group == GroupKind::Tensor &&
          o.bytes == 4) {
        EXPECT_NE(t.layer, kNoIndex);
        ++n[t.phase];
      }
    }
    return std::make_pair(n[Phase::Forward], n[Phase::Backward]);
  };
  const int per_phase = 2 * 32 * 4;  // 2 casts x 32 layers x 4 microbatches (GBS 8 over DP 2)
  EXPECT_EQ(amax_reductions("tensorwise", ""), std::make_pair(per_phase, per_phase));
  EXPECT_EQ(amax_reductions("tensorwise", ", tp_comm_overlap: true"),
            std::make_pair(per_phase, per_phase));
  EXPECT_EQ(amax_reductions("delayed", ""), std::make_pair(0, 0));
}

TEST(ModernModels, Fp8SequenceParallelGathersFp8AndCastsTheLocalShard) {
  const double T = 8192, Tsp = T / 4, h = 4096;
  const std::string par = "tensor_model_parallel_size: 4, sequence_parallel: true, "
                          "micro_batch_size: 1, global_batch_size: 8, precision: bf16, "
                          "fp8: hybrid, fp8_recipe: tensorwise";
  const Scenario sc = core(kLlama8b, par);
  const ScheduleGraph g = folded_graph(sc);
  std::map<std::string, double> bytes;
  for (const OpDesc& o : g.ops())
    for (const KernelWork& k : op_kernels(o)) bytes[k.name] = k.bytes;
  EXPECT_DOUBLE_EQ(bytes["qkv_input_amax"], Tsp * h * 2);
  EXPECT_DOUBLE_EQ(bytes["qkv_input_cast"], Tsp * h * (2 + 1));
  EXPECT_DOUBLE_EQ(bytes["fc1_input_cast"], Tsp * h * (2 + 1));
  EXPECT_DOUBLE_EQ(bytes["qkv_input_transpose"], T * h * 2);
  EXPECT_DOUBLE_EQ(bytes["fc1_input_transpose"], T * h * 2);
  // The row-parallel inputs (projection, fc2) are local: cast on all T rows, both layouts.
  EXPECT_DOUBLE_EQ(bytes["proj_input_cast"], T * 4096 / 4 * (2 + 2));
  // Forward gathers before attention and MLP: T h bytes; backward ones: 2 T h.
  int fwd = 0, bwd = 0;
  for (const Task& t : g.tasks()) {
    const OpDesc& o = g.ops()[t.op];
    if (o.kind != OpKind::AllGather || o.group != GroupKind::Tensor || t.layer == kNoIndex)
      continue;
    if (t.phase == Phase::Forward) {
      ++fwd;
      EXPECT_EQ(o.bytes, std::int64_t(T * h));
    } else {
      ++bwd;
      EXPECT_EQ(o.bytes, std::int64_t(2 * T * h));
    }
  }
  EXPECT_GT(fwd, 0);
  EXPECT_GT(bwd, 0);
  // Without FP8: every gather at 2 bytes per element; a block's backward gathers the output
  // gradient and re-gathers the input for the weight gradient (Megatron-Core layers.py
  // LinearWithGradAccumulationAndAsyncCommunication.backward): two activations. The output
  // layer re-gathers its input once per microbatch in the backward.
  const Scenario bf16 = core(kLlama8b, "tensor_model_parallel_size: 4, sequence_parallel: true, "
                                       "micro_batch_size: 1, global_batch_size: 8, "
                                       "precision: bf16");
  const ScheduleGraph gb = folded_graph(bf16);
  int logits_bwd = 0;
  for (const Task& t : gb.tasks()) {
    const OpDesc& o = gb.ops()[t.op];
    if (o.kind != OpKind::AllGather || o.group != GroupKind::Tensor) continue;
    if (t.layer != kNoIndex)
      EXPECT_EQ(o.bytes, std::int64_t((t.phase == Phase::Backward ? 2 : 1) * 2 * T * h));
    else if (t.part == Part::Logits && t.phase == Phase::Backward && t.rank == 0) {
      ++logits_bwd;
      EXPECT_EQ(o.bytes, std::int64_t(2 * T * h));
    }
  }
  EXPECT_EQ(logits_bwd, bf16.parallel.num_microbatches);  // one per microbatch
}

// Under sequence parallelism an MoE layer keeps its tokens on the rank: the router and the
// alltoall dispatcher work on the local s / t tokens, and the dispatcher's tensor-parallel
// group is the expert-tensor-parallel one (Megatron-Core moe/token_dispatcher.py; trainsim
// takes expert_tensor_parallel_size 1). So its MLP block has no tensor-parallel all-gather or
// reduce-scatter, while the attention block keeps both; a shared expert (a dense MLP split
// over TP) brings the block's pair back.
TEST(ModernModels, MoeBlockWithoutExpertTensorParallelismHasNoTpCollective) {
  const auto tp_collectives = [](const std::string& extra_model) {
    const Scenario sc = core(std::string(kQwen30b) + extra_model,
                             "tensor_model_parallel_size: 2, sequence_parallel: true, "
                             "expert_model_parallel_size: 4, expert_tensor_parallel_size: 1, "
                             "micro_batch_size: 1, global_batch_size: 8");
    const ScheduleGraph g = folded_graph(sc);
    std::map<Part, int> n;
    for (const Task& t : g.tasks()) {
      const OpDesc& o = g.ops()[t.op];
      if (o.group == GroupKind::Tensor && t.layer != kNoIndex &&
          (o.kind == OpKind::AllGather || o.kind == OpKind::ReduceScatter))
        ++n[t.part];
    }
    return n;
  };
  std::map<Part, int> local = tp_collectives("");
  EXPECT_EQ(local[Part::Mlp], 0);
  EXPECT_GT(local[Part::Attn], 0);
  std::map<Part, int> shared = tp_collectives(", moe_shared_expert_intermediate_size: 1536");
  EXPECT_EQ(shared[Part::Mlp], shared[Part::Attn]);
  EXPECT_EQ(shared[Part::Attn], local[Part::Attn]);
}

// The embedding's dense gradient [V x h] (bf16) is added into its main_grad every microbatch:
// read both, write main_grad, in the main_grad's type (fp32 by default under Megatron-Core,
// bf16 with grad_reduce_in_fp32: false, as the recipes of the H100 table set it).
TEST(ModernModels, EmbeddingGradientAccumulatesInTheMainGradType) {
  const double V = 128256, h = 4096;
  for (const bool fp32 : {true, false}) {
    const Scenario sc = core(kLlama8b, std::string("micro_batch_size: 1, global_batch_size: 8, "
                                                   "precision: bf16, grad_reduce_in_fp32: ") +
                                           (fp32 ? "true" : "false"));
    const ScheduleGraph g = folded_graph(sc);
    double bytes = -1;
    for (const OpDesc& o : g.ops())
      if (o.kind == OpKind::EmbedBwd)
        for (const KernelWork& k : op_kernels(o))
          if (std::string(k.name) == "embedding_grad_accumulate") bytes = k.bytes;
    const double main_grad = fp32 ? 4 : 2;
    EXPECT_DOUBLE_EQ(bytes, V * h * (2 + 2 * main_grad)) << fp32;
  }
}

TEST(ModernModels, MoeLayerActivationsTermByTerm) {
  const Scenario sc = core(
      "num_layers: 48, hidden_size: 2048, num_attention_heads: 32, num_query_groups: 4, "
      "kv_channels: 128, ffn_hidden_size: 6144, num_experts: 128, moe_router_topk: 8, "
      "moe_ffn_hidden_size: 768, moe_grouped_gemm: true, swiglu: true, normalization: RMSNorm, "
      "position_embedding_type: rope, untie_embeddings_and_output_weights: true, "
      "add_bias_linear: false, hidden_dropout: 0.0, attention_dropout: 0.0, "
      "attention_backend: flash, seq_length: 4096, padded_vocab_size: 151936",
      "expert_model_parallel_size: 8, micro_batch_size: 2, global_batch_size: 16, "
      "precision: bf16, fp8: hybrid, fp8_recipe: tensorwise");
  const double T = 2 * 4096, h = 2048, E = 128, Tk = T * 8, Fe = 768;
  const double expected = 2 * T * h      // pre-MLP RMSNorm input (bf16)
                          + 4 * T        // its fp32 rstd
                          + 2 * T * h    // the router's input: the norm output, bf16 (not FP8)
                          + 4 * T * E    // fp32 router scores for the softmax / top-k backward
                          + 1 * Tk * h   // expert fc1 input, FP8
                          + 2 * Tk * 2 * Fe  // fc1 output (gate and up), the SwiGLU input
                          + 4 * Tk       // the permuted routing probabilities (weighted SwiGLU)
                          + 1 * Tk * Fe;  // fc2 input, FP8
  // No copy of the expert outputs: the probabilities are applied in the activation, so the
  // unpermute is an unweighted gather.
  EXPECT_EQ(double(layer_activation_bytes_no_recompute(sc).mlp), expected);

  // The weighted SwiGLU reads fc1's output and the fp32 weights and writes its output; its
  // backward reads the output gradient, fc1's output and the weights, and writes fc1's
  // gradient and the weights' gradient (the local experts' Tk tokens: EP 8 sends and receives
  // as many as it routes when balanced).
  const ScheduleGraph g = folded_graph(sc);
  double fwd = 0, bwd = 0;
  for (const OpDesc& o : g.ops())
    if ((o.kind == OpKind::MlpFwd || o.kind == OpKind::MlpBwd) && o.features.experts_local > 0)
      for (const KernelWork& k : op_kernels(o)) {
        if (std::string(k.name) == "expert_swiglu_fwd") fwd = k.bytes;
        if (std::string(k.name) == "expert_swiglu_bwd") bwd = k.bytes;
      }
  EXPECT_DOUBLE_EQ(fwd, Tk * (2 * (2 * Fe + Fe) + 4));
  EXPECT_DOUBLE_EQ(bwd, Tk * (2 * (Fe + 2 * 2 * Fe) + 8));
}

// The local experts' GEMMs with --moe-grouped-gemm: one product per expert in the batch, each
// with the expert's own shape. Qwen3-30B-A3B at EP 8, micro batch 2, seq 4096: T = 8192
// tokens, k = 8 copies each, 128 / 8 = 16 local experts -> 8192 x 8 / 16 = 4096 tokens per
// expert. Forward and data gradients have the expert's tokens as m; the weight gradients
// (dW = dY^T X, [Fe x h] and [h x 2 Fe]) have them as the reduction dimension k.
TEST(ModernModels, ExpertGemmsHaveTheExpertsOwnShapes) {
  const Scenario sc = core(kQwen30b, "expert_model_parallel_size: 8, micro_batch_size: 2, "
                                     "global_batch_size: 16, precision: bf16");
  const ScheduleGraph g = folded_graph(sc);
  const double te = 8192.0 * 8 / 16, h = 2048, Fe = 768;
  struct Shape { double m, n, k; };
  const std::map<std::string, Shape> want = {
      {"expert_fc1_gemm", {te, 2 * Fe, h}},  {"expert_fc2_gemm", {te, h, Fe}},
      {"expert_fc2_dgrad", {te, Fe, h}},     {"expert_fc2_wgrad", {Fe, h, te}},
      {"expert_fc1_dgrad", {te, h, 2 * Fe}}, {"expert_fc1_wgrad", {h, 2 * Fe, te}}};
  std::map<std::string, int> seen;
  for (const OpDesc& o : g.ops()) {
    if ((o.kind != OpKind::MlpFwd && o.kind != OpKind::MlpBwd) || o.features.experts_local == 0)
      continue;
    for (const KernelWork& k : op_kernels(o)) {
      auto it = want.find(k.name);
      if (it == want.end()) continue;
      ++seen[k.name];
      EXPECT_EQ(k.m, it->second.m) << k.name;
      EXPECT_EQ(k.n, it->second.n) << k.name;
      EXPECT_EQ(k.k, it->second.k) << k.name;
      EXPECT_EQ(k.batch, 16) << k.name;
      EXPECT_DOUBLE_EQ(k.flops, 2 * k.m * k.n * k.k * 16) << k.name;
    }
  }
  EXPECT_EQ(seen.size(), want.size());
}

// Megatron-Core --recompute-modules layernorm and moe_act (the GPT-OSS H100 recipe's): the
// MoE layer no longer keeps the pre-MLP norm output (2 T h) nor the activation output, fc2's FP8
// input (Tk Fe); the backward re-runs the norm (read x, write y, fp32 rstd) and the weighted
// SwiGLU with its FP8 cast (current scaling: an amax pass, then the cast) in their place.
TEST(ModernModels, MoeRecomputeModulesTradeMemoryForKernels) {
  const std::string par = "expert_model_parallel_size: 8, micro_batch_size: 2, "
                          "global_batch_size: 16, precision: bf16, fp8: hybrid, "
                          "fp8_recipe: tensorwise";
  const Scenario keep = core(kQwen30b, par);
  const Scenario rec = core(kQwen30b, par + ", recompute_granularity: selective, "
                                            "recompute_modules: [layernorm, moe_act]");
  const double T = 2 * 4096, h = 2048, Tk = T * 8, Fe = 768;
  EXPECT_EQ(double(layer_activation_bytes_no_recompute(keep).mlp -
                   layer_activation_bytes_no_recompute(rec).mlp),
            2 * T * h + 1 * Tk * Fe);
  const ScheduleGraph gk = folded_graph(keep);
  const ScheduleGraph gr = folded_graph(rec);
  EXPECT_EQ(moe_kernel_bytes(gk, OpKind::MlpBwd, "pre_mlp_norm_recompute"), -1);
  EXPECT_EQ(moe_kernel_bytes(gk, OpKind::MlpBwd, "expert_swiglu_recompute"), -1);
  EXPECT_DOUBLE_EQ(moe_kernel_bytes(gr, OpKind::MlpBwd, "pre_mlp_norm_recompute"),
                   T * (2 * h * 2 + 4));
  EXPECT_DOUBLE_EQ(moe_kernel_bytes(gr, OpKind::MlpBwd, "expert_swiglu_recompute"),
                   moe_kernel_bytes(gr, OpKind::MlpFwd, "expert_swiglu_fwd"));
  EXPECT_DOUBLE_EQ(moe_kernel_bytes(gr, OpKind::MlpBwd, "expert_fc2_input_amax_recompute"),
                   Tk * Fe * 2);
  EXPECT_DOUBLE_EQ(moe_kernel_bytes(gr, OpKind::MlpBwd, "expert_fc2_input_cast_recompute"),
                   Tk * Fe * (2 + 2));
  // Selective recomputation with Megatron-Core's default modules ([core_attn]) recomputes
  // nothing with flash attention: the same graph as none.
  const Scenario dflt = core(kQwen30b, par + ", recompute_granularity: selective");
  EXPECT_EQ(dflt.parallel.recompute_modules, kRecomputeCoreAttn);
  EXPECT_EQ(layer_activation_bytes_no_recompute(dflt).total(),
            layer_activation_bytes_no_recompute(keep).total());
}

// FSDP gathers each layer's parameters before use; with --fp8-param-gather the layer weights
// travel in FP8 (1 byte per element), the embedding and output tables (not FP8 layers) in bf16.
// Llama 3 8B: 218,112,000 parameters per layer, 128256 x 4096 per table.
TEST(ModernModels, FsdpGathersLayersInFp8WithFp8ParamGather) {
  for (const bool fp8_gather : {false, true}) {
    const Scenario sc = core(kLlama8b, std::string("use_megatron_fsdp: true, precision: bf16, fp8: hybrid, "
                                                   "fp8_recipe: tensorwise, micro_batch_size: 1, "
                                                   "global_batch_size: 8, fp8_param_gather: ") +
                                           (fp8_gather ? "true" : "false"));
    const ScheduleGraph g = folded_graph(sc);
    std::set<std::int64_t> sizes;
    for (const OpDesc& o : g.ops())
      if (o.kind == OpKind::AllGather && o.group == GroupKind::Data) sizes.insert(o.bytes);
    const std::int64_t layer = 218112000LL * (fp8_gather ? 1 : 2), table = 128256LL * 4096 * 2;
    EXPECT_EQ(sizes, (std::set<std::int64_t>{layer, table})) << "fp8_param_gather " << fp8_gather;
  }
}

// Megatron-FSDP with pipeline parallelism: each stage gathers and reduce-scatters its own
// chunk's parameters (the embedding on the first stage, its layers, the output layer on the
// last), every microbatch; nothing stays gathered, so more microbatches do not raise the peak.
// Llama 3 8B on PP 2 (and interleaved, 4 layers per virtual stage): 16 layers per rank of
// 218,112,000 parameters, the untied embedding and output tables of 128256 x 4096, the final
// RMSNorm's 4096 on the last stage; bf16 gradients (2 bytes).
TEST(ModernModels, FsdpWithPipelineStagesShardsEachStagesOwnChunks) {
  const std::int64_t layer = 218112000LL, table = 128256LL * 4096;
  for (const std::string vp : {"", ", num_layers_per_virtual_pipeline_stage: 4"}) {
    std::int64_t peak[2] = {0, 0};
    for (const int gbs : {32, 128}) {
      const std::string par =
          "use_megatron_fsdp: true, pipeline_model_parallel_size: 2, micro_batch_size: 1, "
          "global_batch_size: " + std::to_string(gbs) + vp;
      const Scenario sc = core(kLlama8b, par);
      const ScheduleGraph g = folded_graph(sc);
      const std::int64_t nmb = sc.parallel.num_microbatches;
      std::map<std::int64_t, std::int64_t> reduced, gathered;  // per pipeline stage
      for (RankId r : g.simulated_ranks()) {
        const std::int64_t stage = std::int64_t(r) / 4;  // TP 1 x DP 4 ranks per stage
        for (TaskId id : g.tasks_of_rank(r)) {
          const OpDesc& o = g.op(id);
          if (o.group != GroupKind::Data) continue;
          if (o.kind == OpKind::ReduceScatter) reduced[stage] += o.bytes;
          if (o.kind == OpKind::AllGather) gathered[stage] += o.bytes;
        }
      }
      EXPECT_EQ(reduced[0], nmb * 2 * (16 * layer + table)) << vp;
      EXPECT_EQ(reduced[1], nmb * 2 * (16 * layer + table + 4096)) << vp;
      // Both passes gather the chunk's layers and its table (the final norm is not gathered
      // apart: the output unit is the table).
      EXPECT_EQ(gathered[0], nmb * 2 * 2 * (16 * layer + table)) << vp;
      EXPECT_EQ(gathered[1], nmb * 2 * 2 * (16 * layer + table)) << vp;
      const std::int64_t p = program_order_peak_gpu_bytes(g);
      if (gbs == 32) peak[0] = p;
      else peak[1] = p;
    }
    // 8 or 32 microbatches per replica (both past the warm-up): the same peak.
    EXPECT_EQ(peak[0], peak[1]) << vp;
  }
}

// FSDP on one stage (the Megatron-Bridge Llama 3 8B row): RoPE has no position table, so the
// embedding backward adds no position gradient; each microbatch's gradients leave with their
// bucket and the peak does not grow with the microbatch count (it grew 64 MiB a microbatch).
TEST(ModernModels, FsdpOnOneStageHoldsNoGradientAcrossMicrobatches) {
  std::int64_t peak[2] = {0, 0};
  for (const int gbs : {64, 256}) {
    const Scenario sc = core(kLlama8b, "use_megatron_fsdp: true, micro_batch_size: 1, "
                                       "global_batch_size: " + std::to_string(gbs));
    peak[gbs == 64 ? 0 : 1] = program_order_peak_gpu_bytes(folded_graph(sc));
  }
  EXPECT_EQ(peak[0], peak[1]);  // 8 or 32 microbatches per replica
}

// Megatron's --recompute-method block --recompute-num-layers N (full recomputation of the first
// N layers of each model chunk; the Megatron-Bridge performance scripts' -rl): those layers keep
// only their input and re-run their forward, the others keep all their activations. On one
// stage (one microbatch in flight at the peak) each layer moved from the kept to the
// checkpointed side lowers the peak by a layer's activations less its input; with interleaved
// chunks of 2 layers, block 1 checkpoints the first layer of each chunk.
TEST(ModernModels, RecomputeBlockChecksFirstLayersOfEachChunk) {
  const std::string full = "use_distributed_optimizer: true, micro_batch_size: 1, "
                           "global_batch_size: 16, recompute_granularity: full";
  std::vector<std::int64_t> peak;
  for (int n = 1; n <= 8; ++n) {
    const Scenario sc = core(kLlama8b, full + ", recompute_method: block, recompute_num_layers: " +
                                           std::to_string(n));
    const ScheduleGraph g = folded_graph(sc);
    peak.push_back(program_order_peak_gpu_bytes(g));
    std::set<std::int64_t> recomputed;
    for (TaskId id : g.tasks_of_rank(0))
      if (g.task(id).phase == Phase::Recompute) recomputed.insert(g.task(id).layer);
    EXPECT_EQ(recomputed.size(), std::size_t(n));
    if (!recomputed.empty()) EXPECT_EQ(*recomputed.rbegin(), n - 1);  // the first n layers
    if (n > 1) {
      const std::int64_t layer = layer_activation_bytes_no_recompute(sc).total(),
                         input = layer_activation_bytes(sc).total();
      EXPECT_EQ(peak[std::size_t(n - 2)] - peak[std::size_t(n - 1)], layer - input) << n;
    }
  }
  // All 32 layers of the block: the uniform method's graph (every layer checkpointed).
  const Scenario all = core(kLlama8b, full + ", recompute_method: block, recompute_num_layers: 32");
  const Scenario uniform = core(kLlama8b, full);
  EXPECT_EQ(program_order_peak_gpu_bytes(folded_graph(all)),
            program_order_peak_gpu_bytes(folded_graph(uniform)));
  // Interleaved, PP 4 with 2 layers per virtual stage: block 1 checkpoints the first of each.
  const Scenario vp = core(kLlama8b, full + ", recompute_method: block, recompute_num_layers: 1, "
                                            "pipeline_model_parallel_size: 4, "
                                            "num_layers_per_virtual_pipeline_stage: 2",
                           1);
  const std::vector<bool> layers = vp.parallel.fully_recomputed_layers(32);
  for (std::int64_t l = 0; l < 32; ++l) EXPECT_EQ(layers[std::size_t(l)], l % 2 == 0) << l;
}

// Uniform recomputation in units of N layers (Megatron-Core recompute.py: each model chunk's
// layers in units of recompute_num_layers, the last one shorter): a unit stashes only its first
// layer's input, and before the backward of its last layer re-runs the forward of all its
// layers, whose activations are then all live at once.
TEST(ModernModels, RecomputeUniformUnitsOfSeveralLayers) {
  const std::string full = "use_distributed_optimizer: true, micro_batch_size: 1, "
                           "global_batch_size: 8, recompute_granularity: full";
  // Units by chunk: 8 layers in units of 3 on one stage; interleaved chunks of 4 layers (PP 2,
  // VP 2 on 16 layers) restart their units at each chunk.
  const Scenario one = core(kLlama8b, full + ", recompute_method: uniform, recompute_num_layers: 3, "
                                             "pipeline_model_parallel_size: 4");
  const std::vector<std::int64_t> u = one.parallel.recompute_units(32);
  for (std::int64_t l = 0; l < 8; ++l) EXPECT_EQ(u[std::size_t(l)], l / 3 * 3) << l;
  for (std::int64_t l = 8; l < 16; ++l) EXPECT_EQ(u[std::size_t(l)], 8 + (l - 8) / 3 * 3) << l;
  const Scenario vp = core(kLlama8b, full + ", recompute_method: uniform, recompute_num_layers: 3, "
                                            "pipeline_model_parallel_size: 4, "
                                            "num_layers_per_virtual_pipeline_stage: 4");
  const std::vector<std::int64_t> v = vp.parallel.recompute_units(32);
  for (std::int64_t l = 0; l < 32; ++l) EXPECT_EQ(v[std::size_t(l)], l / 4 * 4 + (l % 4) / 3 * 3) << l;
  // A unit longer than the chunk is the chunk; block units are single layers; no unit without
  // full recomputation.
  EXPECT_EQ(core(kLlama8b, full + ", recompute_num_layers: 64, pipeline_model_parallel_size: 4")
                .parallel.recompute_units(32)[7],
            0);
  EXPECT_EQ(core(kLlama8b, full + ", recompute_method: block, recompute_num_layers: 2")
                .parallel.recompute_units(32)[1],
            1);
  EXPECT_EQ(core(kLlama8b, "micro_batch_size: 1, global_batch_size: 8").parallel.recompute_units(32)[0],
            -1);
  // A configuration not validated yet (its default split: one chunk of one layer): the layers
  // past its chunks form one more, so every layer is still in a unit.
  ParallelConfig raw;
  raw.recompute_granularity = Recompute::Full;
  raw.recompute_num_layers = 2;
  EXPECT_EQ(raw.recompute_units(5), (std::vector<std::int64_t>{0, 1, 1, 3, 3}));

  // The graph, one stage, one microbatch: stashed inputs and the re-run of a whole unit.
  for (std::int64_t n : {1, 4, 5}) {
    SCOPED_TRACE(n);
    const Scenario sc = core(kLlama8b, full + ", recompute_method: uniform, recompute_num_layers: " +
                                           std::to_string(n));
    const ScheduleGraph g = folded_graph(sc);
    const std::vector<TaskId> tasks = g.tasks_of_rank(0);
    // Activation bytes on the device after each task (start effects, then end effects).
    std::vector<std::int64_t> act;
    std::int64_t cur = 0;
    for (TaskId id : tasks) {
      for (const MemEffect* e = g.effects_begin(id); e != g.effects_end(id); ++e)
        if (!e->on_host && e->category == MemCategory::Activations) cur += e->bytes;
      act.push_back(cur);
    }
    auto layer_task = [&](Phase phase, bool first) {
      std::size_t found = tasks.size();
      for (std::size_t i = 0; i < tasks.size(); ++i) {
        const Task& t = g.task(tasks[i]);
        if (t.phase != phase || t.kind != TaskKind::Compute || t.layer == kNoIndex) continue;
        found = i;
        if (first) break;
      }
      return found;
    };
    const std::size_t first_fwd = layer_task(Phase::Forward, true);
    const std::size_t last_fwd = layer_task(Phase::Forward, false);
    const std::size_t first_bwd = layer_task(Phase::Backward, true);
    ASSERT_LT(last_fwd, first_bwd);
    const std::int64_t input = layer_activation_bytes(sc).total();
    const std::int64_t layer = layer_activation_bytes_no_recompute(sc).total();
    const std::int64_t units = (32 + n - 1) / n;
    // Through the forward only the units' inputs stay (the embedding's own activations come
    // before the first layer task).
    const std::int64_t before_first = first_fwd > 0 ? act[first_fwd - 1] : 0;
    EXPECT_EQ(act[last_fwd] - before_first, units * input);
    // The last unit (layers 32 - r .. 31, r = 32 - (units - 1) n) re-runs all its layers
    // before the first backward: r layers' activations on top of the stash.
    const std::int64_t r = 32 - (units - 1) * n;
    std::set<std::uint16_t> rerun;
    for (std::size_t i = last_fwd + 1; i < first_bwd; ++i) {
      const Task& t = g.task(tasks[i]);
      if (t.phase == Phase::Recompute && t.kind == TaskKind::Compute) rerun.insert(t.layer);
    }
    EXPECT_EQ(rerun.size(), std::size_t(r));
    EXPECT_EQ(*rerun.begin(), 32 - r);
    EXPECT_EQ(act[first_bwd - 1] - before_first, units * input + r * layer);
    // Every layer re-runs exactly once.
    std::multiset<std::uint16_t> all;
    for (TaskId id : tasks)
      if (g.task(id).phase == Phase::Recompute && g.task(id).part == Part::Attn)
        all.insert(g.task(id).layer);
    EXPECT_EQ(all.size(), 32u);
    EXPECT_EQ(std::set<std::uint16_t>(all.begin(), all.end()).size(), 32u);
  }
}

// FSDP with uniform recomputation in units of 4 layers: the backward pass gathers each layer
// once, at its first use (the unit's re-run, its layers in forward order), and releases it
// after its backward; while a unit re-runs, all its layers' parameters are gathered.
TEST(ModernModels, FsdpGathersACheckpointUnitsLayersForItsReRun) {
  auto graph = [](std::int64_t n) {
    return folded_graph(core(kLlama8b, "use_megatron_fsdp: true, precision: bf16, "
                                       "micro_batch_size: 1, global_batch_size: 8, "
                                       "recompute_granularity: full, recompute_num_layers: " +
                                           std::to_string(n)));
  };
  std::int64_t params_peak[2] = {0, 0};
  for (std::int64_t n : {1, 4}) {
    SCOPED_TRACE(n);
    const ScheduleGraph g = graph(n);
    const std::vector<TaskId> tasks = g.tasks_of_rank(0);
    std::size_t layer_gathers = 0;
    std::int64_t params = 0, peak = 0;
    for (TaskId id : tasks) {
      const Task& t = g.task(id);
      if (t.phase == Phase::ParamSync && g.op(id).kind == OpKind::AllGather &&
          t.part == Part::Params)
        ++layer_gathers;
      for (const MemEffect* e = g.effects_begin(id); e != g.effects_end(id); ++e)
        if (!e->on_host && e->category == MemCategory::Parameters) params += e->bytes;
      if (t.phase == Phase::Recompute) peak = std::max(peak, params);
      if (t.phase != Phase::Recompute || t.kind != TaskKind::Compute) continue;
      bool waits = false;
      for (auto [e, end] = boost::in_edges(id, g.dependencies()); e != end; ++e) {
        const TaskId from = boost::source(*e, g.dependencies());
        waits |= g.task(from).phase == Phase::ParamSync;
      }
      if (t.part == Part::Attn) EXPECT_TRUE(waits) << g.label(id);
    }
    EXPECT_EQ(layer_gathers, 2u * 32);  // one forward and one backward gather per layer
    params_peak[n == 1 ? 0 : 1] = peak;
  }
  // While re-running, units of one layer hold that layer and the next, prefetched (one layer
  // ahead: zero3_prefetch_layers); units of 4 hold the unit's 4 layers and the next unit's
  // first: 3 layers' gathered bytes more (bf16, the 7/8 gathered from the other ranks).
  const Scenario sc = core(kLlama8b, "use_megatron_fsdp: true, precision: bf16, "
                                     "micro_batch_size: 1, global_batch_size: 8");
  ASSERT_EQ(zero3_prefetch_layers(sc), 1);
  const std::int64_t layer = layer_params_at(sc, 0) * 2 * 7 / 8;
  EXPECT_EQ(params_peak[1] - params_peak[0], 3 * layer);
}

// The order FSDP gathers layers in the backward pass with checkpoint units of 4 over 8 layers:
// each unit's layers in forward order at its re-run, the last unit first (4, 5, 6, 7, 0, 1,
// 2, 3). An MoE pattern makes the layers' sizes tell them apart (layers 3 and 4 MoE).
TEST(ModernModels, FsdpGathersLayersInTheOrderOfTheirFirstUseInTheBackward) {
  const Scenario sc = core(
      "num_layers: 8, hidden_size: 128, num_attention_heads: 4, num_query_groups: 2, "
      "ffn_hidden_size: 256, swiglu: true, normalization: RMSNorm, position_embedding_type: rope, "
      "add_bias_linear: false, attention_backend: flash, seq_length: 64, padded_vocab_size: 512, "
      "num_experts: 4, moe_router_topk: 2, moe_ffn_hidden_size: 64, "
      "moe_layer_freq: [0, 0, 0, 1, 1, 0, 0, 0]",
      "micro_batch_size: 1, global_batch_size: 8, precision: bf16, "
      "expert_model_parallel_size: 2, use_megatron_fsdp: true, recompute_granularity: full, "
      "recompute_num_layers: 4");
  ASSERT_NE(layer_params_at(sc, 3), layer_params_at(sc, 2));
  const ScheduleGraph g = folded_graph(sc);
  // Bytes of the parameter gathers in the order they are issued (a gather prefetched at a
  // unit's hook carries that unit's part, so the bytes tell them apart, not the part): the
  // embedding (its word table: 512 x 128), the layers, the output layer (the tied table).
  std::vector<std::int64_t> gathered;
  for (TaskId id : g.tasks_of_rank(0))
    if (g.task(id).phase == Phase::ParamSync && g.op(id).kind == OpKind::AllGather)
      gathered.push_back(g.op(id).bytes);
  const std::int64_t word = 2 * 512 * 128;
  std::vector<std::int64_t> expected = {word};
  for (std::int64_t l : {0, 1, 2, 3, 4, 5, 6, 7}) expected.push_back(2 * layer_params_at(sc, l));
  expected.push_back(word);
  expected.push_back(word);
  for (std::int64_t l : {4, 5, 6, 7, 0, 1, 2, 3}) expected.push_back(2 * layer_params_at(sc, l));
  expected.push_back(word);
  EXPECT_EQ(gathered, expected);
}

TEST(ModernModels, ContextParallelRingExchangeBytesAndGroups) {
  Scenario sc = core(std::string(kLlama8b),
                     "tensor_model_parallel_size: 8, context_parallel_size: 2, "
                     "sequence_parallel: true, micro_batch_size: 1, global_batch_size: 4",
                     2);
  const ScheduleGraph g = folded_graph(sc);
  // Each of the 2 CP ranks holds K and V of s / cp = 4096 tokens for 8 / 8 = 1 group of 128:
  // 2 x 4096 x 1 x 128 x 2 bytes = 2 MiB; the forward gathers cp of them, the backward moves
  // them again and returns dK, dV (an all-reduce's traffic on the same buffer).
  const OpDesc* fwd = find_op(g, OpKind::AllGather, GroupKind::Context);
  const OpDesc* bwd = find_op(g, OpKind::AllReduce, GroupKind::Context);
  ASSERT_NE(fwd, nullptr);
  ASSERT_NE(bwd, nullptr);
  EXPECT_EQ(fwd->bytes, 2LL * 2 * 4096 * 1 * 128 * 2);
  EXPECT_EQ(fwd->group_size, 2);
  EXPECT_EQ(bwd->bytes, fwd->bytes);
  // Megatron's order tp -> cp -> dp -> pp: rank 0's CP peer is rank 8 (the next TP group).
  for (const CommGroup& grp : g.groups())
    if (grp.kind == GroupKind::Context && grp.ranks.front() == 0) EXPECT_EQ(grp.ranks[1], 8u);
  // Activations follow the s / cp tokens: CP 2 keeps half of CP 1's attention block.
  Scenario one = sc;
  one.parallel.context_parallel_size = 1;
  EXPECT_EQ(2 * layer_activation_bytes(sc).attn, layer_activation_bytes(one).attn);
}

TEST(ModernModels, MoeAllToAllBytesAndExpertGroups) {
  const Scenario sc = core(
      "num_layers: 4, hidden_size: 2048, num_attention_heads: 32, num_query_groups: 4, "
      "kv_channels: 128, num_experts: 128, moe_router_topk: 8, moe_ffn_hidden_size: 768, "
      "swiglu: true, seq_length: 4096, padded_vocab_size: 151936, attention_backend: flash",
      "expert_model_parallel_size: 8, expert_tensor_parallel_size: 1, micro_batch_size: 2, "
      "global_batch_size: 32",
      2);
  const ScheduleGraph g = folded_graph(sc);
  const OpDesc* a2a = find_op(g, OpKind::AllToAll, GroupKind::Expert);
  ASSERT_NE(a2a, nullptr);
  // Each rank dispatches its 2 x 4096 tokens x top-8 copies of 2048 bf16 elements.
  EXPECT_EQ(a2a->bytes, 2LL * 4096 * 8 * 2048 * 2);
  EXPECT_EQ(a2a->group_size, 8);
  // etp -> ep -> edp within the stage: with TP 1 and ETP 1 an EP group is 8 consecutive ranks.
  for (const CommGroup& grp : g.groups())
    if (grp.kind == GroupKind::Expert && grp.ranks.front() == 8)
      EXPECT_EQ(grp.ranks.back(), 15u);
  EXPECT_EQ(CostModel::ring_bytes_per_rank(OpKind::AllToAll, 800, 8), 700);
  // The allgather dispatcher gathers the EP group's 8 x 2 x 4096 tokens (not their copies)
  // and reduce-scatters the outputs back.
  Scenario ag = sc;
  ag.model.moe_token_dispatcher_type = MoeDispatcher::AllGather;
  const ScheduleGraph g2 = folded_graph(ag);
  const OpDesc* gather = find_op(g2, OpKind::AllGather, GroupKind::Expert);
  const OpDesc* scatter = find_op(g2, OpKind::ReduceScatter, GroupKind::Expert);
  ASSERT_NE(gather, nullptr);
  ASSERT_NE(scatter, nullptr);
  EXPECT_EQ(gather->bytes, 8LL * 2 * 4096 * 2048 * 2);
  EXPECT_EQ(scatter->bytes, gather->bytes);
  EXPECT_EQ(find_op(g2, OpKind::AllToAll, GroupKind::Expert), nullptr);
}

TEST(ModernModels, BadInputsNameFileFieldAndValue) {
  ScratchDir dir("modern");
  struct Case {
    std::string model, parallel, system, expect;
  };
  const std::string base = "hidden_size: 1024, num_attention_heads: 16, seq_length: 1024, "
                           "padded_vocab_size: 1024, num_layers: 4";
  const Case cases[] = {
      {base + ", num_query_groups: 3", "micro_batch_size: 1, global_batch_size: 8", "dgx-h100",
       "model.num_query_groups (3)"},
      {base + ", num_query_groups: 4", "tensor_model_parallel_size: 8, micro_batch_size: 1, "
       "global_batch_size: 8", "dgx-h100", "model.num_query_groups (4) is not divisible by"},
      {base + ", num_experts: 4, moe_router_topk: 8", "micro_batch_size: 1, global_batch_size: 8",
       "dgx-h100", "field 'model.moe_router_topk' = '8'"},
      {base + ", num_experts: 6", "expert_model_parallel_size: 4, micro_batch_size: 1, "
       "global_batch_size: 8", "dgx-h100", "model.num_experts (6) is not divisible by"},
      {base + ", attention_backend: flash", "context_parallel_size: 2, micro_batch_size: 1, "
       "global_batch_size: 8", "dgx-h100", ""},
      {"hidden_size: 1024, num_attention_heads: 16, seq_length: 1026, padded_vocab_size: 1024, "
       "num_layers: 4, attention_backend: flash",
       "context_parallel_size: 2, micro_batch_size: 1, global_batch_size: 8", "dgx-h100",
       "model.seq_length (1026) is not divisible by 2 x parallel.context_parallel_size (2)"},
      {base, "fp8: hybrid, precision: bf16, micro_batch_size: 1, global_batch_size: 8",
       "dgx-a100-80gb", "has no FP8 tensor cores"},
      {base, "pipeline_model_parallel_size: 2, decoder_first_pipeline_num_layers: 9, "
       "micro_batch_size: 1, global_batch_size: 8", "dgx-h100",
       "parallel.decoder_first_pipeline_num_layers (9)"},
      {base + ", window_size: 128", "micro_batch_size: 1, global_batch_size: 8", "dgx-h100",
       "model.window_size (128) needs model.attention_backend flash or fused"},
      {base + ", num_experts: 8, moe_token_dispatcher_type: allgather",
       "expert_tensor_parallel_size: 2, tensor_model_parallel_size: 2, "
       "sequence_parallel: true, micro_batch_size: 1, global_batch_size: 8", "dgx-h100",
       "parallel.expert_tensor_parallel_size (2) with model.moe_token_dispatcher_type allgather"},
      {base, "fp8: e4m3, fp8_recipe: mxfp8, precision: bf16, micro_batch_size: 1, "
       "global_batch_size: 8", "dgx-h100", "MXFP8 block scaling needs Blackwell"},
      {base, "grad_reduce_in_fp32: sometimes, micro_batch_size: 1, global_batch_size: 8",
       "dgx-h100", "parallel.grad_reduce_in_fp32"},
      {base, "grad_reduce_in_fp32: true, use_megatron_fsdp: true, precision: bf16, "
       "micro_batch_size: 1, global_batch_size: 8", "dgx-h100",
       "parallel.grad_reduce_in_fp32 (true) with FSDP is not modelled"},
      {base, "recompute_method: block, recompute_num_layers: 2, micro_batch_size: 1, "
       "global_batch_size: 8", "dgx-h100",
       "field 'parallel.recompute_method' = 'block': needs parallel.recompute_granularity full"},
      {base, "recompute_granularity: full, recompute_method: blocks, micro_batch_size: 1, "
       "global_batch_size: 8", "dgx-h100",
       "field 'parallel.recompute_method' = 'blocks': expected one of: uniform, block"},
      {base, "use_torch_fsdp2: true, pipeline_model_parallel_size: 2, micro_batch_size: 1, "
       "global_batch_size: 8", "dgx-h100",
       "parallel.use_torch_fsdp2 with parallel.pipeline_model_parallel_size (2): Megatron-LM "
       "refuses it"},
      {base, "grad_reduce_in_fp32: false, precision: fp32, micro_batch_size: 1, "
       "global_batch_size: 8", "dgx-h100",
       "parallel.grad_reduce_in_fp32 (false) with parallel.precision fp32"},
      {base, "recompute_modules: [moe_act], micro_batch_size: 1, global_batch_size: 8",
       "dgx-h100", "field 'parallel.recompute_modules' = [moe_act]: needs parallel.recompute_granularity selective"},
      {base, "recompute_granularity: selective, recompute_modules: [attention], "
       "micro_batch_size: 1, global_batch_size: 8", "dgx-h100",
       "'attention': expected one of core_attn, layernorm, moe_act"},
      {base, "recompute_granularity: selective, recompute_modules: [core_attn, shared_experts], "
       "micro_batch_size: 1, global_batch_size: 8", "dgx-h100",
       "'shared_experts' recomputes MoE layers' shared experts and the model has none"},
      {base, "recompute_granularity: selective, recompute_modules: moe_act, "
       "micro_batch_size: 1, global_batch_size: 8", "dgx-h100",
       "expected a list of module names"},
      {base, "tensor_model_parallel_size: 2, tp_comm_overlap: true, micro_batch_size: 1, "
       "global_batch_size: 8", "dgx-h100",
       "parallel.tp_comm_overlap (true) needs parallel.sequence_parallel: true"},
      {base, "tensor_model_parallel_size: 2, sequence_parallel: true, tp_comm_overlap: yes2, "
       "micro_batch_size: 1, global_batch_size: 8", "dgx-h100",
       "field 'parallel.tp_comm_overlap' = 'yes2'"},
      {base, "tensor_model_parallel_size: 2, sequence_parallel: true, tp_comm_overlap: true, "
       "tp_comm_overlap_rs_method: bulk, micro_batch_size: 1, global_batch_size: 8", "dgx-h100",
       "field 'parallel.tp_comm_overlap_rs_method' = 'bulk': expected one of: pipeline, "
       "ring_exchange"},
      {base, "tensor_model_parallel_size: 2, sequence_parallel: true, "
       "tp_comm_overlap_rs_method: ring_exchange, micro_batch_size: 1, global_batch_size: 8",
       "dgx-h100", "is set, but parallel.tp_comm_overlap is not"}};
  for (const Case& c : cases) {
    const std::string path =
        dir.write("s.yaml", "runtime: megatron-core\nmodel: {" + c.model + "}\nparallel: {" +
                                c.parallel + "}\ncluster: {system: " + c.system + ", nodes: 1}\n");
    try {
      load_scenario(path);
      if (!c.expect.empty()) ADD_FAILURE() << "accepted: " << c.model << " / " << c.parallel;
    } catch (const InputError& e) {
      const std::string msg = e.what();
      EXPECT_NE(msg.find(path), std::string::npos) << msg;
      EXPECT_NE(msg.find(c.expect), std::string::npos) << msg;
    }
  }
  // Whole scenarios: grad_reduce_in_fp32 sets Megatron's gradient buffer, not DeepSpeed's;
  // Megatron-Core features under the 2021 runtime (recompute_modules beyond core_attn, what the
  // 2021 selective recomputation is).
  const std::pair<std::string, std::string> whole[] = {
      {"runtime: megatron-core\nmodel: {" + base + "}\nparallel: {micro_batch_size: 1, "
       "global_batch_size: 8, precision: bf16, grad_reduce_in_fp32: false}\ndeepspeed: "
       "{zero_optimization: {stage: 2}}\n",
       "parallel.grad_reduce_in_fp32 (false) sets Megatron's gradient buffer"},
      {"model: {" + base + ", swiglu: true}\nparallel: {micro_batch_size: 1, "
       "global_batch_size: 8}\n",
       "model.swiglu (true) needs `runtime: megatron-core`"},
      {"model: {" + base + "}\nparallel: {micro_batch_size: 1, global_batch_size: 8, "
       "recompute_granularity: selective, recompute_modules: [core_attn, layernorm]}\n",
       "parallel.recompute_modules (layernorm / moe_act / mlp / moe / mla_up_proj / shared_experts) needs `runtime: megatron-core`"},
      {"model: {" + base + "}\nparallel: {tensor_model_parallel_size: 2, sequence_parallel: "
       "true, tp_comm_overlap: true, micro_batch_size: 1, global_batch_size: 8}\n",
       "parallel.tp_comm_overlap (true) needs `runtime: megatron-core`"}};
  for (const auto& [yaml, expect] : whole) {
    const std::string path =
        dir.write("s.yaml", yaml + "cluster: {system: dgx-h100, nodes: 1}\n");
    try {
      load_scenario(path);
      ADD_FAILURE() << "accepted: " << yaml;
    } catch (const InputError& e) {
      const std::string msg = e.what();
      EXPECT_NE(msg.find(path), std::string::npos) << msg;
      EXPECT_NE(msg.find(expect), std::string::npos) << msg;
    }
  }
}

// GPT-OSS's gated MLP (model.quick_geglu with activation_func_clamp_value and
// glu_linear_offset): each key's misuse names the file, the field and the value; a valid one
// has SwiGLU's shapes (fc1 2 x ffn, fc2 ffn: 3 h ffn weights per layer's MLP).
TEST(ModernModels, GptOssGluKeysAndTheirBadInputs) {
  ScratchDir dir("modern_glu");
  const std::string base = "hidden_size: 1024, num_attention_heads: 16, seq_length: 1024, "
                           "padded_vocab_size: 1024, num_layers: 4, ffn_hidden_size: 2048, "
                           "add_bias_linear: false";
  const std::string par = "\nparallel: {micro_batch_size: 1, global_batch_size: 8}\n"
                          "cluster: {system: dgx-h100, nodes: 1}\n";
  const std::pair<std::string, std::string> bad[] = {
      {"runtime: megatron-core\nmodel: {" + base + ", swiglu: true, quick_geglu: true}",
       "model.quick_geglu (true) with model.swiglu (true)"},
      {"runtime: megatron-core\nmodel: {" + base + ", activation_func_clamp_value: 7}",
       "field 'model.activation_func_clamp_value' = 7: the clamp applies to quick_geglu"},
      {"runtime: megatron-core\nmodel: {" + base + ", swiglu: true, activation_func_clamp_value: 7}",
       "field 'model.activation_func_clamp_value' = 7"},
      {"runtime: megatron-core\nmodel: {" + base + ", glu_linear_offset: 1.5}",
       "field 'model.glu_linear_offset' = 1.5: the offset applies to a gated MLP only"},
      {"runtime: megatron-core\nmodel: {" + base +
           ", quick_geglu: true, activation_func_clamp_value: -1}",
       "model.activation_func_clamp_value"},
      {"runtime: megatron-core\nmodel: {" + base + ", quick_geglu: maybe}", "model.quick_geglu"},
      {"model: {" + base + ", quick_geglu: true}", "model.quick_geglu (true) needs `runtime: megatron-core`"}};
  for (const auto& [yaml, expect] : bad) {
    const std::string path = dir.write("s.yaml", yaml + par);
    try {
      load_scenario(path);
      ADD_FAILURE() << "accepted: " << yaml;
    } catch (const InputError& e) {
      const std::string msg = e.what();
      EXPECT_NE(msg.find(path), std::string::npos) << msg;
      EXPECT_NE(msg.find(expect), std::string::npos) << msg;
    }
  }
  const Scenario s = load_scenario(dir.write(
      "ok.yaml", "runtime: megatron-core\nmodel: {" + base +
                     ", quick_geglu: true, activation_func_clamp_value: 7, glu_linear_offset: 1}" + par));
  EXPECT_TRUE(s.model.gated_linear_unit());
  EXPECT_DOUBLE_EQ(s.model.activation_func_clamp_value, 7.0);
  EXPECT_DOUBLE_EQ(s.model.glu_linear_offset, 1.0);
  // The same model with swiglu: equal parameter counts (the gated shapes); against GeLU's,
  // by hand 4 layers x (3 - 2) x 1024 x 2048 more MLP weights (no biases).
  const Scenario sw = load_scenario(dir.write(
      "sw.yaml", "runtime: megatron-core\nmodel: {" + base + ", swiglu: true}" + par));
  const Scenario plain = load_scenario(dir.write(
      "plain.yaml", "runtime: megatron-core\nmodel: {" + base + "}" + par));
  EXPECT_EQ(total_params(s.model), total_params(sw.model));
  EXPECT_EQ(total_params(s.model) - total_params(plain.model), 4LL * 1024 * 2048);
}

TEST(ModernModels, HuggingFaceConfigImportFillsTheModelSection) {
  ScratchDir dir("hf");
  const std::string cfg = test_support::source_path("scenarios/h100/hf/llama3-8b.config.json");
  const std::string path = dir.write("s.yaml", test_support::hf_scenario_yaml(cfg, 8192));
  const Scenario sc = load_scenario(path);
  EXPECT_EQ(total_params(sc.model), 8030261248LL);  // the same shape as written by hand
  EXPECT_EQ(sc.model.num_query_groups, 8);
  EXPECT_TRUE(sc.model.swiglu);
  EXPECT_EQ(sc.model.attention_backend, AttentionBackend::Flash);
  // A key written in the scenario wins over the imported one.
  EXPECT_EQ(load_scenario(path, {{"model.num_layers", "16"}}).model.num_layers, 16);
  // Fields trainsim cannot express are errors naming the file, field and value.
  const std::string bad = dir.write(
      "bad.json", "{\"architectures\": [\"Glm4MoeForCausalLM\"], \"num_hidden_layers\": 4}");
  try {
    import_hf_config(bad);
    ADD_FAILURE() << "GLM-4.5 accepted";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find(bad + ": field 'architectures' = [\"Glm4MoeForCausalLM\"]"),
              std::string::npos) << e.what();
  }
  const std::string mla = dir.write(
      "mla.json", "{\"architectures\": [\"LlamaForCausalLM\"], \"q_lora_rank\": 1536}");
  EXPECT_THROW(import_hf_config(mla), InputError);
}

// GPT-OSS-120B's published config.json (scenarios/h100/hf/): its experts' clamped quick-GELU
// GLU comes in as Megatron-Bridge's GPT-OSS bridge sets it (quick_geglu, clamp = the config's
// swiglu_limit 7.0, linear offset 1.0), so the import is the model of the shipped H100 row:
// the same parameters and the same model FLOPs. A swiglu_limit that is not a positive number
// names the file, field and value.
TEST(ModernModels, HuggingFaceGptOssImportsTheClampedQuickGeglu) {
  ScratchDir dir("hf_gpt_oss");
  const std::string cfg = test_support::source_path("scenarios/h100/hf/gpt-oss-120b.config.json");
  const Scenario sc = load_scenario(dir.write("s.yaml", test_support::hf_scenario_yaml(cfg, 4096)));
  EXPECT_TRUE(sc.model.quick_geglu);
  EXPECT_FALSE(sc.model.swiglu);
  EXPECT_DOUBLE_EQ(sc.model.activation_func_clamp_value, 7.0);
  EXPECT_DOUBLE_EQ(sc.model.glu_linear_offset, 1.0);
  const Scenario row = load_scenario(
      test_support::source_path("scenarios/h100/gpt-oss-120b_bf16_tp1_pp4_ep8_dp16_r25.11.yaml"));
  EXPECT_EQ(total_params(sc.model), total_params(row.model));
  std::ifstream in(cfg);
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  text.replace(text.find("\"swiglu_limit\": 7.0"), 19, "\"swiglu_limit\": -1");
  const std::string limit = dir.write("limit.json", text);
  try {
    import_hf_config(limit);
    ADD_FAILURE() << "swiglu_limit -1 accepted";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find(limit + ": field 'swiglu_limit' = -1"),
              std::string::npos) << e.what();
  }
}

// Mistral 7B v0.1 (its config.json: 32 layers, hidden 4096, 32 heads, 8 KV heads, SwiGLU
// 14336, vocabulary 32000, untied, sliding window 4096 on every layer): 7,241,732,096
// parameters, the count Hugging Face reports for the checkpoint.
TEST(ModernModels, HuggingFaceMistralImportsItsSlidingWindowOnEveryLayer) {
  ScratchDir dir("hf_mistral");
  const std::string path = test_support::write_hf_scenario(
      dir,
      "{\"architectures\": [\"MistralForCausalLM\"], \"num_hidden_layers\": 32, "
      "\"hidden_size\": 4096, \"num_attention_heads\": 32, \"num_key_value_heads\": 8, "
      "\"intermediate_size\": 14336, \"hidden_act\": \"silu\", \"rms_norm_eps\": 1e-05, "
      "\"rope_theta\": 10000.0, \"sliding_window\": 4096, \"tie_word_embeddings\": false, "
      "\"vocab_size\": 32000}",
      8192);
  const Scenario sc = load_scenario(path);
  EXPECT_EQ(total_params(sc.model), 7241732096LL);
  EXPECT_EQ(sc.model.window_size, 4096);
  EXPECT_EQ(sc.model.window_attn_skip_freq, 0);  // every layer windowed
  EXPECT_FALSE(sc.model.is_moe());
}

// Qwen2.5-7B (its config.json: 28 layers, hidden 3584, 28 heads, 4 KV heads of 128, SwiGLU
// 18944, vocabulary 152064, untied; q, k, v with biases, the output projection without):
// 7,615,616,512 parameters, the count Hugging Face reports for the checkpoint. Megatron
// --add-qkv-bias: the QKV bias alone.
TEST(ModernModels, HuggingFaceQwen2ImportsItsQkvBias) {
  ScratchDir dir("hf_qwen2");
  const std::string path = test_support::write_hf_scenario(
      dir,
      "{\"architectures\": [\"Qwen2ForCausalLM\"], \"num_hidden_layers\": 28, "
      "\"hidden_size\": 3584, \"num_attention_heads\": 28, \"num_key_value_heads\": 4, "
      "\"intermediate_size\": 18944, \"hidden_act\": \"silu\", \"rms_norm_eps\": 1e-06, "
      "\"rope_theta\": 1000000.0, \"sliding_window\": 131072, \"use_sliding_window\": false, "
      "\"tie_word_embeddings\": false, \"vocab_size\": 152064}",
      4096);
  const Scenario sc = load_scenario(path);
  EXPECT_TRUE(sc.model.add_qkv_bias);
  EXPECT_FALSE(sc.model.add_bias_linear);
  EXPECT_EQ(sc.model.window_size, 0);
  EXPECT_EQ(total_params(sc.model), 7615616512LL);
  // Per layer the bias is (28 + 2 x 4) x 128 = 4,608 of 233,057,792; TP 4 splits it.
  Scenario no_bias = sc;
  no_bias.model.add_qkv_bias = false;
  EXPECT_EQ(layer_params_per_rank(sc.model, 4) - layer_params_per_rank(no_bias.model, 4), 4608 / 4);
  // A Megatron-Core argument: the 2021 runtime refuses it.
  EXPECT_THROW(load_scenario(path, {{"runtime", "megatron-2021"}}), InputError);
}

// Qwen3-8B (its config.json: 36 layers, hidden 4096, 32 heads and 8 KV heads of 128, SwiGLU
// 12288, vocabulary 151936, untied; q_norm and k_norm of 128 per head): 8,190,735,360
// parameters, the 8.19 B Hugging Face reports. --qk-layernorm adds a norm of each head's query
// and key between the QKV split and RoPE.
TEST(ModernModels, HuggingFaceQwen3ImportsItsPerHeadQkNorms) {
  ScratchDir dir("hf_qwen3");
  const std::string path = test_support::write_hf_scenario(
      dir,
      "{\"architectures\": [\"Qwen3ForCausalLM\"], \"num_hidden_layers\": 36, "
      "\"hidden_size\": 4096, \"num_attention_heads\": 32, \"num_key_value_heads\": 8, "
      "\"head_dim\": 128, \"intermediate_size\": 12288, \"hidden_act\": \"silu\", "
      "\"rms_norm_eps\": 1e-06, \"rope_theta\": 1000000, \"tie_word_embeddings\": false, "
      "\"attention_bias\": false, \"vocab_size\": 151936}",
      4096);
  const Scenario sc = load_scenario(path);
  EXPECT_TRUE(sc.model.qk_layernorm);
  EXPECT_EQ(total_params(sc.model), 8190735360LL);
  Scenario plain = sc;
  plain.model.qk_layernorm = false;
  EXPECT_EQ(total_params(sc.model) - total_params(plain.model), 36 * 2 * 128);
  // Kernels: one norm pass over the query's 32 heads and one over the key's 8, per token, both
  // ways; no new GEMM, so the model FLOPs are the same.
  const ScheduleGraph g = folded_graph(sc);
  std::map<std::string, double> bytes;
  for (const OpDesc& o : g.ops())
    for (const KernelWork& k : op_kernels(o)) bytes[k.name] = k.bytes;
  const double T = 4096, e = 2, rstd = 4;
  EXPECT_DOUBLE_EQ(bytes["q_layernorm_fwd"], T * 32 * (2 * 128 * e + rstd));
  EXPECT_DOUBLE_EQ(bytes["k_layernorm_fwd"], T * 8 * (2 * 128 * e + rstd));
  EXPECT_DOUBLE_EQ(bytes["q_layernorm_bwd"], T * 32 * (3 * 128 * e + rstd));
  EXPECT_EQ(bytes.count("q_layernorm_fwd"), 1u);
  EXPECT_DOUBLE_EQ(model_flops_per_iteration(sc), model_flops_per_iteration(plain));
  // Activations: the norms' inputs (q and k before them) and one statistic per head and token.
  EXPECT_EQ(layer_activation_bytes(sc).attn - layer_activation_bytes(plain).attn,
            std::int64_t(e * T * (32 + 8) * 128 + rstd * T * (32 + 8)));
  // A Megatron-Core argument: the 2021 runtime refuses it.
  EXPECT_THROW(load_scenario(path, {{"runtime", "megatron-2021"}}), InputError);
}

}  // namespace
}  // namespace trainsim
