// Calibration profiles: JSON load/save with strict validation, and the embedded defaults.
#include "models/calibration.h"

#include <cmath>
#include <fstream>
#include <sstream>
#include <stdexcept>

#include <nlohmann/json.hpp>

#include "models/scenario.h"  // InputError

namespace trainsim {
namespace {

using json = nlohmann::json;

/// One numeric parameter: its name in the file, the member it fills and its valid range.
struct ParamSpec {
  const char* name;
  double CalibrationProfile::*member;
  double min;           ///< inclusive unless min_exclusive
  bool min_exclusive;
  double max;           ///< inclusive
  bool integer;
};

// The single table that load, save and validation read. Ranges reject values that make no
// physical sense (efficiencies in (0, 1], positive rates, non-negative latencies).
const std::vector<ParamSpec>& param_specs() {
  using P = CalibrationProfile;
  constexpr double kInf = INFINITY;
  static const std::vector<ParamSpec> specs = {
      {"gemm_max_efficiency", &P::gemm_max_efficiency, 0, true, 1, false},
      {"gemm_tile_m", &P::gemm_tile_m, 1, false, 4096, true},
      {"gemm_tile_n", &P::gemm_tile_n, 1, false, 4096, true},
      {"sm_count", &P::sm_count, 1, false, 4096, true},
      {"hbm_efficiency", &P::hbm_efficiency, 0, true, 1, false},
      {"kernel_launch_overhead_s", &P::kernel_launch_overhead_s, 0, false, 1e-2, false},
      {"nvlink_efficiency", &P::nvlink_efficiency, 0, true, 1, false},
      {"network_efficiency", &P::network_efficiency, 0, true, 1, false},
      {"pcie_efficiency", &P::pcie_efficiency, 0, true, 1, false},
      {"nccl_launch_latency_s", &P::nccl_launch_latency_s, 0, false, 1e-1, false},
      {"nccl_step_latency_intra_node_s", &P::nccl_step_latency_intra_node_s, 0, false, 1e-2, false},
      {"nccl_step_latency_inter_node_s", &P::nccl_step_latency_inter_node_s, 0, false, 1e-2, false},
      {"host_memory_bw_bytes_per_s", &P::host_memory_bw_bytes_per_s, 0, true, kInf, false},
      {"host_memory_efficiency", &P::host_memory_efficiency, 0, true, 1, false},
      {"cpu_flops_per_core_per_s", &P::cpu_flops_per_core_per_s, 0, true, kInf, false},
  };
  return specs;
}

const char* const kTopLevelKeys[] = {"version", "device", "source", "date", "notes", "parameters"};

[[noreturn]] void fail(const std::string& file, const std::string& field, const std::string& value,
                       const std::string& why) {
  throw InputError(file + ": field '" + field + "' = " + value + ": " + why);
}

std::string dump(const json& j) {
  std::string s = j.dump();
  if (s.size() > 80) s = s.substr(0, 77) + "...";
  return s;
}

std::string read_string(const json& obj, const char* key, const std::string& file, bool required) {
  auto it = obj.find(key);
  if (it == obj.end()) {
    if (required) fail(file, key, "(missing)", "required");
    return {};
  }
  if (!it->is_string()) fail(file, key, dump(*it), "expected a string");
  return it->get<std::string>();
}

void check_range(const ParamSpec& spec, double v, const std::string& file, const std::string& field,
                 const json& raw) {
  if (!std::isfinite(v)) fail(file, field, dump(raw), "must be a finite number");
  const bool below = spec.min_exclusive ? v <= spec.min : v < spec.min;
  if (below || v > spec.max) {
    std::ostringstream range;
    range << (spec.min_exclusive ? "(" : "[") << spec.min << ", " << spec.max << "]";
    fail(file, field, dump(raw), "out of range " + range.str());
  }
  if (spec.integer && v != std::floor(v)) fail(file, field, dump(raw), "must be an integer");
}

}  // namespace

std::vector<std::string> calibration_parameter_names() {
  std::vector<std::string> names;
  for (const auto& s : param_specs()) names.emplace_back(s.name);
  return names;
}

CalibrationProfile parse_calibration(const std::string& text, const std::string& file) {
  json root;
  try {
    root = json::parse(text);
  } catch (const json::parse_error& e) {
    throw InputError(file + ": invalid JSON: " + e.what());
  }
  if (!root.is_object()) fail(file, "(root)", dump(root), "expected a JSON object");
  for (auto it = root.begin(); it != root.end(); ++it) {
    bool known = false;
    for (const char* k : kTopLevelKeys) known = known || it.key() == k;
    if (!known)
      fail(file, it.key(), dump(it.value()),
           "unknown key (expected version, device, source, date, notes, parameters)");
  }

  CalibrationProfile p;
  auto v = root.find("version");
  if (v == root.end()) fail(file, "version", "(missing)", "required");
  if (!v->is_number_integer()) fail(file, "version", dump(*v), "expected an integer");
  p.version = v->get<int>();
  if (p.version != 1) fail(file, "version", dump(*v), "unsupported version (this build reads 1)");
  p.device = read_string(root, "device", file, true);
  p.source = read_string(root, "source", file, true);
  p.date = read_string(root, "date", file, false);
  p.notes = read_string(root, "notes", file, false);

  auto params = root.find("parameters");
  if (params == root.end()) fail(file, "parameters", "(missing)", "required");
  if (!params->is_object()) fail(file, "parameters", dump(*params), "expected an object");
  const auto& specs = param_specs();
  for (auto it = params->begin(); it != params->end(); ++it) {
    const std::string field = "parameters." + it.key();
    const ParamSpec* spec = nullptr;
    for (const auto& s : specs)
      if (it.key() == s.name) spec = &s;
    if (!spec) fail(file, field, dump(it.value()), "unknown parameter");
    const json& entry = it.value();
    const json* value = &entry;
    if (entry.is_object()) {
      for (auto e = entry.begin(); e != entry.end(); ++e)
        if (e.key() != "value" && e.key() != "source")
          fail(file, field + "." + e.key(), dump(e.value()),
               "unknown key (expected value, source)");
      auto vv = entry.find("value");
      if (vv == entry.end()) fail(file, field + ".value", "(missing)", "required");
      value = &*vv;
      auto src = entry.find("source");
      if (src != entry.end()) {
        if (!src->is_string()) fail(file, field + ".source", dump(*src), "expected a string");
        p.sources[spec->name] = src->get<std::string>();
      }
    }
    const std::string vfield = entry.is_object() ? field + ".value" : field;
    if (!value->is_number()) fail(file, vfield, dump(*value), "expected a number");
    const double x = value->get<double>();
    check_range(*spec, x, file, vfield, *value);
    p.*(spec->member) = x;
  }
  for (const auto& s : specs)
    if (params->find(s.name) == params->end())
      fail(file, std::string("parameters.") + s.name, "(missing)", "required");
  return p;
}

CalibrationProfile load_calibration(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw InputError(path + ": cannot open calibration profile");
  std::stringstream ss;
  ss << in.rdbuf();
  return parse_calibration(ss.str(), path);
}

std::string calibration_to_json(const CalibrationProfile& p) {
  json root = json::object();
  root["version"] = p.version;
  root["device"] = p.device;
  root["source"] = p.source;
  if (!p.date.empty()) root["date"] = p.date;
  if (!p.notes.empty()) root["notes"] = p.notes;
  json params = json::object();
  for (const auto& s : param_specs()) {
    auto src = p.sources.find(s.name);
    if (src != p.sources.end())
      params[s.name] = {{"value", p.*(s.member)}, {"source", src->second}};
    else
      params[s.name] = p.*(s.member);
  }
  root["parameters"] = params;
  return root.dump(2) + "\n";
}

void save_calibration(const CalibrationProfile& p, const std::string& path) {
  std::ofstream out(path);
  if (!out) throw InputError(path + ": cannot write calibration profile");
  out << calibration_to_json(p);
  if (!out) throw InputError(path + ": error while writing calibration profile");
}

std::vector<std::string> default_calibration_devices() {
  std::vector<std::string> devices;
  for (const auto& [name, text] : detail::embedded_calibration_files())
    devices.push_back(parse_calibration(text, "embedded calibration/" + name).device);
  return devices;
}

CalibrationProfile default_calibration(const std::string& gpu_name) {
  std::string known;
  for (const auto& [name, text] : detail::embedded_calibration_files()) {
    CalibrationProfile p = parse_calibration(text, "embedded calibration/" + name);
    if (p.device == gpu_name) return p;
    known += (known.empty() ? "" : ", ") + p.device;
  }
  throw InputError("no default calibration profile for GPU '" + gpu_name +
                   "'; known devices: " + known);
}

bool operator==(const CalibrationProfile& a, const CalibrationProfile& b) {
  if (a.version != b.version || a.device != b.device || a.source != b.source ||
      a.date != b.date || a.notes != b.notes || a.sources != b.sources)
    return false;
  for (const auto& s : param_specs())
    if (a.*(s.member) != b.*(s.member)) return false;
  return true;
}

}  // namespace trainsim
