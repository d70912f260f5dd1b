// The pipeline skeleton pass: one rank's program as Megatron-LM runs it
// (megatron/core/pipeline_parallel/schedules.py). It walks the pure order of
// models/graph/pipeline_schedule.h; per forward step: the input (embedding on the first virtual
// stage, else a receive), the chunk's layers (attention and MLP blocks), the output (final
// LayerNorm, logits and loss on the last virtual stage, else a send); backward steps mirror
// it (recomputing each layer's forward first under full recomputation). Then the gradient
// synchronization, the tied-embedding all-reduce and the optimizer step.
//
// Around each compute block it calls the tensor-parallel pass (the collectives on the compute
// path) and the rank's data-parallel strategy (gathers, gradient buckets, their memory), at
// fixed points, so each pass's tasks land in issue order. Activation lifetimes come from
// models/memory/memory_model.h.
#pragma once

#include <cstdint>

#include "models/builder/rank_context.h"
#include "models/builder/tensor_parallel.h"

namespace trainsim::builder {

/// The compute descriptors of one rank's blocks (shared by all ranks and microbatches).
struct ComputeOps {
  std::uint32_t attn_fwd = 0, mlp_fwd = 0, attn_bwd = 0, mlp_bwd = 0;
  std::uint32_t embed_fwd = 0, embed_bwd = 0, logits_fwd = 0, logits_bwd = 0;
  std::uint32_t cp_fwd = 0, cp_bwd = 0;  ///< context-parallel KV exchanges (cp > 1)
  std::uint32_t attn_fwd_full = 0, attn_bwd_full = 0;  ///< full attention (window models)
  std::uint32_t moe_dispatch = 0, moe_combine = 0;  ///< MoE token exchanges (EP > 1)
  /// Expert tensor parallelism (ETP > 1): the dispatcher's all-gather of the received copies
  /// over the ETP group and the combine's reduce-scatter of the experts' outputs.
  std::uint32_t etp_gather = 0, etp_scatter = 0;
  /// The dense MLP of an MoE model's dense layers (--moe-layer-freq); mlp_fwd / mlp_bwd when
  /// every layer is of one kind.
  std::uint32_t mlp_fwd_dense = 0, mlp_bwd_dense = 0;
  /// The re-run forward of a checkpointed MoE / dense MLP module (--recompute-modules moe /
  /// mlp; ModelFeatures::checkpoint_rerun).
  std::uint32_t mlp_rerun = 0, mlp_rerun_dense = 0;
  /// A multi-token prediction layer's input, forward and backward (ModelFeatures::mtp_input;
  /// model.mtp_num_layers > 0).
  std::uint32_t mtp_input_fwd = 0, mtp_input_bwd = 0;
  /// parallel.delay_wgrad_compute: the MoE MLP backward without the experts' weight-gradient
  /// GEMMs, and those GEMMs alone (ModelFeatures::expert_wgrad 1 and 2); unset otherwise.
  std::uint32_t mlp_bwd_dgrad = 0, mlp_bwd_wgrad = 0;
  /// model.moe_shared_expert_overlap: the shared expert's fc1 and fc2 sides, forward and
  /// backward (ModelFeatures::shared_part); unset otherwise.
  std::uint32_t shared_fc1_fwd = 0, shared_fc2_fwd = 0, shared_fc1_bwd = 0, shared_fc2_bwd = 0;
};

/// Adds the compute descriptors of the scenario's blocks to the graph
/// (models/builder/compute_ops.cpp).
ComputeOps add_compute_ops(GraphBuild& build);

class PipelinePass {
 public:
  /// Adds the graph's shared descriptors, in this order: the compute blocks, the
  /// tensor-parallel collectives, the pipeline message.
  explicit PipelinePass(GraphBuild& build);
  /// Emits the whole program of the rank at `coords` (and records its initial memory).
  void emit_rank(const RankCoords& coords) const;

 private:
  GraphBuild& build_;
  ComputeOps ops_;
  TensorParallelPass tp_;
  std::uint32_t p2p_op_ = 0;
};

}  // namespace trainsim::builder
