#include "models/json_input.h"

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <vector>

#include "models/errors.h"

namespace trainsim {

std::string read_input_file(const std::string& path, const std::string& noun,
                            const std::string& hint, std::size_t max_bytes) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec))
    throw InputError(path + ": is a directory, not a " + noun + " (" + hint + ")");
  errno = 0;
  std::ifstream in(path, std::ios::binary);
  const auto reason = [] { return std::string(errno ? std::strerror(errno) : "unknown error"); };
  if (!in) throw InputError(path + ": cannot open the " + noun + " (" + reason() + ")");
  // In blocks, so that a device or a pipe without end stops at max_bytes.
  std::string text;
  std::vector<char> block(std::size_t(1) << 20);
  while (in) {
    in.read(block.data(), std::streamsize(block.size()));
    const std::size_t got = std::size_t(in.gcount());
    if (text.size() + got > max_bytes)
      throw InputError(path + ": more than " + std::to_string(max_bytes >> 20) +
                       " MiB, too large for a " + noun + " (" + hint + ")");
    text.append(block.data(), got);
  }
  if (in.bad()) throw InputError(path + ": cannot read the " + noun + " (" + reason() + ")");
  return text;
}

std::string json_error_text(const std::exception& e) {
  std::string what = e.what();
  if (what.rfind("[json.exception.", 0) == 0) {
    const auto end = what.find("] ");
    if (end != std::string::npos) what = what.substr(end + 2);
  }
  return what;
}

namespace {

/// 1-based line of byte offset `pos`.
std::size_t line_of(const std::string& text, std::size_t pos) {
  std::size_t line = 1;
  for (std::size_t i = 0; i < pos && i < text.size(); ++i) line += text[i] == '\n';
  return line;
}

/// The dotted path of the value at byte `pos` (the `len` bytes of a number the parser refused):
/// the text is parsed again with a marker string in its place, and the marker looked up.
std::string path_of_value(const std::string& text, std::size_t pos, std::size_t len) {
  static const char* const kMarker = "trainsim-json-input-marker";
  std::string patched = text.substr(0, pos) + "\"" + kMarker + "\"" + text.substr(pos + len);
  nlohmann::json j = nlohmann::json::parse(patched, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return {};
  const nlohmann::json flat = j.flatten();  // named: items() refers to it
  for (const auto& [pointer, value] : flat.items()) {
    if (!value.is_string() || value.get<std::string>() != kMarker) continue;
    std::string path;  // "/parameters/hbm_efficiency/value" -> "parameters.hbm_efficiency.value"
    for (std::size_t i = 0; i < pointer.size(); ++i) {
      if (pointer[i] == '/') {
        if (i > 0) path += '.';
      } else if (pointer[i] == '~' && i + 1 < pointer.size()) {
        path += pointer[++i] == '1' ? '/' : '~';
      } else {
        path += pointer[i];
      }
    }
    return path;
  }
  return {};
}

}  // namespace

void check_json_depth(const std::string& text, const std::string& source) {
  std::size_t depth = 0;
  bool in_string = false;
  for (std::size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      if (c == '\\')
        ++i;  // the escaped character, a quote included
      else if (c == '"')
        in_string = false;
    } else if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      if (++depth > kMaxJsonDepth)
        throw InputError(source + ":" + std::to_string(line_of(text, i)) +
                         ": JSON nested deeper than " + std::to_string(kMaxJsonDepth) +
                         " levels (no input of trainsim nests more than a few)");
    } else if ((c == ']' || c == '}') && depth > 0) {
      --depth;
    }
  }
}

nlohmann::json parse_json_input(const std::string& text, const std::string& source) {
  check_json_depth(text, source);
  try {
    return nlohmann::json::parse(text);
  } catch (const nlohmann::json::parse_error& e) {
    const std::size_t at = e.byte > 0 ? e.byte - 1 : 0;
    throw InputError(source + ":" + std::to_string(line_of(text, at)) + ": invalid JSON: " +
                     json_error_text(e));
  } catch (const nlohmann::json::out_of_range& e) {
    // 406: "number overflow parsing '1e999'": name the number, its line and its key.
    const std::string msg = json_error_text(e);
    const auto q1 = msg.find('\''), q2 = msg.rfind('\'');
    if (e.id == 406 && q1 != std::string::npos && q2 > q1 + 1) {
      const std::string number = msg.substr(q1 + 1, q2 - q1 - 1);
      const std::size_t pos = text.find(number);
      if (pos != std::string::npos) {
        const std::string key = path_of_value(text, pos, number.size());
        throw InputError(source + ":" + std::to_string(line_of(text, pos)) + ": " +
                         (key.empty() ? std::string("a value") : "field '" + key + "'") + " = " +
                         number + ": number out of range (beyond +-1.8e308, a double's range)");
      }
      throw InputError(source + ": number " + number +
                       " out of range (beyond +-1.8e308, a double's range)");
    }
    throw InputError(source + ": invalid JSON: " + msg);
  } catch (const nlohmann::json::exception& e) {
    throw InputError(source + ": invalid JSON: " + json_error_text(e));
  }
}

}  // namespace trainsim
