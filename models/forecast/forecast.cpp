// The run's forecast (models/forecast/forecast.h): checkpoint shards, iteration-time samples,
// the failure model and its optimum.
#include "models/forecast/forecast.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "models/input/keys.h"
#include "models/memory/memory_model.h"

namespace trainsim {

CheckpointShards checkpoint_shards(const ValidScenario& vs) {
  const Scenario& sc = *vs;
  const ParallelConfig& p = sc.parallel;
  // Weights in the training precision; the optimizer state as the memory model counts it
  // unsharded (fp32 main parameters + Adam's exp_avg and exp_avg_sq: 12 B); in fp32 training the
  // weights are the main parameters, so the state adds the two moments alone (8 B).
  const double weight_b = double(precision_bytes(p.precision));
  const double optimizer_b = p.precision == Precision::FP32
                                 ? 8.0
                                 : state_bytes_per_param(0, 1).optimizer;
  CheckpointShards out;
  out.bytes_per_param = weight_b + optimizer_b;
  const std::int64_t world = sc.world_size();
  const std::int64_t tp = p.tensor_model_parallel_size, pp = p.pipeline_model_parallel_size;
  const std::int64_t dense_replicas = p.data_parallel_size * p.context_parallel_size;
  const std::int64_t etp = p.expert_tensor_parallel_size > 0 ? p.expert_tensor_parallel_size : tp;
  const std::int64_t expert_replicas =
      std::max<std::int64_t>(1, world / (pp * p.expert_model_parallel_size * etp));
  const std::int64_t ranks_per_stage = world / pp;
  std::vector<double> stage_bytes(std::size_t(pp), 0.0);
  for (std::int64_t stage = 0; stage < pp; ++stage) {
    const double expert = double(expert_params_per_rank(sc, stage));
    const double dense = double(params_per_rank(sc, stage)) - expert;
    stage_bytes[std::size_t(stage)] =
        out.bytes_per_param * (dense / double(dense_replicas) + expert / double(expert_replicas));
  }
  out.bytes_per_rank.resize(std::size_t(world));
  for (std::int64_t r = 0; r < world; ++r) {
    // Megatron-Core's rank order tp -> cp -> dp -> pp: the stage is the slowest index.
    const double b = stage_bytes[std::size_t(r / ranks_per_stage)];
    out.bytes_per_rank[std::size_t(r)] = b;
    out.total_bytes += b;
    out.max_rank_bytes = std::max(out.max_rank_bytes, b);
  }
  return out;
}

std::uint64_t sample_seed(std::uint64_t seed, int i) {
  // splitmix64 (Steele, Lea, Flood, "Fast splittable pseudorandom number generators",
  // OOPSLA 2014): a well-mixed 64-bit seed per sample from seed + i.
  std::uint64_t z = seed + 0x9E3779B97F4A7C15ull * (std::uint64_t(i) + 1);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

namespace {

/// Nearest-rank percentile of sorted values: the ceil(q n)-th smallest.
double percentile(const std::vector<double>& sorted, double q) {
  const auto n = sorted.size();
  std::size_t rank = std::size_t(std::ceil(q * double(n)));
  rank = std::clamp<std::size_t>(rank, 1, n);
  return sorted[rank - 1];
}

}  // namespace

IterationTimes sample_iteration_times(double deterministic_s, bool variable, int samples,
                                      std::uint64_t seed, const IterationSampler& sampler,
                                      const std::function<void(int, int)>& progress) {
  TRAINSIM_CHECK(samples >= 1, "sample_iteration_times: samples must be >= 1");
  IterationTimes out;
  out.deterministic_s = deterministic_s;
  out.samples = samples;
  out.seed = seed;
  out.variable = variable;
  std::vector<double> t;
  if (!variable) {
    // Every sample is the deterministic run: simulated once, not `samples` times.
    t.assign(std::size_t(samples), deterministic_s);
    if (progress) progress(samples, samples);
  } else {
    TRAINSIM_CHECK(bool(sampler), "sample_iteration_times: variability needs a sampler");
    for (int i = 0; i < samples; ++i) {
      t.push_back(sampler(sample_seed(seed, i)));
      if (progress) progress(i + 1, samples);
    }
  }
  double sum = 0;
  for (double v : t) sum += v;
  out.mean_s = sum / double(t.size());
  std::sort(t.begin(), t.end());
  out.p50_s = percentile(t, 0.50);
  out.p90_s = percentile(t, 0.90);
  out.p99_s = percentile(t, 0.99);
  return out;
}

namespace {

/// One segment of `steps` steps followed by a checkpoint: its expected wall time, its expected
/// interruptions and the work they lose (forecast.h, Daly 2006 Sec. 3).
struct Segment {
  double wall_s = 0, interruptions = 0, lost_s = 0;
};

double blocking_s(const RunModel& m, std::int64_t steps) {
  // An async save waits for the previous write when the segment is shorter than the write
  // (Megatron's async_save finalizes the previous request before a new one).
  return m.copy_s + std::max(0.0, m.write_behind_s - double(steps) * m.iteration_s);
}

Segment segment(const RunModel& m, std::int64_t steps) {
  Segment s;
  const double w = double(steps) * m.iteration_s + blocking_s(m, steps);
  const double lambda = m.failures_per_s;
  if (!(lambda > 0)) {
    s.wall_s = w;
    return s;
  }
  const double failures = std::expm1(lambda * w);  // e^{λw} - 1
  // Work lost per interruption: E[t | t < w] = 1/λ - w / (e^{λw} - 1), plus an async write's
  // window (the checkpoint is not durable until its write ends).
  const double lost = 1.0 / lambda - w / failures + m.write_behind_s;
  s.interruptions = failures;
  s.lost_s = failures * lost;
  s.wall_s = w + failures * (lost + m.restart_s + m.load_s);
  return s;
}

}  // namespace

RunAtInterval run_at_interval(const RunModel& m, std::int64_t k) {
  TRAINSIM_CHECK(k >= 1 && m.steps >= 1, "run_at_interval: interval and steps must be >= 1");
  k = std::min(k, m.steps);
  RunAtInterval r;
  r.interval_steps = k;
  const std::int64_t full = m.steps / k, rest = m.steps % k;
  const Segment a = segment(m, k);
  Segment b;
  if (rest > 0) b = segment(m, rest);
  r.checkpoints = full + (rest > 0 ? 1 : 0);
  r.checkpoint_blocking_s = blocking_s(m, k);
  r.useful_s = double(m.steps) * m.iteration_s;
  r.wall_s = double(full) * a.wall_s + b.wall_s;
  r.expected_interruptions = double(full) * a.interruptions + b.interruptions;
  const double lost = double(full) * a.lost_s + b.lost_s;
  r.lost_work_per_failure_s = r.expected_interruptions > 0 ? lost / r.expected_interruptions : 0;
  r.goodput = r.useful_s / r.wall_s;
  return r;
}

std::int64_t optimal_interval_steps(const RunModel& m) {
  TRAINSIM_CHECK(m.steps >= 1, "optimal_interval_steps: steps must be >= 1");
  if (!(m.failures_per_s > 0)) return m.steps;
  // Expected wall time per step of a run of whole segments, minimised over every interval up
  // to 20 times Young/Daly's (the rate only rises beyond its one minimum; an exp per interval:
  // a million intervals cost milliseconds).
  const double yd_steps =
      std::sqrt(2.0 * blocking_s(m, m.steps) / m.failures_per_s) / m.iteration_s;
  const double cap = std::max(1e4, 20.0 * yd_steps);
  const std::int64_t last = cap < double(m.steps) ? std::int64_t(cap) : m.steps;
  std::int64_t best = 1;
  double best_rate = std::numeric_limits<double>::infinity();
  for (std::int64_t k = 1; k <= last; ++k) {
    const double rate = segment(m, k).wall_s / double(k);
    if (rate < best_rate) {
      best_rate = rate;
      best = k;
    }
  }
  return best;
}

std::optional<double> young_daly_interval_s(double checkpoint_s, double failures_per_s) {
  if (!(failures_per_s > 0)) return std::nullopt;
  // Young, "A first order approximation to the optimum checkpoint interval", CACM 17(9), 1974;
  // Daly 2006 eq. (3): sqrt(2 C M).
  return std::sqrt(2.0 * checkpoint_s / failures_per_s);
}

double job_failures_per_s(const Scenario& sc, std::int64_t nics_per_node) {
  const TrainingConfig& t = sc.training;
  if (t.mttf_h > 0) return 1.0 / (t.mttf_h * 3600.0);
  const double gpus = double(sc.world_size()), nodes = double(sc.cluster.nodes);
  const double links = nodes * double(nics_per_node);
  const double per_h =
      gpus * t.gpu_failures_per_h + nodes * t.node_failures_per_h + links * t.link_failures_per_h;
  return per_h / 3600.0;
}

bool has_run_length(const Scenario& sc) {
  const TrainingConfig& t = sc.training;
  return t.train_tokens > 0 || t.train_iters || t.train_samples;
}

std::int64_t train_steps(const Scenario& sc) {
  const TrainingConfig& t = sc.training;
  const double gbs = double(sc.parallel.global_batch_size);
  if (t.train_iters) return *t.train_iters;
  if (t.train_samples) return std::int64_t(std::ceil(double(*t.train_samples) / gbs));
  if (t.train_tokens > 0)
    return std::int64_t(std::ceil(t.train_tokens / (gbs * double(sc.model.seq_length))));
  throw InputError(sc.source_path + ": field '" + key_at(&key_sample().training.train_tokens) +
                   "': missing; forecast needs the run's length (" +
                   key_at(&key_sample().training.train_tokens) + ", " +
                   key_at(&key_sample().training.train_iters) + " or " +
                   key_at(&key_sample().training.train_samples) + ")");
}

Forecast forecast_run(const ValidScenario& vs, std::int64_t nics_per_node,
                      const IterationTimes& iteration, const CheckpointShards& shards,
                      const CheckpointTimes& checkpoint) {
  const Scenario& sc = *vs;
  Forecast f;
  f.scenario_name = sc.name;
  f.gpus = sc.world_size();
  f.nodes = sc.cluster.nodes;
  f.nics_per_node = nics_per_node;
  f.tokens_per_step = double(sc.parallel.global_batch_size) * double(sc.model.seq_length);
  f.steps = train_steps(sc);
  f.train_tokens = double(f.steps) * f.tokens_per_step;
  f.iteration = iteration;
  f.shards = shards;
  f.checkpoint = checkpoint;
  RunModel m;
  m.iteration_s = iteration.mean_s;
  m.steps = f.steps;
  m.failures_per_s = job_failures_per_s(sc, nics_per_node);
  m.restart_s = sc.training.restart_s;
  m.load_s = checkpoint.load_s();
  m.copy_s = checkpoint.save_blocking_s();
  m.write_behind_s = checkpoint.async ? checkpoint.write_s : 0.0;
  f.failures_per_h = m.failures_per_s * 3600.0;
  f.mtbf_h = m.failures_per_s > 0 ? 1.0 / f.failures_per_h : 0;
  f.restart_s = m.restart_s;
  f.optimal_interval_steps = optimal_interval_steps(m);
  f.young_daly_interval_s =
      young_daly_interval_s(blocking_s(m, f.optimal_interval_steps), m.failures_per_s);
  if (f.young_daly_interval_s) f.young_daly_interval_steps = *f.young_daly_interval_s / m.iteration_s;
  f.interval_auto = sc.training.checkpoint.interval_steps == 0;
  f.run = run_at_interval(m, f.interval_auto ? f.optimal_interval_steps
                                             : sc.training.checkpoint.interval_steps);
  f.wall_days = f.run.wall_s / 86400.0;
  f.gpu_hours = f.run.wall_s * double(f.gpus) / 3600.0;
  if (sc.training.gpu_hour_usd > 0) {
    f.gpu_hour_usd = sc.training.gpu_hour_usd;
    f.cost_usd = f.gpu_hours * sc.training.gpu_hour_usd;
  }
  return f;
}

}  // namespace trainsim
