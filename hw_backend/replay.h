// The replay executor: plays one rank's tasks of a schedule graph on a real device (the CPU
// through LibTorch, or a CUDA GPU through a CUDA build of LibTorch) and reports when each task
// started and ended, with the allocator's memory over time (docs/architecture.md "Executors").
//
// What a replay runs, task by task (one rank of the graph, its real shapes from the OpDesc):
//   Compute       the transformer-layer work the task stands for, through LibTorch, with the
//                 same kernels models/perf/flops.h lists: LayerNorms, QKV GEMM, baddbmm/bmm core
//                 attention with a causal masked softmax and dropout, output projection,
//                 bias-dropout-add, fc1 + tanh-GeLU + fc2 (hw_backend/transformer_layer.h);
//                 embedding lookups; final LayerNorm, logits GEMM and cross entropy. A
//                 Megatron-Core graph (ModelFeatures::core) runs its own layers instead
//                 (hw_backend/core_layer.h: RMSNorm / LayerNorm, GQA with RoPE and q/k norms,
//                 causal or sliding-window attention, SwiGLU, the MoE MLP with router,
//                 permutation, token-count copy, per-expert GEMMs, unpermute). Forward
//                 blocks keep their autograd state alive until the block's backward task (per
//                 microbatch and layer, as the schedule says); backward tasks run autograd on
//                 the block's output with the gradient the following block produced. Full
//                 recomputation: the forward runs under NoGradGuard keeping only the layer
//                 input; the recompute tasks re-run it with autograd. Selective recomputation:
//                 the core attention runs without autograd in the forward and is recomputed in
//                 the attention backward.
//   Collective    group of 1: nothing to do. Multi-process replay (ReplayOptions::nprocs) with
//                 every rank of the group present: NCCL (kernels/nccl_comm.h) on the group's
//                 communicator, op.bytes of the model's type through a scratch buffer of its
//                 stream (a pipeline scatter/gather all-gather completes the received tensor in
//                 place). Otherwise (the other ranks are absent): a device-local copy of the
//                 bytes one rank sends in a ring (CostModel::ring_bytes_per_rank), noted in the
//                 record.
//   Send / Recv   both ranks present: ncclSend / ncclRecv on the pipeline channel's
//                 communicator (src -> dst). The send runs on a stream of its own per
//                 destination, so, as in the simulator, it does not hold up the pipeline stream
//                 (its span ends when the message is delivered); the receive blocks the
//                 pipeline stream until the data is in. Otherwise a device-local copy of the
//                 message into / out of a staging buffer.
//   CopyH2D/D2H   a copy of op.bytes between a device buffer and a host buffer (pinned, on
//                 the H2D / D2H stream, on CUDA; plain copies on the CPU).
//   OptimizerGpu  fused Adam (kernels/fused_adam.h) on CUDA; on the CPU device the CPU Adam
//                 kernel (kernels/cpu_adam.h) stands in, and the record says so.
//   OptimizerCpu  CPU Adam (kernels/cpu_adam.h) over host fp32 master weights and moments.
// The optimizer works on real fp32 master weights, exp_avg and exp_avg_sq of op.params
// elements; the model's parameters and gradients live in one contiguous buffer each (as
// Megatron's contiguous grad buffer), so the optimizer reads the gradients autograd produced.
//
// Host thread: every task's host issue span (ExecutionRecord::host_issue_start_s / _end_s) and
// the top-level ATen operators and autograd nodes it issued (host_eager_ops /
// host_autograd_nodes, counted by LibTorch's RecordFunction callbacks); the trace writes them on
// the rank's `host` thread (docs/trace.md).
//
// Issue order: the rank's tasks in program order (ScheduleGraph::tasks_of_rank), which must be
// a topological order of the dependencies among them (replay_order checks this and repairs
// nothing silently). CPU: one thread issues and runs each task synchronously, like Megatron's
// Python loop; start/end are host steady-clock times. CUDA: one CUDA stream per StreamId,
// dependencies across streams become CUDA events, start/end come from timing events.
//
// Memory: on CUDA the caching allocator's device statistics (allocated and reserved bytes),
// sampled after each task is issued. On the CPU a counting wrapper around LibTorch's CPU
// allocator (installed process-wide on the first CPU replay, it forwards every allocation to
// the default allocator) gives the bytes of all live CPU tensors; CPU "reserved" = allocated.
//
// Implementation (hw_backend/CMakeLists.txt picks the files this build can compile):
// torch_executor.cpp holds the model state and the work of each task kind; a device loop
// (device_loop.h: device_cpu.cpp, device_cuda.cpp) issues and times the tasks; a communication
// backend (comm_backend.h: comm_local.cpp, comm_nccl.cpp) moves the bytes. The replay reads
// the graph only: what the OpDescs do not say comes from ScheduleGraph::replay_model.
//
// This header has no LibTorch types: the CLI and tests can include it without the ~20 s
// compile cost of the torch headers.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "models/graph/execution_record.h"
#include "models/input/scenario.h"
#include "models/graph/schedule_graph.h"

namespace trainsim::hw {

struct ReplayOptions {
  /// "cpu" or "cuda" (also "cuda:N" for device N). CUDA needs a CUDA build of LibTorch
  /// (replay throws InputError otherwise) and a visible GPU.
  std::string device = "cpu";
  /// World rank whose tasks are replayed. It must be simulated in the graph; for a folded
  /// graph use representative_rank() to map a world rank to the rank that stands for it.
  std::int64_t rank = 0;
  /// Intra-op threads for LibTorch and the CPU Adam kernel; 0 keeps LibTorch's default.
  int threads = 0;
  /// Element type of the model on the CPU device: "fp32" (default) or "bf16". The scenario's
  /// fp16 is not used on the CPU (LibTorch 1.13 CPU half GEMMs are very slow or missing); the
  /// record's notes say which type ran. On CUDA the scenario's precision is used.
  std::string cpu_dtype = "fp32";
  /// Dropout probabilities (Megatron's --attention-dropout and --hidden-dropout defaults).
  double attention_dropout = 0.1;
  double hidden_dropout = 0.1;
  /// Seed of the parameter initialization, input tokens and dropout masks.
  std::uint64_t seed = 1234;
  /// Multi-process replay (hw_backend/launch.h): the job's processes, one per GPU, process r
  /// replaying world rank r (`rank`). Collectives and messages whose ranks are all below nprocs
  /// run through NCCL (hw_backend/comm_plan.h); those with absent peers stay device-local
  /// copies, and the record says which is which. 1 (default): a single-process replay.
  /// nprocs > 1 needs device cuda and a build with NCCL (multiprocess_available()).
  std::int64_t nprocs = 1;
  /// Directory and run id of the NCCL unique-id rendezvous (kernels/rendezvous.h); needed
  /// when nprocs > 1.
  std::string nccl_dir;
  std::string nccl_run_id = "run";
  /// Longest wait for a peer, in seconds: for a unique id, and for NCCL operations to finish
  /// (a peer that died or a schedule that deadlocks ends the replay with an error, not a hang).
  double nccl_timeout_s = 300;
};

/// The task ids of `rank` in the order the replay issues them: program order, checked to be a
/// topological order of the dependencies among the rank's tasks (edges from other ranks'
/// tasks are ignored: those tasks are not replayed). Throws InputError when the rank is not
/// simulated in the graph, std::logic_error when program order breaks a dependency.
std::vector<TaskId> replay_order(const ScheduleGraph& graph, std::int64_t rank);

/// The simulated rank that stands for world rank `rank`: the rank itself when the graph
/// simulates it, else (folded graph) the representative of its pipeline stage (tensor rank 0,
/// data rank 0). Throws InputError for a rank outside [0, world_size).
std::int64_t representative_rank(const ScheduleGraph& graph, std::int64_t rank);

/// Replays the tasks of `opts.rank` (see the file comment) from the graph alone: the model
/// facts the tasks' OpDescs do not carry come from graph.replay_model. The record has
/// start_s/end_s for every task id of the graph (NaN for tasks of other ranks), measured =
/// true, the executor ("libtorch-1.13.0-cpu", "libtorch-2.3.0-cuda"), the device, memory
/// samples and notes on every substitution. Throws InputError for a bad option (unknown
/// device, CUDA requested without CUDA support or GPU, unsimulated rank).
ExecutionRecord replay(const ScheduleGraph& graph, const ReplayOptions& opts);

/// Replays `iterations` consecutive iterations of `opts.rank` on one model state: the
/// optimizer's update of each iteration is the next one's weights (Adam's step count goes on),
/// the gradient buffer is zeroed before each, and the microbatches' tokens and labels are the
/// same every iteration (a fixed batch, which a model that trains fits: its loss falls).
struct TrainingReplay {
  ExecutionRecord record;       ///< the last iteration's
  std::vector<double> losses;   ///< per iteration: the mean loss over its microbatches (NaN on
                                ///< a rank without the output layer)
};
TrainingReplay replay_training(const ScheduleGraph& graph, const ReplayOptions& opts,
                               int iterations);

/// The forms taking the Scenario the graph was built from, for callers not yet moved to the
/// graph-only ones: the scenario is not read (except its path, in an error message).
std::int64_t representative_rank(const ScheduleGraph& graph, const Scenario& scenario,
                                 std::int64_t rank);
inline ExecutionRecord replay(const ScheduleGraph& graph, const Scenario& /*scenario*/,
                              const ReplayOptions& opts) {
  return replay(graph, opts);
}

/// Free memory of a replay device ("cpu", "cuda", "cuda:N"), in bytes: on the CPU the
/// kernel's MemAvailable (/proc/meminfo), on CUDA cudaMemGetInfo's free bytes of the device
/// (through the CUDA device loop). Throws InputError for a device this build or machine
/// cannot replay on (as replay() would).
std::int64_t device_free_memory_bytes(const std::string& device);

/// Whether this build's LibTorch has CUDA and a GPU is visible; `why` (if non-null) receives
/// the reason when it returns false ("LibTorch 1.13.0 was built without CUDA", "no CUDA
/// device visible").
bool cuda_available(std::string* why = nullptr);

/// CUDA devices this process sees (0 when cuda_available() is false).
int cuda_device_count();

/// Whether this build can replay with several processes (ReplayOptions::nprocs > 1): a CUDA
/// LibTorch, kernels/nccl_comm.h built, and the NCCL library loadable; `why` (if non-null)
/// receives the reason when it returns false.
bool multiprocess_available(std::string* why = nullptr);

/// LibTorch's version string, e.g. "1.13.0".
std::string torch_version();

}  // namespace trainsim::hw
