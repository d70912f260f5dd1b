// Bad system files for the tests of models/hardware/system_file.h: a shipped catalog file with
// one line replaced, and the InputError that parsing the result gives, checked for the file,
// the field and the value.
#pragma once

#include <fstream>
#include <regex>
#include <sstream>
#include <string>

#include <gtest/gtest.h>

#include "models/errors.h"
#include "models/hardware/system_file.h"
#include "tests/support/paths.h"

namespace trainsim::test_support {

/// The text of the file `path` ("" when it cannot be read).
inline std::string read_text(const std::string& path) {
  std::ifstream in(path);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

/// The source tree's system file `rel` (e.g. "systems/dgx-h100.yaml") with the line of `key`
/// (first match, any indentation; `key` or `key: value`) replaced by `replacement`, indented as
/// the original.
inline std::string system_file_with(const std::string& rel, const std::string& key,
                                    const std::string& replacement) {
  std::string text = read_text(source_path(rel));
  const std::string pattern = key.find(':') == std::string::npos ? key + ":" : key;
  const std::regex line("(\n *)" + pattern + "[^\n]*");
  std::smatch m;
  EXPECT_TRUE(std::regex_search(text, m, line)) << rel << ": " << key;
  return m.prefix().str() + m[1].str() + replacement + m.suffix().str();
}

/// The InputError message of parsing `text` as the system file `name` ("" when it parses).
inline std::string system_file_error(const std::string& text, const std::string& name) {
  try {
    parse_system_file(text, name);
  } catch (const InputError& e) {
    return e.what();
  }
  return "";
}

/// Expects `text`, parsed as `name`, to be refused with a message naming `name:` (the file and
/// its line), `field`, the value quoted ('value') and, when given, `words`.
inline void expect_system_file_error(const std::string& text, const std::string& name,
                                     const std::string& field, const std::string& value,
                                     const std::string& words = "") {
  const std::string msg = system_file_error(text, name);
  SCOPED_TRACE(msg);
  EXPECT_NE(msg.find(name + ":"), std::string::npos);  // file and line
  EXPECT_NE(msg.find(field), std::string::npos) << field;
  EXPECT_NE(msg.find("'" + value + "'"), std::string::npos) << value;
  if (!words.empty()) EXPECT_NE(msg.find(words), std::string::npos) << words;
}

}  // namespace trainsim::test_support
