// Scenarios written as YAML text in a test: a GPT shape, flow-style `parallel` and
// `zero_optimization` mappings and a one-system cluster, parsed by the real loader
// (models/input/scenario.h), so every test scenario goes through the same validation as a file.
#pragma once

#include <cstdint>
#include <string>

#include "models/input/scenario.h"
#include "tests/support/paths.h"

namespace trainsim::test_support {

/// The `model:` section's sizes (Megatron-LM names; ffn_hidden_size and kv_channels default).
struct GptModel {
  std::int64_t num_layers;
  std::int64_t hidden_size;
  std::int64_t num_attention_heads;
  std::int64_t seq_length;
  std::int64_t padded_vocab_size;
};

/// {num_layers: L, hidden_size: H, num_attention_heads: A, seq_length: S, padded_vocab_size: V},
/// the `model:` flow mapping of `m`.
inline std::string gpt_model_flow(const GptModel& m) {
  return "{num_layers: " + std::to_string(m.num_layers) +
         ", hidden_size: " + std::to_string(m.hidden_size) +
         ", num_attention_heads: " + std::to_string(m.num_attention_heads) +
         ", seq_length: " + std::to_string(m.seq_length) +
         ", padded_vocab_size: " + std::to_string(m.padded_vocab_size) + "}";
}

/// name: NAME, model: {...}, parallel: PARALLEL, deepspeed: {zero_optimization: ZERO},
/// cluster: {system: SYSTEM, nodes: NODES, gpus_per_node: GPUS_PER_NODE}. PARALLEL and ZERO
/// are YAML flow mappings, e.g. "{micro_batch_size: 2, global_batch_size: 8}", "{stage: 1}".
inline std::string gpt_scenario_yaml(const std::string& name, const GptModel& m,
                                     const std::string& parallel, const std::string& zero,
                                     std::int64_t gpus_per_node,
                                     const std::string& system = "dgx-a100-80gb",
                                     std::int64_t nodes = 1) {
  return "name: " + name + "\nmodel: " + gpt_model_flow(m) + "\nparallel: " + parallel +
         "\ndeepspeed: {zero_optimization: " + zero + "}\ncluster: {system: " + system +
         ", nodes: " + std::to_string(nodes) + ", gpus_per_node: " + std::to_string(gpus_per_node) +
         "}\n";
}

/// name: NAME, model: {...}, parallel: PARALLEL, cluster: CLUSTER (flow mappings), one line
/// each and no other section: the small scenarios of the end-to-end tests of the CLI verbs, which
/// append the section they test (training:, plan:).
inline std::string gpt_cli_scenario_yaml(const std::string& name, const GptModel& m,
                                         const std::string& parallel, const std::string& cluster) {
  return "name: " + name + "\nmodel: " + gpt_model_flow(m) + "\nparallel: " + parallel +
         "\ncluster: " + cluster + "\n";
}

/// The scenario of gpt_scenario_yaml, parsed and validated; messages name "NAME.yaml".
inline Scenario gpt_scenario(const std::string& name, const GptModel& m,
                             const std::string& parallel, const std::string& zero,
                             std::int64_t gpus_per_node,
                             const std::string& system = "dgx-a100-80gb", std::int64_t nodes = 1) {
  return parse_scenario(gpt_scenario_yaml(name, m, parallel, zero, gpus_per_node, system, nodes),
                        name + ".yaml");
}

/// A megatron-core scenario: model: {MODEL}, parallel: {PARALLEL} (the mappings' keys, without
/// braces), cluster: {system: SYSTEM, nodes: NODES}.
inline std::string core_scenario_yaml(const std::string& model, const std::string& parallel,
                                      std::int64_t nodes = 1,
                                      const std::string& system = "dgx-h100") {
  return "runtime: megatron-core\nmodel: {" + model + "}\nparallel: {" + parallel +
         "}\ncluster: {system: " + system + ", nodes: " + std::to_string(nodes) + "}\n";
}

/// A megatron-core scenario on one DGX-H100 node whose model section imports the Hugging Face
/// config at `config_path` (model.hf_config) and sets `seq_length`; micro batch 1, global 8.
inline std::string hf_scenario_yaml(const std::string& config_path, std::int64_t seq_length) {
  return "runtime: megatron-core\nmodel: {hf_config: " + config_path +
         ", seq_length: " + std::to_string(seq_length) +
         "}\nparallel: {micro_batch_size: 1, global_batch_size: 8}\n"
         "cluster: {system: dgx-h100, nodes: 1}\n";
}

/// Writes the Hugging Face config `config_json` (config.json) and a scenario importing it
/// (hf_scenario_yaml, s.yaml) into `dir`; returns the scenario's path.
inline std::string write_hf_scenario(const ScratchDir& dir, const std::string& config_json,
                                     std::int64_t seq_length) {
  return dir.write("s.yaml", hf_scenario_yaml(dir.write("config.json", config_json), seq_length));
}

}  // namespace trainsim::test_support
