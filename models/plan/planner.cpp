#include "models/plan/planner.h"

#include <yaml-cpp/yaml.h>

#include <boost/range/iterator_range.hpp>

#include <algorithm>
#include <limits>
#include <cmath>
#include <map>
#include <optional>
#include <sstream>
#include <stdexcept>

#include "models/errors.h"
#include "models/hardware/calibration.h"
#include "models/input/keys.h"
#include "models/perf/cost_model.h"
#include "models/builder/graph_builder.h"
#include "models/hardware/hardware.h"
#include "models/graph/pipeline_schedule.h"
#include "models/run.h"
#include "models/memory/zero_offload.h"
#include "models/input/runtime.h"
#include "models/system/collective_flows.h"

namespace trainsim {

// ------------------------------------------------------------------------- the
// plan section

namespace {

/// A `plan:` key that names a parallel key: that key's name in the key table
/// (models/input/keys.h), never spelled again here.
template <typename T>
std::string plan_key(T ParallelConfig::*member) {
  return input::last_of(key_of(member));
}

const std::vector<std::string>& plan_keys() {
  using P = ParallelConfig;
  static const std::vector<std::string> keys = {
      plan_key(&P::tensor_model_parallel_size), plan_key(&P::pipeline_model_parallel_size),
      plan_key(&P::num_layers_per_virtual_pipeline_stage), plan_key(&P::micro_batch_size),
      plan_key(&P::recompute_granularity), plan_key(&P::recompute_num_layers),
      plan_key(&P::recompute_modules), plan_key(&P::sequence_parallel), "zero_stage",
      plan_key(&P::use_distributed_optimizer), plan_key(&P::context_parallel_size),
      plan_key(&P::expert_model_parallel_size), plan_key(&P::expert_tensor_parallel_size),
      "fsdp", plan_key(&P::fp8), "allow_offload", "max_gpus", "memory_headroom",
      "top_k"};
  return keys;
}

/// Reads one `plan:` field with file, line, field and value in every error.
class PlanReader {
 public:
  PlanReader(YAML::Node plan, std::string source)
      : plan_(std::move(plan)), source_(std::move(source)) {}

  bool has(const std::string& key) const {
    return plan_.IsMap() && plan_[key].IsDefined() && !plan_[key].IsNull();
  }
  YAML::Node node(const std::string& key) const { return plan_[key]; }

  [[noreturn]] void fail(const std::string& key, const YAML::Node& n,
                         const std::string& what) const {
    std::string where = source_;
    if (n.IsDefined() && !n.Mark().is_null()) where += ":" + std::to_string(n.Mark().line + 1);
    std::string shown = n.IsScalar()     ? "'" + n.Scalar() + "'"
                        : n.IsSequence() ? "(a list)"
                                         : "(a mapping)";
    throw InputError(where + ": field 'plan." + key + "' = " + shown + ": " + what);
  }

  /// The scalars of a field: a list, or one value (a list of one).
  std::vector<YAML::Node> items(const std::string& key) const {
    YAML::Node n = plan_[key];
    std::vector<YAML::Node> out;
    if (n.IsSequence()) {
      if (n.size() == 0) fail(key, n, "an empty list leaves nothing to search");
      for (const auto& v : n) {
        if (!v.IsScalar()) fail(key, n, "expected a list of values");
        out.push_back(v);
      }
    } else if (n.IsScalar()) {
      out.push_back(n);
    } else {
      fail(key, n, "expected a value or a list of values");
    }
    return out;
  }

  std::int64_t to_int(const std::string& key, const YAML::Node& v, std::int64_t lo,
                      std::int64_t hi) const {
    std::int64_t x = 0;
    std::size_t used = 0;
    try {
      x = std::stoll(v.Scalar(), &used);
    } catch (const std::exception&) {  // std::stoll: no digits, or out of range
      used = 0;
    }
    if (used == 0 || used != v.Scalar().size()) fail(key, v, "expected an integer");
    if (x < lo || x > hi)
      fail(key, v, "must be within [" + std::to_string(lo) + ", " + std::to_string(hi) + "]");
    return x;
  }

  bool to_bool(const std::string& key, const YAML::Node& v) const {
    bool b = false;
    if (!YAML::convert<bool>::decode(v, b)) fail(key, v, "expected true or false");
    return b;
  }

  std::vector<std::int64_t> ints(const std::string& key, std::int64_t lo, std::int64_t hi) const {
    std::vector<std::int64_t> out;
    for (const auto& v : items(key)) {
      out.push_back(to_int(key, v, lo, hi));
      refuse_repeat(key, v, out);
    }
    return out;
  }

  /// A value listed twice would enumerate (and rank) the same layouts twice (issue 35).
  template <typename T>
  void refuse_repeat(const std::string& key, const YAML::Node& v,
                     const std::vector<T>& so_far) const {
    if (!so_far.empty() &&
        std::find(so_far.begin(), so_far.end() - 1, so_far.back()) != so_far.end() - 1)
      fail(key, v, "listed twice (each value is searched once)");
  }

 private:
  YAML::Node plan_;
  std::string source_;
};

std::vector<std::int64_t> divisors(std::int64_t n) {
  std::vector<std::int64_t> out;
  for (std::int64_t d = 1; d <= n; ++d)
    if (n % d == 0) out.push_back(d);
  return out;
}

std::vector<std::int64_t> powers_of_two_up_to(std::int64_t n) {
  std::vector<std::int64_t> out;
  for (std::int64_t d = 1; d <= n; d *= 2) out.push_back(d);
  return out;
}

/// The units a pipeline splits: the layers, and the embedding and the loss where they count as
/// one each (Megatron-Core account_for_embedding/loss_in_pipeline_split).
std::int64_t split_layers(const ParallelConfig& p, std::int64_t num_layers) {
  return num_layers + (p.account_for_embedding_in_pipeline_split ? 1 : 0) +
         (p.account_for_loss_in_pipeline_split ? 1 : 0);
}

/// `fsdp` and `fp8`: named choices, each listed once.
void read_precision_dimensions(const PlanReader& r, PlanConfig& c) {
  if (r.has("fsdp")) {
    c.fsdp.clear();
    for (const auto& v : r.items("fsdp")) {
      const std::string s = v.Scalar();
      if (s == "none" || s == "null" || s == "~" || s == "false")
        c.fsdp.push_back(FsdpKind::None);
      else if (s == "megatron_fsdp")
        c.fsdp.push_back(FsdpKind::Megatron);
      else if (s == "torch_fsdp2")
        c.fsdp.push_back(FsdpKind::Torch);
      else
        r.fail("fsdp", v, "expected none, megatron_fsdp or torch_fsdp2");
      r.refuse_repeat("fsdp", v, c.fsdp);
    }
  }
  const std::string fp8 = plan_key(&ParallelConfig::fp8);
  if (r.has(fp8)) {
    c.fp8.clear();
    for (const auto& v : r.items(fp8)) {
      const std::string s = v.Scalar();
      if (s == "none" || s == "null" || s == "~" || s == "false")
        c.fp8.push_back(Fp8Format::None);
      else if (s == "e4m3")
        c.fp8.push_back(Fp8Format::E4M3);
      else if (s == "hybrid")
        c.fp8.push_back(Fp8Format::Hybrid);
      else
        r.fail(fp8, v, "expected none, e4m3 or hybrid (Megatron's --fp8-format)");
      r.refuse_repeat(fp8, v, c.fp8);
    }
  }
}

/// `recompute_modules`: a list of module lists, each a selective candidate's set.
void read_recompute_module_sets(const PlanReader& r, PlanConfig& c) {
  const std::string key = plan_key(&ParallelConfig::recompute_modules);
  if (!r.has(key)) return;
  const char* shape = "expected a list of module lists, e.g. [[moe_act, layernorm], [moe]]";
  const YAML::Node n = r.node(key);
  if (!n.IsSequence() || n.size() == 0) r.fail(key, n, shape);
  for (const YAML::Node& set : n) {
    if (!set.IsSequence()) r.fail(key, set, shape);
    std::uint8_t bits = 0;
    for (const YAML::Node& m : set) {
      const auto bit = m.IsScalar() ? recompute_module_bit(m.Scalar()) : std::nullopt;
      if (!bit)
        r.fail(key, m, "expected core_attn, layernorm, moe_act, mlp or moe (Megatron-Core "
                       "--recompute-modules names)");
      bits |= *bit;
    }
    if (std::find(c.recompute_modules.begin(), c.recompute_modules.end(), bits) ==
        c.recompute_modules.end())
      c.recompute_modules.push_back(bits);
  }
}

void read_dimensions(const PlanReader& r, const Scenario& base, PlanConfig& c) {
  const std::int64_t kMaxDim = 65536;
  if (r.has(plan_key(&ParallelConfig::tensor_model_parallel_size)))
    c.tensor_model_parallel_size = r.ints(plan_key(&ParallelConfig::tensor_model_parallel_size), 1, kMaxDim);
  if (r.has(plan_key(&ParallelConfig::pipeline_model_parallel_size))) {
    auto it = r.items(plan_key(&ParallelConfig::pipeline_model_parallel_size));
    if (it.size() == 1 && it[0].Scalar() == "all")
      c.pipeline_model_parallel_size = divisors(split_layers(base.parallel, base.model.num_layers));
    else
      c.pipeline_model_parallel_size = r.ints(plan_key(&ParallelConfig::pipeline_model_parallel_size), 1, kMaxDim);
  }
  if (r.has(plan_key(&ParallelConfig::num_layers_per_virtual_pipeline_stage))) {
    c.num_layers_per_virtual_pipeline_stage.clear();
    c.virtual_stages_from_scenario = false;
    const std::string key = plan_key(&ParallelConfig::num_layers_per_virtual_pipeline_stage);
    for (const auto& v : r.items(key)) {
      if (v.Scalar() == "all")
        c.all_virtual_stages = true;
      else if (v.Scalar() == "none" || v.Scalar() == "null" || v.Scalar() == "~")
        c.num_layers_per_virtual_pipeline_stage.push_back(std::nullopt);
      else
        c.num_layers_per_virtual_pipeline_stage.push_back(r.to_int(key, v, 1, 0xFFFE));
      r.refuse_repeat(key, v, c.num_layers_per_virtual_pipeline_stage);
    }
  }
  if (r.has(plan_key(&ParallelConfig::micro_batch_size))) c.micro_batch_size = r.ints(plan_key(&ParallelConfig::micro_batch_size), 1, 1 << 20);
  if (r.has(plan_key(&ParallelConfig::recompute_granularity))) {
    c.recompute_granularity.clear();
    for (const auto& v : r.items(plan_key(&ParallelConfig::recompute_granularity))) {
      const std::string s = v.Scalar();
      if (s == "none" || s == "null" || s == "~")
        c.recompute_granularity.push_back(Recompute::None);
      else if (s == "selective")
        c.recompute_granularity.push_back(Recompute::Selective);
      else if (s == "full")
        c.recompute_granularity.push_back(Recompute::Full);
      else
        r.fail(plan_key(&ParallelConfig::recompute_granularity), v, "expected none, selective or full");
      r.refuse_repeat(plan_key(&ParallelConfig::recompute_granularity), v,
                      c.recompute_granularity);
    }
  }
  if (r.has(plan_key(&ParallelConfig::recompute_num_layers)))
    c.recompute_num_layers = r.ints(plan_key(&ParallelConfig::recompute_num_layers), 1, 0xFFFE);
  read_recompute_module_sets(r, c);
  auto bools = [&](const std::string& key, std::vector<bool>& out) {
    if (!r.has(key)) return;
    out.clear();
    for (const auto& v : r.items(key)) {
      out.push_back(r.to_bool(key, v));
      r.refuse_repeat(key, v, out);
    }
  };
  bools(plan_key(&ParallelConfig::sequence_parallel), c.sequence_parallel);
  bools(plan_key(&ParallelConfig::use_distributed_optimizer), c.use_distributed_optimizer);
  if (r.has("zero_stage")) c.zero_stage = r.ints("zero_stage", 0, 3);
  if (r.has(plan_key(&ParallelConfig::context_parallel_size)))
    c.context_parallel_size = r.ints(plan_key(&ParallelConfig::context_parallel_size), 1, kMaxDim);
  if (r.has(plan_key(&ParallelConfig::expert_model_parallel_size)))
    c.expert_model_parallel_size = r.ints(plan_key(&ParallelConfig::expert_model_parallel_size), 1, kMaxDim);
  if (r.has(plan_key(&ParallelConfig::expert_tensor_parallel_size)))
    c.expert_tensor_parallel_size = r.ints(plan_key(&ParallelConfig::expert_tensor_parallel_size), 1, kMaxDim);
  read_precision_dimensions(r, c);
}

void read_limits(const PlanReader& r, const Scenario& base, PlanConfig& c) {
  if (r.has("allow_offload")) c.allow_offload = r.to_bool("allow_offload", r.node("allow_offload"));
  if (r.has("max_gpus")) {
    c.max_gpus = r.to_int("max_gpus", r.node("max_gpus"), 1, base.world_size());
    if (c.max_gpus % base.cluster.gpus_per_node != 0)
      r.fail("max_gpus", r.node("max_gpus"),
             "must be a multiple of the " + std::to_string(base.cluster.gpus_per_node) +
                 " GPUs of a node");
  }
  if (r.has("memory_headroom")) {
    YAML::Node n = r.node("memory_headroom");
    double h = -1;
    try {
      std::size_t used = 0;
      h = std::stod(n.Scalar(), &used);
      if (used != n.Scalar().size()) h = -1;
    } catch (const std::exception&) {
      h = -1;
    }
    if (!(h >= 0 && h < 1)) r.fail("memory_headroom", n, "expected a fraction in [0, 1)");
    c.memory_headroom = h;
  }
  if (r.has("top_k")) c.top_k = r.to_int("top_k", r.node("top_k"), 1, 100000);
}

}  // namespace

PlanConfig load_plan_config(const std::string& scenario_path, const ValidScenario& valid) {
  const Scenario& base = valid;
  PlanConfig c;
  // Tensor parallelism inside the NVLink domain: a node's GPUs, or a domain across nodes
  // (GB200 NVL72: up to 64 of its 72; skipped() keeps TP x CP and EP inside it).
  const SystemSpec& sys = cluster_system(base.cluster);
  c.tensor_model_parallel_size = powers_of_two_up_to(
      sys.domain_gpus() > sys.gpus_per_node ? sys.domain_gpus() : base.cluster.gpus_per_node);
  // Pipeline stages: the divisors of what the pipeline splits (the layers, plus the embedding
  // and the loss where the scenario counts them as layers: Megatron-Core
  // account_for_*_in_pipeline_split), and the scenario's own stage count (an uneven split).
  const std::int64_t split = split_layers(base.parallel, base.model.num_layers);
  c.pipeline_model_parallel_size = divisors(split);
  if (std::find(c.pipeline_model_parallel_size.begin(), c.pipeline_model_parallel_size.end(),
                base.parallel.pipeline_model_parallel_size) ==
      c.pipeline_model_parallel_size.end()) {
    c.pipeline_model_parallel_size.push_back(base.parallel.pipeline_model_parallel_size);
    std::sort(c.pipeline_model_parallel_size.begin(), c.pipeline_model_parallel_size.end());
  }
  c.num_layers_per_virtual_pipeline_stage = {std::nullopt};
  if (base.parallel.num_layers_per_virtual_pipeline_stage) {
    c.num_layers_per_virtual_pipeline_stage.push_back(
        base.parallel.num_layers_per_virtual_pipeline_stage);
    c.virtual_stages_from_scenario = true;
  }
  c.micro_batch_size = {1, 2, 4, 8};
  c.recompute_granularity = {Recompute::None, Recompute::Selective, Recompute::Full};
  // The launch line's own choices stay unless the plan varies them. DeepSpeed's ZeRO stages 0 and
  // 1 (and the scenario's own) are searched by default where they are the runtime's sharding
  // (Megatron-LM 2021 with DeepSpeed); Megatron-Core shards with its distributed optimizer or
  // FSDP, kept as written.
  const ParallelConfig& bp = base.parallel;
  c.sequence_parallel = {bp.sequence_parallel};
  c.zero_stage = {base.zero.stage};
  if (runtime_spec(base.runtime).deepspeed_zero_sharding) {
    c.zero_stage = {0, 1};
    if (base.zero.stage > 1) c.zero_stage.push_back(base.zero.stage);
  }
  c.use_distributed_optimizer = {bp.use_distributed_optimizer};
  c.context_parallel_size = {bp.context_parallel_size};
  c.expert_model_parallel_size = {bp.expert_model_parallel_size};
  c.expert_tensor_parallel_size = {0};  // the scenario file's own (no override)
  c.fsdp = {fsdp_kind(bp)};
  c.fp8 = {bp.fp8};
  // A scenario that offloads its optimizer has offloaded candidates, and the same layouts on
  // the GPU alone.
  c.allow_offload = base.zero.offload_optimizer.enabled;
  c.max_gpus = base.world_size();
  YAML::Node root;
  try {
    root = YAML::LoadFile(scenario_path);  // load_scenario has read and checked it already
  } catch (const YAML::Exception& e) {
    throw InputError(scenario_path + ": " + e.what());
  }
  YAML::Node plan = root.IsMap() ? root["plan"] : YAML::Node();
  if (!plan.IsDefined() || plan.IsNull()) return c;
  const PlanReader r(plan, scenario_path);
  if (!plan.IsMap()) r.fail("(section)", plan, "expected a mapping of plan keys");
  std::vector<std::string> seen;  // yaml-cpp keeps one of two equal keys without a word
  for (const auto& entry : plan) {
    const std::string key = entry.first.Scalar();
    if (std::find(seen.begin(), seen.end(), key) != seen.end())
      r.fail(key, entry.second, "the key is given twice in the plan section");
    seen.push_back(key);
    if (std::find(plan_keys().begin(), plan_keys().end(), key) == plan_keys().end()) {
      std::string known;
      for (const auto& k : plan_keys()) known += (known.empty() ? "" : ", ") + k;
      r.fail(key, entry.second, "unknown plan key; known: " + known);
    }
  }
  read_dimensions(r, base, c);
  read_limits(r, base, c);
  return c;
}

// ------------------------------------------------------------------------------
// enumerate

namespace {

const char* recompute_value(Recompute r) {
  return r == Recompute::None ? "null" : r == Recompute::Full ? "full" : "selective";
}

/// Virtual-stage choices for `pp` stages: the configured ones, or with `all`
/// every divisor of the layers per stage that gives at least two chunks, plus
/// none.
std::vector<std::optional<std::int64_t>> virtual_choices(const PlanConfig& plan,
                                                         std::int64_t layers, std::int64_t pp) {
  std::vector<std::optional<std::int64_t>> out = plan.num_layers_per_virtual_pipeline_stage;
  if (plan.virtual_stages_from_scenario)
    out.erase(std::remove_if(out.begin(), out.end(),
                             [&](const std::optional<std::int64_t>& v) {
                               return v && !(layers % pp == 0 && (layers / pp) % *v == 0 &&
                                             layers / pp >= 2 * *v);
                             }),
              out.end());
  if (plan.all_virtual_stages && std::find(out.begin(), out.end(), std::nullopt) == out.end())
    out.insert(out.begin(), std::nullopt);
  if (plan.all_virtual_stages && pp > 1 && layers % pp == 0) {
    for (std::int64_t d : divisors(layers / pp))
      if (d < layers / pp &&
          std::find(out.begin(), out.end(), std::optional<std::int64_t>(d)) == out.end())
        out.push_back(d);
  }
  if (pp == 1) {  // no interleaving on one stage: keep only `none` (if it was
                  // asked for)
    std::vector<std::optional<std::int64_t>> none;
    for (const auto& v : out)
      if (!v) none.push_back(v);
    return none;
  }
  return out;
}

/// `block` with this many layers (Megatron --recompute-method block), or `uniform` with units
/// of more than one layer (the scenario's own method), for a full candidate; `selective+` the
/// plan's modules for a selective one.
std::string recompute_token(Recompute rc, const std::optional<std::int64_t>& block,
                            std::int64_t uniform_units, const std::optional<std::uint8_t>& modules) {
  if (rc == Recompute::None) return "norecomp";
  if (rc == Recompute::Full && block) return "block" + std::to_string(*block);
  if (rc == Recompute::Full && uniform_units > 1) return "uniform" + std::to_string(uniform_units);
  if (rc == Recompute::Selective && modules)
    return "selective+" + (*modules ? recompute_modules_token(*modules) : std::string("none"));
  return to_string(rc);
}

std::string describe(std::int64_t tp, std::int64_t pp, std::int64_t cp, std::int64_t dp,
                     const std::optional<std::int64_t>& vpl, std::int64_t mb, Recompute rc,
                     const std::optional<std::int64_t>& block, std::int64_t uniform_units,
                     const std::optional<std::uint8_t>& modules, bool sp, std::int64_t zero,
                     bool distopt, bool offload) {
  std::ostringstream o;
  o << "tp" << tp << " pp" << pp;
  if (cp > 1) o << " cp" << cp;
  o << " dp" << dp;
  if (vpl) o << " vpl" << *vpl;
  o << " mb" << mb << " " << recompute_token(rc, block, uniform_units, modules);
  if (sp) o << " sp";
  if (zero > 0) o << " zero" << zero;
  if (distopt) o << " distopt";
  if (offload) o << " offload";
  return o.str();
}

/// The full-recomputation variants of a candidate with granularity `rc`: the plan's block layer
/// counts, or the scenario's own method (nullopt; `block N` named when the scenario's is block).
std::vector<std::optional<std::int64_t>> block_choices(const PlanConfig& plan,
                                                       const Scenario& base, Recompute rc) {
  if (rc != Recompute::Full) return {std::nullopt};
  if (plan.recompute_num_layers.empty())
    return {base.parallel.recompute_block
                ? std::optional<std::int64_t>(base.parallel.recompute_num_layers)
                : std::nullopt};
  return {plan.recompute_num_layers.begin(), plan.recompute_num_layers.end()};
}

/// The module sets of a candidate with granularity `rc`: the plan's for a selective one, else
/// the scenario's own (nullopt).
std::vector<std::optional<std::uint8_t>> module_choices(const PlanConfig& plan, Recompute rc) {
  if (rc != Recompute::Selective || plan.recompute_modules.empty()) return {std::nullopt};
  return {plan.recompute_modules.begin(), plan.recompute_modules.end()};
}

/// One point of the plan's grid: a candidate's parallel layout and training settings.
struct GridPoint {
  std::int64_t tp = 1, pp = 1, cp = 1, ep = 1, etp = 0, mb = 1, zero = 0;
  FsdpKind fsdp = FsdpKind::None;
  Fp8Format fp8 = Fp8Format::None;
  std::optional<std::int64_t> vpl, block;
  std::optional<std::uint8_t> modules;
  Recompute rc = Recompute::None;
  bool sp_asked = false, distopt = false, offload = false;
};

/// Whether the grid point is no candidate of its own: an offload without ZeRO, sequence
/// parallelism on one tensor-parallel rank, selective recomputation that recomputes nothing.
bool skipped(const PlanConfig& plan, const Scenario& base, const GridPoint& x) {
  if (x.offload && x.zero == 0) return true;  // DeepSpeed offloads ZeRO states
  // An NVLink domain across nodes (GB200 NVL72): Megatron's TP x CP groups and its expert
  // groups (ETP = TP here, x EP) stay inside it (models/system/collective_flows.h
  // nvlink_domain_ranks); a candidate whose groups would leave it is none.
  const SystemSpec& sys = cluster_system(base.cluster);
  if (sys.domain_gpus() > sys.gpus_per_node &&
      (x.tp * x.cp > sys.domain_gpus() || x.tp * x.ep > sys.domain_gpus()))
    return true;
  // Megatron turns sequence parallelism off on one tensor-parallel rank (arguments.py); at
  // TP 1 `true` is the run of `false`, enumerated once.
  if (x.sp_asked && x.tp == 1 &&
      std::find(plan.sequence_parallel.begin(), plan.sequence_parallel.end(), false) !=
          plan.sequence_parallel.end())
    return true;
  // With fused/flash attention selective recomputation of core_attn recomputes nothing
  // (models/builder/pipeline_pass.cpp): the same run as none, unless its recompute_modules
  // (the plan's, or the scenario's) name other modules.
  const bool flash_attention = runtime_spec(base.runtime).fused_attention_kernels &&
                               base.model.attention_backend != AttentionBackend::Unfused;
  const std::uint8_t recomputed_modules = x.modules ? *x.modules : base.parallel.recompute_modules;
  return x.rc == Recompute::Selective && flash_attention &&
         !(recomputed_modules & ~kRecomputeCoreAttn);
}

using Overrides = std::vector<std::pair<std::string, std::string>>;

/// The recomputation overrides of a candidate.
void set_recompute(const PlanConfig& plan, const Scenario& base, const GridPoint& x,
                   Overrides& out) {
  auto set = [&](const std::string& k, const std::string& v) { out.emplace_back(k, v); };
  set(key_of(&ParallelConfig::recompute_granularity), recompute_value(x.rc));
  // The scenario's recompute_modules (or the plan's) apply to its selective candidates.
  if (x.rc != Recompute::Selective) set(key_of(&ParallelConfig::recompute_modules), "null");
  if (x.modules)
    set(key_of(&ParallelConfig::recompute_modules), recompute_modules_yaml(*x.modules));
  // The scenario's full recomputation method and layer count go to its full candidates (or
  // the plan's block layer counts); the others take none (Megatron applies them to full
  // recomputation only).
  if (x.rc == Recompute::Full && !plan.recompute_num_layers.empty()) {
    set(key_of(&ParallelConfig::recompute_block), "block");
    set(key_of(&ParallelConfig::recompute_num_layers), std::to_string(*x.block));
  } else if (x.rc != Recompute::Full && base.parallel.recompute_granularity == Recompute::Full) {
    set(key_of(&ParallelConfig::recompute_block), "null");
    set(key_of(&ParallelConfig::recompute_num_layers), "null");
  }
}

/// The FSDP, FP8 and expert-TP overrides of a candidate: only where it differs from the
/// scenario (a plan that does not vary them writes the same overrides as before they existed).
void set_fsdp_and_fp8(const Scenario& base, const GridPoint& x, Overrides& out) {
  auto set = [&](const std::string& k, const std::string& v) { out.emplace_back(k, v); };
  const ParallelConfig& bp = base.parallel;
  if (x.fsdp != fsdp_kind(bp)) {
    set(key_of(&ParallelConfig::use_megatron_fsdp), x.fsdp == FsdpKind::Megatron ? "true" : "false");
    set(key_of(&ParallelConfig::use_torch_fsdp2), x.fsdp == FsdpKind::Torch ? "true" : "false");
  }
  if (x.fp8 != bp.fp8) {
    set(key_of(&ParallelConfig::fp8), x.fp8 == Fp8Format::None ? "null" : to_string(x.fp8));
    // The recipe and FP8 parameter gather exist only with FP8 (sections.cpp refuses them alone).
    if (x.fp8 == Fp8Format::None) {
      set(key_of(&ParallelConfig::fp8_recipe), "null");
      set(key_of(&ParallelConfig::fp8_param_gather), "null");
    }
  }
  if (x.etp > 0) set(key_of(&ParallelConfig::expert_tensor_parallel_size), std::to_string(x.etp));
}

/// The sequence-parallel, data-parallel and ZeRO overrides of a candidate.
void set_sharding(const Scenario& base, const GridPoint& x, bool sp, Overrides& out) {
  auto set = [&](const std::string& k, const std::string& v) { out.emplace_back(k, v); };
  set(key_of(&ParallelConfig::sequence_parallel), sp ? "true" : "false");
  // The scenario's TP communication overlap applies where it can (sequence parallelism on;
  // Megatron-LM refuses it otherwise).
  if (base.parallel.tp_comm_overlap && !(sp && x.tp > 1)) {
    set(key_of(&ParallelConfig::tp_comm_overlap), "false");
    set(key_of(&ParallelConfig::tp_comm_overlap_rs_ring), "null");
  }
  set(key_of(&ParallelConfig::use_distributed_optimizer), x.distopt ? "true" : "false");
  // FSDP shards over the candidate's own data-parallel x context-parallel group (the only
  // sharding trainsim models; the scenario's size is its own group's).
  if (base.parallel.uses_fsdp()) set(key_of(&ParallelConfig::fsdp_sharding_group_size), "null");
  // Likewise the parameter all-gather's overlap, where the candidate has that all-gather
  // (Megatron arguments.py refuses it otherwise).
  if (base.parallel.overlap_param_gather && !x.distopt && x.fsdp == FsdpKind::None)
    set(key_of(&ParallelConfig::overlap_param_gather), "false");
  set_fsdp_and_fp8(base, x, out);
  set(key_of(&ZeroConfig::stage), std::to_string(x.zero));
  set(key_of(&OffloadOptimizerConfig::enabled), x.offload ? "cpu" : "none");
  // The scenario's Twin-Flow ratio (or `auto`) applies where DeepSpeed takes it: a partial
  // ratio with ZeRO-3 only (zero/config.py offload_ratio_check), a full offload below; no
  // ratio without offload.
  const OffloadOptimizerConfig& bo = base.zero.offload_optimizer;
  const bool partial = bo.ratio_auto || bo.ratio < 1;
  if (!x.offload && bo.enabled)
    set(key_of(&OffloadOptimizerConfig::ratio), "null");
  else if (x.offload && x.zero < 3 && partial)
    set(key_of(&OffloadOptimizerConfig::ratio), "1.0");
}

/// The candidate of grid point `x`, the `index`-th of the enumeration.
PlanCandidate make_candidate(const PlanConfig& plan, const Scenario& base, const GridPoint& x,
                             std::size_t index, std::int64_t uniform_units) {
  const std::int64_t gpus = plan.max_gpus, gpn = base.cluster.gpus_per_node;
  const bool sp = x.sp_asked && x.tp > 1;
  PlanCandidate c;
  c.index = index;
  const std::int64_t model_parallel = x.tp * x.pp * x.cp;
  const std::int64_t dp = gpus % model_parallel == 0 ? gpus / model_parallel : 0;
  c.layout = describe(x.tp, x.pp, x.cp, dp, x.vpl, x.mb, x.rc, x.block, uniform_units, x.modules,
                      sp, x.zero, x.distopt, x.offload);
  if (x.ep > 1) c.layout += " ep" + std::to_string(x.ep);
  // The FSDP, FP8 and expert-TP choices are named where the plan varies them.
  if (plan.fsdp.size() > 1)
    c.layout += x.fsdp == FsdpKind::None ? " nofsdp" : std::string(" ") + to_string(x.fsdp);
  if (plan.fp8.size() > 1)
    c.layout += x.fp8 == Fp8Format::None ? " nofp8" : std::string(" fp8-") + to_string(x.fp8);
  if (plan.expert_tensor_parallel_size.size() > 1) c.layout += " etp" + std::to_string(x.etp);
  auto set = [&](const std::string& k, const std::string& v) { c.overrides.emplace_back(k, v); };
  set(key_of(&ClusterConfig::nodes), std::to_string(gpus / gpn));
  set(key_of(&ParallelConfig::tensor_model_parallel_size), std::to_string(x.tp));
  set(key_of(&ParallelConfig::pipeline_model_parallel_size), std::to_string(x.pp));
  set(key_of(&ParallelConfig::context_parallel_size), std::to_string(x.cp));
  set(key_of(&ParallelConfig::expert_model_parallel_size), std::to_string(x.ep));
  set(key_of(&ParallelConfig::num_layers_per_virtual_pipeline_stage),
      x.vpl ? std::to_string(*x.vpl) : "null");
  set(key_of(&ParallelConfig::pipeline_schedule), x.vpl ? "interleaved" : "1f1b");
  set(key_of(&ParallelConfig::micro_batch_size), std::to_string(x.mb));
  set_recompute(plan, base, x, c.overrides);
  set_sharding(base, x, sp, c.overrides);
  return c;
}

/// The sharding and precision dimensions of one candidate, the innermost loops of the
/// enumeration: ZeRO stage, distributed optimizer, FSDP, FP8 and expert TP.
struct ShardingChoice {
  std::int64_t zero = 0, etp = 0;
  bool distopt = false;
  FsdpKind fsdp = FsdpKind::None;
  Fp8Format fp8 = Fp8Format::None;
};

std::vector<ShardingChoice> sharding_choices(const PlanConfig& plan) {
  std::vector<ShardingChoice> out;
  for (std::int64_t zero : plan.zero_stage)
    for (bool distopt : plan.use_distributed_optimizer)
      for (FsdpKind fsdp : plan.fsdp)
        for (Fp8Format fp8 : plan.fp8)
          for (std::int64_t etp : plan.expert_tensor_parallel_size)
            out.push_back({zero, etp, distopt, fsdp, fp8});
  return out;
}

}  // namespace

std::vector<PlanCandidate> enumerate_candidates(const PlanConfig& plan, const ValidScenario& valid) {
  const Scenario& base = valid;
  std::vector<PlanCandidate> out;
  const std::int64_t split = split_layers(base.parallel, base.model.num_layers);
  const std::vector<bool> offload_choices =
      plan.allow_offload ? std::vector<bool>{false, true} : std::vector<bool>{false};
  // The scenario's own uniform units, which its full candidates keep (named in their layout).
  const std::int64_t uniform_units =
      base.parallel.recompute_granularity == Recompute::Full && !base.parallel.recompute_block
          ? base.parallel.recompute_num_layers
          : 1;
  const std::vector<ShardingChoice> sharding = sharding_choices(plan);
  GridPoint x;
  for (std::int64_t tp : plan.tensor_model_parallel_size)
    for (std::int64_t pp : plan.pipeline_model_parallel_size)
      for (std::int64_t cp : plan.context_parallel_size)
        for (std::int64_t ep : plan.expert_model_parallel_size)
          for (const auto& vpl : virtual_choices(plan, split, pp))
            for (std::int64_t mb : plan.micro_batch_size)
              for (Recompute rc : plan.recompute_granularity)
                for (const auto& block : block_choices(plan, base, rc))
                  for (const auto& modules : module_choices(plan, rc))
                    for (bool sp_asked : plan.sequence_parallel)
                      for (const ShardingChoice& sh : sharding)
                        for (bool offload : offload_choices) {
                          x = GridPoint{tp,  pp,     cp,    ep,      sh.etp,   mb,
                                        sh.zero, sh.fsdp, sh.fp8, vpl, block, modules,
                                        rc,  sp_asked, sh.distopt, offload};
                          if (!skipped(plan, base, x))
                            out.push_back(
                                make_candidate(plan, base, x, out.size(), uniform_units));
                        }
  return out;
}

double count_grid_points(const PlanConfig& plan, const ValidScenario& valid) {
  const Scenario& base = valid;
  // The loops of enumerate_candidates, multiplied: the choices that depend on an outer value
  // (virtual stages on pp, block and module sets on the granularity) are summed over it.
  const std::int64_t split = split_layers(base.parallel, base.model.num_layers);
  double per_pp = 0;
  for (std::int64_t pp : plan.pipeline_model_parallel_size)
    per_pp += double(virtual_choices(plan, split, pp).size());
  double per_rc = 0;
  for (Recompute rc : plan.recompute_granularity)
    per_rc += double(block_choices(plan, base, rc).size() * module_choices(plan, rc).size());
  return double(plan.tensor_model_parallel_size.size()) * per_pp *
         double(plan.context_parallel_size.size() * plan.expert_model_parallel_size.size()) *
         double(plan.micro_batch_size.size()) * per_rc *
         double(plan.sequence_parallel.size()) * double(sharding_choices(plan).size()) *
         (plan.allow_offload ? 2.0 : 1.0);
}

FsdpKind fsdp_kind(const ParallelConfig& p) {
  return p.use_megatron_fsdp ? FsdpKind::Megatron
         : p.use_torch_fsdp2 ? FsdpKind::Torch
                             : FsdpKind::None;
}

const char* to_string(FsdpKind f) {
  switch (f) {
    case FsdpKind::None:
      return "none";
    case FsdpKind::Megatron:
      return "megatron_fsdp";
    case FsdpKind::Torch:
      return "torch_fsdp2";
  }
  TRAINSIM_CHECK(false, "to_string: FsdpKind out of range");
  return "";
}

const char* to_string(PlanRejection r) {
  switch (r) {
    case PlanRejection::None:
      return "none";
    case PlanRejection::Invalid:
      return "invalid";
    case PlanRejection::OutOfMemory:
      return "out_of_memory";
    case PlanRejection::BelowCut:
      return "below_estimate_cut";
  }
  return "?";
}

// ------------------------------------------------------------------- stages
// (a) and (b)

std::int64_t reduced_microbatches(const ParallelConfig& p) {
  const std::int64_t pp = p.pipeline_model_parallel_size, nmb = p.num_microbatches;
  if (p.pipeline_schedule == PipelineSchedule::GPipe) return nmb;
  // 1F1B: stage 0 holds pp microbatches at the end of its warm-up, and again at the first
  // forward after its first backward, where the buffers that backward created (ZeRO-2/3 and
  // FSDP gradient buckets) are live too: pp + 1 microbatches reach it.
  if (p.pipeline_schedule == PipelineSchedule::OneFOneB) return std::min(nmb, pp + 1);
  // Interleaved (Megatron schedules.py): stage 0 warms up (pp - 1) * 2 + (v - 1) * pp chunks;
  // one more is in flight in the steady state, and one more runs after the first backward (as
  // above). Enough microbatches (a multiple of pp) that every stage reaches it.
  const std::int64_t v = p.virtual_pipeline_size;
  // With the EP overlap (overlap_moe_expert_parallel_comm) the warm-up is one chunk longer
  // (models/graph/pipeline_schedule.h combined_interleaved_order).
  const std::int64_t chunks =
      (pp - 1) * 2 + (v - 1) * pp + 2 + (p.overlap_moe_expert_parallel_comm ? 1 : 0);
  std::int64_t m = (chunks + v - 1) / v;
  m = (m + pp - 1) / pp * pp;
  return std::min(nmb, std::max(m, pp));
}

namespace {

/// Bandwidth the estimate gives a collective on `group`: NVLink inside a node;
/// across nodes the members of a node share their NICs (one per GPU,
/// rail-optimized), as the simulator's hierarchical rings do
/// (models/system/collective_flows.h, whose group_layout places the members).
double group_bandwidth(const CommGroup& g, const SystemSpec& sys, bool* intra,
                       std::int64_t* nodes, std::int64_t* members) {
  const GroupLayout layout = group_layout(g, sys.gpus_per_node);
  *intra = layout.nodes.size() <= 1;
  *nodes = std::int64_t(layout.nodes.size());
  std::int64_t k = sys.gpus_per_node;  // the fewest members on a node
  for (const auto& on_node : layout.members) k = std::min(k, std::int64_t(on_node.size()));
  *members = k;
  if (*intra) return sys.gpu.nvlink_bw_bytes_per_s;
  return std::min(sys.gpu.nvlink_bw_bytes_per_s, sys.nic_bw_bytes_per_s * double(k));
}

/// `sys.gpus_per_node` here is the ranks of one NVLink domain (estimate_from_graph).
double task_seconds(const ScheduleGraph& g, TaskId id, const CostModel& cm, const SystemSpec& sys) {
  const Task& t = g.task(id);
  const OpDesc& op = g.op(id);
  switch (t.kind) {
    case TaskKind::Compute:
    case TaskKind::OptimizerGpu:
    case TaskKind::OptimizerCpu:
      return cm.compute_time_s(op);
    case TaskKind::Collective:
    case TaskKind::Send:
    case TaskKind::Recv: {
      if (t.kind == TaskKind::Send) return 0;  // the receiver's side carries the message
      bool intra = true;
      std::int64_t nodes = 1, k = 1;
      double bw = sys.nic_bw_bytes_per_s;
      if (t.group != kNone) bw = group_bandwidth(g.group(t.group), sys, &intra, &nodes, &k);
      if (t.kind == TaskKind::Recv && t.peer >= 0)
        intra = t.peer / sys.gpus_per_node == std::int64_t(t.rank) / sys.gpus_per_node;
      if (t.kind == TaskKind::Recv)
        bw = intra ? sys.gpu.nvlink_bw_bytes_per_s : sys.nic_bw_bytes_per_s;
      const std::int64_t n = std::max<std::int64_t>(op.group_size, 1);
      if (t.kind == TaskKind::Collective && n > 1 && t.group != kNone &&
          (op.kind == OpKind::AllReduce || op.kind == OpKind::ReduceScatter ||
           op.kind == OpKind::AllGather)) {
        // As the simulator runs it (models/system/collective_flows.h): NCCL's algorithm and
        // protocol for this size and group (models/perf/nccl_model.h), its latency, and the
        // ring's bytes in the protocol's wire format over the group's links, no faster than
        // NCCL's bus bandwidth.
        const NcclChoice c = cm.nccl_collective(op.kind, double(op.bytes), n, nodes);
        const double eff = intra ? cm.nvlink_efficiency() : cm.network_efficiency();
        return c.latency_s +
               c.transfer_s(CostModel::ring_bytes_per_rank(op.kind, double(op.bytes), n), bw * eff);
      }
      if (t.kind == TaskKind::Collective && op.kind == OpKind::AllToAll && !intra &&
          t.group != kNone) {
        // As the simulator runs it (models/system/collective_flows.h): (k-1)/n of the buffer to
        // the node's peers over NVLink while (n-k)/n leaves the node on the rank's own NIC, k
        // members a node; the slower of the two.
        const double b = double(op.bytes), nd = double(n);
        const double nvlink_s = b * double(k - 1) / nd /
                                (sys.gpu.nvlink_bw_bytes_per_s * cm.nvlink_efficiency());
        const double nic_s =
            b * double(n - k) / nd / (sys.nic_bw_bytes_per_s * cm.network_efficiency());
        return cm.collective_latency_s(op.kind, n, false) + std::max(nvlink_s, nic_s);
      }
      return cm.collective_time_s(op.kind, double(op.bytes), n, bw, intra);
    }
    case TaskKind::CopyH2D:
    case TaskKind::CopyD2H:
      // Over NVLink-C2C on Grace systems (sim/platform.cpp), PCIe otherwise.
      return double(op.bytes) /
             ((sys.host_c2c ? sys.c2c_bw_bytes_per_s : sys.gpu.pcie_bw_bytes_per_s) *
              cm.pcie_efficiency());
  }
  return 0;
}

/// The pipeline's closed form over per-stage times of one microbatch (f_s) and
/// the tail after the last backward (gradient sync, optimizer): (nmb - 1) * max
/// f + sum f / v for 1F1B and interleaving (Narayanan et al. SC'21 Sec. 2.2:
/// bubble (p - 1) / v of a microbatch time), nmb * max f + sum f - max f for
/// GPipe; plus the slowest tail.
double estimate_from_graph(const ScheduleGraph& g, const Scenario& sc, const CostModel& cm,
                           const SystemSpec& node_sys) {
  // The collectives' layout over NVLink domains, as the simulator places them (a node's
  // GPUs on a DGX; several trays' on GB200 NVL72: collective_flows.h nvlink_domain_ranks).
  SystemSpec sys = node_sys;
  sys.gpus_per_node = int(nvlink_domain_ranks(sc, node_sys));
  const ParallelConfig& p = sc.parallel;
  // ZeRO-2/3 and FSDP synchronise every microbatch: ZeRO-3's and FSDP's parameter gathers in
  // both passes and the gradient reduce-scatters of stages 2/3 (models/builder/dp_zero3.cpp,
  // zero_buckets.h), and with an offloaded optimizer the copies of each reduced bucket to the
  // host (offload.h). The builder files them under no microbatch; they belong to the
  // microbatches' work, the rest of what has no microbatch (the optimizer, the parameters'
  // copies back, stage 0/1 gradient reductions) to the tail.
  const bool synced_per_microbatch = sc.zero.stage >= 2 || p.uses_fsdp();
  const double reduced = double(reduced_microbatches(p));
  const auto& deps = g.dependencies();
  std::vector<double> ready(g.num_tasks(), 0.0);
  double max_f = 0, sum_f = 0, max_tail = 0;
  for (RankId r : g.simulated_ranks()) {
    // The rank's microbatches as its streams run them with nothing to wait for from other
    // ranks: each task starts when its same-rank predecessors (stream order included) are
    // done, so a prefetched gather overlaps the block before the one that needs it, and a
    // gather longer than that block delays the next. f: that makespan over the reduced count.
    double end = 0, tail = 0;
    for (TaskId id : g.tasks_of_rank(r)) {
      const Task& t = g.task(id);
      const bool synced =
          synced_per_microbatch &&
          ((t.stream == StreamId::DpComm &&
            (t.phase == Phase::ParamSync || t.phase == Phase::GradSync)) ||
           (t.phase == Phase::Offload && t.part == Part::Gradients));
      if (t.microbatch == kNoIndex && !synced) {
        tail += task_seconds(g, id, cm, sys);
        continue;
      }
      const double finish = ready[id] + task_seconds(g, id, cm, sys);
      end = std::max(end, finish);
      for (auto e : boost::make_iterator_range(boost::out_edges(id, deps))) {
        const TaskId u = TaskId(boost::target(e, deps));
        if (g.task(u).rank == r) ready[u] = std::max(ready[u], finish);
      }
    }
    const double f = end / reduced;
    max_f = std::max(max_f, f);
    sum_f += f;
    max_tail = std::max(max_tail, tail);
  }
  const double nmb = double(p.num_microbatches), v = double(p.virtual_pipeline_size);
  const double pipe = p.pipeline_schedule == PipelineSchedule::GPipe
                          ? nmb * max_f + sum_f - max_f
                          : (nmb - 1) * max_f + sum_f / v + max_f * (1 - 1 / v);
  return pipe + max_tail;
}

}  // namespace

CandidateEstimate estimate_candidate(
    const std::string& scenario_path,
    const std::vector<std::pair<std::string, std::string>>& base_overrides,
    const PlanCandidate& candidate, double memory_headroom,
    const std::string& calibration_path) {
  CandidateEstimate e;
  RunRequest req;
  req.purpose = RunPurpose::Simulate;
  req.scenario_path = scenario_path;
  req.overrides = base_overrides;
  req.overrides.insert(req.overrides.end(), candidate.overrides.begin(),
                       candidate.overrides.end());
  req.calibration_path = calibration_path;
  std::optional<PreparedRun> prepared;
  try {
    // The system, cost model's system and profile the candidate's simulation would use.
    prepared.emplace(prepare_platform(req));
  } catch (const InputError& err) {
    e.rejection = PlanRejection::Invalid;
    e.reason = err.what();
    return e;
  }
  const PreparedRun& run = *prepared;
  const Scenario& sc = run.scenario;
  const SystemSpec& sys = run.system;
  e.world_size = sc.world_size();
  Scenario fewer = sc;
  fewer.parallel.global_batch_size = reduced_microbatches(sc.parallel) *
                                     sc.parallel.micro_batch_size *
                                     sc.parallel.data_parallel_size;
  // Validated again: the microbatch count is derived from the changed global batch.
  ValidScenario reduced = validated(std::move(fewer));
  if (reduced->zero.offload_optimizer.ratio_auto)
    resolve_offload_ratio(reduced, sys, run.profile);
  BuildOptions opt;
  opt.fold = sc.parallel.tensor_model_parallel_size * sc.parallel.data_parallel_size *
                 sc.parallel.context_parallel_size >
             1;
  opt.calibration = &run.profile;
  const ScheduleGraph g = build_schedule_graph(reduced, sys, opt);
  e.peak_memory_bytes = program_order_peak_gpu_bytes(g);
  e.memory_capacity_bytes = std::int64_t(sys.gpu.hbm_bytes);
  if (double(e.peak_memory_bytes) > sys.gpu.hbm_bytes * (1.0 - memory_headroom)) {
    e.rejection = PlanRejection::OutOfMemory;
    std::ostringstream o;
    o.precision(1);
    o << std::fixed << "peak " << double(e.peak_memory_bytes) / 1e9 << " GB > "
      << sys.gpu.hbm_bytes * (1.0 - memory_headroom) / 1e9 << " GB usable";
    e.reason = o.str();
    return e;
  }
  // The collectives as the simulation runs them: the scenario's NCCL release and NVLS switch,
  // the GPUs per node it uses (prepare_platform's cost_system).
  const CostModel cm = run.cost_model();
  // The reduced graph has the full run's per-microbatch work; scale the
  // microbatch count.
  e.estimate_iteration_s = estimate_from_graph(g, sc, cm, run.cost_system);
  e.estimate_tokens_per_s =
      double(sc.parallel.global_batch_size) * double(sc.model.seq_length) / e.estimate_iteration_s;
  return e;
}

PlanObjective parse_plan_objective(const std::string& name) {
  for (PlanObjective o : {PlanObjective::TokensPerS, PlanObjective::Goodput, PlanObjective::Cost})
    if (name == to_string(o)) return o;
  throw InputError("plan --objective '" + name + "': expected tokens_per_s, goodput or cost");
}

const char* to_string(PlanObjective objective) {
  switch (objective) {
    case PlanObjective::TokensPerS: return "tokens_per_s";
    case PlanObjective::Goodput: return "goodput";
    case PlanObjective::Cost: return "cost";
  }
  return "?";
}

void rank_results(std::vector<CandidateResult>& results, PlanObjective objective) {
  constexpr double kNone = std::numeric_limits<double>::infinity();
  std::stable_sort(
      results.begin(), results.end(),
      [objective](const CandidateResult& a, const CandidateResult& b) {
        auto key = [objective](const CandidateResult& r) {
          const bool ok = r.simulated && r.error.empty() && !r.oom;
          const double tokens = ok ? r.tokens_per_s : r.estimate.estimate_tokens_per_s;
          // The objective as a figure to minimise; a candidate without it after the others.
          double primary = -tokens;
          if (objective == PlanObjective::Goodput) primary = r.goodput ? -*r.goodput : kNone;
          if (objective == PlanObjective::Cost) primary = r.cost_usd ? *r.cost_usd : kNone;
          return std::make_tuple(ok ? 0 : 1, primary, -tokens, r.peak_memory_bytes,
                                 r.candidate.index);
        };
        return key(a) < key(b);
      });
}

}  // namespace trainsim
