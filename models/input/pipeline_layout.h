// Megatron-Core's hand-written pipeline layout, --pipeline-model-parallel-layout
// (megatron/core/transformer/pipeline_parallel_layer_layout.py; docs/scenario.md
// `pipeline_model_parallel_layout`).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace trainsim::input {

/// The virtual stages of a layout string, in Megatron's order (virtual stage i runs on
/// pipeline rank i % pp as its chunk i / pp), each the string of its layer symbols: E the
/// embedding, t a decoder (transformer) layer, m a multi-token prediction layer, L the loss.
/// The syntax is Megatron's PipelineParallelLayerLayout.parse_str_to_list: '|' separates
/// virtual stages, ',' is cosmetic, "(...)*N" repeats a group (no nesting), "x*N" repeats one
/// symbol; e.g. "Et*3|(tt|)*29m|L" is 31 stages. At most `max_stages` stages and
/// `max_symbols` symbols are produced (hostile input stays bounded). On an error: nullopt, and
/// `why` says what and where (the character's 0-based offset).
std::optional<std::vector<std::string>> parse_pipeline_layout(const std::string& text,
                                                              std::int64_t max_stages,
                                                              std::int64_t max_symbols,
                                                              std::string& why);

}  // namespace trainsim::input
