// Reading a user's input file (scenarios, calibration profiles, traces, Hugging Face configs,
// planner shards) and parsing a JSON one: errors as InputErrors in the user's terms (file,
// line, the key whose value is wrong), never the JSON library's internal error codes
// (`[json.exception.out_of_range.406]`).
#pragma once

#include <nlohmann/json.hpp>

#include <cstddef>
#include <string>

namespace trainsim {

/// Size limits of read_input_file: files a person writes (scenarios, calibration profiles,
/// Hugging Face configs) are kilobytes to a few megabytes; traces and planner results grow with
/// the run (a replay trace of one GPT 1.7B rank: 0.2 MB), and parsing a JSON text holds several
/// times its size in memory, so 1 GiB is past any that can be parsed on a workstation. A device
/// (`/dev/zero`) or a runaway pipe stops at the limit instead of exhausting memory.
inline constexpr std::size_t kSmallInputMaxBytes = std::size_t(64) << 20;
inline constexpr std::size_t kLargeInputMaxBytes = std::size_t(1) << 30;

/// The bytes of the user's file `path` (a regular file, or a pipe such as bash's `<(...)`).
/// `noun` names it in messages ("calibration profile"), `hint` says what to give in place of a
/// directory ("a .json file"). Throws InputError naming the path: "PATH: is a directory, not a
/// NOUN (HINT)", "PATH: cannot open the NOUN (REASON)", "PATH: cannot read the NOUN (REASON)",
/// REASON the system's, or "PATH: more than N MiB, too large for a NOUN (HINT)" past
/// `max_bytes`.
std::string read_input_file(const std::string& path, const std::string& noun,
                            const std::string& hint, std::size_t max_bytes);

/// The deepest nesting of arrays and objects parse_json_input accepts. trainsim's inputs nest a
/// few levels (a trace: 4, a plan result: 5); the JSON library's recursive functions (copies,
/// dumps, destruction) exhaust the stack somewhere past 50,000 levels, so deeper text is refused
/// before it is parsed (issue 35: a config.json nested 100,000 deep crashed every reader).
inline constexpr std::size_t kMaxJsonDepth = 512;

/// Throws InputError "SOURCE:LINE: JSON nested deeper than 512 levels ..." when the arrays and
/// objects of `text` (outside strings) nest deeper than kMaxJsonDepth. A cheap scan, run by
/// parse_json_input before the parser.
void check_json_depth(const std::string& text, const std::string& source);

/// Parses `text` (from `source`, named in messages). Throws InputError for a syntax error
/// ("SOURCE:LINE:COLUMN: invalid JSON: ...") or a number beyond a double
/// ("SOURCE:LINE: field 'KEY' = 1e999: number out of range (beyond +-1.8e308)") or a text nested
/// deeper than kMaxJsonDepth (check_json_depth).
nlohmann::json parse_json_input(const std::string& text, const std::string& source);

/// The message of a JSON library exception without its "[json.exception.KIND.ID] " prefix.
std::string json_error_text(const std::exception& e);

}  // namespace trainsim
