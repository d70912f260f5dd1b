// The whole run, not one iteration (trainsim forecast, docs/forecast.md): from a scenario's
// `training:` section, its simulated iteration time and its simulated checkpoint save and load
// times, the expected interruptions, the optimal checkpoint interval, the goodput, and the
// wall-clock days, GPU-hours and cost of the run.
//
//   iteration time (sim::simulate, sampled: sample_iteration_times)  ─┐
//   checkpoint shards (checkpoint_shards) ─► sim::simulate_checkpoint_io ─► CheckpointTimes ─┤
//   training: (rates, restart, interval)  ────────────────────────────────────────────────► forecast_run
//
// The failure model (Daly, "A higher order estimate of the optimum checkpoint interval for
// restart dumps", FGCS 22(3), 2006, Sec. 3): interruptions arrive as a Poisson process of rate
// λ (the job's: GPUs x per-GPU rate + nodes x per-node rate + NIC links x per-link rate, or
// 1 / mttf_h); the run is a sequence of segments of `k` steps, each followed by a checkpoint
// that blocks training for C_b; an interruption loses the work since the segment began, then
// costs a restart R and a checkpoint load L. A segment of w = k T + C_b seconds then takes, in
// expectation, (1/λ + D) (e^{λw} - 1) with D = R + L (+ A, below), and sees e^{λw} - 1
// interruptions, each losing 1/λ - w / (e^{λw} - 1) of work on average. Summed over the
// segments, the wall time is exactly
//   wall = useful + checkpoints x C_b + interruptions x (lost work per failure + R + L)
// (ForecastTest checks it). With async saves (Megatron --async-save) C_b is the device-to-host
// copy, plus any wait for the previous write still running (k T shorter than the write), and a
// checkpoint is durable only when its write ends: an interruption in that window rolls back one
// segment more, which the model counts as A = the write time of extra lost work per failure.
// The optimum interval minimises the expected wall time per step over k (D does not move it);
// Young's and Daly's first-order optimum sqrt(2 C_b M), M = 1/λ, is reported beside it.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "models/input/scenario.h"

namespace trainsim {

/// What each rank writes at a checkpoint: its shard of the model weights (the training
/// precision's bytes) and of the optimizer state (fp32 main parameters, Adam's two moments),
/// per parameter as the memory model counts them (models/memory/memory_model.h
/// state_bytes_per_param, unsharded), divided over the replicas that hold the same state, as
/// Megatron-Core's fully parallel distributed checkpoint saves replicated tensors once, split
/// over the data-parallel ranks (megatron/core/dist_checkpointing/strategies/
/// fully_parallel.py): dense parameters over DP x CP, expert parameters over the expert
/// data-parallel group. The total is the checkpoint's size.
struct CheckpointShards {
  std::vector<double> bytes_per_rank;  ///< by global rank
  double total_bytes = 0;
  double max_rank_bytes = 0;
  double bytes_per_param = 0;  ///< weights + optimizer state, unsharded
};
CheckpointShards checkpoint_shards(const ValidScenario& scenario);

/// Simulated checkpoint transfers (sim/checkpoint_io.h): each phase from its start to the last
/// rank's (node's) end.
struct CheckpointTimes {
  double copy_s = 0;   ///< save: device-to-host copies of every rank's shard
  double write_s = 0;  ///< save: every node's host memory to storage
  double read_s = 0;   ///< load: storage to every node's host memory
  double h2d_s = 0;    ///< load: host-to-device copies
  bool async = false;  ///< training.checkpoint.async
  /// What blocks training at a save: the copy (async) or the copy and the write.
  double save_blocking_s() const { return async ? copy_s : copy_s + write_s; }
  double save_s() const { return copy_s + write_s; }  ///< until the checkpoint is durable
  double load_s() const { return read_s + h2d_s; }
};

/// The iteration-time distribution over `samples` draws of the scenario's variability.
struct IterationTimes {
  double deterministic_s = 0;  ///< the simulation without variability
  double mean_s = 0, p50_s = 0, p90_s = 0, p99_s = 0;
  int samples = 1;
  std::uint64_t seed = 0;
  bool variable = false;  ///< the scenario has variability: the samples were simulated
};

/// Simulates one variability sample with the given seed and returns its iteration time: the
/// seam between the forecast and the variability of the cluster (the `variability:` section).
using IterationSampler = std::function<double(std::uint64_t sample_seed)>;

/// The seed of sample `i` of a run seeded with `seed` (splitmix64 of seed + i: independent,
/// reproducible streams).
std::uint64_t sample_seed(std::uint64_t seed, int i);

/// `samples` iteration times: without variability every sample equals `deterministic_s` and
/// nothing is simulated again; with it, `sampler(sample_seed(seed, i))` for i in [0, samples),
/// `progress(done, samples)` after each. Percentiles by the nearest-rank method.
IterationTimes sample_iteration_times(double deterministic_s, bool variable, int samples,
                                      std::uint64_t seed, const IterationSampler& sampler,
                                      const std::function<void(int, int)>& progress = {});

/// The run's inputs to the failure model, in seconds.
struct RunModel {
  double iteration_s = 0;       ///< T: the mean sampled iteration time
  std::int64_t steps = 0;       ///< S: iterations of the run
  double failures_per_s = 0;    ///< λ
  double restart_s = 0;         ///< R
  double load_s = 0;            ///< L
  double copy_s = 0;            ///< blocking part of an async save; the whole save if sync
  double write_behind_s = 0;    ///< async: the background write (0 for a synchronous save)
};

/// The expected run with a checkpoint every `interval_steps` steps (and one at the end).
struct RunAtInterval {
  std::int64_t interval_steps = 0;
  std::int64_t checkpoints = 0;
  double checkpoint_blocking_s = 0;   ///< C_b of a full segment (async: copy + any wait)
  double useful_s = 0;                ///< S x T
  double wall_s = 0;
  double expected_interruptions = 0;
  double lost_work_per_failure_s = 0;  ///< mean work redone per interruption
  double goodput = 0;                  ///< useful_s / wall_s
};
RunAtInterval run_at_interval(const RunModel& m, std::int64_t interval_steps);

/// The interval (1..S) of least expected wall time per step; S when λ = 0.
std::int64_t optimal_interval_steps(const RunModel& m);

/// Young / Daly's first-order optimum sqrt(2 C M) (seconds of work between checkpoints);
/// nullopt when λ = 0.
std::optional<double> young_daly_interval_s(double checkpoint_s, double failures_per_s);

/// λ of the job, per second: 1 / mttf_h, or the rates times the counts of GPUs, nodes and NIC
/// links (nodes x nics_per_node).
double job_failures_per_s(const Scenario& scenario, std::int64_t nics_per_node);

/// Whether the scenario gives the run's length (train_tokens, train_iters or train_samples):
/// what forecast and the planner's goodput / cost need.
bool has_run_length(const Scenario& scenario);

/// The run's length in steps: train_iters, or train_samples / global_batch_size, or
/// train_tokens / (global_batch_size x seq_length), rounded up. Throws InputError (file, field)
/// when the scenario gives none of the three.
std::int64_t train_steps(const Scenario& scenario);

/// Everything `trainsim forecast` reports.
struct Forecast {
  std::string scenario_name;
  std::int64_t gpus = 0, nodes = 0, nics_per_node = 0;
  double tokens_per_step = 0, train_tokens = 0;
  std::int64_t steps = 0;
  IterationTimes iteration;
  CheckpointShards shards;
  CheckpointTimes checkpoint;
  double failures_per_h = 0, mtbf_h = 0, restart_s = 0;
  std::int64_t optimal_interval_steps = 0;
  std::optional<double> young_daly_interval_s;
  std::optional<double> young_daly_interval_steps;
  bool interval_auto = true;
  RunAtInterval run;  ///< at the scenario's interval, or the optimum when `auto`
  double wall_days = 0, gpu_hours = 0;
  std::optional<double> gpu_hour_usd, cost_usd;
};

/// The forecast of a validated scenario from its simulated pieces.
Forecast forecast_run(const ValidScenario& scenario, std::int64_t nics_per_node,
                      const IterationTimes& iteration, const CheckpointShards& shards,
                      const CheckpointTimes& checkpoint);

/// The JSON document of docs/forecast.schema.json, and the text report.
nlohmann::json forecast_to_json(const Forecast& f);
std::string format_forecast_text(const Forecast& f);

}  // namespace trainsim
