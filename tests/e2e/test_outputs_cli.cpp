// Outputs a user can trust, end to end through the CLI: a failing run never truncates or
// clobbers an earlier output (disk full, failure after the outputs were opened, an output that
// names an input or another output); runaway runs are refused before anything is built, with
// their estimate and the setting that would fit; the text summary says how the run was folded
// and what offload chose.
#include <gtest/gtest.h>

#include "tests/e2e/cli_helpers.h"

#include <filesystem>
#include <fstream>
#include <string>

#include <nlohmann/json.hpp>

namespace {

using trainsim_e2e::run;
using trainsim_e2e::slurp;
namespace fs = std::filesystem;

const std::string kSrc = TRAINSIM_SOURCE_DIR;
const std::string kTiny = kSrc + "/scenarios/small/gpt-tiny_tp2_pp2_dp2.yaml";
const std::string k1T = kSrc + "/scenarios/gpt-1t_tp8_pp64_dp6.yaml";

class OutputsCli : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::path(TRAINSIM_BINARY_DIR) / ("e2e_outputs_" + std::string(::testing::UnitTest::GetInstance()->current_test_info()->name()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  std::string path(const std::string& name) const { return (dir_ / name).string(); }
  void write(const std::string& name, const std::string& text) const {
    std::ofstream(path(name), std::ios::binary) << text;
  }
  /// Files of the folder other than `keep` (temporaries left behind would show here).
  std::vector<std::string> leftovers(const std::vector<std::string>& keep) const {
    std::vector<std::string> out;
    for (const auto& e : fs::directory_iterator(dir_)) {
      const std::string n = e.path().filename().string();
      if (std::find(keep.begin(), keep.end(), n) == keep.end()) out.push_back(n);
    }
    return out;
  }
  fs::path dir_;
};

TEST_F(OutputsCli, AFailingRunLeavesEarlierOutputsUntouched) {
  // The run fails after the outputs were opened (a cluster too large for the fabric).
  write("s.json", "good summary\n");
  write("t.json", "good trace\n");
  EXPECT_EQ(run("simulate " + k1T + " --set cluster.nodes=2048 --json " + path("s.json") +
                    " --trace " + path("t.json"),
                path("log")),
            1);
  EXPECT_EQ(slurp(path("s.json")), "good summary\n");
  EXPECT_EQ(slurp(path("t.json")), "good trace\n");
  EXPECT_EQ(leftovers({"s.json", "t.json", "log"}), std::vector<std::string>{});
}

TEST_F(OutputsCli, ASuccessfulRunReplacesThemWhole) {
  write("s.json", "old\n");
  ASSERT_EQ(run("simulate " + kTiny + " --json " + path("s.json"), path("log")), 0)
      << slurp(path("log"));
  const auto j = nlohmann::json::parse(slurp(path("s.json")));
  EXPECT_EQ(j.at("name"), "gpt-tiny_tp2_pp2_dp2");
  EXPECT_EQ(leftovers({"s.json", "log"}), std::vector<std::string>{});
}

// Outputs are written through a temporary file (mkstemp: mode 0600) and renamed into place;
// they get the mode a new file would: 0666 less the umask.
TEST_F(OutputsCli, OutputsGetTheModeOfANewFile) {
  const auto mode = [&](const std::string& name) {
    return fs::status(path(name)).permissions() & fs::perms::mask;
  };
  ASSERT_EQ(run("simulate " + kTiny + " --json " + path("a.json") + " --trace " + path("a.trace"),
                path("log"), "umask 022;"),
            0)
      << slurp(path("log"));
  using P = fs::perms;
  const P rw_r_r = P::owner_read | P::owner_write | P::group_read | P::others_read;
  EXPECT_EQ(mode("a.json"), rw_r_r);
  EXPECT_EQ(mode("a.trace"), rw_r_r);
  ASSERT_EQ(run("simulate " + kTiny + " --json " + path("b.json"), path("log"), "umask 077;"), 0);
  EXPECT_EQ(mode("b.json"), P::owner_read | P::owner_write);
}

TEST_F(OutputsCli, DiskFullIsAnErrorNamingTheFlag) {
  EXPECT_EQ(run("simulate " + kTiny + " --json /dev/full", path("log")), 1);
  const std::string log = slurp(path("log"));
  EXPECT_NE(log.find("--json '/dev/full'"), std::string::npos) << log;
  EXPECT_NE(log.find("write failed"), std::string::npos) << log;
  EXPECT_EQ(run("simulate " + kTiny + " --trace /dev/full", path("log2")), 1);
  EXPECT_NE(slurp(path("log2")).find("--trace '/dev/full'"), std::string::npos);
}

TEST_F(OutputsCli, AnOutputThatIsAnInputOrAnotherOutputIsRefused) {
  fs::copy_file(kTiny, path("sc.yaml"));
  const std::string before = slurp(path("sc.yaml"));
  EXPECT_EQ(run("simulate " + path("sc.yaml") + " --trace " + path("sc.yaml"), path("log")), 1);
  EXPECT_EQ(slurp(path("sc.yaml")), before);
  EXPECT_NE(slurp(path("log")).find("refusing to overwrite an input"), std::string::npos)
      << slurp(path("log"));
  // The same file through another spelling of its path.
  EXPECT_EQ(run("simulate " + path("sc.yaml") + " --json " + dir_.string() + "/./sc.yaml",
                path("log2")),
            1);
  EXPECT_EQ(slurp(path("sc.yaml")), before);
  EXPECT_EQ(run("simulate " + kTiny + " --json " + path("o") + " --memory-csv " + path("o"),
                path("log3")),
            1);
  EXPECT_NE(slurp(path("log3")).find("--memory-csv"), std::string::npos) << slurp(path("log3"));
  EXPECT_FALSE(fs::exists(path("o")));
}

TEST_F(OutputsCli, RunawayRunsAreRefusedWithTheirEstimateAndAFix) {
  // 1T unfolded: ~47 M tasks (issue: 80 s and 7.6 GB before the first event).
  EXPECT_EQ(run("simulate " + k1T + " --set simulation.fold=false", path("log")), 1);
  std::string log = slurp(path("log"));
  EXPECT_NE(log.find("million tasks"), std::string::npos) << log;
  EXPECT_NE(log.find("simulation.fold=true"), std::string::npos) << log;
  EXPECT_NE(log.find("--force"), std::string::npos) << log;
  // One-parameter DDP buckets: billions of buckets; the message names the field and value.
  EXPECT_EQ(run("simulate " + kSrc + "/scenarios/gpt-145.6b_tp8_pp8_dp24.yaml --set "
                "parallel.ddp_bucket_size=1",
                path("log2")),
            1);
  log = slurp(path("log2"));
  EXPECT_NE(log.find("parallel.ddp_bucket_size (now 1 "), std::string::npos) << log;
  EXPECT_NE(log.find("gpt-145.6b_tp8_pp8_dp24.yaml"), std::string::npos) << log;
}

TEST_F(OutputsCli, TextSummarySaysHowTheRunWasFoldedAndWhatOffloadChose) {
  ASSERT_EQ(run("simulate " + kSrc + "/scenarios/gpt-39.1b_tp8_pp2_dp32.yaml", path("log")), 0);
  std::string log = slurp(path("log"));
  EXPECT_NE(log.find("folded: each stands for 256 ranks"), std::string::npos) << log;
  EXPECT_NE(log.find("folding               simulation.fold: auto"), std::string::npos) << log;
  EXPECT_EQ(log.find("peak host memory"), std::string::npos) << log;  // no offload, no host line
  ASSERT_EQ(run("simulate " + kTiny, path("log2")), 0);
  EXPECT_NE(slurp(path("log2")).find("small enough to simulate every rank"), std::string::npos);
  ASSERT_EQ(run("simulate " + kSrc + "/scenarios/offload/opt-13b_zero3_dp8_offload-auto.yaml",
                path("log3")),
            0);
  log = slurp(path("log3"));
  EXPECT_NE(log.find("chosen by ratio: auto"), std::string::npos) << log;
  EXPECT_NE(log.find("peak host memory"), std::string::npos) << log;
}

}  // namespace

namespace {

// A process that only simulates never loads LibTorch (sweeps start thousands of them): the
// `trainsim` program has no LibTorch library among its dependencies; the LibTorch verbs run in
// trainsim-torch next to it.
TEST(Startup, TheSimulatorDoesNotLinkLibTorch) {
  const std::string log = std::string(TRAINSIM_BINARY_DIR) + "/e2e_ldd.log";
  const std::string cmd = "ldd " + std::string(TRAINSIM_CLI) + " > " + log + " 2>&1";
  ASSERT_EQ(std::system(cmd.c_str()), 0) << slurp(log);
  const std::string libs = slurp(log);
  EXPECT_NE(libs.find("libsimgrid"), std::string::npos) << libs;
  EXPECT_EQ(libs.find("libtorch"), std::string::npos) << libs;
  EXPECT_EQ(libs.find("libc10"), std::string::npos) << libs;
}

}  // namespace
