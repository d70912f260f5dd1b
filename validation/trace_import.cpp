#include "validation/trace_import.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <limits>
#include <map>
#include <sstream>
#include <unordered_map>

#include "models/scenario.h"  // InputError

namespace trainsim::validation {

using nlohmann::json;

namespace {

std::int64_t as_int(const json& j) {
  if (j.is_number_integer()) return j.get<std::int64_t>();
  if (j.is_number()) return static_cast<std::int64_t>(j.get<double>());
  if (j.is_string()) {
    try {
      return std::stoll(j.get<std::string>());
    } catch (const std::exception&) {
      return 0;
    }
  }
  return 0;
}

bool is_float_type(const std::string& t) {
  return t == "float" || t == "double" || t == "c10::Half" || t == "c10::BFloat16";
}

}  // namespace

ImportedTrace parse_chrome_trace(const std::string& text, const std::string& source) {
  json root;
  try {
    root = json::parse(text);
  } catch (const json::parse_error& e) {
    throw InputError(source + ": invalid JSON: " + e.what());
  }
  const json* events = nullptr;
  if (root.is_object() && root.contains("traceEvents"))
    events = &root["traceEvents"];
  else if (root.is_array())
    events = &root;
  if (!events || !events->is_array())
    throw InputError(source + ": field 'traceEvents': missing (not a Chrome trace)");
  ImportedTrace out;
  out.source = source;
  if (root.is_object() && root.contains("trainsim_meta") && root["trainsim_meta"].is_object())
    out.default_dtype = root["trainsim_meta"].value("dtype", "");
  bool has_task = false;
  for (const json& e : *events) {
    if (!e.is_object() || e.value("ph", "") != "X") continue;
    if (!e.contains("ts") || !e.contains("dur")) continue;
    TraceSpan s;
    s.name = e.value("name", "");
    s.cat = e.value("cat", "");
    if (!e.contains("cat")) s.cat = s.name.rfind("aten::", 0) == 0 ? "cpu_op" : "user_annotation";
    s.start_s = e["ts"].get<double>() * 1e-6;  // Chrome trace times are microseconds
    s.dur_s = e["dur"].get<double>() * 1e-6;
    s.pid = e.contains("pid") ? as_int(e["pid"]) : 0;
    s.tid = e.contains("tid") ? as_int(e["tid"]) : 0;
    if (e.contains("args") && e["args"].is_object()) {
      s.args = e["args"];
      if (s.args.contains("task") && s.args["task"].is_number_integer()) has_task = true;
    }
    out.spans.push_back(std::move(s));
  }
  if (out.spans.empty()) throw InputError(source + ": no complete (ph X) events");
  out.format = has_task ? TraceFormat::Trainsim : TraceFormat::Kineto;
  std::stable_sort(out.spans.begin(), out.spans.end(), [](const TraceSpan& a, const TraceSpan& b) {
    if (a.pid != b.pid) return a.pid < b.pid;
    if (a.tid != b.tid) return a.tid < b.tid;
    if (a.start_s != b.start_s) return a.start_s < b.start_s;
    return a.dur_s > b.dur_s;  // enclosing ranges first
  });
  return out;
}

ImportedTrace load_chrome_trace(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw InputError(path + ": cannot open the trace");
  std::stringstream ss;
  ss << in.rdbuf();
  return parse_chrome_trace(ss.str(), path);
}

std::vector<OpSample> operator_samples(const ImportedTrace& trace) {
  std::vector<OpSample> out;
  // Innermost enclosing user_annotation per (pid, tid): spans are sorted by start with
  // enclosing ranges first, so a stack of open annotations works.
  std::vector<const TraceSpan*> stack;
  std::int64_t pid = std::numeric_limits<std::int64_t>::min(), tid = pid;
  for (const TraceSpan& s : trace.spans) {
    if (s.pid != pid || s.tid != tid) stack.clear(), pid = s.pid, tid = s.tid;
    while (!stack.empty() && stack.back()->start_s + stack.back()->dur_s <= s.start_s)
      stack.pop_back();
    if (s.cat == "user_annotation") {
      stack.push_back(&s);
      continue;
    }
    if (s.cat != "cpu_op" && s.cat != "kernel") continue;
    if (!s.args.is_object() || !s.args.contains("Input Dims")) continue;
    OpSample op;
    op.name = s.name;
    op.dur_s = s.dur_s;
    for (const json& d : s.args["Input Dims"]) {
      std::vector<std::int64_t> dims;
      if (d.is_array())
        for (const json& x : d)
          if (x.is_number()) dims.push_back(x.get<std::int64_t>());
      op.input_dims.push_back(std::move(dims));
    }
    if (s.args.contains("Input type") && s.args["Input type"].is_array())
      for (const json& t : s.args["Input type"])
        if (t.is_string() && is_float_type(t.get<std::string>())) {
          op.dtype = t.get<std::string>();
          break;
        }
    if (op.dtype.empty()) op.dtype = trace.default_dtype;
    if (!stack.empty()) op.task_label = stack.back()->name;
    out.push_back(std::move(op));
  }
  return out;
}

bool gemm_of(const OpSample& op, GemmSample* g) {
  const auto& d = op.input_dims;
  auto two = [&](std::size_t i) { return i < d.size() && d[i].size() == 2; };
  auto three = [&](std::size_t i) { return i < d.size() && d[i].size() == 3; };
  GemmSample s;
  s.dur_s = op.dur_s;
  if (op.name == "aten::mm" && two(0) && two(1) && d[0][1] == d[1][0]) {
    s.m = double(d[0][0]), s.k = double(d[0][1]), s.n = double(d[1][1]);
  } else if (op.name == "aten::addmm" && two(1) && two(2) && d[1][1] == d[2][0]) {
    s.m = double(d[1][0]), s.k = double(d[1][1]), s.n = double(d[2][1]);
  } else if (op.name == "aten::bmm" && three(0) && three(1) && d[0][2] == d[1][1] &&
             d[0][0] == d[1][0]) {
    s.batch = double(d[0][0]), s.m = double(d[0][1]), s.k = double(d[0][2]), s.n = double(d[1][2]);
  } else if (op.name == "aten::baddbmm" && three(1) && three(2) && d[1][2] == d[2][1] &&
             d[1][0] == d[2][0]) {
    s.batch = double(d[1][0]), s.m = double(d[1][1]), s.k = double(d[1][2]), s.n = double(d[2][2]);
  } else {
    return false;
  }
  if (!(s.m > 0 && s.n > 0 && s.k > 0 && s.batch > 0 && s.dur_s > 0)) return false;
  *g = s;
  return true;
}

double kineto_element_bytes(const std::string& t) {
  if (t == "float" || t == "int") return 4;
  if (t == "double" || t == "long int" || t == "long") return 8;
  if (t == "c10::Half" || t == "c10::BFloat16") return 2;
  if (t == "bool" || t == "unsigned char" || t == "signed char") return 1;
  return 0;
}

bool elementwise_bytes(const OpSample& op, double* bytes) {
  const double e = kineto_element_bytes(op.dtype);
  if (e == 0 || op.input_dims.empty()) return false;
  double total = 0, first = -1;
  for (const auto& dims : op.input_dims) {
    if (dims.empty()) continue;  // scalar argument
    double n = 1;
    for (auto x : dims) n *= double(x);
    if (first < 0) first = n;
    total += n;
  }
  if (first <= 0) return false;
  *bytes = (total + first) * e;  // inputs read once, one output of the first input's size
  return true;
}

std::vector<double> task_durations(const ImportedTrace& trace, const ScheduleGraph& graph,
                                   RankId rank) {
  std::vector<double> out(graph.num_tasks(), std::numeric_limits<double>::quiet_NaN());
  if (trace.format == TraceFormat::Trainsim) {
    for (const TraceSpan& s : trace.spans) {
      if (!s.args.is_object() || !s.args.contains("task")) continue;
      const std::int64_t id = as_int(s.args["task"]);
      if (id >= 0 && std::size_t(id) < out.size() && graph.task(TaskId(id)).rank == rank)
        out[std::size_t(id)] = s.dur_s;
    }
    return out;
  }
  // Kineto: annotations by name, in time order.
  std::unordered_map<std::string, std::vector<const TraceSpan*>> by_name;
  std::vector<const TraceSpan*> annotations;
  for (const TraceSpan& s : trace.spans)
    if (s.cat == "user_annotation") annotations.push_back(&s);
  std::stable_sort(annotations.begin(), annotations.end(),
                   [](const TraceSpan* a, const TraceSpan* b) { return a->start_s < b->start_s; });
  for (const TraceSpan* s : annotations) by_name[s->name].push_back(s);
  std::unordered_map<std::string, std::size_t> taken;
  for (TaskId id : graph.tasks_of_rank(rank)) {
    const std::string label = graph.label(id);
    auto it = by_name.find(label);
    if (it == by_name.end()) continue;
    std::size_t& next = taken[label];
    if (next < it->second.size()) out[id] = it->second[next++]->dur_s;
  }
  return out;
}

}  // namespace trainsim::validation
