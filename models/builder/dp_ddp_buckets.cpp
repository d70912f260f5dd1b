// Strategy `ddp_buckets`: Megatron DDP without ZeRO (stage 0, dp > 1), megatron/core/
// distributed/distributed_data_parallel.py and param_and_grad_buffer.py. Gradients are
// all-reduced in place in buckets of ddp_bucket_size parameters, in the order they become
// ready in the last microbatch's backward (last layer first, the embedding last); with
// --overlap-grad-reduce a bucket starts when its last gradient is ready, else all start after
// the backward. Megatron accumulates and all-reduces bf16 gradients in fp32
// (accumulate_allreduce_grads_in_fp32, grad_element_bytes).
//
// Strategy `distributed_optimizer` (--use-distributed-optimizer; Megatron-Core
// distributed/param_and_grad_buffer.py and optimizer/distrib_optimizer.py): the same buckets
// are reduce-scattered instead (each DP x CP rank keeps the reduced gradients of its 1/dp
// shard), the optimizer steps the shard (fp32 master weights and Adam moments 12 B / dp per
// parameter; the bf16 parameters and the fp32 main-grad buffer stay whole: Megatron-Core's
// "Distributed Optimizer" doc table, 6 + 12/d bytes per parameter), then the updated bf16
// parameters are all-gathered in the same buckets: after the step, or with
// --overlap-param-gather during the next iteration's forward (steady state: each bucket's
// all-gather is issued at the start of the iteration on the DP stream, in forward order, and a
// layer's first forward waits for its bucket, as the forward pre-hooks do).
#include <set>
#include <utility>
#include <vector>

#include "models/builder/dp_strategy.h"
#include "models/memory/memory_model.h"
#include "models/memory/zero_offload.h"

namespace trainsim::builder {

namespace {

class DdpBuckets final : public DataParallelStrategy {
 public:
  explicit DdpBuckets(bool distributed) : distributed_(distributed) {}
  const char* name() const override {
    return distributed_ ? "distributed_optimizer" : "ddp_buckets";
  }

  RankStateBytes initial_memory(const RankContext& ctx) const override {
    RankStateBytes m = DataParallelStrategy::initial_memory(ctx);
    if (!distributed_) return m;
    m.gpu[int(MemCategory::OptimizerStates)] = 12 * optimizer_shard_params(ctx);
    return m;
  }

  void on_step_begin(RankContext& ctx, const PipelineStep& step) override {
    if (!distributed_ || !ctx.scenario().parallel.overlap_param_gather || gathered_) return;
    if (!step.forward) return;
    gathered_ = true;  // the first forward step: issue every bucket's all-gather
    for_each_forward_bucket(ctx, [&](std::int64_t lo, std::int64_t n) {
      const TaskId ag = param_gather(ctx, n, kNone, std::uint16_t(gather_tasks_.size()));
      gather_tasks_.emplace_back(lo, ag);
    });
  }

  void before_unit(RankContext& ctx, bool forward, const Unit& unit) override {
    if (!forward || gather_tasks_.empty() || unit.kind != UnitKind::Layer) return;
    const std::int64_t pos = unit_position(ctx, unit.layer);
    if (waited_.count(unit.layer)) return;
    waited_.insert(unit.layer);
    // The layer's parameters begin in the last bucket starting at or before its position.
    TaskId ag = gather_tasks_.front().second;
    for (const auto& [lo, task] : gather_tasks_)
      if (lo <= pos) ag = task;
    ctx.join_next.push_back(ag);
  }

  void after_optimizer_step(RankContext& ctx, const OptimizerStepTasks& step) override {
    if (!distributed_ || ctx.scenario().parallel.overlap_param_gather) return;
    TaskId last = kNone;
    std::uint16_t i = 0;
    for_each_forward_bucket(ctx, [&](std::int64_t, std::int64_t n) {
      last = param_gather(ctx, n, step.gpu_step != kNone ? step.gpu_step : step.final_compute, i++);
    });
    if (last != kNone) ctx.last_compute = last;
  }

  TaskId reduce_gradients(RankContext& ctx, const BackwardTails& tails) override {
    const TaskId final_compute = ctx.last_compute;
    const std::int64_t bucket_size = ctx.scenario().parallel.ddp_bucket_size;
    std::int64_t in_bucket = 0;
    TaskId bucket_ready = kNone, last_sync = kNone;
    std::uint16_t bucket = 0;
    auto flush = [&](std::int64_t n) {
      if (n <= 0) return;
      const ModelDims& d = ctx.dims();
      const std::uint32_t op = ctx.add_op(
          ctx.comm_op(distributed_ ? OpKind::ReduceScatter : OpKind::AllReduce, GroupKind::Data,
                      n * grad_element_bytes(ctx.scenario()), d.dp));
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
    OptimizerStepInputs in = replicated_optimizer_step(ctx.scenario(), ctx.coords.pp_stage);
    if (distributed_) {
      in.gpu_params = optimizer_shard_params(ctx);
      // The shard's fp32 main grads are read in place; a narrower main_grad is cast to a
      // temporary fp32 copy of the shard (distrib_optimizer.py _copy_model_grads_to_main_grads).
      in.fp32_grad_bytes = grad_element_bytes(ctx.scenario()) < 4 ? 4 * in.gpu_params : 0;
    }
    return in;
  }

 private:
  static std::int64_t stage_params(const RankContext& ctx) {
    return params_per_rank(ctx.scenario(), ctx.coords.pp_stage);
  }
  static std::int64_t shard(const RankContext& ctx, std::int64_t params) {
    const std::int64_t dp = ctx.dims().dp;
    return (params + dp - 1) / dp;
  }
  /// Parameters the rank's distributed-optimizer step updates (and holds the 12 B of fp32
  /// master weight and Adam moments for): its 1/dp shard of the dense parameters, and its shard
  /// of the local experts' over the expert data-parallel group, world / (pp ep etp)
  /// (Megatron-Core keeps expert parameters in their own buffers, distributed over
  /// expert_data_parallel_group: distributed_data_parallel.py, distrib_optimizer.py).
  static std::int64_t optimizer_shard_params(const RankContext& ctx) {
    const Scenario& sc = ctx.scenario();
    const std::int64_t expert = expert_params_per_rank(sc, ctx.coords.pp_stage);
    const std::int64_t edp = sc.world_size() / (sc.parallel.pipeline_model_parallel_size *
                                                sc.parallel.expert_model_parallel_size *
                                                sc.parallel.expert_tensor_parallel_size);
    return shard(ctx, stage_params(ctx) - expert) + (expert + edp - 1) / edp;
  }
  /// Position of a layer's parameters in forward order on this rank (embedding first).
  static std::int64_t unit_position(const RankContext& ctx, std::int64_t layer) {
    const Scenario& sc = ctx.scenario();
    const std::int64_t t = ctx.dims().t;
    std::int64_t position = ctx.coords.pp_stage == 0 ? embedding_params_per_rank(sc.model, t) : 0;
    // This rank's layers in forward order: chunk 0's, then chunk 1's, ...
    for (std::int64_t l : sc.parallel.stage_layers(ctx.coords.pp_stage)) {
      if (l == layer) break;
      position += layer_params_at(sc, l);
    }
    return position;
  }
  /// `fn(first parameter, parameters)` of each ddp_bucket_size bucket, in forward order (one at
  /// a time: a counting build of one-parameter buckets stops at its limit, holding no list).
  template <typename Fn>
  static void for_each_forward_bucket(const RankContext& ctx, Fn fn) {
    const std::int64_t total = stage_params(ctx), size = ctx.scenario().parallel.ddp_bucket_size;
    for (std::int64_t lo = 0; lo < total; lo += size) fn(lo, std::min(size, total - lo));
  }
  /// The all-gather of a bucket's updated parameters (training precision) over DP x CP.
  static TaskId param_gather(RankContext& ctx, std::int64_t n, TaskId after, std::uint16_t bucket) {
    const ModelDims& d = ctx.dims();
    // --fp8-param-gather gathers the FP8 weights (1 byte; the few bf16 norms are neglected).
    const std::int64_t e = ctx.scenario().parallel.fp8_param_gather ? 1 : d.e;
    const std::uint32_t op = ctx.add_op(ctx.comm_op(OpKind::AllGather, GroupKind::Data, n * e, d.dp));
    return ctx.collective(op, ctx.dp_group, StreamId::DpComm, Phase::ParamSync, Part::Params,
                          kNoIndex, kNoIndex, after, bucket);
  }

  const bool distributed_;
  bool gathered_ = false;
  std::vector<std::pair<std::int64_t, TaskId>> gather_tasks_;
  std::set<std::int64_t> waited_;

  /// (parameters, the task after which their gradients are ready), in the order they become
  /// ready: the output layer (last stage), the layers last first, the embedding (first stage).
  static std::vector<std::pair<std::int64_t, TaskId>> ready_order(const RankContext& ctx,
                                                                  const BackwardTails& tails) {
    const Scenario& sc = ctx.scenario();
    const ModelConfig& m = sc.model;
    const std::int64_t stage = ctx.coords.pp_stage, t = ctx.dims().t;
    std::int64_t layers = 0;  // the parameters of this rank's layers (dense or MoE, each its own)
    for (const auto& [l, tail] : tails.layers) layers += layer_params_at(sc, l);
    std::vector<std::pair<std::int64_t, TaskId>> ready;
    if (stage == ctx.dims().pp - 1 && tails.output != kNone)
      ready.emplace_back(params_per_rank(sc, stage) - layers -
                             (stage == 0 ? embedding_params_per_rank(m, t) : 0),
                         tails.output);
    for (auto it = tails.layers.rbegin(); it != tails.layers.rend(); ++it)
      ready.emplace_back(layer_params_at(sc, it->first), it->second);
    if (stage == 0) ready.emplace_back(embedding_params_per_rank(m, t), tails.embedding);
    return ready;
  }
};

}  // namespace

std::unique_ptr<DataParallelStrategy> make_dp_ddp_buckets(const RankContext&) {
  return std::make_unique<DdpBuckets>(false);
}

std::unique_ptr<DataParallelStrategy> make_dp_distributed_optimizer(const RankContext&) {
  return std::make_unique<DdpBuckets>(true);
}

}  // namespace trainsim::builder
