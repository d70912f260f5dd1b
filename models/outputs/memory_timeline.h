// Memory over one executed iteration: per simulated rank, the GPU memory by category as a step
// function of time, its peak (bytes, time, breakdown); per node, the host memory likewise.
// Computed from a schedule graph (initial memory + each task's MemEffects) and an execution
// record (when each task started and ended).
//
// Ordering rule for effects at the same instant (documented because it decides peaks):
//   1. effects at the END of tasks that ran for a positive time,
//   2. effects at the START of tasks,
//   3. effects at the END of zero-duration tasks (after their own start effects);
//   within each class, allocations before releases (conservative: effects of one class at one
//   instant come from concurrent tasks whose real order is unknown, so the worst order is
//   assumed), then task id and the effect's order in the task (deterministic).
// Class 1 before class 2 is what a real allocator sees in the common case that makes
// instants coincide: a task that starts exactly when another ends is usually waiting for it
// (stream order or a data dependency), so the first task's releases are back in the
// allocator's pool before the second allocates. (Counting them the other way would add, e.g.,
// one extra microbatch of activations at every forward/backward boundary of a 1F1B schedule.)
// The peak is evaluated after every single effect; steps (for_each_step, the trace counters and
// the CSV) show the state after all effects of an instant.
//
// Host memory is per node: the sum over the node's GPUs of their host memory (initial host
// memory + host effects). When the graph is folded, a node's GPUs are represented by their
// representatives (ScheduleGraph::representative_of), each counted once per GPU it stands for.
//
// Cost: O(E log E) for E memory effects; memory 24 bytes per effect.
#pragma once

#include <cstdint>
#include <iosfwd>
#include <vector>

#include "models/graph/execution_record.h"
#include "models/graph/schedule_graph.h"

namespace trainsim {

struct MemoryEvent {
  double time_s = 0;
  std::int64_t delta_bytes = 0;
  MemCategory category = MemCategory::Activations;
};

/// Memory of one device (a GPU, or the host memory of a node) over the iteration.
struct MemorySeries {
  MemVector initial{};               ///< bytes by category before the first event
  std::vector<MemoryEvent> events;   ///< in application order (see the ordering rule above)
  std::int64_t peak_bytes = 0;       ///< largest total, over the initial state and every event
  double peak_time_s = 0;            ///< first time the peak is reached
  MemVector peak_by_category{};      ///< the state at the peak
  MemVector final_bytes{};           ///< the state after the last event

  /// Calls f(time_s, const MemVector& bytes) for the initial state at `start_s` (unless events
  /// happen at `start_s`) and then, for each distinct event time, with the state after all the
  /// effects at that time: one call per distinct time.
  template <class F>
  void for_each_step(double start_s, F&& f) const {
    MemVector state = initial;
    if (events.empty() || events.front().time_s > start_s)
      f(start_s, static_cast<const MemVector&>(state));
    for (std::size_t i = 0; i < events.size();) {
      const double t = events[i].time_s;
      for (; i < events.size() && events[i].time_s == t; ++i)
        state[static_cast<int>(events[i].category)] += events[i].delta_bytes;
      f(t, static_cast<const MemVector&>(state));
    }
  }
};

std::int64_t total_bytes(const MemVector& v);
/// The category holding the most bytes in `v` (the first one on ties).
MemCategory dominant_category(const MemVector& v);

struct MemoryTimeline {
  double start_s = 0;   ///< earliest task start (the iteration's origin)
  std::int64_t gpus_per_node = 1;
  /// GPU memory, indexed like graph.simulated_ranks().
  std::vector<RankId> gpu_ranks;
  std::vector<MemorySeries> gpu;
  /// Host memory: node_series[node] indexes host_series (nodes with the same composition of
  /// representatives share one series), for every node 0 .. world_size/gpus_per_node - 1.
  std::vector<std::uint32_t> node_series;
  std::vector<MemorySeries> host_series;

  const MemorySeries& host(std::int64_t node) const { return host_series[node_series[node]]; }
  std::int64_t num_nodes() const { return static_cast<std::int64_t>(node_series.size()); }
  /// Series of a simulated rank; throws std::out_of_range for a rank not simulated.
  const MemorySeries& gpu_of(RankId rank) const;
};

/// Builds the timeline. `gpus_per_node` maps ranks to nodes (rank / gpus_per_node). Effects of
/// tasks that did not run (NaN times) are left out. Throws std::logic_error when the record
/// does not match the graph.
MemoryTimeline build_memory_timeline(const ScheduleGraph& graph, const ExecutionRecord& record,
                                     std::int64_t gpus_per_node);

/// CSV memory timeline, one row per device and distinct change time, one column per category:
///   time_s,device,id,parameters,gradients,optimizer_states,activations,comm_buffers,
///   offload_buffers,framework,total
/// `device` is `gpu` (id = rank) or `host` (id = node); values in bytes; time in seconds
/// ("%.9f"). Rows: the GPU series of `ranks` (simulated ranks, ascending), then the host series
/// of their nodes, each starting with its initial state at the iteration start.
void write_memory_csv(std::ostream& out, const MemoryTimeline& timeline,
                      const std::vector<RankId>& ranks);

}  // namespace trainsim
