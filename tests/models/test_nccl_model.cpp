// Tests of models/nccl_model: NCCL's algorithm/protocol choice and latency, each expected
// number worked out here from the constants of NVIDIA/nccl v2.29.7 src/graph/tuning.cc.
#include "models/nccl_model.h"

#include <gtest/gtest.h>

#include <cmath>
#include <stdexcept>

#include "models/calibration.h"
#include "models/cost_model.h"
#include "models/hardware.h"

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

TEST(NcclModel, BadInputThrows) {
  NcclGroup g = a100(OpKind::SendRecv, 2, 1);
  EXPECT_THROW(nccl_choose(g, 1e6), std::logic_error);
  g = a100(OpKind::AllReduce, 1, 1);
  EXPECT_THROW(nccl_choose(g, 1e6), std::logic_error);
  g = a100(OpKind::AllReduce, 8, 1, 0);
  EXPECT_THROW(nccl_choose(g, 1e6), std::logic_error);
}

TEST(NcclModel, CostModelUsesTheSimulatedLinksAndTheCatalogHost) {
  const SystemSpec sys = find_system("dgx-h100");
  const CalibrationProfile prof = default_calibration(sys.gpu.name);
  const CostModel cost(sys, prof);
  // Across nodes the bus bandwidth is the GPU's NIC path: min(NIC x efficiency, PCIe Gen5 x16
  // at the TLP data rate 256/282).
  const NcclChoice c = cost.nccl_collective(OpKind::AllReduce, 4e9, 16, 2);
  const double nic = std::min(50e9 * prof.network_efficiency, 64e9 * 256.0 / 282.0);
  EXPECT_NEAR(c.bus_bw_bytes_per_s, std::min(nic, 450e9 * prof.nvlink_efficiency), 1e-3);
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

}  // namespace
}  // namespace trainsim
