// `trainsim forecast` end to end: a tiny scenario with a training: section forecasts its run
// (text and JSON, the JSON's figures consistent with each other by arithmetic), is
// deterministic, and bad training values exit 1 naming the file, field and value; the
// planner's --objective goodput ranks candidates and refuses a scenario without training:.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "tests/e2e/cli_helpers.h"
#include "tests/support/paths.h"
#include "tests/support/scenario_yaml.h"

namespace {

using trainsim::test_support::ScratchDir;
using trainsim_e2e::run;
using trainsim_e2e::slurp;

/// A small TP 2 x PP 2 x DP 4 run on two DGX-A100 nodes, with `training` appended.
std::string scenario(const std::string& training) {
  return trainsim::test_support::gpt_cli_scenario_yaml(
             "forecast_e2e", {4, 256, 8, 128, 1024},
             "{tensor_model_parallel_size: 2, pipeline_model_parallel_size: 2, "
             "micro_batch_size: 2, global_batch_size: 16, precision: bf16}",
             "{system: dgx-a100-80gb, nodes: 2, gpus_per_node: 8}") +
         training;
}

TEST(ForecastCli, ForecastsTheRunAndItsFiguresAddUp) {
  ScratchDir dir("forecast_cli");
  const std::string path = dir.write(
      "s.yaml", scenario("training:\n  train_tokens: 2e8\n  gpu_hour_usd: 2\n  mttf_h: 0.5\n"
                         "  checkpoint: {write_bw_bytes_per_s: 1e9}\n"));
  const std::string json_path = dir.file("f.json").string();
  ASSERT_EQ(run("forecast " + path + " --samples 5 --seed 3 --json " + json_path,
                dir.file("log").string()),
            0)
      << slurp(dir.file("log"));
  const std::string text = slurp(dir.file("log"));
  EXPECT_NE(text.find("goodput"), std::string::npos) << text;
  const nlohmann::json j = nlohmann::json::parse(slurp(json_path));
  const auto& it = j.at("iteration_time_s");
  EXPECT_EQ(it.at("samples"), 5);
  EXPECT_EQ(it.at("p50"), it.at("deterministic"));  // no variability: all samples equal
  EXPECT_EQ(it.at("p99"), it.at("deterministic"));
  const double t = it.at("mean"), wall = j.at("wall_s");
  const std::int64_t steps = j.at("steps");
  EXPECT_EQ(steps, std::int64_t(std::ceil(2e8 / (16 * 128))));
  EXPECT_DOUBLE_EQ(j.at("useful_time_s").get<double>(), double(steps) * t);
  EXPECT_DOUBLE_EQ(j.at("goodput").get<double>(), double(steps) * t / wall);
  EXPECT_DOUBLE_EQ(j.at("wall_days").get<double>(), wall / 86400);
  EXPECT_DOUBLE_EQ(j.at("gpu_hours").get<double>(), wall * 16 / 3600);
  EXPECT_DOUBLE_EQ(j.at("cost_usd").get<double>(), j.at("gpu_hours").get<double>() * 2);
  EXPECT_DOUBLE_EQ(j.at("failures_per_h").get<double>(), 2.0);
  EXPECT_GT(j.at("checkpoint_save_s").get<double>(), 0);
  EXPECT_GT(j.at("expected_interruptions").get<double>(), 0);
  EXPECT_GE(j.at("optimal_checkpoint_interval_steps").get<std::int64_t>(), 1);
  // Deterministic: the same input gives the same bytes.
  const std::string again = dir.file("g.json").string();
  ASSERT_EQ(run("forecast " + path + " --samples 5 --seed 3 --json " + again,
                dir.file("log2").string()),
            0);
  EXPECT_EQ(slurp(json_path), slurp(again));
}

// A per-GPU speed spread: each sample is the run again with its own variability.seed, so the
// samples differ, p99 >= p90 >= p50, the spread's mean stays near the deterministic run's
// (lognormal speeds of mean 1), and a fixed --seed gives the same distribution byte for byte;
// a spread of 0 is the deterministic run.
TEST(ForecastCli, SpeedSpreadSamplesAreReproducibleAndOrdered) {
  ScratchDir dir("forecast_cli");
  const std::string training = "training:\n  train_tokens: 2e8\n  gpu_hour_usd: 2\n";
  const std::string spread =
      dir.write("cv.yaml", scenario(training + "variability: {gpu_speed_cv: 0.2}\n"));
  const std::string none =
      dir.write("cv0.yaml", scenario(training + "variability: {gpu_speed_cv: 0}\n"));
  const std::string a = dir.file("a.json").string(), b = dir.file("b.json").string(),
                    c = dir.file("c.json").string(), log = dir.file("log").string();
  ASSERT_EQ(run("forecast " + spread + " --samples 9 --seed 11 --json " + a, log), 0) << slurp(log);
  ASSERT_EQ(run("forecast " + spread + " --samples 9 --seed 11 --json " + b, log), 0) << slurp(log);
  EXPECT_EQ(slurp(a), slurp(b));
  const nlohmann::json it = nlohmann::json::parse(slurp(a)).at("iteration_time_s");
  EXPECT_TRUE(it.at("variable").get<bool>());
  const double p50 = it.at("p50"), p90 = it.at("p90"), p99 = it.at("p99");
  EXPECT_LE(p50, p90);
  EXPECT_LE(p90, p99);
  EXPECT_LT(p50, p99);  // nine draws of a 20% spread are not all equal
  ASSERT_EQ(run("forecast " + none + " --samples 9 --seed 11 --json " + c, log), 0) << slurp(log);
  const nlohmann::json flat = nlohmann::json::parse(slurp(c)).at("iteration_time_s");
  EXPECT_EQ(flat.at("p50"), flat.at("deterministic"));
  EXPECT_EQ(flat.at("p99"), flat.at("deterministic"));
}

TEST(ForecastCli, BadTrainingValuesExitOneNamingFileFieldAndValue) {
  ScratchDir dir("forecast_cli");
  struct Case {
    std::string training, field, value;
  };
  for (const Case& c : {Case{"training: {train_tokens: 1e9, mttf_h: -2}\n", "training.mttf_h", "-2"},
                        Case{"training: {train_tokens: 1e9, checkpoint: {interval_steps: 0}}\n",
                             "training.checkpoint.interval_steps", "0"},
                        Case{"training: {train_tokens: 100}\n", "training.train_tokens", "100"},
                        Case{"training: {gpu_failures_per_h: -1}\n",
                             "training.gpu_failures_per_h", "-1"},
                        Case{"", "training.train_tokens", "missing"}}) {
    const std::string path = dir.write("bad.yaml", scenario(c.training));
    EXPECT_EQ(run("forecast " + path, dir.file("log").string()), 1) << c.training;
    const std::string log = slurp(dir.file("log"));
    EXPECT_NE(log.find(path), std::string::npos) << log;
    EXPECT_NE(log.find(c.field), std::string::npos) << log;
    EXPECT_NE(log.find(c.value), std::string::npos) << log;
  }
}

TEST(ForecastCli, PlanObjectiveGoodputNeedsATrainingSection) {
  ScratchDir dir("forecast_cli");
  const std::string plain = dir.write("plain.yaml", scenario(""));
  EXPECT_EQ(run("plan " + plain + " --objective goodput --jobs 1", dir.file("log").string()), 1);
  EXPECT_NE(slurp(dir.file("log")).find("--objective goodput"), std::string::npos)
      << slurp(dir.file("log"));
  const std::string priced = dir.write(
      "priced.yaml", scenario("training: {train_tokens: 2e8, gpu_hour_usd: 2}\n"
                              "plan: {tensor_model_parallel_size: [1, 2], "
                              "pipeline_model_parallel_size: [1], micro_batch_size: [2], "
                              "recompute_granularity: [none], zero_stage: [0]}\n"));
  ASSERT_EQ(run("plan " + priced + " --objective cost --jobs 1 --top 2",
                dir.file("log").string()),
            0)
      << slurp(dir.file("log"));
  const std::string table = slurp(dir.file("log"));
  EXPECT_NE(table.find("goodput"), std::string::npos) << table;
  EXPECT_NE(table.find("cost USD"), std::string::npos) << table;
}

}  // namespace
