// The system layer: what one rank's communication task moves, to whom and how fast, as
// point-to-point flows between GPUs (ASTRA-sim's split of a system layer from its network
// backends). No SimGrid here: the executor (sim/executor.cpp) turns these flows into SimGrid
// activities on the links of sim/platform.h, and the tests check them without a simulator.
//
// A collective of n ranks (the ring order of its CommGroup; nccl-tests doc/PERFORMANCE.md):
//  - NCCL's algorithm and protocol for the size and group (CostModel::nccl_collective,
//    models/perf/nccl_model.h): its latency, the SM share of its kernel, the protocol's wire
//    format on the links (LL and LL128 carry flags with the data) and its bus bandwidth as the
//    flows' rate bound. All-to-all has no NCCL choice: CostModel::collective_latency_s.
//  - the ring: every rank sends ring_bytes_per_rank to its successor while its predecessor
//    sends as much to it. On several nodes with k > 1 members on each the ring is
//    hierarchical, as NCCL runs one ring channel per NIC (c channels, the fewest members of
//    any node; GroupLayout::rail_channels): (k-1)/k of the ring bytes go
//    round the node's ring over NVLink and, from members j < c, 1/c to member j of the next
//    node over the rank's own NIC (the rail; all nodes alike, c = k). All-to-all (NCCL's
//    point-to-point sends to every peer): (k-1)/n of the buffer to the node's peers over
//    NVLink, (n-k)/n over every member's own NIC, nodes alike or not (k the member's node's).
//  - NVLS / NVLS-Tree (NVLink SHARP): a rank moves its NVLS traffic (nccl_traffic) on NVLink
//    and on its NIC instead of the ring's, each flow paced to end when NCCL's algorithm
//    bandwidth would.
//  - the host transport of a multi-process CPU replay (CostModel::host_transport: the `local`
//    system with a profile's measured host_comm figures): no NCCL choice; the measured
//    latency, then one flow to the ring successor of the bytes the member writes and reads
//    (CostModel::host_transport_bytes_per_rank) over links at the measured rate.
//  - a folded graph simulates one rank of a set of identical replicas: its ring successor or
//    predecessor may not be simulated (folded_min_time_s).
// A group of one rank takes no time and moves nothing.
//
// "Node" below is the NVLink domain: the GPUs of one DGX node, or, where NVSwitch trays join
// several nodes (GB200 NVL72), the ranks of one multi-node domain (nvlink_domain_ranks); NCCL
// fuses such a domain's topology into one (MNNVL), so its rings and NVLS see one "node".
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <vector>

#include "models/graph/schedule_graph.h"
#include "models/hardware/hardware.h"
#include "models/input/scenario.h"
#include "models/perf/cost_model.h"

namespace trainsim {

/// Consecutive ranks that share one NVLink domain, the `gpus_per_node` the functions below
/// take. On a system whose domain is its node (every DGX): the scenario's GPUs per node. On a
/// domain across nodes (GB200 NVL72: 72 GPUs, 18 trays of 4), Megatron's rank order (TP
/// innermost, then CP; expert groups ETP x EP; megatron/core/parallel_state.py RankGenerator,
/// order "tp-cp-ep-dp-pp") keeps its TP x CP and ETP x EP blocks inside the domain when the job
/// fills each domain with whole blocks: the largest multiple of lcm(TP x CP, ETP x EP, GPUs per
/// node) that fits the domain (TP 8 x CP 2 = 16: 64 of 72 GPUs, the rack's other two trays
/// outside the job). A block larger than the domain spans gcd(block, domain) ranks per domain.
std::int64_t nvlink_domain_ranks(const Scenario& sc, const SystemSpec& system);

/// Where a group's ranks sit on nodes of `gpus_per_node` consecutive ranks (the platform's
/// layout, sim/platform.h).
struct GroupLayout {
  std::vector<std::uint32_t> nodes;          ///< the nodes the group spans, ascending
  std::vector<std::vector<RankId>> members;  ///< per node (as `nodes`), in group order
  std::size_t members_per_node = 0;          ///< k: the members of the first node
  bool uniform = true;                       ///< every node holds k members
  /// c: the fewest members any node holds. NCCL's rings cross nodes on c channels, one per
  /// member NIC: every node searches its own ring graph and the communicator keeps the
  /// smallest channel count of all ranks (NVIDIA/nccl src/init.cc, the graphs' nChannels =
  /// min over the allgathered graph info), so a node holding more members still has c rails.
  std::size_t rail_channels = 0;
  /// The ring is hierarchical: several nodes, k > 1 members on each, all alike (the layout
  /// DeepEP's and HybridEP's split assumes).
  bool hierarchical() const { return nodes.size() > 1 && members_per_node > 1 && uniform; }
  /// The ring of an all-reduce / reduce-scatter / all-gather, or NCCL's all-to-all, is split
  /// over NVLink and the NICs: several nodes, at least 2 members on each, alike or not (a
  /// 64-rank group split 36 + 28 over two 72-GPU NVLink domains: 28 rails, not one NIC
  /// carrying the whole ring; docs/validation.md GB200).
  bool rail_ring() const { return nodes.size() > 1 && rail_channels > 1; }
};
GroupLayout group_layout(const CommGroup& group, std::int64_t gpus_per_node);

/// One of a rank's flows: it sends `bytes` (on the wire) to `dst` while `pred` sends as many
/// to it, each no faster than `rate_bytes_per_s` (0: the links alone set the rate).
struct PeerFlow {
  RankId dst = 0;   ///< ring (or rail) successor
  RankId pred = 0;  ///< ring (or rail) predecessor
  std::uint64_t bytes = 0;
  double rate_bytes_per_s = 0;
};

/// One rank's part of a collective.
struct CollectiveFlows {
  bool zero_time = false;        ///< a group of one rank: no time, no flow
  std::optional<NcclChoice> nccl;  ///< NCCL's algorithm and protocol (none for all-to-all)
  double latency_s = 0;          ///< paid before the flows (launch + steps; includes the links')
  double sm_share = 0;           ///< CostModel::nccl_sm_share of the kernel; 0: none
  PeerFlow ring;                 ///< the ring: over NVLink when hierarchical
  bool has_rail = false;         ///< hierarchical: also a flow over the rank's NIC
  PeerFlow rail;                 ///< to the same-position member of the next node
};

/// The flows of `rank`'s part of collective `op` (op.kind, op.bytes) on `group`, which holds
/// `rank` (TRAINSIM_CHECK), on nodes of `gpus_per_node` GPUs.
CollectiveFlows collective_flows(const CostModel& cost, const OpDesc& op, const CommGroup& group,
                                 RankId rank, std::int64_t gpus_per_node);

/// DeepEP's normal (high-throughput) kernels, the flex dispatcher's backend
/// (deepseek-ai/DeepEP docs/legacy.md, V1): a token is sent once to each node that holds one of
/// its experts (RDMA, to the same-position GPU there) and forwarded once to each GPU of that node
/// holding one (NVLink); dispatch and combine are each one fused kernel, no separate permute.
/// The expected number of distinct `domains` (nodes, or ranks) one token's top-k experts fall
/// in, the experts spread evenly over the domains: uniform routing (Megatron-Core's
/// moe_router_force_load_balancing draws random logits), optionally group-limited (top-k from
/// group_topk of `groups` expert groups, DeepSeek-V3's node-limited routing) when the groups nest
/// in the domains or the domains in the groups; otherwise the group limit is not applied.
double deepep_expected_destinations(const DeepEpRouting& r, std::int64_t domains);
/// DeepEP's published bottleneck bandwidths (docs/legacy.md, normal kernels on H800 with one
/// CX7 400 Gb/s NIC per GPU, DeepSeek-V3 pretraining shape: 4096 tokens, hidden 7168, top-4
/// groups, top-8 experts): intranode EP 8 over NVLink 153 GB/s dispatch, 158 combine; internode
/// over RDMA 43 / 43 (EP 16, 2 nodes), 58 / 57 (EP 32, 4 nodes), 51 / 50 (EP 64, 8 nodes) GB/s
/// (1e9 bytes). Rates are of DeepEP's byte counts (tests/test_internode.py: RDMA bytes = tokens x
/// distinct nodes incl. the own x token bytes; NVLink bytes = the rows a rank receives). More
/// than 8 nodes: the EP 64 row.
double deepep_nvlink_bytes_per_s(bool combine);
double deepep_rdma_bytes_per_s(bool combine, std::int64_t nodes);
/// The normal kernels hold kDeepEpSms SMs while they run, which the compute beside them does
/// not get: Megatron-Core passes moe_deepep_num_sms to DeepEP's Buffer.set_num_sms (fused_a2a.py
/// set_deepep_num_sms), "historical default 20" (transformer_config.py, Megatron-LM d98e8a6
/// l. 969-971; Megatron-Bridge's skill nemo-mbridge-perf-moe-dispatcher-selection: "default
/// moe_deepep_num_sms (20)"). No shipped recipe sets it.
inline constexpr int kDeepEpSms = 20;

/// HybridEP (deepseek-ai/DeepEP branch hybrid-ep; Megatron-Core --moe-flex-dispatcher-backend
/// hybridep): NVIDIA's dispatch / combine kernels, TMA copies over NVLink (NVL72's multi-node
/// NVLink included) and RDMA between NVLink domains. A token goes once to each domain and once
/// to each GPU holding one of its experts (its tests count the bytes as DeepEP's), so the flows
/// are DeepEP's (deepep_expected_destinations) at HybridEP's published rates:
///  - hybridep_nvlink_bytes_per_s: the GB200 NVL72 measurements for `domain_ranks` ranks in one
///    NVLink domain (8..36; above 36 the 36-rank figure, carried over), scaled by the system's
///    NVLink bandwidth per GPU over NVLink 5's 900 GB/s (a derived rate off NVLink 5);
///  - hybridep_rdma_bytes_per_s: the H100 measurements between 2, 4 and 8 nodes.
/// The kernels hold kHybridEpSms SMs while they run (Megatron-Core --moe-hybridep-num-sms,
/// default 16; the published rates are at 16 SMs). The forward dispatch's host wait for the
/// received-token count is DeepEP's too (Megatron-Core fused_a2a.py HybridEPDispatch: dropless,
/// use_host_meta puts the counts in pinned host memory; hybrid_ep_buffer.py reads them).
double hybridep_nvlink_bytes_per_s(bool combine, std::int64_t domain_ranks,
                                   double nvlink_bw_bytes_per_s);
double hybridep_rdma_bytes_per_s(bool combine, std::int64_t nodes);
inline constexpr int kHybridEpSms = 16;

/// The rate bound of a folded rank's flows: a flow to or from a rank that is not simulated
/// (`simulated` false) is a flow between two hosts, which SimGrid does not bound (only mailbox
/// comms take Comm::set_rate), so the collective ends no earlier than the slowest such flow
/// would at its rate: max over them of bytes / rate; 0 when there is none.
double folded_min_time_s(const CollectiveFlows& flows,
                         const std::function<bool(RankId)>& simulated);

/// A point-to-point message from `src` to `dst` (NCCL send/recv): launch latency + one step
/// (CostModel::collective_latency_s(SendRecv), whose per-step figure includes the links').
/// Under the host transport (CostModel::host_transport) of a message of `bytes`: the measured
/// host_comm_latency_s plus the receiver's read of the sender's file, bytes /
/// host_comm_bw_bytes_per_s (the message's flow over the links carries the sender's write).
double message_latency_s(const CostModel& cost, RankId src, RankId dst,
                         std::int64_t gpus_per_node, double bytes = 0);

}  // namespace trainsim
