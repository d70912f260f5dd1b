#include "validation/compare.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <sstream>
#include <stdexcept>

#include "models/errors.h"

namespace trainsim::validation {

using nlohmann::json;

const char* to_string(KindGroup g) {
  switch (g) {
    case KindGroup::Compute: return "compute";
    case KindGroup::Copies: return "copies";
    case KindGroup::Collectives: return "collectives";
    case KindGroup::Optimizer: return "optimizer";
    case KindGroup::kCount: break;
  }
  TRAINSIM_CHECK(false, "to_string: KindGroup out of range");
}

KindGroup kind_group(TaskKind k) {
  switch (k) {
    case TaskKind::Compute: return KindGroup::Compute;
    case TaskKind::CopyH2D:
    case TaskKind::CopyD2H: return KindGroup::Copies;
    case TaskKind::Collective:
    case TaskKind::Send:
    case TaskKind::Recv: return KindGroup::Collectives;
    case TaskKind::OptimizerGpu:
    case TaskKind::OptimizerCpu: return KindGroup::Optimizer;
  }
  TRAINSIM_CHECK(false, "kind_group: TaskKind out of range");
}

namespace {

/// Linear-interpolated percentile of sorted values (q in [0, 1]).
double percentile(const std::vector<double>& sorted, double q) {
  if (sorted.empty()) return 0;
  const double pos = q * double(sorted.size() - 1);
  const std::size_t i = std::size_t(std::floor(pos));
  const double f = pos - double(i);
  return i + 1 < sorted.size() ? sorted[i] * (1 - f) + sorted[i + 1] * f : sorted[i];
}

std::pair<double, double> span_of(const ExecutionRecord& r, const std::vector<TaskId>& ids) {
  double lo = std::numeric_limits<double>::infinity(), hi = -lo;
  for (TaskId id : ids) lo = std::min(lo, r.start_s[id]), hi = std::max(hi, r.end_s[id]);
  return {lo, hi};
}

}  // namespace

Comparison compare_records(const ScheduleGraph& graph, RankId rank, const ExecutionRecord& sim,
                           const ExecutionRecord& meas, const MemoryFigures& memory,
                           std::size_t largest_count) {
  Comparison c;
  c.rank = rank;
  c.memory = memory;
  const std::vector<TaskId> ids = graph.tasks_of_rank(rank);
  TRAINSIM_CHECK(!ids.empty(), "compare_records: rank has no tasks");
  for (TaskId id : ids) {
    for (const ExecutionRecord* r : {&sim, &meas})
      TRAINSIM_CHECK(id < r->start_s.size() && std::isfinite(r->start_s[id]) &&
                         std::isfinite(r->end_s[id]),
                     "compare_records: task " + std::to_string(id) + " (" + graph.label(id) +
                         ") did not run in the " + (r == &sim ? "simulated" : "measured") +
                         " record");
    TaskComparison t;
    t.task = id;
    t.label = graph.label(id);
    t.group = kind_group(graph.task(id).kind);
    t.simulated_s = sim.end_s[id] - sim.start_s[id];
    t.measured_s = meas.end_s[id] - meas.start_s[id];
    c.tasks.push_back(std::move(t));
  }
  const auto [s0, s1] = span_of(sim, ids);
  const auto [m0, m1] = span_of(meas, ids);
  c.simulated_iteration_s = s1 - s0;
  c.measured_iteration_s = m1 - m0;

  std::vector<double> rel[int(KindGroup::kCount)];
  for (const TaskComparison& t : c.tasks) {
    GroupStats& g = c.groups[int(t.group)];
    ++g.tasks;
    g.simulated_sum_s += t.simulated_s;
    g.measured_sum_s += t.measured_s;
    g.mean_abs_error_s += std::abs(t.simulated_s - t.measured_s);
    if (t.measured_s >= kMinRelativeTaskS) rel[int(t.group)].push_back(t.error());
  }
  for (int k = 0; k < int(KindGroup::kCount); ++k) {
    GroupStats& g = c.groups[k];
    if (g.tasks) g.mean_abs_error_s /= double(g.tasks);
    std::sort(rel[k].begin(), rel[k].end());
    g.relative_tasks = rel[k].size();
    g.error_p10 = percentile(rel[k], 0.1);
    g.error_median = percentile(rel[k], 0.5);
    g.error_p90 = percentile(rel[k], 0.9);
  }
  std::vector<std::size_t> order(c.tasks.size());
  for (std::size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) {
    return std::abs(c.tasks[a].simulated_s - c.tasks[a].measured_s) >
           std::abs(c.tasks[b].simulated_s - c.tasks[b].measured_s);
  });
  order.resize(std::min(order.size(), largest_count));
  c.largest = order;
  return c;
}

json comparison_json(const Comparison& c) {
  json j;
  j["rank"] = c.rank;
  j["iteration_time_error"] = c.iteration_time_error();
  j["peak_memory_error"] = c.peak_memory_error();
  j["iteration_time_s"] = {{"simulated", c.simulated_iteration_s},
                           {"measured", c.measured_iteration_s}};
  j["peak_memory_bytes"] = {{"simulated", c.memory.simulated_peak_bytes},
                            {"measured", c.memory.measured_peak_bytes}};
  json cats = json::object();
  for (int k = 0; k < kNumMemCategories; ++k)
    cats[to_string(static_cast<MemCategory>(k))] = c.memory.simulated_by_category[k];
  j["simulated_peak_by_category"] = cats;
  json kinds = json::object();
  for (int k = 0; k < int(KindGroup::kCount); ++k) {
    const GroupStats& g = c.groups[k];
    kinds[to_string(static_cast<KindGroup>(k))] = {
        {"tasks", g.tasks},
        {"simulated_sum_s", g.simulated_sum_s},
        {"measured_sum_s", g.measured_sum_s},
        {"sum_error", g.measured_sum_s > 0 ? (g.simulated_sum_s - g.measured_sum_s) / g.measured_sum_s
                                           : 0.0},
        {"relative_tasks", g.relative_tasks},
        {"error_p10", g.error_p10},
        {"error_median", g.error_median},
        {"error_p90", g.error_p90},
        {"mean_abs_error_s", g.mean_abs_error_s}};
  }
  j["per_kind"] = kinds;
  j["min_relative_task_s"] = kMinRelativeTaskS;
  json big = json::array();
  for (std::size_t i : c.largest) {
    const TaskComparison& t = c.tasks[i];
    big.push_back({{"task", t.task},
                   {"label", t.label},
                   {"kind", to_string(t.group)},
                   {"simulated_s", t.simulated_s},
                   {"measured_s", t.measured_s},
                   {"difference_s", t.simulated_s - t.measured_s},
                   {"error", t.measured_s > 0 ? json(t.error()) : json(nullptr)}});
  }
  j["largest_mismatches"] = big;
  j["tasks_compared"] = c.tasks.size();
  return j;
}

// ---------------------------------------------------------------- HTML
namespace {

std::string esc(const std::string& s) {
  std::string o;
  for (char ch : s) {
    switch (ch) {
      case '&': o += "&amp;"; break;
      case '<': o += "&lt;"; break;
      case '>': o += "&gt;"; break;
      case '"': o += "&quot;"; break;
      default: o += ch;
    }
  }
  return o;
}

std::string fmt(const char* f, double v) {
  char b[64];
  std::snprintf(b, sizeof b, f, v);
  return b;
}
std::string pct(double v) { return fmt("%+.1f%%", 100 * v); }
std::string secs(double v) {
  if (std::abs(v) >= 1) return fmt("%.3f s", v);
  if (std::abs(v) >= 1e-3) return fmt("%.3f ms", v * 1e3);
  return fmt("%.1f us", v * 1e6);
}
std::string mib(double b) { return fmt("%.2f MiB", b / 1048576.0); }

const char* color_of(KindGroup g) {
  switch (g) {
    case KindGroup::Compute: return "#4e79a7";
    case KindGroup::Copies: return "#f28e2b";
    case KindGroup::Collectives: return "#59a14f";
    case KindGroup::Optimizer: return "#e15759";
    case KindGroup::kCount: break;
  }
  return "#999";
}

/// One timeline (a record's spans of the rank) as an SVG group at vertical offset y0.
void svg_timeline(std::ostringstream& o, const ScheduleGraph& g, const std::vector<TaskId>& ids,
                  const ExecutionRecord& r, const char* title, double y0, double x0, double width,
                  double t_max, double lane_h) {
  double t0 = std::numeric_limits<double>::infinity();
  for (TaskId id : ids) t0 = std::min(t0, r.start_s[id]);
  bool used[kNumStreams] = {};
  for (TaskId id : ids) used[int(g.task(id).stream)] = true;
  int lane_of[kNumStreams], lanes = 0;
  for (int s = 0; s < kNumStreams; ++s) lane_of[s] = used[s] ? lanes++ : -1;
  o << "<text x='4' y='" << y0 - 6 << "' class='h'>" << title << "</text>\n";
  for (int s = 0; s < kNumStreams; ++s) {
    if (lane_of[s] < 0) continue;
    const double y = y0 + lane_of[s] * lane_h;
    o << "<text x='4' y='" << y + lane_h * 0.7 << "' class='l'>"
      << to_string(static_cast<StreamId>(s)) << "</text>";
    o << "<rect x='" << x0 << "' y='" << y << "' width='" << width << "' height='" << lane_h - 2
      << "' fill='#f4f4f4'/>\n";
  }
  for (TaskId id : ids) {
    const Task& t = g.task(id);
    const double x = x0 + (r.start_s[id] - t0) / t_max * width;
    const double w = std::max(0.5, (r.end_s[id] - r.start_s[id]) / t_max * width);
    const double y = y0 + lane_of[int(t.stream)] * lane_h;
    o << "<rect x='" << fmt("%.2f", x) << "' y='" << y << "' width='" << fmt("%.2f", w)
      << "' height='" << lane_h - 2 << "' fill='" << color_of(kind_group(t.kind))
      << "' stroke='#fff' stroke-width='0.3'><title>" << esc(g.label(id)) << " ("
      << secs(r.end_s[id] - r.start_s[id]) << ")</title></rect>\n";
  }
}

}  // namespace

std::string html_report(const ScheduleGraph& g, const Comparison& c, const ExecutionRecord& sim,
                        const ExecutionRecord& meas, const json& context,
                        const std::vector<std::string>& notes) {
  std::ostringstream o;
  o << "<!DOCTYPE html>\n<html><head><meta charset='utf-8'><title>trainsim validate</title>\n"
       "<style>body{font-family:sans-serif;margin:20px;color:#222}table{border-collapse:"
       "collapse;margin:8px 0}td,th{border:1px solid #ccc;padding:3px 8px;text-align:right}"
       "th{background:#eee}td.t{text-align:left}.big{font-size:1.3em}.h{font-weight:bold;"
       "font-size:13px}.l{font-size:11px;fill:#444}</style></head><body>\n";
  o << "<h1>trainsim validate</h1>\n<table>";
  for (auto it = context.begin(); it != context.end(); ++it)
    o << "<tr><th>" << esc(it.key()) << "</th><td class='t'>"
      << esc(it->is_string() ? it->get<std::string>() : it->dump()) << "</td></tr>";
  o << "</table>\n";
  o << "<h2>Headline</h2><table><tr><th></th><th>simulated</th><th>measured</th><th>error</th></tr>"
    << "<tr><td class='t'>iteration time</td><td>" << secs(c.simulated_iteration_s) << "</td><td>"
    << secs(c.measured_iteration_s) << "</td><td class='big'>" << pct(c.iteration_time_error())
    << "</td></tr><tr><td class='t'>peak memory</td><td>" << mib(double(c.memory.simulated_peak_bytes))
    << "</td><td>" << mib(double(c.memory.measured_peak_bytes)) << "</td><td class='big'>"
    << pct(c.peak_memory_error()) << "</td></tr></table>\n"
    << "<p>Every error is (simulated &minus; measured) / measured, every difference simulated "
       "&minus; measured: positive when the simulation is slower (or holds more memory) than "
       "the measurement.</p>\n";
  o << "<p>Simulated peak by category: ";
  for (int k = 0; k < kNumMemCategories; ++k)
    if (c.memory.simulated_by_category[k])
      o << to_string(static_cast<MemCategory>(k)) << " " << mib(double(c.memory.simulated_by_category[k])) << "; ";
  o << "</p>\n<h2>Per task kind</h2><table><tr><th>kind</th><th>tasks</th><th>simulated sum</th>"
       "<th>measured sum</th><th>sum error</th><th>tasks &ge; "
    << secs(kMinRelativeTaskS) << "</th><th>error p10</th><th>median</th><th>p90</th><th>mean |diff|</th></tr>\n";
  for (int k = 0; k < int(KindGroup::kCount); ++k) {
    const GroupStats& s = c.groups[k];
    if (!s.tasks) continue;
    o << "<tr><td class='t'>" << to_string(static_cast<KindGroup>(k)) << "</td><td>" << s.tasks
      << "</td><td>" << secs(s.simulated_sum_s) << "</td><td>" << secs(s.measured_sum_s)
      << "</td><td>" << (s.measured_sum_s > 0 ? pct((s.simulated_sum_s - s.measured_sum_s) / s.measured_sum_s) : "-")
      << "</td><td>" << s.relative_tasks << "</td><td>" << pct(s.error_p10) << "</td><td>"
      << pct(s.error_median) << "</td><td>" << pct(s.error_p90) << "</td><td>"
      << secs(s.mean_abs_error_s) << "</td></tr>\n";
  }
  o << "</table>\n<h2>Largest mismatches</h2><table><tr><th>task</th><th>label</th><th>kind</th>"
       "<th>simulated</th><th>measured</th><th>difference</th><th>error</th></tr>\n";
  for (std::size_t i : c.largest) {
    const TaskComparison& t = c.tasks[i];
    o << "<tr><td>" << t.task << "</td><td class='t'>" << esc(t.label) << "</td><td class='t'>"
      << to_string(t.group) << "</td><td>" << secs(t.simulated_s) << "</td><td>"
      << secs(t.measured_s) << "</td><td>" << secs(t.simulated_s - t.measured_s) << "</td><td>"
      << (t.measured_s > 0 ? pct(t.error()) : "-") << "</td></tr>\n";
  }
  o << "</table>\n";

  // Timelines: simulated above measured, one time axis (the longer iteration).
  const std::vector<TaskId> ids = g.tasks_of_rank(c.rank);
  bool used[kNumStreams] = {};
  for (TaskId id : ids) used[int(g.task(id).stream)] = true;
  int lanes = 0;
  for (bool u : used) lanes += u;
  const double lane_h = 18, x0 = 70, width = 1100;
  const double t_max = std::max(c.simulated_iteration_s, c.measured_iteration_s);
  const double block = lanes * lane_h + 30;
  const double height = 20 + 2 * block + 30;
  o << "<h2>Timelines (rank " << c.rank << ")</h2>\n<svg xmlns='http://www.w3.org/2000/svg' width='"
    << x0 + width + 60 << "' height='" << height << "'>\n";
  svg_timeline(o, g, ids, sim, "simulated", 20 + 14, x0, width, t_max, lane_h);
  svg_timeline(o, g, ids, meas, "measured", 20 + block + 14, x0, width, t_max, lane_h);
  const double axis_y = 20 + 2 * block + 4;
  for (int i = 0; i <= 10; ++i) {
    const double x = x0 + width * i / 10.0;
    o << "<line x1='" << x << "' y1='" << axis_y << "' x2='" << x << "' y2='" << axis_y + 5
      << "' stroke='#444'/><text x='" << x - 12 << "' y='" << axis_y + 17 << "' class='l'>"
      << secs(t_max * i / 10.0) << "</text>\n";
  }
  o << "</svg>\n<p>";
  for (int k = 0; k < int(KindGroup::kCount); ++k)
    o << "<span style='display:inline-block;width:12px;height:12px;background:"
      << color_of(static_cast<KindGroup>(k)) << "'></span> " << to_string(static_cast<KindGroup>(k))
      << " &nbsp; ";
  o << "</p>\n";
  if (!notes.empty()) {
    o << "<h2>Notes</h2><ul>";
    for (const std::string& n : notes) o << "<li>" << esc(n) << "</li>";
    o << "</ul>\n";
  }
  o << "</body></html>\n";
  return o.str();
}

}  // namespace trainsim::validation
