// The emission context of the schedule builder: what one graph build shares across its ranks
// (GraphBuild: the graph, the scenario's derived sizes, the match ids of collectives and
// messages) and the program of one rank being emitted (RankContext: its coordinates, its
// groups, the tail of its compute path, and the helpers every pass uses to append tasks).
//
// Task ids are assigned in emission order and the passes emit into one rank's program in
// issue order, so the order of the calls below is the order of the rank's program.
#pragma once

#include <cstdint>
#include <climits>
#include <initializer_list>
#include <map>
#include <unordered_map>
#include <vector>

#include "models/hardware/calibration.h"
#include "models/input/scenario.h"
#include "models/graph/schedule_graph.h"
#include "models/memory/zero_offload.h"

namespace trainsim::builder {

/// The scenario's sizes every pass reads (Megatron-LM names), derived once per graph.
struct ModelDims {
  explicit ModelDims(const Scenario& sc);
  std::int64_t t = 1;    ///< tensor-parallel size
  std::int64_t pp = 1;   ///< pipeline stages
  std::int64_t dp = 1;   ///< data-parallel size x context-parallel size (the gradient group)
  std::int64_t cp = 1;   ///< context-parallel size
  std::int64_t nmb = 1;  ///< microbatches per iteration
  std::int64_t v = 1;    ///< model chunks (virtual stages) per pipeline rank
  std::int64_t lpc = 1;  ///< layers per model chunk
  std::int64_t b = 1, s = 1, h = 1;  ///< micro batch, sequence, hidden size
  std::int64_t layers = 0;           ///< transformer layers of the whole model
  std::int64_t e = 2;                ///< bytes per element of the training precision
  Precision precision = Precision::FP16;
  bool sp = false;              ///< sequence parallelism in effect (t > 1)
  bool scatter_gather = false;  ///< SC'21 Sec. 4.1 pipeline scatter/gather in effect
  std::int64_t act_bytes = 0;   ///< one full activation, s b h elements
  /// Transformer Engine under FP8 with sequence parallelism (megatron-core runtime): a dense
  /// column-parallel layer's input (QKV, fc1) is cast to FP8 on the local shard and
  /// all-gathered as FP8, one byte per element (TE v2.7 module/layernorm_linear.py: the
  /// quantizer passed to gather_along_first_dim; distributed.py _all_gather_fp8).
  bool fp8_input_gather = false;
  /// ... with current scaling (fp8_recipe tensorwise): the cast's amax is all-reduced over
  /// the TP group first, for the column-parallel inputs in the forward and the row-parallel
  /// output gradients in the backward (TE v2.9 module/layernorm_linear.py, linear.py,
  /// layernorm_mlp.py _customize_quantizers_float8_current_scaling: with_amax_reduction,
  /// amax_reduction_group = tp_group under sequence parallelism).
  bool fp8_amax_reduce = false;
  /// MoE layers (their MLP block keeps the activation-precision gather): per global layer,
  /// ModelConfig::moe_layer (--moe-layer-freq) when the model has experts.
  bool moe = false;
  std::vector<bool> moe_layers;
  bool moe_layer(std::int64_t l) const {
    return moe && l >= 0 && std::size_t(l) < moe_layers.size() && moe_layers[std::size_t(l)];
  }
  /// An MoE layer's MLP block under sequence parallelism keeps its tokens local: the router,
  /// the token dispatcher and the experts work on the rank's s / t tokens, and the dispatcher's
  /// tensor-parallel group is the expert-tensor-parallel one (Megatron-Core
  /// moe/token_dispatcher.py: tp_group = pg_collection.expt_tp), so with
  /// expert_tensor_parallel_size 1 and no shared expert (a dense MLP with its own gathers)
  /// the block has no tensor-parallel collective.
  bool moe_block_local = false;
  /// Transformer Engine's userbuffers overlap (parallel.tp_comm_overlap): the all-gathers and
  /// reduce-scatters of a dense block run inside its GEMMs (models/perf/flops_core.cpp tp_overlap),
  /// so the pass emits no gather or reduce-scatter task for them.
  bool tp_overlap = false;
  /// Multi-head latent attention: this rank's s / cp tokens' q input of the up projection
  /// (the q latent, or the hidden state without q_lora_rank), kv latent and RoPE key, one
  /// element each (multiply by the element bytes).
  /// --recompute-modules shared_experts (MoE layers with a shared expert).
  bool shared_rerun = false;
  bool mla = false;
  bool mla_up_rerun = false;  ///< --recompute-modules mla_up_proj
  std::int64_t mla_q_elements = 0, mla_kv_elements = 0, mla_rope_elements = 0;
};

/// Match ids, shared by all ranks of one graph: the k-th collective any member issues on a
/// group, and the k-th message from one rank to another, get one id on every participant.
class MatchIds {
 public:
  std::uint32_t collective(std::uint32_t group, std::uint64_t k);
  std::uint32_t message(std::int64_t src, std::int64_t dst, std::uint64_t k);

 private:
  std::uint32_t next_ = 0;
  std::unordered_map<std::uint64_t, std::uint32_t> collective_ids_;
  std::unordered_map<std::uint64_t, std::vector<std::uint32_t>> message_ids_;
};

/// One graph build: the graph being filled and what its ranks share.
struct GraphBuild {
  GraphBuild(const Scenario& sc, const CalibrationProfile& profile);
  const Scenario& scenario;
  CalibrationProfile profile;
  ModelDims dims;
  ParallelLayout layout;
  ScheduleGraph graph;
  MatchIds matches;
  /// Memory each built rank holds before its first task (the graph indexes it by simulated
  /// rank only once finalized).
  std::map<std::int64_t, RankStateBytes> initial_memory;
  /// A counting build (count_schedule_tasks, graph_builder.h): the passes run exactly as for a
  /// real build, but RankContext records nothing in `graph` (no task, dependency, memory
  /// effect, descriptor, group or match id); it counts the tasks it would have added.
  bool count_only = false;
  std::int64_t counted_tasks = 0;  ///< tasks a counting build's ranks would have added
  /// A counting build stops (RankContext::add throws CountLimitReached) once it has counted
  /// more tasks than this: a runaway scenario (one-parameter gradient buckets, say) is known
  /// to be too large long before its billions of tasks are counted.
  std::int64_t count_limit = INT64_MAX;
};

/// Thrown by RankContext::add in a counting build past GraphBuild::count_limit (caught by
/// count_schedule_tasks).
struct CountLimitReached {};

/// A model chunk of a rank (its virtual stage chunk x pp + pipeline stage): whether it is the
/// model's first virtual stage (the embedding) or its last (the output layer), and its global
/// transformer layers [first_layer, first_layer + layers).
struct ChunkSpan {
  bool first_vstage = false, last_vstage = false;
  std::int64_t first_layer = 0, layers = 0;
};

/// The program of one rank being emitted. A fresh context per rank: nothing carries over
/// from the previous rank except what GraphBuild holds. Every task, dependency, memory effect,
/// descriptor and group a pass adds goes through this class, so a counting build
/// (GraphBuild::count_only) needs nothing of the passes: here each task added is counted and
/// given a distinct placeholder id, and nothing else is recorded.
class RankContext {
 public:
  /// Adds the rank's tensor- and data-parallel groups (ring order) to the graph.
  RankContext(GraphBuild& build, const RankCoords& coords);

  const Scenario& scenario() const { return build_.scenario; }
  const ModelDims& dims() const { return build_.dims; }
  const ParallelLayout& layout() const { return build_.layout; }
  const CalibrationProfile& profile() const { return build_.profile; }
  ScheduleGraph& graph() { return build_.graph; }
  GraphBuild& build() { return build_; }
  /// This rank's model chunk `chunk` (0 .. v-1).
  ChunkSpan chunk_span(std::int64_t chunk) const;

  const RankCoords coords;
  const std::int64_t rank;
  std::uint32_t tp_group = 0;  ///< this rank's tensor-parallel group
  std::uint32_t dp_group = 0;  ///< this rank's data-parallel group (with its CP peers)
  std::uint32_t cp_group = kNone;  ///< this rank's context-parallel group (cp > 1)
  std::uint32_t ep_group = kNone;  ///< this rank's expert-parallel group (MoE, EP > 1)
  std::uint32_t etp_group = kNone;  ///< this rank's expert tensor-parallel group (ETP > 1)
  /// Tasks the next task on the compute path (any stream but DpComm) must also wait for:
  /// communications that ran concurrently with the last compute (context parallelism's KV
  /// exchange) or a batched pipeline exchange that is synchronised (pipeline_pass.cpp).
  std::vector<TaskId> join_next;
  /// Pipeline sends the next compute-stream task waits for, as delivered messages (Megatron
  /// waits on its batch_isend_irecv exchange; pipeline_pass.cpp send()).
  std::vector<TaskId> unwaited_sends;
  /// The last task on the compute path (the task the next compute or synchronous
  /// collective waits for); kNone before the first.
  TaskId last_compute = kNone;

  /// Appends a task of this rank with its memory effects (effects of 0 bytes are skipped).
  TaskId add(Task t, std::initializer_list<MemEffect> effects = {});
  /// Adds a memory effect to `task`, which must be the last task added.
  void add_effect(TaskId task, const MemEffect& effect);
  /// `to` waits for `from`; nothing when `from` is kNone.
  void dep(TaskId from, TaskId to);
  /// A synchronisation point after `task` (ScheduleGraph::host_syncs): only with the
  /// scenario's host_model on; nothing when `task` is kNone or in a counting build.
  void host_sync(TaskId task, SyncCause cause);
  /// Host work of a framework hook issued with `task` (ScheduleGraph::host_work), `eager_ops`
  /// at the profile's eager_op_s: only with host_model on; nothing in a counting build.
  void host_work(TaskId task, double eager_ops, HostWorkCause cause);
  std::uint32_t add_op(const OpDesc& op);
  std::uint32_t add_group(GroupKind kind, const std::vector<RankId>& ranks);
  /// A communication descriptor in the training precision.
  OpDesc comm_op(OpKind kind, GroupKind group, std::int64_t bytes, std::int64_t group_size) const;

  /// This rank's part of a collective on `group`, after `after`, on `stream` (the compute
  /// path's TP stream for Megatron's synchronous TP collectives, or a DP stream).
  TaskId collective(std::uint32_t op, std::uint32_t group, StreamId stream, Phase phase, Part part,
                    std::uint16_t mb, std::uint16_t layer, TaskId after,
                    std::uint16_t bucket = kNoIndex, std::initializer_list<MemEffect> effects = {});
  /// A compute task on the compute stream, after `after`.
  TaskId compute(std::uint32_t op, Phase phase, Part part, std::uint16_t mb, std::uint16_t layer,
                 std::uint8_t chunk, TaskId after, std::initializer_list<MemEffect> effects = {});
  /// A pipeline message of this rank (a Send to `peer` or a Recv from it) after the compute
  /// path (Megatron issues its p2p calls synchronously after the compute).
  TaskId message(std::uint32_t op, TaskKind kind, std::int64_t peer, Phase phase, std::uint16_t mb,
                 std::uint8_t chunk);

 private:
  GraphBuild& build_;
  /// This rank's own sequence numbers of collectives (per group) and messages (per pair).
  std::unordered_map<std::uint32_t, std::uint64_t> collective_seq_;
  std::unordered_map<std::uint64_t, std::uint64_t> message_seq_;
};

}  // namespace trainsim::builder
