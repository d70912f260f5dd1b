#include "models/builder/offload.h"

#include <algorithm>
#include <cmath>

#include "models/memory/memory_model.h"
#include "models/memory/zero_offload.h"

namespace trainsim::builder {

GradientOffload::GradientOffload(const Scenario& sc, std::int64_t pp_stage)
    : round_trip_(sc.zero.stage >= 3 && sc.zero.offload_optimizer.enabled),
      cpu_prefix_(static_cast<std::int64_t>(
          std::floor(effective_offload_ratio(sc) * double(params_per_rank(sc, pp_stage))))),
      dp_(sc.parallel.data_parallel_size),
      e_(precision_bytes(sc.parallel.precision)) {}

TaskId GradientOffload::copy(RankContext& ctx, TaskKind kind, std::int64_t bytes,
                             std::uint16_t bucket, TaskId after,
                             const std::function<void(TaskId)>& on_copy) {
  const bool d2h = kind == TaskKind::CopyD2H;
  Task t;
  t.op = ctx.add_op(
      ctx.comm_op(d2h ? OpKind::CopyD2H : OpKind::CopyH2D, GroupKind::None, bytes, 1));
  t.kind = kind;
  t.stream = d2h ? StreamId::D2H : StreamId::H2D;
  t.phase = Phase::Offload;
  t.part = Part::Gradients;
  t.bucket = bucket;
  const TaskId id = ctx.add(t);
  on_copy(id);
  ctx.dep(after, id);
  return id;
}

void GradientOffload::copy_reduced_bucket(RankContext& ctx, std::int64_t lo, std::int64_t hi,
                                          std::uint16_t bucket, TaskId done,
                                          const std::function<void(TaskId)>& on_copy) {
  const std::int64_t n = hi - lo;
  const std::int64_t cpu_overlap = std::max<std::int64_t>(0, std::min(hi, cpu_prefix_) - lo);
  auto share = [&](std::int64_t elems) { return (elems + dp_ - 1) / dp_; };
  if (round_trip_) {
    const TaskId d2h = copy(ctx, TaskKind::CopyD2H, share(n) * e_, bucket, done, on_copy);
    ctx.dep(last_d2h_, d2h);
    last_d2h_ = d2h;
    const std::int64_t gpu_part = n - cpu_overlap;
    if (gpu_part > 0) {
      const TaskId h2d = copy(ctx, TaskKind::CopyH2D, share(gpu_part) * 4, bucket, d2h, on_copy);
      ctx.dep(last_grad_h2d_, h2d);
      last_grad_h2d_ = h2d;
    }
  } else if (cpu_overlap > 0) {
    const TaskId d2h = copy(ctx, TaskKind::CopyD2H, share(cpu_overlap) * 4, bucket, done, on_copy);
    ctx.dep(last_d2h_, d2h);
    last_d2h_ = d2h;
  }
}

TaskId emit_cpu_adam(RankContext& ctx, std::int64_t cpu_params, std::initializer_list<TaskId> after,
                     std::vector<MemEffect>& buffers_freed) {
  const std::int64_t sub_group = ctx.scenario().zero.sub_group_size;
  TaskId last_h2d = kNone;
  for (std::int64_t off = 0; off < cpu_params; off += sub_group) {
    const std::int64_t n = std::min(sub_group, cpu_params - off);
    const auto index =
        static_cast<std::uint16_t>(std::min<std::int64_t>(off / sub_group, kNoIndex - 1));
    OpDesc adam;
    adam.kind = OpKind::OptimizerStepCpu;
    adam.precision = ctx.dims().precision;
    adam.params = n;
    Task t;
    t.op = ctx.add_op(adam);
    t.kind = TaskKind::OptimizerCpu;
    t.stream = StreamId::Cpu;
    t.phase = Phase::Optimizer;
    t.part = Part::Params;
    t.bucket = index;
    const TaskId cpu_step = ctx.add(t);
    for (const MemEffect& e : buffers_freed) ctx.add_effect(cpu_step, e);
    buffers_freed.clear();
    for (TaskId a : after) ctx.dep(a, cpu_step);
    Task h;
    h.op = ctx.add_op(ctx.comm_op(OpKind::CopyH2D, GroupKind::None, n * ctx.dims().e, 1));
    h.kind = TaskKind::CopyH2D;
    h.stream = StreamId::H2D;
    h.phase = Phase::Offload;
    h.part = Part::Params;
    h.bucket = index;
    last_h2d = ctx.add(h);
    ctx.dep(cpu_step, last_h2d);
  }
  return last_h2d;
}

ActivationOffload::ActivationOffload(const Scenario& sc,
                                     std::function<std::int64_t(std::int64_t)> layer_bytes)
    : layer_bytes_(std::move(layer_bytes)), k_(sc.parallel.offloaded_activation_layers()) {
  if (k_ > 0) window_ = offload_windows(sc.model.num_layers, k_);
}

// transformer_engine/pytorch/cpu_offload.py AsyncDoubleBufferGroupOffloadHandler.__init__:
// window[i] = (L // k) * (i + 1) - 1, plus i + 1 for the first L % k groups, plus L % k after.
std::vector<std::int64_t> ActivationOffload::offload_windows(std::int64_t layers,
                                                             std::int64_t k) {
  std::vector<std::int64_t> w(std::size_t(std::max<std::int64_t>(k, 0)));
  std::int64_t constant = 0;
  for (std::int64_t i = 0; i < k; ++i) {
    w[std::size_t(i)] = (layers / k) * (i + 1) - 1;
    if (i < layers % k) {
      w[std::size_t(i)] += i + 1;
      constant = i + 1;
    } else {
      w[std::size_t(i)] += constant;
    }
  }
  return w;
}

TaskId ActivationOffload::copy(RankContext& ctx, bool to_host, std::uint16_t mb,
                               std::int64_t group, std::initializer_list<TaskId> after) {
  const std::int64_t bytes = layer_bytes_(group);
  Task t;
  t.op = ctx.add_op(
      ctx.comm_op(to_host ? OpKind::CopyD2H : OpKind::CopyH2D, GroupKind::None, bytes, 1));
  t.kind = to_host ? TaskKind::CopyD2H : TaskKind::CopyH2D;
  t.stream = to_host ? StreamId::D2H : StreamId::H2D;
  t.phase = Phase::Offload;
  t.part = Part::None;
  t.microbatch = mb;
  t.layer = static_cast<std::uint16_t>(group);
  // The copy must not take the compute path's pending joins (RankContext::join_next).
  std::vector<TaskId> joins;
  joins.swap(ctx.join_next);
  const TaskId id =
      to_host ? ctx.add(t, {{bytes, MemCategory::Activations, false, true},
                            {-bytes, MemCategory::Activations, true, false}})
              : ctx.add(t, {{bytes, MemCategory::Activations, false, false},
                            {-bytes, MemCategory::Activations, true, true}});
  joins.swap(ctx.join_next);
  for (TaskId a : after) ctx.dep(a, id);
  return id;
}

void ActivationOffload::after_forward(RankContext& ctx, std::uint16_t mb, std::int64_t l) {
  if (k_ == 0) return;
  if (l == 0) {
    count_ = 0;
    last_d2h_ = copy(ctx, true, mb, 0, {ctx.last_compute, last_d2h_});
  }
  if (count_ < k_ && window_[std::size_t(count_)] == l) {
    const TaskId done = last_d2h_;  // the offloads so far: the compute waits for them
    if (count_ < k_ - 1) last_d2h_ = copy(ctx, true, mb, count_ + 1, {ctx.last_compute, done});
    ctx.join_next.push_back(done);
    ++count_;
  }
}

void ActivationOffload::before_backward(RankContext& ctx, std::uint16_t mb, std::int64_t l) {
  if (k_ == 0) return;
  if (count_ > 0 && window_[std::size_t(count_ - 1)] == l) {
    const TaskId done = last_h2d_;  // the reloads so far: the compute waits for them
    last_h2d_ = copy(ctx, false, mb, count_ - 1, {ctx.last_compute, done});
    if (done != kNone) ctx.join_next.push_back(done);
    if (count_ > 1) --count_;
  }
  if (l == 0) {
    ctx.join_next.push_back(last_h2d_);
    count_ = 0;
  }
}

}  // namespace trainsim::builder
