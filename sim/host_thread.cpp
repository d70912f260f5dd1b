#include "sim/host_thread.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <unordered_map>

#include <boost/range/iterator_range.hpp>
#include <limits>
#include <string>

#include <simgrid/s4u/Actor.hpp>
#include <simgrid/s4u/Engine.hpp>

#include "models/errors.h"
#include "models/perf/flops.h"

namespace trainsim::sim {
namespace {

namespace s4u = simgrid::s4u;
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

bool forward_phase(Phase p) { return p != Phase::Backward; }

}  // namespace

double host_cost_s(const ScheduleGraph& g, TaskId id, const CalibrationProfile& pr,
                   const std::vector<double>& kernels_of_op, const std::vector<double>& gemms_of_op) {
  const Task& t = g.task(id);
  const OpDesc& op = g.op(id);
  switch (t.kind) {
    case TaskKind::Compute: {
      const double kernels = kernels_of_op[t.op], gemms = gemms_of_op[t.op];
      if (!forward_phase(t.phase)) return kernels * pr.host_autograd_node_s + pr.host_module_overhead_s;
      // A Transformer Engine module (megatron-core) issues its GEMM in one module call
      // (TE issue #2053's Linear figure); every other kernel is an eager op.
      if (op.features.core)
        return gemms * pr.host_te_module_s + (kernels - gemms) * pr.host_eager_op_s +
               pr.host_module_overhead_s;
      return kernels * pr.host_eager_op_s + pr.host_module_overhead_s;
    }
    case TaskKind::OptimizerGpu: return std::max(1.0, kernels_of_op[t.op]) * pr.host_eager_op_s;
    case TaskKind::OptimizerCpu: return pr.host_eager_op_s;
    default: return pr.host_nccl_call_s;  // collectives, sends, receives, copies
  }
}

double captured_kernels_cost_s(const ScheduleGraph& g, TaskId id, const CalibrationProfile& pr) {
  if (g.cuda_graph_of_task.empty() || g.cuda_graph_of_task[id] == kNone) return 0;
  const GraphCapture cap = g.cuda_graphs[g.cuda_graph_of_task[id]].capture;
  if (cap == GraphCapture::Whole) return 0;
  auto starts = [](const char* name, const char* prefix) {
    return std::string(name).rfind(prefix, 0) == 0;
  };
  const Task& t = g.task(id);
  const OpDesc& op = g.op(id);
  double cost = 0;
  for (const KernelWork& k : op_kernels(op)) {
    const bool captured = starts(k.name, "pre_mlp_norm") || starts(k.name, "router_") ||
                          starts(k.name, "shared_") ||
                          (cap == GraphCapture::RouterPreprocess && starts(k.name, "moe_permute"));
    if (!captured) continue;
    if (!forward_phase(t.phase))
      cost += pr.host_autograd_node_s;
    else
      cost += op.features.core && k.cls == KernelClass::Gemm ? pr.host_te_module_s
                                                              : pr.host_eager_op_s;
  }
  return cost;
}

void apply_cuda_graphs(HostPlan& plan, const ScheduleGraph& g, const CalibrationProfile& pr,
                       const std::vector<double>& kernels_of_op) {
  if (g.cuda_graphs.empty()) return;
  plan.in_graph.assign(g.num_tasks(), 0);
  std::vector<char> launched(g.cuda_graphs.size(), 0);
  for (const std::vector<TaskId>& order : plan.rank_order)
    for (TaskId t : order) {
      const std::uint32_t r = g.cuda_graph_of_task[t];
      if (r == kNone) continue;
      const Task& task = g.task(t);
      const bool exec = task.kind == TaskKind::Compute || task.kind == TaskKind::OptimizerGpu;
      const double k = exec ? std::max(1.0, kernels_of_op[task.op]) : 1.0;
      if (g.cuda_graphs[r].capture != GraphCapture::Whole) {
        plan.cost_s[t] += pr.host_graph_launch_s - captured_kernels_cost_s(g, t, pr);
        plan.cost_s[t] = std::max(plan.cost_s[t], pr.host_graph_launch_s);
        plan.first_s[t] = plan.cost_s[t] / k;
      } else if (!launched[r]) {
        launched[r] = 1;
        plan.cost_s[t] = plan.first_s[t] = pr.host_graph_launch_s;
      } else {
        plan.cost_s[t] = plan.first_s[t] = 0;
        plan.in_graph[t] = 1;
      }
    }
}

std::vector<TaskId> host_issue_order(const ScheduleGraph& g, std::size_t ri,
                                     const std::vector<std::uint32_t>& slot_of_task,
                                     const std::vector<std::vector<TaskId>>& slot_tasks,
                                     const std::vector<std::uint32_t>& pos_in_slot,
                                     const std::vector<std::uint32_t>& sync_of_task) {
  const RankId rank = g.simulated_ranks()[ri];
  const std::vector<TaskId> tasks = g.tasks_of_rank(rank);
  constexpr TaskId kStart = kNone;  // the anchor of a hooked task with nothing before it
  std::unordered_map<TaskId, std::vector<TaskId>> after;  // anchor -> moved tasks, id order
  std::vector<char> moved(tasks.size(), 0);
  const auto& deps = g.dependencies();
  for (std::size_t i = 0; i < tasks.size(); ++i) {
    const TaskId t = tasks[i];
    const Phase ph = g.task(t).phase;
    if ((ph != Phase::GradSync && ph != Phase::ParamSync) || sync_of_task[t] != kNone) continue;
    TaskId anchor = kStart;
    auto later = [&](TaskId a) { anchor = anchor == kStart ? a : std::max(anchor, a); };
    for (auto e : boost::make_iterator_range(boost::in_edges(t, deps))) {
      const TaskId p = TaskId(boost::source(e, deps));
      if (g.task(p).rank == rank) later(p);
    }
    const std::uint32_t k = pos_in_slot[t];
    if (k > 0) later(slot_tasks[slot_of_task[t]][k - 1]);
    if (anchor != kStart && anchor > t) continue;  // a dependency emitted later: keep its place
    after[anchor].push_back(t);
    moved[i] = 1;
  }
  std::vector<TaskId> order;
  order.reserve(tasks.size());
  std::function<void(TaskId)> emit_after = [&](TaskId a) {
    auto it = after.find(a);
    if (it == after.end()) return;
    for (TaskId m : it->second) {
      order.push_back(m);
      emit_after(m);
    }
  };
  emit_after(kStart);
  for (std::size_t i = 0; i < tasks.size(); ++i) {
    if (moved[i]) continue;
    order.push_back(tasks[i]);
    emit_after(tasks[i]);
  }
  TRAINSIM_CHECK(order.size() == tasks.size(), "host_issue_order: a task was lost");
  return order;
}

HostPlan prepare_host_plan(const ScheduleGraph& g, const Scenario& scenario,
                           const CalibrationProfile& profile, const std::vector<double>& op_time_s,
                           const std::vector<std::uint32_t>& slot_of_task,
                           const std::vector<std::vector<TaskId>>& slot_tasks) {
  HostPlan plan;
  if (!scenario.host_model) return plan;
  plan.enabled = true;
  const std::size_t n = g.num_tasks();
  // Kernel and GEMM counts once per op descriptor (models/perf/flops.h).
  std::vector<double> kernels(g.ops().size(), 0), gemms(g.ops().size(), 0);
  std::vector<char> needed(g.ops().size(), 0);
  for (const Task& t : g.tasks())
    if (t.kind == TaskKind::Compute || t.kind == TaskKind::OptimizerGpu) needed[t.op] = 1;
  for (std::size_t i = 0; i < g.ops().size(); ++i) {
    if (!needed[i]) continue;
    for (const KernelWork& k : op_kernels(g.ops()[i])) {
      kernels[i] += 1;
      gemms[i] += k.cls == KernelClass::Gemm ? 1 : 0;
    }
  }
  plan.cost_s.resize(n);
  plan.first_s.resize(n);
  plan.tail_s.assign(n, 0);
  for (TaskId id = 0; id < n; ++id) plan.cost_s[id] = host_cost_s(g, id, profile, kernels, gemms);
  // Framework hooks' host work around a task (ScheduleGraph::host_work: ZeRO-3's fetch hooks).
  for (const HostWork& w : g.host_work) plan.cost_s[w.task] += w.eager_ops * profile.host_eager_op_s;
  for (TaskId id = 0; id < n; ++id) {
    const Task& t = g.task(id);
    const bool exec = t.kind == TaskKind::Compute || t.kind == TaskKind::OptimizerGpu;
    const double k = exec ? std::max(1.0, kernels[t.op]) : 1.0;
    plan.first_s[id] = plan.cost_s[id] / k;
    if (exec && op_time_s[t.op] == op_time_s[t.op]) plan.tail_s[id] = op_time_s[t.op] / k;
  }
  plan.sync_of_task.assign(n, kNone);
  for (std::size_t i = 0; i < g.host_syncs.size(); ++i)
    plan.sync_of_task[g.host_syncs[i].task] = std::uint32_t(i);
  plan.pos_in_slot.assign(n, 0);
  for (const auto& list : slot_tasks)
    for (std::size_t k = 0; k < list.size(); ++k) plan.pos_in_slot[list[k]] = std::uint32_t(k);
  plan.rank_order.resize(g.simulated_ranks().size());
  for (std::size_t ri = 0; ri < plan.rank_order.size(); ++ri)
    plan.rank_order[ri] =
        host_issue_order(g, ri, slot_of_task, slot_tasks, plan.pos_in_slot, plan.sync_of_task);
  // A profile without its host section: no issue cost and no queue limit beyond the
  // graph's size; the synchronisation points still order the host.
  plan.queue_depth = has_host_costs(profile)
                         ? std::uint32_t(profile.host_launch_queue_depth)
                         : std::uint32_t(std::min<std::size_t>(n + 1, 0xFFFFFFFFu));
  plan.sync_s = profile.host_sync_s;
  apply_cuda_graphs(plan, g, profile, kernels);
  return plan;
}

HostThreads::HostThreads(const HostPlan& plan, const ScheduleGraph& g,
                         const std::vector<std::vector<TaskId>>& slot_tasks)
    : plan_(plan), g_(g), slot_tasks_(slot_tasks) {
  if (!plan_.enabled) return;
  const std::size_t n = g.num_tasks();
  issue_end_s.assign(n, kNaN);
  issue_start_s.assign(n, kNaN);
  wait_s.assign(n, 0);
  sync_start_s.assign(g.host_syncs.size(), kNaN);
  sync_end_s.assign(g.host_syncs.size(), kNaN);
  ended_.assign(n, 0);
  slot_done_.assign(slot_tasks.size(), 0);
  slot_sem_.resize(slot_tasks.size());
  slot_waits_for_.assign(slot_tasks.size(), kNone);
  hosts_.resize(g.simulated_ranks().size());
}

void HostThreads::start(const std::vector<s4u::Host*>& hosts) {
  if (!plan_.enabled) return;
  for (std::size_t slot = 0; slot < slot_tasks_.size(); ++slot)
    if (!slot_tasks_[slot].empty()) slot_sem_[slot] = s4u::Semaphore::create(0);
  const auto& ranks = g_.simulated_ranks();
  for (std::size_t ri = 0; ri < ranks.size(); ++ri) {
    hosts_[ri].sem = s4u::Semaphore::create(0);
    s4u::Actor::create("rank" + std::to_string(ranks[ri]) + "-host", hosts[ri],
                       [this, ri] { host_main(ri); });
  }
}

template <typename Done>
double HostThreads::block(RankHost& h, double clock_s, Wait what, Done done) {
  const double now = s4u::Engine::get_clock();
  if (clock_s > now) s4u::this_actor::sleep_for(clock_s - now);
  // Actors are cooperative: nothing runs between this check and the acquire, and the wait
  // is posted only here, so a release always finds the host waiting.
  if (!done()) {
    h.wait = what;
    h.sem->acquire();
  }
  h.wait = Wait::None;
  return std::max(clock_s, s4u::Engine::get_clock());
}

void HostThreads::host_main(std::size_t ri) {
  RankHost& h = hosts_[ri];
  const std::uint32_t depth = plan_.queue_depth;
  // Wake-ups of a saturated queue come every depth / 8 tasks (header).
  const std::uint32_t batch = std::max<std::uint32_t>(1, depth / 8);
  double clock_s = s4u::Engine::get_clock();
  for (TaskId t : plan_.rank_order[ri]) {
    const std::uint32_t k = plan_.pos_in_slot[t];
    if (k >= depth && (plan_.in_graph.empty() || !plan_.in_graph[t])) {
      const std::uint32_t slot = std::uint32_t(ri * kNumStreams + int(g_.task(t).stream));
      if (slot_done_[slot] < k - depth + 1) {
        h.wait_slot = slot;
        h.wait_count = std::min(k, k - depth + batch);
        clock_s = block(h, clock_s, Wait::Slot, [&] { return slot_done_[slot] >= k - depth + 1; });
      }
    }
    issue_start_s[t] = clock_s;
    clock_s += plan_.cost_s[t];
    issue_end_s[t] = clock_s;
    const std::uint32_t slot = std::uint32_t(ri * kNumStreams + int(g_.task(t).stream));
    if (slot_waits_for_[slot] == t) {
      slot_waits_for_[slot] = kNone;
      slot_sem_[slot]->release();
    }
    const std::uint32_t sync = plan_.sync_of_task[t];
    if (sync == kNone) continue;
    h.wait_task = t;
    sync_start_s[sync] = clock_s;
    clock_s = block(h, clock_s, Wait::End, [&] { return ended_[t] != 0; }) + plan_.sync_s;
    sync_end_s[sync] = clock_s;
  }
}

void HostThreads::await_issue(TaskId t) {
  if (!plan_.enabled) return;
  const double ready_s = s4u::Engine::get_clock();
  if (std::isnan(issue_end_s[t])) {
    const std::uint32_t slot =
        std::uint32_t(g_.rank_index(g_.task(t).rank) * kNumStreams + int(g_.task(t).stream));
    slot_waits_for_[slot] = t;
    slot_sem_[slot]->acquire();
  }
  const double first_s = issue_start_s[t] + plan_.first_s[t];
  const double now = s4u::Engine::get_clock();
  if (first_s > now) s4u::this_actor::sleep_for(first_s - now);
  wait_s[t] = std::max(0.0, first_s - ready_s);
}

void HostThreads::await_last_kernel(TaskId t) {
  if (!plan_.enabled) return;
  const double last_s = issue_end_s[t] + plan_.tail_s[t];
  const double now = s4u::Engine::get_clock();
  if (last_s > now) s4u::this_actor::sleep_for(last_s - now);
}

void HostThreads::on_slot_done(std::uint32_t slot, std::uint32_t done_count) {
  if (!plan_.enabled) return;
  slot_done_[slot] = done_count;
  RankHost& h = hosts_[slot / kNumStreams];
  if (h.wait == Wait::Slot && h.wait_slot == slot && done_count >= h.wait_count) {
    h.wait = Wait::None;
    h.sem->release();
  }
}

void HostThreads::on_end(TaskId t) {
  if (!plan_.enabled) return;
  ended_[t] = 1;
  RankHost& h = hosts_[g_.rank_index(g_.task(t).rank)];
  if (h.wait == Wait::End && h.wait_task == t) {
    h.wait = Wait::None;
    h.sem->release();
  }
}

}  // namespace trainsim::sim
