#include "models/builder/tensor_parallel.h"

namespace trainsim::builder {

namespace {
OpDesc tp_op(const ModelDims& d, OpKind kind, std::int64_t bytes) {
  OpDesc o;
  o.kind = kind;
  o.precision = d.precision;
  o.group = GroupKind::Tensor;
  o.bytes = bytes;
  o.group_size = d.t;
  return o;
}
}  // namespace

TensorParallelPass::TensorParallelPass(ScheduleGraph& graph, const ModelDims& d)
    : dims_(d) {
  // On the full activation (b s h elements).
  all_reduce_ = graph.add_op(tp_op(d, OpKind::AllReduce, d.act_bytes));
  all_gather_ = graph.add_op(tp_op(d, OpKind::AllGather, d.act_bytes));
  reduce_scatter_ = graph.add_op(tp_op(d, OpKind::ReduceScatter, d.act_bytes));
  // Max, sum of exponentials and target logit per token, fp32.
  cross_entropy_ = graph.add_op(tp_op(d, OpKind::AllReduce, 3 * d.b * d.s / d.cp * 4));
  // One fp32 amax; the FP8 gather moves one byte per element of the activation; the bf16
  // backward gathers two activations.
  if (d.fp8_amax_reduce) amax_reduce_ = graph.add_op(tp_op(d, OpKind::AllReduce, 4));
  if (d.fp8_input_gather)
    all_gather_fp8_ = graph.add_op(tp_op(d, OpKind::AllGather, d.act_bytes / d.e));
  else if (d.sp)
    all_gather_bwd_ = graph.add_op(tp_op(d, OpKind::AllGather, 2 * d.act_bytes));
  if (d.mla && d.t > 1) {
    // The up projections' inputs are gathered as the dense layers' column-parallel inputs are
    // (FP8 under FP8 with SP); the RoPE key in the training precision; the input gradients of
    // the up projections and of the RoPE key (the gather's adjoint) in the training precision.
    const std::int64_t in = d.fp8_input_gather ? 1 : d.e;
    if (d.sp) {
      mla_.q_gather = graph.add_op(tp_op(d, OpKind::AllGather, d.mla_q_elements * in));
      mla_.kv_gather = graph.add_op(tp_op(d, OpKind::AllGather, d.mla_kv_elements * in));
      mla_.rope_gather = graph.add_op(tp_op(d, OpKind::AllGather, d.mla_rope_elements * d.e));
      mla_.rope_reduce = graph.add_op(tp_op(d, OpKind::ReduceScatter, d.mla_rope_elements * d.e));
    }
    const OpKind reduce = d.sp ? OpKind::ReduceScatter : OpKind::AllReduce;
    mla_.q_reduce = graph.add_op(tp_op(d, reduce, d.mla_q_elements * d.e));
    mla_.kv_reduce = graph.add_op(tp_op(d, reduce, d.mla_kv_elements * d.e));
  }
}

/// Multi-head latent attention, per block (Megatron-Core multi_latent_attention.py
/// get_query_key_value_tensors with the Transformer Engine spec):
///  - forward with SP: the up projections gather their local latent rows (TE's column-parallel
///    layers, one gather each; without q_lora_rank linear_q_proj gathers the hidden state),
///    and the RoPE key is gathered (gather_from_sequence_parallel_region), after an amax
///    all-reduce per FP8 cast under current scaling; without SP nothing (the ranks hold every
///    row);
///  - after the forward: the row-parallel projection's reduce-scatter (all-reduce without SP),
///    as a dense block's;
///  - backward with SP: the projection's output gradient gathered (the dense block's output
///    gradient gather, FP8 under FP8, after its amax all-reduce), with mla_up_proj
///    recomputation the forward's three gathers again, and the two latents re-gathered for the
///    up projections' weight gradients;
///  - after the backward: the up projections' input gradients reduce-scattered to the rows
///    their duplicated down projections hold, and the RoPE key's (the gather's adjoint);
///    without SP the up projections' input gradients are all-reduced (Megatron's
///    copy_to_tensor_model_parallel_region adjoint) and the RoPE key's gradient has no
///    collective (the code has none). The down projections' input gradient stays local.
void TensorParallelPass::mla_collectives(RankContext& ctx, bool before, Phase phase,
                                         std::uint16_t mb, std::uint16_t layer) const {
  if (dims_.t <= 1) return;
  const Part part = Part::Attn;
  const bool backward = phase == Phase::Backward;
  if (!before) {
    if (!backward)
      return void(tp_collective(ctx, dims_.sp ? reduce_scatter_ : all_reduce_, phase, part, mb,
                                layer));
    tp_collective(ctx, mla_.q_reduce, phase, part, mb, layer);
    tp_collective(ctx, mla_.kv_reduce, phase, part, mb, layer);
    if (dims_.sp) tp_collective(ctx, mla_.rope_reduce, phase, part, mb, layer);
    return;
  }
  if (!dims_.sp) return;
  if (backward) {
    if (dims_.fp8_amax_reduce) tp_collective(ctx, amax_reduce_, phase, part, mb, layer);
    tp_collective(ctx, dims_.fp8_input_gather ? all_gather_fp8_ : all_gather_, phase, part, mb,
                  layer);
  } else if (dims_.fp8_amax_reduce) {
    tp_collective(ctx, amax_reduce_, phase, part, mb, layer);
    tp_collective(ctx, amax_reduce_, phase, part, mb, layer);
  }
  // With --recompute-modules mla_up_proj the backward re-runs the up projections first: their
  // gathers and the RoPE key's as in the forward, then the re-gathers for the weight gradients.
  const int runs = backward && dims_.mla_up_rerun ? 2 : 1;
  for (int i = 0; i < runs; ++i) {
    if (i + 1 < runs && dims_.fp8_amax_reduce) {  // the re-run's two FP8 casts
      tp_collective(ctx, amax_reduce_, phase, part, mb, layer);
      tp_collective(ctx, amax_reduce_, phase, part, mb, layer);
    }
    tp_collective(ctx, mla_.q_gather, phase, part, mb, layer);
    tp_collective(ctx, mla_.kv_gather, phase, part, mb, layer);
    if (!backward || i + 1 < runs) tp_collective(ctx, mla_.rope_gather, phase, part, mb, layer);
  }
}

bool TensorParallelPass::local_moe_block(Part part, std::uint16_t layer) const {
  return dims_.moe_block_local && part == Part::Mlp && layer != kNoIndex &&
         dims_.moe_layer(layer);
}

bool TensorParallelPass::dense_block(Part part, std::uint16_t layer) const {
  return layer != kNoIndex &&
         (part == Part::Attn || (part == Part::Mlp && !dims_.moe_layer(layer)));
}

bool TensorParallelPass::overlapped_block(Part part, std::uint16_t layer) const {
  return dims_.tp_overlap && dense_block(part, layer);
}

TaskId TensorParallelPass::tp_collective(RankContext& ctx, std::uint32_t op, Phase phase,
                                         Part part, std::uint16_t mb, std::uint16_t layer) const {
  ctx.last_compute = ctx.collective(op, ctx.tp_group, StreamId::TpComm, phase, part, mb, layer,
                                    ctx.last_compute);
  return ctx.last_compute;
}

void TensorParallelPass::before_block(RankContext& ctx, Phase phase, Part part, std::uint16_t mb,
                                      std::uint16_t layer) const {
  if (dims_.mla && part == Part::Attn && layer != kNoIndex)
    return mla_collectives(ctx, true, phase, mb, layer);
  // --recompute-modules shared_experts: the shared expert's checkpointed forward re-runs first
  // in the backward, with its gather and its fc2's reduce-scatter (all-reduce without SP).
  if (dims_.shared_rerun && dims_.t > 1 && phase == Phase::Backward && part == Part::Mlp &&
      layer != kNoIndex && dims_.moe_layer(layer)) {
    if (dims_.sp) tp_collective(ctx, all_gather_, phase, part, mb, layer);
    tp_collective(ctx, dims_.sp ? reduce_scatter_ : all_reduce_, phase, part, mb, layer);
  }
  if (!dims_.sp || local_moe_block(part, layer)) return;
  const bool dense = dense_block(part, layer);
  // Current scaling: the cast before the gather reduces its amax first (also when the gather
  // itself runs inside the GEMM).
  if (dense && dims_.fp8_amax_reduce) tp_collective(ctx, amax_reduce_, phase, part, mb, layer);
  if (overlapped_block(part, layer)) return;
  std::uint32_t op = all_gather_;
  // A recomputed forward gathers as the forward does (the same Transformer Engine module).
  if (dense && dims_.fp8_input_gather && phase != Phase::Backward) op = all_gather_fp8_;
  // The backward's two gathers: FP8 (one activation's bytes, all_gather_) or not (two).
  if (dense && !dims_.fp8_input_gather && phase == Phase::Backward) op = all_gather_bwd_;
  tp_collective(ctx, op, phase, part, mb, layer);
}

void TensorParallelPass::before_output_backward(RankContext& ctx, std::uint16_t mb) const {
  if (dims_.sp) tp_collective(ctx, all_gather_, Phase::Backward, Part::Logits, mb, kNoIndex);
}

void TensorParallelPass::after_block(RankContext& ctx, Phase phase, Part part, std::uint16_t mb,
                                     std::uint16_t layer) const {
  if (dims_.mla && part == Part::Attn && layer != kNoIndex)
    return mla_collectives(ctx, false, phase, mb, layer);
  if (dims_.t > 1 && !local_moe_block(part, layer) && !overlapped_block(part, layer))
    tp_collective(ctx, dims_.sp ? reduce_scatter_ : all_reduce_, phase, part, mb, layer);
}

void TensorParallelPass::after_loss(RankContext& ctx, std::uint16_t mb) const {
  if (dims_.t > 1) tp_collective(ctx, cross_entropy_, Phase::Forward, Part::Logits, mb, kNoIndex);
}

void TensorParallelPass::after_receive(RankContext& ctx, Phase phase, std::uint16_t mb) const {
  if (dims_.scatter_gather) tp_collective(ctx, all_gather_, phase, Part::Pipeline, mb, kNoIndex);
}

}  // namespace trainsim::builder
