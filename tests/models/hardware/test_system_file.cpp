// System files (models/hardware/system_file.h): the shipped catalog files give exactly the
// datasheet figures (written out here again, not read through the loader twice), and every bad
// file is refused with an InputError naming the file, the field and the value.
#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include "models/errors.h"
#include "models/hardware/hardware.h"
#include "models/hardware/system_file.h"
#include "tests/support/paths.h"
#include "tests/support/system_file_errors.h"

using trainsim::find_system;
using trainsim::InputError;
using trainsim::parse_system_file;
using trainsim::SystemSpec;
using trainsim::test_support::source_path;

namespace {

constexpr double GiB = 1073741824.0;  // 2^30
constexpr double TiB = 1024 * GiB;

using trainsim::test_support::read_text;

std::string h100_with(const std::string& key, const std::string& replacement) {
  return trainsim::test_support::system_file_with("systems/dgx-h100.yaml", key, replacement);
}

std::string error_of(const std::string& text) {
  return trainsim::test_support::system_file_error(text, "my_cluster.yaml");
}

void expect_error(const std::string& text, const std::string& field, const std::string& value,
                  const std::string& words = "") {
  trainsim::test_support::expect_system_file_error(text, "my_cluster.yaml", field, value, words);
}

}  // namespace

// The previous C++ catalog's values, from the datasheets (validation/data/hardware.md), compared
// exactly: a shipped file must reproduce every double bit for bit (goldens byte-identical).
TEST(SystemFile, DgxA100FilesGiveTheDatasheetFigures) {
  for (const bool big : {false, true}) {
    const SystemSpec& s = find_system(big ? "dgx-a100-80gb" : "dgx-a100-40gb");
    SCOPED_TRACE(s.name);
    EXPECT_EQ(s.gpu.name, big ? "A100-SXM4-80GB" : "A100-SXM4-40GB");
    EXPECT_EQ(s.gpu.peak_dense_fp16_flops, 312e12);
    EXPECT_EQ(s.gpu.peak_dense_fp8_flops, 0.0);
    EXPECT_EQ(s.gpu.peak_fp32_flops, 19.5e12);
    EXPECT_EQ(s.gpu.hbm_bytes, (big ? 80 : 40) * GiB);
    EXPECT_EQ(s.gpu.hbm_bw_bytes_per_s, big ? 2039e9 : 1555e9);
    EXPECT_EQ(s.gpu.nvlink_bw_bytes_per_s, 600e9 / 2);
    EXPECT_EQ(s.gpu.pcie_bw_bytes_per_s, 16e9 * 16 / 8);  // Gen4: 16 GT/s x 16 lanes
    EXPECT_EQ(s.gpu.compute_capability, 80);
    EXPECT_EQ(s.gpu.nvlinks, 12);
    EXPECT_EQ(s.gpus_per_node, 8);
    EXPECT_EQ(s.nics_per_node, 8);
    EXPECT_EQ(s.nic_bw_bytes_per_s, 200e9 / 8);
    EXPECT_EQ(s.gpus_per_pcie_switch, 2);
    EXPECT_EQ(s.pcie_uplink_bw_bytes_per_s, 32e9);
    EXPECT_EQ(s.cpu_sockets, 2);
    EXPECT_EQ(s.cpu_cores, 128);
    EXPECT_TRUE(s.amd_cpu);
    EXPECT_EQ(s.nccl_net_overhead_s, 2e-6);
    EXPECT_EQ(s.nccl_channels, 24);
    EXPECT_EQ(s.nccl_channels_multi_node, 24);
    EXPECT_FALSE(s.nvlink_sharp);
    EXPECT_EQ(s.host_memory_bytes, (big ? 2 : 1) * TiB);
    EXPECT_EQ(s.fat_tree_levels, 3);
    EXPECT_EQ(s.switch_radix, 40);
    EXPECT_EQ(s.switch_latency_s, 130e-9);
    EXPECT_EQ(s.nvlink_latency_s, 1e-6);
    EXPECT_EQ(s.pcie_latency_s, 1e-6);
  }
}

TEST(SystemFile, DgxH100FileGivesTheDatasheetFigures) {
  const SystemSpec& s = find_system("dgx-h100");
  EXPECT_EQ(s.gpu.name, "H100-SXM5-80GB");
  EXPECT_EQ(s.gpu.peak_dense_fp16_flops, 989e12);
  EXPECT_EQ(s.gpu.peak_dense_fp8_flops, 1979e12);
  EXPECT_EQ(s.gpu.peak_fp32_flops, 67e12);
  EXPECT_EQ(s.gpu.hbm_bytes, 80 * GiB);
  EXPECT_EQ(s.gpu.hbm_bw_bytes_per_s, 3350e9);
  EXPECT_EQ(s.gpu.nvlink_bw_bytes_per_s, 900e9 / 2);
  EXPECT_EQ(s.gpu.pcie_bw_bytes_per_s, 32e9 * 16 / 8);  // Gen5: 32 GT/s x 16 lanes
  EXPECT_EQ(s.gpu.compute_capability, 90);
  EXPECT_EQ(s.gpu.nvlinks, 18);
  EXPECT_EQ(s.gpus_per_node, 8);
  EXPECT_EQ(s.nics_per_node, 8);
  EXPECT_EQ(s.nic_bw_bytes_per_s, 400e9 / 8);
  EXPECT_EQ(s.gpus_per_pcie_switch, 2);
  EXPECT_EQ(s.pcie_uplink_bw_bytes_per_s, 64e9);
  EXPECT_EQ(s.cpu_sockets, 2);
  EXPECT_EQ(s.cpu_cores, 112);
  EXPECT_FALSE(s.amd_cpu);
  EXPECT_EQ(s.nccl_net_overhead_s, 1e-6);
  EXPECT_EQ(s.nccl_channels, 24);
  EXPECT_EQ(s.nccl_channels_multi_node, 16);
  EXPECT_TRUE(s.nvlink_sharp);
  EXPECT_EQ(s.host_memory_bytes, 2 * TiB);
  EXPECT_EQ(s.fat_tree_levels, 3);
  EXPECT_EQ(s.switch_radix, 64);
  EXPECT_EQ(s.switch_latency_s, 130e-9);
  EXPECT_EQ(s.nvlink_latency_s, 1e-6);
  EXPECT_EQ(s.pcie_latency_s, 1e-6);
}

TEST(SystemFile, EachShippedFileLoadsFromDiskAsItsCatalogEntry) {
  for (const auto& name : trainsim::system_names()) {
    if (name == "local") continue;  // measured, no system file (catalog.cpp)
    SCOPED_TRACE(name);
    const SystemSpec s = trainsim::load_system_file(source_path("systems/" + name + ".yaml"));
    const SystemSpec& c = find_system(name);
    EXPECT_EQ(s.name, c.name);
    EXPECT_EQ(s.gpu.hbm_bytes, c.gpu.hbm_bytes);
    EXPECT_EQ(s.nic_bw_bytes_per_s, c.nic_bw_bytes_per_s);
  }
}

TEST(SystemFile, UserClusterFromACatalogGpuWithFourNics) {
  // docs/cluster.md's example: H100 nodes with 4 NICs of 400 Gb/s, two GPUs per NIC.
  const std::string doc = read_text(source_path("docs/cluster.md"));
  const std::string marker = "<!-- example -->\n```yaml\n";
  const auto begin = doc.find(marker);
  ASSERT_NE(begin, std::string::npos);
  const auto end = doc.find("```", begin + marker.size());
  const std::string text = doc.substr(begin + marker.size(), end - begin - marker.size());
  const SystemSpec s = parse_system_file(text, "cluster_example.yaml");
  const SystemSpec& h100 = find_system("dgx-h100");
  EXPECT_EQ(s.name, "h100-4nic");
  EXPECT_EQ(s.gpu.name, "H100-SXM5-80GB");  // the catalog GPU, so its calibration profile
  EXPECT_EQ(s.gpu.peak_dense_fp16_flops, h100.gpu.peak_dense_fp16_flops);
  EXPECT_EQ(s.gpu.hbm_bytes, 80 * GiB);
  EXPECT_EQ(s.nics_per_node, 4);
  EXPECT_EQ(s.nic_bw_bytes_per_s, 50e9);
  EXPECT_EQ(s.host_memory_bytes, 1 * TiB);
  EXPECT_EQ(s.fat_tree_levels, 2);
}

TEST(SystemFile, CatalogGpuOverride) {
  std::string text = h100_with("name: H100-SXM5-80GB", "catalog: H100-SXM5-80GB");
  text = text.replace(text.find("hbm_bytes: 85899345920"), 22, "hbm_bytes: 103079215104");
  const SystemSpec s = parse_system_file(text, "x.yaml");
  EXPECT_EQ(s.gpu.name, "H100-SXM5-80GB");
  EXPECT_EQ(s.gpu.hbm_bytes, 96 * GiB);
  EXPECT_EQ(s.gpu.hbm_bw_bytes_per_s, 3350e9);
}

// The four bad files of issue 34, each naming the file, the field and the value.
TEST(SystemFile, NvlinkDomainThatDoesNotDivideTheGpus) {
  expect_error(h100_with("nvlink_domain_gpus", "nvlink_domain_gpus: 3"), "node.nvlink_domain_gpus",
               "3", "neither divides");
}

TEST(SystemFile, ZeroNics) { expect_error(h100_with("nics", "nics: 0"), "node.nics", "0"); }

/// dgx-h100.yaml with four NICs and node.gpu_nic's entries (one line each).
std::string h100_gpu_nic(const std::vector<std::string>& entries) {
  std::string list = "nics: 4\n  gpu_nic:";
  for (const std::string& e : entries) list += "\n    - " + e;
  return h100_with("nics", list);
}

// Which GPUs share which NIC (issue 34: "NICs per node, their speed and which GPUs share them").
TEST(SystemFile, GpuNicPairsTheGpusThatShareANic) {
  // Four NICs, each shared by GPUs g and g + 4 (not consecutive ones).
  const SystemSpec s = parse_system_file(h100_gpu_nic({"0", "1", "2", "3", "0", "1", "2", "3"}),
                                         "my_cluster.yaml");
  EXPECT_EQ(s.nics_per_node, 4);
  EXPECT_EQ(s.gpu_nic, (std::vector<int>{0, 1, 2, 3, 0, 1, 2, 3}));
  EXPECT_EQ(s.nic_of(5, 8), 1);
  // Absent: consecutive GPUs share one (GPU 5 of 8 on NIC 5 x 4 / 8 = 2).
  const SystemSpec c = parse_system_file(h100_with("nics", "nics: 4"), "my_cluster.yaml");
  EXPECT_TRUE(c.gpu_nic.empty());
  EXPECT_EQ(c.nic_of(5, 8), 2);
}

TEST(SystemFile, GpuNicBadInputs) {
  // A NIC index out of range (4 NICs: 0 to 3).
  expect_error(h100_gpu_nic({"0", "0", "1", "1", "2", "2", "3", "4"}), "node.gpu_nic[7]", "4",
               "must be in [0, 3]");
  // A GPU on two NICs.
  expect_error(h100_gpu_nic({"0", "0", "1", "1", "2", "2", "3", "- 3\n      - 2"}), "node.gpu_nic[7]",
               "[3, 2]", "on several NICs");
  // A GPU on none: seven entries for eight GPUs.
  expect_error(h100_gpu_nic({"0", "0", "1", "1", "2", "2", "3"}), "node.gpu_nic", "7",
               "GPU 7 is on no NIC");
  // More entries than GPUs.
  expect_error(h100_gpu_nic({"0", "0", "1", "1", "2", "2", "3", "3", "3"}), "node.gpu_nic", "9");
  // Uneven sharing: NIC 0 serves three GPUs, NIC 3 one.
  expect_error(h100_gpu_nic({"0", "0", "0", "1", "1", "2", "2", "3"}), "node.gpu_nic", "3",
               "uneven sharing is not modelled");
  // Not a list, not an integer.
  expect_error(h100_with("nics", "nics: 4\n  gpu_nic: 2"), "node.gpu_nic", "2", "expects a list");
  expect_error(h100_gpu_nic({"0", "0", "1", "1", "2", "two", "3", "3"}), "node.gpu_nic[5]", "two",
               "expects an integer");
}

TEST(SystemFile, NegativeBandwidth) {
  expect_error(h100_with("nic_bw_bytes_per_s", "nic_bw_bytes_per_s: -50e9"),
               "node.nic_bw_bytes_per_s", "-50e9", "must be > 0");
  expect_error(h100_with("hbm_bw_bytes_per_s", "hbm_bw_bytes_per_s: -1"), "gpu.hbm_bw_bytes_per_s",
               "-1");
}

TEST(SystemFile, UnknownGpu) {
  expect_error(h100_with("name: H100-SXM5-80GB", "catalog: H300-SXM"), "gpu.catalog", "H300-SXM",
               "known GPUs: ");
}

TEST(SystemFile, UnknownKeyWithSuggestion) {
  expect_error(h100_with("nics", "nics: 8\n  nic_bandwidth_bytes_per_s: 1"),
               "node.nic_bandwidth_bytes_per_s", "node.nic_bandwidth_bytes_per_s",
               "did you mean 'nic_bw_bytes_per_s'?");
  // A key of another section names that section.
  expect_error(h100_with("levels", "levels: 3\n  gpus: 8"), "fabric.gpus", "fabric.gpus",
               "did you mean 'node.gpus'?");
}

TEST(SystemFile, WrongTypesMissingAndDuplicateKeys) {
  expect_error(h100_with("gpus", "gpus: 8.5"), "node.gpus", "8.5", "integer");
  expect_error(h100_with("nvlink_sharp", "nvlink_sharp: maybe"), "node.nvlink_sharp", "maybe");
  expect_error(h100_with("hbm_bytes", "hbm_bytes: .inf"), "gpu.hbm_bytes", ".inf");
  expect_error(h100_with("pcie_generation", "pcie_generation: 7"), "node.pcie_generation", "7");
  expect_error(h100_with("cpu_vendor", "cpu_vendor: riscv"), "node.cpu_vendor", "riscv");
  expect_error(h100_with("channels", "channels: 65"), "nccl.channels", "65");
  EXPECT_NE(error_of(h100_with("switch_radix", "")).find("fabric.switch_radix: missing"),
            std::string::npos);
  expect_error(h100_with("gpus", "gpus: 8\n  gpus: 4"), "node.gpus", "gpus", "duplicate key");
}

TEST(SystemFile, FeaturesNotModelledYetAreRefused) {
  expect_error(h100_with("nvlink_domain_gpus", "nvlink_domain_gpus: 4"), "node.nvlink_domain_gpus",
               "4", "not modelled yet");
  expect_error(h100_with("nics", "nics: 16"), "node.nics", "16", "must divide");
  // Blackwell (100) has NCCL's tables; a later compute capability (B300: 103) does not.
  expect_error(h100_with("compute_capability", "compute_capability: 103"), "gpu.compute_capability",
               "103", "not modelled yet");
  expect_error(h100_with("compute_capability", "compute_capability: 80"), "node.nvlink_sharp",
               "true", "compute_capability >= 90");
}

// RoCE needs its per-message latency; InfiniBand may state one (default 0).
TEST(SystemFile, RoceStatesItsMessageLatency) {
  expect_error(h100_with("type", "type: roce"), "fabric.message_latency_s", "roce", "missing");
  expect_error(h100_with("type", "type: ethernet"), "fabric.type", "ethernet", "'roce'");
  expect_error(h100_with("type", "type: roce\n  message_latency_s: -1e-6"),
               "fabric.message_latency_s", "-1e-6", ">= 0");
  const SystemSpec roce =
      parse_system_file(h100_with("type", "type: roce\n  message_latency_s: 2.5e-6"), "x.yaml");
  EXPECT_TRUE(roce.fabric_roce);
  EXPECT_EQ(roce.fabric_message_latency_s, 2.5e-6);
  const SystemSpec ib = find_system("dgx-h100");
  EXPECT_FALSE(ib.fabric_roce);
  EXPECT_EQ(ib.fabric_message_latency_s, 0.0);
}

// Oversubscription: one ratio for every tier below the top, or a block list, leaf first.
TEST(SystemFile, OversubscriptionPerTierAndNotRailOptimized) {
  const SystemSpec all2 = parse_system_file(h100_with("oversubscription", "oversubscription: 2"), "x.yaml");
  EXPECT_EQ(all2.oversubscription, (std::vector<double>{2, 2}));  // 3 levels: 2 tiers
  // Radix 64, 2:1: floor(64 x 2 / 3) = 42 ports down, 22 up.
  EXPECT_EQ(trainsim::fat_tree_down_ports(all2, 1), 42);
  EXPECT_EQ(trainsim::fat_tree_up_ports(all2, 1), 22);
  const SystemSpec tiers = parse_system_file(
      h100_with("oversubscription", "oversubscription:\n    - 1\n    - 7"), "x.yaml");
  EXPECT_EQ(tiers.oversubscription, (std::vector<double>{1, 7}));
  EXPECT_EQ(trainsim::fat_tree_down_ports(tiers, 1), 32);  // leaf: full bisection
  EXPECT_EQ(trainsim::fat_tree_down_ports(tiers, 2), 56);  // floor(64 x 7 / 8)
  EXPECT_EQ(trainsim::fat_tree_up_ports(tiers, 2), 8);
  const std::string one = error_of(h100_with("oversubscription", "oversubscription:\n    - 2"));
  EXPECT_NE(one.find("my_cluster.yaml:"), std::string::npos) << one;
  EXPECT_NE(one.find("fabric.oversubscription: a list needs one ratio per tier"), std::string::npos)
      << one;
  EXPECT_NE(one.find("(fabric.levels - 1 = 2), got 1"), std::string::npos) << one;
  expect_error(h100_with("oversubscription", "oversubscription: 0.5"), "fabric.oversubscription",
               "0.5", ">= 1");
  EXPECT_TRUE(find_system("dgx-h100").oversubscription.empty());  // full bisection
  const SystemSpec flat =
      parse_system_file(h100_with("rail_optimized", "rail_optimized: false"), "x.yaml");
  EXPECT_FALSE(flat.rail_optimized);
  EXPECT_TRUE(find_system("dgx-h100").rail_optimized);
}

// The example of systems/examples/: H100 nodes on 400 Gb/s RoCE, the fat tree of Llama 3's
// cluster (full bisection inside a pod, 1:7 at the aggregation layer).
TEST(SystemFile, ExampleRoceClusterLoads) {
  const SystemSpec s = trainsim::load_system_file(source_path("systems/examples/h100-roce-llama3.yaml"));
  EXPECT_TRUE(s.fabric_roce);
  EXPECT_GT(s.fabric_message_latency_s, 0.0);
  EXPECT_EQ(s.oversubscription, (std::vector<double>{1, 7}));
  EXPECT_EQ(s.gpu.name, "H100-SXM5-80GB");
  EXPECT_EQ(s.nic_bw_bytes_per_s, 400e9 / 8);
}

TEST(SystemFile, MissingFileAndBadYaml) {
  try {
    trainsim::load_system_file("/nonexistent/my_cluster.yaml");
    FAIL();
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("/nonexistent/my_cluster.yaml"), std::string::npos);
  }
  // Flow collections, quotes, anchors, tags: refused before yaml-cpp sees them.
  for (const char* bad : {"name: [unclosed", "name: '',", "name: [a],", ",\n- b", "name: &a x",
                          "name: !tag x", "name: |\n  x", "name: \"x\""}) {
    const std::string msg = error_of(bad);
    EXPECT_NE(msg.find("my_cluster.yaml:1: '"), std::string::npos) << bad << ": " << msg;
  }
  EXPECT_NE(error_of("name: x\n# a comment, with [brackets] and 'quotes'\n").find("gpu: missing"),
            std::string::npos);
  EXPECT_NE(error_of("- a list").find("expects a map"), std::string::npos);
}

TEST(SystemFile, CatalogGpuNames) {
  const auto names = trainsim::catalog_gpu_names();
  for (const char* n : {"A100-SXM4-40GB", "A100-SXM4-80GB", "H100-SXM5-80GB"})
    EXPECT_NE(std::find(names.begin(), names.end(), n), names.end()) << n;
  EXPECT_EQ(trainsim::catalog_gpu("H100-SXM5-80GB").hbm_bw_bytes_per_s, 3350e9);
  EXPECT_THROW(trainsim::catalog_gpu("local"), InputError);
}
