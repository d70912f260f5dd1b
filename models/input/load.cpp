// Scenario files: YAML -> Scenario, with `--set` overrides, defaults and validation
// (docs/scenario.md): parse_scenario, load_scenario and scenario_text_with_overrides of
// models/input/scenario.h. Every user error is an InputError naming the file, the dotted field,
// the value and, where the YAML parser knows it, the line. The parts: the key schema
// (models/input/keys.h), the YAML pre-scan (yaml_guard.h), typed access to the tree
// (reader.h), the section readers (sections.h) and validate_scenario (validate.cpp). The
// loader is its own unit, above them all (they read scenario.h's types; scenario.cpp does not
// include them): no include cycle in input/ (tests/layout/include_graph.py).
#include <yaml-cpp/yaml.h>

#include <cmath>
#include <filesystem>
#include <map>

#include "models/input/keys.h"
#include "models/input/reader.h"
#include "models/input/scenario.h"
#include "models/input/sections.h"
#include "models/json_input.h"

namespace trainsim {

using namespace input;

namespace {

std::string stem_of(const std::string& source) {
  return std::filesystem::path(source).stem().string();
}

/// The scenario in `root` (overrides applied, the Hugging Face config imported), read and
/// validated.
Scenario read_scenario(YAML::Node root, const std::string& source,
                       const std::map<std::string, std::string>& override_map) {
  const Reader r(root, source, override_map);
  check_keys(root, "", r);
  apply_aliases(root, r);

  Scenario s;
  s.source_path = source;
  s.name = r.get_string("name", false).value_or(stem_of(source));
  // The summary reports it (docs/scenario.md `name`): an empty one names nothing.
  if (s.name.find_first_not_of(" \t") == std::string::npos)
    r.fail("name", r.at("name"), "expected a non-empty name (or no `name:`: the file's stem)");
  read_table_keys(r, s, "");
  std::vector<std::string> releases;
  for (NcclVersion v : kNcclVersions) releases.push_back(to_string(v));
  if (auto v = r.get_enum("nccl_version", releases)) s.nccl_version = kNcclVersions[*v];
  note_ignored_keys(r, s);
  read_model(r, s);
  read_parallel(r, s);
  read_zero(r, s);
  read_cluster_and_simulation(r, s);
  read_variability(r, s);
  read_training(r, s);
  validate_scenario(s);
  return s;
}

}  // namespace

Scenario parse_scenario(const std::string& yaml_text, const std::string& source,
                        const std::vector<std::pair<std::string, std::string>>& overrides) {
  YAML::Node root = load_yaml_document(yaml_text, source);
  std::map<std::string, std::string> override_map;
  for (const auto& [key, value] : overrides) {
    apply_override(root, key, value, source);
    override_map[key] = value;
  }
  const HfImport imported = import_hf_into(root, source);
  try {
    return read_scenario(root, source, override_map);
  } catch (const InputError& e) {
    // A refused imported value names the config it came from.
    throw with_import_origin(e, imported);
  }
}


Scenario load_scenario(const std::string& path,
                       const std::vector<std::pair<std::string, std::string>>& overrides) {
  const std::string text = read_input_file(
      path, "scenario file",
      "give a .yaml file, e.g. " + (std::filesystem::path(path) / "NAME.yaml").string(),
      kSmallInputMaxBytes);
  return parse_scenario(text, path, overrides);
}

std::string scenario_text_with_overrides(
    const std::string& path, const std::vector<std::pair<std::string, std::string>>& overrides,
    const std::vector<std::string>& drop) {
  const std::string text = read_input_file(
      path, "scenario file",
      "give a .yaml file, e.g. " + (std::filesystem::path(path) / "NAME.yaml").string(),
      kSmallInputMaxBytes);
  YAML::Node root = load_yaml_document(text, path);
  if (!root.IsMap()) throw InputError(path + ": a scenario is a YAML mapping");
  for (const auto& [key, value] : overrides) apply_override(root, key, value, path);
  for (const std::string& section : drop) root.remove(section);
  // model.hf_config names a file relative to the scenario (import_hf_into): absolute here.
  if (root["model"].IsMap()) {
    YAML::Node model = root["model"];
    const YAML::Node ref = model["hf_config"];
    if (ref.IsDefined() && ref.IsScalar() && std::filesystem::path(ref.Scalar()).is_relative())
      model["hf_config"] = std::filesystem::absolute(std::filesystem::path(path).parent_path() /
                                                     ref.Scalar())
                               .lexically_normal()
                               .string();
  }
  // cluster.system_file likewise.
  if (root["cluster"].IsMap()) {
    YAML::Node cluster = root["cluster"];
    const YAML::Node ref = cluster["system_file"];
    if (ref.IsDefined() && ref.IsScalar() && std::filesystem::path(ref.Scalar()).is_relative())
      cluster["system_file"] = std::filesystem::absolute(
                                   std::filesystem::path(path).parent_path() / ref.Scalar())
                                   .lexically_normal()
                                   .string();
  }
  YAML::Emitter out;
  out << root;
  return std::string(out.c_str()) + "\n";
}

}  // namespace trainsim
