// Multi-head latent attention (Megatron-Core MLASelfAttention, DeepSeek-V2/V3) against hand
// calculations: DeepSeek-V3's published 671 B parameters (37 B activated), Megatron-Core's MLA
// model FLOPs written out from training.py's terms, the kernels' GEMM shapes and the fused
// attention's FLOPs with its two head dimensions, the tensor-parallel collectives on the
// latents, the context-parallel exchange, the activations kept, and the bad inputs of the new
// keys (each error names the file, the field and the value).
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <string>
#include <tuple>
#include <vector>

#include "models/perf/flops.h"
#include "models/builder/graph_builder.h"
#include "models/hardware/hardware.h"
#include "models/input/hf_config.h"
#include "models/memory/memory_model.h"
#include "models/input/scenario.h"
#include "tests/support/deepseek_scenario.h"
#include "tests/support/paths.h"
#include "tests/support/scenario_yaml.h"

namespace trainsim {
namespace {

using test_support::ScratchDir;

const std::string& kDeepSeekV3 = test_support::kDeepSeekV3Model;

// A small MLA model for the graph tests (DeepSeek-V2-Lite's attention: no q_lora).
const char* kSmallMla =
    "num_layers: 4, hidden_size: 2048, num_attention_heads: 16, multi_latent_attention: true, "
    "kv_lora_rank: 512, qk_head_dim: 128, qk_pos_emb_head_dim: 64, v_head_dim: 128, "
    "qk_layernorm: true, ffn_hidden_size: 8192, swiglu: true, normalization: RMSNorm, "
    "position_embedding_type: rope, add_bias_linear: false, hidden_dropout: 0.0, "
    "attention_dropout: 0.0, attention_backend: flash, seq_length: 4096, "
    "padded_vocab_size: 32768";

// TP 2 with sequence parallelism, EP 4, on one node.
const char* kTp2SpEp4 =
    "tensor_model_parallel_size: 2, sequence_parallel: true, expert_model_parallel_size: 4, "
    "expert_tensor_parallel_size: 1, micro_batch_size: 1, global_batch_size: 8";

Scenario core(const std::string& model, const std::string& parallel, std::int64_t nodes = 1) {
  return parse_scenario(test_support::core_scenario_yaml(model, parallel, nodes), "mla.yaml");
}

ScheduleGraph folded_graph(const Scenario& sc) {
  BuildOptions opt;
  opt.fold = true;
  return build_schedule_graph(validated(sc), find_system(sc.cluster.system), opt);
}

/// Each kernel name of the graph's compute ops with its work (the first op that has it).
std::map<std::string, KernelWork> kernels_of(const ScheduleGraph& g) {
  std::map<std::string, KernelWork> out;
  for (const OpDesc& o : g.ops())
    for (const KernelWork& k : op_kernels(o)) out.emplace(k.name, k);
  return out;
}

TEST(Mla, DeepSeekV3Has671BillionParametersAnd37BillionActivated) {
  const Scenario sc = core(kDeepSeekV3, "micro_batch_size: 1, global_batch_size: 8");
  // Attention: q_down 7168 x 1536, q norm 1536, q_up 1536 x 128 x 192, kv_down 7168 x 576,
  // kv norm 512, kv_up 512 x 128 x 256, projection 128 x 128 x 7168.
  const std::int64_t attn = 7168LL * 1536 + 1536 + 1536LL * 128 * 192 + 7168LL * 576 + 512 +
                            512LL * 128 * 256 + 128LL * 128 * 7168;
  EXPECT_EQ(attn, 187107328LL);
  const std::int64_t norms = 2 * 7168, expert = 3LL * 7168 * 2048;
  const std::int64_t dense = attn + norms + 3LL * 7168 * 18432;
  const std::int64_t moe = attn + norms + 7168LL * 256 + 256 * expert + expert;
  const std::int64_t embed = 2LL * 129280 * 7168 + 7168;
  EXPECT_EQ(total_params(sc.model), 3 * dense + 58 * moe + embed);
  EXPECT_NEAR(double(total_params(sc.model)) / 1e9, 671.0, 0.05);  // DeepSeek-V3: 671 B
  const std::int64_t active = 3 * dense + 58 * (moe - 248 * expert) + embed;
  EXPECT_NEAR(double(active) / 1e9, 37.5, 0.1);  // "37B activated for each token"
  // The attention's submodules, as ZeRO-3 and FSDP fetch them, sum to the dense layer.
  std::int64_t sum = 0;
  for (const LayerSubmodule& s : layer_submodules_per_rank(sc.model, 1))
    for (std::int64_t p : s.params) sum += p;
  EXPECT_EQ(sum, dense);
  // TP 2 splits the up projections and the projection; the down projections and the latent
  // norms are duplicated on both ranks.
  const std::int64_t attn_tp2 = 7168LL * 1536 + 1536 + 1536LL * 64 * 192 + 7168LL * 576 + 512 +
                                512LL * 64 * 256 + 64LL * 128 * 7168;
  EXPECT_EQ(layer_params_per_rank(sc.model, 2),
            attn_tp2 + norms + 3LL * 7168 * 18432 / 2);
}

TEST(Mla, ModelFlopsFollowMegatronCoresMlaTerms) {
  const Scenario sc = core(kDeepSeekV3, "micro_batch_size: 1, global_batch_size: 8");
  // training.py num_floating_point_operations, MLA branch, multiply-adds per token and layer:
  const double h = 7168, s = 4096, a = 128;
  const double q = 1536 * (h + a * 192 + 1);
  const double kv = 512 * (h + a * 256 + 1) + h * 64;
  const double o = a * 128 * h;
  const double core_attn = (a * 192 / 2 + a * 128 / 2) * s;
  const double attn = q + kv + o + core_attn;
  const double dense_mlp = 3 * h * 18432, moe_mlp = 3 * h * (8 * 2048 + 2048);
  const double per_token = 6 * (3 * (attn + dense_mlp) + 58 * (attn + moe_mlp) + h * 129280);
  EXPECT_DOUBLE_EQ(model_flops_per_iteration(sc), per_token * 8 * 4096);
}

TEST(Mla, KernelsHaveTheLatentShapesAndAttentionItsTwoHeadDimensions) {
  const Scenario sc = core(kDeepSeekV3, kTp2SpEp4);
  const auto k = kernels_of(folded_graph(sc));
  const double T = 4096, Tsp = T / 2, h = 7168, a = 64;  // heads on this TP rank
  auto shape = [&](const char* name) {
    const KernelWork& w = k.at(name);
    return std::make_tuple(w.m, w.n, w.k);
  };
  // Duplicated down projections on the rank's own rows; the up projections on every row.
  EXPECT_EQ(shape("q_down_gemm"), std::make_tuple(Tsp, 1536.0, h));
  EXPECT_EQ(shape("kv_down_gemm"), std::make_tuple(Tsp, 576.0, h));
  EXPECT_EQ(shape("q_up_gemm"), std::make_tuple(T, a * 192, 1536.0));
  EXPECT_EQ(shape("kv_up_gemm"), std::make_tuple(T, a * 256, 512.0));
  EXPECT_EQ(shape("proj_gemm"), std::make_tuple(T, h, a * 128));
  EXPECT_EQ(shape("q_down_wgrad"), std::make_tuple(h, 1536.0, Tsp));
  EXPECT_EQ(shape("kv_up_dgrad"), std::make_tuple(T, 512.0, a * 256));
  // The latent norms run on the local rows: read and write 1536 (512) columns, fp32 rstd.
  EXPECT_DOUBLE_EQ(k.at("q_latent_norm_fwd").bytes, Tsp * (2 * 1536 * 2 + 4));
  EXPECT_DOUBLE_EQ(k.at("kv_latent_norm_fwd").bytes, Tsp * (2 * 512 * 2 + 4));
  // Fused attention: Q K^T over 192 and P V over 128 per head, causal (s^2 / 2 keys).
  const double fwd = 2 * a * (192 + 128) * T * T / 2;
  EXPECT_DOUBLE_EQ(k.at("flash_attn_fwd").flops, fwd);
  EXPECT_DOUBLE_EQ(k.at("flash_attn_bwd").flops, 2.5 * fwd);
  EXPECT_DOUBLE_EQ(k.at("flash_attn_fwd").head_dim, 192);
  // q, k of 192 and v, o of 128 per head, and the fp32 log-sum-exp.
  EXPECT_DOUBLE_EQ(k.at("flash_attn_fwd").bytes, T * a * (2 * 192 + 2 * 128) * 2 + a * T * 4);
  EXPECT_EQ(k.count("qkv_gemm"), 0u);
}

TEST(Mla, WithoutQLoraOneColumnParallelQueryProjectionReadsTheHiddenState) {
  const Scenario sc = core(kSmallMla, "tensor_model_parallel_size: 2, micro_batch_size: 1, "
                                      "global_batch_size: 8");
  const auto k = kernels_of(folded_graph(sc));
  EXPECT_EQ(k.count("q_down_gemm"), 0u);
  EXPECT_EQ(k.count("q_latent_norm_fwd"), 0u);
  EXPECT_EQ(k.count("down_proj_grad_add"), 0u);
  const KernelWork& q = k.at("q_up_gemm");
  EXPECT_EQ(std::make_tuple(q.m, q.n, q.k), std::make_tuple(4096.0, 8.0 * 192, 2048.0));
  // Megatron's q term without q_lora_rank: h a (dn + dr).
  const double h = 2048, s = 4096, a = 16;
  const double attn = h * a * 192 + 512 * (h + a * 256 + 1) + h * 64 + a * 128 * h +
                      (a * 192 + a * 128) * s / 2;
  const double per_token = 6 * (4 * (attn + 3 * h * 8192) + h * 32768);
  EXPECT_DOUBLE_EQ(model_flops_per_iteration(sc), per_token * 8 * 4096);
}

/// The tensor-parallel collectives of rank 0's layer-0 attention block, microbatch 0, in
/// order: (kind, bytes) per phase.
std::map<Phase, std::vector<std::pair<OpKind, std::int64_t>>> attn_collectives(
    const ScheduleGraph& g) {
  std::map<Phase, std::vector<std::pair<OpKind, std::int64_t>>> out;
  for (const Task& t : g.tasks()) {
    const OpDesc& o = g.ops()[t.op];
    if (t.rank == 0 && t.layer == 0 && t.microbatch == 0 && t.part == Part::Attn &&
        o.group == GroupKind::Tensor)
      out[t.phase].emplace_back(o.kind, o.bytes);
  }
  return out;
}

TEST(Mla, SequenceParallelGathersTheLatentsNotTheHiddenState) {
  const Scenario sc = core(kDeepSeekV3, kTp2SpEp4);
  const auto c = attn_collectives(folded_graph(sc));
  const std::int64_t T = 4096, e = 2, h = 7168;
  using K = OpKind;
  // Forward: the q and kv latents and the RoPE key gathered for the up projections; the
  // projection's output reduce-scattered.
  EXPECT_EQ(c.at(Phase::Forward),
            (std::vector<std::pair<OpKind, std::int64_t>>{{K::AllGather, T * 1536 * e},
                                                          {K::AllGather, T * 512 * e},
                                                          {K::AllGather, T * 64 * e},
                                                          {K::ReduceScatter, T * h * e}}));
  // Backward: the projection's output gradient gathered, the latents re-gathered for the
  // up projections' weight gradients; then their input gradients reduce-scattered to the
  // rows the duplicated down projections hold, and the RoPE key's.
  EXPECT_EQ(c.at(Phase::Backward),
            (std::vector<std::pair<OpKind, std::int64_t>>{{K::AllGather, T * h * e},
                                                          {K::AllGather, T * 1536 * e},
                                                          {K::AllGather, T * 512 * e},
                                                          {K::ReduceScatter, T * 1536 * e},
                                                          {K::ReduceScatter, T * 512 * e},
                                                          {K::ReduceScatter, T * 64 * e}}));
}

TEST(Mla, WithoutSequenceParallelismTheLatentGradientsAreAllReduced) {
  const Scenario sc = core(kSmallMla, "tensor_model_parallel_size: 2, micro_batch_size: 1, "
                                      "global_batch_size: 8");
  const auto c = attn_collectives(folded_graph(sc));
  const std::int64_t T = 4096, e = 2, h = 2048;
  using K = OpKind;
  EXPECT_EQ(c.at(Phase::Forward),
            (std::vector<std::pair<OpKind, std::int64_t>>{{K::AllReduce, T * h * e}}));
  // Without q_lora_rank the query projection reads the hidden state: its input gradient is
  // T h; the kv latent's T 512.
  EXPECT_EQ(c.at(Phase::Backward),
            (std::vector<std::pair<OpKind, std::int64_t>>{{K::AllReduce, T * h * e},
                                                          {K::AllReduce, T * 512 * e}}));
}

TEST(Mla, ContextParallelExchangesEachHeadsKeyAndValue) {
  const Scenario sc = core(kSmallMla, "tensor_model_parallel_size: 2, context_parallel_size: 2, "
                                      "micro_batch_size: 1, global_batch_size: 8");
  const ScheduleGraph g = folded_graph(sc);
  const OpDesc* fwd = nullptr;
  for (const OpDesc& o : g.ops())
    if (o.kind == OpKind::AllGather && o.group == GroupKind::Context) fwd = &o;
  ASSERT_NE(fwd, nullptr);
  // Per CP rank: s / cp = 2048 tokens x 8 heads on this TP rank x (192 key + 128 value) x 2.
  EXPECT_EQ(fwd->bytes, 2 * 2048LL * 8 * (192 + 128) * 2);
}

TEST(Mla, ActivationsTermByTerm) {
  const Scenario sc = core(kDeepSeekV3, kTp2SpEp4);
  const std::int64_t T = 4096, Tsp = 2048, h = 7168, a = 64, e = 2;
  const std::int64_t expected =
      e * Tsp * h + 4 * Tsp                   // input norm input and rstd
      + e * Tsp * h                           // the down projections' input
      + e * Tsp * (1536 + 512 + 64)           // the latents (norm inputs) and the RoPE key
      + e * Tsp * (1536 + 512) + 4 * Tsp * 2  // the latent norms' outputs and rstd
      + e * T * a * (192 + 192 + 128)         // q, k, v
      + e * T * a * 128 + 4 * a * T;          // the attention output and its log-sum-exp
  EXPECT_EQ(layer_activation_bytes(sc, false).attn, expected);
}

TEST(Mla, RecomputeUpProjTradesQkvForARerunBeforeTheAttentionBackward) {
  const std::string par = "tensor_model_parallel_size: 2, sequence_parallel: true, "
                          "expert_model_parallel_size: 4, expert_tensor_parallel_size: 1, "
                          "micro_batch_size: 1, global_batch_size: 8, "
                          "recompute_granularity: selective, recompute_modules: ";
  const Scenario keep = core(kDeepSeekV3, par + "[core_attn]");
  const Scenario rerun = core(kDeepSeekV3, par + "[mla_up_proj]");
  const std::int64_t T = 4096, Tsp = 2048, a = 64, e = 2;
  // Not kept: q, k, v, the up projections' inputs (the latent norms' outputs) and their
  // statistics; kept in their place: the checkpoint's gathered RoPE key.
  EXPECT_EQ(layer_activation_bytes(keep, false).attn - layer_activation_bytes(rerun, false).attn,
            e * T * a * (192 + 192 + 128) + e * Tsp * (1536 + 512) + 4 * Tsp * 2 - e * T * 64);
  // The backward re-runs the up projections and RoPE before the attention backward.
  const ScheduleGraph g = folded_graph(rerun);
  std::vector<std::string> names;
  for (const OpDesc& o : g.ops())
    if (o.kind == OpKind::AttnBwd)
      for (const KernelWork& k : op_kernels(o)) names.push_back(k.name);
  auto at = [&](const std::string& n) {
    return std::find(names.begin(), names.end(), n) - names.begin();
  };
  ASSERT_LT(at("q_up_gemm_recompute"), std::ptrdiff_t(names.size()));
  EXPECT_LT(at("proj_wgrad"), at("q_up_gemm_recompute"));
  EXPECT_LT(at("kv_up_gemm_recompute"), at("flash_attn_bwd"));
  EXPECT_LT(at("mla_rope_kv_recompute"), at("flash_attn_bwd"));
  // ... after gathering the latents and the RoPE key again: backward gathers T h (the output
  // gradient), then the forward's three, then the two latents for the weight gradients.
  const auto c = attn_collectives(g);
  std::vector<std::int64_t> gathers;
  for (const auto& [kind, bytes] : c.at(Phase::Backward))
    if (kind == OpKind::AllGather) gathers.push_back(bytes);
  EXPECT_EQ(gathers, (std::vector<std::int64_t>{T * 7168 * e, T * 1536 * e, T * 512 * e,
                                                T * 64 * e, T * 1536 * e, T * 512 * e}));
  // A model without latent attention refuses the module.
  EXPECT_THROW(core("num_layers: 2, hidden_size: 1024, num_attention_heads: 16, "
                    "seq_length: 1024, padded_vocab_size: 1024",
                    "micro_batch_size: 1, global_batch_size: 8, recompute_granularity: "
                    "selective, recompute_modules: [mla_up_proj]"),
               InputError);
}

/// The bytes of rank 0's tensor-parallel all-reduces after the backward (GradSync phase).
std::vector<std::int64_t> finalize_tp_allreduces(const Scenario& sc) {
  const ScheduleGraph g = folded_graph(sc);
  std::vector<std::int64_t> out;
  for (const Task& t : g.tasks()) {
    const OpDesc& o = g.ops()[t.op];
    if (t.rank == 0 && t.phase == Phase::GradSync && o.group == GroupKind::Tensor)
      out.push_back(o.bytes);
  }
  return out;
}

TEST(Mla, FinalizeAllReducesTheSequenceParallelReplicatedGradientsOverTp) {
  // A DeepSeek-V3 of 4 layers (1 dense) on one node, TP 2 with sequence parallelism: Megatron-
  // Core's finalize_model_grads sums over TP, in one flattened all-reduce of fp32 main_grad, the
  // gradients of every parameter replicated over TP that saw only the rank's rows: per layer
  // the input and pre-MLP norms, the duplicated down projections and the latent norms; per MoE
  // layer the router; the final norm. fp16 training: fp16 main_grad (Megatron applies fp32
  // gradient accumulation by default to bf16 only).
  std::string model = kDeepSeekV3;
  model.replace(model.find("num_layers: 61"), 14, "num_layers: 4");
  model.replace(model.find("'([0]*3+[1]*58)'"), 16, "'([0]*1+[1]*3)'");
  const Scenario sp = core(model, kTp2SpEp4);
  const std::int64_t h = 7168;
  const std::int64_t layer = 2 * h + h * 1536 + h * 576 + 1536 + 512;
  EXPECT_EQ(finalize_tp_allreduces(sp),
            (std::vector<std::int64_t>{(4 * layer + 3 * h * 256 + h) * 2}));
  // Without sequence parallelism every rank saw every row: nothing to reduce.
  std::string par = kTp2SpEp4;
  par.replace(par.find("sequence_parallel: true"), 23, "sequence_parallel: false");
  EXPECT_TRUE(finalize_tp_allreduces(core(model, par)).empty());
  // Standard attention's q/k norms (qk_layernorm) are reduced by name, with or without it.
  const Scenario qk = core(
      "num_layers: 4, hidden_size: 1024, num_attention_heads: 16, num_query_groups: 4, "
      "kv_channels: 64, qk_layernorm: true, normalization: RMSNorm, attention_backend: flash, "
      "seq_length: 1024, padded_vocab_size: 1024",
      "tensor_model_parallel_size: 2, micro_batch_size: 1, global_batch_size: 8");
  EXPECT_EQ(finalize_tp_allreduces(qk), (std::vector<std::int64_t>{4 * 2 * 64 * 2}));
}

TEST(Mla, SimulatesAndFitsWherePublishedRunsFit) {
  // A DeepSeek-V3 of 4 layers (1 dense) on one node: the whole pipeline builds and simulates.
  std::string model = kDeepSeekV3;
  model.replace(model.find("num_layers: 61"), 14, "num_layers: 4");
  model.replace(model.find("'([0]*3+[1]*58)'"), 16, "'([0]*1+[1]*3)'");
  const Scenario sc =
      core(model, "tensor_model_parallel_size: 2, sequence_parallel: true, "
                  "expert_model_parallel_size: 4, expert_tensor_parallel_size: 1, "
                  "pipeline_model_parallel_size: 2, "
                  "micro_batch_size: 1, global_batch_size: 8, precision: bf16, fp8: hybrid, "
                  "fp8_recipe: tensorwise, use_distributed_optimizer: true");
  const ScheduleGraph g = folded_graph(sc);
  EXPECT_GT(g.tasks().size(), 0u);
  const auto k = kernels_of(g);
  // Under FP8 every MLA linear layer casts its input; the up projections cast the local rows
  // and gather FP8.
  for (const char* cast : {"q_down_input_cast", "kv_down_input_cast", "q_up_input_cast",
                           "kv_up_input_cast", "proj_input_cast"})
    EXPECT_EQ(k.count(cast), 1u) << cast;
  EXPECT_DOUBLE_EQ(k.at("q_up_input_cast").bytes, 2048.0 * 1536 * (2 + 1));
}

TEST(Mla, GroupQueryAttentionFalseIsAcceptedBesideIt) {
  // Megatron asserts only that group_query_attention is not set with MLA.
  EXPECT_TRUE(core(std::string(kSmallMla) + ", group_query_attention: false",
                   "micro_batch_size: 1, global_batch_size: 8")
                  .model.multi_latent_attention);
  // mtp_num_layers 0 and the no-op values of arguments trainsim does not model (the fused down
  // projection, the shared expert's overlap) are accepted and change nothing.
  const Scenario plain = core(kSmallMla, "micro_batch_size: 1, global_batch_size: 8");
  const Scenario noop = core(std::string(kSmallMla) + ", mtp_num_layers: 0, "
                             "mla_down_proj_fusion: false, moe_shared_expert_overlap: false",
                             "micro_batch_size: 1, global_batch_size: 8");
  EXPECT_EQ(total_params(noop.model), total_params(plain.model));
  EXPECT_DOUBLE_EQ(model_flops_per_iteration(noop), model_flops_per_iteration(plain));
}

TEST(Mla, BadInputsNameFileFieldAndValue) {
  ScratchDir dir("mla");
  const std::string mla = "hidden_size: 1024, num_attention_heads: 16, seq_length: 1024, "
                          "padded_vocab_size: 1024, num_layers: 2, multi_latent_attention: true, "
                          "kv_lora_rank: 256, attention_backend: flash";
  const std::string std_attn = "hidden_size: 1024, num_attention_heads: 16, seq_length: 1024, "
                               "padded_vocab_size: 1024, num_layers: 2, attention_backend: flash";
  const std::string par = "micro_batch_size: 1, global_batch_size: 32";
  test_support::expect_each_refused(dir, {
      {"megatron-core", std_attn + ", q_lora_rank: 512", par,
       "field 'model.q_lora_rank' = '512': is set, but model.multi_latent_attention is not"},
      {"megatron-core", std_attn + ", v_head_dim: 64", par,
       "field 'model.v_head_dim' = '64': is set, but model.multi_latent_attention is not"},
      {"megatron-core", mla + ", kv_channels: 64", par,
       "field 'model.kv_channels' = '64': is not read with model.multi_latent_attention"},
      {"megatron-core", mla + ", num_query_groups: 4", par,
       "field 'model.num_query_groups' = '4': with model.multi_latent_attention"},
      {"megatron-core", mla + ", group_query_attention: true", par,
       "field 'model.group_query_attention' = 'true': with model.multi_latent_attention"},
      {"megatron-core",
       "hidden_size: 1024, num_attention_heads: 16, seq_length: 1024, padded_vocab_size: 1024, "
       "num_layers: 2, multi_latent_attention: true, kv_lora_rank: 0, attention_backend: flash",
       par, "field 'model.kv_lora_rank' = '0'"},
      {"megatron-core", mla + ", qk_head_dim: -1", par, "field 'model.qk_head_dim' = '-1'"},
      {"megatron-core",
       "hidden_size: 1024, num_attention_heads: 16, seq_length: 1024, padded_vocab_size: 1024, "
       "num_layers: 2, multi_latent_attention: true",
       par, "model.multi_latent_attention needs model.attention_backend flash or fused"},
      {"megatron-core", mla,
       "tensor_model_parallel_size: 2, sequence_parallel: true, tp_comm_overlap: true, " + par,
       "parallel.tp_comm_overlap with model.multi_latent_attention is not modelled"},
      {"megatron-2021", mla, par, "model.multi_latent_attention (true) needs `runtime: megatron-core`"},
      {"megatron-core", mla + ", mtp_num_layers: -1", par, "field 'model.mtp_num_layers' = '-1'"},
      {"megatron-core", mla + ", mla_down_proj_fusion: true", par,
       "field 'model.mla_down_proj_fusion' = 'true': the fused q/kv down projection"},
      {"megatron-core", std_attn + ", moe_shared_expert_overlap: true", par,
       "model.moe_shared_expert_overlap (true) with model.moe_shared_expert_intermediate_size "
       "(0)"},
      {"megatron-core", mla, "tensor_model_parallel_size: 32, " + par,
       "model.num_attention_heads (16) is not divisible by"}});
}

// DeepSeek-V3's config.json, the fields trainsim reads (num_nextn_predict_layers 0: the model
// without its multi-token-prediction module, as Megatron-Bridge's "w/o MTP" rows run it).
std::string deepseek_v3_config(int nextn) {
  return "{\"architectures\": [\"DeepseekV3ForCausalLM\"], \"num_hidden_layers\": 61, "
         "\"hidden_size\": 7168, \"num_attention_heads\": 128, \"num_key_value_heads\": 128, "
         "\"q_lora_rank\": 1536, \"kv_lora_rank\": 512, \"qk_nope_head_dim\": 128, "
         "\"qk_rope_head_dim\": 64, \"v_head_dim\": 128, \"intermediate_size\": 18432, "
         "\"moe_intermediate_size\": 2048, \"n_routed_experts\": 256, \"n_shared_experts\": 1, "
         "\"num_experts_per_tok\": 8, \"first_k_dense_replace\": 3, \"n_group\": 8, "
         "\"topk_group\": 4, \"hidden_act\": \"silu\", \"rms_norm_eps\": 1e-06, "
         "\"rope_theta\": 10000, \"attention_bias\": false, \"tie_word_embeddings\": false, "
         "\"num_nextn_predict_layers\": " + std::to_string(nextn) + ", \"vocab_size\": 129280}";
}

TEST(Mla, HuggingFaceDeepSeekV3ImportsTheSameModelAsWrittenByHand) {
  ScratchDir dir("hf_dsv3");
  const Scenario sc =
      load_scenario(test_support::write_hf_scenario(dir, deepseek_v3_config(0), 4096));
  const Scenario by_hand = core(kDeepSeekV3, "micro_batch_size: 1, global_batch_size: 8");
  EXPECT_EQ(total_params(sc.model), total_params(by_hand.model));
  EXPECT_TRUE(sc.model.multi_latent_attention);
  EXPECT_TRUE(sc.model.qk_layernorm);
  EXPECT_EQ(sc.model.moe_shared_expert_intermediate_size, 2048);
  EXPECT_FALSE(sc.model.moe_layer(2));
  EXPECT_TRUE(sc.model.moe_layer(3));
  EXPECT_DOUBLE_EQ(model_flops_per_iteration(sc), model_flops_per_iteration(by_hand));
  // Its multi-token-prediction module is imported as Megatron-Bridge's DeepSeek-V3 bridge
  // maps it (num_nextn_predict_layers -> mtp_num_layers): one more layer of the hand count in
  // test_mtp_deepep.cpp, 11,610,067,968 parameters (embedding and output head shared).
  const Scenario with_mtp =
      load_scenario(test_support::write_hf_scenario(dir, deepseek_v3_config(1), 4096));
  EXPECT_EQ(with_mtp.model.mtp_num_layers, 1);
  EXPECT_EQ(total_params(with_mtp.model) - total_params(sc.model), 11610067968LL);
}

// DeepSeek-V2-Lite (its config.json: 27 layers, hidden 2048, 16 heads, no q_lora, kv_lora 512,
// dense ffn 10944 on the first layer, 64 routed experts of 1408 (top 6) and 2 shared, vocab
// 102400, untied): 15.7 B parameters as published.
TEST(Mla, HuggingFaceDeepSeekV2LiteHas15_7BillionParameters) {
  ScratchDir dir("hf_dsv2");
  const Scenario sc = load_scenario(test_support::write_hf_scenario(
      dir,
      "{\"architectures\": [\"DeepseekV2ForCausalLM\"], \"num_hidden_layers\": 27, "
      "\"hidden_size\": 2048, \"num_attention_heads\": 16, \"num_key_value_heads\": 16, "
      "\"q_lora_rank\": null, \"kv_lora_rank\": 512, \"qk_nope_head_dim\": 128, "
      "\"qk_rope_head_dim\": 64, \"v_head_dim\": 128, \"intermediate_size\": 10944, "
      "\"moe_intermediate_size\": 1408, \"n_routed_experts\": 64, \"n_shared_experts\": 2, "
      "\"num_experts_per_tok\": 6, \"first_k_dense_replace\": 1, \"hidden_act\": \"silu\", "
      "\"rms_norm_eps\": 1e-06, \"rope_theta\": 10000, \"tie_word_embeddings\": false, "
      "\"vocab_size\": 102400}",
      4096));
  EXPECT_EQ(sc.model.q_lora_rank, 0);
  // Attention: q_proj 2048 x 16 x 192, kv_down 2048 x 576, kv norm 512, kv_up 512 x 16 x 256,
  // projection 16 x 128 x 2048.
  const std::int64_t attn = 2048LL * 16 * 192 + 2048LL * 576 + 512 + 512LL * 16 * 256 +
                            16LL * 128 * 2048;
  const std::int64_t expert = 3LL * 2048 * 1408, norms = 2 * 2048;
  const std::int64_t dense = attn + norms + 3LL * 2048 * 10944;
  const std::int64_t moe = attn + norms + 2048LL * 64 + 66 * expert;
  EXPECT_EQ(total_params(sc.model), dense + 26 * moe + 2LL * 102400 * 2048 + 2048);
  EXPECT_NEAR(double(total_params(sc.model)) / 1e9, 15.7, 0.01);
}

// Megatron-Bridge's DeepSeek-V2 bridge maps no multi-token prediction: a V2 config that sets
// num_nextn_predict_layers is refused, naming the file, field and value.
TEST(Mla, HuggingFaceDeepSeekV2RefusesMultiTokenPrediction) {
  ScratchDir dir("hf_dsv2_mtp");
  std::string v2 = deepseek_v3_config(2);
  v2.replace(v2.find("DeepseekV3ForCausalLM"), 21, "DeepseekV2ForCausalLM");
  const std::string path = dir.write("v2.json", v2);
  try {
    import_hf_config(path);
    ADD_FAILURE() << "MTP accepted for DeepSeek-V2";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find(path + ": field 'num_nextn_predict_layers' = 2: "),
              std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace trainsim
