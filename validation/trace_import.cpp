#include "validation/trace_import.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <limits>
#include <map>
#include <unordered_map>

#include "models/errors.h"
#include "models/json_input.h"

namespace trainsim::validation {

using nlohmann::json;

namespace {

/// A pid / tid: an integer, a number or a numeric string; anything else (Kineto writes names
/// such as "Spans" for some rows) is 0. Never a float-to-integer overflow.
std::int64_t as_int(const json& j) {
  if (j.is_number_integer()) return j.is_number_unsigned()
                                        ? static_cast<std::int64_t>(j.get<std::uint64_t>() >> 1)
                                        : j.get<std::int64_t>();
  double d = 0;
  if (j.is_number()) {
    d = j.get<double>();
  } else if (j.is_string()) {
    try {
      d = std::stod(j.get<std::string>());
    } catch (const std::exception&) {
      return 0;
    }
  } else {
    return 0;
  }
  if (!std::isfinite(d) || std::fabs(d) >= 9.0e18) return 0;
  return static_cast<std::int64_t>(d);
}

std::string describe(const json& j) {
  std::string s = j.dump();
  if (s.size() > 60) s = s.substr(0, 57) + "...";
  return s;
}

/// A string member of event `e` (number `index` of traceEvents), "" when absent.
std::string event_string(const json& e, const char* key, std::size_t index,
                         const std::string& source) {
  auto it = e.find(key);
  if (it == e.end() || it->is_null()) return {};
  if (!it->is_string())
    throw InputError(source + ": traceEvents[" + std::to_string(index) + "]: field '" + key +
                     "' = " + describe(*it) + ": expected a string");
  return it->get<std::string>();
}

/// A time member (microseconds) of event `e`, in seconds: a finite number, >= 0 for `dur`.
double event_time_s(const json& e, const char* key, std::size_t index, const std::string& source,
                    const std::string& name) {
  const json& v = e.at(key);
  const std::string where = source + ": traceEvents[" + std::to_string(index) + "]" +
                            (name.empty() ? "" : " ('" + name + "')") + ": field '" + key +
                            "' = " + describe(v);
  if (!v.is_number()) throw InputError(where + ": expected a number (microseconds)");
  const double us = v.get<double>();
  if (!std::isfinite(us) || std::fabs(us) > 1e18)
    throw InputError(where + ": out of range (at most 1e18 microseconds)");
  if (std::string(key) == "dur" && us < 0) throw InputError(where + ": must be >= 0");
  return us * 1e-6;  // Chrome trace times are microseconds
}

/// A tensor dimension from "Input Dims": an integer in [0, 2^62], else -1 (not a shape).
std::int64_t as_dim(const json& x) {
  if (x.is_number_unsigned())
    return x.get<std::uint64_t>() <= (std::uint64_t(1) << 62)
               ? static_cast<std::int64_t>(x.get<std::uint64_t>()) : -1;
  if (x.is_number_integer()) return x.get<std::int64_t>() >= 0 ? x.get<std::int64_t>() : -1;
  if (x.is_number_float()) {
    const double d = x.get<double>();
    if (std::isfinite(d) && d >= 0 && d <= 4.0e18 && d == std::floor(d))
      return static_cast<std::int64_t>(d);
  }
  return -1;
}

bool is_float_type(const std::string& t) {
  return t == "float" || t == "double" || t == "c10::Half" || t == "c10::BFloat16";
}

}  // namespace

ImportedTrace parse_chrome_trace(const std::string& text, const std::string& source) {
  const json root = parse_json_input(text, source);
  const json* events = nullptr;
  if (root.is_object() && root.contains("traceEvents"))
    events = &root.at("traceEvents");
  else if (root.is_array())
    events = &root;
  if (!events)
    throw InputError(source + ": field 'traceEvents': missing (not a Chrome trace: expected an "
                     "object with a 'traceEvents' list, or a list of events)");
  if (!events->is_array())
    throw InputError(source + ": field 'traceEvents' = " + describe(*events) +
                     ": expected a list of events");
  ImportedTrace out;
  out.source = source;
  bool gpu_events = false;
  std::string device_name;
  if (root.is_object()) {
    if (auto meta = root.find("trainsim_meta"); meta != root.end() && meta->is_object()) {
      if (auto d = meta->find("dtype"); d != meta->end() && d->is_string())
        out.default_dtype = d->get<std::string>();
      if (auto d = meta->find("device"); d != meta->end() && d->is_string())
        out.device = d->get<std::string>();
    }
    if (auto props = root.find("deviceProperties"); props != root.end() && props->is_array()) {
      gpu_events = gpu_events || !props->empty();
      for (const json& d : *props)
        if (d.is_object() && d.contains("name") && d.at("name").is_string()) {
          device_name = d.at("name").get<std::string>();
          break;
        }
    }
  }
  bool has_task = false;
  for (std::size_t index = 0; index < events->size(); ++index) {
    const json& e = (*events)[index];
    if (!e.is_object()) continue;
    const std::string ph = event_string(e, "ph", index, source);
    const std::string cat_field = event_string(e, "cat", index, source);
    if (cat_field == "kernel" || cat_field == "gpu_memcpy" || cat_field == "gpu_memset")
      gpu_events = true;
    if (ph != "X") continue;
    if (!e.contains("ts") || !e.contains("dur")) continue;
    TraceSpan s;
    s.name = event_string(e, "name", index, source);
    s.cat = cat_field;
    if (!e.contains("cat")) s.cat = s.name.rfind("aten::", 0) == 0 ? "cpu_op" : "user_annotation";
    s.start_s = event_time_s(e, "ts", index, source, s.name);
    s.dur_s = event_time_s(e, "dur", index, source, s.name);
    s.pid = e.contains("pid") ? as_int(e.at("pid")) : 0;
    s.tid = e.contains("tid") ? as_int(e.at("tid")) : 0;
    if (e.contains("args") && e.at("args").is_object()) {
      s.args = e.at("args");
      if (s.args.contains("task") && s.args.at("task").is_number_integer()) has_task = true;
    }
    out.spans.push_back(std::move(s));
  }
  if (out.spans.empty()) throw InputError(source + ": no complete (ph X) events");
  if (out.device.empty())
    out.device = !device_name.empty() ? device_name : gpu_events ? "cuda" : "cpu";
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
  return parse_chrome_trace(read_input_file(path, "trace", "a Chrome trace .json file", kLargeInputMaxBytes), path);
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
    const json& input_dims = s.args.at("Input Dims");
    if (!input_dims.is_array()) continue;
    for (const json& d : input_dims) {
      std::vector<std::int64_t> dims;
      bool shape = d.is_array();
      if (shape)
        for (const json& x : d) {
          const std::int64_t v = as_dim(x);
          if (v < 0) shape = false;
          dims.push_back(v);
        }
      if (!shape) dims.clear();  // not a shape: as for a scalar input
      op.input_dims.push_back(std::move(dims));
    }
    if (s.args.contains("Input type") && s.args.at("Input type").is_array())
      for (const json& t : s.args.at("Input type"))
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
      if (!s.args.is_object() || !s.args.contains("task") || s.cat == "host_issue") continue;
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

namespace {
std::string lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}
}  // namespace

std::string trace_device_mismatch(const ImportedTrace& trace, const std::string& profile_device) {
  const std::string t = lower(trace.device), p = lower(profile_device);
  const bool trace_cpu = t == "cpu" || t.rfind("cpu:", 0) == 0;
  const bool profile_cpu = p == "cpu" || p.rfind("cpu:", 0) == 0;
  if (trace_cpu && profile_cpu) return {};
  if (trace_cpu != profile_cpu)
    return "the trace was recorded on " + (trace_cpu ? std::string("the CPU") : "a GPU ('" + trace.device + "')") +
           ", the profile describes " + (profile_cpu ? std::string("the CPU") : "a GPU") + " ('" +
           profile_device + "')";
  if (t == "cuda" || p.empty()) return {};  // a GPU trace without a name: cannot tell
  if (t.find(p) != std::string::npos || p.find(t) != std::string::npos) return {};
  return "the trace was recorded on '" + trace.device + "', the profile describes '" +
         profile_device + "'";
}

}  // namespace trainsim::validation
