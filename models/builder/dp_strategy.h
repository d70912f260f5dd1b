// The data-parallel gradient/parameter-sync strategies of the schedule builder: one per
// flavour, behind one small interface of hooks the pipeline skeleton calls as it walks a
// rank's program (as Megatron-Core's distributed/ and DeepSpeed's ZeRO stage classes own their
// communication and memory while the training loop only calls their hooks).
//
//   none         stage 0, dp = 1: nothing to synchronize (dp_none.cpp)
//   ddp_buckets  stage 0, dp > 1: Megatron DDP all-reduce buckets (dp_ddp_buckets.cpp)
//   zero12       ZeRO-1/2: reduce-scatter buckets, fp16 parameter all-gather after the step
//                (dp_zero12.cpp)
//   zero3        ZeRO-3: per-unit parameter gathers with prefetch, reduce-scatter buckets
//                (dp_zero3.cpp)
//
// Adding a strategy: a new file defining its class and its maker, then in dp_strategy.cpp the
// maker's declaration and the line of make_data_parallel_strategy that picks it.
//
// Hooks run at fixed points of the program, so a strategy's tasks land exactly where its
// synchronization happens in the real run; a hook that emits tasks appends them to the rank's
// program at that point.
#pragma once

#include <cstdint>
#include <map>
#include <memory>

#include "models/builder/optimizer_step.h"
#include "models/builder/rank_context.h"
#include "models/graph/pipeline_schedule.h"

namespace trainsim::builder {

/// A unit of parameters the skeleton walks: the embedding (word + position, first stage), one
/// transformer layer (global index), the output layer (final LayerNorm and the output
/// projection, last stage).
enum class UnitKind : std::uint8_t { Embedding, Layer, Output };
struct Unit {
  UnitKind kind = UnitKind::Layer;
  std::int64_t layer = -1;  ///< global layer index for UnitKind::Layer
};

/// A compute task the skeleton has just emitted (the last task added, ctx.last_compute).
struct Block {
  Unit unit;
  Phase phase = Phase::Forward;  ///< Forward, Recompute or Backward
  bool first = false;  ///< the unit's first block in this pass (attention forward, MLP backward)
  bool last = false;   ///< the unit's last block in this pass (MLP forward, attention backward)
  TaskId task = kNone;
};

/// The tasks after which the gradients of each unit are complete for the iteration's last
/// microbatch (what Megatron DDP's per-parameter hooks wait for).
struct BackwardTails {
  std::map<std::int64_t, TaskId> layers;  ///< per local layer: its last backward task
                                          ///< (after the TP collective that ends it)
  TaskId embedding = kNone;  ///< the embedding backward (first stage)
  TaskId output = kNone;     ///< the logits backward compute (last stage)
};

class DataParallelStrategy {
 public:
  virtual ~DataParallelStrategy() = default;
  /// "none", "ddp_buckets", "zero12", "zero3".
  virtual const char* name() const = 0;

  /// Memory the rank holds before its first task: model states, NCCL buffers, framework
  /// (default: rank_state_bytes of models/memory/zero_offload.h, which covers ZeRO stages 0-3).
  virtual RankStateBytes initial_memory(const RankContext& ctx) const;

  // ---- during the pipeline steps, in program order
  /// A forward or backward step (one microbatch of one model chunk) begins / has ended.
  virtual void on_step_begin(RankContext&, const PipelineStep&) {}
  virtual void on_step_end(RankContext&, const PipelineStep&) {}
  /// Before the first block of `unit` in the forward (`forward`) or backward pass; a
  /// Recompute pass belongs to the backward, so a checkpointed layer's hook comes before its
  /// re-run (a checkpoint unit's layers in forward order, before the unit's backward).
  virtual void before_unit(RankContext&, bool /*forward*/, const Unit&) {}
  /// Right after a compute block was emitted.
  virtual void on_block_computed(RankContext&, const Block&) {}
  /// The gradients of `unit` are complete for this microbatch after `ready`.
  virtual void on_grads_ready(RankContext&, const Unit&, TaskId /*ready*/) {}

  // ---- after the last step
  /// Reduces the gradients not yet reduced; returns the last data-parallel synchronization
  /// task (kNone: none).
  virtual TaskId reduce_gradients(RankContext&, const BackwardTails&) { return kNone; }
  /// What the optimizer step updates and waits for.
  virtual OptimizerStepInputs optimizer_step(const RankContext& ctx) const = 0;
  /// After the optimizer step (ZeRO-1/2: all-gather of the updated parameters).
  virtual void after_optimizer_step(RankContext&, const OptimizerStepTasks&) {}
};

/// Host work of DeepSpeed ZeRO-3's hooks per fetched submodule of `tensors` non-persistent
/// parameter tensors, in eager ops (at the profile's eager_op_s; issue 31; docs/scenario.md
/// "host_model"). No published per-fetch host figure was found (DeepSpeed PR #6649 reports
/// only an end-to-end 40% on HPU from coalescing hooks), so it counts the torch calls the hook
/// path makes per fetched tensor, DeepSpeed master edaa722 (2026-08-22):
///  - the gather (partition_parameters.py _all_gather_sequential, l. 1345-1376): torch.empty of
///    the gather buffer, narrow and view of the gathered tensor (the .to() calls on a tensor
///    already on the device and in its dtype return it unchanged: not counted);
///  - the wait (partitioned_param_coordinator.py fetch_sub_module, l. 398-415): the work
///    handle's wait (a stream wait), an accelerator Event and its record, and the compute
///    stream's wait_stream on the all-gather stream;
///  - the release (partition_parameters.py free_param, l. 308-323, from release_sub_module):
///    record_stream and torch.empty(0) replacing param.data.
/// 8 per tensor. The all_gather_into_tensor call itself is the gather task's nccl_call_s. Not
/// counted: the Python bookkeeping (trace_prologue, the parameter sets, the prefetch queue walk;
/// the profile's module_overhead_s is 0, unmeasured), and, for a submodule of several tensors,
/// the coalesced wait's per-rank narrow and record_stream of each tensor (AllGatherCoalesced
/// Handle.wait, l. 750-790): so this is a lower bound there. The hook calls of a submodule whose
/// tensors are all gathered already (no fetch) are not counted either.
double zero3_fetch_eager_ops(std::int64_t tensors);

/// The strategy for the scenario's ZeRO stage and data-parallel size, for one rank.
std::unique_ptr<DataParallelStrategy> make_data_parallel_strategy(const RankContext& ctx);

}  // namespace trainsim::builder
