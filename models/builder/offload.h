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

/// Megatron-Core's activation CPU offloading (TransformerConfig cpu_offloading,
/// cpu_offloading_num_layers = k): megatron/core/transformer/transformer_block.py (core_r0.14.0,
/// core_r0.15.0, the Megatron-Core of Megatron-Bridge 25.09 / 25.11) runs each layer's forward
/// inside Transformer Engine's get_cpu_offload_context(enabled, k, num_layers, ...) and commits
/// the layer's output through group_prefetch_offload_commit afterwards. TE's handler
/// (transformer_engine/pytorch/cpu_offload.py AsyncDoubleBufferGroupOffloadHandler, the v1 code
/// path of TE 2.x) treats each layer as a group, the first k of them offloaded, and paces the
/// copies by its layer_window_map (offload_windows below):
///  - forward: layer 0's activations go to the host (d2h stream) right after its forward; at
///    the commit of layer window[c] the d2h stream waits for the compute stream, the compute
///    stream waits for the d2h stream (a late copy stalls the next layer), group c's device
///    buffers are released and the offload of group c+1 is issued;
///  - backward: before the backward of layer window[c-1] the h2d stream waits for the compute,
///    the compute waits for the previous reloads, and group c-1 is reloaded (prefetched ahead
///    of its own backward); before layer 0's backward the compute waits for every reload.
/// Memory: a copy to the host adds its bytes to pinned host memory when it starts and frees
/// the device copy when it ends (TE releases it at the window's synchronisation, on or after
/// the copy's end); a reload allocates on the device when it starts and frees the host copy
/// when it ends; the layer's backward frees the reloaded bytes as it frees any activation.
/// Every saved activation of an offloaded layer is moved (TE marks the tensors its modules
/// save; docs/scenario.md "cpu_offloading" lists what is assumed).
class ActivationOffload {
 public:
  /// `layer_bytes(l)`: the activation bytes layer l keeps for its backward.
  ActivationOffload(const Scenario& sc, std::function<std::int64_t(std::int64_t)> layer_bytes);
  bool enabled() const { return k_ > 0; }
  /// After the forward of layer l (its commit) of microbatch mb.
  void after_forward(RankContext& ctx, std::uint16_t mb, std::int64_t l);
  /// Before the backward of layer l of microbatch mb.
  void before_backward(RankContext& ctx, std::uint16_t mb, std::int64_t l);

  /// TE's layer_window_map for k offloaded groups of `layers`: group i's offload must be done
  /// (and group i+1's starts) at the commit of layer window[i]; in the backward group i is
  /// reloaded before the backward of layer window[i].
  static std::vector<std::int64_t> offload_windows(std::int64_t layers, std::int64_t k);

 private:
  TaskId copy(RankContext& ctx, bool to_host, std::uint16_t mb, std::int64_t group,
              std::initializer_list<TaskId> after);
  std::function<std::int64_t(std::int64_t)> layer_bytes_;
  std::int64_t k_ = 0;
  std::vector<std::int64_t> window_;
  std::int64_t count_ = 0;  ///< TE's offloaded_group_count
  TaskId last_d2h_ = kNone, last_h2d_ = kNone;
};

}  // namespace trainsim::builder
