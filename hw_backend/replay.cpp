// The torch-free half of the replay executor: which rank, in which order (replay.h).
#include "hw_backend/replay.h"

#include <queue>
#include <stdexcept>
#include <string>
#include <unordered_map>

#include "hw_backend/executor.h"
#include "models/errors.h"

namespace trainsim::hw {

std::vector<TaskId> replay_order(const ScheduleGraph& graph, std::int64_t rank) {
  if (rank < 0 || graph.rank_index(static_cast<RankId>(rank)) == kNone) {
    std::string list;
    for (RankId r : graph.simulated_ranks()) {
      if (list.size() > 60) {
        list += ", ...";
        break;
      }
      list += (list.empty() ? "" : ", ") + std::to_string(r);
    }
    throw InputError("replay: --rank " + std::to_string(rank) +
                     " is not simulated in the schedule graph (simulated ranks: " + list + ")");
  }
  const std::vector<TaskId> program = graph.tasks_of_rank(static_cast<RankId>(rank));
  std::unordered_map<TaskId, std::size_t> position;
  position.reserve(program.size());
  for (std::size_t i = 0; i < program.size(); ++i) position.emplace(program[i], i);

  // Program order must already respect every dependency between the rank's own tasks
  // (ScheduleGraph::add_task: "per rank, tasks must be added in the rank's program order").
  // Checked edge by edge; edges from other ranks' tasks (collective peers, pipeline senders)
  // are ignored, as those tasks are not replayed.
  const DependencyGraph& deps = graph.dependencies();
  for (std::size_t i = 0; i < program.size(); ++i) {
    for (auto [e, end] = boost::in_edges(program[i], deps); e != end; ++e) {
      const TaskId from = static_cast<TaskId>(boost::source(*e, deps));
      auto it = position.find(from);
      TRAINSIM_CHECK(it == position.end() || it->second < i,
                     "replay_order: program order of rank " + std::to_string(rank) +
                         " issues task " + std::to_string(program[i]) + " (" +
                         graph.label(program[i]) + ") before its dependency " +
                         std::to_string(from) + " (" + graph.label(from) + ")");
    }
  }
  return program;
}

std::int64_t representative_rank(const ScheduleGraph& graph, std::int64_t rank) {
  if (rank < 0 || rank >= graph.world_size)
    throw InputError("replay: --rank " + std::to_string(rank) + " is outside the world of " +
                     std::to_string(graph.world_size) + " ranks");
  return graph.representative_of(rank);
}

std::int64_t representative_rank(const ScheduleGraph& graph, const Scenario& scenario,
                                 std::int64_t rank) {
  if (rank < 0 || rank >= graph.world_size)
    throw InputError("replay: --rank " + std::to_string(rank) + " is outside the world of " +
                     std::to_string(graph.world_size) + " ranks of " + scenario.source_path);
  return representative_rank(graph, rank);
}

ExecutionRecord replay(const ScheduleGraph& graph, const ReplayOptions& opts) {
  const std::vector<TaskId> order = replay_order(graph, opts.rank);
  return detail::execute(graph, static_cast<RankId>(opts.rank), order, opts);
}

TrainingReplay replay_training(const ScheduleGraph& graph, const ReplayOptions& opts,
                               int iterations) {
  if (iterations < 1)
    throw InputError("replay: iterations " + std::to_string(iterations) + ": expected >= 1");
  const std::vector<TaskId> order = replay_order(graph, opts.rank);
  TrainingReplay out;
  out.record = detail::execute(graph, static_cast<RankId>(opts.rank), order, opts, iterations,
                               &out.losses);
  return out;
}

}  // namespace trainsim::hw
