// Megatron-Core's pipeline layout strings (pipeline_layout.h).
#include "models/input/pipeline_layout.h"

#include <cctype>

namespace trainsim::input {

namespace {

/// Reads the decimal count at text[i]; advances i. 0 on a missing count, -1 above `limit`.
std::int64_t read_count(const std::string& text, std::size_t& i, std::int64_t limit) {
  std::int64_t n = 0;
  const std::size_t start = i;
  while (i < text.size() && std::isdigit(static_cast<unsigned char>(text[i]))) {
    n = n * 10 + (text[i] - '0');
    if (n > limit) return -1;
    ++i;
  }
  return i == start ? 0 : n;
}

bool is_symbol(char c) { return c == 'E' || c == 't' || c == 'm' || c == 'L'; }

std::string at(std::size_t i) { return " at offset " + std::to_string(i); }

/// Appends `piece` `times` times to `out` unless that exceeds `budget` characters.
bool append(std::string& out, const std::string& piece, std::int64_t times, std::int64_t budget) {
  if (std::int64_t(out.size()) + std::int64_t(piece.size()) * times > budget) return false;
  for (std::int64_t k = 0; k < times; ++k) out += piece;
  return true;
}

/// Pass 1: the groups "(...)*N" unrolled (Megatron's first regular expression; commas and
/// spaces dropped). nullopt with `why` on a malformed group.
std::optional<std::string> unroll_groups(const std::string& text, std::int64_t budget,
                                         std::string& why) {
  std::string out;
  const std::string too_long = "the layout unrolls to more than " + std::to_string(budget) +
                               " characters";
  for (std::size_t i = 0; i < text.size();) {
    const char c = text[i];
    if (c == ',' || c == ' ') {
      ++i;
      continue;
    }
    if (c == ')') {
      why = "an unmatched ')'" + at(i);
      return std::nullopt;
    }
    if (c != '(') {
      if (!append(out, std::string(1, c), 1, budget)) {
        why = too_long;
        return std::nullopt;
      }
      ++i;
      continue;
    }
    const std::size_t close = text.find_first_of("()", i + 1);
    if (close == std::string::npos) {
      why = "an unclosed '('" + at(i);
      return std::nullopt;
    }
    if (text[close] == '(') {
      why = "nested parentheses" + at(close) + " (Megatron's layout repeats flat groups only)";
      return std::nullopt;
    }
    std::size_t j = close + 1;
    if (j >= text.size() || text[j] != '*') {
      why = "a group without its repeat count ')*N'" + at(close);
      return std::nullopt;
    }
    ++j;
    const std::int64_t n = read_count(text, j, budget);
    if (n < 0) {
      why = too_long + at(close + 2);
      return std::nullopt;
    }
    if (n == 0) {
      why = "a group's repeat count must be a positive integer" + at(close + 2);
      return std::nullopt;
    }
    std::string group;
    for (std::size_t k = i + 1; k < close; ++k)
      if (text[k] != ',' && text[k] != ' ') group += text[k];
    if (!append(out, group, n, budget)) {
      why = too_long;
      return std::nullopt;
    }
    i = j;
  }
  return out;
}

}  // namespace

std::optional<std::vector<std::string>> parse_pipeline_layout(const std::string& text,
                                                              std::int64_t max_stages,
                                                              std::int64_t max_symbols,
                                                              std::string& why) {
  const std::int64_t budget = max_symbols + max_stages;  // symbols and separators
  const auto grouped = unroll_groups(text, budget, why);
  if (!grouped) return std::nullopt;
  // Pass 2: "x*N" repeats one symbol (Megatron's second regular expression); then the stages.
  const std::string& g = *grouped;
  std::vector<std::string> stages(1);
  std::int64_t symbols = 0;
  for (std::size_t i = 0; i < g.size();) {
    const char c = g[i];
    if (c == '|') {
      if (std::int64_t(stages.size()) >= max_stages) {
        why = "more than " + std::to_string(max_stages) + " virtual stages";
        return std::nullopt;
      }
      stages.emplace_back();
      ++i;
      continue;
    }
    if (!is_symbol(c)) {
      why = std::string("invalid character '") + c + "'" + at(i) +
            " of the unrolled layout (known: E embedding, t decoder layer, m MTP layer, L loss, "
            "| between virtual stages, (...)*N and x*N repeats, commas)";
      return std::nullopt;
    }
    std::int64_t n = 1;
    std::size_t j = i + 1;
    if (j < g.size() && g[j] == '*') {
      ++j;
      n = read_count(g, j, budget);
      if (n < 0) {
        why = "the layout unrolls to more than " + std::to_string(budget) + " characters";
        return std::nullopt;
      }
      if (n == 0) {
        why = "a repeat count must be a positive integer" + at(i + 2) + " of the unrolled layout";
        return std::nullopt;
      }
    }
    symbols += n;
    if (symbols > max_symbols) {
      why = "more than " + std::to_string(max_symbols) + " layer symbols";
      return std::nullopt;
    }
    stages.back().append(std::size_t(n), c);
    i = j;
  }
  return stages;
}

}  // namespace trainsim::input
