// Calibration profiles: JSON load/save with strict validation, and the embedded defaults.
#include "models/hardware/calibration.h"
#include "models/errors.h"
#include "models/json_input.h"

#include <algorithm>
#include <cmath>
#include <iterator>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

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
  bool optional = false;  ///< may be absent (value 0): newer parameters older profiles lack
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
      {"nccl_nvls_latency_s", &P::nccl_nvls_latency_s, 0, false, 1e-2, false, true},
      {"host_memory_bw_bytes_per_s", &P::host_memory_bw_bytes_per_s, 0, true, kInf, false},
      {"host_memory_efficiency", &P::host_memory_efficiency, 0, true, 1, false},
      {"cpu_flops_per_core_per_s", &P::cpu_flops_per_core_per_s, 0, true, kInf, false},
      {"framework_overhead_bytes", &P::framework_overhead_bytes, 0, false, 1e12, false},
      {"nccl_buffer_bytes_per_communicator", &P::nccl_buffer_bytes_per_communicator, 0, false, 1e11,
       false},
      {"gemm_fp8_max_efficiency", &P::gemm_fp8_max_efficiency, 0, true, 1, false, true},
      {"gemm_fp8_promotion_interval_k", &P::gemm_fp8_promotion_interval_k, 1, false, 1e6, true,
       true},
      {"flash_attention_fwd_efficiency", &P::flash_attention_fwd_efficiency, 0, true, 1, false,
       true},
      {"flash_attention_bwd_efficiency", &P::flash_attention_bwd_efficiency, 0, true, 1, false,
       true},
      {"moe_scatter_add_bytes_per_s", &P::moe_scatter_add_bytes_per_s, 0, false, 1e15, false,
       true},
      {"mxfp8_quantize_bytes_per_s", &P::mxfp8_quantize_bytes_per_s, 0, false, 1e15, false, true},
  };
  return specs;
}

// The host section (CalibrationProfile::host_*; sim/host_thread.h): issue costs in seconds
// (at most 10 ms each) and the launch queue depth (an integer >= 1).
const std::vector<ParamSpec>& host_specs() {
  using P = CalibrationProfile;
  static const std::vector<ParamSpec> specs = {
      {"eager_op_s", &P::host_eager_op_s, 0, false, 1e-2, false},
      {"te_module_s", &P::host_te_module_s, 0, false, 1e-2, false},
      {"autograd_node_s", &P::host_autograd_node_s, 0, false, 1e-2, false},
      {"nccl_call_s", &P::host_nccl_call_s, 0, false, 1e-2, false},
      {"module_overhead_s", &P::host_module_overhead_s, 0, false, 1e-2, false},
      {"launch_queue_depth", &P::host_launch_queue_depth, 1, false, 1e6, true},
      {"graph_launch_s", &P::host_graph_launch_s, 0, false, 1e-2, false},
      {"sync_s", &P::host_sync_s, 0, false, 1e-2, false},
  };
  return specs;
}

const char* const kTopLevelKeys[] = {"version",      "device",        "source",
                                     "date",         "notes",         "parameters",
                                     "host",
                                     "precision",    "local_device",  "gemm_efficiency",
                                     "memory_bound_bytes_per_s",      "measurements",
                                     "flash_attention_efficiency",
                                     "moe_grouped_gemm_efficiency"};

// The optional measured-profile fields (CalibrationProfile::local_device), in file order.
struct LocalSpec {
  const char* name;
  double CalibrationProfile::LocalDevice::*member;
};
const LocalSpec kLocalSpecs[] = {
    {"peak_flops", &CalibrationProfile::LocalDevice::peak_flops},
    {"memory_bw_bytes_per_s", &CalibrationProfile::LocalDevice::memory_bw_bytes_per_s},
    {"memory_bytes", &CalibrationProfile::LocalDevice::memory_bytes},
    {"copy_bw_bytes_per_s", &CalibrationProfile::LocalDevice::copy_bw_bytes_per_s},
    {"cores", &CalibrationProfile::LocalDevice::cores},
    {"threads", &CalibrationProfile::LocalDevice::threads},
    {"host_comm_latency_s", &CalibrationProfile::LocalDevice::host_comm_latency_s},
    {"host_comm_bw_bytes_per_s", &CalibrationProfile::LocalDevice::host_comm_bw_bytes_per_s},
    {"processes", &CalibrationProfile::LocalDevice::processes},
};

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

std::vector<std::string> calibration_host_names() {
  std::vector<std::string> names;
  for (const auto& s : host_specs()) names.emplace_back(s.name);
  return names;
}

bool has_host_costs(const CalibrationProfile& p) { return p.host_launch_queue_depth >= 1; }

namespace {

/// Top-level keys: only the known ones; then version, device, source, date, notes.
void read_header(const json& root, const std::string& file, CalibrationProfile& p) {
  if (!root.is_object()) fail(file, "(root)", dump(root), "expected a JSON object");
  for (auto it = root.begin(); it != root.end(); ++it) {
    bool known = false;
    for (const char* k : kTopLevelKeys) known = known || it.key() == k;
    if (!known)
      fail(file, it.key(), dump(it.value()),
           "unknown key (expected version, device, source, date, notes, parameters, "
           "precision, local_device, gemm_efficiency, memory_bound_bytes_per_s, "
           "measurements, flash_attention_efficiency, moe_grouped_gemm_efficiency)");
  }
  auto v = root.find("version");
  if (v == root.end()) fail(file, "version", "(missing)", "required");
  if (!v->is_number_integer()) fail(file, "version", dump(*v), "expected an integer");
  p.version = v->get<int>();
  if (p.version != 1) fail(file, "version", dump(*v), "unsupported version (this build reads 1)");
  p.device = read_string(root, "device", file, true);
  p.source = read_string(root, "source", file, true);
  p.date = read_string(root, "date", file, false);
  p.notes = read_string(root, "notes", file, false);
}

/// A section of parameters (`parameters`, `host`): every spec'd entry, as a number or
/// {value, source}, within its range; sources are kept under `prefix` + name. Absent: an
/// error when `required`, else nothing is read.
void read_section(const json& root, const char* section, const std::vector<ParamSpec>& specs,
                  const std::string& prefix, bool required, const std::string& file,
                  CalibrationProfile& p) {
  auto params = root.find(section);
  if (params == root.end()) {
    if (required) fail(file, section, "(missing)", "required");
    return;
  }
  if (!params->is_object()) fail(file, section, dump(*params), "expected an object");
  for (auto it = params->begin(); it != params->end(); ++it) {
    const std::string field = std::string(section) + "." + it.key();
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
        p.sources[prefix + spec->name] = src->get<std::string>();
      }
    }
    const std::string vfield = entry.is_object() ? field + ".value" : field;
    if (!value->is_number()) fail(file, vfield, dump(*value), "expected a number");
    const double x = value->get<double>();
    check_range(*spec, x, file, vfield, *value);
    p.*(spec->member) = x;
  }
  for (const auto& s : specs)
    if (!s.optional && params->find(s.name) == params->end())
      fail(file, std::string(section) + "." + s.name, "(missing)", "required");
}

void read_parameters(const json& root, const std::string& file, CalibrationProfile& p) {
  read_section(root, "parameters", param_specs(), "", true, file, p);
  read_section(root, "host", host_specs(), "host.", false, file, p);
}

/// Measured profiles: precision and the `local_device` figures.
void read_local_device(const json& root, const std::string& file, CalibrationProfile& p) {
  p.precision = read_string(root, "precision", file, false);
  if (!p.precision.empty() && p.precision != "fp32" && p.precision != "bf16" &&
      p.precision != "fp16")
    fail(file, "precision", dump(root.at("precision")), "expected fp32, bf16 or fp16");
  auto ld = root.find("local_device");
  if (ld == root.end()) return;
  if (!ld->is_object()) fail(file, "local_device", dump(*ld), "expected an object");
  for (auto it = ld->begin(); it != ld->end(); ++it) {
    const LocalSpec* spec = nullptr;
    for (const auto& s : kLocalSpecs)
      if (it.key() == s.name) spec = &s;
    const std::string field = "local_device." + it.key();
    if (!spec) fail(file, field, dump(it.value()), "unknown key");
    if (!it->is_number() || !std::isfinite(it->get<double>()) || it->get<double>() < 0)
      fail(file, field, dump(it.value()), "expected a finite number >= 0");
    p.local_device.*(spec->member) = it->get<double>();
  }
  const auto& d = p.local_device;
  if (d.host_comm_latency_s > 0 && !(d.host_comm_bw_bytes_per_s > 0))
    fail(file, "local_device.host_comm_latency_s", dump(ld->at("host_comm_latency_s")),
         "given without local_device.host_comm_bw_bytes_per_s (both are measured together by "
         "`trainsim calibrate --device cpu`)");
  if (ld->contains("processes") && (d.processes < 1 || d.processes != std::floor(d.processes)))
    fail(file, "local_device.processes", dump(ld->at("processes")),
         "expected a whole number >= 1 (the processes that measured the rates at once)");
}

/// The first `n` entries of a table row (`field`), each a finite number > 0, into `out`.
void read_positive_row(const json& row, int n, const std::string& file, const std::string& field,
                       double* out) {
  for (int c = 0; c < n; ++c) {
    if (!row[c].is_number()) fail(file, field, dump(row), "expected numbers");
    out[c] = row[c].get<double>();
    if (!std::isfinite(out[c]) || out[c] <= 0)
      fail(file, field, dump(row), "every entry must be a finite number > 0");
  }
}

/// `gemm_efficiency`: rows [m, n, k, batch, efficiency] or [..., role].
void read_gemm_table(const json& root, const std::string& file, CalibrationProfile& p) {
  auto ge = root.find("gemm_efficiency");
  if (ge == root.end()) return;
  if (!ge->is_array()) fail(file, "gemm_efficiency", dump(*ge), "expected an array");
  for (std::size_t i = 0; i < ge->size(); ++i) {
    const json& row = (*ge)[i];
    const std::string field = "gemm_efficiency[" + std::to_string(i) + "]";
    if (!row.is_array() || (row.size() != 5 && row.size() != 6))
      fail(file, field, dump(row), "expected [m, n, k, batch, efficiency] or [..., role]");
    std::string role;
    if (row.size() == 6) {
      if (!row[5].is_string()) fail(file, field, dump(row), "the role must be a string");
      role = row[5].get<std::string>();
      if (role != "fwd" && role != "dgrad" && role != "wgrad" && role != "bmm")
        fail(file, field, dump(row), "role must be fwd, dgrad, wgrad or bmm");
    }
    double v[5];
    read_positive_row(row, 5, file, field, v);
    if (v[4] > 1) fail(file, field, dump(row), "efficiency must be in (0, 1]");
    p.gemm_efficiency.push_back({v[0], v[1], v[2], v[3], v[4], role});
  }
}

/// `flash_attention_efficiency`: {"source": text, "points": [[head_dim, seq_length, fwd, bwd],
/// ...]}, every entry > 0, efficiencies <= 1, no (head_dim, seq_length) twice.
void read_attention_table(const json& root, const std::string& file, CalibrationProfile& p) {
  auto fa = root.find("flash_attention_efficiency");
  if (fa == root.end()) return;
  const std::string key = "flash_attention_efficiency";
  if (!fa->is_object()) fail(file, key, dump(*fa), "expected an object {source, points}");
  for (auto it = fa->begin(); it != fa->end(); ++it)
    if (it.key() != "source" && it.key() != "points")
      fail(file, key + "." + it.key(), dump(it.value()), "unknown key (expected source, points)");
  auto src = fa->find("source");
  if (src == fa->end()) fail(file, key + ".source", "(missing)", "required");
  if (!src->is_string()) fail(file, key + ".source", dump(*src), "expected a string");
  p.flash_attention_efficiency_source = src->get<std::string>();
  auto pts = fa->find("points");
  if (pts == fa->end()) fail(file, key + ".points", "(missing)", "required");
  if (!pts->is_array() || pts->empty())
    fail(file, key + ".points", dump(*pts), "expected a non-empty array");
  for (std::size_t i = 0; i < pts->size(); ++i) {
    const json& row = (*pts)[i];
    const std::string field = key + ".points[" + std::to_string(i) + "]";
    if (!row.is_array() || row.size() != 4)
      fail(file, field, dump(row), "expected [head_dim, seq_length, fwd_efficiency, bwd_efficiency]");
    double v[4];
    read_positive_row(row, 4, file, field, v);
    if (v[2] > 1 || v[3] > 1) fail(file, field, dump(row), "efficiencies must be in (0, 1]");
    for (const auto& q : p.flash_attention_efficiency)
      if (q.head_dim == v[0] && q.seq_length == v[1])
        fail(file, field, dump(row), "a second point for this head_dim and seq_length");
    p.flash_attention_efficiency.push_back({v[0], v[1], v[2], v[3]});
  }
}

/// `moe_grouped_gemm_efficiency`: {"source": text, "points": [[tokens_per_expert, efficiency],
/// ...]}, every entry > 0, efficiencies <= 1, no tokens_per_expert twice.
void read_moe_gemm_table(const json& root, const std::string& file, CalibrationProfile& p) {
  auto mt = root.find("moe_grouped_gemm_efficiency");
  if (mt == root.end()) return;
  const std::string key = "moe_grouped_gemm_efficiency";
  if (!mt->is_object()) fail(file, key, dump(*mt), "expected an object {source, points}");
  for (auto it = mt->begin(); it != mt->end(); ++it)
    if (it.key() != "source" && it.key() != "points")
      fail(file, key + "." + it.key(), dump(it.value()), "unknown key (expected source, points)");
  auto src = mt->find("source");
  if (src == mt->end()) fail(file, key + ".source", "(missing)", "required");
  if (!src->is_string()) fail(file, key + ".source", dump(*src), "expected a string");
  p.moe_grouped_gemm_efficiency_source = src->get<std::string>();
  auto pts = mt->find("points");
  if (pts == mt->end()) fail(file, key + ".points", "(missing)", "required");
  if (!pts->is_array() || pts->empty())
    fail(file, key + ".points", dump(*pts), "expected a non-empty array");
  for (std::size_t i = 0; i < pts->size(); ++i) {
    const json& row = (*pts)[i];
    const std::string field = key + ".points[" + std::to_string(i) + "]";
    if (!row.is_array() || row.size() != 2)
      fail(file, field, dump(row), "expected [tokens_per_expert, efficiency]");
    double v[2];
    read_positive_row(row, 2, file, field, v);
    if (v[1] > 1) fail(file, field, dump(row), "the efficiency must be in (0, 1]");
    for (const auto& q : p.moe_grouped_gemm_efficiency)
      if (q.tokens_per_expert == v[0])
        fail(file, field, dump(row), "a second point for this tokens_per_expert");
    p.moe_grouped_gemm_efficiency.push_back({v[0], v[1]});
  }
}

/// `memory_bound_bytes_per_s` by kernel class, and the opaque `measurements`.
void read_measured_rates(const json& root, const std::string& file, CalibrationProfile& p) {
  if (auto mb = root.find("memory_bound_bytes_per_s"); mb != root.end()) {
    if (!mb->is_object()) fail(file, "memory_bound_bytes_per_s", dump(*mb), "expected an object");
    for (auto it = mb->begin(); it != mb->end(); ++it) {
      const std::string field = "memory_bound_bytes_per_s." + it.key();
      static const char* const kClasses[] = {"elementwise", "layernorm", "softmax", "gelu", "dropout"};
      if (std::find(std::begin(kClasses), std::end(kClasses), it.key()) == std::end(kClasses))
        fail(file, field, dump(it.value()),
             "unknown kernel class (expected elementwise, layernorm, softmax, gelu, dropout)");
      if (!it->is_number() || !std::isfinite(it->get<double>()) || it->get<double>() <= 0)
        fail(file, field, dump(it.value()), "expected a finite number > 0");
      p.memory_bound_bytes_per_s[it.key()] = it->get<double>();
    }
  }
  if (auto ms = root.find("measurements"); ms != root.end()) {
    if (!ms->is_object()) fail(file, "measurements", dump(*ms), "expected an object");
    p.measurements_json = ms->dump();
  }
}

}  // namespace

CalibrationProfile parse_calibration(const std::string& text, const std::string& file) {
  const json root = parse_json_input(text, file);
  CalibrationProfile p;
  read_header(root, file, p);
  read_parameters(root, file, p);
  read_local_device(root, file, p);
  read_gemm_table(root, file, p);
  read_measured_rates(root, file, p);
  read_attention_table(root, file, p);
  read_moe_gemm_table(root, file, p);
  return p;
}

double interpolate_attention_efficiency(
    const std::vector<CalibrationProfile::AttentionPoint>& table, double head_dim,
    double seq_length, bool backward) {
  TRAINSIM_CHECK(!table.empty(), "interpolate_attention_efficiency: empty table");
  TRAINSIM_CHECK(head_dim > 0 && seq_length > 0,
                 "interpolate_attention_efficiency: arguments must be > 0");
  // The nearest head dimension (log2 distance; a tie takes the smaller).
  double best_hd = 0, best_d = INFINITY;
  for (const auto& q : table) {
    const double d = std::fabs(std::log2(q.head_dim / head_dim));
    if (d < best_d || (d == best_d && q.head_dim < best_hd)) {
      best_d = d;
      best_hd = q.head_dim;
    }
  }
  std::vector<std::pair<double, double>> row;  // (log2 seq, efficiency), sorted
  for (const auto& q : table)
    if (q.head_dim == best_hd)
      row.emplace_back(std::log2(q.seq_length), backward ? q.bwd_efficiency : q.fwd_efficiency);
  std::sort(row.begin(), row.end());
  const double x = std::log2(seq_length);
  if (x <= row.front().first) return row.front().second;
  if (x >= row.back().first) return row.back().second;
  for (std::size_t i = 1; i < row.size(); ++i) {
    if (x <= row[i].first) {
      const double f = (x - row[i - 1].first) / (row[i].first - row[i - 1].first);
      return row[i - 1].second + f * (row[i].second - row[i - 1].second);
    }
  }
  return row.back().second;
}

double interpolate_moe_gemm_efficiency(
    const std::vector<CalibrationProfile::MoeGemmPoint>& table, double tokens_per_expert) {
  TRAINSIM_CHECK(!table.empty(), "interpolate_moe_gemm_efficiency: empty table");
  TRAINSIM_CHECK(tokens_per_expert > 0, "interpolate_moe_gemm_efficiency: tokens must be > 0");
  std::vector<std::pair<double, double>> row;  // (log2 tokens per expert, efficiency), sorted
  for (const auto& q : table) row.emplace_back(std::log2(q.tokens_per_expert), q.efficiency);
  std::sort(row.begin(), row.end());
  const double x = std::log2(tokens_per_expert);
  if (x <= row.front().first) return row.front().second;
  for (std::size_t i = 1; i < row.size(); ++i) {
    if (x <= row[i].first) {
      const double f = (x - row[i - 1].first) / (row[i].first - row[i - 1].first);
      return row[i - 1].second + f * (row[i].second - row[i - 1].second);
    }
  }
  return row.back().second;
}

std::vector<CalibrationProfile::GemmPoint> mean_gemm_points(
    const std::vector<CalibrationProfile::GemmPoint>& measured) {
  std::vector<CalibrationProfile::GemmPoint> table;
  std::vector<double> count;  // measurements behind each point of the table
  for (const auto& pt : measured) {
    std::size_t i = 0;
    while (i < table.size() && !(table[i].m == pt.m && table[i].n == pt.n && table[i].k == pt.k &&
                                 table[i].batch == pt.batch && table[i].role == pt.role))
      ++i;
    if (i == table.size()) {
      table.push_back(pt);
      count.push_back(1);
    } else {
      table[i].efficiency += pt.efficiency;
      ++count[i];
    }
  }
  for (std::size_t i = 0; i < table.size(); ++i) table[i].efficiency /= count[i];
  return table;
}

double interpolate_gemm_efficiency(const std::vector<CalibrationProfile::GemmPoint>& table,
                                   double m, double n, double k, double batch,
                                   const std::string& role) {
  TRAINSIM_CHECK(!table.empty(), "interpolate_gemm_efficiency: empty table");
  TRAINSIM_CHECK(m > 0 && n > 0 && k > 0 && batch > 0,
                 "interpolate_gemm_efficiency: dimensions must be > 0");
  // Inverse-distance weighting in log2 space: efficiency curves of GEMM libraries vary with
  // the order of magnitude of each dimension, not its absolute value.
  // Candidates: the points of this role and the role-less ones; without any, all points.
  bool any = false;
  for (const auto& pt : table) any = any || pt.role.empty() || pt.role == role;
  double wsum = 0, vsum = 0;
  for (const auto& pt : table) {
    if (any && !pt.role.empty() && pt.role != role) continue;
    const double d2 = std::pow(std::log2(m / pt.m), 2) + std::pow(std::log2(n / pt.n), 2) +
                      std::pow(std::log2(k / pt.k), 2) +
                      std::pow(std::log2(batch / pt.batch), 2);
    if (d2 < 1e-12) return pt.efficiency;
    const double w = 1.0 / (d2 * d2);
    wsum += w;
    vsum += w * pt.efficiency;
  }
  return vsum / wsum;
}

CalibrationProfile load_calibration(const std::string& path) {
  return parse_calibration(
      read_input_file(path, "calibration profile", "a .json file", kSmallInputMaxBytes), path);
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
    if (s.optional && p.*(s.member) == 0) continue;  // absent stays absent
    auto src = p.sources.find(s.name);
    if (src != p.sources.end())
      params[s.name] = {{"value", p.*(s.member)}, {"source", src->second}};
    else
      params[s.name] = p.*(s.member);
  }
  root["parameters"] = params;
  if (has_host_costs(p)) {
    json host = json::object();
    for (const auto& s : host_specs()) {
      auto src = p.sources.find(std::string("host.") + s.name);
      if (src != p.sources.end())
        host[s.name] = {{"value", p.*(s.member)}, {"source", src->second}};
      else
        host[s.name] = p.*(s.member);
    }
    root["host"] = host;
  }
  if (!p.precision.empty()) root["precision"] = p.precision;
  json local = json::object();
  for (const auto& s : kLocalSpecs)
    if (p.local_device.*(s.member) != 0) local[s.name] = p.local_device.*(s.member);
  if (!local.empty()) root["local_device"] = local;
  if (!p.gemm_efficiency.empty()) {
    json rows = json::array();
    for (const auto& g : p.gemm_efficiency) {
      json row = {g.m, g.n, g.k, g.batch, g.efficiency};
      if (!g.role.empty()) row.push_back(g.role);
      rows.push_back(row);
    }
    root["gemm_efficiency"] = rows;
  }
  if (!p.memory_bound_bytes_per_s.empty()) root["memory_bound_bytes_per_s"] = p.memory_bound_bytes_per_s;
  if (!p.flash_attention_efficiency.empty()) {
    json rows = json::array();
    for (const auto& q : p.flash_attention_efficiency)
      rows.push_back({q.head_dim, q.seq_length, q.fwd_efficiency, q.bwd_efficiency});
    root["flash_attention_efficiency"] = {{"source", p.flash_attention_efficiency_source},
                                          {"points", rows}};
  }
  if (!p.moe_grouped_gemm_efficiency.empty()) {
    json rows = json::array();
    for (const auto& q : p.moe_grouped_gemm_efficiency)
      rows.push_back({q.tokens_per_expert, q.efficiency});
    root["moe_grouped_gemm_efficiency"] = {{"source", p.moe_grouped_gemm_efficiency_source},
                                           {"points", rows}};
  }
  if (!p.measurements_json.empty()) root["measurements"] = json::parse(p.measurements_json);
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
  for (const auto& s : host_specs())
    if (a.*(s.member) != b.*(s.member)) return false;
  for (const auto& s : kLocalSpecs)
    if (a.local_device.*(s.member) != b.local_device.*(s.member)) return false;
  return a.precision == b.precision && a.gemm_efficiency == b.gemm_efficiency &&
         a.memory_bound_bytes_per_s == b.memory_bound_bytes_per_s &&
         a.flash_attention_efficiency == b.flash_attention_efficiency &&
         a.flash_attention_efficiency_source == b.flash_attention_efficiency_source &&
         a.moe_grouped_gemm_efficiency == b.moe_grouped_gemm_efficiency &&
         a.moe_grouped_gemm_efficiency_source == b.moe_grouped_gemm_efficiency_source &&
         a.measurements_json == b.measurements_json;
}

}  // namespace trainsim
