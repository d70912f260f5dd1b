// The section readers (models/input/sections.h).
#include "models/input/sections.h"

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <utility>
#include <vector>

#include "models/hardware/hardware.h"
#include "models/hardware/system_file.h"
#include "models/input/hf_config.h"
#include "models/input/keys.h"
#include "models/input/layer_pattern.h"

namespace trainsim::input {

namespace {

/// The names a custom enum key accepts, from the table, in its reader's order.
std::vector<std::string> names_of(const std::string& path) {
  std::vector<std::string> names;
  for (const KeyChoice& c : find_scenario_key(path)->choices) names.push_back(c.name);
  return names;
}

/// The table's default of a custom integer key.
std::int64_t default_of(const std::string& path) {
  return std::int64_t(find_scenario_key(path)->default_value.value_or(0));
}

/// One key of the table by its type, into its member; absent, the table's default.
void read_table_key(const Reader& r, Scenario& s, const ScenarioKey& k) {
  void* const at = k.field.address(s);
  const std::optional<double> def = k.default_value;
  switch (k.type) {
    case KeyType::Int:
    case KeyType::IntOrFloat: {
      const auto v = r.get_int(k.path, k.min, k.required, k.type == KeyType::IntOrFloat);
      if (k.field.kind == FieldKind::OptInt64)
        *static_cast<std::optional<std::int64_t>*>(at) = v;
      else if (v || def)
        *static_cast<std::int64_t*>(at) = v ? *v : std::int64_t(*def);
      return;
    }
    case KeyType::Bool: {
      const auto v = r.get_bool(k.path);
      if (k.field.kind == FieldKind::OptBool)
        *static_cast<std::optional<bool>*>(at) = v;
      else if (v || def)
        *static_cast<bool*>(at) = v ? *v : *def != 0;
      return;
    }
    case KeyType::Number: {
      const auto v = get_fraction(r, k.path, k.lo, k.hi, k.hi_open, k.lo_open);
      if (v || def) *static_cast<double*>(at) = v ? *v : *def;
      return;
    }
    case KeyType::String:
      if (const auto v = r.get_string(k.path, k.required)) *static_cast<std::string*>(at) = *v;
      return;
    case KeyType::Enum: {
      std::vector<std::string> names;
      for (const KeyChoice& c : k.choices) names.push_back(c.name);
      const auto i = r.get_enum(k.path, names);
      // Every scenario enum is one byte (keys.h kind_of): written through an unsigned char.
      if (i || def)
        *static_cast<std::uint8_t*>(at) = std::uint8_t(i ? k.choices[*i].value : int(*def));
      return;
    }
    case KeyType::Custom:
    case KeyType::Any:
      return;
  }
}

}  // namespace

void read_table_keys(const Reader& r, Scenario& s, const std::string& section) {
  for (const ScenarioKey& k : scenario_keys())
    if (k.section() == section && k.field.address && k.ignored.empty()) read_table_key(r, s, k);
}

void note_ignored_keys(const Reader& r, Scenario& s) {
  for (const ScenarioKey& k : scenario_keys())
    if (!k.ignored.empty() && r.at(k.path).IsDefined())
      s.notes.push_back("ignored: " + k.path + " (" + k.ignored + ")");
}

namespace {
/// GQA, windows and the attention kernel: the model keys the table does not read by type.
void read_model_shape(const Reader& r, ModelConfig& m) {
  const auto gqa = r.get_bool(key_of(&ModelConfig::group_query_attention));
  if (gqa && !*gqa && m.num_query_groups != 0)
    r.fail(key_of(&ModelConfig::group_query_attention),
           r.at(key_of(&ModelConfig::group_query_attention)),
           "is false, but model.num_query_groups is set (Megatron applies num_query_groups "
           "only with group_query_attention; remove one of the two)");
  m.group_query_attention = gqa.value_or(m.num_query_groups != 0);
  if (r.at(key_of(&ModelConfig::window_size)).IsSequence()) {
    // Megatron's (left, right) tuple: causal models attend `left` tokens back, right = 0.
    const YAML::Node n = r.at(key_of(&ModelConfig::window_size));
    std::int64_t left = 0, right = -1;
    if (n.size() != 2 || !n[0].IsScalar() || !n[1].IsScalar() ||
        !Reader::parse_int(n[0].Scalar(), left) || !Reader::parse_int(n[1].Scalar(), right))
      r.fail(key_of(&ModelConfig::window_size), n,
             "expected an integer or a pair [left, right] of integers");
    if (left < 0 || left > (std::int64_t(1) << 22) || right != 0)
      r.fail(key_of(&ModelConfig::window_size), n,
             "expected [left, 0] with 0 <= left <= 4194304 (a causal decoder attends only to "
             "earlier tokens)");
    m.window_size = left;
  } else {
    m.window_size = r.get_int(key_of(&ModelConfig::window_size), 0, false)
                        .value_or(default_of(key_of(&ModelConfig::window_size)));
  }
  if (m.window_attn_skip_freq != 0 && m.window_size == 0)
    r.fail(key_of(&ModelConfig::window_attn_skip_freq),
           r.at(key_of(&ModelConfig::window_attn_skip_freq)),
           "needs model.window_size (sliding-window attention) to be set");
  const auto flash = r.get_bool("model.use_flash_attn");
  if (r.has(key_of(&ModelConfig::attention_backend))) {
    if (flash && *flash != (m.attention_backend == AttentionBackend::Flash))
      r.fail("model.use_flash_attn", r.at("model.use_flash_attn"),
             "contradicts model.attention_backend; remove one of the two");
  } else if (flash && *flash) {
    m.attention_backend = AttentionBackend::Flash;
  }
}

/// --moe-layer-freq: an integer N, a YAML list of 0/1 per layer, or Megatron's string
/// expression of that list.
void read_moe_layer_freq(const Reader& r, ModelConfig& m) {
  const std::string f = key_of(&ModelConfig::moe_layer_freq);
  const YAML::Node n = r.at(f);
  const std::int64_t max_layers = scenario_size_limit(key_of(&ModelConfig::num_layers));
  auto pattern_of = [&](const YAML::Node& node, std::vector<std::uint8_t> p) {
    if (p.empty()) r.fail(f, node, "the pattern is empty; it needs one entry per layer");
    m.moe_layer_pattern = std::move(p);
  };
  if (n.IsDefined() && n.IsSequence()) {
    std::vector<std::uint8_t> p;
    for (const YAML::Node& x : n) {
      if (!x.IsScalar() || (x.Scalar() != "0" && x.Scalar() != "1"))
        r.fail(f, x, "each entry of the list is 0 (a dense layer) or 1 (an MoE layer)");
      if (std::int64_t(p.size()) >= max_layers)
        r.fail(f, n, "is longer than " + std::to_string(max_layers) + " layers");
      p.push_back(x.Scalar() == "1" ? 1 : 0);
    }
    pattern_of(n, std::move(p));
    return;
  }
  if (n.IsDefined() && n.IsScalar() && n.Scalar().find('[') != std::string::npos) {
    std::string why;
    auto p = parse_layer_pattern(n.Scalar(), max_layers, why);
    if (!p)
      r.fail(f, n,
             "not a layer pattern (Megatron's list expression, e.g. \"([0]*3+[1]*58)\"): " + why);
    pattern_of(n, std::move(*p));
    return;
  }
  m.moe_layer_freq = r.get_int(f, 1, false).value_or(default_of(f));
}

/// Mixture of experts (Megatron-Core --num-experts and --moe-* arguments).
void read_model_moe(const Reader& r, ModelConfig& m) {
  read_moe_layer_freq(r, m);
  if (m.num_experts > 0 && m.moe_router_topk > m.num_experts)
    r.fail(key_of(&ModelConfig::moe_router_topk), r.at(key_of(&ModelConfig::moe_router_topk)),
           "exceeds model.num_experts (" + std::to_string(m.num_experts) + ")");
}

/// Multi-head latent attention (Megatron-Core --multi-latent-attention and its _add_mla_args).
void read_model_mla(const Reader& r, ModelConfig& m) {
  if (!m.multi_latent_attention) {
    for (const std::string& k :
         {key_of(&ModelConfig::q_lora_rank), key_of(&ModelConfig::kv_lora_rank),
          key_of(&ModelConfig::qk_head_dim), key_of(&ModelConfig::qk_pos_emb_head_dim),
          key_of(&ModelConfig::v_head_dim)})
      if (r.has(k))
        r.fail(k, r.at(k),
               "is set, but model.multi_latent_attention is not (Megatron reads it "
               "only for multi-head latent attention)");
    return;
  }
  if (r.has(key_of(&ModelConfig::kv_channels)))
    r.fail(key_of(&ModelConfig::kv_channels), r.at(key_of(&ModelConfig::kv_channels)),
           "is not read with model.multi_latent_attention (the head dimensions are "
           "model.qk_head_dim + model.qk_pos_emb_head_dim and model.v_head_dim); remove it");
  const std::string& groups = key_of(&ModelConfig::num_query_groups);
  const std::string gqa = r.has(groups)             ? groups
                          : m.group_query_attention ? key_of(&ModelConfig::group_query_attention)
                                                    : std::string();
  if (!gqa.empty())
    r.fail(gqa, r.at(gqa),
           "with model.multi_latent_attention: Megatron-LM asserts \"Group query attention is "
           "mutually exclusive with multi latent attention\" (arguments.py)");
}

/// Megatron-Core arguments trainsim recognises but does not model: their no-op values (0,
/// false) are accepted, anything else is refused with what is missing.
void read_unmodelled(const Reader& r) {
  const std::pair<const char*, const char*> flags[] = {
      {"model.mla_down_proj_fusion",
       "the fused q/kv down projection of multi-head latent attention is not modelled yet; use "
       "false or leave it out"}};
  for (const auto& [key, why] : flags)
    if (r.get_bool(key).value_or(false)) r.fail(key, r.at(key), why);
}

}  // namespace

void read_model(const Reader& r, Scenario& s) {
  // ---- model (Megatron-LM arguments); absent ffn_hidden_size and kv_channels stay 0, the
  // default of validate_scenario (an explicit 0 is an error, not the default).
  read_table_keys(r, s, "model");
  ModelConfig& m = s.model;
  read_model_shape(r, m);
  read_model_mla(r, m);
  read_model_moe(r, m);
  read_unmodelled(r);
}

namespace {

/// Megatron-Core parallelism the table does not read by type: the overlap's method, one FSDP,
/// the FP8 recipe.
void read_parallel_core(const Reader& r, ParallelConfig& p) {
  const std::string f = "parallel.";
  if (auto m = r.get_enum(f + "tp_comm_overlap_rs_method", names_of(f + "tp_comm_overlap_rs_method"))) {
    p.tp_comm_overlap_rs_ring = *m == 1;
    if (!p.tp_comm_overlap)
      r.fail(f + "tp_comm_overlap_rs_method", r.at(f + "tp_comm_overlap_rs_method"),
             "is set, but parallel.tp_comm_overlap is not");
  }
  if (p.use_megatron_fsdp && p.use_torch_fsdp2)
    r.fail(f + "use_torch_fsdp2", r.at(f + "use_torch_fsdp2"),
           "and parallel.use_megatron_fsdp are both set; choose one FSDP implementation");
  if (p.fsdp_sharding_group_size != 0 && !p.uses_fsdp())
    r.fail(f + "fsdp_sharding_group_size", r.at(f + "fsdp_sharding_group_size"),
           "needs parallel.use_megatron_fsdp or parallel.use_torch_fsdp2");
  if (auto rc = r.get_enum(f + "fp8_recipe", names_of(f + "fp8_recipe"))) {
    p.fp8_recipe = static_cast<Fp8Recipe>(*rc);
    if (p.fp8 == Fp8Format::None)
      r.fail(f + "fp8_recipe", r.at(f + "fp8_recipe"), "is set, but parallel.fp8 is not");
  }
  if (p.fp8_param_gather && p.fp8 == Fp8Format::None)
    r.fail(f + "fp8_param_gather", r.at(f + "fp8_param_gather"), "needs parallel.fp8");
}

/// Megatron-Core's --recompute-modules (transformer_config.py): a list of module names whose
/// activations selective recomputation discards and recomputes in the backward.
void read_recompute_modules(const Reader& r, ParallelConfig& p) {
  const std::string f = key_of(&ParallelConfig::recompute_modules);
  const YAML::Node n = r.at(f);
  const bool selective = p.recompute_granularity == Recompute::Selective;
  if (!n || n.IsNull()) {
    p.recompute_modules = selective ? kRecomputeCoreAttn : 0;  // Megatron-Core's default
    return;
  }
  if (!n.IsSequence())
    r.fail(f, n, "expected a list of module names, e.g. [core_attn, layernorm, moe_act]");
  if (!selective)
    r.fail(f, n,
           "needs parallel.recompute_granularity selective (Megatron-Core applies "
           "recompute_modules only to selective recomputation)");
  p.recompute_modules = 0;
  for (const YAML::Node& m : n) {
    const std::string name = m.IsScalar() ? m.Scalar() : "";
    if (const auto bit = recompute_module_bit(name)) {
      p.recompute_modules |= *bit;
    } else {
      r.fail(f, m,
             "expected one of core_attn, layernorm, moe_act, mlp, moe, mla_up_proj, "
             "shared_experts (Megatron-Core --recompute-modules names)");
    }
  }
}

/// Megatron-Core --cuda-graph-scope (core_v0.16.0 arguments.py, nargs='+'; transformer_config.py
/// also splits a comma-separated string): a name or a list of names of CudaGraphScope, or
/// "full" alone (the whole layer, the same as none). --enable-cuda-graph and
/// --external-cuda-graph set the implementation, and neither goes with --cuda-graph-impl
/// (arguments.py: "Do not use --enable-cuda-graph or --external-cuda-graph with
/// --cuda-graph-impl").
void read_cuda_graphs(const Reader& r, ParallelConfig& p) {
  const std::string fi = key_of(&ParallelConfig::cuda_graph_impl);
  const std::string fe = key_of(&ParallelConfig::enable_cuda_graph);
  const std::string fx = key_of(&ParallelConfig::external_cuda_graph);
  if (p.enable_cuda_graph || p.external_cuda_graph) {
    const std::string& f = p.enable_cuda_graph ? fe : fx;
    if (p.enable_cuda_graph && p.external_cuda_graph)
      r.fail(fx, r.at(fx), "and " + fe + " cannot both be true (Megatron-Core arguments.py)");
    if (p.cuda_graph_impl != CudaGraphImpl::None)
      r.fail(f, r.at(f), "is set together with " + fi +
                             " (Megatron-Core arguments.py: \"Do not use --enable-cuda-graph or "
                             "--external-cuda-graph with --cuda-graph-impl\")");
    p.cuda_graph_impl =
        p.enable_cuda_graph ? CudaGraphImpl::Local : CudaGraphImpl::TransformerEngine;
  }
  const std::string f = key_of(&ParallelConfig::cuda_graph_scope);
  const YAML::Node n = r.at(f);
  p.cuda_graph_scope = 0;
  if (!n || n.IsNull()) return;
  std::vector<YAML::Node> items;
  std::vector<std::string> names;
  if (n.IsSequence()) {
    for (const YAML::Node& m : n) {
      items.push_back(m);
      names.push_back(m.IsScalar() ? m.Scalar() : "");
    }
  } else if (n.IsScalar()) {
    std::string rest = n.Scalar();
    for (std::size_t c; (c = rest.find(',')) != std::string::npos; rest = rest.substr(c + 1)) {
      items.push_back(n);
      names.push_back(rest.substr(0, c));
    }
    items.push_back(n);
    names.push_back(rest);
  } else {
    r.fail(f, n, "expected a scope name or a list of them, e.g. [attn, moe_router]");
  }
  static const std::pair<const char*, std::uint8_t> kScopes[] = {
      {"attn", kGraphAttn},           {"mlp", kGraphMlp},
      {"moe", kGraphMoe},             {"moe_router", kGraphMoeRouter},
      {"moe_preprocess", kGraphMoePreprocess}, {"mamba", kGraphMamba},
      {"full_iteration", kGraphFullIteration}};
  for (std::size_t i = 0; i < names.size(); ++i) {
    if (names[i] == "full") {
      if (names.size() != 1) r.fail(f, items[i], "full scope cannot be used with other scopes "
                                                 "(Megatron-Core transformer_config.py)");
      continue;
    }
    const auto* it = std::find_if(std::begin(kScopes), std::end(kScopes),
                                  [&](const auto& e) { return names[i] == e.first; });
    if (it == std::end(kScopes))
      r.fail(f, items[i], "expected full, attn, mlp, moe, moe_router, moe_preprocess, mamba or "
                          "full_iteration (Megatron-Core CudaGraphScope names)");
    p.cuda_graph_scope |= it->second;
  }
}

/// Megatron's --recompute-method / --recompute-num-layers (transformer_config.py: both with
/// full recomputation only; selective refuses a method).
void read_recompute_method(const Reader& r, ParallelConfig& p) {
  const std::string fm = "parallel.recompute_method",
                    fn = key_of(&ParallelConfig::recompute_num_layers);
  const auto method = r.get_enum(fm, names_of(fm));
  const auto layers = r.get_int(fn, 1, false);
  if ((method || layers) && p.recompute_granularity != Recompute::Full) {
    const std::string f = method ? fm : fn;
    r.fail(f, r.at(f),
           "needs parallel.recompute_granularity full (Megatron-Core applies "
           "recompute_method and recompute_num_layers to full recomputation only)");
  }
  p.recompute_block = method && *method == 1;
  p.recompute_num_layers = layers.value_or(default_of(fn));
}

}  // namespace

void read_parallel(const Reader& r, Scenario& s) {
  // ---- parallel (Megatron-LM arguments)
  read_table_keys(r, s, "parallel");
  ParallelConfig& p = s.parallel;
  read_recompute_modules(r, p);
  read_recompute_method(r, p);
  read_cuda_graphs(r, p);
  const std::string& f = key_of(&ParallelConfig::pipeline_schedule);
  if (auto sch = r.get_enum(f, names_of(f))) {
    const bool vp = p.num_layers_per_virtual_pipeline_stage.has_value();
    if (*sch == 2 && !vp)
      r.fail(f, r.at(f),
             "the interleaved schedule needs parallel.num_layers_per_virtual_pipeline_stage");
    if (*sch != 2 && vp)
      r.fail(f, r.at(f),
             "parallel.num_layers_per_virtual_pipeline_stage is set, which means the "
             "interleaved schedule; remove one of the two");
    p.pipeline_schedule = *sch == 0   ? PipelineSchedule::OneFOneB
                          : *sch == 1 ? PipelineSchedule::GPipe
                                      : PipelineSchedule::Interleaved;
  }
  read_parallel_core(r, p);
}

void read_zero(const Reader& r, Scenario& s) {
  // ---- deepspeed.zero_optimization (DeepSpeed config keys)
  ZeroConfig& z = s.zero;
  const std::string zp = "deepspeed.zero_optimization.";
  if (auto st = r.get_int(zp + "stage", 0, false)) {
    if (*st > 3) r.fail(zp + "stage", r.at(zp + "stage"), "ZeRO stage must be 0, 1, 2 or 3");
    z.stage = static_cast<int>(*st);
  }
  read_table_keys(r, s, "deepspeed.zero_optimization");
  read_table_keys(r, s, "deepspeed.zero_optimization.offload_optimizer");
  const std::string op = zp + "offload_optimizer.";
  if (auto dev = r.get_enum(op + "device", names_of(op + "device")))
    z.offload_optimizer.enabled = *dev == 0;
  if (r.has(op + "ratio")) {
    YAML::Node n = r.at(op + "ratio");
    double ratio = 0;
    if (n.IsScalar() && n.Scalar() == "auto") {
      z.offload_optimizer.ratio_auto = true;
    } else if (n.IsScalar() && n.Tag() != "!" && Reader::parse_double(n.Scalar(), ratio)) {
      if (ratio < 0 || ratio > 1) r.fail(op + "ratio", n, "must be within [0, 1]");
      z.offload_optimizer.ratio = ratio;
    } else {
      r.fail(op + "ratio", n, "expected a number in [0, 1] or 'auto'");
    }
    if (!z.offload_optimizer.enabled)
      r.fail(op + "ratio", n,
             "is set, but " + op + "device is " + (r.has(op + "device") ? "'none'" : "not set") +
                 ": the ratio applies only to an optimizer offloaded to the CPU (set " + op +
                 "device: cpu, or remove the ratio)");
  }
}

/// The cluster (a catalog system) and the simulation options.
void read_cluster_and_simulation(const Reader& r, Scenario& s) {
  // ---- cluster
  read_table_keys(r, s, "cluster");
  ClusterConfig& c = s.cluster;
  const std::string system_key = key_of(&ClusterConfig::system);
  const std::string file_key = key_of(&ClusterConfig::system_file);
  if (!c.system_file.empty()) {
    if (!c.system.empty())
      r.fail(file_key, r.at(file_key),
             "give " + system_key + " (a catalog name) or " + file_key + ", not both");
    std::filesystem::path path(c.system_file);
    if (path.is_relative()) path = std::filesystem::path(r.source()).parent_path() / path;
    try {
      c.file_system = std::make_shared<const SystemSpec>(load_system_file(path.string()));
    } catch (const InputError& e) {  // which scenario and field named the file
      throw InputError(r.source() + ": field '" + file_key + "': " + e.what());
    }
    c.system = c.file_system->name;
  } else if (c.system.empty()) {
    r.missing(system_key);  // or cluster.system_file (docs/scenario.md)
  } else if (!contains(system_names(), c.system)) {
    std::string list;
    for (const auto& n : system_names()) list += (list.empty() ? "" : ", ") + n;
    r.fail(system_key, r.at(system_key), "unknown system; known systems: " + list);
  }
  const SystemSpec& sys = cluster_system(c);
  if (c.gpus_per_node > sys.gpus_per_node)
    r.fail(key_of(&ClusterConfig::gpus_per_node), r.at(key_of(&ClusterConfig::gpus_per_node)),
           "a " + c.system + " node has only " + std::to_string(sys.gpus_per_node) + " GPUs");

  // ---- simulation
  {
    const std::string f = "simulation.fold";
    YAML::Node n = r.at(f);
    if (n.IsDefined() && !n.IsNull()) {
      bool b = false;
      if (n.IsScalar() && n.Scalar() == "auto")
        s.simulation.fold = SimulationConfig::Fold::Auto;
      else if (n.IsScalar() && n.Tag() != "!" && YAML::convert<bool>::decode(n, b))
        s.simulation.fold = b ? SimulationConfig::Fold::On : SimulationConfig::Fold::Off;
      else
        r.fail(f, n, "expected auto, true or false");
    }
  }
}

/// `model: {hf_config: path}`: the Hugging Face config's keys fill the model section where
/// the scenario (or a --set) does not give them (models/input/hf_config.h). The path is relative to
/// the scenario file.
HfImport import_hf_into(YAML::Node& root, const std::string& source) {
  if (!root.IsMap() || !root["model"].IsMap()) return {};
  YAML::Node model = root["model"];
  const YAML::Node ref = model["hf_config"];
  if (!ref.IsDefined() || ref.IsNull()) return {};
  if (!ref.IsScalar())
    throw InputError(source + ": field 'model.hf_config': expected the path of a config.json");
  std::filesystem::path path(ref.Scalar());
  if (path.is_relative()) path = std::filesystem::path(source).parent_path() / path;
  std::vector<std::pair<std::string, std::string>> imported;
  try {
    imported = import_hf_config(path.string());
  } catch (const InputError& e) {  // which scenario and field named the config
    throw InputError(source + ": field 'model.hf_config': " + e.what());
  }
  HfImport done{path.string(), {}};
  for (const auto& [key, value] : imported)
    if (!model[key].IsDefined()) {
      model[key] = YAML::Load(value);
      done.keys.push_back(join("model", key));
    }
  return done;
}

InputError with_import_origin(const InputError& e, const HfImport& imported) {
  const std::string message = e.what();
  auto is_name_char = [](char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; };
  std::vector<std::string> named;
  for (const std::string& key : imported.keys)
    for (std::size_t at = message.find(key); at != std::string::npos;
         at = message.find(key, at + 1)) {
      const std::size_t end = at + key.size();
      if ((at == 0 || !is_name_char(message[at - 1])) &&
          (end == message.size() || !is_name_char(message[end]))) {
        named.push_back(key);
        break;
      }
    }
  if (named.empty()) return e;
  std::string keys;
  for (std::size_t i = 0; i < named.size(); ++i)
    keys += (i == 0 ? "" : i + 1 == named.size() ? " and " : ", ") + named[i];
  return InputError(message + " (" + keys + (named.size() == 1 ? " was" : " were") +
                    " imported from " + imported.config_path + ")");
}

}  // namespace trainsim::input
