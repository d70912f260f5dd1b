// DeepSpeed ZeRO's gradient buckets (stage_1_and_2.py / stage3.py,
// reduce_independent_p_g_buckets_and_remove_grads and reduce_ipg_grads), shared by the zero12
// and zero3 strategies: gradients enter a bucket of reduce_bucket_size elements in the order
// backward produces them (last parameters first); a full bucket is reduce-scattered over the
// data-parallel group and this rank's share of its CPU-stepped part copied to the host
// (models/builder/offload.h). Stage 2/3 fill and reduce buckets during every microbatch's
// backward; stage 1 reduces all gradients once, after the last microbatch.
//
// Coordinates are the rank's parameters in model order: the embedding [0, E) where the rank holds
// the model's first virtual stage (else E = 0), the k-th of the rank's layers (ascending global
// index, over its model chunks) [E + k Lp, E + (k+1) Lp), the rest (final LayerNorm, an untied
// or the tied output layer) after its last layer. DeepSpeed's stages 2/3 run with pp = 1, where
// that is the whole model; FSDP (modelled as stage 3) also runs with pipeline parallelism.
#pragma once

#include <cstdint>
#include <map>

#include "models/builder/dp_strategy.h"
#include "models/builder/offload.h"

namespace trainsim::builder {

class ZeroGradientBuckets {
 public:
  explicit ZeroGradientBuckets(const RankContext& ctx);

  /// Stage >= 2: the gradient memory of the block just computed: a layer's full gradients
  /// live from its first to its last backward block (then copied into the bucket buffer);
  /// the tied word embedding's gradient from the logits backward (where the bucket buffers
  /// appear) to the embedding backward, with the position embedding's gradient.
  void on_block_computed(RankContext& ctx, const Block& block);
  /// Stage >= 2: the gradients of `unit` are complete after `ready`.
  void on_grads_ready(RankContext& ctx, const Unit& unit, TaskId ready);
  /// Reduces the partial bucket (the end of a microbatch's backward, stage >= 2).
  void flush(RankContext& ctx);
  /// Stage 1: all `params` gradients after `ready`, in buckets, last parameters first.
  void reduce_all(RankContext& ctx, std::int64_t params, TaskId ready);

  /// The last reduction (kNone: none yet).
  TaskId last_sync() const { return last_sync_; }
  /// The partitioned step: the owned partition split between GPU and CPU (offload), waiting
  /// for the gradient copies and freeing the bucket and staging buffers.
  OptimizerStepInputs optimizer_step(const RankContext& ctx) const;

 private:
  void grads_ready(RankContext& ctx, std::int64_t lo, std::int64_t hi, TaskId ready);
  /// The bucket buffers (CommBuffers) and the offload staging buffer (OffloadBuffers) appear
  /// with `task` unless they already exist; they live until the optimizer step.
  void ensure_buffers(RankContext& ctx, TaskId task);

  const int stage_;
  const bool partitioned_grads_;  ///< stage >= 2
  const std::int64_t embed_params_, params_;
  /// The rank holds the model's first / last virtual stage (pp = 1: both).
  bool has_embedding_ = false, has_output_ = false;
  /// The rank's layers: global index -> [first, end) of its parameters among the layers'
  /// (ascending; a dense and an MoE layer differ in size), and the layers' parameters in all.
  std::map<std::int64_t, std::pair<std::int64_t, std::int64_t>> layer_range_;
  std::int64_t layers_params_ = 0;
  // The current bucket, [lo_, hi_) in parameter order (backward fills it from high to low).
  std::int64_t lo_ = 0, hi_ = 0;
  TaskId ready_ = kNone;       ///< the task after which the bucket's gradients are complete
  std::uint16_t index_ = 0;    ///< buckets reduced so far
  TaskId last_sync_ = kNone;
  bool buffers_allocated_ = false;
  std::int64_t bucket_buffer_bytes_ = 0, staging_bytes_ = 0;
  GradientOffload offload_;
};

}  // namespace trainsim::builder
