// Mapping (Hugging Face transformers config fields -> Megatron-Core arguments, as Megatron-
// Bridge's model providers convert them):
//   num_hidden_layers -> num_layers; hidden_size; num_attention_heads;
//   num_key_value_heads -> num_query_groups (GQA when fewer than the heads);
//   head_dim -> kv_channels (when given; else hidden / heads);
//   intermediate_size -> ffn_hidden_size (Mixtral, GPT-OSS: the expert size, moe_ffn_hidden_size);
//   hidden_act silu -> swiglu (these families' MLPs are gated SiLU); rms_norm_eps -> RMSNorm;
//   rope_theta -> position_embedding_type rope; tie_word_embeddings false ->
//   untie_embeddings_and_output_weights; attention_bias -> add_bias_linear; Qwen2's q, k, v
//   biases (always there, transformers modeling_qwen2.py) -> add_qkv_bias; Qwen3's per-head
//   q_norm / k_norm -> qk_layernorm;
//   vocab_size -> padded_vocab_size, padded to a multiple of 128 (Megatron's
//   --make-vocab-size-divisible-by default; the TP factor is the scenario's to add);
//   attention_dropout; no hidden dropout in these families (hidden_dropout 0);
//   num_experts / num_local_experts -> num_experts; num_experts_per_tok -> moe_router_topk;
//   moe_intermediate_size -> moe_ffn_hidden_size; shared_expert_intermediate_size ->
//   moe_shared_expert_intermediate_size; decoder_sparse_step and mlp_only_layers (Qwen3-MoE)
//   -> the moe_layer_freq pattern; sliding_window with layer_types alternating
//   sliding/full -> window_size, window_attn_skip_freq 2; attention_backend flash.
// DeepSeek-V2 / V3 (DeepseekV2ForCausalLM, DeepseekV3ForCausalLM; Megatron-Bridge
// deepseek_v2_bridge.py / deepseek_v3_bridge.py on its MLA provider): multi_latent_attention
// with qk_layernorm; q_lora_rank (null: none), kv_lora_rank, qk_nope_head_dim -> qk_head_dim,
// qk_rope_head_dim -> qk_pos_emb_head_dim, v_head_dim; n_routed_experts -> num_experts;
// moe_intermediate_size x n_shared_experts -> moe_shared_expert_intermediate_size;
// first_k_dense_replace -> the moe_layer_freq pattern (that many dense layers first). Group-
// limited routing (n_group, topk_group) changes which experts a token reaches, not how many:
// not modelled (the published runs force-balance the tokens). Multi-token prediction
// (num_nextn_predict_layers > 0) is refused: not modelled.
// max_position_embeddings does not set seq_length (the run's sequence is the scenario's).
#include "models/input/hf_config.h"

#include <algorithm>

#include "models/errors.h"
#include "models/json_input.h"
#include "models/input/keys.h"

namespace trainsim {

namespace {

using json = nlohmann::json;

[[noreturn]] void bad(const std::string& path, const std::string& field, const json& value,
                      const std::string& what) {
  throw InputError(path + ": field '" + field + "' = " + value.dump() + ": " + what);
}

std::int64_t need_int(const json& c, const std::string& path, const char* field) {
  auto it = c.find(field);
  if (it == c.end()) throw InputError(path + ": missing field '" + std::string(field) + "'");
  if (!it->is_number_integer() || it->get<std::int64_t>() <= 0)
    bad(path, field, *it, "expected a positive integer");
  return it->get<std::int64_t>();
}

std::string text(bool b) { return b ? "true" : "false"; }

using Keys = std::vector<std::pair<std::string, std::string>>;

/// The model key that fills `member`, named through the key table (models/input/keys.h), and
/// its YAML value.
template <typename T>
void put(Keys& out, T ModelConfig::*member, const std::string& value) {
  out.emplace_back(input::last_of(key_of(member)), value);
}

/// num_experts / num_local_experts, top-k, expert and shared-expert sizes; false for a dense
/// model.
bool import_moe(const json& c, const std::string& path, std::int64_t ffn, Keys& out) {
  const char* experts_key = c.contains("num_experts") ? "num_experts" : "num_local_experts";
  if (!c.contains(experts_key) || c[experts_key].is_null() || c[experts_key] == 0) return false;
  put(out, &ModelConfig::num_experts, std::to_string(need_int(c, path, experts_key)));
  put(out, &ModelConfig::moe_router_topk, std::to_string(need_int(c, path, "num_experts_per_tok")));
  put(out, &ModelConfig::moe_ffn_hidden_size, std::to_string(c.contains("moe_intermediate_size")
                                                ? need_int(c, path, "moe_intermediate_size")
                                                : ffn));
  if (c.contains("shared_expert_intermediate_size") && c["shared_expert_intermediate_size"] != 0)
    put(out, &ModelConfig::moe_shared_expert_intermediate_size, std::to_string(need_int(c, path, "shared_expert_intermediate_size")));
  put(out, &ModelConfig::moe_grouped_gemm, "true");
  return true;
}

/// Megatron's moe_layer_freq as a list: 1 for an MoE layer, 0 for a dense one.
void put_layer_pattern(const std::vector<bool>& is_moe, Keys& out) {
  std::string pattern = "[";
  for (std::size_t i = 0; i < is_moe.size(); ++i)
    pattern += (i ? ", " : "") + std::string(is_moe[i] ? "1" : "0");
  put(out, &ModelConfig::moe_layer_freq, pattern + "]");
}

/// Qwen3-MoE's dense layers (transformers models/qwen3_moe/modeling_qwen3_moe.py,
/// Qwen3MoeDecoderLayer): layer i runs the sparse MoE block when i is not in mlp_only_layers
/// and (i + 1) % decoder_sparse_step == 0, else a dense MLP of intermediate_size. Anything but
/// MoE on every layer becomes Megatron's moe_layer_freq pattern, one 0/1 per layer.
void import_moe_layers(const json& c, const std::string& path, std::int64_t layers, Keys& out) {
  const bool has_step = c.contains("decoder_sparse_step") && !c["decoder_sparse_step"].is_null();
  const bool has_only = c.contains("mlp_only_layers") && !c["mlp_only_layers"].is_null();
  if (!has_step && !has_only) return;
  const std::int64_t step = has_step ? need_int(c, path, "decoder_sparse_step") : 1;
  std::vector<bool> is_moe(std::size_t(layers), false);
  for (std::int64_t i = 0; i < layers; ++i) is_moe[std::size_t(i)] = (i + 1) % step == 0;
  if (has_only) {
    const json& only = c["mlp_only_layers"];
    if (!only.is_array()) bad(path, "mlp_only_layers", only, "expected a list of layer indices");
    for (const json& i : only) {
      if (!i.is_number_integer() || i.get<std::int64_t>() < 0 || i.get<std::int64_t>() >= layers)
        bad(path, "mlp_only_layers", only,
            "each entry is a layer index in [0, num_hidden_layers = " + std::to_string(layers) + ")");
      is_moe[std::size_t(i.get<std::int64_t>())] = false;
    }
  }
  if (std::all_of(is_moe.begin(), is_moe.end(), [](bool b) { return b; })) return;
  put_layer_pattern(is_moe, out);
}

/// Sliding windows: on every layer (Mistral style) or alternating with full attention.
void import_windows(const json& c, const std::string& path, const std::string& a, Keys& out) {
  const bool sliding = c.contains("sliding_window") && c["sliding_window"].is_number_integer() &&
                       c.value("use_sliding_window", a == "GptOssForCausalLM" ||
                                                         a == "MixtralForCausalLM" ||
                                                         a == "MistralForCausalLM");
  if (!sliding) return;
  put(out, &ModelConfig::window_size, std::to_string(c["sliding_window"].get<std::int64_t>()));
  if (!c.contains("layer_types") || !c["layer_types"].is_array()) return;
  const json& t = c["layer_types"];
  bool alternating = t.size() >= 2;
  for (std::size_t i = 0; i < t.size(); ++i)
    alternating = alternating && t[i] == (i % 2 == 0 ? "sliding_attention" : "full_attention");
  if (!alternating)
    bad(path, "layer_types", t, "only sliding/full alternation (or all sliding) is modelled");
  put(out, &ModelConfig::window_attn_skip_freq, "2");
}

/// DeepSeek-V2 / V3: multi-head latent attention and the routed/shared experts.
void import_deepseek(const json& c, const std::string& path, std::int64_t layers, Keys& out) {
  if (c.contains("num_nextn_predict_layers") && c["num_nextn_predict_layers"] != 0)
    bad(path, "num_nextn_predict_layers", c["num_nextn_predict_layers"],
        "multi-token prediction (Megatron's mtp_num_layers) is not modelled; set it to 0 in a "
        "copy of the config to simulate the model without its MTP module");
  put(out, &ModelConfig::multi_latent_attention, "true");
  put(out, &ModelConfig::qk_layernorm, "true");
  if (c.contains("q_lora_rank") && !c["q_lora_rank"].is_null())
    put(out, &ModelConfig::q_lora_rank, std::to_string(need_int(c, path, "q_lora_rank")));
  put(out, &ModelConfig::kv_lora_rank, std::to_string(need_int(c, path, "kv_lora_rank")));
  put(out, &ModelConfig::qk_head_dim, std::to_string(need_int(c, path, "qk_nope_head_dim")));
  put(out, &ModelConfig::qk_pos_emb_head_dim, std::to_string(need_int(c, path, "qk_rope_head_dim")));
  put(out, &ModelConfig::v_head_dim, std::to_string(need_int(c, path, "v_head_dim")));
  if (!c.contains("n_routed_experts") || c["n_routed_experts"].is_null()) return;
  const std::int64_t moe_ffn = need_int(c, path, "moe_intermediate_size");
  put(out, &ModelConfig::num_experts, std::to_string(need_int(c, path, "n_routed_experts")));
  put(out, &ModelConfig::moe_router_topk, std::to_string(need_int(c, path, "num_experts_per_tok")));
  put(out, &ModelConfig::moe_ffn_hidden_size, std::to_string(moe_ffn));
  if (c.contains("n_shared_experts") && !c["n_shared_experts"].is_null() &&
      c["n_shared_experts"] != 0)
    put(out, &ModelConfig::moe_shared_expert_intermediate_size, std::to_string(moe_ffn * need_int(c, path, "n_shared_experts")));
  put(out, &ModelConfig::moe_grouped_gemm, "true");
  std::int64_t dense = 0;
  if (c.contains("first_k_dense_replace") && !c["first_k_dense_replace"].is_null()) {
    const json& k = c["first_k_dense_replace"];
    if (!k.is_number_integer() || k.get<std::int64_t>() < 0 || k.get<std::int64_t>() > layers)
      bad(path, "first_k_dense_replace", k,
          "expected an integer in [0, num_hidden_layers = " + std::to_string(layers) + "]");
    dense = k.get<std::int64_t>();
  }
  if (dense == 0) return;
  std::vector<bool> is_moe(std::size_t(layers), true);
  for (std::int64_t i = 0; i < dense; ++i) is_moe[std::size_t(i)] = false;
  put_layer_pattern(is_moe, out);
}

}  // namespace

std::vector<std::pair<std::string, std::string>> import_hf_config(const std::string& path) {
  const std::string file_text =
      read_input_file(path, "Hugging Face config", "a config.json file", kSmallInputMaxBytes);
  const json c = parse_json_input(file_text, path);
  if (!c.is_object()) throw InputError(path + ": a Hugging Face config.json is a JSON object");
  const std::vector<std::string> known = {"LlamaForCausalLM", "Qwen3ForCausalLM",
                                          "Qwen3MoeForCausalLM", "MixtralForCausalLM",
                                          "MistralForCausalLM", "Qwen2ForCausalLM",
                                          "GptOssForCausalLM", "DeepseekV2ForCausalLM",
                                          "DeepseekV3ForCausalLM"};
  const json arch = c.value("architectures", json::array());
  if (!arch.is_array() || arch.size() != 1 || !arch[0].is_string() ||
      std::find(known.begin(), known.end(), arch[0].get<std::string>()) == known.end())
    bad(path, "architectures", arch,
        "trainsim imports LlamaForCausalLM, Qwen3ForCausalLM, Qwen3MoeForCausalLM, "
        "MixtralForCausalLM, MistralForCausalLM, Qwen2ForCausalLM, GptOssForCausalLM, "
        "DeepseekV2ForCausalLM and DeepseekV3ForCausalLM");
  const std::string a = arch[0].get<std::string>();
  const bool deepseek = a == "DeepseekV2ForCausalLM" || a == "DeepseekV3ForCausalLM";
  if (!deepseek)
    for (const char* mla : {"q_lora_rank", "kv_lora_rank"})
      if (c.contains(mla) && !c[mla].is_null())
        bad(path, mla, c[mla], "multi-head latent attention is imported for DeepSeek-V2 / V3 "
                               "architectures only");
  if (c.value("hidden_act", std::string("silu")) != "silu")
    bad(path, "hidden_act", c["hidden_act"], "only gated SiLU (SwiGLU) MLPs are imported");

  std::vector<std::pair<std::string, std::string>> out;
  const std::int64_t heads = need_int(c, path, "num_attention_heads");
  const std::int64_t layers = need_int(c, path, "num_hidden_layers");
  put(out, &ModelConfig::num_layers, std::to_string(layers));
  put(out, &ModelConfig::hidden_size, std::to_string(need_int(c, path, "hidden_size")));
  put(out, &ModelConfig::num_attention_heads, std::to_string(heads));
  if (!deepseek && c.contains("num_key_value_heads") && !c["num_key_value_heads"].is_null()) {
    const std::int64_t groups = need_int(c, path, "num_key_value_heads");
    if (groups != heads) put(out, &ModelConfig::num_query_groups, std::to_string(groups));
  }
  if (!deepseek && c.contains("head_dim") && !c["head_dim"].is_null())
    put(out, &ModelConfig::kv_channels, std::to_string(need_int(c, path, "head_dim")));
  const std::int64_t ffn = need_int(c, path, "intermediate_size");
  put(out, &ModelConfig::ffn_hidden_size, std::to_string(ffn));
  put(out, &ModelConfig::swiglu, "true");
  if (c.contains("rms_norm_eps")) put(out, &ModelConfig::normalization, "RMSNorm");
  if (c.contains("rope_theta") || c.contains("rope_scaling")) put(out, &ModelConfig::position_embedding_type, "rope");
  put(out, &ModelConfig::untie_embeddings_and_output_weights, text(!c.value("tie_word_embeddings", false)));
  put(out, &ModelConfig::add_bias_linear, text(c.value("attention_bias", false)));
  if (a == "Qwen2ForCausalLM") put(out, &ModelConfig::add_qkv_bias, "true");
  // Qwen3 (dense and MoE) normalizes each head's query and key (transformers
  // modeling_qwen3.py Qwen3Attention q_norm / k_norm; Megatron-Bridge's Qwen3 providers set
  // qk_layernorm).
  if (a == "Qwen3ForCausalLM" || a == "Qwen3MoeForCausalLM") put(out, &ModelConfig::qk_layernorm, "true");
  const std::int64_t vocab = need_int(c, path, "vocab_size");
  put(out, &ModelConfig::padded_vocab_size, std::to_string((vocab + 127) / 128 * 128));
  put(out, &ModelConfig::hidden_dropout, "0.0");
  if (c.contains("attention_dropout") && c["attention_dropout"].is_number())
    put(out, &ModelConfig::attention_dropout, c["attention_dropout"].dump());
  put(out, &ModelConfig::attention_backend, "flash");
  if (deepseek)
    import_deepseek(c, path, layers, out);
  else if (import_moe(c, path, ffn, out))
    import_moe_layers(c, path, layers, out);
  import_windows(c, path, a, out);
  return out;
}

}  // namespace trainsim
