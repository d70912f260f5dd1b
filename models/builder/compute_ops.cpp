// The compute and exchange descriptors one rank's program uses (ComputeOps,
// models/builder/pipeline_pass.h): each block's shard of the work (models/perf/flops.h), the
// context-parallel ring's exchanges, the MoE token exchanges and their variants.
#include <cstdint>

#include "models/builder/moe_ops.h"
#include "models/builder/pipeline_pass.h"
#include "models/memory/memory_model.h"
#include "models/perf/flops.h"

namespace trainsim::builder {

namespace {

/// One rank's shard of a compute block (Megatron ParallelTransformerLayer, embedding, output
/// layer), with its work from models/perf/flops.h.
OpDesc compute_op(const Scenario& sc, const ModelDims& d, OpKind kind, bool full_attention = false,
                  bool dense_mlp = false, bool checkpoint_rerun = false) {
  OpDesc o;
  o.kind = kind;
  o.precision = d.precision;
  o.micro_batch = d.b;
  o.seq = d.s;
  o.hidden = d.h;
  o.heads = sc.model.num_attention_heads / d.t;
  o.head_dim = sc.model.kv_channels;
  o.ffn = sc.model.ffn_hidden_size / d.t;
  o.vocab = sc.model.padded_vocab_size / d.t;
  o.tp = d.t;
  o.sequence_parallel = d.sp;
  o.recompute_core_attention = kind == OpKind::AttnBwd &&
                               (sc.parallel.recompute_modules & kRecomputeCoreAttn) != 0;
  o.features = model_features(sc);
  if (full_attention) o.features.window = 0;
  o.features.checkpoint_rerun = checkpoint_rerun;
  const ModelConfig& m = sc.model;
  if (m.is_moe() && !dense_mlp && (kind == OpKind::MlpFwd || kind == OpKind::MlpBwd)) {
    const ParallelConfig& p = sc.parallel;
    o.features.experts_local = m.num_experts / p.expert_model_parallel_size;
    o.features.num_experts = m.num_experts;
    o.features.topk = m.moe_router_topk;
    o.features.expert_ffn = m.moe_ffn_hidden_size / p.expert_tensor_parallel_size;
    o.features.shared_ffn = m.moe_shared_expert_intermediate_size / d.t;
    o.features.grouped_gemm = m.moe_grouped_gemm;
    o.features.imbalance = m.moe_token_imbalance_factor;
    // Token dropping: the router's tokens on this rank, b s / cp (/ t with SP).
    const std::int64_t rank_tokens = d.b * d.s / d.cp / (d.sp ? d.t : 1);
    o.features.expert_token_cap = double(m.num_experts * m.moe_expert_capacity(rank_tokens));
    o.features.pad_to_capacity = m.moe_pad_expert_input_to_capacity;
    o.features.permute_fusion = m.moe_permute_fusion;
    o.features.router = std::uint8_t((m.moe_aux_loss_coeff > 0 ? kRouterAuxLoss : 0) |
                                     (m.moe_z_loss_coeff > 0 ? kRouterZLoss : 0) |
                                     (m.moe_router_enable_expert_bias ? kRouterExpertBias : 0) |
                                     (m.moe_router_fusion ? kRouterFusion : 0));
    o.features.etp = p.expert_tensor_parallel_size;
    // moe_shared_expert_overlap: the shared expert runs in ops of its own (add_compute_ops).
    if (m.moe_shared_expert_overlap) o.features.shared_ffn = 0;
    if (m.moe_shared_expert_overlap) o.features.shared_part = kSharedApart;
  }
  // Flash attention keeps no score matrix: selective recomputation recomputes nothing there
  // (Megatron-Core checkpoints core attention only for the unfused kernel's s^2 tensors).
  if (o.features.attention != 0) o.recompute_core_attention = false;
  fill_work(o);
  return o;
}

/// Context parallelism's ring attention (Megatron-Core / Transformer Engine
/// AttnFuncWithCPAndKVP2P): cp steps; at each a rank sends the K, V chunk it holds to the next
/// CP rank while it computes attention with the chunk it has. Over the cp - 1 exchanges every
/// rank receives the other ranks' K, V: the traffic of a ring all-gather whose output is cp
/// chunks of 2 b (s / cp) (g / t) d e bytes (MLA: b (s / cp) (a / t) (dn + dr + dv) e). The
/// backward moves K, V again and returns dK, dV to their owners: an all-gather plus a
/// reduce-scatter of the same size, the traffic of one all-reduce. The exchange runs concurrently with the attention block; the next block waits
/// for both.
std::uint32_t cp_exchange_op(GraphBuild& b, bool backward) {
  const Scenario& sc = b.scenario;
  const ModelDims& d = b.dims;
  const ModelConfig& m = sc.model;
  // MLA: every head its own key (kv_channels = dn + dr) and value (dv).
  const std::int64_t chunk =
      m.multi_latent_attention
          ? d.b * (d.s / d.cp) * (m.num_attention_heads / d.t) * (m.kv_channels + m.v_head_dim) * d.e
          : 2 * d.b * (d.s / d.cp) * (m.num_query_groups / d.t) * m.kv_channels * d.e;
  OpDesc o;
  o.kind = backward ? OpKind::AllReduce : OpKind::AllGather;
  o.precision = d.precision;
  o.group = GroupKind::Context;
  o.bytes = chunk * d.cp;
  o.group_size = d.cp;
  return b.graph.add_op(o);
}

}  // namespace

ComputeOps add_compute_ops(GraphBuild& b) {
  auto add = [&](OpKind kind) { return b.graph.add_op(compute_op(b.scenario, b.dims, kind)); };
  ComputeOps ops;
  ops.attn_fwd = add(OpKind::AttnFwd);
  ops.mlp_fwd = add(OpKind::MlpFwd);
  ops.attn_bwd = add(OpKind::AttnBwd);
  ops.mlp_bwd = add(OpKind::MlpBwd);
  ops.embed_fwd = add(OpKind::EmbedFwd);
  ops.embed_bwd = add(OpKind::EmbedBwd);
  ops.logits_fwd = add(OpKind::LogitsLossFwd);
  ops.logits_bwd = add(OpKind::LogitsLossBwd);
  if (b.dims.cp > 1) {
    ops.cp_fwd = cp_exchange_op(b, false);
    ops.cp_bwd = cp_exchange_op(b, true);
  }
  // Sliding-window models attend fully on every window_attn_skip_freq-th layer.
  ops.attn_fwd_full = ops.attn_fwd;
  ops.attn_bwd_full = ops.attn_bwd;
  if (b.scenario.model.window_size > 0 && b.scenario.model.window_attn_skip_freq > 0) {
    ops.attn_fwd_full = b.graph.add_op(compute_op(b.scenario, b.dims, OpKind::AttnFwd, true));
    ops.attn_bwd_full = b.graph.add_op(compute_op(b.scenario, b.dims, OpKind::AttnBwd, true));
  }
  // An MoE model's dense layers (--moe-layer-freq) run a dense MLP of ffn_hidden_size.
  ops.mlp_fwd_dense = ops.mlp_fwd;
  ops.mlp_bwd_dense = ops.mlp_bwd;
  if (b.scenario.model.is_moe() && b.scenario.model.has_dense_layers()) {
    ops.mlp_fwd_dense = b.graph.add_op(compute_op(b.scenario, b.dims, OpKind::MlpFwd, false, true));
    ops.mlp_bwd_dense = b.graph.add_op(compute_op(b.scenario, b.dims, OpKind::MlpBwd, false, true));
  }
  // --recompute-modules mlp / moe: the checkpointed module's forward, re-run in the backward.
  const ModelConfig& m = b.scenario.model;
  const std::uint8_t modules = b.scenario.parallel.recompute_modules;
  if ((modules & kRecomputeMoe) && m.is_moe())
    ops.mlp_rerun = b.graph.add_op(compute_op(b.scenario, b.dims, OpKind::MlpFwd, false, false, true));
  if ((modules & kRecomputeMlp) && (!m.is_moe() || m.has_dense_layers()))
    ops.mlp_rerun_dense =
        b.graph.add_op(compute_op(b.scenario, b.dims, OpKind::MlpFwd, false, true, true));
  if (b.scenario.model.is_moe() && b.scenario.parallel.expert_model_parallel_size > 1) {
    ops.moe_dispatch = moe_exchange_op(b, false);
    ops.moe_combine = moe_exchange_op(b, true);
  }
  if (b.scenario.model.is_moe() && b.scenario.parallel.expert_tensor_parallel_size > 1) {
    ops.etp_gather = etp_exchange_op(b, false);
    ops.etp_scatter = etp_exchange_op(b, true);
  }
  if (m.is_moe() && m.moe_shared_expert_overlap) {  // the shared expert's own ops
    auto shared = [&](OpKind kind, std::uint8_t part) {
      OpDesc o = compute_op(b.scenario, b.dims, kind);
      o.features.shared_ffn = m.moe_shared_expert_intermediate_size / b.dims.t;
      o.features.shared_part = part;
      fill_work(o);
      return b.graph.add_op(o);
    };
    ops.shared_fc1_fwd = shared(OpKind::MlpFwd, kSharedFc1);
    ops.shared_fc2_fwd = shared(OpKind::MlpFwd, kSharedFc2);
    ops.shared_fc1_bwd = shared(OpKind::MlpBwd, kSharedFc1);
    ops.shared_fc2_bwd = shared(OpKind::MlpBwd, kSharedFc2);
  }
  if (m.mtp_num_layers > 0) {
    for (const OpKind kind : {OpKind::EmbedFwd, OpKind::EmbedBwd}) {
      OpDesc o = compute_op(b.scenario, b.dims, kind);
      o.features.mtp_input = true;
      fill_work(o);
      (kind == OpKind::EmbedFwd ? ops.mtp_input_fwd : ops.mtp_input_bwd) = b.graph.add_op(o);
    }
  }
  if (b.scenario.model.is_moe() && b.scenario.parallel.delay_wgrad_compute) {
    auto part = [&](std::uint8_t which) {
      OpDesc o = compute_op(b.scenario, b.dims, OpKind::MlpBwd);
      o.features.expert_wgrad = which;
      fill_work(o);
      return b.graph.add_op(o);
    };
    ops.mlp_bwd_dgrad = part(1);
    ops.mlp_bwd_wgrad = part(2);
  }
  return ops;
}

}  // namespace trainsim::builder
