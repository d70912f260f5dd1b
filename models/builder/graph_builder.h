// Schedule builders: turn a validated scenario into the schedule graph of one training
// iteration (Megatron-LM PTD-P with GPipe / 1F1B / interleaved 1F1B, ZeRO, offload).
// The builder runs the passes of models/builder/ over each rank's program (see
// graph_builder.cpp); this header is its only public entry point.
#pragma once

#include <climits>
#include <cstdint>

#include "models/perf/cost_model.h"
#include "models/hardware/hardware.h"
#include "models/input/scenario.h"
#include "models/graph/schedule_graph.h"

namespace trainsim {

struct BuildOptions {
  /// Build only one representative rank per pipeline stage (tensor rank 0, data rank 0); the
  /// other ranks of its TP group and DP replicas are provably identical to it.
  bool fold = false;
  /// Calibration profile for the memory model's framework overhead and NCCL buffer sizes;
  /// null: the shipped default for the system's GPU (default_calibration).
  const CalibrationProfile* calibration = nullptr;
};

/// Builds the schedule graph of a validated scenario (only a ValidScenario: its derived fields
/// are filled) whose `offload_optimizer.ratio: auto` is resolved (models/run.h prepare_run does
/// both, and decides folding: fold_decision).
ScheduleGraph build_schedule_graph(const ValidScenario& scenario, const SystemSpec& system,
                                   const BuildOptions& options);

/// The tasks of the folded schedule graph of `scenario` (one rank per pipeline stage, the
/// graph build_schedule_graph builds with BuildOptions::fold), counted by the builder itself:
/// its passes emit every rank's program as for a build, into a counting build
/// (builder::GraphBuild::count_only) that records nothing. Every TP peer and DP replica of a
/// stage runs the same program, so the unfolded graph has tp x dp x cp times as many.
/// An unresolved `offload_optimizer.ratio: auto` counts at the scenario's ratio value.
/// Counting stops once the count passes `limit`: it returns a count above `limit` then, not the
/// graph's.
std::int64_t count_schedule_tasks(const ValidScenario& scenario, std::int64_t limit = INT64_MAX);

}  // namespace trainsim
