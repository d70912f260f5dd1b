// trainsim diff (summary_diff.h). Reads two summary JSON files and lines up their figures.
#include "models/outputs/summary_diff.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <sstream>

#include "models/errors.h"
#include "models/json_input.h"
#include "models/outputs/summary.h"
#include "models/outputs/text_format.h"

namespace trainsim {

using nlohmann::json;

std::optional<double> DiffMetric::delta() const {
  if (!a || !b) return std::nullopt;
  return *b - *a;
}

std::optional<double> DiffMetric::relative() const {
  if (!a || !b || *a == 0) return std::nullopt;
  return *b / *a - 1;
}

namespace {

// The figures diff compares, in report order: (key, unit); nested objects are expanded key by
// key (their members in the first summary's order, then the second's extra ones).
struct MetricSpec {
  const char* key;
  const char* unit;
};
constexpr MetricSpec kScalars[] = {
    {"iteration_time_s", "s"},          {"tokens_per_s", "tokens/s"},
    {"tokens_per_s_per_gpu", "tokens/s"}, {"model_tflops_per_gpu", "TFLOP/s"},
    {"hardware_tflops_per_gpu", "TFLOP/s"}, {"mfu", ""},
    {"peak_memory_bytes", "bytes"},     {"host_peak_memory_bytes", "bytes"},
};
constexpr MetricSpec kObjects[] = {
    {"peak_memory_by_category", "bytes"},
    {"host_peak_memory_by_category", "bytes"},
    {"breakdown_s", "s"},
};
// Keys that describe how the run was laid out: compared as settings (values as spelled).
constexpr const char* kLayoutKeys[] = {
    "system", "gpu", "world_size", "tensor_model_parallel_size", "pipeline_model_parallel_size",
    "data_parallel_size", "virtual_pipeline_size", "micro_batch_size", "global_batch_size",
    "microbatches", "schedule", "zero_stage", "offload_optimizer", "offload_ratio",
    "calibration", "measured"};
// Keys a summary must have for diff to compare it (docs/summary.md, since summary_version 1).
constexpr const char* kRequired[] = {"iteration_time_s", "tokens_per_s", "peak_memory_bytes",
                                     "peak_memory_by_category", "breakdown_s", "world_size"};

std::string shown(const json& v) {
  std::string s = v.dump();
  return s.size() > 60 ? s.substr(0, 57) + "..." : s;
}

// A number (or null, for mfu on a device without a peak) at `key` of `obj`, checked.
std::optional<double> number_at(const json& obj, const std::string& key, const std::string& file,
                                const std::string& field) {
  const auto it = obj.find(key);
  if (it == obj.end() || it->is_null()) return std::nullopt;
  if (!it->is_number())
    throw InputError(file + ": field '" + field + "' = " + shown(*it) +
                     ": expected a number (is this a trainsim summary? docs/summary.md)");
  const double v = it->get<double>();
  if (!std::isfinite(v))
    throw InputError(file + ": field '" + field + "' = " + shown(*it) + ": not a finite number");
  return v;
}

void check_summary(const json& j, const std::string& path) {
  if (!j.is_object())
    throw InputError(path + ": not a trainsim summary (expected a JSON object, as written by "
                     "simulate --json; docs/summary.md)");
  const auto v = j.find("summary_version");
  if (v == j.end())
    throw InputError(path + ": field 'summary_version' is missing: not a trainsim summary "
                     "(simulate --json writes one; docs/summary.md)");
  if (!v->is_number_integer() || v->get<long long>() < 1 ||
      v->get<long long>() > kSummaryVersion)
    throw InputError(path + ": field 'summary_version' = " + shown(*v) +
                     ": this trainsim reads summary versions 1 to " +
                     std::to_string(kSummaryVersion));
  for (const char* key : kRequired)
    if (!j.contains(key))
      throw InputError(path + ": field '" + key + "' is missing (docs/summary.md)");
  for (const MetricSpec& m : kScalars) number_at(j, m.key, path, m.key);
  for (const MetricSpec& m : kObjects) {
    const auto it = j.find(m.key);
    if (it == j.end()) continue;
    if (!it->is_object())
      throw InputError(path + ": field '" + m.key + "' = " + shown(*it) + ": expected an object");
    for (const auto& [k, _] : it->items()) number_at(*it, k, path, std::string(m.key) + "." + k);
  }
  const auto s = j.find("settings");
  if (s != j.end() && !s->is_object())
    throw InputError(path + ": field 'settings' = " + shown(*s) + ": expected an object");
}

std::string name_of(const json& j) {
  const auto it = j.find("name");
  return it != j.end() && it->is_string() ? it->get<std::string>() : std::string("(unnamed)");
}

void add_object_metrics(SummaryDiff& d, const json& a, const json& b, const MetricSpec& m) {
  static const json kEmpty = json::object();
  const json& oa = a.contains(m.key) ? a.at(m.key) : kEmpty;
  const json& ob = b.contains(m.key) ? b.at(m.key) : kEmpty;
  std::vector<std::string> keys;
  for (const auto& [k, _] : oa.items()) keys.push_back(k);
  for (const auto& [k, _] : ob.items())
    if (!oa.contains(k)) keys.push_back(k);
  for (const std::string& k : keys) {
    const std::string dotted = std::string(m.key) + "." + k;
    d.metrics.push_back({dotted, m.unit, number_at(oa, k, "", dotted), number_at(ob, k, "", dotted)});
  }
}

void add_setting(SummaryDiff& d, const std::string& key, const json* a, const json* b) {
  const std::string sa = a ? a->dump() : "(absent)", sb = b ? b->dump() : "(absent)";
  if (sa != sb) d.settings.push_back({key, sa, sb});
}

void add_settings(SummaryDiff& d, const json& a, const json& b) {
  auto at = [](const json& j, const std::string& k) -> const json* {
    const auto it = j.find(k);
    return it == j.end() ? nullptr : &*it;
  };
  for (const char* k : kLayoutKeys) add_setting(d, k, at(a, k), at(b, k));
  static const json kEmpty = json::object();
  const json& sa = a.contains("settings") ? a.at("settings") : kEmpty;
  const json& sb = b.contains("settings") ? b.at("settings") : kEmpty;
  std::vector<std::string> keys;
  for (const auto& [k, _] : sa.items()) keys.push_back(k);
  for (const auto& [k, _] : sb.items())
    if (!sa.contains(k)) keys.push_back(k);
  for (const std::string& k : keys) add_setting(d, "settings." + k, at(sa, k), at(sb, k));
}

// tokens_per_s_per_gpu of a summary written before it was a key: tokens_per_s / world_size.
void fill_per_gpu(SummaryDiff& d, const json& a, const json& b) {
  for (DiffMetric& m : d.metrics) {
    if (m.key != "tokens_per_s_per_gpu") continue;
    auto derive = [](const json& j) -> std::optional<double> {
      const double w = j.at("world_size").get<double>();
      return w > 0 ? std::optional<double>(j.at("tokens_per_s").get<double>() / w) : std::nullopt;
    };
    if (!m.a) m.a = derive(a);
    if (!m.b) m.b = derive(b);
  }
}

std::string fmt(const char* format, double v) { return format_number(format, v); }  // text_format.h

std::string value_text(const std::optional<double>& v, const std::string& unit) {
  if (!v) return "-";
  if (unit == "bytes") return gib_text(*v, 2) + " GiB";
  if (unit == "s") return fmt("%.6f s", *v);
  if (unit.empty()) return fmt("%.4f", *v);
  return fmt("%.1f", *v);
}

std::string pad(std::string s, std::size_t n) {
  if (s.size() < n) s += std::string(n - s.size(), ' ');
  return s;
}

}  // namespace

json read_summary_file(const std::string& path) {
  const std::string text =
      read_input_file(path, "summary", "a summary .json file from simulate --json",
                      kLargeInputMaxBytes);
  json j = parse_json_input(text, path);
  check_summary(j, path);
  return j;
}

SummaryDiff diff_summaries(const json& a, const json& b) {
  SummaryDiff d;
  d.name_a = name_of(a);
  d.name_b = name_of(b);
  for (const MetricSpec& m : kScalars)
    d.metrics.push_back({m.key, m.unit, number_at(a, m.key, "", m.key),
                         number_at(b, m.key, "", m.key)});
  fill_per_gpu(d, a, b);
  for (const MetricSpec& m : kObjects) add_object_metrics(d, a, b, m);
  add_settings(d, a, b);
  return d;
}

json diff_to_json(const SummaryDiff& d) {
  auto opt = [](const std::optional<double>& v) { return v ? json(*v) : json(nullptr); };
  json metrics = json::array();
  for (const DiffMetric& m : d.metrics)
    metrics.push_back({{"key", m.key}, {"unit", m.unit}, {"a", opt(m.a)}, {"b", opt(m.b)},
                       {"delta", opt(m.delta())}, {"relative", opt(m.relative())}});
  json settings = json::array();
  for (const DiffSetting& s : d.settings)
    settings.push_back({{"key", s.key}, {"a", s.a}, {"b", s.b}});
  return {{"a", d.name_a}, {"b", d.name_b}, {"metrics", metrics}, {"settings_differ", settings}};
}

std::string format_text_diff(const SummaryDiff& d) {
  // Rows whose figure is 0 in both runs (host memory of a run without offload, an idle
  // category) are left out of the table; the JSON form has every row.
  auto both_zero = [](const DiffMetric& m) { return m.a && m.b && *m.a == 0 && *m.b == 0; };
  std::size_t key_w = 8, val_w = 14;
  for (const DiffMetric& m : d.metrics)
    if (!both_zero(m)) key_w = std::max(key_w, m.key.size());
  for (const DiffSetting& s : d.settings) {
    key_w = std::max(key_w, s.key.size());
    val_w = std::max(val_w, s.a.size());
  }
  key_w += 2;
  val_w += 2;
  std::ostringstream o;
  o << "A: " << d.name_a << "\nB: " << d.name_b << "\n";
  o << "  " << pad("", key_w) << pad("A", val_w) << pad("B", val_w) << "B vs A\n";
  for (const DiffMetric& m : d.metrics) {
    if (both_zero(m)) continue;
    const auto r = m.relative();
    const std::string change =
        r ? fmt("%+.1f%%", 100 * *r) : (m.delta() && *m.delta() == 0 ? "0" : "-");
    o << "  " << pad(m.key, key_w) << pad(value_text(m.a, m.unit), val_w)
      << pad(value_text(m.b, m.unit), val_w) << change << "\n";
  }
  if (d.settings.empty()) {
    o << "settings: the same\n";
  } else {
    o << "settings that differ:\n";
    for (const DiffSetting& s : d.settings)
      o << "  " << pad(s.key, key_w) << pad(s.a, val_w) << s.b << "\n";
  }
  return o.str();
}

}  // namespace trainsim
