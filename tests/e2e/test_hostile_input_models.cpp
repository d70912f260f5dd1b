// Hostile model values through the CLI (issue 35): `import-hf` refuses what a scenario would
// refuse, naming the config file, its field and the value, and prints nothing on stdout;
// `simulate --fail-on-oom` exits with its own status after writing its outputs; `plan` prints
// memory in GiB, as `simulate` does (docs/cli.md).
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cmath>
#include <cstdio>
#include <sstream>
#include <string>
#include <vector>

#include "tests/e2e/cli_helpers.h"
#include "tests/support/paths.h"

namespace {

using trainsim::test_support::ScratchDir;
using trainsim_e2e::run;
using trainsim_e2e::slurp;

const std::string kTiny = std::string(TRAINSIM_SOURCE_DIR) + "/scenarios/small/gpt-tiny_tp2_pp2_dp2.yaml";

/// A Llama-shaped config.json with `changes` applied.
std::string llama(const nlohmann::json& changes) {
  nlohmann::json c = {{"architectures", {"LlamaForCausalLM"}}, {"num_hidden_layers", 32},
                      {"hidden_size", 4096}, {"num_attention_heads", 32},
                      {"num_key_value_heads", 8}, {"intermediate_size", 14336},
                      {"vocab_size", 128256}, {"rms_norm_eps", 1e-5}, {"rope_theta", 500000.0}};
  c.update(changes);
  return c.dump();
}

TEST(HostileModelsCli, ImportHfRefusesValuesAScenarioWouldRefuse) {
  ScratchDir dir("hostile_models_cli");
  struct Case {
    nlohmann::json changes;
    std::vector<std::string> needles;
  };
  const std::vector<Case> cases = {
      {{{"vocab_size", INT64_MAX}},
       {"field 'vocab_size' = 9223372036854775807", "above model.padded_vocab_size's bound"}},
      {{{"hidden_size", std::int64_t(1) << 62}}, {"field 'hidden_size' = 4611686018427387904"}},
      {{{"attention_dropout", 5.0}}, {"field 'attention_dropout' = 5.0"}},
      {{{"num_key_value_heads", 3}}, {"field 'num_key_value_heads' = 3"}},
      {{{"architectures", {"MixtralForCausalLM"}}, {"sliding_window", -5}},
       {"field 'sliding_window' = -5"}},
      {{{"architectures", {"MixtralForCausalLM"}}, {"num_local_experts", 128},
        {"num_experts_per_tok", 200}},
       {"field 'num_experts_per_tok' = 200"}},
      {{{"attention_dropout", "0.1"}}, {"field 'attention_dropout': expected a number"}},
      {{{"rms_norm_eps", 1e-5}, {"hidden_act", 5}}, {"field 'hidden_act': expected a string, got 5"}},
      {{{"num_hidden_layers", std::int64_t(1) << 62}}, {"field 'num_hidden_layers'"}},
      {{{"architectures", {"Qwen3MoeForCausalLM"}}, {"num_hidden_layers", 1000000000},
        {"num_experts", 8}, {"num_experts_per_tok", 2}, {"decoder_sparse_step", 2}},
       {"field 'num_hidden_layers' = 1000000000", "above model.num_layers's bound"}},
  };
  for (const Case& c : cases) {
    const std::string config = dir.write("config.json", llama(c.changes));
    const int rc = run("import-hf " + config, dir.file("log").string());
    const std::string message = slurp(dir.file("log"));
    EXPECT_EQ(rc, 1) << c.changes.dump() << "\n" << message;
    // One line, the error: nothing of the model: section was printed.
    EXPECT_EQ(message.rfind("trainsim: " + config + ": field '", 0), 0u) << message;
    EXPECT_EQ(message.find('\n'), message.size() - 1) << message;
    for (const auto& n : c.needles) EXPECT_NE(message.find(n), std::string::npos) << n << "\n" << message;
    EXPECT_EQ(message.find("json.exception"), std::string::npos) << message;
    EXPECT_EQ(message.find("bad_alloc"), std::string::npos) << message;
  }
}

TEST(HostileModelsCli, FailOnOomExitsThreeAfterWritingItsOutputs) {
  ScratchDir dir("hostile_models_cli");
  const std::string json = dir.file("s.json").string(), log = dir.file("log").string();
  // A 64k-wide GPT: its weights alone are far above an A100's 80 GiB.
  const std::string big = kTiny + " --set model.hidden_size=65536 --set model.num_attention_heads=64";
  ASSERT_EQ(run("simulate " + big + " --fail-on-oom --json " + json, log), 3) << slurp(log);
  const auto s = nlohmann::json::parse(slurp(json));
  EXPECT_TRUE(s.at("oom").get<bool>());
  EXPECT_GT(s.at("peak_memory_bytes").get<double>(), s.at("memory_capacity_bytes").get<double>());
  EXPECT_NE(slurp(log).find("iteration time"), std::string::npos);  // the report came first
  EXPECT_NE(slurp(log).find("out of memory"), std::string::npos);
  // Without the flag the same run exits 0 (its summary says oom); a run that fits exits 0 with it.
  EXPECT_EQ(run("simulate " + big, log), 0) << slurp(log);
  ASSERT_EQ(run("simulate " + kTiny + " --fail-on-oom --json " + json, log), 0) << slurp(log);
  EXPECT_FALSE(nlohmann::json::parse(slurp(json)).at("oom").get<bool>());
}

TEST(HostileModelsCli, PlanPrintsPeakMemoryInGiB) {
  ScratchDir dir("hostile_models_cli");
  const std::string path = dir.write(
      "s.yaml",
      "model: {num_layers: 8, hidden_size: 512, num_attention_heads: 8, seq_length: 256, "
      "padded_vocab_size: 1024}\n"
      "parallel: {micro_batch_size: 1, global_batch_size: 32, precision: fp16}\n"
      "cluster: {system: dgx-a100-80gb, nodes: 1}\n"
      "plan: {tensor_model_parallel_size: [2], pipeline_model_parallel_size: [1], "
      "micro_batch_size: [1], recompute_granularity: [none], zero_stage: [0], top_k: 1}\n");
  const std::string json = dir.file("r.json").string(), out = dir.file("out.txt").string();
  ASSERT_EQ(run("plan " + path + " --jobs 1 --json " + json + " 2>/dev/null", out), 0) << slurp(out);
  double peak_bytes = -1;
  const auto result = nlohmann::json::parse(slurp(json));
  for (const auto& c : result.at("candidates"))
    if (c.at("simulated").get<bool>()) peak_bytes = c.at("peak_memory_bytes").get<double>();
  ASSERT_GT(peak_bytes, 0) << slurp(json);
  const std::string table = slurp(out);
  EXPECT_NE(table.find("peak GiB"), std::string::npos) << table;
  EXPECT_EQ(table.find("peak GB"), std::string::npos) << table;
  // Rank 1's row: after the layout come tokens/s, TFLOP/s, MFU, peak, headroom, bubble, comm,
  // estimate error.
  std::istringstream lines(table);
  std::string line;
  std::vector<std::string> row;
  while (std::getline(lines, line))
    if (line.rfind("1 ", 0) == 0) {
      std::istringstream words(line);
      for (std::string w; words >> w;) row.push_back(w);
      break;
    }
  ASSERT_GE(row.size(), 9u) << table;
  char expected[32];
  std::snprintf(expected, sizeof expected, "%.1f", peak_bytes / std::pow(2.0, 30));
  EXPECT_EQ(row[row.size() - 5], expected) << line;
}

}  // namespace
