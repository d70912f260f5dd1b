// NCCL's tuning model, v2.18.5-1 and v2.29.7-1 (src/graph/tuning.cc). Every constant below
// is those files', named as they name them; see nccl_model.h for what is and is not modelled.
// Blackwell (compute capability 100, NVLink 5) is v2.29.7's: its tables' Blackwell rows
// (tuning.cc, search.cc sm100SpeedArray*, topo.h SM100_NVLINK_BW, transport/nvls.cc
// NVLS_NCHANNELS_SM100*); v2.18.5 predates Blackwell and, run on one, takes its Hopper rows
// (its compCapIndex and speed-array choice stop at >= 90).
#include "models/perf/nccl_model.h"

#include <algorithm>
#include <cmath>
#include <iterator>
#include <stdexcept>
#include <string>

#include "models/errors.h"

namespace trainsim {
namespace {

constexpr double kUs = 1e-6;
constexpr int kLL = 0, kLL128 = 1, kSimple = 2;
constexpr int kTree = 0, kRing = 1;

// What differs between the two releases, for what is modelled here: one entry per
// NcclVersion, in enum order. Every other constant below is the same in both.
struct Release {
  const char* name;
  /// baseLat (v2.18.5) / ncclTunerConstantsDefaults.baseLatencies (v2.29.7) [Tree, Ring][LL,
  /// LL128, Simple], us: they differ only in the tree's Simple entry.
  double base_lat_us[2][3];
  /// llMaxBws [Volta or Intel host, Ampere or AMD host, Hopper][1 node, 2 nodes, > 2 nodes],
  /// GB/s; v2.18.5 gives Hopper Ampere's row.
  double ll_max_bw_gbs[3][3];
  /// Ring LL bus bandwidth as a fraction of the link's: v2.18.5 1/4 for an all-reduce or across
  /// nodes and 1/3 otherwise; v2.29.7 (since 2.21) 1/2 always.
  double ring_ll_fraction_quarter_case, ring_ll_fraction_other;
  /// Ring LL128 with one rank per node (ppn < 2): v2.18.5 0.7 of the bus bandwidth, v2.29.7
  /// the usual 0.92.
  double ring_ll128_one_per_node;
  /// Inter-node steps of a ring all-reduce spanning N nodes: 2 N (v2.18.5) or 2 (N - 1).
  bool all_reduce_inter_steps_2n;
  /// MAXCHANNELS (src/include/device.h / devcomm.h), for the ring's plateau factor.
  double max_channels;
  /// NVLS (search.cc, tuning.cc). v2.18.5: sm90SpeedArrayIntra / Inter; NVLS all-reduce only,
  /// busBw = nChannels x bwIntra at 5/6 of it as the algorithm bandwidth, NVLS-Tree at
  /// 0.70 N / (2 (N - 1)) of nChannels x (bwIntra on <= 2 nodes, else bwInter); latencies
  /// baseLat 23 us (both), NVLS-Tree + 2 (N - 1) x 19 us. v2.29.7: the formulas of
  /// nvls_time_s below (nvlsEfficiency, perChMaxNVLSTreeBws, hwLatencies).
  bool nvls_v2_29;
  double sm90_speed_intra[11];  ///< GB/s per channel, 0-terminated when shorter
  double sm90_speed_inter[17];
  /// The release has Blackwell rows (v2.29.7; v2.18.5 gives compute capability >= 90 Hopper's).
  bool knows_sm100;
  /// NCCL_MAX_NVLS_ARITY: the most NVLS heads (channels of the NVLS graph) a communicator's
  /// node can have (v2.18.5 src/include/devcomm.h:153 8; v2.29.7 src/include/device.h:210 32).
  /// v2.29.7 caps the NVLS search at it (search.cc:1065 maxChannels = min(ARITY, GPUs)) and
  /// runs all-gather / reduce-scatter on NVLS only up to it (enqueue.cc:1914 localRanks >
  /// ARITY); v2.18.5 has neither cap and, with one head per local GPU, no NVLS beyond 8 GPUs
  /// in a node (its channel's up[] holds 8 heads). It predates MNNVL (multi-node NVLink:
  /// v2.29.7's src/init.cc:988 ncclMnnvlCheck, src/graph/topo.cc:1543 the clique's fused topology).
  int max_nvls_arity;
};
constexpr Release kReleases[] = {
    {"2.18.5",
     {{6.8, 14.0, 0.0}, {6.6, 14.0, 8.4}},
     {{39.0, 39.0, 20.4}, {87.7, 22.5, 19.0}, {87.7, 22.5, 19.0}},
     1.0 / 4.0, 1.0 / 3.0, 0.7, true, 32, false,
     {60.0, 40.0, 30.0, 24.0, 20.0, 15.0, 12.0, 6.0, 3.0},
     {48.0, 45.0, 42.0, 40.0, 30.0, 24.0, 20.0, 17.5, 15.0, 12.0, 6.0, 3.0, 2.4, 1.2, 0.24, 0.12},
     false, 8},
    {"2.29.7",
     {{6.8, 14.0, 8.4}, {6.6, 14.0, 8.4}},
     {{39.0, 39.0, 20.4}, {87.7, 22.5, 19.0}, {141.0, 45.0, 35.0}},
     0.5, 0.5, 0.92, false, 64, true,
     {60.0, 50.0, 40.0, 30.0, 24.0, 20.0, 15.0, 12.0, 11.0, 6.0, 3.0},
     {48.0, 45.0, 42.0, 40.0, 30.0, 24.0, 22.0, 20.0, 17.5, 15.0, 12.0, 6.0, 3.0, 2.4, 1.2, 0.24,
      0.12},
     true, 32},
};

// Blackwell's rows of v2.29.7-1 (only that release has them):
//   search.cc sm100SpeedArrayIntra / sm100SpeedArrayInter, GB/s per channel;
constexpr double kSm100SpeedIntra[] = {90.0, 80.0, 70.0, 60.0, 50.0, 45.0,
                                       40.0, 30.0, 24.0, 20.0, 19.0, 18.0};
constexpr double kSm100SpeedInter[] = {96.0, 80.0, 48.0, 45.1, 42.0, 40.0, 30.0, 24.0, 22.0, 20.0,
                                       17.5, 15.0, 12.0, 6.0,  3.0,  2.4,  1.2,  0.24, 0.12};
//   tuning.cc llMaxBws[Blackwell] (one node; across nodes the row is the CPU vendor's):
//   2 x Hopper's 141.0 GB/s;
constexpr double kSm100LlMaxBwOneNodeGbs = 2 * 141.0;
//   tuning.cc nvlsEfficiency[Blackwell] (Hopper 0.85) and perChMaxNVLSTreeBws[Blackwell]
//   {N1 0.0, N2 96.0, N4 43.8} (Hopper {0.0, 57.7, 45.5}).
constexpr double kNvlsEfficiencySm90 = 0.85, kNvlsEfficiencySm100 = 0.74;
constexpr double kPerChMaxNvlsTreeSm90[2] = {57.7, 45.5}, kPerChMaxNvlsTreeSm100[2] = {96.0, 43.8};
static_assert(sizeof(kReleases) / sizeof(kReleases[0]) ==
                  sizeof(kNcclVersions) / sizeof(kNcclVersions[0]),
              "one Release per NcclVersion");

const Release& release(NcclVersion v) { return kReleases[static_cast<int>(v)]; }
const Release& release(const NcclGroup& g) { return release(g.version); }
/// The group runs Blackwell's rows: compute capability >= 100 under a release that has them.
bool sm100(const NcclGroup& g) { return g.compute_capability >= 100 && release(g).knows_sm100; }

// hwLat / hwLatencies [NVLINK] and [NET], [Tree, Ring][LL, LL128, Simple], us per step (the
// same in both releases).
constexpr double kNvlinkLat[2][3] = {{0.6, 1.25, 4.0}, {0.6, 1.9, 3.4}};
constexpr double kNetLat[2][3] = {{5.0, 8.5, 14.0}, {2.7, 4.0, 14.0}};
// treeCorrectionFactor[protocol][log2(bytes / 64)], all-reduce on the tree.
constexpr double kTreeCorrection[3][24] = {
    {1.0, 1.0, 1.0, 1.0, .9, .8, .7, .7, .7, .7, .6, .5, .4, .4, .5, .6, .7, .8, .9, 1.0, 1.0, 1.0,
     1.0, 1.0},
    {1.0, 1.0, 1.0, 1.0, 1.0, .9, .8, .8, .8, .7, .6, .6, .6, .6, .6, .6, .8, .9, .9, .9, .9, 1.0,
     1.0, 1.0},
    {.9, .9, .9, .9, .9, .9, .9, .8, .7, .6, .6, .5, .5, .5, .5, .6, .7, .8, .7, .7, .8, .9, .9,
     .9}};

int log2i(double x) { return x < 1 ? -1 : static_cast<int>(std::floor(std::log2(x))); }

/// A latency of NCCL's table: the Ring/Simple entry from the calibration profile (NCCL's value
/// by default), every other entry the table's.
double table_latency_s(int a, int p, double ring_simple_s, const double (&table)[2][3]) {
  return (a == kRing && p == kSimple) ? ring_simple_s : table[a][p] * kUs;
}
/// Per-step latency on NVLink and on the network, and the base latency.
double nvlink_step_s(const NcclGroup& g, int a, int p) {
  return table_latency_s(a, p, g.simple_nvlink_step_s, kNvlinkLat);
}
double net_step_s(const NcclGroup& g, int a, int p) {
  // interLat += graphs[a]->latencyInter, again for Simple ("Also add the flush extra latency").
  const double inter = g.net_latency_inter_s * (p == kSimple ? 2 : 1);
  return table_latency_s(a, p, g.simple_net_step_s, kNetLat) + inter;
}
double base_s(const NcclGroup& g, int a, int p) {
  return table_latency_s(a, p, g.simple_base_latency_s, release(g).base_lat_us);
}

double ring_latency_s(const NcclGroup& g, int p) {
  const double n = double(g.ranks), nodes = double(g.nodes);
  const bool all_reduce = g.kind == OpKind::AllReduce;
  const double nsteps = all_reduce ? 2 * (n - 1) : n - 1;
  const double ppn = n / nodes;
  double intra = nvlink_step_s(g, kRing, p);
  // "With ppn=1 latencies are fully exposed, use the Tree network latency".
  const double inter = ppn == 1 ? net_step_s(g, kTree, p) : net_step_s(g, kRing, p);
  double inter_steps = 0;
  if (g.nodes > 1) {
    // "Inter-node rings still have to launch nsteps * net overhead" (x3 for Simple).
    intra = std::max(intra, g.net_overhead_s * (p == kSimple ? 3 : 1));
    inter_steps = !all_reduce                              ? nodes - 1
                  : release(g).all_reduce_inter_steps_2n ? 2 * nodes
                                                         : 2 * (nodes - 1);
  }
  return base_s(g, kRing, p) + (nsteps - inter_steps) * intra + inter_steps * inter;
}

double tree_latency_s(const NcclGroup& g, int p) {
  const double ppn = double(g.ranks) / double(g.nodes);
  return base_s(g, kTree, p) +
         2 * ((ppn - 1) * nvlink_step_s(g, kTree, p) +
              log2i(double(g.nodes)) * net_step_s(g, kTree, p));
}

/// NCCL's bus bandwidth of the pair in GB/s (ncclTopoTuneModel's "model refinements").
double bus_bw_gbs(const NcclGroup& g, int a, int p) {
  const double bw = g.bus_bw_bytes_per_s / 1e9;
  const int cc = g.compute_capability >= 90 ? 2 : g.compute_capability >= 80 ? 1 : 0;
  const int index1 = g.nodes == 1 ? cc : (g.amd_cpu ? 1 : 0);
  const int index2 = g.nodes <= 2 ? int(g.nodes) - 1 : 2;
  const Release& r = release(g);
  const double ll_max = g.nodes == 1 && sm100(g) ? kSm100LlMaxBwOneNodeGbs
                                                 : r.ll_max_bw_gbs[index1][index2];
  if (a == kRing) {
    if (p == kLL) {
      const bool quarter = g.nodes > 1 || g.kind == OpKind::AllReduce;
      return std::min(ll_max,
                      bw * (quarter ? r.ring_ll_fraction_quarter_case : r.ring_ll_fraction_other));
    }
    const bool one_per_node = g.ranks == g.nodes;  // ppn < 2
    if (p == kLL128) return bw * (one_per_node ? r.ring_ll128_one_per_node : 0.92);
    return bw;
  }
  double bus = bw * .92;  // tree all-reduce
  if (p == kLL) bus = std::min(bus / 3.8, ll_max);
  if (p == kLL128) bus *= g.nodes == 1 ? 7.0 / 9.0 : 120.0 / 128.0;
  return bus;
}

/// NVLS's channels (CTAs an NVLS kernel runs; src/transport/nvls.cc ncclNvlsInit):
/// NVLS_NCHANNELS_SM90 16 (both releases); on Blackwell (v2.29.7) NVLS_NCHANNELS_SM100_NVL 24
/// inside one node, NVLS_NCHANNELS_SM100 32 for a communicator spanning nodes.
constexpr int kNvlsChannelsSm90 = 16, kNvlsChannelsSm100Nvl = 24, kNvlsChannelsSm100 = 32;
int nvls_channels(NcclVersion v, int compute_capability, bool multi_node) {
  if (compute_capability < 100 || !release(v).knows_sm100) return kNvlsChannelsSm90;
  return multi_node ? kNvlsChannelsSm100 : kNvlsChannelsSm100Nvl;
}
int nvls_channels(const NcclGroup& g) {
  return nvls_channels(g.version, g.compute_capability, g.nodes > 1);
}

/// NCCL's predicted time of NVLS (tree = false) or NVLS-Tree for the group; negative where
/// NCCL would not run it. `lat_s` and `bus_gbs` receive the latency and the bus bandwidth.
double nvls_time_s(const NcclGroup& g, bool tree, double bytes, double* lat_s, double* bus_gbs) {
  const bool all_reduce = g.kind == OpKind::AllReduce;
  if (!g.nvls || g.compute_capability < 90) return -1;
  const Release& r = release(g);
  // tuning.cc: NVLS-Tree is disabled on one node; multi-node NVLS needs CollNet (not
  // modelled: disabled); all-gather / reduce-scatter run NVLS only from v2.19 on, and only on
  // one node (a multi-node one needs CollNet heads).
  if (tree != (g.nodes > 1)) return -1;
  if (tree && !all_reduce) return -1;
  if (!all_reduce && !r.nvls_v2_29) return -1;
  // enqueue.cc:1914 (v2.29.7): all-gather / reduce-scatter on NVLS only with <= NCCL_MAX_NVLS_ARITY
  // (32) local ranks: not over a whole GB200 NVL72 domain.
  if (!all_reduce && g.ranks / g.nodes > r.max_nvls_arity) return -1;
  const NvlsGraph graph = nvls_graph(g);
  if (graph.channels < 2) return -1;  // "NVLS/NVLStree needs at least 2 channels"
  const double n = double(g.ranks), nodes = double(g.nodes), nch = double(graph.channels);
  const double ppn = n / nodes;
  double bus = 0, alg = 0, lat_us = 0;
  if (r.nvls_v2_29) {
    // nvlsEfficiency (Hopper 0.85, Blackwell 0.74), one channel of nChannels lost; all-reduce
    // pipelines its reduce and its broadcast (x2), the others move (ppn - 1) / ppn.
    const double efficiency = sm100(g) ? kNvlsEfficiencySm100 : kNvlsEfficiencySm90;
    double intra = graph.bw_intra_gbs * efficiency * (nch - 1) / nch;
    intra *= all_reduce ? 2.0 : (ppn - 1) / ppn;
    // tuning.cc:299-300: min(intraBw, bwInter (x 2 for NVLS-Tree on <= 2 nodes), NVLS-Tree's
    // perChMaxNVLSTreeBws). On one node too: bwInter is the second pass's (nvls_graph), which
    // binds where 2 x bwIntra is beyond the speed array (DGX B200: 80 -> 90 < 103.6).
    double bw = std::min(intra, graph.bw_inter_gbs * (tree && g.nodes <= 2 ? 2.0 : 1.0));
    if (tree) {
      const double* per_ch = sm100(g) ? kPerChMaxNvlsTreeSm100 : kPerChMaxNvlsTreeSm90;
      bw = std::min(bw, per_ch[g.nodes <= 2 ? 0 : 1]);  // perChMaxNVLSTreeBws
    }
    bus = nch * bw;
    // Bus -> algorithm bandwidth: all-reduce n / nsteps; all-gather / reduce-scatter off the
    // ring are not converted.
    alg = all_reduce ? bus * n / (2 * (n - 1)) : bus;
    // hwLatencies: NVLS 25 us on NVLink; NVLS-Tree + 2 log2(nodes) x 20.9 us on the network
    // (graphs' latencyInter 0 on IB); baseLatencies 0.
    // latencyInter (twice: Simple) joins each network step, as for the other algorithms.
    const double inter_us = 20.9 + 2 * g.net_latency_inter_s / kUs;
    lat_us = 25.0 + (tree ? 2 * log2i(nodes) * inter_us : 0.0);
  } else {
    bus = nch * (tree && g.nodes > 2 ? graph.bw_inter_gbs : graph.bw_intra_gbs);
    alg = tree ? bus * .70 * nodes / (2 * (nodes - 1)) : bus * 5.0 / 6.0;
    lat_us = 23.0 + (tree ? 2 * (nodes - 1) * (19.0 + 2 * g.net_latency_inter_s / kUs) : 0.0);
  }
  if (lat_s) *lat_s = lat_us * kUs;
  // Reported as nccl-tests' bus bandwidth of that algorithm bandwidth, so that the simulated
  // flows and transfer_s read it as they read the ring's.
  const double nsteps = all_reduce ? 2 * (n - 1) : n - 1;
  if (bus_gbs) *bus_gbs = alg * nsteps / n;
  return lat_us * kUs + bytes / (alg * 1e9);
}

}  // namespace

double nccl_nvls_table_latency_s(NcclVersion v) {
  return (release(v).nvls_v2_29 ? 25.0 : 23.0) * kUs;
}

std::int64_t nccl_nvls_buffer_bytes(NcclVersion v, std::int64_t local_ranks,
                                    int compute_capability, bool multi_node) {
  const std::int64_t buff = release(v).nvls_v2_29 ? std::int64_t(128 * 1024) * 8
                                                  : (std::int64_t(4) << 20) + (std::int64_t(2) << 20);
  // nHeads: the NVLS graph's channels, one per local GPU up to NCCL_MAX_NVLS_ARITY (nvls.cc:328).
  const std::int64_t heads =
      release(v).nvls_v2_29 ? std::min<std::int64_t>(local_ranks, release(v).max_nvls_arity) : local_ranks;
  return nvls_channels(v, compute_capability, multi_node) * 2 * buff * heads;
}

NvlsGraph nvls_graph(const NcclGroup& g) {
  NvlsGraph out;
  if (g.nodes < 1 || g.ranks % g.nodes != 0) return out;
  const std::int64_t ppn = g.ranks / g.nodes;
  if (ppn < 2 || !(g.topo_nvlink_bw_gbs > 0)) return out;
  const Release& r = release(g);
  if (!r.nvls_v2_29 && ppn > r.max_nvls_arity) return out;  // v2.18.5: one head per GPU, <= 8
  // The speed array: the intra-node one on one node (system->inter 0: every rank of the
  // communicator in the system, paths.cc:818; on a multi-node NVLink domain the clique's fused
  // topology), the inter-node one across nodes; Blackwell (v2.29.7) the sm100 arrays
  // (search.cc:1089-1096).
  const bool b = sm100(g);
  const double* speeds = g.nodes == 1 ? (b ? kSm100SpeedIntra : r.sm90_speed_intra)
                                      : (b ? kSm100SpeedInter : r.sm90_speed_inter);
  const int count = int(g.nodes == 1 ? (b ? std::size(kSm100SpeedIntra) : std::size(r.sm90_speed_intra))
                                     : (b ? std::size(kSm100SpeedInter) : std::size(r.sm90_speed_inter)));
  // Channels: one per head GPU, at most NCCL_MAX_NVLS_ARITY (v2.29.7 search.cc:1065) and,
  // across nodes, one per NIC with a GPU of its own (ncclTopoSearchRecNet, search.cc:693-707:
  // a NIC's localGpu heads its channel, a GPU heads one channel only).
  std::int64_t max_channels = r.nvls_v2_29 ? std::min<std::int64_t>(ppn, r.max_nvls_arity) : ppn;
  if (g.nodes > 1 && g.nic_heads_per_node > 0)
    max_channels = std::min<std::int64_t>(max_channels, g.nic_heads_per_node);
  // Each channel takes bw on every GPU's NVLink both ways and 2 x bw on its head's
  // (ncclTopoSearchTryNvls, search.cc:387-417): a head of c channels carries (c + 1) x bw. Across
  // nodes the head also sends on its NIC (the NET path at bwInter), so bw must fit the NIC too.
  // One node: minChannels = maxChannels (search.cc:1070-1073), the first speed at which all
  // channels fit. Across nodes "the more the better" (ncclTopoCompareGraphs, search.cc:424-428):
  // the search, lowering the speed, keeps the graph with the most channels, then the most
  // nChannels x bw.
  const bool nic_bound = g.nodes > 1 && g.topo_nic_bw_gbs > 0;
  int index = -1;
  for (int i = 0; i < count && speeds[i] > 0; ++i) {
    if (nic_bound && speeds[i] > g.topo_nic_bw_gbs + 1e-9) continue;
    const std::int64_t fit =
        std::int64_t(std::floor(g.topo_nvlink_bw_gbs / speeds[i] + 1e-9)) - 1;
    const std::int64_t c = std::min(max_channels, fit);
    if (c < 1 || (g.nodes == 1 && c < max_channels)) continue;
    if (c > out.channels || (c == out.channels && c * speeds[i] > out.channels * out.bw_intra_gbs)) {
      out.channels = int(c);
      out.bw_intra_gbs = out.bw_inter_gbs = speeds[i];
      index = i;
    }
  }
  if (out.channels == 0 || !r.nvls_v2_29) return out;
  // v2.29.7's second pass (search.cc:1193-1205) raises bwInter alone, one speed at a time,
  // while it is under 2 x bwIntra and the search still succeeds: on one node always (bwInter
  // rides no path there: ncclTopoFollowPath takes bwIntra between GPUs and NVSwitch); across
  // nodes while the NIC carries it.
  while (index > 0 && out.bw_inter_gbs < 2 * out.bw_intra_gbs) {
    if (nic_bound && speeds[index - 1] > g.topo_nic_bw_gbs + 1e-9) break;
    out.bw_inter_gbs = speeds[--index];
  }
  return out;
}

NvlsLoop nvls_all_reduce_loop(const NcclGroup& g, bool tree, double bytes) {
  NvlsLoop out;
  const NvlsGraph graph = nvls_graph(g);
  if (graph.channels == 0 || !(bytes > 0)) return out;
  out.heads = graph.channels;
  out.channels = nvls_channels(g);
  const bool v2_29 = release(g).nvls_v2_29;
  constexpr double KiB = 1024;
  const double ops = double(out.channels) * double(out.heads);  // concurrentOps
  double chunk = 0;
  if (!tree) {
    chunk = 128 * KiB;
    if (bytes < 64 * ops * chunk && chunk > 64 * KiB) chunk = 64 * KiB;
    if (bytes < 8 * ops * chunk && chunk > 32 * KiB) chunk = 32 * KiB;
    if (bytes < 2 * ops * chunk && chunk > 16 * KiB) chunk = 16 * KiB;
  } else {
    chunk = v2_29 ? (g.nodes >= 4 ? 64 * KiB : 128 * KiB) : 512 * KiB;
    if (bytes < 32 * ops * chunk && chunk > 256 * KiB) chunk = 256 * KiB;
    if (bytes < 16 * ops * chunk && chunk > 128 * KiB) chunk = 128 * KiB;
    if (bytes < 4 * ops * chunk && chunk > 64 * KiB) chunk = 64 * KiB;
    if (bytes < 1 * ops * chunk && chunk > 32 * KiB) chunk = 32 * KiB;
  }
  out.chunk_bytes = chunk;
  const double loop = ops * chunk;
  out.iteration_bytes = std::min(bytes, loop);
  out.iterations = std::int64_t(std::ceil(bytes / loop));
  return out;
}

double nvls_all_reduce_fill_s(const NcclGroup& g, bool tree, double bytes,
                              double nvlink_bytes_per_s, double nic_bytes_per_s,
                              double alg_bytes_per_s) {
  const NvlsLoop loop = nvls_all_reduce_loop(g, tree, bytes);
  if (loop.heads == 0 || !(nvlink_bytes_per_s > 0) || !(alg_bytes_per_s > 0)) return 0;
  if (tree && !(nic_bytes_per_s > 0)) return 0;
  const double s = loop.iteration_bytes, k = double(loop.heads);
  const double d = tree ? double(std::max(log2i(double(g.nodes)), 1)) : 0;
  const double nvlink_s = (2 * s * (k - 1) / k + (2 * d + 1) * s / k) / nvlink_bytes_per_s;
  const double hop_bytes = s / k * (g.nodes == 2 ? 0.5 : 1.0);
  const double net_s = tree ? 2 * d * hop_bytes / nic_bytes_per_s : 0.0;
  return std::max(0.0, nvlink_s + net_s - s / alg_bytes_per_s);
}

const char* to_string(NcclAlgo a) {
  switch (a) {
    case NcclAlgo::Ring: return "ring";
    case NcclAlgo::Tree: return "tree";
    case NcclAlgo::Nvls: return "nvls";
    case NcclAlgo::NvlsTree: return "nvls_tree";
  }
  return "?";
}
const char* to_string(NcclProto p) {
  return p == NcclProto::LL ? "LL" : p == NcclProto::LL128 ? "LL128" : "Simple";
}

double nccl_predicted_time_s(const NcclGroup& g, NcclAlgo algo, NcclProto proto, double bytes,
                             double* latency_s, double* bus_bw) {
  TRAINSIM_CHECK(g.kind == OpKind::AllReduce || g.kind == OpKind::ReduceScatter ||
                     g.kind == OpKind::AllGather,
                 std::string("nccl_predicted_time_s: not a collective NCCL tunes: ") +
                     to_string(g.kind));
  TRAINSIM_CHECK(g.ranks >= 2 && g.nodes >= 1 && g.ranks >= g.nodes &&
                     g.bus_bw_bytes_per_s > 0 && bytes >= 0,
                 "nccl_predicted_time_s: bad group (ranks " + std::to_string(g.ranks) +
                     ", nodes " + std::to_string(g.nodes) + ")");
  const int p = proto == NcclProto::LL ? kLL : proto == NcclProto::LL128 ? kLL128 : kSimple;
  if (is_nvls(algo)) {
    if (p != kSimple) return -1;  // NVLS runs Simple only
    double bus = 0, lat = 0;
    const double t = nvls_time_s(g, algo == NcclAlgo::NvlsTree, bytes, &lat, &bus);
    if (t < 0) return t;
    // v2.29.7 ncclTopoGetAlgoTime (tuning.cc:596): an NVLS-Tree all-reduce on Blackwell with an
    // x86 host takes the tree's size correction (Simple row) below 64 x 2^24 bytes (1 GiB).
    const int log_size = log2i(bytes / 64);
    double factor = 1;
    if (algo == NcclAlgo::NvlsTree && g.kind == OpKind::AllReduce && sm100(g) && !g.arm_cpu &&
        log_size >= 0 && log_size < 24)
      factor = kTreeCorrection[kSimple][log_size];
    if (latency_s) *latency_s = lat;
    if (bus_bw) *bus_bw = bus * factor * 1e9;
    return lat + (t - lat) / factor;
  }
  const int a = algo == NcclAlgo::Ring ? kRing : kTree;
  // The tree serves all-reduce only; NCCL enables it across nodes (inside one node the ring
  // and, on H100, NVLS serve; trainsim does not offer the single-node chain).
  if (a == kTree && (g.kind != OpKind::AllReduce || g.nodes < 2)) return -1;
  double lat = a == kRing ? ring_latency_s(g, p) : tree_latency_s(g, p);
  double bus = bus_bw_gbs(g, a, p);
  const double n = double(g.ranks);
  const int log_size = log2i(bytes / 64);
  // ncclTopoGetAlgoTime: the tree's size correction (64 B to 256 MiB, powers of two) ...
  if (a == kTree && log_size >= 0 && log_size < 23) bus *= kTreeCorrection[p][log_size];
  // ... and the ring's "plateau effect": a multi-node Simple all-reduce of at least 64 bytes
  // per channel and rank pays 1.4x its latency (1.9x before Ampere). The channel count is
  // taken at MAXCHANNELS (v2.18.5 32, v2.29.7 64; src/include/device.h / devcomm.h).
  const double max_channels = release(g).max_channels;
  if (a == kRing && p == kSimple && g.nodes > 1 && g.kind == OpKind::AllReduce &&
      bytes / (max_channels * n) >= 64)
    lat *= g.compute_capability < 80 ? 1.9 : 1.4;
  // Bus bandwidth -> algorithm bandwidth: ring n / nsteps, tree 1/2.
  const double nsteps = g.kind == OpKind::AllReduce ? 2 * (n - 1) : n - 1;
  const double alg = a == kRing ? bus * n / nsteps : bus * .5;
  if (latency_s) *latency_s = lat;
  if (bus_bw) *bus_bw = bus * 1e9;
  return lat + bytes / (alg * 1e9);
}

NcclChoice nccl_choose(const NcclGroup& g, double bytes) {
  NcclChoice best;
  best.time_s = INFINITY;
  for (NcclAlgo a : {NcclAlgo::Ring, NcclAlgo::Tree, NcclAlgo::Nvls, NcclAlgo::NvlsTree}) {
    for (NcclProto p : {NcclProto::LL, NcclProto::LL128, NcclProto::Simple}) {
      double lat = 0, bus = 0;
      const double t = nccl_predicted_time_s(g, a, p, bytes, &lat, &bus);
      if (t < 0 || !(t < best.time_s)) continue;
      best.algo = a;
      best.proto = p;
      best.latency_s = lat;
      best.bus_bw_bytes_per_s = bus;
      best.time_s = t;
      best.wire_factor = p == NcclProto::LL ? 2.0 : p == NcclProto::LL128 ? 128.0 / 120.0 : 1.0;
    }
  }
  if (is_nvls(best.algo)) {
    best.channels = nvls_channels(g);  // enqueue.cc: nc = comm->nvlsChannels
    best.nvls_heads = nvls_graph(g).channels;
    best.nvls_nvlink_bytes = nccl_traffic(best, g.kind, bytes, g.ranks, g.nodes).nvlink_bytes;
  } else if (g.channels > 0) {
    // enqueue.cc: while (nBytes < nc * nt * threadThreshold) nc-- (down to 1).
    const double threads = best.proto == NcclProto::LL128 ? 640 : 512;
    double threshold = best.proto == NcclProto::Simple ? 64 : 8;
    if (best.proto == NcclProto::LL && best.algo == NcclAlgo::Ring) threshold *= double(g.ranks);
    const double fit = std::floor(bytes / (threads * threshold));
    best.channels = int(std::max(1.0, std::min(double(g.channels), fit)));
  }
  return best;
}

double NcclChoice::transfer_s(double ring_bytes, double link_bytes_per_s) const {
  const double link_bytes = is_nvls(algo) ? nvls_nvlink_bytes : ring_bytes * wire_factor;
  return std::max(link_bytes / link_bytes_per_s, ring_bytes / bus_bw_bytes_per_s);
}

NcclTraffic nccl_traffic(const NcclChoice& c, OpKind kind, double bytes, std::int64_t ranks,
                         std::int64_t nodes) {
  NcclTraffic t;
  if (ranks < 2 || nodes < 1) return t;
  const double n = double(ranks);
  const double k = double(std::max<std::int64_t>(ranks / nodes, 1));
  if (is_nvls(c.algo)) {
    // All-gather / reduce-scatter (one node): each GPU multicasts or reduce-reads its own
    // shard and takes in the other k - 1: the ring's (n - 1) / n S.
    const double h = c.nvls_heads > 0 ? std::min(k, double(c.nvls_heads)) : k;
    t.nvlink_bytes = kind == OpKind::AllReduce ? bytes * (h + 1) / h : bytes * (n - 1) / n;
    if (nodes > 1) t.nic_bytes = bytes / h * (nodes == 2 ? 1.0 : 2.0);
    return t;
  }
  const double ring = kind == OpKind::AllReduce ? 2 * (n - 1) / n * bytes : (n - 1) / n * bytes;
  if (nodes == 1) {
    t.nvlink_bytes = ring;
  } else if (k > 1) {
    t.nvlink_bytes = ring * (k - 1) / k;
    t.nic_bytes = ring / k;
  } else {
    t.nic_bytes = ring;
  }
  return t;
}

}  // namespace trainsim
