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

#include "apps/verbs.h"
#include "hw_backend/replay.h"
#include "models/calibration.h"
#include "models/cost_model.h"
#include "models/graph_builder.h"
#include "models/hardware.h"
#include "models/local_device.h"
#include "models/memory_timeline.h"
#include "models/scenario.h"
#include "sim/executor.h"
#include "validation/compare.h"

namespace trainsim::cli {

namespace {

void write_file(const std::string& path, const std::string& text, const char* flag) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  if (!f)
    throw InputError(std::string(flag) + " '" + path + "': cannot write the file (" +
                     std::strerror(errno) + ")");
  f << text;
  if (!f) throw std::runtime_error(std::string(flag) + " '" + path + "': write failed");
}

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
  Scenario sc = load_scenario(args.scenario, args.overrides);
  const std::string device = args.device.empty() ? (hw::cuda_available() ? "cuda" : "cpu") : args.device;
  const bool cpu = device == "cpu";
  std::vector<std::string> notes;

  // ---- profile and system
  if (args.calibration.empty() && (cpu || sc.cluster.system == kLocalSystemName))
    throw InputError("validate: --device " + device + " needs --calibration PROFILE.json from "
                     "`trainsim calibrate --device " + device + "` (the shipped profiles "
                     "describe datacenter GPUs)");
  CalibrationProfile profile;
  std::string calibration_source;
  if (args.calibration.empty()) {
    profile = default_calibration(find_system(sc.cluster.system).gpu.name);
    calibration_source = "default profile for " + profile.device + " (" + profile.source + ")";
  } else {
    profile = load_calibration(args.calibration);
    calibration_source = args.calibration + " (" + profile.device + ", " + profile.source + ")";
  }
  SystemSpec system;
  if (cpu || sc.cluster.system == kLocalSystemName) {
    if (sc.cluster.system != kLocalSystemName) {
      notes.push_back("cluster.system " + sc.cluster.system +
                      " was replaced by `local` (this machine's device, figures from the "
                      "profile) so that the simulation models the device the replay runs on; "
                      "each of the " + std::to_string(sc.world_size()) +
                      " ranks is a one-device node");
      const std::int64_t world = sc.world_size();
      sc.cluster.system = kLocalSystemName;
      sc.cluster.gpus_per_node = 1;
      sc.cluster.nodes = world;
    }
    system = local_system(profile, args.calibration);
  } else {
    system = find_system(sc.cluster.system);
  }

  // ---- precision: the CPU replay runs fp32 or bf16 (hw_backend ReplayOptions::cpu_dtype)
  hw::ReplayOptions ro;
  ro.device = device;
  if (cpu) {
    ro.cpu_dtype = profile.precision.empty() ? "fp32" : profile.precision;
    if (ro.cpu_dtype != "fp32" && ro.cpu_dtype != "bf16")
      throw InputError(args.calibration + ": field 'precision' = " + profile.precision +
                       ": the CPU replay runs fp32 or bf16");
    const Precision want = ro.cpu_dtype == "fp32" ? Precision::FP32 : Precision::BF16;
    if (sc.parallel.precision != want) {
      notes.push_back(std::string("parallel.precision ") + to_string(sc.parallel.precision) +
                      " was replaced by " + to_string(want) +
                      ": the CPU replay runs the profile's precision (" + ro.cpu_dtype +
                      "), and the simulation must model the same element sizes");
      sc.parallel.precision = want;
    }
  }

  // ---- one graph, two executors
  BuildOptions build;
  build.fold = should_fold(sc);
  build.calibration = &profile;
  const ScheduleGraph graph = build_schedule_graph(sc, system, build);
  ro.rank = hw::representative_rank(graph, sc, 0);
  const RankId rank = static_cast<RankId>(ro.rank);
  const std::vector<TaskId> ids = graph.tasks_of_rank(rank);

  const CostModel cost(system, profile);
  const ExecutionRecord simulated = sim::simulate(graph, sc, system, cost);

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
                            {"calibration", calibration_source},
                            {"simulator", simulated.executor},
                            {"replay", measured.executor},
                            {"precision", to_string(sc.parallel.precision)}};
  nlohmann::json out = validation::comparison_json(cmp);
  for (auto it = context.begin(); it != context.end(); ++it) out[it.key()] = *it;
  out["replay_iteration_times_s"] = replay_times;
  out["load_average_1min"] = {{"before", load_before}, {"after", load_after}};
  out["cores"] = cores;
  out["notes"] = notes;

  if (!args.json.empty()) write_file(args.json, out.dump(2) + "\n", "--json");
  if (!args.report.empty())
    write_file(args.report, validation::html_report(graph, cmp, simulated, measured, context, notes),
               "--report");
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
