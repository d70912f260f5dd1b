// The pre-scan of scenario YAML (models/input/yaml_guard.h).
#include "models/input/yaml_guard.h"

#include <cstdio>

#include "models/errors.h"

namespace trainsim::input {
namespace {

/// Valid UTF-8 only (YAML is Unicode text).
void check_utf8(const std::string& text, const std::string& source) {
  for (std::size_t i = 0, line = 1, line_begin = 0; i < text.size();) {
    const auto u = static_cast<unsigned char>(text[i]);
    const std::size_t len = u < 0x80 ? 1 : (u >> 5) == 0x6 ? 2 : (u >> 4) == 0xE ? 3
                          : (u >> 3) == 0x1E ? 4 : 0;
    bool ok = len > 0 && i + len <= text.size() && !(len == 2 && u < 0xC2);
    for (std::size_t k = 1; ok && k < len; ++k)
      ok = (static_cast<unsigned char>(text[i + k]) & 0xC0) == 0x80;
    if (!ok) {
      char hex[8];
      std::snprintf(hex, sizeof hex, "0x%02X", u);
      throw InputError(source + ":" + std::to_string(line) + ":" +
                       std::to_string(i - line_begin + 1) + ": not UTF-8 text (byte " + hex + ")");
    }
    if (u == '\n') ++line, line_begin = i + 1;
    i += len;
  }
}

/// The scan's state between characters (refuse_yaml_cpp_hangs).
struct YamlScan {
  int flow = 0;                          ///< depth of [ ] / { } collections
  char quote = 0;                        ///< the open quoted scalar's quote, or 0
  std::size_t line = 1, line_begin = 0;  ///< the line's number and its first byte
  bool node_start = true;    ///< the next non-blank character starts a node
  bool after_blank = true;   ///< the previous character was a blank (or the line start)
  bool after_quoted = false; ///< a quoted scalar or a collection just closed in block context
};

bool yaml_blank(char c) { return c == ' ' || c == '\t' || c == '\r'; }

std::string yaml_at(const std::string& source, std::size_t line, std::size_t column) {
  return source + ":" + std::to_string(line) + ":" + std::to_string(column + 1);
}

/// YAML allows only printable characters (YAML 1.2 c-printable); yaml-cpp chokes on some.
void check_printable(unsigned char u, std::size_t line, std::size_t column,
                     const std::string& source) {
  if ((u < 0x20 && u != '\n' && u != '\t' && u != '\r') || u == 0x7F) {
    char hex[8];
    std::snprintf(hex, sizeof hex, "0x%02X", u);
    throw InputError(yaml_at(source, line, column) + ": YAML syntax error: control character " +
                     hex + " (a scenario file is text)");
  }
}

/// A line break at byte i. Quoted scalars stay on one line in scenario files: a multi-line
/// one hid the lines after it from this scan (and hung yaml-cpp; found by fuzz_scenario).
/// Flow collections ([a, b] / {k: v}) may span lines, as docs/scenario.md's own example does
/// ("model: {num_layers: 128, ...,\n seq_length: 2048}"); but an unclosed one spanning lines
/// with comments hung yaml-cpp (fuzz/open_findings/scenario_hang_multiline_flow.yaml), so
/// comments inside them are refused, and so is one left open at the end of the text.
void on_line_break(YamlScan& st, std::size_t i, const std::string& source) {
  if (st.quote)
    throw InputError(source + ":" + std::to_string(st.line) + ": YAML string opened with " +
                     std::string(1, st.quote) + " is not closed on its line (quoted values "
                     "span one line in scenario files)");
  st.after_quoted = false;
  ++st.line, st.line_begin = i + 1, st.after_blank = true;
  if (st.flow == 0) st.node_start = true;  // inside [ ] / { } a line break continues the value
}

/// A character inside a quoted scalar (escapes, '' in '...', the closing quote).
void in_quoted(YamlScan& st, const std::string& text, std::size_t& i) {
  const char c = text[i];
  if (st.quote == '"' && c == '\\') {
    ++i;  // an escape: skip the next character
  } else if (c == st.quote) {
    if (st.quote == '\'' && i + 1 < text.size() && text[i + 1] == '\'') {
      ++i;  // '' in '...'
    } else {
      st.quote = 0;
      st.after_quoted = st.flow == 0;
    }
  }
}

/// In block context a quoted scalar or a flow collection is followed by ':' (a key), a
/// comment or the line's end; yaml-cpp hangs on a ',' there ("'',", "[a],").
void check_after_closed(YamlScan& st, char c, std::size_t column, const std::string& source) {
  st.after_quoted = false;
  if (c != ':' && !(c == '#' && st.after_blank))
    throw InputError(yaml_at(source, st.line, column) + ": YAML syntax error: '" +
                     std::string(1, c) +
                     "' after a quoted string or a [ ] / { } collection (expected ':', a "
                     "comment or the line's end)");
}

/// At a node's start: tags, anchors, aliases, complex keys and directives (no scenario needs
/// them, and yaml-cpp hangs on some malformed uses, "!\r&\r..."; aliases also allow
/// exponential "billion laughs" expansion) and block scalars are refused.
void refuse_unsupported_node(char c, bool next_blank, std::size_t column, int flow,
                             std::size_t line, const std::string& source) {
  const bool complex_key = c == '?' && next_blank;
  if (c == '!' || c == '&' || c == '*' || complex_key || (c == '%' && column == 0))
    throw InputError(yaml_at(source, line, column) + ": YAML " +
                     (c == '!'   ? "tags (!)"
                      : c == '&' ? "anchors (&)"
                      : c == '*' ? "aliases (*)"
                      : c == '%' ? "directives (%)"
                                 : "complex keys (? )") +
                     " are not supported in scenario files (plain keys and values only)");
  if (flow == 0 && (c == '|' || c == '>'))
    throw InputError(yaml_at(source, line, column) +
                     ": YAML block scalars (| and >) are not supported in scenario files "
                     "(write the value on one line)");
}

}  // namespace

/// yaml-cpp 0.7 (Debian 12's) loops forever, allocating, on a ',' where a node starts outside
/// any flow collection (",\n- b", "!, b", found by fuzz/fuzz_scenario.cpp). Such a ',' is
/// invalid YAML (a plain scalar cannot start with a flow indicator), so this scan refuses it
/// first, with the line. A node starts at a line's first character, after "- " or ": " and
/// inside flow collections after '[', '{' or ','. The scan follows quoted scalars (one line
/// each), comments and flow collections ([ ], { }). Block scalars, tags, anchors, aliases,
/// complex keys and directives are refused: no scenario needs them, and yaml-cpp hung on
/// malformed uses of each.
void refuse_yaml_cpp_hangs(const std::string& text, const std::string& source) {
  check_utf8(text, source);
  YamlScan st;
  int& flow = st.flow;
  char& quote = st.quote;
  std::size_t& line = st.line;
  std::size_t& line_begin = st.line_begin;
  bool& node_start = st.node_start;
  bool& after_blank = st.after_blank;
  bool& after_quoted = st.after_quoted;
  for (std::size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    const std::size_t column = i - line_begin;  // 0-based
    const auto u = static_cast<unsigned char>(c);
    check_printable(u, line, column, source);
    // A lone CR is a line break as well (YAML 1.2 b-break; yaml-cpp agrees).
    if (c == '\n' || (c == '\r' && (i + 1 >= text.size() || text[i + 1] != '\n'))) {
      on_line_break(st, i, source);
      continue;
    }
    if (quote) {
      in_quoted(st, text, i);
      continue;
    }
    if (yaml_blank(c)) {
      after_blank = true;
      continue;
    }
    if (after_quoted) check_after_closed(st, c, column, source);
    const bool token_start = after_blank || node_start;
    after_blank = false;
    const char next = i + 1 < text.size() ? text[i + 1] : '\n';
    const bool next_blank = yaml_blank(next) || next == '\n';
    if (token_start) {
      if (c == '#' && (column == 0 || yaml_blank(text[i - 1]))) {  // a comment
        if (flow > 0)
          throw InputError(source + ":" + std::to_string(line) + ":" +
                           std::to_string(column + 1) +
                           ": YAML comments inside [ ] / { } are not supported in scenario "
                           "files (close the collection first)");
        while (i + 1 < text.size() && text[i + 1] != '\n') ++i;
        continue;
      }
      if (c == ',' && node_start && flow == 0)
        throw InputError(source + ":" + std::to_string(line) + ":" + std::to_string(column + 1) +
                         ": YAML syntax error: ',' cannot start a value outside [ ] or { }");
      if (node_start && (c == '"' || c == '\'')) {
        quote = c;
        node_start = false;
        continue;
      }
      if (node_start) refuse_unsupported_node(c, next_blank, column, flow, line, source);
    }
    if ((c == '[' || c == '{') && (node_start || flow > 0)) {  // else part of a plain scalar
      // yaml-cpp's time grows steeply with deeply nested flow collections (fuzz_scenario:
      // 10 s on 300 bytes); a scenario nests at most a list in a section.
      if (++flow > 8)
        throw InputError(source + ":" + std::to_string(line) + ":" + std::to_string(column + 1) +
                         ": YAML [ ] / { } nested more than 8 deep (not a scenario)");
      node_start = true;
      continue;
    }
    if ((c == ']' || c == '}') && flow > 0 && --flow == 0) {
      after_quoted = true;  // as after a quoted scalar: "[a],b" hangs yaml-cpp
      continue;
    }
    node_start = ((c == '-' || c == ':') && next_blank) || (c == ',' && flow > 0);
  }
  if (quote)
    throw InputError(source + ":" + std::to_string(line) + ": YAML string opened with " +
                     std::string(1, quote) + " is not closed");
  if (flow > 0)
    throw InputError(source + ":" + std::to_string(line) +
                     ": YAML syntax error: a [ ] / { } collection is not closed");
}


}  // namespace trainsim::input
