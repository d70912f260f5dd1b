#include "models/memory_model.h"

#include <stdexcept>

namespace trainsim {

namespace {
std::int64_t attn_width(const ModelConfig& m) { return m.num_attention_heads * m.kv_channels; }
}  // namespace

std::int64_t layer_params_per_rank(const ModelConfig& m, std::int64_t tp) {
  const std::int64_t h = m.hidden_size, ad = attn_width(m), f = m.ffn_hidden_size;
  const std::int64_t qkv = (h * 3 * ad) / tp + (3 * ad) / tp;
  const std::int64_t proj = (ad * h) / tp + h;
  const std::int64_t fc1 = (h * f) / tp + f / tp;
  const std::int64_t fc2 = (f * h) / tp + h;
  const std::int64_t layernorms = 2 * 2 * h;
  return qkv + proj + fc1 + fc2 + layernorms;
}

std::int64_t embedding_params_per_rank(const ModelConfig& m, std::int64_t tp) {
  return (m.padded_vocab_size / tp) * m.hidden_size + m.seq_length * m.hidden_size;
}

std::int64_t word_embedding_params_per_rank(const ModelConfig& m, std::int64_t tp) {
  return (m.padded_vocab_size / tp) * m.hidden_size;
}

std::int64_t params_per_rank(const Scenario& sc, std::int64_t stage) {
  const ModelConfig& m = sc.model;
  const ParallelConfig& p = sc.parallel;
  const std::int64_t tp = p.tensor_model_parallel_size, pp = p.pipeline_model_parallel_size;
  std::int64_t params = (m.num_layers / pp) * layer_params_per_rank(m, tp);
  if (stage == 0) params += embedding_params_per_rank(m, tp);
  if (stage == pp - 1) {
    params += 2 * m.hidden_size;  // final LayerNorm
    // The output layer reuses the word embedding: a second copy on the last stage when
    // pp > 1 (kept in sync by the embedding-gradient all-reduce), its own matrix when untied.
    if (pp > 1 || m.untie_embeddings_and_output_weights)
      params += (m.padded_vocab_size / tp) * m.hidden_size;
  }
  return params;
}

std::int64_t total_params(const ModelConfig& m) {
  std::int64_t total = m.num_layers * layer_params_per_rank(m, 1) + embedding_params_per_rank(m, 1) +
                       2 * m.hidden_size;
  if (m.untie_embeddings_and_output_weights) total += m.padded_vocab_size * m.hidden_size;
  return total;
}

LayerActivationBytes layer_activation_bytes_no_recompute(const Scenario& sc) {
  const std::int64_t s = sc.model.seq_length, b = sc.parallel.micro_batch_size;
  const std::int64_t h = sc.model.hidden_size, a = sc.model.num_attention_heads;
  const std::int64_t t = sc.parallel.tensor_model_parallel_size;
  const bool sp = sc.parallel.sequence_parallel;
  const std::int64_t sbh = s * b * h;
  // Korthikanti et al. count 2-byte activations (e) and 1-byte dropout masks (mk); written with
  // e and mk so that fp32 (e = 4, mk = 4, see dropout_mask_bytes) follows the same terms:
  // per block outside the TP region (2e + mk) sbh = 5sbh (LayerNorm input, GEMM input, mask),
  // split by t only with sequence parallelism (Sec. 4.1-4.2); attention TP region 4e sbh / t =
  // 8sbh/t (Q, K, V, projection input); scores (2e + mk) a s^2 b / t = 5as^2b/t (softmax
  // output, dropout mask, dropout output); MLP TP region 8e sbh / t = 16sbh/t.
  const std::int64_t e = precision_bytes(sc.parallel.precision);
  const std::int64_t mk = dropout_mask_bytes(sc.parallel.precision);
  const std::int64_t replicated = sp ? (2 * e + mk) * sbh / t : (2 * e + mk) * sbh;
  LayerActivationBytes out;
  const bool selective = sc.parallel.recompute_granularity == Recompute::Selective;
  const std::int64_t scores = selective ? 0 : (2 * e + mk) * a * s * s * b / t;
  out.attn = replicated + 4 * e * sbh / t + scores;
  out.mlp = replicated + 8 * e * sbh / t;
  return out;
}

LayerActivationBytes layer_activation_bytes(const Scenario& sc) {
  if (sc.parallel.recompute_granularity == Recompute::Full) {
    const std::int64_t sbh =
        sc.model.seq_length * sc.parallel.micro_batch_size * sc.model.hidden_size;
    // Only the layer input (e sbh = 2sbh, split by t with sequence parallelism) is stashed.
    const std::int64_t e = precision_bytes(sc.parallel.precision);
    LayerActivationBytes out;
    out.attn = sc.parallel.sequence_parallel ? e * sbh / sc.parallel.tensor_model_parallel_size
                                             : e * sbh;
    out.mlp = 0;
    return out;
  }
  return layer_activation_bytes_no_recompute(sc);
}

namespace {
/// Sequence parallelism splits the regions outside the tensor-parallel blocks by t.
std::int64_t sequence_split(const ParallelConfig& p) {
  return p.sequence_parallel && p.tensor_model_parallel_size > 1 ? p.tensor_model_parallel_size : 1;
}
}  // namespace

std::int64_t embedding_dropout_mask_bytes(const Scenario& sc) {
  const std::int64_t s = sc.model.seq_length, b = sc.parallel.micro_batch_size;
  return dropout_mask_bytes(sc.parallel.precision) * s * b * sc.model.hidden_size /
         sequence_split(sc.parallel);
}

std::int64_t logits_activation_bytes(const Scenario& sc) {
  const std::int64_t s = sc.model.seq_length, b = sc.parallel.micro_batch_size;
  const std::int64_t t = sc.parallel.tensor_model_parallel_size;
  return precision_bytes(sc.parallel.precision) * s * b * sc.model.hidden_size /
             sequence_split(sc.parallel) +
         4 * s * b * (sc.model.padded_vocab_size / t);
}

std::int64_t logits_gradient_bytes(const Scenario& sc) {
  const std::int64_t s = sc.model.seq_length, b = sc.parallel.micro_batch_size;
  const std::int64_t t = sc.parallel.tensor_model_parallel_size;
  return precision_bytes(sc.parallel.precision) * s * b * (sc.model.padded_vocab_size / t);
}

StateBytesPerParam state_bytes_per_param(int zero_stage, std::int64_t dp) {
  if (zero_stage < 0 || zero_stage > 3 || dp < 1)
    throw std::logic_error("state_bytes_per_param: stage must be 0..3 and dp >= 1");
  StateBytesPerParam b;
  const double n = static_cast<double>(dp);
  if (zero_stage >= 1) b.optimizer /= n;
  if (zero_stage >= 2) b.grads /= n;
  if (zero_stage >= 3) b.params /= n;
  return b;
}

}  // namespace trainsim
