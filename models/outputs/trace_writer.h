// Chrome trace-event JSON of one executed iteration (docs/trace.md); opens in
// Perfetto (ui.perfetto.dev) and chrome://tracing. Simulated and measured traces share it.
//
// Schema:
//  - one process per traced rank: pid = rank, metadata process_name
//    "rank N (node X gpu Y)", process_sort_index N, and when the graph is folded a
//    process_labels entry saying how many ranks it stands for;
//  - one thread per stream the rank uses: tid = StreamId value, thread_name = to_string(StreamId)
//    ("compute", "tp-comm", "pp-comm", "dp-comm", "h2d", "d2h", "cpu");
//  - one complete event (ph "X") per task that ran: name = graph.label(id), cat = kind,
//    ts/dur in microseconds, args {task, flops, bytes, kind, op, phase} where `task` is the
//    schedule-graph task id (the same in simulated and measured traces), `bytes` the op's
//    payload for communication and copies and its device-memory traffic for compute;
//  - counter events (ph "C") per traced rank: "memory" (bytes by memory category, one series
//    per category, a value at the iteration start and at every change) and "link bytes/s"
//    (series "PCIe H2D", "PCIe D2H", "NVLink", "NIC": the egress rate of the rank's active
//    transfers, activity.h link_use: bytes / (end - active start) summed over concurrent
//    tasks, 0 when none);
//  - one process per host node of the traced ranks: pid = world_size + node, process_name
//    "host node X", a "host memory" counter (bytes by category, the node's GPUs together).
//  - top-level "otherData" {scenario, executor, measured, world_size, fold_factor, trace_ranks}.
// The file is written streaming (one event per line, never a JSON tree of all events) with
// fixed number formatting (times rounded to whole nanoseconds and printed as microseconds with
// 3 decimals, a span's dur the difference of its rounded ends; integers exactly) in a fixed
// order: metadata, then per rank its tasks in program order, its memory counter, its link
// counter; then the hosts.
#pragma once

#include <iosfwd>
#include <string>
#include <vector>

#include "models/perf/cost_model.h"
#include "models/graph/execution_record.h"
#include "models/outputs/memory_timeline.h"
#include "models/graph/schedule_graph.h"

namespace trainsim {

/// Which simulated ranks a trace (and the CSV memory timeline) covers, and why.
struct TraceSelection {
  std::vector<RankId> ranks;  ///< simulated ranks, ascending
  std::string note;           ///< how they were chosen (repeated in the summary)
};

/// Default (`user_list` empty): all ranks for runs of at most kAllRanksTraceLimit ranks, else
/// the tensor-parallel group of data-parallel rank 0 at the first and at the last pipeline
/// stage. `user_list`: a --trace-ranks list (activity.h parse_rank_list; InputError on bad
/// input). Requested ranks that a folded graph does not simulate are replaced by their
/// representatives, and the note says so.
constexpr std::int64_t kAllRanksTraceLimit = 64;
TraceSelection select_trace_ranks(const ScheduleGraph& graph, const std::string& user_list);

struct TraceInfo {
  std::string scenario_name;
  std::int64_t gpus_per_node = 1;
  /// The run's cost model: the link counters put NVLS collectives' own traffic on the links
  /// (activity.h link_use). nullptr: every collective as a ring.
  const CostModel* cost = nullptr;
  /// Consecutive ranks of one NVLink domain (models/system/collective_flows.h
  /// nvlink_domain_ranks: several trays on GB200 NVL72), which the link counters use to tell
  /// NVLink from NIC traffic. 0: gpus_per_node.
  std::int64_t nvlink_domain_ranks = 0;
};

/// Writes the trace of `selection.ranks` (see the schema above).
void write_chrome_trace(std::ostream& out, const ScheduleGraph& graph,
                        const ExecutionRecord& record, const MemoryTimeline& memory,
                        const TraceSelection& selection, const TraceInfo& info);

/// JSON string literal (with quotes) of `s`, escaping quotes, backslashes and control chars.
std::string json_quote(const std::string& s);

}  // namespace trainsim
