// End-to-end tests of `cluster.system_file` (docs/scenario.md "cluster", docs/cluster.md): a
// scenario names a cluster file instead of a catalog system, and simulates on it; a bad file
// exits 1 naming the scenario's field, then the file, the field and the value.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <regex>
#include <string>

#include "tests/e2e/cli_helpers.h"
#include "tests/support/paths.h"

namespace {

using trainsim_e2e::run;
using trainsim_e2e::slurp;
namespace fs = std::filesystem;

const std::string kScenario = "scenarios/gpt-1.7b_tp1_pp1_dp32.yaml";  // dgx-a100-80gb, 4 nodes

/// The shipped dgx-a100-80gb file with its name replaced and each (from, to) line edit made.
std::string a100_file(const std::string& name,
                      const std::vector<std::pair<std::string, std::string>>& edits = {}) {
  std::string text = slurp(trainsim::test_support::source_path("systems/dgx-a100-80gb.yaml"));
  text = std::regex_replace(text, std::regex("\nname: dgx-a100-80gb\n"), "\nname: " + name + "\n");
  for (const auto& [from, to] : edits) {
    const auto at = text.find(from);
    EXPECT_NE(at, std::string::npos) << from;
    if (at != std::string::npos) text.replace(at, from.size(), to);
  }
  return text;
}

/// `simulate SCENARIO --set cluster.system=null --set cluster.system_file=FILE`: exit status.
int simulate_on_file(const fs::path& file, const fs::path& json, const fs::path& log) {
  return run("simulate " + trainsim::test_support::source_path(kScenario) +
                 " --set cluster.system=null --set cluster.system_file=" + file.string() +
                 " --json " + json.string(),
             log.string());
}

std::string json_value(const std::string& json, const std::string& key) {
  std::smatch m;
  const std::regex re("\"" + key + "\": ([^,\n]+)");
  return std::regex_search(json, m, re) ? m[1].str() : "";
}

TEST(ClusterFileCli, ACopyOfTheCatalogFileSimulatesLikeTheCatalogSystem) {
  trainsim::test_support::ScratchDir dir("cluster_file_copy");
  const fs::path file = dir.path() / "my-a100.yaml";
  std::ofstream(file) << a100_file("my-a100");
  ASSERT_EQ(simulate_on_file(file, dir.path() / "file.json", dir.path() / "file.log"), 0)
      << slurp(dir.path() / "file.log");
  ASSERT_EQ(run("simulate " + trainsim::test_support::source_path(kScenario) + " --json " +
                    (dir.path() / "catalog.json").string(),
                (dir.path() / "catalog.log").string()),
            0);
  // The same hardware: the same summary, but for the system's name.
  std::string from_file = slurp(dir.path() / "file.json");
  const std::string from_catalog = slurp(dir.path() / "catalog.json");
  from_file = std::regex_replace(from_file, std::regex("my-a100"), "dgx-a100-80gb");
  EXPECT_EQ(from_file, from_catalog);
}

TEST(ClusterFileCli, HalfTheNicsSlowTheDataParallelAllReduce) {
  // 32 data-parallel replicas on 4 nodes all-reduce 1.7 B fp16 gradients over the NICs: with 4
  // NICs of 25 GB/s per node instead of 8, the inter-node ring has half the bandwidth, so the
  // iteration cannot be faster (the all-reduce overlaps the backward, so it may hide part).
  trainsim::test_support::ScratchDir dir("cluster_file_nics");
  const fs::path file8 = dir.path() / "eight.yaml", file4 = dir.path() / "four.yaml";
  std::ofstream(file8) << a100_file("eight");
  std::ofstream(file4) << a100_file("four", {{"\n  nics: 8", "\n  nics: 4"}});
  ASSERT_EQ(simulate_on_file(file8, dir.path() / "8.json", dir.path() / "8.log"), 0)
      << slurp(dir.path() / "8.log");
  ASSERT_EQ(simulate_on_file(file4, dir.path() / "4.json", dir.path() / "4.log"), 0)
      << slurp(dir.path() / "4.log");
  const double t8 = std::stod(json_value(slurp(dir.path() / "8.json"), "iteration_time_s"));
  const double t4 = std::stod(json_value(slurp(dir.path() / "4.json"), "iteration_time_s"));
  EXPECT_GT(t4, t8);
}

// The example user file (systems/examples/h100-roce-llama3.yaml: H100 nodes on 400 Gb/s RoCE,
// not rail-optimized, 1:7 at the aggregation tier) simulates under its own name. (Its time is
// not ordered against InfiniBand's: the added message latency can change NCCL's choice of
// algorithm, which NCCL makes on its model, not on the simulated time.)
TEST(ClusterFileCli, ExampleRoceClusterSimulates) {
  trainsim::test_support::ScratchDir dir("cluster_file_roce");
  const fs::path roce = trainsim::test_support::source_path("systems/examples/h100-roce-llama3.yaml");
  ASSERT_EQ(simulate_on_file(roce, dir.path() / "roce.json", dir.path() / "roce.log"), 0)
      << slurp(dir.path() / "roce.log");
  const std::string json = slurp(dir.path() / "roce.json");
  EXPECT_EQ(json_value(json, "system"), "\"h100-roce-llama3\"");
  EXPECT_GT(std::stod(json_value(json, "iteration_time_s")), 0.0);
}

struct BadFile {
  const char* what;
  std::vector<std::pair<std::string, std::string>> edits;
  const char* field;  ///< the file's field the message must name
  const char* value;  ///< and its value
};

TEST(ClusterFileCli, BadClusterFilesExitOneNamingFileFieldAndValue) {
  const std::vector<BadFile> cases = {
      {"an NVLink domain that does not divide the GPUs",
       {{"\n  nvlink_domain_gpus: 8", "\n  nvlink_domain_gpus: 3"}}, "node.nvlink_domain_gpus", "3"},
      {"zero NICs", {{"\n  nics: 8", "\n  nics: 0"}}, "node.nics", "0"},
      {"a negative bandwidth",
       {{"\n  nic_bw_bytes_per_s: 25e9", "\n  nic_bw_bytes_per_s: -25e9"}},
       "node.nic_bw_bytes_per_s", "-25e9"},
  };
  trainsim::test_support::ScratchDir dir("cluster_file_bad");
  int i = 0;
  for (const BadFile& c : cases) {
    SCOPED_TRACE(c.what);
    const fs::path file = dir.path() / ("bad" + std::to_string(i++) + ".yaml");
    std::ofstream(file) << a100_file("bad", c.edits);
    const fs::path json = dir.path() / "bad.json", log = dir.path() / "bad.log";
    EXPECT_EQ(simulate_on_file(file, json, log), 1);
    const std::string msg = slurp(log);
    EXPECT_NE(msg.find("cluster.system_file"), std::string::npos) << msg;
    EXPECT_NE(msg.find(file.string()), std::string::npos) << msg;
    EXPECT_NE(msg.find(c.field), std::string::npos) << msg;
    EXPECT_NE(msg.find(c.value), std::string::npos) << msg;
    EXPECT_FALSE(fs::exists(json));
  }
  // An unknown GPU: a user file that starts from a catalog GPU that does not exist.
  const fs::path file = dir.path() / "unknown_gpu.yaml";
  std::string text = slurp(trainsim::test_support::source_path("docs/cluster.md"));
  const auto begin = text.find("```yaml\nname: h100-4nic");
  ASSERT_NE(begin, std::string::npos);
  const auto end = text.find("```", begin + 7);
  text = text.substr(begin + 8, end - begin - 8);
  const auto gpu = text.find("catalog: H100-SXM5-80GB");
  ASSERT_NE(gpu, std::string::npos);
  text.replace(gpu, std::string("catalog: H100-SXM5-80GB").size(), "catalog: Z100-SXM9");
  std::ofstream(file) << text;
  const fs::path log = dir.path() / "unknown.log";
  EXPECT_EQ(simulate_on_file(file, dir.path() / "unknown.json", log), 1);
  const std::string msg = slurp(log);
  EXPECT_NE(msg.find(file.string()), std::string::npos) << msg;
  EXPECT_NE(msg.find("gpu.catalog"), std::string::npos) << msg;
  EXPECT_NE(msg.find("Z100-SXM9"), std::string::npos) << msg;
}

TEST(ClusterFileCli, SystemAndSystemFileTogetherAreRefused) {
  trainsim::test_support::ScratchDir dir("cluster_file_both");
  const fs::path file = dir.path() / "mine.yaml";
  std::ofstream(file) << a100_file("mine");
  const fs::path log = dir.path() / "both.log";
  EXPECT_EQ(run("simulate " + trainsim::test_support::source_path(kScenario) +
                    " --set cluster.system_file=" + file.string(),
                log.string()),
            1);
  const std::string msg = slurp(log);
  EXPECT_NE(msg.find("cluster.system_file"), std::string::npos) << msg;
  EXPECT_NE(msg.find("not both"), std::string::npos) << msg;
}

}  // namespace
