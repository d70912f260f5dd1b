#include "validation/measured_trace.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <set>
#include <sstream>

#include <nlohmann/json.hpp>

#include "models/errors.h"
#include "models/json_input.h"

namespace trainsim::validation {

namespace {

using json = nlohmann::json;

[[noreturn]] void fail(const std::string& path, const std::string& what) {
  throw InputError(path + ": " + what);
}

/// A string field, or "" when it is absent or not a string.
std::string str_field(const json& o, const char* key) {
  const auto it = o.find(key);
  return it != o.end() && it->is_string() ? it->get<std::string>() : std::string();
}

/// An integer field that fits std::int64_t (JSON's unsigned numbers above it do not).
bool int_field(const json& o, const char* key, std::int64_t* v) {
  const auto it = o.find(key);
  if (it == o.end() || !it->is_number_integer()) return false;
  if (it->is_number_unsigned() &&
      it->get<std::uint64_t>() > std::uint64_t(std::numeric_limits<std::int64_t>::max()))
    return false;
  *v = it->get<std::int64_t>();
  return true;
}

/// A number field of an event, or a failure naming the event.
double number(const std::string& path, const json& e, const char* key, std::size_t index) {
  const auto it = e.find(key);
  if (it == e.end() || !it->is_number())
    fail(path, "traceEvents[" + std::to_string(index) + "]: field '" + key +
                   "' is missing or not a number");
  return it->get<double>();
}

/// The trace's otherData, after checking that it is a replay's trace.
const json& measured_header(const std::string& path, const json& root) {
  if (!root.is_object() || !root.contains("traceEvents") || !root["traceEvents"].is_array())
    fail(path, "field 'traceEvents': missing; not a trace that trainsim replay --trace wrote");
  const auto other = root.find("otherData");
  if (other == root.end() || !other->is_object() || !other->contains("measured"))
    fail(path, "field 'otherData.measured': missing; not a trace that trainsim replay --trace "
               "wrote");
  if ((*other)["measured"] != true)
    fail(path, "field 'otherData.measured' = " + (*other)["measured"].dump() +
                   ": a simulated trace; --measured-trace takes what `trainsim replay --trace` "
                   "recorded");
  return *other;
}

}  // namespace

std::string MeasuredTraceFile::device() const {
  return executor.find("cuda") != std::string::npos ? "cuda" : "cpu";
}

MeasuredTraceFile read_measured_trace(const std::string& path) {
  return parse_measured_trace(
      read_input_file(path, "measured trace", "the .json file `trainsim replay --trace` wrote",
                      kLargeInputMaxBytes),
      path);
}

MeasuredTraceFile parse_measured_trace(const std::string& text, const std::string& source) {
  MeasuredTraceFile f;
  f.source = source;
  f.root = parse_json_input(text, source);
  f.executor = str_field(measured_header(source, f.root), "executor");
  return f;
}

MeasuredTrace measured_record(const MeasuredTraceFile& file, const ScheduleGraph& graph,
                              const std::string& scenario_name) {
  const std::string& path = file.source;
  const json& root = file.root;
  const json& other = root.at("otherData");  // measured_header checked it
  const std::string scenario = str_field(other, "scenario");
  if (scenario != scenario_name)
    fail(path, "field 'otherData.scenario' = '" + scenario + "': recorded from another scenario "
               "than '" + scenario_name + "'");

  MeasuredTrace out;
  const std::size_t n = graph.num_tasks();
  ExecutionRecord& r = out.record;
  r.start_s.assign(n, std::numeric_limits<double>::quiet_NaN());
  r.end_s.assign(n, std::numeric_limits<double>::quiet_NaN());
  r.measured = true;
  r.executor = file.executor;
  r.device = file.executor;
  if (other.contains("notes") && other["notes"].is_array())  // strings only
    for (const json& note : other["notes"])
      if (note.is_string()) r.notes.push_back(note.get<std::string>());

  // The rank: the one pid of the complete events.
  const json& events = root["traceEvents"];
  std::set<std::int64_t> pids;
  for (const json& e : events) {
    std::int64_t p = 0;
    if (e.is_object() && str_field(e, "ph") == "X" && int_field(e, "pid", &p)) pids.insert(p);
  }
  if (pids.empty()) fail(path, "no task spans (complete events, ph 'X') in 'traceEvents'");
  if (pids.size() > 1)
    fail(path, "task spans of " + std::to_string(pids.size()) + " ranks (pids " +
                   std::to_string(*pids.begin()) + ", " + std::to_string(*std::next(pids.begin())) +
                   ", ...): a replay records one rank per file");
  const std::int64_t pid = *pids.begin();
  if (pid < 0 || pid >= graph.world_size || graph.tasks_of_rank(RankId(pid)).empty())
    fail(path, "its tasks are those of rank " + std::to_string(pid) +
                   ", which the scenario's graph does not simulate");
  out.rank = RankId(pid);

  for (std::size_t i = 0; i < events.size(); ++i) {
    const json& e = events[i];
    std::int64_t event_pid = -1;
    if (!e.is_object() || !int_field(e, "pid", &event_pid) || event_pid != pid) continue;
    const std::string ph = str_field(e, "ph");
    if (ph == "C" && str_field(e, "name") == "allocator" && e.contains("args") &&
        e["args"].is_object()) {
      const json& a = e["args"];
      const double t = number(path, e, "ts", i) * 1e-6;
      std::int64_t v = 0;
      if (int_field(a, "allocated", &v)) r.allocated_bytes_samples.emplace_back(t, v);
      if (int_field(a, "reserved", &v)) r.reserved_bytes_samples.emplace_back(t, v);
      continue;
    }
    if (ph != "X") continue;
    // The host thread's issue spans (docs/trace.md "Replay additions") name their task too.
    // and the nested "waiting for peers" spans (cat wait): annotations, not tasks.
    const std::string cat = str_field(e, "cat");
    if (cat.rfind("host_", 0) == 0 || cat == "wait") continue;  // docs/trace.md
    std::int64_t id = -1;
    if (!e.contains("args") || !e["args"].is_object() || !int_field(e["args"], "task", &id))
      fail(path, "traceEvents[" + std::to_string(i) + "]: field 'args.task' is missing or not an "
                 "integer task id");
    const std::string name = str_field(e, "name");
    if (id < 0 || std::size_t(id) >= n || graph.task(TaskId(id)).rank != out.rank)
      fail(path, "traceEvents[" + std::to_string(i) + "]: task " + std::to_string(id) + " ('" +
                     name + "') is not a task of rank " + std::to_string(pid) +
                     " in the scenario's graph: recorded from another graph (other --set "
                     "values or another trainsim version)");
    if (graph.label(TaskId(id)) != name)
      fail(path, "traceEvents[" + std::to_string(i) + "]: task " + std::to_string(id) + " is '" +
                     name + "' in the trace and '" + graph.label(TaskId(id)) +
                     "' in the scenario's graph: recorded from another graph (other --set "
                     "values or another trainsim version)");
    const double ts = number(path, e, "ts", i) * 1e-6, dur = number(path, e, "dur", i) * 1e-6;
    if (!(dur >= 0) || !std::isfinite(ts) || !std::isfinite(dur) || !std::isfinite(ts + dur))
      fail(path, "traceEvents[" + std::to_string(i) + "]: task " + std::to_string(id) +
                     ": 'ts' / 'dur' must be finite and dur >= 0");
    if (!std::isnan(r.start_s[id]))
      fail(path, "traceEvents[" + std::to_string(i) + "]: task " + std::to_string(id) + " ('" +
                     name + "') appears twice");
    r.start_s[id] = ts;
    r.end_s[id] = ts + dur;
  }
  for (TaskId id : graph.tasks_of_rank(out.rank))
    if (std::isnan(r.start_s[id]))
      fail(path, "task " + std::to_string(id) + " ('" + graph.label(id) + "') of rank " +
                     std::to_string(pid) + " is not in the trace: recorded from another graph, "
                     "or a replay that did not finish");
  // One iteration's replay lasts seconds to minutes: a span of more than a day comes from a
  // corrupt timestamp (issue 35: a 'ts' of 1e300 us reported a measured iteration of 1e294 s).
  constexpr double kMaxReplaySpanS = 86400;
  TaskId first = graph.tasks_of_rank(out.rank).front(), last = first;
  for (TaskId id : graph.tasks_of_rank(out.rank)) {
    if (r.start_s[id] < r.start_s[first]) first = id;
    if (r.end_s[id] > r.end_s[last]) last = id;
  }
  if (r.end_s[last] - r.start_s[first] > kMaxReplaySpanS) {
    std::ostringstream o;
    o << "task " << last << " ('" << graph.label(last) << "') ends " << r.end_s[last]
      << " s after the trace's origin and task " << first << " ('" << graph.label(first)
      << "') starts at " << r.start_s[first] << " s: a replay of one iteration spanning more "
      << "than a day (86400 s); a corrupt 'ts' or 'dur'";
    fail(path, o.str());
  }
  // The allocator's peaks: otherData's, or, in traces written before it carried them, none,
  // so that measured_peak_*_bytes() is the largest sample (which misses peaks inside a task).
  if (!int_field(other, "peak_allocated_bytes", &r.peak_allocated_bytes) ||
      r.peak_allocated_bytes < 0) {
    r.peak_allocated_bytes = -1;
    if (r.allocated_bytes_samples.empty())
      fail(path, "no 'otherData.peak_allocated_bytes' and no 'allocator' counter for rank " +
                     std::to_string(pid) + ": the measured memory peak is unknown");
    r.notes.push_back("measured peak memory: the largest 'allocator' sample of the trace (it has "
                      "no otherData.peak_allocated_bytes), which misses peaks inside a task");
  } else {
    int_field(other, "peak_reserved_bytes", &r.peak_reserved_bytes);
  }
  if (r.measured_peak_allocated_bytes() <= 0)
    fail(path, "measured peak memory " + std::to_string(r.measured_peak_allocated_bytes()) +
                   " bytes (otherData.peak_allocated_bytes or the 'allocator' counter): a replay "
                   "allocates; not a replay's trace");
  return out;
}

}  // namespace trainsim::validation
