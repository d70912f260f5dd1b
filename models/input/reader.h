// Typed access to a scenario's YAML tree with precise error messages (docs/scenario.md
// "Rules"): every refusal is an InputError naming the file and line (or the `--set` that gave
// the value), the dotted field and the value. Internal to models/input/.
#pragma once

#include <yaml-cpp/yaml.h>

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace trainsim::input {

class Reader {
 public:
  Reader(YAML::Node root, std::string source, std::map<std::string, std::string> overrides)
      : root_(std::move(root)), source_(std::move(source)), overrides_(std::move(overrides)) {}

  /// The node at a dotted path, or an undefined node when any component is absent.
  YAML::Node at(const std::string& path) const;

  /// "FILE:LINE" for a file value, "FILE (--set k=v)" for an override.
  std::string where(const std::string& path, const YAML::Node& node) const;

  /// The value as a message shows it: quoted scalar, short list, "null", "(a mapping)".
  static std::string show(const YAML::Node& node);

  [[noreturn]] void fail(const std::string& path, const YAML::Node& node,
                         const std::string& what) const;

  [[noreturn]] void missing(const std::string& path) const;

  /// Present and not null.
  bool has(const std::string& path) const {
    YAML::Node n = at(path);
    return n.IsDefined() && !n.IsNull();
  }

  /// An integer >= min_value. `allow_integral_float` accepts e.g. 5e8 (DeepSpeed's own config
  /// examples write bucket sizes that way); elsewhere a float is a type error.
  std::optional<std::int64_t> get_int(const std::string& path, std::int64_t min_value,
                                      bool required, bool allow_integral_float = false) const;

  std::optional<bool> get_bool(const std::string& path) const;

  std::optional<std::string> get_string(const std::string& path, bool required) const;

  /// One of `allowed` (their index), or nullopt when absent or null.
  std::optional<std::size_t> get_enum(const std::string& path,
                                      const std::vector<std::string>& allowed) const;

  /// A decimal integer that fits 64 bits; `out_of_range` (if given) tells an all-digit text
  /// beyond 64 bits from one that is not an integer at all.
  static bool parse_int(const std::string& s, std::int64_t& out, bool* out_of_range = nullptr);

  /// A decimal floating-point number (YAML 1.2 core schema; no hex, no nan).
  static bool parse_double(const std::string& s, double& out);

  const std::string& source() const { return source_; }

 private:
  YAML::Node root_;
  std::string source_;
  std::map<std::string, std::string> overrides_;
};

/// A number within [lo, hi] (lo_open: above lo; hi_open: below hi), or nullopt when absent.
std::optional<double> get_fraction(const Reader& r, const std::string& path, double lo, double hi,
                                   bool hi_open, bool lo_open = false);

/// Rejects unknown and duplicate keys and non-mapping sections, recursively.
void check_keys(const YAML::Node& map, const std::string& prefix, const Reader& r);

/// Rewrites each alias the tree holds (models/input/keys.h KeyAlias) as its canonical key,
/// mapping its value; refuses an alias together with its canonical key. Aliases name keys of
/// the same section.
void apply_aliases(YAML::Node& root, const Reader& r);

/// The one YAML document of a scenario (an empty text is an empty mapping), after the
/// pre-scan of models/input/yaml_guard.h.
YAML::Node load_yaml_document(const std::string& yaml_text, const std::string& source);

/// Writes `--set key=value` into the tree (creating sections as needed).
void apply_override(YAML::Node& root, const std::string& key, const std::string& value,
                    const std::string& source);

}  // namespace trainsim::input
