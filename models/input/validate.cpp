// validate_scenario (models/input/scenario.h): the checks of a whole scenario after its
// sections are read (or of a scenario built in code): sizes and their bounds, Megatron's
// defaults, the tensor/pipeline/context/expert plan, the runtime's features, ZeRO and offload.
// Every refusal is an InputError naming the file, the fields and their values.
#include <algorithm>
#include <cstdio>
#include <limits>
#include <sstream>
#include <string>
#include <utility>

#include "models/hardware/hardware.h"
#include "models/input/keys.h"
#include "models/input/pipeline_layout.h"
#include "models/input/runtime.h"
#include "models/input/scenario.h"
#include "models/input/validate_checks.h"

namespace trainsim {

using input::limit_text;

namespace {

/// Bounds of a pipeline layout string once unrolled (hostile input stays bounded).
constexpr std::int64_t kLayoutStages = 1 << 16, kLayoutSymbols = 1 << 20;

std::string where_prefix(const Scenario& s) {
  return (s.source_path.empty() ? std::string("<scenario>") : s.source_path) + ": ";
}

using validate_detail::kv;
using validate_detail::kv_bool;

// 128-bit products of values already within their per-key bounds (< 2^31 each, at most four
// factors): exact, so the derived bounds below are checked before any 64-bit product is formed.
using Wide = __int128;

std::string show_wide(Wide v) {
  if (v <= std::numeric_limits<std::int64_t>::max()) return std::to_string(std::int64_t(v));
  std::ostringstream o;
  o.precision(3);
  o << static_cast<long double>(v);
  return o.str();
}

template <typename Fail>
void check_derived_sizes(const Scenario& s, const Fail& fail) {
  const ModelConfig& m = s.model;
  const ParallelConfig& p = s.parallel;
  const Wide L = m.num_layers, h = m.hidden_size, a = m.num_attention_heads, kvc = m.kv_channels,
             f = m.ffn_hidden_size, sq = m.seq_length, V = m.padded_vocab_size,
             b = p.micro_batch_size;
  // Parameters, models/memory/memory_model.cpp total_params (tp = 1), untied output layer included.
  const Wide ad = a * kvc;
  Wide attn = h * 3 * ad + 3 * ad + ad * h + h;
  if (m.multi_latent_attention) {  // memory_model.cpp mla_weights_per_rank, norms included
    const Wide lq = m.q_lora_rank, lkv = m.kv_lora_rank, dr = m.qk_pos_emb_head_dim,
               dn = m.qk_head_dim, dv = m.v_head_dim;
    attn = (lq > 0 ? h * lq + lq * a * kvc + 2 * lq : h * a * kvc) + h * (lkv + dr) +
           lkv * a * (dn + dv) + 2 * lkv + a * dv * h + h;
  }
  const Wide layer = attn + h * f + f + f * h + h + 4 * h;
  const Wide params = L * layer + 2 * V * h + sq * h + 2 * h;
  if (params > kMaxScenarioParameters)
    fail("the model has " + show_wide(params) + " parameters (from " +
         kv(key_of(&ModelConfig::num_layers), m.num_layers) + ", " +
         kv(key_of(&ModelConfig::hidden_size), m.hidden_size) + ", " +
         kv(key_of(&ModelConfig::ffn_hidden_size), m.ffn_hidden_size) + ", " +
         kv(key_of(&ModelConfig::num_attention_heads), m.num_attention_heads) + " x " +
         kv(key_of(&ModelConfig::kv_channels), m.kv_channels) + ", " +
         kv(key_of(&ModelConfig::padded_vocab_size), m.padded_vocab_size) +
         "), above trainsim's bound of 2^50 (models/input/scenario.h kMaxScenarioParameters)");
  // Activation bytes of one layer and one microbatch, fp32 upper bound of
  // models/memory/memory_model.cpp (34 sbh + 5 a s^2 b at 2 bytes; here 4-byte values and masks:
  // 60 sbh + 12 a s^2 b) plus the fp32 logits (4 s b V), times every layer and microbatch.
  const Wide sbh = sq * b * h;
  Wide act_layer = 60 * sbh + 12 * a * sq * sq * b + 4 * sq * b * V;
  // MLA's per-head tensors (q, k of qk_head_dim + qk_pos_emb_head_dim, v and the output of
  // v_head_dim, their copies) and its latents, 4-byte values.
  if (m.multi_latent_attention)
    act_layer +=
        4 * sq * b *
        (3 * a * (kvc + Wide(m.v_head_dim)) + 3 * (Wide(m.q_lora_rank) + Wide(m.kv_lora_rank)));
  const Wide act_all = act_layer * L * p.num_microbatches;
  if (act_all > kMaxScenarioActivationBytes)
    fail("activations of " + show_wide(act_all) +
         " bytes (one layer of one microbatch: " + show_wide(act_layer) + " bytes from " +
         kv(key_of(&ModelConfig::seq_length), m.seq_length) + " x " +
         kv(key_of(&ParallelConfig::micro_batch_size), p.micro_batch_size) + " x " +
         kv(key_of(&ModelConfig::hidden_size), m.hidden_size) + " and " +
         kv(key_of(&ModelConfig::num_attention_heads), m.num_attention_heads) + ", times " +
         kv(key_of(&ModelConfig::num_layers), m.num_layers) + " x " +
         std::to_string(p.num_microbatches) +
         " microbatches) exceed trainsim's bound of 2^60 bytes "
         "(models/input/scenario.h kMaxScenarioActivationBytes)");
  const Wide tokens = Wide(p.global_batch_size) * sq;
  if (tokens > kMaxScenarioTokensPerIteration)
    fail(show_wide(tokens) + " tokens per iteration (" +
         kv(key_of(&ParallelConfig::global_batch_size), p.global_batch_size) + " x " +
         kv(key_of(&ModelConfig::seq_length), m.seq_length) +
         ") exceed trainsim's bound of 2^40 (models/input/scenario.h "
         "kMaxScenarioTokensPerIteration)");
}

/// The cluster's NICs must fit the system's fat tree, with the NIC numbering of sim/platform.cpp
/// (PlatformModel::fabric_endpoint: rail-optimized, a leaf holds NIC `nic` of m1 consecutive
/// nodes). Checked here so that the refusal names the file and cluster.nodes.
template <typename Fail>
void check_fabric_capacity(const Scenario& s, const SystemSpec& sys, const Fail& fail) {
  if (sys.switch_radix < 2 || sys.fat_tree_levels < 1 || sys.nics_per_node < 1) return;
  const Wide rails = sys.nics_per_node;
  Wide capacity = 1, m1 = 1;
  for (int l = 1; l <= sys.fat_tree_levels; ++l) {
    capacity *= Wide(fat_tree_down_ports(sys, l));  // oversubscribed tiers included
    if (l == 1) m1 = capacity;
    if (capacity > (Wide(1) << 62)) return;  // more ports than any bounded cluster needs
  }
  auto needed = [&](Wide nodes) {
    const Wide node = nodes - 1, nic = rails - 1;
    if (sys.fat_tree_levels == 1 || !sys.rail_optimized) return node * rails + nic + 1;
    return (node / m1) * (m1 * rails) + nic * m1 + node % m1 + 1;
  };
  if (needed(s.cluster.nodes) <= capacity) return;
  std::int64_t lo = 0, hi = s.cluster.nodes;  // largest count that fits: needed(lo) <= capacity
  while (hi - lo > 1) {
    const std::int64_t mid = lo + (hi - lo) / 2;
    (needed(mid) <= capacity ? lo : hi) = mid;
  }
  fail("field 'cluster.nodes' = " + std::to_string(s.cluster.nodes) + " (" +
       std::to_string(s.world_size()) + " GPUs): the " + std::to_string(s.cluster.nodes) +
       " nodes x " + std::to_string(sys.nics_per_node) + " NICs do not fit system '" + sys.name +
       "' (a fat tree of " + std::to_string(sys.fat_tree_levels) + " levels of radix-" +
       std::to_string(sys.switch_radix) + " switches, " + show_wide(capacity) +
       " NIC ports); at most " + std::to_string(lo) + " nodes fit");
}

/// Every size positive and within its bound (models/input/scenario.h); parse_scenario checks these
/// first with line numbers, scenarios built in code land here.
template <typename Fail>
void check_sizes(Scenario& s, const Fail& fail) {
  ModelConfig& m = s.model;
  // Sizes (parse_scenario checks these with line numbers; scenarios built in code land here):
  // each integer key with a bound (models/input/keys.h) must be positive (where the table says
  // so) and within its bound (models/input/scenario.h).
  struct Size {
    const char* field;
    std::int64_t value;
    bool positive;
  };
  std::vector<Size> sizes;
  for (const ScenarioKey& k : scenario_keys()) {
    if (k.max <= 0 || !k.field.address) continue;
    void* at = k.field.address(s);
    if (k.field.kind == FieldKind::Int64)
      sizes.push_back({k.path.c_str(), *static_cast<std::int64_t*>(at), k.positive()});
    else if (k.field.kind == FieldKind::OptInt64)
      sizes.push_back(
          {k.path.c_str(), static_cast<std::optional<std::int64_t>*>(at)->value_or(0), false});
  }
  for (const Size& x : sizes)
    if (x.positive && x.value <= 0) fail(kv(x.field, x.value) + " must be positive");
  for (const Size& x : sizes)
    if (x.value > scenario_size_limit(x.field))
      fail("field '" + std::string(x.field) + "' = " + std::to_string(x.value) + ": " +
           limit_text(x.field, scenario_size_limit(x.field)));
  if (m.ffn_hidden_size < 0)
    fail(kv(key_of(&ModelConfig::ffn_hidden_size), m.ffn_hidden_size) + " must be >= 0");
  if (m.kv_channels < 0)
    fail(kv(key_of(&ModelConfig::kv_channels), m.kv_channels) + " must be >= 0");
  for (const Size& x : sizes)
    if (!x.positive && x.value < 0) fail(kv(x.field, x.value) + " must be >= 0");
  if (s.cluster.gpus_per_node < 0)
    fail(kv(key_of(&ClusterConfig::gpus_per_node), s.cluster.gpus_per_node) + " must be >= 0");
}

/// Megatron's defaults (ffn_hidden_size = 4h, kv_channels = h / a) and the cluster's system.
template <typename Fail>
void fill_defaults_and_system(Scenario& s, const Fail& fail) {
  ModelConfig& m = s.model;
  // Defaults (Megatron: ffn_hidden_size = 4h, kv_channels = h / a).
  if (m.ffn_hidden_size == 0) m.ffn_hidden_size = 4 * m.hidden_size;
  if (m.multi_latent_attention) {
    // The query/key head dimension (MLASelfAttention q_head_dim); kv_channels is not read.
    const std::int64_t qk = m.qk_head_dim + m.qk_pos_emb_head_dim;
    if (m.kv_channels != 0 && m.kv_channels != qk)
      fail(kv(key_of(&ModelConfig::kv_channels), m.kv_channels) +
           " with model.multi_latent_attention: the head dimensions are model.qk_head_dim + "
           "model.qk_pos_emb_head_dim and model.v_head_dim; remove it");
    if (m.num_query_groups != 0 && m.num_query_groups != m.num_attention_heads)
      fail(kv(key_of(&ModelConfig::num_query_groups), m.num_query_groups) +
           " with model.multi_latent_attention: Megatron-LM asserts \"Group query attention is "
           "mutually exclusive with multi latent attention\" (arguments.py)");
    m.kv_channels = qk;
  }
  if (m.kv_channels == 0) {
    // Megatron's arguments.py asserts this when --kv-channels is not given.
    if (m.hidden_size % m.num_attention_heads != 0)
      fail(kv(key_of(&ModelConfig::hidden_size), m.hidden_size) + " is not divisible by " +
           kv(key_of(&ModelConfig::num_attention_heads), m.num_attention_heads) +
           " (needed for the default kv_channels = hidden / heads; set model.kv_channels)");
    m.kv_channels = m.hidden_size / m.num_attention_heads;
  }
  if (m.num_query_groups == 0) m.num_query_groups = m.num_attention_heads;
  if (m.moe_ffn_hidden_size == 0) m.moe_ffn_hidden_size = m.ffn_hidden_size;
  ParallelConfig& p = s.parallel;
  // Megatron-LM accepts --expert-tensor-parallel-size 1 on a dense model (no expert reads it):
  // read as absent, and noted.
  if (!m.is_moe() && p.expert_tensor_parallel_size == 1 && p.tensor_model_parallel_size != 1) {
    s.notes.push_back("ignored: " + key_of(&ParallelConfig::expert_tensor_parallel_size) +
                      " (1 on a dense model: no experts)");
    p.expert_tensor_parallel_size = 0;
  }
  if (p.expert_tensor_parallel_size == 0)
    p.expert_tensor_parallel_size = p.tensor_model_parallel_size;
  const SystemSpec* sys = nullptr;
  try {
    sys = &cluster_system(s.cluster);
  } catch (const InputError& e) {
    fail("field 'cluster.system' = '" + s.cluster.system + "': " + e.what());
  }
  if (s.cluster.gpus_per_node == 0) s.cluster.gpus_per_node = sys->gpus_per_node;
  if (s.parallel.fp8 != Fp8Format::None && !(sys->gpu.peak_dense_fp8_flops > 0))
    fail(std::string("parallel.fp8 (") + to_string(s.parallel.fp8) + ") on cluster.system '" +
         s.cluster.system + "': its " + sys->gpu.name +
         " has no FP8 tensor cores (FP8 needs Hopper or newer, "
         "e.g. dgx-h100)");
  // NCCL supports compute capability 100 from v2.25 on (its Blackwell rows, nccl_model.h).
  if (sys->gpu.compute_capability >= 100 && s.nccl_version == NcclVersion::V2_18_5)
    fail(std::string("nccl_version (") + to_string(s.nccl_version) + ") on cluster.system '" +
         s.cluster.system + "': NCCL 2.18.5 predates Blackwell (compute capability 100 needs "
         "NCCL 2.25 or later); use nccl_version 2.29.7");
  if (s.cluster.gpus_per_node > sys->gpus_per_node)
    fail(kv(key_of(&ClusterConfig::gpus_per_node), s.cluster.gpus_per_node) + " exceeds the " +
         std::to_string(sys->gpus_per_node) + " GPUs of a " + s.cluster.system + " node");
  // An NVLink domain across nodes (GB200 NVL72's 18 trays of 4) joins whole trays: a partial
  // tray would leave the domain's NVSwitch layout undefined (docs/cluster.md, NVLink domains).
  if (sys->domain_gpus() > sys->gpus_per_node && s.cluster.gpus_per_node != sys->gpus_per_node)
    fail(kv(key_of(&ClusterConfig::gpus_per_node), s.cluster.gpus_per_node) + " on " +
         s.cluster.system + ", whose NVLink domain of " + std::to_string(sys->domain_gpus()) +
         " GPUs spans nodes: only whole nodes of " + std::to_string(sys->gpus_per_node) +
         " GPUs are modelled");
  check_fabric_capacity(s, *sys, fail);
}

/// Tensor parallelism (Megatron splits heads, hidden/ffn columns, vocabulary, and with
/// sequence parallelism the sequence), then world = TP x PP x DP and the microbatch count.
template <typename Fail>
void check_tp_and_batch(Scenario& s, const Fail& fail) {
  ModelConfig& m = s.model;
  ParallelConfig& p = s.parallel;
  // Tensor parallelism: Megatron splits heads, the hidden/ffn columns and the vocabulary.
  const std::int64_t tp = p.tensor_model_parallel_size;
  const std::string tps = kv(key_of(&ParallelConfig::tensor_model_parallel_size), tp);
  const std::pair<const char*, std::int64_t> split_by_tp[] = {
      {"model.num_attention_heads", m.num_attention_heads},
      {"model.hidden_size", m.hidden_size},
      {"model.ffn_hidden_size", m.ffn_hidden_size},
      {"model.padded_vocab_size", m.padded_vocab_size}};
  for (const auto& [field, value] : split_by_tp)
    if (value % tp != 0) fail(kv(field, value) + " is not divisible by " + tps);
  // GQA: query heads in groups; Megatron-Core splits the groups over TP (attention.py
  // num_query_groups_per_partition = divide(num_query_groups, tp)).
  if (m.num_attention_heads % m.num_query_groups != 0)
    fail(kv(key_of(&ModelConfig::num_attention_heads), m.num_attention_heads) +
         " is not divisible by " + kv(key_of(&ModelConfig::num_query_groups), m.num_query_groups));
  if (m.num_query_groups % tp != 0)
    fail(kv(key_of(&ModelConfig::num_query_groups), m.num_query_groups) + " is not divisible by " +
         tps);
  if (p.tp_comm_overlap && !p.sequence_parallel)
    fail(
        "parallel.tp_comm_overlap (true) needs parallel.sequence_parallel: true (Megatron-LM "
        "arguments.py: the tensor-parallel communication/GEMM overlap happens only with "
        "sequence parallelism)");
  if (p.sequence_parallel) {
    if (tp == 1)
      fail("parallel.sequence_parallel (true) needs " + tps +
           " > 1 (Megatron turns sequence parallelism off with a single tensor-parallel rank)");
    if (m.seq_length % tp != 0)
      fail(kv(key_of(&ModelConfig::seq_length), m.seq_length) + " is not divisible by " + tps +
           " (sequence parallelism splits the sequence)");
  }

  // World = TP x CP x PP x DP (Megatron-Core parallel_state: order tp-cp-ep-dp-pp).
  const std::int64_t pp = p.pipeline_model_parallel_size, cp = p.context_parallel_size;
  const std::string pps = kv(key_of(&ParallelConfig::pipeline_model_parallel_size), pp);
  const std::string cps =
      cp > 1 ? " x " + kv(key_of(&ParallelConfig::context_parallel_size), cp) : "";
  const std::int64_t world = s.world_size();
  if (world % (tp * cp * pp) != 0)
    fail(tps + cps + " x " + pps + " = " + std::to_string(tp * cp * pp) + " does not divide the " +
         std::to_string(world) + " GPUs of " + kv(key_of(&ClusterConfig::nodes), s.cluster.nodes) +
         " x " + kv(key_of(&ClusterConfig::gpus_per_node), s.cluster.gpus_per_node));
  p.data_parallel_size = world / (tp * cp * pp);
  const std::int64_t dp = p.data_parallel_size;

  // Batch: global = micro x DP x microbatches.
  if (p.global_batch_size % (p.micro_batch_size * dp) != 0)
    fail(kv(key_of(&ParallelConfig::global_batch_size), p.global_batch_size) +
         " is not divisible by " +
         kv(key_of(&ParallelConfig::micro_batch_size), p.micro_batch_size) +
         " x data-parallel size (" + std::to_string(dp) +
         ") = " + std::to_string(p.micro_batch_size * dp));
  p.num_microbatches = p.global_batch_size / (p.micro_batch_size * dp);
  // The schedule graph numbers microbatches in 16 bits (models/builder/graph_builder.h).
  if (p.num_microbatches > kMaxScenarioMicrobatches)
    fail("the number of microbatches per iteration (" + std::to_string(p.num_microbatches) + " = " +
         kv(key_of(&ParallelConfig::global_batch_size), p.global_batch_size) + " / (" +
         kv(key_of(&ParallelConfig::micro_batch_size), p.micro_batch_size) +
         " x data-parallel size " + std::to_string(dp) + ")) exceeds trainsim's bound of " +
         std::to_string(kMaxScenarioMicrobatches) +
         " (models/input/scenario.h); raise micro_batch_size or lower global_batch_size");
  check_derived_sizes(s, fail);
}

/// Megatron-Core's layer split (megatron/core/transformer/transformer_block.py
/// get_num_layers_to_build, transformer_config.py): layers per virtual stage, or an error.
///  - decoder_first/last_pipeline_num_layers: those stages hold that many layers, the other
///    stages split the rest evenly; each stage's layers split evenly over its chunks;
///  - account_for_embedding/loss_in_pipeline_split: the embedding (loss) counts as one layer
///    of the first (last) virtual stage, and the total splits evenly over pp x vp;
///  - else num_layers / (pp x vp) each.
/// vp is num_layers (plus the accounted embedding and loss) / pp / layers per virtual stage.
template <typename Fail>
void split_layers(Scenario& s, const Fail& fail) {
  ModelConfig& m = s.model;
  ParallelConfig& p = s.parallel;
  const std::int64_t pp = p.pipeline_model_parallel_size, L = m.num_layers;
  const std::string pps = kv(key_of(&ParallelConfig::pipeline_model_parallel_size), pp);
  const auto first = p.decoder_first_pipeline_num_layers, last = p.decoder_last_pipeline_num_layers;
  const std::int64_t extra = (p.account_for_embedding_in_pipeline_split ? 1 : 0) +
                             (p.account_for_loss_in_pipeline_split ? 1 : 0);
  if ((first || last) && extra > 0)
    fail(
        "parallel.decoder_first/last_pipeline_num_layers and account_for_*_in_pipeline_split "
        "are both set; Megatron-Core accepts one way of an uneven split");
  // Layers (slots) per pipeline stage.
  std::vector<std::int64_t> stage(std::size_t(pp), 0);
  if (first || last) {
    if (pp == 1)
      fail("an uneven split (parallel.decoder_*_pipeline_num_layers) needs " + pps + " > 1");
    const std::int64_t f = first.value_or(-1), l = last.value_or(-1);
    const std::int64_t fixed = (first ? f : 0) + (last ? l : 0);
    const std::int64_t rest_stages = pp - (first ? 1 : 0) - (last ? 1 : 0);
    if (fixed > L || (rest_stages == 0 && fixed != L))
      fail(kv(key_of(&ParallelConfig::decoder_first_pipeline_num_layers), first.value_or(0)) +
           " and " +
           kv(key_of(&ParallelConfig::decoder_last_pipeline_num_layers), last.value_or(0)) +
           " do not fit " + kv(key_of(&ModelConfig::num_layers), L) + " over " + pps);
    if (rest_stages > 0 && (L - fixed) % rest_stages != 0)
      fail("the " + std::to_string(L - fixed) +
           " layers left by parallel.decoder_first/last_"
           "pipeline_num_layers are not divisible by the other " +
           std::to_string(rest_stages) + " pipeline stages");
    for (std::int64_t i = 0; i < pp; ++i)
      stage[std::size_t(i)] = rest_stages > 0 ? (L - fixed) / rest_stages : 0;
    if (first) stage.front() = f;
    if (last) stage.back() = l;
  } else {
    if ((L + extra) % pp != 0)
      fail(kv(key_of(&ModelConfig::num_layers), L) +
           (extra ? " + " + std::to_string(extra) + " (embedding/loss accounted as layers)"
                  : std::string()) +
           " is not divisible by " + pps);
    for (auto& n : stage) n = (L + extra) / pp;
  }
  p.virtual_pipeline_size = 1;
  if (p.num_layers_per_virtual_pipeline_stage) {
    const std::int64_t vpl = *p.num_layers_per_virtual_pipeline_stage;
    const std::string vps = kv(key_of(&ParallelConfig::num_layers_per_virtual_pipeline_stage), vpl);
    const std::int64_t per_stage = (first || last) ? stage[std::size_t(pp / 2)] : stage.front();
    if (!first && !last && extra == 0 && L % (pp * vpl) != 0)
      fail(kv(key_of(&ModelConfig::num_layers), L) + " is not divisible by " + pps + " x " + vps +
           " = " + std::to_string(pp * vpl));
    if (per_stage % vpl != 0)
      fail(std::to_string(per_stage) + " layers per pipeline stage are not divisible by " + vps);
    p.virtual_pipeline_size = per_stage / vpl;
  }
  const std::int64_t vp = p.virtual_pipeline_size;
  p.virtual_stage_layers.assign(std::size_t(pp * vp), 0);
  for (std::int64_t i = 0; i < pp; ++i) {
    if (stage[std::size_t(i)] % vp != 0)
      fail("pipeline stage " + std::to_string(i) + " holds " +
           std::to_string(stage[std::size_t(i)]) + " layers, not divisible by its " +
           std::to_string(vp) + " virtual stages");
    for (std::int64_t c = 0; c < vp; ++c)
      p.virtual_stage_layers[std::size_t(c * pp + i)] = stage[std::size_t(i)] / vp;
  }
  if (p.account_for_embedding_in_pipeline_split) --p.virtual_stage_layers.front();
  if (p.account_for_loss_in_pipeline_split) --p.virtual_stage_layers.back();
  for (std::int64_t n : p.virtual_stage_layers)
    if (n < 0 || (n == 0 && extra == 0 && !first && !last))
      fail("the split leaves a virtual stage without layers (" +
           kv(key_of(&ModelConfig::num_layers), L) + ", " + pps + ")");
  p.layers_per_chunk = p.virtual_stage_layers.front();
  // Even splits keep the vector empty: the uniform layers_per_chunk says the same.
  bool even = true;
  for (std::int64_t n : p.virtual_stage_layers) even = even && n == p.layers_per_chunk;
  if (even) p.virtual_stage_layers.clear();
}

/// Megatron-Core's hand-written layout (parallel.pipeline_model_parallel_layout,
/// pipeline_parallel_layer_layout.py): the virtual stages and their decoder layers, checked as
/// PipelineParallelLayerLayout.validate_layer_layout checks them (the embedding first and the
/// loss last, each once; num_layers decoder layers; mtp_num_layers MTP layers m; the stages a
/// multiple of pp). Refused: MTP layers outside the last virtual stage, an embedding outside
/// the first virtual stage or a loss outside the last (trainsim builds them there), and the
/// other ways of splitting (Megatron takes the layout alone).
template <typename Fail>
void split_by_layout(Scenario& s, const Fail& fail) {
  ParallelConfig& p = s.parallel;
  const std::int64_t pp = p.pipeline_model_parallel_size;
  const std::string shown = "field '" + key_of(&ParallelConfig::pipeline_model_parallel_layout) +
                            "' = '" + p.pipeline_model_parallel_layout + "'";
  if (p.num_layers_per_virtual_pipeline_stage || p.decoder_first_pipeline_num_layers ||
      p.decoder_last_pipeline_num_layers || p.account_for_embedding_in_pipeline_split ||
      p.account_for_loss_in_pipeline_split)
    fail(shown +
         ": also set are parallel.num_layers_per_virtual_pipeline_stage, "
         "decoder_first/last_pipeline_num_layers or account_for_*_in_pipeline_split; Megatron-Core "
         "takes the layout alone");
  std::string why;
  const auto stages = input::parse_pipeline_layout(p.pipeline_model_parallel_layout, kLayoutStages,
                                                   kLayoutSymbols, why);
  if (!stages) fail(shown + ": " + why);
  const std::int64_t n = std::int64_t(stages->size());
  if (n % pp != 0)
    fail(shown + ": " + std::to_string(n) + " virtual stages are not divisible by " +
         kv(key_of(&ParallelConfig::pipeline_model_parallel_size), pp));
  std::string flat;
  for (const std::string& st : *stages) flat += st;
  const auto count = [&](char c) { return std::count(flat.begin(), flat.end(), c); };
  if (flat.empty() || flat.front() != 'E' || count('E') != 1)
    fail(shown + ": the first layer must be the embedding E, given once");
  if (flat.back() != 'L' || count('L') != 1)
    fail(shown + ": the last layer must be the loss L, given once");
  if (count('t') != s.model.num_layers)
    fail(shown + ": " + std::to_string(count('t')) + " decoder layers (t), " +
         kv(key_of(&ModelConfig::num_layers), s.model.num_layers));
  // Megatron-Core's validate_layer_layout: the layout's MTP layers are mtp_num_layers.
  if (count('m') != s.model.mtp_num_layers)
    fail(shown + ": " + std::to_string(count('m')) + " multi-token prediction layers (m), " +
         kv(key_of(&ModelConfig::mtp_num_layers), s.model.mtp_num_layers));
  if (count('m') > 0 && std::count(stages->back().begin(), stages->back().end(), 'm') != count('m'))
    fail(shown + ": the multi-token prediction layers (m) must be in the last virtual stage "
         "(trainsim builds them beside the loss)");
  if (stages->front().find('E') == std::string::npos ||
      stages->back().find('L') == std::string::npos)
    fail(shown + ": the embedding must be in the first virtual stage and the loss in the last "
         "(trainsim builds them there)");
  p.virtual_pipeline_size = n / pp;
  p.virtual_stage_layers.clear();
  for (const std::string& st : *stages)
    p.virtual_stage_layers.push_back(std::count(st.begin(), st.end(), 't'));
  p.layers_per_chunk = p.virtual_stage_layers.front();
  bool even = true;
  for (std::int64_t k : p.virtual_stage_layers) even = even && k == p.layers_per_chunk;
  if (even) p.virtual_stage_layers.clear();
}

/// Pipeline stages and the interleaved schedule (Megatron arguments.py / schedules.py).
template <typename Fail>
void check_pipeline(Scenario& s, const Fail& fail) {
  ParallelConfig& p = s.parallel;
  const std::int64_t pp = p.pipeline_model_parallel_size;
  const std::string pps = kv(key_of(&ParallelConfig::pipeline_model_parallel_size), pp);
  const std::int64_t dp = p.data_parallel_size;
  const std::optional<std::int64_t> vpl = p.num_layers_per_virtual_pipeline_stage;
  const std::string vps =
      vpl ? kv(key_of(&ParallelConfig::num_layers_per_virtual_pipeline_stage), *vpl) : "";
  if (vpl) {
    if (*vpl <= 0) fail(vps + " must be positive");
    if (p.pipeline_schedule == PipelineSchedule::GPipe)
      fail(vps + " means the interleaved schedule, but parallel.pipeline_schedule is gpipe");
    if (pp <= 1) fail(vps + " (interleaved schedule) needs " + pps + " > 1");
    if (p.num_microbatches % pp != 0)
      fail("the interleaved schedule needs the number of microbatches (" +
           std::to_string(p.num_microbatches) + " = global_batch_size " +
           std::to_string(p.global_batch_size) + " / (micro_batch_size " +
           std::to_string(p.micro_batch_size) + " x dp " + std::to_string(dp) + ")) divisible by " +
           pps);
  } else if (p.pipeline_schedule == PipelineSchedule::Interleaved &&
             p.pipeline_model_parallel_layout.empty()) {
    fail(
        "parallel.pipeline_schedule (interleaved) needs "
        "parallel.num_layers_per_virtual_pipeline_stage");
  }
  if (!p.pipeline_model_parallel_layout.empty()) {
    split_by_layout(s, fail);
    if (p.virtual_pipeline_size > 1) {  // the layout's chunks: Megatron-Core's interleaved 1F1B
      if (p.pipeline_schedule == PipelineSchedule::GPipe)
        fail("parallel.pipeline_model_parallel_layout has " +
             std::to_string(p.virtual_pipeline_size) +
             " virtual stages per rank (the interleaved schedule), but parallel.pipeline_schedule "
             "is gpipe");
      if (p.num_microbatches % pp != 0)
        fail("the interleaved schedule of parallel.pipeline_model_parallel_layout needs the "
             "number of microbatches (" + std::to_string(p.num_microbatches) +
             ") divisible by " + pps);
      p.pipeline_schedule = PipelineSchedule::Interleaved;
    } else if (p.pipeline_schedule == PipelineSchedule::Interleaved) {
      fail("parallel.pipeline_schedule (interleaved) needs more than one virtual stage per rank "
           "in parallel.pipeline_model_parallel_layout");
    }
    return;
  }
  split_layers(s, fail);
  if (vpl) {
    p.pipeline_schedule = PipelineSchedule::Interleaved;
    // Megatron-LM 2021 (megatron/arguments.py) asserts pp > 2 for the interleaved schedule;
    // Megatron-Core's schedule runs it with pp = 2 as well. Checked after the layer split, whose
    // errors come first.
    const RuntimeSpec& rt = runtime_spec(s.runtime);
    const RuntimeSpec& core = runtime_spec(Runtime::MegatronCore);
    if (pp < rt.min_interleaved_pipeline_stages)
      fail(vps + " (interleaved schedule) needs " + pps + " >= " +
           std::to_string(rt.min_interleaved_pipeline_stages) + " with runtime " + rt.name +
           " (models/input/runtime.cpp gives each runtime's source)" +
           (pp >= core.min_interleaved_pipeline_stages
                ? std::string("; ") + core.name + " runs it with " +
                      std::to_string(core.min_interleaved_pipeline_stages) +
                      " stages (runtime: " + core.name + ")"
                : std::string()));
  }
}

/// The Megatron-Core features need `runtime: megatron-core`: the Megatron-LM of 2021 had none
/// of them, and trainsim models them with Megatron-Core's (Transformer Engine) kernels.
template <typename Fail>
void check_runtime_features(const Scenario& s, const Fail& fail) {
  const ModelConfig& m = s.model;
  const ParallelConfig& p = s.parallel;
  const std::pair<bool, std::string> uses[] = {
      {m.num_query_groups != m.num_attention_heads,
       kv(key_of(&ModelConfig::num_query_groups), m.num_query_groups)},
      {m.swiglu, "model.swiglu (true)"},
      {m.quick_geglu, "model.quick_geglu (true)"},
      {m.normalization != Normalization::LayerNorm, "model.normalization (RMSNorm)"},
      {m.position_embedding_type != PositionEmbedding::LearnedAbsolute,
       "model.position_embedding_type (rope)"},
      {!m.add_bias_linear, "model.add_bias_linear (false)"},
      {m.add_qkv_bias, "model.add_qkv_bias (true)"},
      {m.hidden_dropout != 0.1 || m.attention_dropout != 0.1,
       "model.hidden_dropout / attention_dropout"},
      {m.window_size != 0, kv(key_of(&ModelConfig::window_size), m.window_size)},
      {m.multi_latent_attention, "model.multi_latent_attention (true)"},
      {m.qk_layernorm, "model.qk_layernorm (true)"},
      {m.attention_backend != AttentionBackend::Unfused,
       std::string("model.attention_backend (") + to_string(m.attention_backend) + ")"},
      {m.is_moe(), kv(key_of(&ModelConfig::num_experts), m.num_experts)},
      {p.context_parallel_size > 1,
       kv(key_of(&ParallelConfig::context_parallel_size), p.context_parallel_size)},
      {p.fp8 != Fp8Format::None, std::string("parallel.fp8 (") + to_string(p.fp8) + ")"},
      {p.use_distributed_optimizer, "parallel.use_distributed_optimizer (true)"},
      {p.tp_comm_overlap, "parallel.tp_comm_overlap (true)"},
      {p.uses_fsdp(), "FSDP (parallel.use_megatron_fsdp / use_torch_fsdp2)"},
      {p.cpu_offloading, "parallel.cpu_offloading (true)"},
      {p.recompute_modules != 0 && p.recompute_modules != kRecomputeCoreAttn,
       "parallel.recompute_modules (layernorm / moe_act / mlp / moe / mla_up_proj / "
       "shared_experts)"},
      {p.grad_reduce_in_fp32.has_value(), kv_bool(key_of(&ParallelConfig::grad_reduce_in_fp32),
                                                  p.grad_reduce_in_fp32.value_or(false))},
      {p.decoder_first_pipeline_num_layers || p.decoder_last_pipeline_num_layers ||
           p.account_for_embedding_in_pipeline_split || p.account_for_loss_in_pipeline_split,
       "an uneven pipeline split (parallel.decoder_*_pipeline_num_layers / account_for_*)"},
      {!p.pipeline_model_parallel_layout.empty(), "parallel.pipeline_model_parallel_layout"},
      {m.mtp_num_layers > 0, kv(key_of(&ModelConfig::mtp_num_layers), m.mtp_num_layers)},
      {m.moe_token_dispatcher_type == MoeDispatcher::Flex,
       "model.moe_token_dispatcher_type (flex)"}};
  if (runtime_spec(s.runtime).megatron_core_features) return;
  for (const auto& [used, what] : uses)
    if (used)
      fail(what +
           " needs `runtime: megatron-core` (the scenario's runtime is megatron-2021, "
           "whose Megatron-LM has no such feature; set runtime: megatron-core)");
}

/// The gated MLP's activation (Megatron-LM arguments.py: --quick-geglu asserts not --swiglu;
/// --activation-func-clamp-value is "only used when activation_func is quick_gelu";
/// --glu-linear-offset "only used when gated_linear_unit is True").
template <typename Fail>
void check_glu(const Scenario& s, const Fail& fail) {
  const ModelConfig& m = s.model;
  const auto num = [](double v) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%g", v);
    return std::string(buf);
  };
  if (m.swiglu && m.quick_geglu)
    fail("model.quick_geglu (true) with model.swiglu (true): a gated MLP has one activation "
         "(Megatron-LM asserts not args.swiglu with --quick-geglu); set one of them");
  if (m.activation_func_clamp_value != 0 && !m.quick_geglu)
    fail("field 'model.activation_func_clamp_value' = " + num(m.activation_func_clamp_value) +
         ": the clamp applies to quick_geglu's activation only; set model.quick_geglu: true or "
         "remove it");
  if (m.glu_linear_offset != 0 && !m.gated_linear_unit())
    fail("field 'model.glu_linear_offset' = " + num(m.glu_linear_offset) +
         ": the offset applies to a gated MLP only (model.swiglu or model.quick_geglu)");
}

/// Context parallelism, attention kernels, expert TP and FP8 recipes (Megatron-Core
/// arguments.py and parallel_state.py checks).
template <typename Fail>
void check_context_and_kernels(const Scenario& s, const Fail& fail) {
  const ModelConfig& m = s.model;
  const ParallelConfig& p = s.parallel;
  const std::int64_t cp = p.context_parallel_size;
  const std::int64_t etp = p.expert_tensor_parallel_size;
  const std::string cps = kv(key_of(&ParallelConfig::context_parallel_size), cp);
  // Load-balanced causal context parallelism cuts the sequence into 2 x cp chunks
  // (Megatron-Core get_batch_on_this_cp_rank).
  if (cp > 1 && m.seq_length % (2 * cp) != 0)
    fail(kv(key_of(&ModelConfig::seq_length), m.seq_length) + " is not divisible by 2 x " + cps +
         " (context parallelism splits the sequence into 2 x cp load-balanced chunks)");
  if (cp > 1 && m.attention_backend == AttentionBackend::Unfused)
    fail(cps +
         " needs model.attention_backend flash or fused (Megatron-Core runs context "
         "parallelism inside Transformer Engine's fused attention)");
  if (m.window_size > 0 && m.attention_backend == AttentionBackend::Unfused)
    fail(kv(key_of(&ModelConfig::window_size), m.window_size) +
         " needs model.attention_backend flash or fused "
         "(sliding-window attention runs in Transformer Engine's fused kernels)");
  if (m.is_moe() && etp > 1 && m.moe_token_dispatcher_type == MoeDispatcher::AllGather)
    fail(kv(key_of(&ParallelConfig::expert_tensor_parallel_size), etp) +
         " with model.moe_token_dispatcher_type allgather: the allgather dispatcher's gather "
         "over the expert tensor- and expert-parallel group is not modelled; use alltoall or "
         "parallel.expert_tensor_parallel_size: 1");
  // MXFP8 (E8M0 scales per 32-element block) runs in Blackwell's tensor cores only
  // (Transformer Engine common/recipe: MXFP8BlockScaling needs compute capability >= 10.0).
  if (p.fp8_recipe == Fp8Recipe::Mxfp8 && p.fp8 != Fp8Format::None &&
      cluster_system(s.cluster).gpu.compute_capability < 100)
    fail("parallel.fp8_recipe (mxfp8) on cluster.system '" + s.cluster.system +
         "': MXFP8 block scaling needs Blackwell tensor cores (compute capability 100, e.g. "
         "dgx-b200), its " + cluster_system(s.cluster).gpu.name + " has compute capability " +
         std::to_string(cluster_system(s.cluster).gpu.compute_capability));
  if (cp > 1 && s.zero.stage > 0)
    fail(cps + " with deepspeed.zero_optimization.stage " + std::to_string(s.zero.stage) +
         ": context parallelism is Megatron-Core's; use its distributed optimizer instead");
  if (cp > 1 && p.sequence_parallel && (m.seq_length / cp) % p.tensor_model_parallel_size != 0)
    fail(kv(key_of(&ModelConfig::seq_length), m.seq_length) + " / " + cps +
         " is not divisible by " + key_of(&ParallelConfig::tensor_model_parallel_size) +
         " (sequence parallelism)");
}

/// Expert parallelism, MoE layer patterns and the recomputed modules a model must have
/// (Megatron-Core arguments.py, transformer_config.py).
template <typename Fail>
void check_experts(const Scenario& s, const Fail& fail) {
  const ModelConfig& m = s.model;
  const ParallelConfig& p = s.parallel;
  const std::int64_t ep = p.expert_model_parallel_size;
  const std::int64_t etp = p.expert_tensor_parallel_size;
  if (!m.is_moe() && (ep > 1 || etp != p.tensor_model_parallel_size))
    fail((ep > 1 ? kv(key_of(&ParallelConfig::expert_model_parallel_size), ep)
                 : kv(key_of(&ParallelConfig::expert_tensor_parallel_size), etp)) +
         " needs a mixture-of-experts model (model.num_experts > 0)");
  // A module with no layer of its kind would be a no-op (Megatron-Core sets recompute_mlp on
  // dense layers only and moe_layer_recompute in MoE layers): a launch-line mistake, refused.
  if ((p.recompute_modules & kRecomputeMoe) && !m.is_moe())
    fail(
        "parallel.recompute_modules: 'moe' recomputes MoE layers and the model has none "
        "(model.num_experts is 0)");
  if ((p.recompute_modules & kRecomputeSharedExperts) &&
      (!m.is_moe() || m.moe_shared_expert_intermediate_size == 0))
    fail(
        "parallel.recompute_modules: 'shared_experts' recomputes MoE layers' shared experts and "
        "the model has none (model.moe_shared_expert_intermediate_size is 0)");
  if ((p.recompute_modules & kRecomputeMlaUpProj) && !m.multi_latent_attention)
    fail(
        "parallel.recompute_modules: 'mla_up_proj' recomputes multi-head latent attention's "
        "up projections and the model has none (model.multi_latent_attention is false)");
  if ((p.recompute_modules & kRecomputeMlp) && m.is_moe() && !m.has_dense_layers())
    fail(
        "parallel.recompute_modules: 'mlp' recomputes dense layers' MLPs and every layer of "
        "the model is an MoE layer (model.moe_layer_freq); for those use 'moe'");
  if (!m.is_moe() && (m.moe_layer_freq != 1 || !m.moe_layer_pattern.empty()))
    fail("model.moe_layer_freq" +
         (m.moe_layer_pattern.empty() ? " = " + std::to_string(m.moe_layer_freq) : " (a pattern)") +
         " needs a mixture-of-experts model (model.num_experts > 0)");
  if (m.is_moe()) {
    if (!m.moe_layer_pattern.empty() && std::int64_t(m.moe_layer_pattern.size()) != m.num_layers)
      fail("model.moe_layer_freq: the pattern has " + std::to_string(m.moe_layer_pattern.size()) +
           " entries, model.num_layers is " + std::to_string(m.num_layers) +
           " (Megatron-Core needs one entry per layer)");
    if (m.num_experts % ep != 0)
      fail(kv(key_of(&ModelConfig::num_experts), m.num_experts) + " is not divisible by " +
           kv(key_of(&ParallelConfig::expert_model_parallel_size), ep));
    const std::int64_t per_stage = s.world_size() / p.pipeline_model_parallel_size;
    if (per_stage % (ep * etp) != 0)
      fail(kv(key_of(&ParallelConfig::expert_model_parallel_size), ep) + " x " +
           kv(key_of(&ParallelConfig::expert_tensor_parallel_size), etp) + " does not divide the " +
           std::to_string(per_stage) + " GPUs of a pipeline stage");
    if (m.moe_ffn_hidden_size % etp != 0)
      fail(kv(key_of(&ModelConfig::moe_ffn_hidden_size), m.moe_ffn_hidden_size) +
           " is not divisible by " + kv(key_of(&ParallelConfig::expert_tensor_parallel_size), etp));
  }
}

/// FSDP, the distributed optimizer and DeepSpeed ZeRO: one sharding at a time; FSDP's group
/// (filled with dp x cp when absent).
template <typename Fail>
void check_sharding(Scenario& s, const Fail& fail) {
  ParallelConfig& p = s.parallel;
  const std::int64_t cp = p.context_parallel_size, ep = p.expert_model_parallel_size;
  if (p.use_torch_fsdp2 && (p.pipeline_model_parallel_size > 1 || ep > 1)) {
    const bool pipe = p.pipeline_model_parallel_size > 1;
    fail("parallel.use_torch_fsdp2 with " +
         (pipe ? kv(key_of(&ParallelConfig::pipeline_model_parallel_size),
                    p.pipeline_model_parallel_size)
               : kv(key_of(&ParallelConfig::expert_model_parallel_size), ep)) +
         ": Megatron-LM refuses it (arguments.py: \"--use-torch-fsdp2 is not supported with " +
         (pipe ? "pipeline" : "expert") + " parallelism\"); use parallel.use_megatron_fsdp");
  }
  if (p.uses_fsdp()) {
    const std::int64_t shard_world = p.data_parallel_size * cp;
    if (p.fsdp_sharding_group_size == 0) p.fsdp_sharding_group_size = shard_world;
    if (p.fsdp_sharding_group_size != shard_world)
      fail(
          kv(key_of(&ParallelConfig::fsdp_sharding_group_size), p.fsdp_sharding_group_size) +
          ": trainsim models FSDP sharded over the whole data-parallel x context-parallel group (" +
          std::to_string(shard_world) + " GPUs); hybrid sharding is not modelled yet");
    if (shard_world % p.fsdp_sharding_group_size != 0)
      fail(kv(key_of(&ParallelConfig::fsdp_sharding_group_size), p.fsdp_sharding_group_size) +
           " does not divide data-parallel size x context-parallel size (" +
           std::to_string(shard_world) + ")");
  }
  const int stage = s.zero.stage;
  if ((p.use_distributed_optimizer || p.uses_fsdp()) && stage > 0)
    fail(std::string(p.uses_fsdp() ? "FSDP" : "parallel.use_distributed_optimizer") +
         " shards with Megatron-Core; deepspeed.zero_optimization.stage (" + std::to_string(stage) +
         ") shards with DeepSpeed: use one of the two");
  if (p.overlap_param_gather && !p.use_distributed_optimizer && !p.uses_fsdp())
    fail(
        "parallel.overlap_param_gather needs parallel.use_distributed_optimizer (Megatron "
        "arguments.py: the parameter all-gather exists only with the distributed optimizer)");
}

/// Multi-head latent attention's kernels, the gradient buffer's precision and FP8.
template <typename Fail>
void check_core_precision(const Scenario& s, const Fail& fail) {
  const ModelConfig& m = s.model;
  const ParallelConfig& p = s.parallel;
  const int stage = s.zero.stage;
  if (m.multi_latent_attention && m.attention_backend == AttentionBackend::Unfused)
    fail(
        "model.multi_latent_attention needs model.attention_backend flash or fused (trainsim "
        "models MLA's core attention as Transformer Engine's fused kernel, query/key and value "
        "head dimensions apart)");
  if (m.multi_latent_attention && p.tp_comm_overlap)
    fail(
        "parallel.tp_comm_overlap with model.multi_latent_attention is not modelled yet "
        "(Transformer Engine's userbuffers overlap of the latent projections)");
  if (p.grad_reduce_in_fp32) {
    const std::string g =
        kv_bool(key_of(&ParallelConfig::grad_reduce_in_fp32), *p.grad_reduce_in_fp32);
    if (stage > 0)
      fail(g +
           " sets Megatron's gradient buffer; DeepSpeed ZeRO (deepspeed.zero_optimization."
           "stage " +
           std::to_string(stage) + ") keeps its gradients in the training precision");
    if (p.uses_fsdp() && *p.grad_reduce_in_fp32)
      fail(g +
           " with FSDP is not modelled: trainsim keeps FSDP's sharded gradients in the "
           "training precision (set it to false or leave it out)");
    if (p.precision == Precision::FP32 && !*p.grad_reduce_in_fp32)
      fail(g + " with parallel.precision fp32: fp32 training has fp32 gradients");
  }
  if (p.fp8 != Fp8Format::None && p.precision == Precision::FP32)
    fail(
        "parallel.fp8 needs parallel.precision bf16 or fp16 (Transformer Engine runs FP8 "
        "GEMMs inside a mixed-precision model)");
}

/// Activation CPU offloading: Megatron-Core TransformerConfig.__post_init__ (core_r0.14.0 /
/// core_r0.15.0, megatron/core/transformer/transformer_config.py) refuses num_layers outside
/// [0, num_layers), pipeline parallelism and any recomputation; Transformer Engine's
/// get_cpu_offload_context (transformer_engine/pytorch/cpu_offload.py) refuses offloading
/// neither activations nor weights. Weight offloading is not modelled (docs/scenario.md).
template <typename Fail>
void check_cpu_offloading(const Scenario& s, const Fail& fail) {
  const ParallelConfig& p = s.parallel;
  if (!p.cpu_offloading) return;
  const std::string why = " with " + kv_bool(key_of(&ParallelConfig::cpu_offloading), true);
  const std::int64_t layers = s.model.num_layers;
  if (p.cpu_offloading_num_layers >= layers)
    fail(kv(key_of(&ParallelConfig::cpu_offloading_num_layers), p.cpu_offloading_num_layers) +
         " must be below " + kv(key_of(&ModelConfig::num_layers), layers) +
         " (Megatron-Core: \"CPU offloading can be done only for layers less than num_layers\")");
  if (p.pipeline_model_parallel_size > 1)
    fail(kv(key_of(&ParallelConfig::pipeline_model_parallel_size),
            p.pipeline_model_parallel_size) + why +
         " (Megatron-Core: \"Currently there is no support for Pipeline parallelism with CPU "
         "offloading\")");
  if (p.recompute_granularity != Recompute::None)
    fail(std::string("parallel.recompute_granularity (") + to_string(p.recompute_granularity) +
         ")" + why +
         " (Megatron-Core: \"CPU offloading does not work when activation recomputation is "
         "enabled\")");
  if (!p.cpu_offloading_activations && !p.cpu_offloading_weights)
    fail(kv_bool(key_of(&ParallelConfig::cpu_offloading_activations), false) + " and " +
         kv_bool(key_of(&ParallelConfig::cpu_offloading_weights), false) + why +
         " (Transformer Engine: \"CPU Offloading is enabled while it is not mentioned what to "
         "offload\")");
  if (p.cpu_offloading_weights)
    fail(kv_bool(key_of(&ParallelConfig::cpu_offloading_weights), true) +
         ": weight offloading is not modelled (trainsim models the activations only)");
}

/// Context and expert parallelism, FSDP, the distributed optimizer and FP8 (Megatron-Core
/// arguments.py and parallel_state.py checks), and the features the runtime must have.
template <typename Fail>
void check_megatron_core(Scenario& s, const Fail& fail) {
  check_glu(s, fail);
  check_context_and_kernels(s, fail);
  check_experts(s, fail);
  check_sharding(s, fail);
  check_runtime_features(s, fail);
  check_core_precision(s, fail);
  check_cpu_offloading(s, fail);
}

/// ZeRO stages and offload (DeepSpeed semantics).
template <typename Fail>
void check_zero(const Scenario& s, const Fail& fail) {
  const std::int64_t pp = s.parallel.pipeline_model_parallel_size;
  const std::string pps = kv(key_of(&ParallelConfig::pipeline_model_parallel_size), pp);
  // ZeRO and offload (DeepSpeed semantics).
  const ZeroConfig& z = s.zero;
  const std::string st = "deepspeed.zero_optimization.stage (" + std::to_string(z.stage) + ")";
  if (z.stage < 0 || z.stage > 3) fail(st + " must be 0, 1, 2 or 3");
  if (z.offload_optimizer.enabled && z.stage < 1)
    fail(
        "deepspeed.zero_optimization.offload_optimizer.device (cpu) needs ZeRO stage 1, 2 or 3, "
        "but " +
        st + " is set (DeepSpeed offloads only ZeRO-partitioned optimizer states)");
  if (!z.offload_optimizer.ratio_auto &&
      !(z.offload_optimizer.ratio >= 0 && z.offload_optimizer.ratio <= 1)) {
    std::ostringstream r;
    r << z.offload_optimizer.ratio;
    fail("deepspeed.zero_optimization.offload_optimizer.ratio (" + r.str() +
         ") must be within [0, 1]");
  }
  if (z.offload_optimizer.enabled && z.stage < 3 &&
      (z.offload_optimizer.ratio_auto || z.offload_optimizer.ratio < 1)) {
    std::ostringstream r;
    if (z.offload_optimizer.ratio_auto)
      r << "auto";
    else
      r << z.offload_optimizer.ratio;
    fail("deepspeed.zero_optimization.offload_optimizer.ratio (" + r.str() + ") with " + st +
         ": DeepSpeed supports partial offload (Twin-Flow, ratio < 1) only with ZeRO stage 3 "
         "(zero/config.py offload_ratio_check); use stage 3 or ratio 1.0");
  }
  if (pp > 1 && z.stage >= 2)
    fail(st + " with " + pps +
         ": DeepSpeed does not support ZeRO stage 2 or 3 with pipeline parallelism "
         "(use stage 0 or 1, or pp = 1)");
}

/// training: a run shorter than one iteration (the forecast counts whole steps).
template <typename Fail>
void check_training(const Scenario& s, const Fail& fail) {
  const TrainingConfig& t = s.training;
  const double tokens_per_step =
      double(s.parallel.global_batch_size) * double(s.model.seq_length);
  if (t.train_tokens > 0 && t.train_tokens < tokens_per_step) {
    std::ostringstream o;
    o.precision(17);
    o << key_at(&key_sample().training.train_tokens) << " (" << t.train_tokens
      << ") is below one iteration: " << key_of(&ParallelConfig::global_batch_size) << " x "
      << key_of(&ModelConfig::seq_length) << " = " << std::int64_t(tokens_per_step) << " tokens";
    fail(o.str());
  }
  if (t.train_samples && *t.train_samples < s.parallel.global_batch_size)
    fail(kv(key_at(&key_sample().training.train_samples), *t.train_samples) +
         " is below one iteration: " + kv(key_of(&ParallelConfig::global_batch_size),
                                          s.parallel.global_batch_size) + " sequences");
}

}  // namespace

void validate_scenario(Scenario& s) {
  const std::string at = where_prefix(s);
  auto fail = [&](const std::string& what) { throw InputError(at + what); };
  check_sizes(s, fail);
  fill_defaults_and_system(s, fail);
  check_tp_and_batch(s, fail);
  check_pipeline(s, fail);
  check_megatron_core(s, fail);
  validate_detail::check_moe_token_dropping(s, fail);
  validate_detail::check_shared_expert_overlap(s, fail);
  validate_detail::check_a2a_overlap(s, fail);
  validate_detail::check_cuda_graph_scopes(s, fail);
  validate_detail::check_cuda_graph_recompute(s, fail);
  check_zero(s, fail);
  validate_detail::check_mtp_and_flex(s, fail);
  check_training(s, fail);
}

ValidScenario validated(Scenario scenario) {
  validate_scenario(scenario);
  return ValidScenario(std::move(scenario));
}

}  // namespace trainsim
