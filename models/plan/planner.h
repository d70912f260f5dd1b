// The planner (`trainsim plan`): the fastest parallel layout of a scenario's
// model, cluster and global batch that fits in memory, searched in three stages
// (docs/plan.md):
//
//   enumerate  every combination of the `plan:` section's dimensions (TP, PP,
//   virtual stages,
//              micro batch, recomputation, sequence parallelism, ZeRO stage /
//              distributed optimizer, FSDP, FP8, context, expert and expert-tensor
//              parallelism, offload); each
//              candidate is the scenario file with `--set` overrides and passes
//              the same validation as `simulate` (load_scenario: one code
//              path), or is rejected with that validation's message;
//   (a) memory the peak GPU memory of the candidate's schedule graph (the
//   builder and memory
//              model of `simulate`, no second formula), built with the fewest
//              microbatches that reach the same activation peak
//              (reduced_microbatches); above capacity minus the headroom:
//              rejected (OOM);
//   (b) estimate an iteration time from the same reduced graph and the same
//   cost model:
//              per-stage microbatch times from its tasks, combined in the
//              pipeline's closed form (estimate_iteration_s);
//   (c) confirm the top K by estimate simulated event by event (apps/plan.cpp,
//   worker
//              processes), ranked by simulated tokens/s (rank_results).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "models/input/scenario.h"

namespace trainsim {

/// Which FSDP implementation a candidate shards with (docs/plan.md `fsdp`).
enum class FsdpKind : std::uint8_t { None, Megatron, Torch };
const char* to_string(FsdpKind f);
/// The FSDP implementation a scenario's parallel section names.
FsdpKind fsdp_kind(const ParallelConfig& p);

/// The `plan:` section: values each dimension takes (docs/plan.md lists
/// defaults).
struct PlanConfig {
  std::vector<std::int64_t> tensor_model_parallel_size;
  std::vector<std::int64_t> pipeline_model_parallel_size;
  /// Layers per virtual stage; nullopt = no interleaving.
  std::vector<std::optional<std::int64_t>> num_layers_per_virtual_pipeline_stage;
  bool all_virtual_stages = false;  ///< `all`: every divisor of the layers per stage
  /// Not in `plan:`: none, and the scenario's own layers per virtual stage where they split a
  /// stage into two or more chunks.
  bool virtual_stages_from_scenario = false;
  std::vector<std::int64_t> micro_batch_size;
  std::vector<Recompute> recompute_granularity;
  /// `recompute_num_layers`: full candidates run Megatron's block recomputation with each of
  /// these layer counts; empty: the scenario's own method.
  std::vector<std::int64_t> recompute_num_layers;
  /// `recompute_modules`: selective candidates run each of these module sets (kRecompute*
  /// bits, Megatron-Core --recompute-modules); empty: the scenario's own modules.
  std::vector<std::uint8_t> recompute_modules;
  std::vector<bool> sequence_parallel;
  std::vector<std::int64_t> zero_stage;
  std::vector<bool> use_distributed_optimizer;
  std::vector<std::int64_t> context_parallel_size;
  std::vector<std::int64_t> expert_model_parallel_size;
  /// `expert_tensor_parallel_size`: expert TP ranks (0: the candidate's TP, Megatron's default).
  std::vector<std::int64_t> expert_tensor_parallel_size;
  /// `fsdp`: none, megatron_fsdp or torch_fsdp2 (parallel.use_megatron_fsdp / use_torch_fsdp2).
  std::vector<FsdpKind> fsdp;
  /// `fp8`: none and the FP8 formats (parallel.fp8); FP8 candidates keep the scenario's recipe.
  std::vector<Fp8Format> fp8;
  bool allow_offload = false;
  std::int64_t max_gpus = 0;      ///< GPUs every candidate uses (cluster size by default)
  double memory_headroom = 0.05;  ///< fraction of the GPU memory kept free
  std::int64_t top_k = 50;        ///< candidates simulated event by event
};

/// Reads the `plan:` section of a scenario file (errors name the file, field
/// and value) and fills defaults from the base scenario.
PlanConfig load_plan_config(const std::string& scenario_path, const ValidScenario& base);

/// One candidate layout: the overrides applied to the scenario file.
struct PlanCandidate {
  std::size_t index = 0;  ///< position in the enumeration (stable, used by --shard)
  std::vector<std::pair<std::string, std::string>> overrides;
  std::string layout;  ///< e.g. "tp8 pp64 dp6 mb1 full"
};

/// Every candidate of the space, in a fixed order.
std::vector<PlanCandidate> enumerate_candidates(const PlanConfig& plan, const ValidScenario& base);

/// The points of the plan's grid that enumerate_candidates visits, counted without building
/// them (a double: a space's size can pass 2^64): an upper bound of the candidates, which
/// omit the grid points that duplicate another (sequence parallelism at TP 1, ...).
double count_grid_points(const PlanConfig& plan, const ValidScenario& base);

/// Why a candidate was not simulated.
enum class PlanRejection : std::uint8_t { None, Invalid, OutOfMemory, BelowCut };
const char* to_string(PlanRejection r);

/// Stages (a) and (b) for one candidate.
struct CandidateEstimate {
  PlanRejection rejection = PlanRejection::None;
  std::string reason;  ///< the validation message (Invalid) or the memory figure
  std::int64_t world_size = 0;
  std::int64_t peak_memory_bytes = 0;  ///< stage (a), modelled peak of the busiest rank
  std::int64_t memory_capacity_bytes = 0;
  double estimate_iteration_s = 0;  ///< stage (b)
  double estimate_tokens_per_s = 0;
};

/// Validates the candidate (prepare_platform with its overrides: load_scenario and the system
/// and profile its simulation uses, `calibration_path` as simulate's --calibration), builds its
/// reduced graph, checks memory and estimates the iteration time. Never throws for a bad
/// candidate.
CandidateEstimate estimate_candidate(
    const std::string& scenario_path,
    const std::vector<std::pair<std::string, std::string>>& base_overrides,
    const PlanCandidate& candidate, double memory_headroom,
    const std::string& calibration_path = "");

/// Microbatches of the reduced graph: the fewest (a multiple of PP where the
/// interleaved schedule needs it) whose schedule holds as many microbatches in
/// flight on every stage as the full iteration, also once after the first backward
/// (whose gradient buckets stay), so its peak is the full run's; the full count
/// for GPipe.
std::int64_t reduced_microbatches(const ParallelConfig& p);

/// The simulated outcome of a confirmed candidate (from its summary).
struct CandidateResult {
  PlanCandidate candidate;
  CandidateEstimate estimate;
  bool simulated = false;
  std::string error;  ///< a failed simulation
  double iteration_time_s = 0, tokens_per_s = 0, model_tflops_per_gpu = 0, mfu = 0;
  std::int64_t peak_memory_bytes = 0, memory_capacity_bytes = 0;
  double bubble_share = 0, exposed_comm_share = 0;
  bool oom = false;
  /// The whole run's forecast (models/forecast/forecast.h) at the candidate's simulated
  /// iteration time, when the scenario has a training: section: goodput, wall-clock days, and
  /// the cost when training.gpu_hour_usd is set.
  std::optional<double> goodput, wall_days, cost_usd;
};

/// What `plan --objective` ranks by (docs/plan.md).
enum class PlanObjective : std::uint8_t {
  TokensPerS,  ///< simulated tokens/s, higher first
  Goodput,     ///< forecast goodput, higher first (needs a training: section)
  Cost,        ///< forecast cost of the run, lower first (needs training.gpu_hour_usd)
};
/// "tokens_per_s", "goodput" or "cost"; throws InputError naming --objective otherwise.
PlanObjective parse_plan_objective(const std::string& name);
const char* to_string(PlanObjective objective);

/// Ranking: the candidates simulated without error or OOM first, by the objective (a candidate
/// without the objective's figure after those with it), then by simulated tokens/s, higher
/// first; ties by lower peak memory, then by the enumeration index (deterministic).
void rank_results(std::vector<CandidateResult>& results,
                  PlanObjective objective = PlanObjective::TokensPerS);

}  // namespace trainsim
