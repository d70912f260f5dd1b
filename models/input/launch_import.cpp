// Megatron-LM arguments and DeepSpeed config keys -> scenario keys, through the key table
// (models/input/launch_import.h). The table holds every name: a Megatron argument --foo-bar is
// the key (or alias) named foo_bar in the model, parallel, training or top-level section; the
// negated form --no-foo-bar of a boolean key sets it false; an environment variable NAME is the
// key name in lower case at the top level or in `environment`; a DeepSpeed key is the key of the
// same path under `deepspeed`. What is computed rather than copied is here:
//  - --vocab-size V with --make-vocab-size-divisible-by D (default 128): padded_vocab_size =
//    ceil(V / (D x TP)) x D x TP (Megatron-LM megatron/training/tokenizer/tokenizer.py
//    _vocab_size_with_padding);
//  - --virtual-pipeline-model-parallel-size N: num_layers_per_virtual_pipeline_stage =
//    num_layers / (PP x N) (Megatron-LM megatron/training/arguments.py, which derives one from
//    the other);
//  - --use-legacy-models: runtime megatron-2021; --use-mcore-models (or neither): megatron-core;
//  - --transformer-impl transformer_engine (Megatron-Core's default) is what the megatron-core
//    runtime models; `local` is refused;
//  - --optimizer adam (the default; states as docs/scenario.md says); other optimizers refused;
//  - --tp-comm-overlap-cfg FILE: kept for the caller, which reads the file
//    (apply_tp_comm_overlap_cfg: parallel.tp_comm_overlap_rs_method);
//  - the launcher's node and GPU counts (torchrun --nnodes / --nproc-per-node, srun -N /
//    --nodes / --ntasks-per-node / --gpus-per-node): cluster.nodes and cluster.gpus_per_node;
//  - DeepSpeed fp16.enabled / bf16.enabled: parallel.precision (neither: fp32); train_batch_size
//    absent: micro batch x gradient_accumulation_steps x GPUs (DeepSpeed runtime/config.py
//    _batch_assertion); offload_param with a device other than none is refused (trainsim
//    models optimizer offload only).
#include "models/input/launch_import.h"

#include <algorithm>
#include <cctype>
#include <functional>
#include <limits>
#include <set>

#include <yaml-cpp/yaml.h>

#include "models/errors.h"
#include "models/input/keys.h"
#include "models/input/yaml_guard.h"
#include "models/json_input.h"

namespace trainsim {

namespace {

using json = nlohmann::json;
using input::quote;

std::size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<std::size_t> prev(b.size() + 1), cur(b.size() + 1);
  for (std::size_t j = 0; j <= b.size(); ++j) prev[j] = j;
  for (std::size_t i = 1; i <= a.size(); ++i) {
    cur[0] = i;
    for (std::size_t j = 1; j <= b.size(); ++j)
      cur[j] = std::min({prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (a[i - 1] != b[j - 1])});
    std::swap(prev, cur);
  }
  return prev[b.size()];
}

/// "; did you mean 'X'?" among `names` (spelled through `show`), or "".
std::string closest(const std::string& name, const std::vector<std::string>& names,
                    const std::function<std::string(const std::string&)>& show) {
  std::string best;
  std::size_t best_d = std::numeric_limits<std::size_t>::max();
  for (const std::string& n : names) {
    const std::size_t d = edit_distance(name, n);
    if (d < best_d) best_d = d, best = n;
  }
  if (!best.empty() && best_d <= std::max<std::size_t>(2, name.size() / 3))
    return "; did you mean " + quote(show(best)) + "?";
  return "";
}

std::string flag_of(const std::string& name) {
  std::string f = "--" + name;
  std::replace(f.begin(), f.end(), '_', '-');
  return f;
}

/// What an argument name resolves to in the table.
struct Resolved {
  const ScenarioKey* key = nullptr;
  const KeyAlias* alias = nullptr;
  bool negated = false;  ///< --no-NAME of a boolean key
};

const std::vector<std::string>& megatron_sections() {
  static const std::vector<std::string> s = {"model", "parallel", "training", ""};
  return s;
}

Resolved resolve(const std::string& name, const std::vector<std::string>& sections) {
  for (const std::string& sec : sections) {
    const std::string path = sec.empty() ? name : sec + "." + name;
    if (const ScenarioKey* k = find_scenario_key(path)) return {k, nullptr, false};
    if (const KeyAlias* a = find_scenario_key_alias(path)) return {nullptr, a, false};
  }
  if (name.rfind("no_", 0) == 0) {
    Resolved r = resolve(name.substr(3), sections);
    if (r.key && (r.key->type == KeyType::Bool || !r.key->ignored.empty()))
      return r.negated = true, r;
  }
  return {};
}

std::vector<std::string> names_in(const std::vector<std::string>& sections) {
  std::vector<std::string> v;
  for (const ScenarioKey& k : scenario_keys())
    if (input::contains(sections, k.section())) v.push_back(k.name());
  for (const KeyAlias& a : scenario_key_aliases())
    if (input::contains(sections, input::parent_of(a.path))) v.push_back(input::last_of(a.path));
  return v;
}

/// Writes `value` (as the argument gave it) into the key a name resolved to.
void assign(LaunchImport& out, const Resolved& r, const std::string& arg, std::string value,
            const std::string& source) {
  if (r.key && !r.key->ignored.empty()) {
    out.ignored.push_back(arg + (value.empty() ? "" : " " + value) + ": " + r.key->path + " (" +
                          r.key->ignored + ")");
    return;
  }
  if (r.alias) {
    std::string v = value.empty() ? "true" : value;
    for (const auto& [from, to] : r.alias->values)
      if (from == v) {
        if (to.empty()) return;  // e.g. --bf16 false: no setting
        v = to;
        break;
      }
    out.keys[r.alias->canonical] = v;
    return;
  }
  if (r.key->type == KeyType::Bool) {
    if (value.empty()) value = "true";
    if (value == "1") value = "true";
    if (value == "0") value = "false";
    if (r.negated) {
      if (value != "true")
        throw InputError(source + ": argument '" + arg + "' = '" + value + "': a negated flag takes no value");
      value = "false";
    }
  } else if (value.empty() && r.key->type == KeyType::Custom) {
    value = "true";  // a store_true flag read by its section's reader (--group-query-attention)
  } else if (value.empty()) {
    throw InputError(source + ": argument '" + arg + "': expected a value (" + r.key->path + ")");
  }
  out.keys[r.key->path] = value;
}

/// The launcher's node and GPU counts (the words before pretrain_gpt.py).
void read_launcher(LaunchImport& out, const std::vector<std::string>& words, std::size_t end) {
  for (std::size_t i = 0; i < end; ++i) {
    std::string w = words[i], v;
    if (const std::size_t eq = w.find('='); eq != std::string::npos && w.rfind("-", 0) == 0)
      v = w.substr(eq + 1), w = w.substr(0, eq);
    else if (i + 1 < end)
      v = words[i + 1];
    const bool integer = !v.empty() && std::all_of(v.begin(), v.end(), ::isdigit);
    if (!integer) continue;
    if (w == "--nnodes" || w == "-N" || w == "--nodes") {
      out.keys["cluster.nodes"] = v;
      out.derived.push_back("cluster.nodes " + v + ": the launcher's " + w);
    } else if (w == "--nproc_per_node" || w == "--nproc-per-node" || w == "--ntasks-per-node" ||
               w == "--gpus-per-node") {
      out.keys["cluster.gpus_per_node"] = v;
      out.derived.push_back("cluster.gpus_per_node " + v + ": the launcher's " + w);
    }
  }
}

/// Environment variables: NCCL_*, CUDA_*, NVTE_*, TORCH_* through the table; others are the
/// script's own and not looked at.
void read_environment(LaunchImport& out, const std::map<std::string, std::string>& env,
                      const std::string& source) {
  static const std::vector<std::string> sections = {"", "environment"};
  for (const auto& [name, value] : env) {
    if (name.rfind("NCCL_", 0) != 0 && name.rfind("CUDA_", 0) != 0 &&
        name.rfind("NVTE_", 0) != 0 && name.rfind("TORCH_", 0) != 0)
      continue;
    std::string lower = name;
    std::transform(lower.begin(), lower.end(), lower.begin(), ::tolower);
    const Resolved r = resolve(lower, sections);
    if (!r.key && !r.alias)
      throw InputError(source + ": environment variable '" + name + "' = '" + value +
                       "': not known to trainsim (it may change time or memory)" +
                       closest(lower, names_in(sections), [](const std::string& n) {
                         std::string u = n;
                         std::transform(u.begin(), u.end(), u.begin(), ::toupper);
                         return u;
                       }));
    assign(out, r, name + "=", value, source);
    if (!out.ignored.empty() && out.ignored.back().rfind(name + "= ", 0) == 0)
      out.ignored.back().replace(0, name.size() + 2, name + "=");
  }
}

/// Megatron arguments that feed a computation (file comment) rather than a key.
struct Computed {
  std::string vocab_size, divisible_by = "128", virtual_size, runtime = "megatron-core";
};

bool computed_argument(const std::string& name, const std::string& value, Computed& c,
                       LaunchImport& out, const std::string& source) {
  if (name == "vocab_size") return c.vocab_size = value, true;
  if (name == "make_vocab_size_divisible_by") return c.divisible_by = value, true;
  if (name == "virtual_pipeline_model_parallel_size") return c.virtual_size = value, true;
  if (name == "use_mcore_models") return c.runtime = "megatron-core", true;
  if (name == "tp_comm_overlap_cfg") return out.tp_comm_overlap_cfg = value, true;
  if (name == "use_legacy_models") {
    c.runtime = "megatron-2021";
    out.derived.push_back("runtime megatron-2021: --use-legacy-models");
    return true;
  }
  if (name == "transformer_impl" || name == "optimizer") {
    const std::string want = name == "optimizer" ? "adam" : "transformer_engine";
    if (value != want)
      throw InputError(source + ": argument '" + flag_of(name) + "' = '" + value +
                       "': trainsim models " + want + " only (docs/cli.md import-megatron)");
    return true;
  }
  return false;
}

long long integer_of(const std::string& v, const std::string& what, const std::string& source) {
  std::size_t used = 0;
  long long x = 0;
  try {
    x = std::stoll(v, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used != v.size() || x <= 0)
    throw InputError(source + ": argument '" + what + "' = '" + v + "': expected a positive integer");
  return x;
}

void finish_computed(const Computed& c, LaunchImport& out, const std::string& source) {
  out.keys["runtime"] = c.runtime;
  auto get = [&](const std::string& key, long long absent) {
    auto it = out.keys.find(key);
    return it == out.keys.end() ? absent : integer_of(it->second, key, source);
  };
  const long long tp = get("parallel.tensor_model_parallel_size", 1);
  if (!c.vocab_size.empty() && !out.keys.count("model.padded_vocab_size")) {
    const long long v = integer_of(c.vocab_size, "--vocab-size", source);
    const long long m = integer_of(c.divisible_by, "--make-vocab-size-divisible-by", source) * tp;
    const long long padded = (v + m - 1) / m * m;
    out.keys["model.padded_vocab_size"] = std::to_string(padded);
    out.derived.push_back("model.padded_vocab_size " + std::to_string(padded) + ": --vocab-size " +
                          c.vocab_size + " padded to a multiple of " + c.divisible_by + " x TP " +
                          std::to_string(tp) + " (Megatron-LM _vocab_size_with_padding)");
  }
  if (!c.virtual_size.empty()) {
    const long long n = integer_of(c.virtual_size, "--virtual-pipeline-model-parallel-size", source);
    const long long pp = get("parallel.pipeline_model_parallel_size", 1);
    const long long layers = get("model.num_layers", 0);
    if (layers == 0 || layers % (pp * n) != 0)
      throw InputError(source + ": argument '--virtual-pipeline-model-parallel-size' = '" +
                       c.virtual_size + "': " + std::to_string(layers) +
                       " layers do not split into " + std::to_string(pp) + " stages x " +
                       c.virtual_size + " virtual stages");
    out.keys["parallel.num_layers_per_virtual_pipeline_stage"] = std::to_string(layers / (pp * n));
    out.derived.push_back("parallel.num_layers_per_virtual_pipeline_stage " +
                          std::to_string(layers / (pp * n)) + ": " + std::to_string(layers) +
                          " layers / (PP " + std::to_string(pp) + " x " + c.virtual_size + ")");
  }
}

}  // namespace

LaunchImport import_megatron(const LaunchCommand& command, const std::string& source) {
  LaunchImport out;
  const std::vector<std::string>& w = command.words;
  std::size_t script = 0;
  while (script < w.size() && w[script].find("pretrain_gpt.py") == std::string::npos) ++script;
  read_launcher(out, w, script);
  read_environment(out, command.environment, source);
  const std::vector<std::string> sections = megatron_sections();
  Computed computed;
  for (std::size_t i = script + 1; i < w.size(); ++i) {
    const std::string& word = w[i];
    if (word.rfind("--", 0) != 0 || word.size() < 3)
      throw InputError(source + ": argument '" + word + "': expected --NAME (Megatron-LM's "
                                "arguments of pretrain_gpt.py)");
    std::string name = word.substr(2), value;
    const std::size_t eq = name.find('=');
    const bool inline_value = eq != std::string::npos;
    if (inline_value) value = name.substr(eq + 1), name = name.substr(0, eq);
    std::replace(name.begin(), name.end(), '-', '_');
    // The values up to the next --NAME (a list for nargs='+' arguments).
    std::vector<std::string> values;
    if (inline_value) values.push_back(value);
    while (!inline_value && i + 1 < w.size() && w[i + 1].rfind("--", 0) != 0) values.push_back(w[++i]);
    if (values.size() == 1) value = values[0];
    if (values.size() > 1) {
      value = "[";
      for (std::size_t k = 0; k < values.size(); ++k) value += (k ? ", " : "") + values[k];
      value += "]";
    }
    const std::string arg = "--" + word.substr(2, inline_value ? eq : std::string::npos);
    if (computed_argument(name, value, computed, out, source)) continue;
    const Resolved r = resolve(name, sections);
    if (!r.key && !r.alias)
      throw InputError(source + ": argument '" + arg + "'" + (value.empty() ? "" : " = '" + value + "'") +
                       ": not a Megatron-LM argument trainsim knows (it may change time or "
                       "memory; docs/scenario.md lists the keys)" +
                       closest(name, names_in(sections), flag_of));
    if (value.find("$(") != std::string::npos)
      throw InputError(source + ": argument '" + arg + "' = '" + value + "': a command "
                                "substitution trainsim does not run; give the value");
    assign(out, r, arg, value, source);
  }
  finish_computed(computed, out, source);
  return out;
}

void apply_tp_comm_overlap_cfg(LaunchImport& imported, const std::string& text,
                               const std::string& source) {
  input::refuse_yaml_cpp_hangs(text, source);
  YAML::Node root;
  try {
    root = YAML::Load(text);
  } catch (const YAML::Exception& e) {
    throw InputError(source + ": YAML error: " + e.msg);
  }
  if (!root.IsMap())
    throw InputError(source + ": a userbuffers configuration is a mapping of GEMM names "
                              "(qkv_fprop, proj_fprop, fc2_fprop, ...) to their settings");
  // Transformer Engine transformer_engine/pytorch/module/base.py initialize_ub: a GEMM's method
  // is its ub_cfgs entry's "method", else pipeline for proj_fprop and fc2_fprop.
  std::string method;
  for (const char* gemm : {"proj_fprop", "fc2_fprop"}) {
    std::string m = "pipeline";
    const YAML::Node cfg = root[gemm];
    if (cfg.IsDefined() && !cfg.IsNull() && !cfg.IsMap())
      throw InputError(source + ": field '" + gemm + "': expected a mapping of settings");
    if (cfg.IsMap() && cfg["method"].IsDefined()) {
      m = cfg["method"].IsScalar() ? cfg["method"].Scalar() : "(not a scalar)";
      if (m != "pipeline" && m != "ring_exchange")
        throw InputError(source + ": field '" + gemm + ".method' = '" + m +
                         "': the forward reduce-scatter overlap is pipeline or ring_exchange");
    }
    if (!method.empty() && m != method)
      throw InputError(source + ": field 'fc2_fprop.method' = '" + m + "': differs from "
                       "proj_fprop's '" + method + "'; trainsim models one method for both "
                       "(parallel.tp_comm_overlap_rs_method)");
    method = m;
  }
  imported.keys["parallel.tp_comm_overlap_rs_method"] = method;
  imported.derived.push_back("parallel.tp_comm_overlap_rs_method " + method + ": proj_fprop / "
                             "fc2_fprop method of --tp-comm-overlap-cfg " + source);
  for (const auto& entry : root) {
    const std::string gemm = entry.first.IsScalar() ? entry.first.Scalar() : "?";
    if (gemm != "proj_fprop" && gemm != "fc2_fprop")
      imported.ignored.push_back("--tp-comm-overlap-cfg " + gemm + ": not modelled (trainsim "
                                 "models the forward reduce-scatters' method only)");
  }
}

namespace {

void import_ds_object(const json& j, const std::string& prefix, LaunchImport& out,
                      const std::string& source);

/// One DeepSpeed key at `path` (dotted, under deepspeed.).
void import_ds_value(const std::string& path, const json& v, LaunchImport& out,
                     const std::string& source) {
  const std::string full = "deepspeed." + path;
  std::string text = v.is_string() ? v.get<std::string>() : v.dump();
  if (v.is_string() && text == "auto")
    throw InputError(source + ": field '" + path + "' = \"auto\": a value the Hugging Face "
                              "Trainer fills in; give the number");
  if (const ScenarioKey* k = find_scenario_key(full)) {
    if (!k->ignored.empty())
      out.ignored.push_back(path + " " + text + ": " + full + " (" + k->ignored + ")");
    else
      out.keys[full] = text;
    return;
  }
  if (const KeyAlias* a = find_scenario_key_alias(full)) {
    out.keys[a->canonical] = text;
    return;
  }
  if (v.is_object() && input::is_section(full)) return import_ds_object(v, path, out, source);
  std::vector<std::string> names;
  const std::string parent = input::parent_of(full);
  for (const ScenarioKey& k : scenario_keys())
    if (k.section() == parent) names.push_back(k.name());
  for (const KeyAlias& a : scenario_key_aliases())
    if (input::parent_of(a.path) == parent) names.push_back(input::last_of(a.path));
  throw InputError(source + ": field '" + path + "' = " + v.dump() +
                   ": not a DeepSpeed key trainsim knows (it may change time or memory)" +
                   closest(input::last_of(full), names, [](const std::string& n) { return n; }));
}

void import_ds_object(const json& j, const std::string& prefix, LaunchImport& out,
                      const std::string& source) {
  for (const auto& [k, v] : j.items()) {
    const std::string path = prefix.empty() ? k : prefix + "." + k;
    if (path == "fp16" || path == "bf16") continue;  // import_deepspeed
    if (path == "zero_optimization.offload_param") {
      const std::string dev = v.is_object() && v.contains("device") && v["device"].is_string()
                                  ? v["device"].get<std::string>() : "none";
      if (dev != "none")
        throw InputError(source + ": field '" + path + ".device' = \"" + dev +
                         "\": parameter offload is not modelled (trainsim models the optimizer's "
                         "offload, offload_optimizer)");
      continue;
    }
    import_ds_value(path, v, out, source);
  }
}

bool enabled(const json& j, const char* section, const std::string& source) {
  if (!j.contains(section)) return false;
  const json& s = j[section];
  if (!s.is_object() || !s.contains("enabled")) return false;
  if (s["enabled"].is_string() && s["enabled"] == "auto")
    throw InputError(source + ": field '" + std::string(section) + ".enabled' = \"auto\": a value "
                              "the Hugging Face Trainer fills in; give true or false");
  if (!s["enabled"].is_boolean())
    throw InputError(source + ": field '" + std::string(section) + ".enabled' = " +
                     s["enabled"].dump() + ": expected true or false");
  return s["enabled"].get<bool>();
}

}  // namespace

LaunchImport import_deepspeed(const std::string& path, long long world_size) {
  const json j = parse_json_input(
      read_input_file(path, "DeepSpeed config", "a ds_config.json file", kSmallInputMaxBytes), path);
  if (!j.is_object()) throw InputError(path + ": a DeepSpeed config is a JSON object");
  LaunchImport out;
  const bool fp16 = enabled(j, "fp16", path), bf16 = enabled(j, "bf16", path);
  if (fp16 && bf16)
    throw InputError(path + ": fields 'fp16.enabled' and 'bf16.enabled' are both true");
  out.keys["parallel.precision"] = fp16 ? "fp16" : bf16 ? "bf16" : "fp32";
  for (const char* s : {"fp16", "bf16"})
    if (j.contains(s) && j[s].is_object())
      for (const auto& [k, v] : j[s].items())
        if (k != "enabled")
          out.ignored.push_back(std::string(s) + "." + k + " " + v.dump() +
                                ": loss scaling, a scalar per step (no time or memory)");
  import_ds_object(j, "", out, path);
  if (!out.keys.count("parallel.global_batch_size")) {
    auto it = out.keys.find("parallel.micro_batch_size");
    const long long ga = j.contains("gradient_accumulation_steps") &&
                                 j["gradient_accumulation_steps"].is_number_integer()
                             ? j["gradient_accumulation_steps"].get<long long>() : 1;
    if (it == out.keys.end() || world_size <= 0)
      throw InputError(path + ": no 'train_batch_size': give it, or train_micro_batch_size_per_gpu "
                              "with --nodes and --gpus-per-node (DeepSpeed: train_batch_size = "
                              "micro batch x gradient_accumulation_steps x GPUs)");
    const long long global = integer_of(it->second, "train_micro_batch_size_per_gpu", path) * ga * world_size;
    out.keys["parallel.global_batch_size"] = std::to_string(global);
    out.derived.push_back("parallel.global_batch_size " + std::to_string(global) + ": " +
                          it->second + " x gradient_accumulation_steps " + std::to_string(ga) +
                          " x " + std::to_string(world_size) + " GPUs");
  }
  return out;
}

std::string launch_import_yaml(const LaunchImport& imported, const std::string& header) {
  std::string out = header;
  for (const std::string& d : imported.derived) out += "# derived: " + d + "\n";
  if (!imported.ignored.empty()) {
    out += "# ignored (they change neither time nor memory; docs/scenario.md):\n";
    for (const std::string& i : imported.ignored) out += "#   " + i + "\n";
  }
  YAML::Node root(YAML::NodeType::Map);
  std::set<std::string> done;
  auto put = [&](const std::string& path, const std::string& value) {
    // A value is a YAML scalar or flow list as on the command line; text that is not YAML
    // ("[1,", "*x") stays a string, which the scenario's validation then refuses by key.
    YAML::Node v;
    try {
      v = YAML::Load(value);
    } catch (const YAML::Exception&) {
      v = YAML::Node(value);
      v.SetTag("!");
    }
    std::vector<std::string> parts;
    for (std::size_t s = 0, e; s <= path.size(); s = e + 1) {
      e = path.find('.', s);
      if (e == std::string::npos) e = path.size();
      parts.push_back(path.substr(s, e - s));
    }
    std::vector<YAML::Node> chain{root};
    for (std::size_t k = 0; k + 1 < parts.size(); ++k) chain.push_back(chain.back()[parts[k]]);
    chain.back()[parts.back()] = v;
    done.insert(path);
  };
  // Top-level keys first, then the sections in the table's order.
  for (const ScenarioKey& k : scenario_keys())
    if (k.section().empty() && imported.keys.count(k.path)) put(k.path, imported.keys.at(k.path));
  for (const ScenarioKey& k : scenario_keys())
    if (!done.count(k.path) && imported.keys.count(k.path)) put(k.path, imported.keys.at(k.path));
  for (const auto& [path, value] : imported.keys)
    if (!done.count(path)) put(path, value);
  YAML::Emitter e;
  e << root;
  return out + e.c_str() + "\n";
}

}  // namespace trainsim
