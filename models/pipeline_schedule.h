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

#include "models/scenario.h"

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

/// Pipeline bubble fraction of the closed form (SC'21 Eq. 1 and Sec. 2.2.2): (p - 1) / m for
/// GPipe and 1F1B, (p - 1) / (v * m) interleaved; bubble time over ideal compute time.
double bubble_fraction(PipelineSchedule schedule, int pp, int num_microbatches,
                       int virtual_stages);

}  // namespace trainsim
