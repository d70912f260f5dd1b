// models/builder/graph_builder.h count_schedule_tasks: the builder counts its own tasks (its
// passes run into a counting build), so the count is the built graph's, task for task: checked
// on every shipped scenario (scenarios/**/*.yaml, as validation/golden.py finds them) and on
// variants that add tasks per layer (full and block recomputation, MLP-module re-runs, MoE
// token exchanges, ZeRO-3 gathers, the distributed optimizer), against the folded graph the
// builder then builds. models/run.h estimate_run, the task count prepare_run checks against
// its size limits before building anything, is that count (times the replicas unfolded):
// within 1% of the built graph everywhere (in fact exactly the built graph's).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <string>
#include <vector>

#include "models/builder/graph_builder.h"
#include "models/hardware/calibration.h"
#include "models/hardware/hardware.h"
#include "models/hardware/local_device.h"
#include "models/input/scenario.h"
#include "models/errors.h"
#include "models/run.h"
#include "tests/support/paths.h"

namespace trainsim {
namespace {

struct Case {
  std::string scenario;  ///< relative to the source tree
  std::vector<std::pair<std::string, std::string>> overrides;
};

/// Every shipped scenario, as validation/golden.py lists them.
std::vector<Case> shipped_scenarios() {
  namespace fs = std::filesystem;
  const fs::path root = test_support::source_path("scenarios");
  std::vector<Case> out;
  for (const auto& f : fs::recursive_directory_iterator(root))
    if (f.is_regular_file() && f.path().extension() == ".yaml")
      out.push_back({"scenarios/" + fs::relative(f.path(), root).generic_string(), {}});
  std::sort(out.begin(), out.end(),
            [](const Case& a, const Case& b) { return a.scenario < b.scenario; });
  return out;
}

/// Variants of shipped scenarios with more tasks per layer than the scenario itself has.
std::vector<Case> variants() {
  const std::string q30 = "scenarios/h100/qwen3-30b-a3b_fp8-cs_tp1_pp2_vp24_ep8_dp8_r25.11.yaml";
  const std::string l70 = "scenarios/h100/llama3-70b_fp8-cs_tp4_pp8_vp5_dp2_r25.11.yaml";
  const std::string g145 = "scenarios/gpt-145.6b_tp8_pp8_dp24.yaml";
  return {
      {g145, {{"parallel.recompute_method", "block"}, {"parallel.recompute_num_layers", "2"}}},
      {g145, {{"runtime", "megatron-core"}, {"parallel.use_distributed_optimizer", "true"}}},
      {l70, {{"parallel.recompute_granularity", "selective"}, {"parallel.recompute_modules", "[mlp]"}}},
      // moe recomputation: without the EP overlap the scenario sets (Megatron-Core refuses both).
      {q30, {{"parallel.recompute_granularity", "selective"},
             {"parallel.recompute_modules", "[moe, layernorm]"},
             {"parallel.overlap_moe_expert_parallel_comm", "false"},
             {"parallel.delay_wgrad_compute", "false"}}},
      {q30, {{"model.moe_layer_freq", "2"}}},
      {"scenarios/zero3/gpt-175b_zero3_dp384.yaml", {{"parallel.recompute_granularity", "full"}}},
      {"scenarios/offload/opt-13b_zero3_dp8_offload-r1.yaml",
       {{"deepspeed.zero_optimization.offload_optimizer.ratio", "0.5"}}},
  };
}

/// The scenario of `c` as prepare_run builds it: its `offload_optimizer.ratio: auto` resolved,
/// on its system (the `local` scenarios with the golden outputs' CPU profile, as
/// validation/golden.py simulates them), and the folded graph the builder builds for it.
struct Built {
  ValidScenario scenario;
  double tasks = 0;
};
Built build_folded(const Case& c) {
  Built b{validated(load_scenario(test_support::source_path(c.scenario), c.overrides))};
  const Scenario& sc = b.scenario;
  BuildOptions opt;
  opt.fold = true;
  SystemSpec system;
  CalibrationProfile profile;
  if (sc.cluster.system == kLocalSystemName) {
    const std::string path = test_support::source_path("tests/golden/cpu_profile.json");
    profile = load_calibration(path);
    system = local_system(profile, path, sc.cluster.nodes);
  } else {
    system = find_system(sc.cluster.system);
    profile = default_calibration(system.gpu.name);
  }
  opt.calibration = &profile;
  if (sc.zero.offload_optimizer.ratio_auto) resolve_offload_ratio(b.scenario, system, profile);
  b.tasks = double(build_schedule_graph(b.scenario, system, opt).num_tasks());
  return b;
}

std::string describe(const Case& c) {
  std::string what = c.scenario;
  for (const auto& [k, v] : c.overrides) what += " " + k + "=" + v;
  return what;
}

void expect_count_is_built_graphs(const Case& c) {
  const Built b = build_folded(c);
  // The builder's own count is the built graph's, task for task.
  EXPECT_EQ(double(count_schedule_tasks(b.scenario)), b.tasks) << describe(c);
  // estimate_run, on the scenario as prepare_run last estimates it (`ratio: auto` resolved),
  // folded and not: within 1% of the built graph.
  const RunEstimate folded = estimate_run(b.scenario, true);
  const RunEstimate unfolded = estimate_run(b.scenario, false);
  EXPECT_TRUE(folded.complete) << describe(c);
  EXPECT_LE(std::abs(folded.tasks / b.tasks - 1), 0.01) << describe(c);
  const ParallelConfig& p = b.scenario->parallel;
  const double replicas = double(p.tensor_model_parallel_size) * double(p.data_parallel_size) *
                          double(p.context_parallel_size);
  EXPECT_LE(std::abs(unfolded.tasks / (b.tasks * replicas) - 1), 0.01) << describe(c);
  EXPECT_EQ(folded.unfolded_tasks, unfolded.tasks) << describe(c);
}

TEST(BuilderTaskCount, IsTheBuiltGraphsOnEveryShippedScenario) {
  const std::vector<Case> cases = shipped_scenarios();
  ASSERT_GE(cases.size(), 30u);  // the tree's scenarios were found
  for (const Case& c : cases) expect_count_is_built_graphs(c);
}

TEST(BuilderTaskCount, IsTheBuiltGraphsOnVariantsWithMoreTasksPerLayer) {
  for (const Case& c : variants()) expect_count_is_built_graphs(c);
}

TEST(BuilderTaskCount, TimesTheReplicasIsTheUnfoldedGraphs) {
  // A small scenario with TP and DP peers, built unfolded: every peer runs its stage
  // representative's program, so the unfolded graph has tp x dp times the folded count.
  const Scenario sc =
      load_scenario(test_support::source_path("scenarios/small/gpt-tiny_tp2_pp2_dp2.yaml"));
  const ScheduleGraph g = build_schedule_graph(validated(sc), find_system(sc.cluster.system), BuildOptions{});
  EXPECT_EQ(4 * count_schedule_tasks(validated(sc)), std::int64_t(g.num_tasks()));
}

TEST(BuilderTaskCount, StopsPastItsLimit) {
  // One-parameter gradient buckets: billions of tasks per rank, which a count must not walk.
  const Scenario sc =
      load_scenario(test_support::source_path("scenarios/gpt-145.6b_tp8_pp8_dp24.yaml"),
                    {{"parallel.ddp_bucket_size", "1"}});
  EXPECT_EQ(count_schedule_tasks(validated(sc), 1000000), 1000001);
}

TEST(RunEstimate, ARunawayCountStopsAndSaysSo) {
  // One-parameter gradient buckets: the count stops past twice the run limit, and the refusal
  // says "more than".
  const ValidScenario sc =
      validated(load_scenario(test_support::source_path("scenarios/gpt-145.6b_tp8_pp8_dp24.yaml"),
                              {{"parallel.ddp_bucket_size", "1"}}));
  const RunEstimate e = estimate_run(sc, true);
  EXPECT_FALSE(e.complete);
  EXPECT_GT(e.tasks, 2 * kMaxRunTasks);
  try {
    check_run_size(sc, e, true);
    ADD_FAILURE() << "a runaway run was not refused";
  } catch (const InputError& err) {
    EXPECT_NE(std::string(err.what()).find("would build more than"), std::string::npos)
        << err.what();
  }
}

}  // namespace
}  // namespace trainsim
