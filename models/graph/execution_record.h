// What an executor (the simulator or the replay backend) reports for one iteration: when each
// task of the schedule graph started and ended. The trace writer and the summary are computed
// from a graph plus a record, so simulated and measured outputs share one schema.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "models/graph/schedule_graph.h"

namespace trainsim {

struct ExecutionRecord {
  std::vector<double> start_s;   ///< per task id; NaN for a task that did not run
  std::vector<double> end_s;     ///< per task id
  bool measured = false;         ///< false: simulated; true: replayed on hardware
  std::string executor;          ///< "simgrid-3.32", "libtorch-cpu", "cuda:0 (NVIDIA H100)" ...
  std::string device;            ///< catalog system or the local device name
  double wall_time_s = 0;        ///< host wall time the executor took
  std::uint64_t activities = 0;  ///< simulator: activities run (for the speed benchmark)
  /// Measured only: allocator bytes in use / reserved over time (time_s, bytes) samples.
  std::vector<std::pair<double, std::int64_t>> allocated_bytes_samples;
  std::vector<std::pair<double, std::int64_t>> reserved_bytes_samples;
  /// Measured only: the allocator's largest bytes in use / reserved over the iteration,
  /// including peaks inside a task that the per-task samples miss; -1 when not measured.
  std::int64_t peak_allocated_bytes = -1;
  std::int64_t peak_reserved_bytes = -1;
  /// Free-form notes the summary repeats (e.g. which parts a replay substituted).
  std::vector<std::string> notes;
  /// Measured only, per task id (empty when not reported): how a replay ran a communication
  /// task: "nccl", "device-local copy" (its peers are absent), "no-op" (a group of one); ""
  /// for a task that ran its own work or did not run. The replay's trace shows it per event.
  std::vector<std::string> replayed_as;

  /// Simulated with the host timeline (sim/host_thread.h) only; empty otherwise. Per task id:
  /// when the host finished issuing it, when it started issuing it, and how long the task's
  /// start waited for the issue after its dependencies were done (device idle for the host).
  std::vector<double> host_issue_end_s;
  std::vector<double> host_issue_start_s;
  std::vector<double> host_wait_s;
  /// Per synchronisation point (graph.host_syncs order): when the host began waiting for the
  /// device and when it went on.
  std::vector<double> sync_wait_start_s;
  std::vector<double> sync_wait_end_s;

  double iteration_time_s() const;  ///< latest end over all tasks minus earliest start (0)
  /// Measured: the allocator's peak, the larger of its recorded peak and the samples (-1 when
  /// neither was measured). The summary and the trace both report these.
  std::int64_t measured_peak_allocated_bytes() const;
  std::int64_t measured_peak_reserved_bytes() const;
};

}  // namespace trainsim
