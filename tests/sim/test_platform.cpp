// Tests of sim/platform: routes (links, directions, latency, bottleneck) written out by hand
// from the DGX A100 description in ../shared/ground-truth/hardware.md, D-mod-k fat-tree
// routing, and SimGrid flows on the built platform: an uncontended flow takes exactly
// S / bottleneck, flows sharing a link split it equally whatever their route lengths.
#include "sim/platform.h"

#include <gtest/gtest.h>

#include <cstring>
#include <set>
#include <string>

#include <simgrid/s4u/Actor.hpp>
#include <simgrid/s4u/Comm.hpp>
#include <simgrid/s4u/Engine.hpp>

#include "models/hardware/calibration.h"
#include "tests/support/platform_fixture.h"
#include "sim/isolate.h"

namespace trainsim::sim {
namespace {

struct Fixture : test_support::PlatformFixture {
  Fixture() : PlatformFixture("dgx-a100-80gb") {}
};

using test_support::link_names;

TEST(PlatformModel, IntraNodeRouteIsTwoNvlinkPorts) {
  Fixture f;
  PlatformModel p(f.system, 2, 8, f.cost);
  const Route& r = p.route(Endpoint::gpu(9), Endpoint::gpu(14));  // node 1, GPU 1 -> GPU 6
  EXPECT_EQ(link_names(p, r), (std::vector<std::string>{"n1-gpu1-nvlink:up", "n1-gpu6-nvlink:down"}));
  EXPECT_DOUBLE_EQ(r.latency_s, f.system.nvlink_latency_s);
  // A100: 600 GB/s both directions -> 300 GB/s per direction, times NCCL's achieved fraction.
  EXPECT_DOUBLE_EQ(r.bottleneck_bw_bytes_per_s, 300e9 * f.profile.nvlink_efficiency);
}

TEST(PlatformModel, HostCopiesCrossGpuLinkAndSwitchUplink) {
  Fixture f;
  PlatformModel p(f.system, 1, 8, f.cost);
  // GPU 5 sits on PCIe switch 2 (two GPUs per switch).
  const Route& h2d = p.route(Endpoint::cpu(0), Endpoint::gpu(5));
  EXPECT_EQ(link_names(p, h2d), (std::vector<std::string>{"n0-pcisw2-uplink:down", "n0-gpu5-pcie:down"}));
  const Route& d2h = p.route(Endpoint::gpu(5), Endpoint::cpu(0));
  EXPECT_EQ(link_names(p, d2h), (std::vector<std::string>{"n0-gpu5-pcie:up", "n0-pcisw2-uplink:up"}));
  EXPECT_DOUBLE_EQ(h2d.latency_s, f.system.pcie_latency_s);
  EXPECT_DOUBLE_EQ(h2d.bottleneck_bw_bytes_per_s, 32e9 * f.profile.pcie_efficiency);
  EXPECT_THROW(p.route(Endpoint::cpu(0), Endpoint::cpu(0)), trainsim::InvariantError);
}

TEST(PlatformModel, SameRailNeighboursMeetAtTheirLeaf) {
  Fixture f;
  PlatformModel p(f.system, 4, 8, f.cost);
  const Route& r = p.route(Endpoint::gpu(2), Endpoint::gpu(26));  // node 0 GPU 2 -> node 3 GPU 2
  EXPECT_EQ(link_names(p, r), (std::vector<std::string>{"n0-gpu2-pcie:up", "n0-nic2-pcie:down",
                                                   "n0-nic2-leaf:up", "n3-nic2-leaf:down",
                                                   "n3-nic2-pcie:up", "n3-gpu2-pcie:down"}));
  // Two PCIe hops per side, one leaf switch.
  EXPECT_DOUBLE_EQ(r.latency_s, 2 * f.system.pcie_latency_s + f.system.switch_latency_s);
  const double nic = 25e9 * f.profile.network_efficiency;  // HDR 200 Gb/s
  const double pcie = 32e9 * f.profile.pcie_efficiency;
  EXPECT_DOUBLE_EQ(r.bottleneck_bw_bytes_per_s, std::min(nic, pcie));
}

// A system file's node.gpu_nic: four NICs per node, NIC k shared by GPUs k and k + 4, so GPU 4
// leaves its node on NIC 0 (consecutive sharing would put it on NIC 2), and GPUs 0 and 4 share
// that NIC's links.
TEST(PlatformModel, StatedGpuNicSharesTheNicsLinks) {
  Fixture f;
  f.system.nics_per_node = 4;
  f.system.gpu_nic = {0, 1, 2, 3, 0, 1, 2, 3};
  PlatformModel p(f.system, 2, 8, f.cost);
  const Route& r = p.route(Endpoint::gpu(4), Endpoint::gpu(12));  // node 0 GPU 4 -> node 1 GPU 4
  EXPECT_EQ(link_names(p, r), (std::vector<std::string>{"n0-gpu4-pcie:up", "n0-nic0-pcie:down",
                                                   "n0-nic0-leaf:up", "n1-nic0-leaf:down",
                                                   "n1-nic0-pcie:up", "n1-gpu4-pcie:down"}));
  const Route& r0 = p.route(Endpoint::gpu(0), Endpoint::gpu(8));
  EXPECT_EQ(r0.hops[2].link, r.hops[2].link);  // the same NIC-leaf cable
  f.system.gpu_nic.clear();
  PlatformModel q(f.system, 2, 8, f.cost);
  EXPECT_EQ(link_names(q, q.route(Endpoint::gpu(4), Endpoint::gpu(12)))[1], "n0-nic2-pcie:down");
}

TEST(PlatformModel, FatTreeLevelsAndDModK) {
  Fixture f;  // radix 40: 20 NICs per leaf, 20 leaves per pod, 3 levels
  PlatformModel p(f.system, 384, 8, f.cost);
  // Nodes 0 and 19 share the rail-0 leaf; node 20 is in the next leaf group (same pod: 8 rails
  // x 2 groups = 16 leaves <= 20), node 60 (leaf group 3 -> leaf 24) in pod 1.
  EXPECT_EQ(p.route(Endpoint::gpu(0), Endpoint::gpu(19 * 8)).hops.size(), 6u);
  const Route& spine = p.route(Endpoint::gpu(0), Endpoint::gpu(20 * 8));
  EXPECT_EQ(spine.hops.size(), 8u);
  EXPECT_DOUBLE_EQ(spine.latency_s, 2 * f.system.pcie_latency_s + 3 * f.system.switch_latency_s);
  const Route& core = p.route(Endpoint::gpu(0), Endpoint::gpu(60 * 8));
  EXPECT_EQ(core.hops.size(), 10u);
  EXPECT_DOUBLE_EQ(core.latency_s, 2 * f.system.pcie_latency_s + 5 * f.system.switch_latency_s);
  // Cross-rail traffic climbs to the spine too (rails meet above the leaves).
  EXPECT_EQ(p.route(Endpoint::gpu(0), Endpoint::gpu(8 + 3)).hops.size(), 8u);

  // D-mod-k: flows from one leaf to different destinations of another leaf take different
  // spine uplinks (the destination index picks the up-port); flows to one destination share.
  auto uplink = [&](std::uint32_t src, std::uint32_t dst) {
    const Route& r = p.route(Endpoint::gpu(src), Endpoint::gpu(dst));
    return p.links()[r.hops[3].link].name;
  };
  std::set<std::string> ups;
  for (std::uint32_t k = 0; k < 20; ++k) ups.insert(uplink(0, (20 + k) * 8));
  EXPECT_EQ(ups.size(), 20u);
  EXPECT_EQ(uplink(0, 25 * 8), uplink(8, 25 * 8));  // nodes 0 and 1 share the rail-0 leaf
}

// Not rail-optimized (docs/cluster.md): a node's 8 NICs are consecutive ports of one leaf, so
// a radix-40 leaf (20 ports down) holds the NICs of nodes 0-1 and half of node 2: GPU 0 of node
// 1 is a leaf hop from GPU 0 of node 0 (as on rails), GPU 0 of node 3 (ports 24-31, leaf 1)
// crosses the spine although a rail leaf would hold both.
TEST(PlatformModel, NotRailOptimizedNodesShareLeavesAndSameRailCrossesTheSpine) {
  Fixture f;
  SystemSpec flat = f.system;
  flat.rail_optimized = false;
  PlatformModel rails(f.system, 4, 8, f.cost);
  PlatformModel p(flat, 4, 8, f.cost);
  EXPECT_EQ(p.fabric_endpoint(1, 0), 8u);
  EXPECT_EQ(p.fabric_endpoint(3, 0), 24u);
  EXPECT_EQ(p.route(Endpoint::gpu(0), Endpoint::gpu(8)).hops.size(), 6u);
  EXPECT_EQ(p.route(Endpoint::gpu(0), Endpoint::gpu(24)).hops.size(), 8u);   // spine
  EXPECT_EQ(rails.route(Endpoint::gpu(0), Endpoint::gpu(24)).hops.size(), 6u);  // rail leaf
  // Cross-rail inside one leaf: GPU 0 -> GPU 3 of node 1 stays on the leaf (rails: spine).
  EXPECT_EQ(p.route(Endpoint::gpu(0), Endpoint::gpu(8 + 3)).hops.size(), 6u);
  EXPECT_EQ(rails.route(Endpoint::gpu(0), Endpoint::gpu(8 + 3)).hops.size(), 8u);
}

// An oversubscribed leaf tier (down:up = 3): a radix-40 leaf gives floor(40 x 3 / 4) = 30
// ports to NICs and 10 to spines, so 30 nodes share a rail leaf and D-mod-k folds the 30
// destinations of another leaf onto its 10 uplinks.
TEST(PlatformModel, OversubscribedLeafHasMoreNicsAndFewerUplinks) {
  Fixture f;
  SystemSpec over = f.system;
  over.oversubscription = {3.0, 1.0};
  EXPECT_EQ(fat_tree_down_ports(over, 1), 30);
  EXPECT_EQ(fat_tree_up_ports(over, 1), 10);
  EXPECT_EQ(fat_tree_down_ports(over, 2), 20);  // spine tier at full bisection
  EXPECT_EQ(fat_tree_down_ports(over, 3), 40);  // top level: every port down
  PlatformModel p(over, 90, 8, f.cost);
  EXPECT_EQ(p.route(Endpoint::gpu(0), Endpoint::gpu(29 * 8)).hops.size(), 6u);  // same leaf
  std::set<std::string> ups;
  for (std::uint32_t k = 0; k < 30; ++k) {
    const Route& r = p.route(Endpoint::gpu(0), Endpoint::gpu((30 + k) * 8));
    ASSERT_EQ(r.hops.size(), 8u);
    ups.insert(p.links()[r.hops[3].link].name);
  }
  EXPECT_EQ(ups.size(), 10u);
}

// A RoCE fabric's per-message latency (SystemSpec::fabric_message_latency_s) joins every
// inter-node step of the cost model's own collectives and point-to-point messages, not the
// intra-node ones.
TEST(CostModelFabric, RoceMessageLatencyJoinsEveryInterNodeStep) {
  Fixture f;
  SystemSpec roce = f.system;
  roce.fabric_roce = true;
  roce.fabric_message_latency_s = 2e-6;
  const CostModel c(roce, f.profile);
  EXPECT_NEAR(c.collective_latency_s(OpKind::SendRecv, 2, false) -
                  f.cost.collective_latency_s(OpKind::SendRecv, 2, false),
              2e-6, 1e-15);
  // All-to-all over 16 ranks: one step.
  EXPECT_NEAR(c.collective_latency_s(OpKind::AllToAll, 16, false) -
                  f.cost.collective_latency_s(OpKind::AllToAll, 16, false),
              2e-6, 1e-15);
  EXPECT_EQ(c.collective_latency_s(OpKind::SendRecv, 2, true),
            f.cost.collective_latency_s(OpKind::SendRecv, 2, true));
}

TEST(PlatformModel, ClusterTooLargeForTheFatTreeIsAnInputError) {
  Fixture f;
  SystemSpec small = f.system;
  // Radix 4, 3 levels: leaves of 2 NICs, pods of 2 leaves, top switches of 4 pods: 16 leaf
  // ports as 8 leaves. Rail-optimized, 8 rails take 8 leaves of 2 nodes each: 2 nodes fit,
  // a third needs 8 more leaves.
  small.switch_radix = 4;
  small.fat_tree_levels = 3;
  EXPECT_NO_THROW(PlatformModel(small, 2, 8, f.cost));
  EXPECT_THROW(PlatformModel(small, 3, 8, f.cost), InputError);
  small.fat_tree_levels = 2;  // 4 leaves cannot hold 8 rails
  EXPECT_THROW(PlatformModel(small, 1, 8, f.cost), InputError);
}

TEST(PlatformModel, OnlyRequestedLinksExist) {
  Fixture f;
  PlatformModel p(f.system, 384, 8, f.cost);  // 3072 GPUs
  p.route(Endpoint::gpu(0), Endpoint::gpu(1));
  EXPECT_EQ(p.links().size(), 2u);
  EXPECT_EQ(p.endpoints().size(), 2u);
}

// ---- SimGrid flows on the built platform (each in its own process, like the executor).

struct FlowResult {
  double end_a = 0, end_b = 0;
};

FlowResult run_flows(const std::vector<std::pair<Endpoint, Endpoint>>& flows, double bytes) {
  Fixture f;
  PlatformModel model(f.system, 4, 8, f.cost);
  for (auto& [a, b] : flows) model.route(a, b);
  const std::string out = run_in_child([&](int) {
    std::vector<std::string> args = engine_args(false);
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    int argc = int(argv.size());
    simgrid::s4u::Engine engine(&argc, argv.data());
    SimgridPlatform plat = build_simgrid_platform(model);
    std::vector<double> ends(flows.size(), -1);
    for (std::size_t i = 0; i < flows.size(); ++i) {
      auto* src = plat.host(flows[i].first);
      auto* dst = plat.host(flows[i].second);
      simgrid::s4u::Actor::create("flow" + std::to_string(i), src, [&, i, src, dst] {
        simgrid::s4u::Comm::sendto(src, dst, std::uint64_t(bytes));
        ends[i] = simgrid::s4u::Engine::get_clock();
      });
    }
    engine.run();
    return std::string(reinterpret_cast<const char*>(ends.data()), ends.size() * sizeof(double));
  });
  FlowResult r;
  std::memcpy(&r.end_a, out.data(), sizeof(double));
  if (out.size() >= 2 * sizeof(double)) std::memcpy(&r.end_b, out.data() + sizeof(double), sizeof(double));
  return r;
}

TEST(SimgridPlatform, UncontendedFlowTakesSizeOverBottleneck) {
  Fixture f;
  const double S = 256e6;
  // Inter-node flow: bottleneck = min(NIC x network eff, PCIe x pcie eff); link latencies are
  // paid by the executor, so SimGrid's flow is pure bandwidth.
  const double bw = std::min(25e9 * f.profile.network_efficiency, 32e9 * f.profile.pcie_efficiency);
  const FlowResult r = run_flows({{Endpoint::gpu(0), Endpoint::gpu(8)}}, S);
  EXPECT_NEAR(r.end_a, S / bw, 1e-12);
  const FlowResult nv = run_flows({{Endpoint::gpu(0), Endpoint::gpu(1)}}, S);
  EXPECT_NEAR(nv.end_a, S / (300e9 * f.profile.nvlink_efficiency), 1e-12);
}

TEST(SimgridPlatform, TwoFlowsSharingALinkGetHalfEach) {
  Fixture f;
  const double S = 100e6;
  const double pcie = 32e9 * f.profile.pcie_efficiency;
  // H2D copies to GPUs 0 and 1 share PCIe switch 0's uplink (same bandwidth as a GPU link):
  // each gets half of it.
  const FlowResult r = run_flows({{Endpoint::cpu(0), Endpoint::gpu(0)}, {Endpoint::cpu(0), Endpoint::gpu(1)}}, S);
  EXPECT_NEAR(r.end_a, S / (pcie / 2), 1e-12);
  EXPECT_NEAR(r.end_b, S / (pcie / 2), 1e-12);
  // An H2D copy and an inter-node receive share GPU 8's PCIe link (down direction) although
  // their routes differ in length and latency: still half each (no RTT weighting). The GPU's
  // own link runs at the TLP data rate 256/282 of Gen4 x16 (hardware.h kPcieLinkEfficiency),
  // above the uplink's host-copy rate, so the shared GPU link is the bottleneck of both.
  const double nic = 25e9 * f.profile.network_efficiency;
  const double gpu_link = 32e9 * 256.0 / 282.0;
  const FlowResult m = run_flows({{Endpoint::cpu(1), Endpoint::gpu(8)}, {Endpoint::gpu(0), Endpoint::gpu(8)}}, S);
  ASSERT_LT(gpu_link / 2, nic);
  ASSERT_LT(gpu_link / 2, pcie);
  EXPECT_NEAR(m.end_a, S / (gpu_link / 2), 1e-12);
  EXPECT_NEAR(m.end_b, S / (gpu_link / 2), 1e-12);
  // Opposite directions of a split-duplex link do not interfere.
  const FlowResult d = run_flows({{Endpoint::cpu(0), Endpoint::gpu(0)}, {Endpoint::gpu(0), Endpoint::cpu(0)}}, S);
  EXPECT_NEAR(d.end_a, S / pcie, 1e-12);
  EXPECT_NEAR(d.end_b, S / pcie, 1e-12);
}

TEST(Isolate, ErrorsComeBackWithTheirTypeAndMessage) {
  EXPECT_EQ(run_in_child([](int) { return std::string("hello"); }), "hello");
  try {
    run_in_child([](int) -> std::string { throw InputError("scenario.yaml: field x: bad"); });
    FAIL();
  } catch (const InputError& e) {
    EXPECT_STREQ(e.what(), "scenario.yaml: field x: bad");
  }
  EXPECT_THROW(run_in_child([](int) -> std::string {
                 TRAINSIM_CHECK(1 + 1 == 3, "broken");
                 return "";
               }),
               trainsim::InvariantError);
  try {
    run_in_child([](int) -> std::string {
      std::fprintf(stderr, "about to abort\n");
      std::abort();
    });
    FAIL();
  } catch (const trainsim::SystemError& e) {
    EXPECT_NE(std::string(e.what()).find("about to abort"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("signal"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace trainsim::sim
