// A training scenario: the model, its parallel plan, the DeepSpeed ZeRO/offload settings and
// the cluster, as read from a scenario YAML file (docs/scenario.md, a contract).
//
// Key names follow Megatron-LM's arguments (model, parallel) and DeepSpeed's config keys
// (deepspeed.zero_optimization), so a user can copy them from a launch script.
#pragma once

#include <algorithm>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "models/errors.h"
#include "models/hardware/hardware.h"
#include "models/hardware/reliability.h"
#include "models/nccl_version.h"
#include "models/parallel_layout.h"
#include "models/precision.h"

namespace trainsim {

enum class Recompute : std::uint8_t { None, Selective, Full };
/// Megatron-Core --recompute-modules (selective recomputation) that trainsim models.
constexpr std::uint8_t kRecomputeCoreAttn = 1;   ///< core_attn: the attention kernel's tensors
constexpr std::uint8_t kRecomputeLayernorm = 2;  ///< layernorm: a separate norm module's output
constexpr std::uint8_t kRecomputeMoeAct = 4;     ///< moe_act: the experts' activation output
constexpr std::uint8_t kRecomputeMlp = 8;        ///< mlp: a dense layer's whole MLP module
constexpr std::uint8_t kRecomputeMoe = 16;       ///< moe: an MoE layer's whole MoELayer
constexpr std::uint8_t kRecomputeMlaUpProj = 32; ///< mla_up_proj: MLA's up projections and RoPE
constexpr std::uint8_t kRecomputeSharedExperts = 64;  ///< shared_experts: the shared expert MLP
/// GPipe (all forwards, then all backwards), Megatron's 1F1B (PipeDream-Flush) and the
/// interleaved 1F1B of Narayanan et al. SC'21 (chosen when virtual stages are set).
enum class PipelineSchedule : std::uint8_t { GPipe, OneFOneB, Interleaved };
/// The runtime whose mechanisms a scenario assumes (docs/scenario.md): the
/// Megatron-LM of the SC'21 runs (2021 kernels: apex LayerNorm, cuBLAS GEMMs with separate
/// bias adds, unfused attention, JIT-fused bias-GeLU) or Megatron-Core with Transformer Engine
/// (TE kernels: norms fused into their linear layers, biases in GEMM epilogues, fused RoPE,
/// SwiGLU and cross entropy).
enum class Runtime : std::uint8_t { Megatron2021, MegatronCore };
/// Megatron's --normalization.
enum class Normalization : std::uint8_t { LayerNorm, RMSNorm };
/// Megatron's --position-embedding-type (learned_absolute, rope).
enum class PositionEmbedding : std::uint8_t { LearnedAbsolute, Rope };
/// Megatron's --attention-backend: `unfused` is the 2021 baddbmm/softmax/bmm path (SC'21),
/// `fused` and `flash` one fused kernel each way (cuDNN / FlashAttention); `auto` reads as flash.
enum class AttentionBackend : std::uint8_t { Unfused, Fused, Flash };
/// Megatron's --moe-token-dispatcher-type. Flex: MoEFlexTokenDispatcher with the fused
/// dispatch and combine kernels of its backend (model.moe_flex_dispatcher_backend;
/// docs/scenario.md).
enum class MoeDispatcher : std::uint8_t { AllToAll, AllGather, Flex };
/// Megatron-Core --moe-flex-dispatcher-backend (transformer_config.py, core_r0.15): the flex
/// dispatcher's kernels. DeepEP: deepseek-ai/DeepEP's normal kernels (the default; the older
/// --moe-enable-deepep names it too). HybridEP: NVIDIA's TMA-based kernels of DeepEP's
/// hybrid-ep branch, built for an NVLink domain such as GB200 NVL72's.
enum class FlexBackend : std::uint8_t { DeepEP, HybridEP };
/// Megatron-Core --moe-router-score-function (transformer_config.py): the router's scores.
enum class RouterScore : std::uint8_t { Softmax, Sigmoid };
/// Megatron's --moe-token-drop-policy: which token copies an expert over its capacity drops.
enum class MoeTokenDropPolicy : std::uint8_t { Probs, Position };
/// Megatron's --fp8-format (None: no FP8).
enum class Fp8Format : std::uint8_t { None, E4M3, Hybrid };
/// Megatron's --fp8-recipe (Transformer Engine scaling recipes).
enum class Fp8Recipe : std::uint8_t { Delayed, Tensorwise, Mxfp8, Blockwise };
/// Megatron-Core --cuda-graph-impl (core_v0.16.0 transformer_config.py cuda_graph_impl): none,
/// the MCore CudaGraphManager (local) or Transformer Engine's make_graphed_callables.
enum class CudaGraphImpl : std::uint8_t { None, Local, TransformerEngine };
/// Megatron-Core --cuda-graph-scope values (core_v0.16.0 enums.py CudaGraphScope), as bits of
/// ParallelConfig::cuda_graph_scope; no bit set: the whole transformer layer ("full").
constexpr std::uint8_t kGraphAttn = 1;           ///< attn: TransformerLayer._forward_attention
constexpr std::uint8_t kGraphMlp = 2;            ///< mlp: a dense layer's _forward_mlp
constexpr std::uint8_t kGraphMoe = 4;            ///< moe: an MoE layer's _forward_mlp (drop-pad)
constexpr std::uint8_t kGraphMoeRouter = 8;      ///< moe_router: _forward_mlp up to the router
constexpr std::uint8_t kGraphMoePreprocess = 16; ///< moe_preprocess: MoELayer.preprocess
constexpr std::uint8_t kGraphMamba = 32;         ///< mamba: Mamba layers (trainsim has none)
constexpr std::uint8_t kGraphFullIteration = 64; ///< full_iteration: forward-backward of all
                                                 ///< microbatches (local impl)

/// Transformer shape, Megatron-LM argument names.
struct ModelConfig {
  std::int64_t num_layers = 0;
  std::int64_t hidden_size = 0;
  std::int64_t num_attention_heads = 0;
  std::int64_t seq_length = 0;
  std::int64_t padded_vocab_size = 0;
  /// Absent from the file (0 here): the default 4 * hidden_size. 0 in a file is an error.
  std::int64_t ffn_hidden_size = 0;
  /// Absent from the file (0 here): hidden_size / num_attention_heads. 0 in a file is an error.
  std::int64_t kv_channels = 0;
  /// Megatron's --untie-embeddings-and-output-weights; false (tied) as in GPT and SC'21.
  bool untie_embeddings_and_output_weights = false;

  // ---- models trained today (Megatron-Core arguments; defaults = the 2021 GPT above)
  /// --num-query-groups (GQA); filled with num_attention_heads when absent.
  std::int64_t num_query_groups = 0;
  /// --group-query-attention; true when num_query_groups is given.
  bool group_query_attention = false;
  bool swiglu = false;  ///< --swiglu: gated MLP, fc1 produces 2 x ffn_hidden_size
  /// --quick-geglu (GPT-OSS): gated MLP with quick-GELU, x * sigmoid(1.702 x), on the gate
  /// half; fc1 produces 2 x ffn_hidden_size as with swiglu (Megatron-LM arguments.py sets
  /// gated_linear_unit and activation_func quick_gelu). Exclusive with swiglu.
  bool quick_geglu = false;
  /// --activation-func-clamp-value (quick_geglu only): the gate half is clamped above at v and
  /// the linear half to [-v, v] before the product (Megatron-Core mlp.py glu); 0 = no clamp.
  double activation_func_clamp_value = 0;
  /// --glu-linear-offset: the product is activation(gate) * (linear + offset) (gated MLPs).
  double glu_linear_offset = 0;
  /// Whether the MLP is gated (swiglu or quick_geglu): fc1 produces 2 x ffn_hidden_size, and
  /// one fused elementwise kernel applies the activation (clamp and offset inside it).
  bool gated_linear_unit() const { return swiglu || quick_geglu; }
  Normalization normalization = Normalization::LayerNorm;
  PositionEmbedding position_embedding_type = PositionEmbedding::LearnedAbsolute;
  bool add_bias_linear = true;  ///< --disable-bias-linear sets false
  /// --add-qkv-bias: biases on the QKV projection even without add_bias_linear (Qwen2).
  bool add_qkv_bias = false;
  double hidden_dropout = 0.1;     ///< --hidden-dropout
  double attention_dropout = 0.1;  ///< --attention-dropout
  /// --window-size (left window, tokens) of sliding-window attention; 0 = full attention.
  std::int64_t window_size = 0;
  /// --window-attn-skip-freq: with window_size, layer l (0-based) attends fully when
  /// (l + 1) % window_attn_skip_freq == 0; 0 = every layer windowed.
  std::int64_t window_attn_skip_freq = 0;
  AttentionBackend attention_backend = AttentionBackend::Unfused;
  /// --multi-latent-attention (DeepSeek-V2/V3, Kimi K2; Megatron-Core MLASelfAttention): queries
  /// from a q_lora_rank latent (0: Megatron's None, one linear_q_proj), keys and values from a
  /// kv_lora_rank latent plus one shared RoPE key of qk_pos_emb_head_dim; per head a query/key
  /// dimension qk_head_dim + qk_pos_emb_head_dim and a value dimension v_head_dim. Defaults are
  /// Megatron's (arguments.py _add_mla_args). With it, kv_channels reads as the query/key head
  /// dimension (validate_scenario fills it; an explicit kv_channels is refused).
  bool multi_latent_attention = false;
  std::int64_t q_lora_rank = 0;
  std::int64_t kv_lora_rank = 32;
  std::int64_t qk_head_dim = 128;
  std::int64_t qk_pos_emb_head_dim = 64;
  std::int64_t v_head_dim = 128;
  /// --qk-layernorm: with MLA the q and kv latents are normalized (fused into the up
  /// projections, Transformer Engine LayerNormColumnParallelLinear); on standard attention
  /// each head's query and key are (TENorm over kv_channels, Qwen3).
  bool qk_layernorm = false;
  // Mixture of experts (--num-experts etc.); num_experts 0 = dense.
  std::int64_t num_experts = 0;
  std::int64_t moe_router_topk = 2;
  std::int64_t moe_ffn_hidden_size = 0;  ///< filled with ffn_hidden_size when absent
  std::int64_t moe_shared_expert_intermediate_size = 0;  ///< 0 = no shared expert
  /// --moe-shared-expert-overlap: the shared expert's fc1 runs beside the token dispatch and
  /// its fc2 beside the combine (Megatron-Core shared_experts.py, on a second CUDA stream).
  bool moe_shared_expert_overlap = false;
  /// --moe-layer-freq as an integer N: layer l (0-based) is an MoE layer when l % N == 0.
  std::int64_t moe_layer_freq = 1;
  /// --moe-layer-freq as a pattern (a list, or Megatron's string expression such as
  /// "([0]*3+[1]*58)"): 1 = MoE layer, 0 = dense layer, one entry per layer; empty = the
  /// integer form (Megatron-Core gpt_layer_specs.py get_gpt_decoder_layer_specs).
  std::vector<std::uint8_t> moe_layer_pattern;
  MoeDispatcher moe_token_dispatcher_type = MoeDispatcher::AllToAll;
  /// --moe-enable-deepep: the flex dispatcher's DeepEP backend (needs dispatcher flex).
  bool moe_enable_deepep = false;
  /// --moe-flex-dispatcher-backend: the flex dispatcher's kernels (read with dispatcher flex).
  FlexBackend moe_flex_dispatcher_backend = FlexBackend::DeepEP;
  /// --moe-router-num-groups / --moe-router-group-topk: group-limited routing (DeepSeek-V3:
  /// 8 groups, 4 of them per token); 0 = none. Read by the flex dispatcher's model alone: the
  /// nodes and ranks a token reaches (docs/scenario.md moe_router_num_groups).
  std::int64_t moe_router_num_groups = 0;
  std::int64_t moe_router_group_topk = 0;
  /// --mtp-num-layers: multi-token prediction layers (Megatron-Core
  /// multi_token_prediction.py), each an embedding of the shifted tokens (the shared word
  /// embedding), two norms, a projection 2h -> h (eh_proj), one transformer layer (an MoE layer
  /// when the last decoder layer is one) and the shared output head, on the last pipeline stage.
  /// Their layer indices follow the decoder's: num_layers .. num_layers + mtp_num_layers - 1.
  std::int64_t mtp_num_layers = 0;
  bool moe_grouped_gemm = false;
  /// trainsim extension: tokens routed to the busiest expert rank / the mean (>= 1).
  double moe_token_imbalance_factor = 1.0;
  /// --moe-expert-capacity-factor: token dropping (docs/scenario.md); 0 = none (dropless).
  double moe_expert_capacity_factor = 0;
  /// --moe-pad-expert-input-to-capacity: every expert processes exactly its capacity.
  bool moe_pad_expert_input_to_capacity = false;
  /// --moe-token-drop-policy: accepted; it picks which copies drop, not how many.
  MoeTokenDropPolicy moe_token_drop_policy = MoeTokenDropPolicy::Probs;
  /// --moe-permute-fusion: Transformer Engine's fused permute and unpermute kernels; false:
  /// Megatron-Core's unfused index_select / scatter_add_ (moe_utils.py permute, unpermute).
  bool moe_permute_fusion = false;
  /// The router's kernels beyond its GEMM and top-k (Megatron-Core core_v0.16.0 router.py,
  /// moe_utils.py; models/perf/flops_moe.cpp): --moe-router-score-function,
  /// --moe-router-enable-expert-bias (sigmoid only), --moe-router-fusion (TE's fused
  /// router kernels), --moe-aux-loss-coeff (> 0: the load-balancing loss's kernels),
  /// --moe-z-loss-coeff (> 0: the z-loss's).
  RouterScore moe_router_score_function = RouterScore::Softmax;
  bool moe_router_enable_expert_bias = false;
  bool moe_router_fusion = false;
  double moe_aux_loss_coeff = 0;
  double moe_z_loss_coeff = 0;
  /// Hugging Face config.json the model section was imported from ("" = none).
  std::string hf_config;

  bool is_moe() const { return num_experts > 0; }
  /// Megatron-Core's expert capacity (moe_utils.py get_capacity, called by
  /// apply_router_token_dropping with the router's token count times topk): the token copies
  /// each expert accepts from one rank, ceil(rank_tokens k / E x capacity_factor), where
  /// rank_tokens are the rank's tokens before the dispatch (b s / cp, / t with sequence
  /// parallelism). 0 without a capacity factor.
  std::int64_t moe_expert_capacity(std::int64_t rank_tokens) const;
  /// The token copies the experts of the busiest expert rank process (docs/scenario.md,
  /// moe_expert_capacity_factor): rank_tokens k times the imbalance factor; with a capacity
  /// factor at most E x capacity (each of the E / EP local experts takes at most capacity
  /// copies from each of the EP ranks), and exactly that with padding to capacity.
  double moe_expert_token_copies(std::int64_t rank_tokens) const;
  /// Whether global layer l (0-based) runs the MoE MLP (Megatron-Core's moe_layer_pattern);
  /// the other layers of an MoE model run a dense MLP of ffn_hidden_size.
  bool moe_layer(std::int64_t l) const {
    if (!is_moe()) return false;
    // An MTP layer's MLP is the last decoder layer's kind (Megatron-Core
    // get_gpt_mtp_block_spec builds it from the decoder's last layer spec; training.py
    // num_floating_point_operations counts it with last_layer_is_moe).
    if (l >= num_layers && l < num_layers + mtp_num_layers && num_layers > 0)
      return moe_layer(num_layers - 1);
    if (!moe_layer_pattern.empty())
      return l >= 0 && std::size_t(l) < moe_layer_pattern.size() && moe_layer_pattern[std::size_t(l)] != 0;
    return l % std::max<std::int64_t>(moe_layer_freq, 1) == 0;
  }
  /// Whether the model mixes dense and MoE layers.
  bool has_dense_layers() const {
    for (std::int64_t l = 0; l < num_layers; ++l)
      if (!moe_layer(l)) return true;
    return false;
  }
};

/// Parallel plan, Megatron-LM argument names; derived fields are filled by validation.
struct ParallelConfig {
  std::int64_t tensor_model_parallel_size = 1;
  std::int64_t pipeline_model_parallel_size = 1;
  std::int64_t micro_batch_size = 1;
  std::int64_t global_batch_size = 1;
  /// Set => interleaved 1F1B with num_layers / pp / this many model chunks per stage.
  std::optional<std::int64_t> num_layers_per_virtual_pipeline_stage;
  /// --pipeline-model-parallel-layout: Megatron-Core's hand-written layout string
  /// ("Et*3|(tt|)*29m|L", models/input/pipeline_layout.h); empty: none. It sets the virtual
  /// stages and their layers (virtual_stage_layers).
  std::string pipeline_model_parallel_layout;
  Recompute recompute_granularity = Recompute::None;
  /// Megatron-Core --recompute-modules with selective recomputation: a set of kRecompute*
  /// bits. Resolved at load: Megatron-Core's default [core_attn] when selective and absent, 0
  /// when recomputation is not selective.
  std::uint8_t recompute_modules = 0;
  /// Megatron's --recompute-method and --recompute-num-layers with full recomputation
  /// (transformer_config.py): `uniform` (the default, with 1 layer: Megatron-LM 2021's
  /// --checkpoint-num-layers 1) checkpoints each model chunk's layers in units of
  /// recompute_num_layers; `block` checkpoints the first recompute_num_layers layers of each
  /// model chunk and keeps the others' activations (recompute_units()).
  bool recompute_block = false;
  std::int64_t recompute_num_layers = 1;
  bool sequence_parallel = false;
  Precision precision = Precision::FP16;
  /// Megatron's --overlap-grad-reduce: DP gradient buckets reduced during backward.
  /// Off by default, as in the SC'21 runs.
  bool overlap_grad_reduce = false;
  /// Megatron's scatter/gather optimization for pipeline sends across the TP ranks' NICs
  /// (on in SC'21; --no-scatter-gather-tensors-in-pipeline turns it off).
  bool scatter_gather_tensors_in_pipeline = true;
  /// Megatron's --ddp-bucket-size, in parameters (elements) per DP gradient bucket.
  std::int64_t ddp_bucket_size = 40'000'000;
  /// Megatron's --clip-grad: gradient clipping by global L2 norm (0 turns the norm off).
  double clip_grad = 1.0;
  /// trainsim extension: `gpipe` or `1f1b`; `interleaved` is implied by virtual stages.
  PipelineSchedule pipeline_schedule = PipelineSchedule::OneFOneB;

  // ---- Megatron-Core parallelism (defaults = off, the SC'21 runs)
  std::int64_t context_parallel_size = 1;
  std::int64_t expert_model_parallel_size = 1;
  /// Filled with tensor_model_parallel_size when absent (Megatron's default).
  std::int64_t expert_tensor_parallel_size = 0;
  std::optional<std::int64_t> decoder_first_pipeline_num_layers;
  std::optional<std::int64_t> decoder_last_pipeline_num_layers;
  bool account_for_embedding_in_pipeline_split = false;
  bool account_for_loss_in_pipeline_split = false;
  bool use_distributed_optimizer = false;
  bool overlap_param_gather = false;
  /// Transformer Engine's userbuffers overlap of the tensor-parallel all-gathers and
  /// reduce-scatters with the GEMMs of the dense layers (Megatron --tp-comm-overlap).
  bool tp_comm_overlap = false;
  /// How that overlap runs the forward reduce-scatters after proj and fc2: false = pipelined
  /// (Transformer Engine's default), true = ring exchange (Megatron-Bridge's FP8 H100
  /// configurations). Scenario key tp_comm_overlap_rs_method: pipeline | ring_exchange.
  bool tp_comm_overlap_rs_ring = false;
  /// Megatron-Core --overlap-moe-expert-parallel-comm (Megatron-Bridge's moe_a2a_overlap): the
  /// combined 1F1B schedule that runs one microbatch's forward layer beside another's backward
  /// layer, each one's expert-parallel all-to-alls on a communication stream beside the other's
  /// compute (megatron/core/pipeline_parallel/combined_1f1b.py; models/builder/a2a_overlap.h).
  bool overlap_moe_expert_parallel_comm = false;
  /// Megatron-Core --delay-wgrad-compute: with that overlap, the experts' weight-gradient GEMMs
  /// run after the other microbatch's dispatch is issued (TransformerLayerSchedulePlan.run
  /// mlp.backward_dw), beside the backward's dispatch all-to-all.
  bool delay_wgrad_compute = false;
  /// CUDA graphs (docs/scenario.md "CUDA graphs"): Megatron-Core --cuda-graph-impl, set too
  /// by the deprecated --enable-cuda-graph (local) and --external-cuda-graph
  /// (transformer_engine), and --cuda-graph-scope as kGraph* bits (0: the whole layer).
  CudaGraphImpl cuda_graph_impl = CudaGraphImpl::None;
  bool enable_cuda_graph = false;
  bool external_cuda_graph = false;
  std::uint8_t cuda_graph_scope = 0;
  /// Megatron-Core activation CPU offloading (TransformerConfig cpu_offloading,
  /// cpu_offloading_num_layers, cpu_offloading_activations, cpu_offloading_weights; Transformer
  /// Engine's get_cpu_offload_context, models/builder/offload.h ActivationOffload): the saved
  /// activations of the rank's first cpu_offloading_num_layers layers go to pinned host memory
  /// after their forward and come back before their backward. Off by default.
  bool cpu_offloading = false;
  std::int64_t cpu_offloading_num_layers = 0;
  bool cpu_offloading_activations = true;
  bool cpu_offloading_weights = false;
  /// Layers whose activations are offloaded (0 when cpu_offloading is off).
  std::int64_t offloaded_activation_layers() const {
    return cpu_offloading && cpu_offloading_activations ? cpu_offloading_num_layers : 0;
  }
  bool use_megatron_fsdp = false;
  bool use_torch_fsdp2 = false;
  /// FSDP sharding group (the Megatron-Bridge table's fsdp column); filled with dp x cp.
  std::int64_t fsdp_sharding_group_size = 0;
  Fp8Format fp8 = Fp8Format::None;
  Fp8Recipe fp8_recipe = Fp8Recipe::Delayed;
  /// --fp8-param-gather: the linear layers' weights live only in FP8 (Transformer Engine
  /// fp8_model_init; the fp32 master copy stays in the optimizer) and are all-gathered in FP8.
  bool fp8_param_gather = false;
  /// Megatron-Core DistributedDataParallelConfig.grad_reduce_in_fp32 (Megatron-LM
  /// --accumulate-allreduce-grads-in-fp32): the gradient buffer (main_grad) and its data-parallel
  /// reduction in fp32 (true) or in the training precision (false). Absent: Megatron's default,
  /// fp32 for bf16 (arguments.py forces it; Megatron-Bridge's bf16 mixed-precision configs set
  /// it) and the training precision for fp16. Megatron DDP and the distributed optimizer only.
  std::optional<bool> grad_reduce_in_fp32;

  bool uses_fsdp() const { return use_megatron_fsdp || use_torch_fsdp2; }
  /// tp_comm_overlap in effect: it needs sequence parallelism with t > 1 (validation says so
  /// for a loaded scenario; the megatron-core runtime is the callers' to check).
  bool uses_tp_comm_overlap() const {
    return tp_comm_overlap && sequence_parallel && tensor_model_parallel_size > 1;
  }

  // ---- derived by validate_scenario() ----
  std::int64_t data_parallel_size = 1;          ///< gpus / (tp * cp * pp)
  std::int64_t num_microbatches = 1;            ///< global_batch / (micro_batch * dp)
  std::int64_t virtual_pipeline_size = 1;       ///< model chunks per pipeline rank
  std::int64_t layers_per_chunk = 1;            ///< num_layers / (pp * virtual_pipeline_size)
  /// Transformer layers of each virtual stage (index chunk * pp + stage), Megatron-Core's split
  /// (even, or uneven with decoder_first/last_pipeline_num_layers or account_for_*); filled
  /// by validate_scenario (models/input/scenario.cpp split_layers).
  std::vector<std::int64_t> virtual_stage_layers;
  /// Multi-token prediction layers (model.mtp_num_layers, copied by validate_scenario): global
  /// layer indices mtp_first_layer .. + mtp_layers - 1, in the last virtual stage, after its
  /// decoder layers (stage_layers lists them on the last pipeline stage).
  std::int64_t mtp_first_layer = 0, mtp_layers = 0;

  /// Layers of virtual stage `vstage` and the global index of its first layer.
  std::int64_t layers_of_virtual_stage(std::int64_t vstage) const {
    return virtual_stage_layers.empty() ? layers_per_chunk
                                        : virtual_stage_layers[std::size_t(vstage)];
  }
  std::int64_t first_layer_of_virtual_stage(std::int64_t vstage) const {
    if (virtual_stage_layers.empty()) return vstage * layers_per_chunk;
    std::int64_t first = 0;
    for (std::int64_t v = 0; v < vstage; ++v) first += virtual_stage_layers[std::size_t(v)];
    return first;
  }
  /// Per global layer (of `num_layers`), the first layer of its checkpoint unit under full
  /// recomputation, -1 for a layer that keeps its activations (Megatron-Core recompute.py, as
  /// TransformerBlock._checkpointed_forward calls it on each model chunk; Megatron-LM 2021's
  /// --checkpoint-num-layers alike). A unit stashes its first layer's input and re-runs its
  /// layers' forward before the backward of its last. `uniform`: each model chunk's layers in
  /// units of recompute_num_layers, the last one shorter; `block`: the first
  /// recompute_num_layers layers of each chunk, each a unit of its own. Valid once validated.
  std::vector<std::int64_t> recompute_units(std::int64_t num_layers) const {
    std::vector<std::int64_t> out(std::size_t(num_layers), -1);
    if (recompute_granularity != Recompute::Full) return out;
    const std::int64_t unit = std::max<std::int64_t>(recompute_num_layers, 1);
    // Chunk by chunk; layers past the chunks (a configuration not validated yet) as one more.
    const std::int64_t chunks = pipeline_model_parallel_size * virtual_pipeline_size;
    for (std::int64_t v = 0, first = 0; first < num_layers; ++v) {
      const std::int64_t n = v < chunks ? layers_of_virtual_stage(v) : num_layers - first;
      for (std::int64_t k = 0; k < n && first + k < num_layers; ++k) {
        if (recompute_block)
          out[std::size_t(first + k)] = k < recompute_num_layers ? first + k : -1;
        else
          out[std::size_t(first + k)] = first + k / unit * unit;
      }
      first += n;
    }
    return out;
  }
  /// Whether layer `l` is the last of its checkpoint unit in `units` (recompute_units()):
  /// where the unit's forward runs again, before that layer's backward.
  static bool recompute_unit_end(const std::vector<std::int64_t>& units, std::int64_t l) {
    const std::size_t i = std::size_t(l);
    return units[i] >= 0 && (i + 1 == units.size() || units[i + 1] != units[i]);
  }
  /// Per global layer, whether it runs full recomputation (checkpointed, its forward re-run in
  /// the backward): every layer with `full` and `uniform`, the block method's first
  /// recompute_num_layers of each model chunk (recompute_units). Valid once validated.
  std::vector<bool> fully_recomputed_layers(std::int64_t num_layers) const {
    const std::vector<std::int64_t> units = recompute_units(num_layers);
    std::vector<bool> out(units.size());
    for (std::size_t l = 0; l < units.size(); ++l) out[l] = units[l] >= 0;
    return out;
  }

  /// Layers the ranks of pipeline stage `stage` hold (all their chunks).
  std::int64_t layers_of_stage(std::int64_t stage) const {
    std::int64_t n = 0;
    for (std::int64_t c = 0; c < virtual_pipeline_size; ++c)
      n += layers_of_virtual_stage(c * pipeline_model_parallel_size + stage);
    return n;
  }
  /// The global indices of those layers in the rank's forward order (chunk 0's, chunk 1's, ...).
  std::vector<std::int64_t> stage_layers(std::int64_t stage) const {
    std::vector<std::int64_t> out;
    for (std::int64_t c = 0; c < virtual_pipeline_size; ++c) {
      const std::int64_t v = c * pipeline_model_parallel_size + stage;
      const std::int64_t first = first_layer_of_virtual_stage(v);
      for (std::int64_t k = 0; k < layers_of_virtual_stage(v); ++k) out.push_back(first + k);
    }
    if (stage == pipeline_model_parallel_size - 1)
      for (std::int64_t k = 0; k < mtp_layers; ++k) out.push_back(mtp_first_layer + k);
    return out;
  }

  /// Rank <-> coordinates (models/parallel_layout.h); valid once validated.
  /// Megatron-Core orders ranks tp -> cp -> dp -> pp (parallel_state.py RankGenerator): the
  /// layout's data dimension is DP x CP (data rank d, context rank c at d * cp + c), which is
  /// also Megatron's data-parallel-with-context-parallel group that reduces the gradients.
  ParallelLayout layout() const {
    return ParallelLayout{tensor_model_parallel_size, data_parallel_size * context_parallel_size,
                          pipeline_model_parallel_size};
  }
};

/// deepspeed.zero_optimization.offload_optimizer
struct OffloadOptimizerConfig {
  bool enabled = false;      ///< device: cpu
  bool pin_memory = true;
  double ratio = 1.0;        ///< Twin-Flow: fraction of parameters updated by CPU Adam
  bool ratio_auto = false;   ///< `ratio: auto`: smallest ratio whose GPU peak fits
  /// Set by resolve_offload_ratio (models/memory/zero_offload.h) once `ratio` holds the chosen value
  /// for `ratio: auto`.
  bool ratio_resolved = false;
};

/// deepspeed.zero_optimization
struct ZeroConfig {
  int stage = 0;  ///< 0 (plain DP), 1 (optimizer states), 2 (+gradients), 3 (+parameters)
  std::int64_t reduce_bucket_size = 500'000'000;     ///< elements
  std::int64_t allgather_bucket_size = 500'000'000;  ///< elements
  bool overlap_comm = true;
  std::int64_t stage3_prefetch_bucket_size = 50'000'000;  ///< elements
  /// Gathered (full) parameters alive at once before prefetching stops (DeepSpeed default 1e9).
  std::int64_t stage3_max_live_parameters = 1'000'000'000;  ///< elements
  /// Parameters with fewer elements stay gathered for the whole run and are never fetched
  /// (norm weights, biases; DeepSpeed default 1e5).
  std::int64_t stage3_param_persistence_threshold = 100'000;  ///< elements
  /// A used parameter is kept gathered when it is needed again within this many elements of
  /// other fetched parameters (DeepSpeed default 1e9).
  std::int64_t stage3_max_reuse_distance = 1'000'000'000;  ///< elements
  /// Elements per optimizer sub-group (DeepSpeed default 1e9): the CPU step and the host->device
  /// copy of updated parameters proceed one sub-group at a time.
  std::int64_t sub_group_size = 1'000'000'000;
  OffloadOptimizerConfig offload_optimizer;
};

/// cluster: a catalog system name plus overrides.
struct ClusterConfig {
  /// Hardware catalog name, e.g. `dgx-a100-80gb`; with `system_file`, the file's `name`.
  std::string system;
  /// A cluster file (docs/cluster.md) describing the system instead of a catalog name, as
  /// given (relative to the scenario's folder); empty: the catalog's `system`.
  std::string system_file;
  /// The system read from `system_file` (models/hardware/system_file.h); null for a catalog
  /// system. Shared by the scenario's copies (the planner's candidates).
  std::shared_ptr<const SystemSpec> file_system;
  std::int64_t nodes = 1;
  std::int64_t gpus_per_node = 0;  ///< 0 means the system's own count
};

/// The cluster's system: the one read from `cluster.system_file`, else the catalog's
/// `cluster.system` (find_system, which throws InputError for an unknown name).
const SystemSpec& cluster_system(const ClusterConfig& cluster);

/// `variability:` (trainsim extension, docs/scenario.md "variability"): an asymmetric
/// cluster. A GPU's speed multiplies its sustained compute and HBM rates (its kernels' device
/// time scales by 1 / speed; launch overheads do not); a link's factor multiplies its
/// bandwidth. Read and range-checked by models/input/variability.cpp; the per-rank speeds are
/// gpu_speeds() (models/input/variability.h).
struct SlowGpu {
  std::int64_t rank = 0;
  double speed = 1;  ///< (0, 1]
};
struct SlowLink {
  std::int64_t node = 0;
  std::int64_t nic = -1;         ///< the node's NIC (its cable to the leaf switch), or -1
  std::int64_t nvlink_gpu = -1;  ///< the node's GPU whose NVLink port is slow, or -1
  double bandwidth = 1;          ///< (0, 1]
};
struct VariabilityConfig {
  std::vector<SlowGpu> slow_gpus;
  std::vector<SlowLink> slow_links;
  double gpu_speed_cv = 0;  ///< coefficient of variation of the lognormal per-GPU speed
  std::int64_t seed = 0;    ///< seeds gpu_speed_cv's sample
  /// Whether any GPU or link differs from the catalog's (false: today's symmetric cluster).
  bool any() const { return !slow_gpus.empty() || !slow_links.empty() || gpu_speed_cv > 0; }
};

/// Options of the simulation itself (trainsim extension, all optional).
struct SimulationConfig {
  /// Fold identical ranks (TP peers, DP replicas) into one representative. `auto` folds
  /// when the unfolded graph would exceed a size limit.
  enum class Fold : std::uint8_t { Auto, On, Off } fold = Fold::Auto;
};

/// training.checkpoint: how the run saves and loads its checkpoints (trainsim forecast,
/// docs/forecast.md). Megatron-LM's names: interval_steps is --save-interval, async is
/// --async-save. Defaults: models/hardware/reliability.h.
struct CheckpointConfig {
  /// Aggregate storage bandwidth of the cluster's file system, for writes and reads.
  double write_bw_bytes_per_s = reliability::kStorageWriteBwBytesPerS;
  double read_bw_bytes_per_s = reliability::kStorageReadBwBytesPerS;
  /// Megatron's async_save: the training stalls only for the device-to-host copy; the write to
  /// storage runs in the background.
  bool async = false;
  std::int64_t interval_steps = 0;  ///< steps between saves; 0: `auto` (the optimum)
};

/// training: the whole run (trainsim forecast, docs/forecast.md): its length, price, failure
/// rates and checkpoints. Unused by simulate. Defaults: models/hardware/reliability.h.
struct TrainingConfig {
  /// Length of the run: exactly one of the three, or none (forecast refuses a scenario without).
  double train_tokens = 0;                    ///< 0: absent
  std::optional<std::int64_t> train_iters;    ///< Megatron --train-iters
  std::optional<std::int64_t> train_samples;  ///< Megatron --train-samples (sequences)
  double gpu_hour_usd = 0;                    ///< 0: absent (no cost reported)
  /// Failure rates, interruptions per hour of one GPU, one node, one NIC link.
  double gpu_failures_per_h = reliability::kGpuFailuresPerHour;
  double node_failures_per_h = reliability::kNodeFailuresPerHour;
  double link_failures_per_h = reliability::kLinkFailuresPerHour;
  double mttf_h = 0;  ///< the job's mean time to failure; 0: from the rates
  double restart_s = reliability::kRestartS;  ///< from an interruption to the job running again (before the load)
  CheckpointConfig checkpoint;
};

struct Scenario {
  std::string name;
  /// Top-level `runtime`; megatron-2021 when absent (see docs/scenario.md).
  Runtime runtime = Runtime::Megatron2021;
  /// Top-level `nccl_version`: the NCCL release whose tuning model the collectives follow
  /// (models/perf/nccl_model.h); 2.29.7 when absent.
  NcclVersion nccl_version = kDefaultNcclVersion;
  /// Top-level `nccl_nvls_enable` (NCCL_NVLS_ENABLE): false keeps NCCL off NVLS / NVLS-Tree
  /// on an NVLink SHARP system; true (NCCL's default) when absent.
  bool nccl_nvls_enable = true;
  /// Top-level `host_model` (on|off): the host timeline of each rank (sim/host_thread.h,
  /// docs/scenario.md "host_model"): tasks issued in program order at the profile's host
  /// costs, synchronisation points. off: the hardware-only simulation. on when absent.
  bool host_model = true;
  /// Top-level `timing_log_level` (Megatron --timing-log-level, 0..2): Megatron-Core's timers
  /// of that level synchronise the device (timers.py Timer.start/stop call
  /// torch.cuda.synchronize()): 2 the forward-compute and backward-compute timers of every
  /// microbatch, 1 the forward-backward timer. Megatron-LM 2021's timers always run (no level).
  /// Only with host_model on. 0 when absent.
  std::int64_t timing_log_level = 0;
  std::string source_path;  ///< the file it was read from (for error messages)
  /// How the file was read, for the summary's notes: "ignored: KEY (why)" for each launch-line
  /// argument accepted and not modelled (models/input/keys.h ScenarioKey::ignored).
  std::vector<std::string> notes;
  ModelConfig model;
  ParallelConfig parallel;
  ZeroConfig zero;
  ClusterConfig cluster;
  SimulationConfig simulation;
  VariabilityConfig variability;
  TrainingConfig training;

  std::int64_t world_size() const { return cluster.nodes * cluster.gpus_per_node; }
};

/// Upper bounds of a scenario's sizes, checked by parse_scenario (with the line) and
/// validate_scenario. Each is far beyond any real training run (GPT-1T: h = 25,600, s = 2,048,
/// V = 51,200, 128 layers, 3,072 GPUs) and chosen, together with the derived bounds below, so
/// that no product the models form in 64-bit integers (parameters x bytes per parameter,
/// activation bytes of all stashed microbatches, bucket bytes, NIC indices) can overflow, and
/// FLOP counts (doubles) stay finite. A value above its bound is an InputError naming the
/// field, the value and the bound.
///
/// The per-key bounds are declared with the keys, in the key table (models/input/key_table.cpp,
/// ScenarioKey::max; docs/scenario.md "Key index" lists them): 65,534 for layer counts (the
/// schedule graph numbers layers in 16 bits), 2^16 for head and group counts and parallel
/// sizes, 2^20 for the hidden size and the microbatch, 2^22 for the sequence and MLP sizes,
/// 2^24 for the vocabulary, 2^30 for the global batch, 2^50 for bucket sizes (elements), 2^20
/// nodes (and the system's fat tree must hold them: validate_scenario names the largest count
/// that fits).
///
/// Derived bounds (validate_scenario names the fields that form them):
///   number of microbatches (global_batch_size / (micro_batch_size x dp)) <= 65,534
///   parameters of the model                                <= kMaxScenarioParameters (2^50)
///   activation bytes of one layer and one microbatch, times num_layers x microbatches
///   (an upper bound of any rank's stash)                   <= kMaxScenarioActivationBytes (2^60)
///   tokens per iteration (global_batch_size x seq_length)  <= 2^40
struct ScenarioSizeLimit {
  const char* field;  ///< dotted key
  std::int64_t max;   ///< largest accepted value
};
/// The per-key bounds of the key table (every integer key of a scenario file has one); valid
/// until the table changes (register_scenario_key).
const std::vector<ScenarioSizeLimit>& scenario_size_limits();
/// The bound of a dotted integer key, or 0 when the key has none.
std::int64_t scenario_size_limit(const std::string& field);
constexpr std::int64_t kMaxScenarioMicrobatches = 0xFFFE;
constexpr std::int64_t kMaxScenarioParameters = std::int64_t(1) << 50;
constexpr std::int64_t kMaxScenarioActivationBytes = std::int64_t(1) << 60;
constexpr std::int64_t kMaxScenarioTokensPerIteration = std::int64_t(1) << 40;

/// Reads a scenario file, applies `--set key=value` overrides (dotted keys, YAML values),
/// fills defaults and validates it (validate_scenario). Throws InputError naming the file,
/// field and value for a missing file, unknown key (with a suggestion), wrong type, negative
/// or zero size, or an inconsistent parallel plan.
Scenario load_scenario(const std::string& path,
                       const std::vector<std::pair<std::string, std::string>>& overrides = {});

/// Parses a scenario from YAML text (`source` names it in messages).
Scenario parse_scenario(const std::string& yaml_text, const std::string& source,
                        const std::vector<std::pair<std::string, std::string>>& overrides = {});

/// The scenario file `path` as YAML text with `overrides` written in as `--set` writes them
/// (same key checks; "null" writes a null), the top-level sections named in `drop` removed,
/// and a relative model.hf_config made absolute (it is relative to the scenario's folder), so
/// that the text loads from any folder to the scenario load_scenario(path, overrides) gives:
/// what `plan --out` writes for a candidate. Throws InputError as load_scenario does.
std::string scenario_text_with_overrides(
    const std::string& path, const std::vector<std::pair<std::string, std::string>>& overrides,
    const std::vector<std::string>& drop = {});

/// Checks the plan and fills the derived fields: TP divides heads and hidden (and ffn), layers
/// split evenly over pipeline and virtual stages, global batch divisible by micro batch x DP,
/// GPUs = TP x PP x DP, interleaving needs pp > 1 and microbatches divisible by pp, ZeRO and
/// offload settings consistent. Throws InputError naming the fields and values.
/// Running it again on a validated scenario changes nothing (idempotent: the filled defaults
/// and derived fields pass their own checks, and no note is added twice).
void validate_scenario(Scenario& scenario);

/// A scenario that has passed validate_scenario, as Megatron-LM's TransformerConfig is one
/// that has passed its __post_init__: the raw input (a Scenario, as parsed or built in code)
/// becomes a ValidScenario only through validated(), which checks the plan (an InputError
/// names the conflicting fields and values) and fills the derived fields
/// (ParallelConfig::data_parallel_size, num_microbatches, virtual_pipeline_size,
/// layers_per_chunk, virtual_stage_layers, and the defaults). Those fields are meaningful only
/// in a ValidScenario, so the graph builder and the planner take only this type. It is
/// read-only: a caller that changes a field copies the Scenario out and validates the copy
/// again (validated(std::move(copy))). Any `const Scenario&` reader takes it as it is.
class ValidScenario {
 public:
  const Scenario& get() const { return scenario_; }
  const Scenario* operator->() const { return &scenario_; }
  const Scenario& operator*() const { return scenario_; }
  operator const Scenario&() const { return scenario_; }  // NOLINT: every reader takes it

 private:
  explicit ValidScenario(Scenario s) : scenario_(std::move(s)) {}
  friend ValidScenario validated(Scenario scenario);
  Scenario scenario_;
};

/// Runs validate_scenario on `scenario` and wraps the result; throws its InputError.
ValidScenario validated(Scenario scenario);

const char* to_string(Recompute r);
/// Megatron-Core --recompute-modules names that trainsim models, as kRecompute* bits
/// (nullopt: another name).
std::optional<std::uint8_t> recompute_module_bit(const std::string& name);
/// The modules of `bits` as a YAML list in bit order ("[layernorm, moe]"; "[]" for none), and
/// joined by '+' for a planner layout ("layernorm+moe").
std::string recompute_modules_yaml(std::uint8_t bits);
std::string recompute_modules_token(std::uint8_t bits);
const char* to_string(Runtime r);
const char* to_string(Normalization n);
const char* to_string(PositionEmbedding p);
const char* to_string(AttentionBackend a);
const char* to_string(MoeDispatcher d);
const char* to_string(Fp8Format f);
const char* to_string(Fp8Recipe r);
const char* to_string(CudaGraphImpl i);
/// The --cuda-graph-scope names of `bits`, comma-separated ("full" for none).
std::string cuda_graph_scope_names(std::uint8_t bits);
const char* to_string(PipelineSchedule s);

}  // namespace trainsim
