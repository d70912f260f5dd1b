// Which communication of a multi-process replay goes through NCCL (hw_backend/replay.h,
// ReplayOptions::nprocs): one process per GPU replays world ranks 0 .. nprocs-1 of the
// schedule graph; a communicator exists for every group of the graph (a tensor-, data- or
// embedding-parallel group, or one directed pipeline channel src -> dst) whose ranks are all
// among those processes and which has more than one rank. Collectives and messages on such a
// group run through NCCL; the others are device-local copies (their peers are absent), as in a
// single-process replay.
//
// Every process computes the same plan from the same graph, so all create the same
// communicators in the same order (kernels/nccl_comm.h make_group_communicators is collective).
// The plan also checks what NCCL needs to make progress: the members of a communicator issue
// its collectives in the same order, and a channel's sender posts its messages in the order its
// receiver takes them. Pure (no torch, no CUDA): tests/hw_backend/test_comm_plan.cpp.
#pragma once

#include <cstdint>
#include <vector>

#include "models/graph/schedule_graph.h"

namespace trainsim::hw {

struct CommPlan {
  std::int64_t nprocs = 1;
  /// Graph group indices that get a communicator, ascending (the creation order).
  std::vector<std::uint32_t> groups;
  /// Per graph group index: position in `groups`, or -1 (no communicator).
  std::vector<int> comm_of_group;

  /// The member lists (world ranks in the group's ring order) of `groups`, in order: the
  /// argument of kernels::nccl::make_group_communicators.
  std::vector<std::vector<int>> members(const ScheduleGraph& graph) const;
  /// Whether task `id` (a Collective, Send or Recv) runs through NCCL.
  bool uses_nccl(const ScheduleGraph& graph, TaskId id) const;
  /// Position of world rank `rank` in `group` (its rank in the communicator); -1 if absent.
  static int rank_in_group(const ScheduleGraph& graph, std::uint32_t group, RankId rank);
};

/// The plan for `nprocs` processes replaying world ranks 0 .. nprocs-1. Throws InputError when
/// nprocs is outside [1, world_size] or a replayed rank is not simulated (a folded graph);
/// std::logic_error when a communicator's members would issue its operations in different
/// orders (NCCL would hang), naming the group, the ranks and the tasks.
CommPlan plan_communicators(const ScheduleGraph& graph, std::int64_t nprocs);

}  // namespace trainsim::hw
