// The summary of one executed iteration (DESIGN.md "Command line (contract)": the keys
// `trainsim simulate --json` writes and `--format json` prints), computed from a schedule graph
// and an execution record, so simulated and replayed runs report the same keys.
//
// Keys (all times in seconds, memory in bytes, rates per second):
//   iteration_time_s          latest task end - earliest task start (ExecutionRecord)
//   tokens_per_s              global_batch_size * seq_length / iteration_time_s
//   model_flops_per_iteration 72 B s l h^2 (1 + s/6h + V/12lh) (models/flops.h; no recompute)
//   model_tflops_per_gpu      model_flops_per_iteration / iteration_time_s / world_size / 1e12
//   hardware_flops_per_iteration  sum of the graph's op FLOPs (recomputation included) x
//                             fold_factor (each simulated rank stands for fold_factor ranks)
//   hardware_tflops_per_gpu   hardware_flops_per_iteration / iteration_time_s / world_size / 1e12
//   peak_tflops_per_gpu, mfu  datasheet dense FP16/BF16 peak; mfu = model / peak
//   peak_memory_bytes         largest GPU peak over all ranks (+ rank, time from the
//                             iteration start, by category), from the graph's memory effects
//   measured_peak_allocated_bytes / measured_peak_reserved_bytes
//                             measured runs only: the record's allocator peak or its largest
//                             sample, whichever is larger
//   memory_capacity_bytes     GPU memory (catalog); host_* likewise per node
//   oom                       any GPU peak > capacity; when true also oom_ranks (the first
//                             kMaxListedOomRanks world ranks), oom_ranks_total,
//                             oom_capacity_bytes, oom_peak_bytes, oom_excess_bytes (peak -
//                             capacity), oom_dominant_category (largest category at that peak)
//   zero_stage, offload_optimizer; with offload also offload_ratio (in effect) and
//                             offload_ratio_auto (true when `ratio: auto` chose it)
//   breakdown_s               {compute, optimizer, offload, tp_comm, pp_comm, dp_comm,
//                             pipeline_bubble}: per rank, each instant of the iteration counts
//                             for the highest-priority active category (activity.h), idle time
//                             is pipeline_bubble; averaged over the ranks that ran any task
//                             (all of them when simulated; see breakdown_note)
//   breakdown_slowest_rank    {rank, finish_s, breakdown_s} of the rank whose last task ends last
//   per_rank                  one entry per world rank: {rank, node, peak_memory_bytes,
//                             finish_s, compute_s, exposed_comm_s, pipeline_bubble_s}, plus
//                             represented_by when folded, ran: false for a rank none of whose
//                             tasks ran (a replay runs one rank)
//   name, system, gpu, schedule, tensor/pipeline/data_parallel_size, microbatches, world_size,
//   folded, fold_factor, simulated_ranks, tasks, tasks_not_run, executor, measured, device,
//   wall_time_s, calibration, trace_ranks, trace_ranks_note, notes
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "models/execution_record.h"
#include "models/hardware.h"
#include "models/memory_timeline.h"
#include "models/scenario.h"
#include "models/schedule_graph.h"

namespace trainsim {

constexpr std::size_t kMaxListedOomRanks = 64;

struct SummaryOptions {
  std::string calibration_source;  ///< e.g. "default A100-SXM4-80GB (datasheet-derived)"
  std::string trace_ranks;         ///< ranks the trace covers, "0-7,56-63"
  std::string trace_ranks_note;    ///< how they were chosen
};

nlohmann::json make_summary(const ScheduleGraph& graph, const ExecutionRecord& record,
                            const Scenario& scenario, const SystemSpec& system,
                            const MemoryTimeline& memory, const SummaryOptions& options);

/// A readable multi-line report of a summary made by make_summary (the CLI's default output).
std::string format_text_summary(const nlohmann::json& summary);

}  // namespace trainsim
