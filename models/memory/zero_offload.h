// DeepSpeed ZeRO (stages 1-3) and ZeRO-Offload / Twin-Flow: the memory each rank holds and the
// quantities the schedule builder needs, as closed-form functions of a validated scenario.
//
// Semantics (DeepSpeed runtime/zero/stage_1_and_2.py, stage3.py, offload_config.py):
//  - Stage 0 (Megatron DDP, no ZeRO): fp16/bf16 parameters (2 B), gradients in Megatron's
//    main_grad buffer (2 B fp16, 4 B bf16: accumulate_allreduce_grads_in_fp32), 12 B of Adam
//    state (fp32 master, momentum, variance), all replicated. All-reduce in place: no bucket
//    buffer. fp16: the step's main_grad.float() materializes 4 B/param of fp32 gradients.
//  - Stage 1: optimizer states partitioned (12 B x P/dp); full fp16 gradients (2 B x P);
//    gradients reduced once per iteration (after the last microbatch) in buckets of
//    reduce_bucket_size elements, then the owned partition is stepped and the updated fp16
//    parameters all-gathered.
//  - Stage 2: gradients partitioned too (2 B x P/dp); each microbatch's gradients go through a
//    contiguous bucket buffer (reduce_bucket_size elements, two of them with overlap_comm) and
//    are reduce-scattered as buckets fill during backward (overlap_comm on the DP stream).
//  - Stage 3 (= FSDP full sharding): parameters partitioned too (2 B x P/dp); before use
//    they are all-gathered and released after it: per submodule with DeepSpeed's prefetch,
//    persistence and reuse rules for dense models, per layer (prefetching
//    ceil(stage3_prefetch_bucket_size / layer params) layers ahead) for FSDP and MoE
//    (models/builder/dp_zero3.cpp); gradients reduce-scattered in buckets as in stage 2.
//  - The fp32 gradient partition the (GPU) Adam step reads (4 B x stepped params) exists only
//    during the step (DeepSpeed single_grad_partition / fp32 grad of the sub-group).
//  - offload_optimizer {device: cpu, ratio r} (ZeRO-Offload, Ren et al. ATC'21; Twin-Flow,
//    DeepSpeed blogs/deepspeed-offloadpp): the first r of the rank's partition (in parameter
//    order: embedding, layers 0..L-1, final LayerNorm) keeps its fp32 master/momentum/variance
//    (12 B) and an fp32 gradient buffer (4 B, pinned when pin_memory) in host memory and is
//    stepped by CPU Adam (sub_group_size parameters at a time, each followed by the
//    host->device copy of its updated fp16 parameters); the rest stays on the GPU and is
//    stepped by fused Adam at the same time (no dependency between the two). DeepSpeed accepts
//    ratio < 1 only with stage 3 (zero/config.py offload_ratio_check).
//    Stage 1/2 (ratio 1): gradients of a reduced bucket are cast to fp32 on the GPU (a staging
//    buffer of one bucket's share) and copied device->host (4 B/elem).
//    Stage 3 (stage3.py): the reduced fp16 partition goes to a pinned host buffer (2 B/elem
//    device->host, OffloadBuffers on the host); every sub-group has a persistent fp32 gradient
//    buffer on its own device, so the GPU part's gradients come back host->device as fp32
//    (4 B/elem) and take 4 B/param of GPU memory for the whole iteration (no step-time copy).
//  - Communication buffers: NCCL's own buffers per communicator the rank belongs to
//    (calibration nccl_buffer_bytes_per_communicator) plus the DP bucket buffers above.
//  - Framework: CUDA context, library workspaces, allocator slack (calibration
//    framework_overhead_bytes).
#pragma once

#include <cstdint>

#include "models/hardware/calibration.h"
#include "models/hardware/hardware.h"
#include "models/input/scenario.h"
#include "models/graph/schedule_graph.h"

namespace trainsim {

/// The offload ratio in effect: 0 without offload, else offload_optimizer.ratio (callers resolve
/// `auto` first, see resolve_offload_ratio).
double effective_offload_ratio(const Scenario& sc);

/// Parameters of the partition a rank owns under ZeRO stage >= 1: ceil(P / dp) of the P
/// parameters at its pipeline stage; P itself at stage 0.
std::int64_t owned_params(const Scenario& sc, std::int64_t pp_stage);
/// Of the owned partition, the parameters stepped on the CPU (floor(r x owned)) and on the GPU.
std::int64_t cpu_stepped_params(const Scenario& sc, std::int64_t pp_stage);
std::int64_t gpu_stepped_params(const Scenario& sc, std::int64_t pp_stage);

/// Layers whose parameters ZeRO-3 gathers ahead of the one in use when it gathers whole layers
/// (FSDP, MoE): ceil(stage3_prefetch_bucket_size / layer params per rank) (at least 1).
std::int64_t zero3_prefetch_layers(const Scenario& sc);

/// Elements of one DP gradient bucket buffer (stage >= 1: reduce_bucket_size, capped at the
/// rank's parameter count; 0 at stage 0, which reduces in place) and how many such buffers
/// are live during backward (2 with overlap_comm at stage >= 2, else 1).
std::int64_t bucket_elements(const Scenario& sc, std::int64_t pp_stage);
int bucket_buffers(const Scenario& sc);
/// GPU bytes of the gradient bucket buffers (CommBuffers) during backward: stage >= 2,
/// bucket_buffers x bucket_elements elements of the training precision; 0 otherwise (stage 1
/// reduces the full .grad in place).
std::int64_t gradient_bucket_buffer_bytes(const Scenario& sc, std::int64_t pp_stage);
/// GPU bytes of the offload staging buffer (OffloadBuffers) for one bucket's 1/dp share:
/// stage 3 with offload copies the fp16 reduce-scatter output (e B/elem); stage 1/2 with a
/// CPU part casts it to fp32 first (4 B/elem); 0 without offload.
std::int64_t offload_staging_bytes(const Scenario& sc, std::int64_t pp_stage);

/// Communicators a rank at `pp_stage` belongs to (TP if tp > 1, DP if dp > 1, pipeline
/// neighbours if pp > 1, the tied-embedding group on the first and last stage).
int communicators_of_rank(const Scenario& sc, std::int64_t pp_stage);
/// GPU bytes of Transformer Engine's userbuffers when the scenario overlaps its
/// tensor-parallel communication (parallel.tp_comm_overlap), else 0 (zero_offload.cpp).
std::int64_t userbuffers_bytes(const Scenario& sc);

/// Memory a rank holds before the iteration starts (model states, NCCL buffers, framework), on
/// the GPU and in host memory (its share of the node's host memory).
struct RankStateBytes {
  MemVector gpu{};
  MemVector host{};
};
RankStateBytes rank_state_bytes(const Scenario& sc, const CalibrationProfile& profile,
                                std::int64_t pp_stage);

/// Host memory the offloaded states of one node need (the sum over its GPUs' ranks), and a
/// check against the catalog's host memory: throws InputError naming the ratio field, the
/// bytes needed and the capacity when they do not fit.
double host_bytes_per_node(const Scenario& sc, const SystemSpec& system,
                           const CalibrationProfile& profile);
void check_host_memory(const Scenario& sc, const SystemSpec& system,
                       const CalibrationProfile& profile);

/// Largest GPU memory of any simulated rank over one iteration when every rank runs its tasks
/// one after another in program (issue) order. The builder attaches every release to a task
/// that, by the graph's dependencies, cannot end before the memory is really free, and issues
/// every allocation in the order it really happens, so this peak does not depend on timing;
/// tests compare it with the SimGrid timeline. `rank` >= 0: that simulated rank only.
std::int64_t program_order_peak_gpu_bytes(const ScheduleGraph& graph, std::int64_t rank = -1);

}  // namespace trainsim
