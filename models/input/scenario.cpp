// Scenario files: YAML -> Scenario, with `--set` overrides, defaults and validation
// (docs/scenario.md). Every user error is an InputError naming the file, the dotted field, the
// value and, where the YAML parser knows it, the line. The parts: the key schema
// (models/input/keys.h), the YAML pre-scan (yaml_guard.h), typed access to the tree
// (reader.h), the section readers (sections.h) and validate_scenario (validate.cpp).
#include "models/input/scenario.h"

#include <yaml-cpp/yaml.h>

#include <cmath>
#include <filesystem>
#include <map>

#include "models/json_input.h"
#include "models/input/keys.h"
#include "models/input/reader.h"
#include "models/input/sections.h"

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

const SystemSpec& cluster_system(const ClusterConfig& cluster) {
  return cluster.file_system ? *cluster.file_system : find_system(cluster.system);
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

const char* to_string(Precision p) {
  switch (p) {
    case Precision::FP16: return "fp16";
    case Precision::BF16: return "bf16";
    case Precision::FP32: return "fp32";
  }
  TRAINSIM_CHECK(false, "to_string: Precision out of range");
  return "";
}

namespace {
const std::pair<const char*, std::uint8_t> kRecomputeModuleNames[] = {
    {"core_attn", kRecomputeCoreAttn}, {"layernorm", kRecomputeLayernorm},
    {"moe_act", kRecomputeMoeAct},     {"mlp", kRecomputeMlp},
    {"moe", kRecomputeMoe},            {"mla_up_proj", kRecomputeMlaUpProj},
    {"shared_experts", kRecomputeSharedExperts}};
std::string join_modules(std::uint8_t bits, const char* sep) {
  std::string out;
  for (const auto& [name, bit] : kRecomputeModuleNames)
    if (bits & bit) out += (out.empty() ? "" : sep) + std::string(name);
  return out;
}
}  // namespace

std::optional<std::uint8_t> recompute_module_bit(const std::string& name) {
  for (const auto& [n, bit] : kRecomputeModuleNames)
    if (name == n) return bit;
  return std::nullopt;
}

std::string recompute_modules_yaml(std::uint8_t bits) { return "[" + join_modules(bits, ", ") + "]"; }

std::string recompute_modules_token(std::uint8_t bits) { return join_modules(bits, "+"); }

const char* to_string(Recompute r) {
  switch (r) {
    case Recompute::None: return "none";
    case Recompute::Selective: return "selective";
    case Recompute::Full: return "full";
  }
  TRAINSIM_CHECK(false, "to_string: Recompute out of range");
  return "";
}

const char* to_string(Runtime r) {
  return r == Runtime::MegatronCore ? "megatron-core" : "megatron-2021";
}
const char* to_string(Normalization n) {
  return n == Normalization::RMSNorm ? "RMSNorm" : "LayerNorm";
}
const char* to_string(PositionEmbedding p) {
  return p == PositionEmbedding::Rope ? "rope" : "learned_absolute";
}
const char* to_string(AttentionBackend a) {
  switch (a) {
    case AttentionBackend::Unfused: return "unfused";
    case AttentionBackend::Fused: return "fused";
    case AttentionBackend::Flash: return "flash";
  }
  TRAINSIM_CHECK(false, "to_string: AttentionBackend out of range");
  return "";
}
const char* to_string(MoeDispatcher d) {
  return d == MoeDispatcher::AllGather ? "allgather" : "alltoall";
}
const char* to_string(Fp8Format f) {
  switch (f) {
    case Fp8Format::None: return "none";
    case Fp8Format::E4M3: return "e4m3";
    case Fp8Format::Hybrid: return "hybrid";
  }
  TRAINSIM_CHECK(false, "to_string: Fp8Format out of range");
  return "";
}
const char* to_string(Fp8Recipe r) {
  switch (r) {
    case Fp8Recipe::Delayed: return "delayed";
    case Fp8Recipe::Tensorwise: return "tensorwise";
    case Fp8Recipe::Mxfp8: return "mxfp8";
    case Fp8Recipe::Blockwise: return "blockwise";
  }
  TRAINSIM_CHECK(false, "to_string: Fp8Recipe out of range");
  return "";
}

const char* to_string(PipelineSchedule s) {
  switch (s) {
    case PipelineSchedule::GPipe: return "gpipe";
    case PipelineSchedule::OneFOneB: return "1f1b";
    case PipelineSchedule::Interleaved: return "interleaved";
  }
  TRAINSIM_CHECK(false, "to_string: PipelineSchedule out of range");
  return "";
}


std::int64_t ModelConfig::moe_expert_capacity(std::int64_t rank_tokens) const {
  if (moe_expert_capacity_factor <= 0 || num_experts <= 0) return 0;
  // moe_utils.py get_capacity(num_tokens * topk, num_experts, capacity_factor):
  // ceil((num_tokens / num_experts) * capacity_factor), no minimum (the router passes none).
  return std::int64_t(std::ceil(double(rank_tokens * moe_router_topk) / double(num_experts) *
                                moe_expert_capacity_factor));
}

double ModelConfig::moe_expert_token_copies(std::int64_t rank_tokens) const {
  const double routed = double(rank_tokens * moe_router_topk) * moe_token_imbalance_factor;
  if (moe_expert_capacity_factor <= 0) return routed;
  // Megatron-Core router.py / moe_utils.py apply_router_token_dropping keeps at most capacity
  // copies per expert on each rank (pad_to_capacity: exactly capacity, the missing ones
  // zero-weighted padding); the busiest rank's E / EP experts receive them from EP ranks.
  const double cap = double(num_experts * moe_expert_capacity(rank_tokens));
  return moe_pad_expert_input_to_capacity ? cap : std::min(routed, cap);
}

}  // namespace trainsim
