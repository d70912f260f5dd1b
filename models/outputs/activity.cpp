#include "models/outputs/activity.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <optional>
#include <stdexcept>
#include <string>
#include <unordered_map>
#include <utility>

#include "models/errors.h"
#include "models/perf/cost_model.h"

namespace trainsim {

std::vector<std::uint32_t> representative_indices(const ScheduleGraph& graph) {
  TRAINSIM_CHECK(!graph.partial_representatives.empty() ||
                     static_cast<std::int64_t>(graph.simulated_ranks().size()) * graph.fold_factor ==
                     graph.world_size,
                 "representative_indices: simulated ranks x fold_factor != world_size");
  std::vector<std::uint32_t> out(static_cast<std::size_t>(graph.world_size));
  for (std::int64_t r = 0; r < graph.world_size; ++r)
    out[r] = graph.rank_index(graph.representative_of(r));
  return out;
}

std::vector<double> active_start_s(const ScheduleGraph& graph, const ExecutionRecord& record) {
  const std::size_t n = graph.num_tasks();
  TRAINSIM_CHECK(record.start_s.size() == n && record.end_s.size() == n,
                 "active_start_s: the record does not match the graph's task count");
  // Key: (is point-to-point, match id). Collectives and messages may number their instances
  // independently, so the two kinds never share a key.
  auto key = [](const Task& t) {
    const bool p2p = t.kind == TaskKind::Send || t.kind == TaskKind::Recv;
    return (static_cast<std::uint64_t>(p2p) << 32) | t.match;
  };
  auto rendezvous = [](const Task& t) {
    return t.match != kNone &&
           (t.kind == TaskKind::Collective || t.kind == TaskKind::Send || t.kind == TaskKind::Recv);
  };
  std::unordered_map<std::uint64_t, double> latest;
  for (TaskId id = 0; id < n; ++id) {
    const Task& t = graph.task(id);
    if (!rendezvous(t) || !task_ran(record, id)) continue;
    auto [it, inserted] = latest.emplace(key(t), record.start_s[id]);
    if (!inserted) it->second = std::max(it->second, record.start_s[id]);
  }
  std::vector<double> out(n);
  for (TaskId id = 0; id < n; ++id) {
    if (!task_ran(record, id)) {
      out[id] = std::nan("");
      continue;
    }
    const Task& t = graph.task(id);
    double a = record.start_s[id];
    if (rendezvous(t)) a = latest.at(key(t));
    out[id] = std::min(std::max(a, record.start_s[id]), record.end_s[id]);
  }
  return out;
}

Activity activity_of(const ScheduleGraph& graph, TaskId id) {
  const Task& t = graph.task(id);
  switch (t.kind) {
    case TaskKind::Compute:
      return Activity::Compute;
    case TaskKind::OptimizerGpu:
    case TaskKind::OptimizerCpu:
      return Activity::Optimizer;
    case TaskKind::CopyH2D:
    case TaskKind::CopyD2H:
      return Activity::Offload;
    case TaskKind::Collective:
    case TaskKind::Send:
    case TaskKind::Recv:
      switch (graph.op(id).group) {
        case GroupKind::Tensor:
        case GroupKind::Context:  // the ring-attention exchange, inside the layer like TP's
        case GroupKind::Expert:   // MoE dispatch / combine, inside the layer too
          return Activity::TpComm;
        case GroupKind::Pipeline:
          return Activity::PpComm;
        case GroupKind::Data:
        case GroupKind::Embedding:
          return Activity::DpComm;
        case GroupKind::ModelParallel:  // inside Megatron's optimizer.step()
          return Activity::Optimizer;
        case GroupKind::None:
          break;
      }
      if (t.stream == StreamId::TpComm) return Activity::TpComm;
      if (t.stream == StreamId::PpComm || t.kind != TaskKind::Collective) return Activity::PpComm;
      return Activity::DpComm;
  }
  TRAINSIM_CHECK(false, "activity_of: TaskKind out of range");
}

const char* to_string(Activity a) {
  switch (a) {
    case Activity::Compute:
      return "compute";
    case Activity::Optimizer:
      return "optimizer";
    case Activity::Offload:
      return "offload";
    case Activity::TpComm:
      return "tp_comm";
    case Activity::PpComm:
      return "pp_comm";
    case Activity::DpComm:
      return "dp_comm";
    case Activity::kCount:
      break;
  }
  return "?";
}

ExposedTime exposed_time(const ScheduleGraph& graph, const ExecutionRecord& record,
                         const std::vector<double>& active_start, const std::vector<TaskId>& tasks,
                         double window_begin_s, double window_end_s) {
  struct Edge {
    double time_s;
    int delta;  // +1 begins, -1 ends
    std::uint8_t activity;
  };
  std::vector<Edge> edges;
  edges.reserve(2 * tasks.size());
  for (TaskId id : tasks) {
    if (!task_ran(record, id)) continue;
    const double a = std::max(active_start[id], window_begin_s);
    const double e = std::min(record.end_s[id], window_end_s);
    if (!(e > a)) continue;
    const auto act = static_cast<std::uint8_t>(activity_of(graph, id));
    edges.push_back({a, +1, act});
    edges.push_back({e, -1, act});
  }
  // The host timeline's issue waits [start - wait, start], below every activity.
  if (!record.host_wait_s.empty())
    for (TaskId id : tasks) {
      if (!task_ran(record, id) || !(record.host_wait_s[id] > 0)) continue;
      const double a = std::max(record.start_s[id] - record.host_wait_s[id], window_begin_s);
      const double e = std::min(record.start_s[id], window_end_s);
      if (!(e > a)) continue;
      edges.push_back({a, +1, std::uint8_t(kNumActivities)});
      edges.push_back({e, -1, std::uint8_t(kNumActivities)});
    }
  std::sort(edges.begin(), edges.end(), [](const Edge& x, const Edge& y) {
    if (x.time_s != y.time_s) return x.time_s < y.time_s;
    if (x.activity != y.activity) return x.activity < y.activity;
    return x.delta < y.delta;
  });
  ExposedTime out;
  int active[kNumActivities + 1] = {};  // the last: waiting for the host
  auto credit = [&](double dt) {
    if (dt <= 0) return;
    for (int a = 0; a < kNumActivities; ++a)
      if (active[a] > 0) {
        out.by_activity_s[a] += dt;
        return;
      }
    (active[kNumActivities] > 0 ? out.host_bound_s : out.idle_s) += dt;
  };
  double now = window_begin_s;
  for (std::size_t i = 0; i < edges.size();) {
    const double t = edges[i].time_s;
    credit(t - now);
    now = std::max(now, t);
    for (; i < edges.size() && edges[i].time_s == t; ++i)
      active[edges[i].activity] += edges[i].delta;
  }
  credit(window_end_s - now);
  return out;
}

const char* to_string(Link l) {
  switch (l) {
    case Link::PcieH2D:
      return "PCIe H2D";
    case Link::PcieD2H:
      return "PCIe D2H";
    case Link::NvLink:
      return "NVLink";
    case Link::Nic:
      return "NIC";
    case Link::kCount:
      break;
  }
  return "none";
}

LinkUse link_use(const ScheduleGraph& graph, TaskId id, std::int64_t gpus_per_node,
                 const CostModel* cost) {
  TRAINSIM_CHECK(gpus_per_node > 0, "link_use: gpus_per_node must be positive");
  const Task& t = graph.task(id);
  const OpDesc& op = graph.op(id);
  const std::int64_t node = t.rank / gpus_per_node;
  switch (t.kind) {
    case TaskKind::CopyH2D:
      return {Link::PcieH2D, static_cast<double>(op.bytes)};
    case TaskKind::CopyD2H:
      return {Link::PcieD2H, static_cast<double>(op.bytes)};
    case TaskKind::Send: {
      const bool intra = t.peer >= 0 && t.peer / gpus_per_node == node;
      return {intra ? Link::NvLink : Link::Nic, static_cast<double>(op.bytes)};
    }
    case TaskKind::Collective: {
      bool intra = true;
      if (t.group != kNone)
        for (RankId r : graph.group(t.group).ranks) intra = intra && r / gpus_per_node == node;
      else
        intra = op.group == GroupKind::Tensor;
      if (cost && t.group != kNone) {
        const std::int64_t n_nodes = graph.group(t.group).nodes(gpus_per_node);
        if (const std::optional<NcclChoice> c = cost->nvls_collective(
                op.kind, static_cast<double>(op.bytes), op.group_size, n_nodes)) {
          const NcclTraffic tr =
              nccl_traffic(*c, op.kind, static_cast<double>(op.bytes), op.group_size, n_nodes);
          return intra ? LinkUse{Link::NvLink, tr.nvlink_bytes} : LinkUse{Link::Nic, tr.nic_bytes};
        }
      }
      return {
          intra ? Link::NvLink : Link::Nic,
          CostModel::ring_bytes_per_rank(op.kind, static_cast<double>(op.bytes), op.group_size)};
    }
    case TaskKind::Recv:
    case TaskKind::Compute:
    case TaskKind::OptimizerGpu:
    case TaskKind::OptimizerCpu:
      return {};
  }
  TRAINSIM_CHECK(false, "link_use: TaskKind out of range");
}

std::vector<RankId> parse_rank_list(const std::string& text, std::int64_t world_size,
                                    const std::string& field) {
  auto fail = [&](const std::string& why) -> InputError {
    return InputError(field + " '" + text + "': " + why);
  };
  std::string s;
  for (char c : text)
    if (!std::isspace(static_cast<unsigned char>(c))) s += c;
  std::vector<RankId> out;
  if (s == "all") {
    for (std::int64_t r = 0; r < world_size; ++r) out.push_back(static_cast<RankId>(r));
    return out;
  }
  if (s.empty()) throw fail("empty rank list (expected e.g. 0-7,3064-3071 or all)");
  auto number = [&](const std::string& item, const std::string& digits) -> std::int64_t {
    if (digits.empty() || digits.size() > 12 ||
        !std::all_of(digits.begin(), digits.end(), [](char c) { return c >= '0' && c <= '9'; }))
      throw fail("'" + item + "' is not a rank or a range A-B");
    const std::int64_t v = std::stoll(digits);
    if (v >= world_size)
      throw fail("rank " + digits + " is outside the world (0 .. " +
                 std::to_string(world_size - 1) + ")");
    return v;
  };
  std::size_t pos = 0;
  while (pos <= s.size()) {
    const std::size_t comma = std::min(s.find(',', pos), s.size());
    const std::string item = s.substr(pos, comma - pos);
    if (item.empty()) throw fail("empty item in the list");
    const std::size_t dash = item.find('-');
    const std::int64_t a = number(item, item.substr(0, dash));
    const std::int64_t b = dash == std::string::npos ? a : number(item, item.substr(dash + 1));
    if (b < a) throw fail("range '" + item + "' is reversed");
    for (std::int64_t r = a; r <= b; ++r) out.push_back(static_cast<RankId>(r));
    pos = comma + 1;
  }
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

std::string format_rank_list(const std::vector<RankId>& ranks) {
  std::string out;
  for (std::size_t i = 0; i < ranks.size();) {
    std::size_t j = i;
    while (j + 1 < ranks.size() && ranks[j + 1] == ranks[j] + 1) ++j;
    if (!out.empty()) out += ',';
    out += std::to_string(ranks[i]);
    if (j > i) out += '-' + std::to_string(ranks[j]);
    i = j + 1;
  }
  return out;
}

}  // namespace trainsim
