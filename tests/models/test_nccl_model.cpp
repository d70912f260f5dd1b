// Tests of models/nccl_model: NCCL's algorithm/protocol choice and latency, each expected
// number worked out here from the constants of NVIDIA/nccl src/graph/tuning.cc (v2.29.7-1,
// the default, and v2.18.5-1 where named).
#include "models/perf/nccl_model.h"

#include <gtest/gtest.h>

#include <cmath>
#include <optional>
#include <stdexcept>

#include "models/hardware/calibration.h"
#include "models/perf/cost_model.h"
#include "models/hardware/hardware.h"

namespace trainsim {
namespace {

constexpr double kUs = 1e-6;

/// A DGX A100 group: Ampere, AMD host (net overhead 2 us), Simple ring entries of NCCL's table.
NcclGroup a100(OpKind kind, std::int64_t ranks, std::int64_t nodes, double bus_bw = 200e9) {
  NcclGroup g;
  g.kind = kind;
  g.ranks = ranks;
  g.nodes = nodes;
  g.compute_capability = 80;
  g.amd_cpu = true;
  g.net_overhead_s = 2 * kUs;
  g.bus_bw_bytes_per_s = bus_bw;
  g.simple_base_latency_s = 8.4 * kUs;
  g.simple_nvlink_step_s = 3.4 * kUs;
  g.simple_net_step_s = 14.0 * kUs;
  return g;
}

TEST(NcclModel, RingLatencyInsideOneNodeIsBasePlusStepsPerProtocol) {
  const NcclGroup g = a100(OpKind::AllReduce, 8, 1);
  double lat = 0;
  // 2(n-1) = 14 steps on NVLink.
  nccl_predicted_time_s(g, NcclAlgo::Ring, NcclProto::Simple, 0, &lat);
  EXPECT_NEAR(lat, (8.4 + 14 * 3.4) * kUs, 1e-12);
  nccl_predicted_time_s(g, NcclAlgo::Ring, NcclProto::LL, 0, &lat);
  EXPECT_NEAR(lat, (6.6 + 14 * 0.6) * kUs, 1e-12);
  nccl_predicted_time_s(g, NcclAlgo::Ring, NcclProto::LL128, 0, &lat);
  EXPECT_NEAR(lat, (14.0 + 14 * 1.9) * kUs, 1e-12);
  // All-gather and reduce-scatter: n - 1 steps.
  nccl_predicted_time_s(a100(OpKind::AllGather, 8, 1), NcclAlgo::Ring, NcclProto::Simple, 0, &lat);
  EXPECT_NEAR(lat, (8.4 + 7 * 3.4) * kUs, 1e-12);
}

TEST(NcclModel, RingAcrossNodesPaysTheNetworkOnInterNodeStepsAndTheOverheadElsewhere) {
  // 64 ranks on 8 nodes: all-reduce 126 steps, 2 x 7 = 14 of them between nodes.
  const NcclGroup g = a100(OpKind::AllReduce, 64, 8);
  double lat = 0;
  nccl_predicted_time_s(g, NcclAlgo::Ring, NcclProto::Simple, 0, &lat);
  // Intra-node steps: max(3.4, 2 us x 3) = 6 us.
  EXPECT_NEAR(lat, (8.4 + 112 * 6.0 + 14 * 14.0) * kUs, 1e-12);
  nccl_predicted_time_s(g, NcclAlgo::Ring, NcclProto::LL, 0, &lat);
  EXPECT_NEAR(lat, (6.6 + 112 * 2.0 + 14 * 2.7) * kUs, 1e-12);
  // One rank per node: the tree's network latency is used for the ring.
  nccl_predicted_time_s(a100(OpKind::AllGather, 4, 4), NcclAlgo::Ring, NcclProto::LL, 0, &lat);
  EXPECT_NEAR(lat, (6.6 + 3 * 5.0) * kUs, 1e-12);
}

TEST(NcclModel, TreeLatencyIsLogarithmicInNodes) {
  const NcclGroup g = a100(OpKind::AllReduce, 1024, 128);
  double lat = 0, bus = 0;
  nccl_predicted_time_s(g, NcclAlgo::Tree, NcclProto::Simple, 0, &lat, &bus);
  // base 8.4 + 2 x ((8 - 1) x 4.0 + log2(128) x 14).
  EXPECT_NEAR(lat, (8.4 + 2 * (7 * 4.0 + 7 * 14.0)) * kUs, 1e-12);
  EXPECT_NEAR(bus, 0.92 * 200e9, 1e-3);
  // Tree only for all-reduce across nodes.
  EXPECT_LT(nccl_predicted_time_s(a100(OpKind::AllGather, 1024, 128), NcclAlgo::Tree,
                                  NcclProto::Simple, 1e6), 0);
  EXPECT_LT(nccl_predicted_time_s(a100(OpKind::AllReduce, 8, 1), NcclAlgo::Tree,
                                  NcclProto::Simple, 1e6), 0);
}

TEST(NcclModel, ChoiceFollowsSizeSmallLLLargeSimple) {
  const NcclGroup g = a100(OpKind::AllReduce, 8, 1, 231e9);
  const NcclChoice small = nccl_choose(g, 64e3);
  EXPECT_EQ(small.algo, NcclAlgo::Ring);
  EXPECT_EQ(small.proto, NcclProto::LL);
  EXPECT_DOUBLE_EQ(small.wire_factor, 2.0);
  const NcclChoice large = nccl_choose(g, 1e9);
  EXPECT_EQ(large.proto, NcclProto::Simple);
  EXPECT_DOUBLE_EQ(large.wire_factor, 1.0);
  // Predicted time at 1 GB: 8.4 + 14 x 3.4 us + 1e9 / (231e9 x 8 / 14).
  EXPECT_NEAR(large.time_s, (8.4 + 14 * 3.4) * kUs + 1e9 / (231e9 * 8 / 14), 1e-12);
  // In between LL128 wins somewhere (0.92 of the bandwidth at a lower latency than LL's
  // bandwidth loss), and the predicted time never decreases with size.
  double prev = 0;
  bool saw_ll128 = false;
  for (double b = 1e3; b <= 4e9; b *= 2) {
    const NcclChoice c = nccl_choose(g, b);
    saw_ll128 = saw_ll128 || c.proto == NcclProto::LL128;
    EXPECT_GE(c.time_s, prev);
    prev = c.time_s;
  }
  EXPECT_TRUE(saw_ll128);
}

TEST(NcclModel, TreeWinsMidSizeAllReduceOnManyNodesRingWinsHuge) {
  // 1536 ranks on 192 nodes: the ring's 2 x 1535 steps cost ~18 ms of latency; the tree
  // (log2 192 = 7 levels) far less.
  const NcclGroup g = a100(OpKind::AllReduce, 1536, 192, 24e9);
  const NcclChoice mid = nccl_choose(g, 64e6);
  EXPECT_EQ(mid.algo, NcclAlgo::Tree);
  double ring_lat = 0;
  nccl_predicted_time_s(g, NcclAlgo::Ring, NcclProto::Simple, 0, &ring_lat);
  EXPECT_NEAR(ring_lat, (8.4 + (3070 - 382) * 6.0 + 382 * 14.0) * kUs, 1e-9);
  EXPECT_LT(mid.latency_s, ring_lat / 10);
}

TEST(NcclModel, RingLLBandwidthPerRelease) {
  // One A100 node, bus bandwidth 200 GB/s. v2.29.7: half of it, capped at llMaxBws[Ampere][1
  // node] = 87.7 GB/s. v2.18.5: a quarter for all-reduce (50 GB/s), a third for all-gather
  // (66.7 GB/s), the same cap.
  double bus = 0;
  NcclGroup g = a100(OpKind::AllReduce, 8, 1);
  nccl_predicted_time_s(g, NcclAlgo::Ring, NcclProto::LL, 1e6, nullptr, &bus);
  EXPECT_NEAR(bus, 87.7e9, 1e-3);
  g.version = NcclVersion::V2_18_5;
  nccl_predicted_time_s(g, NcclAlgo::Ring, NcclProto::LL, 1e6, nullptr, &bus);
  EXPECT_NEAR(bus, 50e9, 1e-3);
  g.kind = OpKind::AllGather;
  nccl_predicted_time_s(g, NcclAlgo::Ring, NcclProto::LL, 1e6, nullptr, &bus);
  EXPECT_NEAR(bus, 200e9 / 3, 1e-3);
  // Across nodes a quarter for every collective (v2.18.5), capped at llMaxBws[AMD][2 nodes].
  NcclGroup two = a100(OpKind::AllGather, 16, 2, 400e9);
  two.version = NcclVersion::V2_18_5;
  nccl_predicted_time_s(two, NcclAlgo::Ring, NcclProto::LL, 1e6, nullptr, &bus);
  EXPECT_NEAR(bus, 22.5e9, 1e-3);
  // Hopper: v2.18.5 keeps Ampere's 87.7 GB/s cap, v2.29.7 raises it to 141.
  NcclGroup h = a100(OpKind::AllReduce, 8, 1, 900e9);
  h.compute_capability = 90;
  nccl_predicted_time_s(h, NcclAlgo::Ring, NcclProto::LL, 1e6, nullptr, &bus);
  EXPECT_NEAR(bus, 141e9, 1e-3);
  h.version = NcclVersion::V2_18_5;
  nccl_predicted_time_s(h, NcclAlgo::Ring, NcclProto::LL, 1e6, nullptr, &bus);
  EXPECT_NEAR(bus, 87.7e9, 1e-3);
  // LL128 with one rank per node: 0.7 of the bus bandwidth in v2.18.5, 0.92 in v2.29.7.
  NcclGroup ppn1 = a100(OpKind::AllReduce, 4, 4, 20e9);
  nccl_predicted_time_s(ppn1, NcclAlgo::Ring, NcclProto::LL128, 1e6, nullptr, &bus);
  EXPECT_NEAR(bus, 0.92 * 20e9, 1e-3);
  ppn1.version = NcclVersion::V2_18_5;
  nccl_predicted_time_s(ppn1, NcclAlgo::Ring, NcclProto::LL128, 1e6, nullptr, &bus);
  EXPECT_NEAR(bus, 0.7 * 20e9, 1e-3);
  EXPECT_STREQ(to_string(NcclVersion::V2_18_5), "2.18.5");
  EXPECT_STREQ(to_string(NcclVersion::V2_29_7), "2.29.7");
  for (NcclVersion v : kNcclVersions) EXPECT_EQ(nccl_version_from_string(to_string(v)), v);
  EXPECT_FALSE(nccl_version_from_string("2.18"));
  EXPECT_FALSE(nccl_version_from_string("2.21.5"));
}

TEST(NcclModel, LatencyTermsThatDifferBetweenReleases) {
  double lat = 0;
  // Ring all-reduce on 8 nodes of 8: v2.18.5 counts 2 x 8 inter-node steps, v2.29.7 2 x 7.
  NcclGroup g = a100(OpKind::AllReduce, 64, 8);
  g.version = NcclVersion::V2_18_5;
  nccl_predicted_time_s(g, NcclAlgo::Ring, NcclProto::LL, 0, &lat);
  EXPECT_NEAR(lat, (6.6 + 110 * 2.0 + 16 * 2.7) * kUs, 1e-12);
  // Tree/Simple base latency: 0 in v2.18.5, 8.4 us in v2.29.7.
  NcclGroup t = a100(OpKind::AllReduce, 1024, 128);
  nccl_predicted_time_s(t, NcclAlgo::Tree, NcclProto::Simple, 0, &lat);
  const double tree_steps = 2 * (7 * 4.0 + 7 * 14.0);
  EXPECT_NEAR(lat, (8.4 + tree_steps) * kUs, 1e-12);
  t.version = NcclVersion::V2_18_5;
  nccl_predicted_time_s(t, NcclAlgo::Tree, NcclProto::Simple, 0, &lat);
  EXPECT_NEAR(lat, tree_steps * kUs, 1e-12);
}

TEST(NcclModel, RingPlateauRaisesTheLatencyOfLargeMultiNodeSimpleAllReduces) {
  // 64 ranks on 8 nodes: from 64 B x 64 channels (MAXCHANNELS, v2.29.7) x 64 ranks = 256 KiB
  // on, the Simple ring all-reduce's latency is 1.4x (Ampere); 1.9x before Ampere.
  NcclGroup g = a100(OpKind::AllReduce, 64, 8);
  const double base = (8.4 + 112 * 6.0 + 14 * 14.0) * kUs;
  double lat = 0;
  nccl_predicted_time_s(g, NcclAlgo::Ring, NcclProto::Simple, 262143, &lat);
  EXPECT_NEAR(lat, base, 1e-12);
  nccl_predicted_time_s(g, NcclAlgo::Ring, NcclProto::Simple, 262144, &lat);
  EXPECT_NEAR(lat, 1.4 * base, 1e-12);
  g.compute_capability = 70;
  nccl_predicted_time_s(g, NcclAlgo::Ring, NcclProto::Simple, 262144, &lat);
  EXPECT_NEAR(lat, 1.9 * base, 1e-12);
  // v2.18.5's MAXCHANNELS is 32: from 128 KiB on.
  g.compute_capability = 80;
  g.version = NcclVersion::V2_18_5;
  const double base_18 = (8.4 + 110 * 6.0 + 16 * 14.0) * kUs;
  nccl_predicted_time_s(g, NcclAlgo::Ring, NcclProto::Simple, 131072, &lat);
  EXPECT_NEAR(lat, 1.4 * base_18, 1e-12);
  // Not inside a node, not for LL, not for all-gather.
  nccl_predicted_time_s(a100(OpKind::AllReduce, 8, 1), NcclAlgo::Ring, NcclProto::Simple, 1e9,
                        &lat);
  EXPECT_NEAR(lat, (8.4 + 14 * 3.4) * kUs, 1e-12);
  nccl_predicted_time_s(a100(OpKind::AllGather, 64, 8), NcclAlgo::Ring, NcclProto::Simple, 1e9,
                        &lat);
  EXPECT_NEAR(lat, (8.4 + 56 * 6.0 + 7 * 14.0) * kUs, 1e-12);
}

TEST(NcclModel, TreeBusBandwidthCarriesTheSizeCorrection) {
  // 1 MiB: log2(1 MiB / 64) = 14, the Simple correction there is 0.5; 4 GiB: none.
  const NcclGroup g = a100(OpKind::AllReduce, 1024, 128);
  double bus = 0;
  nccl_predicted_time_s(g, NcclAlgo::Tree, NcclProto::Simple, 1 << 20, nullptr, &bus);
  EXPECT_NEAR(bus, 0.5 * 0.92 * 200e9, 1e-3);
  nccl_predicted_time_s(g, NcclAlgo::Tree, NcclProto::Simple, 4.0 * (1 << 30), nullptr, &bus);
  EXPECT_NEAR(bus, 0.92 * 200e9, 1e-3);
}

TEST(NcclModel, TransferIsTheSlowerOfWireBytesOnTheLinkAndPayloadAtNcclsRate) {
  NcclChoice c;
  c.wire_factor = 2.0;
  c.bus_bw_bytes_per_s = 50e9;
  // 1e6 ring bytes: 2e6 wire bytes at 200 GB/s = 10 us; 1e6 at 50 GB/s = 20 us.
  EXPECT_NEAR(c.transfer_s(1e6, 200e9), 20e-6, 1e-15);
  // A slow link (40 GB/s): the wire bytes, 50 us.
  EXPECT_NEAR(c.transfer_s(1e6, 40e9), 50e-6, 1e-15);
}

TEST(NcclModel, ChannelsFollowNcclsPerSizeTuning) {
  // enqueue.cc: the communicator's channels, fewer while bytes < channels x threads x
  // threadThreshold. 8 ranks, 24 channels.
  NcclGroup g = a100(OpKind::AllReduce, 8, 1, 231e9);
  g.channels = 24;
  // Simple (512 threads x 64 B = 32 KiB per channel): 1 GB keeps all 24.
  NcclChoice c = nccl_choose(g, 1e9);
  ASSERT_EQ(c.proto, NcclProto::Simple);
  EXPECT_EQ(c.channels, 24);
  // Ring LL: 512 threads x 8 B x 8 ranks = 32 KiB per channel: 64 KiB -> 2 channels,
  // 1 MiB -> 24 (32 would fit, capped), 4 KiB -> 1.
  c = nccl_choose(g, 65536);
  ASSERT_EQ(c.proto, NcclProto::LL);
  EXPECT_EQ(c.channels, 2);
  EXPECT_EQ(nccl_choose(g, 1 << 20).channels, 24);
  EXPECT_EQ(nccl_choose(g, 4096).channels, 1);
  // Unknown channels: 0, and no SM share.
  g.channels = 0;
  EXPECT_EQ(nccl_choose(g, 1e9).channels, 0);
  const SystemSpec sys = find_system("dgx-a100-80gb");
  const CostModel cost(sys, default_calibration(sys.gpu.name));
  EXPECT_EQ(cost.nccl_sm_share(nccl_choose(g, 1e9)), 0.0);
  // The catalog's systems: A100 24 channels over 108 SMs (one node and across nodes); H100
  // 24 over 132 inside a node, 16 across nodes.
  EXPECT_NEAR(cost.nccl_sm_share(cost.nccl_collective(OpKind::AllReduce, 1e9, 8, 1)), 24.0 / 108,
              1e-15);
  EXPECT_NEAR(cost.nccl_sm_share(cost.nccl_collective(OpKind::AllReduce, 1e9, 16, 2)),
              24.0 / 108, 1e-15);
  // DGX H100 with NVLS off (NCCL_NVLS_ENABLE=0): 24 over 132 SMs inside a node, 16 across
  // nodes; with NVLS on, its all-reduce runs NVLS_NCHANNELS_SM90 = 16 CTAs.
  SystemSpec h = find_system("dgx-h100");
  h.nvlink_sharp = false;
  const CostModel hc(h, default_calibration(h.gpu.name));
  EXPECT_NEAR(hc.nccl_sm_share(hc.nccl_collective(OpKind::AllReduce, 1e9, 8, 1)), 24.0 / 132,
              1e-15);
  EXPECT_NEAR(hc.nccl_sm_share(hc.nccl_collective(OpKind::AllReduce, 1e9, 16, 2)), 16.0 / 132,
              1e-15);
  const SystemSpec hn = find_system("dgx-h100");
  const CostModel hnc(hn, default_calibration(hn.gpu.name));
  EXPECT_NEAR(hnc.nccl_sm_share(hnc.nccl_collective(OpKind::AllReduce, 1e9, 8, 1)), 16.0 / 132,
              1e-15);
}

TEST(NcclModel, BadInputThrows) {
  NcclGroup g = a100(OpKind::SendRecv, 2, 1);
  EXPECT_THROW(nccl_choose(g, 1e6), trainsim::InvariantError);
  g = a100(OpKind::AllReduce, 1, 1);
  EXPECT_THROW(nccl_choose(g, 1e6), trainsim::InvariantError);
  g = a100(OpKind::AllReduce, 8, 1, 0);
  EXPECT_THROW(nccl_choose(g, 1e6), trainsim::InvariantError);
}

TEST(NcclModel, CostModelUsesTheSimulatedLinksAndTheCatalogHost) {
  SystemSpec sys = find_system("dgx-h100");
  sys.nvlink_sharp = false;  // the ring and the tree (NVLS: NcclModel.Nvls*)
  const CalibrationProfile prof = default_calibration(sys.gpu.name);
  const CostModel cost(sys, prof);
  // Across nodes the bus bandwidth is the 8 members' NIC paths together (one ring channel
  // per NIC), each min(NIC x efficiency, PCIe Gen5 x16 at the TLP data rate 256/282), or
  // NVLink if that is less.
  const NcclChoice c = cost.nccl_collective(OpKind::AllReduce, 4e9, 16, 2);
  const double nic = std::min(50e9 * prof.network_efficiency, 64e9 * 256.0 / 282.0);
  EXPECT_NEAR(c.bus_bw_bytes_per_s, std::min(8 * nic, 450e9 * prof.nvlink_efficiency), 1e-3);
  // One GPU per node: its own NIC path alone.
  EXPECT_NEAR(cost.nccl_collective(OpKind::AllReduce, 4e9, 4, 4).bus_bw_bytes_per_s, nic, 1e-3);
  // DGX H100 has Intel hosts: 1 us network overhead, so intra-node steps of a multi-node
  // Simple ring cost max(3.4, 3 x 1) = 3.4 us.
  double lat = 0;
  NcclGroup g;
  g.kind = OpKind::AllReduce;
  g.ranks = 16;
  g.nodes = 2;
  g.compute_capability = 90;
  g.net_overhead_s = sys.nccl_net_overhead_s;
  g.bus_bw_bytes_per_s = c.bus_bw_bytes_per_s;
  g.simple_base_latency_s = prof.nccl_launch_latency_s;
  g.simple_nvlink_step_s = prof.nccl_step_latency_intra_node_s;
  g.simple_net_step_s = prof.nccl_step_latency_inter_node_s;
  nccl_predicted_time_s(g, NcclAlgo::Ring, NcclProto::Simple, 0, &lat);
  EXPECT_NEAR(lat, (8.4 + 28 * 3.4 + 2 * 14.0) * kUs, 1e-12);
}

/// A DGX H100 group as CostModel builds it: NVLink SHARP, NCCL's topology 18 x 20.6 GB/s NVLink
/// and 50 GB/s NDR NICs.
NcclGroup h100(OpKind kind, std::int64_t ranks, std::int64_t nodes,
               NcclVersion v = NcclVersion::V2_29_7) {
  NcclGroup g;
  g.kind = kind;
  g.version = v;
  g.ranks = ranks;
  g.nodes = nodes;
  g.compute_capability = 90;
  g.net_overhead_s = 1 * kUs;
  g.bus_bw_bytes_per_s = 369e9;
  g.simple_base_latency_s = 8.4 * kUs;
  g.simple_nvlink_step_s = 3.4 * kUs;
  g.simple_net_step_s = 14.0 * kUs;
  g.nvls = true;
  g.topo_nvlink_bw_gbs = 18 * 20.6;
  g.topo_nic_bw_gbs = 50;
  return g;
}

TEST(NcclModel, NvlsGraphIsNcclsSearchInClosedForm) {
  // 8 GPUs on one node: every GPU heads one of 8 channels, its NVLink carries 9 x bw: 60 and
  // 50 GB/s do not fit 370.8 (540, 450), 40 does (360).
  NvlsGraph g8 = nvls_graph(h100(OpKind::AllReduce, 8, 1));
  EXPECT_EQ(g8.channels, 8);
  EXPECT_DOUBLE_EQ(g8.bw_intra_gbs, 40.0);
  // 4 GPUs: 5 x 60 = 300 fits.
  NvlsGraph g4 = nvls_graph(h100(OpKind::AllReduce, 4, 1));
  EXPECT_EQ(g4.channels, 4);
  EXPECT_DOUBLE_EQ(g4.bw_intra_gbs, 60.0);
  // Across nodes the inter-node array (48, 45, 42, 40, ...): 40 by NVLink; v2.29.7 then
  // raises bwInter alone to the NIC's 48 (< 2 x 40, <= 50); v2.18.5 keeps 40.
  NvlsGraph m = nvls_graph(h100(OpKind::AllReduce, 16, 2));
  EXPECT_EQ(m.channels, 8);
  EXPECT_DOUBLE_EQ(m.bw_intra_gbs, 40.0);
  EXPECT_DOUBLE_EQ(m.bw_inter_gbs, 48.0);
  NvlsGraph m18 = nvls_graph(h100(OpKind::AllReduce, 16, 2, NcclVersion::V2_18_5));
  EXPECT_DOUBLE_EQ(m18.bw_inter_gbs, 40.0);
  // One GPU per node: no NVLS graph.
  EXPECT_EQ(nvls_graph(h100(OpKind::AllReduce, 4, 4)).channels, 0);
}

TEST(NcclModel, NvlsAllReduceFollowsTuningCc) {
  // v2.29.7, 8 GPUs: bus = 8 x 40 x 0.85 x 7/8 x 2 = 476 GB/s; algorithm = bus x 8 / 14;
  // latency hwLatencies[NVLINK][NVLS][Simple] = 25 us.
  const double bytes = 1 << 30;
  double lat = 0, bus = 0;
  const NcclGroup g = h100(OpKind::AllReduce, 8, 1);
  const double t = nccl_predicted_time_s(g, NcclAlgo::Nvls, NcclProto::Simple, bytes, &lat, &bus);
  const double alg = 8 * 40 * 0.85 * 7.0 / 8 * 2 * 8 / 14;
  EXPECT_NEAR(lat, 25 * kUs, 1e-12);
  EXPECT_NEAR(t, 25 * kUs + bytes / (alg * 1e9), 1e-12);
  EXPECT_NEAR(bus, 476e9, 1e3);  // nccl-tests' bus bandwidth of that algorithm bandwidth
  // Simple only; never on A100 or with NVLS off.
  EXPECT_LT(nccl_predicted_time_s(g, NcclAlgo::Nvls, NcclProto::LL, bytes), 0);
  NcclGroup off = g;
  off.nvls = false;
  EXPECT_LT(nccl_predicted_time_s(off, NcclAlgo::Nvls, NcclProto::Simple, bytes), 0);
  // Large all-reduces run NVLS (ring: 369 GB/s bus), small ones the ring's LL.
  EXPECT_EQ(nccl_choose(g, bytes).algo, NcclAlgo::Nvls);
  EXPECT_EQ(nccl_choose(g, 64 * 1024).algo, NcclAlgo::Ring);
  EXPECT_EQ(nccl_choose(off, bytes).algo, NcclAlgo::Ring);
  // v2.18.5: bus = nChannels x bwIntra = 320, algorithm bandwidth 5/6 of it, 23 us.
  const NcclGroup o = h100(OpKind::AllReduce, 8, 1, NcclVersion::V2_18_5);
  const double t18 = nccl_predicted_time_s(o, NcclAlgo::Nvls, NcclProto::Simple, bytes, &lat);
  EXPECT_NEAR(t18, 23 * kUs + bytes / (320e9 * 5 / 6), 1e-12);
  // All-gather on NVLS: v2.29.7 only, bus x (ppn-1)/ppn unconverted: 8 x 40 x 0.85 x 7/8 x 7/8.
  const NcclGroup ag = h100(OpKind::AllGather, 8, 1);
  EXPECT_NEAR(nccl_predicted_time_s(ag, NcclAlgo::Nvls, NcclProto::Simple, bytes),
              25 * kUs + bytes / (8 * 40 * 0.85 * 7.0 / 8 * 7.0 / 8 * 1e9), 1e-12);
  EXPECT_LT(nccl_predicted_time_s(h100(OpKind::AllGather, 8, 1, NcclVersion::V2_18_5),
                                  NcclAlgo::Nvls, NcclProto::Simple, bytes),
            0);
  // ... where the ring's 8/7 x 369 GB/s beats it.
  EXPECT_EQ(nccl_choose(ag, bytes).algo, NcclAlgo::Ring);
  // NVLS inside one node only (multi-node NVLS needs CollNet).
  EXPECT_LT(nccl_predicted_time_s(h100(OpKind::AllReduce, 16, 2), NcclAlgo::Nvls,
                                  NcclProto::Simple, bytes),
            0);
}

TEST(NcclModel, NvlsTreeAllReduceAcrossNodes) {
  // v2.29.7, 2 nodes: min(intra 40 x 0.85 x 7/8 x 2 = 59.5, inter 48 x 2, perChMaxNVLSTreeBw
  // 57.7) = 57.7 per channel, 8 channels; algorithm = bus x 16 / 30; latency 25 + 2 x 1 x 20.9.
  const double bytes = 4.0 * (1 << 30);
  double lat = 0, bus = 0;
  const NcclGroup g = h100(OpKind::AllReduce, 16, 2);
  const double t =
      nccl_predicted_time_s(g, NcclAlgo::NvlsTree, NcclProto::Simple, bytes, &lat, &bus);
  EXPECT_NEAR(lat, (25 + 2 * 20.9) * kUs, 1e-12);
  EXPECT_NEAR(t, lat + bytes / (8 * 57.7e9 * 16 / 30), 1e-9);
  EXPECT_NEAR(bus, 8 * 57.7e9, 1e3);
  EXPECT_EQ(nccl_choose(g, bytes).algo, NcclAlgo::NvlsTree);
  // 4 nodes: min(59.5, 48, 45.5) = 45.5; latency 25 + 2 x 2 x 20.9.
  const NcclGroup g4 = h100(OpKind::AllReduce, 32, 4);
  EXPECT_NEAR(nccl_predicted_time_s(g4, NcclAlgo::NvlsTree, NcclProto::Simple, bytes, &lat),
              (25 + 4 * 20.9) * kUs + bytes / (8 * 45.5e9 * 32 / 62), 1e-9);
  // v2.18.5, 2 nodes: nChannels x bwIntra x 0.70 x N / (2 (N - 1)) = 320 x 0.7; 23 + 2 x 19 us.
  const NcclGroup o = h100(OpKind::AllReduce, 16, 2, NcclVersion::V2_18_5);
  EXPECT_NEAR(nccl_predicted_time_s(o, NcclAlgo::NvlsTree, NcclProto::Simple, bytes),
              (23 + 38) * kUs + bytes / (320e9 * 0.7), 1e-9);
  // Not on one node, not for all-gather.
  EXPECT_LT(nccl_predicted_time_s(h100(OpKind::AllReduce, 8, 1), NcclAlgo::NvlsTree,
                                  NcclProto::Simple, bytes),
            0);
  EXPECT_LT(nccl_predicted_time_s(h100(OpKind::AllGather, 16, 2), NcclAlgo::NvlsTree,
                                  NcclProto::Simple, bytes),
            0);
}

TEST(NcclModel, NvlsCollectiveIsNcclsChoiceOnNvlsOnly) {
  const SystemSpec h = find_system("dgx-h100");
  const CostModel cost(h, default_calibration(h.gpu.name));
  // 1 GiB all-reduce on one DGX H100: NCCL picks NVLS, and the predicate returns that choice.
  const double gib = double(1 << 30);
  const std::optional<NcclChoice> c = cost.nvls_collective(OpKind::AllReduce, gib, 8, 1);
  ASSERT_TRUE(c.has_value());
  EXPECT_EQ(c->algo, NcclAlgo::Nvls);
  EXPECT_EQ(c->algo, cost.nccl_collective(OpKind::AllReduce, gib, 8, 1).algo);
  // Two nodes: NVLS-Tree is NVLS too.
  const std::optional<NcclChoice> t = cost.nvls_collective(OpKind::AllReduce, 4 * gib, 16, 2);
  ASSERT_TRUE(t.has_value());
  EXPECT_EQ(t->algo, NcclAlgo::NvlsTree);
  // Not a collective NVLS runs (an all-to-all), not one rank, not without NVLink SHARP.
  EXPECT_FALSE(cost.nvls_collective(OpKind::AllToAll, gib, 8, 1).has_value());
  EXPECT_FALSE(cost.nvls_collective(OpKind::AllReduce, gib, 1, 1).has_value());
  SystemSpec off = h;
  off.nvlink_sharp = false;
  const CostModel no_nvls(off, default_calibration(off.gpu.name));
  EXPECT_FALSE(no_nvls.nvls_collective(OpKind::AllReduce, gib, 8, 1).has_value());
}

TEST(NcclModel, NvlsTrafficIsTheSwitchsNotTheRings) {
  NcclChoice c;
  c.algo = NcclAlgo::Nvls;
  // One node of 8: S (k + 1) / k on NVLink (the switch reduces and multicasts).
  NcclTraffic t = nccl_traffic(c, OpKind::AllReduce, 8e6, 8, 1);
  EXPECT_DOUBLE_EQ(t.nvlink_bytes, 9e6);
  EXPECT_DOUBLE_EQ(t.nic_bytes, 0);
  // NVLS-Tree: S / k per NIC on 2 nodes, 2 S / k beyond.
  c.algo = NcclAlgo::NvlsTree;
  EXPECT_DOUBLE_EQ(nccl_traffic(c, OpKind::AllReduce, 8e6, 16, 2).nic_bytes, 1e6);
  EXPECT_DOUBLE_EQ(nccl_traffic(c, OpKind::AllReduce, 8e6, 32, 4).nic_bytes, 2e6);
  // The ring: 2 (n - 1) / n S, (k - 1) / k of it on NVLink and 1 / k on the NIC across nodes.
  c.algo = NcclAlgo::Ring;
  t = nccl_traffic(c, OpKind::AllReduce, 16e6, 16, 2);
  EXPECT_DOUBLE_EQ(t.nvlink_bytes, 30e6 * 7 / 8);
  EXPECT_DOUBLE_EQ(t.nic_bytes, 30e6 / 8);
  // transfer_s: NVLS's own NVLink bytes at the link, or the ring bytes at the bus bandwidth.
  const NcclChoice n = nccl_choose(h100(OpKind::AllReduce, 8, 1), 1 << 30);
  ASSERT_EQ(n.algo, NcclAlgo::Nvls);
  EXPECT_DOUBLE_EQ(n.nvls_nvlink_bytes, double(1 << 30) * 9 / 8);
  const double ring = double(1 << 30) * 14 / 8;
  EXPECT_DOUBLE_EQ(n.transfer_s(ring, 1e15), ring / n.bus_bw_bytes_per_s);
  EXPECT_DOUBLE_EQ(n.transfer_s(ring, 1e9), n.nvls_nvlink_bytes / 1e9);
}

TEST(NcclModel, NvlsLoopChunkIsEnqueueCcs) {
  constexpr double KiB = 1024, MiB = 1024 * KiB, GiB = 1024 * MiB;
  // 16 NVLS channels x 8 heads = 128 concurrent chunks (concurrentOps).
  // v2.29.7 NVLS-Tree, 2 nodes: nvlsChunkSize 128 KiB; 64 MiB is not below 4 x 128 x 128 KiB,
  // so 128 KiB: 16 MiB per iteration, 4 iterations.
  const NcclGroup t2 = h100(OpKind::AllReduce, 16, 2);
  NvlsLoop l = nvls_all_reduce_loop(t2, true, 64 * MiB);
  EXPECT_EQ(l.heads, 8);
  EXPECT_EQ(l.channels, 16);
  EXPECT_DOUBLE_EQ(l.chunk_bytes, 128 * KiB);
  EXPECT_DOUBLE_EQ(l.iteration_bytes, 16 * MiB);
  EXPECT_EQ(l.iterations, 4);
  EXPECT_EQ(nvls_all_reduce_loop(t2, true, GiB).iterations, 64);
  // 16 MiB < 64 MiB: 64 KiB; not below 1 x 128 x 64 KiB = 8 MiB: stays, 2 iterations of 8 MiB.
  l = nvls_all_reduce_loop(t2, true, 16 * MiB);
  EXPECT_DOUBLE_EQ(l.chunk_bytes, 64 * KiB);
  EXPECT_EQ(l.iterations, 2);
  // 4 MiB < 8 MiB: 32 KiB, one iteration covering the whole 4 MiB.
  l = nvls_all_reduce_loop(t2, true, 4 * MiB);
  EXPECT_DOUBLE_EQ(l.chunk_bytes, 32 * KiB);
  EXPECT_DOUBLE_EQ(l.iteration_bytes, 4 * MiB);
  EXPECT_EQ(l.iterations, 1);
  // 4 nodes and more: NCCL_NVLSTREE_MAX_CHUNKSIZE's default 64 KiB, 8 MiB per iteration.
  l = nvls_all_reduce_loop(h100(OpKind::AllReduce, 32, 4), true, GiB);
  EXPECT_DOUBLE_EQ(l.chunk_bytes, 64 * KiB);
  EXPECT_EQ(l.iterations, 128);
  // v2.18.5 NVLS-Tree starts at the 512 KiB Simple step: 4 GiB keeps it (not below 32 x 128 x
  // 512 KiB = 2 GiB), 1 GiB halves once (below 2 GiB, not below 16 x 128 x 256 KiB = 512 MiB).
  const NcclGroup o2 = h100(OpKind::AllReduce, 16, 2, NcclVersion::V2_18_5);
  EXPECT_DOUBLE_EQ(nvls_all_reduce_loop(o2, true, 4 * GiB).chunk_bytes, 512 * KiB);
  EXPECT_DOUBLE_EQ(nvls_all_reduce_loop(o2, true, GiB).chunk_bytes, 256 * KiB);
  // NVLS on one node: 128 KiB at 1 GiB (not below 64 x 128 x 128 KiB = 1 GiB); 64 MiB halves
  // once (not below 8 x 128 x 64 KiB = 64 MiB); 1 MiB down to 16 KiB (below 2 x 128 x 32 KiB).
  const NcclGroup n1 = h100(OpKind::AllReduce, 8, 1);
  EXPECT_DOUBLE_EQ(nvls_all_reduce_loop(n1, false, GiB).chunk_bytes, 128 * KiB);
  l = nvls_all_reduce_loop(n1, false, 64 * MiB);
  EXPECT_DOUBLE_EQ(l.chunk_bytes, 64 * KiB);
  EXPECT_EQ(l.iterations, 8);
  l = nvls_all_reduce_loop(n1, false, MiB);
  EXPECT_DOUBLE_EQ(l.chunk_bytes, 16 * KiB);
  EXPECT_DOUBLE_EQ(l.iteration_bytes, MiB);
  EXPECT_EQ(l.iterations, 1);
  // No NVLS graph (one GPU per node): no loop.
  EXPECT_EQ(nvls_all_reduce_loop(h100(OpKind::AllReduce, 4, 4), true, GiB).heads, 0);
}

TEST(NcclModel, NvlsFillIsTheFirstIterationThroughEveryStage) {
  constexpr double MiB = 1024.0 * 1024, GiB = 1024 * MiB;
  const double nvlink = 369e9, nic = 48e9, alg = 240e9;
  // 2 nodes, 64 MiB: S = 16 MiB. NVLink: scatter and gather 2 x 16 x 7/8 = 28 MiB, three
  // multimem stages (leaf reduce, root reduce-and-broadcast, leaf broadcast) 3 x 2 MiB; the
  // network up and down, 2 MiB per NIC split over the two trees: 1 MiB each way.
  const NcclGroup t2 = h100(OpKind::AllReduce, 16, 2);
  EXPECT_NEAR(nvls_all_reduce_fill_s(t2, true, 64 * MiB, nvlink, nic, alg),
              34 * MiB / nvlink + 2 * MiB / nic - 16 * MiB / alg, 1e-12);
  // 8 nodes, 1 GiB: 64 KiB chunks, S = 8 MiB; depth 3: 2 x 7 MiB + 7 x 1 MiB on NVLink and six
  // hops of S / k = 1 MiB.
  EXPECT_NEAR(nvls_all_reduce_fill_s(h100(OpKind::AllReduce, 64, 8), true, GiB, nvlink, nic, alg),
              21 * MiB / nvlink + 6 * MiB / nic - 8 * MiB / alg, 1e-12);
  // One node, 1 GiB: S = 16 MiB, scatter and gather 28 MiB and the head's reduce-and-multicast
  // 2 MiB; no network.
  const NcclGroup n1 = h100(OpKind::AllReduce, 8, 1);
  EXPECT_NEAR(nvls_all_reduce_fill_s(n1, false, GiB, nvlink, 0, 266e9),
              30 * MiB / nvlink - 16 * MiB / 266e9, 1e-12);
  // Never negative: stages faster than the iteration fill nothing.
  EXPECT_EQ(nvls_all_reduce_fill_s(t2, true, 64 * MiB, 1e15, 1e15, alg), 0.0);
  // No NVLS graph, or no rate: nothing.
  EXPECT_EQ(nvls_all_reduce_fill_s(h100(OpKind::AllReduce, 4, 4), true, GiB, nvlink, nic, alg),
            0.0);
  EXPECT_EQ(nvls_all_reduce_fill_s(t2, true, GiB, nvlink, 0, alg), 0.0);
}

TEST(NcclModel, CostModelAddsTheNvlsFillToTheRunsLatencyNotToNcclsChoice) {
  const SystemSpec h = find_system("dgx-h100");
  const CalibrationProfile prof = default_calibration(h.gpu.name);
  const CostModel cost(h, prof);
  const double bytes = 64.0 * 1024 * 1024;
  const NcclChoice c = cost.nccl_collective(OpKind::AllReduce, bytes, 16, 2);
  ASSERT_EQ(c.algo, NcclAlgo::NvlsTree);
  // The measured NVLS round in place of the table's 25 us, NCCL's 2 x 20.9 us network hops,
  // and the fill at the simulated links' rates: NVLink 450 GB/s and one NIC's path at their
  // efficiencies, the iteration at the bus bandwidth's algorithm bandwidth (16 / 30).
  const double nvlink = 450e9 * prof.nvlink_efficiency;
  const double nic = std::min(50e9 * prof.network_efficiency, 64e9 * 256.0 / 282.0);
  const double alg = c.bus_bw_bytes_per_s * 16 / 30;
  const NcclGroup g = h100(OpKind::AllReduce, 16, 2);
  const double fill = nvls_all_reduce_fill_s(g, true, bytes, nvlink, nic, alg);
  EXPECT_GT(fill, 50 * kUs);
  EXPECT_NEAR(c.latency_s, prof.nccl_nvls_latency_s + 2 * 20.9 * kUs + fill, 1e-12);
  // NCCL's prediction, and so its choice, has no fill.
  EXPECT_NEAR(c.time_s, (25 + 2 * 20.9) * kUs + bytes / alg, 1e-9);
}

// Blackwell (DGX B200) under v2.29.7: the release's Blackwell rows, in closed form.
NcclGroup b200(OpKind kind, std::int64_t ranks, std::int64_t nodes,
               NcclVersion v = NcclVersion::V2_29_7) {
  NcclGroup g = h100(kind, ranks, nodes, v);
  g.compute_capability = 100;
  g.bus_bw_bytes_per_s = 738e9;
  g.topo_nvlink_bw_gbs = 18 * 40.1;  // topo.h SM100_NVLINK_BW
  return g;
}

TEST(NcclModel, BlackwellNvlsGraphUsesTheSm100Speeds) {
  // One node: (8 + 1) x speed <= 721.8: 90 (810) does not fit, 80 (720) does.
  NvlsGraph g8 = nvls_graph(b200(OpKind::AllReduce, 8, 1));
  EXPECT_EQ(g8.channels, 8);
  EXPECT_DOUBLE_EQ(g8.bw_intra_gbs, 80.0);
  // Two nodes: the inter array 96, 80, 48, ...: 96 and 80 exceed the 50 GB/s NIC, 48 fits both.
  NvlsGraph m = nvls_graph(b200(OpKind::AllReduce, 16, 2));
  EXPECT_EQ(m.channels, 8);
  EXPECT_DOUBLE_EQ(m.bw_intra_gbs, 48.0);
  EXPECT_DOUBLE_EQ(m.bw_inter_gbs, 48.0);
  // v2.18.5 predates Blackwell: Hopper's intra array (60 x 9 = 540 <= 721.8).
  EXPECT_DOUBLE_EQ(nvls_graph(b200(OpKind::AllReduce, 8, 1, NcclVersion::V2_18_5)).bw_intra_gbs,
                   60.0);
}

TEST(NcclModel, BlackwellNvlsAllReduceRateLatencyAndChannels) {
  const NcclGroup g = b200(OpKind::AllReduce, 8, 1);
  double lat = 0, bus = 0;
  const double bytes = double(1 << 30);
  const double t = nccl_predicted_time_s(g, NcclAlgo::Nvls, NcclProto::Simple, bytes, &lat, &bus);
  // tuning.cc:291-301: 8 channels x min(80 x nvlsEfficiency[Blackwell] 0.74 x 7/8 x 2 = 103.6,
  // bwInter 90 (search.cc's second pass: 80 -> 90, the top of the array)) = 720 GB/s bus;
  // algorithm bandwidth x 8 / 14; hwLatencies NVLINK NVLS 25 us.
  const double bus_gbs = 8 * 90.0;
  EXPECT_DOUBLE_EQ(nvls_graph(g).bw_inter_gbs, 90.0);
  EXPECT_NEAR(bus, bus_gbs * 1e9, 1e-3);
  EXPECT_NEAR(lat, 25 * kUs, 1e-15);
  EXPECT_NEAR(t, 25 * kUs + bytes / (bus_gbs * 8.0 / 14.0 * 1e9), 1e-12);
  // At 1 GiB the ring's 738 GB/s bus (this group's simulated NVLink) beats 720 (NCCL's own ring
  // estimate is its ring graph's 8 x 90 = 720, a tie NVLS's 25 us latency wins); at 64 MiB
  // NVLS's latency wins here too: 25 + 64 MiB x 14/8 / 720 < 8.4 + 14 x 3.4 + 64 MiB x 14/8 / 738 us.
  EXPECT_EQ(nccl_choose(g, bytes).algo, NcclAlgo::Ring);
  EXPECT_EQ(nccl_choose(g, 64.0 * (1 << 20)).algo, NcclAlgo::Nvls);
  // nvls.cc: NVLS_NCHANNELS_SM100_NVL 24 in one node, NVLS_NCHANNELS_SM100 32 across nodes,
  // SM90's 16 under v2.18.5.
  EXPECT_EQ(nccl_choose(g, 64.0 * (1 << 20)).channels, 24);
  EXPECT_EQ(nvls_all_reduce_loop(b200(OpKind::AllReduce, 16, 2), true, bytes).channels, 32);
  EXPECT_EQ(nvls_all_reduce_loop(b200(OpKind::AllReduce, 8, 1, NcclVersion::V2_18_5), false, bytes)
                .channels,
            16);
  // Buffers: 24 channels x 2 x 128 KiB x 8 steps x 8 heads.
  EXPECT_EQ(nccl_nvls_buffer_bytes(NcclVersion::V2_29_7, 8, 100, false),
            std::int64_t(24) * 2 * 128 * 1024 * 8 * 8);
}

TEST(NcclModel, BlackwellNvlsTreeAndLlCaps) {
  // Two nodes: min(48 x 0.74 x 7/8 x 2, 48 x 2, perChMaxNVLSTreeBws[Blackwell][N2] 96) = 62.16
  // per channel, 8 channels.
  double bus = 0;
  nccl_predicted_time_s(b200(OpKind::AllReduce, 16, 2), NcclAlgo::NvlsTree, NcclProto::Simple,
                        double(1 << 30), nullptr, &bus);
  const double per_ch = 48 * 0.74 * 7.0 / 8.0 * 2;
  // Reported as nccl-tests' bus bandwidth: alg = bus x 16 / 30, x 30 / 16 again.
  EXPECT_NEAR(bus, 8 * per_ch * 1e9, 1e-3);
  // tuning.cc:596 (v2.29.7): on Blackwell with an x86 host NVLS-Tree takes the tree's size
  // correction (Simple) below 1 GiB: x 0.8 at 64 MiB (log2(2^26 / 64) = 20), x 0.9 at 512 MiB;
  // none at 1 GiB, none on an Arm host (Grace), none on Hopper.
  const double mib64 = 64.0 * (1 << 20);
  double lat = 0;
  const double t64 = nccl_predicted_time_s(b200(OpKind::AllReduce, 16, 2), NcclAlgo::NvlsTree,
                                           NcclProto::Simple, mib64, &lat, &bus);
  EXPECT_NEAR(bus, 8 * per_ch * 0.8 * 1e9, 1e-3);
  EXPECT_NEAR(t64, lat + mib64 / (8 * per_ch * 0.8 * 1e9 * 16 / 30), 1e-12);
  nccl_predicted_time_s(b200(OpKind::AllReduce, 16, 2), NcclAlgo::NvlsTree, NcclProto::Simple,
                        512.0 * (1 << 20), nullptr, &bus);
  EXPECT_NEAR(bus, 8 * per_ch * 0.9 * 1e9, 1e-3);
  NcclGroup arm = b200(OpKind::AllReduce, 16, 2);
  arm.arm_cpu = true;
  nccl_predicted_time_s(arm, NcclAlgo::NvlsTree, NcclProto::Simple, mib64, nullptr, &bus);
  EXPECT_NEAR(bus, 8 * per_ch * 1e9, 1e-3);
  nccl_predicted_time_s(h100(OpKind::AllReduce, 16, 2), NcclAlgo::NvlsTree, NcclProto::Simple,
                        mib64, nullptr, &bus);
  EXPECT_NEAR(bus, 8 * 57.7e9, 1e-3);
  // Ring LL on one node: min(llMaxBws[Blackwell][N1] 2 x 141, bus x 0.5) = 282 with a 738 bus.
  nccl_predicted_time_s(b200(OpKind::AllGather, 8, 1), NcclAlgo::Ring, NcclProto::LL,
                        double(1 << 20), nullptr, &bus);
  EXPECT_NEAR(bus, 282e9, 1e-3);
}

// Multi-node NVLink (GB200 NVL72): NCCL sees one NVLink domain as one node (nodes = domains).
TEST(NcclModel, NvlsOverASeventyTwoGpuNvlinkDomain) {
  const NcclGroup g = b200(OpKind::AllReduce, 72, 1);
  // search.cc:1065-1073: min(NCCL_MAX_NVLS_ARITY 32, 72) channels, all of them on one node; a
  // head carries 33 x speed: 24 (792) does not fit 721.8, 20 (660) does. Second pass: bwInter
  // 20 -> 24 -> 30 -> 40 (= 2 x 20).
  const NvlsGraph graph = nvls_graph(g);
  EXPECT_EQ(graph.channels, 32);
  EXPECT_DOUBLE_EQ(graph.bw_intra_gbs, 20.0);
  EXPECT_DOUBLE_EQ(graph.bw_inter_gbs, 40.0);
  // tuning.cc: 32 x min(20 x 0.74 x 31/32 x 2 = 28.675, 40) = 917.6 GB/s bus; algorithm x 72/142.
  const double bytes = double(1 << 30);
  double lat = 0, bus = 0;
  const double t = nccl_predicted_time_s(g, NcclAlgo::Nvls, NcclProto::Simple, bytes, &lat, &bus);
  const double bus_gbs = 32 * 20 * 0.74 * 31.0 / 32.0 * 2;
  EXPECT_NEAR(bus, bus_gbs * 1e9, 1e-2);
  EXPECT_NEAR(t, 25 * kUs + bytes / (bus_gbs * 72.0 / 142.0 * 1e9), 1e-12);
  // NCCL picks it (the ring: 142 steps of latency and at most the 738 GB/s bus); 24 CTAs (one
  // clique: NVLS_NCHANNELS_SM100_NVL), 32 heads.
  const NcclChoice c = nccl_choose(g, bytes);
  EXPECT_EQ(c.algo, NcclAlgo::Nvls);
  EXPECT_EQ(c.channels, 24);
  EXPECT_EQ(c.nvls_heads, 32);
  EXPECT_EQ(nccl_choose(g, 1 << 20).algo, NcclAlgo::Nvls);
  // A head's NVLink bytes: S x 33 / 32.
  EXPECT_NEAR(c.nvls_nvlink_bytes, bytes * 33 / 32, 1.0);
  // Buffers: 24 channels x 2 x 128 KiB x 8 steps x 32 heads.
  EXPECT_EQ(nccl_nvls_buffer_bytes(NcclVersion::V2_29_7, 72, 100, false),
            std::int64_t(24) * 2 * 128 * 1024 * 8 * 32);
  // enqueue.cc:1914: no NVLS all-gather / reduce-scatter beyond 32 local ranks; at 32 there is.
  EXPECT_LT(nccl_predicted_time_s(b200(OpKind::AllGather, 72, 1), NcclAlgo::Nvls,
                                  NcclProto::Simple, bytes),
            0);
  EXPECT_GT(nccl_predicted_time_s(b200(OpKind::ReduceScatter, 32, 1), NcclAlgo::Nvls,
                                  NcclProto::Simple, bytes),
            0);
  // v2.18.5 (no MNNVL, NCCL_MAX_NVLS_ARITY 8): no NVLS over more than 8 GPUs of a node.
  EXPECT_EQ(nvls_graph(b200(OpKind::AllReduce, 72, 1, NcclVersion::V2_18_5)).channels, 0);
  // 16 GPUs (4 trays): 17 x 40 = 680 fits; bwInter 40 -> 80; bus 16 x 40 x 0.74 x 15/16 x 2.
  const NvlsGraph g16 = nvls_graph(b200(OpKind::AllReduce, 16, 1));
  EXPECT_EQ(g16.channels, 16);
  EXPECT_DOUBLE_EQ(g16.bw_intra_gbs, 40.0);
  EXPECT_DOUBLE_EQ(g16.bw_inter_gbs, 80.0);
}

TEST(NcclModel, NvlsTreeBetweenNvlinkDomains) {
  // Two NVL72 domains: 32 heads (NICs: one per GPU, 72 per domain), the inter-node array's
  // 20 (33 x 22 = 726 > 721.8), bwInter raised to 40 (<= the 50 GB/s NIC); tuning.cc:
  // min(28.675, 40 x 2, perChMaxNVLSTreeBws[Blackwell][N2] 96) = 28.675; latency 25 + 2 x 20.9.
  NcclGroup g = b200(OpKind::AllReduce, 144, 2);
  g.nic_heads_per_node = 72;
  const NvlsGraph graph = nvls_graph(g);
  EXPECT_EQ(graph.channels, 32);
  EXPECT_DOUBLE_EQ(graph.bw_intra_gbs, 20.0);
  EXPECT_DOUBLE_EQ(graph.bw_inter_gbs, 40.0);
  const double bytes = double(1 << 30);
  double lat = 0, bus = 0;
  const double t = nccl_predicted_time_s(g, NcclAlgo::NvlsTree, NcclProto::Simple, bytes, &lat, &bus);
  const double bus_gbs = 32 * 20 * 0.74 * 31.0 / 32.0 * 2;
  EXPECT_NEAR(lat, (25 + 2 * 20.9) * kUs, 1e-12);
  EXPECT_NEAR(t, lat + bytes / (bus_gbs * 144.0 / 286.0 * 1e9), 1e-12);
  const NcclChoice c = nccl_choose(g, bytes);
  EXPECT_EQ(c.algo, NcclAlgo::NvlsTree);
  EXPECT_EQ(c.channels, 32);  // NVLS_NCHANNELS_SM100: the communicator spans cliques
}

TEST(NcclModel, SharedNicsHeadFewerNvlsTreeChannels) {
  // Two H100 nodes with four NICs each, every NIC shared by two GPUs: 4 heads (one per NIC);
  // 5 x 48 = 240 fits 370.8 and 48 the 50 GB/s NIC; min(48 x 0.85 x 3/4 x 2 = 61.2, 48 x 2,
  // perChMaxNVLSTreeBws[Hopper][N2] 57.7) = 57.7; bus 4 x 57.7.
  NcclGroup g = h100(OpKind::AllReduce, 16, 2);
  g.nic_heads_per_node = 4;
  const NvlsGraph graph = nvls_graph(g);
  EXPECT_EQ(graph.channels, 4);
  EXPECT_DOUBLE_EQ(graph.bw_intra_gbs, 48.0);
  double bus = 0;
  nccl_predicted_time_s(g, NcclAlgo::NvlsTree, NcclProto::Simple, double(1 << 30), nullptr, &bus);
  EXPECT_NEAR(bus, 4 * 57.7e9, 1e-2);
  // ... below the ring's 369 GB/s bus here, so NCCL runs the ring or the tree.
  EXPECT_NE(nccl_choose(g, double(1 << 30)).algo, NcclAlgo::NvlsTree);
  // Run as NVLS-Tree anyway, a head's NIC carries S / 4 on two nodes.
  NcclChoice c;
  c.algo = NcclAlgo::NvlsTree;
  c.nvls_heads = 4;
  EXPECT_NEAR(nccl_traffic(c, OpKind::AllReduce, double(1 << 30), 16, 2).nic_bytes,
              double(1 << 30) / 4, 1.0);
}

TEST(NcclModel, NvlsSingleNodeBwInterBindsAtTheTopOfTheArray) {
  // H100, 4 GPUs: 5 x 60 = 300 fits at the array's top, so the second pass has nothing to raise
  // (bwInter 60): min(60 x 0.85 x 3/4 x 2 = 76.5, 60) = 60 per channel.
  const NcclGroup g = h100(OpKind::AllReduce, 4, 1);
  EXPECT_DOUBLE_EQ(nvls_graph(g).bw_inter_gbs, 60.0);
  double bus = 0;
  nccl_predicted_time_s(g, NcclAlgo::Nvls, NcclProto::Simple, double(1 << 30), nullptr, &bus);
  EXPECT_NEAR(bus, 4 * 60e9, 1e-2);
  // H100, 8 GPUs: bwInter 40 -> 60 does not bind 59.5 (NvlsAllReduceFollowsTuningCc).
  EXPECT_DOUBLE_EQ(nvls_graph(h100(OpKind::AllReduce, 8, 1)).bw_inter_gbs, 60.0);
}

TEST(NcclModel, NetworkMessageLatencyJoinsEveryNetworkStep) {
  // latencyInter (a RoCE fabric's message latency) joins each inter-node step: twice for
  // Simple. A 2-node ring all-reduce of 16 ranks has 2 (2 - 1) = 2 network steps.
  NcclGroup g = h100(OpKind::AllReduce, 16, 2);
  double lat0 = 0, lat1 = 0;
  nccl_predicted_time_s(g, NcclAlgo::Ring, NcclProto::Simple, 0, &lat0);
  g.net_latency_inter_s = 1 * kUs;
  nccl_predicted_time_s(g, NcclAlgo::Ring, NcclProto::Simple, 0, &lat1);
  EXPECT_NEAR(lat1 - lat0, 2 * 2 * kUs, 1e-12);
  nccl_predicted_time_s(g, NcclAlgo::Ring, NcclProto::LL, 0, &lat1);
  g.net_latency_inter_s = 0;
  nccl_predicted_time_s(g, NcclAlgo::Ring, NcclProto::LL, 0, &lat0);
  EXPECT_NEAR(lat1 - lat0, 2 * 1 * kUs, 1e-12);
}

}  // namespace
}  // namespace trainsim
