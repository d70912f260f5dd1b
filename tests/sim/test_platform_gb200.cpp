// sim/platform on GB200 NVL72 (systems/gb200-nvl72.yaml): GPUs of different compute trays in
// one 72-GPU NVLink domain meet on NVLink (the NVSwitch trays), GPUs of different domains on
// their NICs and the fat tree, and host copies take the Grace socket's NVLink-C2C link, shared
// by its two GPUs. Routes written out by hand from the GB200 NVL72 description.
#include "sim/platform.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "models/hardware/calibration.h"
#include "tests/support/platform_fixture.h"

namespace trainsim::sim {
namespace {

struct Fixture : test_support::PlatformFixture {
  Fixture() : PlatformFixture("gb200-nvl72") {}
};

using test_support::link_names;

TEST(PlatformGb200, TraysOfOneDomainMeetOnNvlink) {
  Fixture f;
  PlatformModel p(f.system, 36, 4, f.cost, 72);  // two racks of 18 trays
  // Tray 0 GPU 1 -> tray 17 GPU 3: the same domain (ranks 0..71).
  const Route& r = p.route(Endpoint::gpu(1), Endpoint::gpu(71));
  EXPECT_EQ(link_names(p, r), (std::vector<std::string>{"n0-gpu1-nvlink:up", "n17-gpu3-nvlink:down"}));
  EXPECT_DOUBLE_EQ(r.bottleneck_bw_bytes_per_s, 900e9 * f.profile.nvlink_efficiency);
  EXPECT_DOUBLE_EQ(r.latency_s, f.system.nvlink_latency_s);
  // Rank 71 -> rank 72: the next domain, over the NICs (tray 17 NIC 3 -> tray 18 NIC 0).
  const Route& x = p.route(Endpoint::gpu(71), Endpoint::gpu(72));
  ASSERT_GE(x.hops.size(), 6u);
  EXPECT_EQ(link_names(p, x).front(), "n17-gpu3-pcie:up");
  EXPECT_EQ(link_names(p, x)[1], "n17-nic3-pcie:down");
  EXPECT_EQ(link_names(p, x).back(), "n18-gpu0-pcie:down");
  EXPECT_DOUBLE_EQ(x.bottleneck_bw_bytes_per_s, 50e9 * f.profile.network_efficiency);
}

TEST(PlatformGb200, SixtyFourRankDomainsLeaveTraysOutside) {
  Fixture f;
  // TP 8 x CP 2 blocks: 64 ranks (16 trays) per domain; rank 64 starts the next rack.
  PlatformModel p(f.system, 32, 4, f.cost, 64);
  EXPECT_EQ(p.domain_of(63), 0u);
  EXPECT_EQ(p.domain_of(64), 1u);
  EXPECT_EQ(link_names(p, p.route(Endpoint::gpu(0), Endpoint::gpu(63))).size(), 2u);
  EXPECT_GT(link_names(p, p.route(Endpoint::gpu(63), Endpoint::gpu(64))).size(), 2u);
}

TEST(PlatformGb200, HostCopiesTakeTheSocketsC2cLink) {
  Fixture f;
  PlatformModel p(f.system, 2, 4, f.cost, 72);
  // Tray 1 (CPU host 1), GPU 6 = its local GPU 2: Grace socket 1 (GPUs 2 and 3).
  const Route& h2d = p.route(Endpoint::cpu(1), Endpoint::gpu(6));
  EXPECT_EQ(link_names(p, h2d), (std::vector<std::string>{"n1-cpu1-c2c:down"}));
  const Route& d2h = p.route(Endpoint::gpu(7), Endpoint::cpu(1));
  EXPECT_EQ(link_names(p, d2h), (std::vector<std::string>{"n1-cpu1-c2c:up"}));
  EXPECT_EQ(h2d.hops.front().link, d2h.hops.front().link);  // one link shared by GPUs 2 and 3
  EXPECT_EQ(link_names(p, p.route(Endpoint::cpu(1), Endpoint::gpu(4))),
            (std::vector<std::string>{"n1-cpu0-c2c:down"}));
  // 450 GB/s per direction at the profile's host-copy efficiency, 7x a PCIe Gen5 x16 uplink.
  EXPECT_DOUBLE_EQ(h2d.bottleneck_bw_bytes_per_s, 450e9 * f.profile.pcie_efficiency);
  EXPECT_DOUBLE_EQ(h2d.latency_s, f.system.pcie_latency_s);
}

}  // namespace
}  // namespace trainsim::sim
