// GB200 NVL72 (systems/gb200-nvl72.yaml): the datasheet figures written out by hand (rack
// totals of NVIDIA's GB200 NVL72 table over 72 GPUs and 36 Grace CPUs), the multi-node NVLink
// domain, the rack and NVLink-C2C keys, every bad value of them refused naming the file, the
// field and the value, and the NVLink domain's rank blocks (nvlink_domain_ranks) computed by
// hand from Megatron's rank order.
#include <gtest/gtest.h>

#include <fstream>
#include <regex>
#include <sstream>
#include <string>

#include "models/errors.h"
#include "models/hardware/calibration.h"
#include "models/hardware/hardware.h"
#include "models/perf/cost_model.h"
#include "models/hardware/system_file.h"
#include "models/input/scenario.h"
#include "models/system/collective_flows.h"
#include "tests/support/paths.h"
#include "tests/support/system_file_errors.h"

using trainsim::InputError;
using trainsim::SystemSpec;

namespace {

constexpr double GiB = 1073741824.0;  // 2^30

std::string gb200_with(const std::string& key, const std::string& replacement) {
  return trainsim::test_support::system_file_with("systems/gb200-nvl72.yaml", key, replacement);
}

std::string error_of(const std::string& text) {
  return trainsim::test_support::system_file_error(text, "my_rack.yaml");
}

void expect_error(const std::string& text, const std::string& field, const std::string& value,
                  const std::string& words = "") {
  trainsim::test_support::expect_system_file_error(text, "my_rack.yaml", field, value, words);
}

}  // namespace

TEST(Gb200Nvl72, FileGivesTheDatasheetFigures) {
  const SystemSpec& s = trainsim::find_system("gb200-nvl72");
  EXPECT_EQ(s.gpu.name, "GB200-186GB");
  EXPECT_EQ(s.gpu.peak_dense_fp16_flops, 360e15 / 2 / 72);  // 360 PF sparse BF16 / 72
  EXPECT_EQ(s.gpu.peak_dense_fp8_flops, 720e15 / 2 / 72);   // 720 PF sparse FP8 / 72
  EXPECT_EQ(s.gpu.hbm_bytes, 186 * GiB);
  EXPECT_EQ(s.gpu.hbm_bw_bytes_per_s, 8e12);                // 576 TB/s / 72
  EXPECT_EQ(s.gpu.nvlink_bw_bytes_per_s, 1.8e12 / 2);       // 130 TB/s / 72, per direction
  EXPECT_EQ(s.gpu.compute_capability, 100);
  EXPECT_EQ(s.gpus_per_node, 4);
  EXPECT_EQ(s.nvlink_domain_gpus, 72);
  EXPECT_EQ(s.domain_gpus(), 72);
  EXPECT_EQ(s.domain_nics(), 72);  // 18 trays x 4 NICs
  EXPECT_EQ(s.rack_nodes, 18);
  EXPECT_EQ(s.nics_per_node, 4);
  EXPECT_EQ(s.nic_bw_bytes_per_s, 50e9);
  EXPECT_TRUE(s.host_c2c);
  EXPECT_EQ(s.c2c_bw_bytes_per_s, 900e9 / 2);
  EXPECT_EQ(s.host_memory_bytes, 2 * 480e9);
  EXPECT_EQ(s.cpu_sockets, 2);
  EXPECT_EQ(s.cpu_cores, 2 * 72);
  EXPECT_FALSE(s.amd_cpu);
  EXPECT_TRUE(s.nvlink_sharp);
  // A DGX keeps its node as its domain (0 stored: the scenario's GPUs per node).
  EXPECT_EQ(trainsim::find_system("dgx-h100").nvlink_domain_gpus, 0);
  EXPECT_FALSE(trainsim::find_system("dgx-h100").host_c2c);
}

TEST(Gb200Nvl72, NvlinkDomainThatDoesNotDivideOrMultiplyTheNodeIsRefused) {
  expect_error(gb200_with("nvlink_domain_gpus", "nvlink_domain_gpus: 70"), "node.nvlink_domain_gpus",
               "70", "neither divides");
  expect_error(gb200_with("nvlink_domain_gpus", "nvlink_domain_gpus: 2"), "node.nvlink_domain_gpus",
               "2", "not modelled yet");
}

TEST(Gb200Nvl72, RackThatSplitsAnNvlinkDomainIsRefused) {
  expect_error(gb200_with("nodes: 18", "nodes: 5"), "rack.nodes", "5", "whole number of NVLink domains");
  expect_error(gb200_with("nodes: 18", "nodes: 0"), "rack.nodes", "0");
  expect_error(gb200_with("nodes: 18", "trays: 18"), "rack.trays", "rack.trays", "unknown key");
}

TEST(Gb200Nvl72, BadHostLinkIsRefused) {
  expect_error(gb200_with("host_link", "host_link: cxl"), "node.host_link", "cxl", "nvlink-c2c");
  expect_error(gb200_with("c2c_bw_bytes_per_s", "c2c_bw_bytes_per_s: -450e9"),
               "node.c2c_bw_bytes_per_s", "-450e9");
  expect_error(gb200_with("host_link", "host_link: pcie"), "node.c2c_bw_bytes_per_s", "450e9",
               "needs node.host_link: nvlink-c2c");
  const std::string msg = error_of(gb200_with("c2c_bw_bytes_per_s", "# no C2C rate"));
  EXPECT_NE(msg.find("my_rack.yaml:"), std::string::npos) << msg;
  EXPECT_NE(msg.find("node.c2c_bw_bytes_per_s"), std::string::npos) << msg;
  expect_error(gb200_with("cpu_sockets", "cpu_sockets: 3"), "node.cpu_sockets", "3", "must divide");
}

TEST(Gb200Nvl72, ZeroNicsNegativeBandwidthUnknownGpu) {
  expect_error(gb200_with("nics", "nics: 0"), "node.nics", "0");
  expect_error(gb200_with("nvlink_bw_bytes_per_s", "nvlink_bw_bytes_per_s: -900e9"),
               "gpu.nvlink_bw_bytes_per_s", "-900e9");
  expect_error(gb200_with("name: GB200-186GB", "catalog: GB300-288GB"), "gpu.catalog",
               "GB300-288GB", "unknown GPU");
}

namespace {

trainsim::Scenario scenario(std::int64_t tp, std::int64_t cp, std::int64_t ep, std::int64_t etp = 0) {
  trainsim::Scenario sc;
  sc.cluster.system = "gb200-nvl72";
  sc.cluster.gpus_per_node = 4;
  sc.parallel.tensor_model_parallel_size = tp;
  sc.parallel.context_parallel_size = cp;
  sc.parallel.expert_model_parallel_size = ep;
  sc.parallel.expert_tensor_parallel_size = etp;
  return sc;
}

}  // namespace

// Megatron's order puts TP innermost, then CP; expert groups are ETP x EP consecutive ranks.
// The job fills each 72-GPU domain with whole blocks of lcm(TP x CP, ETP x EP, 4).
TEST(Gb200Nvl72, DomainRanksKeepMegatronBlocksInside) {
  const SystemSpec& s = trainsim::find_system("gb200-nvl72");
  EXPECT_EQ(trainsim::nvlink_domain_ranks(scenario(4, 1, 1), s), 72);   // 18 blocks of 4
  EXPECT_EQ(trainsim::nvlink_domain_ranks(scenario(1, 1, 1), s), 72);   // whole trays
  EXPECT_EQ(trainsim::nvlink_domain_ranks(scenario(8, 1, 1), s), 72);   // 9 blocks of 8
  EXPECT_EQ(trainsim::nvlink_domain_ranks(scenario(8, 2, 1), s), 64);   // 4 blocks of 16
  EXPECT_EQ(trainsim::nvlink_domain_ranks(scenario(1, 1, 64), s), 64);  // EP 64
  EXPECT_EQ(trainsim::nvlink_domain_ranks(scenario(2, 1, 8, 1), s), 72);  // lcm(2, 8) = 8
  EXPECT_EQ(trainsim::nvlink_domain_ranks(scenario(1, 1, 32), s), 64);  // 2 blocks of 32
  // TP 8 x CP 16 = 128 > 72: gcd(128, 72) = 8 ranks of each block per domain.
  EXPECT_EQ(trainsim::nvlink_domain_ranks(scenario(8, 16, 1), s), 8);
  // A DGX: the node.
  trainsim::Scenario dgx = scenario(8, 2, 1);
  dgx.cluster.system = "dgx-h100";
  dgx.cluster.gpus_per_node = 8;
  EXPECT_EQ(trainsim::nvlink_domain_ranks(dgx, trainsim::find_system("dgx-h100")), 8);
}

// A scenario on a multi-node NVLink domain uses whole trays: cluster.gpus_per_node must be the
// system's 4 (the error names the field and the value).
TEST(Gb200Nvl72, PartialTraysAreRefused) {
  trainsim::test_support::ScratchDir dir("gb200");
  const std::string path = dir.write(
      "s.yaml",
      "name: partial\nmodel: {num_layers: 2, hidden_size: 256, num_attention_heads: 8, "
      "seq_length: 128, padded_vocab_size: 1024}\nparallel: {micro_batch_size: 1, "
      "global_batch_size: 4}\ncluster: {system: gb200-nvl72, nodes: 2, gpus_per_node: 2}\n");
  try {
    trainsim::validated(trainsim::load_scenario(path));
    FAIL() << "accepted";
  } catch (const InputError& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("cluster.gpus_per_node"), std::string::npos) << msg;
    EXPECT_NE(msg.find("2"), std::string::npos) << msg;
    EXPECT_NE(msg.find("whole nodes"), std::string::npos) << msg;
  }
}

// NCCL on the rack (v2.29.7, multi-node NVLink: the 72-GPU domain is one NCCL node): an
// all-reduce over the whole domain runs NVLS with 32 heads (NCCL_MAX_NVLS_ARITY) at 20 GB/s
// (33 x 20 <= 18 x 40.1), 24 CTAs (NVLS_NCHANNELS_SM100_NVL: one clique), at NCCL's
// 32 x 20 x 0.74 x 31/32 x 2 = 917.6 GB/s bus bandwidth (tuning.cc); two racks run NVLS-Tree
// with 32 CTAs (NVLS_NCHANNELS_SM100) and the same per-channel rate (min(28.675, 2 x 40, 96)).
TEST(Gb200Nvl72, DomainAllReduceRunsNvlsWithThirtyTwoHeads) {
  const SystemSpec& s = trainsim::find_system("gb200-nvl72");
  const trainsim::CostModel cost(s, trainsim::default_calibration(s.gpu.name),
                                 trainsim::NcclVersion::V2_29_7);
  const trainsim::NcclChoice c = cost.nccl_collective(trainsim::OpKind::AllReduce, GiB, 72, 1);
  EXPECT_EQ(c.algo, trainsim::NcclAlgo::Nvls);
  EXPECT_EQ(c.channels, 24);
  EXPECT_EQ(c.nvls_heads, 32);
  EXPECT_NEAR(c.bus_bw_bytes_per_s, 32 * 20 * 0.74 * 31.0 / 32.0 * 2 * 1e9, 1e-2);
  const trainsim::NcclChoice t = cost.nccl_collective(trainsim::OpKind::AllReduce, GiB, 144, 2);
  EXPECT_EQ(t.algo, trainsim::NcclAlgo::NvlsTree);
  EXPECT_EQ(t.channels, 32);
  EXPECT_NEAR(t.bus_bw_bytes_per_s, 32 * 20 * 0.74 * 31.0 / 32.0 * 2 * 1e9, 1e-2);
  // No NVLS all-gather over more than 32 GPUs of a domain (enqueue.cc): the ring.
  EXPECT_EQ(cost.nccl_collective(trainsim::OpKind::AllGather, GiB, 72, 1).algo,
            trainsim::NcclAlgo::Ring);
}
