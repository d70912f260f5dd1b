// One run, as a value: the single code path every verb (simulate, replay, validate, and each
// candidate the planner simulates) uses to go from a scenario file to a schedule graph, and from an execution
// record to typed outputs.
//
//   RunRequest ──prepare_run──► PreparedRun ──(an executor: sim::simulate, hw::replay)──►
//   ExecutionRecord ──finish_run──► RunOutputs (memory timeline, trace selection, Summary)
//
// prepare_run does, in order: load and validate the scenario (with --set overrides); choose
// the system (catalog, or `local` from a measured profile) and the calibration profile; apply
// the substitutions a verb needs (validate on the CPU: the local device and the profile's
// precision), each recorded in `notes`; estimate the graph's size and refuse runs above the
// limits (RunEstimate, unless `force`); decide folding; resolve `offload_optimizer.ratio:
// auto` (a planning step that builds trial graphs, above the builder); check host memory;
// build the schedule graph. The command-line programs only map flags to a RunRequest and
// print or write what finish_run returns.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "models/hardware/calibration.h"
#include "models/perf/cost_model.h"
#include "models/graph/execution_record.h"
#include "models/hardware/hardware.h"
#include "models/outputs/memory_timeline.h"
#include "models/input/scenario.h"
#include "models/graph/schedule_graph.h"
#include "models/outputs/summary.h"
#include "models/outputs/trace_writer.h"

namespace trainsim {

/// What a verb asks for.
enum class RunPurpose : std::uint8_t {
  Simulate,  ///< simulate on the scenario's cluster (or `local` with a measured profile)
  Replay,    ///< replay one rank on a real device; the model's memory figures for comparison
  Validate,  ///< simulate and replay on the same device, compared task by task
};

struct RunRequest {
  RunPurpose purpose = RunPurpose::Simulate;
  std::string scenario_path;
  /// Non-empty: the scenario's YAML text (the Python module's dict scenarios, docs/python.md);
  /// `scenario_path` then only names it in messages and anchors its relative paths.
  std::string scenario_text;
  std::vector<std::pair<std::string, std::string>> overrides;  ///< --set key=value
  /// --calibration: a profile JSON; empty means the shipped profile of the system's GPU.
  std::string calibration_path;
  /// Replay / validate: the device the replay runs on, "cpu" or "cuda" (resolved by the
  /// caller: "cuda" only where a GPU is usable).
  std::string device;
  /// Replay with several processes: every rank needs its own tasks (no folding).
  bool unfolded = false;
  /// --force: build and run even above the size limits of check_run_size.
  bool force = false;
  /// Progress messages ("building the schedule graph of ..."); may be empty.
  std::function<void(const std::string&)> progress;
};

/// Size of the graph a scenario builds, known before anything is built or allocated: the
/// builder counts the tasks of one rank per pipeline stage (count_schedule_tasks,
/// models/builder/graph_builder.h: its passes run into a counting build that records nothing),
/// and every TP peer and DP replica runs the same program. tests/models/test_run_estimate.cpp
/// holds the count to the built graph's on every shipped scenario. Bytes and seconds per task
/// from bench_sim_scale's measurement.
struct RunEstimate {
  double tasks = 0;           ///< tasks of the graph as it would be built (folded or not)
  double unfolded_tasks = 0;  ///< tasks without folding
  /// False when the count stopped past twice kMaxRunTasks per stage set (a runaway run):
  /// `tasks` is then a lower bound.
  bool complete = true;
  double memory_bytes = 0;    ///< graph + SimGrid memory of the simulation
  double simulate_s = 0;      ///< wall time of the simulation on one core
};

/// Limits above which prepare_run refuses a run unless RunRequest::force (a runaway run is
/// refused with its estimate and the setting that would fit, never started silently).
constexpr double kMaxRunTasks = 20e6;
constexpr double kMaxRunMemoryBytes = 8.0 * (1ull << 30);

struct PreparedRun {
  explicit PreparedRun(ValidScenario s) : scenario(std::move(s)) {}

  /// Ratio: auto resolved and verb substitutions applied, each change validated again.
  ValidScenario scenario;
  /// The system simulated: the catalog's, or `local` from the profile.
  SystemSpec system;
  /// The system the cost model sees: `system` with the scenario's gpus_per_node (the host CPU
  /// and memory of a node are shared by the GPUs the scenario uses on it).
  SystemSpec cost_system;
  CalibrationProfile profile;
  std::string calibration_source;  ///< e.g. "default profile for A100-SXM4-80GB (...)"
  bool fold = false;
  std::string fold_reason;         ///< why the graph is (or is not) folded
  RunEstimate estimate;
  /// What prepare_run substituted or decided (validate's local device, precision, the offload
  /// ratio chosen by `auto`), in the order it happened.
  std::vector<std::string> notes;
  /// Warnings for stderr (a profile of another GPU than the system's).
  std::vector<std::string> warnings;
  /// Validate and replay on the CPU: the element type the replay runs ("fp32" or "bf16").
  std::string replay_dtype;
  ScheduleGraph graph;

  CostModel cost_model() const { return CostModel(cost_system, profile, scenario->nccl_version); }
};

/// Prepares a run (see the file comment). Throws InputError for every user error, naming the
/// file (or flag), the field and the value.
PreparedRun prepare_run(const RunRequest& request);

/// prepare_run's first steps: the scenario loaded and validated, the system, the cost model's
/// system and the calibration profile chosen, the verb's substitutions applied; no graph, no
/// size check, `ratio: auto` unresolved. The planner's stages (a) and (b) start here, so that a
/// candidate is modelled on the platform its simulation runs on.
PreparedRun prepare_platform(const RunRequest& request);

/// Estimates the graph of a validated scenario (folded as `fold` says).
RunEstimate estimate_run(const ValidScenario& scenario, bool fold);

/// Throws InputError when `estimate` is above kMaxRunTasks or kMaxRunMemoryBytes, with the
/// estimate and the setting that would fit (e.g. `simulation.fold: true`); `what` names the run.
void check_run_size(const ValidScenario& scenario, const RunEstimate& estimate, bool fold);

/// Whether a scenario is folded, and why: `simulation.fold: true|false` as set; `auto` folds
/// whenever the folded graph is smaller (the TP peers and DP replicas of a stage run the same
/// program by construction: ParallelLayout, and the summary says so).
std::pair<bool, std::string> fold_decision(const ValidScenario& scenario);
/// The same with the scenario's estimate_run (folded or not) already counted.
std::pair<bool, std::string> fold_decision(const ValidScenario& scenario, const RunEstimate& estimate);

/// `offload_optimizer.ratio: auto`: the smallest ratio on a 0.01 grid whose program-order GPU
/// peak (graph built with that ratio) fits in the GPU memory; 1.0 when none fits (the run
/// then reports oom). Bisection: the peak falls monotonically as the ratio rises (every
/// parameter moved to the CPU removes 12 B of GPU state and 4 B of step-time fp32 gradient).
/// Stores the result in sc.zero.offload_optimizer.ratio (ratio_auto stays true, so the summary
/// can say the ratio was chosen; `sc` is validated again) and returns it. No-op returning the
/// ratio when not auto.
double resolve_offload_ratio(ValidScenario& sc, const SystemSpec& system,
                             const CalibrationProfile& profile);

struct FinishOptions {
  std::string trace_ranks;  ///< --trace-ranks (empty: the default selection)
};

struct RunOutputs {
  MemoryTimeline memory;
  TraceSelection selection;
  Summary summary;
};

/// Typed outputs of an executed run: the memory timeline, the trace selection and the summary
/// (modelled figures; a replay adds its measured ones with Summary::measured).
RunOutputs finish_run(const PreparedRun& run, const ExecutionRecord& record,
                      const FinishOptions& options);

}  // namespace trainsim
