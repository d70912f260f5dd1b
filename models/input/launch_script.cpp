// The shell side of `trainsim import-megatron` (models/input/launch_import.h): the words of a
// launch script's pretrain_gpt.py command, after the script's own variables are expanded the
// way bash expands them (bash(1) "EXPANSION": parameter expansion, word splitting of unquoted
// expansions, quote removal; arithmetic expansion $((...)) with + - * / %). Command
// substitution $(...) is not run: it stays as its text, so an argument that needs it is
// refused with that text in the message.
#include <cctype>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "models/errors.h"
#include "models/input/launch_import.h"

namespace trainsim {

namespace {

bool name_start(char c) { return std::isalpha(static_cast<unsigned char>(c)) || c == '_'; }
bool name_char(char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; }

/// The script's variables: arrays and scalars (a scalar is a one-element array), and which are
/// exported.
struct ShellState {
  std::map<std::string, std::vector<std::string>> vars;
  std::set<std::string> exported;
  std::string source;
  int line = 0;
  std::string value(const std::string& name) const {
    auto it = vars.find(name);
    return it == vars.end() || it->second.empty() ? std::string() : it->second.front();
  }
};

[[noreturn]] void refuse(const ShellState& sh, const std::string& what) {
  throw InputError(sh.source + ":" + std::to_string(sh.line) + ": " + what);
}

/// Integer arithmetic of $(( )): + - * / % and parentheses over numbers and variable names.
/// Nesting bounds: launch scripts nest a few levels; a hostile one must not exhaust the stack.
constexpr int kMaxNesting = 64;

struct Arith {
  const std::string& s;
  const ShellState& sh;
  std::size_t i = 0;
  int depth = 0;
  void ws() {
    while (i < s.size() && std::isspace(static_cast<unsigned char>(s[i]))) ++i;
  }
  long long atom() {
    ws();
    if (i < s.size() && s[i] == '(') {
      if (++depth > kMaxNesting) refuse(sh, "$((...)) nested deeper than " + std::to_string(kMaxNesting));
      ++i;
      const long long v = sum();
      --depth;
      ws();
      if (i >= s.size() || s[i] != ')') refuse(sh, "$((" + s + ")): expected ')'");
      ++i;
      return v;
    }
    if (i < s.size() && s[i] == '-') {
      if (++depth > kMaxNesting) refuse(sh, "$((...)) nested deeper than " + std::to_string(kMaxNesting));
      ++i;
      const long long v = -atom();
      --depth;
      return v;
    }
    if (i < s.size() && s[i] == '$') ++i;
    std::size_t start = i;
    if (i < s.size() && s[i] == '{') {
      const std::size_t end = s.find('}', i);
      if (end == std::string::npos) refuse(sh, "$((" + s + ")): expected '}'");
      i = end + 1;
      return number(sh.value(s.substr(start + 1, end - start - 1)));
    }
    while (i < s.size() && name_char(s[i])) ++i;
    const std::string tok = s.substr(start, i - start);
    if (tok.empty()) refuse(sh, "$((" + s + ")): expected a number or a variable");
    return std::isdigit(static_cast<unsigned char>(tok[0])) ? number(tok) : number(sh.value(tok));
  }
  long long number(const std::string& t) {
    if (t.empty()) return 0;  // bash: an unset or empty variable is 0
    std::size_t used = 0;
    long long v = 0;
    try {
      v = std::stoll(t, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used != t.size()) refuse(sh, "$((" + s + ")): '" + t + "' is not an integer");
    return v;
  }
  long long product() {
    long long v = atom();
    for (ws(); i < s.size() && (s[i] == '*' || s[i] == '/' || s[i] == '%'); ws()) {
      const char op = s[i++];
      const long long w = atom();
      if (op != '*' && w == 0) refuse(sh, "$((" + s + ")): division by zero");
      v = op == '*' ? v * w : op == '/' ? v / w : v % w;
    }
    return v;
  }
  long long sum() {
    long long v = product();
    for (ws(); i < s.size() && (s[i] == '+' || s[i] == '-'); ws()) {
      const char op = s[i++];
      const long long w = product();
      v = op == '+' ? v + w : v - w;
    }
    return v;
  }
};

/// Index just past the ')' that closes the '(' at `open` (quotes and nesting respected).
std::size_t matching_paren(const std::string& t, std::size_t open) {
  int depth = 0;
  char quote = 0;
  for (std::size_t i = open; i < t.size(); ++i) {
    const char c = t[i];
    if (quote) {
      if (c == quote) quote = 0;
      else if (c == '\\' && quote == '"') ++i;
    } else if (c == '\'' || c == '"') {
      quote = c;
    } else if (c == '\\') {
      ++i;
    } else if (c == '(') {
      ++depth;
    } else if (c == ')' && --depth == 0) {
      return i + 1;
    }
  }
  return std::string::npos;
}

/// Splits one statement into words, expanding as bash does; assignments in command position
/// (NAME=value, NAME+=value, NAME=( ... )) are returned apart.
struct Assignment {
  std::string name;
  std::vector<std::string> value;
  bool append = false;
};
struct Statement {
  std::vector<Assignment> assignments;
  std::vector<std::string> words;
};

class Tokenizer {
 public:
  Tokenizer(const std::string& text, ShellState& sh, int depth = 0) : t_(text), sh_(sh), depth_(depth) {
    if (depth_ > kMaxNesting)
      refuse(sh_, "expansions nested deeper than " + std::to_string(kMaxNesting) + " levels");
  }

  Statement run() {
    Statement st;
    while (true) {
      skip_blanks();
      if (i_ >= t_.size()) break;
      if (t_[i_] == '>' || t_[i_] == '<') {
        skip_redirect();
        continue;
      }
      if (assignment_position(st) && try_assignment(st)) continue;
      std::vector<std::string> fields = word();
      // "2>&1", "1>log": a number followed by a redirection is the redirection's.
      if (i_ < t_.size() && (t_[i_] == '>' || t_[i_] == '<') && fields.size() == 1 &&
          !fields[0].empty() && std::isdigit(static_cast<unsigned char>(fields[0][0]))) {
        skip_redirect();
        continue;
      }
      st.words.insert(st.words.end(), fields.begin(), fields.end());
    }
    return st;
  }

 private:
  const std::string t_;  // a copy: sub-tokenizers are given temporaries
  ShellState& sh_;
  int depth_ = 0;
  std::size_t i_ = 0;

  void skip_blanks() {
    while (i_ < t_.size() && std::isspace(static_cast<unsigned char>(t_[i_]))) ++i_;
  }
  void skip_redirect() {
    while (i_ < t_.size() && (t_[i_] == '>' || t_[i_] == '<' || t_[i_] == '&')) ++i_;
    skip_blanks();
    (void)word();
  }
  static bool declaration(const std::string& w) {
    return w == "export" || w == "declare" || w == "local" || w == "readonly" || w == "typeset";
  }
  static bool assignment_position(const Statement& st) {
    if (st.words.empty()) return true;
    for (const std::string& w : st.words)
      if (!declaration(w) && w.rfind('-', 0) != 0) return false;
    return true;
  }
  bool try_assignment(Statement& st) {
    std::size_t j = i_;
    if (j >= t_.size() || !name_start(t_[j])) return false;
    while (j < t_.size() && name_char(t_[j])) ++j;
    Assignment a;
    a.name = t_.substr(i_, j - i_);
    if (j < t_.size() && t_[j] == '+') a.append = true, ++j;
    if (j >= t_.size() || t_[j] != '=') return false;
    i_ = j + 1;
    if (i_ < t_.size() && t_[i_] == '(') {  // an array
      const std::size_t end = matching_paren(t_, i_);
      if (end == std::string::npos) refuse(sh_, "array " + a.name + "=( has no closing ')'");
      const std::string inner = t_.substr(i_ + 1, end - i_ - 2);
      i_ = end;
      Tokenizer sub(inner, sh_, depth_ + 1);
      a.value = sub.all_words();
    } else {
      std::vector<std::string> v = word(false);
      std::string joined;
      for (std::size_t k = 0; k < v.size(); ++k) joined += (k ? " " : "") + v[k];
      a.value = {joined};
    }
    st.assignments.push_back(std::move(a));
    return true;
  }
  std::vector<std::string> all_words() {
    std::vector<std::string> out;
    while (true) {
      skip_blanks();
      if (i_ >= t_.size()) return out;
      if (t_[i_] == '#') {  // a comment inside a multi-line array
        while (i_ < t_.size() && t_[i_] != '\n') ++i_;
        continue;
      }
      if (t_[i_] == '>' || t_[i_] == '<') {  // not valid in an array: skipped as a redirection
        skip_redirect();
        continue;
      }
      std::vector<std::string> f = word();
      out.insert(out.end(), f.begin(), f.end());
    }
  }

  /// One word from i_, with its unquoted expansions split into fields (`split`).
  std::vector<std::string> word(bool split = true) {
    std::vector<std::string> fields;
    std::string cur;
    bool have = false;  // a quoted empty string is a word
    auto add_expansion = [&](const std::vector<std::string>& values, bool quoted) {
      if (quoted || !split) {
        for (std::size_t k = 0; k < values.size(); ++k) cur += (k ? " " : "") + values[k];
        have = have || quoted;
        return;
      }
      for (std::size_t k = 0; k < values.size(); ++k) {
        std::size_t p = 0;
        const std::string& v = values[k];
        bool first_piece = k == 0;
        while (p <= v.size()) {
          std::size_t q = p;
          while (q < v.size() && !std::isspace(static_cast<unsigned char>(v[q]))) ++q;
          const std::string piece = v.substr(p, q - p);
          if (!first_piece && (have || !cur.empty())) fields.push_back(cur), cur.clear(), have = false;
          if (!piece.empty()) cur += piece, have = true;
          first_piece = false;
          while (q < v.size() && std::isspace(static_cast<unsigned char>(v[q]))) ++q;
          if (q >= v.size()) break;
          p = q;
        }
      }
    };
    while (i_ < t_.size()) {
      const char c = t_[i_];
      if (std::isspace(static_cast<unsigned char>(c)) || c == '>' || c == '<') break;
      if (c == '\'') {
        const std::size_t end = t_.find('\'', i_ + 1);
        if (end == std::string::npos) refuse(sh_, "unterminated single quote");
        cur += t_.substr(i_ + 1, end - i_ - 1);
        have = true;
        i_ = end + 1;
      } else if (c == '"') {
        ++i_;
        have = true;
        while (i_ < t_.size() && t_[i_] != '"') {
          if (t_[i_] == '\\' && i_ + 1 < t_.size() && std::strchr("\"\\$`", t_[i_ + 1])) {
            cur += t_[i_ + 1];
            i_ += 2;
          } else if (t_[i_] == '$') {
            add_expansion(dollar(), true);
          } else {
            cur += t_[i_++];
          }
        }
        if (i_ >= t_.size()) refuse(sh_, "unterminated double quote");
        ++i_;
      } else if (c == '\\') {
        if (i_ + 1 < t_.size()) cur += t_[i_ + 1];
        i_ += 2;
        have = true;
      } else if (c == '$') {
        add_expansion(dollar(), false);
      } else {
        cur += c;
        have = true;
        ++i_;
      }
    }
    if (have || !cur.empty()) fields.push_back(cur);
    return fields;
  }

  /// A $-expansion at i_: its value(s).
  std::vector<std::string> dollar() {
    ++i_;
    if (i_ >= t_.size()) return {"$"};
    if (t_.compare(i_, 2, "((") == 0) {
      const std::size_t end = t_.find("))", i_);
      if (end == std::string::npos) refuse(sh_, "$(( without '))'");
      const std::string expr = t_.substr(i_ + 2, end - i_ - 2);
      i_ = end + 2;
      Arith a{expr, sh_};
      return {std::to_string(a.sum())};
    }
    if (t_[i_] == '(') {  // command substitution: not run, kept as text
      const std::size_t end = matching_paren(t_, i_);
      const std::size_t stop = end == std::string::npos ? t_.size() : end;
      const std::string text = "$" + t_.substr(i_, stop - i_);
      i_ = stop;
      return {text};
    }
    if (t_[i_] == '{') return braced();
    if (std::isdigit(static_cast<unsigned char>(t_[i_])) || t_[i_] == '@' || t_[i_] == '*' ||
        t_[i_] == '#' || t_[i_] == '?') {
      ++i_;
      return {};  // positional parameters: none
    }
    std::size_t j = i_;
    while (j < t_.size() && name_char(t_[j])) ++j;
    if (j == i_) return {"$"};
    const std::string name = t_.substr(i_, j - i_);
    i_ = j;
    return {sh_.value(name)};
  }

  /// ${NAME}, ${NAME[@]}, ${NAME:-default}, ${NAME-default}, ${NAME:=default}.
  std::vector<std::string> braced() {
    std::size_t depth = 0, j = i_;
    for (; j < t_.size(); ++j) {
      if (t_[j] == '{') ++depth;
      if (t_[j] == '}' && --depth == 0) break;
    }
    if (j >= t_.size()) refuse(sh_, "'${' without '}'");
    const std::string body = t_.substr(i_ + 1, j - i_ - 1);
    i_ = j + 1;
    std::size_t k = 0;
    while (k < body.size() && name_char(body[k])) ++k;
    const std::string name = body.substr(0, k);
    const std::string rest = body.substr(k);
    auto it = sh_.vars.find(name);
    const bool set = it != sh_.vars.end();
    const bool empty = !set || it->second.empty() || (it->second.size() == 1 && it->second[0].empty());
    if (rest == "[@]" || rest == "[*]") return set ? it->second : std::vector<std::string>{};
    if (rest.empty()) return {set && !it->second.empty() ? it->second.front() : ""};
    for (const char* op : {":-", ":=", "-", "="}) {
      const std::string o(op);
      if (rest.compare(0, o.size(), o) != 0) continue;
      const bool use_default = o[0] == ':' ? empty : !set;
      if (!use_default) return {it->second.front()};
      Tokenizer sub(rest.substr(o.size()), sh_, depth_ + 1);
      std::vector<std::string> w = sub.word(false);
      std::string v = w.empty() ? "" : w.front();
      if (o.back() == '=') sh_.vars[name] = {v};
      return {v};
    }
    if (rest[0] == '[') {  // ${NAME[i]}
      const std::string idx = rest.substr(1, rest.size() - 2);
      const std::size_t n = static_cast<std::size_t>(std::atoll(idx.c_str()));
      return {set && n < it->second.size() ? it->second[n] : ""};
    }
    return {set && !it->second.empty() ? it->second.front() : ""};
  }
};

/// The script cut into statements (newlines, ';', '|', '&&', '||', '&' outside quotes and
/// parentheses end one), comments and line continuations removed, each with its first line.
std::vector<std::pair<int, std::string>> statements(const std::string& text) {
  std::vector<std::pair<int, std::string>> out;
  std::string cur;
  int line = 1, start = 1, depth = 0;
  char quote = 0;
  auto flush = [&] {
    std::size_t b = cur.find_first_not_of(" \t\r\n");
    if (b != std::string::npos) out.emplace_back(start, cur.substr(b));
    cur.clear();
  };
  for (std::size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (cur.find_first_not_of(" \t\r") == std::string::npos) start = line;
    if (c == '\n') ++line;
    if (quote) {
      if (c == '\\' && quote == '"' && i + 1 < text.size()) {
        if (text[i + 1] == '\n') ++line, ++i;  // a continuation inside double quotes
        else cur += c, cur += text[++i];
        continue;
      }
      if (c == quote) quote = 0;
      cur += c;
      continue;
    }
    if (c == '\\' && i + 1 < text.size() && text[i + 1] == '\n') {
      cur += ' ';
      ++i, ++line;
      continue;
    }
    if (c == '\\' && i + 1 < text.size()) {
      cur += c, cur += text[++i];
      continue;
    }
    if (c == '\'' || c == '"') quote = c;
    if (c == '#' && (cur.empty() || std::isspace(static_cast<unsigned char>(cur.back())) ||
                     cur.back() == '(')) {
      while (i + 1 < text.size() && text[i + 1] != '\n') ++i;
      continue;
    }
    if (c == '(') ++depth;
    if (c == ')' && depth > 0) --depth;
    const bool redirect_amp = c == '&' && !cur.empty() && (cur.back() == '>' || cur.back() == '<');
    const bool redirect_into = c == '&' && i + 1 < text.size() && text[i + 1] == '>';
    if (depth == 0 && (c == '\n' || c == ';' || c == '|' ||
                       (c == '&' && !redirect_amp && !redirect_into))) {
      flush();
      continue;
    }
    cur += c;
  }
  if (quote) throw InputError("unterminated quote");
  flush();
  return out;
}

bool is_pretrain_script(const std::string& word) {
  const std::size_t slash = word.rfind('/');
  return word.substr(slash == std::string::npos ? 0 : slash + 1) == "pretrain_gpt.py";
}

bool control_keyword(const std::string& w) {
  static const std::set<std::string> k = {"if", "elif", "else", "then", "fi", "for", "while",
                                          "until", "do", "done", "case", "esac", "{", "}",
                                          "function", "[[", "[", "select"};
  return k.count(w) != 0;
}

}  // namespace

LaunchCommand parse_launch_script(const std::string& text, const std::string& source) {
  ShellState sh;
  sh.source = source;
  LaunchCommand found;
  bool have = false;
  int evals = 0;  // nested eval (an eval of a variable that evals itself would not end)
  std::function<void(const std::string&)> run = [&](const std::string& stmt) {
    Tokenizer tok(stmt, sh);
    Statement st = tok.run();
    const bool declare = !st.words.empty() && st.words.front() == "export";
    if (st.words.empty() || (st.words.size() >= 1 && (st.words[0] == "export" ||
                                                      st.words[0] == "declare" ||
                                                      st.words[0] == "local" ||
                                                      st.words[0] == "readonly"))) {
      for (const Assignment& a : st.assignments) {
        std::vector<std::string>& v = sh.vars[a.name];
        if (a.append && !v.empty() && a.value.size() == 1 && v.size() == 1)
          v[0] += a.value[0];
        else if (a.append)
          v.insert(v.end(), a.value.begin(), a.value.end());
        else
          v = a.value;
        if (declare) sh.exported.insert(a.name);
      }
      if (declare)
        for (std::size_t k = 1; k < st.words.size(); ++k) sh.exported.insert(st.words[k]);
      return;
    }
    if (control_keyword(st.words.front()) || (st.words.front().size() > 2 &&
                                              st.words.front().substr(st.words.front().size() - 2) == "()")) {
      found.conditional = found.conditional || st.words.front() != "{";
      return;
    }
    if (st.words.front() == "eval") {
      std::string joined;
      for (std::size_t k = 1; k < st.words.size(); ++k) joined += (k > 1 ? " " : "") + st.words[k];
      if (++evals > kMaxNesting) refuse(sh, "eval nested deeper than " + std::to_string(kMaxNesting) + " levels");
      for (const auto& [l, s] : statements(joined)) run(s);
      --evals;
      return;
    }
    for (const std::string& w : st.words) {
      if (!is_pretrain_script(w)) continue;
      if (have)
        refuse(sh, "a second pretrain_gpt.py command (the first is on line " +
                       std::to_string(found.line) + "): import one launch at a time");
      have = true;
      found.words = st.words;
      found.line = sh.line;
      for (const std::string& name : sh.exported) found.environment[name] = sh.value(name);
      for (const Assignment& a : st.assignments)
        found.environment[a.name] = a.value.empty() ? "" : a.value.front();
      break;
    }
  };
  std::vector<std::pair<int, std::string>> stmts;
  try {
    stmts = statements(text);
  } catch (const InputError& e) {
    throw InputError(source + ": " + e.what());
  }
  for (const auto& [line, stmt] : stmts) {
    sh.line = line;
    run(stmt);
  }
  if (!have)
    throw InputError(source + ": no pretrain_gpt.py command found (trainsim imports a "
                              "Megatron-LM pretrain_gpt.py launch, e.g. `torchrun ... "
                              "pretrain_gpt.py --num-layers ...`)");
  return found;
}

LaunchCommand launch_command_from_words(const std::vector<std::string>& words,
                                        const std::string& source) {
  LaunchCommand c;
  std::size_t i = 0;
  for (; i < words.size(); ++i) {
    const std::string& w = words[i];
    const std::size_t eq = w.find('=');
    if (eq == std::string::npos || eq == 0 || !name_start(w[0])) break;
    bool ok = true;
    for (std::size_t k = 0; k < eq; ++k) ok = ok && name_char(w[k]);
    if (!ok) break;
    c.environment[w.substr(0, eq)] = w.substr(eq + 1);
  }
  c.words.assign(words.begin() + static_cast<std::ptrdiff_t>(i), words.end());
  bool script = false;
  for (const std::string& w : c.words) script = script || is_pretrain_script(w);
  // A bare argument list (no launcher, no script) is pretrain_gpt.py's arguments.
  if (!script) c.words.insert(c.words.begin(), "pretrain_gpt.py");
  (void)source;
  return c;
}

}  // namespace trainsim
