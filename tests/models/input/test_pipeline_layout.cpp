// Megatron-Core's hand-written pipeline layout (parallel.pipeline_model_parallel_layout,
// models/input/pipeline_layout.h): the string syntax, the split it makes, and each refusal
// naming the file, the field and the value.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "models/errors.h"
#include "models/input/pipeline_layout.h"
#include "models/input/scenario.h"
#include "tests/support/scenario_yaml.h"

namespace trainsim {
namespace {

std::vector<std::string> parse(const std::string& text) {
  std::string why;
  const auto stages = input::parse_pipeline_layout(text, 1 << 16, 1 << 20, why);
  EXPECT_TRUE(stages.has_value()) << text << ": " << why;
  return stages.value_or(std::vector<std::string>{});
}

std::string error_of(const std::string& text) {
  std::string why;
  EXPECT_FALSE(input::parse_pipeline_layout(text, 1 << 16, 1 << 20, why).has_value()) << text;
  return why;
}

TEST(PipelineLayout, MegatronsDocstringExample) {
  // pipeline_parallel_layer_layout.py parse_str_to_list: "Ettt|(tt|)*29,m|L" is
  // [[E,t,t,t]] + [[t,t]] * 29 + [[m], [L]].
  const auto stages = parse("Ettt|(tt|)*29,m|L");
  ASSERT_EQ(stages.size(), 32u);
  EXPECT_EQ(stages.front(), "Ettt");
  for (std::size_t i = 1; i <= 29; ++i) EXPECT_EQ(stages[i], "tt") << i;
  EXPECT_EQ(stages[30], "m");
  EXPECT_EQ(stages[31], "L");
  EXPECT_EQ(parse("Et*3|(tt|)*29,m|L"), stages);  // x*N repeats one symbol
  EXPECT_EQ(parse("E(t*2|)*2L"), (std::vector<std::string>{"Ett", "tt", "L"}));
}

TEST(PipelineLayout, MalformedStringsSayWhatAndWhere) {
  EXPECT_NE(error_of("Ex|L").find("invalid character 'x'"), std::string::npos);
  EXPECT_NE(error_of("E(tt|*2").find("unclosed '('"), std::string::npos);
  EXPECT_NE(error_of("E((tt|)*2)*2|L").find("nested parentheses"), std::string::npos);
  EXPECT_NE(error_of("E(tt|)|L").find("without its repeat count"), std::string::npos);
  EXPECT_NE(error_of("Et*0|L").find("positive integer"), std::string::npos);
  EXPECT_NE(error_of("E*|L").find("positive integer"), std::string::npos);
  EXPECT_NE(error_of("Et)|L").find("unmatched ')'"), std::string::npos);
  EXPECT_NE(error_of("*3").find("invalid character '*'"), std::string::npos);
  // Bounded: a huge repeat is an error, not a long loop.
  EXPECT_NE(error_of("E(t|)*99999999999L").find("unrolls to more than"), std::string::npos);
  EXPECT_NE(error_of("Et*99999999999|L").find("unrolls to more than"), std::string::npos);
}

const char* kModel =
    "num_layers: 8, hidden_size: 512, num_attention_heads: 8, num_query_groups: 4, "
    "kv_channels: 64, ffn_hidden_size: 1536, swiglu: true, normalization: RMSNorm, "
    "position_embedding_type: rope, add_bias_linear: false, hidden_dropout: 0.0, "
    "attention_dropout: 0.0, attention_backend: flash, seq_length: 1024, "
    "padded_vocab_size: 4096";

Scenario with_layout(const std::string& layout, const std::string& extra = "") {
  return parse_scenario(
      test_support::core_scenario_yaml(kModel,
                                       "pipeline_model_parallel_size: 2, micro_batch_size: 1, "
                                       "global_batch_size: 8, pipeline_model_parallel_layout: '" +
                                           layout + "'" + extra),
      "layout.yaml");
}

TEST(PipelineLayout, SetsTheVirtualStagesAndTheirLayers) {
  // Four virtual stages on PP 2: stage i runs on rank i % 2 as its chunk i / 2.
  const Scenario sc = with_layout("Et|ttt|ttt|tL");
  EXPECT_EQ(sc.parallel.virtual_pipeline_size, 2);
  EXPECT_EQ(sc.parallel.pipeline_schedule, PipelineSchedule::Interleaved);
  EXPECT_EQ(sc.parallel.virtual_stage_layers, (std::vector<std::int64_t>{1, 3, 3, 1}));
  EXPECT_EQ(sc.parallel.first_layer_of_virtual_stage(2), 4);
  // A virtual stage of the loss alone; validating again (as the run does) keeps the split.
  const Scenario loss_alone = validated(with_layout("Ettt|ttt|tt|L")).get();
  EXPECT_EQ(loss_alone.parallel.virtual_stage_layers, (std::vector<std::int64_t>{3, 3, 2, 0}));
  EXPECT_EQ(loss_alone.parallel.pipeline_schedule, PipelineSchedule::Interleaved);
  // An even layout keeps the uniform split.
  const Scenario even = with_layout("Etttt|ttttL");
  EXPECT_EQ(even.parallel.virtual_pipeline_size, 1);
  EXPECT_TRUE(even.parallel.virtual_stage_layers.empty());
  EXPECT_EQ(even.parallel.layers_per_chunk, 4);
}

TEST(PipelineLayout, BadLayoutsNameTheFileTheFieldAndTheValue) {
  const std::pair<std::string, std::string> cases[] = {
      {"Et|ttt|ttt|xL", "invalid character 'x'"},
      {"Ettt|ttttt|L", "3 virtual stages are not divisible by parallel.pipeline_model_parallel_size (2)"},
      {"Etttt|tttL", "7 decoder layers (t), model.num_layers (8)"},
      {"tEttt|ttttL", "the first layer must be the embedding E"},
      {"Etttt|ttLtt", "the last layer must be the loss L"},
      {"Etttt|ttttmL", "1 multi-token prediction layers (m), model.mtp_num_layers (0)"},
      {"|Etttt|tttt|L", "the embedding must be in the first virtual stage"},
  };
  for (const auto& [layout, expect] : cases) {
    try {
      with_layout(layout);
      ADD_FAILURE() << layout << " accepted";
    } catch (const InputError& e) {
      const std::string what = e.what();
      EXPECT_NE(what.find("layout.yaml"), std::string::npos) << what;
      EXPECT_NE(what.find("parallel.pipeline_model_parallel_layout' = '" + layout + "'"),
                std::string::npos) << what;
      EXPECT_NE(what.find(expect), std::string::npos) << layout << ": " << what;
    }
  }
  try {
    with_layout("Etttt|ttttL", ", num_layers_per_virtual_pipeline_stage: 2");
    ADD_FAILURE() << "layout with num_layers_per_virtual_pipeline_stage accepted";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("Megatron-Core takes the layout alone"),
              std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace trainsim
