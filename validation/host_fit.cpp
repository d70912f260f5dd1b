#include "validation/host_fit.h"

#include <array>
#include <cmath>
#include <sstream>

#include "models/errors.h"

namespace trainsim::validation {
namespace {

constexpr int kCols = 4;  // eager_op, autograd_node, nccl_call, module_overhead
const std::array<const char*, kCols> kNames = {"eager_op_s", "autograd_node_s", "nccl_call_s",
                                               "module_overhead_s"};

struct Row {
  std::array<double, kCols> x{};
  double y = 0;
};

/// Least squares over the columns in `use` (Gaussian elimination with partial pivoting on the
/// normal equations); false when they are singular.
bool solve(const std::vector<Row>& rows, const std::array<bool, kCols>& use,
           std::array<double, kCols>& beta) {
  std::vector<int> idx;
  for (int c = 0; c < kCols; ++c)
    if (use[c]) idx.push_back(c);
  const std::size_t n = idx.size();
  std::vector<std::vector<double>> a(n, std::vector<double>(n + 1, 0.0));
  for (const Row& r : rows)
    for (std::size_t i = 0; i < n; ++i) {
      for (std::size_t j = 0; j < n; ++j) a[i][j] += r.x[idx[i]] * r.x[idx[j]];
      a[i][n] += r.x[idx[i]] * r.y;
    }
  for (std::size_t c = 0; c < n; ++c) {
    std::size_t p = c;
    for (std::size_t r = c + 1; r < n; ++r)
      if (std::abs(a[r][c]) > std::abs(a[p][c])) p = r;
    if (std::abs(a[p][c]) < 1e-12) return false;
    std::swap(a[p], a[c]);
    for (std::size_t r = 0; r < n; ++r) {
      if (r == c) continue;
      const double f = a[r][c] / a[c][c];
      for (std::size_t k = c; k <= n; ++k) a[r][k] -= f * a[c][k];
    }
  }
  beta.fill(0.0);
  for (std::size_t i = 0; i < n; ++i) beta[idx[i]] = a[i][n] / a[i][i];
  return true;
}

}  // namespace

bool has_host_issue_spans(const ImportedTrace& trace) {
  for (const TraceSpan& s : trace.spans)
    if (s.cat == "host_issue" && s.args.is_object() && s.args.contains("eager_ops")) return true;
  return false;
}

HostIssueFit fit_host_issue_costs(const ImportedTrace& trace) {
  std::vector<Row> rows;
  for (const TraceSpan& s : trace.spans) {
    if (s.cat != "host_issue" || !s.args.is_object() || !s.args.contains("eager_ops")) continue;
    const std::string cls = s.args.value("class", "");
    if (cls != "compute" && cls != "comm") continue;  // copies and optimizer steps: own costs
    Row r;
    r.x[0] = s.args.value("eager_ops", 0.0);
    r.x[1] = s.args.value("autograd_nodes", 0.0);
    r.x[2] = cls == "comm" ? 1.0 : 0.0;
    r.x[3] = cls == "compute" ? 1.0 : 0.0;
    r.y = s.dur_s;
    rows.push_back(r);
  }
  if (rows.empty())
    throw InputError("calibrate --from-trace " + trace.source +
                     ": no host thread with counted issues (spans of cat host_issue with args "
                     "eager_ops, as `trainsim replay --trace` writes them)");
  HostIssueFit fit;
  fit.spans = std::int64_t(rows.size());
  std::array<bool, kCols> use{};
  for (const Row& r : rows)
    for (int c = 0; c < kCols; ++c) use[c] = use[c] || r.x[c] != 0;
  for (int c = 0; c < kCols; ++c)
    if (!use[c]) fit.not_fitted.push_back(kNames[c]);
  std::array<double, kCols> beta{};
  // Non-negative least squares by elimination: drop the most negative column, refit.
  while (true) {
    if (!solve(rows, use, beta)) {
      // Collinear columns (e.g. every compute task issues the same ops): the per-task term
      // goes, the per-op terms stay.
      TRAINSIM_CHECK(use[3], "host fit: singular normal equations without the per-task term");
      use[3] = false;
      fit.not_fitted.push_back(kNames[3]);
      continue;
    }
    int worst = -1;
    for (int c = 0; c < kCols; ++c)
      if (use[c] && beta[c] < 0 && (worst < 0 || beta[c] < beta[worst])) worst = c;
    if (worst < 0) break;
    use[worst] = false;
    beta[worst] = 0;
  }
  fit.eager_op_s = beta[0], fit.autograd_node_s = beta[1], fit.nccl_call_s = beta[2];
  fit.module_overhead_s = beta[3];
  double ss = 0;
  for (const Row& r : rows) {
    double p = 0;
    for (int c = 0; c < kCols; ++c) p += r.x[c] * beta[c];
    ss += (r.y - p) * (r.y - p);
  }
  fit.rms_residual_s = std::sqrt(ss / double(rows.size()));
  return fit;
}

nlohmann::json HostIssueFit::to_host_section(const std::string& trace_source) const {
  std::ostringstream src;
  src << "fitted from the host thread of " << trace_source << " (" << spans
      << " host_issue spans, least squares, rms residual " << rms_residual_s * 1e6 << " us)";
  nlohmann::json out = nlohmann::json::object();
  const std::array<double, kCols> v = {eager_op_s, autograd_node_s, nccl_call_s, module_overhead_s};
  for (int c = 0; c < kCols; ++c) {
    std::string s = src.str();
    for (const std::string& n : not_fitted)
      if (n == kNames[c]) s = "not determined by " + trace_source + " (no spans with that term): 0";
    out[kNames[c]] = {{"value", v[c]}, {"source", s}};
  }
  return out;
}

}  // namespace trainsim::validation
