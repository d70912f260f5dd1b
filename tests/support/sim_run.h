// One scenario built and simulated on its catalog system with the system's default profile,
// and the expert-parallel all-to-alls of its graph: the shared setup of the MoE overlap tests
// (tests/sim/test_a2a_overlap.cpp, test_a2a_overlap_interleaved.cpp,
// test_shared_expert_overlap.cpp).
#pragma once

#include "models/builder/graph_builder.h"
#include "models/hardware/calibration.h"
#include "models/hardware/hardware.h"
#include "models/input/scenario.h"
#include "models/perf/cost_model.h"
#include "sim/executor.h"

namespace trainsim::test_support {

/// The graph and its simulated record.
struct SimRun {
  ScheduleGraph graph;
  ExecutionRecord record;
  double duration_s(TaskId id) const { return record.end_s[id] - record.start_s[id]; }
};

/// Builds `sc` unfolded-or-folded as the builder chooses and simulates it.
inline SimRun simulate_scenario(const Scenario& sc) {
  const SystemSpec& system = find_system(sc.cluster.system);
  const CalibrationProfile profile = default_calibration(system.gpu.name);
  BuildOptions o;
  o.calibration = &profile;
  SimRun r{build_schedule_graph(validated(sc), system, o), {}};
  r.record = sim::simulate(r.graph, sc, system, CostModel(system, profile));
  return r;
}

/// An expert-parallel collective (the MoE dispatch or combine all-to-all).
inline bool is_expert_a2a(const ScheduleGraph& g, TaskId id) {
  return g.task(id).kind == TaskKind::Collective && g.op(id).group == GroupKind::Expert;
}

}  // namespace trainsim::test_support
