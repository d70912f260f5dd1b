// The key schema: every key a scenario may hold. Sections are mappings; keys hold values.
#include "models/input/keys.h"

#include <algorithm>
#include <limits>

#include "models/input/scenario.h"

namespace trainsim {
namespace input {
namespace {


const std::vector<std::string>& section_paths() {
  static const std::vector<std::string> v = {
      "model", "parallel", "deepspeed", "deepspeed.zero_optimization",
      "deepspeed.zero_optimization.offload_optimizer", "cluster", "simulation"};
  return v;
}

const std::vector<std::string>& leaf_paths() {
  static const std::vector<std::string> v = {
      "name", "runtime", "nccl_version", "nccl_nvls_enable",
      // Megatron-LM argument names
      "model.num_layers", "model.hidden_size", "model.num_attention_heads",
      "model.seq_length", "model.padded_vocab_size", "model.ffn_hidden_size",
      "model.kv_channels", "model.untie_embeddings_and_output_weights",
      // models trained today (Megatron-Core argument names)
      "model.num_query_groups", "model.group_query_attention", "model.swiglu",
      "model.normalization", "model.position_embedding_type", "model.add_bias_linear",
      "model.add_qkv_bias",
      "model.hidden_dropout", "model.attention_dropout", "model.window_size",
      "model.window_attn_skip_freq", "model.attention_backend", "model.use_flash_attn",
      "model.multi_latent_attention", "model.q_lora_rank", "model.kv_lora_rank",
      "model.qk_head_dim", "model.qk_pos_emb_head_dim", "model.v_head_dim", "model.qk_layernorm",
      "model.mtp_num_layers", "model.moe_shared_expert_overlap", "model.mla_down_proj_fusion",
      "model.num_experts", "model.moe_router_topk", "model.moe_ffn_hidden_size",
      "model.moe_shared_expert_intermediate_size", "model.moe_layer_freq",
      "model.moe_token_dispatcher_type", "model.moe_grouped_gemm",
      "model.moe_token_imbalance_factor", "model.hf_config",
      "parallel.tensor_model_parallel_size", "parallel.pipeline_model_parallel_size",
      "parallel.micro_batch_size", "parallel.global_batch_size",
      "parallel.num_layers_per_virtual_pipeline_stage", "parallel.recompute_granularity",
      "parallel.recompute_modules", "parallel.recompute_method", "parallel.recompute_num_layers",
      "parallel.sequence_parallel", "parallel.precision", "parallel.overlap_grad_reduce",
      "parallel.scatter_gather_tensors_in_pipeline", "parallel.ddp_bucket_size",
      "parallel.clip_grad",
      "parallel.pipeline_schedule",
      "parallel.context_parallel_size", "parallel.expert_model_parallel_size",
      "parallel.expert_tensor_parallel_size", "parallel.decoder_first_pipeline_num_layers",
      "parallel.decoder_last_pipeline_num_layers",
      "parallel.account_for_embedding_in_pipeline_split",
      "parallel.account_for_loss_in_pipeline_split", "parallel.use_distributed_optimizer",
      "parallel.overlap_param_gather", "parallel.tp_comm_overlap",
      "parallel.tp_comm_overlap_rs_method", "parallel.use_megatron_fsdp", "parallel.use_torch_fsdp2",
      "parallel.fsdp_sharding_group_size", "parallel.fp8", "parallel.fp8_recipe", "parallel.fp8_param_gather",
      "parallel.grad_reduce_in_fp32",
      // DeepSpeed config keys
      "deepspeed.zero_optimization.stage", "deepspeed.zero_optimization.reduce_bucket_size",
      "deepspeed.zero_optimization.allgather_bucket_size",
      "deepspeed.zero_optimization.overlap_comm",
      "deepspeed.zero_optimization.stage3_prefetch_bucket_size",
      "deepspeed.zero_optimization.stage3_max_live_parameters",
      "deepspeed.zero_optimization.stage3_param_persistence_threshold",
      "deepspeed.zero_optimization.stage3_max_reuse_distance",
      "deepspeed.zero_optimization.sub_group_size",
      "deepspeed.zero_optimization.offload_optimizer.device",
      "deepspeed.zero_optimization.offload_optimizer.pin_memory",
      "deepspeed.zero_optimization.offload_optimizer.ratio",
      // cluster and simulation
      "cluster.system", "cluster.nodes", "cluster.gpus_per_node", "simulation.fold"};
  return v;
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

bool contains(const std::vector<std::string>& v, const std::string& s) {
  return std::find(v.begin(), v.end(), s) != v.end();
}
bool is_section(const std::string& path) { return contains(section_paths(), path); }
bool is_leaf(const std::string& path) { return contains(leaf_paths(), path); }

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

/// "; did you mean 'X'?" for an unknown key `path`, or "" when nothing is close.
/// Same-section keys are named by their last component, keys of another section by full path.
std::string suggestion(const std::string& path) {
  const std::string parent = parent_of(path);
  const std::string key = last_of(path);
  std::vector<std::string> all = leaf_paths();
  all.insert(all.end(), section_paths().begin(), section_paths().end());
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
  // Accept up to half the key's length: catches typos and a missing word
  // (tensor_parallel_size -> tensor_model_parallel_size is 6 edits of 20).
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

const std::vector<ScenarioSizeLimit>& scenario_size_limits() {
  // See models/input/scenario.h for why these values.
  constexpr std::int64_t k2p16 = std::int64_t(1) << 16, k2p20 = std::int64_t(1) << 20,
                         k2p22 = std::int64_t(1) << 22, k2p24 = std::int64_t(1) << 24,
                         k2p30 = std::int64_t(1) << 30, k2p50 = std::int64_t(1) << 50;
  static const std::vector<ScenarioSizeLimit> v = {
      {"model.num_layers", 0xFFFE},
      {"model.hidden_size", k2p20},
      {"model.num_attention_heads", k2p16},
      {"model.kv_channels", k2p16},
      {"model.ffn_hidden_size", k2p22},
      {"model.seq_length", k2p22},
      {"model.padded_vocab_size", k2p24},
      {"model.num_query_groups", k2p16},
      {"model.q_lora_rank", k2p20},
      {"model.kv_lora_rank", k2p20},
      {"model.qk_head_dim", k2p16},
      {"model.qk_pos_emb_head_dim", k2p16},
      {"model.v_head_dim", k2p16},
      {"model.window_size", k2p22},
      {"model.window_attn_skip_freq", 0xFFFE},
      {"model.num_experts", k2p16},
      {"model.moe_router_topk", k2p16},
      {"model.moe_ffn_hidden_size", k2p22},
      {"model.moe_shared_expert_intermediate_size", k2p22},
      {"model.moe_layer_freq", 0xFFFE},
      {"parallel.tensor_model_parallel_size", k2p16},
      {"parallel.context_parallel_size", k2p16},
      {"parallel.expert_model_parallel_size", k2p16},
      {"parallel.expert_tensor_parallel_size", k2p16},
      {"parallel.decoder_first_pipeline_num_layers", 0xFFFE},
      {"parallel.decoder_last_pipeline_num_layers", 0xFFFE},
      {"parallel.fsdp_sharding_group_size", k2p20},
      {"parallel.pipeline_model_parallel_size", k2p16},
      {"parallel.num_layers_per_virtual_pipeline_stage", 0xFFFE},
      {"parallel.micro_batch_size", k2p20},
      {"parallel.global_batch_size", k2p30},
      {"parallel.ddp_bucket_size", k2p50},
      {"deepspeed.zero_optimization.reduce_bucket_size", k2p50},
      {"deepspeed.zero_optimization.allgather_bucket_size", k2p50},
      {"deepspeed.zero_optimization.stage3_prefetch_bucket_size", k2p50},
      {"deepspeed.zero_optimization.stage3_max_live_parameters", k2p50},
      {"deepspeed.zero_optimization.stage3_param_persistence_threshold", k2p50},
      {"deepspeed.zero_optimization.stage3_max_reuse_distance", k2p50},
      {"deepspeed.zero_optimization.sub_group_size", k2p50},
      {"cluster.nodes", k2p20},
      {"cluster.gpus_per_node", k2p16}};
  return v;
}

std::int64_t scenario_size_limit(const std::string& field) {
  for (const auto& l : scenario_size_limits())
    if (field == l.field) return l.max;
  return 0;
}
}  // namespace trainsim
