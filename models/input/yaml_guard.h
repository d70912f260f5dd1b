// A scan of a scenario's YAML text before yaml-cpp parses it (docs/scenario.md "YAML
// accepted"): yaml-cpp 0.7 loops forever on some malformed YAML (found by
// fuzz/fuzz_scenario.cpp), so the text is refused first, with the line and column.
#pragma once

#include <string>

namespace trainsim::input {

/// yaml-cpp 0.7 (Debian 12's) loops forever, allocating, on a ',' where a node starts outside
/// any flow collection (",\n- b", "!, b", found by fuzz/fuzz_scenario.cpp). Such a ',' is
/// invalid YAML (a plain scalar cannot start with a flow indicator), so this scan refuses it
/// first, with the line. A node starts at a line's first character, after "- " or ": " and
/// inside flow collections after '[', '{' or ','. The scan follows quoted scalars (one line
/// each), comments and flow collections ([ ], { }). Block scalars, tags, anchors, aliases,
/// complex keys and directives are refused: no scenario needs them, and yaml-cpp hung on
/// Throws InputError naming `source`, the line and the column.
void refuse_yaml_cpp_hangs(const std::string& text, const std::string& source);

}  // namespace trainsim::input
