// The summary of one executed iteration (docs/summary.md lists every key): a typed value
// computed from a schedule graph and an execution record, so simulated and replayed runs
// report the same fields, with two serialisers (JSON for `--json` / `--format json`, text for
// the terminal). Modelled figures (from the graph and the record's task times) and measured
// ones (a replay's allocator, its processes) are kept apart: a replay fills
// Summary::measured, and only the JSON serialiser decides how the two appear (docs/summary.md:
// replay --json writes the same keys, measured: peak_memory_bytes is then the measured peak,
// modelled_peak_memory_bytes the model's).
//
// Formulas (all times in seconds, memory in bytes, rates per second):
//   iteration_time_s          latest task end - earliest task start (ExecutionRecord)
//   tokens_per_s              global_batch_size * seq_length / iteration_time_s
//   tokens_per_s_per_gpu      tokens_per_s / world_size
//   model_flops_per_iteration 72 B s l h^2 (1 + s/6h + V/12lh) (models/perf/flops.h; no recompute)
//   model_tflops_per_gpu      model_flops_per_iteration / iteration_time_s / world_size / 1e12
//   hardware_flops_per_iteration  sum of the graph's op FLOPs (recomputation included) x
//                             fold_factor (each simulated rank stands for fold_factor ranks)
//   hardware_tflops_per_gpu   hardware_flops_per_iteration / iteration_time_s / world_size / 1e12
//   peak_tflops_per_gpu, mfu  datasheet dense FP16/BF16 peak; mfu = model / peak (null when
//                             the device has no peak figure)
//   peak_memory_bytes         largest GPU peak over all ranks (+ rank, time from the
//                             iteration start, by category), from the graph's memory effects
//   oom                       any GPU peak > capacity (then the oom_* fields)
//   breakdown_s               per rank, each instant of the iteration counts for the
//                             highest-priority active category (activity.h), idle time is
//                             pipeline_bubble; averaged over the ranks that ran any task
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "models/outputs/activity.h"
#include "models/graph/execution_record.h"
#include "models/hardware/hardware.h"
#include "models/outputs/memory_timeline.h"
#include "models/input/scenario.h"
#include "models/graph/schedule_graph.h"

namespace trainsim {

constexpr std::size_t kMaxListedOomRanks = 64;

/// Version of the summary's JSON form (docs/summary.md, docs/summary.schema.json): bumped
/// when a key is renamed or removed or its meaning changes; adding a key keeps it.
constexpr int kSummaryVersion = 1;

struct SummaryOptions {
  std::string calibration_source;  ///< e.g. "default A100-SXM4-80GB (datasheet-derived)"
  std::string trace_ranks;         ///< ranks the trace covers, "0-7,56-63"
  std::string trace_ranks_note;    ///< how they were chosen
  /// Why the run is (or is not) folded (models/run.h fold_decision); text output only.
  std::string fold_reason;
};

/// Exposed seconds by activity (activity.h order) plus the idle pipeline bubble.
struct Breakdown {
  double by_activity_s[kNumActivities] = {};
  double pipeline_bubble_s = 0;
  /// With the host timeline (host_model on) only: the device idle waiting for the host
  /// (ExposedTime::host_bound_s), reported as the breakdown's `host_bound`.
  bool has_host = false;
  double host_bound_s = 0;
};

/// The settings that shaped the run, repeated in the summary so that two summaries can be
/// compared without their scenarios (`trainsim diff`, docs/cli.md). Spellings are the
/// scenario keys' (docs/scenario.md).
struct SummarySettings {
  std::string runtime;      ///< megatron-core | megatron-2021
  std::string precision;    ///< fp16 | bf16 | fp32
  std::string fp8;          ///< none | e4m3 | hybrid (--fp8-format)
  std::string fp8_recipe;   ///< the recipe when fp8 is not none, else ""
  std::string recompute_granularity;  ///< none | selective | full
  std::string recompute_method;       ///< full recomputation: uniform | block, else ""
  std::int64_t recompute_num_layers = 0;  ///< full recomputation only, else 0
  bool sequence_parallel = false;
  bool use_distributed_optimizer = false;
  std::string fsdp;         ///< none | megatron_fsdp | torch_fsdp2
  std::int64_t context_parallel_size = 1, expert_model_parallel_size = 1,
               expert_tensor_parallel_size = 1;
};

/// One world rank (folded representatives are replicated to the ranks they stand for).
struct RankSummary {
  std::int64_t rank = 0;
  std::int64_t node = 0;
  std::optional<std::int64_t> represented_by;  ///< folded runs only
  std::int64_t peak_memory_bytes = 0;          ///< modelled
  bool ran = true;  ///< false for a rank none of whose tasks ran (a replay runs one)
  double finish_s = 0;
  double compute_s = 0;
  double exposed_comm_s = 0;  ///< tp + pp + dp exposed communication
  double pipeline_bubble_s = 0;
};

/// What a replay measured (hw_backend/): the allocator's figures and, for a multi-process
/// replay, every process's.
struct MeasuredSummary {
  std::int64_t replayed_rank = 0;
  std::int64_t peak_allocated_bytes = 0;  ///< the largest over the processes
  std::int64_t peak_memory_rank = 0;      ///< whose allocator saw peak_allocated_bytes
  std::int64_t peak_reserved_bytes = -1;  ///< < 0: unknown
  std::string peak_memory_note;
  struct Process {
    std::int64_t rank = 0;
    std::string device;
    double iteration_time_s = 0;
    std::int64_t peak_allocated_bytes = 0;
    std::int64_t peak_reserved_bytes = 0;
  };
  std::int64_t processes = 1;
  std::vector<Process> per_process;  ///< multi-process replays only
  double iteration_time_max_over_ranks_s = 0;
  std::string iteration_time_note;
};

struct Summary {
  int version = kSummaryVersion;
  // ---- what ran
  std::string name, system, gpu, schedule;
  std::int64_t tensor_model_parallel_size = 1, pipeline_model_parallel_size = 1,
               data_parallel_size = 1, virtual_pipeline_size = 1, micro_batch_size = 1,
               global_batch_size = 1, microbatches = 1, world_size = 0;
  bool folded = false;
  std::int64_t fold_factor = 1;
  std::size_t simulated_ranks = 0, tasks = 0, tasks_not_run = 0;
  std::string executor, device;
  bool measured_run = false;  ///< the record is a measurement (JSON key `measured`)
  std::string calibration, trace_ranks, trace_ranks_note, fold_reason;
  /// Partial folding (scenario `variability:`): the ranks simulated themselves and why
  /// (ScheduleGraph::unfolded); JSON `unfolded_ranks`, present only when not empty.
  std::vector<ScheduleGraph::UnfoldedRanks> unfolded_ranks;
  std::vector<std::string> notes;
  SummarySettings settings;
  // ---- throughput and FLOPs
  double iteration_time_s = 0, tokens_per_s = 0, tokens_per_s_per_gpu = 0;
  double model_flops_per_iteration = 0, model_tflops_per_gpu = 0;
  double hardware_flops_per_iteration = 0, hardware_tflops_per_gpu = 0;
  double peak_tflops_per_gpu = 0;
  std::optional<double> mfu;
  // ---- GPU memory (modelled)
  std::int64_t peak_memory_bytes = 0, peak_memory_rank = 0;
  double peak_memory_time_s = 0;
  MemVector peak_memory_by_category{};
  std::int64_t memory_capacity_bytes = 0;
  std::vector<std::int64_t> oom_ranks;  ///< the first kMaxListedOomRanks; empty: no OOM
  std::size_t oom_ranks_total = 0;
  std::string oom_dominant_category;
  bool oom() const { return oom_ranks_total > 0; }
  /// The record's allocator peaks (measured runs; < 0 when the record has none).
  std::int64_t record_peak_allocated_bytes = -1, record_peak_reserved_bytes = -1;
  // ---- host memory (modelled)
  std::int64_t host_peak_memory_bytes = 0, host_peak_memory_node = 0;
  MemVector host_peak_memory_by_category{};
  std::int64_t host_memory_capacity_bytes = 0;
  bool host_oom = false;
  // ---- ZeRO / offload
  int zero_stage = 0;
  bool offload_optimizer = false;
  double offload_ratio = 0;
  bool offload_ratio_auto = false;
  // ---- breakdown
  Breakdown breakdown;
  std::string breakdown_note;
  bool has_slowest_rank = false;
  std::int64_t slowest_rank = 0;
  double slowest_rank_finish_s = 0;
  Breakdown slowest_rank_breakdown;
  std::vector<RankSummary> per_rank;
  // ---- a replay's measurements
  std::optional<MeasuredSummary> measured;
};

Summary make_summary(const ScheduleGraph& graph, const ExecutionRecord& record,
                     const Scenario& scenario, const SystemSpec& system,
                     const MemoryTimeline& memory, const SummaryOptions& options);

/// The JSON form (docs/summary.md): `--json` and `--format json`.
nlohmann::json summary_to_json(const Summary& summary);

/// A readable multi-line report (the CLI's default output).
std::string format_text_summary(const Summary& summary);

}  // namespace trainsim
