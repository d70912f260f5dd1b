// The whole run's forecast (models/forecast/forecast.h): the optimum interval against Young and
// Daly's closed form, the wall time, goodput, days, GPU-hours and cost against the arithmetic of
// their pieces, the iteration-time samples, the checkpoint's size against a hand count of the
// model's parameters. Every expectation is computed here from the inputs, not from printed runs.
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <string>

#include "models/forecast/forecast.h"
#include "models/hardware/reliability.h"
#include "models/input/scenario.h"
#include "tests/support/scenario_yaml.h"

namespace trainsim {
namespace {

using test_support::GptModel;
using test_support::gpt_scenario_yaml;

RunModel model(double iteration_s, std::int64_t steps, double mtbf_s, double checkpoint_s) {
  RunModel m;
  m.iteration_s = iteration_s;
  m.steps = steps;
  m.failures_per_s = 1.0 / mtbf_s;
  m.restart_s = 600;
  m.load_s = 120;
  m.copy_s = checkpoint_s;
  return m;
}

TEST(Forecast, OptimalIntervalIsWithinTenPercentOfYoungDaly) {
  // Young (1974) / Daly (2006): tau = sqrt(2 C M) seconds of work between checkpoints.
  for (const auto& [c_s, mtbf_h, t_s] : {std::tuple{30.0, 3.0, 10.0}, std::tuple{5.0, 1.8, 2.0},
                                         std::tuple{120.0, 24.0, 20.0}}) {
    const RunModel m = model(t_s, 1'000'000, mtbf_h * 3600, c_s);
    const double tau_s = std::sqrt(2.0 * c_s * mtbf_h * 3600);
    const auto yd = young_daly_interval_s(c_s, m.failures_per_s);
    ASSERT_TRUE(yd);
    EXPECT_NEAR(*yd, tau_s, 1e-9 * tau_s);
    const double opt_s = double(optimal_interval_steps(m)) * t_s;
    EXPECT_NEAR(opt_s, tau_s, 0.10 * tau_s) << "C " << c_s << " s, MTBF " << mtbf_h << " h";
  }
}

TEST(Forecast, WallTimeIsTheSumOfItsPieces) {
  for (bool async : {false, true}) {
    RunModel m = model(7.0, 12'345, 5 * 3600.0, 40.0);
    if (async) {
      m.copy_s = 4.0;
      m.write_behind_s = 36.0;
    }
    for (std::int64_t k : {1, 10, 100, 1000, 5000}) {
      const RunAtInterval r = run_at_interval(m, k);
      const std::int64_t checkpoints = (m.steps + k - 1) / k;
      EXPECT_EQ(r.checkpoints, checkpoints);
      EXPECT_DOUBLE_EQ(r.useful_s, double(m.steps) * m.iteration_s);
      // A segment's blocking save: the copy, plus (async) the wait for the previous write.
      double blocking_total = 0;
      const std::int64_t full = m.steps / k, rest = m.steps % k;
      auto blocking = [&](std::int64_t steps) {
        return m.copy_s + std::max(0.0, m.write_behind_s - double(steps) * m.iteration_s);
      };
      blocking_total = double(full) * blocking(k) + (rest > 0 ? blocking(rest) : 0.0);
      const double pieces = r.useful_s + blocking_total +
                            r.expected_interruptions *
                                (r.lost_work_per_failure_s + m.restart_s + m.load_s);
      EXPECT_NEAR(r.wall_s, pieces, 1e-9 * r.wall_s) << "k " << k << " async " << async;
      EXPECT_DOUBLE_EQ(r.goodput, r.useful_s / r.wall_s);
      // Expected interruptions of a Poisson process over the segments: e^{λw} - 1 each.
      const double w = double(k) * m.iteration_s + blocking(k);
      const double wr = double(rest) * m.iteration_s + blocking(rest);
      const double n = double(full) * std::expm1(w * m.failures_per_s) +
                       (rest > 0 ? std::expm1(wr * m.failures_per_s) : 0.0);
      EXPECT_NEAR(r.expected_interruptions, n, 1e-12 * n + 1e-15);
    }
  }
}

TEST(Forecast, NoFailuresMeansOnlyCheckpointsCost) {
  RunModel m = model(2.0, 1000, 1.0, 10.0);
  m.failures_per_s = 0;
  const RunAtInterval r = run_at_interval(m, 100);
  EXPECT_DOUBLE_EQ(r.wall_s, 1000 * 2.0 + 10 * 10.0);
  EXPECT_EQ(r.expected_interruptions, 0);
  EXPECT_EQ(optimal_interval_steps(m), 1000);
  EXPECT_FALSE(young_daly_interval_s(10.0, 0.0));
}

std::string training_yaml(const std::string& training) {
  // A 2-layer GPT (h 64, s 128, V 1024) on 8 A100s, data parallel 8; global batch 16.
  return gpt_scenario_yaml("run", GptModel{2, 64, 4, 128, 1024},
                           "{micro_batch_size: 2, global_batch_size: 16, precision: bf16}",
                           "{stage: 0}", 8) +
         "training: {" + training + "}\n";
}

TEST(Forecast, CheckpointIsWeightsAndAdamStateOfEveryParameterOnce) {
  const ValidScenario sc = validated(parse_scenario(training_yaml("train_iters: 10"), "run.yaml"));
  // Megatron's GPT, by hand: per layer QKV 3h^2 + 3h, projection h^2 + h, fc1 4h^2 + 4h,
  // fc2 4h^2 + h, two LayerNorms 4h; word and position embeddings V h + s h; final LayerNorm 2h.
  const double h = 64, L = 2, V = 1024, s = 128;
  const double params = L * (12 * h * h + 13 * h) + V * h + s * h + 2 * h;
  // bf16 weights (2 B) + fp32 main parameters and Adam's two moments (12 B).
  const CheckpointShards c = checkpoint_shards(sc);
  EXPECT_DOUBLE_EQ(c.total_bytes, 14 * params);
  ASSERT_EQ(c.bytes_per_rank.size(), 8u);
  for (double b : c.bytes_per_rank) EXPECT_DOUBLE_EQ(b, 14 * params / 8);  // split over DP
}

TEST(Forecast, DaysGpuHoursAndCostFollowFromTheWallTime) {
  const ValidScenario sc = validated(parse_scenario(
      training_yaml("train_tokens: 2e9, gpu_hour_usd: 2.5, mttf_h: 4, restart_s: 300, "
                    "checkpoint: {interval_steps: 50}"),
      "run.yaml"));
  IterationTimes it;
  it.deterministic_s = it.mean_s = it.p50_s = it.p90_s = it.p99_s = 0.8;
  CheckpointTimes ck;
  ck.copy_s = 3;
  ck.write_s = 9;
  ck.read_s = 11;
  ck.h2d_s = 2;
  const Forecast f = forecast_run(sc, 8, it, checkpoint_shards(sc), ck);
  const double tokens_per_step = 16 * 128;
  EXPECT_EQ(f.steps, std::int64_t(std::ceil(2e9 / tokens_per_step)));
  EXPECT_DOUBLE_EQ(f.failures_per_h, 1.0 / 4);
  EXPECT_EQ(f.run.interval_steps, 50);
  EXPECT_DOUBLE_EQ(f.run.checkpoint_blocking_s, 12.0);  // synchronous: copy + write
  EXPECT_DOUBLE_EQ(f.run.useful_s, double(f.steps) * 0.8);
  EXPECT_DOUBLE_EQ(f.run.goodput, f.run.useful_s / f.run.wall_s);
  EXPECT_DOUBLE_EQ(f.wall_days, f.run.wall_s / 86400);
  EXPECT_DOUBLE_EQ(f.gpu_hours, f.run.wall_s * 8 / 3600);
  ASSERT_TRUE(f.cost_usd);
  EXPECT_DOUBLE_EQ(*f.cost_usd, f.gpu_hours * 2.5);
  const double pieces = f.run.useful_s + double(f.run.checkpoints) * 12.0 +
                        f.run.expected_interruptions *
                            (f.run.lost_work_per_failure_s + 300 + ck.load_s());
  EXPECT_NEAR(f.run.wall_s, pieces, 1e-9 * pieces);
  const nlohmann::json j = forecast_to_json(f);
  for (const char* key : {"goodput", "optimal_checkpoint_interval_steps", "checkpoint_save_s",
                          "expected_interruptions", "wall_days", "gpu_hours", "cost_usd"})
    EXPECT_TRUE(j.contains(key)) << key;
  for (const char* key : {"p50", "p90", "p99", "deterministic"})
    EXPECT_TRUE(j.at("iteration_time_s").contains(key)) << key;
}

TEST(Forecast, DefaultRatesAreTheLlama3CountsOverTheirExposure) {
  const ValidScenario sc = validated(parse_scenario(training_yaml("train_iters: 10"), "run.yaml"));
  const double hours = 54.0 * 24;
  EXPECT_DOUBLE_EQ(sc->training.gpu_failures_per_h, 268 / (16384 * hours));
  EXPECT_DOUBLE_EQ(sc->training.node_failures_per_h, 109 / (2048 * hours));
  EXPECT_DOUBLE_EQ(sc->training.link_failures_per_h, 42 / (16384 * hours));
  // At Llama 3's scale (16,384 GPUs, 2,048 nodes, 8 NICs a node) the rates give back the 419
  // unexpected interruptions of the 54 days.
  const double per_h = 16384 * sc->training.gpu_failures_per_h +
                       2048 * sc->training.node_failures_per_h +
                       2048 * 8 * sc->training.link_failures_per_h;
  EXPECT_NEAR(per_h * hours, 419, 1e-9);
  // 8 GPUs on one node of 8 NICs: the job's rate.
  EXPECT_NEAR(job_failures_per_s(*sc, 8) * 3600,
              8 * sc->training.gpu_failures_per_h + sc->training.node_failures_per_h +
                  8 * sc->training.link_failures_per_h,
              1e-18);
}

TEST(Forecast, SamplesWithoutVariabilitySimulateNothing) {
  int calls = 0;
  const IterationTimes t =
      sample_iteration_times(1.5, false, 100, 7, [&](std::uint64_t) { return ++calls, 9.0; });
  EXPECT_EQ(calls, 0);
  EXPECT_EQ(t.p50_s, 1.5);
  EXPECT_EQ(t.p99_s, 1.5);
  EXPECT_EQ(t.mean_s, 1.5);
}

TEST(Forecast, SamplesArePercentilesOfTheSamplerAndReproducible) {
  // Sample i returns 1 + i / 100 (found through its seed): 100 samples 1.00 .. 1.99.
  std::map<std::uint64_t, int> index;
  for (int i = 0; i < 100; ++i) index[sample_seed(42, i)] = i;
  ASSERT_EQ(index.size(), 100u);  // distinct seeds
  auto sampler = [&](std::uint64_t seed) { return 1.0 + index.at(seed) / 100.0; };
  const IterationTimes a = sample_iteration_times(1.0, true, 100, 42, sampler);
  const IterationTimes b = sample_iteration_times(1.0, true, 100, 42, sampler);
  // Nearest rank: p50 the 50th smallest (1.49), p90 the 90th (1.89), p99 the 99th (1.98).
  EXPECT_DOUBLE_EQ(a.p50_s, 1.49);
  EXPECT_DOUBLE_EQ(a.p90_s, 1.89);
  EXPECT_DOUBLE_EQ(a.p99_s, 1.98);
  EXPECT_NEAR(a.mean_s, 1.495, 1e-12);
  EXPECT_EQ(a.p99_s, b.p99_s);
  EXPECT_EQ(a.mean_s, b.mean_s);
}

}  // namespace
}  // namespace trainsim
