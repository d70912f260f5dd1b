// The host side of each simulated rank (scenario key host_model; docs/scenario.md
// "host_model", docs/validation.md "The host timeline").
//
// Every simulated rank has one host thread, a SimGrid actor, that issues the rank's tasks in
// program order (the order the builder emitted them, across all of the rank's streams), except
// that a task the framework issues from a hook (gradient and parameter synchronisation:
// phases GradSync and ParamSync, DDP's and ZeRO's bucket hooks) is issued right after the
// latest of its same-rank dependencies and its stream predecessor (host_issue_order):
//  - issuing a task costs its host cost (HostPlan::cost_s, from the profile's `host` section:
//    host_cost_s below), spread evenly over its kernels: the device may start the task once
//    its first kernel is issued (issue start + cost / kernels), and the task cannot end before
//    its last kernel, issued at the issue end, has run (HostPlan::tail_s: the task's device
//    time / kernels). So a task of N kernels whose host cost h per kernel exceeds their device
//    time d lasts N h (+ d for the last), as N separate kernels would; a communication or copy
//    task counts as one kernel;
//  - each stream's launch queue holds at most the profile's launch_queue_depth pending tasks:
//    issuing the k-th task of a stream waits until that stream has finished task
//    k - depth (the host then wakes once the stream has drained depth / 8 more, so that a
//    saturated queue does not cost one wake-up per task; the device still has at least
//    7 / 8 of the queue ahead of it);
//  - a synchronisation point (ScheduleGraph::host_syncs) blocks the host after issuing its task
//    until the device has finished it, then costs the profile's sync_s;
//  - a CUDA graph region (ScheduleGraph::cuda_graphs, scenario parallel.cuda_graph_impl) is
//    issued by one graph launch: the first of its tasks the host reaches costs the profile's
//    graph_launch_s and makes its kernels available at once, the others cost nothing and do
//    not wait for the launch queue (the graph is one entry in it). A partial capture (the
//    router part of an MoE MLP task) replaces its captured kernels' issue costs by one launch
//    (apply_cuda_graphs).
// The host runs ahead of simulated time on its own clock and touches SimGrid only when it
// must block, so a rank whose host stays ahead costs no extra activity.
#pragma once

#include <cstdint>
#include <vector>

#include <simgrid/s4u/Host.hpp>
#include <simgrid/s4u/Semaphore.hpp>

#include "models/graph/schedule_graph.h"
#include "models/hardware/calibration.h"
#include "models/input/scenario.h"

namespace trainsim::sim {

/// What the host threads need, computed in the parent (sim/executor.cpp prepare()).
struct HostPlan {
  bool enabled = false;                 ///< host_model on
  std::vector<double> cost_s;           ///< per task: host time to issue it
  std::vector<double> first_s;          ///< per task: host time to its first kernel's issue
  std::vector<double> tail_s;           ///< per task: device time of its last kernel
  std::vector<std::uint32_t> sync_of_task;  ///< per task: index into graph.host_syncs or kNone
  std::vector<std::uint32_t> pos_in_slot;   ///< per task: its index in its (rank, stream) list
  std::vector<std::vector<TaskId>> rank_order;  ///< per simulated rank: the issue order
  std::vector<char> in_graph;  ///< per task: issued by a launch it did not pay (empty: none)
  std::uint32_t queue_depth = 1024;
  double sync_s = 0;
};

/// The host cost of issuing task `id` of `g` under `profile` (the host section's figures):
///  - a compute task: its kernels (models/perf/flops.h op_kernels) in the forward (and its
///    recomputation) at te_module_s per GEMM under megatron-core (a Transformer Engine module
///    issues one GEMM) and eager_op_s per other kernel (every kernel under megatron-2021); in
///    the backward at autograd_node_s per kernel; plus module_overhead_s;
///  - a GPU optimizer step: eager_op_s per kernel of its list; a CPU optimizer step: eager_op_s;
///  - a collective, send, receive or copy: nccl_call_s.
double host_cost_s(const ScheduleGraph& g, TaskId id, const CalibrationProfile& profile,
                   const std::vector<double>& kernels_of_op, const std::vector<double>& gemms_of_op);

/// The host cost of the kernels of task `id` that its CUDA graph region captures when the
/// region is a partial one (GraphCapture Router / RouterPreprocess: the kernels named
/// pre_mlp_norm*, router_*, shared_* and with the preprocess moe_permute*), at the rates of
/// host_cost_s; 0 for a task outside such a region.
double captured_kernels_cost_s(const ScheduleGraph& g, TaskId id, const CalibrationProfile& profile);

/// Applies the graph's CUDA graph regions to `plan` (its costs and rank orders filled): in each
/// rank's issue order, the first task of a whole region costs graph_launch_s (its first kernel
/// at the launch's end), its other tasks nothing (in_graph); a partial region's task costs its
/// host_cost_s minus captured_kernels_cost_s plus graph_launch_s.
void apply_cuda_graphs(HostPlan& plan, const ScheduleGraph& g, const CalibrationProfile& profile,
                       const std::vector<double>& kernels_of_op);

/// The order in which the host of simulated rank index `ri` issues its tasks: task id order,
/// with each GradSync / ParamSync task moved to just after its anchor (the latest, by id, of
/// its same-rank dependencies and of the previous task of its stream; the rank's start when it
/// has neither), tasks moved after one anchor in id order. A task with a synchronisation point
/// (sync_of_task not kNone: the .item() after the last bucket) keeps its place: the host
/// reaches the sync where the program does.
std::vector<TaskId> host_issue_order(const ScheduleGraph& g, std::size_t ri,
                                     const std::vector<std::uint32_t>& slot_of_task,
                                     const std::vector<std::vector<TaskId>>& slot_tasks,
                                     const std::vector<std::uint32_t>& pos_in_slot,
                                     const std::vector<std::uint32_t>& sync_of_task);

/// The plan of `g`: disabled (empty) unless scenario.host_model. A task's host cost is
/// host_cost_s plus, for each of its ScheduleGraph::host_work entries (a framework hook's work
/// around it, e.g. ZeRO-3's fetch hooks), eager_ops x the profile's eager_op_s.
HostPlan prepare_host_plan(const ScheduleGraph& g, const Scenario& scenario,
                           const CalibrationProfile& profile, const std::vector<double>& op_time_s,
                           const std::vector<std::uint32_t>& slot_of_task,
                           const std::vector<std::vector<TaskId>>& slot_tasks);

/// The host threads of one simulation run (in the simulation process). The executor's device
/// actors call await_issue before starting a task, on_slot_done when a stream moves past a
/// task, and on_end when a task has finished (a send: delivered).
class HostThreads {
 public:
  HostThreads(const HostPlan& plan, const ScheduleGraph& g,
              const std::vector<std::vector<TaskId>>& slot_tasks);
  bool enabled() const { return plan_.enabled; }
  /// One actor per simulated rank, on hosts[rank index] (the rank's GPU host).
  void start(const std::vector<simgrid::s4u::Host*>& hosts);
  /// Device side: returns once `t` is issued (sleeping until its issue time when the host
  /// issued it ahead of now); records how long the device waited.
  void await_issue(TaskId t);
  /// Device side, after a compute task's work: returns once its last kernel has run
  /// (issue end + tail), sleeping when the host issued it later than the work ended.
  void await_last_kernel(TaskId t);
  void on_slot_done(std::uint32_t slot, std::uint32_t done_count);
  void on_end(TaskId t);
  /// Per task and per sync point (ExecutionRecord's host_* and sync_wait_* fields).
  std::vector<double> issue_end_s, issue_start_s, wait_s, sync_start_s, sync_end_s;

 private:
  enum class Wait : std::uint8_t { None, Slot, End };
  struct RankHost {
    simgrid::s4u::SemaphorePtr sem;
    Wait wait = Wait::None;
    std::uint32_t wait_slot = 0, wait_count = 0;
    TaskId wait_task = kNone;
  };
  void host_main(std::size_t ri);
  /// The host `h` at host time `clock_s`: sleeps until then, and if `done()` does not hold,
  /// waits (`what`, with the wait fields the caller set) until woken; returns the host time.
  template <typename Done>
  double block(RankHost& h, double clock_s, Wait what, Done done);

  const HostPlan& plan_;
  const ScheduleGraph& g_;
  const std::vector<std::vector<TaskId>>& slot_tasks_;
  std::vector<RankHost> hosts_;
  std::vector<std::uint32_t> slot_done_;
  std::vector<simgrid::s4u::SemaphorePtr> slot_sem_;  ///< per slot: device waiting for an issue
  std::vector<TaskId> slot_waits_for_;                ///< per slot: that task or kNone
  std::vector<char> ended_;
};

}  // namespace trainsim::sim
