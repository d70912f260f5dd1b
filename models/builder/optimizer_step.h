// The optimizer step at the end of the iteration: fused Adam on the GPU over the GPU-stepped
// parameters and, with offload, CPU Adam over the CPU-stepped ones (models/builder/offload.h),
// with no dependency between the two (Twin-Flow, DeepSpeed ZeRO-Offload++). The data-parallel
// strategy says what is stepped where and what the step waits for.
#pragma once

#include <cstdint>
#include <vector>

#include "models/builder/rank_context.h"

namespace trainsim::builder {

struct OptimizerStepInputs {
  std::int64_t gpu_params = 0;  ///< parameters fused Adam updates on the GPU
  std::int64_t cpu_params = 0;  ///< parameters CPU Adam updates on the host (offload)
  /// fp32 gradients the GPU step reads, alive only during it (Megatron fp16
  /// main_grad.float(), DeepSpeed's fp32 gradient partition of the GPU part).
  std::int64_t fp32_grad_bytes = 0;
  TaskId last_d2h = kNone;       ///< both steps wait for the last gradient copy to the host
  TaskId last_grad_h2d = kNone;  ///< the GPU step waits for the last fp32 gradient copy back
  /// Buffers (negative bytes) freed by the first step task: every reduction and copy is done
  /// then (DeepSpeed synchronizes its streams before the step).
  std::vector<MemEffect> buffers_freed;
};

struct OptimizerStepTasks {
  TaskId final_compute = kNone;  ///< the compute path's tail before the step
  TaskId gpu_step = kNone;       ///< the GPU Adam step (kNone: nothing stepped on the GPU)
  TaskId last_h2d = kNone;       ///< the last updated-parameter copy host->device (offload)
};

/// Megatron's optimizer over replicated states (no ZeRO): every parameter of the rank stepped
/// on the GPU; fp16 training first casts main_grad to fp32 (4 B/param; bf16 main_grad is fp32
/// already).
OptimizerStepInputs replicated_optimizer_step(const Scenario& sc, std::int64_t pp_stage);

/// Emits the step after `final_compute` and `last_sync` (the last gradient synchronization).
OptimizerStepTasks emit_optimizer_step(RankContext& ctx, OptimizerStepInputs in,
                                       TaskId final_compute, TaskId last_sync);

}  // namespace trainsim::builder
