// The key table's lookups (models/input/keys.h): find a key, its alias, its sections, the
// did-you-mean suggestion, the key that fills a member, the size bounds and the documentation
// index. The table itself is models/input/key_table.cpp.
#include "models/input/keys.h"

#include <algorithm>
#include <cstdio>
#include <limits>
#include <sstream>

#include "models/input/scenario.h"

namespace trainsim {

namespace {

std::vector<ScenarioKey>& mutable_keys() {
  static std::vector<ScenarioKey> keys = input::shipped_scenario_keys();
  return keys;
}

std::size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<std::size_t> prev(b.size() + 1), cur(b.size() + 1);
  for (std::size_t j = 0; j <= b.size(); ++j) prev[j] = j;
  for (std::size_t i = 1; i <= a.size(); ++i) {
    cur[0] = i;
    for (std::size_t j = 1; j <= b.size(); ++j) {
      std::size_t subst = prev[j - 1] + (a[i - 1] == b[j - 1] ? 0 : 1);
      cur[j] = std::min({prev[j] + 1, cur[j - 1] + 1, subst});
    }
    std::swap(prev, cur);
  }
  return prev[b.size()];
}

/// "1048576 (2^20)" for powers of two, else the number.
std::string show_limit(std::int64_t max) {
  std::string out = std::to_string(max);
  if (max > 1024 && (max & (max - 1)) == 0)
    out += " = 2^" + std::to_string(63 - __builtin_clzll(static_cast<unsigned long long>(max)));
  return out;
}

}  // namespace

std::string ScenarioKey::section() const { return input::parent_of(path); }
std::string ScenarioKey::name() const { return input::last_of(path); }

const std::vector<ScenarioKey>& scenario_keys() { return mutable_keys(); }

const std::vector<KeyAlias>& scenario_key_aliases() {
  static const std::vector<KeyAlias> aliases = input::shipped_scenario_key_aliases();
  return aliases;
}

const std::vector<std::string>& scenario_sections() {
  static const std::vector<std::string> v = {
      "model", "parallel", "deepspeed", "deepspeed.zero_optimization",
      "deepspeed.zero_optimization.offload_optimizer", "cluster", "simulation", "training",
      "training.checkpoint", "variability", "environment"};
  return v;
}

const ScenarioKey* find_scenario_key(const std::string& path) {
  for (const ScenarioKey& k : scenario_keys())
    if (k.path == path) return &k;
  return nullptr;
}

const KeyAlias* find_scenario_key_alias(const std::string& path) {
  for (const KeyAlias& a : scenario_key_aliases())
    if (a.path == path) return &a;
  return nullptr;
}

void register_scenario_key(ScenarioKey key) {
  TRAINSIM_CHECK(!find_scenario_key(key.path) && input::is_section(key.section()),
                 "register_scenario_key: '" + key.path + "' is taken or has no section");
  mutable_keys().push_back(std::move(key));
}

void unregister_scenario_key(const std::string& path) {
  auto& v = mutable_keys();
  v.erase(std::remove_if(v.begin(), v.end(), [&](const ScenarioKey& k) { return k.path == path; }),
          v.end());
}

Scenario& key_sample() {
  static Scenario sample;
  return sample;
}

const std::string& key_at(const void* member_of_sample) {
  for (const ScenarioKey& k : scenario_keys())
    if (k.field.address && k.field.address(key_sample()) == member_of_sample) return k.path;
  TRAINSIM_CHECK(false, "key_of: no scenario key fills this member (models/input/key_table.cpp)");
  return scenario_keys().front().path;
}

const std::vector<ScenarioSizeLimit>& scenario_size_limits() {
  // See models/input/scenario.h for why these values; the table holds them.
  // Rebuilt on each call (tests add keys); one per thread, so that simulations in threads (the
  // Python module, docs/python.md) do not share it.
  static thread_local std::vector<ScenarioSizeLimit> v;
  v.clear();
  for (const ScenarioKey& k : scenario_keys())
    if (k.max > 0) v.push_back({k.path.c_str(), k.max});
  return v;
}

std::int64_t scenario_size_limit(const std::string& field) {
  const ScenarioKey* k = find_scenario_key(field);
  return k ? k->max : 0;
}

namespace input {

bool contains(const std::vector<std::string>& v, const std::string& s) {
  return std::find(v.begin(), v.end(), s) != v.end();
}
bool is_section(const std::string& path) { return contains(scenario_sections(), path); }
bool is_leaf(const std::string& path) {
  return find_scenario_key(path) != nullptr || find_scenario_key_alias(path) != nullptr;
}

std::string join(const std::string& prefix, const std::string& key) {
  return prefix.empty() ? key : prefix + "." + key;
}
std::string parent_of(const std::string& path) {
  auto dot = path.rfind('.');
  return dot == std::string::npos ? std::string() : path.substr(0, dot);
}
std::string last_of(const std::string& path) {
  auto dot = path.rfind('.');
  return dot == std::string::npos ? path : path.substr(dot + 1);
}

std::string suggestion(const std::string& path) {
  const std::string parent = parent_of(path);
  const std::string key = last_of(path);
  std::vector<std::string> all;
  for (const ScenarioKey& k : scenario_keys()) all.push_back(k.path);
  for (const KeyAlias& a : scenario_key_aliases()) all.push_back(a.path);
  all.insert(all.end(), scenario_sections().begin(), scenario_sections().end());
  // The same key in another section (e.g. model.micro_batch_size) is the likeliest slip.
  for (const auto& p : all)
    if (last_of(p) == key && parent_of(p) != parent) return "; did you mean '" + p + "'?";
  std::string best;
  std::size_t best_d = std::numeric_limits<std::size_t>::max();
  for (const auto& p : all) {
    if (parent_of(p) != parent) continue;
    std::size_t d = edit_distance(key, last_of(p));
    if (d < best_d) best_d = d, best = last_of(p);
  }
  // Accept up to half the key's length: catches typos and a missing word (a missing
  // "model_" in a 20-letter key is 6 edits).
  if (!best.empty() && best_d <= std::max<std::size_t>(2, key.size() / 2))
    return "; did you mean '" + best + "'?";
  return "";
}

std::string quote(const std::string& s) { return "'" + s + "'"; }

std::string limit_text(const std::string& field, std::int64_t max) {
  return "must be at most " + show_limit(max) + " (trainsim's upper bound for " + field +
         ", models/input/scenario.h: larger sizes would overflow the model's 64-bit arithmetic)";
}

}  // namespace input

namespace {

const char* type_text(const ScenarioKey& k) {
  switch (k.type) {
    case KeyType::Int: return "int";
    case KeyType::IntOrFloat: return "int/f";
    case KeyType::Bool: return "bool";
    case KeyType::Number: return "number";
    case KeyType::String: return "str";
    case KeyType::Enum: return "enum";
    case KeyType::Custom: return "see above";
    case KeyType::Any: return "any";
  }
  return "";
}

std::string number_text(double v) {
  std::ostringstream o;
  o << v;
  return o.str();
}

std::string default_text(const ScenarioKey& k) {
  if (k.required) return "required";
  if (!k.default_value) return "—";
  const double d = *k.default_value;
  if (k.type == KeyType::Bool) return d != 0 ? "true" : "false";
  if (k.type == KeyType::Enum) {
    for (const KeyChoice& c : k.choices)
      if (c.value == int(d)) return c.name;
    return "none";
  }
  if (k.type == KeyType::Int || k.type == KeyType::IntOrFloat || k.type == KeyType::Custom)
    return std::to_string(std::int64_t(d));
  return number_text(d);
}

std::string bounds_text(const ScenarioKey& k) {
  if (k.type == KeyType::Number)
    return (k.lo_open ? "(" : "[") + number_text(k.lo) + ", " + number_text(k.hi) +
           (k.hi_open ? ")" : "]");
  if (!k.choices.empty()) {
    std::string out;
    for (const KeyChoice& c : k.choices) out += (out.empty() ? "" : ", ") + c.name;
    return out;
  }
  if (k.max > 0) return std::to_string(k.min) + " to " + show_limit(k.max);
  return "";
}

}  // namespace

std::string scenario_keys_markdown() {
  std::string out = "| key | type | default | values | unit | meaning |\n|---|---|---|---|---|---|\n";
  for (const ScenarioKey& k : scenario_keys()) {
    const std::string meaning = k.ignored.empty() ? k.doc : "**ignored**: " + k.ignored;
    out += "| `" + k.path + "` | " + type_text(k) + " | " + default_text(k) + " | " +
           bounds_text(k) + " | " + k.unit + " | " + meaning + " |\n";
  }
  for (const KeyAlias& a : scenario_key_aliases()) {
    std::string values;
    for (const auto& [from, to] : a.values)
      values += (values.empty() ? "" : ", ") + from + " → " + (to.empty() ? "(nothing)" : to);
    out += "| `" + a.path + "` | alias | | " + values + " | | " + a.doc + ": read as `" +
           a.canonical + "` |\n";
  }
  return out;
}

}  // namespace trainsim
