// The catalog of systems: the shipped system files (systems/*.yaml, embedded at build time)
// read by system_file.h into the SystemSpecs that hardware.h's find_system / system_names and
// system_file.h's catalog_gpu / catalog_gpu_names look up. Its own unit, above both headers
// (hardware.h declares the types and the lookups, system_file.h reads files into them), so that
// neither header's unit includes the other's (tests/layout/include_graph.py). Every number is
// a datasheet figure or a public spec with its source in the files (validation/data/hardware.md
// collects them); measured calibration profiles refine them elsewhere; nothing here is fitted.
#include "models/hardware/hardware.h"

#include <algorithm>
#include <cmath>
#include <map>

#include "models/errors.h"
#include "models/hardware/system_file.h"

namespace trainsim {
namespace {

// The catalog: one SystemSpec per shipped system file (systems/*.yaml, embedded at build time;
// every number's source is a comment in its file), plus `local`.
const std::map<std::string, SystemSpec>& catalog() {
  static const std::map<std::string, SystemSpec> systems = [] {
    std::map<std::string, SystemSpec> m;
    for (const auto& [file, text] : detail::embedded_system_files()) {
      SystemSpec s = detail::parse_system_file_standalone(text, "systems/" + file);
      TRAINSIM_CHECK(file == s.name + ".yaml", "systems/" + file + " names system " + s.name);
      m.emplace(s.name, std::move(s));
    }
    // `local`: this machine's own device (the CPU through LibTorch, or one local GPU) as one
    // GPU-equivalent node without network. No datasheet figures: its numbers come from a
    // measured calibration profile (models/hardware/local_device.h local_system fills them in; until
    // then they are 0 and CostModel refuses them), so it is no system file.
    SystemSpec local;
    local.name = "local";
    local.gpu.name = "local";
    local.gpus_per_node = 1;
    local.nics_per_node = 1;
    local.gpus_per_pcie_switch = 1;
    local.cpu_sockets = 1;
    local.fat_tree_levels = 1;
    m.emplace("local", local);
    return m;
  }();
  return systems;
}

}  // namespace

namespace {
double tier_oversubscription(const SystemSpec& s, int level) {
  const auto i = std::size_t(level - 1);
  return i < s.oversubscription.size() ? s.oversubscription[i] : 1.0;
}
}  // namespace

int fat_tree_down_ports(const SystemSpec& s, int level) {
  const int k = s.switch_radix;
  if (level >= s.fat_tree_levels) return k;
  const double r = tier_oversubscription(s, level);
  // Full bisection: half the radix down (integer division, as the platform always had it).
  if (r == 1.0) return k / 2;
  return int(std::floor(double(k) * r / (r + 1.0)));
}

int fat_tree_up_ports(const SystemSpec& s, int level) {
  const int k = s.switch_radix;
  if (level >= s.fat_tree_levels) return 0;
  if (tier_oversubscription(s, level) == 1.0) return k / 2;
  return k - fat_tree_down_ports(s, level);
}

const SystemSpec& find_system(const std::string& name) {
  const auto& systems = catalog();
  auto it = systems.find(name);
  if (it == systems.end()) {
    std::string known;
    for (const auto& n : system_names()) known += (known.empty() ? "" : ", ") + n;
    throw InputError("unknown system '" + name + "'; known systems: " + known);
  }
  return it->second;
}

std::vector<std::string> system_names() {
  std::vector<std::string> names;
  for (const auto& [name, spec] : catalog()) names.push_back(name);
  return names;
}

const GpuSpec& catalog_gpu(const std::string& name) {
  for (const auto& [system, spec] : catalog())
    if (spec.gpu.name == name && system != "local") return spec.gpu;
  std::string known;
  for (const auto& n : catalog_gpu_names()) known += (known.empty() ? "" : ", ") + n;
  throw InputError("unknown GPU '" + name + "'; known GPUs: " + known);
}

std::vector<std::string> catalog_gpu_names() {
  std::vector<std::string> names;
  for (const auto& [system, spec] : catalog())
    if (system != "local" && std::find(names.begin(), names.end(), spec.gpu.name) == names.end())
      names.push_back(spec.gpu.name);
  return names;
}

}  // namespace trainsim
