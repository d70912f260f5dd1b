// models/run.h estimate_run: the task count prepare_run checks against its size limits, before
// building anything. Checked against the graph the builder then builds, over the shipped
// scenarios and variants that add tasks per layer (full and block recomputation, MLP-module
// re-runs, MoE token exchanges, ZeRO-3 gathers).
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "models/builder/graph_builder.h"
#include "models/hardware/hardware.h"
#include "models/run.h"
#include "models/input/scenario.h"
#include "tests/support/paths.h"

namespace trainsim {
namespace {

struct Case {
  std::string scenario;
  std::vector<std::pair<std::string, std::string>> overrides;
};

TEST(RunEstimate, TaskCountIsWithinAFifthOfTheBuiltGraphs) {
  const std::string q30 = "scenarios/h100/qwen3-30b-a3b_fp8-cs_tp1_pp2_vp24_ep8_dp8_r25.11.yaml";
  const std::string l70 = "scenarios/h100/llama3-70b_fp8-cs_tp4_pp8_vp5_dp2_r25.11.yaml";
  const Case cases[] = {
      {"scenarios/gpt-1t_tp8_pp64_dp6.yaml", {}},
      {"scenarios/small/gpt-tiny_tp1_pp4_dp1_vp.yaml", {}},
      {"scenarios/h100/llama3.1-405b_fp8-cs_tp8_pp8_cp2_vp8_dp8_r25.11.yaml", {}},
      {"scenarios/gpt-145.6b_tp8_pp8_dp24.yaml", {}},
      {"scenarios/gpt-145.6b_tp8_pp8_dp24.yaml",
       {{"parallel.recompute_method", "block"}, {"parallel.recompute_num_layers", "2"}}},
      {"scenarios/zero3/gpt-175b_zero3_dp384.yaml", {}},
      {"scenarios/offload/opt-13b_zero3_dp8_offload-r1.yaml", {}},
      {l70, {}},
      {l70, {{"parallel.recompute_granularity", "selective"}, {"parallel.recompute_modules", "[mlp]"}}},
      {q30, {}},
      {q30, {{"parallel.recompute_granularity", "selective"},
             {"parallel.recompute_modules", "[moe, layernorm]"}}},
      {q30, {{"model.moe_layer_freq", "2"}}},
      {"scenarios/h100/gpt-oss-120b_bf16_tp1_pp4_ep8_dp16_r25.11.yaml", {}},
      {"scenarios/h100/llama3-8b_fp8-cs_fsdp8_tp1_pp1_dp8_r25.11.yaml", {}},
  };
  for (const Case& c : cases) {
    const Scenario sc = load_scenario(test_support::source_path(c.scenario), c.overrides);
    BuildOptions opt;
    opt.fold = true;
    const ScheduleGraph g = build_schedule_graph(sc, find_system(sc.cluster.system), opt);
    const double ratio = estimate_run(sc, true).tasks / double(g.num_tasks());
    std::string what = c.scenario;
    for (const auto& [k, v] : c.overrides) what += " " + k + "=" + v;
    // Today 0.99-1.00 everywhere except DeepSpeed ZeRO-3 with recomputation (1.17: how many
    // recomputed fetches stay gathered for the backward depends on the reuse distance).
    EXPECT_GT(ratio, 0.8) << what;
    EXPECT_LT(ratio, 1.2) << what;
  }
}

}  // namespace
}  // namespace trainsim
