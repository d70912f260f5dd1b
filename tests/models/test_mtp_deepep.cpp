// Multi-token prediction (model.mtp_num_layers; Megatron-Core multi_token_prediction.py) and the
// flex dispatcher with DeepEP or HybridEP (model.moe_token_dispatcher_type flex,
// moe_enable_deepep, moe_flex_dispatcher_backend) against hand calculations: DeepSeek-V3's MTP
// layer's parameters and model FLOPs (Megatron-LM training.py num_floating_point_operations' MTP
// terms written out), where the layout puts the layer, DeepEP's expected destinations per token
// (uniform and group-limited routing) and the flows they give at DeepEP's and HybridEP's
// published rates, and the bad inputs of the new keys (file, field and value in each message).
#include <gtest/gtest.h>

#include <map>
#include <string>
#include <vector>

#include "models/builder/graph_builder.h"
#include "models/hardware/calibration.h"
#include "models/hardware/hardware.h"
#include "models/input/scenario.h"
#include "models/memory/memory_model.h"
#include "models/perf/flops.h"
#include "models/system/collective_flows.h"
#include "tests/support/deepseek_scenario.h"
#include "tests/support/paths.h"
#include "tests/support/scenario_yaml.h"

namespace trainsim {
namespace {

using test_support::ScratchDir;

const std::string& kDeepSeekV3 = test_support::kDeepSeekV3Model;

Scenario core(const std::string& model, const std::string& parallel, std::int64_t nodes = 1) {
  return parse_scenario(test_support::core_scenario_yaml(model, parallel, nodes), "mtp.yaml");
}

// One DeepSeek-V3 MTP layer by hand (h 7168, a 128, lq 1536, lkv 512, dn 128, dr 64, dv 128):
//   MLA: q down h lq 11,010,048 + q norm 1,536 + q up lq a (dn + dr) 37,748,736
//        + kv down h (lkv + dr) 4,128,768 + kv norm 512 + kv up lkv a (dn + dv) 16,777,216
//        + projection a dv h 117,440,512 + input norm 7,168            = 187,114,496
//   MoE (the last decoder layer is one): pre-MLP norm 7,168 + router 256 h 1,835,008
//        + 256 experts x 3 h 2048 11,274,289,152 + shared 3 h 2048 44,040,192 = 11,320,171,520
//   MTP's own: enorm + hnorm + final norm 3 h 21,504 + eh_proj 2 h^2 102,760,448 = 102,781,952
//   total 11,610,067,968 (the embedding and output head are the model's, shared).
constexpr std::int64_t kMtpLayerParams = 187'114'496LL + 11'320'171'520LL + 102'781'952LL;

TEST(Mtp, DeepSeekV3MtpLayerParametersByHand) {
  const std::string par = "micro_batch_size: 1, global_batch_size: 8";
  const Scenario without = core(kDeepSeekV3, par);
  const Scenario with = core(kDeepSeekV3 + ", mtp_num_layers: 1", par);
  EXPECT_EQ(kMtpLayerParams, 11'610'067'968LL);
  EXPECT_EQ(total_params(with.model) - total_params(without.model), kMtpLayerParams);
  EXPECT_EQ(mtp_extra_params_per_rank(with.model, 1), 102'781'952LL);
  EXPECT_TRUE(with.model.moe_layer(61));  // the MTP layer, after layer 60 (an MoE layer)
  EXPECT_FALSE(with.model.moe_layer(62));
}

TEST(Mtp, DeepSeekV3MtpModelFlopsByHand) {
  // Megatron-LM training.py num_floating_point_operations with mtp_num_layers 1: one more layer
  // (MoE, as the last), "MTP norms and proj" 3h + 2h^2, and the logits a second time. Per token,
  // multiply-adds of the MTP layer:
  //   MLA q lq (h + a (dn + dr) + 1) = 1536 x 31,745 = 48,760,320
  //       kv lkv (h + a (dn + dv) + 1) + h dr = 512 x 39,937 + 458,752 = 20,906,496
  //       projection a dv h = 117,440,512; core (a (dn + dr) + a dv) s / 2 = 40,960 x 2,048
  //       = 83,886,080
  //   MoE 3 h (8 x 2048 + 2048) = 396,361,728
  //   norms and eh_proj 3 h + 2 h^2 = 102,781,952; logits h V = 7168 x 129,280 = 926,679,040
  //   sum 1,696,816,128; x 6 (forward + backward, 2 FLOPs per multiply-add) per token.
  const double per_token = 6.0 * (48'760'320.0 + 20'906'496.0 + 117'440'512.0 + 83'886'080.0 +
                                  396'361'728.0 + 102'781'952.0 + 926'679'040.0);
  EXPECT_DOUBLE_EQ(per_token, 6.0 * 1'696'816'128.0);
  const std::string par = "micro_batch_size: 1, global_batch_size: 8";
  const Scenario without = core(kDeepSeekV3, par);
  const Scenario with = core(kDeepSeekV3 + ", mtp_num_layers: 1", par);
  const double tokens = 8.0 * 4096;
  EXPECT_NEAR(model_flops_per_iteration(with) - model_flops_per_iteration(without),
              per_token * tokens, 1e-9 * per_token * tokens);
}

TEST(Mtp, TheLayoutsMtpLayerSitsOnTheLastStageWithTheLoss) {
  // The Megatron-Bridge H100 layout "Et|(tt|)*30mL": 32 virtual stages, PP 8 x VP 4; the MTP
  // layer (global index 61) is in the last, with the loss: on pipeline rank 7.
  const Scenario sc = core(kDeepSeekV3 + ", mtp_num_layers: 1",
                           "tensor_model_parallel_size: 2, sequence_parallel: true, "
                           "pipeline_model_parallel_size: 8, expert_model_parallel_size: 8, "
                           "expert_tensor_parallel_size: 1, micro_batch_size: 1, "
                           "global_batch_size: 64, pipeline_model_parallel_layout: 'Et|(tt|)*30mL'",
                           16);
  EXPECT_EQ(sc.parallel.virtual_pipeline_size, 4);
  const std::vector<std::int64_t> last = sc.parallel.stage_layers(7);
  ASSERT_FALSE(last.empty());
  EXPECT_EQ(last.back(), 61);
  EXPECT_EQ(sc.parallel.layers_of_virtual_stage(31), 0);  // "mL": no decoder layer
  // The last stage holds the MTP layer (its TP shard: attention, router and shared expert split
  // as any layer's) and a copy of the word embedding for the MTP's lookup (untied model).
  const Scenario plain = core(kDeepSeekV3,
                              "tensor_model_parallel_size: 2, sequence_parallel: true, "
                              "pipeline_model_parallel_size: 8, expert_model_parallel_size: 8, "
                              "expert_tensor_parallel_size: 1, micro_batch_size: 1, "
                              "global_batch_size: 64, pipeline_model_parallel_layout: "
                              "'Et|(tt|)*30L'",
                              16);
  EXPECT_EQ(params_per_rank(sc, 7) - params_per_rank(plain, 7),
            layer_params_at(sc, 61) + (129280 / 2) * 7168);
  EXPECT_EQ(layer_params_at(sc, 61) - layer_params_at(sc, 60),
            mtp_extra_params_per_rank(sc.model, 2));
  EXPECT_EQ(mtp_extra_params_per_rank(sc.model, 2), 3 * 7168 + 2 * 7168LL * 7168 / 2);
}

TEST(Mtp, TheLastStageRunsTheMtpLayerAndItsHeadEachMicrobatch) {
  // A small MoE model, 4 layers over PP 2, one MTP layer (global index 4), the flex
  // dispatcher with DeepEP over EP 4, untied embeddings.
  Scenario sc = core("hidden_size: 1024, num_attention_heads: 16, seq_length: 1024, "
                     "padded_vocab_size: 4096, num_layers: 4, num_experts: 8, moe_router_topk: 2, "
                     "moe_grouped_gemm: true, swiglu: true, normalization: RMSNorm, "
                     "position_embedding_type: rope, add_bias_linear: false, "
                     "untie_embeddings_and_output_weights: true, attention_backend: flash, "
                     "mtp_num_layers: 1, moe_token_dispatcher_type: flex, moe_enable_deepep: true",
                     "pipeline_model_parallel_size: 2, expert_model_parallel_size: 4, "
                     "micro_batch_size: 1, global_batch_size: 8");
  BuildOptions opt;
  opt.fold = true;
  const ScheduleGraph g = build_schedule_graph(validated(sc), find_system("dgx-h100"), opt);
  const RankId last = RankId(sc.parallel.layout().rank_of({0, 0, 1}));
  std::map<Phase, std::vector<OpKind>> mtp;  // the last stage's layer-4 compute, microbatch 0
  int deepep = 0, first_stage_mtp = 0, embedding_allreduce = 0;
  for (const Task& t : g.tasks()) {
    const OpDesc& o = g.ops()[t.op];
    if (t.layer == 4 && t.rank != last) ++first_stage_mtp;
    if (t.rank == last && t.layer == 4 && t.microbatch == 0 && t.kind == TaskKind::Compute)
      mtp[t.phase].push_back(o.kind);
    if (t.rank == last && t.layer == 4 && t.microbatch == 0 && o.kind == OpKind::AllToAll) {
      ++deepep;
      // DeepEP's routing: the rank's b s = 1024 tokens, top-2 of 8 experts, h e bytes each.
      EXPECT_DOUBLE_EQ(o.deepep.tokens, 1024.0);
      EXPECT_DOUBLE_EQ(o.deepep.token_bytes, 1024.0 * 2);
      EXPECT_EQ(o.deepep.topk, 2);
    }
    if (o.group == GroupKind::Embedding && t.rank == last) ++embedding_allreduce;
  }
  EXPECT_EQ(first_stage_mtp, 0);
  using K = OpKind;
  // Forward: the MTP input (embedding, norms, eh_proj), its layer, its pass through the head.
  EXPECT_EQ(mtp[Phase::Forward],
            (std::vector<OpKind>{K::EmbedFwd, K::AttnFwd, K::MlpFwd, K::LogitsLossFwd}));
  EXPECT_EQ(mtp[Phase::Backward],
            (std::vector<OpKind>{K::LogitsLossBwd, K::MlpBwd, K::AttnBwd, K::EmbedBwd}));
  EXPECT_EQ(deepep, 4);  // dispatch, combine, and their adjoints
  EXPECT_EQ(embedding_allreduce, 1);  // the word embedding copy's gradient, untied as it is
  // The MTP input op's eh_proj: [T x 2h] x [2h x h], 2 T 2h h FLOPs forward.
  bool found = false;
  for (const OpDesc& o : g.ops())
    if (o.kind == OpKind::EmbedFwd && o.features.mtp_input) {
      found = true;
      EXPECT_DOUBLE_EQ(o.flops, 2.0 * 1024 * 2048 * 1024);
    }
  EXPECT_TRUE(found);
}

// ---- DeepEP

DeepEpRouting dsv3_routing(std::int64_t groups, std::int64_t chosen) {
  DeepEpRouting r;
  r.tokens = 2048;
  r.token_bytes = 7168 * 2;
  r.topk = 8;
  r.experts = 256;
  r.groups = groups;
  r.group_topk = chosen;
  return r;
}

TEST(DeepEp, ExpectedDestinationsByHand) {
  // Uniform top-8 of 256 experts, 32 per node over 8 nodes: a node is missed with probability
  // C(224, 8) / C(256, 8) = prod_{i<8} (224 - i) / (256 - i) = 0.338168..., so 8 (1 - that)
  // = 5.29465 nodes; 4 experts per rank over 64 ranks: 64 (1 - C(252, 8) / C(256, 8)) = 7.67575.
  EXPECT_NEAR(deepep_expected_destinations(dsv3_routing(0, 0), 8), 5.294652000382479, 1e-12);
  EXPECT_NEAR(deepep_expected_destinations(dsv3_routing(0, 0), 64), 7.675750191770085, 1e-12);
  // Group-limited (8 groups of 32 experts, 4 chosen; one group per node): a node's group is
  // chosen with probability C(7, 3) / C(8, 4) = 1/2, then missed by 8 draws from the 128 experts
  // of the chosen groups with probability C(96, 8) / C(128, 8): 8 x 1/2 x (1 - that) = 3.62901.
  EXPECT_NEAR(deepep_expected_destinations(dsv3_routing(8, 4), 8), 3.6290109244257005, 1e-12);
  // Ranks nest in groups (8 ranks a group): 64 x 4/8 x (1 - C(124, 8) / C(128, 8)) = 7.35937.
  EXPECT_NEAR(deepep_expected_destinations(dsv3_routing(8, 4), 64), 7.359370078740156, 1e-12);
  EXPECT_DOUBLE_EQ(deepep_expected_destinations(dsv3_routing(8, 4), 1), 1.0);
}

TEST(DeepEp, FlowsOfAnEp64DispatchOverEightNodesByHand) {
  const SystemSpec system = find_system("dgx-h100");
  const CalibrationProfile profile = default_calibration(system.gpu.name);
  const CostModel cost(system, profile);
  OpDesc op;
  op.kind = OpKind::AllToAll;
  op.group = GroupKind::Expert;
  op.group_size = 64;
  op.deepep = dsv3_routing(8, 4);
  op.bytes = std::int64_t(2048) * 8 * 7168 * 2;
  CommGroup g;
  g.kind = GroupKind::Expert;
  for (RankId r = 0; r < 64; ++r) g.ranks.push_back(r);
  const CollectiveFlows f = collective_flows(cost, op, g, 9, 8);
  ASSERT_TRUE(f.has_rail);
  // RDMA: DeepEP's count, tokens x 3.62901 nodes x 14,336 bytes = 106.55 MB, of which the 7/8
  // that leave the node go over the NIC, paced so all of it takes count / 51 GB/s (EP 64).
  const double token_bytes = 7168.0 * 2;
  const double rdma = 2048 * 3.6290109244257005 * token_bytes;
  EXPECT_NEAR(double(f.rail.bytes), rdma * 7 / 8, 1.0);
  EXPECT_NEAR(double(f.rail.bytes) / f.rail.rate_bytes_per_s, rdma / 51e9, 1e-9);
  EXPECT_NEAR(rdma / 51e9, 2.0894e-3, 1e-6);  // 2.09 ms per dispatch
  // NVLink: the rows this rank receives, 2048 x 7.35937 x 14,336 bytes, 7/8 from its peers,
  // paced to 153 GB/s for all of them.
  const double nvl = 2048 * 7.359370078740156 * token_bytes;
  EXPECT_NEAR(double(f.ring.bytes), nvl * 7 / 8, 1.0);
  EXPECT_NEAR(double(f.ring.bytes) / f.ring.rate_bytes_per_s, nvl / 153e9, 1e-9);
  // The combine: the RDMA figure of the same README row, 50 GB/s.
  op.deepep.combine = true;
  const CollectiveFlows c = collective_flows(cost, op, g, 9, 8);
  EXPECT_NEAR(double(c.rail.bytes) / c.rail.rate_bytes_per_s, rdma / 50e9, 1e-9);
  EXPECT_NEAR(double(c.ring.bytes) / c.ring.rate_bytes_per_s, nvl / 158e9, 1e-9);
  // The kernels hold Megatron's default 20 of H100's 132 SMs (moe_deepep_num_sms).
  EXPECT_NEAR(f.sm_share, 20.0 / 132.0, 1e-12);
  EXPECT_NEAR(c.sm_share, 20.0 / 132.0, 1e-12);
}

// ---- HybridEP

OpDesc hybridep_op(std::int64_t ep, bool combine) {
  OpDesc op;
  op.kind = OpKind::AllToAll;
  op.group = GroupKind::Expert;
  op.group_size = ep;
  op.deepep = dsv3_routing(8, 4);
  op.deepep.combine = combine;
  op.deepep.hybrid_ep = true;
  op.bytes = std::int64_t(2048) * 8 * 7168 * 2;
  return op;
}

CommGroup ranks_0_to(std::int64_t n) {
  CommGroup g;
  g.kind = GroupKind::Expert;
  for (RankId r = 0; r < RankId(n); ++r) g.ranks.push_back(r);
  return g;
}

TEST(HybridEp, FlowsOfAnEp64DispatchInsideOneNvl72DomainByHand) {
  // DeepSeek-V3's EP 64 on GB200 NVL72: the 64 ranks are one NVLink domain (no NIC flow). The
  // rows a rank receives: 2048 tokens x 7.35937 ranks x 14,336 bytes (ranks nest in the 8
  // groups, as for DeepEP), 63/64 from its peers, paced so all of them take count / rate at
  // the README's 36-rank GB200 figures carried over to 64 ranks: 469.96 GB/s dispatch, 418.27
  // combine. The kernel holds 16 of GB200's 148 SMs.
  const SystemSpec system = find_system("gb200-nvl72");
  const CostModel cost(system, default_calibration(system.gpu.name));
  const CommGroup g = ranks_0_to(64);
  const CollectiveFlows f = collective_flows(cost, hybridep_op(64, false), g, 9, 64);
  EXPECT_FALSE(f.has_rail);
  const double nvl = 2048 * 7.359370078740156 * 7168.0 * 2;
  EXPECT_NEAR(double(f.ring.bytes), nvl * 63 / 64, 1.0);
  EXPECT_NEAR(double(f.ring.bytes) / f.ring.rate_bytes_per_s, nvl / 469.96e9, 1e-9);
  EXPECT_NEAR(nvl / 469.96e9, 0.4598e-3, 1e-6);  // 0.46 ms per dispatch
  EXPECT_NEAR(f.sm_share, 16.0 / 148.0, 1e-12);
  const CollectiveFlows c = collective_flows(cost, hybridep_op(64, true), g, 9, 64);
  EXPECT_NEAR(double(c.ring.bytes) / c.ring.rate_bytes_per_s, nvl / 418.27e9, 1e-9);
}

TEST(HybridEp, TheBackendKeyReachesEveryExchangeOp) {
  // Megatron-Core core_r0.15: the flex dispatcher runs --moe-flex-dispatcher-backend, deepep by
  // default (without --moe-enable-deepep too); hybridep marks each dispatch and combine.
  const std::string model =
      "hidden_size: 1024, num_attention_heads: 16, seq_length: 1024, padded_vocab_size: 4096, "
      "num_layers: 2, num_experts: 8, moe_router_topk: 2, attention_backend: flash, "
      "moe_token_dispatcher_type: flex";
  const std::string par = "expert_model_parallel_size: 4, micro_batch_size: 1, "
                          "global_batch_size: 8";
  for (const bool hybrid : {false, true}) {
    Scenario sc = core(model + (hybrid ? ", moe_flex_dispatcher_backend: hybridep" : ""), par);
    BuildOptions opt;
    opt.fold = true;
    const ScheduleGraph g = build_schedule_graph(validated(sc), find_system("dgx-h100"), opt);
    int exchanges = 0;
    for (const OpDesc& o : g.ops())
      if (o.kind == OpKind::AllToAll) {
        ++exchanges;
        EXPECT_DOUBLE_EQ(o.deepep.tokens, 1024.0);
        EXPECT_EQ(o.deepep.hybrid_ep, hybrid);
      }
    EXPECT_GT(exchanges, 0);
  }
}

TEST(HybridEp, PublishedRowsByRankCountAndNvlinkBandwidth) {
  // The README's GB200 rows at 16 SMs: the first row of at least the domain's ranks.
  EXPECT_DOUBLE_EQ(hybridep_nvlink_bytes_per_s(false, 4, 900e9), 550.10e9);
  EXPECT_DOUBLE_EQ(hybridep_nvlink_bytes_per_s(true, 8, 900e9), 538.44e9);
  EXPECT_DOUBLE_EQ(hybridep_nvlink_bytes_per_s(false, 12, 900e9), 472.84e9);
  EXPECT_DOUBLE_EQ(hybridep_nvlink_bytes_per_s(true, 32, 900e9), 423.19e9);
  EXPECT_DOUBLE_EQ(hybridep_nvlink_bytes_per_s(false, 72, 900e9), 469.96e9);
  // NVLink 4 (450 GB/s per GPU and direction): half of NVLink 5's.
  EXPECT_DOUBLE_EQ(hybridep_nvlink_bytes_per_s(false, 8, 450e9), 275.05e9);
  EXPECT_DOUBLE_EQ(hybridep_rdma_bytes_per_s(false, 2), 54.47e9);
  EXPECT_DOUBLE_EQ(hybridep_rdma_bytes_per_s(true, 4), 52.53e9);
  EXPECT_DOUBLE_EQ(hybridep_rdma_bytes_per_s(false, 16), 41.24e9);
}

TEST(HybridEp, FlowsOfAnEp64DispatchOverEightH100NodesByHand) {
  // The RDMA path: 8 DGX H100 nodes, a token once to each of 3.62901 nodes (DeepEP's count),
  // 7/8 of it over the NIC at the README's H100 64-rank figure, 41.24 GB/s; NVLink inside the
  // node at the GB200 8-rank figure scaled to NVLink 4: 550.10 x 450 / 900 = 275.05 GB/s.
  const SystemSpec system = find_system("dgx-h100");
  const CostModel cost(system, default_calibration(system.gpu.name));
  const CollectiveFlows f = collective_flows(cost, hybridep_op(64, false), ranks_0_to(64), 9, 8);
  ASSERT_TRUE(f.has_rail);
  const double token_bytes = 7168.0 * 2;
  const double rdma = 2048 * 3.6290109244257005 * token_bytes;
  EXPECT_NEAR(double(f.rail.bytes), rdma * 7 / 8, 1.0);
  EXPECT_NEAR(double(f.rail.bytes) / f.rail.rate_bytes_per_s, rdma / 41.24e9, 1e-9);
  const double nvl = 2048 * 7.359370078740156 * token_bytes;
  EXPECT_NEAR(double(f.ring.bytes) / f.ring.rate_bytes_per_s, nvl / 275.05e9, 1e-9);
  EXPECT_NEAR(f.sm_share, 16.0 / 132.0, 1e-12);
}

TEST(MtpDeepEp, BadInputsNameFileFieldAndValue) {
  ScratchDir dir("mtp_deepep");
  const std::string moe = "hidden_size: 1024, num_attention_heads: 16, seq_length: 1024, "
                          "padded_vocab_size: 1024, num_layers: 4, num_experts: 8, "
                          "moe_router_topk: 2, attention_backend: flash";
  const std::string par = "expert_model_parallel_size: 4, micro_batch_size: 1, "
                          "global_batch_size: 32";
  test_support::expect_each_refused(dir, {
      {"megatron-core", moe + ", mtp_num_layers: -1", par, "field 'model.mtp_num_layers' = '-1'"},
      {"megatron-2021", "hidden_size: 1024, num_attention_heads: 16, seq_length: 1024, "
                        "padded_vocab_size: 1024, num_layers: 4, mtp_num_layers: 1",
       "micro_batch_size: 1, global_batch_size: 32",
       "model.mtp_num_layers (1) needs `runtime: megatron-core`"},
      {"megatron-core", moe + ", mtp_num_layers: 2",
       par + ", pipeline_model_parallel_size: 2, pipeline_model_parallel_layout: 'Ett|ttmL'",
       "1 multi-token prediction layers (m), model.mtp_num_layers (2)"},
      {"megatron-core", moe + ", mtp_num_layers: 1",
       par + ", pipeline_model_parallel_size: 2, pipeline_model_parallel_layout: 'Ettm|ttL'",
       "the multi-token prediction layers (m) must be in the last virtual stage"},
      {"megatron-core", moe + ", mtp_num_layers: 1",
       par + ", pipeline_model_parallel_size: 2, pipeline_model_parallel_layout: 'Ett|ttL'",
       "0 multi-token prediction layers (m), model.mtp_num_layers (1)"},
      {"megatron-core", moe + ", mtp_num_layers: 1", par + ", use_megatron_fsdp: true",
       "model.mtp_num_layers (1) with ZeRO-3 / FSDP"},
      {"megatron-core", moe + ", moe_flex_dispatcher_backend: nvshmem", par,
       "field 'model.moe_flex_dispatcher_backend' = 'nvshmem'"},
      {"megatron-core", moe + ", moe_flex_dispatcher_backend: hybridep", par,
       "model.moe_flex_dispatcher_backend (hybridep) needs model.moe_token_dispatcher_type: flex"},
      {"megatron-core",
       moe + ", moe_token_dispatcher_type: flex, moe_enable_deepep: true, "
             "moe_flex_dispatcher_backend: hybridep",
       par, "model.moe_enable_deepep (true) with model.moe_flex_dispatcher_backend (hybridep)"},
      {"megatron-core", moe + ", moe_enable_deepep: true", par,
       "model.moe_enable_deepep (true) needs model.moe_token_dispatcher_type: flex"},
      {"megatron-core", moe + ", moe_token_dispatcher_type: flexible", par,
       "field 'model.moe_token_dispatcher_type' = 'flexible'"},
      {"megatron-core", moe + ", moe_enable_deepep: maybe", par,
       "field 'model.moe_enable_deepep' = 'maybe'"},
      {"megatron-core",
       moe + ", moe_token_dispatcher_type: flex, moe_enable_deepep: true, "
             "moe_expert_capacity_factor: 1.0",
       par, "(flex) needs a mixture-of-experts model with parallel.expert_tensor_parallel_size 1"},
      {"megatron-core", moe + ", moe_router_num_groups: 4", par,
       "model.moe_router_num_groups (4) and model.moe_router_group_topk (0)"},
      {"megatron-core", moe + ", moe_router_num_groups: 3, moe_router_group_topk: 1", par,
       "model.moe_router_num_groups (3) and model.moe_router_group_topk (1)"},
      {"megatron-core", moe + ", moe_router_group_topk: -2", par,
       "field 'model.moe_router_group_topk' = '-2'"},
      {"megatron-core", moe + ", moe_router_num_groups: x", par,
       "field 'model.moe_router_num_groups' = 'x'"}});
}

}  // namespace
}  // namespace trainsim
