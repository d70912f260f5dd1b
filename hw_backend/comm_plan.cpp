// Communicator plan of a multi-process replay (comm_plan.h).
#include "hw_backend/comm_plan.h"

#include <algorithm>
#include <map>
#include <stdexcept>
#include <string>

#include "models/errors.h"

namespace trainsim::hw {

std::vector<std::vector<int>> CommPlan::members(const ScheduleGraph& graph) const {
  std::vector<std::vector<int>> out;
  for (std::uint32_t g : groups) {
    std::vector<int> m;
    for (RankId r : graph.group(g).ranks) m.push_back(static_cast<int>(r));
    out.push_back(std::move(m));
  }
  return out;
}

bool CommPlan::uses_nccl(const ScheduleGraph& graph, TaskId id) const {
  const Task& t = graph.task(id);
  if (t.kind != TaskKind::Collective && t.kind != TaskKind::Send && t.kind != TaskKind::Recv)
    return false;
  return t.group < comm_of_group.size() && comm_of_group[t.group] >= 0;
}

int CommPlan::rank_in_group(const ScheduleGraph& graph, std::uint32_t group, RankId rank) {
  const auto& ranks = graph.group(group).ranks;
  auto it = std::find(ranks.begin(), ranks.end(), rank);
  return it == ranks.end() ? -1 : static_cast<int>(it - ranks.begin());
}

CommPlan plan_communicators(const ScheduleGraph& g, std::int64_t nprocs) {
  if (nprocs < 1 || nprocs > g.world_size)
    throw InputError("replay: --nprocs " + std::to_string(nprocs) + " must be between 1 and the " +
                     std::to_string(g.world_size) + " ranks of the scenario");
  for (std::int64_t r = 0; r < nprocs; ++r)
    if (g.rank_index(static_cast<RankId>(r)) == kNone)
      throw InputError("replay: rank " + std::to_string(r) +
                       " is not simulated in the schedule graph (a folded graph?); a "
                       "multi-process replay needs every replayed rank's own tasks");
  CommPlan plan;
  plan.nprocs = nprocs;
  plan.comm_of_group.assign(g.groups().size(), -1);
  auto present = [&](RankId r) { return static_cast<std::int64_t>(r) < nprocs; };

  // Per group: the (rank -> ordered task ids) of the present ranks that use it.
  std::map<std::uint32_t, std::map<RankId, std::vector<TaskId>>> uses;
  for (std::int64_t r = 0; r < nprocs; ++r)
    for (TaskId id : g.tasks_of_rank(static_cast<RankId>(r))) {
      const Task& t = g.task(id);
      if (t.kind != TaskKind::Collective && t.kind != TaskKind::Send && t.kind != TaskKind::Recv)
        continue;
      TRAINSIM_CHECK(t.group != kNone && t.group < g.groups().size(),
                     "replay: communication task " + std::to_string(id) + " (" + g.label(id) +
                         ") has no group");
      uses[t.group][static_cast<RankId>(r)].push_back(id);
    }

  for (const auto& [group, by_rank] : uses) {
    const CommGroup& grp = g.group(group);
    if (grp.ranks.size() < 2) continue;
    if (!std::all_of(grp.ranks.begin(), grp.ranks.end(), present)) continue;
    const auto desc = [&](TaskId id) { return std::to_string(id) + " (" + g.label(id) + ")"; };
    const std::string gname = "group " + std::to_string(group) + " (" + to_string(grp.kind) + ")";
    bool p2p = false, coll = false;
    for (const auto& [rank, ids] : by_rank)
      for (TaskId id : ids) (g.task(id).kind == TaskKind::Collective ? coll : p2p) = true;
    TRAINSIM_CHECK(!(p2p && coll), "replay: " + gname + " carries both collectives and messages");
    if (coll) {
      // Every member issues the same collectives (match ids) in the same order.
      const RankId first = grp.ranks.front();
      auto seq = [&](RankId r) {
        std::vector<std::uint32_t> s;
        auto it = by_rank.find(r);
        if (it != by_rank.end())
          for (TaskId id : it->second) s.push_back(g.task(id).match);
        return s;
      };
      const auto ref = seq(first);
      for (RankId r : grp.ranks) {
        const auto s = seq(r);
        if (s != ref) {
          std::size_t k = 0;
          while (k < s.size() && k < ref.size() && s[k] == ref[k]) ++k;
          TRAINSIM_CHECK(
              false,
              "replay: the members of " + gname + " issue its collectives in different orders: "
              "rank " + std::to_string(first) + " has " + std::to_string(ref.size()) +
              ", rank " + std::to_string(r) + " has " + std::to_string(s.size()) +
              ", first difference at position " + std::to_string(k) +
              (k < s.size() ? " (rank " + std::to_string(r) + "'s task " +
                                  desc(by_rank.at(r)[k]) + ")"
                            : std::string()) +
              "; NCCL would wait forever");
        }
      }
    } else {
      // A directed channel [src, dst]: src only sends, dst only receives, same message order.
      TRAINSIM_CHECK(grp.ranks.size() == 2, "replay: message " + gname + " has " +
                                                std::to_string(grp.ranks.size()) +
                                                " ranks, expected [src, dst]");
      const RankId src = grp.ranks[0], dst = grp.ranks[1];
      std::vector<std::uint32_t> sent, received;
      for (const auto& [rank, ids] : by_rank)
        for (TaskId id : ids) {
          const Task& t = g.task(id);
          const bool ok = (t.kind == TaskKind::Send && rank == src && t.peer == std::int32_t(dst)) ||
                          (t.kind == TaskKind::Recv && rank == dst && t.peer == std::int32_t(src));
          TRAINSIM_CHECK(ok, "replay: task " + desc(id) + " does not fit the channel " +
                                 std::to_string(src) + " -> " + std::to_string(dst) + " of " +
                                 gname);
          (t.kind == TaskKind::Send ? sent : received).push_back(t.match);
        }
      TRAINSIM_CHECK(sent == received,
                     "replay: rank " + std::to_string(src) + " posts " +
                         std::to_string(sent.size()) + " messages to rank " +
                         std::to_string(dst) + " in an order (or number) that rank does "
                         "not receive them in (" + std::to_string(received.size()) +
                         " receives); NCCL would wait forever");
    }
    plan.comm_of_group[group] = static_cast<int>(plan.groups.size());
    plan.groups.push_back(group);
  }
  return plan;
}

}  // namespace trainsim::hw
