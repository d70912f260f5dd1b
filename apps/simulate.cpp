// trainsim simulate: a prepared run (models/run.h) played by SimGrid -> summary, trace, CSV.
#include <unistd.h>

#include <cstdio>
#include <iostream>
#include <string>

#include "apps/output_file.h"
#include "apps/verbs.h"
#include "models/run.h"
#include "models/system/collective_flows.h"
#ifdef TRAINSIM_HAVE_SIM
#include "sim/executor.h"
#endif

namespace trainsim::cli {

namespace {

/// Graphs above this many tasks report progress on stderr even when it is not a terminal:
/// at the ~100k tasks/s measured by bench_sim_scale on 2 cores, that is runs of a few seconds.
constexpr std::size_t kLongRunTasks = 300'000;

ExecutionRecord run_simulator(const PreparedRun& run, bool progress) {
#ifdef TRAINSIM_HAVE_SIM
  sim::SimOptions options;
  options.progress = progress;
  return sim::simulate(run.graph, run.scenario, run.system, run.cost_model(), options);
#else
  (void)run, (void)progress;
  throw std::runtime_error("simulate: this build has no simulator (configure with "
                           "-DTRAINSIM_WITH_SIM=ON and SimGrid installed)");
#endif
}

}  // namespace

int simulate_main(const SimulateArgs& args) {
  const bool tty = isatty(fileno(stderr)) != 0;
  auto say = [&](const std::string& what) {
    if (tty) std::cerr << "trainsim: " << what << "\n";
  };
  check_distinct_paths({{"scenario", args.scenario}, {"--calibration", args.calibration}},
                       {{"--json", args.json},
                        {"--trace", args.trace},
                        {"--memory-csv", args.memory_csv}});
  RunRequest req;
  req.purpose = RunPurpose::Simulate;
  req.scenario_path = args.scenario;
  req.overrides = args.overrides;
  req.calibration_path = args.calibration;
  req.force = args.force;
  req.progress = say;
  // Outputs are opened before the (possibly long) run, so a bad path fails at once; they
  // replace their targets only when everything was written (apps/output_file.h).
  OutputFile json_file(args.json, "--json"), trace_file(args.trace, "--trace"),
      csv_file(args.memory_csv, "--memory-csv");
  const PreparedRun run = prepare_run(req);
  for (const std::string& w : run.warnings) std::cerr << "trainsim: warning: " << w << "\n";
  if (!args.trace_ranks.empty()) parse_rank_list(args.trace_ranks, run.graph.world_size);

  say("simulating " + std::to_string(run.graph.num_tasks()) + " tasks on " +
      std::to_string(run.graph.simulated_ranks().size()) + " simulated ranks");
  const ExecutionRecord record =
      run_simulator(run, tty || run.graph.num_tasks() > kLongRunTasks);
  FinishOptions finish;
  finish.trace_ranks = args.trace_ranks;
  const RunOutputs out = finish_run(run, record, finish);
  const std::string summary_json = summary_to_json(out.summary).dump(2) + "\n";

  // Every output is written and checked before any replaces its target (commit_all).
  if (json_file) json_file.stream() << summary_json;
  if (trace_file) {
    say("writing the trace of ranks " + out.summary.trace_ranks + " to " + args.trace);
    const CostModel cost = run.cost_model();
    write_chrome_trace(trace_file.stream(), run.graph, record, out.memory, out.selection,
                       TraceInfo{run.scenario->name, run.scenario->cluster.gpus_per_node, &cost,
                                 nvlink_domain_ranks(*run.scenario, run.system)});
  }
  if (csv_file) write_memory_csv(csv_file.stream(), out.memory, out.selection.ranks);
  commit_all({&json_file, &trace_file, &csv_file});
  if (args.format == "json")
    std::cout << summary_json;
  else
    std::cout << format_text_summary(out.summary);
  std::cout.flush();
  if (!std::cout) throw std::runtime_error("cannot write to stdout");
  if (args.fail_on_oom && (out.summary.oom() || out.summary.host_oom)) {
    std::cerr << "trainsim: out of memory: the peak "
              << (out.summary.oom() ? "GPU" : "host") << " memory is above its capacity "
              << "(the summary's oom fields); exit status " << kExitOutOfMemory
              << " (--fail-on-oom)\n";
    return kExitOutOfMemory;
  }
  return 0;
}

}  // namespace trainsim::cli
