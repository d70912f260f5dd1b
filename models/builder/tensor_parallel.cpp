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
