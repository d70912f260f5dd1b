// trainsim diff end to end: two simulated summaries of the same tiny scenario, one with a
// larger micro batch; the comparison's deltas are checked against the two summaries' own
// values, and the changed settings are exactly the ones the run changed.
#include <gtest/gtest.h>

#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "tests/support/paths.h"
#include "tests/e2e/cli_helpers.h"

namespace {

using nlohmann::json;
using trainsim::test_support::ScratchDir;
using trainsim::test_support::source_path;
using trainsim_e2e::run;
using trainsim_e2e::slurp;

TEST(DiffCli, ComparesTwoSimulatedSummaries) {
  ScratchDir dir("e2e_diff");
  const std::string tiny = source_path("scenarios/small/gpt-tiny_tp2_pp2_dp2.yaml");
  const std::string a = (dir.path() / "a.json").string(), b = (dir.path() / "b.json").string(),
                    d = (dir.path() / "d.json").string(), log = (dir.path() / "log").string();
  ASSERT_EQ(run("simulate " + tiny + " --json " + a, log), 0) << slurp(log);
  ASSERT_EQ(run("simulate " + tiny + " --set parallel.recompute_granularity=full --json " + b, log),
            0)
      << slurp(log);
  ASSERT_EQ(run("diff " + a + " " + b + " --json " + d, log), 0) << slurp(log);
  const std::string text = slurp(log);
  EXPECT_NE(text.find("settings.recompute_granularity"), std::string::npos) << text;
  const json ja = json::parse(slurp(a)), jb = json::parse(slurp(b)), jd = json::parse(slurp(d));
  bool saw_time = false;
  for (const json& m : jd["metrics"])
    if (m["key"] == "iteration_time_s") {
      saw_time = true;
      const double ta = ja["iteration_time_s"], tb = jb["iteration_time_s"];
      EXPECT_DOUBLE_EQ(m["delta"].get<double>(), tb - ta);
      EXPECT_DOUBLE_EQ(m["relative"].get<double>(), tb / ta - 1);
      EXPECT_GT(tb, ta);  // full recomputation re-runs every forward
    }
  EXPECT_TRUE(saw_time);
  std::vector<std::string> keys;
  for (const json& s : jd["settings_differ"]) keys.push_back(s["key"]);
  EXPECT_EQ(keys, (std::vector<std::string>{"settings.recompute_granularity",
                                            "settings.recompute_method",
                                            "settings.recompute_num_layers"}));
}

TEST(DiffCli, RefusesANonSummaryAndAnOutputOverAnInput) {
  ScratchDir dir("e2e_diff");
  const std::string a = (dir.path() / "a.json").string(), log = (dir.path() / "log").string();
  {
    std::ofstream(a) << R"({"iteration_time_s": 1})";
  }
  EXPECT_EQ(run("diff " + a + " " + a, log), 1);
  EXPECT_NE(slurp(log).find(a + ": field 'summary_version' is missing"), std::string::npos)
      << slurp(log);
  EXPECT_EQ(run("diff " + a + " " + a + " --json " + a, log), 1);
  EXPECT_NE(slurp(log).find("refusing to overwrite an input"), std::string::npos) << slurp(log);
  EXPECT_EQ(run("diff " + a, log), 1);  // B missing
}

}  // namespace
