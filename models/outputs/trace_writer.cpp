#include "models/outputs/trace_writer.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <ostream>
#include <string>
#include <vector>

#include "models/errors.h"
#include "models/outputs/activity.h"

namespace trainsim {

std::string json_quote(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\t': out += "\\t"; break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof buf, "\\u%04x", static_cast<unsigned>(c));
          out += buf;
        } else {
          out += c;
        }
    }
  }
  return out + "\"";
}

TraceSelection select_trace_ranks(const ScheduleGraph& graph, const std::string& user_list) {
  std::vector<RankId> requested;
  TraceSelection sel;
  if (!user_list.empty()) {
    requested = parse_rank_list(user_list, graph.world_size);
    sel.note = "chosen with --trace-ranks " + user_list;
  } else if (graph.world_size <= kAllRanksTraceLimit) {
    for (std::int64_t r = 0; r < graph.world_size; ++r) requested.push_back(RankId(r));
    sel.note = "default: all ranks, as the run has at most " +
               std::to_string(kAllRanksTraceLimit) + " ranks";
  } else {
    const ParallelLayout& layout = graph.layout;
    for (std::int64_t stage : {std::int64_t{0}, layout.pp - 1})
      for (std::int64_t t = 0; t < layout.tp; ++t)
        requested.push_back(RankId(layout.rank_of({t, 0, stage})));
    std::sort(requested.begin(), requested.end());
    requested.erase(std::unique(requested.begin(), requested.end()), requested.end());
    sel.note = "default: the tensor-parallel group of data-parallel rank 0 at the first and "
               "the last pipeline stage (ranks " + format_rank_list(requested) +
               "); choose others with --trace-ranks";
  }
  for (RankId r : requested) sel.ranks.push_back(graph.representative_of(r));
  std::sort(sel.ranks.begin(), sel.ranks.end());
  sel.ranks.erase(std::unique(sel.ranks.begin(), sel.ranks.end()), sel.ranks.end());
  if (sel.ranks != requested)
    sel.note += (graph.partial_representatives.empty()
                     ? "; the graph is folded (each simulated rank stands for " +
                           std::to_string(graph.fold_factor) +
                           " ranks: its tensor-parallel peers and data-parallel replicas)"
                     : std::string("; the graph is partially folded (scenario variability: "
                                   "each simulated rank stands for the ranks the summary's "
                                   "unfolded_ranks and per_rank represented_by name)")) +
                ", so the trace shows the representatives " + format_rank_list(sel.ranks) +
                " of the requested ranks";
  return sel;
}

namespace {

// Fixed, locale-independent number formatting. Times are rounded once to whole nanoseconds
// and printed as microseconds with 3 decimals; a span's duration is the difference of its
// rounded ends, so spans that touch in the record touch (never overlap) in the trace.
std::int64_t ns(double seconds) { return std::llround(seconds * 1e9); }

std::string us_of_ns(std::int64_t t) {
  char buf[48];
  const char* sign = t < 0 ? "-" : "";
  const std::int64_t a = t < 0 ? -t : t;
  std::snprintf(buf, sizeof buf, "%s%lld.%03lld", sign, static_cast<long long>(a / 1000),
                static_cast<long long>(a % 1000));
  return buf;
}

std::string us(double seconds) { return us_of_ns(ns(seconds)); }

std::string number(double v) {
  char buf[48];
  if (!std::isfinite(v)) return "0";
  if (v == std::floor(v) && std::fabs(v) < 9.007199254740992e15)
    std::snprintf(buf, sizeof buf, "%.0f", v);
  else
    std::snprintf(buf, sizeof buf, "%.17g", v);
  return buf;
}

class EventWriter {
 public:
  explicit EventWriter(std::ostream& out) : out_(out) {}
  void event(const std::string& body) {
    out_ << (first_ ? "\n" : ",\n") << '{' << body << '}';
    first_ = false;
  }
  void metadata(std::int64_t pid, long tid, const char* name, const std::string& args) {
    std::string b = "\"ph\":\"M\",\"pid\":" + std::to_string(pid);
    if (tid >= 0) b += ",\"tid\":" + std::to_string(tid);
    event(b + ",\"name\":\"" + name + "\",\"args\":{" + args + "}");
  }
  void counter(std::int64_t pid, const char* name, double time_s, const std::string& args) {
    event("\"ph\":\"C\",\"pid\":" + std::to_string(pid) + ",\"name\":\"" + name +
          "\",\"ts\":" + us(time_s) + ",\"args\":{" + args + "}");
  }

 private:
  std::ostream& out_;
  bool first_ = true;
};

std::string memory_args(const MemVector& v) {
  std::string a;
  for (int c = 0; c < kNumMemCategories; ++c) {
    if (c == int(MemCategory::CudaGraphs) && v[c] == 0) continue;  // only with CUDA graphs
    if (c) a += ',';
    a += std::string("\"") + to_string(static_cast<MemCategory>(c)) + "\":" + std::to_string(v[c]);
  }
  return a;
}

void write_link_counters(EventWriter& w, const ScheduleGraph& graph,
                         const ExecutionRecord& record, const std::vector<double>& active,
                         const std::vector<TaskId>& tasks, RankId rank, double start_s,
                         std::int64_t gpus_per_node, const CostModel* cost) {
  struct Change {
    double time_s;
    int link;
    int count;
    double rate;
  };
  std::vector<Change> changes;
  for (TaskId id : tasks) {
    if (!task_ran(record, id)) continue;
    const LinkUse use = link_use(graph, id, gpus_per_node, cost);
    const double a = active[id], e = record.end_s[id];
    if (use.link == Link::None || use.bytes <= 0 || !(e > a)) continue;
    const double rate = use.bytes / (e - a);
    changes.push_back({a, int(use.link), +1, rate});
    changes.push_back({e, int(use.link), -1, -rate});
  }
  std::sort(changes.begin(), changes.end(), [](const Change& x, const Change& y) {
    if (x.time_s != y.time_s) return x.time_s < y.time_s;
    if (x.link != y.link) return x.link < y.link;
    return x.count < y.count;
  });
  int count[kNumLinks] = {};
  double rate[kNumLinks] = {};
  auto emit = [&](double t) {
    std::string a;
    for (int l = 0; l < kNumLinks; ++l) {
      if (l) a += ',';
      a += std::string("\"") + to_string(static_cast<Link>(l)) +
           "\":" + number(count[l] > 0 ? std::max(0.0, rate[l]) : 0.0);
    }
    w.counter(rank, "link bytes/s", t, a);
  };
  if (changes.empty() || changes.front().time_s > start_s) emit(start_s);
  for (std::size_t i = 0; i < changes.size();) {
    const double t = changes[i].time_s;
    for (; i < changes.size() && changes[i].time_s == t; ++i) {
      count[changes[i].link] += changes[i].count;
      rate[changes[i].link] += changes[i].rate;
      if (count[changes[i].link] == 0) rate[changes[i].link] = 0;  // no drift when idle
    }
    emit(t);
  }
}

/// Thread id of lane `lane` of stream `stream`: lane 0 is the stream's own track (tid = the
/// stream's index), lane k > 0 an extra track kLaneTidStride * k + stream.
constexpr long kLaneTidStride = 100;
long lane_tid(int stream, int lane) { return long(lane) * kLaneTidStride + stream; }

/// Per task of one rank, the lane of its stream's track that its span goes to: spans of one
/// stream that overlap without nesting (pipeline sends in flight while the next one starts)
/// would be dropped by Perfetto, so each goes to the first lane whose last span has ended by
/// its start (interval partitioning in start order; times as written, in whole ns). Streams
/// whose spans never overlap use lane 0 only.
std::vector<int> assign_lanes(const ScheduleGraph& graph, const ExecutionRecord& record,
                              const std::vector<TaskId>& tasks) {
  std::vector<std::size_t> order;
  for (std::size_t i = 0; i < tasks.size(); ++i)
    if (task_ran(record, tasks[i])) order.push_back(i);
  std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) {
    return ns(record.start_s[tasks[a]]) < ns(record.start_s[tasks[b]]);
  });
  std::vector<int> lane(tasks.size(), 0);
  std::vector<std::vector<std::int64_t>> lane_end(kNumStreams);  // per stream, per lane
  for (std::size_t i : order) {
    const TaskId id = tasks[i];
    auto& ends = lane_end[static_cast<int>(graph.task(id).stream)];
    const std::int64_t b = ns(record.start_s[id]), e = ns(record.end_s[id]);
    std::size_t k = 0;
    while (k < ends.size() && ends[k] > b) ++k;
    if (k == ends.size()) ends.push_back(e);
    else ends[k] = e;
    lane[i] = static_cast<int>(k);
  }
  return lane;
}

/// `,"replayed_as":"..."` for a task a replay ran in a substituted way, else nothing.
std::string replayed_as_arg(const ExecutionRecord& record, TaskId id) {
  if (id >= record.replayed_as.size() || record.replayed_as[id].empty()) return "";
  return ",\"replayed_as\":" + json_quote(record.replayed_as[id]);
}

/// Measured records: the allocator's bytes over time (counter "allocator", series "allocated"
/// and "reserved") on the process of the rank whose tasks ran.
void write_allocator_counter(EventWriter& w, const ExecutionRecord& record,
                             const std::vector<TaskId>& tasks, RankId rank) {
  if (record.allocated_bytes_samples.empty()) return;
  if (std::none_of(tasks.begin(), tasks.end(), [&](TaskId id) { return task_ran(record, id); }))
    return;
  for (std::size_t i = 0; i < record.allocated_bytes_samples.size(); ++i) {
    const auto& [t, allocated] = record.allocated_bytes_samples[i];
    const std::int64_t reserved = i < record.reserved_bytes_samples.size()
                                      ? record.reserved_bytes_samples[i].second
                                      : allocated;
    w.counter(rank, "allocator", t,
              "\"allocated\":" + std::to_string(allocated) +
                  ",\"reserved\":" + std::to_string(reserved));
  }
}

}  // namespace

namespace {

/// The file's header: otherData (scenario, executor, world, fold, trace ranks, a replay's notes).
void write_header(std::ostream& out, const ScheduleGraph& graph, const ExecutionRecord& record,
                  const TraceSelection& selection, const TraceInfo& info) {
  out << "{\"displayTimeUnit\":\"ms\",\"otherData\":{\"scenario\":"
      << json_quote(info.scenario_name) << ",\"executor\":" << json_quote(record.executor)
      << ",\"measured\":" << (record.measured ? "true" : "false")
      << ",\"world_size\":" << graph.world_size << ",\"fold_factor\":" << graph.fold_factor
      << ",\"trace_ranks\":" << json_quote(format_rank_list(selection.ranks))
      << ",\"trace_ranks_note\":" << json_quote(selection.note);
  // A replay's allocator peaks (including peaks inside a task, which the "allocator" counter's
  // per-task samples miss), so that `validate --measured-trace` compares the true peak.
  if (record.measured && record.measured_peak_allocated_bytes() >= 0)
    out << ",\"peak_allocated_bytes\":" << record.measured_peak_allocated_bytes()
        << ",\"peak_reserved_bytes\":" << record.measured_peak_reserved_bytes();
  if (!record.notes.empty()) {  // what a replay substituted (ExecutionRecord::notes)
    out << ",\"notes\":[";
    for (std::size_t i = 0; i < record.notes.size(); ++i)
      out << (i ? "," : "") << json_quote(record.notes[i]);
    out << "]";
  }
  out << "},\"traceEvents\":[";
}

/// A rank's process and thread metadata: one thread per stream it uses, plus a track per
/// extra lane of a stream (assign_lanes).
void write_rank_metadata(EventWriter& w, const ScheduleGraph& graph,
                         const std::vector<TaskId>& tasks, const std::vector<int>& lanes,
                         RankId rank, std::int64_t gpn) {
  w.metadata(rank, -1, "process_name",
             "\"name\":" + json_quote("rank " + std::to_string(rank) + " (node " +
                                      std::to_string(rank / gpn) + " gpu " +
                                      std::to_string(rank % gpn) + ")"));
  w.metadata(rank, -1, "process_sort_index", "\"sort_index\":" + std::to_string(rank));
  if (graph.fold_factor > 1)
    w.metadata(rank, -1, "process_labels",
               "\"labels\":" + json_quote("stands for " + std::to_string(graph.fold_factor) +
                                          " ranks (folded)"));
  bool used[kNumStreams] = {};
  int lanes_of[kNumStreams] = {};
  for (std::size_t i = 0; i < tasks.size(); ++i) {
    const int st = static_cast<int>(graph.task(tasks[i]).stream);
    used[st] = true;
    lanes_of[st] = std::max(lanes_of[st], lanes[i] + 1);
  }
  for (int st = 0; st < kNumStreams; ++st) {
    if (!used[st]) continue;
    for (int k = 0; k < std::max(1, lanes_of[st]); ++k) {
      std::string name = to_string(static_cast<StreamId>(st));
      if (k > 0) name += " #" + std::to_string(k + 1);  // a message in flight beside others
      w.metadata(rank, lane_tid(st, k), "thread_name", "\"name\":\"" + name + "\"");
      w.metadata(rank, lane_tid(st, k), "thread_sort_index",
                 "\"sort_index\":" + std::to_string(st));
    }
  }
}

/// A collective or a receive that started before its peers arrived: a nested "waiting for
/// peers" span (cat `wait`) from its start to the moment all its participants had arrived
/// (activity.h active_start_s), so the trace shows the wait as a wait and the transfer after it
/// (docs/trace.md).
void write_wait_span(EventWriter& w, const ScheduleGraph& graph, const ExecutionRecord& record,
                     const std::vector<double>& active, TaskId id, RankId rank, int lane) {
  const Task& t = graph.task(id);
  if (t.kind != TaskKind::Collective && t.kind != TaskKind::Recv) return;
  const std::int64_t b = ns(record.start_s[id]);
  const std::int64_t e = std::min(ns(active[id]), ns(record.end_s[id]));
  if (!(e > b)) return;
  w.event("\"ph\":\"X\",\"pid\":" + std::to_string(rank) +
          ",\"tid\":" + std::to_string(lane_tid(static_cast<int>(t.stream), lane)) +
          ",\"name\":\"waiting for peers\",\"cat\":\"wait\",\"ts\":" + us_of_ns(b) +
          ",\"dur\":" + us_of_ns(e - b) + ",\"args\":{\"task\":" + std::to_string(id) +
          ",\"waits_for\":\"" +
          (t.kind == TaskKind::Recv ? "the sender" : "every member of the group") + "\"}");
}

/// One complete event per task of the rank that ran.
void write_rank_spans(EventWriter& w, const ScheduleGraph& graph, const ExecutionRecord& record,
                      const std::vector<TaskId>& tasks, const std::vector<int>& lanes,
                      const std::vector<double>& active, RankId rank) {
  for (std::size_t i = 0; i < tasks.size(); ++i) {
    const TaskId id = tasks[i];
    if (!task_ran(record, id)) continue;
    const Task& t = graph.task(id);
    const OpDesc& op = graph.op(id);
    const bool is_comm = t.kind != TaskKind::Compute && t.kind != TaskKind::OptimizerGpu &&
                         t.kind != TaskKind::OptimizerCpu;
    const double bytes = is_comm ? static_cast<double>(op.bytes) : op.bytes_accessed;
    w.event("\"ph\":\"X\",\"pid\":" + std::to_string(rank) +
            ",\"tid\":" + std::to_string(lane_tid(static_cast<int>(t.stream), lanes[i])) +
            ",\"name\":" + json_quote(graph.label(id)) + ",\"cat\":\"" + to_string(t.kind) +
            "\",\"ts\":" + us(record.start_s[id]) +
            ",\"dur\":" + us_of_ns(ns(record.end_s[id]) - ns(record.start_s[id])) +
            ",\"args\":{\"task\":" + std::to_string(id) + ",\"flops\":" + number(op.flops) +
            ",\"bytes\":" + number(bytes) + ",\"kind\":\"" + to_string(t.kind) +
            "\",\"op\":\"" + to_string(op.kind) + "\",\"phase\":\"" + to_string(t.phase) +
            "\"" + replayed_as_arg(record, id) + "}");
    write_wait_span(w, graph, record, active, id, rank, lanes[i]);
  }
}

/// A span on the rank's `host` thread (tid kHostTid).
constexpr long kHostTid = kLaneTidStride - 1;  // below the extra lanes, above the streams

void host_span(EventWriter& w, RankId rank, const std::string& name, const char* cat, double b,
               double e, const std::string& args) {
  if (!(e > b)) return;
  w.event("\"ph\":\"X\",\"pid\":" + std::to_string(rank) + ",\"tid\":" +
          std::to_string(kHostTid) + ",\"name\":" + json_quote(name) + ",\"cat\":\"" + cat +
          "\",\"ts\":" + us(b) + ",\"dur\":" + us_of_ns(ns(e) - ns(b)) + ",\"args\":{" + args +
          "}");
}

/// A replay's host thread: one span per task issue ("issue LABEL", cat host_issue), with args
/// task, class (compute, comm, copy, optimizer) and, where counted, eager_ops and
/// autograd_nodes (what the issue ran through LibTorch's dispatcher).
void write_measured_issues(EventWriter& w, const ScheduleGraph& graph,
                           const ExecutionRecord& record, const std::vector<TaskId>& tasks,
                           RankId rank) {
  for (TaskId id : tasks) {
    const TaskKind k = graph.task(id).kind;
    const char* cls = k == TaskKind::Compute                               ? "compute"
                      : k == TaskKind::CopyH2D || k == TaskKind::CopyD2H   ? "copy"
                      : k == TaskKind::OptimizerGpu || k == TaskKind::OptimizerCpu ? "optimizer"
                                                                          : "comm";
    std::string args = "\"task\":" + std::to_string(id) + ",\"class\":\"" + cls + "\"";
    if (record.host_eager_ops.size() > id)
      args += ",\"eager_ops\":" + std::to_string(record.host_eager_ops[id]) +
              ",\"autograd_nodes\":" + std::to_string(record.host_autograd_nodes[id]);
    host_span(w, rank, "issue " + graph.label(id), "host_issue", record.host_issue_start_s[id],
              record.host_issue_end_s[id], args);
  }
}

/// The simulated host timeline (host_model on; sim/host_thread.h): one span per stretch of
/// back-to-back task issues ("issue LABEL +N": the first task and how many more) and one per
/// synchronisation wait ("sync wait: CAUSE", from the host reaching the sync point to its
/// return after sync_s).
void write_simulated_issues(EventWriter& w, const ScheduleGraph& graph,
                            const ExecutionRecord& record, const std::vector<TaskId>& tasks,
                            RankId rank) {
  // Back-to-back issues (the host running ahead) merge into one span, so the thread costs a
  // span per busy stretch, not per task: named after its first task, with the task count.
  std::vector<TaskId> by_issue(tasks);
  std::stable_sort(by_issue.begin(), by_issue.end(), [&](TaskId a, TaskId b) {
    return record.host_issue_start_s[a] < record.host_issue_start_s[b];
  });
  for (std::size_t i = 0; i < by_issue.size();) {
    const TaskId first = by_issue[i];
    std::size_t j = i + 1;
    while (j < by_issue.size() && ns(record.host_issue_start_s[by_issue[j]]) ==
                                      ns(record.host_issue_end_s[by_issue[j - 1]]))
      ++j;
    host_span(w, rank,
              "issue " + graph.label(first) + (j - i > 1 ? " +" + std::to_string(j - i - 1) : ""),
              "host_issue", record.host_issue_start_s[first],
              record.host_issue_end_s[by_issue[j - 1]],
              "\"task\":" + std::to_string(first) + ",\"tasks\":" + std::to_string(j - i));
    i = j;
  }
  const std::size_t syncs = std::min({graph.host_syncs.size(), record.sync_wait_start_s.size(),
                                      record.sync_wait_end_s.size()});
  for (std::size_t i = 0; i < syncs; ++i) {
    const HostSync& sy = graph.host_syncs[i];
    if (graph.task(sy.task).rank != rank) continue;
    host_span(w, rank, std::string("sync wait: ") + to_string(sy.cause), "host_sync",
              record.sync_wait_start_s[i], record.sync_wait_end_s[i],
              "\"task\":" + std::to_string(sy.task));
  }
}

/// The rank's `host` thread when the record has host issue times (docs/trace.md "host
/// thread"): a replay's measured issues task by task, or the simulated host timeline.
void write_host_thread(EventWriter& w, const ScheduleGraph& graph, const ExecutionRecord& record,
                       const std::vector<TaskId>& tasks, RankId rank) {
  if (record.host_issue_end_s.empty()) return;
  w.metadata(rank, kHostTid, "thread_name", "\"name\":\"host\"");
  w.metadata(rank, kHostTid, "thread_sort_index", "\"sort_index\":-1");
  if (record.measured)
    write_measured_issues(w, graph, record, tasks, rank);
  else
    write_simulated_issues(w, graph, record, tasks, rank);
}

/// The host memory of every node that holds a selected rank.
void write_hosts(EventWriter& w, const ScheduleGraph& graph, const MemoryTimeline& memory,
                 const TraceSelection& selection, std::int64_t gpn) {
  std::vector<std::int64_t> nodes;
  for (RankId r : selection.ranks) nodes.push_back(r / gpn);
  nodes.erase(std::unique(nodes.begin(), nodes.end()), nodes.end());  // ranks are ascending
  for (std::int64_t node : nodes) {
    const std::int64_t pid = graph.world_size + node;
    w.metadata(pid, -1, "process_name",
               "\"name\":" + json_quote("host node " + std::to_string(node)));
    w.metadata(pid, -1, "process_sort_index", "\"sort_index\":" + std::to_string(pid));
    memory.host(node).for_each_step(memory.start_s, [&](double time_s, const MemVector& v) {
      w.counter(pid, "host memory", time_s, memory_args(v));
    });
  }
}

}  // namespace

void write_chrome_trace(std::ostream& out, const ScheduleGraph& graph,
                        const ExecutionRecord& record, const MemoryTimeline& memory,
                        const TraceSelection& selection, const TraceInfo& info) {
  TRAINSIM_CHECK(record.start_s.size() == graph.num_tasks() &&
                     record.end_s.size() == graph.num_tasks(),
                 "write_chrome_trace: the record does not match the graph");
  const std::int64_t gpn = info.gpus_per_node;
  write_header(out, graph, record, selection, info);
  EventWriter w(out);
  const std::vector<double> active = active_start_s(graph, record);
  for (RankId rank : selection.ranks) {
    TRAINSIM_CHECK(graph.rank_index(rank) != kNone,
                   "write_chrome_trace: rank " + std::to_string(rank) + " is not simulated");
    const std::vector<TaskId> tasks = graph.tasks_of_rank(rank);
    const std::vector<int> lanes = assign_lanes(graph, record, tasks);
    write_rank_metadata(w, graph, tasks, lanes, rank, gpn);
    write_rank_spans(w, graph, record, tasks, lanes, active, rank);
    write_host_thread(w, graph, record, tasks, rank);
    memory.gpu_of(rank).for_each_step(memory.start_s, [&](double time_s, const MemVector& v) {
      w.counter(rank, "memory", time_s, memory_args(v));
    });
    const std::int64_t domain = info.nvlink_domain_ranks > 0 ? info.nvlink_domain_ranks : gpn;
    write_link_counters(w, graph, record, active, tasks, rank, memory.start_s, domain, info.cost);
    write_allocator_counter(w, record, tasks, rank);
  }
  write_hosts(w, graph, memory, selection, gpn);
  out << "\n]}\n";
}

}  // namespace trainsim
