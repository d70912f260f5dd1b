// trainsim validate: simulate a scenario with a calibration profile, replay the same schedule
// graph on the local device, align the two executions task by task and report the errors
// (validation/compare.h) as JSON and as a self-contained HTML report.
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iostream>
#include <string>
#include <thread>

#include "apps/output_file.h"
#include "apps/verbs.h"
#include "models/run.h"
#include "hw_backend/replay.h"
#include "models/memory_timeline.h"
#include "sim/executor.h"
#include "validation/compare.h"

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

int validate_main(const ValidateArgs& args) {
  const std::string device = args.device.empty() ? (hw::cuda_available() ? "cuda" : "cpu") : args.device;
  const bool cpu = device == "cpu";
  check_distinct_paths({{"scenario", args.scenario}, {"--calibration", args.calibration}},
                       {{"--json", args.json}, {"--report", args.report}});
  OutputFile json_file(args.json, "--json"), report_file(args.report, "--report");

  // ---- one graph (models/run.h: the local device and precision substitutions), two executors
  RunRequest req;
  req.purpose = RunPurpose::Validate;
  req.scenario_path = args.scenario;
  req.overrides = args.overrides;
  req.calibration_path = args.calibration;
  req.device = device;
  req.force = args.force;
  const PreparedRun run = prepare_run(req);
  const Scenario& sc = run.scenario;
  const ScheduleGraph& graph = run.graph;
  const SystemSpec& system = run.system;
  std::vector<std::string> notes = run.notes;
  hw::ReplayOptions ro;
  ro.device = device;
  if (cpu) ro.cpu_dtype = run.replay_dtype;
  ro.rank = hw::representative_rank(graph, sc, 0);
  const RankId rank = static_cast<RankId>(ro.rank);
  const std::vector<TaskId> ids = graph.tasks_of_rank(rank);

  const ExecutionRecord simulated = sim::simulate(graph, sc, system, run.cost_model());

  std::cerr << "trainsim validate: replaying rank " << rank << " on " << device << " ("
            << args.repeat << " measured replays after a warm-up)\n";
  const double load_before = load_average();
  (void)hw::replay(graph, sc, ro);  // warm-up: thread pools, allocator, first-call costs
  ExecutionRecord measured;
  std::vector<double> replay_times;
  for (int i = 0; i < args.repeat; ++i) {
    ExecutionRecord r = hw::replay(graph, sc, ro);
    replay_times.push_back(rank_span_s(r, ids));
    if (i == 0 || replay_times.back() < rank_span_s(measured, ids)) measured = std::move(r);
  }
  const double load_after = load_average();
  notes.push_back("measured: the fastest of " + std::to_string(args.repeat) +
                  " replays after one warm-up replay");
  const unsigned cores = std::max(1u, std::thread::hardware_concurrency());
  if (std::max(load_before, load_after) > double(cores))
    notes.push_back("warning: the machine was busy during the replays (1-minute load average " +
                    std::to_string(std::max(load_before, load_after)) + " on " +
                    std::to_string(cores) + " cores): measured times include other processes' "
                    "load, and the calibration's microbenchmarks may have seen a different one");
  for (const std::string& n : measured.notes) notes.push_back("replay: " + n);

  // ---- memory: the model's peak of the rank vs the allocator's measured peak
  const MemoryTimeline memory =
      build_memory_timeline(graph, simulated, sc.cluster.gpus_per_node);
  validation::MemoryFigures mem;
  const MemorySeries& series = memory.gpu_of(rank);
  mem.simulated_peak_bytes = series.peak_bytes;
  mem.simulated_by_category = series.peak_by_category;
  mem.measured_peak_bytes = measured.peak_allocated_bytes;
  if (mem.measured_peak_bytes <= 0)
    throw std::runtime_error("validate: the replay reported no memory peak");
  if (cpu && sc.zero.offload_optimizer.enabled)
    notes.push_back("offload on the CPU device: the model's host memory is not added to the "
                    "device peak; the measured peak counts all CPU tensors");

  const validation::Comparison cmp =
      validation::compare_records(graph, rank, simulated, measured, mem);
  nlohmann::json context = {{"scenario", sc.name},
                            {"scenario_file", args.scenario},
                            {"device", measured.device},
                            {"system", system.name + " (" + system.gpu.name + ")"},
                            {"rank", rank},
                            {"calibration", run.calibration_source},
                            {"simulator", simulated.executor},
                            {"replay", measured.executor},
                            {"precision", to_string(sc.parallel.precision)}};
  nlohmann::json out = validation::comparison_json(cmp);
  for (auto it = context.begin(); it != context.end(); ++it) out[it.key()] = *it;
  out["replay_iteration_times_s"] = replay_times;
  out["load_average_1min"] = {{"before", load_before}, {"after", load_after}};
  out["cores"] = cores;
  out["notes"] = notes;

  if (json_file) {
    json_file.stream() << out.dump(2) << "\n";
    json_file.commit();
  }
  if (report_file) {
    report_file.stream() << validation::html_report(graph, cmp, simulated, measured, context, notes);
    report_file.commit();
  }
  char line[512];
  std::snprintf(line, sizeof line,
                "%s on %s: iteration time simulated %.4f s, measured %.4f s (error %+.1f%%); "
                "peak memory simulated %.2f MiB, measured %.2f MiB (error %+.1f%%)\n",
                sc.name.c_str(), measured.device.c_str(), cmp.simulated_iteration_s,
                cmp.measured_iteration_s, 100 * cmp.iteration_time_error(),
                double(mem.simulated_peak_bytes) / 1048576.0,
                double(mem.measured_peak_bytes) / 1048576.0, 100 * cmp.peak_memory_error());
  std::cout << line;
  std::cout.flush();
  return 0;
}

}  // namespace trainsim::cli
