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

#include <nlohmann/json.hpp>

#include "models/graph/execution_record.h"
#include "models/graph/schedule_graph.h"

namespace trainsim::validation {

/// A replay's trace file, read and parsed once: validate needs its device before it builds
/// the graph that measured_record() then checks the spans against.
struct MeasuredTraceFile {
  std::string source;    ///< the file, named in messages
  nlohmann::json root;   ///< checked: a "traceEvents" array and otherData.measured true
  std::string executor;  ///< otherData.executor, e.g. "libtorch-2.11.0-cuda"
  /// "cuda" when the executor ran on a CUDA device, else "cpu" (the device validate prepares
  /// the run for).
  std::string device() const;
};

/// Reads and checks `path` (parse_measured_trace). Throws InputError naming the file for a
/// directory or an unreadable file.
MeasuredTraceFile read_measured_trace(const std::string& path);
/// Parses a trace's text (`source` names it in messages; fuzz/fuzz_measured_trace). Throws
/// InputError for invalid JSON (models/json_input.h), a file that is not a replay's trace or a
/// simulated trace.
MeasuredTraceFile parse_measured_trace(const std::string& text, const std::string& source);

struct MeasuredTrace {
  ExecutionRecord record;  ///< start_s / end_s of the rank's tasks (NaN elsewhere), peaks
  RankId rank = 0;         ///< the replayed rank (the events' pid)
};

/// The measured record of `file` for the graph of the scenario named `scenario_name`. Throws
/// InputError naming the file, the field and the value for anything that does not fit.
MeasuredTrace measured_record(const MeasuredTraceFile& file, const ScheduleGraph& graph,
                              const std::string& scenario_name);

}  // namespace trainsim::validation
