// Operation descriptors: the work a schedule task stands for, with the shapes one rank sees.
//
// Many tasks share one descriptor (every microbatch of every layer runs the same forward
// attention block), so the graph stores each distinct descriptor once and tasks refer to it
// by index. The simulator asks the cost model for a descriptor's duration once; the replay
// backend turns a descriptor into real LibTorch / NCCL / kernel calls with these shapes.
#pragma once

#include <cstdint>

#include "models/precision.h"

namespace trainsim {

enum class OpKind : std::uint8_t {
  // ---- compute, one rank's shard of one transformer layer (Megatron ParallelTransformerLayer)
  AttnFwd,        ///< input LayerNorm, QKV GEMM, core attention (QK^T, scale+mask+softmax,
                  ///< dropout, x V), output projection GEMM, bias-dropout-add
  MlpFwd,         ///< post-attention LayerNorm, fc1 (h -> ffn/tp), GeLU, fc2, bias-dropout-add
  AttnBwd,        ///< backward of AttnFwd (input and weight gradients); with selective
                  ///< recomputation it first recomputes the core attention
  MlpBwd,         ///< backward of MlpFwd
  EmbedFwd,       ///< word + position embedding lookup and dropout (first stage)
  EmbedBwd,       ///< embedding gradient (first stage)
  LogitsLossFwd,  ///< final LayerNorm, output GEMM (h -> vocab/tp), vocab-parallel cross entropy
  LogitsLossBwd,  ///< backward of LogitsLossFwd
  // ---- optimizer
  OptimizerStepGpu,  ///< fused Adam over `params` parameters on the GPU (mixed precision)
  OptimizerStepCpu,  ///< CPU Adam (ZeRO-Offload) over `params` parameters on the host cores
  // ---- communication
  AllReduce,
  ReduceScatter,
  AllGather,
  SendRecv,       ///< pipeline point-to-point message
  CopyH2D,        ///< host -> device copy over PCIe
  CopyD2H,        ///< device -> host copy over PCIe
  AllToAll,       ///< MoE token dispatch / combine: each rank sends bytes / n to every member
};

/// Which communicator a collective or message uses.
/// ModelParallel: the ranks of one model replica (TP x PP with the rank's data-parallel index),
/// over which Megatron's optimizer reduces its found-inf flag and gradient norm.
enum class GroupKind : std::uint8_t {
  None, Tensor, Pipeline, Data, Embedding, Context, Expert, ModelParallel
};

/// ModelFeatures::router bits.
constexpr std::uint8_t kRouterAuxLoss = 1;     ///< moe_aux_loss_coeff > 0
constexpr std::uint8_t kRouterZLoss = 2;       ///< moe_z_loss_coeff > 0
constexpr std::uint8_t kRouterExpertBias = 4;  ///< moe_router_enable_expert_bias
constexpr std::uint8_t kRouterFusion = 8;      ///< moe_router_fusion
/// ModelFeatures::shared_part values (model.moe_shared_expert_overlap).
constexpr std::uint8_t kSharedApart = 1;  ///< the MoE MLP op, its shared expert run apart
constexpr std::uint8_t kSharedFc1 = 2;    ///< the shared expert's fc1 side
constexpr std::uint8_t kSharedFc2 = 3;    ///< the shared expert's fc2 side

/// How a transformer's compute ops run beyond their shapes: the runtime's kernel list and the
/// Megatron-Core model features (models/perf/flops_core.cpp reads them). The defaults are the
/// 2021 GPT of SC'21 on Megatron-LM 2021, whose kernel list does not look at the other fields.
struct ModelFeatures {
  bool core = false;          ///< runtime megatron-core: the Transformer Engine kernel list
  std::int64_t kv_heads = 0;  ///< query groups on this rank (GQA); 0 = heads (MHA)
  bool swiglu = false;        ///< gated MLP: fc1 writes 2 x ffn (SwiGLU or quick-GeGLU)
  /// The gated MLP's activation is GPT-OSS's quick-GELU (model.quick_geglu) with its clamp
  /// (0: none) and linear offset: the same fused elementwise kernel as SwiGLU's in the cost
  /// model, the replay's arithmetic (hw_backend/core_layer.h).
  bool quick_geglu = false;
  float glu_clamp = 0, glu_offset = 0;
  bool rmsnorm = false;       ///< RMSNorm instead of LayerNorm
  bool rope = false;          ///< rotary positions (no position table)
  bool bias = true;           ///< linear layers with biases
  bool hidden_dropout = true;     ///< dropout after attention and MLP (p > 0)
  bool attention_dropout = true;  ///< dropout on the attention probabilities (p > 0)
  std::uint8_t attention = 0;     ///< AttentionBackend: 0 unfused, 1 fused, 2 flash
  std::int64_t window = 0;        ///< sliding window (keys back per query); 0 = full causal
  /// 0 none; 1 FP8 with delayed scaling; 2 current scaling (and blockwise); 3 MXFP8 (E8M0
  /// scales per 32 elements, computed inside the cast kernel: no amax pass)
  std::uint8_t fp8 = 0;
  /// FP8 forward GEMMs with the split accumulator too (the blockwise recipe); the backward
  /// GEMMs of every Transformer Engine FP8 recipe have it (KernelWork::split_accumulator).
  bool fp8_split_fprop = false;
  /// Transformer Engine's userbuffers overlap of the tensor-parallel collectives with the
  /// dense layers' GEMMs (parallel.tp_comm_overlap with sequence parallelism):
  /// KernelWork::overlap_comm_bytes.
  bool tp_overlap = false;
  /// ... with the forward reduce-scatters (proj, fc2) as ring exchanges instead of TE's
  /// default pipelined ones (parallel.tp_comm_overlap_rs_method).
  bool tp_overlap_rs_ring = false;
  /// Multi-head latent attention (MLA; op.head_dim is the query/key head dimension dn + dr):
  /// the q latent width (0: no q compression, one column-parallel linear_q_proj), the kv
  /// latent width, the RoPE key dr, the value head dimension dv; the latent norms.
  bool mla = false;
  std::int64_t q_lora = 0, kv_lora = 0, qk_rope = 0, v_dim = 0;
  bool qk_norm = false;
  /// --recompute-modules mla_up_proj: the up projections and RoPE re-run before the attention
  /// backward (their outputs q, k, v are not kept).
  bool recompute_mla_up = false;
  std::int64_t cp = 1;            ///< context-parallel size: this rank holds s / cp tokens
  /// Microbatches per iteration: Transformer Engine casts the weights to FP8 once per
  /// iteration (the first microbatch), so each microbatch's op carries 1 / microbatches of it.
  std::int64_t microbatches = 1;
  // Mixture of experts (an MlpFwd / MlpBwd with experts_local > 0 is the MoE layer)
  std::int64_t experts_local = 0;  ///< experts on this rank: num_experts / EP
  std::int64_t num_experts = 0;    ///< the router's width
  std::int64_t topk = 0;           ///< experts per token
  std::int64_t expert_ffn = 0;     ///< expert hidden size on this rank (moe_ffn / ETP)
  std::int64_t shared_ffn = 0;     ///< shared-expert hidden size on this rank (/ TP)
  bool grouped_gemm = false;       ///< one grouped GEMM for the local experts
  double imbalance = 1.0;          ///< tokens of the busiest expert rank / the mean
  /// Token dropping (model.moe_expert_capacity_factor): the most token copies this rank's
  /// experts process, E x capacity (ModelConfig::moe_expert_capacity); 0 = dropless.
  double expert_token_cap = 0;
  bool pad_to_capacity = false;    ///< every local expert processes exactly its capacity
  /// model.moe_permute_fusion: fused permute / unpermute kernels; false: the unfused
  /// scatter-adds (the unpermute, and the permute's backward) at the profile's scatter rate.
  bool permute_fusion = false;
  /// The router's optional kernels (models/perf/flops_moe.cpp), kRouter* bits of
  /// model.moe_aux_loss_coeff, moe_z_loss_coeff, moe_router_enable_expert_bias,
  /// moe_router_fusion; 0: the router GEMM and one top-k pass.
  std::uint8_t router = 0;
  /// Expert tensor parallelism (parallel.expert_tensor_parallel_size): the dispatcher
  /// all-gathers the received token copies over the ETP group, so the local experts process
  /// etp x the copies, each with expert_ffn = moe_ffn / etp.
  std::int64_t etp = 1;
  /// Bytes of a main_grad element (Megatron's gradient buffer) when the scenario sets
  /// parallel.grad_reduce_in_fp32; 0 = the runtime's default (megatron-core: fp32; the
  /// optimizer step: fp32 for bf16, fp16 for fp16).
  std::uint8_t main_grad_bytes = 0;
  /// Selective recomputation of Megatron-Core --recompute-modules (MoE layers): the pre-MLP
  /// norm (a separate TENorm module there) and the experts' activation are re-run in the
  /// backward instead of being kept.
  bool recompute_layernorm = false;
  bool recompute_moe_act = false;
  /// --recompute-modules shared_experts: the shared expert's forward (Megatron-Core MoELayer
  /// shared_experts_compute under tensor_parallel.checkpoint) re-runs before its backward.
  bool recompute_shared = false;
  /// model.moe_shared_expert_overlap: the MoE MLP op without the shared expert (kSharedApart),
  /// or one of the shared expert's own ops beside the token exchanges: kSharedFc1 (forward:
  /// fc1 and the activation, beside the dispatch; backward: the activation's and fc1's
  /// gradients, beside the dispatch's adjoint) or kSharedFc2 (forward: fc2, beside the
  /// combine; backward: fc2's gradients, after the re-run with recompute_shared, beside the
  /// combine's adjoint). 0: the shared expert inside the MoE MLP op.
  std::uint8_t shared_part = 0;
  /// The backward's re-run of a checkpointed MLP module (--recompute-modules mlp / moe): the
  /// module's forward only, without what runs outside Megatron-Core's checkpoint (the MoE
  /// layer's separate pre-MLP norm; the bias-dropout-add after either).
  bool checkpoint_rerun = false;
  /// A multi-token prediction layer's input (an EmbedFwd / EmbedBwd op, model.mtp_num_layers;
  /// Megatron-Core MultiTokenPredictionLayer): the shifted tokens' embedding lookup, enorm and
  /// hnorm, and eh_proj (2h -> h / tp) on the gathered tokens.
  bool mtp_input = false;
  /// parallel.delay_wgrad_compute: the MoE layer's MLP backward split in two (Megatron-Core
  /// TransformerLayerSchedulePlan.run: mlp.backward, then mlp.backward_dw). 0: the whole
  /// backward; 1: without the local experts' weight-gradient GEMMs; 2: only those GEMMs.
  std::uint8_t expert_wgrad = 0;
};

/// The flex dispatcher's dispatch or combine (model.moe_token_dispatcher_type flex): DeepEP's
/// normal (high-throughput) kernels, or HybridEP's (model.moe_flex_dispatcher_backend
/// hybridep, `hybrid_ep`). What the exchange's bytes follow from: `tokens` this rank routes
/// (0: not a flex op), each to `topk` of `experts` experts spread evenly over the EP ranks,
/// from `group_topk` of `groups` expert groups (0: no group limit); `token_bytes` per copy.
/// Both backends send a token once to each node and once to each GPU holding one of its
/// experts; the system model (models/system/collective_flows.h) turns it into bytes per node
/// and per rank, at each backend's rates.
struct DeepEpRouting {
  double tokens = 0, token_bytes = 0;
  std::int64_t topk = 0, experts = 0, groups = 0, group_topk = 0;
  bool combine = false;
  bool hybrid_ep = false;  ///< HybridEP's kernels, not DeepEP's
};

struct OpDesc {
  OpKind kind = OpKind::AttnFwd;
  Precision precision = Precision::FP16;
  GroupKind group = GroupKind::None;

  // ---- compute shapes, as one rank sees them
  std::int64_t micro_batch = 0;   ///< b
  std::int64_t seq = 0;           ///< s (full sequence; with sequence parallelism the
                                  ///< LayerNorm/dropout regions see s / tp)
  std::int64_t hidden = 0;        ///< h
  std::int64_t heads = 0;         ///< attention heads on this rank (a / tp)
  std::int64_t head_dim = 0;      ///< kv_channels
  std::int64_t ffn = 0;           ///< ffn hidden size on this rank (ffn / tp)
  std::int64_t vocab = 0;         ///< vocabulary rows on this rank (V / tp)
  std::int64_t tp = 1;            ///< tensor-parallel degree (for the SP-scaled regions)
  bool sequence_parallel = false;
  bool recompute_core_attention = false;  ///< selective recomputation inside AttnBwd
  ModelFeatures features;

  // ---- optimizer
  std::int64_t params = 0;        ///< parameters the step updates

  // ---- communication
  std::int64_t bytes = 0;         ///< payload: per-rank buffer size of the collective (the
                                  ///< full tensor for all-reduce, the gathered output for
                                  ///< all-gather, the input for reduce-scatter), or message size
  std::int64_t group_size = 1;    ///< ranks in the collective
  DeepEpRouting deepep;           ///< an AllToAll run by DeepEP's kernels (tokens > 0)

  // ---- work, filled by the builder from models/perf/flops.h
  double flops = 0;               ///< floating-point operations executed (matmul FLOPs = 2mnk)
  double bytes_accessed = 0;      ///< device-memory bytes read + written by the op's kernels
};

bool is_compute(OpKind k);
bool is_collective(OpKind k);
const char* to_string(OpKind k);
const char* to_string(GroupKind g);

}  // namespace trainsim
