// The simulated machine: DGX-style nodes (NVSwitch, PCIe tree, one rail-optimized IB NIC per
// GPU) joined by a fat tree, built in code from the hardware catalog and the scenario's
// cluster size (physical shape: ../shared/ground-truth/hardware.md, "Nodes").
//
// Two layers:
//  - PlatformModel is pure C++ (no SimGrid): it names the links, computes every route the
//    executor asks for (which links, in which direction) and the route's latency and
//    bottleneck bandwidth. Only the links on requested routes exist, so a folded graph of a
//    3072-GPU cluster gives a platform of a few hundred links. Tests read it directly.
//  - build_simgrid_platform() turns a model into SimGrid hosts, split-duplex links and
//    explicit routes in one Full-routing zone, for the (src, dst) pairs requested only.
//
// Link latencies are NOT given to SimGrid: CM02 weighs a flow's bandwidth share by the inverse
// of its route latency (SimGrid network_cm02.cpp: sharing_penalty_ = latency), which would give
// a PCIe copy (1 us route) 2-3x the share of an IB flow (2-3 us route) on a shared PCIe link.
// RDMA and DMA engines share a link per flow, not per RTT, so SimGrid links have latency 0 and
// share bandwidth max-min fairly, and the executor pays the latency itself (a sleep): the
// route's latency_s for host copies, the cost model's NCCL latency for collectives and
// messages (NCCL's per-step figure already includes the links). An uncontended flow of S bytes
// thus takes exactly latency + S / bottleneck_bw. SimGrid itself runs CM02 with bandwidth and
// latency factors 1, no TCP-gamma window and no cross traffic (engine_args).
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <tuple>
#include <unordered_map>
#include <vector>

#include "models/perf/cost_model.h"
#include "models/hardware/hardware.h"
#include "models/input/scenario.h"

namespace simgrid::s4u {
class Host;
}

namespace trainsim::sim {

/// A flow end point: the GPU of a global rank, or the host CPU (memory) of a node.
struct Endpoint {
  enum class Kind : std::uint8_t { Gpu, Cpu };
  Kind kind = Kind::Gpu;
  std::uint32_t index = 0;  ///< global rank (Gpu) or node index (Cpu)

  static Endpoint gpu(std::uint32_t rank) { return {Kind::Gpu, rank}; }
  static Endpoint cpu(std::uint32_t node) { return {Kind::Cpu, node}; }
  std::uint64_t key() const { return (std::uint64_t(kind) << 32) | index; }
  bool operator==(const Endpoint& o) const { return kind == o.kind && index == o.index; }
};

/// One split-duplex link: the same bandwidth in each direction, directions independent.
/// `up` is the direction away from an end device (GPU, NIC) toward its switch, from a PCIe
/// switch toward the CPU socket, and from a fat-tree level toward the level above.
struct LinkSpec {
  std::string name;                ///< e.g. "n3-gpu5-nvlink", "ft-l2-g0-c3-up-c13"
  double bw_bytes_per_s = 0;       ///< per direction, efficiency applied
  double latency_s = 0;            ///< one-way, paid once per traversal
};

struct Hop {
  std::uint32_t link = 0;  ///< index into PlatformModel::links()
  bool up = true;          ///< direction of traversal
};

struct Route {
  std::vector<Hop> hops;
  double latency_s = 0;            ///< sum of the links' latencies
  double bottleneck_bw_bytes_per_s = 0;  ///< min bandwidth over the links
};

class PlatformModel {
 public:
  /// `nodes` x `gpus_per_node` GPUs of `system`; bandwidths scaled by the cost model's
  /// achieved-bandwidth efficiencies (NVLink, IB network, PCIe). `domain_ranks` consecutive
  /// ranks share one NVLink domain (models/system/collective_flows.h nvlink_domain_ranks; 0:
  /// the node's GPUs): GB200 NVL72's NVSwitch trays join 18 compute trays. Throws InputError
  /// when the cluster does not fit the system's fat tree (fat_tree_levels, switch_radix).
  PlatformModel(const SystemSpec& system, std::int64_t nodes, std::int64_t gpus_per_node,
                const CostModel& cost, std::int64_t domain_ranks = 0);

  std::int64_t nodes() const { return nodes_; }
  std::int64_t gpus_per_node() const { return gpus_per_node_; }
  std::uint32_t node_of(std::uint32_t rank) const { return rank / std::uint32_t(gpus_per_node_); }
  std::int64_t domain_ranks() const { return domain_ranks_; }
  std::uint32_t domain_of(std::uint32_t rank) const { return rank / std::uint32_t(domain_ranks_); }

  /// The route src -> dst (src != dst), registering its links and the end points as used.
  /// GPU -> GPU in one NVLink domain (a node, or several nodes' trays): NVLink ports
  /// [port_src up, port_dst down] (the NVSwitches are non-blocking). GPU -> GPU across
  /// domains: [gpu pcie up, nic pcie down, nic-leaf up, fabric up..., fabric down..., nic-leaf
  /// down, nic pcie up, gpu pcie down] with D-mod-k fat-tree routing. CPU <-> GPU of one node:
  /// [switch uplink, gpu pcie]; with NVLink-C2C (Grace): [the socket's C2C link], shared by
  /// the socket's GPUs. Throws std::logic_error for other pairs (CPU <-> CPU, CPU <->
  /// GPU of another node, out-of-range ranks or nodes).
  const Route& route(Endpoint src, Endpoint dst);
  /// Registers an end point that needs a host even without routes (a rank's actors, a CPU host
  /// running optimizer steps). Throws std::logic_error when it is outside the cluster.
  void use(Endpoint e);

  /// Scenario `variability.slow_links`: the link named `name` (e.g. "n3-nic5-leaf",
  /// "n3-gpu5-nvlink") gets `factor` times its bandwidth when a route first uses it. Call
  /// before any route.
  void scale_link_bandwidth(const std::string& name, double factor) { link_scale_[name] = factor; }

  const std::vector<LinkSpec>& links() const { return links_; }
  /// End points on requested routes, in first-use order.
  const std::vector<Endpoint>& endpoints() const { return endpoints_; }
  /// Requested (src, dst) pairs with their routes, in first-request order.
  const std::vector<std::pair<std::pair<Endpoint, Endpoint>, const Route*>>& routes() const {
    return route_order_;
  }
  /// Host names used in SimGrid ("gpu12", "cpu1").
  static std::string host_name(Endpoint e);

  /// Number of compute cores the node's CPU host gets: one per GPU, so the CPU optimizer steps
  /// of the node's ranks (each timed by the cost model on the cores of one GPU) run side by
  /// side.
  int cpu_host_cores() const { return int(gpus_per_node_); }

  /// Fat-tree end point index of (node, nic): NICs of one rail and consecutive nodes share a
  /// leaf (rail-optimized), consecutive leaves (all rails of neighbouring nodes) share a pod.
  std::uint64_t fabric_endpoint(std::uint32_t node, std::uint32_t nic) const;
  int nic_of_gpu(int local_gpu) const;
  int pcie_switch_of_gpu(int local_gpu) const;

 private:
  std::uint32_t link(const std::string& name, double bw, double latency);
  void add_endpoint(Endpoint e);
  void check(Endpoint e) const;
  Route make_route(Endpoint src, Endpoint dst);
  void append_fabric(Route& r, std::uint64_t src_ep, std::uint64_t dst_ep);

  SystemSpec system_;
  std::int64_t nodes_ = 0;
  std::int64_t gpus_per_node_ = 0;
  std::int64_t domain_ranks_ = 0;
  double nvlink_bw_ = 0, pcie_bw_ = 0, uplink_bw_ = 0, net_bw_ = 0, c2c_bw_ = 0;
  // Fat tree as an XGFT(h; m_1..m_h; w_1..w_h) (Ohring et al.): a level-l switch has m_l
  // children and w_{l+1} parents. M_l = prod m_i, W_l = prod w_i (i <= l).
  int levels_ = 0;
  std::vector<std::uint64_t> M_, W_;  ///< index 0..h, M_[0] = W_[0] = 1

  std::vector<LinkSpec> links_;
  std::unordered_map<std::string, std::uint32_t> link_index_;
  std::map<std::string, double> link_scale_;  ///< scale_link_bandwidth
  std::vector<Endpoint> endpoints_;
  std::unordered_map<std::uint64_t, std::uint32_t> endpoint_index_;
  std::map<std::pair<std::uint64_t, std::uint64_t>, Route> routes_;
  std::vector<std::pair<std::pair<Endpoint, Endpoint>, const Route*>> route_order_;
};

/// The SimGrid side of a platform: one host per end point.
struct SimgridPlatform {
  std::unordered_map<std::uint64_t, simgrid::s4u::Host*> hosts;  ///< by Endpoint::key()
  simgrid::s4u::Host* host(Endpoint e) const;
};

/// Speed of every simulated host, in "flops" per second: amounts are durations in
/// nanoseconds (amount = duration_s * kHostSpeed), so an exec of the amount takes exactly
/// the duration on a free core.
constexpr double kHostSpeed = 1e9;

/// Builds the hosts, links and routes of `model` in one Full-routing zone (explicit routes for
/// the requested pairs only). Needs a live Engine made with engine_args().
SimgridPlatform build_simgrid_platform(const PlatformModel& model);

/// The scenario's slow links on `model` (PlatformModel::scale_link_bandwidth): a slow NIC is
/// its cable to the leaf switch (both directions), a slow NVLink its GPU's port to the
/// NVSwitches.
void apply_slow_links(PlatformModel& model, const VariabilityConfig& variability);

/// Command-line arguments for simgrid::s4u::Engine: CM02 with bandwidth/latency factors 1,
/// no TCP-gamma window limit, no cross traffic, small actor stacks, and SimGrid logging
/// silenced (threshold critical) unless `verbose`.
std::vector<std::string> engine_args(bool verbose);

}  // namespace trainsim::sim
