// Strategy `zero12`: DeepSpeed ZeRO stages 1 and 2 (runtime/zero/stage_1_and_2.py). Optimizer
// states (stage 1) and gradients (stage 2) are partitioned over the data-parallel group.
// Stage 2 reduce-scatters gradient buckets as backward fills them, every microbatch (on the
// DP stream with overlap_comm); stage 1 reduces the full gradients once, after the last
// microbatch. Each rank steps its partition (split between GPU and CPU with offload), then
// the updated fp16 parameters are all-gathered for the next iteration.
#include "models/builder/dp_strategy.h"
#include "models/builder/zero_buckets.h"
#include "models/memory/memory_model.h"

namespace trainsim::builder {

namespace {

class Zero12 final : public DataParallelStrategy {
 public:
  explicit Zero12(const RankContext& ctx) : buckets_(ctx) {}
  const char* name() const override { return "zero12"; }

  void on_block_computed(RankContext& ctx, const Block& block) override {
    buckets_.on_block_computed(ctx, block);
  }
  void on_grads_ready(RankContext& ctx, const Unit& unit, TaskId ready) override {
    buckets_.on_grads_ready(ctx, unit, ready);
  }
  void on_step_end(RankContext& ctx, const PipelineStep& step) override {
    // The rest of this microbatch's gradients (stage 2; stage 1 fills no bucket during backward).
    if (!step.forward && ctx.scenario().zero.stage >= 2) buckets_.flush(ctx);
  }

  TaskId reduce_gradients(RankContext& ctx, const BackwardTails&) override {
    if (ctx.scenario().zero.stage == 1)
      buckets_.reduce_all(ctx, params_per_rank(ctx.scenario(), ctx.coords.pp_stage),
                          ctx.last_compute);
    return buckets_.last_sync();
  }

  OptimizerStepInputs optimizer_step(const RankContext& ctx) const override {
    return buckets_.optimizer_step(ctx);
  }

  /// All-gather of the updated parameter partitions (fp16) for the next iteration.
  void after_optimizer_step(RankContext& ctx, const OptimizerStepTasks& step) override {
    const ModelDims& d = ctx.dims();
    if (d.dp <= 1) return;
    const std::int64_t params = params_per_rank(ctx.scenario(), ctx.coords.pp_stage);
    const std::uint32_t op =
        ctx.add_op(ctx.comm_op(OpKind::AllGather, GroupKind::Data, params * d.e, d.dp));
    const TaskId ag = ctx.collective(op, ctx.dp_group, StreamId::DpComm, Phase::ParamSync,
                                     Part::Params, kNoIndex, kNoIndex,
                                     step.gpu_step != kNone ? step.gpu_step : step.final_compute);
    ctx.dep(step.last_h2d, ag);
    ctx.last_compute = ag;
  }

 private:
  ZeroGradientBuckets buckets_;
};

}  // namespace

std::unique_ptr<DataParallelStrategy> make_dp_zero12(const RankContext& ctx) {
  return std::make_unique<Zero12>(ctx);
}

}  // namespace trainsim::builder
