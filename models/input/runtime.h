// The runtime as a value: what each `runtime:` of a scenario (models/input/scenario.h Runtime)
// does, one RuntimeSpec per runtime, so that the code that depends on the runtime reads a named
// field (`runtime_spec(sc.runtime).activation_terms`) instead of comparing the enum.
//
// megatron-2021 is the Megatron-LM of the SC'21 runs (commit 6985e58: apex LayerNorm, cuBLAS
// GEMMs with separate bias adds, baddbmm/softmax/bmm attention, JIT-fused bias-GeLU; ZeRO from
// DeepSpeed); megatron-core is Megatron-Core with Transformer Engine modules. docs/
// architecture.md ("Runtimes") describes both; tests/models/test_runtime.cpp states the table.
// DeepSpeed is no runtime of its own here: its ZeRO stages run on megatron-2021
// (deepspeed_zero_sharding).
#pragma once

#include <cstdint>

#include "models/input/scenario.h"

namespace trainsim {

/// Which kernel lists the compute ops run (models/perf/flops.h op_kernels).
enum class KernelLists : std::uint8_t {
  Megatron2021,       ///< the 2021 ParallelTransformerLayer's kernels (flops_megatron2021.cpp)
  TransformerEngine,  ///< Transformer Engine modules (ModelFeatures::core, core_op_kernels)
};

/// Which activation terms the memory model counts per layer (models/memory/memory_model.h).
enum class ActivationTerms : std::uint8_t {
  Korthikanti,        ///< Korthikanti et al. 2022 Sec. 4's closed forms (34 sbh + 5 as^2b)
  TransformerEngine,  ///< what Transformer Engine's modules save (core_layer_activation_bytes)
};

/// How the model FLOPs of an iteration are counted (models/perf/flops.h
/// model_flops_per_iteration).
enum class ModelFlopsCount : std::uint8_t {
  Korthikanti,  ///< the closed form 72 B s l h^2 (1 + s/(6h) + V/(12 l h)) (Eq. 8-9)
  MegatronCore, ///< Megatron's training.py num_floating_point_operations (GQA, SwiGLU, MoE, MLA)
};

/// What one runtime does. Every field is read by the code named beside it.
struct RuntimeSpec {
  Runtime runtime = Runtime::Megatron2021;
  /// The scenario's spelling of `runtime:` (scenario.cpp parses and prints it).
  const char* name = "";
  /// The compute ops' kernels (memory_model.cpp model_features sets ModelFeatures::core).
  KernelLists kernels = KernelLists::Megatron2021;
  /// The per-layer, embedding and logits activation bytes (memory_model.cpp).
  ActivationTerms activation_terms = ActivationTerms::Korthikanti;
  /// The model FLOPs of the summary's MFU (models/perf/flops.cpp model_flops_per_iteration).
  ModelFlopsCount model_flops = ModelFlopsCount::Korthikanti;
  /// Transformer Engine's fused (cuDNN / flash) attention kernels exist, so
  /// model.attention_backend other than unfused runs them (plan/planner.cpp: selective
  /// recomputation of core_attn then recomputes nothing, and its candidate is skipped).
  bool fused_attention_kernels = false;
  /// FP8 GEMMs through Transformer Engine: the sequence-parallel all-gather of a column-parallel
  /// input carries FP8 (builder/rank_context.cpp fp8_input_gather), and every linear weight has
  /// an FP8 copy and its transpose on the GPU (memory/zero_offload.cpp rank_state_bytes).
  bool transformer_engine_fp8 = false;
  /// Transformer Engine's userbuffers overlap of tensor-parallel collectives with GEMMs
  /// (parallel.tp_comm_overlap: builder/rank_context.cpp tp_overlap, memory/zero_offload.cpp
  /// userbuffers_bytes).
  bool tp_comm_overlap_userbuffers = false;
  /// Pipeline p2p synchronisation: the interleaved schedule posts its sends and receives in
  /// batches (Megatron-LM 2021's send_*_recv_* calls, pipeline_schedule.h
  /// megatron2021_interleaved_exchanges) and the next compute waits for the whole batch
  /// (builder/pipeline_pass.cpp). False: one exchange per message.
  bool batched_interleaved_p2p = false;
  /// DDP flavour: after the data-parallel synchronisation, finalize_model_grads all-reduces
  /// over the tensor-parallel group the gradients replicated over it (builder/pipeline_pass.cpp
  /// non_tensor_parallel_allreduce; Megatron-Core's DDP and distributed optimizer).
  bool finalize_grads_tp_allreduce = false;
  /// The optimizer state is sharded by DeepSpeed's ZeRO stages (Megatron-LM 2021 under
  /// DeepSpeed), so the planner searches stages 0 and 1 (plan/planner.cpp); Megatron-Core
  /// shards with its distributed optimizer or FSDP instead.
  bool deepspeed_zero_sharding = false;
  /// The fewest pipeline stages the interleaved schedule accepts (Megatron-LM 2021's
  /// arguments.py asserts pp > 2; Megatron-Core runs it with 2): validate.cpp's check.
  std::int64_t min_interleaved_pipeline_stages = 2;
  /// The Megatron-Core features (GQA, SwiGLU, RMSNorm, RoPE, flash attention, FP8, MoE, context
  /// parallelism, the distributed optimizer, FSDP, uneven pipeline splits, ...) are available
  /// (validate.cpp check_runtime_features).
  bool megatron_core_features = false;
};

/// The spec of `runtime` (a static table; throws std::logic_error for a value out of range).
const RuntimeSpec& runtime_spec(Runtime runtime);

}  // namespace trainsim
