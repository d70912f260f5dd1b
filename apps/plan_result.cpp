#include "apps/plan_result.h"

#include <algorithm>
#include <cctype>
#include <cstdint>
#include <limits>
#include <set>
#include <sstream>

#include "apps/verbs.h"
#include "models/errors.h"
#include "models/json_input.h"

namespace trainsim::cli {

namespace {

/// Bounds of a shard's figures, far above any run (issue 35: a shard's `tokens_per_s: 1e308`
/// ranked first): the largest published training runs process about 1e7 tokens/s on tens of
/// thousands of GPUs, and no GPU reaches 1e5 dense TFLOP/s (an H100: 989).
constexpr double kMaxTokensPerS = 1e12;
constexpr double kMaxTflopsPerGpu = 1e5;


using json = nlohmann::json;

/// Reads the fields of a result file, each checked: a message names the source, the field's
/// path in it and the value, as the other input files' readers do.
class FieldReader {
 public:
  /// Counts are exact in a double below 2^53.
  static constexpr std::uint64_t kCountBound = std::uint64_t(1) << 53;

  explicit FieldReader(std::string source) : source_(std::move(source)) {}

  [[noreturn]] void fail(const std::string& field, const std::string& why) const {
    throw InputError(source_ + ": field '" + field + "' " + why);
  }
  [[noreturn]] void bad(const std::string& field, const json& v, const std::string& why) const {
    fail(field, "= " + v.dump() + ": " + why);
  }
  static std::string path(const std::string& field, const std::string& key) {
    return field.empty() ? key : field + "." + key;
  }
  const json& at(const json& obj, const std::string& field, const std::string& key) const {
    if (!obj.is_object())
      fail(field, std::string("is a JSON ") + obj.type_name() + ", expected an object");
    if (!obj.contains(key)) fail(path(field, key), "is missing");
    return obj[key];
  }
  /// A number in [lo, hi] (finite: hi at most the largest double).
  double number(const json& obj, const std::string& field, const std::string& key, double lo,
                double hi = std::numeric_limits<double>::max()) const {
    const json& v = at(obj, field, key);
    if (!v.is_number()) bad(path(field, key), v, "expected a number");
    const double x = v.get<double>();
    if (!(x >= lo && x <= hi)) {
      std::ostringstream why;
      if (hi == std::numeric_limits<double>::max())
        why << "expected a number >= " << lo;
      else
        why << "expected a number in [" << lo << ", " << hi << "]";
      bad(path(field, key), v, why.str());
    }
    return x;
  }
  /// A non-negative integer below `bound`.
  std::uint64_t count(const json& obj, const std::string& field, const std::string& key,
                      std::uint64_t bound = kCountBound) const {
    return count_value(at(obj, field, key), path(field, key), bound);
  }
  std::uint64_t count_value(const json& v, const std::string& field,
                            std::uint64_t bound = kCountBound) const {
    if (!v.is_number_unsigned() || v.get<std::uint64_t>() >= bound)
      bad(field, v,
          bound == kCountBound ? "expected an integer >= 0"
                               : "expected an integer in [0, " + std::to_string(bound) + ")");
    return v.get<std::uint64_t>();
  }
  std::string text(const json& obj, const std::string& field, const std::string& key) const {
    const json& v = at(obj, field, key);
    if (!v.is_string()) bad(path(field, key), v, "expected a string");
    return v.get<std::string>();
  }
  bool flag(const json& obj, const std::string& field, const std::string& key) const {
    const json& v = at(obj, field, key);
    if (!v.is_boolean()) bad(path(field, key), v, "expected true or false");
    return v.get<bool>();
  }
  const json& list(const json& obj, const std::string& field, const std::string& key) const {
    const json& v = at(obj, field, key);
    if (!v.is_array())
      fail(path(field, key), std::string("is a JSON ") + v.type_name() + ", expected a list");
    return v;
  }

 private:
  std::string source_;
};

/// The rejection named `name` (to_string's names), or the field's error.
PlanRejection rejection_named(const FieldReader& f, const std::string& field,
                              const std::string& name) {
  for (PlanRejection r : {PlanRejection::None, PlanRejection::Invalid, PlanRejection::OutOfMemory,
                          PlanRejection::BelowCut})
    if (name == to_string(r)) return r;
  f.bad(field, name, "expected none, invalid, out_of_memory or below_estimate_cut");
}

CandidateEstimate read_estimate(const FieldReader& f, const json& j, const std::string& at) {
  CandidateEstimate e;
  e.rejection = rejection_named(f, FieldReader::path(at, "rejection"), f.text(j, at, "rejection"));
  e.reason = f.text(j, at, "reason");
  e.world_size = std::int64_t(f.count(j, at, "world_size"));
  e.peak_memory_bytes = std::int64_t(f.count(j, at, "peak_memory_bytes"));
  e.memory_capacity_bytes = std::int64_t(f.count(j, at, "memory_capacity_bytes"));
  e.estimate_iteration_s = f.number(j, at, "estimate_iteration_s", 0);
  e.estimate_tokens_per_s = f.number(j, at, "estimate_tokens_per_s", 0, kMaxTokensPerS);
  return e;
}

json result_to_json(const CandidateResult& r) {
  json ov = json::array();
  for (const auto& [k, v] : r.candidate.overrides) ov.push_back(k + "=" + v);
  return {{"index", r.candidate.index},
          {"layout", r.candidate.layout},
          {"overrides", ov},
          {"estimate", estimate_to_json(r.estimate)},
          {"simulated", r.simulated},
          {"error", r.error},
          {"iteration_time_s", r.iteration_time_s},
          {"tokens_per_s", r.tokens_per_s},
          {"model_tflops_per_gpu", r.model_tflops_per_gpu},
          {"mfu", r.mfu},
          {"peak_memory_bytes", r.peak_memory_bytes},
          {"memory_capacity_bytes", r.memory_capacity_bytes},
          {"bubble_share", r.bubble_share},
          {"exposed_comm_share", r.exposed_comm_share},
          {"oom", r.oom},
          {"goodput", r.goodput ? json(*r.goodput) : json(nullptr)},
          {"wall_days", r.wall_days ? json(*r.wall_days) : json(nullptr)},
          {"cost_usd", r.cost_usd ? json(*r.cost_usd) : json(nullptr)}};
}

namespace {
/// A forecast figure: absent or null in a shard written without a training: section.
std::optional<double> optional_number(const FieldReader& f, const json& j, const std::string& at,
                                      const std::string& key, double hi) {
  if (!j.is_object() || !j.contains(key) || j.at(key).is_null()) return std::nullopt;
  return f.number(j, at, key, 0, hi);
}
}  // namespace

/// One candidate (`candidates[i]`, as result_to_json writes it), its index below the
/// enumeration's size.
CandidateResult read_result(const FieldReader& f, const json& j, const std::string& at,
                            std::uint64_t enumerated) {
  CandidateResult r;
  r.candidate.index = f.count(j, at, "index", enumerated);
  r.candidate.layout = f.text(j, at, "layout");
  const json& ov = f.list(j, at, "overrides");
  for (std::size_t i = 0; i < ov.size(); ++i) {
    const std::string field = at + ".overrides[" + std::to_string(i) + "]";
    if (!ov[i].is_string()) f.bad(field, ov[i], "expected a key=value string");
    try {
      r.candidate.overrides.push_back(parse_override(ov[i].get<std::string>()));
    } catch (const InputError&) {
      f.bad(field, ov[i], "expected a key=value string");
    }
  }
  r.estimate = read_estimate(f, f.at(j, at, "estimate"), at + ".estimate");
  r.simulated = f.flag(j, at, "simulated");
  r.error = f.text(j, at, "error");
  r.iteration_time_s = f.number(j, at, "iteration_time_s", 0);
  r.tokens_per_s = f.number(j, at, "tokens_per_s", 0, kMaxTokensPerS);
  r.model_tflops_per_gpu = f.number(j, at, "model_tflops_per_gpu", 0, kMaxTflopsPerGpu);
  r.mfu = f.number(j, at, "mfu", 0, 1);
  r.peak_memory_bytes = std::int64_t(f.count(j, at, "peak_memory_bytes"));
  r.memory_capacity_bytes = std::int64_t(f.count(j, at, "memory_capacity_bytes"));
  r.bubble_share = f.number(j, at, "bubble_share", 0, 1);
  r.exposed_comm_share = f.number(j, at, "exposed_comm_share", 0, 1);
  r.oom = f.flag(j, at, "oom");
  r.goodput = optional_number(f, j, at, "goodput", 1);
  r.wall_days = optional_number(f, j, at, "wall_days", 1e300);
  r.cost_usd = optional_number(f, j, at, "cost_usd", 1e300);
  return r;
}

/// A message's shape: its text with each number (a run of digits, points and exponent signs
/// after a digit) written as '#'.
std::string message_shape(const std::string& text) {
  std::string out;
  for (std::size_t i = 0; i < text.size();) {
    if (std::isdigit(static_cast<unsigned char>(text[i]))) {
      while (i < text.size() && (std::isdigit(static_cast<unsigned char>(text[i])) ||
                                 text[i] == '.' || text[i] == 'e' || text[i] == '+' ||
                                 text[i] == '-'))
        ++i;
      out += '#';
    } else {
      out += text[i++];
    }
  }
  return out;
}

}  // namespace

std::pair<std::size_t, std::size_t> parse_shard(const std::string& spec) {
  const auto slash = spec.find('/');
  try {
    if (slash != std::string::npos) {
      const std::size_t i = std::stoul(spec.substr(0, slash));
      const std::size_t n = std::stoul(spec.substr(slash + 1));
      if (n >= 1 && i < n && std::to_string(i) + "/" + std::to_string(n) == spec) return {i, n};
    }
  } catch (const std::exception&) {
  }
  throw InputError("--shard '" + spec + "': expected i/n with 0 <= i < n, e.g. 0/4");
}

json estimate_to_json(const CandidateEstimate& e) {
  return {{"rejection", to_string(e.rejection)},
          {"reason", e.reason},
          {"world_size", e.world_size},
          {"peak_memory_bytes", e.peak_memory_bytes},
          {"memory_capacity_bytes", e.memory_capacity_bytes},
          {"estimate_iteration_s", e.estimate_iteration_s},
          {"estimate_tokens_per_s", e.estimate_tokens_per_s}};
}

void add_invalid_reason(std::vector<InvalidReason>& reasons, const InvalidReason& r) {
  const std::string shape = message_shape(r.reason);
  for (InvalidReason& g : reasons)
    if (message_shape(g.reason) == shape) {
      g.count += r.count;
      if (r.example_index < g.example_index) {
        g.reason = r.reason;
        g.example_index = r.example_index;
        g.example_layout = r.example_layout;
      }
      return;
    }
  reasons.push_back(r);
}

void sort_invalid_reasons(std::vector<InvalidReason>& reasons) {
  std::sort(reasons.begin(), reasons.end(), [](const InvalidReason& a, const InvalidReason& b) {
    return std::make_pair(-std::int64_t(a.count), a.example_index) <
           std::make_pair(-std::int64_t(b.count), b.example_index);
  });
}

CandidateEstimate estimate_from_json(const json& j, const std::string& source,
                                     const std::string& field) {
  return read_estimate(FieldReader(source), j, field);
}

json plan_result_json(const PlanResultFile& r) {
  json cands = json::array();
  for (const auto& c : r.candidates) cands.push_back(result_to_json(c));
  json out = {{"plan_version", 1}, {"scenario", r.scenario}};
  if (!r.shard.empty()) out["shard"] = r.shard;
  out["interrupted"] = r.interrupted;
  out["enumerated"] = r.enumerated;
  out["rejected"] = r.rejected;
  json reasons = json::array();
  for (const auto& g : r.invalid_reasons)
    reasons.push_back({{"reason", g.reason},
                       {"count", g.count},
                       {"example_index", g.example_index},
                       {"example_layout", g.example_layout}});
  out["invalid_reasons"] = reasons;
  out["candidates"] = cands;
  return out;
}

PlanResultFile parse_plan_result(const std::string& text, const std::string& source) {
  const json j = parse_json_input(text, source);
  if (!j.is_object())
    throw InputError(source + ": a JSON " + j.type_name() +
                     ", not the object `trainsim plan --json` writes");
  const FieldReader f(source);
  PlanResultFile out;
  const std::uint64_t version = f.count(j, "", "plan_version");
  if (version != 1) f.bad("plan_version", j["plan_version"], "this trainsim reads version 1");
  if (j.contains("scenario")) out.scenario = f.text(j, "", "scenario");
  std::size_t part = 0, parts = 1;  // the candidates this file may hold: index % parts == part
  if (j.contains("shard")) {
    out.shard = f.text(j, "", "shard");
    try {
      std::tie(part, parts) = parse_shard(out.shard);
    } catch (const InputError&) {
      f.bad("shard", out.shard, "expected i/n with 0 <= i < n");
    }
  }
  if (j.contains("interrupted")) out.interrupted = f.flag(j, "", "interrupted");
  out.enumerated = std::size_t(f.count(j, "", "enumerated"));
  const json& rejected = f.at(j, "", "rejected");
  if (!rejected.is_object())
    f.fail("rejected",
           std::string("is a JSON ") + rejected.type_name() + ", expected {reason: count}");
  for (const auto& [reason, count] : rejected.items()) {
    if (rejection_named(f, "rejected", reason) == PlanRejection::None)
      f.bad("rejected", reason,
            "counts candidates not simulated: invalid, out_of_memory or below_estimate_cut");
    out.rejected[reason] = std::size_t(f.count_value(count, "rejected." + reason));
  }
  if (j.contains("invalid_reasons")) {
    const json& reasons = f.list(j, "", "invalid_reasons");
    std::size_t total = 0;
    std::set<std::size_t> examples;
    for (std::size_t i = 0; i < reasons.size(); ++i) {
      const std::string at = "invalid_reasons[" + std::to_string(i) + "]";
      InvalidReason g;
      g.reason = f.text(reasons[i], at, "reason");
      g.count = std::size_t(f.count(reasons[i], at, "count", out.enumerated + 1));
      if (g.count == 0) f.bad(at + ".count", 0, "a reason of no candidate");
      g.example_index = std::size_t(f.count(reasons[i], at, "example_index", out.enumerated));
      if (g.example_index % parts != part)
        f.bad(at + ".example_index", g.example_index, "not a candidate of shard " + out.shard);
      if (!examples.insert(g.example_index).second)
        f.bad(at + ".example_index", g.example_index, "the example of another reason too");
      g.example_layout = f.text(reasons[i], at, "example_layout");
      total += g.count;
      out.invalid_reasons.push_back(std::move(g));
    }
    const auto it = out.rejected.find(to_string(PlanRejection::Invalid));
    const std::size_t invalid = it == out.rejected.end() ? 0 : it->second;
    if (total != invalid)
      f.fail("invalid_reasons", "counts " + std::to_string(total) + " candidates, rejected." +
                                    to_string(PlanRejection::Invalid) + " " +
                                    std::to_string(invalid));
  }
  const json& cands = f.list(j, "", "candidates");
  std::set<std::size_t> seen;
  for (std::size_t i = 0; i < cands.size(); ++i) {
    const std::string at = "candidates[" + std::to_string(i) + "]";
    CandidateResult r = read_result(f, cands[i], at, out.enumerated);
    if (r.candidate.index % parts != part)
      f.bad(at + ".index", r.candidate.index, "not a candidate of shard " + out.shard);
    if (!seen.insert(r.candidate.index).second)
      f.bad(at + ".index", r.candidate.index, "a second candidate of that index");
    out.candidates.push_back(std::move(r));
  }
  return out;
}

}  // namespace trainsim::cli
