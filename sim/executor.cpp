#include "sim/executor.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
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

#include "sim/isolate.h"
#include "sim/platform.h"

namespace trainsim::sim {
namespace {

namespace s4u = simgrid::s4u;
using Clock = std::chrono::steady_clock;

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
/// Amount of the execution that holds a running collective's SMs (Run::run_task, the
/// Collective case): far more than any collective lasts (1e9 s at kHostSpeed); it is cancelled
/// when the collective ends.
constexpr double kSmHoldAmount = 1e18;

double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

/// What a communication task moves, from where to where, and the mailboxes it uses.
struct CommPlan {
  std::uint64_t bytes = 0;     ///< flow size
  double latency_s = 0;        ///< route latency (+ collective software latency)
  Endpoint src, dst;           ///< flow end points (for flows without a mailbox)
  std::uint32_t mb_out = kNone;  ///< mailbox this task puts to
  std::uint32_t mb_in = kNone;   ///< mailbox this task gets from
  bool flow = false;           ///< a direct flow src -> dst (copy, unsimulated peer)
  bool flow_in = false;        ///< collective: also a flow pred -> src (pred not simulated)
  Endpoint pred;               ///< collective: ring predecessor
  bool zero_time = false;      ///< collective of one rank
  /// Collective spanning several nodes with k > 1 members per node: NCCL runs one ring
  /// channel per NIC (rail), so besides the intra-node ring over NVLink, each member sends 1/k
  /// of the ring bytes to its same-position peer in the next node over its own NIC.
  bool has_rail = false;
  std::uint64_t rail_bytes = 0;
  Endpoint rail_dst, rail_pred;
  std::uint32_t rail_mb_out = kNone, rail_mb_in = kNone;
  bool rail_flow_out = false, rail_flow_in = false;
  /// Collective: the most its ring flow and its rail flow may carry, in wire bytes/s (NCCL's
  /// bus bandwidth of the chosen algorithm/protocol, models/perf/nccl_model.h, split between the
  /// two in proportion to their bytes); 0: no cap (the links alone set the rate).
  double rate_bytes_per_s = 0, rail_rate_bytes_per_s = 0;
  /// Collective: share of the rank's GPU its NCCL kernel occupies while it runs (its CTAs'
  /// SMs, CostModel::nccl_sm_share); compute on the rank gets the rest. 0: none.
  double sm_share = 0;
};

/// Everything the child needs, computed in the parent (errors there keep their type).
struct Prepared {
  const ScheduleGraph* g = nullptr;
  std::unique_ptr<PlatformModel> platform;
  std::vector<double> op_amount;             ///< per op: exec amount (kHostSpeed units) or NaN
  std::vector<std::uint32_t> pending;        ///< per task: same-rank predecessors
  std::vector<std::uint32_t> slot_of_task;   ///< per task: actor slot
  std::vector<std::uint32_t> comm_of_task;   ///< per task: index into comms or kNone
  std::vector<CommPlan> comms;
  std::vector<std::vector<TaskId>> slot_tasks;  ///< per slot (rank index x stream), program order
  std::uint32_t num_mailboxes = 0;
  std::int64_t gpus_per_node = 1;
};

std::string task_desc(const ScheduleGraph& g, TaskId id) {
  const Task& t = g.task(id);
  return "task " + std::to_string(id) + " '" + g.label(id) + "' (rank " + std::to_string(t.rank) +
         ", stream " + to_string(t.stream) + ")";
}

Prepared prepare(const ScheduleGraph& g, const Scenario& scenario, const SystemSpec& system,
                 const CostModel& cost) {
  Prepared P;
  P.g = &g;
  const std::int64_t gpn =
      scenario.cluster.gpus_per_node > 0 ? scenario.cluster.gpus_per_node : system.gpus_per_node;
  P.gpus_per_node = gpn;
  P.platform = std::make_unique<PlatformModel>(system, scenario.cluster.nodes, gpn, cost);
  PlatformModel& plat = *P.platform;
  const std::uint64_t world = std::uint64_t(scenario.cluster.nodes) * std::uint64_t(gpn);
  const std::size_t n = g.num_tasks();
  if (boost::num_vertices(g.dependencies()) != n)
    throw std::logic_error("simulate: the schedule graph is not finalized");

  const auto& ranks = g.simulated_ranks();
  for (RankId r : ranks) {
    if (r >= world)
      throw std::logic_error("simulate: rank " + std::to_string(r) + " outside the cluster of " +
                             std::to_string(scenario.cluster.nodes) + " nodes x " +
                             std::to_string(gpn) + " GPUs");
    plat.use(Endpoint::gpu(r));  // every simulated rank's actors live on its GPU host
  }
  auto simulated = [&](std::int64_t r) {
    return r >= 0 && g.rank_index(RankId(r)) != kNone;
  };

  // Durations of compute ops, once per op descriptor.
  P.op_amount.assign(g.ops().size(), kNaN);
  std::vector<char> op_needed(g.ops().size(), 0);
  for (const Task& t : g.tasks())
    if (t.kind == TaskKind::Compute || t.kind == TaskKind::OptimizerGpu ||
        t.kind == TaskKind::OptimizerCpu)
      op_needed[t.op] = 1;
  for (std::size_t i = 0; i < g.ops().size(); ++i) {
    if (!op_needed[i]) continue;
    const double d = cost.compute_time_s(g.ops()[i]);
    if (!(d >= 0) || !std::isfinite(d))
      throw std::logic_error("simulate: CostModel::compute_time_s gave " + std::to_string(d) +
                             " s for op " + to_string(g.ops()[i].kind));
    P.op_amount[i] = d * kHostSpeed;
  }

  // Actor slots and program order per (rank, stream).
  P.slot_of_task.resize(n);
  P.slot_tasks.assign(ranks.size() * kNumStreams, {});
  for (std::size_t ri = 0; ri < ranks.size(); ++ri)
    for (TaskId id : g.tasks_of_rank(ranks[ri])) {
      const std::uint32_t slot = std::uint32_t(ri * kNumStreams + int(g.task(id).stream));
      P.slot_of_task[id] = slot;
      P.slot_tasks[slot].push_back(id);
    }

  // Dependencies: same-rank edges are waited on; cross-rank edges must be Send -> Recv of one
  // message (satisfied by the message itself).
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
      if (tv.kind != TaskKind::Send || tu.kind != TaskKind::Recv || tv.match != tu.match ||
          tv.peer != std::int32_t(tu.rank) || tu.peer != std::int32_t(tv.rank))
        throw std::logic_error("simulate: cross-rank dependency " + task_desc(g, v) + " -> " +
                               task_desc(g, u) +
                               " is not a Send -> Recv of one message (the only cross-rank edges "
                               "the executor supports)");
    }
  }

  // Communication plans.
  std::map<std::tuple<int, std::uint32_t, std::uint32_t, std::uint32_t>, std::uint32_t> mailbox_ids;
  auto mailbox = [&](int kind, std::uint32_t a, std::uint32_t b, std::uint32_t c) {
    auto [it, inserted] = mailbox_ids.emplace(std::make_tuple(kind, a, b, c), P.num_mailboxes);
    if (inserted) ++P.num_mailboxes;
    return it->second;
  };
  P.comm_of_task.assign(n, kNone);
  auto node_of = [&](RankId r) { return std::uint32_t(r / std::uint64_t(gpn)); };
  for (TaskId id = 0; id < n; ++id) {
    const Task& t = g.task(id);
    const OpDesc& op = g.op(id);
    if (t.kind == TaskKind::Compute || t.kind == TaskKind::OptimizerGpu ||
        t.kind == TaskKind::OptimizerCpu) {
      if (t.kind == TaskKind::OptimizerCpu) plat.use(Endpoint::cpu(node_of(t.rank)));
      continue;
    }
    CommPlan c;
    if (op.bytes < 0)
      throw std::logic_error("simulate: negative byte count in " + task_desc(g, id));
    const Endpoint me = Endpoint::gpu(t.rank);
    switch (t.kind) {
      case TaskKind::CopyH2D:
      case TaskKind::CopyD2H: {
        const Endpoint cpu = Endpoint::cpu(node_of(t.rank));
        c.src = t.kind == TaskKind::CopyH2D ? cpu : me;
        c.dst = t.kind == TaskKind::CopyH2D ? me : cpu;
        c.bytes = std::uint64_t(op.bytes);
        c.latency_s = plat.route(c.src, c.dst).latency_s;
        c.flow = true;
        break;
      }
      case TaskKind::Send:
      case TaskKind::Recv: {
        if (t.peer < 0 || std::uint64_t(t.peer) >= world || RankId(t.peer) == t.rank)
          throw std::logic_error("simulate: bad peer " + std::to_string(t.peer) + " in " +
                                 task_desc(g, id));
        const Endpoint peer = Endpoint::gpu(RankId(t.peer));
        const bool send = t.kind == TaskKind::Send;
        c.src = send ? me : peer;
        c.dst = send ? peer : me;
        c.bytes = std::uint64_t(op.bytes);
        plat.route(c.src, c.dst);
        // NCCL send/recv: launch latency + one step (CostModel, from NCCL's tuning model, whose
        // per-step figure includes the link latency).
        c.latency_s = cost.collective_latency_s(OpKind::SendRecv, 2,
                                                node_of(c.src.index) == node_of(c.dst.index));
        if (simulated(t.peer)) {
          const std::uint32_t mb = mailbox(0, c.src.index, c.dst.index, 0);
          (send ? c.mb_out : c.mb_in) = mb;
        } else {
          c.flow = true;  // folded: the peer's side is not simulated, its host still is an end
        }
        break;
      }
      case TaskKind::Collective: {
        if (t.group == kNone || t.group >= g.groups().size())
          throw std::logic_error("simulate: collective without a group: " + task_desc(g, id));
        const CommGroup& grp = g.group(t.group);
        const std::int64_t size = std::int64_t(grp.ranks.size());
        if (size != op.group_size)
          throw std::logic_error("simulate: " + task_desc(g, id) + " has op.group_size " +
                                 std::to_string(op.group_size) + " but its group has " +
                                 std::to_string(size) + " ranks");
        auto pos = std::find(grp.ranks.begin(), grp.ranks.end(), t.rank);
        if (pos == grp.ranks.end())
          throw std::logic_error("simulate: rank " + std::to_string(t.rank) +
                                 " is not in the group of " + task_desc(g, id));
        if (size == 1) {
          c.zero_time = true;
          break;
        }
        const std::size_t i = std::size_t(pos - grp.ranks.begin());
        const RankId succ = grp.ranks[(i + 1) % grp.ranks.size()];
        const RankId pred = grp.ranks[(i + grp.ranks.size() - 1) % grp.ranks.size()];
        bool intra_node = true;
        for (RankId r : grp.ranks) intra_node = intra_node && node_of(r) == node_of(t.rank);
        // Ring implementation (nccl-tests doc/PERFORMANCE.md): every rank sends
        // ring_bytes_per_rank to its successor. The latency is the cost model's (NCCL launch
        // + steps x per-step latency, NCCL's figure that includes the link latency), so the
        // route's own latency is not added again.
        const double ring_bytes = CostModel::ring_bytes_per_rank(op.kind, double(op.bytes), size);
        c.bytes = std::uint64_t(std::llround(ring_bytes));
        // Members per node, in group order. With several nodes and k > 1 members on each, the
        // ring is hierarchical (NCCL's multi-channel rings, one per NIC; nccl-tests
        // PERFORMANCE.md bus bandwidth): per member (k-1)/k of the ring bytes stay on NVLink
        // and 1/k crosses the fabric on the member's own NIC.
        std::map<std::uint32_t, std::vector<RankId>> by_node;
        for (RankId r : grp.ranks) by_node[node_of(r)].push_back(r);
        const std::size_t k = by_node.begin()->second.size();
        bool uniform = true;
        for (const auto& [node, members] : by_node) uniform = uniform && members.size() == k;
        RankId succ_r = succ, pred_r = pred;
        if (by_node.size() > 1 && k > 1 && uniform) {
          const auto& local = by_node[node_of(t.rank)];
          const std::size_t j = std::size_t(std::find(local.begin(), local.end(), t.rank) - local.begin());
          succ_r = local[(j + 1) % k];
          pred_r = local[(j + k - 1) % k];
          c.bytes = std::uint64_t(std::llround(ring_bytes * double(k - 1) / double(k)));
          if (op.kind == OpKind::AllToAll)  // (k-1)/n to the node's peers over NVLink
            c.bytes = std::uint64_t(std::llround(double(op.bytes) * double(k - 1) / double(size)));
          std::vector<std::uint32_t> nodes;
          for (const auto& [node, members] : by_node) nodes.push_back(node);
          const std::size_t ni = std::size_t(std::find(nodes.begin(), nodes.end(), node_of(t.rank)) - nodes.begin());
          const RankId rail_succ = by_node[nodes[(ni + 1) % nodes.size()]][j];
          const RankId rail_pred = by_node[nodes[(ni + nodes.size() - 1) % nodes.size()]][j];
          c.has_rail = true;
          c.rail_bytes = std::uint64_t(std::llround(ring_bytes / double(k)));
          // All-to-all: (n-k)/n of the buffer goes to other nodes, each GPU over its own NIC
          // (rail-optimized; the fat tree carries it to every node at full bisection).
          if (op.kind == OpKind::AllToAll)
            c.rail_bytes =
                std::uint64_t(std::llround(double(op.bytes) * double(size - std::int64_t(k)) / double(size)));
          c.rail_dst = Endpoint::gpu(rail_succ);
          c.rail_pred = Endpoint::gpu(rail_pred);
          plat.route(me, c.rail_dst);
          const std::uint32_t stream = std::uint32_t(t.stream);
          if (simulated(rail_succ)) c.rail_mb_out = mailbox(3, t.group, stream, rail_succ);
          else c.rail_flow_out = true;
          if (simulated(rail_pred)) {
            c.rail_mb_in = mailbox(3, t.group, stream, t.rank);
          } else {
            c.rail_flow_in = true;
            plat.route(c.rail_pred, me);
          }
        }
        c.src = me;
        c.dst = Endpoint::gpu(succ_r);
        plat.route(me, c.dst);
        if (op.kind == OpKind::AllToAll) {
          c.latency_s = cost.collective_latency_s(op.kind, size, intra_node);
        } else {
          // NCCL's algorithm and protocol for this size and group (models/perf/nccl_model.h): its
          // latency, and the protocol's wire format on the links (LL and LL128 carry flags
          // with the data). A tree all-reduce moves as many bytes per NIC as the ring (2S
          // per node, up and down the two binary trees), so the ring's flows carry it too.
          const NcclChoice nccl = cost.nccl_collective(op.kind, double(op.bytes), size,
                                                       std::int64_t(by_node.size()));
          c.latency_s = nccl.latency_s;
          c.sm_share = cost.nccl_sm_share(nccl);
          // No faster than NCCL's bus bandwidth for the pair: the ring bytes of this rank in
          // ring_bytes / bus seconds, the ring and the rail flows each carrying their share.
          const double wire_rate = nccl.bus_bw_bytes_per_s * nccl.wire_factor;
          const double share = c.has_rail ? double(k - 1) / double(k) : 1.0;
          c.rate_bytes_per_s = wire_rate * share;
          if (c.has_rail) c.rail_rate_bytes_per_s = wire_rate / double(k);
          c.bytes = std::uint64_t(std::llround(double(c.bytes) * nccl.wire_factor));
          c.rail_bytes = std::uint64_t(std::llround(double(c.rail_bytes) * nccl.wire_factor));
          if (is_nvls(nccl.algo)) {
            // NVLink SHARP: the switch reduces and multicasts, so a rank moves its NVLS
            // traffic (nccl_traffic), not the ring's; each flow paced to end when NCCL's
            // algorithm bandwidth would (the ring bytes at its bus bandwidth).
            const NcclTraffic tr = nccl_traffic(nccl, op.kind, double(op.bytes), size,
                                                std::int64_t(by_node.size()));
            const double bw_s = ring_bytes / nccl.bus_bw_bytes_per_s;
            const double nvlink_bytes = c.has_rail ? tr.nvlink_bytes : tr.nvlink_bytes + tr.nic_bytes;
            c.bytes = std::uint64_t(std::llround(nvlink_bytes));
            c.rate_bytes_per_s = nvlink_bytes / bw_s;
            if (c.has_rail) {
              c.rail_bytes = std::uint64_t(std::llround(tr.nic_bytes));
              c.rail_rate_bytes_per_s = tr.nic_bytes / bw_s;
            }
          }
        }
        const std::uint32_t stream = std::uint32_t(t.stream);
        if (simulated(succ_r)) c.mb_out = mailbox(1, t.group, stream, succ_r);
        else c.flow = true;
        c.pred = Endpoint::gpu(pred_r);
        if (simulated(pred_r)) {
          c.mb_in = mailbox(1, t.group, stream, t.rank);
        } else {
          // Folded: the predecessor stands for a replica of this rank; its flow into this rank
          // still loads this rank's links (as it would unfolded), so it is simulated too.
          c.flow_in = true;
          plat.route(c.pred, me);
        }
        break;
      }
      default:
        throw std::logic_error("simulate: unexpected task kind in " + task_desc(g, id));
    }
    P.comm_of_task[id] = std::uint32_t(P.comms.size());
    P.comms.push_back(c);
  }
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
  if (pos + sizeof(T) > in.size()) throw std::runtime_error("simulate: truncated result");
  T v;
  std::memcpy(&v, in.data() + pos, sizeof v);
  pos += sizeof v;
  return v;
}

class Run {
 public:
  Run(const Prepared& p, const SimOptions& opt, int progress_fd)
      : P_(p), g_(*p.g), opt_(opt), progress_fd_(progress_fd) {}

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
    s4u::Engine::on_deadlock_cb([this] { deadlock_ = true; });
    wall0_ = Clock::now();
    last_progress_ = wall0_;
    engine.run();

    if (!error_.empty()) throw std::runtime_error(error_);
    std::size_t not_run = 0;
    for (std::size_t id = 0; id < n; ++id) not_run += std::isnan(end_[id]) ? 1 : 0;
    if (not_run != 0 || deadlock_) throw std::runtime_error(deadlock_message(not_run));

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
          if (pending_[t] != 0) throw std::logic_error("woken before the dependencies were done");
        }
        start_[t] = s4u::Engine::get_clock();
        run_task(t);
      }
    } catch (const std::exception& e) {
      // Keep the first error and end this actor (an exception escaping an actor would abort
      // SimGrid); the actors that depend on it block and SimGrid ends the run as a deadlock,
      // after which execute() reports this error.
      if (error_.empty()) error_ = e.what();
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
    release(t);
  }

  void sleep(double seconds) {
    if (seconds > 0) {
      ++activities_;
      s4u::this_actor::sleep_for(seconds);
    }
  }

  void check_match(TaskId sender, TaskId receiver) {
    if (g_.task(sender).match != g_.task(receiver).match)
      throw std::runtime_error("simulate: message mismatch: " + task_desc(g_, receiver) +
                               " expects match " + std::to_string(g_.task(receiver).match) +
                               " but received " + task_desc(g_, sender) + " (match " +
                               std::to_string(g_.task(sender).match) +
                               "); messages of one rank pair must be posted and received in the "
                               "same order");
  }

  void run_task(TaskId t) {
    const Task& task = g_.task(t);
    switch (task.kind) {
      case TaskKind::Compute:
      case TaskKind::OptimizerGpu: {
        ++activities_;
        s4u::this_actor::execute(P_.op_amount[task.op]);
        finish(t);
        return;
      }
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
      case TaskKind::Send:
        ++activities_;
        if (c.mb_out != kNone) {
          // Posted and left: the stream goes on, and the receiver records this task's end and
          // releases its successors on other streams (they wait for the delivery) when the
          // message is in.
          mailboxes_[c.mb_out]->put_init(payload_of(t), c.bytes)->detach();
          release(t, Successors::SameStream);
        } else {
          // The peer is not simulated: a helper actor carries the flow to its host.
          s4u::Host* src = platform_.host(c.src);
          s4u::Host* dst = platform_.host(c.dst);
          const std::uint64_t bytes = c.bytes;
          const double latency = c.latency_s;
          s4u::Actor::create("send-" + std::to_string(t), src, [this, t, src, dst, bytes, latency] {
            s4u::Comm::sendto(src, dst, bytes);
            sleep(latency);
            end_[t] = s4u::Engine::get_clock();
            release(t, Successors::OtherStreams);
          });
          release(t, Successors::SameStream);
        }
        return;
      case TaskKind::Recv: {
        ++activities_;
        if (c.mb_in != kNone) {
          void* data = nullptr;
          mailboxes_[c.mb_in]->get_async<void>(&data)->wait();
          const TaskId sender = task_of(data);
          check_match(sender, t);
          sleep(c.latency_s);
          end_[sender] = s4u::Engine::get_clock();
          release(sender, Successors::OtherStreams);
        } else {
          s4u::Comm::sendto(platform_.host(c.src), platform_.host(c.dst), c.bytes);
          sleep(c.latency_s);
        }
        finish(t);
        return;
      }
      case TaskKind::Collective: {
        if (c.zero_time) {
          finish(t);
          return;
        }
        // The NCCL kernel holds its SMs from launch to the end: an execution on this rank's
        // GPU bounded to that share of its speed, so that compute running beside it (SimGrid
        // shares a host max-min fairly) gets only the rest; cancelled when the collective
        // ends.
        s4u::ExecPtr sms;
        if (c.sm_share > 0) {
          ++activities_;
          sms = s4u::Exec::init();
          sms->set_flops_amount(kSmHoldAmount)->set_bound(c.sm_share * kHostSpeed);
          sms->set_host(s4u::this_actor::get_host())->start();
        }
        sleep(c.latency_s);
        // SimGrid bounds a mailbox comm's rate (set_rate), but a host-to-host comm
        // (sendto_init, the flows into and out of non-simulated peers of a folded rank) starts
        // without it: such a flow runs at what its links give. Its rate bound is kept by
        // ending the collective no earlier than its slowest flow would at that rate.
        const double flows_start_s = s4u::Engine::get_clock();
        double paced_s = 0;
        if (c.rate_bytes_per_s > 0 && (c.mb_out == kNone || c.flow_in))
          paced_s = double(c.bytes) / c.rate_bytes_per_s;
        if (c.has_rail && c.rail_rate_bytes_per_s > 0 &&
            (c.rail_mb_out == kNone || c.rail_flow_in))
          paced_s = std::max(paced_s, double(c.rail_bytes) / c.rail_rate_bytes_per_s);
        ++activities_;
        s4u::CommPtr out = c.mb_out != kNone
                               ? start_put(c.mb_out, t, c.bytes, c.rate_bytes_per_s)
                               : start_flow(c.src, c.dst, c.bytes, c.rate_bytes_per_s);
        void* data = nullptr;
        s4u::CommPtr in;
        if (c.mb_in != kNone) {
          in = mailboxes_[c.mb_in]->get_async<void>(&data);
        } else if (c.flow_in) {
          ++activities_;
          in = start_flow(c.pred, c.src, c.bytes, c.rate_bytes_per_s);
        }
        s4u::CommPtr rail_out, rail_in;
        void* rail_data = nullptr;
        if (c.has_rail) {
          ++activities_;
          rail_out = c.rail_mb_out != kNone
                         ? start_put(c.rail_mb_out, t, c.rail_bytes, c.rail_rate_bytes_per_s)
                         : start_flow(c.src, c.rail_dst, c.rail_bytes, c.rail_rate_bytes_per_s);
          if (c.rail_mb_in != kNone) {
            rail_in = mailboxes_[c.rail_mb_in]->get_async<void>(&rail_data);
          } else if (c.rail_flow_in) {
            ++activities_;
            rail_in = start_flow(c.rail_pred, c.src, c.rail_bytes, c.rail_rate_bytes_per_s);
          }
        }
        out->wait();
        if (in) {
          in->wait();
          if (c.mb_in != kNone) check_match(task_of(data), t);
        }
        if (rail_out) rail_out->wait();
        if (rail_in) {
          rail_in->wait();
          if (c.rail_mb_in != kNone) check_match(task_of(rail_data), t);
        }
        sleep(flows_start_s + paced_s - s4u::Engine::get_clock());
        if (sms) sms->cancel();
        finish(t);
        return;
      }
      default:
        throw std::logic_error("simulate: unexpected task kind in " + task_desc(g_, t));
    }
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
  std::uint64_t activities_ = 0;
  std::uint64_t done_ = 0;
  bool deadlock_ = false;
  std::string error_;
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
    throw std::runtime_error("simulate: malformed result from the simulation process");
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

  rec.measured = false;
  rec.executor = "simgrid-3.32";
  rec.device = system.name;
  rec.wall_time_s = seconds_since(t0);
  return rec;
}

}  // namespace trainsim::sim
