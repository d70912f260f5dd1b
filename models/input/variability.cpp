// `variability:` (models/input/variability.h): its reader and the GPU speeds it gives.
#include "models/input/variability.h"

#include <algorithm>
#include <cmath>
#include <random>
#include <set>
#include <string>

#include "models/input/keys.h"
#include "models/input/sections.h"

namespace trainsim {

namespace input {

namespace {

/// One entry of a list: a mapping whose keys are all in `allowed`.
void check_entry(const Reader& r, const std::string& path, const YAML::Node& e,
                 const std::set<std::string>& allowed) {
  if (!e.IsMap()) r.fail(path, e, "expected a mapping");
  for (const auto& kv : e) {
    const std::string k = kv.first.IsScalar() ? kv.first.Scalar() : "";
    if (!allowed.count(k)) {
      std::string list;
      for (const auto& a : allowed) list += (list.empty() ? "" : ", ") + a;
      r.fail(path + "." + k, kv.second, "unknown key; expected " + list);
    }
  }
}

std::int64_t entry_int(const Reader& r, const std::string& path, const YAML::Node& e,
                       const std::string& key, std::int64_t lo, std::int64_t hi,
                       const std::string& range) {
  const YAML::Node n = e[key];
  if (!n.IsDefined() || n.IsNull()) r.fail(path + "." + key, e, "missing required field");
  std::int64_t v = 0;
  if (!n.IsScalar() || n.Tag() == "!" || !Reader::parse_int(n.Scalar(), v))
    r.fail(path + "." + key, n, "expected an integer");
  if (v < lo || v > hi)
    r.fail(path + "." + key, n, "out of range: " + range + " is 0 .. " + std::to_string(hi));
  return v;
}

/// A factor in (0, 1].
double entry_factor(const Reader& r, const std::string& path, const YAML::Node& e,
                    const std::string& key) {
  const YAML::Node n = e[key];
  if (!n.IsDefined() || n.IsNull()) r.fail(path + "." + key, e, "missing required field");
  double v = 0;
  if (!n.IsScalar() || n.Tag() == "!" || !Reader::parse_double(n.Scalar(), v))
    r.fail(path + "." + key, n, "expected a number");
  if (!(v > 0 && v <= 1)) r.fail(path + "." + key, n, "must be within (0, 1]");
  return v;
}

/// The list at `path` (absent or null: none), each entry checked by `read`.
template <typename F>
void read_list(const Reader& r, const std::string& path, F read) {
  const YAML::Node list = r.at(path);
  if (!list.IsDefined() || list.IsNull()) return;
  if (!list.IsSequence()) r.fail(path, list, "expected a list of mappings");
  for (std::size_t i = 0; i < list.size(); ++i)
    read(path + "[" + std::to_string(i) + "]", list[i]);
}

}  // namespace

void read_variability(const Reader& r, Scenario& s) {
  read_table_keys(r, s, "variability");
  VariabilityConfig& v = s.variability;
  const SystemSpec& sys = cluster_system(s.cluster);
  const std::int64_t gpn = s.cluster.gpus_per_node > 0 ? s.cluster.gpus_per_node : sys.gpus_per_node;
  const std::int64_t nodes = s.cluster.nodes;
  const std::int64_t world = nodes * gpn;
  const std::string where = " of the cluster (" + std::to_string(nodes) + " nodes x " +
                            std::to_string(gpn) + " GPUs)";
  read_list(r, "variability.slow_gpus", [&](const std::string& p, const YAML::Node& e) {
    check_entry(r, p, e, {"rank", "speed"});
    SlowGpu g;
    g.rank = entry_int(r, p, e, "rank", 0, world - 1, "the rank" + where);
    g.speed = entry_factor(r, p, e, "speed");
    v.slow_gpus.push_back(g);
  });
  read_list(r, "variability.slow_links", [&](const std::string& p, const YAML::Node& e) {
    check_entry(r, p, e, {"node", "nic", "nvlink_gpu", "bandwidth"});
    SlowLink l;
    l.node = entry_int(r, p, e, "node", 0, nodes - 1, "the node" + where);
    const bool nic = e["nic"].IsDefined(), nvl = e["nvlink_gpu"].IsDefined();
    if (nic == nvl) r.fail(p, e, "give one of nic or nvlink_gpu");
    if (nic)
      l.nic = entry_int(r, p, e, "nic", 0, sys.nics_per_node - 1,
                        "the NIC of a " + sys.name + " node");
    else
      l.nvlink_gpu = entry_int(r, p, e, "nvlink_gpu", 0, gpn - 1, "the GPU of a node" + where);
    l.bandwidth = entry_factor(r, p, e, "bandwidth");
    v.slow_links.push_back(l);
  });
}

}  // namespace input

std::vector<double> gpu_speeds(const VariabilityConfig& v, std::int64_t world_size) {
  std::vector<double> speed(static_cast<std::size_t>(world_size), 1.0);
  if (v.gpu_speed_cv > 0) {
    const double sigma2 = std::log1p(v.gpu_speed_cv * v.gpu_speed_cv);
    const double sigma = std::sqrt(sigma2), mu = -sigma2 / 2;
    std::mt19937_64 gen(static_cast<std::uint64_t>(v.seed));
    // A uniform in (0, 1] from the generator's top 53 bits (no library distribution: their
    // algorithms differ between standard libraries).
    auto uniform = [&gen] { return (double(gen() >> 11) + 1.0) * 0x1.0p-53; };
    constexpr double kTwoPi = 6.283185307179586;
    for (std::size_t r = 0; r < speed.size(); r += 2) {
      const double radius = std::sqrt(-2.0 * std::log(uniform())), angle = kTwoPi * uniform();
      speed[r] = std::exp(mu + sigma * radius * std::cos(angle));
      if (r + 1 < speed.size()) speed[r + 1] = std::exp(mu + sigma * radius * std::sin(angle));
    }
  }
  for (const SlowGpu& g : v.slow_gpus)
    if (g.rank >= 0 && g.rank < world_size) speed[static_cast<std::size_t>(g.rank)] *= g.speed;
  return speed;
}

std::vector<std::int64_t> named_asymmetric_ranks(const VariabilityConfig& v,
                                                 std::int64_t gpus_per_node) {
  std::set<std::int64_t> out;
  for (const SlowGpu& g : v.slow_gpus)
    if (g.speed < 1) out.insert(g.rank);
  for (const SlowLink& l : v.slow_links) {
    if (l.bandwidth >= 1) continue;
    if (l.nvlink_gpu >= 0) {
      out.insert(l.node * gpus_per_node + l.nvlink_gpu);
    } else {
      for (std::int64_t g = 0; g < gpus_per_node; ++g) out.insert(l.node * gpus_per_node + g);
    }
  }
  return {out.begin(), out.end()};
}

}  // namespace trainsim
