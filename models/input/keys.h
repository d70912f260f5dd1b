// The scenario's key schema (docs/scenario.md "Keys"): its sections and keys, the did-you-mean
// suggester for an unknown key and the per-key size bounds (scenario_size_limits, declared in
// models/input/scenario.h). Internal to models/input/.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace trainsim::input {

/// Whether `path` (dotted) is a section (a mapping of keys) or a key of a scenario.
bool is_section(const std::string& path);
bool is_leaf(const std::string& path);

/// "; did you mean 'X'?" for an unknown key `path`, or "" when nothing is close.
/// Same-section keys are named by their last component, keys of another section by full path.
std::string suggestion(const std::string& path);

/// The refusal of a value above `max`, the bound of `field` (models/input/scenario.h).
std::string limit_text(const std::string& field, std::int64_t max);

/// Dotted-path helpers: "a.b" + "c", the parent "a.b" of "a.b.c", the last component "c".
std::string join(const std::string& prefix, const std::string& key);
std::string parent_of(const std::string& path);
std::string last_of(const std::string& path);

bool contains(const std::vector<std::string>& v, const std::string& s);
/// 's' with single quotes.
std::string quote(const std::string& s);

}  // namespace trainsim::input
