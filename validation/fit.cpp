#include "validation/fit.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <sstream>
#include <tuple>

#include "models/errors.h"
#include "models/perf/cost_model.h"
#include "models/perf/flops.h"
#include "validation/gpu_info.h"

namespace trainsim::validation {

namespace {

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

double peak_of(const CalibrationProfile& p, const SystemSpec& s) {
  return p.local_device.peak_flops > 0 ? p.local_device.peak_flops : s.gpu.peak_dense_fp16_flops;
}
double bandwidth_of(const CalibrationProfile& p, const SystemSpec& s) {
  return p.local_device.memory_bw_bytes_per_s > 0 ? p.local_device.memory_bw_bytes_per_s
                                                  : s.gpu.hbm_bw_bytes_per_s;
}

}  // namespace

nlohmann::json FitReport::to_json() const {
  return {{"gemm_samples", gemm_samples},
          {"gemm_shapes", gemm_shapes},
          {"memory_samples", memory_samples},
          {"memory_fit_applied", memory_fit_applied},
          {"fitted_overhead_s", fitted_overhead_s},
          {"fitted_bandwidth_bytes_per_s", fitted_bandwidth_bytes_per_s},
          {"gemm_rate_scale", gemm_rate_scale},
          {"notes", notes}};
}

const std::vector<std::string>& memory_bound_operator_names() {
  static const std::vector<std::string> names = {
      "aten::add",          "aten::add_",        "aten::mul",          "aten::mul_",
      "aten::div",          "aten::div_",        "aten::_softmax",     "aten::_log_softmax",
      "aten::native_layer_norm", "aten::gelu",   "aten::bernoulli_",   "aten::masked_fill",
      "aten::copy_",        "aten::native_dropout", "aten::_softmax_backward_data",
      "aten::native_layer_norm_backward", "aten::gelu_backward", "aten::fill_", "aten::zero_"};
  return names;
}

CalibrationProfile fit_from_operator_samples(const std::vector<OpSample>& samples,
                                             const CalibrationProfile& base,
                                             const SystemSpec& system, FitReport* report,
                                             const std::string& source) {
  FitReport rep;
  CalibrationProfile p = base;
  const double peak = peak_of(base, system);
  TRAINSIM_CHECK(peak > 0, "fit: the system has no peak FLOP/s");

  // ---- GEMMs: median duration per shape.
  std::map<std::tuple<double, double, double, double>, std::vector<double>> by_shape;
  for (const OpSample& op : samples) {
    GemmSample g;
    if (!gemm_of(op, &g)) continue;
    if (!(std::max({g.m, g.n, g.k, g.batch}) <= kMaxGemmDim)) {
      std::ostringstream o;
      o << source << ": operator '" << op.name << "' (a GEMM of m=" << g.m << ", n=" << g.n
        << ", k=" << g.k << ", batch=" << g.batch << "): a dimension above 2^31, beyond any "
        << "GEMM a device runs (a corrupt 'Input Dims')";
      throw InputError(o.str());
    }
    by_shape[{g.m, g.n, g.k, g.batch}].push_back(g.dur_s);
    ++rep.gemm_samples;
  }
  std::size_t capped = 0;
  for (const auto& [shape, durs] : by_shape) {
    // Plain copies, not structured bindings: a C++17 lambda cannot capture those (clang).
    const double m = std::get<0>(shape), n = std::get<1>(shape), k = std::get<2>(shape),
                 batch = std::get<3>(shape);
    double eff = 2.0 * m * n * k * batch / (median(durs) * peak);
    if (eff > 1) eff = 1, ++capped;
    // The trace does not say the operand layout: its point (no role) replaces every point of
    // the same shape.
    auto& t = p.gemm_efficiency;
    t.erase(std::remove_if(t.begin(), t.end(),
                           [&](const auto& q) {
                             return q.m == m && q.n == n && q.k == k && q.batch == batch;
                           }),
            t.end());
    t.push_back({m, n, k, batch, eff, ""});
  }
  rep.gemm_shapes = by_shape.size();
  if (capped)
    rep.notes.push_back(std::to_string(capped) + " GEMM shapes ran faster than the profile's "
                        "peak; their efficiency was capped at 1 (the peak is too low for this "
                        "device)");
  if (base.gemm_efficiency.empty() && !by_shape.empty())
    rep.notes.push_back("the profile had no GEMM efficiency table: the cost model now "
                        "interpolates the " + std::to_string(by_shape.size()) +
                        " traced shapes for every GEMM instead of wave quantization");

  // ---- memory-bound operators: OLS line duration = a + bytes * c.
  const auto& names = memory_bound_operator_names();
  double sx = 0, sy = 0, sxx = 0, sxy = 0, n = 0;
  for (const OpSample& op : samples) {
    if (std::find(names.begin(), names.end(), op.name) == names.end()) continue;
    double bytes = 0;
    if (!elementwise_bytes(op, &bytes) || !(op.dur_s > 0)) continue;
    sx += bytes, sy += op.dur_s, sxx += bytes * bytes, sxy += bytes * op.dur_s, n += 1;
  }
  rep.memory_samples = static_cast<std::size_t>(n);
  const double det = n * sxx - sx * sx;
  if (n >= 3 && det > 0) {
    const double c = (n * sxy - sx * sy) / det;
    const double a = (sy - c * sx) / n;
    rep.fitted_overhead_s = a;
    rep.fitted_bandwidth_bytes_per_s = c > 0 ? 1.0 / c : 0;
    const double eff = c > 0 ? (1.0 / c) / bandwidth_of(base, system) : 0;
    if (a >= 0 && c > 0 && eff <= 1 && a <= 1e-2) {
      p.kernel_launch_overhead_s = a;
      p.hbm_efficiency = eff;
      rep.memory_fit_applied = true;
    } else {
      std::ostringstream o;
      o << "memory-bound fit not applied (overhead " << a << " s, bandwidth "
        << rep.fitted_bandwidth_bytes_per_s << " B/s = " << eff
        << " of the device's; needs overhead in [0, 10 ms] and efficiency in (0, 1])";
      rep.notes.push_back(o.str());
    }
  } else {
    rep.notes.push_back("memory-bound fit not applied: fewer than 3 samples or one size only");
  }
  if (rep.gemm_samples == 0 && !rep.memory_fit_applied)
    throw InputError(source + ": no usable operator sample for a fit (GEMMs with shapes or "
                     "memory-bound operators; was it recorded with record_shapes=True?)");
  if (report) *report = rep;
  return p;
}

CalibrationProfile fit_from_task_durations(const ScheduleGraph& graph,
                                           const std::vector<double>& measured_s,
                                           const CalibrationProfile& base,
                                           const SystemSpec& system, FitReport* report) {
  FitReport rep;
  const CostModel cost(system, base);
  double sgg = 0, sgr = 0;
  std::size_t used = 0;
  for (TaskId id = 0; id < graph.num_tasks(); ++id) {
    if (id >= measured_s.size() || !std::isfinite(measured_s[id])) continue;
    if (graph.task(id).kind != TaskKind::Compute) continue;
    double gemm = 0, other = 0;
    for (const KernelWork& k : op_kernels(graph.op(id))) {
      if (k.cls == KernelClass::Gemm) {
        const double g =
            cost.gemm_compute_time_s(k.m, k.n, k.k, k.batch, CostModel::gemm_role(k.pass, k.batch));
        gemm += g;
        other += cost.kernel_time_s(k) - g;
      } else {
        other += cost.kernel_time_s(k);
      }
    }
    if (gemm <= 0) continue;
    sgg += gemm * gemm;
    sgr += gemm * (measured_s[id] - other);
    ++used;
  }
  if (used == 0 || !(sgr > 0))
    throw InputError("fit: no compute task with a measured duration and GEMM work");
  const double x = sgr / sgg;  // 1 / alpha
  const double alpha = 1.0 / x;
  rep.gemm_rate_scale = alpha;
  CalibrationProfile p = base;
  if (p.local_device.peak_flops > 0) {
    p.local_device.peak_flops *= alpha;
  } else {
    std::size_t capped = 0;
    p.gemm_max_efficiency = std::min(1.0, p.gemm_max_efficiency * alpha);
    if (base.gemm_max_efficiency * alpha > 1) ++capped;
    for (auto& g : p.gemm_efficiency) {
      if (g.efficiency * alpha > 1) ++capped;
      g.efficiency = std::min(1.0, g.efficiency * alpha);
    }
    if (capped)
      rep.notes.push_back("GEMM efficiencies capped at 1 (" + std::to_string(capped) + " values)");
  }
  rep.notes.push_back("GEMM rate scaled by " + std::to_string(alpha) + " from " +
                      std::to_string(used) + " compute tasks");
  if (report) *report = rep;
  return p;
}

CalibrationProfile fit_from_microbenchmarks(const CalibrationProfile& measured,
                                            const std::string& name,
                                            const CalibrationProfile& base,
                                            const SystemSpec& system, FitReport* report) {
  // A measured profile has a local_device peak (every calibrate writes one) or a GEMM table.
  if (base.local_device.peak_flops > 0 || !base.gemm_efficiency.empty())
    throw InputError("calibrate --from-microbench: --base is a measured profile (it has measured "
                     "figures or a GEMM table); the fit refines a datasheet profile of a catalog "
                     "GPU (calibration/*.json)");
  if (measured.device.rfind("cuda", 0) != 0)
    throw InputError(name + ": field 'device' = '" + measured.device + "': microbenchmarks of a "
                     "CPU; a GPU's profile is fitted from `trainsim calibrate --device cuda` on it");
  const std::string gpu = gpu_name_of_profile_device(measured.device);
  if (!gpu.empty() && !gpu_name_matches(gpu, system.gpu.name))
    throw InputError(name + ": field 'device' = '" + measured.device + "': measured on " + gpu +
                     ", not on the " + system.gpu.name + " of --base " + base.device +
                     ": one GPU's rates would stand for another's");
  if (measured.precision != "bf16" && measured.precision != "fp16")
    throw InputError(name + ": field 'precision' = '" + measured.precision + "': the GEMM table "
                     "holds the 16-bit tensor-core rate (bf16 or fp16)");
  nlohmann::json m;
  try {
    m = nlohmann::json::parse(measured.measurements_json);
  } catch (const nlohmann::json::exception&) {
  }
  if (!m.is_object() || !m.contains("gemm") || !m["gemm"].is_array() || m["gemm"].empty())
    throw InputError(name + ": field 'measurements.gemm': missing or empty (a profile written by "
                     "`trainsim calibrate --device cuda` carries its raw measurements)");
  const double peak = system.gpu.peak_dense_fp16_flops;
  TRAINSIM_CHECK(peak > 0, "fit: the system has no peak FLOP/s");
  FitReport rep;
  CalibrationProfile p = base;

  // ---- GEMMs: one table point per shape and layout, the mean of repeated measurements.
  std::vector<CalibrationProfile::GemmPoint> measured_points;
  for (std::size_t i = 0; i < m["gemm"].size(); ++i) {
    const nlohmann::json& r = m["gemm"][i];
    const auto num = [&](const char* key) {
      if (!r.is_object() || !r.contains(key) || !r[key].is_number() || !(r[key].get<double>() > 0))
        throw InputError(name + ": measurements.gemm[" + std::to_string(i) + "]: field '" + key +
                         "' is missing or not a positive number");
      return r[key].get<double>();
    };
    const double rate = num("flops_per_s");
    const std::string role = r.contains("role") && r["role"].is_string() ? r["role"].get<std::string>() : "";
    // The roles a profile's GEMM table takes (models/hardware/calibration.cpp): any other would
    // write a profile that simulate refuses.
    if (!role.empty() && role != "fwd" && role != "dgrad" && role != "wgrad" && role != "bmm")
      throw InputError(name + ": measurements.gemm[" + std::to_string(i) + "]: field 'role' = '" +
                       role + "': expected fwd, dgrad, wgrad or bmm");
    if (r.contains("role") && !r["role"].is_string())
      throw InputError(name + ": measurements.gemm[" + std::to_string(i) +
                       "]: field 'role' is not a string");
    const double eff = rate / peak;
    if (eff > 1) {
      std::ostringstream o;
      o << name << ": measurements.gemm[" << i << "] ran at " << rate / 1e12
        << " TFLOP/s, above the " << peak / 1e12 << " TFLOP/s dense peak of " << system.gpu.name
        << " (--base " << base.device << "): measured on another GPU";
      throw InputError(o.str());
    }
    const double m_dim = num("m"), n_dim = num("n"), k_dim = num("k"), batch = num("batch");
    if (!(std::max({m_dim, n_dim, k_dim, batch}) <= kMaxGemmDim))
      throw InputError(name + ": measurements.gemm[" + std::to_string(i) +
                       "]: a dimension (m, n, k or batch) above 2^31, beyond any GEMM measured");
    measured_points.push_back({m_dim, n_dim, k_dim, batch, eff, role});
    ++rep.gemm_samples;
  }
  p.gemm_efficiency = mean_gemm_points(measured_points);
  rep.gemm_shapes = p.gemm_efficiency.size();
  rep.notes.push_back("the cost model now interpolates the " + std::to_string(rep.gemm_shapes) +
                      " measured GEMM points (shape and layout) instead of wave quantization at "
                      "gemm_max_efficiency; FP8 GEMMs keep gemm_fp8_max_efficiency");

  // ---- HBM: the streaming copy, as the shipped profiles' STREAM Copy.
  const std::string from = " (trainsim calibrate --from-microbench " + name + ", " +
                           measured.device + ", " + measured.date + ")";
  if (m.contains("stream_copy") && m["stream_copy"].is_object() &&
      m["stream_copy"].contains("bytes_per_s") && m["stream_copy"]["bytes_per_s"].is_number()) {
    const double bw = m["stream_copy"]["bytes_per_s"].get<double>();
    const double eff = bw / system.gpu.hbm_bw_bytes_per_s;
    if (eff > 0 && eff <= 1) {
      p.hbm_efficiency = eff;
      std::ostringstream o;
      o << "streaming copy " << bw / 1e12 << " TB/s (bytes read + written) / "
        << system.gpu.hbm_bw_bytes_per_s / 1e12 << " TB/s datasheet" << from;
      p.sources["hbm_efficiency"] = o.str();
    } else {
      rep.notes.push_back("hbm_efficiency not fitted: the streaming copy is " +
                          std::to_string(eff) + " of the datasheet bandwidth (needs (0, 1])");
    }
  } else {
    rep.notes.push_back("hbm_efficiency not fitted: no measurements.stream_copy.bytes_per_s");
  }

  // ---- PCIe: pinned copies at the largest size, per direction.
  double largest = 0, both = 0;
  if (m.contains("copies") && m["copies"].is_array())
    for (const nlohmann::json& r : m["copies"]) {
      if (!r.is_object() || !r.contains("bytes") || !r["bytes"].is_number() ||
          !r.contains("h2d_bytes_per_s") || !r["h2d_bytes_per_s"].is_number() ||
          !r.contains("d2h_bytes_per_s") || !r["d2h_bytes_per_s"].is_number())
        continue;
      if (r["bytes"].get<double>() > largest) {
        largest = r["bytes"].get<double>();
        both = 0.5 * (r["h2d_bytes_per_s"].get<double>() + r["d2h_bytes_per_s"].get<double>());
      }
    }
  const double pcie = both / system.gpu.pcie_bw_bytes_per_s;
  if (pcie > 0 && pcie <= 1) {
    p.pcie_efficiency = pcie;
    std::ostringstream o;
    o << "pinned host-to-device and device-to-host copies of " << largest / 1048576.0
      << " MiB, mean " << both / 1e9 << " GB/s / " << system.gpu.pcie_bw_bytes_per_s / 1e9
      << " GB/s per direction" << from;
    p.sources["pcie_efficiency"] = o.str();
  } else {
    rep.notes.push_back("pcie_efficiency not fitted: no pinned copy measurement in (0, 1] of the "
                        "PCIe bandwidth");
  }
  p.source = base.source + "; GEMM table, hbm_efficiency and pcie_efficiency fitted from the "
             "microbenchmarks in " + name + " (" + measured.device + ", " + measured.date + ")";
  if (report) *report = rep;
  return p;
}

namespace {
double parameter_value(const nlohmann::json& entry) {
  if (entry.is_number()) return entry.get<double>();
  if (entry.is_object() && entry.contains("value") && entry.at("value").is_number())
    return entry.at("value").get<double>();
  return std::numeric_limits<double>::quiet_NaN();
}

void add_if_large(std::vector<FitChange>& out, const std::string& field, double before,
                  double after, double factor) {
  if (!(before > 0 && after > 0) || !std::isfinite(before) || !std::isfinite(after)) {
    if (before != after && std::isfinite(before) && std::isfinite(after) && (before > 0 || after > 0))
      out.push_back({field, before, after, std::numeric_limits<double>::infinity()});
    return;
  }
  const double f = std::max(after / before, before / after);
  if (f > factor) out.push_back({field, before, after, f});
}
}  // namespace

std::vector<FitChange> large_fit_changes(const CalibrationProfile& before,
                                         const CalibrationProfile& after, double factor) {
  std::vector<FitChange> out;
  const nlohmann::json b = nlohmann::json::parse(calibration_to_json(before));
  const nlohmann::json a = nlohmann::json::parse(calibration_to_json(after));
  if (a.contains("parameters") && b.contains("parameters"))
    for (const auto& [name, entry] : a.at("parameters").items())
      if (b.at("parameters").contains(name))
        add_if_large(out, "parameters." + name, parameter_value(b.at("parameters").at(name)),
                     parameter_value(entry), factor);
  for (const auto& [cls, rate] : after.memory_bound_bytes_per_s) {
    auto it = before.memory_bound_bytes_per_s.find(cls);
    if (it != before.memory_bound_bytes_per_s.end())
      add_if_large(out, "memory_bound_bytes_per_s." + cls, it->second, rate, factor);
  }
  if (!before.gemm_efficiency.empty())
    for (const auto& pt : after.gemm_efficiency) {
      if (!(pt.m > 0 && pt.n > 0 && pt.k > 0 && pt.batch > 0)) continue;
      if (std::find(before.gemm_efficiency.begin(), before.gemm_efficiency.end(), pt) !=
          before.gemm_efficiency.end())
        continue;  // unchanged point
      std::ostringstream field;
      field << "gemm_efficiency[m=" << pt.m << " n=" << pt.n << " k=" << pt.k
            << " batch=" << pt.batch << (pt.role.empty() ? "" : " " + pt.role) << "]";
      add_if_large(out, field.str(),
                   interpolate_gemm_efficiency(before.gemm_efficiency, pt.m, pt.n, pt.k, pt.batch,
                                               pt.role),
                   pt.efficiency, factor);
    }
  return out;
}

}  // namespace trainsim::validation
