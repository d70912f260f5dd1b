#include "models/system/collective_flows.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <numeric>
#include <string>

#include "models/errors.h"

namespace trainsim {
namespace {

std::uint32_t node_of(RankId r, std::int64_t gpus_per_node) {
  return std::uint32_t(r / std::uint64_t(gpus_per_node));
}

std::uint64_t round_bytes(double bytes) { return std::uint64_t(std::llround(bytes)); }

/// The all-to-all's NIC flow of member j of node ni (split_rail): the group's members listed
/// node by node (L, n of them), the flow goes to L[p + s] and comes from L[p - s] (mod n), p
/// this member's place in L and s the most members any node holds: a permutation, as the
/// simulator's flows pair one sender with one receiver. Nodes alike (s = k), that is member j
/// of the next node, off-node for every member. Unlike (a 64-rank group split 36 + 28 over two
/// NVLink domains), the members of the smaller nodes all send off their node, so the busiest
/// NIC, (n - k_min)/n of the buffer out, is timed as NCCL's point-to-point sends load it; a
/// member of a node holding more than n - s of the others may land on its own node (its flow
/// then takes NVLink, carrying (n - k)/n, below the busiest NIC's). Every member's (n-k)/n
/// leaves over its own NIC (rail-optimized; the fat tree at full bisection).
void rail_across_nodes(PeerFlow& rail, const GroupLayout& layout, std::size_t ni,
                       std::size_t j) {
  std::size_t n = 0, p = 0, s = 0;
  for (std::size_t i = 0; i < layout.members.size(); ++i) {
    if (i == ni) p = n + j;
    n += layout.members[i].size();
    s = std::max(s, layout.members[i].size());
  }
  auto at = [&](std::size_t q) -> RankId {
    for (const auto& members : layout.members) {
      if (q < members.size()) return members[q];
      q -= members.size();
    }
    TRAINSIM_CHECK(false, "all-to-all rail index " + std::to_string(q) + " past the group");
    return 0;
  };
  rail.dst = at((p + s) % n);
  rail.pred = at((p + n - s % n) % n);
}

/// How split_rail divided a rank's ring: `on` when hierarchical, k the members of the rank's
/// node, c the channels that cross nodes (layout.rail_channels).
struct RailSplit {
  bool on = false;
  double k = 1;
  double c = 1;
};

/// The hierarchical ring (several nodes, at least 2 members on each; layout.rail_ring): (k-1)/k
/// of the ring bytes round the node's ring of k members over NVLink; across nodes the ring runs
/// c = rail_channels channels (NCCL's multi-channel rings, one per NIC; nccl-tests
/// PERFORMANCE.md bus bandwidth), each entering and leaving a node through its own member's
/// NIC: member j < c sends 1/c of the ring bytes over its NIC to member j of the next node,
/// members j >= c send none. All alike (k = c) this is 1/k over every member's NIC.
/// All-to-all (NCCL: grouped ncclSend / ncclRecv to every peer, NVIDIA/nccl docs usage/p2p.rst,
/// nccl-tests src/alltoall.cu): a member of a node of k sends (k-1)/n of its buffer to its node's
/// peers over NVLink and (n-k)/n to the other nodes' over its own NIC, every member, the nodes
/// alike or not (rail_across_nodes). DeepEP's and HybridEP's exchanges split uniform layouts
/// only (layout.hierarchical).
RailSplit split_rail(CollectiveFlows& f, const GroupLayout& layout, const OpDesc& op,
                     double ring_bytes, std::int64_t size, RankId rank,
                     std::int64_t gpus_per_node) {
  const std::size_t ni = std::size_t(
      std::find(layout.nodes.begin(), layout.nodes.end(), node_of(rank, gpus_per_node)) -
      layout.nodes.begin());
  const auto& local = layout.members[ni];
  const std::size_t k = local.size(), c = layout.rail_channels;
  const std::size_t j = std::size_t(std::find(local.begin(), local.end(), rank) - local.begin());
  f.ring.dst = local[(j + 1) % k];
  f.ring.pred = local[(j + k - 1) % k];
  f.ring.bytes = round_bytes(ring_bytes * double(k - 1) / double(k));
  const RailSplit split{true, double(k), double(c)};
  if (op.kind == OpKind::AllToAll) {
    f.ring.bytes = round_bytes(double(op.bytes) * double(k - 1) / double(size));
    f.has_rail = true;
    f.rail.bytes = round_bytes(double(op.bytes) * double(size - std::int64_t(k)) / double(size));
    rail_across_nodes(f.rail, layout, ni, j);
    return split;
  }
  if (j >= c) return split;  // no channel leaves the node through this member's NIC
  const std::size_t nn = layout.nodes.size();
  f.has_rail = true;
  f.rail.dst = layout.members[(ni + 1) % nn][j];
  f.rail.pred = layout.members[(ni + nn - 1) % nn][j];
  f.rail.bytes = round_bytes(ring_bytes / double(c));
  return split;
}

/// NCCL's algorithm and protocol for this size and group (models/perf/nccl_model.h): its
/// latency, and the protocol's wire format on the links (LL and LL128 carry flags with the
/// data). A tree all-reduce moves as many bytes per NIC as the ring (2S per node, up and down
/// the two binary trees), so the ring's flows carry it too.
void apply_nccl(CollectiveFlows& f, const CostModel& cost, const OpDesc& op,
                const GroupLayout& layout, double ring_bytes, std::int64_t size,
                const RailSplit& split) {
  const NcclChoice nccl = cost.nccl_collective(op.kind, double(op.bytes), size,
                                               std::int64_t(layout.nodes.size()));
  f.nccl = nccl;
  f.latency_s = nccl.latency_s;
  f.sm_share = cost.nccl_sm_share(nccl);
  // No faster than NCCL's bus bandwidth for the pair: the ring bytes of this rank in
  // ring_bytes / bus seconds, the ring and the rail flows each carrying their share.
  const double wire_rate = nccl.bus_bw_bytes_per_s * nccl.wire_factor;
  const double share = split.on ? (split.k - 1) / split.k : 1.0;
  f.ring.rate_bytes_per_s = wire_rate * share;
  if (f.has_rail) f.rail.rate_bytes_per_s = wire_rate / split.c;
  f.ring.bytes = round_bytes(double(f.ring.bytes) * nccl.wire_factor);
  f.rail.bytes = round_bytes(double(f.rail.bytes) * nccl.wire_factor);
  if (!is_nvls(nccl.algo)) return;
  // NVLink SHARP: the switch reduces and multicasts, so a rank moves its NVLS traffic
  // (nccl_traffic), not the ring's; each flow paced to end when NCCL's algorithm bandwidth
  // would (the ring bytes at its bus bandwidth).
  const NcclTraffic tr = nccl_traffic(nccl, op.kind, double(op.bytes), size,
                                      std::int64_t(layout.nodes.size()));
  const double bw_s = ring_bytes / nccl.bus_bw_bytes_per_s;
  const double nvlink_bytes = split.on ? tr.nvlink_bytes : tr.nvlink_bytes + tr.nic_bytes;
  f.ring.bytes = round_bytes(nvlink_bytes);
  f.ring.rate_bytes_per_s = nvlink_bytes / bw_s;
  if (f.has_rail) {
    f.rail.bytes = round_bytes(tr.nic_bytes);
    f.rail.rate_bytes_per_s = tr.nic_bytes / bw_s;
  }
}

/// C(a, k) / C(b, k) for a <= b: the chance that k draws without replacement from b items all
/// miss b - a given ones.
double choose_ratio(double a, double b, std::int64_t k) {
  if (a < double(k)) return 0.0;
  double r = 1.0;
  for (std::int64_t i = 0; i < k; ++i) r *= (a - double(i)) / (b - double(i));
  return r;
}

/// DeepEP's flows (deepep_flows in collective_flows.h): the NVLink flow carries the rows this
/// rank receives, bar its own, paced to end when DeepEP's NVLink rate moves all of them; over
/// several nodes the NIC flow carries the copies to the other nodes, paced to end when DeepEP's
/// RDMA rate moves its count (every destination node, its own included).
/// HybridEP (hybridep_* in collective_flows.h) counts its bytes as DeepEP does and moves them
/// the same two ways; its rates and its SMs (held for the kernel's length, as DeepEP's) are its
/// own.
void deepep_flows(CollectiveFlows& f, const CostModel& cost, const OpDesc& op,
                  const GroupLayout& layout, std::int64_t size) {
  const DeepEpRouting& r = op.deepep;
  const auto nodes = std::int64_t(layout.nodes.size());
  const double k = double(layout.members_per_node);
  const double nvl_count = r.tokens * deepep_expected_destinations(r, size) * r.token_bytes;
  const double own_nvl = nodes > 1 ? (k - 1) / k : double(size - 1) / double(size);
  const std::int64_t domain_ranks = nodes > 1 ? std::int64_t(layout.members_per_node) : size;
  const double nvl_rate =
      r.hybrid_ep ? hybridep_nvlink_bytes_per_s(r.combine, domain_ranks,
                                                cost.system().gpu.nvlink_bw_bytes_per_s)
                  : deepep_nvlink_bytes_per_s(r.combine);
  f.ring.bytes = round_bytes(nvl_count * own_nvl);
  f.ring.rate_bytes_per_s = nvl_rate * own_nvl;
  f.latency_s = cost.collective_latency_s(op.kind, size, nodes == 1);
  if (cost.profile().sm_count > 0)
    f.sm_share =
        std::min(1.0, double(r.hybrid_ep ? kHybridEpSms : kDeepEpSms) / cost.profile().sm_count);
  if (nodes == 1) return;
  const double rdma_count = r.tokens * deepep_expected_destinations(r, nodes) * r.token_bytes;
  const double remote = double(nodes - 1) / double(nodes);  // every node alike
  PeerFlow& nic = f.has_rail ? f.rail : f.ring;  // one member per node: the ring crosses nodes
  nic.bytes = round_bytes(rdma_count * remote);
  const double rdma_rate = r.hybrid_ep ? hybridep_rdma_bytes_per_s(r.combine, nodes)
                                       : deepep_rdma_bytes_per_s(r.combine, nodes);
  nic.rate_bytes_per_s = rdma_rate * remote;
}

}  // namespace

double deepep_expected_destinations(const DeepEpRouting& r, std::int64_t domains) {
  const double e = double(r.experts), d = double(domains);
  const std::int64_t k = r.topk;
  if (domains <= 1) return 1.0;
  const std::int64_t g = r.groups, chosen = r.group_topk;
  if (g > 0 && chosen > 0 && g % domains == 0) {  // groups nest in domains: q per domain
    const std::int64_t q = g / domains;
    const double pool = double(chosen) * e / double(g), group = e / double(g);
    double hit = 0;
    for (std::int64_t j = 1; j <= std::min(q, chosen); ++j) {
      // P(j of the domain's q groups among the chosen): hypergeometric.
      double pj = 1.0;
      for (std::int64_t i = 0; i < j; ++i) pj *= double(q - i) / double(i + 1);
      double rest = 1.0;  // C(g - q, chosen - j) / C(g, chosen)
      for (std::int64_t i = 0; i < chosen - j; ++i) rest *= double(g - q - i) / double(i + 1);
      double all = 1.0;
      for (std::int64_t i = 0; i < chosen; ++i) all *= double(g - i) / double(i + 1);
      pj *= rest / all;
      hit += pj * (1.0 - choose_ratio(pool - double(j) * group, pool, k));
    }
    return d * hit;
  }
  if (g > 0 && chosen > 0 && domains % g == 0) {  // domains nest in groups
    const double pool = double(chosen) * e / double(g);
    return d * double(chosen) / double(g) * (1.0 - choose_ratio(pool - e / d, pool, k));
  }
  return d * (1.0 - choose_ratio(e - e / d, e, k));
}

double deepep_nvlink_bytes_per_s(bool combine) { return combine ? 158e9 : 153e9; }

double deepep_rdma_bytes_per_s(bool combine, std::int64_t nodes) {
  if (nodes <= 2) return 43e9;
  if (nodes <= 4) return combine ? 57e9 : 58e9;
  return combine ? 50e9 : 51e9;
}

double hybridep_nvlink_bytes_per_s(bool combine, std::int64_t domain_ranks,
                                   double nvlink_bw_bytes_per_s) {
  // deepseek-ai/DeepEP branch hybrid-ep, docs/README_Hybrid-EP.md (first published 2025-09-25
  // as Hybrid-EP_Intra-node_Implementation.md, commit 6ad6896), "GB200 Platform": HybridEP's
  // torch-API algorithm bandwidth (tests/test_hybrid_ep.py: the rows a rank receives, bf16,
  // over the dispatch() / combine() call's time) at 16 SMs, 4096 tokens of hidden 7168 per
  // rank, top-8 uniform routing over 8 local experts per rank, all ranks in one NVL72 domain.
  struct Row {
    std::int64_t ranks;
    double dispatch, combine;  // GB/s (1e9 bytes)
  };
  static constexpr Row kGb200[] = {{8, 550.10, 538.44},
                                   {16, 472.84, 474.48},
                                   {24, 441.89, 444.40},
                                   {32, 485.50, 423.19},
                                   {36, 469.96, 418.27}};
  // The first row of at least `domain_ranks` ranks; beyond 36 (the largest measured) the
  // 36-rank row is carried over (its 24 -> 36 figures are flat within 6%): not measured.
  const Row* row = &kGb200[4];
  for (const Row& r : kGb200)
    if (r.ranks >= domain_ranks) {
      row = &r;
      break;
    }
  // Another NVLink: the GB200 fraction of NVLink 5's 900 GB/s per GPU and direction applied
  // to the system's. The same README's B200 row (NVLink 5, 8 ranks, 16 SMs: 535.94 / 530.86
  // GB/s) is within 3% of GB200's; on NVLink 4 (H100, 450 GB/s) the rate is derived, not
  // measured (docs/scenario.md moe_flex_dispatcher_backend).
  constexpr double kGb200NvlinkBytesPerS = 900e9;
  const double scale = nvlink_bw_bytes_per_s > 0 ? nvlink_bw_bytes_per_s / kGb200NvlinkBytesPerS
                                                 : 1.0;
  return (combine ? row->combine : row->dispatch) * 1e9 * scale;
}

double hybridep_rdma_bytes_per_s(bool combine, std::int64_t nodes) {
  // deepseek-ai/DeepEP branch hybrid-ep, docs/README_Hybrid-EP.md "H100 Platform" (published
  // 2026-02-09, commit 7febc6e): the torch-API IB algorithm bandwidth at 16 SMs, 8 GPUs per
  // node with one 400 Gb/s NIC each, 4096 tokens of hidden 7168, top-8 uniform over 8 local
  // experts; bytes as DeepEP's (tests/utils.py count_rdma_send_from_routing_map: tokens x
  // distinct nodes, the own included). 16 ranks (2 nodes) 54.47 / 53.35, 32 (4) 47.36 /
  // 52.53, 64 (8) 41.24 / 46.57 GB/s dispatch / combine; more than 8 nodes: the 8-node row.
  if (nodes <= 2) return combine ? 53.35e9 : 54.47e9;
  if (nodes <= 4) return combine ? 52.53e9 : 47.36e9;
  return combine ? 46.57e9 : 41.24e9;
}

std::int64_t nvlink_domain_ranks(const Scenario& sc, const SystemSpec& system) {
  const std::int64_t gpn =
      sc.cluster.gpus_per_node > 0 ? sc.cluster.gpus_per_node : system.gpus_per_node;
  const std::int64_t domain = system.domain_gpus();
  if (domain <= system.gpus_per_node) return gpn;  // the node is the domain (every DGX)
  const ParallelConfig& p = sc.parallel;
  const std::int64_t etp =
      p.expert_tensor_parallel_size > 0 ? p.expert_tensor_parallel_size : p.tensor_model_parallel_size;
  const std::int64_t dense = std::max<std::int64_t>(1, p.tensor_model_parallel_size * p.context_parallel_size);
  const std::int64_t expert = std::max<std::int64_t>(1, etp * p.expert_model_parallel_size);
  const std::int64_t block = std::lcm(std::lcm(dense, expert), gpn);
  if (block <= domain) return domain / block * block;
  return std::gcd(block, domain);
}

GroupLayout group_layout(const CommGroup& group, std::int64_t gpus_per_node) {
  TRAINSIM_CHECK(gpus_per_node > 0, "gpus_per_node " + std::to_string(gpus_per_node));
  std::map<std::uint32_t, std::vector<RankId>> by_node;
  for (RankId r : group.ranks) by_node[node_of(r, gpus_per_node)].push_back(r);
  GroupLayout out;
  for (auto& [node, members] : by_node) {
    out.nodes.push_back(node);
    out.members.push_back(std::move(members));
  }
  if (out.members.empty()) return out;
  out.members_per_node = out.members.front().size();
  out.rail_channels = out.members_per_node;
  for (const auto& members : out.members) {
    out.uniform = out.uniform && members.size() == out.members_per_node;
    out.rail_channels = std::min(out.rail_channels, members.size());
  }
  return out;
}

CollectiveFlows collective_flows(const CostModel& cost, const OpDesc& op, const CommGroup& group,
                                 RankId rank, std::int64_t gpus_per_node) {
  CollectiveFlows f;
  const auto pos = std::find(group.ranks.begin(), group.ranks.end(), rank);
  TRAINSIM_CHECK(pos != group.ranks.end(),
                 "rank " + std::to_string(rank) + " is not in its collective's group");
  const std::int64_t size = std::int64_t(group.ranks.size());
  if (size == 1) {
    f.zero_time = true;
    return f;
  }
  // The ring over the group's order (nccl-tests doc/PERFORMANCE.md): every rank sends
  // ring_bytes_per_rank to its successor.
  const std::size_t i = std::size_t(pos - group.ranks.begin());
  const std::size_t n = group.ranks.size();
  f.ring.dst = group.ranks[(i + 1) % n];
  f.ring.pred = group.ranks[(i + n - 1) % n];
  if (cost.host_transport()) {
    // A multi-process CPU replay's host transport (CostModel::host_transport): one exchange,
    // its measured latency, then the bytes the member writes and reads at the measured rate
    // (the links between local ranks, local_system); no NCCL choice, no SMs held.
    f.latency_s = cost.profile().local_device.host_comm_latency_s;
    f.ring.bytes =
        round_bytes(CostModel::host_transport_bytes_per_rank(op.kind, double(op.bytes), size));
    return f;
  }
  const double ring_bytes = CostModel::ring_bytes_per_rank(op.kind, double(op.bytes), size);
  f.ring.bytes = round_bytes(ring_bytes);
  const GroupLayout layout = group_layout(group, gpus_per_node);
  RailSplit split;
  // All-to-all: NCCL's point-to-point sends over each member's own NIC, nodes alike or not
  // (split_rail); DeepEP's and HybridEP's byte model takes the nodes alike (deepep_flows).
  const bool deepep = op.kind == OpKind::AllToAll && op.deepep.tokens > 0;
  if (deepep ? layout.hierarchical() : layout.rail_ring())
    split = split_rail(f, layout, op, ring_bytes, size, rank, gpus_per_node);
  if (deepep) {
    deepep_flows(f, cost, op, layout, size);
    return f;
  }
  if (op.kind == OpKind::AllToAll) {
    // NCCL all-to-all: grouped send/recv to every peer, no algorithm choice.
    f.latency_s = cost.collective_latency_s(op.kind, size, layout.nodes.size() == 1);
    return f;
  }
  apply_nccl(f, cost, op, layout, ring_bytes, size, split);
  return f;
}

double folded_min_time_s(const CollectiveFlows& flows,
                         const std::function<bool(RankId)>& simulated) {
  auto folded = [&](const PeerFlow& p) { return !simulated(p.dst) || !simulated(p.pred); };
  double paced_s = 0;
  if (flows.zero_time) return paced_s;
  if (flows.ring.rate_bytes_per_s > 0 && folded(flows.ring))
    paced_s = double(flows.ring.bytes) / flows.ring.rate_bytes_per_s;
  if (flows.has_rail && flows.rail.rate_bytes_per_s > 0 && folded(flows.rail))
    paced_s = std::max(paced_s, double(flows.rail.bytes) / flows.rail.rate_bytes_per_s);
  return paced_s;
}

double message_latency_s(const CostModel& cost, RankId src, RankId dst,
                         std::int64_t gpus_per_node, double bytes) {
  if (cost.host_transport()) {
    // The host transport: one exchange's latency, and the receiver's read of the file the
    // sender wrote (the flow carries the write): host_transport_bytes_per_rank(SendRecv) = 2 S.
    const auto& d = cost.profile().local_device;
    return d.host_comm_latency_s +
           (CostModel::host_transport_bytes_per_rank(OpKind::SendRecv, bytes, 2) - bytes) /
               d.host_comm_bw_bytes_per_s;
  }
  return cost.collective_latency_s(OpKind::SendRecv, 2,
                                   node_of(src, gpus_per_node) == node_of(dst, gpus_per_node));
}

}  // namespace trainsim
