// Hardware catalog: the datasheet numbers of ../shared/ground-truth/hardware.md, written out
// again here independently of the shipped systems/*.yaml.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>

#include "models/hardware/hardware.h"
#include "models/graph/ops.h"
#include "models/input/scenario.h"

using trainsim::find_system;
using trainsim::InputError;
using trainsim::SystemSpec;

namespace {
constexpr double GiB = 1073741824.0;  // 2^30
constexpr double TiB = 1024 * GiB;
}  // namespace

TEST(Hardware, CatalogNames) {
  auto names = trainsim::system_names();
  std::sort(names.begin(), names.end());
  EXPECT_EQ(names, (std::vector<std::string>{"dgx-a100-40gb", "dgx-a100-80gb", "dgx-b200", "dgx-h100", "dgx-h200", "gb200-nvl72", "local"}));
  for (const auto& n : names) EXPECT_EQ(find_system(n).name, n);
}

TEST(Hardware, DgxA100) {
  for (const bool big : {false, true}) {
    const SystemSpec& s = find_system(big ? "dgx-a100-80gb" : "dgx-a100-40gb");
    SCOPED_TRACE(s.name);
    EXPECT_EQ(s.gpu.name, big ? "A100-SXM4-80GB" : "A100-SXM4-40GB");
    EXPECT_DOUBLE_EQ(s.gpu.peak_dense_fp16_flops, 312e12);
    EXPECT_DOUBLE_EQ(s.gpu.hbm_bytes, (big ? 80 : 40) * GiB);
    EXPECT_DOUBLE_EQ(s.gpu.hbm_bw_bytes_per_s, big ? 2039e9 : 1555e9);
    EXPECT_DOUBLE_EQ(s.gpu.nvlink_bw_bytes_per_s, 600e9 / 2);
    EXPECT_DOUBLE_EQ(s.gpu.pcie_bw_bytes_per_s, 16e9 * 16 / 8);  // Gen4: 16 GT/s x16
    EXPECT_EQ(s.gpus_per_node, 8);
    EXPECT_EQ(s.nics_per_node, 8);
    EXPECT_DOUBLE_EQ(s.nic_bw_bytes_per_s, 200e9 / 8);  // HDR 200 Gb/s
    EXPECT_EQ(s.gpus_per_pcie_switch, 2);
    EXPECT_EQ(s.gpus_per_node / s.gpus_per_pcie_switch, 4);  // four PCIe switches
    EXPECT_DOUBLE_EQ(s.pcie_uplink_bw_bytes_per_s, s.gpu.pcie_bw_bytes_per_s);
    EXPECT_EQ(s.cpu_sockets, 2);
    EXPECT_EQ(s.cpu_cores, 2 * 64);  // 2x EPYC 7742
    EXPECT_DOUBLE_EQ(s.host_memory_bytes, (big ? 2 : 1) * TiB);
    EXPECT_EQ(s.fat_tree_levels, 3);
    EXPECT_EQ(s.switch_radix, 40);  // QM8700
    EXPECT_DOUBLE_EQ(s.switch_latency_s, 130e-9);
    EXPECT_GT(s.nvlink_latency_s, 0);
    EXPECT_LT(s.nvlink_latency_s, 5e-6);
    EXPECT_GT(s.pcie_latency_s, 0);
    EXPECT_LT(s.pcie_latency_s, 5e-6);
  }
}

TEST(Hardware, DgxH100) {
  const SystemSpec& s = find_system("dgx-h100");
  EXPECT_EQ(s.gpu.name, "H100-SXM5-80GB");
  EXPECT_DOUBLE_EQ(s.gpu.peak_dense_fp16_flops, 989e12);
  EXPECT_DOUBLE_EQ(s.gpu.hbm_bytes, 80 * GiB);
  EXPECT_DOUBLE_EQ(s.gpu.hbm_bw_bytes_per_s, 3350e9);
  EXPECT_DOUBLE_EQ(s.gpu.nvlink_bw_bytes_per_s, 900e9 / 2);
  EXPECT_DOUBLE_EQ(s.gpu.pcie_bw_bytes_per_s, 32e9 * 16 / 8);  // Gen5: 32 GT/s x16
  EXPECT_DOUBLE_EQ(s.nic_bw_bytes_per_s, 400e9 / 8);            // NDR 400 Gb/s
  EXPECT_DOUBLE_EQ(s.pcie_uplink_bw_bytes_per_s, s.gpu.pcie_bw_bytes_per_s);
  EXPECT_EQ(s.gpus_per_node, 8);
  EXPECT_EQ(s.nics_per_node, 8);
  EXPECT_EQ(s.gpus_per_pcie_switch, 2);
  EXPECT_EQ(s.cpu_cores, 2 * 56);  // 2x Xeon Platinum 8480C
  EXPECT_DOUBLE_EQ(s.host_memory_bytes, 2 * TiB);
  EXPECT_EQ(s.switch_radix, 64);  // QM9700
  EXPECT_EQ(s.fat_tree_levels, 3);
  EXPECT_GT(s.switch_latency_s, 0);
}

TEST(Hardware, UnknownSystemListsKnownNames) {
  try {
    find_system("dgx-b300");
    FAIL() << "no error";
  } catch (const InputError& e) {
    const std::string msg = e.what();
    for (const char* part : {"dgx-b300", "dgx-a100-40gb", "dgx-a100-80gb", "dgx-b200", "dgx-h100"})
      EXPECT_NE(msg.find(part), std::string::npos) << part << " not in: " << msg;
  }
}

TEST(Ops, Classification) {
  using trainsim::OpKind;
  const OpKind compute[] = {OpKind::AttnFwd,  OpKind::MlpFwd,   OpKind::AttnBwd,
                            OpKind::MlpBwd,   OpKind::EmbedFwd, OpKind::EmbedBwd,
                            OpKind::LogitsLossFwd, OpKind::LogitsLossBwd};
  const OpKind collective[] = {OpKind::AllReduce, OpKind::ReduceScatter, OpKind::AllGather};
  const OpKind other[] = {OpKind::OptimizerStepGpu, OpKind::OptimizerStepCpu, OpKind::SendRecv,
                          OpKind::CopyH2D, OpKind::CopyD2H};
  for (auto k : compute) EXPECT_TRUE(trainsim::is_compute(k) && !trainsim::is_collective(k)) << to_string(k);
  for (auto k : collective) EXPECT_TRUE(!trainsim::is_compute(k) && trainsim::is_collective(k)) << to_string(k);
  for (auto k : other) EXPECT_TRUE(!trainsim::is_compute(k) && !trainsim::is_collective(k)) << to_string(k);
  // Names are distinct and non-empty.
  std::vector<std::string> names;
  for (int k = 0; k <= static_cast<int>(OpKind::CopyD2H); ++k)
    names.push_back(trainsim::to_string(static_cast<OpKind>(k)));
  std::sort(names.begin(), names.end());
  EXPECT_EQ(std::unique(names.begin(), names.end()), names.end());
  EXPECT_STREQ(trainsim::to_string(OpKind::AllReduce), "all_reduce");
  EXPECT_STREQ(trainsim::to_string(trainsim::GroupKind::Tensor), "tensor");
  EXPECT_STREQ(trainsim::to_string(trainsim::GroupKind::Data), "data");
  EXPECT_STREQ(trainsim::to_string(trainsim::GroupKind::Pipeline), "pipeline");
  EXPECT_STREQ(trainsim::to_string(trainsim::GroupKind::Embedding), "embedding");
  EXPECT_STREQ(trainsim::to_string(trainsim::GroupKind::None), "none");
}
