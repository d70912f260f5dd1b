// Tests of models/system/collective_flows: a collective as point-to-point flows, without
// SimGrid. Neighbours, byte counts and rates are worked out here from the ring's closed forms
// (nccl-tests doc/PERFORMANCE.md), the hierarchical ring's (k-1)/k and 1/k split, the
// protocols' wire formats (NCCL src/device/prims_ll*.h) and the NVLS traffic formulas of
// models/perf/nccl_model.h.
#include "models/system/collective_flows.h"

#include <gtest/gtest.h>

#include <cmath>
#include <numeric>
#include <set>
#include <stdexcept>

#include "models/hardware/calibration.h"
#include "models/hardware/hardware.h"

namespace trainsim {
namespace {

struct Env {
  SystemSpec system;
  CalibrationProfile profile;
  CostModel cost;
  explicit Env(const std::string& name = "dgx-a100-80gb")
      : system(find_system(name)), profile(default_calibration(system.gpu.name)),
        cost(system, profile) {}
  double nvlink_bw() const { return system.gpu.nvlink_bw_bytes_per_s * profile.nvlink_efficiency; }
};

OpDesc collective(OpKind kind, std::int64_t bytes, std::int64_t size) {
  OpDesc op;
  op.kind = kind;
  op.group = GroupKind::Data;
  op.bytes = bytes;
  op.group_size = size;
  return op;
}

CommGroup group_of(std::vector<RankId> ranks) {
  CommGroup g;
  g.kind = GroupKind::Data;
  g.ranks = std::move(ranks);
  return g;
}

std::vector<RankId> iota_ranks(RankId first, std::size_t count, RankId stride = 1) {
  std::vector<RankId> r(count);
  for (std::size_t i = 0; i < count; ++i) r[i] = first + RankId(i) * stride;
  return r;
}

constexpr std::int64_t kGpn = 8;
constexpr std::int64_t kLarge = std::int64_t(1) << 30;  // 1 GiB: bandwidth-bound, Simple

TEST(CollectiveFlows, TensorParallelRingOfEightOnOneNodeVisitsEveryGpuOnce) {
  Env env;
  const CommGroup g = group_of(iota_ranks(8, 8));  // node 1
  const OpDesc op = collective(OpKind::AllReduce, kLarge, 8);
  std::set<RankId> successors;
  for (RankId r = 8; r < 16; ++r) {
    const CollectiveFlows f = collective_flows(env.cost, op, g, r, kGpn);
    EXPECT_EQ(f.ring.dst, 8 + (r - 8 + 1) % 8);
    EXPECT_EQ(f.ring.pred, 8 + (r - 8 + 7) % 8);
    EXPECT_FALSE(f.has_rail);
    ASSERT_TRUE(f.nccl);
    EXPECT_EQ(f.nccl->algo, NcclAlgo::Ring);  // A100: no NVLS, one node: no tree
    EXPECT_EQ(f.nccl->proto, NcclProto::Simple);
    // All-reduce ring: 2 (n-1)/n S per rank, Simple adds no flags.
    EXPECT_EQ(f.ring.bytes, std::uint64_t(2 * 7 * (kLarge / 8)));
    // Simple ring inside a node: NCCL's bus bandwidth is the achieved NVLink rate.
    EXPECT_DOUBLE_EQ(f.ring.rate_bytes_per_s, env.nvlink_bw());
    EXPECT_DOUBLE_EQ(f.latency_s, f.nccl->latency_s);
    successors.insert(f.ring.dst);
  }
  EXPECT_EQ(successors.size(), 8u);
}

TEST(CollectiveFlows, InterNodeRingSplitsOverTheEightNicRails) {
  Env env;
  // 4 nodes x 8 GPUs, reduce-scatter (a ring; the tree is for all-reduce only).
  const CommGroup g = group_of(iota_ranks(0, 32));
  const OpDesc op = collective(OpKind::ReduceScatter, kLarge, 32);
  const CollectiveFlows f = collective_flows(env.cost, op, g, 10, kGpn);  // node 1, GPU 2
  ASSERT_TRUE(f.has_rail);
  EXPECT_EQ(f.ring.dst, 11u);
  EXPECT_EQ(f.ring.pred, 9u);
  EXPECT_EQ(f.rail.dst, 18u);  // GPU 2 of node 2: the same rail
  EXPECT_EQ(f.rail.pred, 2u);  // GPU 2 of node 0
  ASSERT_TRUE(f.nccl);
  ASSERT_EQ(f.nccl->proto, NcclProto::Simple);
  const double ring_bytes = 31.0 / 32.0 * double(kLarge);
  EXPECT_EQ(f.ring.bytes, std::uint64_t(std::llround(ring_bytes * 7 / 8)));
  EXPECT_EQ(f.rail.bytes, std::uint64_t(std::llround(ring_bytes / 8)));
  // The bus bandwidth split in proportion to the bytes: both flows end together.
  const double bus = f.nccl->bus_bw_bytes_per_s;
  EXPECT_DOUBLE_EQ(f.ring.rate_bytes_per_s, bus * 7 / 8);
  EXPECT_DOUBLE_EQ(f.rail.rate_bytes_per_s, bus / 8);
  // The last node's rail wraps to node 0.
  const CollectiveFlows last = collective_flows(env.cost, op, g, 31, kGpn);
  EXPECT_EQ(last.rail.dst, 7u);
  EXPECT_EQ(last.rail.pred, 23u);
  EXPECT_EQ(last.ring.dst, 24u);
}

TEST(CollectiveFlows, OneMemberPerNodeKeepsTheFlatRingUnevenNodesRunTheFewestMembersRails) {
  Env env;
  // Data parallel across TP=8 nodes: one member per node, the ring crosses nodes directly.
  const CommGroup dp = group_of(iota_ranks(0, 4, 8));
  const CollectiveFlows f = collective_flows(env.cost, collective(OpKind::AllGather, kLarge, 4), dp, 8, kGpn);
  EXPECT_FALSE(f.has_rail);
  EXPECT_EQ(f.ring.dst, 16u);
  EXPECT_EQ(f.ring.pred, 0u);
  EXPECT_EQ(f.ring.bytes, std::uint64_t(3 * (kLarge / 4)));
  // 6 members on node 0, 2 on node 1: not uniform. NCCL keeps the fewest channels of any
  // node's ring graph (c = 2): node 0's ring goes round its 6 members on NVLink, members 0
  // and 1 of each node send 1/c of the ring bytes over their NIC; members 2..5 send none.
  const CommGroup uneven = group_of(iota_ranks(2, 8));
  const OpDesc ag = collective(OpKind::AllGather, kLarge, 8);
  const double ring_bytes = 7.0 / 8.0 * double(kLarge);
  const CollectiveFlows u = collective_flows(env.cost, ag, uneven, 7, kGpn);  // member 5
  EXPECT_FALSE(u.has_rail);
  EXPECT_EQ(u.ring.dst, 2u);  // round node 0, not across to node 1
  EXPECT_EQ(u.ring.bytes, std::uint64_t(std::llround(ring_bytes * 5 / 6)));
  const CollectiveFlows m0 = collective_flows(env.cost, ag, uneven, 2, kGpn);  // member 0
  ASSERT_TRUE(m0.has_rail);
  EXPECT_EQ(m0.rail.dst, 8u);
  EXPECT_EQ(m0.rail.pred, 8u);
  EXPECT_EQ(m0.rail.bytes, std::uint64_t(std::llround(ring_bytes / 2)));
  ASSERT_TRUE(m0.nccl);
  EXPECT_DOUBLE_EQ(m0.rail.rate_bytes_per_s, m0.nccl->bus_bw_bytes_per_s / 2);
  EXPECT_DOUBLE_EQ(m0.ring.rate_bytes_per_s, m0.nccl->bus_bw_bytes_per_s * 5 / 6);
  const CollectiveFlows n1 = collective_flows(env.cost, ag, uneven, 9, kGpn);  // node 1, member 1
  ASSERT_TRUE(n1.has_rail);
  EXPECT_EQ(n1.ring.dst, 8u);
  EXPECT_EQ(n1.rail.dst, 3u);
  EXPECT_EQ(n1.ring.bytes, std::uint64_t(std::llround(ring_bytes / 2)));
}

TEST(CollectiveFlows, SmallMessagesUseLlWithItsFlagsLargeOnesSimple) {
  Env env;
  const CommGroup g = group_of(iota_ranks(0, 8));
  const std::int64_t small = 4096;
  const CollectiveFlows s = collective_flows(env.cost, collective(OpKind::AllReduce, small, 8), g, 0, kGpn);
  ASSERT_TRUE(s.nccl);
  const NcclChoice expect_small = env.cost.nccl_collective(OpKind::AllReduce, double(small), 8, 1);
  EXPECT_EQ(s.nccl->algo, expect_small.algo);
  EXPECT_EQ(s.nccl->proto, NcclProto::LL);  // NCCL's choice for a few KiB on NVLink
  EXPECT_DOUBLE_EQ(s.latency_s, expect_small.latency_s);
  // LL: 16-byte lines of 8 data and 8 flag bytes, twice the payload on the wire.
  EXPECT_EQ(s.ring.bytes, std::uint64_t(std::llround(2.0 * 7 / 8 * small * 2)));
  EXPECT_DOUBLE_EQ(s.ring.rate_bytes_per_s, s.nccl->bus_bw_bytes_per_s * 2);
  const CollectiveFlows l = collective_flows(env.cost, collective(OpKind::AllReduce, kLarge, 8), g, 0, kGpn);
  EXPECT_EQ(l.nccl->proto, NcclProto::Simple);
  EXPECT_EQ(l.nccl->algo, env.cost.nccl_collective(OpKind::AllReduce, double(kLarge), 8, 1).algo);
  EXPECT_GT(s.sm_share, 0.0);
  EXPECT_LE(s.sm_share, 1.0);
}

TEST(CollectiveFlows, NvlsAllReduceMovesItsSwitchTrafficNotTheRings) {
  Env env("dgx-h100");
  const double S = double(kLarge);
  const CommGroup one = group_of(iota_ranks(0, 8));
  const CollectiveFlows f = collective_flows(env.cost, collective(OpKind::AllReduce, kLarge, 8), one, 3, kGpn);
  ASSERT_TRUE(f.nccl);
  ASSERT_EQ(f.nccl->algo, NcclAlgo::Nvls);
  // multimem reads S/k of each of k shards and writes S, plus its own shard each way:
  // S (k+1)/k on NVLink, paced to end when the ring bytes would at NCCL's bus bandwidth.
  const double nvlink = S * 9 / 8;
  const double bw_s = 2.0 * 7 / 8 * S / f.nccl->bus_bw_bytes_per_s;
  EXPECT_EQ(f.ring.bytes, std::uint64_t(std::llround(nvlink)));
  EXPECT_DOUBLE_EQ(f.ring.rate_bytes_per_s, nvlink / bw_s);
  // Two nodes: NVLS-Tree, the node's reduced buffer over its 8 heads' NICs, S/8 each.
  const CommGroup two = group_of(iota_ranks(0, 16));
  const CollectiveFlows t = collective_flows(env.cost, collective(OpKind::AllReduce, kLarge, 16), two, 3, kGpn);
  ASSERT_TRUE(t.nccl);
  ASSERT_EQ(t.nccl->algo, NcclAlgo::NvlsTree);
  ASSERT_TRUE(t.has_rail);
  const double bw2_s = 2.0 * 15 / 16 * S / t.nccl->bus_bw_bytes_per_s;
  EXPECT_EQ(t.ring.bytes, std::uint64_t(std::llround(nvlink)));
  EXPECT_EQ(t.rail.bytes, std::uint64_t(std::llround(S / 8)));
  EXPECT_DOUBLE_EQ(t.rail.rate_bytes_per_s, S / 8 / bw2_s);
  EXPECT_EQ(t.rail.dst, 11u);
}

TEST(CollectiveFlows, FoldedRankEndsNoEarlierThanItsUnboundedFlowsAtTheirRate) {
  Env env;
  const CommGroup g = group_of(iota_ranks(0, 32));
  const CollectiveFlows f =
      collective_flows(env.cost, collective(OpKind::ReduceScatter, kLarge, 32), g, 10, kGpn);
  ASSERT_TRUE(f.has_rail);
  const double ring_s = double(f.ring.bytes) / f.ring.rate_bytes_per_s;
  const double rail_s = double(f.rail.bytes) / f.rail.rate_bytes_per_s;
  auto all = [](RankId) { return true; };
  EXPECT_EQ(folded_min_time_s(f, all), 0.0);  // every flow is a mailbox comm, bounded
  // Only node 1 simulated: the ring's neighbours are, the rail's are not.
  auto node1 = [](RankId r) { return r / 8 == 1; };
  EXPECT_DOUBLE_EQ(folded_min_time_s(f, node1), rail_s);
  // Only the ring's predecessor folded away: its flow into this rank is host-to-host too.
  auto but_pred = [](RankId r) { return r != 9; };
  EXPECT_DOUBLE_EQ(folded_min_time_s(f, but_pred), ring_s);
  // Only rank 10 simulated: both flows are host-to-host, the slower sets the end.
  auto alone = [](RankId r) { return r == 10; };
  EXPECT_DOUBLE_EQ(folded_min_time_s(f, alone), std::max(ring_s, rail_s));
  // All-to-all has no NCCL rate: nothing to pace.
  const CollectiveFlows a =
      collective_flows(env.cost, collective(OpKind::AllToAll, kLarge, 32), g, 10, kGpn);
  EXPECT_EQ(folded_min_time_s(a, alone), 0.0);
}

TEST(CollectiveFlows, AllToAllAcrossNodesSendsTheOtherNodesShareOverTheRail) {
  Env env;
  const CommGroup g = group_of(iota_ranks(0, 16));
  const CollectiveFlows f =
      collective_flows(env.cost, collective(OpKind::AllToAll, kLarge, 16), g, 5, kGpn);
  EXPECT_FALSE(f.nccl);
  ASSERT_TRUE(f.has_rail);
  EXPECT_EQ(f.ring.bytes, std::uint64_t(7 * (kLarge / 16)));  // (k-1)/n on NVLink
  EXPECT_EQ(f.rail.bytes, std::uint64_t(8 * (kLarge / 16)));  // (n-k)/n over the NIC
  EXPECT_DOUBLE_EQ(f.latency_s, env.profile.nccl_launch_latency_s +
                                    env.profile.nccl_step_latency_inter_node_s);  // one step
  EXPECT_EQ(f.ring.rate_bytes_per_s, 0.0);
}

// NCCL's all-to-all is point-to-point (grouped ncclSend / ncclRecv to every peer): each rank
// sends S/n to each peer, over NVLink to its node's and over its own NIC to the others'. A
// 64-rank group split 36 + 28 over two 72-GPU NVLink domains (ranks 36..71 and 72..99): a
// member of the 36 sends 35/64 of S on NVLink and 28/64 over its NIC, a member of the 28
// 27/64 and 36/64; the busiest NIC is the 28's, 36/64 S, not the whole 63/64 S through one
// NIC as the flat ring had it. The NIC flows pair the members listed node by node (L) as
// L[p] -> L[p + 36 mod 64].
TEST(CollectiveFlows, AllToAllOverUnevenNodesSendsEachMembersOffNodeShareOverItsOwnNic) {
  Env env("gb200-nvl72");
  const std::int64_t domain = 72;
  const CommGroup g = group_of(iota_ranks(36, 64));
  const OpDesc op = collective(OpKind::AllToAll, kLarge, 64);
  const CollectiveFlows a = collective_flows(env.cost, op, g, 40, domain);  // L[4], the 36
  ASSERT_TRUE(a.has_rail);
  EXPECT_EQ(a.ring.bytes, std::uint64_t(35 * (kLarge / 64)));
  EXPECT_EQ(a.ring.dst, 41u);
  EXPECT_EQ(a.rail.bytes, std::uint64_t(28 * (kLarge / 64)));
  EXPECT_EQ(a.rail.dst, 76u);   // L[40]: member 4 of the 28
  EXPECT_EQ(a.rail.pred, 68u);  // L[(4 - 36) mod 64] = L[32]: the 36's own member 32
  const CollectiveFlows b = collective_flows(env.cost, op, g, 80, domain);  // L[44], the 28
  ASSERT_TRUE(b.has_rail);
  EXPECT_EQ(b.ring.bytes, std::uint64_t(27 * (kLarge / 64)));
  EXPECT_EQ(b.ring.dst, 81u);
  EXPECT_EQ(b.rail.bytes, std::uint64_t(36 * (kLarge / 64)));
  EXPECT_EQ(b.rail.dst, 52u);   // L[(44 + 36) mod 64] = L[16]
  EXPECT_EQ(b.rail.pred, 44u);  // L[8]
  // The NIC flows are a permutation: every member receives from exactly one, and every
  // member of the 28 sends off its domain.
  std::set<RankId> dsts;
  for (RankId r : g.ranks) {
    const CollectiveFlows f = collective_flows(env.cost, op, g, r, domain);
    ASSERT_TRUE(f.has_rail);
    dsts.insert(f.rail.dst);
    EXPECT_EQ(collective_flows(env.cost, op, g, f.rail.dst, domain).rail.pred, r);
    if (r >= 72) EXPECT_LT(f.rail.dst, 72u);
  }
  EXPECT_EQ(dsts.size(), 64u);
}

TEST(CollectiveFlows, GroupOfOneTakesNoTimeAndARankOutsideItsGroupIsABug) {
  Env env;
  const CollectiveFlows f =
      collective_flows(env.cost, collective(OpKind::AllReduce, 100, 1), group_of({4}), 4, kGpn);
  EXPECT_TRUE(f.zero_time);
  EXPECT_FALSE(f.nccl);
  EXPECT_THROW(collective_flows(env.cost, collective(OpKind::AllReduce, 100, 2), group_of({0, 1}), 2, kGpn),
               std::logic_error);
}

TEST(CollectiveFlows, MessageLatencyIsLaunchPlusOneStepOfTheLinkItCrosses) {
  Env env;
  const double launch = env.profile.nccl_launch_latency_s;
  EXPECT_DOUBLE_EQ(message_latency_s(env.cost, 3, 5, kGpn),
                   launch + env.profile.nccl_step_latency_intra_node_s);
  EXPECT_DOUBLE_EQ(message_latency_s(env.cost, 7, 8, kGpn),
                   launch + env.profile.nccl_step_latency_inter_node_s);
}

TEST(GroupLayout, MembersPerNodeInGroupOrder) {
  const GroupLayout l = group_layout(group_of({17, 1, 16, 0}), kGpn);
  ASSERT_EQ(l.nodes, (std::vector<std::uint32_t>{0, 2}));
  EXPECT_EQ(l.members[0], (std::vector<RankId>{1, 0}));
  EXPECT_EQ(l.members[1], (std::vector<RankId>{17, 16}));
  EXPECT_EQ(l.members_per_node, 2u);
  EXPECT_TRUE(l.hierarchical());
  EXPECT_FALSE(group_layout(group_of({0, 1, 2, 8}), kGpn).hierarchical());
  EXPECT_FALSE(group_layout(group_of({0, 1, 2, 8}), kGpn).rail_ring());  // 1 member on node 1
  const GroupLayout uneven = group_layout(group_of({0, 1, 2, 8, 9}), kGpn);
  EXPECT_FALSE(uneven.hierarchical());
  EXPECT_TRUE(uneven.rail_ring());
  EXPECT_EQ(uneven.rail_channels, 2u);
}

// Megatron-Bridge's GB200 Llama 3.1 405B row (TP 2, FSDP 64, 128 GPUs = 32 trays): rack 0
// holds ranks 0..71, rack 1 ranks 72..127, so the DP group of TP rank 0 (ranks 0, 2, .., 126)
// has 36 members in one domain and 28 in the other. NCCL runs 28 channels across (one per
// member NIC of the smaller side), so by hand a 1,593,868,288-byte FP8 all-gather of one
// layer moves 63/64 of it at the ring's bus bandwidth (NVLink-bound: 28 NICs x 50 GB/s =
// 1.4 TB/s > 900 GB/s), about 2 ms; the flat ring it used to fall back to sent the whole
// 63/64 S through one 50 GB/s NIC (32.9 ms in the trace), 11.9 s of exposed FSDP time.
TEST(CollectiveFlows, Gb200FsdpGroupSplit36And28OverTwoDomainsRuns28Rails) {
  Env env("gb200-nvl72");
  const std::int64_t domain = 72;
  const std::int64_t bytes = 1593868288;
  const OpDesc op = collective(OpKind::AllGather, bytes, 64);
  const CommGroup g = group_of(iota_ranks(0, 64, 2));
  const double ring_bytes = 63.0 / 64.0 * double(bytes);
  const CollectiveFlows f = collective_flows(env.cost, op, g, 0, domain);
  ASSERT_TRUE(f.has_rail);
  ASSERT_TRUE(f.nccl);
  const double w = f.nccl->wire_factor, bus = f.nccl->bus_bw_bytes_per_s;
  EXPECT_EQ(f.ring.dst, 2u);
  EXPECT_EQ(f.ring.pred, 70u);
  EXPECT_EQ(f.rail.dst, 72u);
  EXPECT_EQ(f.rail.bytes, std::uint64_t(std::llround(double(std::llround(ring_bytes / 28)) * w)));
  // Each flow ends when the ring's bytes would at the bus bandwidth; no NIC asked for more
  // than its own rate.
  EXPECT_NEAR(double(f.rail.bytes) / f.rail.rate_bytes_per_s, ring_bytes / bus, 1e-6);
  EXPECT_NEAR(double(f.ring.bytes) / f.ring.rate_bytes_per_s, ring_bytes / bus, 1e-6);
  EXPECT_LE(f.rail.rate_bytes_per_s, env.system.nic_bw_bytes_per_s);
  EXPECT_LT(ring_bytes / bus, 0.005);  // vs 63/64 S / 50 GB/s = 31 ms on one NIC
  // Member 35 of rack 0 (rank 70): no channel leaves through its NIC.
  const CollectiveFlows last = collective_flows(env.cost, op, g, 70, domain);
  EXPECT_FALSE(last.has_rail);
  EXPECT_EQ(last.ring.dst, 0u);
  // Rack 1's last member (rank 126, member 27) still has a rail, to rank 54 of rack 0.
  const CollectiveFlows r1 = collective_flows(env.cost, op, g, 126, domain);
  ASSERT_TRUE(r1.has_rail);
  EXPECT_EQ(r1.rail.dst, 54u);
  EXPECT_EQ(r1.ring.dst, 72u);
}

// GB200 NVL72: the NVLink domain (72 GPUs over 18 trays of 4) is the "node" of the ring. A
// DP ring of 144 ranks over two domains is hierarchical with k = 72: (k-1)/k of the ring bytes
// round the domain on NVLink (across trays), 1/k on the rank's own NIC to the same-position
// rank of the other domain; a ring inside one domain has no rail at all.
TEST(CollectiveFlows, Gb200RingGoesRoundTheWholeNvlinkDomain) {
  Env env("gb200-nvl72");
  const std::int64_t domain = 72;
  const OpDesc op = collective(OpKind::ReduceScatter, kLarge, 144);
  const CommGroup g = group_of(iota_ranks(0, 144));
  const CollectiveFlows f = collective_flows(env.cost, op, g, 5, domain);  // tray 1, GPU 1
  ASSERT_TRUE(f.has_rail);
  EXPECT_EQ(f.ring.dst, 6u);
  EXPECT_EQ(f.rail.dst, 77u);  // rank 5 of the next domain
  ASSERT_TRUE(f.nccl);
  // The bytes on the wire: NCCL's protocol's format (wire_factor: Simple 1, LL128 120/128).
  const double w = f.nccl->wire_factor;
  const double ring_bytes = 143.0 / 144.0 * double(kLarge);
  EXPECT_EQ(f.ring.bytes, std::uint64_t(std::llround(double(std::llround(ring_bytes * 71 / 72)) * w)));
  EXPECT_EQ(f.rail.bytes, std::uint64_t(std::llround(double(std::llround(ring_bytes / 72)) * w)));
  // Rank 3 -> 4 crosses trays but stays in the domain: no rail.
  const OpDesc one = collective(OpKind::ReduceScatter, kLarge, 72);
  const CollectiveFlows in = collective_flows(env.cost, one, group_of(iota_ranks(0, 72)), 3, domain);
  EXPECT_FALSE(in.has_rail);
  EXPECT_EQ(in.ring.dst, 4u);
  ASSERT_TRUE(in.nccl);
  EXPECT_EQ(in.ring.bytes, std::uint64_t(std::llround(double(std::llround(71.0 / 72.0 * double(kLarge))) *
                                                      in.nccl->wire_factor)));
}

}  // namespace
}  // namespace trainsim
