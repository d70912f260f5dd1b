#include "models/outputs/memory_timeline.h"

#include <algorithm>
#include <cinttypes>
#include <cstdio>
#include <limits>
#include <map>
#include <ostream>
#include <stdexcept>
#include <string>
#include <utility>

#include "models/errors.h"
#include "models/outputs/activity.h"

namespace trainsim {

namespace {

// One effect with its full ordering key (see the rule in memory_timeline.h).
struct RawEvent {
  double time_s;
  std::uint8_t order_class;  // 0: end of a task with duration, 1: start, 2: end of zero-length
  std::uint8_t release;      // 0: allocation, 1: release
  MemCategory category;
  TaskId task;
  std::uint32_t index;  // effect's position in its task
  std::int64_t delta_bytes;

  bool operator<(const RawEvent& o) const {
    if (time_s != o.time_s) return time_s < o.time_s;
    if (order_class != o.order_class) return order_class < o.order_class;
    if (release != o.release) return release < o.release;
    if (task != o.task) return task < o.task;
    return index < o.index;
  }
};

MemorySeries make_series(const MemVector& initial, std::vector<RawEvent>& raw, double start_s) {
  std::sort(raw.begin(), raw.end());
  MemorySeries s;
  s.initial = initial;
  s.events.reserve(raw.size());
  MemVector state = initial;
  std::int64_t total = total_bytes(state);
  s.peak_bytes = total;
  s.peak_time_s = start_s;
  s.peak_by_category = state;
  for (const RawEvent& e : raw) {
    s.events.push_back({e.time_s, e.delta_bytes, e.category});
    state[static_cast<int>(e.category)] += e.delta_bytes;
    total += e.delta_bytes;
    if (total > s.peak_bytes) {
      s.peak_bytes = total;
      s.peak_time_s = e.time_s;
      s.peak_by_category = state;
    }
  }
  s.final_bytes = state;
  return s;
}

}  // namespace

std::int64_t total_bytes(const MemVector& v) {
  std::int64_t t = 0;
  for (std::int64_t b : v) t += b;
  return t;
}

MemCategory dominant_category(const MemVector& v) {
  int best = 0;
  for (int c = 1; c < kNumMemCategories; ++c)
    if (v[c] > v[best]) best = c;
  return static_cast<MemCategory>(best);
}

const MemorySeries& MemoryTimeline::gpu_of(RankId rank) const {
  auto it = std::lower_bound(gpu_ranks.begin(), gpu_ranks.end(), rank);
  TRAINSIM_CHECK(it != gpu_ranks.end() && *it == rank,
                 "MemoryTimeline: rank " + std::to_string(rank) + " is not simulated");
  return gpu[it - gpu_ranks.begin()];
}

MemoryTimeline build_memory_timeline(const ScheduleGraph& graph, const ExecutionRecord& record,
                                     std::int64_t gpus_per_node) {
  const std::size_t n = graph.num_tasks();
  TRAINSIM_CHECK(record.start_s.size() == n && record.end_s.size() == n,
                 "build_memory_timeline: the record does not match the graph");
  TRAINSIM_CHECK(gpus_per_node > 0 && graph.world_size > 0,
                 "build_memory_timeline: gpus_per_node and world_size must be positive");
  const auto& ranks = graph.simulated_ranks();
  TRAINSIM_CHECK(graph.initial_gpu_memory.size() == ranks.size() &&
                     graph.initial_host_memory.size() == ranks.size(),
                 "build_memory_timeline: initial memory not sized like simulated ranks");

  MemoryTimeline tl;
  tl.gpus_per_node = gpus_per_node;
  tl.gpu_ranks = ranks;
  double start = std::numeric_limits<double>::infinity();
  for (TaskId id = 0; id < n; ++id)
    if (task_ran(record, id)) start = std::min(start, record.start_s[id]);
  tl.start_s = start == std::numeric_limits<double>::infinity() ? 0.0 : start;

  std::vector<std::vector<RawEvent>> gpu_raw(ranks.size()), host_raw(ranks.size());
  for (TaskId id = 0; id < n; ++id) {
    const MemEffect* b = graph.effects_begin(id);
    const MemEffect* e = graph.effects_end(id);
    if (b == e || !task_ran(record, id)) continue;
    const std::uint32_t ri = graph.rank_index(graph.task(id).rank);
    const double ts = record.start_s[id], te = record.end_s[id];
    for (const MemEffect* m = b; m != e; ++m) {
      if (m->bytes == 0) continue;
      RawEvent ev{m->at_end ? te : ts,
                  static_cast<std::uint8_t>(m->at_end ? (te > ts ? 0 : 2) : 1),
                  static_cast<std::uint8_t>(m->bytes < 0),
                  m->category,
                  id,
                  static_cast<std::uint32_t>(m - b),
                  m->bytes};
      (m->on_host ? host_raw : gpu_raw)[ri].push_back(ev);
    }
  }
  tl.gpu.reserve(ranks.size());
  for (std::size_t i = 0; i < ranks.size(); ++i) {
    tl.gpu.push_back(make_series(graph.initial_gpu_memory[i], gpu_raw[i], tl.start_s));
    std::vector<RawEvent>().swap(gpu_raw[i]);
  }

  // Host memory per node: the node's GPUs, each represented by its simulated rank.
  const std::vector<std::uint32_t> rep = representative_indices(graph);
  const std::int64_t nodes = (graph.world_size + gpus_per_node - 1) / gpus_per_node;
  std::map<std::vector<std::pair<std::uint32_t, std::int64_t>>, std::uint32_t> by_composition;
  tl.node_series.resize(static_cast<std::size_t>(nodes));
  for (std::int64_t node = 0; node < nodes; ++node) {
    std::map<std::uint32_t, std::int64_t> count;
    const std::int64_t end = std::min(graph.world_size, (node + 1) * gpus_per_node);
    for (std::int64_t r = node * gpus_per_node; r < end; ++r) ++count[rep[r]];
    std::vector<std::pair<std::uint32_t, std::int64_t>> key(count.begin(), count.end());
    auto [it, inserted] =
        by_composition.emplace(key, static_cast<std::uint32_t>(tl.host_series.size()));
    tl.node_series[node] = it->second;
    if (!inserted) continue;
    MemVector initial{};
    std::vector<RawEvent> raw;
    for (const auto& [ri, k] : key) {
      for (int c = 0; c < kNumMemCategories; ++c)
        initial[c] += k * graph.initial_host_memory[ri][c];
      for (RawEvent ev : host_raw[ri]) {
        ev.delta_bytes *= k;
        raw.push_back(ev);
      }
    }
    tl.host_series.push_back(make_series(initial, raw, tl.start_s));
  }
  return tl;
}

void write_memory_csv(std::ostream& out, const MemoryTimeline& timeline,
                      const std::vector<RankId>& ranks) {
  // The cuda_graphs column only where a rank holds CUDA graph buffers (static: in the initial
  // state), so that a run without CUDA graphs writes the columns it always had.
  constexpr int kGraphs = int(MemCategory::CudaGraphs);
  bool graphs = false;
  for (const MemorySeries& s : timeline.gpu) graphs = graphs || s.initial[kGraphs] != 0;
  out << "time_s,device,id";
  for (int c = 0; c < kNumMemCategories; ++c)
    if (c != kGraphs || graphs) out << ',' << to_string(static_cast<MemCategory>(c));
  out << ",total\n";
  char buf[64];
  auto rows = [&](const char* device, std::int64_t id, const MemorySeries& s) {
    s.for_each_step(timeline.start_s, [&](double t, const MemVector& v) {
      std::snprintf(buf, sizeof buf, "%.9f", t);
      out << buf << ',' << device << ',' << id;
      for (int c = 0; c < kNumMemCategories; ++c)
        if (c != kGraphs || graphs) out << ',' << v[c];
      out << ',' << total_bytes(v) << '\n';
    });
  };
  std::vector<std::int64_t> nodes;
  for (RankId r : ranks) {
    rows("gpu", r, timeline.gpu_of(r));
    nodes.push_back(r / timeline.gpus_per_node);
  }
  std::sort(nodes.begin(), nodes.end());
  nodes.erase(std::unique(nodes.begin(), nodes.end()), nodes.end());
  for (std::int64_t node : nodes) rows("host", node, timeline.host(node));
}

}  // namespace trainsim
