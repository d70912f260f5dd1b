// The simulator's executor: plays a schedule graph on the SimGrid platform of platform.h and
// reports when every task started and ended (an ExecutionRecord, the same record the replay
// backend produces from hardware).
//
// How tasks become SimGrid activities:
//  - one actor per (simulated rank, stream) that has tasks; it runs its tasks in program
//    order and, before starting one, waits until the task's same-rank predecessors in the
//    graph are done (a per-actor semaphore, woken only for the task it waits on);
//  - Compute / OptimizerGpu: an exec on the rank's GPU host lasting CostModel::compute_time_s;
//    OptimizerCpu: the same on the node's CPU host (one core per GPU of the node);
//  - CopyH2D / CopyD2H: the PCIe route's latency, then a flow of op.bytes between the node's
//    CPU host and the GPU host;
//  - Send: posts the message and its stream goes on (non-blocking: the next task of its queue
//    may start); its end is when the message has arrived, and only then may its successors on
//    the rank's other streams start (a dependency on a send waits for the delivery, as a CUDA
//    stream waiting on an NCCL send). Recv: blocks until the message
//    from its peer is there (messages of one (src, dst) pair match in FIFO order; the match id
//    is checked), plus collective_latency_s(SendRecv) (NCCL launch + one step);
//  - Collective: this rank's flows from models/system/collective_flows.h (the system layer
//    maps the collective to NCCL's algorithm and protocol, its latency, and point-to-point
//    flows: the ring, or the hierarchical ring's NVLink ring and NIC rail, NVLS traffic, each
//    flow's rate bound): the latency, then each flow to its successor while receiving the
//    same from its predecessor when that rank is simulated too (so members synchronize),
//    while the NCCL kernel holds its share of the rank's SMs. In a folded graph, a successor
//    that is not simulated is still the flow's destination host, and a predecessor that is
//    not simulated still sends its flow into this rank's links (replicas are identical, so its
//    flow starts when this rank's does); such flows keep their rate bound by the collective
//    ending no earlier than folded_min_time_s. Group size 1 takes no time.
//  Latencies are paid by the executor (a sleep), not by SimGrid's links (see platform.h).
//
// Every call runs SimGrid in a forked child process (sim/isolate.h), so simulate() can be
// called any number of times in one process. The result is deterministic: the same graph
// gives a byte-identical record (wall_time_s aside).
#pragma once

#include <cstdint>

#include "models/perf/cost_model.h"
#include "models/graph/execution_record.h"
#include "models/hardware/hardware.h"
#include "models/input/scenario.h"
#include "models/graph/schedule_graph.h"

namespace trainsim::sim {

/// Facts about one simulation run, for benchmarks and diagnostics.
struct SimStats {
  std::uint64_t actors = 0;          ///< SimGrid actors (one per simulated rank and used stream)
  std::uint64_t hosts = 0;           ///< SimGrid hosts built
  std::uint64_t links = 0;           ///< split-duplex links built
  std::uint64_t routes = 0;          ///< explicit routes built
  double prepare_wall_s = 0;         ///< parent: graph checks, durations, routes
  double simulate_wall_s = 0;        ///< child: platform build + SimGrid run
  std::int64_t child_peak_rss_bytes = 0;  ///< VmHWM of the simulation process
};

struct SimOptions {
  /// Progress line on stderr every ~2 s of wall time (tasks done, simulated time).
  bool progress = false;
  /// Let SimGrid's own warnings through to stderr (silenced by default).
  bool simgrid_log = false;
  /// Filled when not null.
  SimStats* stats = nullptr;
};

/// Simulates one iteration of `graph` (finalized) on `system` with the cluster size of
/// `scenario.cluster` (nodes; gpus_per_node, 0 meaning the system's). Returns start_s/end_s
/// per task id (NaN for tasks that did not run), executor "simgrid-3.32", device
/// = system.name, the number of SimGrid activities and the wall time.
///
/// Throws InputError for a cluster the platform cannot hold (e.g. too many NICs for the
/// system's fat tree), std::logic_error for a graph that breaks the executor's invariants
/// (cross-rank edges other than Send -> Recv, a rank outside the cluster, a collective whose
/// group lacks its rank), std::runtime_error for a deadlock (naming blocked tasks by label),
/// mismatched messages, or a simulation process that failed.
ExecutionRecord simulate(const ScheduleGraph& graph, const Scenario& scenario,
                         const SystemSpec& system, const CostModel& cost,
                         const SimOptions& options = {});

}  // namespace trainsim::sim
