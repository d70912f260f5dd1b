// Reading a user's JSON file (calibration profiles, traces): the parser's errors as
// InputErrors in the user's terms (file, line, the key whose value is wrong), never the JSON
// library's internal error codes (`[json.exception.out_of_range.406]`).
#pragma once

#include <nlohmann/json.hpp>

#include <string>

namespace trainsim {

/// Parses `text` (from `source`, named in messages). Throws InputError for a syntax error
/// ("SOURCE:LINE:COLUMN: invalid JSON: ...") or a number beyond a double
/// ("SOURCE:LINE: field 'KEY' = 1e999: number out of range (beyond +-1.8e308)").
nlohmann::json parse_json_input(const std::string& text, const std::string& source);

/// The message of a JSON library exception without its "[json.exception.KIND.ID] " prefix.
std::string json_error_text(const std::exception& e);

}  // namespace trainsim
