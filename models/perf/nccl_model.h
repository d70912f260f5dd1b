// NCCL's own choice of algorithm and protocol for a collective, its latency and its rate,
// following NCCL's tuning model (NVIDIA/nccl src/graph/tuning.cc ncclTopoTuneModel and
// ncclTopoGetAlgoTime, at the release the scenario names: v2.18.5-1 or v2.29.7-1): for each
// (algorithm, protocol) NCCL predicts
//     time = latency + bytes / algorithm bandwidth
// and runs the cheapest. trainsim asks the same question with the same latency table and the
// same bandwidth refinements, over the bandwidths of the simulated links, so that small
// messages use LL / LL128 and multi-node all-reduces the tree where NCCL would; the
// simulator then moves the bytes over its links (flows of models/system/collective_flows.h)
// in the chosen protocol's wire format, each flow no faster than the pair's bus bandwidth in
// NCCL's model (LL's llMaxBws cap and its share of the link, the tree's 0.92 and size
// correction): NVIDIA's figures for what its kernels reach, so a link shared with other
// traffic can still slow a collective below them, but an idle one never lifts it above.
//
// The two releases differ, for what is modelled here, in: the ring LL bandwidth (v2.18.5:
// 1/4 of the bus bandwidth for all-reduce or across nodes, 1/3 otherwise; v2.29.7: 1/2);
// Hopper's LL caps (v2.18.5 Ampere's 87.7 / 22.5 / 19.0 GB/s; v2.29.7 141 / 45 / 35);
// LL128 on one rank per node (v2.18.5 0.7 of the bus bandwidth, v2.29.7 0.92); the tree's
// Simple base latency (0 and 8.4 us); the inter-node steps of a ring all-reduce (2 x nodes
// and 2 x (nodes - 1)); NVLS's bandwidth formulas and latencies (nvls_time_s in
// nccl_model.cpp), and NVLS for all-gather / reduce-scatter (v2.29.7 only).
//
// Blackwell (compute capability 100, NVLink 5 / fifth-generation NVSwitch, DGX B200) under
// v2.29.7 takes that release's Blackwell rows: llMaxBws on one node 2 x 141 GB/s, NVLS at
// nvlsEfficiency 0.74 (Hopper 0.85) over the sm100 speed arrays (intra 90, 80, 70 ... GB/s
// per channel) and SM100_NVLINK_BW 40.1 GB/s per link, perChMaxNVLSTreeBws 96 / 43.8 GB/s,
// and 24 NVLS channels in one node, 32 across nodes; an NVLS-Tree all-reduce on an x86 host
// takes the tree's size correction below 1 GiB (ncclTopoGetAlgoTime, tuning.cc:596; not on
// Grace). Its latency tables are Hopper's (one table for every generation).
//
// Multi-node NVLink (MNNVL, GB200 NVL72; v2.29.7): NCCL fuses the topologies of the GPUs of one
// NVLink domain (its "clique") into one system (src/graph/topo.cc:1543-1576) and counts the
// domain as one node (src/init.cc:1174-1188: nodes are the rings' distinct first ranks), so a
// communicator inside the domain runs the single-node NVLS of up to NCCL_MAX_NVLS_ARITY 32 heads
// and NVLS_NCHANNELS_SM100_NVL 24 CTAs (transport/nvls.cc:178-190: multiNode only when the
// clique is smaller than the communicator), and one spanning domains NVLS-Tree between them.
// trainsim's `nodes` is the number of NVLink domains (models/system/collective_flows.h).
//
// Modelled: algorithms Ring (every collective), Tree (all-reduce across nodes), and on an
// NVSwitch with NVLink SHARP multicast (DGX H100) NVLS (inside one node: all-reduce, and in
// v2.29.7 also all-gather / reduce-scatter) and NVLS-Tree (all-reduce across nodes); protocols
// LL, LL128, Simple (LL128 on, as NCCL enables it on NVLink-connected x86 DGX nodes with the
// NIC behind the GPU's PCIe switch; NVLS and NVLS-Tree run Simple only). NVLS's channel count
// and per-channel bandwidths come from NCCL's topology search in closed form (nvls_graph()
// in nccl_model.cpp). NCCL's model rates a loop by its bandwidth; an NVLS / NVLS-Tree
// all-reduce also fills and drains its loop's store-and-forward pipeline, which the run pays
// and NCCL's choice does not see (nvls_all_reduce_fill_s, added by CostModel::nccl_collective
// at the simulated links' rates). Not modelled: CollNet (in-network reduction over the IB fabric), PAT;
// the per-channel bandwidth caps of Ring/Tree (they need the channel count of NCCL's ring
// search) and NCCL's aggregation of several operations into one launch. The ring "plateau"
// factor (Simple all-reduce across nodes: latency x 1.4 on Ampere and later, x 1.9 before,
// once bytes / (channels x ranks) >= 64) is modelled with the channel count at its maximum
// (MAXCHANNELS: 32 in v2.18.5, 64 in v2.29.7), so it starts at the largest size NCCL could
// start it.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "models/graph/ops.h"
#include "models/nccl_version.h"

namespace trainsim {

enum class NcclAlgo { Ring, Tree, Nvls, NvlsTree };
/// NVLS or NVLS-Tree: the algorithms that reduce and multicast in the NVSwitch.
inline bool is_nvls(NcclAlgo a) { return a == NcclAlgo::Nvls || a == NcclAlgo::NvlsTree; }
enum class NcclProto { LL, LL128, Simple };
const char* to_string(NcclAlgo a);
const char* to_string(NcclProto p);

/// What the tuning model needs to know about the group and its hardware.
struct NcclGroup {
  OpKind kind = OpKind::AllReduce;  ///< AllReduce, ReduceScatter or AllGather
  NcclVersion version = kDefaultNcclVersion;
  std::int64_t ranks = 1;
  std::int64_t nodes = 1;
  /// GPU generation (compute capability x 10: 80 Ampere, 90 Hopper) and host CPU vendor: they
  /// select NCCL's per-generation constants and the network post overhead.
  int compute_capability = 80;
  bool amd_cpu = false;
  /// Host CPU not x86 (Arm: Grace). v2.29.7 applies its tree size correction to NVLS-Tree on
  /// Blackwell only on x86 hosts (tuning.cc:596, cpuArch == NCCL_TOPO_CPU_ARCH_X86).
  bool arm_cpu = false;
  /// Bus bandwidth of a Simple ring over this group in bytes/s: the GPU's achieved NVLink
  /// bandwidth inside a node, the smaller of it and the GPU's NIC path across nodes.
  double bus_bw_bytes_per_s = 0;
  /// Ring/Simple latencies from the calibration profile (NCCL's table by default): base
  /// latency, NVLink and network per-step latencies. The other entries are NCCL's table.
  double simple_base_latency_s = 0;
  double simple_nvlink_step_s = 0;
  double simple_net_step_s = 0;
  /// NCCL's network post overhead (getNetOverhead: 1 us on Intel hosts, 2 us on AMD), the
  /// floor of every intra-node step of a ring that spans nodes (x3 for Simple).
  double net_overhead_s = 0;
  /// NCCL's graphs[]->latencyInter: a per-message latency of the network added to every
  /// network step's table latency (tuning.cc interLat; twice for Simple, "the flush extra
  /// latency"). 0 on InfiniBand; a RoCE fabric's message latency
  /// (SystemSpec::fabric_message_latency_s).
  double net_latency_inter_s = 0;
  /// The communicator's channels (SystemSpec::nccl_channels); 0: not known.
  int channels = 0;
  /// NVLS is available: an NVSwitch with NVLink SHARP multicast (NCCL's
  /// CU_DEVICE_ATTRIBUTE_MULTICAST_SUPPORTED, SystemSpec::nvlink_sharp), compute capability
  /// >= 90, and NCCL_NVLS_ENABLE not 0 (scenario key `nccl_nvls_enable`).
  bool nvls = false;
  /// The GPU's NVLink bandwidth to the NVSwitch in NCCL's topology, GB/s per direction: links x
  /// SM90_NVLINK_BW 20.6 (src/graph/topo.h), 370.8 on H100; x SM100_NVLINK_BW 40.1 on
  /// Blackwell (v2.29.7), 721.8 on B200; and the NIC's (port speed / 8:
  /// 50 for NDR 400 Gb/s). NVLS's search works on these nominal figures, as NCCL's does.
  double topo_nvlink_bw_gbs = 0;
  double topo_nic_bw_gbs = 0;
  /// NICs of one NCCL node (NVLink domain) that can head an NVLS-Tree channel: those with a
  /// GPU of their own (NCCL's net.localGpu; a NIC shared by two GPUs heads one channel, a GPU
  /// heads one channel only: search.cc ncclTopoSearchRecNet). 0: one per GPU.
  std::int64_t nic_heads_per_node = 0;
};

/// NCCL's NVLS graph for a group of `ppn` GPUs per node (src/graph/search.cc,
/// ncclTopoCompute with NCCL_TOPO_PATTERN_NVLS), in closed form: one channel per head GPU,
/// min(ppn, NCCL_MAX_NVLS_ARITY 32) heads in v2.29.7 (so 32 of a 72-GPU NVLink domain, which
/// NCCL's MNNVL support sees as one node), across nodes also at most one per NIC with a GPU of
/// its own (nic_heads_per_node); the speed of the release's array at which the heads' NVLink
/// ((channels + 1) x speed) and, across nodes, the NIC fit them; then v2.29.7's second pass
/// raises bwInter alone towards 2 x bwIntra (nvls_graph in nccl_model.cpp cites the lines).
struct NvlsGraph {
  int channels = 0;
  double bw_intra_gbs = 0;  ///< graphs[NVLS]->bwIntra
  double bw_inter_gbs = 0;  ///< graphs[NVLS]->bwInter (multi-node: the NIC side)
};
NvlsGraph nvls_graph(const NcclGroup& g);
/// NCCL's latency of one NVLS round inside a node in the release's table: v2.18.5 baseLat
/// 23 us, v2.29.7 hwLatencies[NVLINK][NVLS] 25 us.
double nccl_nvls_table_latency_s(NcclVersion v);
/// GPU memory NCCL allocates for NVLS on a communicator with `local_ranks` GPUs in the node
/// (src/transport/nvls.cc): nvlsTotalSize = nChannels x 2 x buffSize x nHeads, with the NVLS
/// channels of the GPU (SM90: 16; Blackwell under v2.29.7: 24 inside one node, 32 for a
/// communicator spanning nodes) and one head per local GPU, at most NCCL_MAX_NVLS_ARITY (32)
/// in v2.29.7 (nvls.cc nHeads: the NVLS graph's channels; 32 on a 72-GPU NVLink domain). buffSize: v2.29.7 nvlsChunkSize
/// 128 KiB x NCCL_STEPS 8 (ncclNvlsBufferSetup); v2.18.5 the Simple protocol buffer 4 MiB +
/// NVLS_MEM_ALIGN_SIZE 2 MiB (ncclNvlsSetup).
std::int64_t nccl_nvls_buffer_bytes(NcclVersion v, std::int64_t local_ranks,
                                    int compute_capability = 90, bool multi_node = false);

/// The loop an NVLS or NVLS-Tree all-reduce runs (src/device/all_reduce.h, RunWorkColl for
/// NCCL_ALGO_NVLS / NCCL_ALGO_NVLS_TREE): each of the NVLS channels takes `heads` chunks of the
/// buffer per iteration, one for each head GPU, and moves them through store-and-forward
/// stages, each warp group a stage (scatter to the heads, the heads' multimem reduce, on
/// NVLS-Tree the network up and down the tree, the multicast, the gather). The chunk size is
/// enqueue.cc's for the algorithm and release (computeColl / ncclCollPreconnect's chunk rules):
///   NVLS: min(Simple step 512 KiB, 128 KiB: v2.18.5 maxChunkSize, v2.29.7 nvlsChunkSize), then
///     64 KiB below 64 x, 32 KiB below 8 x, 16 KiB below 2 x (channels x heads x chunk);
///   NVLS-Tree: v2.18.5 the Simple step (4 MiB buffer / NCCL_STEPS 8 = 512 KiB); v2.29.7
///     nvlsChunkSize 128 KiB, 64 KiB from 4 nodes on (NCCL_NVLSTREE_MAX_CHUNKSIZE's default);
///     then 256 KiB below 32 x, 128 KiB below 16 x, 64 KiB below 4 x, 32 KiB below 1 x.
/// heads = 0 when the group runs no NVLS (nvls_graph() finds no channel).
struct NvlsLoop {
  double chunk_bytes = 0;       ///< per head and channel
  std::int64_t heads = 0;       ///< channels[0].nvls.nHeads: nvls_graph().channels
  int channels = 0;             ///< nvlsChannels: NVLS_NCHANNELS_SM90, 16
  /// The buffer one iteration covers: channels x heads x chunk, at most the buffer.
  double iteration_bytes = 0;
  std::int64_t iterations = 0;  ///< ceil(bytes / (channels x heads x chunk))
};
NvlsLoop nvls_all_reduce_loop(const NcclGroup& g, bool tree, double bytes);

/// The time an NVLS / NVLS-Tree all-reduce of `bytes` spends filling and draining its pipeline
/// beyond its bandwidth term (NCCL's model has none: it rates the loop by its slowest stage).
/// A loop of store-and-forward stages passes its first iteration through every stage one after
/// another and then delivers one iteration per slowest-stage time (a flow shop of identical
/// jobs: sum of the stages + (N - 1) x the slowest), so beyond N iterations at the algorithm
/// bandwidth it costs
///     fill = max(0, sum over the stages of one iteration's time - one iteration at alg_bw)
/// with S = iteration_bytes, k = heads, d = log2(nodes) (NCCL's tree depth in its latency):
///   scatter and gather: S (k - 1) / k each on NVLink (the own head's chunk stays local);
///   multimem reduce / multicast: S / k each, one on one node (the head reduces and multicasts
///     in one warp group), 2 d + 1 on a tree (the leaf's reduce, d - 1 inner reduces, the
///     root's reduce-and-broadcast, d - 1 inner broadcasts, the leaf's broadcast);
///   network hops (tree): 2 d, each S / k per NIC on more than 2 nodes, S / 2k on 2 (the two
///     trees of the channels, c % 2, send their first chunks up in opposite directions).
/// NVLink stages at `nvlink_bytes_per_s` (per direction), hops at `nic_bytes_per_s`, the
/// iteration at `alg_bytes_per_s` (the all-reduce's algorithm bandwidth). 0 when NVLS does not
/// apply.
double nvls_all_reduce_fill_s(const NcclGroup& g, bool tree, double bytes,
                              double nvlink_bytes_per_s, double nic_bytes_per_s,
                              double alg_bytes_per_s);

struct NcclChoice {
  NcclAlgo algo = NcclAlgo::Ring;
  NcclProto proto = NcclProto::Simple;
  double latency_s = 0;     ///< NCCL's predicted latency of the chosen pair
  /// NCCL's predicted bus bandwidth of the chosen pair at this size (the tree's size
  /// correction applied): the rate the simulator lets the collective's flows reach.
  double bus_bw_bytes_per_s = 0;
  double time_s = 0;        ///< latency + bytes / algorithm bandwidth, NCCL's prediction
  /// Bytes on the wire per payload byte: LL sends 8 bytes of flags with every 8 bytes of data
  /// (16-byte lines), LL128 8 of every 128 bytes, Simple none (NCCL src/device/prims_ll*.h).
  /// A tree all-reduce moves as many bytes per NIC as the ring (2S per node, up and down the
  /// two binary trees), so the simulator carries it on the ring's flows.
  double wire_factor = 1.0;
  /// Channels, hence CTAs, the kernel runs (enqueue.cc "Ring/Tree channel tuning": the
  /// communicator's channels, fewer while bytes < channels x threads x threadThreshold;
  /// threads 512 for LL and Simple, 640 for LL128; threadThreshold 8 for LL (x ranks on a
  /// ring) and LL128, 64 for Simple; comm.h / device.h); 0 when the group's channels are not
  /// known. NVLS / NVLS-Tree: the NVLS channels (NVLS_NCHANNELS, 16 on SM90).
  int channels = 0;
  /// Seconds to move `ring_bytes` (a rank's ring bytes, payload) over a link of
  /// `link_bytes_per_s` alone: the wire bytes at the link's rate, or the payload at NCCL's
  /// bus bandwidth, whichever is slower (the simulator's flows, uncontended). NVLS: its own
  /// traffic (nccl_traffic) at the link's rate, or the ring bytes at the bus bandwidth.
  double transfer_s(double ring_bytes, double link_bytes_per_s) const;
  /// NVLS / NVLS-Tree: a rank's NVLink bytes for this collective (nccl_traffic).
  double nvls_nvlink_bytes = 0;
  /// NVLS / NVLS-Tree: the heads of the NVLS graph (nvls_graph().channels; fewer than the
  /// node's GPUs beyond NCCL_MAX_NVLS_ARITY or with shared NICs); 0 otherwise.
  std::int64_t nvls_heads = 0;
};

/// What one rank moves for a collective of `bytes` (nccl-tests' buffer) that `c` runs over
/// `ranks` GPUs on `nodes` nodes: payload bytes on its NVLink and on its NIC (one direction;
/// the other carries as much).
///   Ring / Tree: the ring's 2(n-1)/n S (all-reduce) or (n-1)/n S, hierarchical across nodes
///     ((k-1)/k of it on NVLink, 1/k on the rank's NIC, k ranks per node); the tree moves as
///     many bytes per NIC as the ring.
///   NVLS (NVLink SHARP, all-reduce): the switch reduces what multimem.ld_reduce reads (every
///     GPU's memory gives S: S/k for each of the k shards) and multicasts what multimem.st
///     writes (every GPU receives S), plus its own shard each way: S (k+1)/k.
///     All-gather / reduce-scatter (one node): the ring's (n-1)/n S.
///   NVLS-Tree across nodes: that inside the node, and the node's reduced buffer over its k
///     heads' NICs, up and down the tree: S/k per NIC on 2 nodes (a single up/down exchange,
///     NCCL's x2 on bwInter), 2S/k beyond.
///   With h = c.nvls_heads < k heads (beyond NCCL_MAX_NVLS_ARITY, or shared NICs) a head's
///     share is S/h: the busiest rank's S (h+1)/h on NVLink and S/h (2S/h) on its NIC, which
///     every rank's flows carry (the simulator's flows are per rank and symmetric).
struct NcclTraffic {
  double nvlink_bytes = 0;
  double nic_bytes = 0;
};
NcclTraffic nccl_traffic(const NcclChoice& c, OpKind kind, double bytes, std::int64_t ranks,
                         std::int64_t nodes);

/// NCCL's predicted time of one (algorithm, protocol) for `bytes` (the collective's buffer as
/// nccl-tests counts it); negative when the pair is not available for this collective/group.
/// `bus_bw` receives the pair's bus bandwidth at this size (the tree's correction applied).
double nccl_predicted_time_s(const NcclGroup& g, NcclAlgo a, NcclProto p, double bytes,
                             double* latency_s = nullptr, double* bus_bw = nullptr);
/// The pair NCCL would run for `bytes` (the cheapest predicted time). Throws
/// std::logic_error for a kind that is not AllReduce, ReduceScatter or AllGather.
NcclChoice nccl_choose(const NcclGroup& g, double bytes);

}  // namespace trainsim
