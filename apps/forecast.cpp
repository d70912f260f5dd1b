// trainsim forecast: the whole run from one simulated iteration (docs/forecast.md). The
// scenario is prepared and simulated as `simulate` does it (models/run.h, sim::simulate); its
// iteration time is sampled over the scenario's variability (--samples, --seed); the
// checkpoint's save and load are simulated (sim/checkpoint_io.h); the failure model
// (models/forecast/forecast.h) gives interruptions, the optimal interval, goodput, days and cost.
#include "apps/forecast_run.h"

#include <unistd.h>

#include <cstdio>
#include <iostream>
#include <string>

#include "apps/output_file.h"
#include "apps/verbs.h"
#ifdef TRAINSIM_HAVE_SIM
#include "sim/checkpoint_io.h"
#include "sim/executor.h"
#endif

namespace trainsim::cli {

#ifdef TRAINSIM_HAVE_SIM
Forecast forecast_prepared(const PreparedRun& run, double deterministic_s, int samples,
                           std::uint64_t seed, bool variable, const IterationSampler& sampler,
                           const std::function<void(int, int)>& progress) {
  train_steps(*run.scenario);  // refuses a scenario without the run's length, before simulating
  const IterationTimes iteration =
      sample_iteration_times(deterministic_s, variable, samples, seed, sampler, progress);
  const CheckpointShards shards = checkpoint_shards(run.scenario);
  sim::CheckpointIoRequest io;
  io.nodes = run.scenario->cluster.nodes;
  io.gpus_per_node = run.scenario->cluster.gpus_per_node;
  io.bytes_per_rank = shards.bytes_per_rank;
  io.write_bw_bytes_per_s = run.scenario->training.checkpoint.write_bw_bytes_per_s;
  io.read_bw_bytes_per_s = run.scenario->training.checkpoint.read_bw_bytes_per_s;
  io.async = run.scenario->training.checkpoint.async;
  const CheckpointTimes times = sim::simulate_checkpoint_io(io, run.system, run.cost_model());
  return forecast_run(run.scenario, run.system.nics_per_node, iteration, shards, times);
}
#endif

int forecast_main(const ForecastArgs& args) {
#ifdef TRAINSIM_HAVE_SIM
  const bool tty = isatty(fileno(stderr)) != 0;
  auto say = [&](const std::string& what) {
    if (tty) std::cerr << "trainsim: " << what << "\n";
  };
  check_distinct_paths({{"scenario", args.scenario}, {"--calibration", args.calibration}},
                       {{"--json", args.json}});
  RunRequest req;
  req.purpose = RunPurpose::Simulate;
  req.scenario_path = args.scenario;
  req.overrides = args.overrides;
  req.calibration_path = args.calibration;
  req.force = args.force;
  req.progress = say;
  OutputFile json_file(args.json, "--json");
  const PreparedRun run = prepare_run(req);
  for (const std::string& w : run.warnings) std::cerr << "trainsim: warning: " << w << "\n";
  train_steps(*run.scenario);  // the run's length is checked before the simulation

  say("simulating " + std::to_string(run.graph.num_tasks()) + " tasks on " +
      std::to_string(run.graph.simulated_ranks().size()) + " simulated ranks");
  sim::SimOptions options;
  options.progress = tty;
  const ExecutionRecord record =
      sim::simulate(run.graph, run.scenario, run.system, run.cost_model(), options);
  const double deterministic_s = finish_run(run, record, FinishOptions{}).summary.iteration_time_s;
  // The scenario's variability (models/forecast/forecast.h IterationSampler): with a per-GPU
  // speed spread each sample is the run again with its own `variability.seed` (the key's range
  // is [0, 2^50]: the sample's seed is taken modulo 2^50); a scenario without one has every
  // sample equal to the deterministic run, simulated once.
  const bool variable = run.scenario->variability.gpu_speed_cv > 0;
  const IterationSampler sampler = [&](std::uint64_t sample_seed) {
    RunRequest sample = req;
    sample.progress = nullptr;
    sample.overrides.emplace_back("variability.seed",
                                  std::to_string(sample_seed % (std::uint64_t(1) << 50)));
    const PreparedRun r = prepare_run(sample);
    const ExecutionRecord rec = sim::simulate(r.graph, r.scenario, r.system, r.cost_model(), {});
    return finish_run(r, rec, FinishOptions{}).summary.iteration_time_s;
  };
  // Progress as simulate's: on stderr, overwritten in place on a terminal (docs/cli.md).
  auto progress = [&](int done, int total) {
    if (!tty || !variable) return;
    std::fprintf(stderr, "\rtrainsim: sampling iteration times: %d/%d", done, total);
    if (done == total) std::fprintf(stderr, "\n");
  };
  say("simulating the checkpoint's save and load");
  const Forecast f = forecast_prepared(run, deterministic_s, args.samples, args.seed, variable,
                                       sampler, progress);
  const std::string text_json = forecast_to_json(f).dump(2) + "\n";
  if (json_file) json_file.stream() << text_json;
  commit_all({&json_file});
  std::cout << (args.format == "json" ? text_json : format_forecast_text(f));
  std::cout.flush();
  if (!std::cout) throw std::runtime_error("cannot write to stdout");
  return 0;
#else
  (void)args;
  throw std::runtime_error("forecast: this build has no simulator (configure with "
                           "-DTRAINSIM_WITH_SIM=ON and SimGrid installed)");
#endif
}

}  // namespace trainsim::cli
