// trainsim replay: scenario -> schedule graph -> one rank replayed on the CPU or a GPU through
// LibTorch (hw_backend/replay.h) -> measured summary and trace, same schema as `simulate`.
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iostream>
#include <memory>
#include <sstream>
#include <string>

#include "apps/verbs.h"
#include "hw_backend/replay.h"
#include "models/activity.h"
#include "models/graph_builder.h"
#include "models/hardware.h"
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

}  // namespace

int replay_main(const ReplayArgs& args) {
  const Scenario sc = load_scenario(args.scenario, args.overrides);
  const SystemSpec& system = find_system(sc.cluster.system);
  hw::ReplayOptions opts;
  opts.device = args.device.empty() ? (hw::cuda_available() ? "cuda" : "cpu") : args.device;
  if (args.rank < 0 || args.rank >= sc.world_size())
    throw InputError("replay: --rank " + std::to_string(args.rank) + " is outside the " +
                     std::to_string(sc.world_size()) + " ranks of " + args.scenario);

  auto json_file = open_replay_output(args.json, "--json");
  auto trace_file = open_replay_output(args.trace, "--trace");

  BuildOptions build;
  build.fold = should_fold(sc);
  const ScheduleGraph graph = build_schedule_graph(sc, system, build);
  opts.rank = hw::representative_rank(graph, sc, args.rank);
  ExecutionRecord record = hw::replay(graph, sc, opts);
  if (opts.rank != args.rank)
    record.notes.insert(record.notes.begin(),
                        "--rank " + std::to_string(args.rank) + " is identical to rank " +
                            std::to_string(opts.rank) +
                            " in the folded schedule graph; that rank's tasks were replayed");

  // The trace and the modelled memory timeline cover the replayed rank only.
  const TraceSelection selection =
      select_trace_ranks(graph, sc.parallel, std::to_string(opts.rank));
  const MemoryTimeline memory =
      build_memory_timeline(graph, record, sc.parallel, sc.cluster.gpus_per_node);
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

  if (json_file) {
    *json_file << summary.dump(2) << "\n";
    close_replay_output(json_file.get(), args.json, "--json");
  }
  if (trace_file) {
    std::ostringstream trace;
    write_chrome_trace(trace, graph, record, memory, selection,
                       TraceInfo{sc.name, sc.cluster.gpus_per_node});
    *trace_file << add_allocator_counter(trace.str(), record, opts.rank);
    close_replay_output(trace_file.get(), args.trace, "--trace");
  }
  std::cout << format_text_summary(summary);
  std::cout.flush();
  if (!std::cout) throw std::runtime_error("cannot write to stdout");
  return 0;
}

}  // namespace trainsim::cli
