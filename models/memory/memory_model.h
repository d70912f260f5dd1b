// Memory model: bytes per category for one rank, as closed-form functions of the scenario.
//
// Sources:
//  - Mixed-precision Adam: 2 bytes fp16/bf16 parameters + 2 bytes gradients + 12 bytes of
//    optimizer state (fp32 master copy, momentum, variance) per parameter: Rajbhandari et al.,
//    "ZeRO", SC'20, Sec. 3.1 (K = 12). ZeRO stage 1 partitions the 12 bytes over DP, stage 2 also
//    the gradients, stage 3 also the parameters (Sec. 5).
//  - Activations per transformer layer and microbatch: Korthikanti et al., "Reducing Activation
//    Recomputation in Large Transformer Models", MLSys'23, Sec. 4 and Table 2:
//      no recomputation, TP t:            s b h (10 + 24/t + 5 a s / (h t))
//      + sequence parallelism:            s b h / t (34 + 5 a s / h)
//      selective recomputation (+SP):     s b h (10 + 24/t)   (s b h 34 / t with SP)
//      full recomputation:                2 s b h             (2 s b h / t with SP)
//    split into the attention block (LayerNorm in 2sbh, QKV in 2sbh, dropout mask sbh: 5sbh;
//    Q, K, V, projection input 8sbh/t; softmax out, its dropout mask and output 5as^2b/t) and
//    the MLP block (LayerNorm in 2sbh, fc1 in 2sbh, dropout mask sbh: 5sbh; fc1 out and GeLU
//    out 16sbh/t).
#pragma once

#include <cstdint>
#include <vector>

#include "models/graph/ops.h"
#include "models/input/scenario.h"

namespace trainsim {

/// The Megatron-Core features of the scenario's compute ops (models/graph/ops.h ModelFeatures); all
/// defaults (`core` false) under runtime megatron-2021.
ModelFeatures model_features(const Scenario& sc);

/// Bytes per gradient element: Megatron's main_grad at stage 0 (4 with
/// parallel.grad_reduce_in_fp32, which defaults to true for bf16 and false for fp16), else the
/// training precision's (2; 4 for fp32).
std::int64_t grad_element_bytes(const Scenario& sc);

/// Parameters of one transformer layer's shard on one TP rank (weights and biases):
/// QKV (h x 3ad)/t + 3ad/t, projection (ad x h)/t + h, fc1 (h x f)/t + f/t, fc2 (f x h)/t + h,
/// two LayerNorms 4h (Megatron ParallelTransformerLayer; biases of row-parallel layers and
/// LayerNorms are replicated).
std::int64_t layer_params_per_rank(const ModelConfig& m, std::int64_t tp);
/// One submodule of a dense transformer layer as DeepSpeed's ZeRO-3 hooks see it (a module
/// with parameters of its own: the two norms and four linear layers), with the element count of
/// each of its parameter tensors on one TP rank, in forward order; `mlp` says which of the
/// layer's two compute blocks (attention, MLP) uses it.
struct LayerSubmodule {
  const char* name;
  bool mlp;
  std::vector<std::int64_t> params;
};
/// The submodules of one dense layer: input norm, QKV, projection (attention block), post-
/// attention norm, fc1, fc2 (MLP block); their params sum to layer_params_per_rank.
std::vector<LayerSubmodule> layer_submodules_per_rank(const ModelConfig& m, std::int64_t tp);
/// Word embedding rows on one TP rank (V/t x h) plus learned position embeddings (s x h).
std::int64_t embedding_params_per_rank(const ModelConfig& m, std::int64_t tp);
/// Parameters of one MoE layer on one rank: `dense` (attention, norms, router, shared expert;
/// reduced over DP x CP) and `expert` (the E / EP local experts split by ETP; reduced over the
/// expert data-parallel group).
struct MoeLayerParams {
  std::int64_t dense = 0, expert = 0;
  std::int64_t total() const { return dense + expert; }
};
MoeLayerParams moe_layer_params_per_rank(const Scenario& sc);
/// Word embedding rows on one TP rank alone (V/t x h): the vocab-parallel output layer's
/// weight (Megatron VocabParallelEmbedding / the tied output projection).
std::int64_t word_embedding_params_per_rank(const ModelConfig& m, std::int64_t tp);
/// What a multi-token prediction layer holds besides its transformer layer (Megatron-Core
/// multi_token_prediction.py MultiTokenPredictionLayer): the enorm, hnorm and final_layernorm
/// norms (3 norm_params) and eh_proj, a column-parallel 2h -> h linear without bias (2 h^2 / tp).
/// The embedding and the output head are the model's, shared.
std::int64_t mtp_extra_params_per_rank(const ModelConfig& m, std::int64_t tp);
/// Parameters of global layer `layer` on one rank: an MoE layer's (moe_layer_params_per_rank)
/// or a dense layer's (layer_params_per_rank), as ModelConfig::moe_layer says; a multi-token
/// prediction layer (layer >= num_layers) adds mtp_extra_params_per_rank.
std::int64_t layer_params_at(const Scenario& sc, std::int64_t layer);
/// The largest layer_params_at of the model's layers (a ZeRO-3 / FSDP unit).
std::int64_t largest_layer_params(const Scenario& sc);
/// The local experts' parameters of the MoE layers the rank at pipeline stage `stage` holds.
std::int64_t expert_params_per_rank(const Scenario& sc, std::int64_t stage);
/// Parameters held by the rank at pipeline stage `stage` (its layers, the embedding on the first
/// stage, the final LayerNorm and the (tied copy of the) output embedding on the last stage).
std::int64_t params_per_rank(const Scenario& sc, std::int64_t stage);
/// Weights of the transformer layers' linear layers (QKV, projection, fc1, fc2; no biases or
/// norms) that the rank at pipeline stage `stage` holds: what Transformer Engine runs in FP8.
std::int64_t linear_weights_per_rank(const Scenario& sc, std::int64_t stage);
/// Parameters of the rank at pipeline stage `stage` whose gradients Megatron-Core all-reduces
/// over the tensor-parallel group after the data-parallel synchronisation
/// (finalize_model_grads.py _allreduce_non_tensor_model_parallel_grads): with sequence
/// parallelism every parameter replicated over TP that sees only the rank's sequence shard
/// (norms, row-parallel biases, the router, MLA's duplicated down projections and latent
/// norms, the final norm); with qk_layernorm on standard attention the q/k norms with or
/// without it. 0 with one TP rank.
std::int64_t tp_reduced_grad_params(const Scenario& sc, std::int64_t stage);
/// Total model parameters (all stages, one copy of tied embeddings).
std::int64_t total_params(const ModelConfig& m);

/// Activation bytes one layer keeps per microbatch between its forward and its backward,
/// for the attention and the MLP block, under the scenario's recomputation setting (for full
/// recomputation: the stashed layer input, counted in the attention block).
struct LayerActivationBytes {
  std::int64_t attn = 0;
  std::int64_t mlp = 0;
  /// --recompute-modules mlp / moe: what the checkpointed MLP module drops after its forward
  /// and re-materializes when its forward re-runs in the backward (not in `mlp` or total()).
  std::int64_t mlp_rerun = 0;
  std::int64_t total() const { return attn + mlp; }
};
/// Whether layer `layer`'s MLP module is checkpointed by selective recomputation: a dense
/// layer's with --recompute-modules mlp, an MoE layer's with moe (Megatron-Core
/// TransformerLayer.recompute_mlp, which skips MoE layers; MoELayer.moe_layer_recompute).
bool mlp_checkpointed(const Scenario& sc, std::int64_t layer);
LayerActivationBytes layer_activation_bytes(const Scenario& sc);
/// The same for an MoE layer (`moe_layer` true) or a dense layer of the scenario's model; the
/// overload above takes an MoE model's layers as MoE layers.
LayerActivationBytes layer_activation_bytes(const Scenario& sc, bool moe_layer);
/// All activations of one layer without recomputation (what a full-recompute backward
/// materializes again for one layer).
LayerActivationBytes layer_activation_bytes_no_recompute(const Scenario& sc);
LayerActivationBytes layer_activation_bytes_no_recompute(const Scenario& sc, bool moe_layer);

/// Bytes per element of a dropout mask kept for the backward. fp16 / bf16 (Megatron on CUDA):
/// 1, the bool mask of at::native_dropout (Korthikanti et al.'s "sbh" mask terms). fp32 (the
/// LibTorch CPU replay): 4, because at::dropout on a CPU tensor takes the unfused path
/// (ATen/native/Dropout.cpp, is_fused_kernel_acceptable needs CUDA) that multiplies by a noise
/// tensor of the input's dtype and keeps that tensor for the backward.
inline std::int64_t dropout_mask_bytes(Precision p) { return p == Precision::FP32 ? 4 : 1; }

/// The embedding's dropout mask (mk s b h, split by t with sequence parallelism), kept from the
/// embedding forward to its backward on the first pipeline stage (Korthikanti et al. Sec. 4.3:
/// the embedding dropout mask, sbh).
std::int64_t embedding_dropout_mask_bytes(const Scenario& sc);
/// What the last stage keeps per microbatch from the logits forward to its backward: the final
/// LayerNorm input (e s b h, split by t with sequence parallelism) and the fp32 logits for the
/// loss (4 s b V / t) (Korthikanti et al. Sec. 4.3, "output layer and loss").
std::int64_t logits_activation_bytes(const Scenario& sc);
/// The gradient of the logits (e s b V / t, the input of the output layer's dgrad and wgrad
/// GEMMs), alive during the logits backward on top of logits_activation_bytes.
std::int64_t logits_gradient_bytes(const Scenario& sc);

/// Bytes per parameter of model state on the GPU, per category, for ZeRO `stage` over `dp`:
/// parameters 2 (/dp at stage 3), gradients 2 (/dp at stage >= 2), optimizer 12 (/dp at
/// stage >= 1). Returned as fractional bytes per parameter.
struct StateBytesPerParam {
  double params = 2, grads = 2, optimizer = 12;
};
StateBytesPerParam state_bytes_per_param(int zero_stage, std::int64_t dp);

}  // namespace trainsim
