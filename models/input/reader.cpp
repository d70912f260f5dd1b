// Typed access to a scenario's YAML tree (models/input/reader.h).
#include "models/input/reader.h"

#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <set>
#include <sstream>

#include "models/errors.h"
#include "models/input/keys.h"
#include "models/input/scenario.h"
#include "models/input/yaml_guard.h"

namespace trainsim::input {

YAML::Node Reader::at(const std::string& path) const {
  YAML::Node cur;
  cur.reset(root_);
  std::string rest = path;
  while (true) {
    auto dot = rest.find('.');
    std::string key = rest.substr(0, dot);
    if (!cur.IsMap()) return YAML::Node(YAML::NodeType::Undefined);
    const YAML::Node& ccur = cur;  // const lookup: never inserts
    YAML::Node next = ccur[key];
    if (!next.IsDefined()) return YAML::Node(YAML::NodeType::Undefined);
    cur.reset(next);
    if (dot == std::string::npos) return cur;
    rest = rest.substr(dot + 1);
  }
}

std::string Reader::where(const std::string& path, const YAML::Node& node) const {
  for (std::string p = path; !p.empty(); p = parent_of(p)) {
    auto it = overrides_.find(p);
    if (it != overrides_.end()) return source_ + " (--set " + it->first + "=" + it->second + ")";
  }
  if (node.IsDefined() && !node.Mark().is_null())
    return source_ + ":" + std::to_string(node.Mark().line + 1);
  return source_;
}

std::string Reader::show(const YAML::Node& node) {
  if (!node.IsDefined()) return "(missing)";
  if (node.IsNull()) return "null";
  if (node.IsMap()) return "(a mapping)";
  if (node.IsSequence()) {  // a short list of plain values is shown as written
    std::string out = "[";
    for (std::size_t i = 0; i < node.size(); ++i) {
      if (!node[i].IsScalar() || i >= 8 || out.size() > 200) return "(a sequence)";
      out += (i ? ", " : "") + node[i].Scalar();
    }
    return out + "]";
  }
  return quote(node.Scalar());
}

void Reader::fail(const std::string& path, const YAML::Node& node,
                       const std::string& what) const {
  throw InputError(where(path, node) + ": field '" + path + "' = " + show(node) + ": " + what);
}

void Reader::missing(const std::string& path) const {
  YAML::Node parent = at(parent_of(path));
  std::string loc = parent_of(path).empty() ? source_ : where(parent_of(path), parent);
  throw InputError(loc + ": missing required field '" + path + "'");
}

std::optional<std::int64_t> Reader::get_int(const std::string& path, std::int64_t min_value,
                                    bool required, bool allow_integral_float) const {
  YAML::Node n = at(path);
  if (!n.IsDefined() || n.IsNull()) {
    if (required) missing(path);
    return std::nullopt;
  }
  if (!n.IsScalar()) fail(path, n, "expected an integer");
  const std::string& s = n.Scalar();
  if (n.Tag() == "!") fail(path, n, "expected an integer, got a quoted string");
  const std::int64_t max_value = scenario_size_limit(path);
  std::int64_t value = 0;
  bool out_of_range = false;
  if (!parse_int(s, value, &out_of_range)) {
    double d = 0;
    if (out_of_range) {
      // All digits, but beyond 64 bits.
      if (s[0] == '-') fail(path, n, "must be a positive integer (> 0)");
      fail(path, n, max_value > 0 ? limit_text(path, max_value) : "integer out of range");
    } else if (parse_double(s, d)) {
      if (!allow_integral_float || d != std::floor(d))
        fail(path, n, "expected an integer, got a floating-point number");
      if (d < static_cast<double>(min_value))
        fail(path, n, min_value == 1 ? "must be a positive integer (> 0)"
                                     : "must be an integer >= " + std::to_string(min_value));
      if (max_value > 0 && d > static_cast<double>(max_value))
        fail(path, n, limit_text(path, max_value));
      if (std::fabs(d) > 9.0e18) fail(path, n, "integer out of range");
      value = static_cast<std::int64_t>(d);
    } else {
      fail(path, n, "expected an integer, got a string");
    }
  }
  if (value < min_value)
    fail(path, n,
         min_value == 1 ? "must be a positive integer (> 0)"
                        : "must be an integer >= " + std::to_string(min_value));
  if (max_value > 0 && value > max_value) fail(path, n, limit_text(path, max_value));
  return value;
}

std::optional<bool> Reader::get_bool(const std::string& path) const {
  YAML::Node n = at(path);
  if (!n.IsDefined() || n.IsNull()) return std::nullopt;
  bool b = false;
  if (!n.IsScalar() || n.Tag() == "!" || !YAML::convert<bool>::decode(n, b))
    fail(path, n, "expected a boolean (true or false)");
  return b;
}

std::optional<std::string> Reader::get_string(const std::string& path, bool required) const {
  YAML::Node n = at(path);
  if (!n.IsDefined() || n.IsNull()) {
    if (required) missing(path);
    return std::nullopt;
  }
  if (!n.IsScalar()) fail(path, n, "expected a string");
  return n.Scalar();
}

std::optional<std::size_t> Reader::get_enum(const std::string& path,
                                    const std::vector<std::string>& allowed) const {
  auto s = get_string(path, false);
  if (!s) return std::nullopt;
  for (std::size_t i = 0; i < allowed.size(); ++i)
    if (*s == allowed[i]) return i;
  std::string list;
  for (const auto& a : allowed) list += (list.empty() ? "" : ", ") + a;
  fail(path, at(path), "expected one of: " + list);
}

bool Reader::parse_int(const std::string& s, std::int64_t& out, bool* out_of_range) {
  if (out_of_range) *out_of_range = false;
  if (s.empty()) return false;
  std::size_t i = (s[0] == '+' || s[0] == '-') ? 1 : 0;
  if (i == s.size()) return false;
  for (std::size_t j = i; j < s.size(); ++j)
    if (s[j] < '0' || s[j] > '9') return false;
  errno = 0;
  char* end = nullptr;
  long long v = std::strtoll(s.c_str(), &end, 10);
  if (errno == ERANGE) {
    if (out_of_range) *out_of_range = true;
    return false;
  }
  out = v;
  return true;
}

bool Reader::parse_double(const std::string& s, double& out) {
  if (s.empty() || std::isspace(static_cast<unsigned char>(s[0]))) return false;
  // Only decimal notation (YAML 1.2 core schema floats); strtod would also take hex/nan.
  for (char c : s)
    if (!(std::isdigit(static_cast<unsigned char>(c)) || c == '.' || c == 'e' || c == 'E' ||
          c == '+' || c == '-'))
      return false;
  char* end = nullptr;
  errno = 0;
  double v = std::strtod(s.c_str(), &end);
  if (end != s.c_str() + s.size() || errno == ERANGE || !std::isfinite(v)) return false;
  out = v;
  return true;
}

/// The one YAML document of a scenario (an empty text is an empty mapping).
YAML::Node load_yaml_document(const std::string& yaml_text, const std::string& source) {
  refuse_yaml_cpp_hangs(yaml_text, source);
  YAML::Node root;
  try {
    std::vector<YAML::Node> docs = YAML::LoadAll(yaml_text);
    if (docs.size() > 1) {
      const YAML::Mark m = docs[1].Mark();
      throw InputError(source + (m.is_null() ? std::string() : ":" + std::to_string(m.line + 1)) +
                       ": a second YAML document (e.g. after '---'): a scenario file holds one "
                       "document; remove the '---' and merge the keys, or split the file");
    }
    if (!docs.empty()) root = docs[0];
  } catch (const YAML::ParserException& e) {
    throw InputError(source + ":" + std::to_string(e.mark.line + 1) + ":" +
                     std::to_string(e.mark.column + 1) + ": YAML syntax error: " + e.msg);
  } catch (const YAML::Exception& e) {
    // e.g. yaml-cpp's DeepRecursion on absurdly nested flow collections.
    throw InputError(source + ": YAML error: " + e.msg);
  }
  if (!root.IsDefined() || root.IsNull()) root = YAML::Node(YAML::NodeType::Map);
  if (!root.IsMap()) throw InputError(source + ": a scenario must be a YAML mapping of sections");

  return root;
}

/// A number within [lo, hi] (lo_open: above lo; hi_open: below hi), or nullopt when absent.
std::optional<double> get_fraction(const Reader& r, const std::string& path, double lo, double hi,
                                   bool hi_open, bool lo_open) {
  if (!r.has(path)) return std::nullopt;
  YAML::Node n = r.at(path);
  double v = 0;
  if (!n.IsScalar() || n.Tag() == "!" || !Reader::parse_double(n.Scalar(), v))
    r.fail(path, n, "expected a number");
  if ((lo_open ? v <= lo : v < lo) || (hi_open ? v >= hi : v > hi)) {
    std::ostringstream os;
    os << "must be within " << (lo_open ? "(" : "[") << lo << ", " << hi << (hi_open ? ")" : "]");
    r.fail(path, n, os.str());
  }
  return v;
}

/// Rejects unknown and duplicate keys and non-mapping sections, recursively.
void check_keys(const YAML::Node& map, const std::string& prefix, const Reader& r) {
  std::set<std::string> seen;
  for (const auto& entry : map) {  // `entry` is a temporary pair, kept alive by the binding
    const YAML::Node k = entry.first;
    const YAML::Node v = entry.second;
    if (!k.IsScalar()) {
      throw InputError(r.where(prefix, k) + ": a key in '" + (prefix.empty() ? "(top)" : prefix) +
                       "' is not a plain name");
    }
    const std::string path = join(prefix, k.Scalar());
    if (!seen.insert(k.Scalar()).second)
      throw InputError(r.where(path, k) + ": duplicate key '" + path + "'");
    // `plan:` bounds a `trainsim plan` search; models/plan/planner.cpp reads and checks it.
    if (path == "plan") continue;
    if (is_section(path)) {
      if (v.IsNull()) continue;  // `deepspeed:` with nothing under it
      if (!v.IsMap()) r.fail(path, v, "expected a mapping of keys");
      check_keys(v, path, r);
    } else if (!is_leaf(path)) {
      throw InputError(r.where(path, k) + ": unknown key '" + path + "'" + suggestion(path));
    } else if (v.IsSequence() && find_scenario_key(path) && find_scenario_key(path)->list_ok) {
      // A list its reader checks (window_size's pair, recompute_modules, moe_layer_freq), or
      // an ignored key's.
    } else if (v.IsMap() || v.IsSequence()) {
      r.fail(path, v, "expected a single value");
    }
  }
}

/// Writes `--set key=value` into the tree (creating sections as needed).
void apply_override(YAML::Node& root, const std::string& key, const std::string& value,
                    const std::string& source) {
  const std::string origin = source + ": --set " + key + "=" + value;
  if (!is_leaf(key) && !is_section(key))
    throw InputError(origin + ": unknown key '" + key + "'" + suggestion(key));
  refuse_yaml_cpp_hangs(value, origin);
  YAML::Node parsed;
  try {
    parsed = YAML::Load(value);
  } catch (const YAML::Exception& e) {
    throw InputError(origin + ": value is not valid YAML: " + e.msg);
  }
  YAML::Node cur;
  cur.reset(root);
  std::string rest = key;
  std::string done;
  for (auto dot = rest.find('.'); dot != std::string::npos; dot = rest.find('.')) {
    const std::string part = rest.substr(0, dot);
    done = join(done, part);
    YAML::Node child = cur[part];
    if (!child.IsDefined() || child.IsNull()) {
      cur[part] = YAML::Node(YAML::NodeType::Map);
      child.reset(cur[part]);
    } else if (!child.IsMap()) {
      throw InputError(origin + ": '" + done + "' is not a mapping in the scenario");
    }
    cur.reset(child);
    rest = rest.substr(dot + 1);
  }
  cur[rest] = parsed;
}

void apply_aliases(YAML::Node& root, const Reader& r) {
  for (const KeyAlias& a : scenario_key_aliases()) {
    const YAML::Node n = r.at(a.path);
    if (!n.IsDefined()) continue;
    if (r.at(a.canonical).IsDefined())
      r.fail(a.path, n, "is another spelling of " + a.canonical + ", which is set too; remove one");
    YAML::Node value = n;
    if (!a.values.empty()) {
      std::string list, mapped;
      bool found = false;
      for (const auto& [from, to] : a.values) {
        list += (list.empty() ? "" : ", ") + from;
        if (n.IsScalar() && n.Scalar() == from) found = true, mapped = to;
      }
      if (!found) r.fail(a.path, n, "expected one of: " + list);
      value = YAML::Node(mapped);
    }
    YAML::Node section = root;
    for (std::string p = parent_of(a.path), rest; !p.empty(); p = rest) {
      const auto dot = p.find('.');
      section.reset(section[p.substr(0, dot)]);
      rest = dot == std::string::npos ? "" : p.substr(dot + 1);
    }
    section.remove(last_of(a.path));
    if (a.values.empty() || !value.Scalar().empty()) section[last_of(a.canonical)] = value;
  }
}

}  // namespace trainsim::input
