// Strategy `ddp_buckets`: Megatron DDP without ZeRO (stage 0, dp > 1), megatron/core/
// distributed/distributed_data_parallel.py and param_and_grad_buffer.py. Gradients are
// all-reduced in place in buckets of ddp_bucket_size parameters, in the order they become
// ready in the last microbatch's backward (last layer first, the embedding last); with
// --overlap-grad-reduce a bucket starts when its last gradient is ready, else all start after
// the backward. Megatron accumulates and all-reduces bf16 gradients in fp32
// (accumulate_allreduce_grads_in_fp32, grad_element_bytes).
#include <utility>
#include <vector>

#include "models/builder/dp_strategy.h"
#include "models/memory_model.h"
#include "models/zero_offload.h"

namespace trainsim::builder {

namespace {

class DdpBuckets final : public DataParallelStrategy {
 public:
  const char* name() const override { return "ddp_buckets"; }

  TaskId reduce_gradients(RankContext& ctx, const BackwardTails& tails) override {
    const TaskId final_compute = ctx.last_compute;
    const std::int64_t bucket_size = ctx.scenario().parallel.ddp_bucket_size;
    std::int64_t in_bucket = 0;
    TaskId bucket_ready = kNone, last_sync = kNone;
    std::uint16_t bucket = 0;
    auto flush = [&](std::int64_t n) {
      if (n <= 0) return;
      const ModelDims& d = ctx.dims();
      const std::uint32_t op = ctx.add_op(ctx.comm_op(
          OpKind::AllReduce, GroupKind::Data, n * grad_element_bytes(ctx.scenario()), d.dp));
      const TaskId after =
          ctx.scenario().parallel.overlap_grad_reduce ? bucket_ready : final_compute;
      last_sync = ctx.collective(op, ctx.dp_group, StreamId::DpComm, Phase::GradSync,
                                 Part::Gradients, kNoIndex, kNoIndex, after, bucket++);
    };
    for (const auto& [n, task] : ready_order(ctx, tails)) {
      std::int64_t left = n;
      bucket_ready = task;
      while (left > 0) {
        const std::int64_t take = std::min(left, bucket_size - in_bucket);
        in_bucket += take;
        left -= take;
        if (in_bucket == bucket_size) {
          flush(in_bucket);
          in_bucket = 0;
        }
      }
    }
    flush(in_bucket);
    return last_sync;
  }

  OptimizerStepInputs optimizer_step(const RankContext& ctx) const override {
    return replicated_optimizer_step(ctx.scenario(), ctx.coords.pp_stage);
  }

 private:
  /// (parameters, the task after which their gradients are ready), in the order they become
  /// ready: the output layer (last stage), the layers last first, the embedding (first stage).
  static std::vector<std::pair<std::int64_t, TaskId>> ready_order(const RankContext& ctx,
                                                                  const BackwardTails& tails) {
    const ModelConfig& m = ctx.scenario().model;
    const std::int64_t stage = ctx.coords.pp_stage, t = ctx.dims().t;
    const std::int64_t layer = layer_params_per_rank(m, t);
    std::vector<std::pair<std::int64_t, TaskId>> ready;
    if (stage == ctx.dims().pp - 1 && tails.output != kNone)
      ready.emplace_back(params_per_rank(ctx.scenario(), stage) -
                             std::int64_t(tails.layers.size()) * layer -
                             (stage == 0 ? embedding_params_per_rank(m, t) : 0),
                         tails.output);
    for (auto it = tails.layers.rbegin(); it != tails.layers.rend(); ++it)
      ready.emplace_back(layer, it->second);
    if (stage == 0) ready.emplace_back(embedding_params_per_rank(m, t), tails.embedding);
    return ready;
  }
};

}  // namespace

std::unique_ptr<DataParallelStrategy> make_dp_ddp_buckets(const RankContext&) {
  return std::make_unique<DdpBuckets>();
}

}  // namespace trainsim::builder
