// Checkpoint save and load as simulated transfers (sim/checkpoint_io.h) against the hand
// calculation of the same flows: every GPU's PCIe link, two GPUs per PCIe switch uplink, each
// node's NICs striped, one storage link shared max-min fairly; and the forecast's optimum
// interval within 10% of Young/Daly's with the simulated checkpoint cost.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "models/forecast/forecast.h"
#include "models/hardware/calibration.h"
#include "models/hardware/hardware.h"
#include "models/perf/cost_model.h"
#include "sim/checkpoint_io.h"

namespace trainsim::sim {
namespace {

struct Env {
  SystemSpec system = find_system("dgx-a100-80gb");
  CalibrationProfile profile = default_calibration(system.gpu.name);
  CostModel cost{system, profile};
  // The achieved bandwidths (sim/platform.cpp's derivation; system file and profile values).
  double gpu_pcie() const { return system.gpu.pcie_bw_bytes_per_s * cost.pcie_link_efficiency(); }
  double uplink() const { return system.pcie_uplink_bw_bytes_per_s * cost.pcie_efficiency(); }
  double node_net() const {
    return double(system.nics_per_node) * system.nic_bw_bytes_per_s * cost.network_efficiency();
  }
};

CheckpointIoRequest request(std::int64_t nodes, double bytes, double write_bw, double read_bw) {
  CheckpointIoRequest q;
  q.nodes = nodes;
  q.gpus_per_node = 8;
  q.bytes_per_rank.assign(std::size_t(nodes * 8), bytes);
  q.write_bw_bytes_per_s = write_bw;
  q.read_bw_bytes_per_s = read_bw;
  return q;
}

TEST(CheckpointIo, OneNodeMatchesTheHandCalculation) {
  const Env e;
  ASSERT_EQ(e.system.gpus_per_pcie_switch, 2);
  const double b = 3e9;  // bytes per GPU
  const CheckpointTimes t = simulate_checkpoint_io(request(1, b, 1e12, 5e11), e.system, e.cost);
  // Copy: a GPU's flow is bound by its own PCIe link and by half its switch's uplink.
  const double copy_s = b / std::min(e.gpu_pcie(), e.uplink() / 2);
  EXPECT_NEAR(t.copy_s, copy_s, 1e-6 * copy_s);
  EXPECT_NEAR(t.h2d_s, copy_s, 1e-6 * copy_s);
  // Write / read: the node's 8 shards through its NICs and the storage link.
  const double write_s = 8 * b / std::min(e.node_net(), 1e12);
  const double read_s = 8 * b / std::min(e.node_net(), 5e11);
  EXPECT_NEAR(t.write_s, write_s, 1e-6 * write_s);
  EXPECT_NEAR(t.read_s, read_s, 1e-6 * read_s);
  EXPECT_FALSE(t.async);
  EXPECT_DOUBLE_EQ(t.save_blocking_s(), t.copy_s + t.write_s);
}

TEST(CheckpointIo, StorageSharedByManyNodesBindsTheWrite) {
  const Env e;
  const double b = 1e9, storage = 50e9;  // 64 nodes x 8 GB through 50 GB/s
  CheckpointIoRequest q = request(64, b, storage, storage);
  q.async = true;
  const CheckpointTimes t = simulate_checkpoint_io(q, e.system, e.cost);
  const double write_s = 64 * 8 * b / std::min(storage, 64 * e.node_net());
  EXPECT_NEAR(t.write_s, write_s, 1e-6 * write_s);
  EXPECT_NEAR(t.read_s, write_s, 1e-6 * write_s);
  EXPECT_TRUE(t.async);
  EXPECT_DOUBLE_EQ(t.save_blocking_s(), t.copy_s);  // async: the host copy alone blocks
}

TEST(CheckpointIo, UnequalNodesEndWhenTheirOwnBytesAreThrough) {
  const Env e;
  // Node 0 holds 2 GB per GPU, node 1 1 GB: both share the storage link equally until node 1
  // is done (16 GB + 8 GB through 10 GB/s: node 1 ends at 2 x 8 / 10 after its copy, node 0 at
  // 24 / 10 after its own copy, the rest alone). The copies differ: node 0's takes twice as
  // long, so it starts later; the simulated end is checked against that max-min schedule.
  CheckpointIoRequest q = request(2, 1e9, 10e9, 10e9);
  std::fill(q.bytes_per_rank.begin(), q.bytes_per_rank.begin() + 8, 2e9);
  const CheckpointTimes t = simulate_checkpoint_io(q, e.system, e.cost);
  const double r = std::min(e.gpu_pcie(), e.uplink() / 2);
  const double copy0 = 2e9 / r, copy1 = 1e9 / r;
  // Node 1 writes alone from copy1 to copy0 (at min(NIC, storage) = 10 GB/s), then both share.
  const double alone1 = std::min(8e9, (copy0 - copy1) * 10e9);
  const double left1 = 8e9 - alone1;
  double end_s;
  if (left1 <= 0) {
    end_s = copy0 + 16e9 / 10e9;  // node 1 done before node 0 starts
  } else {
    const double shared_s = left1 / 5e9;  // each at 5 GB/s
    end_s = copy0 + shared_s + (16e9 - shared_s * 5e9) / 10e9;
  }
  EXPECT_NEAR(t.copy_s, copy0, 1e-6 * copy0);
  EXPECT_NEAR(t.copy_s + t.write_s, end_s, 1e-6 * end_s);
  // The load from idle: 5 GB/s each until node 1's 8 GB are in (1.6 s), then node 0's last
  // 8 GB at 10 GB/s (0.8 s).
  EXPECT_NEAR(t.read_s, 2.4, 1e-6 * 2.4);
}

TEST(CheckpointIo, OptimalIntervalWithTheSimulatedCostIsWithinTenPercentOfYoungDaly) {
  const Env e;
  const CheckpointTimes t = simulate_checkpoint_io(request(16, 4e9, 2e11, 2e11), e.system, e.cost);
  RunModel m;
  m.iteration_s = 3.0;
  m.steps = 500'000;
  m.failures_per_s = 1.0 / (2.5 * 3600);
  m.restart_s = 600;
  m.load_s = t.load_s();
  m.copy_s = t.save_blocking_s();
  const double tau_s = std::sqrt(2.0 * t.save_blocking_s() * 2.5 * 3600);
  const double opt_s = double(optimal_interval_steps(m)) * m.iteration_s;
  EXPECT_NEAR(opt_s, tau_s, 0.10 * tau_s) << "C " << t.save_blocking_s() << " s";
}

}  // namespace
}  // namespace trainsim::sim
