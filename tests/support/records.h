// Execution records made by hand for tests of the outputs (memory timeline, summary, trace):
// no executor, so the times are known exactly.
#pragma once

#include <cmath>

#include "models/graph/execution_record.h"
#include "models/graph/schedule_graph.h"

namespace trainsim::test_support {

/// Every simulated rank runs its own tasks back to back in program order, the k-th in
/// [k, k + 1) seconds; ranks do not wait for each other. The memory peaks of this record are
/// the program-order peaks (models/memory/zero_offload.h program_order_peak_gpu_bytes).
inline ExecutionRecord program_order_record(const ScheduleGraph& g) {
  ExecutionRecord r;
  r.start_s.assign(g.num_tasks(), NAN);
  r.end_s.assign(g.num_tasks(), NAN);
  for (RankId rank : g.simulated_ranks()) {
    double t = 0;
    for (TaskId id : g.tasks_of_rank(rank)) {
      r.start_s[id] = t;
      r.end_s[id] = t + 1;
      t += 1;
    }
  }
  return r;
}

}  // namespace trainsim::test_support
