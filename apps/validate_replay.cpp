// validate's replay on this machine's device (apps/validate_replay.h), in trainsim-torch.
#include "apps/validate_replay.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <iostream>
#include <thread>

#include "hw_backend/replay.h"

namespace trainsim::cli {

namespace {

/// The 1-minute load average (/proc/loadavg), or -1 where unavailable.
double load_average() {
  std::ifstream f("/proc/loadavg");
  double v = -1;
  return (f >> v) ? v : -1;
}

/// Span of the rank's tasks in a record.
double rank_span_s(const ExecutionRecord& r, const std::vector<TaskId>& ids) {
  double lo = INFINITY, hi = -INFINITY;
  for (TaskId id : ids) lo = std::min(lo, r.start_s[id]), hi = std::max(hi, r.end_s[id]);
  return hi - lo;
}

}  // namespace

std::string default_replay_device() { return hw::cuda_available() ? "cuda" : "cpu"; }

ReplayMeasurement replay_for_validate(const PreparedRun& run, const std::string& device,
                                      int repeat) {
  const Scenario& sc = run.scenario;
  const ScheduleGraph& graph = run.graph;
  hw::ReplayOptions ro;
  ro.device = device;
  if (device == "cpu") ro.cpu_dtype = run.replay_dtype;
  ro.rank = hw::representative_rank(graph, sc, 0);
  ReplayMeasurement m;
  m.rank = static_cast<RankId>(ro.rank);
  const std::vector<TaskId> ids = graph.tasks_of_rank(m.rank);

  std::cerr << "trainsim validate: replaying rank " << m.rank << " on " << device << " ("
            << repeat << " measured replays after a warm-up)\n";
  m.load_before = load_average();
  (void)hw::replay(graph, sc, ro);  // warm-up: thread pools, allocator, first-call costs
  for (int i = 0; i < repeat; ++i) {
    ExecutionRecord r = hw::replay(graph, sc, ro);
    m.iteration_times_s.push_back(rank_span_s(r, ids));
    if (i == 0 || m.iteration_times_s.back() < rank_span_s(m.record, ids)) m.record = std::move(r);
  }
  m.load_after = load_average();
  m.notes.push_back("measured: the fastest of " + std::to_string(repeat) +
                    " replays after one warm-up replay");
  m.cores = std::max(1u, std::thread::hardware_concurrency());
  if (std::max(m.load_before, m.load_after) > double(m.cores))
    m.notes.push_back("warning: the machine was busy during the replays (1-minute load average " +
                      std::to_string(std::max(m.load_before, m.load_after)) + " on " +
                      std::to_string(m.cores) + " cores): measured times include other processes' "
                      "load, and the calibration's microbenchmarks may have seen a different one");
  return m;
}

}  // namespace trainsim::cli
