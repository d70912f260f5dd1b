// Comparison of a simulated and a measured execution of one schedule graph, task by task
// (docs/architecture.md: "everything the simulator predicts can be put next to something measured").
//
// Both records come from the same graph, so task ids align exactly; only the tasks of the
// compared rank (the one the replay ran) are compared. Errors are (simulated - measured) /
// measured, as `validate --json` reports them (docs/cli.md).
//
// Per-task-kind groups: compute (TaskKind::Compute), copies (CopyH2D, CopyD2H), collectives
// (Collective, Send, Recv: the communication tasks), optimizer (OptimizerGpu, OptimizerCpu).
// A relative error is meaningless for a task that took (nearly) no measured time (a collective
// of one rank is a no-op), so the distribution of relative errors covers tasks whose measured
// duration is at least kMinRelativeTaskS; sums and absolute errors cover every task.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "models/graph/execution_record.h"
#include "models/graph/schedule_graph.h"

namespace trainsim::validation {

constexpr double kMinRelativeTaskS = 10e-6;

enum class KindGroup { Compute, Copies, Collectives, Optimizer, kCount };
const char* to_string(KindGroup g);
KindGroup kind_group(TaskKind k);

struct TaskComparison {
  TaskId task = 0;
  std::string label;
  KindGroup group = KindGroup::Compute;
  double simulated_s = 0;
  double measured_s = 0;
  double error() const { return (simulated_s - measured_s) / measured_s; }  ///< relative
};

struct GroupStats {
  std::size_t tasks = 0;
  double simulated_sum_s = 0;
  double measured_sum_s = 0;
  std::size_t relative_tasks = 0;  ///< tasks with measured >= kMinRelativeTaskS
  double error_p10 = 0, error_median = 0, error_p90 = 0;  ///< relative, over relative_tasks
  double mean_abs_error_s = 0;
};

struct MemoryFigures {
  std::int64_t simulated_peak_bytes = 0;
  std::int64_t measured_peak_bytes = 0;
  MemVector simulated_by_category{};  ///< the model's breakdown at its peak
};

struct Comparison {
  RankId rank = 0;
  double simulated_iteration_s = 0;
  double measured_iteration_s = 0;
  MemoryFigures memory;
  std::vector<TaskComparison> tasks;                        ///< program order of the rank
  GroupStats groups[static_cast<int>(KindGroup::kCount)];
  std::vector<std::size_t> largest;                          ///< indexes into tasks, by |sim-meas|

  double iteration_time_error() const {
    return (simulated_iteration_s - measured_iteration_s) / measured_iteration_s;
  }
  double peak_memory_error() const {
    return double(memory.simulated_peak_bytes - memory.measured_peak_bytes) /
           double(memory.measured_peak_bytes);
  }
};

/// Aligns the two records on the tasks of `rank` (both must have run every one of them: a
/// missing task is a std::logic_error naming it). Iteration times are each record's span over
/// the rank's tasks. `largest_count` mismatches are kept.
Comparison compare_records(const ScheduleGraph& graph, RankId rank, const ExecutionRecord& simulated,
                           const ExecutionRecord& measured, const MemoryFigures& memory,
                           std::size_t largest_count = 10);

/// The comparison as JSON: iteration_time_error, peak_memory_error, iteration_time_s
/// {simulated, measured}, peak_memory_bytes {simulated, measured}, simulated_peak_by_category,
/// per_kind {compute, copies, collectives, optimizer: GroupStats}, largest_mismatches [...],
/// tasks_compared. Callers add context keys (scenario, device, calibration, notes).
nlohmann::json comparison_json(const Comparison& c);

/// A self-contained HTML report (no external resources: inline CSS and SVG): the headline
/// errors, the per-kind table, the largest mismatches, and the simulated and measured timelines
/// of the rank one above the other on one time axis (one lane per stream). `context` (a JSON
/// object of strings / numbers, e.g. scenario, device, calibration) is listed at the top;
/// `notes` below.
std::string html_report(const ScheduleGraph& graph, const Comparison& c,
                        const ExecutionRecord& simulated, const ExecutionRecord& measured,
                        const nlohmann::json& context, const std::vector<std::string>& notes);

}  // namespace trainsim::validation
