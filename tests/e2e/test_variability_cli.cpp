// `variability:` through the command line (docs/scenario.md "variability"): bad values exit 1
// with the file, the field and the value; a slow GPU named by --set unfolds its ranks
// (summary `unfolded_ranks`).
#include <gtest/gtest.h>

#include <filesystem>
#include <string>
#include <utility>
#include <vector>

#include "tests/e2e/cli_helpers.h"
#include "tests/support/paths.h"

namespace {

using trainsim_e2e::run;
using trainsim_e2e::slurp;

// TP 2 x PP 2 x DP 2 on one 8-GPU node.
constexpr const char* kScenario = "scenarios/small/gpt-tiny_tp2_pp2_dp2.yaml";

TEST(VariabilityCli, BadValuesExitOneNamingFileFieldAndValue) {
  trainsim::test_support::ScratchDir dir("variability_cli_bad");
  const std::string yaml = trainsim::test_support::source_path(kScenario);
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"{slow_gpus: [{rank: 1, speed: 0}]}", "variability.slow_gpus[0].speed"},
      {"{slow_gpus: [{rank: 1, speed: 1.5}]}", "variability.slow_gpus[0].speed"},
      {"{slow_gpus: [{rank: 8, speed: 0.5}]}", "variability.slow_gpus[0].rank"},
      {"{slow_links: [{node: 1, nic: 0, bandwidth: 0.5}]}", "variability.slow_links[0].node"},
      {"{slow_links: [{node: 0, nic: 8, bandwidth: 0.5}]}", "variability.slow_links[0].nic"},
      {"{slow_links: [{node: 0, nic: 1, bandwidth: 0}]}", "variability.slow_links[0].bandwidth"},
      {"{slow_links: [{node: 0, nvlink_gpu: 1, bandwidth: 2}]}",
       "variability.slow_links[0].bandwidth"},
      {"{gpu_speed_cv: -0.2}", "variability.gpu_speed_cv"},
  };
  for (const auto& [value, field] : cases) {
    const std::string log = (dir.path() / "bad.log").string();
    EXPECT_EQ(run("simulate " + yaml + " --set 'variability=" + value + "'", log), 1) << value;
    const std::string out = slurp(log);
    EXPECT_NE(out.find("gpt-tiny_tp2_pp2_dp2.yaml"), std::string::npos) << out;
    EXPECT_NE(out.find(field), std::string::npos) << out;
  }
}

TEST(VariabilityCli, ASlowGpuIsUnfolded) {
  trainsim::test_support::ScratchDir dir("variability_cli_slow");
  const std::string json = (dir.path() / "s.json").string();
  ASSERT_EQ(run("simulate " + trainsim::test_support::source_path(kScenario) +
                    " --set simulation.fold=true --set 'variability={slow_gpus: [{rank: 7, "
                    "speed: 0.5}]}' --json " + json,
                (dir.path() / "s.log").string()),
            0)
      << slurp(dir.path() / "s.log");
  const std::string out = slurp(json);
  EXPECT_NE(out.find("\"unfolded_ranks\""), std::string::npos) << out;
  // The trace's rank note says the representatives stand for varying numbers of ranks.
  ASSERT_EQ(run("simulate " + trainsim::test_support::source_path(kScenario) +
                    " --set simulation.fold=true --set 'variability={slow_gpus: [{rank: 7, "
                    "speed: 0.5}]}' --trace-ranks all --json " + json,
                (dir.path() / "s.log").string()),
            0)
      << slurp(dir.path() / "s.log");
  EXPECT_NE(slurp(json).find("the graph is partially folded"), std::string::npos) << slurp(json);
}

}  // namespace
