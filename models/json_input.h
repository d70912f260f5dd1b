// Reading a user's input file (scenarios, calibration profiles, traces, Hugging Face configs,
// planner shards) and parsing a JSON one: errors as InputErrors in the user's terms (file,
// line, the key whose value is wrong), never the JSON library's internal error codes
// (`[json.exception.out_of_range.406]`).
#pragma once

#include <nlohmann/json.hpp>

#include <string>

namespace trainsim {

/// The bytes of the user's file `path`. `noun` names it in messages ("calibration profile"),
/// `hint` says what to give in place of a directory ("a .json file"). Throws InputError naming
/// the path: "PATH: is a directory, not a NOUN (HINT)", "PATH: cannot open the NOUN (REASON)"
/// or "PATH: cannot read the NOUN (REASON)", REASON the system's.
std::string read_input_file(const std::string& path, const std::string& noun,
                            const std::string& hint);

/// Parses `text` (from `source`, named in messages). Throws InputError for a syntax error
/// ("SOURCE:LINE:COLUMN: invalid JSON: ...") or a number beyond a double
/// ("SOURCE:LINE: field 'KEY' = 1e999: number out of range (beyond +-1.8e308)").
nlohmann::json parse_json_input(const std::string& text, const std::string& source);

/// The message of a JSON library exception without its "[json.exception.KIND.ID] " prefix.
std::string json_error_text(const std::exception& e);

}  // namespace trainsim
