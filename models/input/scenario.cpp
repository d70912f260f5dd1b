// Scenario files: YAML -> Scenario, with `--set` overrides, defaults and validation
// (DESIGN.md "Scenario files"). Every user error is an InputError naming the file, the dotted
// field, the value and, where the YAML parser knows it, the line.
#include "models/input/scenario.h"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <limits>
#include <map>
#include <set>
#include <sstream>

#include "models/hardware/hardware.h"
#include "models/input/hf_config.h"
#include "models/json_input.h"

namespace trainsim {
namespace {

// ---------------------------------------------------------------------------------------
// Schema: every key a scenario may hold. Sections are mappings; leaves are values.

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

/// "1048576 (2^20)" for powers of two, else the number.
std::string show_limit(std::int64_t max) {
  std::string out = std::to_string(max);
  if (max > 1024 && (max & (max - 1)) == 0)
    out += " = 2^" + std::to_string(63 - __builtin_clzll(static_cast<unsigned long long>(max)));
  return out;
}

std::string limit_text(const std::string& field, std::int64_t max) {
  return "must be at most " + show_limit(max) + " (trainsim's upper bound for " + field +
         ", models/input/scenario.h: larger sizes would overflow the model's 64-bit arithmetic)";
}

// ---------------------------------------------------------------------------------------
// Reader: typed access to the YAML tree with precise error messages.

class Reader {
 public:
  Reader(YAML::Node root, std::string source, std::map<std::string, std::string> overrides)
      : root_(std::move(root)), source_(std::move(source)), overrides_(std::move(overrides)) {}

  /// The node at a dotted path, or an undefined node when any component is absent.
  YAML::Node at(const std::string& path) const {
    YAML::Node cur;
    cur.reset(root_);
    std::string rest = path;
    while (true) {
      auto dot = rest.find('.');
      std::string key = rest.substr(0, dot);
      if (!cur.IsMap()) return YAML::Node(YAML::NodeType::Undefined);
      const YAML::Node& ccur = cur;  // const lookup: never inserts
      YAML::Node next = ccur[key];
      if (!next.IsDefined()) return YAML::Node(YAML::NodeType::Undefined);
      cur.reset(next);
      if (dot == std::string::npos) return cur;
      rest = rest.substr(dot + 1);
    }
  }

  /// "FILE:LINE" for a file value, "FILE (--set k=v)" for an override.
  std::string where(const std::string& path, const YAML::Node& node) const {
    for (std::string p = path; !p.empty(); p = parent_of(p)) {
      auto it = overrides_.find(p);
      if (it != overrides_.end()) return source_ + " (--set " + it->first + "=" + it->second + ")";
    }
    if (node.IsDefined() && !node.Mark().is_null())
      return source_ + ":" + std::to_string(node.Mark().line + 1);
    return source_;
  }

  static std::string show(const YAML::Node& node) {
    if (!node.IsDefined()) return "(missing)";
    if (node.IsNull()) return "null";
    if (node.IsMap()) return "(a mapping)";
    if (node.IsSequence()) {  // a short list of plain values is shown as written
      std::string out = "[";
      for (std::size_t i = 0; i < node.size(); ++i) {
        if (!node[i].IsScalar() || i >= 8 || out.size() > 200) return "(a sequence)";
        out += (i ? ", " : "") + node[i].Scalar();
      }
      return out + "]";
    }
    return quote(node.Scalar());
  }

  [[noreturn]] void fail(const std::string& path, const YAML::Node& node,
                         const std::string& what) const {
    throw InputError(where(path, node) + ": field '" + path + "' = " + show(node) + ": " + what);
  }

  [[noreturn]] void missing(const std::string& path) const {
    YAML::Node parent = at(parent_of(path));
    std::string loc = parent_of(path).empty() ? source_ : where(parent_of(path), parent);
    throw InputError(loc + ": missing required field '" + path + "'");
  }

  /// Present and not null.
  bool has(const std::string& path) const {
    YAML::Node n = at(path);
    return n.IsDefined() && !n.IsNull();
  }

  /// An integer >= min_value. `allow_integral_float` accepts e.g. 5e8 (DeepSpeed's own config
  /// examples write bucket sizes that way); elsewhere a float is a type error.
  std::optional<std::int64_t> get_int(const std::string& path, std::int64_t min_value,
                                      bool required, bool allow_integral_float = false) const {
    YAML::Node n = at(path);
    if (!n.IsDefined() || n.IsNull()) {
      if (required) missing(path);
      return std::nullopt;
    }
    if (!n.IsScalar()) fail(path, n, "expected an integer");
    const std::string& s = n.Scalar();
    if (n.Tag() == "!") fail(path, n, "expected an integer, got a quoted string");
    const std::int64_t max_value = scenario_size_limit(path);
    std::int64_t value = 0;
    bool out_of_range = false;
    if (!parse_int(s, value, &out_of_range)) {
      double d = 0;
      if (out_of_range) {
        // All digits, but beyond 64 bits.
        if (s[0] == '-') fail(path, n, "must be a positive integer (> 0)");
        fail(path, n, max_value > 0 ? limit_text(path, max_value) : "integer out of range");
      } else if (parse_double(s, d)) {
        if (!allow_integral_float || d != std::floor(d))
          fail(path, n, "expected an integer, got a floating-point number");
        if (d < static_cast<double>(min_value))
          fail(path, n, min_value == 1 ? "must be a positive integer (> 0)"
                                       : "must be an integer >= " + std::to_string(min_value));
        if (max_value > 0 && d > static_cast<double>(max_value))
          fail(path, n, limit_text(path, max_value));
        if (std::fabs(d) > 9.0e18) fail(path, n, "integer out of range");
        value = static_cast<std::int64_t>(d);
      } else {
        fail(path, n, "expected an integer, got a string");
      }
    }
    if (value < min_value)
      fail(path, n,
           min_value == 1 ? "must be a positive integer (> 0)"
                          : "must be an integer >= " + std::to_string(min_value));
    if (max_value > 0 && value > max_value) fail(path, n, limit_text(path, max_value));
    return value;
  }

  std::optional<bool> get_bool(const std::string& path) const {
    YAML::Node n = at(path);
    if (!n.IsDefined() || n.IsNull()) return std::nullopt;
    bool b = false;
    if (!n.IsScalar() || n.Tag() == "!" || !YAML::convert<bool>::decode(n, b))
      fail(path, n, "expected a boolean (true or false)");
    return b;
  }

  std::optional<std::string> get_string(const std::string& path, bool required) const {
    YAML::Node n = at(path);
    if (!n.IsDefined() || n.IsNull()) {
      if (required) missing(path);
      return std::nullopt;
    }
    if (!n.IsScalar()) fail(path, n, "expected a string");
    return n.Scalar();
  }

  /// One of `allowed` (their index), or nullopt when absent or null.
  std::optional<std::size_t> get_enum(const std::string& path,
                                      const std::vector<std::string>& allowed) const {
    auto s = get_string(path, false);
    if (!s) return std::nullopt;
    for (std::size_t i = 0; i < allowed.size(); ++i)
      if (*s == allowed[i]) return i;
    std::string list;
    for (const auto& a : allowed) list += (list.empty() ? "" : ", ") + a;
    fail(path, at(path), "expected one of: " + list);
  }

  /// A decimal integer that fits 64 bits; `out_of_range` (if given) tells an all-digit text
  /// beyond 64 bits from one that is not an integer at all.
  static bool parse_int(const std::string& s, std::int64_t& out, bool* out_of_range = nullptr) {
    if (out_of_range) *out_of_range = false;
    if (s.empty()) return false;
    std::size_t i = (s[0] == '+' || s[0] == '-') ? 1 : 0;
    if (i == s.size()) return false;
    for (std::size_t j = i; j < s.size(); ++j)
      if (s[j] < '0' || s[j] > '9') return false;
    errno = 0;
    char* end = nullptr;
    long long v = std::strtoll(s.c_str(), &end, 10);
    if (errno == ERANGE) {
      if (out_of_range) *out_of_range = true;
      return false;
    }
    out = v;
    return true;
  }

  static bool parse_double(const std::string& s, double& out) {
    if (s.empty() || std::isspace(static_cast<unsigned char>(s[0]))) return false;
    // Only decimal notation (YAML 1.2 core schema floats); strtod would also take hex/nan.
    for (char c : s)
      if (!(std::isdigit(static_cast<unsigned char>(c)) || c == '.' || c == 'e' || c == 'E' ||
            c == '+' || c == '-'))
        return false;
    char* end = nullptr;
    errno = 0;
    double v = std::strtod(s.c_str(), &end);
    if (end != s.c_str() + s.size() || errno == ERANGE || !std::isfinite(v)) return false;
    out = v;
    return true;
  }

  const std::string& source() const { return source_; }

 private:
  YAML::Node root_;
  std::string source_;
  std::map<std::string, std::string> overrides_;
};

// ---------------------------------------------------------------------------------------

/// Rejects unknown and duplicate keys and non-mapping sections, recursively.
void check_keys(const YAML::Node& map, const std::string& prefix, const Reader& r) {
  std::set<std::string> seen;
  for (const auto& entry : map) {  // `entry` is a temporary pair, kept alive by the binding
    const YAML::Node k = entry.first;
    const YAML::Node v = entry.second;
    if (!k.IsScalar()) {
      throw InputError(r.where(prefix, k) + ": a key in '" + (prefix.empty() ? "(top)" : prefix) +
                       "' is not a plain name");
    }
    const std::string path = join(prefix, k.Scalar());
    if (!seen.insert(k.Scalar()).second)
      throw InputError(r.where(path, k) + ": duplicate key '" + path + "'");
    // `plan:` bounds a `trainsim plan` search; models/plan/planner.cpp reads and checks it.
    if (path == "plan") continue;
    if (is_section(path)) {
      if (v.IsNull()) continue;  // `deepspeed:` with nothing under it
      if (!v.IsMap()) r.fail(path, v, "expected a mapping of keys");
      check_keys(v, path, r);
    } else if (!is_leaf(path)) {
      throw InputError(r.where(path, k) + ": unknown key '" + path + "'" + suggestion(path));
    } else if (path == "model.window_size" && v.IsSequence()) {
      // Megatron's --window-size is a (left, right) pair; read_model_shape checks it.
    } else if (path == "parallel.recompute_modules" && v.IsSequence()) {
      // A list of module names; read_parallel checks it.
    } else if (path == "model.moe_layer_freq" && v.IsSequence()) {
      // A 0/1 per layer; read_moe_layer_freq checks it.
    } else if (v.IsMap() || v.IsSequence()) {
      r.fail(path, v, "expected a single value");
    }
  }
}

/// Valid UTF-8 only (YAML is Unicode text).
void check_utf8(const std::string& text, const std::string& source) {
  for (std::size_t i = 0, line = 1, line_begin = 0; i < text.size();) {
    const auto u = static_cast<unsigned char>(text[i]);
    const std::size_t len = u < 0x80 ? 1 : (u >> 5) == 0x6 ? 2 : (u >> 4) == 0xE ? 3
                          : (u >> 3) == 0x1E ? 4 : 0;
    bool ok = len > 0 && i + len <= text.size() && !(len == 2 && u < 0xC2);
    for (std::size_t k = 1; ok && k < len; ++k)
      ok = (static_cast<unsigned char>(text[i + k]) & 0xC0) == 0x80;
    if (!ok) {
      char hex[8];
      std::snprintf(hex, sizeof hex, "0x%02X", u);
      throw InputError(source + ":" + std::to_string(line) + ":" +
                       std::to_string(i - line_begin + 1) + ": not UTF-8 text (byte " + hex + ")");
    }
    if (u == '\n') ++line, line_begin = i + 1;
    i += len;
  }
}

/// The scan's state between characters (refuse_yaml_cpp_hangs).
struct YamlScan {
  int flow = 0;                          ///< depth of [ ] / { } collections
  char quote = 0;                        ///< the open quoted scalar's quote, or 0
  std::size_t line = 1, line_begin = 0;  ///< the line's number and its first byte
  bool node_start = true;    ///< the next non-blank character starts a node
  bool after_blank = true;   ///< the previous character was a blank (or the line start)
  bool after_quoted = false; ///< a quoted scalar or a collection just closed in block context
};

bool yaml_blank(char c) { return c == ' ' || c == '\t' || c == '\r'; }

std::string yaml_at(const std::string& source, std::size_t line, std::size_t column) {
  return source + ":" + std::to_string(line) + ":" + std::to_string(column + 1);
}

/// YAML allows only printable characters (YAML 1.2 c-printable); yaml-cpp chokes on some.
void check_printable(unsigned char u, std::size_t line, std::size_t column,
                     const std::string& source) {
  if ((u < 0x20 && u != '\n' && u != '\t' && u != '\r') || u == 0x7F) {
    char hex[8];
    std::snprintf(hex, sizeof hex, "0x%02X", u);
    throw InputError(yaml_at(source, line, column) + ": YAML syntax error: control character " +
                     hex + " (a scenario file is text)");
  }
}

/// A line break at byte i. Quoted scalars stay on one line in scenario files: a multi-line
/// one hid the lines after it from this scan (and hung yaml-cpp; found by fuzz_scenario).
/// Flow collections ([a, b] / {k: v}) may span lines, as DESIGN.md's own example does
/// ("model: {num_layers: 128, ...,\n seq_length: 2048}"); but an unclosed one spanning lines
/// with comments hung yaml-cpp (fuzz/open_findings/scenario_hang_multiline_flow.yaml), so
/// comments inside them are refused, and so is one left open at the end of the text.
void on_line_break(YamlScan& st, std::size_t i, const std::string& source) {
  if (st.quote)
    throw InputError(source + ":" + std::to_string(st.line) + ": YAML string opened with " +
                     std::string(1, st.quote) + " is not closed on its line (quoted values "
                     "span one line in scenario files)");
  st.after_quoted = false;
  ++st.line, st.line_begin = i + 1, st.after_blank = true;
  if (st.flow == 0) st.node_start = true;  // inside [ ] / { } a line break continues the value
}

/// A character inside a quoted scalar (escapes, '' in '...', the closing quote).
void in_quoted(YamlScan& st, const std::string& text, std::size_t& i) {
  const char c = text[i];
  if (st.quote == '"' && c == '\\') {
    ++i;  // an escape: skip the next character
  } else if (c == st.quote) {
    if (st.quote == '\'' && i + 1 < text.size() && text[i + 1] == '\'') {
      ++i;  // '' in '...'
    } else {
      st.quote = 0;
      st.after_quoted = st.flow == 0;
    }
  }
}

/// In block context a quoted scalar or a flow collection is followed by ':' (a key), a
/// comment or the line's end; yaml-cpp hangs on a ',' there ("'',", "[a],").
void check_after_closed(YamlScan& st, char c, std::size_t column, const std::string& source) {
  st.after_quoted = false;
  if (c != ':' && !(c == '#' && st.after_blank))
    throw InputError(yaml_at(source, st.line, column) + ": YAML syntax error: '" +
                     std::string(1, c) +
                     "' after a quoted string or a [ ] / { } collection (expected ':', a "
                     "comment or the line's end)");
}

/// At a node's start: tags, anchors, aliases, complex keys and directives (no scenario needs
/// them, and yaml-cpp hangs on some malformed uses, "!\r&\r..."; aliases also allow
/// exponential "billion laughs" expansion) and block scalars are refused.
void refuse_unsupported_node(char c, bool next_blank, std::size_t column, int flow,
                             std::size_t line, const std::string& source) {
  const bool complex_key = c == '?' && next_blank;
  if (c == '!' || c == '&' || c == '*' || complex_key || (c == '%' && column == 0))
    throw InputError(yaml_at(source, line, column) + ": YAML " +
                     (c == '!'   ? "tags (!)"
                      : c == '&' ? "anchors (&)"
                      : c == '*' ? "aliases (*)"
                      : c == '%' ? "directives (%)"
                                 : "complex keys (? )") +
                     " are not supported in scenario files (plain keys and values only)");
  if (flow == 0 && (c == '|' || c == '>'))
    throw InputError(yaml_at(source, line, column) +
                     ": YAML block scalars (| and >) are not supported in scenario files "
                     "(write the value on one line)");
}

/// yaml-cpp 0.7 (Debian 12's) loops forever, allocating, on a ',' where a node starts outside
/// any flow collection (",\n- b", "!, b", found by fuzz/fuzz_scenario.cpp). Such a ',' is
/// invalid YAML (a plain scalar cannot start with a flow indicator), so this scan refuses it
/// first, with the line. A node starts at a line's first character, after "- " or ": " and
/// inside flow collections after '[', '{' or ','. The scan follows quoted scalars (one line
/// each), comments and flow collections ([ ], { }). Block scalars, tags, anchors, aliases,
/// complex keys and directives are refused: no scenario needs them, and yaml-cpp hung on
/// malformed uses of each.
void refuse_yaml_cpp_hangs(const std::string& text, const std::string& source) {
  check_utf8(text, source);
  YamlScan st;
  int& flow = st.flow;
  char& quote = st.quote;
  std::size_t& line = st.line;
  std::size_t& line_begin = st.line_begin;
  bool& node_start = st.node_start;
  bool& after_blank = st.after_blank;
  bool& after_quoted = st.after_quoted;
  for (std::size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    const std::size_t column = i - line_begin;  // 0-based
    const auto u = static_cast<unsigned char>(c);
    check_printable(u, line, column, source);
    // A lone CR is a line break as well (YAML 1.2 b-break; yaml-cpp agrees).
    if (c == '\n' || (c == '\r' && (i + 1 >= text.size() || text[i + 1] != '\n'))) {
      on_line_break(st, i, source);
      continue;
    }
    if (quote) {
      in_quoted(st, text, i);
      continue;
    }
    if (yaml_blank(c)) {
      after_blank = true;
      continue;
    }
    if (after_quoted) check_after_closed(st, c, column, source);
    const bool token_start = after_blank || node_start;
    after_blank = false;
    const char next = i + 1 < text.size() ? text[i + 1] : '\n';
    const bool next_blank = yaml_blank(next) || next == '\n';
    if (token_start) {
      if (c == '#' && (column == 0 || yaml_blank(text[i - 1]))) {  // a comment
        if (flow > 0)
          throw InputError(source + ":" + std::to_string(line) + ":" +
                           std::to_string(column + 1) +
                           ": YAML comments inside [ ] / { } are not supported in scenario "
                           "files (close the collection first)");
        while (i + 1 < text.size() && text[i + 1] != '\n') ++i;
        continue;
      }
      if (c == ',' && node_start && flow == 0)
        throw InputError(source + ":" + std::to_string(line) + ":" + std::to_string(column + 1) +
                         ": YAML syntax error: ',' cannot start a value outside [ ] or { }");
      if (node_start && (c == '"' || c == '\'')) {
        quote = c;
        node_start = false;
        continue;
      }
      if (node_start) refuse_unsupported_node(c, next_blank, column, flow, line, source);
    }
    if ((c == '[' || c == '{') && (node_start || flow > 0)) {  // else part of a plain scalar
      // yaml-cpp's time grows steeply with deeply nested flow collections (fuzz_scenario:
      // 10 s on 300 bytes); a scenario nests at most a list in a section.
      if (++flow > 8)
        throw InputError(source + ":" + std::to_string(line) + ":" + std::to_string(column + 1) +
                         ": YAML [ ] / { } nested more than 8 deep (not a scenario)");
      node_start = true;
      continue;
    }
    if ((c == ']' || c == '}') && flow > 0 && --flow == 0) {
      after_quoted = true;  // as after a quoted scalar: "[a],b" hangs yaml-cpp
      continue;
    }
    node_start = ((c == '-' || c == ':') && next_blank) || (c == ',' && flow > 0);
  }
  if (quote)
    throw InputError(source + ":" + std::to_string(line) + ": YAML string opened with " +
                     std::string(1, quote) + " is not closed");
  if (flow > 0)
    throw InputError(source + ":" + std::to_string(line) +
                     ": YAML syntax error: a [ ] / { } collection is not closed");
}

/// Writes `--set key=value` into the tree (creating sections as needed).
void apply_override(YAML::Node& root, const std::string& key, const std::string& value,
                    const std::string& source) {
  const std::string origin = source + ": --set " + key + "=" + value;
  if (!is_leaf(key) && !is_section(key))
    throw InputError(origin + ": unknown key '" + key + "'" + suggestion(key));
  refuse_yaml_cpp_hangs(value, origin);
  YAML::Node parsed;
  try {
    parsed = YAML::Load(value);
  } catch (const YAML::Exception& e) {
    throw InputError(origin + ": value is not valid YAML: " + e.msg);
  }
  YAML::Node cur;
  cur.reset(root);
  std::string rest = key;
  std::string done;
  for (auto dot = rest.find('.'); dot != std::string::npos; dot = rest.find('.')) {
    const std::string part = rest.substr(0, dot);
    done = join(done, part);
    YAML::Node child = cur[part];
    if (!child.IsDefined() || child.IsNull()) {
      cur[part] = YAML::Node(YAML::NodeType::Map);
      child.reset(cur[part]);
    } else if (!child.IsMap()) {
      throw InputError(origin + ": '" + done + "' is not a mapping in the scenario");
    }
    cur.reset(child);
    rest = rest.substr(dot + 1);
  }
  cur[rest] = parsed;
}

std::string stem_of(const std::string& source) {
  return std::filesystem::path(source).stem().string();
}

std::string where_prefix(const Scenario& s) {
  return (s.source_path.empty() ? std::string("<scenario>") : s.source_path) + ": ";
}

std::string kv(const std::string& field, std::int64_t value) {
  return field + " (" + std::to_string(value) + ")";
}
std::string kv_bool(const std::string& field, bool value) {
  return field + (value ? " (true)" : " (false)");
}

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
         kv("model.num_layers", m.num_layers) + ", " + kv("model.hidden_size", m.hidden_size) +
         ", " + kv("model.ffn_hidden_size", m.ffn_hidden_size) + ", " +
         kv("model.num_attention_heads", m.num_attention_heads) + " x " +
         kv("model.kv_channels", m.kv_channels) + ", " +
         kv("model.padded_vocab_size", m.padded_vocab_size) +
         "), above trainsim's bound of 2^50 (models/input/scenario.h kMaxScenarioParameters)");
  // Activation bytes of one layer and one microbatch, fp32 upper bound of
  // models/memory/memory_model.cpp (34 sbh + 5 a s^2 b at 2 bytes; here 4-byte values and masks:
  // 60 sbh + 12 a s^2 b) plus the fp32 logits (4 s b V), times every layer and microbatch.
  const Wide sbh = sq * b * h;
  Wide act_layer = 60 * sbh + 12 * a * sq * sq * b + 4 * sq * b * V;
  // MLA's per-head tensors (q, k of qk_head_dim + qk_pos_emb_head_dim, v and the output of
  // v_head_dim, their copies) and its latents, 4-byte values.
  if (m.multi_latent_attention)
    act_layer += 4 * sq * b * (3 * a * (kvc + Wide(m.v_head_dim)) + 3 * (Wide(m.q_lora_rank) +
                                                                    Wide(m.kv_lora_rank)));
  const Wide act_all = act_layer * L * p.num_microbatches;
  if (act_all > kMaxScenarioActivationBytes)
    fail("activations of " + show_wide(act_all) + " bytes (one layer of one microbatch: " +
         show_wide(act_layer) + " bytes from " + kv("model.seq_length", m.seq_length) + " x " +
         kv("parallel.micro_batch_size", p.micro_batch_size) + " x " +
         kv("model.hidden_size", m.hidden_size) + " and " +
         kv("model.num_attention_heads", m.num_attention_heads) + ", times " +
         kv("model.num_layers", m.num_layers) + " x " + std::to_string(p.num_microbatches) +
         " microbatches) exceed trainsim's bound of 2^60 bytes "
         "(models/input/scenario.h kMaxScenarioActivationBytes)");
  const Wide tokens = Wide(p.global_batch_size) * sq;
  if (tokens > kMaxScenarioTokensPerIteration)
    fail(show_wide(tokens) + " tokens per iteration (" +
         kv("parallel.global_batch_size", p.global_batch_size) + " x " +
         kv("model.seq_length", m.seq_length) +
         ") exceed trainsim's bound of 2^40 (models/input/scenario.h kMaxScenarioTokensPerIteration)");
}

/// The cluster's NICs must fit the system's fat tree, with the NIC numbering of sim/platform.cpp
/// (PlatformModel::fabric_endpoint: rail-optimized, a leaf holds NIC `nic` of m1 consecutive
/// nodes). Checked here so that the refusal names the file and cluster.nodes.
template <typename Fail>
void check_fabric_capacity(const Scenario& s, const SystemSpec& sys, const Fail& fail) {
  if (sys.switch_radix < 2 || sys.fat_tree_levels < 1 || sys.nics_per_node < 1) return;
  const Wide k = sys.switch_radix, rails = sys.nics_per_node;
  Wide capacity = 1, m1 = 1;
  for (int l = 1; l <= sys.fat_tree_levels; ++l) {
    capacity *= (l == sys.fat_tree_levels) ? k : k / 2;
    if (l == 1) m1 = capacity;
    if (capacity > (Wide(1) << 62)) return;  // more ports than any bounded cluster needs
  }
  auto needed = [&](Wide nodes) {
    const Wide node = nodes - 1, nic = rails - 1;
    if (sys.fat_tree_levels == 1) return node * rails + nic + 1;
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

}  // namespace

// -----------------------------------------------------------------------------------------

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

namespace {

/// The one YAML document of a scenario (an empty text is an empty mapping).
YAML::Node load_yaml_document(const std::string& yaml_text, const std::string& source) {
  refuse_yaml_cpp_hangs(yaml_text, source);
  YAML::Node root;
  try {
    std::vector<YAML::Node> docs = YAML::LoadAll(yaml_text);
    if (docs.size() > 1) {
      const YAML::Mark m = docs[1].Mark();
      throw InputError(source + (m.is_null() ? std::string() : ":" + std::to_string(m.line + 1)) +
                       ": a second YAML document (e.g. after '---'): a scenario file holds one "
                       "document; remove the '---' and merge the keys, or split the file");
    }
    if (!docs.empty()) root = docs[0];
  } catch (const YAML::ParserException& e) {
    throw InputError(source + ":" + std::to_string(e.mark.line + 1) + ":" +
                     std::to_string(e.mark.column + 1) + ": YAML syntax error: " + e.msg);
  } catch (const YAML::Exception& e) {
    // e.g. yaml-cpp's DeepRecursion on absurdly nested flow collections.
    throw InputError(source + ": YAML error: " + e.msg);
  }
  if (!root.IsDefined() || root.IsNull()) root = YAML::Node(YAML::NodeType::Map);
  if (!root.IsMap()) throw InputError(source + ": a scenario must be a YAML mapping of sections");

  return root;
}

/// A number within [lo, hi] (hi_open: below hi), or nullopt when absent.
std::optional<double> get_fraction(const Reader& r, const std::string& path, double lo, double hi,
                                   bool hi_open) {
  if (!r.has(path)) return std::nullopt;
  YAML::Node n = r.at(path);
  double v = 0;
  if (!n.IsScalar() || n.Tag() == "!" || !Reader::parse_double(n.Scalar(), v))
    r.fail(path, n, "expected a number");
  if (v < lo || (hi_open ? v >= hi : v > hi)) {
    std::ostringstream os;
    os << "must be within [" << lo << ", " << hi << (hi_open ? ")" : "]");
    r.fail(path, n, os.str());
  }
  return v;
}

/// GQA, SwiGLU, normalization, positions, biases, dropout, windows, the attention kernel.
void read_model_shape(const Reader& r, ModelConfig& m) {
  m.num_query_groups = r.get_int("model.num_query_groups", 1, false).value_or(0);
  const auto gqa = r.get_bool("model.group_query_attention");
  if (gqa && !*gqa && m.num_query_groups != 0)
    r.fail("model.group_query_attention", r.at("model.group_query_attention"),
           "is false, but model.num_query_groups is set (Megatron applies num_query_groups "
           "only with group_query_attention; remove one of the two)");
  m.group_query_attention = gqa.value_or(m.num_query_groups != 0);
  m.swiglu = r.get_bool("model.swiglu").value_or(false);
  if (auto n = r.get_enum("model.normalization", {"LayerNorm", "RMSNorm"}))
    m.normalization = *n == 0 ? Normalization::LayerNorm : Normalization::RMSNorm;
  if (auto pe = r.get_enum("model.position_embedding_type", {"learned_absolute", "rope"}))
    m.position_embedding_type = *pe == 0 ? PositionEmbedding::LearnedAbsolute : PositionEmbedding::Rope;
  m.add_bias_linear = r.get_bool("model.add_bias_linear").value_or(true);
  m.add_qkv_bias = r.get_bool("model.add_qkv_bias").value_or(false);
  m.hidden_dropout = get_fraction(r, "model.hidden_dropout", 0, 1, true).value_or(0.1);
  m.attention_dropout = get_fraction(r, "model.attention_dropout", 0, 1, true).value_or(0.1);
  if (r.at("model.window_size").IsSequence()) {
    // Megatron's (left, right) tuple: causal models attend `left` tokens back, right = 0.
    const YAML::Node n = r.at("model.window_size");
    std::int64_t left = 0, right = -1;
    if (n.size() != 2 || !n[0].IsScalar() || !n[1].IsScalar() ||
        !Reader::parse_int(n[0].Scalar(), left) || !Reader::parse_int(n[1].Scalar(), right))
      r.fail("model.window_size", n, "expected an integer or a pair [left, right] of integers");
    if (left < 0 || left > (std::int64_t(1) << 22) || right != 0)
      r.fail("model.window_size", n,
             "expected [left, 0] with 0 <= left <= 4194304 (a causal decoder attends only to "
             "earlier tokens)");
    m.window_size = left;
  } else {
    m.window_size = r.get_int("model.window_size", 0, false).value_or(0);
  }
  m.window_attn_skip_freq = r.get_int("model.window_attn_skip_freq", 0, false).value_or(0);
  if (m.window_attn_skip_freq != 0 && m.window_size == 0)
    r.fail("model.window_attn_skip_freq", r.at("model.window_attn_skip_freq"),
           "needs model.window_size (sliding-window attention) to be set");
  const auto flash = r.get_bool("model.use_flash_attn");
  if (auto b = r.get_enum("model.attention_backend", {"unfused", "fused", "flash", "auto"})) {
    m.attention_backend = *b == 0 ? AttentionBackend::Unfused
                          : *b == 1 ? AttentionBackend::Fused : AttentionBackend::Flash;
    if (flash && *flash != (m.attention_backend == AttentionBackend::Flash))
      r.fail("model.use_flash_attn", r.at("model.use_flash_attn"),
             "contradicts model.attention_backend; remove one of the two");
  } else if (flash && *flash) {
    m.attention_backend = AttentionBackend::Flash;
  }
  if (r.has("model.hf_config")) m.hf_config = *r.get_string("model.hf_config", false);
}

/// Megatron's string form of --moe-layer-freq (arguments.py moe_freq_type / _eval_pattern: a
/// Python list expression over digits, commas, brackets, parentheses, + and *, e.g.
/// "([0]*3+[1]*58)" or "([1]*3+[0]*1)*3"), evaluated without Python: lists concatenate with +,
/// repeat with * by an integer, integers multiply. The result must be a list of 0 and 1.
/// Hostile input is bounded: nesting deeper than kMaxDepth and more than kMaxWork elements
/// produced along the way are errors (no deep recursion, no long loops).
class LayerPatternParser {
 public:
  /// `max_entries`: the longest pattern (model.num_layers' size limit).
  LayerPatternParser(std::string text, std::int64_t max_entries) : max_entries_(max_entries) {
    for (char c : text)
      if (!std::isspace(static_cast<unsigned char>(c))) text_ += c;
  }
  /// The pattern, or a reason in `why`.
  std::optional<std::vector<std::uint8_t>> parse(std::string& why) {
    try {
      Value v = expr();
      if (pos_ != text_.size()) throw std::invalid_argument(at("unexpected '" + std::string(1, text_[pos_]) + "'"));
      if (!v.is_list) throw std::invalid_argument("evaluates to an integer, not a list");
      std::vector<std::uint8_t> out;
      for (std::int64_t x : v.list) {
        if (x != 0 && x != 1)
          throw std::invalid_argument("has the entry " + std::to_string(x) +
                                      "; 1 marks an MoE layer, 0 a dense layer");
        out.push_back(std::uint8_t(x));
      }
      return out;
    } catch (const std::invalid_argument& e) {
      why = e.what();
      return std::nullopt;
    }
  }

 private:
  struct Value {
    bool is_list = false;
    std::int64_t n = 0;
    std::vector<std::int64_t> list;
  };
  static constexpr int kMaxDepth = 64;
  static constexpr std::int64_t kMaxWork = 1 << 22;

  /// Counts `n` elements produced (or repetitions made); too many is an error.
  void spend(std::int64_t n) {
    work_ += n;
    if (work_ > kMaxWork)
      throw std::invalid_argument("takes more than " + std::to_string(kMaxWork) +
                                  " list operations to evaluate");
  }
  /// Enters a parenthesis or a list; too deep is an error.
  struct Nest {
    explicit Nest(LayerPatternParser& p) : p_(p) {
      if (++p_.depth_ > kMaxDepth)
        throw std::invalid_argument(p_.at("nests deeper than " + std::to_string(kMaxDepth) + " levels"));
    }
    ~Nest() { --p_.depth_; }
    LayerPatternParser& p_;
  };

  [[noreturn]] void too_long() const {
    throw std::invalid_argument("is longer than " + std::to_string(max_entries_) + " layers");
  }
  std::string at(const std::string& what) const {
    return what + " at character " + std::to_string(pos_ + 1);
  }
  bool eat(char c) {
    if (pos_ < text_.size() && text_[pos_] == c) {
      ++pos_;
      return true;
    }
    return false;
  }
  Value expr() {
    Value v = term();
    while (eat('+')) {
      Value w = term();
      if (v.is_list != w.is_list) throw std::invalid_argument(at("adds a list and an integer"));
      if (v.is_list) {
        if (v.list.size() + w.list.size() > std::size_t(max_entries_)) too_long();
        spend(std::int64_t(w.list.size()) + 1);
        v.list.insert(v.list.end(), w.list.begin(), w.list.end());
      } else {
        v.n = std::min(v.n + w.n, max_entries_ + 1);
      }
    }
    return v;
  }
  Value term() {
    Value v = factor();
    while (eat('*')) {
      Value w = factor();
      if (v.is_list && w.is_list) throw std::invalid_argument(at("multiplies two lists"));
      if (!v.is_list && !w.is_list) {
        v.n = std::min(v.n * w.n, max_entries_ + 1);  // both <= max_entries_ + 1: no overflow
        continue;
      }
      const Value& list = v.is_list ? v : w;
      const std::int64_t times = v.is_list ? w.n : v.n;
      if (std::int64_t(list.list.size()) * times > max_entries_) too_long();
      Value out;
      out.is_list = true;
      spend(list.list.empty() ? 1 : std::int64_t(list.list.size()) * times + 1);
      if (!list.list.empty())
        for (std::int64_t i = 0; i < times; ++i)
          out.list.insert(out.list.end(), list.list.begin(), list.list.end());
      v = std::move(out);
    }
    return v;
  }
  Value factor() {
    if (eat('(')) {
      const Nest nest(*this);
      Value v = expr();
      if (!eat(')')) throw std::invalid_argument(at("expected ')'"));
      return v;
    }
    if (eat('[')) {
      const Nest nest(*this);
      Value v;
      v.is_list = true;
      if (eat(']')) return v;
      do {
        Value x = expr();
        if (x.is_list) throw std::invalid_argument(at("nests a list in a list"));
        if (std::int64_t(v.list.size()) >= max_entries_) too_long();
        v.list.push_back(x.n);
      } while (eat(','));
      if (!eat(']')) throw std::invalid_argument(at("expected ']' or ','"));
      return v;
    }
    const std::size_t start = pos_;
    while (pos_ < text_.size() && std::isdigit(static_cast<unsigned char>(text_[pos_]))) ++pos_;
    if (start == pos_)
      throw std::invalid_argument(pos_ < text_.size()
                                      ? at("unexpected '" + std::string(1, text_[pos_]) + "'")
                                      : "ends early");
    Value v;
    const std::string digits = text_.substr(start, pos_ - start);
    // Any integer above the longest pattern acts as that bound plus one (18 digits fit stoll).
    v.n = digits.size() > 18 ? max_entries_ + 1
                             : std::min<std::int64_t>(std::stoll(digits), max_entries_ + 1);
    return v;
  }

  const std::int64_t max_entries_;
  std::string text_;
  std::size_t pos_ = 0;
  int depth_ = 0;
  std::int64_t work_ = 0;
};

/// --moe-layer-freq: an integer N, a YAML list of 0/1 per layer, or Megatron's string
/// expression of that list.
void read_moe_layer_freq(const Reader& r, ModelConfig& m) {
  const std::string f = "model.moe_layer_freq";
  const YAML::Node n = r.at(f);
  const std::int64_t max_layers = scenario_size_limit("model.num_layers");
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
    auto p = LayerPatternParser(n.Scalar(), max_layers).parse(why);
    if (!p)
      r.fail(f, n, "not a layer pattern (Megatron's list expression, e.g. \"([0]*3+[1]*58)\"): " +
                       why);
    pattern_of(n, std::move(*p));
    return;
  }
  m.moe_layer_freq = r.get_int(f, 1, false).value_or(1);
}

/// Mixture of experts (Megatron-Core --num-experts and --moe-* arguments).
void read_model_moe(const Reader& r, ModelConfig& m) {
  m.num_experts = r.get_int("model.num_experts", 0, false).value_or(0);
  m.moe_router_topk = r.get_int("model.moe_router_topk", 1, false).value_or(2);
  m.moe_ffn_hidden_size = r.get_int("model.moe_ffn_hidden_size", 1, false).value_or(0);
  m.moe_shared_expert_intermediate_size =
      r.get_int("model.moe_shared_expert_intermediate_size", 0, false).value_or(0);
  read_moe_layer_freq(r, m);
  if (auto d = r.get_enum("model.moe_token_dispatcher_type", {"alltoall", "allgather"}))
    m.moe_token_dispatcher_type = *d == 0 ? MoeDispatcher::AllToAll : MoeDispatcher::AllGather;
  m.moe_grouped_gemm = r.get_bool("model.moe_grouped_gemm").value_or(false);
  m.moe_token_imbalance_factor =
      get_fraction(r, "model.moe_token_imbalance_factor", 1, 1024, false).value_or(1.0);
  if (m.num_experts > 0 && m.moe_router_topk > m.num_experts)
    r.fail("model.moe_router_topk", r.at("model.moe_router_topk"),
           "exceeds model.num_experts (" + std::to_string(m.num_experts) + ")");
}

/// Multi-head latent attention (Megatron-Core --multi-latent-attention and its _add_mla_args).
void read_model_mla(const Reader& r, ModelConfig& m) {
  m.multi_latent_attention = r.get_bool("model.multi_latent_attention").value_or(false);
  m.q_lora_rank = r.get_int("model.q_lora_rank", 1, false).value_or(0);
  m.kv_lora_rank = r.get_int("model.kv_lora_rank", 1, false).value_or(32);
  m.qk_head_dim = r.get_int("model.qk_head_dim", 1, false).value_or(128);
  m.qk_pos_emb_head_dim = r.get_int("model.qk_pos_emb_head_dim", 1, false).value_or(64);
  m.v_head_dim = r.get_int("model.v_head_dim", 1, false).value_or(128);
  m.qk_layernorm = r.get_bool("model.qk_layernorm").value_or(false);
  if (!m.multi_latent_attention) {
    for (const char* k : {"model.q_lora_rank", "model.kv_lora_rank", "model.qk_head_dim",
                          "model.qk_pos_emb_head_dim", "model.v_head_dim"})
      if (r.has(k))
        r.fail(k, r.at(k), "is set, but model.multi_latent_attention is not (Megatron reads it "
                           "only for multi-head latent attention)");
    return;
  }
  if (r.has("model.kv_channels"))
    r.fail("model.kv_channels", r.at("model.kv_channels"),
           "is not read with model.multi_latent_attention (the head dimensions are "
           "model.qk_head_dim + model.qk_pos_emb_head_dim and model.v_head_dim); remove it");
  const char* gqa = r.has("model.num_query_groups") ? "model.num_query_groups"
                    : m.group_query_attention       ? "model.group_query_attention"
                                                    : nullptr;
  if (gqa)
    r.fail(gqa, r.at(gqa),
           "with model.multi_latent_attention: Megatron-LM asserts \"Group query attention is "
           "mutually exclusive with multi latent attention\" (arguments.py)");
}

/// Megatron-Core arguments trainsim recognises but does not model: their no-op values (0,
/// false) are accepted, anything else is refused with what is missing.
void read_unmodelled(const Reader& r) {
  if (const auto mtp = r.get_int("model.mtp_num_layers", 0, false); mtp && *mtp > 0)
    r.fail("model.mtp_num_layers", r.at("model.mtp_num_layers"),
           "multi-token prediction is not modelled yet (its layers on the last pipeline stage, "
           "their embedding copy and output heads); use 0 or leave it out to simulate the model "
           "without it");
  const std::pair<const char*, const char*> flags[] = {
      {"model.moe_shared_expert_overlap",
       "the shared expert on a second stream beside the token dispatch is not modelled yet (it "
       "runs after the combine); use false or leave it out"},
      {"model.mla_down_proj_fusion",
       "the fused q/kv down projection of multi-head latent attention is not modelled yet; use "
       "false or leave it out"}};
  for (const auto& [key, why] : flags)
    if (r.get_bool(key).value_or(false)) r.fail(key, r.at(key), why);
}

void read_model(const Reader& r, Scenario& s) {
  // ---- model (Megatron-LM arguments)
  ModelConfig& m = s.model;
  m.num_layers = *r.get_int("model.num_layers", 1, true);
  m.hidden_size = *r.get_int("model.hidden_size", 1, true);
  m.num_attention_heads = *r.get_int("model.num_attention_heads", 1, true);
  m.seq_length = *r.get_int("model.seq_length", 1, true);
  m.padded_vocab_size = *r.get_int("model.padded_vocab_size", 1, true);
  // Absent means the default (validate_scenario); an explicit 0 is an error, not the default.
  m.ffn_hidden_size = r.get_int("model.ffn_hidden_size", 1, false).value_or(0);
  m.kv_channels = r.get_int("model.kv_channels", 1, false).value_or(0);
  m.untie_embeddings_and_output_weights =
      r.get_bool("model.untie_embeddings_and_output_weights").value_or(false);
  read_model_shape(r, m);
  read_model_mla(r, m);
  read_model_moe(r, m);
  read_unmodelled(r);
}

/// Megatron-Core parallelism: context and expert parallelism, uneven pipeline splits, the
/// distributed optimizer, FSDP, FP8.
void read_parallel_core(const Reader& r, ParallelConfig& p) {
  const std::string f = "parallel.";
  p.context_parallel_size = r.get_int(f + "context_parallel_size", 1, false).value_or(1);
  p.expert_model_parallel_size = r.get_int(f + "expert_model_parallel_size", 1, false).value_or(1);
  p.expert_tensor_parallel_size =
      r.get_int(f + "expert_tensor_parallel_size", 1, false).value_or(0);
  p.decoder_first_pipeline_num_layers = r.get_int(f + "decoder_first_pipeline_num_layers", 0, false);
  p.decoder_last_pipeline_num_layers = r.get_int(f + "decoder_last_pipeline_num_layers", 0, false);
  p.account_for_embedding_in_pipeline_split =
      r.get_bool(f + "account_for_embedding_in_pipeline_split").value_or(false);
  p.account_for_loss_in_pipeline_split =
      r.get_bool(f + "account_for_loss_in_pipeline_split").value_or(false);
  p.use_distributed_optimizer = r.get_bool(f + "use_distributed_optimizer").value_or(false);
  p.overlap_param_gather = r.get_bool(f + "overlap_param_gather").value_or(false);
  p.tp_comm_overlap = r.get_bool(f + "tp_comm_overlap").value_or(false);
  if (auto m = r.get_enum(f + "tp_comm_overlap_rs_method", {"pipeline", "ring_exchange"})) {
    p.tp_comm_overlap_rs_ring = *m == 1;
    if (!p.tp_comm_overlap)
      r.fail(f + "tp_comm_overlap_rs_method", r.at(f + "tp_comm_overlap_rs_method"),
             "is set, but parallel.tp_comm_overlap is not");
  }
  p.use_megatron_fsdp = r.get_bool(f + "use_megatron_fsdp").value_or(false);
  p.use_torch_fsdp2 = r.get_bool(f + "use_torch_fsdp2").value_or(false);
  p.fsdp_sharding_group_size = r.get_int(f + "fsdp_sharding_group_size", 1, false).value_or(0);
  if (p.use_megatron_fsdp && p.use_torch_fsdp2)
    r.fail(f + "use_torch_fsdp2", r.at(f + "use_torch_fsdp2"),
           "and parallel.use_megatron_fsdp are both set; choose one FSDP implementation");
  if (p.fsdp_sharding_group_size != 0 && !p.uses_fsdp())
    r.fail(f + "fsdp_sharding_group_size", r.at(f + "fsdp_sharding_group_size"),
           "needs parallel.use_megatron_fsdp or parallel.use_torch_fsdp2");
  if (auto e = r.get_enum(f + "fp8", {"e4m3", "hybrid"}))
    p.fp8 = *e == 0 ? Fp8Format::E4M3 : Fp8Format::Hybrid;
  if (auto rc = r.get_enum(f + "fp8_recipe", {"delayed", "tensorwise", "mxfp8", "blockwise"})) {
    p.fp8_recipe = static_cast<Fp8Recipe>(*rc);
    if (p.fp8 == Fp8Format::None)
      r.fail(f + "fp8_recipe", r.at(f + "fp8_recipe"), "is set, but parallel.fp8 is not");
  }
  p.fp8_param_gather = r.get_bool(f + "fp8_param_gather").value_or(false);
  if (p.fp8_param_gather && p.fp8 == Fp8Format::None)
    r.fail(f + "fp8_param_gather", r.at(f + "fp8_param_gather"), "needs parallel.fp8");
  p.grad_reduce_in_fp32 = r.get_bool(f + "grad_reduce_in_fp32");
}

/// Megatron-Core's --recompute-modules (transformer_config.py): a list of module names whose
/// activations selective recomputation discards and recomputes in the backward.
void read_recompute_modules(const Reader& r, ParallelConfig& p) {
  const std::string f = "parallel.recompute_modules";
  const YAML::Node n = r.at(f);
  const bool selective = p.recompute_granularity == Recompute::Selective;
  if (!n || n.IsNull()) {
    p.recompute_modules = selective ? kRecomputeCoreAttn : 0;  // Megatron-Core's default
    return;
  }
  if (!n.IsSequence())
    r.fail(f, n, "expected a list of module names, e.g. [core_attn, layernorm, moe_act]");
  if (!selective)
    r.fail(f, n, "needs parallel.recompute_granularity selective (Megatron-Core applies "
                 "recompute_modules only to selective recomputation)");
  p.recompute_modules = 0;
  for (const YAML::Node& m : n) {
    const std::string name = m.IsScalar() ? m.Scalar() : "";
    if (const auto bit = recompute_module_bit(name)) {
      p.recompute_modules |= *bit;
    } else {
      r.fail(f, m, "expected one of core_attn, layernorm, moe_act, mlp, moe, mla_up_proj, "
                   "shared_experts (Megatron-Core --recompute-modules names)");
    }
  }
}

/// Megatron's --recompute-method / --recompute-num-layers (transformer_config.py: both with
/// full recomputation only; selective refuses a method).
void read_recompute_method(const Reader& r, ParallelConfig& p) {
  const std::string fm = "parallel.recompute_method", fn = "parallel.recompute_num_layers";
  const auto method = r.get_enum(fm, {"uniform", "block"});
  const auto layers = r.get_int(fn, 1, false);
  if ((method || layers) && p.recompute_granularity != Recompute::Full) {
    const std::string f = method ? fm : fn;
    r.fail(f, r.at(f), "needs parallel.recompute_granularity full (Megatron-Core applies "
                       "recompute_method and recompute_num_layers to full recomputation only)");
  }
  p.recompute_block = method && *method == 1;
  p.recompute_num_layers = layers.value_or(1);
}

void read_parallel(const Reader& r, Scenario& s) {
  // ---- parallel (Megatron-LM arguments)
  ParallelConfig& p = s.parallel;
  p.tensor_model_parallel_size = r.get_int("parallel.tensor_model_parallel_size", 1, false).value_or(1);
  p.pipeline_model_parallel_size =
      r.get_int("parallel.pipeline_model_parallel_size", 1, false).value_or(1);
  p.micro_batch_size = *r.get_int("parallel.micro_batch_size", 1, true);
  p.global_batch_size = *r.get_int("parallel.global_batch_size", 1, true);
  p.num_layers_per_virtual_pipeline_stage =
      r.get_int("parallel.num_layers_per_virtual_pipeline_stage", 1, false);
  if (auto g = r.get_enum("parallel.recompute_granularity", {"full", "selective"}))
    p.recompute_granularity = *g == 0 ? Recompute::Full : Recompute::Selective;
  read_recompute_modules(r, p);
  read_recompute_method(r, p);
  p.sequence_parallel = r.get_bool("parallel.sequence_parallel").value_or(false);
  if (auto pr = r.get_enum("parallel.precision", {"fp16", "bf16", "fp32"}))
    p.precision = *pr == 0 ? Precision::FP16 : *pr == 1 ? Precision::BF16 : Precision::FP32;
  p.overlap_grad_reduce = r.get_bool("parallel.overlap_grad_reduce").value_or(false);
  p.scatter_gather_tensors_in_pipeline =
      r.get_bool("parallel.scatter_gather_tensors_in_pipeline").value_or(true);
  p.ddp_bucket_size = r.get_int("parallel.ddp_bucket_size", 1, false, true).value_or(p.ddp_bucket_size);
  p.clip_grad = get_fraction(r, "parallel.clip_grad", 0, 1e9, false).value_or(p.clip_grad);
  if (auto sch = r.get_enum("parallel.pipeline_schedule", {"1f1b", "gpipe", "interleaved"})) {
    const std::string f = "parallel.pipeline_schedule";
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
  z.reduce_bucket_size = r.get_int(zp + "reduce_bucket_size", 1, false, true).value_or(z.reduce_bucket_size);
  z.allgather_bucket_size =
      r.get_int(zp + "allgather_bucket_size", 1, false, true).value_or(z.allgather_bucket_size);
  z.overlap_comm = r.get_bool(zp + "overlap_comm").value_or(z.overlap_comm);
  z.stage3_prefetch_bucket_size = r.get_int(zp + "stage3_prefetch_bucket_size", 1, false, true)
                                      .value_or(z.stage3_prefetch_bucket_size);
  z.stage3_max_live_parameters = r.get_int(zp + "stage3_max_live_parameters", 1, false, true)
                                     .value_or(z.stage3_max_live_parameters);
  z.stage3_param_persistence_threshold =
      r.get_int(zp + "stage3_param_persistence_threshold", 0, false, true)
          .value_or(z.stage3_param_persistence_threshold);
  z.stage3_max_reuse_distance = r.get_int(zp + "stage3_max_reuse_distance", 0, false, true)
                                    .value_or(z.stage3_max_reuse_distance);
  z.sub_group_size = r.get_int(zp + "sub_group_size", 1, false, true).value_or(z.sub_group_size);
  const std::string op = zp + "offload_optimizer.";
  if (auto dev = r.get_enum(op + "device", {"cpu", "none"})) z.offload_optimizer.enabled = *dev == 0;
  z.offload_optimizer.pin_memory = r.get_bool(op + "pin_memory").value_or(true);
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
             "is set, but " + op + "device is " +
                 (r.has(op + "device") ? "'none'" : "not set") +
                 ": the ratio applies only to an optimizer offloaded to the CPU (set " + op +
                 "device: cpu, or remove the ratio)");
  }

}

/// The cluster (a catalog system) and the simulation options.
void read_cluster_and_simulation(const Reader& r, Scenario& s) {
  // ---- cluster
  ClusterConfig& c = s.cluster;
  c.system = *r.get_string("cluster.system", true);
  c.nodes = *r.get_int("cluster.nodes", 1, true);
  c.gpus_per_node = r.get_int("cluster.gpus_per_node", 1, false).value_or(0);
  {
    const std::vector<std::string> known = system_names();
    if (!contains(known, c.system)) {
      std::string list;
      for (const auto& n : known) list += (list.empty() ? "" : ", ") + n;
      r.fail("cluster.system", r.at("cluster.system"), "unknown system; known systems: " + list);
    }
    const SystemSpec& sys = find_system(c.system);
    if (c.gpus_per_node > sys.gpus_per_node)
      r.fail("cluster.gpus_per_node", r.at("cluster.gpus_per_node"),
             "a " + c.system + " node has only " + std::to_string(sys.gpus_per_node) + " GPUs");
  }

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
void import_hf_into(YAML::Node& root, const std::string& source) {
  if (!root.IsMap() || !root["model"].IsMap()) return;
  YAML::Node model = root["model"];
  const YAML::Node ref = model["hf_config"];
  if (!ref.IsDefined() || ref.IsNull()) return;
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
  for (const auto& [key, value] : imported)
    if (!model[key].IsDefined()) model[key] = YAML::Load(value);
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
  import_hf_into(root, source);
  const Reader r(root, source, override_map);
  check_keys(root, "", r);

  Scenario s;
  s.source_path = source;
  s.name = r.get_string("name", false).value_or(stem_of(source));
  if (auto rt = r.get_enum("runtime", {"megatron-2021", "megatron-core"}))
    s.runtime = *rt == 0 ? Runtime::Megatron2021 : Runtime::MegatronCore;
  std::vector<std::string> releases;
  for (NcclVersion v : kNcclVersions) releases.push_back(to_string(v));
  if (auto v = r.get_enum("nccl_version", releases)) s.nccl_version = kNcclVersions[*v];
  s.nccl_nvls_enable = r.get_bool("nccl_nvls_enable").value_or(true);
  read_model(r, s);
  read_parallel(r, s);
  read_zero(r, s);
  read_cluster_and_simulation(r, s);
  validate_scenario(s);
  return s;
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
  YAML::Emitter out;
  out << root;
  return std::string(out.c_str()) + "\n";
}

namespace {

/// Every size positive and within its bound (models/input/scenario.h); parse_scenario checks these
/// first with line numbers, scenarios built in code land here.
template <typename Fail>
void check_sizes(Scenario& s, const Fail& fail) {
  ModelConfig& m = s.model;
  ParallelConfig& p = s.parallel;
  // Sizes (parse_scenario checks these with line numbers; scenarios built in code land here):
  // each must be positive (where `positive`) and within its bound (models/input/scenario.h).
  struct Size {
    const char* field;
    std::int64_t value;
    bool positive;
  };
  const Size sizes[] = {
      {"model.num_layers", m.num_layers, true},
      {"model.hidden_size", m.hidden_size, true},
      {"model.num_attention_heads", m.num_attention_heads, true},
      {"model.kv_channels", m.kv_channels, false},
      {"model.ffn_hidden_size", m.ffn_hidden_size, false},
      {"model.seq_length", m.seq_length, true},
      {"model.padded_vocab_size", m.padded_vocab_size, true},
      {"model.num_query_groups", m.num_query_groups, false},
      {"model.q_lora_rank", m.q_lora_rank, false},
      {"model.kv_lora_rank", m.kv_lora_rank, true},
      {"model.qk_head_dim", m.qk_head_dim, true},
      {"model.qk_pos_emb_head_dim", m.qk_pos_emb_head_dim, true},
      {"model.v_head_dim", m.v_head_dim, true},
      {"model.window_size", m.window_size, false},
      {"model.window_attn_skip_freq", m.window_attn_skip_freq, false},
      {"model.num_experts", m.num_experts, false},
      {"model.moe_router_topk", m.moe_router_topk, true},
      {"model.moe_ffn_hidden_size", m.moe_ffn_hidden_size, false},
      {"model.moe_shared_expert_intermediate_size", m.moe_shared_expert_intermediate_size, false},
      {"model.moe_layer_freq", m.moe_layer_freq, true},
      {"parallel.tensor_model_parallel_size", p.tensor_model_parallel_size, true},
      {"parallel.context_parallel_size", p.context_parallel_size, true},
      {"parallel.expert_model_parallel_size", p.expert_model_parallel_size, true},
      {"parallel.expert_tensor_parallel_size", p.expert_tensor_parallel_size, false},
      {"parallel.decoder_first_pipeline_num_layers", p.decoder_first_pipeline_num_layers.value_or(0), false},
      {"parallel.decoder_last_pipeline_num_layers", p.decoder_last_pipeline_num_layers.value_or(0), false},
      {"parallel.fsdp_sharding_group_size", p.fsdp_sharding_group_size, false},
      {"parallel.pipeline_model_parallel_size", p.pipeline_model_parallel_size, true},
      {"parallel.num_layers_per_virtual_pipeline_stage",
       p.num_layers_per_virtual_pipeline_stage.value_or(1), false},
      {"parallel.micro_batch_size", p.micro_batch_size, true},
      {"parallel.global_batch_size", p.global_batch_size, true},
      {"parallel.ddp_bucket_size", p.ddp_bucket_size, true},
      {"deepspeed.zero_optimization.reduce_bucket_size", s.zero.reduce_bucket_size, true},
      {"deepspeed.zero_optimization.allgather_bucket_size", s.zero.allgather_bucket_size, true},
      {"deepspeed.zero_optimization.stage3_prefetch_bucket_size",
       s.zero.stage3_prefetch_bucket_size, true},
      {"deepspeed.zero_optimization.stage3_max_live_parameters",
       s.zero.stage3_max_live_parameters, true},
      {"deepspeed.zero_optimization.stage3_param_persistence_threshold",
       s.zero.stage3_param_persistence_threshold, false},
      {"deepspeed.zero_optimization.stage3_max_reuse_distance",
       s.zero.stage3_max_reuse_distance, false},
      {"deepspeed.zero_optimization.sub_group_size", s.zero.sub_group_size, true},
      {"cluster.nodes", s.cluster.nodes, true},
      {"cluster.gpus_per_node", s.cluster.gpus_per_node, false}};
  for (const Size& x : sizes)
    if (x.positive && x.value <= 0) fail(kv(x.field, x.value) + " must be positive");
  for (const Size& x : sizes)
    if (x.value > scenario_size_limit(x.field))
      fail("field '" + std::string(x.field) + "' = " + std::to_string(x.value) + ": " +
           limit_text(x.field, scenario_size_limit(x.field)));
  if (m.ffn_hidden_size < 0) fail(kv("model.ffn_hidden_size", m.ffn_hidden_size) + " must be >= 0");
  if (m.kv_channels < 0) fail(kv("model.kv_channels", m.kv_channels) + " must be >= 0");
  for (const Size& x : sizes)
    if (!x.positive && x.value < 0) fail(kv(x.field, x.value) + " must be >= 0");
  if (s.cluster.gpus_per_node < 0)
    fail(kv("cluster.gpus_per_node", s.cluster.gpus_per_node) + " must be >= 0");

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
      fail(kv("model.kv_channels", m.kv_channels) +
           " with model.multi_latent_attention: the head dimensions are model.qk_head_dim + "
           "model.qk_pos_emb_head_dim and model.v_head_dim; remove it");
    if (m.num_query_groups != 0 && m.num_query_groups != m.num_attention_heads)
      fail(kv("model.num_query_groups", m.num_query_groups) +
           " with model.multi_latent_attention: Megatron-LM asserts \"Group query attention is "
           "mutually exclusive with multi latent attention\" (arguments.py)");
    m.kv_channels = qk;
  }
  if (m.kv_channels == 0) {
    // Megatron's arguments.py asserts this when --kv-channels is not given.
    if (m.hidden_size % m.num_attention_heads != 0)
      fail(kv("model.hidden_size", m.hidden_size) + " is not divisible by " +
           kv("model.num_attention_heads", m.num_attention_heads) +
           " (needed for the default kv_channels = hidden / heads; set model.kv_channels)");
    m.kv_channels = m.hidden_size / m.num_attention_heads;
  }
  if (m.num_query_groups == 0) m.num_query_groups = m.num_attention_heads;
  if (m.moe_ffn_hidden_size == 0) m.moe_ffn_hidden_size = m.ffn_hidden_size;
  if (s.parallel.expert_tensor_parallel_size == 0)
    s.parallel.expert_tensor_parallel_size = s.parallel.tensor_model_parallel_size;
  const SystemSpec* sys = nullptr;
  try {
    sys = &find_system(s.cluster.system);
  } catch (const InputError& e) {
    fail("field 'cluster.system' = '" + s.cluster.system + "': " + e.what());
  }
  if (s.cluster.gpus_per_node == 0) s.cluster.gpus_per_node = sys->gpus_per_node;
  if (s.parallel.fp8 != Fp8Format::None && !(sys->gpu.peak_dense_fp8_flops > 0))
    fail(std::string("parallel.fp8 (") + to_string(s.parallel.fp8) + ") on cluster.system '" + s.cluster.system +
         "': its " + sys->gpu.name + " has no FP8 tensor cores (FP8 needs Hopper or newer, "
         "e.g. dgx-h100)");
  if (s.cluster.gpus_per_node > sys->gpus_per_node)
    fail(kv("cluster.gpus_per_node", s.cluster.gpus_per_node) + " exceeds the " +
         std::to_string(sys->gpus_per_node) + " GPUs of a " + s.cluster.system + " node");
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
  const std::string tps = kv("parallel.tensor_model_parallel_size", tp);
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
    fail(kv("model.num_attention_heads", m.num_attention_heads) + " is not divisible by " +
         kv("model.num_query_groups", m.num_query_groups));
  if (m.num_query_groups % tp != 0)
    fail(kv("model.num_query_groups", m.num_query_groups) + " is not divisible by " + tps);
  if (p.tp_comm_overlap && !p.sequence_parallel)
    fail("parallel.tp_comm_overlap (true) needs parallel.sequence_parallel: true (Megatron-LM "
         "arguments.py: the tensor-parallel communication/GEMM overlap happens only with "
         "sequence parallelism)");
  if (p.sequence_parallel) {
    if (tp == 1)
      fail("parallel.sequence_parallel (true) needs " + tps +
           " > 1 (Megatron turns sequence parallelism off with a single tensor-parallel rank)");
    if (m.seq_length % tp != 0)
      fail(kv("model.seq_length", m.seq_length) +
           " is not divisible by " + tps + " (sequence parallelism splits the sequence)");
  }

  // World = TP x CP x PP x DP (Megatron-Core parallel_state: order tp-cp-ep-dp-pp).
  const std::int64_t pp = p.pipeline_model_parallel_size, cp = p.context_parallel_size;
  const std::string pps = kv("parallel.pipeline_model_parallel_size", pp);
  const std::string cps = cp > 1 ? " x " + kv("parallel.context_parallel_size", cp) : "";
  const std::int64_t world = s.world_size();
  if (world % (tp * cp * pp) != 0)
    fail(tps + cps + " x " + pps + " = " + std::to_string(tp * cp * pp) +
         " does not divide the " + std::to_string(world) + " GPUs of " +
         kv("cluster.nodes", s.cluster.nodes) + " x " +
         kv("cluster.gpus_per_node", s.cluster.gpus_per_node));
  p.data_parallel_size = world / (tp * cp * pp);
  const std::int64_t dp = p.data_parallel_size;

  // Batch: global = micro x DP x microbatches.
  if (p.global_batch_size % (p.micro_batch_size * dp) != 0)
    fail(kv("parallel.global_batch_size", p.global_batch_size) + " is not divisible by " +
         kv("parallel.micro_batch_size", p.micro_batch_size) + " x data-parallel size (" +
         std::to_string(dp) + ") = " + std::to_string(p.micro_batch_size * dp));
  p.num_microbatches = p.global_batch_size / (p.micro_batch_size * dp);
  // The schedule graph numbers microbatches in 16 bits (models/builder/graph_builder.h).
  if (p.num_microbatches > kMaxScenarioMicrobatches)
    fail("the number of microbatches per iteration (" + std::to_string(p.num_microbatches) +
         " = " + kv("parallel.global_batch_size", p.global_batch_size) + " / (" +
         kv("parallel.micro_batch_size", p.micro_batch_size) + " x data-parallel size " +
         std::to_string(dp) + ")) exceeds trainsim's bound of " +
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
  const std::string pps = kv("parallel.pipeline_model_parallel_size", pp);
  const auto first = p.decoder_first_pipeline_num_layers, last = p.decoder_last_pipeline_num_layers;
  const std::int64_t extra = (p.account_for_embedding_in_pipeline_split ? 1 : 0) +
                             (p.account_for_loss_in_pipeline_split ? 1 : 0);
  if ((first || last) && extra > 0)
    fail("parallel.decoder_first/last_pipeline_num_layers and account_for_*_in_pipeline_split "
         "are both set; Megatron-Core accepts one way of an uneven split");
  // Layers (slots) per pipeline stage.
  std::vector<std::int64_t> stage(std::size_t(pp), 0);
  if (first || last) {
    if (pp == 1) fail("an uneven split (parallel.decoder_*_pipeline_num_layers) needs " + pps + " > 1");
    const std::int64_t f = first.value_or(-1), l = last.value_or(-1);
    const std::int64_t fixed = (first ? f : 0) + (last ? l : 0);
    const std::int64_t rest_stages = pp - (first ? 1 : 0) - (last ? 1 : 0);
    if (fixed > L || (rest_stages == 0 && fixed != L))
      fail(kv("parallel.decoder_first_pipeline_num_layers", first.value_or(0)) + " and " +
           kv("parallel.decoder_last_pipeline_num_layers", last.value_or(0)) +
           " do not fit " + kv("model.num_layers", L) + " over " + pps);
    if (rest_stages > 0 && (L - fixed) % rest_stages != 0)
      fail("the " + std::to_string(L - fixed) + " layers left by parallel.decoder_first/last_"
           "pipeline_num_layers are not divisible by the other " + std::to_string(rest_stages) +
           " pipeline stages");
    for (std::int64_t i = 0; i < pp; ++i)
      stage[std::size_t(i)] = rest_stages > 0 ? (L - fixed) / rest_stages : 0;
    if (first) stage.front() = f;
    if (last) stage.back() = l;
  } else {
    if ((L + extra) % pp != 0)
      fail(kv("model.num_layers", L) + (extra ? " + " + std::to_string(extra) +
                                                    " (embedding/loss accounted as layers)"
                                              : std::string()) +
           " is not divisible by " + pps);
    for (auto& n : stage) n = (L + extra) / pp;
  }
  p.virtual_pipeline_size = 1;
  if (p.num_layers_per_virtual_pipeline_stage) {
    const std::int64_t vpl = *p.num_layers_per_virtual_pipeline_stage;
    const std::string vps = kv("parallel.num_layers_per_virtual_pipeline_stage", vpl);
    const std::int64_t per_stage = (first || last) ? stage[std::size_t(pp / 2)] : stage.front();
    if (!first && !last && extra == 0 && L % (pp * vpl) != 0)
      fail(kv("model.num_layers", L) + " is not divisible by " + pps + " x " + vps + " = " +
           std::to_string(pp * vpl));
    if (per_stage % vpl != 0)
      fail(std::to_string(per_stage) + " layers per pipeline stage are not divisible by " + vps);
    p.virtual_pipeline_size = per_stage / vpl;
  }
  const std::int64_t vp = p.virtual_pipeline_size;
  p.virtual_stage_layers.assign(std::size_t(pp * vp), 0);
  for (std::int64_t i = 0; i < pp; ++i) {
    if (stage[std::size_t(i)] % vp != 0)
      fail("pipeline stage " + std::to_string(i) + " holds " + std::to_string(stage[std::size_t(i)]) +
           " layers, not divisible by its " + std::to_string(vp) + " virtual stages");
    for (std::int64_t c = 0; c < vp; ++c)
      p.virtual_stage_layers[std::size_t(c * pp + i)] = stage[std::size_t(i)] / vp;
  }
  if (p.account_for_embedding_in_pipeline_split) --p.virtual_stage_layers.front();
  if (p.account_for_loss_in_pipeline_split) --p.virtual_stage_layers.back();
  for (std::int64_t n : p.virtual_stage_layers)
    if (n < 0 || (n == 0 && extra == 0 && !first && !last))
      fail("the split leaves a virtual stage without layers (" + kv("model.num_layers", L) +
           ", " + pps + ")");
  p.layers_per_chunk = p.virtual_stage_layers.front();
  // Even splits keep the vector empty: the uniform layers_per_chunk says the same.
  bool even = true;
  for (std::int64_t n : p.virtual_stage_layers) even = even && n == p.layers_per_chunk;
  if (even) p.virtual_stage_layers.clear();
}

/// Pipeline stages and the interleaved schedule (Megatron arguments.py / schedules.py).
template <typename Fail>
void check_pipeline(Scenario& s, const Fail& fail) {
  ParallelConfig& p = s.parallel;
  const std::int64_t pp = p.pipeline_model_parallel_size;
  const std::string pps = kv("parallel.pipeline_model_parallel_size", pp);
  const std::int64_t dp = p.data_parallel_size;
  const std::optional<std::int64_t> vpl = p.num_layers_per_virtual_pipeline_stage;
  const std::string vps = vpl ? kv("parallel.num_layers_per_virtual_pipeline_stage", *vpl) : "";
  if (vpl) {
    if (*vpl <= 0) fail(vps + " must be positive");
    if (p.pipeline_schedule == PipelineSchedule::GPipe)
      fail(vps + " means the interleaved schedule, but parallel.pipeline_schedule is gpipe");
    if (pp <= 1) fail(vps + " (interleaved schedule) needs " + pps + " > 1");
    if (p.num_microbatches % pp != 0)
      fail("the interleaved schedule needs the number of microbatches (" +
           std::to_string(p.num_microbatches) + " = global_batch_size " +
           std::to_string(p.global_batch_size) + " / (micro_batch_size " +
           std::to_string(p.micro_batch_size) + " x dp " + std::to_string(dp) +
           ")) divisible by " + pps);
  } else if (p.pipeline_schedule == PipelineSchedule::Interleaved) {
    fail("parallel.pipeline_schedule (interleaved) needs "
         "parallel.num_layers_per_virtual_pipeline_stage");
  }
  split_layers(s, fail);
  if (vpl) {
    p.pipeline_schedule = PipelineSchedule::Interleaved;
    // Megatron-LM 2021 (megatron/arguments.py) asserts pp > 2 for the interleaved schedule;
    // Megatron-Core's schedule runs it with pp = 2 as well. Checked after the layer split, whose
    // errors come first.
    if (pp <= 2 && s.runtime == Runtime::Megatron2021)
      fail(vps + " (interleaved schedule) needs " + pps +
           " > 2 with runtime megatron-2021 (Megatron-LM's arguments.py asserts it); "
           "Megatron-Core runs it with 2 stages (runtime: megatron-core)");
  }
}

/// The Megatron-Core features need `runtime: megatron-core`: the Megatron-LM of 2021 had none
/// of them, and trainsim models them with Megatron-Core's (Transformer Engine) kernels.
template <typename Fail>
void check_runtime_features(const Scenario& s, const Fail& fail) {
  const ModelConfig& m = s.model;
  const ParallelConfig& p = s.parallel;
  const std::pair<bool, std::string> uses[] = {
      {m.num_query_groups != m.num_attention_heads, kv("model.num_query_groups", m.num_query_groups)},
      {m.swiglu, "model.swiglu (true)"},
      {m.normalization != Normalization::LayerNorm, "model.normalization (RMSNorm)"},
      {m.position_embedding_type != PositionEmbedding::LearnedAbsolute,
       "model.position_embedding_type (rope)"},
      {!m.add_bias_linear, "model.add_bias_linear (false)"},
      {m.add_qkv_bias, "model.add_qkv_bias (true)"},
      {m.hidden_dropout != 0.1 || m.attention_dropout != 0.1, "model.hidden_dropout / attention_dropout"},
      {m.window_size != 0, kv("model.window_size", m.window_size)},
      {m.multi_latent_attention, "model.multi_latent_attention (true)"},
      {m.qk_layernorm, "model.qk_layernorm (true)"},
      {m.attention_backend != AttentionBackend::Unfused,
       std::string("model.attention_backend (") + to_string(m.attention_backend) + ")"},
      {m.is_moe(), kv("model.num_experts", m.num_experts)},
      {p.context_parallel_size > 1, kv("parallel.context_parallel_size", p.context_parallel_size)},
      {p.fp8 != Fp8Format::None, std::string("parallel.fp8 (") + to_string(p.fp8) + ")"},
      {p.use_distributed_optimizer, "parallel.use_distributed_optimizer (true)"},
      {p.tp_comm_overlap, "parallel.tp_comm_overlap (true)"},
      {p.uses_fsdp(), "FSDP (parallel.use_megatron_fsdp / use_torch_fsdp2)"},
      {p.recompute_modules != 0 && p.recompute_modules != kRecomputeCoreAttn,
       "parallel.recompute_modules (layernorm / moe_act / mlp / moe / mla_up_proj / shared_experts)"},
      {p.grad_reduce_in_fp32.has_value(),
       kv_bool("parallel.grad_reduce_in_fp32", p.grad_reduce_in_fp32.value_or(false))},
      {p.decoder_first_pipeline_num_layers || p.decoder_last_pipeline_num_layers ||
           p.account_for_embedding_in_pipeline_split || p.account_for_loss_in_pipeline_split,
       "an uneven pipeline split (parallel.decoder_*_pipeline_num_layers / account_for_*)"}};
  if (s.runtime == Runtime::MegatronCore) return;
  for (const auto& [used, what] : uses)
    if (used)
      fail(what + " needs `runtime: megatron-core` (the scenario's runtime is megatron-2021, "
                  "whose Megatron-LM has no such feature; set runtime: megatron-core)");
}

/// Context and expert parallelism, FSDP, the distributed optimizer and FP8 (Megatron-Core
/// arguments.py and parallel_state.py checks).
template <typename Fail>
void check_megatron_core(Scenario& s, const Fail& fail) {
  const ModelConfig& m = s.model;
  ParallelConfig& p = s.parallel;
  const std::int64_t cp = p.context_parallel_size, ep = p.expert_model_parallel_size;
  const std::int64_t etp = p.expert_tensor_parallel_size;
  const std::string cps = kv("parallel.context_parallel_size", cp);
  // Load-balanced causal context parallelism cuts the sequence into 2 x cp chunks
  // (Megatron-Core get_batch_on_this_cp_rank).
  if (cp > 1 && m.seq_length % (2 * cp) != 0)
    fail(kv("model.seq_length", m.seq_length) + " is not divisible by 2 x " + cps +
         " (context parallelism splits the sequence into 2 x cp load-balanced chunks)");
  if (cp > 1 && m.attention_backend == AttentionBackend::Unfused)
    fail(cps + " needs model.attention_backend flash or fused (Megatron-Core runs context "
               "parallelism inside Transformer Engine's fused attention)");
  if (m.window_size > 0 && m.attention_backend == AttentionBackend::Unfused)
    fail(kv("model.window_size", m.window_size) + " needs model.attention_backend flash or fused "
         "(sliding-window attention runs in Transformer Engine's fused kernels)");
  if (m.is_moe() && etp > 1)
    fail(kv("parallel.expert_tensor_parallel_size", etp) +
         ": expert tensor parallelism (its collectives inside the experts) is not modelled yet; "
         "set parallel.expert_tensor_parallel_size: 1");
  if (p.fp8_recipe == Fp8Recipe::Mxfp8 && p.fp8 != Fp8Format::None)
    fail("parallel.fp8_recipe (mxfp8) needs Blackwell tensor cores (MXFP8 block scaling); the "
         "catalog's systems are A100 and H100");
  if (cp > 1 && s.zero.stage > 0)
    fail(cps + " with deepspeed.zero_optimization.stage " + std::to_string(s.zero.stage) +
         ": context parallelism is Megatron-Core's; use its distributed optimizer instead");
  if (cp > 1 && p.sequence_parallel &&
      (m.seq_length / cp) % p.tensor_model_parallel_size != 0)
    fail(kv("model.seq_length", m.seq_length) + " / " + cps +
         " is not divisible by parallel.tensor_model_parallel_size (sequence parallelism)");
  if (!m.is_moe() && (ep > 1 || etp != p.tensor_model_parallel_size))
    fail((ep > 1 ? kv("parallel.expert_model_parallel_size", ep)
                 : kv("parallel.expert_tensor_parallel_size", etp)) +
         " needs a mixture-of-experts model (model.num_experts > 0)");
  // A module with no layer of its kind would be a no-op (Megatron-Core sets recompute_mlp on
  // dense layers only and moe_layer_recompute in MoE layers): a launch-line mistake, refused.
  if ((p.recompute_modules & kRecomputeMoe) && !m.is_moe())
    fail("parallel.recompute_modules: 'moe' recomputes MoE layers and the model has none "
         "(model.num_experts is 0)");
  if ((p.recompute_modules & kRecomputeSharedExperts) &&
      (!m.is_moe() || m.moe_shared_expert_intermediate_size == 0))
    fail("parallel.recompute_modules: 'shared_experts' recomputes MoE layers' shared experts and "
         "the model has none (model.moe_shared_expert_intermediate_size is 0)");
  if ((p.recompute_modules & kRecomputeMlaUpProj) && !m.multi_latent_attention)
    fail("parallel.recompute_modules: 'mla_up_proj' recomputes multi-head latent attention's "
         "up projections and the model has none (model.multi_latent_attention is false)");
  if ((p.recompute_modules & kRecomputeMlp) && m.is_moe() && !m.has_dense_layers())
    fail("parallel.recompute_modules: 'mlp' recomputes dense layers' MLPs and every layer of "
         "the model is an MoE layer (model.moe_layer_freq); for those use 'moe'");
  if (!m.is_moe() && (m.moe_layer_freq != 1 || !m.moe_layer_pattern.empty()))
    fail("model.moe_layer_freq" +
         (m.moe_layer_pattern.empty() ? " = " + std::to_string(m.moe_layer_freq) : " (a pattern)") +
         " needs a mixture-of-experts model (model.num_experts > 0)");
  if (m.is_moe()) {
    if (!m.moe_layer_pattern.empty() &&
        std::int64_t(m.moe_layer_pattern.size()) != m.num_layers)
      fail("model.moe_layer_freq: the pattern has " + std::to_string(m.moe_layer_pattern.size()) +
           " entries, model.num_layers is " + std::to_string(m.num_layers) +
           " (Megatron-Core needs one entry per layer)");
    if (m.num_experts % ep != 0)
      fail(kv("model.num_experts", m.num_experts) + " is not divisible by " +
           kv("parallel.expert_model_parallel_size", ep));
    const std::int64_t per_stage = s.world_size() / p.pipeline_model_parallel_size;
    if (per_stage % (ep * etp) != 0)
      fail(kv("parallel.expert_model_parallel_size", ep) + " x " +
           kv("parallel.expert_tensor_parallel_size", etp) + " does not divide the " +
           std::to_string(per_stage) + " GPUs of a pipeline stage");
    if (m.moe_ffn_hidden_size % etp != 0)
      fail(kv("model.moe_ffn_hidden_size", m.moe_ffn_hidden_size) + " is not divisible by " +
           kv("parallel.expert_tensor_parallel_size", etp));
  }
  if (p.use_torch_fsdp2 && (p.pipeline_model_parallel_size > 1 || ep > 1)) {
    const bool pipe = p.pipeline_model_parallel_size > 1;
    fail("parallel.use_torch_fsdp2 with " +
         (pipe ? kv("parallel.pipeline_model_parallel_size", p.pipeline_model_parallel_size)
               : kv("parallel.expert_model_parallel_size", ep)) +
         ": Megatron-LM refuses it (arguments.py: \"--use-torch-fsdp2 is not supported with " +
         (pipe ? "pipeline" : "expert") + " parallelism\"); use parallel.use_megatron_fsdp");
  }
  if (p.uses_fsdp()) {
    const std::int64_t shard_world = p.data_parallel_size * cp;
    if (p.fsdp_sharding_group_size == 0) p.fsdp_sharding_group_size = shard_world;
    if (p.fsdp_sharding_group_size != shard_world)
      fail(kv("parallel.fsdp_sharding_group_size", p.fsdp_sharding_group_size) +
           ": trainsim models FSDP sharded over the whole data-parallel x context-parallel group (" +
           std::to_string(shard_world) + " GPUs); hybrid sharding is not modelled yet");
    if (shard_world % p.fsdp_sharding_group_size != 0)
      fail(kv("parallel.fsdp_sharding_group_size", p.fsdp_sharding_group_size) +
           " does not divide data-parallel size x context-parallel size (" +
           std::to_string(shard_world) + ")");
  }
  const int stage = s.zero.stage;
  if ((p.use_distributed_optimizer || p.uses_fsdp()) && stage > 0)
    fail(std::string(p.uses_fsdp() ? "FSDP" : "parallel.use_distributed_optimizer") +
         " shards with Megatron-Core; deepspeed.zero_optimization.stage (" +
         std::to_string(stage) + ") shards with DeepSpeed: use one of the two");
  if (p.overlap_param_gather && !p.use_distributed_optimizer && !p.uses_fsdp())
    fail("parallel.overlap_param_gather needs parallel.use_distributed_optimizer (Megatron "
         "arguments.py: the parameter all-gather exists only with the distributed optimizer)");
  check_runtime_features(s, fail);
  if (m.multi_latent_attention && m.attention_backend == AttentionBackend::Unfused)
    fail("model.multi_latent_attention needs model.attention_backend flash or fused (trainsim "
         "models MLA's core attention as Transformer Engine's fused kernel, query/key and value "
         "head dimensions apart)");
  if (m.multi_latent_attention && p.tp_comm_overlap)
    fail("parallel.tp_comm_overlap with model.multi_latent_attention is not modelled yet "
         "(Transformer Engine's userbuffers overlap of the latent projections)");
  if (p.grad_reduce_in_fp32) {
    const std::string g = kv_bool("parallel.grad_reduce_in_fp32", *p.grad_reduce_in_fp32);
    if (stage > 0)
      fail(g + " sets Megatron's gradient buffer; DeepSpeed ZeRO (deepspeed.zero_optimization."
               "stage " + std::to_string(stage) + ") keeps its gradients in the training precision");
    if (p.uses_fsdp() && *p.grad_reduce_in_fp32)
      fail(g + " with FSDP is not modelled: trainsim keeps FSDP's sharded gradients in the "
               "training precision (set it to false or leave it out)");
    if (p.precision == Precision::FP32 && !*p.grad_reduce_in_fp32)
      fail(g + " with parallel.precision fp32: fp32 training has fp32 gradients");
  }
  if (p.fp8 != Fp8Format::None && p.precision == Precision::FP32)
    fail("parallel.fp8 needs parallel.precision bf16 or fp16 (Transformer Engine runs FP8 "
         "GEMMs inside a mixed-precision model)");
}

/// ZeRO stages and offload (DeepSpeed semantics).
template <typename Fail>
void check_zero(const Scenario& s, const Fail& fail) {
  const std::int64_t pp = s.parallel.pipeline_model_parallel_size;
  const std::string pps = kv("parallel.pipeline_model_parallel_size", pp);
  // ZeRO and offload (DeepSpeed semantics).
  const ZeroConfig& z = s.zero;
  const std::string st = "deepspeed.zero_optimization.stage (" + std::to_string(z.stage) + ")";
  if (z.stage < 0 || z.stage > 3) fail(st + " must be 0, 1, 2 or 3");
  if (z.offload_optimizer.enabled && z.stage < 1)
    fail("deepspeed.zero_optimization.offload_optimizer.device (cpu) needs ZeRO stage 1, 2 or 3, "
         "but " + st + " is set (DeepSpeed offloads only ZeRO-partitioned optimizer states)");
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
    if (z.offload_optimizer.ratio_auto) r << "auto"; else r << z.offload_optimizer.ratio;
    fail("deepspeed.zero_optimization.offload_optimizer.ratio (" + r.str() + ") with " + st +
         ": DeepSpeed supports partial offload (Twin-Flow, ratio < 1) only with ZeRO stage 3 "
         "(zero/config.py offload_ratio_check); use stage 3 or ratio 1.0");
  }
  if (pp > 1 && z.stage >= 2)
    fail(st + " with " + pps +
         ": DeepSpeed does not support ZeRO stage 2 or 3 with pipeline parallelism "
         "(use stage 0 or 1, or pp = 1)");
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
  check_zero(s, fail);
}

const char* to_string(Precision p) {
  switch (p) {
    case Precision::FP16: return "fp16";
    case Precision::BF16: return "bf16";
    case Precision::FP32: return "fp32";
  }
  throw std::logic_error("to_string: Precision out of range");
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
  throw std::logic_error("to_string: Recompute out of range");
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
  throw std::logic_error("to_string: AttentionBackend out of range");
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
  throw std::logic_error("to_string: Fp8Format out of range");
}
const char* to_string(Fp8Recipe r) {
  switch (r) {
    case Fp8Recipe::Delayed: return "delayed";
    case Fp8Recipe::Tensorwise: return "tensorwise";
    case Fp8Recipe::Mxfp8: return "mxfp8";
    case Fp8Recipe::Blockwise: return "blockwise";
  }
  throw std::logic_error("to_string: Fp8Recipe out of range");
}

const char* to_string(PipelineSchedule s) {
  switch (s) {
    case PipelineSchedule::GPipe: return "gpipe";
    case PipelineSchedule::OneFOneB: return "1f1b";
    case PipelineSchedule::Interleaved: return "interleaved";
  }
  throw std::logic_error("to_string: PipelineSchedule out of range");
}

}  // namespace trainsim
