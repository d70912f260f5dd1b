// ZeRO-Offload / Twin-Flow in the schedule (models/memory/zero_offload.h has the memory side): the
// gradient copies of each reduced bucket to the host (and, at stage 3, back), and the CPU Adam
// steps over the CPU-stepped parameters with the host->device copies of their updated values.
//
// The CPU part is the first r (offload_optimizer.ratio) of the rank's parameters in parameter
// order (embedding, layers 0..L-1, final LayerNorm), DeepSpeed Twin-Flow (blogs/
// deepspeed-offloadpp); trainsim splits it continuously, see cpu_stepped_params.
#pragma once

#include <cstdint>
#include <functional>
#include <initializer_list>
#include <vector>

#include "models/builder/rank_context.h"

namespace trainsim::builder {

/// The copies of one rank's reduced gradient buckets between GPU and host.
class GradientOffload {
 public:
  GradientOffload(const Scenario& sc, std::int64_t pp_stage);

  /// After the reduction `done` of the bucket of parameters [lo, hi) (parameter order), copies
  /// this rank's 1/dp share:
  ///  - stage 3 with offload_optimizer (DeepSpeed stage3.py): the reduced fp16 partition to the
  ///    pinned host grad_partitions_flat_buffer (e B/elem), then the GPU part's share back
  ///    host->device as fp32 (copy_ converts on the source device, the host: 4 B/elem), the
  ///    round trip the Twin-Flow blog lists as "unnecessary D2H/H2D memcpy";
  ///  - stage 1/2: the CPU part's gradients cast to fp32 on the GPU and copied into the pinned
  ///    fp32 host buffer (4 B/elem).
  /// `on_copy` runs right after each copy task is added (the caller's buffers may appear with
  /// the first one).
  void copy_reduced_bucket(RankContext& ctx, std::int64_t lo, std::int64_t hi,
                           std::uint16_t bucket, TaskId done,
                           const std::function<void(TaskId)>& on_copy);

  TaskId last_d2h() const { return last_d2h_; }            ///< the last gradient copy to the host
  TaskId last_grad_h2d() const { return last_grad_h2d_; }  ///< the last fp32 copy back (stage 3)

 private:
  TaskId copy(RankContext& ctx, TaskKind kind, std::int64_t bytes, std::uint16_t bucket,
              TaskId after, const std::function<void(TaskId)>& on_copy);
  bool round_trip_ = false;  ///< stage 3 with offload_optimizer
  std::int64_t cpu_prefix_ = 0;  ///< parameters [0, cpu_prefix_) are stepped on the CPU
  std::int64_t dp_ = 1;
  std::int64_t e_ = 2;
  TaskId last_d2h_ = kNone, last_grad_h2d_ = kNone;
};

/// CPU Adam over `cpu_params` parameters, sub_group_size at a time, each sub-group followed by
/// the host->device copy of its updated parameters (e B/param). Every CPU step waits for the
/// tasks in `after`; the first one frees `buffers_freed` (then cleared). Returns the last
/// host->device copy (kNone without CPU part).
TaskId emit_cpu_adam(RankContext& ctx, std::int64_t cpu_params, std::initializer_list<TaskId> after,
                     std::vector<MemEffect>& buffers_freed);

}  // namespace trainsim::builder
