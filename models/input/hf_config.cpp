// Mapping (Hugging Face transformers config fields -> Megatron-Core arguments, as Megatron-
// Bridge's model providers convert them):
//   num_hidden_layers -> num_layers; hidden_size; num_attention_heads;
//   num_key_value_heads -> num_query_groups (GQA when fewer than the heads);
//   head_dim -> kv_channels (when given; else hidden / heads);
//   intermediate_size -> ffn_hidden_size (Mixtral, GPT-OSS: the expert size, moe_ffn_hidden_size);
//   hidden_act silu -> swiglu (these families' MLPs are gated SiLU), but GPT-OSS's: its experts
//   run the clamped quick-GELU GLU (quick_geglu, activation_func_clamp_value from swiglu_limit,
//   7.0 where absent, and glu_linear_offset 1.0: Megatron-Bridge 067f987
//   src/megatron/bridge/models/gpt_oss/gpt_oss_bridge.py provider_bridge); rms_norm_eps -> RMSNorm;
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
// not modelled (the published runs force-balance the tokens). DeepSeek-V3's multi-token
// prediction: num_nextn_predict_layers -> mtp_num_layers (Megatron-Bridge 067f987
// deepseek_v3_bridge.py: `provider.mtp_num_layers = num_nextn_predict_layers or None`);
// DeepSeek-V2's bridge maps no such field, so a V2 config that sets it is refused.
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

/// A field of the wrong JSON type: "FILE: field 'X': expected a string, got 5".
[[noreturn]] void wrong_type(const std::string& path, const std::string& field, const json& value,
                             const std::string& expected) {
  throw InputError(path + ": field '" + field + "': expected " + expected + ", got " +
                   value.dump());
}

/// A boolean field, `absent` when missing or null.
bool flag(const json& c, const std::string& path, const char* field, bool absent) {
  auto it = c.find(field);
  if (it == c.end() || it->is_null()) return absent;
  if (!it->is_boolean()) wrong_type(path, field, *it, "true or false");
  return it->get<bool>();
}

/// A string field, `absent` when missing or null.
std::string word(const json& c, const std::string& path, const char* field,
                 const std::string& absent) {
  auto it = c.find(field);
  if (it == c.end() || it->is_null()) return absent;
  if (!it->is_string()) wrong_type(path, field, *it, "a string");
  return it->get<std::string>();
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

/// The model key of `member` and its bounds (models/input/keys.h).
template <typename T>
const ScenarioKey& key_for(T ModelConfig::*member) {
  const ScenarioKey* k = find_scenario_key(key_of(member));
  TRAINSIM_CHECK(k != nullptr, "no model key for an imported member");
  return *k;
}

/// `v`, imported from the field `field` (whose value in the file is `shown`), within the bounds
/// of the model key that `member` fills: a value a scenario would refuse is refused here,
/// naming the config file, its field and its value. `how` says how v derives from the field
/// ("" when v is the field's value).
template <typename T>
std::int64_t within(const std::string& path, const char* field, const json& shown,
                    T ModelConfig::*member, std::int64_t v, const std::string& how = "") {
  const ScenarioKey& k = key_for(member);
  if (v < k.min)
    bad(path, field, shown, how + "below " + k.path + "'s bound " + std::to_string(k.min));
  if (k.max != 0 && v > k.max)
    bad(path, field, shown, how + "above " + k.path + "'s bound " + std::to_string(k.max));
  return v;
}

/// The integer field `field` as the model key that `member` fills, within its bounds.
template <typename T>
std::int64_t put_int(Keys& out, const json& c, const std::string& path, const char* field,
                     T ModelConfig::*member) {
  const std::int64_t v = need_int(c, path, field);
  within(path, field, c.at(field), member, v);
  put(out, member, std::to_string(v));
  return v;
}

/// num_experts_per_tok: at most the experts (Megatron-Core's router picks top-k of them).
void put_topk(Keys& out, const json& c, const std::string& path, const char* experts_key,
              std::int64_t experts) {
  const std::int64_t k = put_int(out, c, path, "num_experts_per_tok", &ModelConfig::moe_router_topk);
  if (k > experts)
    bad(path, "num_experts_per_tok", c["num_experts_per_tok"],
        "more experts per token than " + std::string(experts_key) + " = " +
            std::to_string(experts));
}

/// num_experts / num_local_experts, top-k, expert and shared-expert sizes; false for a dense
/// model.
bool import_moe(const json& c, const std::string& path, std::int64_t ffn, Keys& out) {
  const char* experts_key = c.contains("num_experts") ? "num_experts" : "num_local_experts";
  if (!c.contains(experts_key) || c[experts_key].is_null() || c[experts_key] == 0) return false;
  const std::int64_t experts = put_int(out, c, path, experts_key, &ModelConfig::num_experts);
  put_topk(out, c, path, experts_key, experts);
  if (c.contains("moe_intermediate_size"))
    put_int(out, c, path, "moe_intermediate_size", &ModelConfig::moe_ffn_hidden_size);
  else
    put(out, &ModelConfig::moe_ffn_hidden_size, std::to_string(ffn));
  if (c.contains("shared_expert_intermediate_size") && c["shared_expert_intermediate_size"] != 0)
    put_int(out, c, path, "shared_expert_intermediate_size",
            &ModelConfig::moe_shared_expert_intermediate_size);
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
  const bool sliding = c.contains("sliding_window") && !c["sliding_window"].is_null() &&
                       flag(c, path, "use_sliding_window",
                            a == "GptOssForCausalLM" || a == "MixtralForCausalLM" ||
                                a == "MistralForCausalLM");
  if (!sliding) return;
  put_int(out, c, path, "sliding_window", &ModelConfig::window_size);
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
void import_deepseek(const json& c, const std::string& path, bool v3, std::int64_t layers,
                     Keys& out) {
  if (c.contains("num_nextn_predict_layers") && !c["num_nextn_predict_layers"].is_null() &&
      c["num_nextn_predict_layers"] != 0) {
    if (!v3)
      bad(path, "num_nextn_predict_layers", c["num_nextn_predict_layers"],
          "multi-token prediction is imported for DeepseekV3ForCausalLM only (Megatron-Bridge's "
          "DeepSeek-V2 bridge maps no such field); give model.mtp_num_layers in the scenario");
    put_int(out, c, path, "num_nextn_predict_layers", &ModelConfig::mtp_num_layers);
  }
  put(out, &ModelConfig::multi_latent_attention, "true");
  put(out, &ModelConfig::qk_layernorm, "true");
  if (c.contains("q_lora_rank") && !c["q_lora_rank"].is_null())
    put_int(out, c, path, "q_lora_rank", &ModelConfig::q_lora_rank);
  put_int(out, c, path, "kv_lora_rank", &ModelConfig::kv_lora_rank);
  put_int(out, c, path, "qk_nope_head_dim", &ModelConfig::qk_head_dim);
  put_int(out, c, path, "qk_rope_head_dim", &ModelConfig::qk_pos_emb_head_dim);
  put_int(out, c, path, "v_head_dim", &ModelConfig::v_head_dim);
  if (!c.contains("n_routed_experts") || c["n_routed_experts"].is_null()) return;
  const std::int64_t experts = put_int(out, c, path, "n_routed_experts", &ModelConfig::num_experts);
  put_topk(out, c, path, "n_routed_experts", experts);
  const std::int64_t moe_ffn =
      put_int(out, c, path, "moe_intermediate_size", &ModelConfig::moe_ffn_hidden_size);
  if (c.contains("n_shared_experts") && !c["n_shared_experts"].is_null() &&
      c["n_shared_experts"] != 0) {
    // Both factors are bounded (2^16 experts, 2^22 sizes): the product fits 64 bits.
    const std::int64_t shared = need_int(c, path, "n_shared_experts");
    within(path, "n_shared_experts", c["n_shared_experts"], &ModelConfig::num_experts, shared);
    put(out, &ModelConfig::moe_shared_expert_intermediate_size,
        std::to_string(within(path, "n_shared_experts", c["n_shared_experts"],
                              &ModelConfig::moe_shared_expert_intermediate_size, moe_ffn * shared,
                              "times moe_intermediate_size = " + std::to_string(moe_ffn) +
                                  " it is " + std::to_string(moe_ffn * shared) + ", ")));
  }
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

/// GPT-OSS's experts: the clamped quick-GELU GLU with a +1 linear offset, as Megatron-Bridge's
/// GPT-OSS bridge sets it (the clamp is the config's swiglu_limit; the bridge writes 7.0, the
/// published config's value, which is taken where the field is absent).
void import_gpt_oss_activation(const json& c, const std::string& path, Keys& out) {
  put(out, &ModelConfig::quick_geglu, "true");
  std::string clamp = "7.0";
  if (c.contains("swiglu_limit") && !c["swiglu_limit"].is_null()) {
    const json& v = c["swiglu_limit"];
    if (!v.is_number()) wrong_type(path, "swiglu_limit", v, "a number");
    const ScenarioKey& k = key_for(&ModelConfig::activation_func_clamp_value);
    const double limit = v.get<double>();
    if (!(limit > 0 && limit <= k.hi))
      bad(path, "swiglu_limit", v,
          "expected a clamp in (0, " + json(k.hi).dump() + "] (" + k.path + ")");
    clamp = v.dump();
  }
  put(out, &ModelConfig::activation_func_clamp_value, clamp);
  put(out, &ModelConfig::glu_linear_offset, "1.0");
}

/// hidden_size, num_attention_heads and (but for DeepSeek's MLA) num_key_value_heads and
/// head_dim.
void import_attention_shape(const json& c, const std::string& path, bool deepseek, Keys& out) {
  put_int(out, c, path, "hidden_size", &ModelConfig::hidden_size);
  const std::int64_t heads =
      put_int(out, c, path, "num_attention_heads", &ModelConfig::num_attention_heads);
  if (!deepseek && c.contains("num_key_value_heads") && !c["num_key_value_heads"].is_null()) {
    const std::int64_t groups = need_int(c, path, "num_key_value_heads");
    within(path, "num_key_value_heads", c["num_key_value_heads"], &ModelConfig::num_query_groups,
           groups);
    // Each key/value group serves heads / groups query heads: Megatron-Core's TransformerConfig
    // refuses num_attention_heads not a multiple of num_query_groups.
    if (heads % groups != 0)
      bad(path, "num_key_value_heads", c["num_key_value_heads"],
          "num_attention_heads = " + std::to_string(heads) + " is not a multiple of it");
    if (groups != heads) put(out, &ModelConfig::num_query_groups, std::to_string(groups));
  }
  if (!deepseek && c.contains("head_dim") && !c["head_dim"].is_null())
    put_int(out, c, path, "head_dim", &ModelConfig::kv_channels);
}

/// vocab_size padded to a multiple of 128, no hidden dropout, and attention_dropout.
void import_vocab_and_dropout(const json& c, const std::string& path, Keys& out) {
  // Bounded before padding, so that the padding cannot overflow.
  const std::int64_t vocab = need_int(c, path, "vocab_size");
  within(path, "vocab_size", c["vocab_size"], &ModelConfig::padded_vocab_size, vocab);
  const std::int64_t padded = (vocab + 127) / 128 * 128;
  within(path, "vocab_size", c["vocab_size"], &ModelConfig::padded_vocab_size, padded,
         "padded to a multiple of 128 it is " + std::to_string(padded) + ", ");
  put(out, &ModelConfig::padded_vocab_size, std::to_string(padded));
  put(out, &ModelConfig::hidden_dropout, "0.0");
  if (!c.contains("attention_dropout") || c["attention_dropout"].is_null()) return;
  const json& d = c["attention_dropout"];
  if (!d.is_number()) wrong_type(path, "attention_dropout", d, "a number");
  const ScenarioKey& k = key_for(&ModelConfig::attention_dropout);
  const double p = d.get<double>();
  if (!(p >= k.lo && (k.hi_open ? p < k.hi : p <= k.hi)))
    bad(path, "attention_dropout", d,
        "outside " + k.path + "'s bounds [" + json(k.lo).dump() + ", " + json(k.hi).dump() +
            (k.hi_open ? ")" : "]"));
  put(out, &ModelConfig::attention_dropout, d.dump());
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
  if (word(c, path, "hidden_act", "silu") != "silu")
    bad(path, "hidden_act", c["hidden_act"], "only gated SiLU (SwiGLU) MLPs are imported");

  Keys out;
  // Bounded before anything is sized per layer (the MoE layer pattern below).
  const std::int64_t layers = put_int(out, c, path, "num_hidden_layers", &ModelConfig::num_layers);
  import_attention_shape(c, path, deepseek, out);
  const std::int64_t ffn = put_int(out, c, path, "intermediate_size", &ModelConfig::ffn_hidden_size);
  if (a == "GptOssForCausalLM")
    import_gpt_oss_activation(c, path, out);
  else
    put(out, &ModelConfig::swiglu, "true");
  if (c.contains("rms_norm_eps")) put(out, &ModelConfig::normalization, "RMSNorm");
  if (c.contains("rope_theta") || c.contains("rope_scaling")) put(out, &ModelConfig::position_embedding_type, "rope");
  put(out, &ModelConfig::untie_embeddings_and_output_weights,
      text(!flag(c, path, "tie_word_embeddings", false)));
  put(out, &ModelConfig::add_bias_linear, text(flag(c, path, "attention_bias", false)));
  if (a == "Qwen2ForCausalLM") put(out, &ModelConfig::add_qkv_bias, "true");
  // Qwen3 (dense and MoE) normalizes each head's query and key (transformers
  // modeling_qwen3.py Qwen3Attention q_norm / k_norm; Megatron-Bridge's Qwen3 providers set
  // qk_layernorm).
  if (a == "Qwen3ForCausalLM" || a == "Qwen3MoeForCausalLM") put(out, &ModelConfig::qk_layernorm, "true");
  import_vocab_and_dropout(c, path, out);
  put(out, &ModelConfig::attention_backend, "flash");
  if (deepseek)
    import_deepseek(c, path, a == "DeepseekV3ForCausalLM", layers, out);
  else if (import_moe(c, path, ffn, out))
    import_moe_layers(c, path, layers, out);
  import_windows(c, path, a, out);
  return out;
}

}  // namespace trainsim
