// The strict reader of system files (system_file.h; the format: docs/cluster.md).
#include "models/hardware/system_file.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <limits>
#include <map>
#include <set>
#include <sstream>

#include <yaml-cpp/yaml.h>

#include "models/errors.h"

namespace trainsim {
namespace {

/// Every key of a system file, by section ("" is the top level), in file order.
const std::vector<std::pair<std::string, std::vector<std::string>>>& schema() {
  static const std::vector<std::pair<std::string, std::vector<std::string>>> s = {
      {"", {"name", "gpu", "node", "rack", "nccl", "fabric"}},
      {"gpu",
       {"catalog", "name", "peak_dense_fp16_flops", "peak_dense_fp8_flops", "peak_dense_fp4_flops",
        "peak_fp32_flops",
        "hbm_bytes", "hbm_bw_bytes_per_s", "nvlink_bw_bytes_per_s", "nvlinks",
        "compute_capability"}},
      {"node",
       {"gpus", "nvlink_domain_gpus", "nvlink_sharp", "nvlink_latency_s", "nics", "gpu_nic",
        "nic_bw_bytes_per_s", "gpus_per_pcie_switch", "pcie_generation", "pcie_latency_s",
        "cpu_sockets", "cpu_cores", "cpu_vendor", "host_memory_bytes", "host_link",
        "c2c_bw_bytes_per_s"}},
      {"rack", {"nodes"}},
      {"nccl", {"net_overhead_s", "channels", "channels_multi_node"}},
      {"fabric",
       {"type", "message_latency_s", "rail_optimized", "oversubscription", "levels",
        "switch_radix", "switch_latency_s"}},
  };
  return s;
}

std::size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<std::size_t> prev(b.size() + 1), cur(b.size() + 1);
  for (std::size_t j = 0; j <= b.size(); ++j) prev[j] = j;
  for (std::size_t i = 1; i <= a.size(); ++i) {
    cur[0] = i;
    for (std::size_t j = 1; j <= b.size(); ++j)
      cur[j] = std::min({prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (a[i - 1] == b[j - 1] ? 0 : 1)});
    std::swap(prev, cur);
  }
  return prev[b.size()];
}

std::string dotted(const std::string& section, const std::string& key) {
  return section.empty() ? key : section + "." + key;
}

/// "; did you mean 'X'?" for an unknown `key` of `section`: the same key in another section
/// first, else the nearest key of the section (up to half the key's length in edits).
std::string suggestion(const std::string& section, const std::string& key) {
  for (const auto& [sec, keys] : schema())
    if (sec != section && std::count(keys.begin(), keys.end(), key))
      return "; did you mean '" + dotted(sec, key) + "'?";
  std::string best;
  std::size_t best_d = std::numeric_limits<std::size_t>::max();
  for (const auto& [sec, keys] : schema()) {
    if (sec != section) continue;
    for (const auto& k : keys)
      if (std::size_t d = edit_distance(key, k); d < best_d) best_d = d, best = k;
  }
  if (!best.empty() && best_d <= std::max<std::size_t>(2, key.size() / 2))
    return "; did you mean '" + best + "'?";
  return "";
}

std::string shown(const YAML::Node& n) {
  if (n.IsScalar()) return "'" + n.Scalar() + "'";
  if (n.IsMap()) return "a map";
  if (n.IsSequence()) return "a list";
  return "nothing";
}

class Reader {
 public:
  Reader(std::string source, bool resolve_catalog)
      : source_(std::move(source)), resolve_catalog_(resolve_catalog) {}

  [[noreturn]] void fail(const YAML::Node& at, const std::string& field,
                         const std::string& message) const {
    std::string where = source_;
    if (at.IsDefined() && at.Mark().line >= 0) where += ":" + std::to_string(at.Mark().line + 1);
    throw InputError(where + ": " + field + ": " + message);
  }

  /// Refuses a non-map section, duplicate keys and keys outside the section's schema.
  void check_keys(const YAML::Node& map, const std::string& section) const {
    if (!map.IsMap())
      fail(map, section.empty() ? "(file)" : section, "expects a map of keys, got " + shown(map));
    const auto& keys = std::find_if(schema().begin(), schema().end(),
                                    [&](const auto& s) { return s.first == section; })->second;
    std::set<std::string> seen;
    for (const auto& kv : map) {
      const std::string key = kv.first.Scalar();
      if (!seen.insert(key).second)
        fail(kv.first, dotted(section, key), "duplicate key '" + key + "'");
      if (!std::count(keys.begin(), keys.end(), key))
        fail(kv.first, dotted(section, key),
             "unknown key '" + dotted(section, key) + "'" + suggestion(section, key));
    }
  }

  /// The value of `key`, required unless `optional` (then an undefined node).
  YAML::Node value(const YAML::Node& map, const std::string& section, const std::string& key,
                   bool optional = false) const {
    YAML::Node v = map[key];
    if (!v.IsDefined() && !optional)
      fail(map, dotted(section, key), "missing (required; docs/cluster.md)");
    if (v.IsDefined() && v.IsNull()) fail(map, dotted(section, key), "has no value");
    return v;
  }

  /// A number in [lo, hi] (lo excluded when `lo_open`); YAML's .inf / .nan are refused.
  double number(const YAML::Node& v, const std::string& field, double lo, bool lo_open,
                double hi) const {
    double x = 0;
    if (!v.IsScalar() || !YAML::convert<double>::decode(v, x) || !std::isfinite(x))
      fail(v, field, "expects a finite number, got " + shown(v));
    if (x < lo || (lo_open && x == lo) || x > hi) {
      std::ostringstream bound;
      bound << (lo_open ? "> " : ">= ") << lo << " and <= " << hi;
      fail(v, field, "must be " + bound.str() + ", got " + shown(v));
    }
    return x;
  }

  int integer(const YAML::Node& v, const std::string& field, long long lo, long long hi) const {
    long long x = 0;
    if (!v.IsScalar() || !YAML::convert<long long>::decode(v, x))
      fail(v, field, "expects an integer, got " + shown(v));
    if (x < lo || x > hi)
      fail(v, field,
           "must be in [" + std::to_string(lo) + ", " + std::to_string(hi) + "], got " + shown(v));
    return int(x);
  }

  bool boolean(const YAML::Node& v, const std::string& field) const {
    bool b = false;
    if (!v.IsScalar() || !YAML::convert<bool>::decode(v, b))
      fail(v, field, "expects true or false, got " + shown(v));
    return b;
  }

  std::string text(const YAML::Node& v, const std::string& field) const {
    if (!v.IsScalar() || v.Scalar().empty())
      fail(v, field, "expects a non-empty string, got " + shown(v));
    return v.Scalar();
  }

  bool resolve_catalog() const { return resolve_catalog_; }

 private:
  std::string source_;
  bool resolve_catalog_;
};

// Bounds: generous physical limits, far above any shipped GPU, that keep every product of the
// cost model finite (docs/cluster.md lists them).
constexpr double kMaxFlops = 1e18;             // 1 EFLOP/s per GPU
constexpr double kMaxBytes = 1125899906842624;  // 2^50 bytes (1 PiB)
constexpr double kMaxBandwidth = 1e15;         // 1 PB/s
constexpr double kMaxLatency_s = 1e-3;         // 1 ms per hop

GpuSpec read_gpu(const Reader& r, const YAML::Node& g) {
  r.check_keys(g, "gpu");
  GpuSpec gpu;
  const YAML::Node base = r.value(g, "gpu", "catalog", /*optional=*/true);
  const bool from_catalog = base.IsDefined();
  if (from_catalog) {
    if (!r.resolve_catalog())
      r.fail(base, "gpu.catalog", "a shipped system file spells out its GPU, got " + shown(base));
    const std::string name = r.text(base, "gpu.catalog");
    try {
      gpu = catalog_gpu(name);
    } catch (const InputError& e) {
      r.fail(base, "gpu.catalog", e.what());
    }
  }
  auto field = [&](const char* key, auto&& read) {
    const YAML::Node v = r.value(g, "gpu", key, from_catalog);
    if (v.IsDefined()) read(v, std::string("gpu.") + key);
  };
  field("name", [&](const YAML::Node& v, const std::string& f) { gpu.name = r.text(v, f); });
  auto positive = [&](double& out, double hi) {
    return [&out, &r, hi](const YAML::Node& v, const std::string& f) {
      out = r.number(v, f, 0, true, hi);
    };
  };
  field("peak_dense_fp16_flops", positive(gpu.peak_dense_fp16_flops, kMaxFlops));
  // 0: no FP8 tensor cores (a scenario asking for FP8 is then refused).
  field("peak_dense_fp8_flops", [&](const YAML::Node& v, const std::string& f) {
    gpu.peak_dense_fp8_flops = r.number(v, f, 0, false, kMaxFlops);
  });
  field("peak_fp32_flops", positive(gpu.peak_fp32_flops, kMaxFlops));
  field("hbm_bytes", positive(gpu.hbm_bytes, kMaxBytes));
  field("hbm_bw_bytes_per_s", positive(gpu.hbm_bw_bytes_per_s, kMaxBandwidth));
  field("nvlink_bw_bytes_per_s", positive(gpu.nvlink_bw_bytes_per_s, kMaxBandwidth));
  field("nvlinks", [&](const YAML::Node& v, const std::string& f) { gpu.nvlinks = r.integer(v, f, 1, 1024); });
  // Compute capability x10. NCCL's model here (models/perf/nccl_model.cpp) has the tables of
  // Volta to Blackwell (100: B200, GB200); a later GPU (B300's 103, ...) would silently get
  // Blackwell's, so it is refused.
  field("compute_capability", [&](const YAML::Node& v, const std::string& f) {
    gpu.compute_capability = r.integer(v, f, 70, 1000);
    if (gpu.compute_capability > 100)
      r.fail(v, f,
             "not modelled yet: NCCL's tuning model has the tables of compute capability 70 to "
             "100 (Volta to Blackwell, models/perf/nccl_model.cpp), got " + shown(v));
  });
  // Optional (0: no FP4 tensor cores): the dense FP4 rate, recorded, not yet used by a
  // scenario (docs/cluster.md).
  const YAML::Node fp4 = r.value(g, "gpu", "peak_dense_fp4_flops", /*optional=*/true);
  if (fp4.IsDefined()) gpu.peak_dense_fp4_flops = r.number(fp4, "gpu.peak_dense_fp4_flops", 0, false, kMaxFlops);
  return gpu;
}

/// node.gpu_nic (optional): the compute NIC of each of the node's GPUs, one NIC index
/// (0 .. node.nics - 1) per GPU in GPU order, so GPUs with the same index share that NIC. Every
/// GPU on exactly one NIC, every NIC serving node.gpus / node.nics GPUs (the NCCL model's rails
/// share evenly: models/perf/cost_model.cpp). Absent: consecutive GPUs share one
/// (SystemSpec::nic_of).
void read_gpu_nic(const Reader& r, const YAML::Node& n, SystemSpec& s) {
  const YAML::Node list = r.value(n, "node", "gpu_nic", /*optional=*/true);
  if (!list.IsDefined()) return;
  const std::string field = "node.gpu_nic";
  if (!list.IsSequence())
    r.fail(list, field, "expects a list of one NIC index per GPU, got " + shown(list));
  if (list.size() < std::size_t(s.gpus_per_node))
    r.fail(list, field,
           "GPU " + std::to_string(list.size()) + " is on no NIC: one NIC index per GPU (node.gpus: " +
               std::to_string(s.gpus_per_node) + "), got '" + std::to_string(list.size()) + "' entries");
  if (list.size() > std::size_t(s.gpus_per_node))
    r.fail(list, field,
           "one NIC index per GPU (node.gpus: " + std::to_string(s.gpus_per_node) + "), got '" +
               std::to_string(list.size()) + "' entries");
  std::vector<int> served(std::size_t(s.nics_per_node), 0);
  s.gpu_nic.clear();
  for (std::size_t g = 0; g < list.size(); ++g) {
    const std::string at = field + "[" + std::to_string(g) + "]";
    if (list[g].IsSequence()) {
      std::string items;
      for (const YAML::Node& x : list[g])
        items += (items.empty() ? "" : ", ") + (x.IsScalar() ? x.Scalar() : std::string("..."));
      r.fail(list[g], at,
             "GPU " + std::to_string(g) + " is on several NICs: a GPU uses one NIC, got '[" +
                 items + "]'");
    }
    const int nic = r.integer(list[g], at, 0, s.nics_per_node - 1);
    s.gpu_nic.push_back(nic);
    ++served[std::size_t(nic)];
  }
  const int per_nic = s.gpus_per_node / s.nics_per_node;
  for (std::size_t nic = 0; nic < served.size(); ++nic)
    if (served[nic] != per_nic)
      r.fail(list, field,
             "every NIC serves node.gpus / node.nics = " + std::to_string(per_nic) +
                 " GPUs (uneven sharing is not modelled): NIC " + std::to_string(nic) + " serves '" +
                 std::to_string(served[nic]) + "'");
}

void read_node_links(const Reader& r, const YAML::Node& n, SystemSpec& s) {
  auto v = [&](const char* key) { return r.value(n, "node", key); };
  s.gpus_per_node = r.integer(v("gpus"), "node.gpus", 1, 1024);
  const YAML::Node domain = v("nvlink_domain_gpus");
  const int d = r.integer(domain, "node.nvlink_domain_gpus", 1, 1 << 20);
  if (s.gpus_per_node % d != 0 && d % s.gpus_per_node != 0)
    r.fail(domain, "node.nvlink_domain_gpus",
           "an NVLink domain of " + domain.Scalar() + " GPUs neither divides the node's " +
               std::to_string(s.gpus_per_node) + " GPUs (node.gpus) nor is a multiple of them, got " +
               shown(domain));
  // A domain of several nodes' GPUs (NVSwitch trays, GB200 NVL72) is modelled; one smaller
  // than a node is not.
  if (d < s.gpus_per_node)
    r.fail(domain, "node.nvlink_domain_gpus",
           "not modelled yet: the platform joins at least the GPUs of one node by NVLink "
           "(sim/platform.h), so the domain must be node.gpus (" +
               std::to_string(s.gpus_per_node) + ") or a multiple of it, got " + shown(domain));
  // Stored only when it spans nodes: 0 keeps "the node's GPUs", which a scenario's smaller
  // cluster.gpus_per_node narrows on a DGX.
  s.nvlink_domain_gpus = d > s.gpus_per_node ? d : 0;
  const YAML::Node sharp = v("nvlink_sharp");
  s.nvlink_sharp = r.boolean(sharp, "node.nvlink_sharp");
  // NVLink SHARP came with the third-generation NVSwitch of Hopper systems; NCCL runs NVLS
  // from compute capability 90 only (models/perf/nccl_model.cpp nvls_time_s).
  if (s.nvlink_sharp && s.gpu.compute_capability < 90)
    r.fail(sharp, "node.nvlink_sharp",
           "needs gpu.compute_capability >= 90 (NVLS runs on Hopper and later), got " + shown(sharp) +
               " with compute capability " + std::to_string(s.gpu.compute_capability));
  s.nvlink_latency_s = r.number(v("nvlink_latency_s"), "node.nvlink_latency_s", 0, false, kMaxLatency_s);
  const YAML::Node nics = v("nics");
  s.nics_per_node = r.integer(nics, "node.nics", 1, 1024);
  if (s.gpus_per_node % s.nics_per_node != 0)
    r.fail(nics, "node.nics",
           "must divide node.gpus (" + std::to_string(s.gpus_per_node) +
               "): consecutive GPUs share one NIC, got " + shown(nics));
  read_gpu_nic(r, n, s);
  s.nic_bw_bytes_per_s = r.number(v("nic_bw_bytes_per_s"), "node.nic_bw_bytes_per_s", 0, true, kMaxBandwidth);
  const YAML::Node per_switch = v("gpus_per_pcie_switch");
  s.gpus_per_pcie_switch = r.integer(per_switch, "node.gpus_per_pcie_switch", 1, 1024);
  if (s.gpus_per_node % s.gpus_per_pcie_switch != 0)
    r.fail(per_switch, "node.gpus_per_pcie_switch",
           "must divide node.gpus (" + std::to_string(s.gpus_per_node) + "), got " + shown(per_switch));
  const YAML::Node gen = v("pcie_generation");
  const double pcie = pcie_x16_bytes_per_s(r.integer(gen, "node.pcie_generation", 3, 6));
  // The GPU's x16 link and each PCIe switch's x16 uplink to the CPU run at the generation's rate.
  s.gpu.pcie_bw_bytes_per_s = pcie;
  s.pcie_uplink_bw_bytes_per_s = pcie;
  s.pcie_latency_s = r.number(v("pcie_latency_s"), "node.pcie_latency_s", 0, false, kMaxLatency_s);
}

/// node.host_link (optional, `pcie` by default): `nvlink-c2c` joins each CPU socket to its
/// gpus / cpu_sockets GPUs by NVLink-C2C at node.c2c_bw_bytes_per_s per direction (Grace).
void read_host_link(const Reader& r, const YAML::Node& n, SystemSpec& s) {
  const YAML::Node link = r.value(n, "node", "host_link", /*optional=*/true);
  const YAML::Node bw = r.value(n, "node", "c2c_bw_bytes_per_s", /*optional=*/true);
  const std::string name = link.IsDefined() ? r.text(link, "node.host_link") : "pcie";
  if (name != "pcie" && name != "nvlink-c2c")
    r.fail(link, "node.host_link", "expects 'pcie' or 'nvlink-c2c', got " + shown(link));
  s.host_c2c = name == "nvlink-c2c";
  if (!s.host_c2c) {
    if (bw.IsDefined())
      r.fail(bw, "node.c2c_bw_bytes_per_s", "needs node.host_link: nvlink-c2c, got " + shown(bw));
    return;
  }
  if (!bw.IsDefined()) r.fail(n, "node.c2c_bw_bytes_per_s", "missing (required with node.host_link: nvlink-c2c)");
  s.c2c_bw_bytes_per_s = r.number(bw, "node.c2c_bw_bytes_per_s", 0, true, kMaxBandwidth);
  if (s.gpus_per_node % s.cpu_sockets != 0)
    r.fail(n["cpu_sockets"], "node.cpu_sockets",
           "must divide node.gpus (" + std::to_string(s.gpus_per_node) +
               ") with nvlink-c2c: each socket's C2C joins gpus / cpu_sockets GPUs, got " +
               shown(n["cpu_sockets"]));
}

/// The optional `rack` section: rack.nodes nodes per rack, whose GPUs the NVLink domain must
/// divide (a domain never spans racks).
void read_rack(const Reader& r, const YAML::Node& root, SystemSpec& s) {
  const YAML::Node rack = r.value(root, "", "rack", /*optional=*/true);
  if (!rack.IsDefined()) return;
  r.check_keys(rack, "rack");
  const YAML::Node nodes = r.value(rack, "rack", "nodes");
  s.rack_nodes = r.integer(nodes, "rack.nodes", 1, 1 << 20);
  const long long gpus = (long long)s.rack_nodes * s.gpus_per_node;
  if (gpus % s.domain_gpus() != 0)
    r.fail(nodes, "rack.nodes",
           "a rack's " + std::to_string(gpus) + " GPUs must be a whole number of NVLink domains of " +
               std::to_string(s.domain_gpus()) + " GPUs (node.nvlink_domain_gpus), got " + shown(nodes));
}

void read_node_host(const Reader& r, const YAML::Node& n, SystemSpec& s) {
  auto v = [&](const char* key) { return r.value(n, "node", key); };
  s.cpu_sockets = r.integer(v("cpu_sockets"), "node.cpu_sockets", 1, 64);
  s.cpu_cores = r.integer(v("cpu_cores"), "node.cpu_cores", 1, 1 << 20);
  const YAML::Node vendor = v("cpu_vendor");
  const std::string name = r.text(vendor, "node.cpu_vendor");
  // NCCL tunes by CPU vendor (tuning.cc: LL caps, network overhead); its tables know these.
  // An Arm CPU (Grace) takes NCCL's non-AMD entries (tuning.cc indexes llMaxBws by AMD or not).
  if (name != "amd" && name != "intel" && name != "arm")
    r.fail(vendor, "node.cpu_vendor",
           "not modelled: NCCL's tuning tables here know 'amd', 'intel' and 'arm', got " + shown(vendor));
  s.amd_cpu = name == "amd";
  s.arm_cpu = name == "arm";
  s.host_memory_bytes = r.number(v("host_memory_bytes"), "node.host_memory_bytes", 0, true, kMaxBytes);
  read_host_link(r, n, s);
}

/// fabric.type and fabric.message_latency_s: InfiniBand (the latency optional, 0 by default:
/// NCCL's tables are IB's) or RoCE (the latency required: its NIC and Ethernet-switch
/// processing per message, which NCCL's tables leave out).
void read_fabric_type(const Reader& r, const YAML::Node& f, SystemSpec& s) {
  const YAML::Node type = r.value(f, "fabric", "type");
  const std::string t = r.text(type, "fabric.type");
  if (t != "infiniband" && t != "roce")
    r.fail(type, "fabric.type", "expects 'infiniband' or 'roce', got " + shown(type));
  s.fabric_roce = t == "roce";
  const YAML::Node lat = r.value(f, "fabric", "message_latency_s", /*optional=*/true);
  if (s.fabric_roce && !lat.IsDefined())
    r.fail(f, "fabric.message_latency_s",
           "missing: a RoCE fabric states its per-message latency (docs/cluster.md), with "
           "fabric.type " + shown(type));
  if (lat.IsDefined())
    s.fabric_message_latency_s =
        r.number(lat, "fabric.message_latency_s", 0, false, kMaxLatency_s);
}

/// fabric.oversubscription: one ratio (down:up ports) for every tier below the top, or a block
/// list with one per tier, leaf first (levels - 1 entries), each in [1, 1024]
/// (fat_tree_up_ports / fat_tree_down_ports split the radix).
void read_oversubscription(const Reader& r, const YAML::Node& f, SystemSpec& s) {
  const YAML::Node over = r.value(f, "fabric", "oversubscription");
  const int tiers = s.fat_tree_levels - 1;
  std::vector<std::pair<YAML::Node, double>> ratios;
  if (over.IsSequence()) {
    if (int(over.size()) != tiers)
      r.fail(over, "fabric.oversubscription",
             "a list needs one ratio per tier below the top (fabric.levels - 1 = " +
                 std::to_string(tiers) + "), got " + std::to_string(over.size()));
    for (std::size_t i = 0; i < over.size(); ++i)
      ratios.emplace_back(over[i], r.number(over[i], "fabric.oversubscription", 1, false, 1024));
  } else {
    const double x = r.number(over, "fabric.oversubscription", 1, false, 1024);
    for (int i = 0; i < tiers; ++i) ratios.emplace_back(over, x);
  }
  s.oversubscription.clear();
  bool all_one = true;
  for (const auto& [node, x] : ratios) s.oversubscription.push_back(x), all_one &= x == 1.0;
  if (all_one) s.oversubscription.clear();  // full bisection everywhere: the default shape
  // Every ratio in [1, 1024] leaves a radix-k (k >= 2) switch floor(k / 2) >= 1 ports down and
  // k - floor(k R / (R + 1)) >= k / (R + 1) > 0, so >= 1, up.
}

void read_fabric(const Reader& r, const YAML::Node& f, SystemSpec& s) {
  r.check_keys(f, "fabric");
  read_fabric_type(r, f, s);
  s.rail_optimized = r.boolean(r.value(f, "fabric", "rail_optimized"), "fabric.rail_optimized");
  s.fat_tree_levels = r.integer(r.value(f, "fabric", "levels"), "fabric.levels", 1, 8);
  s.switch_radix = r.integer(r.value(f, "fabric", "switch_radix"), "fabric.switch_radix", 2, 4096);
  read_oversubscription(r, f, s);
  s.switch_latency_s = r.number(r.value(f, "fabric", "switch_latency_s"), "fabric.switch_latency_s",
                                0, false, kMaxLatency_s);
}

SystemSpec read_system(const Reader& r, const YAML::Node& root) {
  r.check_keys(root, "");
  SystemSpec s;
  s.name = r.text(r.value(root, "", "name"), "name");
  s.gpu = read_gpu(r, r.value(root, "", "gpu"));
  const YAML::Node node = r.value(root, "", "node");
  r.check_keys(node, "node");
  read_node_links(r, node, s);
  read_node_host(r, node, s);
  read_rack(r, root, s);
  const YAML::Node nccl = r.value(root, "", "nccl");
  r.check_keys(nccl, "nccl");
  s.nccl_net_overhead_s = r.number(r.value(nccl, "nccl", "net_overhead_s"), "nccl.net_overhead_s",
                                   0, false, kMaxLatency_s);
  // NCCL runs at most MAXCHANNELS = 64 channels (src/include/device.h, v2.29.7).
  s.nccl_channels = r.integer(r.value(nccl, "nccl", "channels"), "nccl.channels", 1, 64);
  s.nccl_channels_multi_node =
      r.integer(r.value(nccl, "nccl", "channels_multi_node"), "nccl.channels_multi_node", 1, 64);
  read_fabric(r, r.value(root, "", "fabric"), s);
  return s;
}

/// System files are block-style YAML with plain keys and values. yaml-cpp 0.7 loops forever on
/// some malformed flow and quoted input (a ',' after a quoted scalar or a [ ] collection, found
/// by fuzz/fuzz_scenario.cpp; models/input/scenario.cpp scans scenarios for the same), so the
/// characters only those forms need, and tags, anchors, aliases, block scalars, directives and
/// complex keys, are refused before parsing, as are control characters.
void refuse_unsupported_yaml(const std::string& text, const std::string& source) {
  std::size_t line = 1;
  bool comment = false, after_blank = true;
  for (const char c : text) {
    if (c == '\n') {
      ++line, comment = false, after_blank = true;
      continue;
    }
    const auto u = static_cast<unsigned char>(c);
    if ((u < 0x20 && c != '\t' && c != '\r') || u == 0x7F)
      throw InputError(source + ":" + std::to_string(line) + ": control character in a system file");
    if (comment) continue;
    if (c == '#' && after_blank) comment = true;
    else if (std::string("[]{},!&*|>%?'\"`@").find(c) != std::string::npos)
      throw InputError(source + ":" + std::to_string(line) + ": '" + std::string(1, c) +
                       "' is not supported in system files: block-style YAML with plain keys "
                       "and values only (docs/cluster.md)");
    after_blank = c == ' ' || c == '\t';
  }
}

SystemSpec parse(const std::string& text, const std::string& source, bool resolve_catalog) {
  refuse_unsupported_yaml(text, source);
  YAML::Node root;
  try {
    root = YAML::Load(text);
  } catch (const YAML::Exception& e) {
    throw InputError(source + ":" + std::to_string(e.mark.line + 1) + ": YAML syntax error: " + e.msg);
  }
  const Reader r(source, resolve_catalog);
  try {
    return read_system(r, root);
  } catch (const YAML::Exception& e) {
    throw InputError(source + ":" + std::to_string(e.mark.line + 1) + ": " + e.msg);
  }
}

}  // namespace

double pcie_x16_bytes_per_s(int generation) {
  switch (generation) {
    case 3: return 16e9;   // 8 GT/s x 16 lanes / 8
    case 4: return 32e9;   // 16 GT/s
    case 5: return 64e9;   // 32 GT/s
    case 6: return 128e9;  // 64 GT/s (PAM4)
    default: return 0;
  }
}

SystemSpec parse_system_file(const std::string& yaml_text, const std::string& source) {
  return parse(yaml_text, source, /*resolve_catalog=*/true);
}

SystemSpec load_system_file(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw InputError(path + ": cannot open system file");
  std::ostringstream text;
  text << in.rdbuf();
  return parse_system_file(text.str(), path);
}

namespace detail {
SystemSpec parse_system_file_standalone(const std::string& yaml_text, const std::string& source) {
  return parse(yaml_text, source, /*resolve_catalog=*/false);
}
}  // namespace detail

}  // namespace trainsim
