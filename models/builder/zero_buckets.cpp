#include "models/builder/zero_buckets.h"

#include <algorithm>

#include "models/memory/memory_model.h"
#include "models/memory/zero_offload.h"
#include "models/errors.h"

namespace trainsim::builder {

ZeroGradientBuckets::ZeroGradientBuckets(const RankContext& ctx)
    : stage_(ctx.scenario().zero.stage),
      partitioned_grads_(stage_ >= 2),
      embed_params_(embedding_params_per_rank(ctx.scenario().model, ctx.dims().t)),
      params_(params_per_rank(ctx.scenario(), ctx.coords.pp_stage)),
      offload_(ctx.scenario(), ctx.coords.pp_stage) {
  // Chunk by chunk the rank's layers ascend (virtual stage chunk x pp + stage, in model order).
  std::int64_t position = 0;
  for (std::int64_t chunk = 0; chunk < ctx.dims().v; ++chunk) {
    const ChunkSpan c = ctx.chunk_span(chunk);
    has_embedding_ = has_embedding_ || c.first_vstage;
    has_output_ = has_output_ || c.last_vstage;
    for (std::int64_t l = c.first_layer; l < c.first_layer + c.layers; ++l) {
      const std::int64_t n = layer_params_at(ctx.scenario(), l);  // dense or MoE layer
      layer_range_[l] = {position, position + n};
      position += n;
    }
  }
  layers_params_ = position;
}

void ZeroGradientBuckets::on_block_computed(RankContext& ctx, const Block& b) {
  if (!partitioned_grads_ || b.phase != Phase::Backward) return;
  const std::int64_t e = ctx.dims().e;
  switch (b.unit.kind) {
    case UnitKind::Layer: {
      const auto& [lo, hi] = layer_range_.at(b.unit.layer);
      if (b.first) ctx.add_effect(b.task, {(hi - lo) * e, MemCategory::Gradients});
      if (b.last) ctx.add_effect(b.task, {-(hi - lo) * e, MemCategory::Gradients, true});
      break;
    }
    case UnitKind::Output: {
      ensure_buffers(ctx, b.task);
      const std::int64_t word =
          word_embedding_params_per_rank(ctx.scenario().model, ctx.dims().t) * e;
      // The word embedding's gradient lives until the embedding backward where this rank runs
      // it (pp = 1); else it goes into the bucket with the logits backward, as a layer's does.
      ctx.add_effect(b.task, {word, MemCategory::Gradients});
      if (!has_embedding_) ctx.add_effect(b.task, {-word, MemCategory::Gradients, true});
      break;
    }
    case UnitKind::Embedding:
      if (has_output_) {
        // The position embedding's gradient (a learned table; none with RoPE), then both
        // copied into the bucket.
        const std::int64_t word = word_embedding_params_per_rank(ctx.scenario().model, ctx.dims().t);
        ctx.add_effect(b.task, {(embed_params_ - word) * e, MemCategory::Gradients});
        ctx.add_effect(b.task, {-embed_params_ * e, MemCategory::Gradients, true});
      } else {  // the first of several stages: the embedding's gradients are its own
        ctx.add_effect(b.task, {embed_params_ * e, MemCategory::Gradients});
        ctx.add_effect(b.task, {-embed_params_ * e, MemCategory::Gradients, true});
      }
      break;
  }
}

void ZeroGradientBuckets::on_grads_ready(RankContext& ctx, const Unit& unit, TaskId ready) {
  const std::int64_t embed = has_embedding_ ? embed_params_ : 0;
  switch (unit.kind) {
    case UnitKind::Output: grads_ready(ctx, embed + layers_params_, params_, ready); break;
    case UnitKind::Layer: {
      const auto& [lo, hi] = layer_range_.at(unit.layer);
      grads_ready(ctx, embed + lo, embed + hi, ready);
      break;
    }
    case UnitKind::Embedding: grads_ready(ctx, 0, embed, ready); break;
  }
}

void ZeroGradientBuckets::grads_ready(RankContext& ctx, std::int64_t lo, std::int64_t hi,
                                      TaskId ready) {
  if (!partitioned_grads_ || hi <= lo) return;
  if (hi_ == lo_) hi_ = lo_ = hi;
  TRAINSIM_CHECK(lo_ == hi, "ZeroGradientBuckets: gradient ranges must arrive from high to low");
  const std::int64_t cap = ctx.scenario().zero.reduce_bucket_size;
  for (std::int64_t cur = hi; cur > lo;) {
    const std::int64_t take = std::min(cur - lo, cap - (hi_ - lo_));
    lo_ -= take;
    cur -= take;
    ready_ = ready;
    if (hi_ - lo_ == cap) flush(ctx);
  }
}

void ZeroGradientBuckets::flush(RankContext& ctx) {
  const std::int64_t n = hi_ - lo_;
  if (n <= 0) return;
  const ModelDims& d = ctx.dims();
  const TaskId after = ctx.scenario().zero.overlap_comm || stage_ == 1 ? ready_ : ctx.last_compute;
  TaskId done = after;
  if (d.dp > 1) {
    const std::uint32_t op =
        ctx.add_op(ctx.comm_op(OpKind::ReduceScatter, GroupKind::Data, n * d.e, d.dp));
    done = ctx.collective(op, ctx.dp_group, StreamId::DpComm, Phase::GradSync, Part::Gradients,
                          kNoIndex, kNoIndex, after, index_);
    ensure_buffers(ctx, done);  // stage 1: the buffers appear with the first reduction
    ctx.dep(last_sync_, done);
    last_sync_ = done;
  }
  // dp = 1: the staging buffer appears with the first copy.
  offload_.copy_reduced_bucket(ctx, lo_, hi_, index_, done,
                               [&](TaskId copy) { ensure_buffers(ctx, copy); });
  ++index_;
  hi_ = lo_;
}

void ZeroGradientBuckets::reduce_all(RankContext& ctx, std::int64_t params, TaskId ready) {
  for (std::int64_t cur = params; cur > 0;) {
    const std::int64_t take = std::min(cur, ctx.scenario().zero.reduce_bucket_size);
    hi_ = cur;
    lo_ = cur - take;
    ready_ = ready;
    flush(ctx);
    cur -= take;
  }
}

void ZeroGradientBuckets::ensure_buffers(RankContext& ctx, TaskId task) {
  if (buffers_allocated_) return;
  buffers_allocated_ = true;
  bucket_buffer_bytes_ = gradient_bucket_buffer_bytes(ctx.scenario(), ctx.coords.pp_stage);
  staging_bytes_ = offload_staging_bytes(ctx.scenario(), ctx.coords.pp_stage);
  if (bucket_buffer_bytes_ > 0)
    ctx.add_effect(task, {bucket_buffer_bytes_, MemCategory::CommBuffers});
  if (staging_bytes_ > 0) ctx.add_effect(task, {staging_bytes_, MemCategory::OffloadBuffers});
}

OptimizerStepInputs ZeroGradientBuckets::optimizer_step(const RankContext& ctx) const {
  const Scenario& sc = ctx.scenario();
  OptimizerStepInputs in;
  in.gpu_params = gpu_stepped_params(sc, ctx.coords.pp_stage);
  in.cpu_params = cpu_stepped_params(sc, ctx.coords.pp_stage);
  // Stage 3 with offload keeps the GPU part's fp32 gradients in a persistent buffer instead
  // (counted in the initial memory).
  in.fp32_grad_bytes = stage_ >= 3 && sc.zero.offload_optimizer.enabled ? 0 : 4 * in.gpu_params;
  in.last_d2h = offload_.last_d2h();
  in.last_grad_h2d = offload_.last_grad_h2d();
  if (bucket_buffer_bytes_ > 0)
    in.buffers_freed.push_back({-bucket_buffer_bytes_, MemCategory::CommBuffers});
  if (staging_bytes_ > 0)
    in.buffers_freed.push_back({-staging_bytes_, MemCategory::OffloadBuffers});
  return in;
}

}  // namespace trainsim::builder
