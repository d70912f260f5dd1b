// Scenario loading: the Table 1 scenarios, the small scenarios, defaults, `--set` overrides
// and every class of user error (each must name the file, the field and the value).
#include <gtest/gtest.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <functional>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "models/input/scenario.h"
#include "tests/support/paths.h"

using trainsim::test_support::source_path;

namespace fs = std::filesystem;
using trainsim::InputError;
using trainsim::load_scenario;
using trainsim::PipelineSchedule;
using trainsim::Scenario;

namespace {

const fs::path kScenarios = fs::path(source_path("scenarios"));

// Narayanan et al. SC'21 Table 1 (also /work/shared/ground-truth/megatron_sc21_table1.csv),
// typed in independently of the scenario files.
struct Row {
  const char* size;
  std::int64_t heads, hidden, layers, tp, pp, dp, gpus, global_batch, micro_batch, vp_layers;
};
const Row kTable1[] = {
    {"1.7b", 24, 2304, 24, 1, 1, 32, 32, 512, 16, 0},
    {"3.6b", 32, 3072, 30, 2, 1, 32, 64, 512, 16, 0},
    {"7.5b", 32, 4096, 36, 4, 1, 32, 128, 512, 16, 0},
    {"18.4b", 48, 6144, 40, 8, 1, 32, 256, 1024, 8, 0},
    {"39.1b", 64, 8192, 48, 8, 2, 32, 512, 1536, 4, 0},
    {"76.1b", 80, 10240, 60, 8, 4, 32, 1024, 1792, 2, 5},
    {"145.6b", 96, 12288, 80, 8, 8, 24, 1536, 2304, 2, 5},
    {"310.1b", 128, 16384, 96, 8, 16, 15, 1920, 2160, 1, 3},
    {"529.6b", 128, 20480, 105, 8, 35, 9, 2520, 2520, 1, 1},
    {"1t", 160, 25600, 128, 8, 64, 6, 3072, 3072, 1, 0},
};

std::string row_name(const Row& r) {
  return "gpt-" + std::string(r.size) + "_tp" + std::to_string(r.tp) + "_pp" +
         std::to_string(r.pp) + "_dp" + std::to_string(r.dp);
}

/// A valid scenario; tests replace one line at a time.
const std::string kBase =
    "name: base\n"                               // line 1
    "model:\n"                                   // 2
    "  num_layers: 4\n"                          // 3
    "  hidden_size: 256\n"                       // 4
    "  num_attention_heads: 8\n"                 // 5
    "  seq_length: 128\n"                        // 6
    "  padded_vocab_size: 1024\n"                // 7
    "parallel:\n"                                // 8
    "  tensor_model_parallel_size: 2\n"          // 9
    "  pipeline_model_parallel_size: 2\n"        // 10
    "  micro_batch_size: 2\n"                    // 11
    "  global_batch_size: 16\n"                  // 12
    "deepspeed:\n"                               // 13
    "  zero_optimization:\n"                     // 14
    "    stage: 0\n"                             // 15
    "cluster:\n"                                 // 16
    "  system: dgx-a100-80gb\n"                  // 17
    "  nodes: 1\n";                              // 18

std::string replace(std::string text, const std::string& from, const std::string& to) {
  auto pos = text.find(from);
  EXPECT_NE(pos, std::string::npos) << "test bug: '" << from << "' not in the base scenario";
  if (pos != std::string::npos) text.replace(pos, from.size(), to);
  return text;
}

/// 1-based line of the first line containing `needle`.
int line_of(const std::string& text, const std::string& needle) {
  std::istringstream in(text);
  std::string line;
  for (int n = 1; std::getline(in, line); ++n)
    if (line.find(needle) != std::string::npos) return n;
  return -1;
}

class ScenarioFiles : public ::testing::Test {
 protected:
  void SetUp() override {
    scratch_.emplace("trainsim_test_scenario");
    dir_ = scratch_->path();
  }
  void TearDown() override { scratch_.reset(); }

  std::string write(const std::string& text, const std::string& stem = "case") {
    return scratch_->write(stem + ".yaml", text);
  }

  /// Loads `text` from a file, expects an InputError whose message has every `parts` entry
  /// and the file name; returns the message.
  std::string expect_error(const std::string& text, const std::vector<std::string>& parts,
                           const std::vector<std::pair<std::string, std::string>>& overrides = {}) {
    const std::string path = write(text);
    try {
      load_scenario(path, overrides);
    } catch (const InputError& e) {
      const std::string msg = e.what();
      EXPECT_NE(msg.find(path), std::string::npos) << "no file name in: " << msg;
      for (const auto& part : parts)
        EXPECT_NE(msg.find(part), std::string::npos) << "'" << part << "' not in: " << msg;
      return msg;
    } catch (const std::exception& e) {
      ADD_FAILURE() << "expected InputError, got another exception: " << e.what();
      return {};
    }
    ADD_FAILURE() << "expected InputError for:\n" << text;
    return {};
  }

  std::optional<trainsim::test_support::ScratchDir> scratch_;
  fs::path dir_;
};

}  // namespace

// ---------------------------------------------------------------------------------------
// Ready scenarios

TEST(Table1Scenarios, EveryRowLoadsWithTheTablesDerivedFields) {
  for (const Row& r : kTable1) {
    SCOPED_TRACE(row_name(r));
    const fs::path path = kScenarios / (row_name(r) + ".yaml");
    ASSERT_TRUE(fs::exists(path)) << path;
    const Scenario s = load_scenario(path.string());
    EXPECT_EQ(s.name, row_name(r));
    EXPECT_EQ(s.model.num_layers, r.layers);
    EXPECT_EQ(s.model.hidden_size, r.hidden);
    EXPECT_EQ(s.model.num_attention_heads, r.heads);
    EXPECT_EQ(s.model.seq_length, 2048);
    EXPECT_EQ(s.model.padded_vocab_size, 51200);
    EXPECT_EQ(s.model.ffn_hidden_size, 4 * r.hidden);
    EXPECT_EQ(s.model.kv_channels, r.hidden / r.heads);
    EXPECT_EQ(s.parallel.tensor_model_parallel_size, r.tp);
    EXPECT_EQ(s.parallel.pipeline_model_parallel_size, r.pp);
    EXPECT_EQ(s.parallel.micro_batch_size, r.micro_batch);
    EXPECT_EQ(s.parallel.global_batch_size, r.global_batch);
    EXPECT_EQ(s.parallel.data_parallel_size, r.dp);
    EXPECT_EQ(s.world_size(), r.gpus);
    EXPECT_EQ(s.cluster.nodes * 8, r.gpus);
    EXPECT_EQ(s.cluster.gpus_per_node, 8);
    EXPECT_EQ(s.cluster.system, "dgx-a100-80gb");
    EXPECT_EQ(s.parallel.num_microbatches, r.global_batch / (r.micro_batch * r.dp));
    EXPECT_EQ(s.parallel.num_microbatches * r.micro_batch * r.dp, r.global_batch);
    if (r.vp_layers > 0) {
      ASSERT_TRUE(s.parallel.num_layers_per_virtual_pipeline_stage.has_value());
      EXPECT_EQ(*s.parallel.num_layers_per_virtual_pipeline_stage, r.vp_layers);
      EXPECT_EQ(s.parallel.pipeline_schedule, PipelineSchedule::Interleaved);
      EXPECT_EQ(s.parallel.virtual_pipeline_size, r.layers / r.pp / r.vp_layers);
      EXPECT_EQ(s.parallel.layers_per_chunk, r.vp_layers);
    } else {
      EXPECT_FALSE(s.parallel.num_layers_per_virtual_pipeline_stage.has_value());
      EXPECT_EQ(s.parallel.pipeline_schedule, PipelineSchedule::OneFOneB);
      EXPECT_EQ(s.parallel.virtual_pipeline_size, 1);
      EXPECT_EQ(s.parallel.layers_per_chunk, r.layers / r.pp);
    }
    EXPECT_EQ(s.parallel.recompute_granularity, trainsim::Recompute::Full);
    EXPECT_EQ(s.parallel.precision, trainsim::Precision::FP16);
    EXPECT_TRUE(s.parallel.scatter_gather_tensors_in_pipeline);
    EXPECT_FALSE(s.parallel.sequence_parallel);
    EXPECT_EQ(s.zero.stage, 0);
    EXPECT_FALSE(s.zero.offload_optimizer.enabled);
  }
}

TEST(Table1Scenarios, OneFilePerRowAndNoOthers) {
  int count = 0;
  for (const auto& e : fs::directory_iterator(kScenarios))
    if (e.is_regular_file() && e.path().extension() == ".yaml" &&
        e.path().filename().string().rfind("gpt-", 0) == 0)
      ++count;
  EXPECT_EQ(count, static_cast<int>(std::size(kTable1)));
}

TEST(SmallScenarios, DerivedFields) {
  {
    const Scenario s = load_scenario((kScenarios / "small/gpt-tiny_tp2_pp2_dp2.yaml").string());
    EXPECT_EQ(s.name, "gpt-tiny_tp2_pp2_dp2");
    EXPECT_EQ(s.world_size(), 8);
    EXPECT_EQ(s.parallel.tensor_model_parallel_size, 2);
    EXPECT_EQ(s.parallel.pipeline_model_parallel_size, 2);
    EXPECT_EQ(s.parallel.data_parallel_size, 2);
    EXPECT_EQ(s.parallel.num_microbatches, s.parallel.global_batch_size / (s.parallel.micro_batch_size * 2));
    EXPECT_EQ(s.parallel.layers_per_chunk, s.model.num_layers / 2);
    EXPECT_EQ(s.parallel.pipeline_schedule, PipelineSchedule::OneFOneB);
  }
  {
    const Scenario s = load_scenario((kScenarios / "small/gpt-tiny_tp1_pp4_dp1_vp.yaml").string());
    EXPECT_EQ(s.world_size(), 4);
    EXPECT_EQ(s.cluster.gpus_per_node, 4);
    EXPECT_EQ(s.parallel.pipeline_model_parallel_size, 4);
    EXPECT_EQ(s.parallel.data_parallel_size, 1);
    EXPECT_EQ(s.model.num_layers, 8);
    EXPECT_EQ(s.parallel.num_microbatches, 8);
    EXPECT_EQ(s.parallel.pipeline_schedule, PipelineSchedule::Interleaved);
    EXPECT_EQ(s.parallel.virtual_pipeline_size, 2);  // 8 layers / 4 stages / 1 layer per chunk
    EXPECT_EQ(s.parallel.layers_per_chunk, 1);
  }
  {
    const Scenario s = load_scenario((kScenarios / "small/gpt-tiny_tp1_pp1_dp1.yaml").string());
    EXPECT_EQ(s.world_size(), 1);
    EXPECT_EQ(s.parallel.data_parallel_size, 1);
    EXPECT_EQ(s.parallel.num_microbatches,
              s.parallel.global_batch_size / s.parallel.micro_batch_size);
    EXPECT_EQ(s.parallel.recompute_granularity, trainsim::Recompute::None);
  }
}

// ---------------------------------------------------------------------------------------
// Defaults and overrides

TEST_F(ScenarioFiles, DefaultsAreApplied) {
  const std::string text = replace(kBase, "name: base\n", "");
  const Scenario s = load_scenario(write(text, "my-stem"));
  EXPECT_EQ(s.name, "my-stem");                      // file stem
  EXPECT_EQ(s.model.ffn_hidden_size, 4 * 256);       // 4h
  EXPECT_EQ(s.model.kv_channels, 256 / 8);           // h / a
  EXPECT_EQ(s.cluster.gpus_per_node, 8);             // DGX A100: 8 GPUs
  EXPECT_EQ(s.parallel.data_parallel_size, 8 / (2 * 2));
  EXPECT_EQ(s.parallel.num_microbatches, 16 / (2 * 2));
  EXPECT_EQ(s.parallel.pipeline_schedule, PipelineSchedule::OneFOneB);
  EXPECT_EQ(s.parallel.recompute_granularity, trainsim::Recompute::None);
  EXPECT_EQ(s.parallel.precision, trainsim::Precision::FP16);
  EXPECT_FALSE(s.model.untie_embeddings_and_output_weights);
  EXPECT_TRUE(s.parallel.scatter_gather_tensors_in_pipeline);
  EXPECT_FALSE(s.parallel.overlap_grad_reduce);
  EXPECT_EQ(s.zero.stage, 0);
  EXPECT_FALSE(s.zero.offload_optimizer.enabled);
  EXPECT_EQ(s.simulation.fold, trainsim::SimulationConfig::Fold::Auto);
  EXPECT_EQ(s.nccl_version, trainsim::NcclVersion::V2_29_7);
  EXPECT_NE(s.source_path.find("my-stem.yaml"), std::string::npos);
}

TEST_F(ScenarioFiles, NcclVersionIsReadAndBadValuesNamed) {
  EXPECT_EQ(load_scenario(write("nccl_version: 2.18.5\n" + kBase)).nccl_version,
            trainsim::NcclVersion::V2_18_5);
  EXPECT_EQ(load_scenario(write("nccl_version: \"2.29.7\"\n" + kBase)).nccl_version,
            trainsim::NcclVersion::V2_29_7);
  // A release trainsim has no table for (2.21 changed the LL model), or a number YAML reads
  // as a float: an error naming the line, the key and the releases there are.
  expect_error("nccl_version: 2.21.5\n" + kBase, {":1:", "nccl_version", "'2.21.5'", "2.18.5, 2.29.7"});
  expect_error("nccl_version: 2.18\n" + kBase, {":1:", "nccl_version", "'2.18'"});
}

TEST_F(ScenarioFiles, NcclNvlsEnableIsReadAndBadValuesNamed) {
  EXPECT_TRUE(load_scenario(write(kBase)).nccl_nvls_enable);  // NCCL's default
  EXPECT_FALSE(load_scenario(write("nccl_nvls_enable: false\n" + kBase)).nccl_nvls_enable);
  expect_error("nccl_nvls_enable: 2\n" + kBase, {":1:", "nccl_nvls_enable", "'2'", "boolean"});
}

TEST_F(ScenarioFiles, HostModelIsReadAndBadValuesNamed) {
  EXPECT_TRUE(load_scenario(write(kBase)).host_model);  // on when absent
  EXPECT_FALSE(load_scenario(write("host_model: off\n" + kBase)).host_model);
  EXPECT_FALSE(load_scenario(write("host_model: false\n" + kBase)).host_model);
  EXPECT_TRUE(load_scenario(write("host_model: on\n" + kBase)).host_model);
  expect_error("host_model: sometimes\n" + kBase, {":1:", "host_model", "'sometimes'", "boolean"});
}

TEST_F(ScenarioFiles, TimingLogLevelIsReadAndBadValuesNamed) {
  EXPECT_EQ(load_scenario(write(kBase)).timing_log_level, 0);
  EXPECT_EQ(load_scenario(write("timing_log_level: 2\n" + kBase)).timing_log_level, 2);
  expect_error("timing_log_level: 3\n" + kBase, {":1:", "timing_log_level", "3"});
  expect_error("timing_log_level: high\n" + kBase, {":1:", "timing_log_level", "'high'"});
}

TEST_F(ScenarioFiles, ExplicitValuesAreRead) {
  std::string text = kBase;
  text = replace(text, "  seq_length: 128\n",
                 "  seq_length: 128\n  ffn_hidden_size: 512\n  kv_channels: 64\n"
                 "  untie_embeddings_and_output_weights: true\n");
  text = replace(text, "  global_batch_size: 16\n",
                 "  global_batch_size: 16\n  recompute_granularity: selective\n"
                 "  sequence_parallel: true\n  precision: bf16\n  overlap_grad_reduce: true\n"
                 "  scatter_gather_tensors_in_pipeline: false\n  ddp_bucket_size: 1000\n"
                 "  pipeline_schedule: gpipe\n");
  text = replace(text, "    stage: 0\n",
                 "    stage: 1\n    reduce_bucket_size: 5e8\n    allgather_bucket_size: 200000000\n"
                 "    overlap_comm: false\n    stage3_prefetch_bucket_size: 1000\n"
                 "    offload_optimizer: {device: cpu, pin_memory: false, ratio: 1.0}\n");
  text += "  gpus_per_node: 4\nsimulation:\n  fold: false\n";
  const Scenario s = load_scenario(write(text));
  EXPECT_EQ(s.model.ffn_hidden_size, 512);
  EXPECT_EQ(s.model.kv_channels, 64);
  EXPECT_TRUE(s.model.untie_embeddings_and_output_weights);
  EXPECT_EQ(s.parallel.recompute_granularity, trainsim::Recompute::Selective);
  EXPECT_TRUE(s.parallel.sequence_parallel);
  EXPECT_EQ(s.parallel.precision, trainsim::Precision::BF16);
  EXPECT_TRUE(s.parallel.overlap_grad_reduce);
  EXPECT_FALSE(s.parallel.scatter_gather_tensors_in_pipeline);
  EXPECT_EQ(s.parallel.ddp_bucket_size, 1000);
  EXPECT_EQ(s.parallel.pipeline_schedule, PipelineSchedule::GPipe);
  EXPECT_EQ(s.zero.stage, 1);
  EXPECT_EQ(s.zero.reduce_bucket_size, 500000000);
  EXPECT_EQ(s.zero.allgather_bucket_size, 200000000);
  EXPECT_FALSE(s.zero.overlap_comm);
  EXPECT_EQ(s.zero.stage3_prefetch_bucket_size, 1000);
  EXPECT_TRUE(s.zero.offload_optimizer.enabled);
  EXPECT_FALSE(s.zero.offload_optimizer.pin_memory);
  // (ratio < 1 needs ZeRO stage 3: tests/models/test_memory.cpp)
  EXPECT_DOUBLE_EQ(s.zero.offload_optimizer.ratio, 1.0);
  EXPECT_FALSE(s.zero.offload_optimizer.ratio_auto);
  EXPECT_EQ(s.cluster.gpus_per_node, 4);
  EXPECT_EQ(s.parallel.data_parallel_size, 1);
  EXPECT_EQ(s.parallel.num_microbatches, 8);
  EXPECT_EQ(s.simulation.fold, trainsim::SimulationConfig::Fold::Off);
}

// scenario_text_with_overrides (what `plan --out` writes): the text, saved anywhere, loads to
// the scenario the file with the same overrides gives; a dropped section is gone; a bad
// override is refused as load_scenario refuses it.
TEST_F(ScenarioFiles, TextWithOverridesLoadsToTheSameScenario) {
  const std::string path = write(kBase);
  const std::vector<std::pair<std::string, std::string>> overrides = {
      {"parallel.micro_batch_size", "4"},
      {"parallel.recompute_granularity", "full"},
      {"deepspeed.zero_optimization.stage", "1"}};
  const std::string text = trainsim::scenario_text_with_overrides(path, overrides, {"deepspeed"});
  EXPECT_EQ(text.find("deepspeed"), std::string::npos) << text;
  const Scenario want = load_scenario(path, overrides);
  const Scenario got = trainsim::parse_scenario(text, "written.yaml",
                                                {{"deepspeed.zero_optimization.stage", "1"}});
  EXPECT_EQ(got.parallel.micro_batch_size, want.parallel.micro_batch_size);
  EXPECT_EQ(got.parallel.num_microbatches, want.parallel.num_microbatches);
  EXPECT_EQ(got.parallel.recompute_granularity, want.parallel.recompute_granularity);
  EXPECT_EQ(got.zero.stage, want.zero.stage);
  EXPECT_EQ(got.model.num_layers, want.model.num_layers);
  EXPECT_THROW(trainsim::scenario_text_with_overrides(path, {{"parallel.no_such_key", "1"}}),
               InputError);
}

TEST_F(ScenarioFiles, OverridesAreAppliedAndTyped) {
  const std::string path = write(kBase);
  const Scenario s = load_scenario(
      path, {{"parallel.micro_batch_size", "4"},
             {"deepspeed.zero_optimization.stage", "1"},
             {"deepspeed.zero_optimization.offload_optimizer.device", "cpu"},
             {"deepspeed.zero_optimization.offload_optimizer.ratio", "1"},
             {"parallel.recompute_granularity", "full"},
             {"simulation.fold", "true"},
             {"name", "renamed"}});
  EXPECT_EQ(s.parallel.micro_batch_size, 4);
  EXPECT_EQ(s.parallel.num_microbatches, 16 / (4 * 2));
  EXPECT_EQ(s.zero.stage, 1);
  EXPECT_TRUE(s.zero.offload_optimizer.enabled);
  EXPECT_DOUBLE_EQ(s.zero.offload_optimizer.ratio, 1.0);
  EXPECT_EQ(s.parallel.recompute_granularity, trainsim::Recompute::Full);
  EXPECT_EQ(s.simulation.fold, trainsim::SimulationConfig::Fold::On);
  EXPECT_EQ(s.name, "renamed");

  // A section the file does not have is created; `auto` ratio.
  const std::string no_ds = replace(kBase, "deepspeed:\n  zero_optimization:\n    stage: 0\n", "");
  const Scenario t = load_scenario(
      write(no_ds, "no_ds"), {{"deepspeed.zero_optimization.stage", "3"},
                              {"parallel.pipeline_model_parallel_size", "1"},
                              {"deepspeed.zero_optimization.offload_optimizer.device", "cpu"},
                              {"deepspeed.zero_optimization.offload_optimizer.ratio", "auto"}});
  EXPECT_EQ(t.zero.stage, 3);
  EXPECT_TRUE(t.zero.offload_optimizer.ratio_auto);

  // null removes a value: back to the plain 1F1B schedule.
  const Scenario u = load_scenario(
      (kScenarios / "small/gpt-tiny_tp1_pp4_dp1_vp.yaml").string(),
      {{"parallel.num_layers_per_virtual_pipeline_stage", "null"}});
  EXPECT_EQ(u.parallel.pipeline_schedule, PipelineSchedule::OneFOneB);
  EXPECT_EQ(u.parallel.virtual_pipeline_size, 1);
  EXPECT_EQ(u.parallel.layers_per_chunk, 8 / 4);
}

TEST_F(ScenarioFiles, OverrideErrorsNameTheSet) {
  expect_error(kBase, {"--set", "unknown key 'parallel.tensor_parallel_size'",
                       "did you mean 'tensor_model_parallel_size'"},
               {{"parallel.tensor_parallel_size", "2"}});
  expect_error(kBase, {"--set tensor_model_parallel_size=2",
                       "did you mean 'parallel.tensor_model_parallel_size'"},
               {{"tensor_model_parallel_size", "2"}});
  // Type checks apply to overridden values.
  expect_error(kBase, {"--set parallel.micro_batch_size=abc", "parallel.micro_batch_size",
                       "'abc'", "integer"},
               {{"parallel.micro_batch_size", "abc"}});
  expect_error(kBase, {"--set parallel.micro_batch_size=2.5", "'2.5'", "integer"},
               {{"parallel.micro_batch_size", "2.5"}});
  expect_error(kBase, {"--set", "offload_optimizer.ratio", "'1.5'", "[0, 1]"},
               {{"deepspeed.zero_optimization.stage", "1"},
                {"deepspeed.zero_optimization.offload_optimizer.ratio", "1.5"}});
  // Overriding a required field with null makes it missing.
  expect_error(kBase, {"missing required field 'model.num_layers'"},
               {{"model.num_layers", "null"}});
}

// ---------------------------------------------------------------------------------------
// Errors in the file

TEST_F(ScenarioFiles, MissingFile) {
  const std::string path = (dir_ / "does-not-exist.yaml").string();
  try {
    load_scenario(path);
    FAIL() << "no error for a missing file";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find(path), std::string::npos) << e.what();
  }
}

TEST_F(ScenarioFiles, UnknownKeysWithLineAndSuggestion) {
  const std::string text =
      replace(kBase, "  tensor_model_parallel_size: 2\n", "  tensor_parallel_size: 2\n");
  const int line = line_of(text, "tensor_parallel_size");
  ASSERT_EQ(line, 9);
  const std::string msg = expect_error(
      text, {":" + std::to_string(line) + ": unknown key 'parallel.tensor_parallel_size'",
             "did you mean 'tensor_model_parallel_size'?"});

  // A key of another section names that section.
  expect_error(replace(kBase, "  seq_length: 128\n", "  seq_length: 128\n  micro_batch_size: 2\n"),
               {":7: unknown key 'model.micro_batch_size'",
                "did you mean 'parallel.micro_batch_size'"});
  // Nested DeepSpeed key typo.
  expect_error(replace(kBase, "    stage: 0\n", "    stage: 1\n    offload_optimizer: {devise: cpu}\n"),
               {":16: unknown key 'deepspeed.zero_optimization.offload_optimizer.devise'",
                "did you mean 'device'"});
  // Unknown top-level section, no close match: no suggestion, still an error.
  const std::string m2 = expect_error(kBase + "xyzzy_totally_unrelated: 1\n",
                                      {":19: unknown key 'xyzzy_totally_unrelated'"});
  EXPECT_EQ(m2.find("did you mean"), std::string::npos) << m2;
  // Duplicate key.
  expect_error(replace(kBase, "  nodes: 1\n", "  nodes: 1\n  nodes: 2\n"),
               {"duplicate key 'cluster.nodes'"});
}

TEST_F(ScenarioFiles, WrongTypes) {
  struct Case {
    const char* from;
    const char* to;
    std::vector<std::string> parts;
  };
  const std::vector<Case> cases = {
      {"  micro_batch_size: 2\n", "  micro_batch_size: two\n",
       {":11:", "parallel.micro_batch_size", "'two'", "expected an integer"}},
      {"  micro_batch_size: 2\n", "  micro_batch_size: 2.0\n",
       {":11:", "parallel.micro_batch_size", "'2.0'", "floating-point"}},
      {"  micro_batch_size: 2\n", "  micro_batch_size: \"2\"\n",
       {":11:", "parallel.micro_batch_size", "'2'", "quoted"}},
      {"  num_layers: 4\n", "  num_layers: [4]\n", {":3:", "model.num_layers", "single value"}},
      {"  global_batch_size: 16\n", "  global_batch_size: 16\n  sequence_parallel: maybe\n",
       {":13:", "parallel.sequence_parallel", "'maybe'", "boolean"}},
      {"  global_batch_size: 16\n", "  global_batch_size: 16\n  precision: fp8\n",
       {":13:", "parallel.precision", "'fp8'", "fp16, bf16, fp32"}},
      {"  global_batch_size: 16\n", "  global_batch_size: 16\n  recompute_granularity: some\n",
       {":13:", "parallel.recompute_granularity", "'some'"}},
      {"  global_batch_size: 16\n", "  global_batch_size: 16\n  pipeline_schedule: zigzag\n",
       {":13:", "parallel.pipeline_schedule", "'zigzag'"}},
      {"    stage: 0\n", "    stage: 1\n    offload_optimizer: {device: nvme}\n",
       {":16:", "offload_optimizer.device", "'nvme'", "cpu, none"}},
      {"    stage: 0\n", "    stage: 1\n    offload_optimizer: {device: cpu, ratio: half}\n",
       {":16:", "offload_optimizer.ratio", "'half'"}},
      {"  nodes: 1\n", "  nodes: 1\nsimulation: {fold: sometimes}\n",
       {":19:", "simulation.fold", "'sometimes'"}},
      {"parallel:\n", "parallel: 3\nunused:\n", {"'parallel'"}},
      {"  system: dgx-a100-80gb\n", "  system: dgx-b300\n",
       {":17:", "cluster.system", "'dgx-b300'", "dgx-a100-40gb", "dgx-a100-80gb", "dgx-b200",
        "dgx-h100"}},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.to);
    expect_error(replace(kBase, c.from, c.to), c.parts);
  }
}

TEST_F(ScenarioFiles, NegativeOrZeroSizes) {
  expect_error(replace(kBase, "  tensor_model_parallel_size: 2\n", "  tensor_model_parallel_size: 0\n"),
               {":9:", "parallel.tensor_model_parallel_size", "'0'", "positive"});
  expect_error(replace(kBase, "  nodes: 1\n", "  nodes: -1\n"),
               {":18:", "cluster.nodes", "'-1'", "positive"});
  expect_error(replace(kBase, "  hidden_size: 256\n", "  hidden_size: -256\n"),
               {":4:", "model.hidden_size", "'-256'"});
  expect_error(replace(kBase, "  seq_length: 128\n", "  seq_length: 128\n  ffn_hidden_size: -1\n"),
               {":7:", "model.ffn_hidden_size", "'-1'", "positive"});
  // An explicit 0 is an error, not the default (absent means the default).
  expect_error(replace(kBase, "  seq_length: 128\n", "  seq_length: 128\n  ffn_hidden_size: 0\n"),
               {":7:", "model.ffn_hidden_size", "'0'", "positive"});
  expect_error(replace(kBase, "  seq_length: 128\n", "  seq_length: 128\n  kv_channels: 0\n"),
               {":7:", "model.kv_channels", "'0'", "positive"});
  expect_error(replace(kBase, "    stage: 0\n", "    stage: 4\n"),
               {":15:", "deepspeed.zero_optimization.stage", "'4'"});
  expect_error(replace(kBase, "    stage: 0\n", "    stage: -1\n"),
               {":15:", "deepspeed.zero_optimization.stage", "'-1'"});
  expect_error(replace(kBase, "  nodes: 1\n", "  nodes: 1\n  gpus_per_node: 16\n"),
               {":19:", "cluster.gpus_per_node", "'16'", "8 GPUs"});
}

TEST_F(ScenarioFiles, MissingRequiredFields) {
  const std::vector<std::pair<std::string, std::string>> required = {
      {"  num_layers: 4\n", "model.num_layers"},
      {"  hidden_size: 256\n", "model.hidden_size"},
      {"  num_attention_heads: 8\n", "model.num_attention_heads"},
      {"  seq_length: 128\n", "model.seq_length"},
      {"  padded_vocab_size: 1024\n", "model.padded_vocab_size"},
      {"  micro_batch_size: 2\n", "parallel.micro_batch_size"},
      {"  global_batch_size: 16\n", "parallel.global_batch_size"},
      {"  system: dgx-a100-80gb\n", "cluster.system"},
      {"  nodes: 1\n", "cluster.nodes"},
  };
  for (const auto& [line, field] : required) {
    SCOPED_TRACE(field);
    expect_error(replace(kBase, line, ""), {"missing required field '" + field + "'"});
  }
  expect_error(replace(kBase,
                       "model:\n  num_layers: 4\n  hidden_size: 256\n  num_attention_heads: 8\n"
                       "  seq_length: 128\n  padded_vocab_size: 1024\n",
                       ""),
               {"missing required field 'model.num_layers'"});
}

TEST_F(ScenarioFiles, YamlSyntaxError) {
  expect_error(replace(kBase, "  nodes: 1\n", "  nodes: [1\n"), {"YAML syntax error"});
  expect_error("- just\n- a list\n", {"mapping"});
}

// ---------------------------------------------------------------------------------------
// Inconsistent plans (validate_scenario)

TEST_F(ScenarioFiles, InconsistentParallelPlans) {
  // world 8 is not a multiple of tp x pp = 2 x 3.
  expect_error(replace(kBase, "  pipeline_model_parallel_size: 2\n", "  pipeline_model_parallel_size: 3\n"),
               {"parallel.tensor_model_parallel_size (2)", "parallel.pipeline_model_parallel_size (3)",
                "8 GPUs"});
  // heads 6 % tp 4 (hidden 256 and ffn 1024 divide).
  expect_error(replace(replace(kBase, "  num_attention_heads: 8\n", "  num_attention_heads: 6\n  kv_channels: 32\n"),
                       "  tensor_model_parallel_size: 2\n", "  tensor_model_parallel_size: 4\n"),
               {"model.num_attention_heads (6)", "parallel.tensor_model_parallel_size (4)"});
  // hidden 250 % tp 2 with heads 2 (heads divide).
  expect_error(replace(replace(kBase, "  hidden_size: 256\n", "  hidden_size: 255\n"),
                       "  num_attention_heads: 8\n", "  num_attention_heads: 2\n  kv_channels: 64\n"),
               {"model.hidden_size (255)", "parallel.tensor_model_parallel_size (2)"});
  // ffn 1001 % tp 2.
  expect_error(replace(kBase, "  seq_length: 128\n", "  seq_length: 128\n  ffn_hidden_size: 1001\n"),
               {"model.ffn_hidden_size (1001)", "parallel.tensor_model_parallel_size (2)"});
  // vocab 1001 % tp 2.
  expect_error(replace(kBase, "  padded_vocab_size: 1024\n", "  padded_vocab_size: 1001\n"),
               {"model.padded_vocab_size (1001)", "parallel.tensor_model_parallel_size (2)"});
  // hidden % heads without kv_channels.
  expect_error(replace(replace(kBase, "  num_attention_heads: 8\n", "  num_attention_heads: 6\n"),
                       "  tensor_model_parallel_size: 2\n", "  tensor_model_parallel_size: 1\n"),
               {"model.hidden_size (256)", "model.num_attention_heads (6)", "kv_channels"});
  // layers 5 % pp 2.
  expect_error(replace(kBase, "  num_layers: 4\n", "  num_layers: 5\n"),
               {"model.num_layers (5)", "parallel.pipeline_model_parallel_size (2)"});
  // global 16 % (micro 3 x dp 2).
  expect_error(replace(kBase, "  micro_batch_size: 2\n", "  micro_batch_size: 3\n"),
               {"parallel.global_batch_size (16)", "parallel.micro_batch_size (3)", "= 6"});
}

TEST_F(ScenarioFiles, InconsistentInterleaving) {
  const std::string vp = "  global_batch_size: 16\n  num_layers_per_virtual_pipeline_stage: ";
  // vp with pp = 1 (tp 2 x pp 1 x dp 4).
  expect_error(replace(replace(kBase, "  global_batch_size: 16\n", vp + "1\n"),
                       "  pipeline_model_parallel_size: 2\n", "  pipeline_model_parallel_size: 1\n"),
               {"parallel.num_layers_per_virtual_pipeline_stage (1)",
                "parallel.pipeline_model_parallel_size (1)", "> 1"});
  // 4 layers % (pp 2 x vp 3).
  expect_error(replace(kBase, "  global_batch_size: 16\n", vp + "3\n"),
               {"model.num_layers (4)", "parallel.num_layers_per_virtual_pipeline_stage (3)", "= 6"});
  // microbatches 12 / (2 x 2) = 3, not divisible by pp 2.
  expect_error(replace(kBase, "  global_batch_size: 16\n", "  global_batch_size: 12\n"
                                                           "  num_layers_per_virtual_pipeline_stage: 1\n"),
               {"number of microbatches (3", "parallel.pipeline_model_parallel_size (2)"});
  // `interleaved` without virtual stages.
  expect_error(replace(kBase, "  global_batch_size: 16\n",
                       "  global_batch_size: 16\n  pipeline_schedule: interleaved\n"),
               {":13:", "parallel.pipeline_schedule", "'interleaved'",
                "num_layers_per_virtual_pipeline_stage"});
  // gpipe with virtual stages.
  expect_error(replace(kBase, "  global_batch_size: 16\n", vp + "1\n  pipeline_schedule: gpipe\n"),
               {"parallel.pipeline_schedule", "'gpipe'"});
  // Two stages: Megatron-LM 2021 asserts pp > 2 for the interleaved schedule (the default
  // runtime); Megatron-Core runs it.
  expect_error(replace(kBase, "  global_batch_size: 16\n", vp + "1\n"),
               {"parallel.num_layers_per_virtual_pipeline_stage (1)",
                "parallel.pipeline_model_parallel_size (2)", ">= 3", "megatron-2021"});
  // A valid interleaved plan: 4 layers, pp 2, 1 layer per chunk -> 2 chunks; 4 microbatches.
  const Scenario s = load_scenario(
      write("runtime: megatron-core\n" + replace(kBase, "  global_batch_size: 16\n", vp + "1\n"),
            "ok"));
  EXPECT_EQ(s.parallel.pipeline_schedule, PipelineSchedule::Interleaved);
  EXPECT_EQ(s.parallel.virtual_pipeline_size, 2);
  EXPECT_EQ(s.parallel.layers_per_chunk, 1);
  EXPECT_EQ(s.parallel.num_microbatches, 4);
}

TEST_F(ScenarioFiles, InconsistentZeroAndOffload) {
  // Offload needs ZeRO >= 1.
  expect_error(replace(kBase, "    stage: 0\n", "    stage: 0\n    offload_optimizer: {device: cpu}\n"),
               {"deepspeed.zero_optimization.offload_optimizer.device (cpu)",
                "deepspeed.zero_optimization.stage (0)"});
  // Ratio out of range.
  expect_error(replace(kBase, "    stage: 0\n", "    stage: 1\n    offload_optimizer: {device: cpu, ratio: -0.1}\n"),
               {":16:", "offload_optimizer.ratio", "'-0.1'", "[0, 1]"});
  // ZeRO-2 with pipeline parallelism.
  const std::string msg = expect_error(replace(kBase, "    stage: 0\n", "    stage: 2\n"),
                                       {"deepspeed.zero_optimization.stage (2)",
                                        "parallel.pipeline_model_parallel_size (2)",
                                        "DeepSpeed does not support"});
  // ZeRO-3 with pp = 1 is fine.
  const Scenario s = load_scenario(
      write(replace(kBase, "    stage: 0\n", "    stage: 3\n"), "zero3"),
      {{"parallel.pipeline_model_parallel_size", "1"}});
  EXPECT_EQ(s.zero.stage, 3);
  EXPECT_EQ(s.parallel.data_parallel_size, 4);
  // Sequence parallelism with tp = 1.
  expect_error(replace(replace(kBase, "  tensor_model_parallel_size: 2\n", "  tensor_model_parallel_size: 1\n"),
                       "  global_batch_size: 16\n", "  global_batch_size: 16\n  sequence_parallel: true\n"),
               {"parallel.sequence_parallel (true)", "parallel.tensor_model_parallel_size (1)"});
}

// ---------------------------------------------------------------------------------------
// validate_scenario on a scenario built in code; to_string

TEST(ValidateScenario, FillsDerivedFieldsOfAScenarioBuiltInCode) {
  Scenario s;
  s.source_path = "in-code";
  s.model.num_layers = 12;
  s.model.hidden_size = 768;
  s.model.num_attention_heads = 12;
  s.model.seq_length = 1024;
  s.model.padded_vocab_size = 50304;
  s.parallel.tensor_model_parallel_size = 2;
  s.parallel.pipeline_model_parallel_size = 3;
  s.parallel.micro_batch_size = 4;
  s.parallel.global_batch_size = 96;
  s.parallel.num_layers_per_virtual_pipeline_stage = 2;
  s.cluster.system = "dgx-h100";
  s.cluster.nodes = 3;
  trainsim::validate_scenario(s);
  EXPECT_EQ(s.cluster.gpus_per_node, 8);
  EXPECT_EQ(s.parallel.data_parallel_size, 24 / 6);
  EXPECT_EQ(s.parallel.num_microbatches, 96 / (4 * 4));
  EXPECT_EQ(s.parallel.virtual_pipeline_size, 12 / 3 / 2);
  EXPECT_EQ(s.parallel.layers_per_chunk, 2);
  EXPECT_EQ(s.parallel.pipeline_schedule, PipelineSchedule::Interleaved);
  EXPECT_EQ(s.model.ffn_hidden_size, 4 * 768);
  EXPECT_EQ(s.model.kv_channels, 64);

  Scenario bad = s;
  bad.zero.stage = 7;
  try {
    trainsim::validate_scenario(bad);
    FAIL() << "stage 7 accepted";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("in-code"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("deepspeed.zero_optimization.stage (7)"), std::string::npos)
        << e.what();
  }
  bad = s;
  bad.cluster.system = "nope";
  EXPECT_THROW(trainsim::validate_scenario(bad), InputError);
}

TEST(ValidateScenario, BoundsHoldForScenariosBuiltInCode) {
  // Sizes near 2^62 once wrapped products to 0 (SIGFPE in `%`) or to garbage: every size has an
  // upper bound, checked before any product is formed.
  Scenario s;
  s.source_path = "in-code";
  s.model.num_layers = 4;
  s.model.hidden_size = 256;
  s.model.num_attention_heads = 8;
  s.model.seq_length = 128;
  s.model.padded_vocab_size = 1024;
  s.parallel.micro_batch_size = 2;
  s.parallel.global_batch_size = 16;
  s.cluster.system = "dgx-a100-80gb";
  s.cluster.nodes = 1;
  Scenario ok = s;
  trainsim::validate_scenario(ok);
  struct Case {
    const char* field;
    std::function<void(Scenario&)> set;
  };
  const std::int64_t huge = std::int64_t(1) << 62;
  const Case cases[] = {
      {"cluster.nodes", [&](Scenario& x) { x.cluster.nodes = huge; }},
      {"parallel.micro_batch_size", [&](Scenario& x) { x.parallel.micro_batch_size = huge; }},
      {"model.seq_length", [&](Scenario& x) { x.model.seq_length = huge; }},
      {"model.hidden_size", [&](Scenario& x) { x.model.hidden_size = huge; }},
      {"model.kv_channels", [&](Scenario& x) { x.model.kv_channels = huge; }},
      {"model.padded_vocab_size", [&](Scenario& x) { x.model.padded_vocab_size = huge; }},
      {"parallel.global_batch_size", [&](Scenario& x) { x.parallel.global_batch_size = huge; }},
      {"model.num_layers", [&](Scenario& x) { x.model.num_layers = 65536; }},
  };
  for (const Case& c : cases) {
    Scenario bad = s;
    c.set(bad);
    try {
      trainsim::validate_scenario(bad);
      ADD_FAILURE() << c.field << " = huge accepted";
    } catch (const InputError& e) {
      EXPECT_NE(std::string(e.what()).find(c.field), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("at most"), std::string::npos) << e.what();
    }
  }
}

TEST(ScenarioZero3Keys, ParsedAndBadValuesNamed) {
  const std::string base =
      "model: {num_layers: 2, hidden_size: 64, num_attention_heads: 4, seq_length: 32, "
      "padded_vocab_size: 128}\nparallel: {micro_batch_size: 1, global_batch_size: 2}\n"
      "cluster: {system: dgx-a100-80gb, nodes: 1, gpus_per_node: 2}\n"
      "deepspeed:\n  zero_optimization:\n    stage: 3\n";
  const Scenario s = trainsim::parse_scenario(
      base + "    stage3_max_live_parameters: 3e8\n    stage3_param_persistence_threshold: 0\n"
             "    stage3_max_reuse_distance: 0\n",
      "z3.yaml");
  EXPECT_EQ(s.zero.stage3_max_live_parameters, 300'000'000);
  EXPECT_EQ(s.zero.stage3_param_persistence_threshold, 0);
  EXPECT_EQ(s.zero.stage3_max_reuse_distance, 0);
  const Scenario d = trainsim::parse_scenario(base, "z3.yaml");  // DeepSpeed's defaults
  EXPECT_EQ(d.zero.stage3_max_live_parameters, 1'000'000'000);
  EXPECT_EQ(d.zero.stage3_param_persistence_threshold, 100'000);
  EXPECT_EQ(d.zero.stage3_max_reuse_distance, 1'000'000'000);
  for (const char* bad : {"stage3_max_live_parameters: 0", "stage3_param_persistence_threshold: -1",
                          "stage3_max_reuse_distance: -5", "stage3_max_live_parameters: 1.5",
                          "stage3_param_persistence_threshold: lots"}) {
    try {
      trainsim::parse_scenario(base + "    " + bad + "\n", "z3.yaml");
      ADD_FAILURE() << bad << " accepted";
    } catch (const InputError& e) {
      const std::string what = e.what();
      const std::string key(bad, std::string(bad).find(':'));
      EXPECT_NE(what.find("z3.yaml"), std::string::npos) << what;
      EXPECT_NE(what.find(key), std::string::npos) << what;
    }
  }
}

TEST(ScenarioLimits, EveryIntegerKeyHasAStatedBound) {
  // The bounds are documented in models/input/scenario.h; each integer key of a scenario file has one.
  for (const char* key :
       {"model.num_layers", "model.hidden_size", "model.num_attention_heads", "model.seq_length",
        "model.padded_vocab_size", "model.ffn_hidden_size", "model.kv_channels",
        "parallel.tensor_model_parallel_size", "parallel.pipeline_model_parallel_size",
        "parallel.micro_batch_size", "parallel.global_batch_size",
        "parallel.num_layers_per_virtual_pipeline_stage", "parallel.ddp_bucket_size",
        "deepspeed.zero_optimization.reduce_bucket_size",
        "deepspeed.zero_optimization.allgather_bucket_size",
        "deepspeed.zero_optimization.stage3_prefetch_bucket_size",
        "deepspeed.zero_optimization.stage3_max_live_parameters",
        "deepspeed.zero_optimization.stage3_param_persistence_threshold",
        "deepspeed.zero_optimization.stage3_max_reuse_distance",
        "deepspeed.zero_optimization.sub_group_size", "cluster.nodes", "cluster.gpus_per_node"})
    EXPECT_GT(trainsim::scenario_size_limit(key), 0) << key;
  // Worst case of the per-key bounds: the parameter count of the largest accepted shape must
  // be refused by the derived bound, not wrap.
  EXPECT_EQ(trainsim::scenario_size_limit("model.hidden_size"), std::int64_t(1) << 20);
  EXPECT_EQ(trainsim::scenario_size_limit("nope"), 0);
}

TEST(ScenarioFuzzRegressions, LeadingCommaOutsideFlowIsASyntaxErrorNotAHang) {
  // fuzz/fuzz_scenario.cpp: yaml-cpp 0.7 looped forever, allocating, on these.
  for (const char* text : {",;a\n- b\n", ",\n- b\n", "- a\n,\n- b\n", ", - b\n",
                           "#  cpu` `om\n  nsdesyerser_:= [nol:\n,  ten 1\n", "'',", "[a],b\n", "{a: 1}, b\n"}) {
    try {
      trainsim::parse_scenario(text, "fuzz.yaml");
      ADD_FAILURE() << "accepted: " << text;
    } catch (const InputError& e) {
      EXPECT_NE(std::string(e.what()).find("fuzz.yaml:"), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("','"), std::string::npos) << e.what();
    }
    // Also as a --set value.
    EXPECT_THROW(trainsim::parse_scenario("", "fuzz.yaml", {{"name", text}}), InputError);
  }
  // Control characters (a NUL before a ',' hung yaml-cpp as well) are refused by position.
  try {
    trainsim::parse_scenario(std::string("model:\n  x: \0, b\n", 17), "nul.yaml");
    ADD_FAILURE() << "NUL accepted";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("nul.yaml:2:6"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("0x00"), std::string::npos) << e.what();
  }
  // Bytes that are not UTF-8 are refused with their position.
  try {
    trainsim::parse_scenario("name: a\n[\xff\xff],\n", "bytes.yaml");
    ADD_FAILURE() << "0xFF accepted";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("bytes.yaml:2:2: not UTF-8 text (byte 0xFF)"),
              std::string::npos)
        << e.what();
  }
  // An unclosed flow collection spanning lines hung yaml-cpp (fuzz_scenario, run 4).
  EXPECT_THROW(trainsim::parse_scenario("#uA0\n  3 ,\n [  4 ,well u@der a\n# r ]a\n ,we\n", "f.yaml"),
               InputError);
  // Deeply nested flow collections took yaml-cpp seconds (fuzz_scenario).
  EXPECT_THROW(trainsim::parse_scenario("x: {{{{{{{{{{{{{{{{{{{{\n", "deep.yaml"), InputError);
  // A quoted value spanning lines hid the lines after it from the scan (fuzz_scenario).
  EXPECT_THROW(trainsim::parse_scenario("name: \"a\n  4 ,well {{de\"\n", "q.yaml"), InputError);
  // Tags, anchors, aliases, complex keys and directives are refused (yaml-cpp hung on
  // "!\r&\r..." and "!, b"; aliases allow exponential expansion).
  for (const char* text : {"!, bf", "x: &a ,\n- b\n", "!\r&\r  &\r!\r", "x: *a\n",
                           "? a\n: b\n", "%YAML 1.2\n---\nx: 1\n", "name: |\n  text\n",
                           ">#n : 8\n  seq_~length: 129\n  ,,,,yze: 16\n"}) {
    try {
      trainsim::parse_scenario(text, "tags.yaml");
      ADD_FAILURE() << "accepted: " << text;
    } catch (const InputError& e) {
      EXPECT_NE(std::string(e.what()).find("not supported in scenario files"), std::string::npos)
          << e.what();
    }
  }
  // A ',' inside flow collections and quotes is still fine for the scan.
  EXPECT_THROW(
      {
        try {
          trainsim::parse_scenario("name: 'a, b'\nmodel: {num_layers: [1, 2]}\n", "ok.yaml");
        } catch (const InputError& e) {
          EXPECT_EQ(std::string(e.what()).find("','"), std::string::npos) << e.what();
          throw;
        }
      },
      InputError);
}

TEST(ScenarioStrings, EnumNames) {
  EXPECT_STREQ(trainsim::to_string(trainsim::Precision::FP16), "fp16");
  EXPECT_STREQ(trainsim::to_string(trainsim::Precision::BF16), "bf16");
  EXPECT_STREQ(trainsim::to_string(trainsim::Recompute::None), "none");
  EXPECT_STREQ(trainsim::to_string(trainsim::Recompute::Selective), "selective");
  EXPECT_STREQ(trainsim::to_string(trainsim::Recompute::Full), "full");
  EXPECT_STREQ(trainsim::to_string(PipelineSchedule::GPipe), "gpipe");
  EXPECT_STREQ(trainsim::to_string(PipelineSchedule::OneFOneB), "1f1b");
  EXPECT_STREQ(trainsim::to_string(PipelineSchedule::Interleaved), "interleaved");
}

namespace trainsim {
namespace {

// docs/scenario.md writes sections as flow mappings spanning lines; they load. The yaml-cpp hang the
// fuzzer found (an unclosed '[' spanning lines with comments,
// fuzz/open_findings/scenario_hang_multiline_flow.yaml) is refused before yaml-cpp sees it.
TEST(ScenarioYaml, FlowMappingsMaySpanLinesButNotHideComments) {
  const std::string yaml =
      "name: flow\n"
      "model:      {num_layers: 4, hidden_size: 256, num_attention_heads: 4,\n"
      "             seq_length: 128, padded_vocab_size: 512}\n"
      "parallel:   {tensor_model_parallel_size: 1, pipeline_model_parallel_size: 1,\n"
      "             micro_batch_size: 1, global_batch_size: 2}\n"
      "cluster:    {system: dgx-a100-80gb, nodes: 1, gpus_per_node: 1}\n";
  const Scenario sc = parse_scenario(yaml, "flow.yaml");
  EXPECT_EQ(sc.model.seq_length, 128);
  EXPECT_EQ(sc.parallel.global_batch_size, 2);
  auto message = [](const std::string& text) -> std::string {
    try {
      parse_scenario(text, "bad.yaml");
    } catch (const InputError& e) {
      return e.what();
    }
    return "no error";
  };
  EXPECT_NE(message("model: {num_layers: 4,\n# a comment\n hidden_size: 8}\n").find(
                "comments inside [ ] / { }"),
            std::string::npos);
  EXPECT_NE(message("model: {num_layers: 4,\n hidden_size: 8\n").find("is not closed"),
            std::string::npos);
  std::ifstream f(std::string(TRAINSIM_SOURCE_DIR) +
                  "/fuzz/open_findings/scenario_hang_multiline_flow.yaml");
  std::stringstream finding;
  finding << f.rdbuf();
  ASSERT_FALSE(finding.str().empty());
  EXPECT_NE(message(finding.str()), "no error");
}

}  // namespace
}  // namespace trainsim
