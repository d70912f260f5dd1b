#include "models/summary.h"

#include <algorithm>
#include <cinttypes>
#include <cstdio>
#include <limits>
#include <sstream>
#include <string>
#include <vector>

#include "models/activity.h"
#include "models/flops.h"

namespace trainsim {

namespace {

using nlohmann::json;

json memvector_json(const MemVector& v) {
  json j = json::object();
  for (int c = 0; c < kNumMemCategories; ++c) j[to_string(static_cast<MemCategory>(c))] = v[c];
  return j;
}

json breakdown_json(const double (&by_activity)[kNumActivities], double idle_s) {
  json j = json::object();
  for (int a = 0; a < kNumActivities; ++a) j[to_string(static_cast<Activity>(a))] = by_activity[a];
  j["pipeline_bubble"] = idle_s;
  return j;
}

}  // namespace

json make_summary(const ScheduleGraph& graph, const ExecutionRecord& record,
                  const Scenario& scenario, const SystemSpec& system, const MemoryTimeline& memory,
                  const SummaryOptions& options) {
  const std::size_t n = graph.num_tasks();
  if (record.start_s.size() != n || record.end_s.size() != n)
    throw std::logic_error("make_summary: the record does not match the graph");
  const ParallelConfig& p = scenario.parallel;
  const auto& ranks = graph.simulated_ranks();
  if (memory.gpu.size() != ranks.size())
    throw std::logic_error("make_summary: the memory timeline does not match the graph");

  // ---- time window and per-rank sweeps
  double t0 = std::numeric_limits<double>::infinity(), t1 = -t0;
  std::size_t not_run = 0;
  double hw_flops_simulated = 0;
  for (TaskId id = 0; id < n; ++id) {
    hw_flops_simulated += graph.op(id).flops;
    if (!task_ran(record, id)) {
      ++not_run;
      continue;
    }
    t0 = std::min(t0, record.start_s[id]);
    t1 = std::max(t1, record.end_s[id]);
  }
  if (t0 > t1) t0 = t1 = 0;
  const double iteration_s = record.iteration_time_s();
  const std::vector<double> active = active_start_s(graph, record);

  std::vector<ExposedTime> exposed(ranks.size());
  std::vector<double> finish(ranks.size(), t0);
  std::vector<char> ran(ranks.size(), 0);  // the rank has a task that ran (a replay runs one)
  for (std::size_t i = 0; i < ranks.size(); ++i) {
    const std::vector<TaskId> tasks = graph.tasks_of_rank(ranks[i]);
    exposed[i] = exposed_time(graph, record, active, tasks, t0, t1);
    for (TaskId id : tasks)
      if (task_ran(record, id)) {
        finish[i] = std::max(finish[i], record.end_s[id]);
        ran[i] = 1;
      }
  }
  const auto ranks_ran = static_cast<std::size_t>(std::count(ran.begin(), ran.end(), 1));

  json s = json::object();
  // ---- what ran
  s["name"] = scenario.name;
  s["system"] = system.name;
  s["gpu"] = system.gpu.name;
  s["schedule"] = to_string(p.pipeline_schedule);
  s["tensor_model_parallel_size"] = p.tensor_model_parallel_size;
  s["pipeline_model_parallel_size"] = p.pipeline_model_parallel_size;
  s["data_parallel_size"] = p.data_parallel_size;
  s["virtual_pipeline_size"] = p.virtual_pipeline_size;
  s["micro_batch_size"] = p.micro_batch_size;
  s["global_batch_size"] = p.global_batch_size;
  s["microbatches"] = p.num_microbatches;
  s["world_size"] = graph.world_size;
  s["folded"] = graph.fold_factor > 1;
  s["fold_factor"] = graph.fold_factor;
  s["simulated_ranks"] = ranks.size();
  s["tasks"] = n;
  s["tasks_not_run"] = not_run;
  s["executor"] = record.executor;
  s["measured"] = record.measured;
  s["device"] = record.device;
  // No wall time here: the same input must give a byte-identical summary (DESIGN.md).
  s["calibration"] = options.calibration_source;
  s["trace_ranks"] = options.trace_ranks;
  s["trace_ranks_note"] = options.trace_ranks_note;
  s["notes"] = record.notes;

  // ---- throughput and FLOPs
  const double world = static_cast<double>(graph.world_size);
  auto per_time = [&](double x) { return iteration_s > 0 ? x / iteration_s : 0.0; };
  const double tokens =
      static_cast<double>(p.global_batch_size) * static_cast<double>(scenario.model.seq_length);
  const double model_flops = model_flops_per_iteration(scenario);
  const double hw_flops = hw_flops_simulated * static_cast<double>(graph.fold_factor);
  const double model_tflops = per_time(model_flops) / world / 1e12;
  s["iteration_time_s"] = iteration_s;
  s["tokens_per_s"] = per_time(tokens);
  s["model_flops_per_iteration"] = model_flops;
  s["model_tflops_per_gpu"] = model_tflops;
  s["hardware_flops_per_iteration"] = hw_flops;
  s["hardware_tflops_per_gpu"] = per_time(hw_flops) / world / 1e12;
  s["peak_tflops_per_gpu"] = system.gpu.peak_dense_fp16_flops / 1e12;
  // No peak is known for a device without figures (the `local` system replayed without a
  // calibration profile): MFU is then null, not a division by zero.
  if (system.gpu.peak_dense_fp16_flops > 0)
    s["mfu"] = model_tflops * 1e12 / system.gpu.peak_dense_fp16_flops;
  else
    s["mfu"] = nullptr;

  // ---- memory
  const std::vector<std::uint32_t> rep = representative_indices(graph);
  const auto capacity = static_cast<std::int64_t>(system.gpu.hbm_bytes);
  std::int64_t peak = std::numeric_limits<std::int64_t>::min();
  std::int64_t peak_rank = 0;
  std::vector<std::int64_t> oom_ranks;
  for (std::int64_t r = 0; r < graph.world_size; ++r) {
    const MemorySeries& m = memory.gpu[rep[r]];
    if (m.peak_bytes > peak) {
      peak = m.peak_bytes;
      peak_rank = r;
    }
    if (m.peak_bytes > capacity) oom_ranks.push_back(r);
  }
  const MemorySeries& peak_series = memory.gpu[rep[peak_rank]];
  s["peak_memory_bytes"] = peak;
  s["peak_memory_rank"] = peak_rank;
  s["peak_memory_time_s"] = peak_series.peak_time_s - t0;
  s["peak_memory_by_category"] = memvector_json(peak_series.peak_by_category);
  s["memory_capacity_bytes"] = capacity;
  s["oom"] = !oom_ranks.empty();
  if (!oom_ranks.empty()) {
    const std::size_t listed = std::min(oom_ranks.size(), kMaxListedOomRanks);
    s["oom_ranks"] = std::vector<std::int64_t>(oom_ranks.begin(), oom_ranks.begin() + listed);
    s["oom_ranks_total"] = oom_ranks.size();
    s["oom_capacity_bytes"] = capacity;
    s["oom_peak_bytes"] = peak;
    s["oom_excess_bytes"] = peak - capacity;
    s["oom_dominant_category"] = to_string(dominant_category(peak_series.peak_by_category));
  }
  // Measured runs: the allocator's own figures next to the modelled ones (the larger of its
  // recorded peak and the per-task samples).
  auto measured_peak = [](std::int64_t peak,
                          const std::vector<std::pair<double, std::int64_t>>& samples) {
    for (const auto& sample : samples) peak = std::max(peak, sample.second);
    return peak;
  };
  const std::int64_t alloc =
      measured_peak(record.peak_allocated_bytes, record.allocated_bytes_samples);
  const std::int64_t reserved =
      measured_peak(record.peak_reserved_bytes, record.reserved_bytes_samples);
  if (alloc >= 0) s["measured_peak_allocated_bytes"] = alloc;
  if (reserved >= 0) s["measured_peak_reserved_bytes"] = reserved;
  std::int64_t host_peak = std::numeric_limits<std::int64_t>::min(), host_peak_node = 0;
  for (std::int64_t node = 0; node < memory.num_nodes(); ++node)
    if (memory.host(node).peak_bytes > host_peak) {
      host_peak = memory.host(node).peak_bytes;
      host_peak_node = node;
    }
  const auto host_capacity = static_cast<std::int64_t>(system.host_memory_bytes);
  s["host_peak_memory_bytes"] = host_peak;
  s["host_peak_memory_node"] = host_peak_node;
  s["host_peak_memory_by_category"] = memvector_json(memory.host(host_peak_node).peak_by_category);
  s["host_memory_capacity_bytes"] = host_capacity;
  s["host_oom"] = host_peak > host_capacity;
  // ZeRO / offload (models/zero_offload.h): the ratio in effect, and whether `auto` chose it.
  s["zero_stage"] = scenario.zero.stage;
  s["offload_optimizer"] = scenario.zero.offload_optimizer.enabled;
  if (scenario.zero.offload_optimizer.enabled) {
    s["offload_ratio"] = scenario.zero.offload_optimizer.ratio;
    s["offload_ratio_auto"] = scenario.zero.offload_optimizer.ratio_auto;
  }

  // ---- breakdown: average over ranks (every simulated rank stands for fold_factor ranks,
  // so the average over simulated ranks is the average over all world ranks)
  double avg[kNumActivities] = {};
  double avg_idle = 0;
  for (std::size_t i = 0; i < ranks.size(); ++i) {
    if (!ran[i]) continue;
    for (int a = 0; a < kNumActivities; ++a) avg[a] += exposed[i].by_activity_s[a] / ranks_ran;
    avg_idle += exposed[i].idle_s / ranks_ran;
  }
  s["breakdown_s"] = breakdown_json(avg, avg_idle);
  s["breakdown_note"] =
      std::string(ranks_ran == ranks.size()
                      ? "average over all ranks"
                      : "average over the ranks that ran (" + std::to_string(ranks_ran) + " of " +
                            std::to_string(ranks.size()) + " simulated)") +
      ", each weighted equally; per rank, every instant of the "
      "iteration counts once, for the highest-priority active category (compute > optimizer > "
      "offload > tp_comm > pp_comm > dp_comm), so communication counts only where it is "
      "exposed; comm starts when all its participants have arrived, and time with nothing "
      "active (including waiting for a peer) is pipeline_bubble. The components sum to "
      "iteration_time_s.";
  std::size_t slowest = 0;
  for (std::size_t i = 1; i < ranks.size(); ++i)
    if (finish[i] > finish[slowest]) slowest = i;
  if (ranks_ran > 0) {
    json sl = json::object();
    sl["rank"] = ranks[slowest];
    sl["finish_s"] = finish[slowest] - t0;
    sl["breakdown_s"] = breakdown_json(exposed[slowest].by_activity_s, exposed[slowest].idle_s);
    s["breakdown_slowest_rank"] = sl;
  }

  // ---- per world rank (folded representatives replicated to the ranks they stand for)
  json per_rank = json::array();
  for (std::int64_t r = 0; r < graph.world_size; ++r) {
    const std::uint32_t i = rep[r];
    const ExposedTime& e = exposed[i];
    json j = json::object();
    j["rank"] = r;
    j["node"] = r / memory.gpus_per_node;
    if (graph.fold_factor > 1) j["represented_by"] = ranks[i];
    j["peak_memory_bytes"] = memory.gpu[i].peak_bytes;
    if (!ran[i]) j["ran"] = false;
    j["finish_s"] = finish[i] - t0;
    j["compute_s"] = e.by_activity_s[static_cast<int>(Activity::Compute)];
    j["exposed_comm_s"] = e.by_activity_s[static_cast<int>(Activity::TpComm)] +
                          e.by_activity_s[static_cast<int>(Activity::PpComm)] +
                          e.by_activity_s[static_cast<int>(Activity::DpComm)];
    j["pipeline_bubble_s"] = e.idle_s;
    per_rank.push_back(std::move(j));
  }
  s["per_rank"] = std::move(per_rank);
  return s;
}

namespace {

std::string fmt(const char* format, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, format, v);
  return buf;
}

// Bytes in binary units: "49.18 GiB", "12.50 MiB", "3.00 KiB", "512 B".
std::string gib(const json& bytes) {
  const double b = bytes.get<double>();
  const double a = b < 0 ? -b : b;
  if (a >= 1024.0 * 1024 * 1024) return fmt("%.2f GiB", b / (1024.0 * 1024 * 1024));
  if (a >= 1024.0 * 1024) return fmt("%.2f MiB", b / (1024.0 * 1024));
  if (a >= 1024.0) return fmt("%.2f KiB", b / 1024.0);
  return fmt("%.0f B", b);
}

}  // namespace

std::string format_text_summary(const json& s) {
  std::ostringstream o;
  const double it = s.at("iteration_time_s").get<double>();
  o << s.at("name").get<std::string>() << ": " << s.at("world_size") << " GPUs of "
    << s.at("system").get<std::string>() << " (TP " << s.at("tensor_model_parallel_size")
    << " x PP " << s.at("pipeline_model_parallel_size") << " x DP " << s.at("data_parallel_size")
    << "), " << s.at("schedule").get<std::string>() << ", " << s.at("microbatches")
    << " microbatches of " << s.at("micro_batch_size") << "\n";
  o << "  iteration time        " << fmt("%.6f s", it) << "\n";
  o << "  throughput            " << fmt("%.1f tokens/s", s.at("tokens_per_s").get<double>())
    << "\n";
  o << "  model TFLOP/s per GPU " << fmt("%.1f", s.at("model_tflops_per_gpu").get<double>());
  if (s.at("mfu").is_null())
    o << "  (MFU unknown: no peak figure for this device)\n";
  else
    o << "  (MFU " << fmt("%.1f%%", 100 * s.at("mfu").get<double>()) << " of "
      << fmt("%.0f", s.at("peak_tflops_per_gpu").get<double>()) << " TFLOP/s peak)\n";
  o << "  hardware TFLOP/s/GPU  " << fmt("%.1f", s.at("hardware_tflops_per_gpu").get<double>())
    << "  (recomputation included)\n";
  o << "  peak GPU memory       " << gib(s.at("peak_memory_bytes")) << " on rank "
    << s.at("peak_memory_rank") << " of " << gib(s.at("memory_capacity_bytes")) << ":";
  for (const auto& [cat, bytes] : s.at("peak_memory_by_category").items())
    if (bytes.get<std::int64_t>() != 0) o << " " << cat << " " << gib(bytes) << ";";
  o << "\n";
  o << "  peak host memory      " << gib(s.at("host_peak_memory_bytes")) << " on node "
    << s.at("host_peak_memory_node") << " of " << gib(s.at("host_memory_capacity_bytes"))
    << (s.at("host_oom").get<bool>() ? "  ** exceeds host memory **" : "") << "\n";
  if (s.at("oom").get<bool>()) {
    o << "  OUT OF MEMORY         " << s.at("oom_ranks_total") << " rank(s), e.g. rank "
      << s.at("oom_ranks").at(0) << ": peak " << gib(s.at("oom_peak_bytes")) << " exceeds "
      << gib(s.at("oom_capacity_bytes")) << " by " << gib(s.at("oom_excess_bytes"))
      << " (largest category: " << s.at("oom_dominant_category").get<std::string>() << ")\n";
  }
  auto breakdown = [&](const json& b) {
    static const char* keys[] = {"compute", "optimizer", "offload",        "tp_comm",
                                 "pp_comm", "dp_comm",   "pipeline_bubble"};
    for (const char* k : keys) {
      const double v = b.at(k).get<double>();
      o << "    " << k << std::string(18 - std::string(k).size(), ' ') << fmt("%.6f s", v)
        << fmt("  %5.1f%%", it > 0 ? 100 * v / it : 0.0) << "\n";
    }
  };
  o << "  breakdown (average over ranks, exposed time):\n";
  breakdown(s.at("breakdown_s"));
  if (s.contains("breakdown_slowest_rank")) {
    const json& sl = s.at("breakdown_slowest_rank");
    o << "  breakdown of the slowest rank (" << sl.at("rank") << ", finishes at "
      << fmt("%.6f s", sl.at("finish_s").get<double>()) << "):\n";
    breakdown(sl.at("breakdown_s"));
  }
  o << "  simulated ranks       " << s.at("simulated_ranks") << " of " << s.at("world_size");
  if (s.at("folded").get<bool>())
    o << " (folded: each stands for " << s.at("fold_factor") << " ranks)";
  o << "\n";
  o << "  tasks                 " << s.at("tasks");
  if (s.at("tasks_not_run").get<std::size_t>() > 0)
    o << " (" << s.at("tasks_not_run") << " did not run)";
  o << "\n";
  o << "  executor              " << s.at("executor").get<std::string>() << "\n";
  o << "  calibration           " << s.at("calibration").get<std::string>() << "\n";
  o << "  trace ranks           " << s.at("trace_ranks").get<std::string>() << ": "
    << s.at("trace_ranks_note").get<std::string>() << "\n";
  for (const auto& note : s.at("notes")) o << "  note: " << note.get<std::string>() << "\n";
  return o.str();
}

}  // namespace trainsim
