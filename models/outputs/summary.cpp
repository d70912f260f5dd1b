#include "models/outputs/summary.h"

#include <algorithm>
#include <cstdio>
#include <limits>
#include <sstream>
#include <string>
#include <vector>

#include "models/errors.h"
#include "models/outputs/text_format.h"
#include "models/perf/flops.h"

namespace trainsim {

namespace {

using nlohmann::json;

/// The measurement window [t0, t1] of a record and the number of tasks that did not run.
struct Window {
  double t0 = 0, t1 = 0;
  std::size_t not_run = 0;
  double op_flops = 0;  ///< sum of the graph's op FLOPs (simulated ranks)
  bool weighted = false;  ///< op_flops weighted by the ranks each stands for (partial folding)
};

Window record_window(const ScheduleGraph& graph, const ExecutionRecord& record) {
  Window w;
  double t0 = std::numeric_limits<double>::infinity(), t1 = -t0;
  const bool partial = !graph.partial_representatives.empty();
  std::vector<double> weight;  // partial folding: the world ranks each simulated rank stands for
  for (std::uint32_t i = 0; partial && i < graph.simulated_ranks().size(); ++i)
    weight.push_back(static_cast<double>(graph.ranks_represented(i)));
  for (TaskId id = 0; id < graph.num_tasks(); ++id) {
    w.op_flops += partial ? graph.op(id).flops * weight[graph.rank_index(graph.task(id).rank)]
                          : graph.op(id).flops;
    if (!task_ran(record, id)) {
      ++w.not_run;
      continue;
    }
    t0 = std::min(t0, record.start_s[id]);
    t1 = std::max(t1, record.end_s[id]);
  }
  if (t0 > t1) t0 = t1 = 0;
  w.weighted = partial;
  w.t0 = t0;
  w.t1 = t1;
  return w;
}

/// Per simulated rank: exposed time, finish time, whether any task ran.
struct RankSweep {
  std::vector<ExposedTime> exposed;
  std::vector<double> finish;
  std::vector<char> ran;
  std::size_t ranks_ran = 0;
  bool has_host = false;  ///< the record has the host timeline (host_model on)
};

RankSweep sweep_ranks(const ScheduleGraph& graph, const ExecutionRecord& record, const Window& w) {
  const auto& ranks = graph.simulated_ranks();
  const std::vector<double> active = active_start_s(graph, record);
  RankSweep s;
  s.has_host = !record.host_wait_s.empty();
  s.exposed.resize(ranks.size());
  s.finish.assign(ranks.size(), w.t0);
  s.ran.assign(ranks.size(), 0);
  for (std::size_t i = 0; i < ranks.size(); ++i) {
    const std::vector<TaskId> tasks = graph.tasks_of_rank(ranks[i]);
    s.exposed[i] = exposed_time(graph, record, active, tasks, w.t0, w.t1);
    for (TaskId id : tasks)
      if (task_ran(record, id)) {
        s.finish[i] = std::max(s.finish[i], record.end_s[id]);
        s.ran[i] = 1;
      }
  }
  s.ranks_ran = static_cast<std::size_t>(std::count(s.ran.begin(), s.ran.end(), 1));
  return s;
}

Breakdown breakdown_of(const ExposedTime& e) {
  Breakdown b;
  for (int a = 0; a < kNumActivities; ++a) b.by_activity_s[a] = e.by_activity_s[a];
  b.pipeline_bubble_s = e.idle_s;
  b.host_bound_s = e.host_bound_s;
  return b;
}

void fill_run(Summary& s, const ScheduleGraph& graph, const ExecutionRecord& record,
              const Scenario& scenario, const SystemSpec& system, const SummaryOptions& options,
              const Window& w) {
  const ParallelConfig& p = scenario.parallel;
  s.name = scenario.name;
  s.system = system.name;
  s.gpu = system.gpu.name;
  s.schedule = to_string(p.pipeline_schedule);
  s.tensor_model_parallel_size = p.tensor_model_parallel_size;
  s.pipeline_model_parallel_size = p.pipeline_model_parallel_size;
  s.data_parallel_size = p.data_parallel_size;
  s.virtual_pipeline_size = p.virtual_pipeline_size;
  s.micro_batch_size = p.micro_batch_size;
  s.global_batch_size = p.global_batch_size;
  s.microbatches = p.num_microbatches;
  s.world_size = graph.world_size;
  s.folded = graph.fold_factor > 1;
  s.fold_factor = graph.fold_factor;
  s.simulated_ranks = graph.simulated_ranks().size();
  s.tasks = graph.num_tasks();
  s.tasks_not_run = w.not_run;
  s.executor = record.executor;
  s.measured_run = record.measured;
  s.device = record.device;
  // No wall time here: the same input must give a byte-identical summary (docs/summary.md).
  s.calibration = options.calibration_source;
  s.trace_ranks = options.trace_ranks;
  s.trace_ranks_note = options.trace_ranks_note;
  s.fold_reason = options.fold_reason;
  s.unfolded_ranks = graph.unfolded;
  s.notes = record.notes;
}

void fill_throughput(Summary& s, const Scenario& scenario, const SystemSpec& system,
                     const ExecutionRecord& record, const Window& w, std::int64_t fold_factor) {
  s.iteration_time_s = record.iteration_time_s();
  const double it = s.iteration_time_s, world = static_cast<double>(s.world_size);
  auto per_time = [&](double x) { return it > 0 ? x / it : 0.0; };
  const double tokens = static_cast<double>(scenario.parallel.global_batch_size) *
                        static_cast<double>(scenario.model.seq_length);
  s.tokens_per_s = per_time(tokens);
  s.tokens_per_s_per_gpu = world > 0 ? s.tokens_per_s / world : 0.0;
  s.model_flops_per_iteration = model_flops_per_iteration(scenario);
  s.model_tflops_per_gpu = per_time(s.model_flops_per_iteration) / world / 1e12;
  // Partially folded: record_window weighted each rank's FLOPs already.
  s.hardware_flops_per_iteration =
      w.weighted ? w.op_flops : w.op_flops * static_cast<double>(fold_factor);
  s.hardware_tflops_per_gpu = per_time(s.hardware_flops_per_iteration) / world / 1e12;
  s.peak_tflops_per_gpu = system.gpu.peak_dense_fp16_flops / 1e12;
  // No peak is known for a device without figures (the `local` system replayed without a
  // calibration profile): MFU is then null, not a division by zero.
  if (system.gpu.peak_dense_fp16_flops > 0)
    s.mfu = s.model_tflops_per_gpu * 1e12 / system.gpu.peak_dense_fp16_flops;
}

// The settings that shaped the run, in the scenario keys' spellings (SummarySettings).
void fill_settings(Summary& s, const Scenario& scenario) {
  const ParallelConfig& p = scenario.parallel;
  SummarySettings& x = s.settings;
  x.runtime = to_string(scenario.runtime);
  x.precision = to_string(p.precision);
  x.fp8 = to_string(p.fp8);
  x.fp8_recipe = p.fp8 == Fp8Format::None ? "" : to_string(p.fp8_recipe);
  x.recompute_granularity = to_string(p.recompute_granularity);
  const bool full = p.recompute_granularity == Recompute::Full;
  x.recompute_method = full ? (p.recompute_block ? "block" : "uniform") : "";
  x.recompute_num_layers = full ? p.recompute_num_layers : 0;
  x.sequence_parallel = p.sequence_parallel;
  x.use_distributed_optimizer = p.use_distributed_optimizer;
  x.fsdp = p.use_megatron_fsdp ? "megatron_fsdp" : p.use_torch_fsdp2 ? "torch_fsdp2" : "none";
  x.context_parallel_size = p.context_parallel_size;
  x.expert_model_parallel_size = p.expert_model_parallel_size;
  // Absent (0) means Megatron's default, the tensor-parallel size (scenario.h).
  x.expert_tensor_parallel_size = p.expert_tensor_parallel_size > 0
                                      ? p.expert_tensor_parallel_size
                                      : p.tensor_model_parallel_size;
}

void fill_memory(Summary& s, const ScheduleGraph& graph, const ExecutionRecord& record,
                 const Scenario& scenario, const SystemSpec& system, const MemoryTimeline& memory,
                 const std::vector<std::uint32_t>& rep, double t0) {
  s.memory_capacity_bytes = static_cast<std::int64_t>(system.gpu.hbm_bytes);
  std::int64_t peak = std::numeric_limits<std::int64_t>::min();
  for (std::int64_t r = 0; r < graph.world_size; ++r) {
    const MemorySeries& m = memory.gpu[rep[r]];
    if (m.peak_bytes > peak) {
      peak = m.peak_bytes;
      s.peak_memory_rank = r;
    }
    if (m.peak_bytes > s.memory_capacity_bytes) {
      if (s.oom_ranks.size() < kMaxListedOomRanks) s.oom_ranks.push_back(r);
      ++s.oom_ranks_total;
    }
  }
  const MemorySeries& peak_series = memory.gpu[rep[s.peak_memory_rank]];
  s.peak_memory_bytes = peak;
  s.peak_memory_time_s = peak_series.peak_time_s - t0;
  s.peak_memory_by_category = peak_series.peak_by_category;
  if (s.oom()) s.oom_dominant_category = to_string(dominant_category(peak_series.peak_by_category));
  // Measured runs: the allocator's figures (the larger of its recorded peak and the samples).
  s.record_peak_allocated_bytes = record.measured_peak_allocated_bytes();
  s.record_peak_reserved_bytes = record.measured_peak_reserved_bytes();
  s.host_peak_memory_bytes = std::numeric_limits<std::int64_t>::min();
  for (std::int64_t node = 0; node < memory.num_nodes(); ++node)
    if (memory.host(node).peak_bytes > s.host_peak_memory_bytes) {
      s.host_peak_memory_bytes = memory.host(node).peak_bytes;
      s.host_peak_memory_node = node;
    }
  s.host_peak_memory_by_category = memory.host(s.host_peak_memory_node).peak_by_category;
  s.host_memory_capacity_bytes = static_cast<std::int64_t>(system.host_memory_bytes);
  s.host_oom = s.host_peak_memory_bytes > s.host_memory_capacity_bytes;
  // ZeRO / offload (models/memory/zero_offload.h): the ratio in effect, and whether `auto` chose it.
  s.zero_stage = scenario.zero.stage;
  s.offload_optimizer = scenario.zero.offload_optimizer.enabled;
  s.offload_ratio = scenario.zero.offload_optimizer.ratio;
  s.offload_ratio_auto = scenario.zero.offload_optimizer.ratio_auto;
}

void fill_breakdown(Summary& s, const ScheduleGraph& graph, const RankSweep& sw, double t0) {
  // Average over ranks (every simulated rank stands for fold_factor ranks, so the average over
  // simulated ranks is the average over all world ranks).
  // Partially folded (scenario `variability:`), the simulated ranks stand for different
  // numbers of ranks: each is weighted by its share (f = 1 otherwise).
  const auto& ranks = graph.simulated_ranks();
  std::vector<double> f(ranks.size(), 1.0);
  if (!graph.partial_representatives.empty()) {
    double ran_ranks = 0;
    for (std::uint32_t i = 0; i < ranks.size(); ++i)
      if (sw.ran[i]) ran_ranks += static_cast<double>(graph.ranks_represented(i));
    for (std::uint32_t i = 0; i < ranks.size(); ++i)
      f[i] = static_cast<double>(graph.ranks_represented(i)) * sw.ranks_ran / ran_ranks;
  }
  for (std::size_t i = 0; i < ranks.size(); ++i) {
    if (!sw.ran[i]) continue;
    for (int a = 0; a < kNumActivities; ++a)
      s.breakdown.by_activity_s[a] += sw.exposed[i].by_activity_s[a] * f[i] / sw.ranks_ran;
    s.breakdown.pipeline_bubble_s += sw.exposed[i].idle_s * f[i] / sw.ranks_ran;
    s.breakdown.host_bound_s += sw.exposed[i].host_bound_s * f[i] / sw.ranks_ran;
  }
  s.breakdown.has_host = sw.has_host;
  s.breakdown_note =
      std::string(sw.ranks_ran == ranks.size()
                      ? "average over all ranks"
                      : "average over the ranks that ran (" + std::to_string(sw.ranks_ran) +
                            " of " + std::to_string(ranks.size()) + " simulated)") +
      (graph.partial_representatives.empty() ? ", each weighted equally"
                                              : ", each weighted by the ranks it stands for") +
      "; per rank, every instant of the "
      "iteration counts once, for the highest-priority active category (compute > optimizer > "
      "offload > tp_comm > pp_comm > dp_comm), so communication counts only where it is "
      "exposed; comm starts when all its participants have arrived, and time with nothing "
      "active (including waiting for a peer) is pipeline_bubble. The components sum to "
      "iteration_time_s.";
  std::size_t slowest = 0;
  for (std::size_t i = 1; i < ranks.size(); ++i)
    if (sw.finish[i] > sw.finish[slowest]) slowest = i;
  s.has_slowest_rank = sw.ranks_ran > 0;
  if (s.has_slowest_rank) {
    s.slowest_rank = ranks[slowest];
    s.slowest_rank_finish_s = sw.finish[slowest] - t0;
    s.slowest_rank_breakdown = breakdown_of(sw.exposed[slowest]);
    s.slowest_rank_breakdown.has_host = sw.has_host;
  }
}

void fill_per_rank(Summary& s, const ScheduleGraph& graph, const MemoryTimeline& memory,
                   const RankSweep& sw, const std::vector<std::uint32_t>& rep, double t0) {
  const auto& ranks = graph.simulated_ranks();
  s.per_rank.reserve(static_cast<std::size_t>(graph.world_size));
  for (std::int64_t r = 0; r < graph.world_size; ++r) {
    const std::uint32_t i = rep[r];
    const ExposedTime& e = sw.exposed[i];
    RankSummary x;
    x.rank = r;
    x.node = r / memory.gpus_per_node;
    if (graph.fold_factor > 1) x.represented_by = ranks[i];
    x.peak_memory_bytes = memory.gpu[i].peak_bytes;
    x.ran = sw.ran[i] != 0;
    x.finish_s = sw.finish[i] - t0;
    x.compute_s = e.by_activity_s[static_cast<int>(Activity::Compute)];
    x.exposed_comm_s = e.by_activity_s[static_cast<int>(Activity::TpComm)] +
                       e.by_activity_s[static_cast<int>(Activity::PpComm)] +
                       e.by_activity_s[static_cast<int>(Activity::DpComm)];
    x.pipeline_bubble_s = e.idle_s;
    s.per_rank.push_back(x);
  }
}

}  // namespace

Summary make_summary(const ScheduleGraph& graph, const ExecutionRecord& record,
                     const Scenario& scenario, const SystemSpec& system,
                     const MemoryTimeline& memory, const SummaryOptions& options) {
  TRAINSIM_CHECK(record.start_s.size() == graph.num_tasks() &&
                     record.end_s.size() == graph.num_tasks(),
                 "make_summary: the record does not match the graph");
  TRAINSIM_CHECK(memory.gpu.size() == graph.simulated_ranks().size(),
                 "make_summary: the memory timeline does not match the graph");
  const Window w = record_window(graph, record);
  const RankSweep sw = sweep_ranks(graph, record, w);
  const std::vector<std::uint32_t> rep = representative_indices(graph);
  Summary s;
  fill_run(s, graph, record, scenario, system, options, w);
  fill_settings(s, scenario);
  fill_throughput(s, scenario, system, record, w, graph.fold_factor);
  fill_memory(s, graph, record, scenario, system, memory, rep, w.t0);
  fill_breakdown(s, graph, sw, w.t0);
  fill_per_rank(s, graph, memory, sw, rep, w.t0);
  return s;
}

// ---------------------------------------------------------------- JSON

namespace {

json memvector_json(const MemVector& v) {
  json j = json::object();
  for (int c = 0; c < kNumMemCategories; ++c)
    if (c != int(MemCategory::CudaGraphs) || v[c] != 0)  // only where CUDA graphs are captured
      j[to_string(static_cast<MemCategory>(c))] = v[c];
  return j;
}

json breakdown_json(const Breakdown& b) {
  json j = json::object();
  for (int a = 0; a < kNumActivities; ++a)
    j[to_string(static_cast<Activity>(a))] = b.by_activity_s[a];
  j["pipeline_bubble"] = b.pipeline_bubble_s;
  if (b.has_host) j["host_bound"] = b.host_bound_s;
  return j;
}

json rank_json(const RankSummary& x, const MeasuredSummary* measured) {
  json j = json::object();
  j["rank"] = x.rank;
  j["node"] = x.node;
  if (x.represented_by) j["represented_by"] = *x.represented_by;
  j["peak_memory_bytes"] = x.peak_memory_bytes;
  if (measured) {  // the measured peak of the rank a process replayed, the model's beside it
    for (const auto& p : measured->per_process)
      if (p.rank == x.rank && p.rank != measured->replayed_rank) {
        j["modelled_peak_memory_bytes"] = x.peak_memory_bytes;
        j["peak_memory_bytes"] = p.peak_allocated_bytes;
      }
    if (x.rank == measured->replayed_rank) {
      j["modelled_peak_memory_bytes"] = x.peak_memory_bytes;
      j["peak_memory_bytes"] = measured->per_process.empty()
                                   ? measured->peak_allocated_bytes
                                   : measured->per_process.front().peak_allocated_bytes;
    }
  }
  if (!x.ran) j["ran"] = false;
  j["finish_s"] = x.finish_s;
  j["compute_s"] = x.compute_s;
  j["exposed_comm_s"] = x.exposed_comm_s;
  j["pipeline_bubble_s"] = x.pipeline_bubble_s;
  return j;
}

void measured_json(json& j, const Summary& s, const MeasuredSummary& m) {
  j["replayed_rank"] = m.replayed_rank;
  j["modelled_peak_memory_bytes"] = s.peak_memory_bytes;
  j["peak_memory_bytes"] = m.peak_allocated_bytes;
  j["peak_memory_rank"] = m.peak_memory_rank;
  j["measured_peak_allocated_bytes"] = m.peak_allocated_bytes;
  if (m.peak_reserved_bytes >= 0) j["measured_peak_reserved_bytes"] = m.peak_reserved_bytes;
  j["peak_memory_note"] = m.peak_memory_note;
  if (m.per_process.empty()) return;
  json ranks = json::array();
  for (const auto& p : m.per_process)
    ranks.push_back({{"rank", p.rank},
                     {"device", p.device},
                     {"iteration_time_s", p.iteration_time_s},
                     {"peak_allocated_bytes", p.peak_allocated_bytes},
                     {"peak_reserved_bytes", p.peak_reserved_bytes}});
  j["processes"] = m.processes;
  j["measured_per_rank"] = ranks;
  j["iteration_time_max_over_ranks_s"] = m.iteration_time_max_over_ranks_s;
  j["iteration_time_note"] = m.iteration_time_note;
}

json settings_json(const SummarySettings& x) {
  json j = json::object();
  j["runtime"] = x.runtime;
  j["precision"] = x.precision;
  j["fp8"] = x.fp8;
  if (x.fp8 != "none") j["fp8_recipe"] = x.fp8_recipe;
  j["recompute_granularity"] = x.recompute_granularity;
  if (x.recompute_granularity == "full") {
    j["recompute_method"] = x.recompute_method;
    j["recompute_num_layers"] = x.recompute_num_layers;
  }
  j["sequence_parallel"] = x.sequence_parallel;
  j["use_distributed_optimizer"] = x.use_distributed_optimizer;
  j["fsdp"] = x.fsdp;
  j["context_parallel_size"] = x.context_parallel_size;
  j["expert_model_parallel_size"] = x.expert_model_parallel_size;
  j["expert_tensor_parallel_size"] = x.expert_tensor_parallel_size;
  return j;
}

}  // namespace

namespace {

/// `unfolded_ranks` (docs/summary.md): partial folding's ranks and reasons.
json unfolded_json(const Summary& s) {
  json u = json::array();
  for (const auto& x : s.unfolded_ranks) u.push_back({{"ranks", x.ranks}, {"reason", x.reason}});
  return u;
}

/// The host memory and ZeRO / offload keys.
void host_and_offload_json(json& j, const Summary& s) {
  j["host_peak_memory_bytes"] = s.host_peak_memory_bytes;
  j["host_peak_memory_node"] = s.host_peak_memory_node;
  j["host_peak_memory_by_category"] = memvector_json(s.host_peak_memory_by_category);
  j["host_memory_capacity_bytes"] = s.host_memory_capacity_bytes;
  j["host_oom"] = s.host_oom;
  j["zero_stage"] = s.zero_stage;
  j["offload_optimizer"] = s.offload_optimizer;
  if (s.offload_optimizer) {
    j["offload_ratio"] = s.offload_ratio;
    j["offload_ratio_auto"] = s.offload_ratio_auto;
  }
}

}  // namespace

json summary_to_json(const Summary& s) {
  json j = json::object();
  j["summary_version"] = s.version;
  j["name"] = s.name;
  j["system"] = s.system;
  j["gpu"] = s.gpu;
  j["schedule"] = s.schedule;
  j["tensor_model_parallel_size"] = s.tensor_model_parallel_size;
  j["pipeline_model_parallel_size"] = s.pipeline_model_parallel_size;
  j["data_parallel_size"] = s.data_parallel_size;
  j["virtual_pipeline_size"] = s.virtual_pipeline_size;
  j["micro_batch_size"] = s.micro_batch_size;
  j["global_batch_size"] = s.global_batch_size;
  j["microbatches"] = s.microbatches;
  j["world_size"] = s.world_size;
  j["folded"] = s.folded;
  j["fold_factor"] = s.fold_factor;
  j["fold_reason"] = s.fold_reason;
  j["simulated_ranks"] = s.simulated_ranks;
  if (!s.unfolded_ranks.empty()) j["unfolded_ranks"] = unfolded_json(s);
  j["tasks"] = s.tasks;
  j["tasks_not_run"] = s.tasks_not_run;
  j["executor"] = s.executor;
  j["measured"] = s.measured_run;
  j["device"] = s.device;
  j["calibration"] = s.calibration;
  j["trace_ranks"] = s.trace_ranks;
  j["trace_ranks_note"] = s.trace_ranks_note;
  j["notes"] = s.notes;
  j["settings"] = settings_json(s.settings);
  j["iteration_time_s"] = s.iteration_time_s;
  j["tokens_per_s"] = s.tokens_per_s;
  j["tokens_per_s_per_gpu"] = s.tokens_per_s_per_gpu;
  j["model_flops_per_iteration"] = s.model_flops_per_iteration;
  j["model_tflops_per_gpu"] = s.model_tflops_per_gpu;
  j["hardware_flops_per_iteration"] = s.hardware_flops_per_iteration;
  j["hardware_tflops_per_gpu"] = s.hardware_tflops_per_gpu;
  j["peak_tflops_per_gpu"] = s.peak_tflops_per_gpu;
  j["mfu"] = s.mfu ? json(*s.mfu) : json(nullptr);
  j["peak_memory_bytes"] = s.peak_memory_bytes;
  j["peak_memory_rank"] = s.peak_memory_rank;
  j["peak_memory_time_s"] = s.peak_memory_time_s;
  j["peak_memory_by_category"] = memvector_json(s.peak_memory_by_category);
  j["memory_capacity_bytes"] = s.memory_capacity_bytes;
  j["oom"] = s.oom();
  if (s.oom()) {
    j["oom_ranks"] = s.oom_ranks;
    j["oom_ranks_total"] = s.oom_ranks_total;
    j["oom_capacity_bytes"] = s.memory_capacity_bytes;
    j["oom_peak_bytes"] = s.peak_memory_bytes;
    j["oom_excess_bytes"] = s.peak_memory_bytes - s.memory_capacity_bytes;
    j["oom_dominant_category"] = s.oom_dominant_category;
  }
  if (s.record_peak_allocated_bytes >= 0)
    j["measured_peak_allocated_bytes"] = s.record_peak_allocated_bytes;
  if (s.record_peak_reserved_bytes >= 0)
    j["measured_peak_reserved_bytes"] = s.record_peak_reserved_bytes;
  host_and_offload_json(j, s);
  j["breakdown_s"] = breakdown_json(s.breakdown);
  j["breakdown_note"] = s.breakdown_note;
  if (s.has_slowest_rank)
    j["breakdown_slowest_rank"] = {{"rank", s.slowest_rank},
                                   {"finish_s", s.slowest_rank_finish_s},
                                   {"breakdown_s", breakdown_json(s.slowest_rank_breakdown)}};
  json per_rank = json::array();
  const MeasuredSummary* m = s.measured ? &*s.measured : nullptr;
  for (const RankSummary& x : s.per_rank) per_rank.push_back(rank_json(x, m));
  j["per_rank"] = std::move(per_rank);
  if (m) measured_json(j, s, *m);
  return j;
}

// ---------------------------------------------------------------- text

namespace {

// models/outputs/text_format.h: the formats and units shared with `diff` and `plan`.
std::string fmt(const char* format, double v) { return format_number(format, v); }
std::string gib(double b) { return binary_bytes_text(b); }

void text_breakdown(std::ostringstream& o, const Breakdown& b, double it) {
  auto line = [&](const std::string& k, double v) {
    o << "    " << k << std::string(18 - k.size(), ' ') << fmt("%.6f s", v)
      << fmt("  %5.1f%%", it > 0 ? 100 * v / it : 0.0) << "\n";
  };
  for (int a = 0; a < kNumActivities; ++a)
    line(to_string(static_cast<Activity>(a)), b.by_activity_s[a]);
  line("pipeline_bubble", b.pipeline_bubble_s);
  if (b.has_host) line("host_bound", b.host_bound_s);
}

void text_memory(std::ostringstream& o, const Summary& s) {
  o << (s.measured ? "  modelled GPU memory   " : "  peak GPU memory       ")
    << gib(double(s.peak_memory_bytes)) << " on rank "
    << s.peak_memory_rank << " of " << gib(double(s.memory_capacity_bytes)) << ":";
  for (int c = 0; c < kNumMemCategories; ++c)
    if (s.peak_memory_by_category[c] != 0)
      o << " " << to_string(static_cast<MemCategory>(c)) << " "
        << gib(double(s.peak_memory_by_category[c])) << ";";
  o << "\n";
  if (s.measured)
    o << "  measured peak memory  " << gib(double(s.measured->peak_allocated_bytes))
      << " (allocator, rank " << s.measured->peak_memory_rank << " on " << s.device
      << "; the line above is the model's estimate for that rank)\n";
  if (s.offload_optimizer || s.host_peak_memory_bytes > 0)
    o << "  peak host memory      " << gib(double(s.host_peak_memory_bytes)) << " on node "
      << s.host_peak_memory_node << " of " << gib(double(s.host_memory_capacity_bytes))
      << (s.host_oom ? "  ** exceeds host memory **" : "") << "\n";
  if (s.offload_optimizer)
    o << "  optimizer offload     ZeRO-" << s.zero_stage << ", "
      << fmt("%.2f", s.offload_ratio) << " of the parameters stepped by CPU Adam"
      << (s.offload_ratio_auto ? " (chosen by ratio: auto: the smallest that fits)" : "")
      << "\n";
  if (s.oom())
    o << "  OUT OF MEMORY         " << s.oom_ranks_total << " rank(s), e.g. rank "
      << s.oom_ranks.front() << ": peak " << gib(double(s.peak_memory_bytes)) << " exceeds "
      << gib(double(s.memory_capacity_bytes)) << " by "
      << gib(double(s.peak_memory_bytes - s.memory_capacity_bytes))
      << " (largest category: " << s.oom_dominant_category << ")\n";
}

std::string text_settings(const SummarySettings& x) {
  std::string o = x.runtime + ", " + x.precision;
  if (x.fp8 != "none") o += ", FP8 " + x.fp8 + " (" + x.fp8_recipe + ")";
  o += ", recompute " + x.recompute_granularity;
  if (x.recompute_granularity == "full")
    o += " (" + x.recompute_method + ", " + std::to_string(x.recompute_num_layers) + " layers)";
  o += std::string(", SP ") + (x.sequence_parallel ? "on" : "off");
  o += std::string(", distributed optimizer ") + (x.use_distributed_optimizer ? "on" : "off");
  if (x.fsdp != "none") o += ", " + x.fsdp;
  o += ", CP " + std::to_string(x.context_parallel_size) + ", EP " +
       std::to_string(x.expert_model_parallel_size) + ", ETP " +
       std::to_string(x.expert_tensor_parallel_size);
  return o;
}

}  // namespace

std::string format_text_summary(const Summary& s) {
  std::ostringstream o;
  const double it = s.iteration_time_s;
  o << s.name << ": " << s.world_size << " GPUs of " << s.system << " (TP "
    << s.tensor_model_parallel_size
    << (s.world_size > s.tensor_model_parallel_size * s.pipeline_model_parallel_size *
                           s.data_parallel_size
            ? " x CP " + std::to_string(s.world_size / (s.tensor_model_parallel_size *
                                                        s.pipeline_model_parallel_size *
                                                        s.data_parallel_size))
            : std::string())
    << " x PP " << s.pipeline_model_parallel_size << " x DP " << s.data_parallel_size << "), " << s.schedule << ", " << s.microbatches
    << " microbatches of " << s.micro_batch_size << "\n";
  if (s.measured_run) o << "  replayed on           " << s.device << " (" << s.gpu << ")\n";
  o << "  iteration time        " << fmt("%.6f s", it) << "\n";
  o << "  throughput            " << fmt("%.1f tokens/s", s.tokens_per_s)
    << fmt(" (%.1f tokens/s per GPU)", s.tokens_per_s_per_gpu) << "\n";
  o << "  model TFLOP/s per GPU " << fmt("%.1f", s.model_tflops_per_gpu);
  if (!s.mfu)
    o << "  (MFU unknown: no peak figure for this device)\n";
  else
    o << "  (MFU " << fmt("%.1f%%", 100 * *s.mfu) << " of " << fmt("%.0f", s.peak_tflops_per_gpu)
      << " TFLOP/s peak)\n";
  o << "  hardware TFLOP/s/GPU  " << fmt("%.1f", s.hardware_tflops_per_gpu)
    << "  (recomputation included)\n";
  text_memory(o, s);
  o << "  breakdown (average over ranks, exposed time):\n";
  text_breakdown(o, s.breakdown, it);
  if (s.has_slowest_rank) {
    o << "  breakdown of the slowest rank (" << s.slowest_rank << ", finishes at "
      << fmt("%.6f s", s.slowest_rank_finish_s) << "):\n";
    text_breakdown(o, s.slowest_rank_breakdown, it);
  }
  o << "  simulated ranks       " << s.simulated_ranks << " of " << s.world_size;
  if (s.folded && s.unfolded_ranks.empty())
    o << " (folded: each stands for " << s.fold_factor << " ranks)";
  else if (s.folded)
    o << " (partially folded: the ranks below are simulated themselves, the others folded "
         "by up to " << s.fold_factor << ")";
  o << "\n";
  if (!s.fold_reason.empty()) o << "  folding               " << s.fold_reason << "\n";
  for (const auto& x : s.unfolded_ranks)
    o << "  unfolded              " << x.ranks.size() << " rank(s) from " << x.ranks.front()
      << ": " << x.reason << "\n";
  o << "  tasks                 " << s.tasks;
  if (s.tasks_not_run > 0) o << " (" << s.tasks_not_run << " did not run)";
  o << "\n";
  o << "  settings              " << text_settings(s.settings) << "\n";
  o << "  executor              " << s.executor << "\n";
  o << "  calibration           " << s.calibration << "\n";
  o << "  trace ranks           " << s.trace_ranks << ": " << s.trace_ranks_note << "\n";
  for (const auto& note : s.notes) o << "  note: " << note << "\n";
  return o.str();
}

}  // namespace trainsim
