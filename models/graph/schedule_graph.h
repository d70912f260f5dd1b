// The schedule graph: one training iteration of every (simulated) rank as a DAG of tasks.
// This is the contract between the two executors (docs/architecture.md "The schedule graph"): the
// simulator (sim/) and the replay backend (hw_backend/) play the same graph and write traces
// whose task ids are this graph's task ids.
//
// Storage is compact: a task is a small POD that refers to a shared OpDesc; labels are made on
// demand from structured fields; memory effects sit in one flat array indexed by offsets; the
// dependency edges are a Boost compressed_sparse_row_graph once finalize() has run.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

#include <boost/graph/compressed_sparse_row_graph.hpp>

#include "models/graph/ops.h"
#include "models/errors.h"
#include "models/parallel_layout.h"

namespace trainsim {

using TaskId = std::uint32_t;
using RankId = std::uint32_t;
constexpr std::uint32_t kNone = 0xFFFFFFFFu;
/// Task::microbatch, layer and bucket when a task has none (not tied to a microbatch, no layer,
/// no bucket). Real indices stay below it: at most kNoIndex - 1 = 65534.
constexpr std::uint16_t kNoIndex = 0xFFFF;

/// What executes a task.
enum class TaskKind : std::uint8_t {
  Compute,       ///< GPU kernel work (a transformer block, embedding, logits+loss)
  Collective,    ///< this rank's part of a collective (all ranks of the group have one task
                 ///< with the same `match`)
  Send,          ///< pipeline message out (non-blocking for its stream)
  Recv,          ///< pipeline message in (blocks its stream until the data is there)
  CopyH2D,       ///< host -> device PCIe copy
  CopyD2H,       ///< device -> host PCIe copy
  OptimizerGpu,  ///< optimizer step on the GPU
  OptimizerCpu,  ///< optimizer step on the host CPU cores
};

/// The stream (queue) a task occupies; tasks of one (rank, stream) run in issue order.
/// EpComm: the expert-parallel all-to-alls' own stream under the combined 1F1B schedule
/// (parallel.overlap_moe_expert_parallel_comm; Megatron-Core set_streams' comm stream).
enum class StreamId : std::uint8_t { Compute, TpComm, PpComm, DpComm, H2D, D2H, Cpu, EpComm, kCount };
constexpr int kNumStreams = static_cast<int>(StreamId::kCount);

/// Where in the iteration a task belongs (used by labels, trace phases and breakdowns).
enum class Phase : std::uint8_t { Forward, Backward, Recompute, GradSync, Optimizer, ParamSync, Offload };
/// Which part of the model a task touches.
enum class Part : std::uint8_t { Attn, Mlp, Embedding, Logits, Pipeline, Gradients, Params, None };

/// Memory categories (docs/architecture.md "Memory timeline": every byte accounted to one).
enum class MemCategory : std::uint8_t {
  Parameters,
  Gradients,
  OptimizerStates,
  Activations,
  CommBuffers,
  OffloadBuffers,
  Framework,
  /// CUDA graphs' static input and output buffers (models/memory/cuda_graph_memory.h); the
  /// outputs leave it out where it is 0 (a run without CUDA graphs prints as before).
  CudaGraphs,
  kCount
};
constexpr int kNumMemCategories = static_cast<int>(MemCategory::kCount);
using MemVector = std::array<std::int64_t, kNumMemCategories>;

/// One allocation (bytes > 0) or release (bytes < 0) caused by a task, applied when the task
/// starts (`at_end` false) or when it ends (`at_end` true), on the GPU or in host memory.
struct MemEffect {
  std::int64_t bytes = 0;
  MemCategory category = MemCategory::Activations;
  bool at_end = false;
  bool on_host = false;
};

struct Task {
  std::uint32_t op = 0;            ///< index into ScheduleGraph::ops
  RankId rank = 0;                 ///< global rank that runs it
  std::uint32_t match = kNone;     ///< collective instance or pipeline message id, shared by
                                   ///< all participating tasks
  std::uint32_t group = kNone;     ///< index into ScheduleGraph::groups (collectives, p2p)
  std::int32_t peer = -1;          ///< p2p: the other rank
  std::uint16_t microbatch = kNoIndex;  ///< kNoIndex: not tied to a microbatch
  std::uint16_t layer = kNoIndex;  ///< global transformer layer index; kNoIndex: none
  std::uint16_t bucket = kNoIndex;  ///< gradient / parameter bucket index; kNoIndex: none
  std::uint8_t chunk = 0;          ///< model chunk (virtual stage) on this rank
  TaskKind kind = TaskKind::Compute;
  StreamId stream = StreamId::Compute;
  Phase phase = Phase::Forward;
  Part part = Part::None;
};

/// Why a rank's host thread waits for its device (a synchronisation point; sim/host_thread.h,
/// docs/scenario.md "host_model"). The builder adds them only when the scenario's host_model
/// is on.
enum class SyncCause : std::uint8_t {
  /// The dropless alltoall dispatcher's device-to-host copy of the token counts (Megatron-Core
  /// token_dispatcher.py MoEAlltoAllTokenDispatcher, cuda_sync_point "before_ep_alltoall";
  /// "before_permutation_1" with a capacity factor and no padding).
  MoeTokenCounts,
  /// The dynamic loss scaler's found-inf flag read with .item() (fp16).
  LossScaleItem,
  /// The gradient norm read with .item() (clip_grad > 0).
  GradNormItem,
  /// Megatron-LM 2021's torch.cuda.synchronize() after a batch_isend_irecv exchange.
  PipelineSynchronize,
  /// A Megatron timer's stop (timers.py: torch.cuda.synchronize()), scenario timing_log_level.
  Timer,
};
const char* to_string(SyncCause c);

/// A synchronisation point: after issuing `task`, the host waits until the device has finished
/// it (then pays the profile's host sync_s).
struct HostSync {
  TaskId task = 0;
  SyncCause cause = SyncCause::MoeTokenCounts;
};

/// Host work a framework hook does around a task beyond issuing it (its Python bookkeeping and
/// the torch calls it makes), counted in eager ops at the profile's eager_op_s and added to the
/// task's host issue cost (sim/host_thread.h). The builder adds them only with host_model on.
enum class HostWorkCause : std::uint8_t {
  /// DeepSpeed ZeRO-3's per-submodule fetch hooks (models/builder/dp_zero3.cpp
  /// zero3_fetch_eager_ops, docs/scenario.md "host_model").
  Zero3FetchHook,
  /// Megatron-Core's combined 1F1B schedule's per-node stream and autograd calls
  /// (parallel.overlap_moe_expert_parallel_comm; models/builder/pipeline_pass.cpp node_work).
  ScheduleNode,
};
struct HostWork {
  TaskId task = 0;
  double eager_ops = 0;
  HostWorkCause cause = HostWorkCause::Zero3FetchHook;
};

/// What of its tasks a CUDA graph region holds: all their kernels, or (moe_router scope, on an
/// MoE layer's MLP task) the kernels of the pre-MLP norm, the router and the shared expert, and
/// with moe_preprocess also the token permutation (docs/scenario.md "CUDA graphs").
enum class GraphCapture : std::uint8_t { Whole, Router, RouterPreprocess };

/// A CUDA graph region of one simulated rank (scenario parallel.cuda_graph_impl;
/// models/builder/cuda_graphs.h): the host issues its tasks with one graph launch (the
/// profile's host graph_launch_s) instead of their kernels' issue costs; the device work is
/// unchanged. Its tasks are those whose ScheduleGraph::cuda_graph_of_task is the region's index.
struct CudaGraphRegion {
  TaskId first = 0;  ///< the region's first task in the rank's program order (the launch)
  TaskId last = 0;   ///< its last
  GraphCapture capture = GraphCapture::Whole;
};

/// A communicator: the ranks of a collective (ring order) or of a point-to-point pair.
struct CommGroup {
  GroupKind kind = GroupKind::None;
  std::vector<RankId> ranks;
  /// Nodes of `gpus_per_node` GPUs its ranks span; and its ranks on the node of `rank`.
  std::int64_t nodes(std::int64_t gpus_per_node) const;
  std::int64_t ranks_on_node_of(RankId rank, std::int64_t gpus_per_node) const;
};

using DependencyGraph =
    boost::compressed_sparse_row_graph<boost::bidirectionalS, boost::no_property,
                                       boost::no_property, boost::no_property, std::uint32_t,
                                       std::uint32_t>;

/// What a replay of the graph (hw_backend/replay.h) needs beyond the tasks' OpDescs: the
/// model facts the builder knew, so the replay works from the graph alone (no Scenario).
/// Filled by build_schedule_graph; a graph assembled by hand leaves the defaults.
struct ReplayModel {
  /// Transformer layers of the whole model (Megatron --num-layers): the scaled initialization
  /// sigma / sqrt(2 num_layers) of the output projections.
  std::int64_t num_layers = 0;
  /// Microbatches per iteration of one data-parallel rank (the loss scale 1 / microbatches).
  std::int64_t num_microbatches = 1;
  /// Megatron's --untie-embeddings-and-output-weights: the output layer has its own matrix
  /// even on a rank that holds the word embedding (false: tied).
  bool untie_embeddings_and_output_weights = false;
  /// recompute_granularity: full (checkpointed layers: the forward keeps only the layer input).
  bool recompute_full = false;
  /// Per global layer, the first layer of its checkpoint unit, -1 for a layer that is not
  /// checkpointed (ParallelConfig::recompute_units: all with recompute_full, the block method's
  /// first layers of each chunk). A unit's first layer keeps its input; with `uniform` and
  /// recompute_num_layers > 1 the other layers' re-run takes the previous layer's output.
  std::vector<std::int64_t> recompute_units;
  /// recompute_granularity: selective with core_attn among the modules (the core attention is
  /// recomputed in the backward).
  bool recompute_selective = false;
  /// Per global layer, whether its MLP module is checkpointed (--recompute-modules mlp / moe:
  /// the forward keeps only the module's input, the backward re-runs the module first).
  std::vector<bool> mlp_checkpointed_layers;
  /// Element type of parameters, gradients and activations.
  Precision precision = Precision::FP16;
  /// Megatron's --fp8-format as Fp8Format (models/input/scenario.h): 0 none, 1 e4m3, 2 hybrid
  /// (e5m2 gradients in the backward): the replay's FP8 GEMMs (hw_backend/gemm_ops.h).
  std::uint8_t fp8_format = 0;
  /// Parameters one rank of each pipeline stage holds (models/memory/memory_model.h params_per_rank),
  /// indexed by stage.
  std::vector<std::int64_t> params_per_stage;
  /// Token dropping of the MoE layers (model.moe_expert_capacity_factor, 0: dropless): the
  /// router keeps at most ceil(T k / E factor) token copies per expert of the T tokens it
  /// routes (Megatron-Core moe_utils.py get_capacity); which copies drop: the lowest routing
  /// probabilities, or (moe_token_drop_policy position) the latest tokens. Padding to the
  /// capacity is ModelFeatures::pad_to_capacity.
  double moe_expert_capacity_factor = 0;
  bool moe_drop_by_position = false;
  /// The router's score function (model.moe_router_score_function sigmoid; false: softmax)
  /// and group-limited routing (model.moe_router_num_groups, moe_router_group_topk; 0: none).
  /// The expert bias is ModelFeatures::router's kRouterExpertBias.
  bool moe_router_sigmoid = false;
  std::int64_t moe_router_num_groups = 0, moe_router_group_topk = 0;
};

class ScheduleGraph {
 public:
  // ---- building
  std::uint32_t add_op(const OpDesc& op);  ///< deduplicates equal descriptors
  std::uint32_t add_group(GroupKind kind, std::vector<RankId> ranks);  ///< deduplicates
  /// Appends a task; per rank, tasks must be added in the rank's program (issue) order.
  TaskId add_task(const Task& task);
  void add_memory_effect(TaskId task, const MemEffect& effect);  ///< task must be the last added
  void add_dependency(TaskId from, TaskId to);  ///< `to` waits for `from` to finish
  /// Adds stream-order edges, builds the CSR graph and the per-rank task lists, checks that the
  /// graph is acyclic. Called once, after building.
  void finalize();

  // ---- reading
  std::size_t num_tasks() const { return tasks_.size(); }
  const Task& task(TaskId id) const { return tasks_[id]; }
  const std::vector<Task>& tasks() const { return tasks_; }
  const OpDesc& op(TaskId id) const { return ops_[tasks_[id].op]; }
  const std::vector<OpDesc>& ops() const { return ops_; }
  const CommGroup& group(std::uint32_t index) const { return groups_[index]; }
  const std::vector<CommGroup>& groups() const { return groups_; }
  const DependencyGraph& dependencies() const { return deps_; }

  /// Memory effects of a task (a contiguous range).
  const MemEffect* effects_begin(TaskId id) const { return mem_effects_.data() + mem_offsets_[id]; }
  const MemEffect* effects_end(TaskId id) const { return mem_effects_.data() + mem_offsets_[id + 1]; }

  /// Ranks that have tasks (all ranks, or the representatives when folded), ascending.
  const std::vector<RankId>& simulated_ranks() const { return simulated_ranks_; }
  /// Task ids of one simulated rank, in program order (empty for a rank not simulated).
  std::vector<TaskId> tasks_of_rank(RankId rank) const;

  /// Memory held before the iteration's first task (parameters, gradients buffers, optimizer
  /// states, framework overhead), per simulated rank, on the GPU and on the host.
  /// Synchronisation points of the simulated ranks, in the order the builder added them
  /// (empty with host_model off).
  std::vector<HostSync> host_syncs;
  /// Host work of framework hooks beyond the tasks' issue (empty with host_model off).
  std::vector<HostWork> host_work;
  /// CUDA graph regions, and per task the index of its region or kNone (both empty without
  /// CUDA graphs).
  std::vector<CudaGraphRegion> cuda_graphs;
  std::vector<std::uint32_t> cuda_graph_of_task;
  std::vector<MemVector> initial_gpu_memory;   ///< indexed like simulated_ranks()
  std::vector<MemVector> initial_host_memory;  ///< indexed like simulated_ranks()
  /// Host memory is per node; the index of a rank's node is rank / gpus_per_node.

  /// Folding: each simulated rank stands for `fold_factor` identical ranks (1 = unfolded).
  std::int64_t fold_factor = 1;
  std::int64_t world_size = 0;
  /// The parallel plan's rank layout; with fold_factor > 1 it defines the representatives.
  ParallelLayout layout;
  /// The model facts a replay needs (see ReplayModel).
  ReplayModel replay_model;

  /// Partial folding (scenario `variability:`, docs/architecture.md "Folding"): the ranks that
  /// differ from their peers are simulated themselves and the rest stay folded. Then, per world
  /// rank, the simulated rank standing for it (itself when simulated); empty otherwise (the
  /// representatives are ParallelLayout::representative's when fold_factor > 1).
  std::vector<RankId> partial_representatives;
  /// Ranks simulated themselves in a partially folded graph, and why (the summary's
  /// `unfolded_ranks`).
  struct UnfoldedRanks {
    std::vector<RankId> ranks;
    std::string reason;
  };
  std::vector<UnfoldedRanks> unfolded;
  /// Speed factor of each simulated rank's GPU (indexed like simulated_ranks(); empty: all 1):
  /// its compute ops' device time lasts 1 / speed as long (models/input/variability.h). A
  /// folded representative runs at the slowest speed of the TP group it stands for.
  std::vector<double> gpu_speed;
  /// How many world ranks the simulated rank of index `i` stands for.
  std::int64_t ranks_represented(std::uint32_t i) const;

  /// The simulated rank standing for world rank `rank`: the rank itself when the graph is
  /// unfolded; when folded, tensor rank 0 and data rank 0 of its pipeline stage
  /// (ParallelLayout::representative). Throws InputError for a rank outside [0, world_size),
  /// std::logic_error when the representative has no tasks (a builder/fold mismatch).
  RankId representative_of(std::int64_t rank) const;

  /// "fwd mb3 layer12 attn", "all_reduce tensor fwd mb3 layer12 attn", "send fwd mb3 -> rank 8".
  std::string label(TaskId id) const;

  /// Index of `rank` in simulated_ranks(), or kNone.
  std::uint32_t rank_index(RankId rank) const;

 private:
  std::vector<OpDesc> ops_;
  std::vector<CommGroup> groups_;
  std::vector<Task> tasks_;
  std::vector<std::uint32_t> mem_offsets_{0};
  std::vector<MemEffect> mem_effects_;
  std::vector<std::pair<std::uint32_t, std::uint32_t>> edge_list_;
  DependencyGraph deps_;
  std::vector<RankId> simulated_ranks_;
  std::vector<std::uint32_t> rank_task_offsets_;  ///< CSR over simulated_ranks_
  std::vector<TaskId> rank_tasks_;
  std::unordered_map<std::string, std::uint32_t> op_index_;     ///< dedup while building
  std::unordered_map<std::string, std::uint32_t> group_index_;  ///< dedup while building
  bool finalized_ = false;
};

const char* to_string(TaskKind k);
const char* to_string(StreamId s);
const char* to_string(Phase p);
const char* to_string(Part p);
const char* to_string(MemCategory c);

}  // namespace trainsim
