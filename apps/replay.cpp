// trainsim replay: scenario -> schedule graph -> one rank replayed on the CPU or a GPU through
// LibTorch (hw_backend/replay.h) -> measured summary and trace, same schema as `simulate`.
#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iostream>
#include <memory>
#include <sstream>
#include <string>

#include "apps/verbs.h"
#include "hw_backend/launch.h"
#include "hw_backend/replay.h"
#include "kernels/rendezvous.h"
#include "models/activity.h"
#include "models/graph_builder.h"
#include "models/calibration.h"
#include "models/hardware.h"
#include "models/local_device.h"

#include <unistd.h>
#include "models/memory_timeline.h"
#include "models/scenario.h"
#include "models/summary.h"
#include "models/trace_writer.h"

namespace trainsim::cli {

namespace {

std::unique_ptr<std::ofstream> open_replay_output(const std::string& path, const char* flag) {
  if (path.empty()) return nullptr;
  auto f = std::make_unique<std::ofstream>(path, std::ios::binary | std::ios::trunc);
  if (!*f)
    throw InputError(std::string(flag) + " '" + path + "': cannot write the file (" +
                     std::strerror(errno) + ")");
  return f;
}

void close_replay_output(std::ofstream* f, const std::string& path, const char* flag) {
  if (!f) return;
  f->flush();
  if (!*f) throw std::runtime_error(std::string(flag) + " '" + path + "': write failed");
  f->close();
}

/// Adds the allocator's measured bytes (record samples) to a trace made by write_chrome_trace:
/// a counter "allocator" on the replayed rank's process, series "allocated" and "reserved",
/// inserted before the closing "]}" of traceEvents. Times as the writer's: the record's seconds
/// printed as microseconds with 3 decimals.
std::string add_allocator_counter(const std::string& trace, const ExecutionRecord& record,
                                  std::int64_t rank) {
  const std::size_t close = trace.rfind("]}");
  if (close == std::string::npos || record.allocated_bytes_samples.empty()) return trace;
  std::string events;
  char buf[256];
  for (std::size_t i = 0; i < record.allocated_bytes_samples.size(); ++i) {
    const auto& [t, allocated] = record.allocated_bytes_samples[i];
    const std::int64_t reserved = i < record.reserved_bytes_samples.size()
                                      ? record.reserved_bytes_samples[i].second
                                      : allocated;
    std::snprintf(buf, sizeof buf,
                  ",\n{\"ph\":\"C\",\"pid\":%lld,\"name\":\"allocator\",\"ts\":%.3f,"
                  "\"args\":{\"allocated\":%lld,\"reserved\":%lld}}",
                  static_cast<long long>(rank), t * 1e6,
                  static_cast<long long>(allocated), static_cast<long long>(reserved));
    events += buf;
  }
  // The writer ends the array with "\n]}": insert after the last event.
  std::size_t at = close;
  if (at > 0 && trace[at - 1] == '\n') --at;
  return trace.substr(0, at) + events + trace.substr(at);
}

/// Marks each complete event of a replayed communication task with how it ran
/// (args.replayed_as: "nccl", "device-local copy", "no-op") and puts the record's notes in
/// otherData.notes, so the trace itself says what was substituted.
std::string annotate_trace(const std::string& trace, const ExecutionRecord& record) {
  nlohmann::json j = nlohmann::json::parse(trace);
  j["otherData"]["notes"] = record.notes;
  if (!record.replayed_as.empty())
    for (auto& e : j.at("traceEvents")) {
      if (e.value("ph", "") != "X" || !e.contains("args") || !e["args"].contains("task")) continue;
      const auto id = e["args"]["task"].get<std::uint64_t>();
      if (id < record.replayed_as.size() && !record.replayed_as[id].empty())
        e["args"]["replayed_as"] = record.replayed_as[id];
    }
  return j.dump() + "\n";
}

/// The CUDA device of a launcher's worker: LOCAL_RANK, or 0 when the launcher gave each
/// process a single visible GPU (CUDA_VISIBLE_DEVICES without a comma, as srun --gpu-bind
/// or a per-rank wrapper script do).
int worker_device(const hw::ProcessEnv& env) {
  const char* visible = std::getenv("CUDA_VISIBLE_DEVICES");
  if (visible && *visible && std::strchr(visible, ',') == nullptr) return 0;
  return env.local_rank;
}

/// What a rank > 0 of a multi-process replay reports to rank 0 (through the rendezvous).
nlohmann::json rank_result(std::int64_t rank, const ExecutionRecord& r) {
  return {{"rank", rank},
          {"device", r.device},
          {"iteration_time_s", r.iteration_time_s()},
          {"peak_allocated_bytes", r.peak_allocated_bytes},
          {"peak_reserved_bytes", r.peak_reserved_bytes}};
}

}  // namespace

int replay_main(const ReplayArgs& args) {
  const Scenario sc = load_scenario(args.scenario, args.overrides);
  SystemSpec system = find_system(sc.cluster.system);
  if (sc.cluster.system == kLocalSystemName && args.device != "cuda") {
    // This machine's CPU as the device: its capacity is the physical memory (the replay's
    // tensors live there); its peak FLOP/s is unknown without a profile (MFU reported null).
    const long pages = sysconf(_SC_PHYS_PAGES), page_bytes = sysconf(_SC_PAGE_SIZE);
    if (pages > 0 && page_bytes > 0) {
      system.gpu.hbm_bytes = double(pages) * double(page_bytes);
      system.host_memory_bytes = system.gpu.hbm_bytes;
    }
  }
  hw::ReplayOptions opts;

  // Multi-process replay (hw_backend/launch.h): a launcher's worker replays its RANK on GPU
  // LOCAL_RANK; `--nprocs N` without a launcher starts N workers and waits for them.
  const hw::ProcessEnv env = hw::process_env();
  std::int64_t nprocs = 1;
  if (env.worker) {
    if (args.nprocs > 0 && args.nprocs != env.world_size)
      throw InputError("replay: --nprocs " + std::to_string(args.nprocs) + " but the launcher (" +
                       env.launcher + ") started WORLD_SIZE=" + std::to_string(env.world_size) +
                       " processes");
    nprocs = env.world_size;
  } else if (args.nprocs > 1) {
    if (!args.device.empty() && args.device != "cuda")
      throw InputError("replay: --nprocs " + std::to_string(args.nprocs) +
                       " (one process per GPU, NCCL) needs --device cuda");
    if (args.nprocs > sc.world_size())
      throw InputError("replay: --nprocs " + std::to_string(args.nprocs) + " is more than the " +
                       std::to_string(sc.world_size()) + " ranks of " + args.scenario);
    std::string why;
    if (!hw::multiprocess_available(&why) || !hw::cuda_available(&why))
      throw InputError("replay: --nprocs " + std::to_string(args.nprocs) + ": " + why);
    return hw::launch_local_workers(static_cast<int>(args.nprocs));
  }
  const bool multi = nprocs > 1;
  const std::int64_t me = multi ? env.rank : 0;
  if (multi) {
    if (!args.device.empty() && args.device != "cuda")
      throw InputError("replay: a multi-process replay needs --device cuda (got " + args.device + ")");
    if (args.rank != 0)
      throw InputError("replay: --rank with several processes: each process replays its own "
                       "RANK (" + std::to_string(env.rank) + ")");
    opts.device = "cuda:" + std::to_string(worker_device(env));
    opts.nprocs = nprocs;
    opts.nccl_dir = env.nccl_dir;
    opts.nccl_run_id = env.run_id;
    opts.nccl_timeout_s = env.timeout_s;
  } else if (env.worker) {
    opts.device = args.device.empty() || args.device == "cuda"
                      ? "cuda:" + std::to_string(worker_device(env)) : args.device;
  } else {
    opts.device = args.device.empty() ? (hw::cuda_available() ? "cuda" : "cpu") : args.device;
  }
  const std::int64_t wanted_rank = multi ? env.rank : args.rank;
  if (wanted_rank < 0 || wanted_rank >= sc.world_size())
    throw InputError("replay: --rank " + std::to_string(wanted_rank) + " is outside the " +
                     std::to_string(sc.world_size()) + " ranks of " + args.scenario);

  // Rank 0 writes the summary and the trace; rank r > 0 of a multi-process replay its own
  // trace next to it (per_rank_path) and its figures to rank 0 through the rendezvous.
  auto json_file = open_replay_output(me == 0 ? args.json : std::string(), "--json");
  const std::string trace_path = me == 0 || args.trace.empty() ? args.trace : hw::per_rank_path(args.trace, int(me));
  auto trace_file = open_replay_output(trace_path, "--trace");

  BuildOptions build;
  build.fold = multi ? false : should_fold(sc);  // every process needs its own rank's tasks
  // The `local` system (this machine, models/local_device.h) has no shipped profile: its
  // memory model needs only the framework and NCCL buffer bytes, both 0 for a replay (no
  // framework bytes among the counted tensors, no NCCL).
  CalibrationProfile local_memory;
  if (sc.cluster.system == kLocalSystemName) build.calibration = &local_memory;
  const ScheduleGraph graph = build_schedule_graph(sc, system, build);
  opts.rank = hw::representative_rank(graph, sc, wanted_rank);
  ExecutionRecord record = hw::replay(graph, sc, opts);
  if (opts.rank != wanted_rank)
    record.notes.insert(record.notes.begin(),
                        "--rank " + std::to_string(args.rank) + " is identical to rank " +
                            std::to_string(opts.rank) +
                            " in the folded schedule graph; that rank's tasks were replayed");

  // The trace and the modelled memory timeline cover the replayed rank only.
  const TraceSelection selection =
      select_trace_ranks(graph, std::to_string(opts.rank));
  const MemoryTimeline memory =
      build_memory_timeline(graph, record, sc.cluster.gpus_per_node);
  SummaryOptions summary_options;
  summary_options.calibration_source = "none (measured replay)";
  summary_options.trace_ranks = format_rank_list(selection.ranks);
  summary_options.trace_ranks_note = "the replayed rank";
  nlohmann::json summary = make_summary(graph, record, sc, system, memory, summary_options);

  // Measured values replace the modelled ones (DESIGN.md: "replay --json writes the same
  // keys, measured"); the model's figures stay next to them for comparison.
  summary["replayed_rank"] = opts.rank;
  summary["modelled_peak_memory_bytes"] = summary["peak_memory_bytes"];
  summary["peak_memory_bytes"] = record.peak_allocated_bytes;
  summary["peak_memory_rank"] = opts.rank;
  summary["measured_peak_allocated_bytes"] = record.peak_allocated_bytes;
  summary["measured_peak_reserved_bytes"] = record.peak_reserved_bytes;
  summary["peak_memory_note"] =
      "peak_memory_bytes is the allocator's measured peak on the replayed rank's device " +
      record.device + "; modelled_peak_memory_bytes is models/'s estimate for the same rank";
  if (summary.contains("per_rank"))
    for (auto& r : summary["per_rank"])
      if (r.contains("rank") && r["rank"] == opts.rank) {
        r["modelled_peak_memory_bytes"] = r["peak_memory_bytes"];
        r["peak_memory_bytes"] = record.peak_allocated_bytes;
      }
  if (multi && me == 0) {  // every process's measured figures, from the rendezvous
    kernels::FileRendezvous rv(opts.nccl_dir, opts.nccl_run_id, opts.nccl_timeout_s);
    nlohmann::json ranks = nlohmann::json::array({rank_result(0, record)});
    for (std::int64_t r = 1; r < nprocs; ++r) {
      const std::string name = "result.rank" + std::to_string(r);
      ranks.push_back(nlohmann::json::parse(rv.wait(name, -1, "rank " + std::to_string(r))));
      rv.remove(name);
    }
    std::int64_t peak = -1, peak_rank = 0;
    double slowest_s = 0;
    for (const auto& r : ranks) {
      if (r.at("peak_allocated_bytes").get<std::int64_t>() > peak)
        peak = r["peak_allocated_bytes"].get<std::int64_t>(), peak_rank = r["rank"].get<std::int64_t>();
      slowest_s = std::max(slowest_s, r.at("iteration_time_s").get<double>());
      if (summary.contains("per_rank"))
        for (auto& pr : summary["per_rank"])
          if (pr.contains("rank") && pr["rank"] == r["rank"] && r["rank"] != 0) {
            pr["modelled_peak_memory_bytes"] = pr["peak_memory_bytes"];
            pr["peak_memory_bytes"] = r["peak_allocated_bytes"];
          }
    }
    summary["processes"] = nprocs;
    summary["measured_per_rank"] = ranks;
    summary["peak_memory_bytes"] = peak;
    summary["peak_memory_rank"] = peak_rank;
    summary["measured_peak_allocated_bytes"] = peak;
    summary["iteration_time_max_over_ranks_s"] = slowest_s;
    summary["iteration_time_note"] =
        "iteration_time_s and the figures derived from it are rank 0's; measured_per_rank has "
        "every process's (their clocks start together, after an NCCL barrier)";
    summary["peak_memory_note"] =
        "peak_memory_bytes is the largest allocator peak over the " + std::to_string(nprocs) +
        " processes' GPUs (measured_per_rank); modelled_peak_memory_bytes is models/'s estimate "
        "for rank 0";
  }

  if (json_file) {
    *json_file << summary.dump(2) << "\n";
    close_replay_output(json_file.get(), args.json, "--json");
  }
  if (trace_file) {
    std::ostringstream trace;
    write_chrome_trace(trace, graph, record, memory, selection,
                       TraceInfo{sc.name, sc.cluster.gpus_per_node});
    *trace_file << annotate_trace(add_allocator_counter(trace.str(), record, opts.rank), record);
    close_replay_output(trace_file.get(), trace_path, "--trace");
  }
  if (me > 0) {  // a worker of a multi-process replay: report to rank 0, print nothing
    kernels::FileRendezvous rv(opts.nccl_dir, opts.nccl_run_id, opts.nccl_timeout_s);
    rv.publish("result.rank" + std::to_string(me), rank_result(me, record).dump());
    return 0;
  }
  std::cout << format_text_summary(summary);
  std::cout.flush();
  if (!std::cout) throw std::runtime_error("cannot write to stdout");
  return 0;
}

}  // namespace trainsim::cli
