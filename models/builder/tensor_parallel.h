// The tensor-parallel pass: the collectives Megatron-LM's tensor parallelism puts on the
// compute path around each block the pipeline skeleton emits.
//
//  - Per transformer block (Shoeybi et al. 2019 Fig. 3, the f/g operators; SC'21 Sec. 3.2):
//    one all-reduce of the block's output after it (forward, recompute and backward), or with
//    sequence parallelism (Korthikanti et al. 2022 Sec. 4.2.2) an all-gather of the
//    sequence-split input before it and a reduce-scatter after it.
//  - Output layer: with SP the final LayerNorm output is gathered before the logits; the
//    vocab-parallel cross entropy (Megatron tensor_parallel/cross_entropy.py) all-reduces the
//    per-token max, sum of exponentials and target logit (fp32, 3 b s elements); the logits
//    backward reduces the input gradient (all-reduce, reduce-scatter with SP).
//    A block's backward gathers twice before its reduce-scatter: the output gradient (the
//    forward reduce-scatter's adjoint) and, for the weight gradient, the input it kept only
//    as its sequence shard (Megatron-Core tensor_parallel/layers.py
//    LinearWithGradAccumulationAndAsyncCommunication.backward: all_gather of `input` when
//    sequence_parallel; TE's layers likewise): one gather task of both, 2 activations. The
//    output layer's backward re-gathers its input before the logits' weight gradient too.
//    Under FP8 (Transformer Engine, megatron-core runtime) the forward gather of a dense
//    layer's QKV and fc1 input carries FP8, one byte per element (ModelDims::
//    fp8_input_gather), and the backward's two gathers are FP8 as well: the bytes of one
//    activation. With current scaling each of those casts first all-reduces its amax (one
//    fp32) over the TP group: the QKV and fc1 inputs in the forward, the proj and fc2 output
//    gradients in the backward (ModelDims::fp8_amax_reduce), one before each gather.
//    An MoE layer's MLP block with expert_tensor_parallel_size 1 and no shared expert has
//    neither (ModelDims::moe_block_local): its tokens stay on the rank.
//  - Pipeline input: with the scatter/gather optimization (SC'21 Sec. 4.1) each TP rank
//    receives 1/t of the activation and all-gathers the slices over NVLink
//    (gather_split_1d_tensor).
//  - Multi-head latent attention (Megatron-Core MLASelfAttention): the down projections are
//    duplicated on every TP rank and run on the rank's own rows, so the attention block's
//    gathers and input-gradient reductions are on the latents the up projections read, not on
//    the hidden state (mla_collectives).
// All of them are synchronous with compute: each waits for the compute path and becomes its
// new tail (RankContext::last_compute). With Transformer Engine's userbuffers overlap
// (parallel.tp_comm_overlap) a dense block's gathers and reduce-scatters run inside its GEMMs
// instead (ModelDims::tp_overlap; the GEMM kernels carry the bytes,
// models/perf/flops_core.cpp), and the pass emits none for the attention and dense MLP blocks.
#pragma once

#include <cstdint>

#include "models/builder/rank_context.h"

namespace trainsim::builder {

class TensorParallelPass {
 public:
  /// Adds the pass's collective descriptors to the graph (in this order: all-reduce,
  /// all-gather and reduce-scatter of one activation, cross-entropy all-reduce).
  TensorParallelPass(ScheduleGraph& graph, const ModelDims& dims);

  /// Before a block (`layer` kNoIndex for the output layer): the SP all-gather of its input.
  void before_block(RankContext& ctx, Phase phase, Part part, std::uint16_t mb,
                    std::uint16_t layer) const;
  /// After a block: the all-reduce (reduce-scatter with SP) of its output; nothing for t = 1.
  void after_block(RankContext& ctx, Phase phase, Part part, std::uint16_t mb,
                   std::uint16_t layer) const;
  /// After the logits forward: the vocab-parallel cross entropy's all-reduce (t > 1).
  void after_loss(RankContext& ctx, std::uint16_t mb) const;
  /// Before the output layer's backward: the re-gather of its sequence-parallel input for the
  /// logits' weight gradient (SP).
  void before_output_backward(RankContext& ctx, std::uint16_t mb) const;
  /// After a pipeline receive: the scatter/gather all-gather of the t slices.
  void after_receive(RankContext& ctx, Phase phase, std::uint16_t mb) const;

 private:
  TaskId tp_collective(RankContext& ctx, std::uint32_t op, Phase phase, Part part,
                       std::uint16_t mb, std::uint16_t layer) const;
  /// An MoE layer's MLP block that needs no tensor-parallel collective
  /// (ModelDims::moe_block_local).
  bool local_moe_block(Part part, std::uint16_t layer) const;
  /// A transformer layer's attention block, or the MLP block of a dense (non-MoE) layer.
  bool dense_block(Part part, std::uint16_t layer) const;
  /// A dense block whose collectives run inside its GEMMs (ModelDims::tp_overlap).
  bool overlapped_block(Part part, std::uint16_t layer) const;
  const ModelDims& dims_;  ///< GraphBuild's, which outlives the pass
  std::uint32_t all_reduce_ = 0, all_gather_ = 0, reduce_scatter_ = 0, cross_entropy_ = 0;
  /// The FP8 all-gather of a dense column-parallel input (ModelDims::fp8_input_gather).
  std::uint32_t all_gather_fp8_ = 0;
  /// A block's backward gathers (output gradient and input) in the training precision.
  std::uint32_t all_gather_bwd_ = 0;
  /// The amax all-reduce of an FP8 current-scaling cast (one fp32; ModelDims::fp8_amax_reduce).
  std::uint32_t amax_reduce_ = 0;
  /// Multi-head latent attention (ModelDims::mla): the attention block's collectives are on
  /// its latents (mla_collectives).
  struct MlaOps {
    std::uint32_t q_gather = 0, kv_gather = 0, rope_gather = 0;   ///< forward inputs (SP)
    std::uint32_t q_reduce = 0, kv_reduce = 0, rope_reduce = 0;   ///< backward input gradients
  } mla_{};
  /// The MLA attention block's collectives before (`before`) or after it in `phase`.
  void mla_collectives(RankContext& ctx, bool before, Phase phase, std::uint16_t mb,
                       std::uint16_t layer) const;
};

}  // namespace trainsim::builder
