// A measured execution read back from the trace `trainsim replay --trace` wrote (models/
// trace_writer.h), so that `trainsim validate --measured-trace` can compare a replay recorded
// on another machine (a GPU machine with the replay-only build, validation/gpu_check.sh) with
// the simulation of the same graph here, without replaying again.
//
// What is read: otherData.measured (must be true), otherData.scenario (must be the scenario's
// name), otherData.executor; the complete events (ph "X") of one rank (their pid), each with
// args.task, ts and dur in microseconds; that rank's "allocator" counters (args.allocated,
// args.reserved), whose largest values are the measured peaks. Every task of the rank in the
// graph must be in the trace under its own label, and no other: a trace recorded from another
// graph (other --set values, another trainsim version) is refused, naming the first task that
// differs.
#pragma once

#include <string>

#include "models/execution_record.h"
#include "models/schedule_graph.h"

namespace trainsim::validation {

struct MeasuredTrace {
  ExecutionRecord record;  ///< start_s / end_s of the rank's tasks (NaN elsewhere), peaks
  RankId rank = 0;         ///< the replayed rank (the events' pid)
  std::string executor;    ///< otherData.executor, e.g. "libtorch-2.11.0-cuda"
  bool cuda = false;       ///< the executor ran on a CUDA device
};

/// "cuda" when the trace's otherData.executor ran on a CUDA device, else "cpu" (the device
/// validate prepares the run for). Throws InputError for an unreadable file.
std::string measured_trace_device(const std::string& path);

/// Reads `path` for the graph of the scenario named `scenario_name`. Throws InputError naming
/// the file, the field and the value for anything that does not fit.
MeasuredTrace load_measured_trace(const std::string& path, const ScheduleGraph& graph,
                                  const std::string& scenario_name);
/// The same, from the file's text (`source` names it in messages; fuzz/fuzz_measured_trace).
MeasuredTrace parse_measured_trace(const std::string& text, const std::string& source,
                                   const ScheduleGraph& graph, const std::string& scenario_name);

}  // namespace trainsim::validation
