// The planner's FSDP, FP8 and expert-TP dimensions (docs/plan.md): each multiplies the space by
// its number of choices (a hand count), writes only the overrides that differ from the
// scenario, names its choice in the layout where it varies, and reaches the simulator as the
// settings a summary repeats.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>

#include "models/errors.h"
#include "models/plan/planner.h"
#include "models/run.h"
#include "sim/executor.h"
#include "tests/support/paths.h"

namespace trainsim {
namespace {

using test_support::ScratchDir;

const char* kDense =
    "name: dims\nruntime: megatron-core\n"
    "model: {num_layers: 4, hidden_size: 256, num_attention_heads: 8, seq_length: 128, "
    "padded_vocab_size: 1024}\n"
    "parallel: {micro_batch_size: 1, global_batch_size: 16, precision: bf16}\n"
    "cluster: {system: dgx-h100, nodes: 1}\n";

std::vector<PlanCandidate> candidates(const std::string& path) {
  const ValidScenario base = validated(load_scenario(path));
  return enumerate_candidates(load_plan_config(path, base), base);
}

bool has_override(const PlanCandidate& c, const std::string& key, const std::string& value) {
  return std::find(c.overrides.begin(), c.overrides.end(), std::make_pair(key, value)) !=
         c.overrides.end();
}

bool sets_key(const PlanCandidate& c, const std::string& key) {
  return std::any_of(c.overrides.begin(), c.overrides.end(),
                     [&](const auto& kv) { return kv.first == key; });
}

TEST(PlannerDimensions, FsdpAndFp8MultiplyTheSpace) {
  ScratchDir dir("plan_dims");
  const std::string base_plan =
      "plan: {tensor_model_parallel_size: [1, 2], pipeline_model_parallel_size: [1], "
      "micro_batch_size: [1], recompute_granularity: [none]";
  const std::string plain = dir.write("plain.yaml", std::string(kDense) + base_plan + "}\n");
  const std::string wide = dir.write(
      "wide.yaml", std::string(kDense) + base_plan +
                       ", fsdp: [none, megatron_fsdp], fp8: [none, hybrid]}\n");
  const auto few = candidates(plain), many = candidates(wide);
  ASSERT_EQ(few.size(), 2u);      // TP 1, 2
  ASSERT_EQ(many.size(), 2u * 4);  // x FSDP {none, megatron} x FP8 {none, hybrid}
  const ValidScenario wb = validated(load_scenario(wide));
  EXPECT_EQ(count_grid_points(load_plan_config(wide, wb), wb), double(many.size()));
  // A plan that does not vary them writes no FSDP or FP8 key.
  for (const PlanCandidate& c : few) {
    EXPECT_FALSE(sets_key(c, "parallel.use_megatron_fsdp")) << c.layout;
    EXPECT_FALSE(sets_key(c, "parallel.fp8")) << c.layout;
  }
  int fsdp = 0, fp8 = 0;
  for (const PlanCandidate& c : many) {
    if (has_override(c, "parallel.use_megatron_fsdp", "true")) {
      ++fsdp;
      EXPECT_NE(c.layout.find(" megatron_fsdp"), std::string::npos) << c.layout;
    } else {
      EXPECT_NE(c.layout.find(" nofsdp"), std::string::npos) << c.layout;
    }
    if (has_override(c, "parallel.fp8", "hybrid")) {
      ++fp8;
      EXPECT_NE(c.layout.find(" fp8-hybrid"), std::string::npos) << c.layout;
    }
    const CandidateEstimate e = estimate_candidate(wide, {}, c, 0.05);
    EXPECT_EQ(e.rejection, PlanRejection::None) << c.layout << ": " << e.reason;
  }
  EXPECT_EQ(fsdp, 4);
  EXPECT_EQ(fp8, 4);
}

TEST(PlannerDimensions, AnFp8ScenarioPlannedWithoutFp8DropsItsRecipe) {
  ScratchDir dir("plan_dims");
  const std::string path = dir.write(
      "fp8.yaml",
      "name: dims\nruntime: megatron-core\n"
      "model: {num_layers: 4, hidden_size: 256, num_attention_heads: 8, seq_length: 128, "
      "padded_vocab_size: 1024}\n"
      "parallel: {micro_batch_size: 1, global_batch_size: 16, precision: bf16, fp8: hybrid, "
      "fp8_recipe: tensorwise, use_distributed_optimizer: true, fp8_param_gather: true}\n"
      "cluster: {system: dgx-h100, nodes: 1}\n"
      "plan: {tensor_model_parallel_size: [1], pipeline_model_parallel_size: [1], "
      "micro_batch_size: [1], recompute_granularity: [none], fp8: [hybrid, none]}\n");
  const auto cs = candidates(path);
  ASSERT_EQ(cs.size(), 2u);
  EXPECT_FALSE(sets_key(cs[0], "parallel.fp8"));  // the scenario's own
  EXPECT_TRUE(has_override(cs[1], "parallel.fp8", "null"));
  EXPECT_TRUE(has_override(cs[1], "parallel.fp8_recipe", "null"));
  EXPECT_TRUE(has_override(cs[1], "parallel.fp8_param_gather", "null"));
  // The candidate without FP8 simulates, and its summary says so.
  RunRequest req;
  req.scenario_path = path;
  req.overrides = cs[1].overrides;
  const PreparedRun run = prepare_run(req);
  const ExecutionRecord rec =
      sim::simulate(run.graph, run.scenario, run.system, run.cost_model(), {});
  EXPECT_EQ(finish_run(run, rec, {}).summary.settings.fp8, "none");
}

TEST(PlannerDimensions, ExpertTensorParallelSizesAreOverriddenAndNamed) {
  ScratchDir dir("plan_dims");
  const std::string path = dir.write(
      "moe.yaml",
      "name: dims\nruntime: megatron-core\n"
      "model: {num_layers: 4, hidden_size: 256, num_attention_heads: 8, seq_length: 128, "
      "padded_vocab_size: 1024, num_experts: 8, moe_router_topk: 2, moe_ffn_hidden_size: 128}\n"
      "parallel: {micro_batch_size: 1, global_batch_size: 16, precision: bf16}\n"
      "cluster: {system: dgx-h100, nodes: 1}\n"
      "plan: {tensor_model_parallel_size: [2], pipeline_model_parallel_size: [1], "
      "micro_batch_size: [1], recompute_granularity: [none], expert_tensor_parallel_size: [1, 2]}\n");
  const auto cs = candidates(path);
  ASSERT_EQ(cs.size(), 2u);
  EXPECT_TRUE(has_override(cs[0], "parallel.expert_tensor_parallel_size", "1"));
  EXPECT_TRUE(has_override(cs[1], "parallel.expert_tensor_parallel_size", "2"));
  EXPECT_NE(cs[0].layout.find(" etp1"), std::string::npos) << cs[0].layout;
  EXPECT_NE(cs[1].layout.find(" etp2"), std::string::npos) << cs[1].layout;
}

std::string refusal(const std::string& plan) {
  ScratchDir dir("plan_dims");
  const std::string path = dir.write("bad.yaml", std::string(kDense) + "plan: " + plan + "\n");
  const ValidScenario base = validated(load_scenario(path));
  try {
    (void)load_plan_config(path, base);
  } catch (const InputError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find(path), std::string::npos) << what;
    return what;
  }
  ADD_FAILURE() << "accepted plan " << plan;
  return "";
}

TEST(PlannerDimensions, BadChoicesNameTheFieldAndValue) {
  EXPECT_NE(refusal("{fsdp: [sideways]}").find("field 'plan.fsdp' = 'sideways'"),
            std::string::npos);
  EXPECT_NE(refusal("{fp8: [e5m2]}").find("field 'plan.fp8' = 'e5m2'"), std::string::npos);
  EXPECT_NE(refusal("{fsdp: [none, none]}").find("listed twice"), std::string::npos);
  EXPECT_NE(refusal("{expert_tensor_parallel_size: [0]}")
                .find("field 'plan.expert_tensor_parallel_size' = '0'"),
            std::string::npos);
}

}  // namespace
}  // namespace trainsim
