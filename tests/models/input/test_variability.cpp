// Scenario section `variability:` (models/input/variability.h): bad input is refused naming the
// file, the field and the value; the speed sample follows its closed form (lognormal, mean 1,
// coefficient of variation c) and is reproducible for a seed.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "models/errors.h"
#include "models/input/scenario.h"
#include "models/input/variability.h"

namespace trainsim {
namespace {

// 2 nodes x 8 A100s (8 NICs a node), TP 8 x DP 2.
std::string yaml_with(const std::string& variability) {
  return R"(
name: v
model: {num_layers: 2, hidden_size: 256, num_attention_heads: 8, seq_length: 128, padded_vocab_size: 1024}
parallel: {tensor_model_parallel_size: 8, micro_batch_size: 1, global_batch_size: 2}
cluster: {system: dgx-a100-80gb, nodes: 2}
variability:
)" + variability;
}

std::string refusal(const std::string& variability) {
  try {
    parse_scenario(yaml_with(variability), "v.yaml");
  } catch (const InputError& e) {
    return e.what();
  } catch (const std::exception& e) {
    ADD_FAILURE() << "not an InputError: " << e.what();
    return "";
  }
  ADD_FAILURE() << "accepted: " << variability;
  return "";
}

/// The message names the file (with the line), the field and the value.
void expect_refused(const std::string& variability, const std::string& field,
                    const std::string& value) {
  const std::string m = refusal(variability);
  EXPECT_NE(m.find("v.yaml:"), std::string::npos) << m;
  EXPECT_NE(m.find(field), std::string::npos) << m;
  EXPECT_NE(m.find(value), std::string::npos) << m;
}

TEST(Variability, SpeedOutOfRange) {
  expect_refused("  slow_gpus: [{rank: 3, speed: 0}]", "variability.slow_gpus[0].speed", "'0'");
  expect_refused("  slow_gpus: [{rank: 3, speed: -0.5}]", "variability.slow_gpus[0].speed", "'-0.5'");
  expect_refused("  slow_gpus: [{rank: 1, speed: 0.9}, {rank: 3, speed: 1.2}]",
                 "variability.slow_gpus[1].speed", "'1.2'");
}

TEST(Variability, RankOutOfRange) {
  expect_refused("  slow_gpus: [{rank: 16, speed: 0.8}]", "variability.slow_gpus[0].rank", "'16'");
  expect_refused("  slow_gpus: [{rank: -1, speed: 0.8}]", "variability.slow_gpus[0].rank", "'-1'");
}

TEST(Variability, NodeNicOrGpuOutOfRange) {
  expect_refused("  slow_links: [{node: 2, nic: 0, bandwidth: 0.5}]",
                 "variability.slow_links[0].node", "'2'");
  expect_refused("  slow_links: [{node: 1, nic: 8, bandwidth: 0.5}]",
                 "variability.slow_links[0].nic", "'8'");
  expect_refused("  slow_links: [{node: 1, nvlink_gpu: 8, bandwidth: 0.5}]",
                 "variability.slow_links[0].nvlink_gpu", "'8'");
  expect_refused("  slow_links: [{node: 1, bandwidth: 0.5}]", "variability.slow_links[0]",
                 "give one of nic or nvlink_gpu");
}

TEST(Variability, BandwidthOutOfRange) {
  expect_refused("  slow_links: [{node: 0, nic: 1, bandwidth: 0}]",
                 "variability.slow_links[0].bandwidth", "'0'");
  expect_refused("  slow_links: [{node: 0, nvlink_gpu: 1, bandwidth: 1.5}]",
                 "variability.slow_links[0].bandwidth", "'1.5'");
}

TEST(Variability, NegativeSpreadAndUnknownKeys) {
  expect_refused("  gpu_speed_cv: -0.1", "variability.gpu_speed_cv", "-0.1");
  expect_refused("  slow_gpus: [{rank: 1, speed: 0.5, sped: 1}]", "variability.slow_gpus[0].sped",
                 "'1'");
  expect_refused("  slow_gpus: {rank: 1, speed: 0.5}", "variability.slow_gpus", "(a mapping)");
}

TEST(Variability, ReadsTheSection) {
  const Scenario sc = parse_scenario(
      yaml_with("  slow_gpus: [{rank: 9, speed: 0.8}]\n"
                "  slow_links: [{node: 1, nic: 2, bandwidth: 0.5}, {node: 0, nvlink_gpu: 3, "
                "bandwidth: 0.25}]\n  gpu_speed_cv: 0.05\n  seed: 7\n"),
      "v.yaml");
  const VariabilityConfig& v = sc.variability;
  ASSERT_EQ(v.slow_gpus.size(), 1u);
  EXPECT_EQ(v.slow_gpus[0].rank, 9);
  EXPECT_EQ(v.slow_gpus[0].speed, 0.8);
  ASSERT_EQ(v.slow_links.size(), 2u);
  EXPECT_EQ(v.slow_links[0].nic, 2);
  EXPECT_EQ(v.slow_links[1].nvlink_gpu, 3);
  EXPECT_EQ(v.slow_links[1].nic, -1);
  EXPECT_EQ(v.gpu_speed_cv, 0.05);
  EXPECT_EQ(v.seed, 7);
  // The NIC's whole node (ranks 8..15) and the NVLink port's GPU (rank 3).
  std::vector<std::int64_t> want{3};
  for (std::int64_t r = 8; r < 16; ++r) want.push_back(r);
  EXPECT_EQ(named_asymmetric_ranks(v, 8), want);
  const Scenario none = parse_scenario(yaml_with("  seed: 0\n"), "v.yaml");
  EXPECT_FALSE(none.variability.any());
}

TEST(Variability, SpeedsWithoutSpread) {
  VariabilityConfig v;
  v.slow_gpus = {{5, 0.8}, {5, 0.5}};
  const std::vector<double> s = gpu_speeds(v, 16);
  for (std::size_t r = 0; r < s.size(); ++r) EXPECT_EQ(s[r], r == 5 ? 0.8 * 0.5 : 1.0) << r;
}

// ln(speed) ~ N(-sigma^2/2, sigma^2), sigma^2 = ln(1 + c^2): mean 1, standard deviation c.
TEST(Variability, LognormalSpreadClosedForm) {
  VariabilityConfig v;
  v.gpu_speed_cv = 0.1;
  v.seed = 3;
  const std::size_t n = 200000;
  const std::vector<double> s = gpu_speeds(v, std::int64_t(n));
  double sum = 0, sum2 = 0, log_sum = 0;
  for (double x : s) sum += x, sum2 += x * x, log_sum += std::log(x);
  const double mean = sum / double(n), sd = std::sqrt(sum2 / double(n) - mean * mean);
  const double sigma2 = std::log(1 + 0.01);
  // Standard errors: c / sqrt(n) = 2.2e-4 for the mean; about c / sqrt(2n) for the deviation.
  EXPECT_NEAR(mean, 1.0, 1e-3);
  EXPECT_NEAR(sd, 0.1, 1e-3);
  EXPECT_NEAR(log_sum / double(n), -sigma2 / 2, 1e-3);
  EXPECT_EQ(gpu_speeds(v, 64), gpu_speeds(v, 64));  // reproducible
  VariabilityConfig w = v;
  w.seed = 4;
  EXPECT_NE(gpu_speeds(w, 64), gpu_speeds(v, 64));
  // A prefix does not depend on the cluster's size: rank r's GPU keeps its speed.
  const std::vector<double> small = gpu_speeds(v, 64);
  for (std::size_t r = 0; r < small.size(); ++r) EXPECT_EQ(small[r], s[r]);
}

}  // namespace
}  // namespace trainsim
