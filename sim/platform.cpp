#include "sim/platform.h"

#include <cmath>
#include <stdexcept>

#include <simgrid/s4u/Engine.hpp>
#include <simgrid/s4u/Host.hpp>
#include <simgrid/s4u/Link.hpp>
#include <simgrid/s4u/NetZone.hpp>

#include "models/errors.h"

namespace trainsim::sim {
namespace {

void require_positive(double value, const std::string& what, const std::string& system) {
  if (!(value > 0) || !std::isfinite(value))
    throw InputError("system '" + system + "': " + what + " must be > 0, got " +
                     std::to_string(value));
}

std::string s(std::uint64_t v) { return std::to_string(v); }

}  // namespace

PlatformModel::PlatformModel(const SystemSpec& system, std::int64_t nodes,
                             std::int64_t gpus_per_node, const CostModel& cost,
                             std::int64_t domain_ranks)
    : system_(system), nodes_(nodes), gpus_per_node_(gpus_per_node),
      domain_ranks_(domain_ranks > 0 ? domain_ranks : gpus_per_node) {
  if (nodes < 1) throw InputError("cluster.nodes must be >= 1, got " + std::to_string(nodes));
  if (gpus_per_node < 1)
    throw InputError("cluster.gpus_per_node must be >= 1, got " + std::to_string(gpus_per_node));
  const std::string& n = system.name;
  require_positive(system.gpu.nvlink_bw_bytes_per_s, "gpu.nvlink_bw_bytes_per_s", n);
  require_positive(system.gpu.pcie_bw_bytes_per_s, "gpu.pcie_bw_bytes_per_s", n);
  require_positive(system.pcie_uplink_bw_bytes_per_s, "pcie_uplink_bw_bytes_per_s", n);
  require_positive(system.nic_bw_bytes_per_s, "nic_bw_bytes_per_s", n);
  require_positive(system.nics_per_node, "nics_per_node", n);
  require_positive(system.gpus_per_pcie_switch, "gpus_per_pcie_switch", n);
  require_positive(cost.nvlink_efficiency(), "calibration nvlink_efficiency", n);
  require_positive(cost.network_efficiency(), "calibration network_efficiency", n);
  require_positive(cost.pcie_efficiency(), "calibration pcie_efficiency", n);
  if (system.switch_radix < 2)
    throw InputError("system '" + n + "': switch_radix must be >= 2, got " +
                     std::to_string(system.switch_radix));
  if (system.fat_tree_levels < 1)
    throw InputError("system '" + n + "': fat_tree_levels must be >= 1, got " +
                     std::to_string(system.fat_tree_levels));

  // Achieved bandwidths: nominal link rate x the fraction NCCL / cudaMemcpy reach
  // (CostModel::*_efficiency, from the calibration profile).
  nvlink_bw_ = system.gpu.nvlink_bw_bytes_per_s * cost.nvlink_efficiency();
  // The GPU's and the NIC's own PCIe links at the link-level data rate (GPUDirect RDMA and
  // device DMA); the uplink to the CPU at the measured host-copy rate (kPcieLinkEfficiency).
  pcie_bw_ = system.gpu.pcie_bw_bytes_per_s * cost.pcie_link_efficiency();
  uplink_bw_ = system.pcie_uplink_bw_bytes_per_s * cost.pcie_efficiency();
  // Switch ports run at the NIC rate (same InfiniBand generation: HDR QM8700 for HDR NICs).
  net_bw_ = system.nic_bw_bytes_per_s * cost.network_efficiency();
  // NVLink-C2C (Grace): host copies at the profile's host-copy efficiency of the C2C rate.
  if (system.host_c2c) {
    require_positive(system.c2c_bw_bytes_per_s, "node.c2c_bw_bytes_per_s", n);
    c2c_bw_ = system.c2c_bw_bytes_per_s * cost.pcie_efficiency();
  }
  TRAINSIM_CHECK(domain_ranks_ % gpus_per_node_ == 0,
                 "PlatformModel: an NVLink domain of " + std::to_string(domain_ranks_) +
                     " ranks splits a node of " + std::to_string(gpus_per_node_));

  // k-ary fat tree with `levels` levels as an XGFT: leaves and middle levels use half their
  // ports down (m = k/2) and half up (w = k/2); the top level uses all k ports down; a NIC has
  // one port (w_1 = 1). Capacity: k^h / 2^(h-1) NICs (k=40, h=3: 16000). An oversubscribed
  // tier (SystemSpec::oversubscription) gives more of its switches' ports to children and
  // fewer to parents (fat_tree_down_ports / fat_tree_up_ports), so more end points share each
  // up link and D-mod-k routes fold onto fewer of them.
  levels_ = system.fat_tree_levels;
  M_.assign(levels_ + 1, 1);
  W_.assign(levels_ + 1, 1);
  for (int l = 1; l <= levels_; ++l) {
    const std::uint64_t m = std::uint64_t(fat_tree_down_ports(system, l));
    const std::uint64_t w = (l == 1) ? 1 : std::uint64_t(fat_tree_up_ports(system, l - 1));
    M_[l] = M_[l - 1] * m;
    W_[l] = W_[l - 1] * w;
  }
  const std::uint64_t last = fabric_endpoint(std::uint32_t(nodes - 1),
                                             std::uint32_t(system.nics_per_node - 1));
  // The last node's last NIC has the largest index of the layout (see fabric_endpoint).
  const std::uint64_t needed = last + 1;
  if (needed > M_[levels_])
    throw InputError("cluster of " + std::to_string(nodes) + " nodes x " +
                     std::to_string(system.nics_per_node) + " NICs does not fit system '" + n +
                     "' fat tree (" + std::to_string(levels_) + " levels of radix-" +
                     std::to_string(system.switch_radix) + " switches: at most " +
                     std::to_string(M_[levels_]) + " NIC ports)");
}

int PlatformModel::nic_of_gpu(int local_gpu) const {
  // One compute NIC per GPU (rail-optimized); with fewer NICs than GPUs, consecutive GPUs
  // share one, or those the system file pairs (node.gpu_nic: SystemSpec::gpu_nic).
  return system_.nic_of(local_gpu, gpus_per_node_);
}

int PlatformModel::pcie_switch_of_gpu(int local_gpu) const {
  return local_gpu / system_.gpus_per_pcie_switch;
}

std::uint64_t PlatformModel::fabric_endpoint(std::uint32_t node, std::uint32_t nic) const {
  const std::uint64_t rails = std::uint64_t(system_.nics_per_node);
  // One switch, or a fabric that is not rail-optimized: a node's NICs are consecutive ports,
  // so its NICs share a leaf and same-index GPUs of nodes on other leaves cross the spine.
  if (levels_ == 1 || !system_.rail_optimized) return std::uint64_t(node) * rails + nic;
  const std::uint64_t m1 = M_[1];
  // Leaf index = (node / m1) * rails + nic: a leaf holds NIC `nic` of m1 consecutive nodes.
  return (node / m1) * (m1 * rails) + std::uint64_t(nic) * m1 + node % m1;
}

std::string PlatformModel::host_name(Endpoint e) {
  return (e.kind == Endpoint::Kind::Gpu ? "gpu" : "cpu") + std::to_string(e.index);
}

std::uint32_t PlatformModel::link(const std::string& name, double bw, double latency) {
  auto it = link_index_.find(name);
  if (it != link_index_.end()) return it->second;
  const auto id = std::uint32_t(links_.size());
  const auto scale = link_scale_.find(name);
  links_.push_back(LinkSpec{name, scale == link_scale_.end() ? bw : bw * scale->second, latency});
  link_index_.emplace(name, id);
  return id;
}

void PlatformModel::add_endpoint(Endpoint e) {
  if (endpoint_index_.emplace(e.key(), std::uint32_t(endpoints_.size())).second)
    endpoints_.push_back(e);
}

void PlatformModel::append_fabric(Route& r, std::uint64_t src_ep, std::uint64_t dst_ep) {
  // D-mod-k (Zahavi et al.): the up-port at level l is digit l of the destination index in
  // the mixed radix (w_1, w_2, ...), so the level-l switch of the path has column
  // dst mod W_l; the path climbs to the lowest level L where source and destination share a
  // subtree (src / M_L == dst / M_L) and descends deterministically.
  int L = 1;
  while (L <= levels_ && src_ep / M_[L] != dst_ep / M_[L]) ++L;
  TRAINSIM_CHECK(L <= levels_, "PlatformModel: fabric end points outside the tree");
  const double lat = system_.switch_latency_s;  // one switch entered per fabric link
  auto fabric_link = [&](int l, std::uint64_t child_group, std::uint64_t child_col,
                         std::uint64_t parent_col) {
    return link("ft-l" + s(l) + "-g" + s(child_group) + "-c" + s(child_col) + "-p" + s(parent_col),
                net_bw_, lat);
  };
  for (int l = 2; l <= L; ++l)
    r.hops.push_back({fabric_link(l, src_ep / M_[l - 1], dst_ep % W_[l - 1], dst_ep % W_[l]), true});
  for (int l = L; l >= 2; --l)
    r.hops.push_back({fabric_link(l, dst_ep / M_[l - 1], dst_ep % W_[l - 1], dst_ep % W_[l]), false});
}

void PlatformModel::check(Endpoint e) const {
  const std::uint64_t limit = e.kind == Endpoint::Kind::Gpu ? std::uint64_t(nodes_ * gpus_per_node_)
                                                            : std::uint64_t(nodes_);
  TRAINSIM_CHECK(e.index < limit, "PlatformModel: " + host_name(e) + " outside the cluster of " +
                                      std::to_string(nodes_) + " nodes x " +
                                      std::to_string(gpus_per_node_) + " GPUs");
}

void PlatformModel::use(Endpoint e) {
  check(e);
  add_endpoint(e);
}

Route PlatformModel::make_route(Endpoint src, Endpoint dst) {
  check(src);
  check(dst);
  TRAINSIM_CHECK(!(src == dst), "PlatformModel::route: src == dst (" + host_name(src) + ")");

  // Halves of a one-way latency go to each of the two links that make the hop, so a route
  // GPU -> switch -> GPU (or -> CPU) pays the catalog latency once.
  const double nvl_lat = system_.nvlink_latency_s / 2;
  const double pcie_lat = system_.pcie_latency_s / 2;
  auto gpu_port = [&](std::uint32_t rank) {
    return link("n" + s(node_of(rank)) + "-gpu" + s(rank % gpus_per_node_) + "-nvlink", nvlink_bw_,
                nvl_lat);
  };
  auto gpu_pcie = [&](std::uint32_t rank) {
    return link("n" + s(node_of(rank)) + "-gpu" + s(rank % gpus_per_node_) + "-pcie", pcie_bw_,
                pcie_lat);
  };
  // NVLink-C2C: one link per CPU socket, shared by its gpus_per_node / cpu_sockets GPUs.
  auto c2c = [&](std::uint32_t rank) {
    const std::int64_t per_socket = std::max<std::int64_t>(1, gpus_per_node_ / system_.cpu_sockets);
    return link("n" + s(node_of(rank)) + "-cpu" + s(std::uint64_t(rank % gpus_per_node_ / per_socket)) +
                    "-c2c",
                c2c_bw_, system_.pcie_latency_s);
  };
  auto uplink = [&](std::uint32_t rank) {
    return link("n" + s(node_of(rank)) + "-pcisw" +
                    s(pcie_switch_of_gpu(int(rank % gpus_per_node_))) + "-uplink",
                uplink_bw_, pcie_lat);
  };
  // The NIC's own x16 link to its PCIe switch (ConnectX-6/7 sit on the GPU's PCIe generation).
  auto nic_pcie = [&](std::uint32_t node, int nic) {
    return link("n" + s(node) + "-nic" + s(nic) + "-pcie", pcie_bw_, pcie_lat);
  };
  // NIC <-> leaf cable: half a switch hop each end of a route, so a route through L levels
  // pays (2L - 1) switch latencies.
  auto nic_leaf = [&](std::uint32_t node, int nic) {
    return link("n" + s(node) + "-nic" + s(nic) + "-leaf", net_bw_, system_.switch_latency_s / 2);
  };

  Route r;
  using K = Endpoint::Kind;
  if (src.kind == K::Gpu && dst.kind == K::Gpu) {
    const std::uint32_t na = node_of(src.index), nb = node_of(dst.index);
    if (domain_of(src.index) == domain_of(dst.index)) {
      r.hops = {{gpu_port(src.index), true}, {gpu_port(dst.index), false}};
    } else {
      const int nic_a = nic_of_gpu(int(src.index % gpus_per_node_));
      const int nic_b = nic_of_gpu(int(dst.index % gpus_per_node_));
      r.hops = {{gpu_pcie(src.index), true}, {nic_pcie(na, nic_a), false}, {nic_leaf(na, nic_a), true}};
      append_fabric(r, fabric_endpoint(na, std::uint32_t(nic_a)), fabric_endpoint(nb, std::uint32_t(nic_b)));
      r.hops.push_back({nic_leaf(nb, nic_b), false});
      r.hops.push_back({nic_pcie(nb, nic_b), true});
      r.hops.push_back({gpu_pcie(dst.index), false});
    }
  } else if (src.kind == K::Cpu && dst.kind == K::Gpu && node_of(dst.index) == src.index) {
    if (system_.host_c2c) r.hops = {{c2c(dst.index), false}};
    else r.hops = {{uplink(dst.index), false}, {gpu_pcie(dst.index), false}};
  } else if (src.kind == K::Gpu && dst.kind == K::Cpu && node_of(src.index) == dst.index) {
    if (system_.host_c2c) r.hops = {{c2c(src.index), true}};
    else r.hops = {{gpu_pcie(src.index), true}, {uplink(src.index), true}};
  } else {
    TRAINSIM_CHECK(false, "PlatformModel::route: no route from " + host_name(src) + " to " +
                              host_name(dst) + " (CPU hosts only reach their own node's GPUs)");
  }
  r.bottleneck_bw_bytes_per_s = links_[r.hops.front().link].bw_bytes_per_s;
  for (const Hop& h : r.hops) {
    r.latency_s += links_[h.link].latency_s;
    r.bottleneck_bw_bytes_per_s = std::min(r.bottleneck_bw_bytes_per_s, links_[h.link].bw_bytes_per_s);
  }
  return r;
}

const Route& PlatformModel::route(Endpoint src, Endpoint dst) {
  const auto key = std::make_pair(src.key(), dst.key());
  auto it = routes_.find(key);
  if (it != routes_.end()) return it->second;
  Route r = make_route(src, dst);
  add_endpoint(src);
  add_endpoint(dst);
  auto [pos, inserted] = routes_.emplace(key, std::move(r));
  (void)inserted;
  route_order_.push_back({{src, dst}, &pos->second});
  return pos->second;
}

simgrid::s4u::Host* SimgridPlatform::host(Endpoint e) const {
  auto it = hosts.find(e.key());
  TRAINSIM_CHECK(it != hosts.end(), "SimgridPlatform: no host " + PlatformModel::host_name(e) +
                                        " (no route to or from it was requested)");
  return it->second;
}

std::vector<std::string> engine_args(bool verbose) {
  return {
      "trainsim",
      // CM02 = max-min fair sharing with latency then bandwidth, no correction factors (its
      // registration sets latency-factor = bandwidth-factor = 1, weight-S = 0); we set them
      // explicitly anyway. TCP-gamma 0 removes the window bound gamma / (2 latency).
      "--cfg=network/model:CM02",
      "--cfg=network/latency-factor:1.0",
      "--cfg=network/bandwidth-factor:1.0",
      "--cfg=network/weight-S:0",
      "--cfg=network/TCP-gamma:0",
      "--cfg=network/crosstraffic:0",
      // Actors only run short loops: 128 KiB stacks keep thousands of actors cheap.
      "--cfg=contexts/stack-size:128",
      verbose ? "--log=root.thres:warning" : "--log=root.thres:critical",
  };
}

SimgridPlatform build_simgrid_platform(const PlatformModel& model) {
  namespace s4u = simgrid::s4u;
  SimgridPlatform out;
  auto* zone = s4u::create_full_zone("trainsim");
  for (const Endpoint& e : model.endpoints()) {
    s4u::Host* h = zone->create_host(PlatformModel::host_name(e), kHostSpeed);
    h->set_core_count(e.kind == Endpoint::Kind::Gpu ? 1 : model.cpu_host_cores());
    h->seal();
    out.hosts.emplace(e.key(), h);
  }
  std::vector<s4u::SplitDuplexLink*> links;
  links.reserve(model.links().size());
  for (const LinkSpec& l : model.links()) {
    // Latency 0 in SimGrid: the executor pays route latencies (see platform.h).
    auto* link = zone->create_split_duplex_link(l.name, l.bw_bytes_per_s);
    link->set_latency(0);
    link->seal();
    links.push_back(link);
  }
  for (const auto& [pair, route] : model.routes()) {
    std::vector<s4u::LinkInRoute> path;
    path.reserve(route->hops.size());
    for (const Hop& h : route->hops)
      path.emplace_back(links[h.link], h.up ? s4u::LinkInRoute::Direction::UP
                                            : s4u::LinkInRoute::Direction::DOWN);
    zone->add_route(out.host(pair.first)->get_netpoint(), out.host(pair.second)->get_netpoint(),
                    nullptr, nullptr, path, /*symmetrical=*/false);
  }
  zone->seal();
  return out;
}

void apply_slow_links(PlatformModel& model, const VariabilityConfig& variability) {
  auto s = [](std::int64_t v) { return std::to_string(v); };
  for (const SlowLink& l : variability.slow_links) {
    if (l.bandwidth == 1.0) continue;
    // The names PlatformModel::make_route gives its links.
    model.scale_link_bandwidth("n" + s(l.node) + (l.nic >= 0 ? "-nic" + s(l.nic) + "-leaf"
                                                              : "-gpu" + s(l.nvlink_gpu) + "-nvlink"),
                               l.bandwidth);
  }
}

}  // namespace trainsim::sim
