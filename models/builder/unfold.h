// Partial folding (scenario `variability:`, docs/architecture.md "Folding"): which ranks a
// folded graph simulates when the cluster is not symmetric, which simulated rank stands for
// each world rank, and the GPU speed each simulated rank runs at.
//
// A folded graph simulates one rank per pipeline stage (tensor rank 0, data rank 0) because
// the TP peers and DP replicas of a stage run the same program at the same speed. A GPU that
// differs breaks that symmetry for the ranks that wait on it:
//
//  - its tensor-parallel group: Megatron's TP collectives sit on the compute path of every
//    layer (forward and backward), so the group advances at its slowest member's pace. The
//    group of a rank the scenario names (a slow GPU, a GPU behind a slow NIC or NVLink port:
//    named_asymmetric_ranks) is simulated in full, each member at its own speed, its TP
//    collectives between simulated peers;
//  - its pipeline replica (the data-parallel rank's pp stages): the slow stage delays the
//    messages of its replica's other stages, so every stage of that replica is simulated (one
//    rank per TP group, at the group's slowest speed: the pace the group keeps);
//  - the other replicas wait for it only in the data-parallel collectives, whose ring joins the
//    simulated replicas' ranks: they stay folded onto one representative replica (data rank 0,
//    or the lowest data rank that is not unfolded).
//
// With gpu_speed_cv > 0 every GPU differs, and simulating every replica would unfold the whole
// graph (tp x dp times the folded tasks). The data-parallel gradient reduction is a barrier:
// the iteration ends when the slowest replica's last stage has reduced. Under 1F1B with m
// microbatches a replica whose stages take c_s per microbatch (forward + backward) finishes
// after about
//
//     T = sum_s c_s + (m - 1) max_s c_s
//
// (the fill and drain pass every stage once; in the steady state the slowest stage sets the
// pace: Narayanan et al. SC'21 Sec. 2.2's bubble argument with unequal stages). A TP group
// keeps its slowest member's pace, so c_s is proportional to 1 / min over the group of the
// speeds (equal stage work assumed: Megatron splits layers evenly). The replica with the
// largest T decides the barrier and is simulated (its stages at their groups' slowest
// speeds); the others are folded onto one representative, the replica with the median T,
// which stands for their per-rank figures. The unfolded graph is then at most 2 pp + (the
// named ranks' groups and replicas) simulated ranks, against pp folded: bounded, whatever the
// cluster's size. What this leaves out: a replica whose T is close to the largest but which the
// closed form misorders (first and last stages carry the embedding and the loss, so stage
// work is not exactly equal); its time is not simulated.
#pragma once

#include <cstdint>
#include <vector>

#include "models/graph/schedule_graph.h"
#include "models/input/scenario.h"

namespace trainsim::builder {

struct UnfoldPlan {
  /// The ranks to build, in emission order (pipeline stage, then data rank, then tensor rank).
  std::vector<RankCoords> ranks;
  /// Per world rank, the simulated rank standing for it; empty when the plan is today's fold
  /// (one rank per stage, tensor and data rank 0) or no fold.
  std::vector<RankId> representatives;
  /// Per entry of `ranks`, its GPU's speed factor (empty: all 1).
  std::vector<double> speeds;
  std::vector<ScheduleGraph::UnfoldedRanks> unfolded;
};

/// The ranks a graph of `sc` (validated) simulates, folded (`fold`) or not.
UnfoldPlan plan_unfolding(const Scenario& sc, bool fold);

}  // namespace trainsim::builder
