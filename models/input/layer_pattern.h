// Megatron's string form of --moe-layer-freq (docs/scenario.md `moe_layer_freq`).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace trainsim::input {

/// Megatron's string form of --moe-layer-freq (arguments.py moe_freq_type / _eval_pattern: a
/// Python list expression over digits, commas, brackets, parentheses, + and *, e.g.
/// "([0]*3+[1]*58)" or "([1]*3+[0]*1)*3"), evaluated without Python: lists concatenate with +,
/// repeat with * by an integer, integers multiply. The result must be a list of 0 and 1.
/// Hostile input is bounded: nesting deeper than kMaxDepth and more than kMaxWork elements
/// produced along the way are errors (no deep recursion, no long loops).
/// The pattern of `text` (1 = MoE layer, 0 = dense layer), at most `max_entries` long, or
/// nullopt with the reason in `why`.
std::optional<std::vector<std::uint8_t>> parse_layer_pattern(const std::string& text,
                                                             std::int64_t max_entries,
                                                             std::string& why);

}  // namespace trainsim::input
