// One rank's shard of Megatron-LM's GPT model as LibTorch code: the transformer-layer blocks
// (attention, MLP), the embedding and the logits + loss, in Megatron's [s, b, h] layout, with
// the kernels models/perf/flops.h lists for each op (op_kernels):
//   AttnFwd  layer_norm -> linear (QKV, bias) -> baddbmm(Q K^T / sqrt(d)) -> causal masked
//            softmax -> dropout -> bmm(P V) -> permute/contiguous -> linear (proj, no bias)
//            -> bias-dropout-add with the block input (Megatron's skip_bias_add + fused BDA)
//   MlpFwd   layer_norm -> linear (fc1, no bias) -> bias + tanh-GeLU -> linear (fc2, no bias)
//            -> bias-dropout-add
//   EmbedFwd embedding (words, with the vocab-shard mask when tp > 1) + embedding (positions)
//            -> dropout -> transpose to [s, b, h]
//   Logits   layer_norm -> transpose to [b, s, h] -> linear (tied word embedding) -> float
//            -> cross entropy (mean over tokens)
// Backward goes through autograd, per block: each block's input is a leaf, so the backward
// task of a block runs exactly that block's backward kernels.
//
// Internal to hw_backend/ (and its tests and benchmarks): includes LibTorch.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <torch/torch.h>

namespace trainsim::hw {

/// Shapes as one rank sees them (OpDesc): heads, ffn and vocab are this rank's shard.
struct LayerDims {
  std::int64_t b = 1, s = 1, h = 1, heads = 1, head_dim = 1, ffn = 1, vocab = 1, tp = 1;
  std::int64_t attn_width() const { return heads * head_dim; }  ///< P = heads * head_dim
};

struct Dropout {
  double attention = 0.1;  ///< on the attention probabilities
  double hidden = 0.1;     ///< in the bias-dropout-adds and after the embedding
};

/// Megatron's LayerNorm epsilon (--layernorm-epsilon default).
constexpr double kLayerNormEps = 1e-5;

/// Parameters of one transformer layer's shard (weights [out, in] as torch.nn.Linear).
struct LayerWeights {
  torch::Tensor ln1_w, ln1_b;    ///< [h]
  torch::Tensor qkv_w, qkv_b;    ///< [3P, h], [3P]
  torch::Tensor proj_w, proj_b;  ///< [h, P], [h]
  torch::Tensor ln2_w, ln2_b;    ///< [h]
  torch::Tensor fc1_w, fc1_b;    ///< [ffn, h], [ffn]
  torch::Tensor fc2_w, fc2_b;    ///< [h, ffn], [h]
  std::vector<torch::Tensor> all() const;  ///< in the order of layer_param_shapes
};

/// Name and shape of each parameter of a layer, in LayerWeights::all() order. Their element
/// count is models/memory/memory_model.h layer_params_per_rank.
std::vector<std::pair<std::string, std::vector<std::int64_t>>> layer_param_shapes(const LayerDims& d);

/// Binds a LayerWeights to consecutive tensors (views of a flat buffer, in all() order).
LayerWeights bind_layer_weights(const std::vector<torch::Tensor>& tensors);

/// Fills weights as Megatron does (init_method_normal sigma = 0.02; the output projections
/// proj and fc2 with scaled_init_method_normal sigma / sqrt(2 num_layers); biases 0; LayerNorm
/// weight 1, bias 0), from `gen` on the CPU, then copies into the tensors (no autograd).
void init_layer_weights(LayerWeights& w, std::int64_t num_layers, torch::Generator& gen);

/// Causal mask [s, s], true above the diagonal (positions a token must not attend to).
torch::Tensor causal_mask(std::int64_t s, const torch::TensorOptions& options);

/// Autograd state of one forward block between its forward and its backward task.
struct BlockState {
  torch::Tensor input;   ///< the block's input, a leaf with requires_grad
  torch::Tensor output;  ///< the block's output (root of the block's autograd graph)
  // Selective recomputation of the core attention (Korthikanti et al. 2022 Sec. 5):
  torch::Tensor qkv;       ///< QKV output with its graph (LayerNorm + QKV GEMM)
  torch::Tensor ctx_leaf;  ///< core-attention output, computed without autograd, as a leaf
  bool selective = false;
  std::int64_t bytes() const;  ///< bytes of the tensors held directly (not the saved ones)
};

/// Attention block forward. With autograd enabled and `selective` false, the state keeps the
/// whole graph; with `selective`, the core attention runs without autograd and is recomputed
/// by attn_backward. Under torch::NoGradGuard only `output` is meaningful.
BlockState attn_forward(const LayerWeights& w, const torch::Tensor& input, const torch::Tensor& mask,
                        const LayerDims& d, const Dropout& p, bool selective = false);
/// MLP block forward.
BlockState mlp_forward(const LayerWeights& w, const torch::Tensor& input, const LayerDims& d,
                       const Dropout& p);
/// Backward of a block given the gradient of its output; returns the gradient of its input.
/// Parameter gradients accumulate into the weights' .grad(). Releases the state's graph.
torch::Tensor block_backward(BlockState& state, const torch::Tensor& grad_output,
                             const torch::Tensor& mask, const LayerDims& d, const Dropout& p);

/// Embedding forward: tokens [b, s] (int64, ids in [0, vocab)) -> [s, b, h]. `pos` undefined:
/// no position table (RoPE); p.hidden 0: no dropout.
torch::Tensor embed_forward(const torch::Tensor& word, const torch::Tensor& pos,
                            const torch::Tensor& tokens, const LayerDims& d, const Dropout& p);

/// Final LayerNorm, logits against the (tied) word embedding [vocab, h], cross entropy against
/// `labels` [b, s] (mean over tokens), times `loss_scale` (1 / microbatches). `ln_b` undefined:
/// RMSNorm (core_layer.h rms_norm) instead of LayerNorm.
torch::Tensor logits_loss_forward(const torch::Tensor& input, const torch::Tensor& ln_w,
                                  const torch::Tensor& ln_b, const torch::Tensor& word,
                                  const torch::Tensor& labels, double loss_scale);

}  // namespace trainsim::hw
