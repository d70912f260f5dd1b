// ValidScenario (models/input/scenario.h): a scenario becomes one only through validated(),
// which names the conflicting fields of a bad one and fills the derived fields of a good one;
// validating again changes nothing; the builder takes no plain Scenario.
#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <type_traits>
#include <vector>

#include "models/builder/graph_builder.h"
#include "models/errors.h"
#include "models/input/scenario.h"
#include "models/run.h"
#include "tests/support/paths.h"

namespace trainsim {
namespace {

// The type guarantee: only validated() makes a ValidScenario, and the builder takes only one.
static_assert(!std::is_constructible_v<ValidScenario, Scenario>);
static_assert(!std::is_constructible_v<ValidScenario, const Scenario&>);
static_assert(!std::is_convertible_v<Scenario, ValidScenario>);
static_assert(std::is_convertible_v<ValidScenario, const Scenario&>);  // every reader takes it
static_assert(!std::is_invocable_v<decltype(&build_schedule_graph), const Scenario&,
                                   const SystemSpec&, const BuildOptions&>);
static_assert(std::is_invocable_v<decltype(&build_schedule_graph), const ValidScenario&,
                                  const SystemSpec&, const BuildOptions&>);
static_assert(!std::is_invocable_v<decltype(&count_schedule_tasks), const Scenario&, std::int64_t>);
static_assert(
    std::is_invocable_v<decltype(&count_schedule_tasks), const ValidScenario&, std::int64_t>);

/// A GPT of 8 layers on one DGX A100 node: TP 2 x PP 4 (interleaved, 1 layer per virtual
/// stage), micro batch 2, global batch 32, and Megatron's expert_tensor_parallel_size 1 on a
/// dense model (accepted, read as absent, and noted).
Scenario hand_written() {
  Scenario s;
  s.source_path = "hand.yaml";
  s.model.num_layers = 8;
  s.model.hidden_size = 512;
  s.model.num_attention_heads = 8;
  s.model.seq_length = 256;
  s.model.padded_vocab_size = 1024;
  s.parallel.tensor_model_parallel_size = 2;
  s.parallel.pipeline_model_parallel_size = 4;
  s.parallel.micro_batch_size = 2;
  s.parallel.global_batch_size = 32;
  s.parallel.num_layers_per_virtual_pipeline_stage = 1;
  s.parallel.expert_tensor_parallel_size = 1;
  s.cluster.system = "dgx-a100-80gb";
  s.cluster.nodes = 1;
  return s;
}

TEST(ValidScenario, ABadScenarioIsRefusedNamingTheFields) {
  Scenario bad = hand_written();
  bad.parallel.tensor_model_parallel_size = 3;  // 8 heads are not divisible by 3
  try {
    (void)validated(bad);
    FAIL() << "tensor_model_parallel_size 3 with 8 heads accepted";
  } catch (const InputError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("hand.yaml"), std::string::npos) << what;
    EXPECT_NE(what.find("model.num_attention_heads"), std::string::npos) << what;
    EXPECT_NE(what.find("parallel.tensor_model_parallel_size"), std::string::npos) << what;
  }
}

TEST(ValidScenario, FillsTheDerivedFields) {
  const ValidScenario v = validated(hand_written());
  const ParallelConfig& p = v->parallel;
  // By hand: 1 node x 8 GPUs; dp = 8 / (tp 2 x pp 4) = 1; microbatches = 32 / (2 x 1) = 16;
  // virtual stages = 8 layers / pp 4 / 1 layer each = 2, of 1 layer each.
  EXPECT_EQ(v->cluster.gpus_per_node, 8);
  EXPECT_EQ(p.data_parallel_size, 1);
  EXPECT_EQ(p.num_microbatches, 16);
  EXPECT_EQ(p.virtual_pipeline_size, 2);
  EXPECT_EQ(p.layers_per_chunk, 1);
  EXPECT_TRUE(p.virtual_stage_layers.empty());  // an even split
  EXPECT_EQ(p.pipeline_schedule, PipelineSchedule::Interleaved);
  EXPECT_EQ(p.expert_tensor_parallel_size, 2);  // absent: the tensor-parallel size
  EXPECT_EQ(v->model.ffn_hidden_size, 4 * 512);
  EXPECT_EQ(v->model.kv_channels, 512 / 8);
  ASSERT_EQ(v->notes.size(), 1u);
  EXPECT_NE(v->notes[0].find("expert_tensor_parallel_size"), std::string::npos) << v->notes[0];
  // The accessors read the same scenario.
  EXPECT_EQ(&v.get(), &*v);
  const Scenario& as_reader = v;
  EXPECT_EQ(&as_reader, &v.get());
}

TEST(ValidScenario, ValidatingAgainChangesNothing) {
  const ValidScenario once = validated(hand_written());
  const ValidScenario twice = validated(once);
  const ParallelConfig &a = once->parallel, &b = twice->parallel;
  EXPECT_EQ(a.data_parallel_size, b.data_parallel_size);
  EXPECT_EQ(a.num_microbatches, b.num_microbatches);
  EXPECT_EQ(a.virtual_pipeline_size, b.virtual_pipeline_size);
  EXPECT_EQ(a.layers_per_chunk, b.layers_per_chunk);
  EXPECT_EQ(a.virtual_stage_layers, b.virtual_stage_layers);
  EXPECT_EQ(a.expert_tensor_parallel_size, b.expert_tensor_parallel_size);
  EXPECT_EQ(a.pipeline_schedule, b.pipeline_schedule);
  EXPECT_EQ(once->model.kv_channels, twice->model.kv_channels);
  EXPECT_EQ(once->notes, twice->notes);  // the note is not added twice
  ASSERT_EQ(twice->notes.size(), 1u);

  // An uneven split keeps its per-stage layers.
  Scenario uneven = hand_written();
  uneven.parallel.num_layers_per_virtual_pipeline_stage.reset();
  uneven.parallel.tensor_model_parallel_size = 1;
  uneven.parallel.pipeline_model_parallel_size = 2;
  uneven.parallel.decoder_first_pipeline_num_layers = 3;
  uneven.parallel.expert_tensor_parallel_size = 0;
  uneven.runtime = Runtime::MegatronCore;  // Megatron-Core splits unevenly
  const ValidScenario u1 = validated(uneven);
  const ValidScenario u2 = validated(u1);
  // By hand: 3 layers on the first stage, 8 - 3 = 5 on the second; dp = 8 / 2 = 4.
  EXPECT_EQ(u1->parallel.virtual_stage_layers, (std::vector<std::int64_t>{3, 5}));
  EXPECT_EQ(u2->parallel.virtual_stage_layers, u1->parallel.virtual_stage_layers);
  EXPECT_EQ(u2->parallel.data_parallel_size, 4);
  EXPECT_TRUE(u2->notes.empty());
}

TEST(ValidScenario, ValidateOnTheCpuValidatesItsSubstitutedScenario) {
  // `validate --device cpu` models this machine's device: the scenario's dgx-a100-80gb becomes
  // `local` with one GPU per node, its precision the profile's, and the changed scenario is
  // validated again (models/run.cpp substitute_local_device); its derived fields stay the plan's.
  RunRequest req;
  req.purpose = RunPurpose::Validate;
  req.device = "cpu";
  req.scenario_path = test_support::source_path("scenarios/small/gpt-tiny_tp2_pp2_dp2.yaml");
  req.calibration_path = test_support::source_path("tests/golden/cpu_profile.json");
  const PreparedRun run = prepare_platform(req);
  const Scenario& sc = run.scenario;
  EXPECT_EQ(sc.cluster.system, "local");
  EXPECT_EQ(sc.cluster.gpus_per_node, 1);
  EXPECT_EQ(sc.cluster.nodes, 2 * 2 * 2);  // the 8 ranks, one a node
  EXPECT_EQ(sc.parallel.data_parallel_size, 2);
  EXPECT_EQ(run.replay_dtype, "fp32");  // the profile's precision; the scenario's is fp16
  EXPECT_EQ(sc.parallel.precision, Precision::FP32);
  const ValidScenario again = validated(sc);
  EXPECT_EQ(again->notes, sc.notes);
  EXPECT_EQ(again->parallel.num_microbatches, sc.parallel.num_microbatches);
}

TEST(ValidScenario, ValidateOnTheCpuTurnsFp8Off) {
  // The replay runs no FP8 GEMMs and `local` has no FP8 rate: validate on the CPU of an FP8
  // scenario models the replay's kernels (fp8 none, noted) instead of refusing the run.
  RunRequest req;
  req.purpose = RunPurpose::Validate;
  req.device = "cpu";
  req.scenario_path =
      test_support::source_path("scenarios/h100/llama3-8b_fp8_fsdp8_tp1_pp1_dp8_r25.09.yaml");
  req.overrides = {{"model.num_layers", "2"}, {"model.hidden_size", "256"},
                   {"model.ffn_hidden_size", "512"}, {"model.num_attention_heads", "4"},
                   {"model.num_query_groups", "2"}, {"model.seq_length", "64"},
                   {"model.padded_vocab_size", "1024"}};
  req.calibration_path = test_support::source_path("tests/golden/cpu_profile.json");
  const PreparedRun run = prepare_platform(req);
  const Scenario& sc = run.scenario;
  EXPECT_EQ(sc.parallel.fp8, Fp8Format::None);
  EXPECT_FALSE(sc.parallel.fp8_param_gather);
  bool noted = false;
  for (const std::string& n : run.notes)
    noted = noted || n.find("parallel.fp8 hybrid was replaced by none") != std::string::npos;
  EXPECT_TRUE(noted);
}

}  // namespace
}  // namespace trainsim
