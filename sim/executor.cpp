#include "sim/executor.h"

#include <unistd.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <exception>
#include <fstream>
#include <limits>
#include <map>
#include <memory>
#include <sstream>
#include <stdexcept>
#include <tuple>

#include <boost/range/iterator_range.hpp>
#include <simgrid/s4u/Actor.hpp>
#include <simgrid/s4u/Comm.hpp>
#include <simgrid/s4u/Engine.hpp>
#include <simgrid/s4u/Exec.hpp>
#include <simgrid/s4u/Host.hpp>
#include <simgrid/s4u/Mailbox.hpp>
#include <simgrid/s4u/Semaphore.hpp>

#include "models/errors.h"
#include "models/system/collective_flows.h"
#include "sim/host_thread.h"
#include "sim/isolate.h"
#include "sim/platform.h"

namespace trainsim::sim {
namespace {

namespace s4u = simgrid::s4u;
using Clock = std::chrono::steady_clock;

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
/// Amount of the execution that holds a running collective's SMs (Run::run_collective): far
/// more than any collective lasts (1e9 s at kHostSpeed); it is cancelled when the collective
/// ends.
constexpr double kSmHoldAmount = 1e18;

double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

/// One flow of a collective as the executor runs it: a PeerFlow of
/// models/system/collective_flows.h with its end points and mailboxes.
struct FlowPlan {
  std::uint64_t bytes = 0;        ///< wire bytes
  double rate_bytes_per_s = 0;    ///< 0: no cap (the links alone set the rate)
  Endpoint dst, pred;             ///< successor, predecessor
  std::uint32_t mb_out = kNone;   ///< mailbox to the successor; kNone: a flow to its host
  std::uint32_t mb_in = kNone;    ///< mailbox from the predecessor
  bool flow_in = false;           ///< predecessor not simulated: a flow pred -> this rank
};

/// What a communication task moves, from where to where, and the mailboxes it uses.
struct CommPlan {
  std::uint64_t bytes = 0;     ///< copy / message: flow size
  double latency_s = 0;        ///< route latency (+ collective software latency)
  Endpoint src, dst;           ///< copy / message: flow end points; collective: src = this rank
  std::uint32_t mb_out = kNone;  ///< message: mailbox this task puts to
  std::uint32_t mb_in = kNone;   ///< message: mailbox this task gets from
  bool zero_time = false;      ///< collective of one rank
  /// Collective: the ring flow, then (hierarchical ring) the rail flow over the rank's NIC.
  std::array<FlowPlan, 2> flows;
  std::uint8_t num_flows = 0;
  /// Collective: ends no earlier than this after its flows start (folded_min_time_s).
  double min_flows_s = 0;
  /// Collective: share of the rank's GPU its NCCL kernel occupies while it runs (its CTAs'
  /// SMs, CostModel::nccl_sm_share); compute on the rank gets the rest. 0: none.
  double sm_share = 0;
};

/// Everything the child needs, computed in the parent (errors there keep their type).
struct Prepared {
  const ScheduleGraph* g = nullptr;
  std::unique_ptr<PlatformModel> platform;
  std::vector<double> op_amount;             ///< per op: exec amount (kHostSpeed units) or NaN
  /// Asymmetric cluster (ScheduleGraph::gpu_speed non-empty): per op, the amount of its kernel
  /// launches, which a slower GPU does not stretch (CostModel::launch_time_s).
  std::vector<double> op_launch_amount;
  std::vector<std::uint32_t> pending;        ///< per task: same-rank predecessors
  std::vector<std::uint32_t> slot_of_task;   ///< per task: actor slot
  std::vector<std::uint32_t> comm_of_task;   ///< per task: index into comms or kNone
  std::vector<CommPlan> comms;
  std::vector<std::vector<TaskId>> slot_tasks;  ///< per slot (rank index x stream), program order
  std::uint32_t num_mailboxes = 0;
  std::int64_t gpus_per_node = 1;
  /// Consecutive ranks of one NVLink domain (nvlink_domain_ranks): gpus_per_node on a DGX.
  std::int64_t domain_ranks = 1;
  HostPlan host;  ///< the host timeline (sim/host_thread.h); disabled with host_model off
};

std::string task_desc(const ScheduleGraph& g, TaskId id) {
  const Task& t = g.task(id);
  return "task " + std::to_string(id) + " '" + g.label(id) + "' (rank " + std::to_string(t.rank) +
         ", stream " + to_string(t.stream) + ")";
}

bool is_exec(TaskKind k) {
  return k == TaskKind::Compute || k == TaskKind::OptimizerGpu || k == TaskKind::OptimizerCpu;
}

/// An asymmetric cluster's launch amounts (Prepared::op_launch_amount); none when every GPU
/// runs at speed 1.
void prepare_launch_amounts(Prepared& P, const CostModel& cost, const std::vector<char>& needed) {
  const ScheduleGraph& g = *P.g;
  if (g.gpu_speed.empty()) return;
  P.op_launch_amount.assign(g.ops().size(), 0.0);
  for (std::size_t i = 0; i < g.ops().size(); ++i)
    if (needed[i]) P.op_launch_amount[i] = cost.launch_time_s(g.ops()[i]) * kHostSpeed;
}

/// The exec amount of compute task `t` on its GPU: the op's, its device part stretched by
/// 1 / speed on a slower GPU (scenario `variability`, models/input/variability.h).
double exec_amount(const Prepared& P, const Task& t) {
  const double amount = P.op_amount[t.op];
  if (P.g->gpu_speed.empty() || t.kind == TaskKind::OptimizerCpu) return amount;
  const double speed = P.g->gpu_speed[P.g->rank_index(t.rank)];
  if (speed == 1.0) return amount;
  const double launch = P.op_launch_amount[t.op];
  return launch + (amount - launch) / speed;
}

/// Exec amounts of compute ops, once per op descriptor (CostModel::compute_time_s).
void prepare_durations(Prepared& P, const CostModel& cost) {
  const ScheduleGraph& g = *P.g;
  P.op_amount.assign(g.ops().size(), kNaN);
  std::vector<char> op_needed(g.ops().size(), 0);
  for (const Task& t : g.tasks())
    if (is_exec(t.kind)) op_needed[t.op] = 1;
  for (std::size_t i = 0; i < g.ops().size(); ++i) {
    if (!op_needed[i]) continue;
    const double d = cost.compute_time_s(g.ops()[i]);
    TRAINSIM_CHECK(d >= 0 && std::isfinite(d),
                   "simulate: CostModel::compute_time_s gave " + std::to_string(d) +
                       " s for op " + to_string(g.ops()[i].kind));
    P.op_amount[i] = d * kHostSpeed;
  }
  prepare_launch_amounts(P, cost, op_needed);
}

/// Actor slots and program order per (rank, stream); same-rank edges are waited on,
/// cross-rank edges must be Send -> Recv of one message (satisfied by the message itself).
void prepare_order(Prepared& P) {
  const ScheduleGraph& g = *P.g;
  const std::size_t n = g.num_tasks();
  const auto& ranks = g.simulated_ranks();
  P.slot_of_task.resize(n);
  P.slot_tasks.assign(ranks.size() * kNumStreams, {});
  for (std::size_t ri = 0; ri < ranks.size(); ++ri)
    for (TaskId id : g.tasks_of_rank(ranks[ri])) {
      const std::uint32_t slot = std::uint32_t(ri * kNumStreams + int(g.task(id).stream));
      P.slot_of_task[id] = slot;
      P.slot_tasks[slot].push_back(id);
    }
  P.pending.assign(n, 0);
  const auto& deps = g.dependencies();
  for (TaskId v = 0; v < n; ++v) {
    const Task& tv = g.task(v);
    for (auto e : boost::make_iterator_range(boost::out_edges(v, deps))) {
      const TaskId u = TaskId(boost::target(e, deps));
      const Task& tu = g.task(u);
      if (tu.rank == tv.rank) {
        ++P.pending[u];
        continue;
      }
      TRAINSIM_CHECK(tv.kind == TaskKind::Send && tu.kind == TaskKind::Recv &&
                         tv.match == tu.match && tv.peer == std::int32_t(tu.rank) &&
                         tu.peer == std::int32_t(tv.rank),
                     "simulate: cross-rank dependency " + task_desc(g, v) + " -> " +
                         task_desc(g, u) +
                         " is not a Send -> Recv of one message (the only cross-rank edges "
                         "the executor supports)");
    }
  }
}

/// Plans the communication tasks of a graph: their flows (models/system/collective_flows.h for
/// collectives), the routes they need on the platform and their mailboxes, in task order (the
/// order of the routes and mailboxes is the platform's and SimGrid's).
class CommPlanner {
 public:
  CommPlanner(Prepared& P, const CostModel& cost, std::uint64_t world)
      : P_(P), g_(*P.g), plat_(*P.platform), cost_(cost), world_(world) {}

  void plan_all() {
    const std::size_t n = g_.num_tasks();
    P_.comm_of_task.assign(n, kNone);
    for (TaskId id = 0; id < n; ++id) {
      const Task& t = g_.task(id);
      if (is_exec(t.kind)) {
        if (t.kind == TaskKind::OptimizerCpu) plat_.use(Endpoint::cpu(node_of(t.rank)));
        continue;
      }
      TRAINSIM_CHECK(g_.op(id).bytes >= 0, "simulate: negative byte count in " + task_desc(g_, id));
      CommPlan c;
      switch (t.kind) {
        case TaskKind::CopyH2D:
        case TaskKind::CopyD2H: c = plan_copy(t, g_.op(id)); break;
        case TaskKind::Send:
        case TaskKind::Recv: c = plan_message(id); break;
        case TaskKind::Collective: c = plan_collective(id); break;
        default: TRAINSIM_CHECK(false, "simulate: unexpected task kind in " + task_desc(g_, id));
      }
      P_.comm_of_task[id] = std::uint32_t(P_.comms.size());
      P_.comms.push_back(c);
    }
  }

 private:
  std::uint32_t node_of(RankId r) const { return std::uint32_t(r / std::uint64_t(P_.gpus_per_node)); }
  bool simulated(std::int64_t r) const { return r >= 0 && g_.rank_index(RankId(r)) != kNone; }
  std::uint32_t mailbox(int kind, std::uint32_t a, std::uint32_t b, std::uint32_t c) {
    auto [it, inserted] = mailbox_ids_.emplace(std::make_tuple(kind, a, b, c), P_.num_mailboxes);
    if (inserted) ++P_.num_mailboxes;
    return it->second;
  }

  /// A host copy: the PCIe route's latency, then a flow between the node's CPU and the GPU.
  CommPlan plan_copy(const Task& t, const OpDesc& op) {
    CommPlan c;
    const Endpoint me = Endpoint::gpu(t.rank);
    const Endpoint cpu = Endpoint::cpu(node_of(t.rank));
    c.src = t.kind == TaskKind::CopyH2D ? cpu : me;
    c.dst = t.kind == TaskKind::CopyH2D ? me : cpu;
    c.bytes = std::uint64_t(op.bytes);
    c.latency_s = plat_.route(c.src, c.dst).latency_s;
    return c;
  }

  /// A message: into the peer's mailbox, or (folded, peer not simulated) a flow to its host.
  CommPlan plan_message(TaskId id) {
    const Task& t = g_.task(id);
    TRAINSIM_CHECK(t.peer >= 0 && std::uint64_t(t.peer) < world_ && RankId(t.peer) != t.rank,
                   "simulate: bad peer " + std::to_string(t.peer) + " in " + task_desc(g_, id));
    CommPlan c;
    const Endpoint me = Endpoint::gpu(t.rank);
    const Endpoint peer = Endpoint::gpu(RankId(t.peer));
    const bool send = t.kind == TaskKind::Send;
    c.src = send ? me : peer;
    c.dst = send ? peer : me;
    c.bytes = std::uint64_t(g_.op(id).bytes);
    plat_.route(c.src, c.dst);
    c.latency_s =
        message_latency_s(cost_, c.src.index, c.dst.index, P_.domain_ranks, double(c.bytes));
    if (simulated(t.peer)) (send ? c.mb_out : c.mb_in) = mailbox(0, c.src.index, c.dst.index, 0);
    return c;
  }

  CommPlan plan_collective(TaskId id) {
    const Task& t = g_.task(id);
    const OpDesc& op = g_.op(id);
    TRAINSIM_CHECK(t.group != kNone && t.group < g_.groups().size(),
                   "simulate: collective without a group: " + task_desc(g_, id));
    const CommGroup& grp = g_.group(t.group);
    TRAINSIM_CHECK(std::int64_t(grp.ranks.size()) == op.group_size,
                   "simulate: " + task_desc(g_, id) + " has op.group_size " +
                       std::to_string(op.group_size) + " but its group has " +
                       std::to_string(grp.ranks.size()) + " ranks");
    TRAINSIM_CHECK(std::find(grp.ranks.begin(), grp.ranks.end(), t.rank) != grp.ranks.end(),
                   "simulate: rank " + std::to_string(t.rank) + " is not in the group of " +
                       task_desc(g_, id));
    const CollectiveFlows f = collective_flows(cost_, op, grp, t.rank, P_.domain_ranks);
    CommPlan c;
    c.src = Endpoint::gpu(t.rank);
    if (f.zero_time) {
      c.zero_time = true;
      return c;
    }
    c.latency_s = f.latency_s;
    c.sm_share = f.sm_share;
    c.min_flows_s = folded_min_time_s(f, [this](RankId r) { return simulated(r); });
    c.num_flows = f.has_rail ? 2 : 1;
    // The rail's routes and mailboxes first, then the ring's (the platform's order).
    if (f.has_rail) c.flows[1] = connect(f.rail, 3, t);
    c.flows[0] = connect(f.ring, 1, t);
    return c;
  }

  /// The routes and mailboxes of one of a collective's flows. In a folded graph, a successor
  /// that is not simulated is still the flow's destination host, and a predecessor that is not
  /// simulated stands for a replica of this rank: its flow still loads this rank's links (as it
  /// would unfolded), so it is simulated too.
  FlowPlan connect(const PeerFlow& p, int kind, const Task& t) {
    FlowPlan f;
    const Endpoint me = Endpoint::gpu(t.rank);
    f.bytes = p.bytes;
    f.rate_bytes_per_s = p.rate_bytes_per_s;
    f.dst = Endpoint::gpu(p.dst);
    f.pred = Endpoint::gpu(p.pred);
    plat_.route(me, f.dst);
    const std::uint32_t stream = std::uint32_t(t.stream);
    if (simulated(p.dst)) f.mb_out = mailbox(kind, t.group, stream, p.dst);
    if (simulated(p.pred)) {
      f.mb_in = mailbox(kind, t.group, stream, t.rank);
    } else {
      f.flow_in = true;
      plat_.route(f.pred, me);
    }
    return f;
  }

  Prepared& P_;
  const ScheduleGraph& g_;
  PlatformModel& plat_;
  const CostModel& cost_;
  std::uint64_t world_;
  std::map<std::tuple<int, std::uint32_t, std::uint32_t, std::uint32_t>, std::uint32_t> mailbox_ids_;
};

Prepared prepare(const ScheduleGraph& g, const Scenario& scenario, const SystemSpec& system,
                 const CostModel& cost) {
  Prepared P;
  P.g = &g;
  const std::int64_t gpn =
      scenario.cluster.gpus_per_node > 0 ? scenario.cluster.gpus_per_node : system.gpus_per_node;
  P.gpus_per_node = gpn;
  P.domain_ranks = nvlink_domain_ranks(scenario, system);
  P.platform =
      std::make_unique<PlatformModel>(system, scenario.cluster.nodes, gpn, cost, P.domain_ranks);
  apply_slow_links(*P.platform, scenario.variability);
  const std::uint64_t world = std::uint64_t(scenario.cluster.nodes) * std::uint64_t(gpn);
  TRAINSIM_CHECK(boost::num_vertices(g.dependencies()) == g.num_tasks(),
                 "simulate: the schedule graph is not finalized");
  for (RankId r : g.simulated_ranks()) {
    TRAINSIM_CHECK(r < world, "simulate: rank " + std::to_string(r) + " outside the cluster of " +
                                  std::to_string(scenario.cluster.nodes) + " nodes x " +
                                  std::to_string(gpn) + " GPUs");
    P.platform->use(Endpoint::gpu(r));  // every simulated rank's actors live on its GPU host
  }
  prepare_durations(P, cost);
  prepare_order(P);
  CommPlanner(P, cost, world).plan_all();
  std::vector<double> op_time_s(g.ops().size(), kNaN);
  for (std::size_t i = 0; i < op_time_s.size(); ++i) op_time_s[i] = P.op_amount[i] / kHostSpeed;
  P.host = prepare_host_plan(g, scenario, cost.profile(), op_time_s, P.slot_of_task, P.slot_tasks);
  return P;
}

// ---------------------------------------------------------------- child process

std::int64_t peak_rss_bytes() {
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line))
    if (line.rfind("VmHWM:", 0) == 0) return std::int64_t(std::stoll(line.substr(6))) * 1024;
  return 0;
}

template <typename T>
void put(std::string& out, const T& v) {
  out.append(reinterpret_cast<const char*>(&v), sizeof v);
}
template <typename T>
T get(const std::string& in, std::size_t& pos) {
  if (pos + sizeof(T) > in.size()) throw SystemError("simulate: truncated result");
  T v;
  std::memcpy(&v, in.data() + pos, sizeof v);
  pos += sizeof v;
  return v;
}

/// The host vectors put_host_record wrote, into `rec`'s host_* and sync_wait_* fields.
void get_host_record(const std::string& bytes, std::size_t& pos, ExecutionRecord& rec) {
  if (get<std::uint8_t>(bytes, pos) == 0) return;
  for (auto* v : {&rec.host_issue_end_s, &rec.host_issue_start_s, &rec.host_wait_s,
                  &rec.sync_wait_start_s, &rec.sync_wait_end_s}) {
    const auto n = get<std::uint64_t>(bytes, pos);
    if (pos + n * sizeof(double) > bytes.size()) throw SystemError("simulate: truncated result");
    v->resize(n);
    // An empty vector's data() may be null, which memcpy must not be given even for 0 bytes.
    if (n > 0) std::memcpy(v->data(), bytes.data() + pos, n * sizeof(double));
    pos += n * sizeof(double);
  }
}

class Run {
 public:
  Run(const Prepared& p, const SimOptions& opt, int progress_fd)
      : P_(p), g_(*p.g), opt_(opt), progress_fd_(progress_fd), host_(p.host, *p.g, p.slot_tasks) {}

  std::string execute() {
    const auto t0 = Clock::now();
    std::vector<std::string> args = engine_args(opt_.simgrid_log);
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    int argc = int(args.size());
    s4u::Engine engine(&argc, argv.data());
    platform_ = build_simgrid_platform(*P_.platform);
    mailboxes_.resize(P_.num_mailboxes);
    for (std::uint32_t i = 0; i < P_.num_mailboxes; ++i)
      mailboxes_[i] = s4u::Mailbox::by_name("mb" + std::to_string(i));

    const std::size_t n = g_.num_tasks();
    pending_ = P_.pending;
    start_.assign(n, kNaN);
    end_.assign(n, kNaN);
    actors_.resize(P_.slot_tasks.size());
    const auto& ranks = g_.simulated_ranks();
    std::uint64_t actor_count = 0;
    for (std::size_t slot = 0; slot < P_.slot_tasks.size(); ++slot) {
      if (P_.slot_tasks[slot].empty()) continue;
      const RankId rank = ranks[slot / kNumStreams];
      ActorState& a = actors_[slot];
      a.sem = s4u::Semaphore::create(0);
      s4u::Host* host = platform_.host(Endpoint::gpu(rank));
      const std::string name =
          "rank" + std::to_string(rank) + "-" + to_string(StreamId(slot % kNumStreams));
      s4u::Actor::create(name, host, [this, slot] { actor_main(slot); });
      ++actor_count;
    }
    std::vector<s4u::Host*> rank_hosts;
    for (RankId r : ranks) rank_hosts.push_back(platform_.host(Endpoint::gpu(r)));
    host_.start(rank_hosts);
    s4u::Engine::on_deadlock_cb([this] { deadlock_ = true; });
    wall0_ = Clock::now();
    last_progress_ = wall0_;
    engine.run();

    if (error_) std::rethrow_exception(error_);
    std::size_t not_run = 0;
    for (std::size_t id = 0; id < n; ++id) not_run += std::isnan(end_[id]) ? 1 : 0;
    // The builder's graphs never deadlock (finalize() rejects cycles, and every receive has its
    // send): a deadlock is a bug in the graph given.
    TRAINSIM_CHECK(not_run == 0 && !deadlock_, deadlock_message(not_run));

    std::string out;
    out.reserve(16 * n + 128);
    put(out, std::uint64_t(n));
    out.append(reinterpret_cast<const char*>(start_.data()), n * sizeof(double));
    out.append(reinterpret_cast<const char*>(end_.data()), n * sizeof(double));
    put(out, activities_);
    put(out, actor_count);
    put(out, std::uint64_t(platform_.hosts.size()));
    put(out, std::uint64_t(P_.platform->links().size()));
    put(out, std::uint64_t(P_.platform->routes().size()));
    put(out, seconds_since(t0));
    put(out, peak_rss_bytes());
    put_host_record(out);
    return out;
  }

 private:
  struct ActorState {
    s4u::SemaphorePtr sem;
    TaskId waiting_for = kNone;
    std::size_t cursor = 0;  ///< index of the current task in its slot's list
  };

  static void* payload_of(TaskId id) { return reinterpret_cast<void*>(std::uintptr_t(id) + 1); }
  static TaskId task_of(void* payload) { return TaskId(reinterpret_cast<std::uintptr_t>(payload) - 1); }

  void actor_main(std::size_t slot) {
    ActorState& a = actors_[slot];
    const auto& tasks = P_.slot_tasks[slot];
    try {
      for (a.cursor = 0; a.cursor < tasks.size(); ++a.cursor) {
        const TaskId t = tasks[a.cursor];
        if (pending_[t] != 0) {
          a.waiting_for = t;
          a.sem->acquire();
          TRAINSIM_CHECK(pending_[t] == 0, "woken before the dependencies were done");
        }
        host_.await_issue(t);
        start_[t] = s4u::Engine::get_clock();
        run_task(t);
        host_.on_slot_done(std::uint32_t(slot), std::uint32_t(a.cursor + 1));
      }
    } catch (const std::exception& e) {
      // Keep the first error and end this actor (an exception escaping an actor would abort
      // SimGrid); the actors that depend on it block and SimGrid ends the run as a deadlock,
      // after which execute() reports this error.
      if (!error_) error_ = std::current_exception();
    }
  }

  /// Which of a task's same-rank successors release() frees: all of them, or for a send
  /// (posted, then delivered) those on its own stream (stream order: the queue goes on once
  /// the send is posted) or those on other streams (they wait for the delivery).
  enum class Successors { All, SameStream, OtherStreams };

  /// Marks `t` done for its same-rank successors (`which` of them) and wakes the actor waiting
  /// on one of them.
  void release(TaskId t, Successors which = Successors::All) {
    const auto& deps = g_.dependencies();
    const RankId rank = g_.task(t).rank;
    const StreamId stream = g_.task(t).stream;
    for (auto e : boost::make_iterator_range(boost::out_edges(t, deps))) {
      const TaskId u = TaskId(boost::target(e, deps));
      if (g_.task(u).rank != rank) continue;
      if (which != Successors::All && (g_.task(u).stream == stream) != (which == Successors::SameStream))
        continue;
      if (--pending_[u] == 0) {
        ActorState& w = actors_[P_.slot_of_task[u]];
        if (w.waiting_for == u) {
          w.waiting_for = kNone;
          w.sem->release();
        }
      }
    }
    if (which == Successors::SameStream) return;  // counted once, at the delivery
    if (opt_.progress && (++done_ & 1023u) == 0 && seconds_since(last_progress_) >= 2.0) {
      last_progress_ = Clock::now();
      dprintf(progress_fd_, "simulate: %llu/%zu tasks, simulated %.6g s, wall %.1f s\n",
              static_cast<unsigned long long>(done_), g_.num_tasks(), s4u::Engine::get_clock(),
              seconds_since(wall0_));
    }
  }

  void finish(TaskId t) {
    end_[t] = s4u::Engine::get_clock();
    host_.on_end(t);
    release(t);
  }

  void sleep(double seconds) {
    if (seconds > 0) {
      ++activities_;
      s4u::this_actor::sleep_for(seconds);
    }
  }

  void check_match(TaskId sender, TaskId receiver) {
    // The builder posts each pair's messages in one order on both sides (FIFO matching).
    // Thrown directly, not through TRAINSIM_CHECK's [[noreturn]] helper: this runs on a SimGrid
    // actor's own stack, where ASan's no-return hook misreads the stack bounds and reports a
    // false stack-use-after-scope (google/sanitizers issue 189).
    if (g_.task(sender).match != g_.task(receiver).match)
      throw InvariantError(std::string(__FILE__) + ":" + std::to_string(__LINE__) +
                           ": broken invariant (sender and receiver match): simulate: message "
                           "mismatch: " + task_desc(g_, receiver) + " expects match " +
                           std::to_string(g_.task(receiver).match) + " but received " +
                           task_desc(g_, sender) + " (match " +
                           std::to_string(g_.task(sender).match) +
                           "); messages of one rank pair must be posted and received in the "
                           "same order");
  }

  void run_task(TaskId t) {
    const Task& task = g_.task(t);
    switch (task.kind) {
      case TaskKind::Compute:
      case TaskKind::OptimizerGpu:
        ++activities_;
        s4u::this_actor::execute(exec_amount(P_, task));
        host_.await_last_kernel(t);
        finish(t);
        return;
      case TaskKind::OptimizerCpu: {
        ++activities_;
        const std::uint32_t node = std::uint32_t(task.rank / std::uint64_t(P_.gpus_per_node));
        s4u::Exec::init()
            ->set_flops_amount(P_.op_amount[task.op])
            ->set_host(platform_.host(Endpoint::cpu(node)))
            ->wait();
        finish(t);
        return;
      }
      default: break;
    }
    const CommPlan& c = P_.comms[P_.comm_of_task[t]];
    switch (task.kind) {
      case TaskKind::CopyH2D:
      case TaskKind::CopyD2H:
        sleep(c.latency_s);
        ++activities_;
        s4u::Comm::sendto(platform_.host(c.src), platform_.host(c.dst), c.bytes);
        finish(t);
        return;
      case TaskKind::Send: return run_send(t, c);
      case TaskKind::Recv: return run_recv(t, c);
      case TaskKind::Collective: return run_collective(t, c);
      default: TRAINSIM_CHECK(false, "simulate: unexpected task kind in " + task_desc(g_, t));
    }
  }

  void run_send(TaskId t, const CommPlan& c) {
    ++activities_;
    if (c.mb_out != kNone) {
      // Posted and left: the stream goes on, and the receiver records this task's end and
      // releases its successors on other streams (they wait for the delivery) when the
      // message is in.
      mailboxes_[c.mb_out]->put_init(payload_of(t), c.bytes)->detach();
      release(t, Successors::SameStream);
      return;
    }
    // The peer is not simulated: a helper actor carries the flow to its host.
    s4u::Host* src = platform_.host(c.src);
    s4u::Host* dst = platform_.host(c.dst);
    const std::uint64_t bytes = c.bytes;
    const double latency = c.latency_s;
    s4u::Actor::create("send-" + std::to_string(t), src, [this, t, src, dst, bytes, latency] {
      s4u::Comm::sendto(src, dst, bytes);
      sleep(latency);
      end_[t] = s4u::Engine::get_clock();
      host_.on_end(t);
      release(t, Successors::OtherStreams);
    });
    release(t, Successors::SameStream);
  }

  void run_recv(TaskId t, const CommPlan& c) {
    ++activities_;
    if (c.mb_in != kNone) {
      void* data = nullptr;
      mailboxes_[c.mb_in]->get_async<void>(&data)->wait();
      const TaskId sender = task_of(data);
      check_match(sender, t);
      sleep(c.latency_s);
      end_[sender] = s4u::Engine::get_clock();
      host_.on_end(sender);
      release(sender, Successors::OtherStreams);
    } else {
      s4u::Comm::sendto(platform_.host(c.src), platform_.host(c.dst), c.bytes);
      sleep(c.latency_s);
    }
    finish(t);
  }

  /// A collective: its NCCL kernel holds the rank's SMs, the latency, then its flows (the
  /// ring's, then the rail's; models/system/collective_flows.h), each out to its successor
  /// while its predecessor's comes in.
  void run_collective(TaskId t, const CommPlan& c) {
    if (c.zero_time) {
      finish(t);
      return;
    }
    // The NCCL kernel holds its SMs from launch to the end: an execution on this rank's GPU
    // bounded to that share of its speed, so that compute running beside it (SimGrid shares a
    // host max-min fairly) gets only the rest; cancelled when the collective ends.
    s4u::ExecPtr sms;
    if (c.sm_share > 0) {
      ++activities_;
      sms = s4u::Exec::init();
      sms->set_flops_amount(kSmHoldAmount)->set_bound(c.sm_share * kHostSpeed);
      sms->set_host(s4u::this_actor::get_host())->start();
    }
    sleep(c.latency_s);
    // SimGrid bounds a mailbox comm's rate (set_rate), but a host-to-host comm (sendto_init,
    // the flows into and out of non-simulated peers of a folded rank) starts without it: such
    // a flow runs at what its links give. Its rate bound is kept by ending the collective no
    // earlier than its slowest flow would at that rate (c.min_flows_s).
    const double flows_start_s = s4u::Engine::get_clock();
    std::array<s4u::CommPtr, 2> out, in;
    std::array<void*, 2> data{nullptr, nullptr};
    for (std::size_t i = 0; i < c.num_flows; ++i) {
      const FlowPlan& f = c.flows[i];
      ++activities_;
      out[i] = f.mb_out != kNone ? start_put(f.mb_out, t, f.bytes, f.rate_bytes_per_s)
                                 : start_flow(c.src, f.dst, f.bytes, f.rate_bytes_per_s);
      if (f.mb_in != kNone) {
        in[i] = mailboxes_[f.mb_in]->get_async<void>(&data[i]);
      } else if (f.flow_in) {
        ++activities_;
        in[i] = start_flow(f.pred, c.src, f.bytes, f.rate_bytes_per_s);
      }
    }
    for (std::size_t i = 0; i < c.num_flows; ++i) {
      out[i]->wait();
      if (!in[i]) continue;
      in[i]->wait();
      if (c.flows[i].mb_in != kNone) check_match(task_of(data[i]), t);
    }
    sleep(flows_start_s + c.min_flows_s - s4u::Engine::get_clock());
    if (sms) sms->cancel();
    finish(t);
  }

  /// A collective's flow started into a mailbox, no faster than `rate` wire bytes/s when
  /// rate > 0 (SimGrid's Comm::set_rate bounds the flow's share); or between two hosts, where
  /// SimGrid ignores the rate (s4u_Comm.cpp do_start passes it to mailbox comms only) and the
  /// collective paces itself (run_task).
  s4u::CommPtr start_put(std::uint32_t mb, TaskId t, std::uint64_t bytes, double rate) {
    s4u::CommPtr comm = mailboxes_[mb]->put_init(payload_of(t), bytes);
    if (rate > 0) comm->set_rate(rate);
    comm->start();
    return comm;
  }
  s4u::CommPtr start_flow(const Endpoint& src, const Endpoint& dst, std::uint64_t bytes, double rate) {
    // The rate first: SimGrid 3.32 accepts set_rate only on a comm still INITED, and
    // sendto_init(from, to) already moves it past that state, so the end points come after.
    s4u::CommPtr comm = s4u::Comm::sendto_init();
    if (rate > 0) comm->set_rate(rate);
    comm->set_source(platform_.host(src))->set_destination(platform_.host(dst));
    comm->set_payload_size(bytes);
    comm->start();
    return comm;
  }

  /// The host timeline's per-task and per-sync vectors (nothing with host_model off).
  void put_host_record(std::string& out) const {
    put(out, std::uint8_t(host_.enabled() ? 1 : 0));
    if (!host_.enabled()) return;
    for (const auto* v : {&host_.issue_end_s, &host_.issue_start_s, &host_.wait_s,
                          &host_.sync_start_s, &host_.sync_end_s}) {
      put(out, std::uint64_t(v->size()));
      if (!v->empty())
        out.append(reinterpret_cast<const char*>(v->data()), v->size() * sizeof(double));
    }
  }

  std::string deadlock_message(std::size_t not_run) const {
    std::ostringstream os;
    os << "simulate: deadlock: " << not_run << " of " << g_.num_tasks()
       << " tasks did not finish; blocked:";
    int shown = 0;
    const auto& ranks = g_.simulated_ranks();
    for (std::size_t slot = 0; slot < actors_.size() && shown < 6; ++slot) {
      const auto& tasks = P_.slot_tasks[slot];
      const ActorState& a = actors_[slot];
      if (tasks.empty() || a.cursor >= tasks.size()) continue;
      const TaskId t = tasks[a.cursor];
      os << "\n  rank " << ranks[slot / kNumStreams] << " " << to_string(StreamId(slot % kNumStreams))
         << ": task " << t << " '" << g_.label(t) << "' "
         << (pending_[t] != 0 ? "waits for " + std::to_string(pending_[t]) + " predecessor(s)"
                              : std::string(g_.task(t).kind == TaskKind::Recv ||
                                                    g_.task(t).kind == TaskKind::Collective
                                                ? "waits for a message"
                                                : "is running"));
      ++shown;
    }
    if (shown == 0) {
      for (std::size_t id = 0; id < g_.num_tasks() && shown < 6; ++id)
        if (std::isnan(end_[id])) {
          os << "\n  task " << id << " '" << g_.label(TaskId(id)) << "' (rank " << g_.task(TaskId(id)).rank
             << ") never completed (a message nobody received?)";
          ++shown;
        }
    }
    return os.str();
  }

  const Prepared& P_;
  const ScheduleGraph& g_;
  const SimOptions& opt_;
  int progress_fd_;
  SimgridPlatform platform_;
  std::vector<s4u::Mailbox*> mailboxes_;
  std::vector<std::uint32_t> pending_;
  std::vector<double> start_, end_;
  std::vector<ActorState> actors_;
  HostThreads host_;
  std::uint64_t activities_ = 0;
  std::uint64_t done_ = 0;
  bool deadlock_ = false;
  std::exception_ptr error_;  ///< the first exception an actor caught, rethrown by execute()
  Clock::time_point wall0_, last_progress_;
};

}  // namespace

ExecutionRecord simulate(const ScheduleGraph& graph, const Scenario& scenario,
                         const SystemSpec& system, const CostModel& cost,
                         const SimOptions& options) {
  const auto t0 = Clock::now();
  Prepared P = prepare(graph, scenario, system, cost);
  const double prepare_s = seconds_since(t0);

  const std::string bytes = run_in_child([&](int progress_fd) {
    // SimGrid's own messages reach the user only when asked for; otherwise they stay in the
    // child's captured stderr (shown if the child dies).
    if (options.simgrid_log) ::dup2(progress_fd, 2);
    Run run(P, options, progress_fd);
    return run.execute();
  });

  ExecutionRecord rec;
  std::size_t pos = 0;
  const auto n = get<std::uint64_t>(bytes, pos);
  if (n != graph.num_tasks() || pos + 2 * n * sizeof(double) > bytes.size())
    throw SystemError("simulate: malformed result from the simulation process");
  rec.start_s.resize(n);
  rec.end_s.resize(n);
  std::memcpy(rec.start_s.data(), bytes.data() + pos, n * sizeof(double));
  pos += n * sizeof(double);
  std::memcpy(rec.end_s.data(), bytes.data() + pos, n * sizeof(double));
  pos += n * sizeof(double);
  rec.activities = get<std::uint64_t>(bytes, pos);
  SimStats stats;
  stats.actors = get<std::uint64_t>(bytes, pos);
  stats.hosts = get<std::uint64_t>(bytes, pos);
  stats.links = get<std::uint64_t>(bytes, pos);
  stats.routes = get<std::uint64_t>(bytes, pos);
  stats.simulate_wall_s = get<double>(bytes, pos);
  stats.child_peak_rss_bytes = get<std::int64_t>(bytes, pos);
  stats.prepare_wall_s = prepare_s;
  if (options.stats) *options.stats = stats;
  get_host_record(bytes, pos, rec);

  rec.measured = false;
  rec.executor = "simgrid-3.32";
  rec.device = system.name;
  rec.wall_time_s = seconds_since(t0);
  return rec;
}

}  // namespace trainsim::sim
