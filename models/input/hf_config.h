// Hugging Face `config.json` -> the scenario's `model:` keys (Megatron-Core names), for the
// Llama, Mistral, Qwen2, Qwen3, Qwen3-MoE, Mixtral, GPT-OSS and DeepSeek-V2/V3 families
// (models/input/hf_config.cpp lists the mapping). A scenario's `model: {hf_config: path}` imports it, keys written in the scenario
// override the imported ones; `trainsim import-hf CONFIG.json` prints the section.
#pragma once

#include <string>
#include <utility>
#include <vector>

namespace trainsim {

/// The model keys and their YAML values, in a fixed order. Throws InputError naming the file,
/// the field and the value for an unknown architecture or a field trainsim cannot express
/// (e.g. another architecture, multi-token prediction, a non-SiLU MLP).
std::vector<std::pair<std::string, std::string>> import_hf_config(const std::string& path);

}  // namespace trainsim
