// The one table of scenario keys (docs/scenario.md "Keys"): each key is declared once, with
// its section and name (the Megatron-LM or DeepSpeed spelling), its type, default, bounds and
// unit, the Scenario member it fills, one line of documentation, and, for a launch-line
// argument that changes neither time nor memory, why it is accepted and ignored. The readers
// (models/input/sections.cpp), the bounds checks (validate.cpp check_sizes), the did-you-mean
// list, the aliases, the planner's overrides and the documentation check all read it.
//
// A key, e.g.:
//   int_key(P(context_parallel_size), 1, 1, k2p16, "GPUs", "context-parallel ranks"),
// where P(m) names the key "parallel.m" and the member ParallelConfig::m it fills
// (models/input/keys.cpp).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "models/input/scenario.h"

namespace trainsim {

/// What a key holds and how the table's reader reads it.
enum class KeyType : std::uint8_t {
  Int,         ///< an integer in [min, max]
  IntOrFloat,  ///< an integer; the float form (5e8) accepted when integral (DeepSpeed sizes)
  Bool,
  Number,      ///< a number in [lo, hi] (lo_open: above lo; hi_open: below hi)
  String,
  Enum,        ///< one of `choices`
  Custom,      ///< read by its section's reader (lists, pairs, `auto`; sections.cpp)
  Any,         ///< an ignored key: any value (a scalar or a list), not read
};

/// The kind of Scenario member a key fills.
enum class FieldKind : std::uint8_t {
  None, Int64, OptInt64, Int32, Bool, OptBool, Double, String, Enum8
};

/// The member of a Scenario a key fills: its kind, and its address in a given scenario.
struct FieldRef {
  FieldKind kind = FieldKind::None;
  void* (*address)(Scenario&) = nullptr;
};

namespace key_detail {
template <typename T>
T& walk(T& obj) {
  return obj;
}
template <auto First, auto... Rest, typename T>
auto& walk(T& obj) {
  return walk<Rest...>(obj.*First);
}
template <auto... Path>
void* address(Scenario& s) {
  return &walk<Path...>(s);
}
template <typename T>
constexpr FieldKind kind_of() {
  if constexpr (std::is_same_v<T, std::int64_t>) return FieldKind::Int64;
  else if constexpr (std::is_same_v<T, std::optional<std::int64_t>>) return FieldKind::OptInt64;
  else if constexpr (std::is_same_v<T, int>) return FieldKind::Int32;
  else if constexpr (std::is_same_v<T, bool>) return FieldKind::Bool;
  else if constexpr (std::is_same_v<T, std::optional<bool>>) return FieldKind::OptBool;
  else if constexpr (std::is_same_v<T, double>) return FieldKind::Double;
  else if constexpr (std::is_same_v<T, std::string>) return FieldKind::String;
  else {
    // Enums (and bit sets) are written through their one byte (scenario enums are std::uint8_t).
    static_assert((std::is_enum_v<T> || std::is_same_v<T, std::uint8_t>) && sizeof(T) == 1,
                  "no FieldKind for this member type");
    return FieldKind::Enum8;
  }
}
}  // namespace key_detail

/// The member reached from a Scenario through the member pointers `Path`, e.g.
/// field<&Scenario::parallel, &ParallelConfig::context_parallel_size>().
template <auto... Path>
FieldRef field() {
  using T = std::remove_reference_t<decltype(key_detail::walk<Path...>(std::declval<Scenario&>()))>;
  return {key_detail::kind_of<T>(), &key_detail::address<Path...>};
}

/// An enum key's value: its name in the file and the enumerator it sets.
struct KeyChoice {
  std::string name;
  int value;
};

struct ScenarioKey {
  std::string path;                     ///< canonical dotted key, e.g. "model.num_layers"
  KeyType type = KeyType::Custom;
  FieldRef field;                       ///< the member it fills (none: custom or ignored)
  bool required = false;
  /// The value an absent key gives (numbers; booleans 0/1; an enum's choice value). nullopt:
  /// none (required, or the member keeps "absent", e.g. 0 = derived by validate_scenario).
  std::optional<double> default_value;
  std::int64_t min = 0, max = 0;        ///< Int / IntOrFloat: bounds (max 0: no bound)
  double lo = 0, hi = 0;                ///< Number: bounds
  bool lo_open = false;                 ///< Number: above lo
  bool hi_open = false;                 ///< Number: below hi
  std::vector<KeyChoice> choices;       ///< Enum
  bool list_ok = false;                 ///< a YAML list is a valid value (Custom readers)
  std::string unit;
  std::string doc;                      ///< one line (docs/scenario.md's tables say more)
  /// Non-empty: a launch-line argument accepted and not modelled; why it changes neither
  /// time nor memory. The summary's notes name it (Scenario::notes).
  std::string ignored;

  /// The section ("" for the top level) and the key's name within it.
  std::string section() const;
  std::string name() const;
  /// A file may hold the key without it: not required, and nothing keeps it from being absent.
  bool positive() const { return min >= 1 && (required || default_value.value_or(0) != 0); }
};

/// Another spelling of a key (Megatron-LM's flag form): read as the canonical key, each value
/// through `values` (alias value -> canonical value; "" drops it; an empty list keeps it).
struct KeyAlias {
  std::string path;
  std::string canonical;
  std::vector<std::pair<std::string, std::string>> values;
  std::string doc;
};

/// Every key, in reading order (and the documentation's order within a section).
const std::vector<ScenarioKey>& scenario_keys();
/// Every alias.
const std::vector<KeyAlias>& scenario_key_aliases();
/// The sections (mappings) a scenario may hold, dotted.
const std::vector<std::string>& scenario_sections();
/// The key at a canonical dotted path, or nullptr.
const ScenarioKey* find_scenario_key(const std::string& path);
/// The alias at a dotted path, or nullptr.
const KeyAlias* find_scenario_key_alias(const std::string& path);

/// For tests: adds `key` to the table (after the others of its section); it is read, bounded,
/// documented (scenario_keys_markdown) and suggested like a shipped key.
void register_scenario_key(ScenarioKey key);
/// For tests: removes a key added by register_scenario_key.
void unregister_scenario_key(const std::string& path);

/// The dotted key that fills a member, e.g. key_of(&ParallelConfig::context_parallel_size) is
/// "parallel.context_parallel_size": other code names a key through the table, never by re-spelling
/// it. Throws std::logic_error (a bug) for a member no key fills.
const std::string& key_at(const void* member_of_sample);
Scenario& key_sample();  ///< the scenario whose member addresses key_at compares
template <typename T>
const std::string& key_of(T ModelConfig::*m) { return key_at(&(key_sample().model.*m)); }
template <typename T>
const std::string& key_of(T ParallelConfig::*m) { return key_at(&(key_sample().parallel.*m)); }
template <typename T>
const std::string& key_of(T ZeroConfig::*m) { return key_at(&(key_sample().zero.*m)); }
template <typename T>
const std::string& key_of(T OffloadOptimizerConfig::*m) {
  return key_at(&(key_sample().zero.offload_optimizer.*m));
}
template <typename T>
const std::string& key_of(T ClusterConfig::*m) { return key_at(&(key_sample().cluster.*m)); }

/// The key index of docs/scenario.md: one Markdown table row per key and alias (key, type,
/// default, bounds, unit, meaning or why it is ignored), between its header and the end.
std::string scenario_keys_markdown();

}  // namespace trainsim

namespace trainsim::input {

/// The shipped table (models/input/key_table.cpp) and aliases, before any test's keys.
std::vector<ScenarioKey> shipped_scenario_keys();
std::vector<KeyAlias> shipped_scenario_key_aliases();

/// Whether `path` (dotted) is a section, a key or an alias of a scenario.
bool is_section(const std::string& path);
bool is_leaf(const std::string& path);

/// "; did you mean 'X'?" for an unknown key `path`, or "" when nothing is close.
/// Same-section keys are named by their last component, keys of another section by full path.
std::string suggestion(const std::string& path);

/// The refusal of a value above `max`, the bound of `field` (models/input/scenario.h).
std::string limit_text(const std::string& field, std::int64_t max);

/// Dotted-path helpers: "a.b" + "c", the parent "a.b" of "a.b.c", the last component "c".
std::string join(const std::string& prefix, const std::string& key);
std::string parent_of(const std::string& path);
std::string last_of(const std::string& path);

bool contains(const std::vector<std::string>& v, const std::string& s);
/// 's' with single quotes.
std::string quote(const std::string& s);

}  // namespace trainsim::input
