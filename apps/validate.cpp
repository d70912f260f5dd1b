// trainsim validate: simulate a scenario with a calibration profile, replay the same schedule
// graph on the local device (apps/validate_replay.h) or read a replay recorded elsewhere
// (--measured-trace, validation/measured_trace.h), align the two executions task by task and
// report the errors (validation/compare.h) as JSON and as a self-contained HTML report. With
// --nprocs N the replay runs in N processes (apps/validate_replay.h validate_processes), rank 0
// comparing its own rank's tasks.
#include <algorithm>
#include <cstdio>
#include <iostream>
#include <optional>
#include <string>
#include <vector>

#include "apps/output_file.h"
#include "apps/validate_replay.h"
#include "apps/verbs.h"
#include "models/hardware/local_device.h"
#include "models/run.h"
#include "models/outputs/memory_timeline.h"
#include "sim/executor.h"
#include "validation/compare.h"
#include "validation/measured_trace.h"

namespace trainsim::cli {

namespace {

/// What a CPU profile says about a `validate --device cpu` of `nprocs` processes that its
/// figures do not cover: rates measured by another number of processes at once than replay now
/// (local_device.processes, absent = 1: `calibrate --nprocs N`), or, for several processes, no
/// host transport figures (local_device.host_comm_*: collectives priced as local copies).
std::vector<std::string> cpu_profile_warnings(const CalibrationProfile& p,
                                              const std::string& path, std::int64_t nprocs) {
  std::vector<std::string> w;
  const std::int64_t measured_by =
      p.local_device.processes > 0 ? std::int64_t(p.local_device.processes) : 1;
  const std::int64_t replaying = std::max<std::int64_t>(1, nprocs);
  if (measured_by != replaying)
    w.push_back("--calibration " + path + ": its compute rates were measured by " +
                std::to_string(measured_by) + " process(es) at once (local_device.processes), "
                "and " + std::to_string(replaying) + " replay now, sharing the cores "
                "differently (`trainsim calibrate --device cpu --nprocs " +
                std::to_string(replaying) + "` measures them as this replay sees them)");
  if (replaying > 1 && !(p.local_device.host_comm_bw_bytes_per_s > 0))
    w.push_back("--calibration " + path + " has no host transport figures "
                "(local_device.host_comm_latency_s, host_comm_bw_bytes_per_s): the collectives "
                "between the processes are simulated as local copies (`trainsim calibrate "
                "--device cpu` measures them)");
  return w;
}

}  // namespace

int validate_main(const ValidateArgs& args) {
  const bool from_trace = !args.measured_trace.empty();
  if (from_trace && !args.device.empty())
    throw InputError("validate --measured-trace " + args.measured_trace + " --device " +
                     args.device + ": --device chooses where to replay; the trace already ran "
                     "(its otherData.executor says where)");
  // A recorded replay is read once: its device decides how the run is prepared.
  std::optional<validation::MeasuredTraceFile> trace_file;
  if (from_trace) trace_file = validation::read_measured_trace(args.measured_trace);
  const std::string device = trace_file ? trace_file->device()
                             : args.device.empty() ? default_replay_device() : args.device;
  const bool cpu = device == "cpu";
  check_distinct_paths({{"scenario", args.scenario}, {"--calibration", args.calibration},
                        {"--measured-trace", args.measured_trace}},
                       {{"--json", args.json}, {"--report", args.report}});
  if (from_trace && args.nprocs > 1)
    throw InputError("validate --measured-trace " + args.measured_trace + " --nprocs " +
                     std::to_string(args.nprocs) + ": --nprocs chooses how many processes "
                     "replay; the trace already ran");

  // A CPU replay is modelled with a measured CPU profile (models/run.h): say where the `cpu`
  // came from when the user did not write --device.
  if (cpu && args.calibration.empty() && args.device.empty())
    throw InputError(
        "validate " + args.scenario + ": " +
        (from_trace ? "the replay in --measured-trace " + args.measured_trace + " ran on the " +
                          "CPU (its otherData.executor is '" + trace_file->executor + "')"
                    : std::string("no CUDA device here, so the replay would run on the CPU")) +
        ", and a CPU replay is compared with a measured CPU profile: pass --calibration "
        "PROFILE.json from `trainsim calibrate --device cpu`");

  // Several processes (validate_processes): the parent starts them and waits; each replays its
  // own rank, and rank 0 alone simulates, compares and writes.
  ValidateProcesses procs;
  procs.device = device;
  if (!from_trace) procs = validate_processes(args.scenario, args.overrides, args.nprocs, device);
  if (procs.launched) return procs.exit_code;
  const bool writer = procs.rank == 0;
  OutputFile json_file(writer ? args.json : std::string(), "--json"),
      report_file(writer ? args.report : std::string(), "--report");

  // ---- one graph (models/run.h: the local device and precision substitutions), two executors
  RunRequest req;
  req.purpose = RunPurpose::Validate;
  req.scenario_path = args.scenario;
  req.overrides = args.overrides;
  req.calibration_path = args.calibration;
  req.device = device;
  req.force = args.force;
  req.unfolded = procs.nprocs > 1;  // every process needs its own rank's tasks
  const PreparedRun run = prepare_run(req);
  if (writer)
    for (const std::string& w : run.warnings) std::cerr << "trainsim: warning: " << w << "\n";
  // As simulate warns (models/run.cpp): a profile of another GPU than the system's.
  if (writer && !cpu && !args.calibration.empty() && run.scenario->cluster.system != "local" &&
      run.profile.device != run.system.gpu.name)
    std::cerr << "trainsim: warning: --calibration '" << args.calibration
              << "' is a profile for " << run.profile.device << ", but system "
              << run.system.name << " has " << run.system.gpu.name << " GPUs\n";
  const Scenario& sc = run.scenario;
  const ScheduleGraph& graph = run.graph;
  const SystemSpec& system = run.system;
  std::vector<std::string> notes = run.notes;
  if (sc.world_size() > procs.nprocs && procs.nprocs > 1)
    notes.push_back("ranks 0.." + std::to_string(procs.nprocs - 1) + " of " +
                    std::to_string(sc.world_size()) + " are replayed (--nprocs " +
                    std::to_string(procs.nprocs) + "): operations with an absent rank ran as "
                    "device-local copies (the replay's notes count them)");
  else if (sc.world_size() > 1 && procs.nprocs <= 1)
    notes.push_back("one of " + std::to_string(sc.world_size()) + " ranks is replayed: the "
                    "simulated iteration includes waiting for the other ranks (pipeline bubble, "
                    "collectives over the modelled links), the replay does not; compare the "
                    "per-kind task times rather than the iteration time");
  if (cpu && !from_trace && has_local_device(run.profile)) {
    for (const std::string& w :
         cpu_profile_warnings(run.profile, args.calibration, procs.nprocs)) {
      notes.push_back("warning: " + w);
      if (writer) std::cerr << "trainsim: warning: " << w << "\n";
    }
  }

  // Measured first: a trace that does not fit the graph is refused before simulating.
  ExecutionRecord measured;
  RankId rank = 0;
  nlohmann::json replay_context = nlohmann::json::object();
  if (from_trace) {
    validation::MeasuredTrace mt = validation::measured_record(*trace_file, graph, sc.name);
    measured = std::move(mt.record);
    rank = mt.rank;
    notes.push_back("measured: the replay recorded in " + args.measured_trace + " (" +
                    trace_file->executor + "), not replayed again");
    replay_context["measured_trace"] = args.measured_trace;
  } else {
    std::vector<ProcessMeasurement> others;
    ReplayMeasurement m = replay_for_validate(run, procs, args.repeat, &others);
    if (!writer) return 0;  // a worker of rank > 0: its figures went to rank 0
    measured = std::move(m.record);
    rank = m.rank;
    notes.insert(notes.end(), m.notes.begin(), m.notes.end());
    replay_context["replay_iteration_times_s"] = m.iteration_times_s;
    replay_context["load_average_1min"] = {{"before", m.load_before}, {"after", m.load_after}};
    replay_context["cores"] = m.cores;
    if (procs.nprocs > 1) {
      replay_context["processes"] = procs.nprocs;
      nlohmann::json per = nlohmann::json::array();
      per.push_back({{"rank", 0},
                     {"iteration_times_s", m.iteration_times_s},
                     {"peak_allocated_bytes", measured.measured_peak_allocated_bytes()}});
      for (const ProcessMeasurement& p : others)
        per.push_back({{"rank", p.rank},
                       {"iteration_times_s", p.iteration_times_s},
                       {"peak_allocated_bytes", p.peak_allocated_bytes}});
      replay_context["measured_per_rank"] = per;
    }
  }
  for (const std::string& n : measured.notes) notes.push_back("replay: " + n);
  const ExecutionRecord simulated = sim::simulate(graph, sc, system, run.cost_model());

  // ---- memory: the model's peak of the rank vs the allocator's measured peak
  const MemoryTimeline memory =
      build_memory_timeline(graph, simulated, sc.cluster.gpus_per_node);
  validation::MemoryFigures mem;
  const MemorySeries& series = memory.gpu_of(rank);
  mem.simulated_peak_bytes = series.peak_bytes;
  mem.simulated_by_category = series.peak_by_category;
  mem.measured_peak_bytes = measured.measured_peak_allocated_bytes();
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
  for (auto it = replay_context.begin(); it != replay_context.end(); ++it) out[it.key()] = *it;
  out["notes"] = notes;

  if (json_file) json_file.stream() << out.dump(2) << "\n";
  if (report_file)
    report_file.stream() << validation::html_report(graph, cmp, simulated, measured, context, notes);
  commit_all({&json_file, &report_file});  // both or neither replace their targets
  char line[512];
  std::snprintf(line, sizeof line,
                "%s on %s: iteration time simulated %.4f s, measured %.4f s (error %+.1f%%); "
                "peak memory simulated %.2f MiB, measured %.2f MiB (error %+.1f%%); "
                "error = (simulated - measured) / measured\n",
                sc.name.c_str(), measured.device.c_str(), cmp.simulated_iteration_s,
                cmp.measured_iteration_s, 100 * cmp.iteration_time_error(),
                double(mem.simulated_peak_bytes) / 1048576.0,
                double(mem.measured_peak_bytes) / 1048576.0, 100 * cmp.peak_memory_error());
  std::cout << line;
  std::cout.flush();
  return 0;
}

}  // namespace trainsim::cli
