// Hostile values in a scenario and in an imported Hugging Face config (issue 35): each is
// refused with an InputError naming the file, the field and the value, never accepted, printed
// as a wrapped number, or left to a bad_alloc. The bounds come from the key table
// (models/input/keys.h), so each test reads its bound there rather than re-spelling it.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "models/errors.h"
#include "models/input/hf_config.h"
#include "models/input/keys.h"
#include "models/input/scenario.h"
#include "tests/support/paths.h"
#include "tests/support/scenario_yaml.h"

namespace trainsim {
namespace {

using test_support::GptModel;
using test_support::gpt_scenario_yaml;

/// The InputError's message of `f`, failing the test when it returns or throws another type.
template <typename F>
std::string refusal(F f) {
  try {
    f();
  } catch (const InputError& e) {
    return e.what();
  } catch (const std::exception& e) {
    ADD_FAILURE() << "not an InputError: " << e.what();
    return "";
  }
  ADD_FAILURE() << "accepted";
  return "";
}

void expect_all(const std::string& message, const std::vector<std::string>& needles) {
  for (const auto& n : needles) EXPECT_NE(message.find(n), std::string::npos) << n << "\n" << message;
}

// An 8-layer GPT on 4 pipeline stages.
std::string pipeline_yaml(const std::string& split) {
  return "runtime: megatron-core\n" + gpt_scenario_yaml("s", GptModel{8, 256, 4, 128, 1024},
                           "{pipeline_model_parallel_size: 4, micro_batch_size: 1, "
                           "global_batch_size: 8, " + split + "}",
                           "{stage: 0}", 4);
}

TEST(HostileValues, EmptyFirstOrLastPipelineStageIsRefused) {
  // Megatron-Core's TransformerConfig refuses num_layers_in_{first,last}_pipeline_stage <= 0.
  for (const char* key : {"decoder_first_pipeline_num_layers", "decoder_last_pipeline_num_layers"}) {
    EXPECT_EQ(find_scenario_key(std::string("parallel.") + key)->min, 1) << key;
    const std::string msg =
        refusal([&] { parse_scenario(pipeline_yaml(std::string(key) + ": 0"), "s.yaml"); });
    expect_all(msg, {"s.yaml", std::string("parallel.") + key, "0"});
  }
  // One layer on the first and last stages, three on each other one: accepted.
  const Scenario s = parse_scenario(
      pipeline_yaml("decoder_first_pipeline_num_layers: 1, decoder_last_pipeline_num_layers: 1"),
      "s.yaml");
  EXPECT_EQ(s.parallel.decoder_first_pipeline_num_layers, 1);
}

TEST(HostileValues, EmptyNameIsRefused) {
  std::string yaml = gpt_scenario_yaml("x", GptModel{2, 256, 4, 128, 1024},
                                       "{micro_batch_size: 1, global_batch_size: 8}", "{stage: 0}", 8);
  for (const char* empty : {"\"\"", "\"  \""}) {
    const std::string text = "name: " + std::string(empty) + yaml.substr(yaml.find('\n'));
    expect_all(refusal([&] { parse_scenario(text, "s.yaml"); }), {"s.yaml", "name", "non-empty"});
  }
  // Without `name:` the file's stem names it.
  EXPECT_EQ(parse_scenario(yaml.substr(yaml.find('\n') + 1), "stem.yaml").name, "stem");
}

// ---- Hugging Face configs

/// A Llama-3-8B-shaped config (32 heads, 8 KV heads) with `changes` applied.
std::string llama(const nlohmann::json& changes) {
  nlohmann::json c = {{"architectures", {"LlamaForCausalLM"}}, {"num_hidden_layers", 32},
                      {"hidden_size", 4096}, {"num_attention_heads", 32},
                      {"num_key_value_heads", 8}, {"intermediate_size", 14336},
                      {"vocab_size", 128256}, {"rms_norm_eps", 1e-5}, {"rope_theta", 500000.0},
                      {"attention_dropout", 0.0}};
  c.update(changes);
  return c.dump();
}

class HostileHf : public ::testing::Test {
 protected:
  std::string refused(const nlohmann::json& changes) {
    const std::string path = dir_.write("config.json", llama(changes));
    return refusal([&] { import_hf_config(path); });
  }
  test_support::ScratchDir dir_{"hostile_hf"};
};

std::string bound(const char* key) { return std::to_string(find_scenario_key(key)->max); }

TEST_F(HostileHf, ValuesAboveTheKeyTablesBoundsAreRefusedNamingTheHfField) {
  const std::string vocab = refused({{"vocab_size", INT64_MAX}});
  expect_all(vocab, {"config.json: field 'vocab_size' = 9223372036854775807",
                     "above model.padded_vocab_size's bound " + bound("model.padded_vocab_size")});
  EXPECT_EQ(vocab.find("-9223372036854775680"), std::string::npos) << vocab;
  expect_all(refused({{"hidden_size", std::int64_t(1) << 62}}),
             {"field 'hidden_size' = 4611686018427387904", "model.hidden_size's bound " + bound("model.hidden_size")});
  // The bound itself (a multiple of 128) imports; one more is refused.
  const std::int64_t vmax = find_scenario_key("model.padded_vocab_size")->max;
  const std::string ok = dir_.write("ok.json", llama({{"vocab_size", vmax}}));
  EXPECT_NO_THROW(import_hf_config(ok));
  expect_all(refused({{"vocab_size", vmax + 1}}),
             {"field 'vocab_size' = " + std::to_string(vmax + 1), "above model.padded_vocab_size"});
}

TEST_F(HostileHf, LayerCountsAreBoundedBeforeAnythingIsAllocatedPerLayer) {
  // A Qwen3-MoE config sizes a layer pattern (decoder_sparse_step); 2^62 or 10^9 layers must be
  // refused by the bound, not by bad_alloc or after allocating gigabytes.
  for (std::int64_t layers : {std::int64_t(1) << 62, std::int64_t(1000000000)}) {
    const std::string msg = refused({{"architectures", {"Qwen3MoeForCausalLM"}},
                                     {"num_hidden_layers", layers}, {"num_experts", 8},
                                     {"num_experts_per_tok", 2}, {"decoder_sparse_step", 2}});
    expect_all(msg, {"field 'num_hidden_layers' = " + std::to_string(layers),
                     "above model.num_layers's bound " + bound("model.num_layers")});
  }
}

TEST_F(HostileHf, NonsenseValuesAndCrossChecksAreRefused) {
  expect_all(refused({{"attention_dropout", 5.0}}),
             {"field 'attention_dropout' = 5.0", "model.attention_dropout"});
  expect_all(refused({{"num_key_value_heads", 3}}),
             {"field 'num_key_value_heads' = 3", "num_attention_heads = 32 is not a multiple"});
  expect_all(refused({{"architectures", {"MixtralForCausalLM"}}, {"sliding_window", -5}}),
             {"field 'sliding_window' = -5"});
  expect_all(refused({{"architectures", {"MixtralForCausalLM"}}, {"num_local_experts", 128},
                      {"num_experts_per_tok", 200}}),
             {"field 'num_experts_per_tok' = 200", "num_local_experts = 128"});
  // 32 heads, 4 KV heads: a valid GQA config still imports.
  const auto keys = import_hf_config(dir_.write("gqa.json", llama({{"num_key_value_heads", 4}})));
  EXPECT_NE(std::find(keys.begin(), keys.end(), std::make_pair(std::string("num_query_groups"),
                                                               std::string("4"))),
            keys.end());
}

TEST_F(HostileHf, FieldsOfTheWrongTypeAreRefusedNotDropped) {
  expect_all(refused({{"attention_dropout", "0.1"}}),
             {"config.json: field 'attention_dropout': expected a number, got \"0.1\""});
  expect_all(refused({{"hidden_act", 5}}),
             {"config.json: field 'hidden_act': expected a string, got 5"});
  expect_all(refused({{"tie_word_embeddings", "no"}}),
             {"config.json: field 'tie_word_embeddings': expected true or false, got \"no\""});
  const std::string msg = refused({{"architectures", {"MixtralForCausalLM"}},
                                   {"sliding_window", 4096}, {"use_sliding_window", 1}});
  expect_all(msg, {"field 'use_sliding_window'", "got 1"});
  EXPECT_EQ(msg.find("json.exception"), std::string::npos) << msg;
}

TEST_F(HostileHf, AScenarioImportingABadConfigNamesTheConfig) {
  const std::string path = test_support::write_hf_scenario(dir_, llama({{"vocab_size", INT64_MAX}}), 1024);
  const std::string msg = refusal([&] { load_scenario(path); });
  expect_all(msg, {"config.json", "field 'vocab_size' = 9223372036854775807"});
  EXPECT_EQ(msg.find("-9223372036854775680"), std::string::npos) << msg;
}

TEST_F(HostileHf, AnImportedValueTheScenarioRefusesNamesTheConfig) {
  // 4095 / 32 heads: a valid import (each value within its bound), refused by validation.
  const std::string config = dir_.write("config.json", llama({{"hidden_size", 4095}}));
  const std::string imported = dir_.write("s.yaml", test_support::hf_scenario_yaml(config, 1024));
  expect_all(refusal([&] { load_scenario(imported); }),
             {"s.yaml", "model.hidden_size (4095)",
              "(model.hidden_size and model.num_attention_heads were imported from " + config + ")"});
  // The scenario's own hidden_size is its own: only the imported heads are attributed.
  const std::string own = dir_.write(
      "own.yaml", "runtime: megatron-core\nmodel: {hf_config: " + config +
                      ", hidden_size: 4001, seq_length: 1024}\nparallel: {micro_batch_size: 1, "
                      "global_batch_size: 8}\ncluster: {system: dgx-h100, nodes: 1}\n");
  const std::string msg = refusal([&] { load_scenario(own); });
  expect_all(msg, {"model.hidden_size (4001)", "(model.num_attention_heads was imported from"});
}

}  // namespace
}  // namespace trainsim
