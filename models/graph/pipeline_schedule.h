// Pipeline schedule arithmetic, as pure functions (no execution), following Megatron-LM's
// megatron/core/pipeline_parallel/schedules.py exactly: the order in which one pipeline rank
// runs the forward and backward passes of its microbatches (and model chunks, interleaved).
//
//  - GPipe (Huang et al. 2019): all forwards, then all backwards (in microbatch order).
//  - 1F1B (PipeDream-Flush, Narayanan et al. SC'21 Sec. 2.2.1): rank r runs
//    min(pp - r - 1, m) warm-up forwards, then alternates one forward / one backward, then
//    drains the remaining backwards.
//  - Interleaved 1F1B (SC'21 Sec. 2.2.2): v model chunks per rank; warm-up
//    (pp - r - 1) * 2 + (v - 1) * pp forwards (all m*v if m == pp), chunk of the k-th forward
//    (k mod (pp*v)) / pp, of the k-th backward v - 1 - that; microbatch id of the k-th step
//    (k / (pp*v)) * pp + k mod pp. Requires m divisible by pp (Megatron's assertion).
#pragma once

#include <cstdint>
#include <vector>

#include "models/input/scenario.h"

namespace trainsim {

struct PipelineStep {
  bool forward = true;   ///< forward or backward pass
  int microbatch = 0;    ///< microbatch index within the iteration, 0 .. m-1
  int chunk = 0;         ///< model chunk (virtual stage) on this rank, 0 .. v-1
  bool operator==(const PipelineStep& o) const {
    return forward == o.forward && microbatch == o.microbatch && chunk == o.chunk;
  }
};

/// Number of warm-up forward steps rank `rank` runs before its first backward
/// (GPipe: all m*v forwards).
int num_warmup_steps(PipelineSchedule schedule, int pp, int rank, int num_microbatches,
                     int virtual_stages);

/// The full order of forward/backward steps that pipeline rank `rank` (0 .. pp-1) runs in one
/// iteration: 2 * m * v steps. `virtual_stages` is 1 unless `schedule` is Interleaved.
/// Throws InputError when the combination is not one Megatron accepts.
std::vector<PipelineStep> pipeline_order(PipelineSchedule schedule, int pp, int rank,
                                         int num_microbatches, int virtual_stages);

/// Megatron-Core's interleaved schedule with combined 1F1B steps (overlap_moe_expert_parallel_comm
/// at pipeline_model_parallel_size > 1; Megatron-LM d98e8a6 megatron/core/pipeline_parallel/
/// schedules.py forward_backward_pipelining_with_interleaving l. 1473-1509, 1542-1729, 1733-1952,
/// 1954-2070, and combined_1f1b.py combined_1f1b_schedule_for_interleaved_pipelining l. 138-278):
///  - warm-up: get_pp_rank_microbatches (l. 929-986) runs one forward more than the interleaved
///    schedule, (pp - r - 1) * 2 + (v - 1) * g + 1 with g = microbatch_group_size_per_vp_stage
///    (default pp, model_parallel_config.py l. 567-568), capped at m v, "to ensure the forward
///    and backward computations are independent in all 1f1b steps". That code has no m == pp
///    special case (pipeline_order's classic one), so none here;
///  - steady state: its k-th step runs forward warm-up + k and backward k as one merged step
///    (forward_backward_helper_wrapper with both ids);
///  - cool-down: the remaining backwards alone.
/// Chunk and microbatch of each id as pipeline_order's interleaved table (g = pp).
struct CombinedOrder {
  /// Warm-up forwards, then each merged step as its forward followed by its backward, then the
  /// cool-down backwards: 2 m v steps.
  std::vector<PipelineStep> steps;
  int warmup = 0;  ///< steps [0, warmup) are the warm-up forwards
  int merged = 0;  ///< merged step k: steps warmup + 2k (forward) and warmup + 2k + 1 (backward)
};
/// The combined order of pipeline rank `rank` (pp > 1, m divisible by pp as pipeline_order's
/// interleaved schedule requires; virtual_stages >= 1).
CombinedOrder combined_interleaved_order(int pp, int rank, int num_microbatches,
                                         int virtual_stages);

/// One batched point-to-point exchange of Megatron-LM 2021's interleaved schedule
/// (megatron/schedules.py forward_backward_pipelining_with_interleaving, read at Megatron-LM
/// commit 0504208; each call of p2p_communication._communicate posts its sends and receives in
/// one batch_isend_irecv and then synchronises the device).
struct PipelineExchange {
  int after_step = -1;         ///< index in pipeline_order it follows; -1: before the first step
  bool send_forward = false;   ///< the output of the last forward to the next stage
  bool send_backward = false;  ///< the input gradient of the last backward to the previous stage
  bool recv_forward = false;   ///< an input from the previous stage (recv_prev)
  bool recv_backward = false;  ///< an output gradient from the next stage (recv_next)
  bool operator==(const PipelineExchange& o) const {
    return after_step == o.after_step && send_forward == o.send_forward &&
           send_backward == o.send_backward && recv_forward == o.recv_forward &&
           recv_backward == o.recv_backward;
  }
};

/// The exchanges pipeline rank `rank` runs in Megatron-LM 2021's interleaved schedule, in
/// order: recv_forward before the first step; after each warm-up forward,
/// send_forward_recv_forward (the last one send_forward_backward_recv_forward_backward, which
/// also receives the first output gradient); after each steady-state forward-backward pair (not
/// after its forward), send_forward_backward_recv_forward_backward; after each cooldown
/// backward, send_backward_recv_backward; with m == pp (all warm-up) a recv_backward before the
/// cooldown. The recv_prev / recv_next conditions are that file's, so a receive may be for a
/// later step than the next one (the first stage runs pp - 1 forwards ahead of the last).
/// Exchanges with nothing to send or receive are left out. Requires pp > 2 (Megatron-LM 2021
/// arguments.py asserts it for the interleaved schedule) and m divisible by pp.
std::vector<PipelineExchange> megatron2021_interleaved_exchanges(int pp, int rank,
                                                                 int num_microbatches,
                                                                 int virtual_stages);

/// Pipeline bubble fraction of the closed form (SC'21 Eq. 1 and Sec. 2.2.2): (p - 1) / m for
/// GPipe and 1F1B, (p - 1) / (v * m) interleaved; bubble time over ideal compute time.
double bubble_fraction(PipelineSchedule schedule, int pp, int num_microbatches,
                       int virtual_stages);

}  // namespace trainsim
