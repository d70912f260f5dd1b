// How the outputs (summary, trace, memory timeline) read an executed schedule graph: which
// world ranks a simulated rank stands for, when a task's work is really active, which
// breakdown category a task counts in, and which link its bytes use.
//
// Shared by models/summary, models/trace_writer and models/memory_timeline so that the
// summary's numbers and the trace's spans and counters are computed by one set of rules.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "models/graph/execution_record.h"
#include "models/perf/cost_model.h"
#include "models/graph/schedule_graph.h"

namespace trainsim {

// ---------------------------------------------------------------------------------------
// Folding: ranks and their representatives (ScheduleGraph::representative_of)

/// For every world rank 0 .. world_size-1, the index (in graph.simulated_ranks()) of the rank
/// that stands for it. Throws as ScheduleGraph::representative_of().
std::vector<std::uint32_t> representative_indices(const ScheduleGraph& graph);

// ---------------------------------------------------------------------------------------
// Activity

/// Whether the task ran (its start and end are finite numbers in the record).
inline bool task_ran(const ExecutionRecord& record, TaskId id) {
  const double s = record.start_s[id], e = record.end_s[id];
  return s == s && e == e;  // not NaN
}

/// Per task, the time its work could really progress: for a collective, the latest start of
/// the tasks of the same instance (same `match`), since no rank's data moves before every
/// participant has arrived (ring / NCCL semantics); for a pipeline send or receive, the later
/// of the send's and the receive's start (NCCL point-to-point is a rendezvous); for any other
/// task its own start. Time a rank spends in a comm task before that point is waiting for a
/// peer, counted as idle (pipeline bubble) by the breakdown. Clamped to the task's end. NaN
/// for a task that did not run. O(tasks) expected time.
std::vector<double> active_start_s(const ScheduleGraph& graph, const ExecutionRecord& record);

/// Breakdown categories, in priority order (highest first): when several are active on a rank
/// at once, the time counts for the highest one only ("exposed" time).
enum class Activity : std::uint8_t { Compute, Optimizer, Offload, TpComm, PpComm, DpComm, kCount };
constexpr int kNumActivities = static_cast<int>(Activity::kCount);

/// Compute kernels -> Compute; GPU or CPU optimizer steps -> Optimizer; host<->device copies ->
/// Offload; collectives and point-to-point by their communicator: tensor -> TpComm, pipeline ->
/// PpComm, data-parallel and embedding (tied-embedding gradient all-reduce) -> DpComm; a
/// communicator-less comm op by its stream.
Activity activity_of(const ScheduleGraph& graph, TaskId id);
/// "compute", "optimizer", "offload", "tp_comm", "pp_comm", "dp_comm" (summary keys).
const char* to_string(Activity a);

/// Seconds of each activity that are exposed on one rank, plus idle time, over the window
/// [window_begin_s, window_end_s]. The components sum to the window length.
struct ExposedTime {
  double by_activity_s[kNumActivities] = {};
  double idle_s = 0;  ///< no task active: the pipeline bubble (incl. waiting for peers)
  /// With the host timeline (record.host_wait_s non-empty): idle instants during which a task
  /// whose dependencies were done waited for its issue (sim/host_thread.h), taken out of
  /// idle_s: the device idle waiting for the host.
  double host_bound_s = 0;
};

/// Sweeps one rank's task intervals [active_start, end] in time order and gives every
/// instant of the window to the highest-priority active category (or to idle).
/// O(n log n) for n tasks of the rank.
ExposedTime exposed_time(const ScheduleGraph& graph, const ExecutionRecord& record,
                         const std::vector<double>& active_start, const std::vector<TaskId>& tasks,
                         double window_begin_s, double window_end_s);

// ---------------------------------------------------------------------------------------
// Links

/// The link whose bandwidth a task's bytes use, for the trace's utilization counters.
/// NVLink: a collective whose ranks are all on this rank's node, or a message to a rank of the
/// same node; NIC: one that leaves the node.
enum class Link : std::uint8_t { PcieH2D, PcieD2H, NvLink, Nic, kCount, None = kCount };
constexpr int kNumLinks = static_cast<int>(Link::kCount);
const char* to_string(Link l);  ///< "PCIe H2D", "PCIe D2H", "NVLink", "NIC"

struct LinkUse {
  Link link = Link::None;
  double bytes = 0;  ///< bytes this rank puts on the link (egress)
};
/// Copies: their bytes on PCIe in their direction. Collectives: the bytes each rank sends in a
/// ring implementation (CostModel::ring_bytes_per_rank, nccl-tests doc/PERFORMANCE.md); with
/// `cost`, an all-reduce, reduce-scatter or all-gather that NCCL runs on NVLS / NVLS-Tree
/// (CostModel::nccl_collective) puts its NVLS traffic there instead (nccl_traffic: NVLink
/// inside a node, the NIC across nodes). Sends: the message. Receives count nothing (their
/// bytes are the sender's egress).
LinkUse link_use(const ScheduleGraph& graph, TaskId id, std::int64_t gpus_per_node,
                 const CostModel* cost = nullptr);

// ---------------------------------------------------------------------------------------
// Rank lists ("0-7,3064-3071")

/// Parses a comma-separated list of ranks and inclusive ranges, or "all". Throws InputError
/// naming `field` and the value for syntax errors, empty or reversed ranges and ranks
/// outside 0 .. world_size-1. Returns the ranks ascending, without duplicates.
std::vector<RankId> parse_rank_list(const std::string& text, std::int64_t world_size,
                                    const std::string& field = "--trace-ranks");
/// The inverse: ascending ranks as "0-7,3064-3071".
std::string format_rank_list(const std::vector<RankId>& ranks);

}  // namespace trainsim
