// trainsim simulate: scenario -> schedule graph -> SimGrid -> summary, trace, memory CSV.
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iostream>
#include <memory>
#include <string>

#include "apps/verbs.h"
#include "models/activity.h"
#include "models/calibration.h"
#include "models/zero_offload.h"
#include "models/cost_model.h"
#include "models/graph_builder.h"
#include "models/hardware.h"
#include "models/local_device.h"
#include "models/memory_timeline.h"
#include "models/scenario.h"
#include "models/summary.h"
#include "models/trace_writer.h"
#ifdef TRAINSIM_HAVE_SIM
#include "sim/executor.h"
#endif

namespace trainsim::cli {

namespace {

/// Graphs above this many tasks report progress on stderr even when it is not a terminal:
/// at the ~100k tasks/s measured by bench_sim_scale on 2 cores, that is runs of a few seconds.
constexpr std::size_t kLongRunTasks = 300'000;

/// Opens an output file before the (possibly long) run, so a bad path fails at once.
std::unique_ptr<std::ofstream> open_output(const std::string& path, const char* flag) {
  if (path.empty()) return nullptr;
  auto f = std::make_unique<std::ofstream>(path, std::ios::binary | std::ios::trunc);
  if (!*f)
    throw InputError(std::string(flag) + " '" + path + "': cannot write the file (" +
                     std::strerror(errno) + ")");
  return f;
}

ExecutionRecord run_simulator(const ScheduleGraph& graph, const Scenario& sc,
                              const SystemSpec& system, const CostModel& cost, bool progress) {
#ifdef TRAINSIM_HAVE_SIM
  sim::SimOptions options;
  options.progress = progress;
  return sim::simulate(graph, sc, system, cost, options);
#else
  (void)graph, (void)sc, (void)system, (void)cost, (void)progress;
  throw std::runtime_error("simulate: this build has no simulator (configure with "
                           "-DTRAINSIM_WITH_SIM=ON and SimGrid installed)");
#endif
}

void finish_output(std::ofstream* f, const std::string& path, const char* flag) {
  if (!f) return;
  f->flush();
  if (!*f) throw std::runtime_error(std::string(flag) + " '" + path + "': write failed");
  f->close();
}

}  // namespace

int simulate_main(const SimulateArgs& args) {
  const bool tty = isatty(fileno(stderr)) != 0;
  auto say = [&](const std::string& what) {
    if (tty) std::cerr << "trainsim: " << what << "\n";
  };
  Scenario sc = load_scenario(args.scenario, args.overrides);
  if (!args.trace_ranks.empty()) parse_rank_list(args.trace_ranks, sc.world_size());  // early check
  const bool local = sc.cluster.system == kLocalSystemName;
  if (local && args.calibration.empty())
    throw InputError(args.scenario + ": cluster.system 'local' (this machine's device) needs a "
                     "measured profile: pass --calibration PROFILE.json from `trainsim calibrate`");
  SystemSpec system = find_system(sc.cluster.system);

  CalibrationProfile profile;
  std::string calibration_source;
  if (args.calibration.empty()) {
    profile = default_calibration(system.gpu.name);
    calibration_source = "default profile for " + profile.device + " (" + profile.source + ")";
  } else {
    profile = load_calibration(args.calibration);
    calibration_source = args.calibration + " (" + profile.device + ", " + profile.source + ")";
    if (local)
      system = local_system(profile, args.calibration);
    else if (profile.device != system.gpu.name)
      std::cerr << "trainsim: warning: --calibration '" << args.calibration
                << "' is a profile for " << profile.device << ", but system " << system.name
                << " has " << system.gpu.name << " GPUs\n";
  }
  // The host CPU and memory of a node are shared by the GPUs the scenario uses on it
  // (cluster.gpus_per_node may be fewer than the system has): CPU Adam's share follows that.
  SystemSpec cost_system = system;
  if (sc.cluster.gpus_per_node > 0) cost_system.gpus_per_node = int(sc.cluster.gpus_per_node);
  const CostModel cost(cost_system, profile);

  auto json_file = open_output(args.json, "--json");
  auto trace_file = open_output(args.trace, "--trace");
  auto csv_file = open_output(args.memory_csv, "--memory-csv");

  BuildOptions build;
  build.fold = should_fold(sc);
  build.calibration = &profile;  // the memory model's framework and NCCL buffer figures
  // `offload_optimizer.ratio: auto`: choose the ratio now so the summary reports it
  // (models/zero_offload.h).
  if (sc.zero.offload_optimizer.ratio_auto) {
    say("choosing the offload ratio (ratio: auto)");
    resolve_offload_ratio(sc, system, profile);
  }
  say("building the schedule graph of " + sc.name + (build.fold ? " (folded)" : ""));
  const ScheduleGraph graph = build_schedule_graph(sc, system, build);
  const TraceSelection selection = select_trace_ranks(graph, args.trace_ranks);

  say("simulating " + std::to_string(graph.num_tasks()) + " tasks on " +
      std::to_string(graph.simulated_ranks().size()) + " simulated ranks");
  const ExecutionRecord record =
      run_simulator(graph, sc, system, cost, tty || graph.num_tasks() > kLongRunTasks);

  const std::int64_t gpus_per_node = sc.cluster.gpus_per_node;
  const MemoryTimeline memory = build_memory_timeline(graph, record, gpus_per_node);
  SummaryOptions summary_options;
  summary_options.calibration_source = calibration_source;
  summary_options.trace_ranks = format_rank_list(selection.ranks);
  summary_options.trace_ranks_note = selection.note;
  const nlohmann::json summary = make_summary(graph, record, sc, system, memory, summary_options);

  if (json_file) {
    *json_file << summary.dump(2) << "\n";
    finish_output(json_file.get(), args.json, "--json");
  }
  if (trace_file) {
    say("writing the trace of ranks " + summary_options.trace_ranks + " to " + args.trace);
    write_chrome_trace(*trace_file, graph, record, memory, selection,
                       TraceInfo{sc.name, gpus_per_node});
    finish_output(trace_file.get(), args.trace, "--trace");
  }
  if (csv_file) {
    write_memory_csv(*csv_file, memory, selection.ranks);
    finish_output(csv_file.get(), args.memory_csv, "--memory-csv");
  }
  if (args.format == "json")
    std::cout << summary.dump(2) << "\n";
  else
    std::cout << format_text_summary(summary);
  std::cout.flush();
  if (!std::cout) throw std::runtime_error("cannot write to stdout");
  return 0;
}

}  // namespace trainsim::cli
