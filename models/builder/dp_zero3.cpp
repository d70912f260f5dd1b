// Strategy `zero3`: DeepSpeed ZeRO stage 3 (runtime/zero/stage3.py, partitioned_param_
// coordinator.py; = FSDP full sharding), pp = 1. Parameters are partitioned too: before the
// first block of each unit (embedding, layers, output layer, in use order: forward, then
// reversed in backward) its parameters are all-gathered over the data-parallel group, up to
// zero3_prefetch_layers units ahead, and the gathered copy is released after the unit's last
// block. Gradients go through reduce-scatter buckets as at stage 2.
#include <vector>

#include "models/builder/dp_strategy.h"
#include "models/builder/zero_buckets.h"
#include "models/memory_model.h"

namespace trainsim::builder {

namespace {

class Zero3 final : public DataParallelStrategy {
 public:
  explicit Zero3(const RankContext& ctx)
      : buckets_(ctx),
        gathers_(ctx.dims().dp > 1),
        layers_(ctx.dims().layers),
        prefetch_(zero3_prefetch_layers(ctx.scenario())) {
    const ModelConfig& m = ctx.scenario().model;
    embed_params_ = embedding_params_per_rank(m, ctx.dims().t);
    layer_params_ = layer_params_per_rank(m, ctx.dims().t);
    output_params_ = word_embedding_params_per_rank(m, ctx.dims().t);
  }
  const char* name() const override { return "zero3"; }

  /// A pass over the units starts with each step (pp = 1: a step runs the whole model).
  void on_step_begin(RankContext&, const PipelineStep& step) override {
    units_.clear();
    units_.push_back(step.forward ? embed_params_ : output_params_);
    for (std::int64_t l = 0; l < layers_; ++l) units_.push_back(layer_params_);
    units_.push_back(step.forward ? output_params_ : embed_params_);
    gather_.assign(units_.size(), kNone);
    next_ = 0;
  }
  void before_unit(RankContext& ctx, bool forward, const Unit& unit) override;
  void on_block_computed(RankContext& ctx, const Block& block) override;
  void on_grads_ready(RankContext& ctx, const Unit& unit, TaskId ready) override {
    buckets_.on_grads_ready(ctx, unit, ready);
  }
  void on_step_end(RankContext& ctx, const PipelineStep& step) override {
    if (!step.forward) buckets_.flush(ctx);  // the rest of this microbatch's gradients
  }
  TaskId reduce_gradients(RankContext&, const BackwardTails&) override {
    return buckets_.last_sync();
  }
  OptimizerStepInputs optimizer_step(const RankContext& ctx) const override {
    return buckets_.optimizer_step(ctx);
  }

 private:
  /// Position of `unit` in the current pass: forward embedding, layers, output; backward the
  /// reverse.
  std::size_t index_of(bool forward, const Unit& unit) const {
    switch (unit.kind) {
      case UnitKind::Embedding: return forward ? 0 : std::size_t(1 + layers_);
      case UnitKind::Layer: return std::size_t(forward ? 1 + unit.layer : layers_ - unit.layer);
      case UnitKind::Output: return forward ? std::size_t(1 + layers_) : 0;
    }
    return 0;
  }
  static Part part_of(const Unit& unit) {
    switch (unit.kind) {
      case UnitKind::Embedding: return Part::Embedding;
      case UnitKind::Layer: return Part::Params;
      case UnitKind::Output: return Part::Logits;
    }
    return Part::None;
  }

  ZeroGradientBuckets buckets_;
  const bool gathers_;  ///< dp > 1: there is something to gather
  const std::int64_t layers_, prefetch_;
  std::int64_t embed_params_ = 0, layer_params_ = 0, output_params_ = 0;
  // The current pass: parameters per rank of each unit in use order, the all-gather issued
  // for each, the next one to issue.
  std::vector<std::int64_t> units_;
  std::vector<TaskId> gather_;
  std::size_t next_ = 0;
  TaskId wait_ = kNone;       ///< the gather the next compute block waits for
  std::int64_t release_ = 0;  ///< gathered bytes freed at the end of the unit's last block
};

/// Issues the all-gathers of the units up to `unit` + prefetch (each may start once the
/// compute issued so far is done), makes the next block wait for this unit's and its last
/// block release it.
void Zero3::before_unit(RankContext& ctx, bool forward, const Unit& unit) {
  if (!gathers_) return;
  const ModelDims& d = ctx.dims();
  const std::size_t k = index_of(forward, unit);
  const std::size_t until = std::min(units_.size(), k + 1 + std::size_t(prefetch_));
  for (; next_ < until; ++next_) {
    const std::int64_t bytes = units_[next_] * d.e;
    const std::uint32_t op =
        ctx.add_op(ctx.comm_op(OpKind::AllGather, GroupKind::Data, bytes, d.dp));
    // The gathered copy (the rank's own partition is already counted in Parameters).
    gather_[next_] = ctx.collective(op, ctx.dp_group, StreamId::DpComm, Phase::ParamSync,
                                    part_of(unit), kNoIndex, kNoIndex, ctx.last_compute, kNoIndex,
                                    {{bytes - bytes / d.dp, MemCategory::Parameters}});
  }
  wait_ = gather_[k];
  const std::int64_t bytes = units_[k] * d.e;
  release_ = bytes - bytes / d.dp;
}

void Zero3::on_block_computed(RankContext& ctx, const Block& block) {
  if (wait_ != kNone) {
    ctx.dep(wait_, block.task);
    wait_ = kNone;
  }
  buckets_.on_block_computed(ctx, block);
  if (block.last && block.phase != Phase::Recompute && release_ > 0) {
    ctx.add_effect(block.task, {-release_, MemCategory::Parameters, true});
    release_ = 0;
  }
}

}  // namespace

std::unique_ptr<DataParallelStrategy> make_dp_zero3(const RankContext& ctx) {
  return std::make_unique<Zero3>(ctx);
}

}  // namespace trainsim::builder
