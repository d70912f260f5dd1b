#include "models/run.h"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <sstream>

#include "models/errors.h"
#include "models/builder/rank_context.h"
#include "models/builder/graph_builder.h"
#include "models/builder/unfold.h"
#include "models/hardware/local_device.h"
#include "models/memory/memory_model.h"
#include "models/memory/zero_offload.h"

namespace trainsim {

namespace {

/// `simulation.fold: auto` folds every run whose TP peers and DP replicas exist (they run the
/// same program by construction, and tests/sim/test_fold.cpp checks that folded and unfolded
/// simulations agree), except runs whose unfolded graph is below this many tasks: those
/// simulate every rank in well under a second, and their traces then show every rank.
constexpr double kFoldAutoTasks = 100'000;

/// Bytes of memory and seconds of one core per task of a simulation, measured by
/// bench/bench_sim_scale on the 1T scenario (folded: 986k tasks, 260 MiB in the parent for the
/// graph and outputs plus 212 MiB in the SimGrid child, ~12.7 s on a loaded 2-core machine):
/// (260 + 212) MiB / 986k tasks ~ 500 B, 12.7 s / 986k ~ 13 us.
constexpr double kBytesPerTask = 500;
constexpr double kSecondsPerTask = 13e-6;

/// estimate_run stops counting one rank per stage past this many tasks: twice the most a run
/// may have (kMaxRunTasks), so every run within the limits is counted to the last task.
constexpr double kCountLimitTasks = 2 * kMaxRunTasks;

/// The ranks one folded rank stands for: its TP peers and DP x CP replicas.
double replicas(const Scenario& sc) {
  const ParallelConfig& p = sc.parallel;
  return double(p.tensor_model_parallel_size) * double(p.data_parallel_size) *
         double(p.context_parallel_size);
}

/// `e`, an estimate_run of `sc` (folded or not), for the graph built folded or not.
RunEstimate with_fold(const Scenario& sc, RunEstimate e, bool fold) {
  e.tasks = fold ? e.unfolded_tasks / replicas(sc) : e.unfolded_tasks;
  // An asymmetric cluster unfolds some ranks (builder/unfold.h): about the folded count per
  // simulated rank of a stage.
  if (fold && sc.variability.any())
    e.tasks *= double(builder::plan_unfolding(sc, true).ranks.size()) /
               double(sc.parallel.pipeline_model_parallel_size);
  e.memory_bytes = e.tasks * kBytesPerTask;
  e.simulate_s = e.tasks * kSecondsPerTask;
  return e;
}

}  // namespace

RunEstimate estimate_run(const ValidScenario& sc, bool fold) {
  // One rank of every pipeline stage, as the builder emits it; a count past the limit is
  // refused whatever it is (check_run_size), so the builder stops counting there.
  const double per_stage = double(count_schedule_tasks(sc, std::int64_t(kCountLimitTasks)));
  RunEstimate e;
  e.unfolded_tasks = per_stage * replicas(sc);
  e.complete = per_stage <= kCountLimitTasks;
  return with_fold(sc, e, fold);
}

namespace {

/// "18.3 billion", "1.1 million", "52 thousand", "950".
std::string count(double x) {
  char buf[48];
  if (x >= 1e9) std::snprintf(buf, sizeof buf, "%.1f billion", x / 1e9);
  else if (x >= 1e6) std::snprintf(buf, sizeof buf, "%.1f million", x / 1e6);
  else if (x >= 1e4) std::snprintf(buf, sizeof buf, "%.0f thousand", x / 1e3);
  else std::snprintf(buf, sizeof buf, "%.0f", x);
  return buf;
}

std::string gib(double bytes) {
  char buf[48];
  std::snprintf(buf, sizeof buf, "%.1f GiB", bytes / double(1ull << 30));
  return buf;
}

std::string duration(double s) {
  char buf[48];
  if (s >= 86400) std::snprintf(buf, sizeof buf, "%.1f days", s / 86400);
  else if (s >= 3600) std::snprintf(buf, sizeof buf, "%.1f hours", s / 3600);
  else if (s >= 60) std::snprintf(buf, sizeof buf, "%.0f minutes", s / 60);
  else std::snprintf(buf, sizeof buf, "%.0f s", s);
  return buf;
}

/// The largest source of tasks that a setting controls, as advice.
std::string size_advice(const Scenario& sc, const RunEstimate& e, bool fold) {
  const ParallelConfig& p = sc.parallel;
  if (!fold && with_fold(sc, e, true).tasks <= kMaxRunTasks)
    return "set simulation.fold: true (--set simulation.fold=true): the TP peers and DP "
           "replicas are identical and the folded graph has " +
           count(with_fold(sc, e, true).tasks) + " tasks";
  const double params = double(params_per_rank(sc, 0));
  if (sc.zero.stage == 0 && params / double(p.ddp_bucket_size) > 0.1 * e.tasks / p.pipeline_model_parallel_size)
    return "raise parallel.ddp_bucket_size (now " + std::to_string(p.ddp_bucket_size) +
           " parameters: " + count(params / double(p.ddp_bucket_size)) +
           " gradient buckets per rank; Megatron's default is 40000000)";
  if (sc.zero.stage >= 1 &&
      params / double(sc.zero.reduce_bucket_size) > 0.1 * e.tasks / p.pipeline_model_parallel_size)
    return "raise deepspeed.zero_optimization.reduce_bucket_size (now " +
           std::to_string(sc.zero.reduce_bucket_size) + " elements: " +
           count(params / double(sc.zero.reduce_bucket_size)) + " buckets per rank)";
  return "use fewer microbatches (parallel.global_batch_size) or fewer layers";
}

}  // namespace

void check_run_size(const ValidScenario& sc, const RunEstimate& e, bool fold) {
  if (e.tasks <= kMaxRunTasks && e.memory_bytes <= kMaxRunMemoryBytes) return;
  std::ostringstream o;
  o << sc->source_path << ": this run would build " << (e.complete ? "about " : "more than ")
    << count(e.tasks) << " tasks ("
    << (fold ? "folded" : "unfolded") << "), needing about " << gib(e.memory_bytes)
    << " of memory and " << duration(e.simulate_s) << " to simulate; the limits are "
    << count(kMaxRunTasks) << " tasks and " << gib(kMaxRunMemoryBytes) << ". "
    << size_advice(sc, e, fold) << "; or pass --force to run it anyway";
  throw InputError(o.str());
}

std::pair<bool, std::string> fold_decision(const ValidScenario& sc) {
  // Counted only where the decision needs it.
  const bool counted = sc->simulation.fold == SimulationConfig::Fold::Auto &&
                       replicas(sc) > 1;
  return fold_decision(sc, counted ? estimate_run(sc, false) : RunEstimate{});
}

std::pair<bool, std::string> fold_decision(const ValidScenario& sc, const RunEstimate& e) {
  switch (sc->simulation.fold) {
    case SimulationConfig::Fold::On:
      return {true, "simulation.fold: true"};
    case SimulationConfig::Fold::Off:
      return {false, "simulation.fold: false"};
    case SimulationConfig::Fold::Auto:
      break;
  }
  const ParallelConfig& p = sc->parallel;
  if (p.tensor_model_parallel_size * p.data_parallel_size * p.context_parallel_size == 1)
    return {false, "nothing to fold (TP x DP = 1)"};
  // The unfolded graph's size, as the builder counts it.
  const double tasks = e.unfolded_tasks;
  if (tasks > kFoldAutoTasks)
    return {true, "simulation.fold: auto: the " + std::to_string(p.tensor_model_parallel_size) +
                      " TP ranks and " + std::to_string(p.data_parallel_size) +
                      " DP replicas of a stage run the same program, so one stands for all; "
                      "the unfolded graph would have " + (e.complete ? "about " : "more than ") +
                      count(tasks) + " tasks"};
  return {false, "simulation.fold: auto: the unfolded graph (about " + count(tasks) +
                     " tasks) is small enough to simulate every rank"};
}

double resolve_offload_ratio(ValidScenario& sc, const SystemSpec& system,
                             const CalibrationProfile& profile) {
  const auto& o = sc->zero.offload_optimizer;
  if (!o.ratio_auto || o.ratio_resolved) return o.ratio;
  const double capacity = system.gpu.hbm_bytes;
  BuildOptions opt;
  opt.fold = fold_decision(sc).first;
  opt.calibration = &profile;
  auto fits = [&](int percent) {
    Scenario trial = sc;
    trial.zero.offload_optimizer.ratio = percent / 100.0;
    trial.zero.offload_optimizer.ratio_resolved = true;
    // A changed scenario is validated again before it is built (scenario.h ValidScenario).
    const ScheduleGraph g = build_schedule_graph(validated(std::move(trial)), system, opt);
    return double(program_order_peak_gpu_bytes(g)) <= capacity;
  };
  int chosen = 100;
  if (fits(0)) {
    chosen = 0;
  } else if (fits(100)) {
    int lo = 0, hi = 100;  // fits(lo) false, fits(hi) true
    while (hi - lo > 1) {
      const int mid = (lo + hi) / 2;
      (fits(mid) ? hi : lo) = mid;
    }
    chosen = hi;
  }
  Scenario resolved = sc;
  resolved.zero.offload_optimizer.ratio = chosen / 100.0;
  resolved.zero.offload_optimizer.ratio_resolved = true;
  sc = validated(std::move(resolved));
  return sc->zero.offload_optimizer.ratio;
}

// ---------------------------------------------------------------- prepare_run

namespace {

const char* verb_name(RunPurpose p) {
  switch (p) {
    case RunPurpose::Simulate: return "simulate";
    case RunPurpose::Replay: return "replay";
    case RunPurpose::Validate: return "validate";
  }
  return "run";
}

/// This machine's physical memory in bytes (sysconf), or 0 where unknown: the capacity of the
/// CPU a replay runs on.
double physical_memory_bytes() {
  const long pages = sysconf(_SC_PHYS_PAGES), page_bytes = sysconf(_SC_PAGE_SIZE);
  return pages > 0 && page_bytes > 0 ? double(pages) * double(page_bytes) : 0.0;
}

/// The calibration profile and where it came from.
void choose_profile(const RunRequest& req, PreparedRun& run, bool local) {
  if (req.calibration_path.empty()) {
    if (req.purpose == RunPurpose::Replay && local) {
      // A replay on the `local` system has no shipped profile: its memory model needs only
      // the framework and NCCL buffer bytes, both 0 for a replay (no framework bytes among the
      // counted tensors, no NCCL).
      run.calibration_source = "none (measured replay)";
      return;
    }
    run.profile = default_calibration(run.system.gpu.name);
    run.calibration_source = req.purpose == RunPurpose::Replay
                                 ? "none (measured replay)"
                                 : "default profile for " + run.profile.device + " (" +
                                       run.profile.source + ")";
    return;
  }
  run.profile = load_calibration(req.calibration_path);
  run.calibration_source =
      req.calibration_path + " (" + run.profile.device + ", " + run.profile.source + ")";
}

/// Validate on the CPU (or a `local` scenario): the simulation models the device the replay
/// runs on, each rank a one-device node, in the profile's precision.
void substitute_local_device(const RunRequest& req, PreparedRun& run) {
  // The substituted scenario is validated again (scenario.h ValidScenario): the `local` system
  // with one GPU per node, the profile's precision.
  Scenario sc = run.scenario;
  if (sc.cluster.system != kLocalSystemName) {
    const std::int64_t world = sc.world_size();
    run.notes.push_back("cluster.system " + sc.cluster.system +
                        " was replaced by `local` (this machine's device, figures from the "
                        "profile) so that the simulation models the device the replay runs on; "
                        "each of the " + std::to_string(world) + " ranks is a one-device node");
    sc.cluster.system = kLocalSystemName;
    sc.cluster.system_file.clear();
    sc.cluster.file_system.reset();
    sc.cluster.gpus_per_node = 1;
    sc.cluster.nodes = world;
  }
  run.system = local_system(run.profile, req.calibration_path, sc.cluster.nodes);
  if (sc.parallel.fp8 != Fp8Format::None) {
    // The replay runs its GEMMs in the scenario's precision, not FP8 (hw_backend/), and the
    // `local` system has no FP8 rate: the simulation models what the replay runs.
    run.notes.push_back(std::string("parallel.fp8 ") + to_string(sc.parallel.fp8) +
                        " was replaced by none: the replay runs no FP8 GEMMs, and the simulation "
                        "must model the same kernels");
    sc.parallel.fp8 = Fp8Format::None;
    sc.parallel.fp8_recipe = Fp8Recipe::Delayed;
    sc.parallel.fp8_param_gather = false;
  }
  if (req.device != "cpu") {
    run.scenario = validated(std::move(sc));
    return;
  }
  run.replay_dtype = run.profile.precision.empty() ? "fp32" : run.profile.precision;
  if (run.replay_dtype != "fp32" && run.replay_dtype != "bf16")
    throw InputError(req.calibration_path + ": field 'precision' = " + run.profile.precision +
                     ": the CPU replay runs fp32 or bf16");
  const Precision want = run.replay_dtype == "fp32" ? Precision::FP32 : Precision::BF16;
  if (sc.parallel.precision != want) {
    run.notes.push_back(std::string("parallel.precision ") + to_string(sc.parallel.precision) +
                        " was replaced by " + to_string(want) +
                        ": the CPU replay runs the profile's precision (" + run.replay_dtype +
                        "), and the simulation must model the same element sizes");
    sc.parallel.precision = want;
    // fp32 training reduces fp32 gradients: a bf16 scenario's grad_reduce_in_fp32 has no
    // meaning there (validation refuses `false` with fp32).
    if (want == Precision::FP32) sc.parallel.grad_reduce_in_fp32.reset();
  }
  run.scenario = validated(std::move(sc));
}

/// The system the run models, the profile, and the verb's substitutions.
void choose_system(const RunRequest& req, PreparedRun& run) {
  const Scenario& sc = run.scenario;
  const bool local = sc.cluster.system == kLocalSystemName;
  const bool cpu_validate = req.purpose == RunPurpose::Validate && req.device == "cpu";
  if ((local || cpu_validate) && req.calibration_path.empty() &&
      req.purpose != RunPurpose::Replay)
    throw InputError(
        req.purpose == RunPurpose::Simulate
            ? req.scenario_path + ": cluster.system 'local' (this machine's device) needs a "
                                  "measured profile: pass --calibration PROFILE.json from "
                                  "`trainsim calibrate`"
            : "validate: --device " + req.device + " needs --calibration PROFILE.json from "
                  "`trainsim calibrate --device " + req.device + "` (the shipped profiles "
                  "describe datacenter GPUs)");
  run.system = cluster_system(sc.cluster);
  choose_profile(req, run, local);
  if (req.purpose == RunPurpose::Validate && (local || cpu_validate)) {
    substitute_local_device(req, run);
  } else if (req.purpose == RunPurpose::Simulate && local) {
    run.system = local_system(run.profile, req.calibration_path, sc.cluster.nodes);
  } else if (req.purpose == RunPurpose::Simulate && !req.calibration_path.empty() &&
             run.profile.device != run.system.gpu.name) {
    run.warnings.push_back("--calibration '" + req.calibration_path + "' is a profile for " +
                           run.profile.device + ", but system " + run.system.name + " has " +
                           run.system.gpu.name + " GPUs");
  }
  if (req.purpose == RunPurpose::Replay && local && req.device != "cuda") {
    // This machine's CPU as the device: its capacity is the physical memory (the replay's
    // tensors live there); its peak FLOP/s is unknown without a profile (MFU reported null).
    if (const double bytes = physical_memory_bytes(); bytes > 0) {
      run.system.gpu.hbm_bytes = bytes;
      run.system.host_memory_bytes = bytes;
    }
  }
  run.cost_system = run.system;
  run.cost_system.nvlink_sharp = run.system.nvlink_sharp && sc.nccl_nvls_enable;
  if (sc.cluster.gpus_per_node > 0) run.cost_system.gpus_per_node = int(sc.cluster.gpus_per_node);
}

}  // namespace

PreparedRun prepare_platform(const RunRequest& req) {
  PreparedRun run(validated(
      req.scenario_text.empty()
          ? load_scenario(req.scenario_path, req.overrides)
          : parse_scenario(req.scenario_text, req.scenario_path, req.overrides)));
  // Launch-line keys accepted and not modelled (models/input/keys.h), first in the notes.
  run.notes.insert(run.notes.end(), run.scenario->notes.begin(), run.scenario->notes.end());
  choose_system(req, run);
  return run;
}

PreparedRun prepare_run(const RunRequest& req) {
  auto say = [&](const std::string& what) {
    if (req.progress) req.progress(what);
  };
  PreparedRun run = prepare_platform(req);
  ValidScenario& sc = run.scenario;

  // The fold and the estimate from the builder's count of the scenario.
  auto decide = [&]() {
    const RunEstimate counted = estimate_run(sc, false);
    std::tie(run.fold, run.fold_reason) = fold_decision(sc, counted);
    if (req.unfolded && run.fold) {
      run.fold = false;
      run.fold_reason = "every process of a multi-process replay needs its own rank's tasks";
    }
    run.estimate = with_fold(sc, counted, run.fold);
  };
  decide();
  if (!req.force) check_run_size(sc, run.estimate, run.fold);

  // `offload_optimizer.ratio: auto`: a planning step above the builder (trial graphs), after
  // the size check (an unresolved ratio counts the scenario's own, at most all, CPU-stepped
  // parameters); the graph is then counted again with the chosen ratio.
  if (sc->zero.offload_optimizer.ratio_auto && !sc->zero.offload_optimizer.ratio_resolved) {
    say("choosing the offload ratio (ratio: auto)");
    resolve_offload_ratio(sc, run.system, run.profile);
    decide();
  }
  if (effective_offload_ratio(sc) > 0) check_host_memory(sc, run.system, run.profile);

  say(std::string(verb_name(req.purpose)) + ": building the schedule graph of " + sc->name +
      (run.fold ? " (folded)" : ""));
  BuildOptions build;
  build.fold = run.fold;
  build.calibration = &run.profile;
  run.graph = build_schedule_graph(sc, run.system, build);
  if (req.purpose == RunPurpose::Replay && req.device == "cpu" &&
      sc->cluster.system != kLocalSystemName) {
    // The summary describes the device the replay ran on, not the scenario's GPU: this
    // machine's CPU, its physical memory as the capacity, no known peak (MFU null).
    run.system.gpu.name = "CPU of this machine (replay of a " + run.system.gpu.name + " rank)";
    run.system.gpu.peak_dense_fp16_flops = 0;
    if (const double bytes = physical_memory_bytes(); bytes > 0) run.system.gpu.hbm_bytes = bytes;
    run.notes.push_back("the modelled memory and FLOP figures are the scenario's (" +
                        std::string(to_string(sc->parallel.precision)) +
                        " on its GPUs); the replay measured this machine's CPU");
  }
  return run;
}

RunOutputs finish_run(const PreparedRun& run, const ExecutionRecord& record,
                      const FinishOptions& options) {
  RunOutputs out;
  out.selection = select_trace_ranks(run.graph, options.trace_ranks);
  out.memory = build_memory_timeline(run.graph, record, run.scenario->cluster.gpus_per_node);
  SummaryOptions so;
  so.calibration_source = run.calibration_source;
  so.trace_ranks = format_rank_list(out.selection.ranks);
  so.trace_ranks_note = out.selection.note;
  so.fold_reason = run.fold_reason;
  out.summary = make_summary(run.graph, record, run.scenario, run.system, out.memory, so);
  out.summary.notes.insert(out.summary.notes.begin(), run.notes.begin(), run.notes.end());
  return out;
}

}  // namespace trainsim
