// trainsim replay: a prepared run (models/run.h) whose rank is replayed on the CPU or a GPU
// through LibTorch (hw_backend/replay.h) -> measured summary and trace, same schema as
// `simulate`. The multi-process launch (one process per GPU, NCCL) is replay's own business.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <optional>
#include <sstream>
#include <string>

#include <nlohmann/json.hpp>

#include "apps/output_file.h"
#include "apps/verbs.h"
#include "hw_backend/launch.h"
#include "hw_backend/replay.h"
#include "kernels/rendezvous.h"
#include "models/run.h"
#include "models/memory/zero_offload.h"

namespace trainsim::cli {

namespace {

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

MeasuredSummary::Process process_of(const nlohmann::json& j) {
  MeasuredSummary::Process p;
  p.rank = j.at("rank").get<std::int64_t>();
  p.device = j.at("device").get<std::string>();
  p.iteration_time_s = j.at("iteration_time_s").get<double>();
  p.peak_allocated_bytes = j.at("peak_allocated_bytes").get<std::int64_t>();
  p.peak_reserved_bytes = j.at("peak_reserved_bytes").get<std::int64_t>();
  return p;
}

/// Refuses a replay whose modelled peak for the rank does not fit in the memory its device has
/// free now (hw::device_free_memory_bytes: MemAvailable on the CPU, cudaMemGetInfo on a GPU).
/// On the CPU the model's element size is scaled to the replay's fp32 or bf16.
void check_replay_fits(const PreparedRun& run, const hw::ReplayOptions& opts,
                       const std::string& scenario_path) {
  const std::int64_t available = hw::device_free_memory_bytes(opts.device);
  if (available < 0) return;
  const bool cpu = opts.device == "cpu";
  const double scale = cpu ? double(opts.cpu_dtype == "bf16" ? 2 : 4) /
                                 double(precision_bytes(run.scenario->parallel.precision))
                           : 1.0;
  const double need = double(program_order_peak_gpu_bytes(run.graph, opts.rank)) * scale;
  if (need <= double(available)) return;
  char buf[160];
  std::snprintf(buf, sizeof buf, "%.2f GiB, but %.2f GiB", need / (1ull << 30),
                double(available) / (1ull << 30));
  throw InputError("replay: rank " + std::to_string(opts.rank) + " of " + scenario_path +
                   " needs about " + buf + " of memory are available on this machine's " +
                   opts.device + (cpu ? " (CPU replay in " + opts.cpu_dtype + ")" : "") +
                   "; replay a smaller scenario (scenarios/small/) or pass --force to try "
                   "anyway");
}

}  // namespace

int replay_main(const ReplayArgs& args) {
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
    if (!args.device.empty() && args.device != "cuda" && args.device != "cpu")
      throw InputError("replay: --nprocs " + std::to_string(args.nprocs) +
                       " needs --device cuda (one process per GPU, NCCL) or --device cpu (one "
                       "process per rank, the host backend), got " + args.device);
    const std::int64_t world = load_scenario(args.scenario, args.overrides).world_size();
    if (args.nprocs > world)
      throw InputError("replay: --nprocs " + std::to_string(args.nprocs) + " is more than the " +
                       std::to_string(world) + " ranks of " + args.scenario);
    // CPU processes communicate through the rendezvous directory (hw_backend/host_comm.h).
    if (args.device == "cpu") return hw::launch_local_workers(static_cast<int>(args.nprocs));
    std::string why;
    if (!hw::multiprocess_available(&why) || !hw::cuda_available(&why))
      throw InputError("replay: --nprocs " + std::to_string(args.nprocs) + ": " + why);
    const int gpus = hw::cuda_device_count();
    if (args.nprocs > gpus)
      throw InputError("replay: --nprocs " + std::to_string(args.nprocs) +
                       " runs one process per GPU: " + std::to_string(gpus) +
                       " CUDA device(s) visible on this machine");
    return hw::launch_local_workers(static_cast<int>(args.nprocs));
  }
  const bool multi = nprocs > 1;
  const std::int64_t me = multi ? env.rank : 0;
  hw::ReplayOptions opts;
  if (multi) {
    if (!args.device.empty() && args.device != "cuda" && args.device != "cpu")
      throw InputError("replay: a multi-process replay needs --device cuda or cpu (got " +
                       args.device + ")");
    if (args.rank != 0)
      throw InputError("replay: --rank with several processes: each process replays its own "
                       "RANK (" + std::to_string(env.rank) + ")");
    const bool cpu = args.device == "cpu";
    const int device = cpu ? 0 : worker_device(env), gpus = cpu ? 1 : hw::cuda_device_count();
    opts.device = cpu ? "cpu" : "cuda:" + std::to_string(device);
    if (device >= gpus)
      throw InputError("replay: rank " + std::to_string(env.rank) + " (" + env.launcher +
                       ") would run on " + opts.device + ", and " + std::to_string(gpus) +
                       " CUDA device(s) are visible (LOCAL_RANK, CUDA_VISIBLE_DEVICES)");
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

  // Rank 0 writes the summary and the trace; rank r > 0 of a multi-process replay its own
  // trace next to it (per_rank_path) and its figures to rank 0 through the rendezvous.
  const std::string json_path = me == 0 ? args.json : std::string();
  const std::string trace_path =
      me == 0 || args.trace.empty() ? args.trace : hw::per_rank_path(args.trace, int(me));
  check_distinct_paths({{"scenario", args.scenario}}, {{"--json", json_path}, {"--trace", trace_path}});
  OutputFile json_file(json_path, "--json"), trace_file(trace_path, "--trace");

  RunRequest req;
  req.purpose = RunPurpose::Replay;
  req.scenario_path = args.scenario;
  req.overrides = args.overrides;
  req.device = opts.device.rfind("cuda", 0) == 0 ? "cuda" : "cpu";
  req.unfolded = multi;
  req.force = args.force;
  const PreparedRun run = prepare_run(req);
  const std::int64_t wanted_rank = multi ? env.rank : args.rank;
  if (wanted_rank < 0 || wanted_rank >= run.scenario->world_size())
    throw InputError("replay: --rank " + std::to_string(wanted_rank) + " is outside the " +
                     std::to_string(run.scenario->world_size()) + " ranks of " + args.scenario);
  opts.rank = hw::representative_rank(run.graph, run.scenario, wanted_rank);
  if (!args.force) check_replay_fits(run, opts, args.scenario);
  ExecutionRecord record = hw::replay(run.graph, run.scenario, opts);
  if (opts.rank != wanted_rank)
    record.notes.insert(record.notes.begin(),
                        "--rank " + std::to_string(args.rank) + " is identical to rank " +
                            std::to_string(opts.rank) +
                            " in the folded schedule graph; that rank's tasks were replayed");

  // The trace and the modelled memory timeline cover the replayed rank only.
  FinishOptions finish;
  finish.trace_ranks = std::to_string(opts.rank);
  RunOutputs out = finish_run(run, record, finish);
  out.summary.trace_ranks_note = "the replayed rank";
  MeasuredSummary m;
  m.replayed_rank = opts.rank;
  m.peak_allocated_bytes = record.peak_allocated_bytes;
  m.peak_reserved_bytes = record.peak_reserved_bytes;
  m.peak_memory_rank = opts.rank;
  m.peak_memory_note =
      "peak_memory_bytes is the allocator's measured peak on the replayed rank's device " +
      record.device + "; modelled_peak_memory_bytes is models/'s estimate for the same rank";
  if (multi && me == 0) {  // every process's measured figures, from the rendezvous
    kernels::FileRendezvous rv(opts.nccl_dir, opts.nccl_run_id, opts.nccl_timeout_s);
    m.per_process.push_back(process_of(rank_result(0, record)));
    for (std::int64_t r = 1; r < nprocs; ++r) {
      const std::string name = "result.rank" + std::to_string(r);
      m.per_process.push_back(
          process_of(nlohmann::json::parse(rv.wait(name, -1, "rank " + std::to_string(r)))));
      rv.remove(name);
    }
    m.peak_allocated_bytes = -1;
    for (const auto& p : m.per_process) {
      if (p.peak_allocated_bytes > m.peak_allocated_bytes)
        m.peak_allocated_bytes = p.peak_allocated_bytes, m.peak_memory_rank = p.rank;
      m.iteration_time_max_over_ranks_s =
          std::max(m.iteration_time_max_over_ranks_s, p.iteration_time_s);
    }
    m.processes = nprocs;
    m.peak_reserved_bytes = record.peak_reserved_bytes;
    m.iteration_time_note =
        "iteration_time_s and the figures derived from it are rank 0's; measured_per_rank has "
        "every process's (their clocks start together, after a barrier of the communication "
        "backend)";
    m.peak_memory_note =
        "peak_memory_bytes is the largest allocator peak over the " + std::to_string(nprocs) +
        " processes' devices (measured_per_rank); modelled_peak_memory_bytes is models/'s "
        "estimate for rank 0";
  }
  out.summary.measured = m;

  if (json_file) {
    json_file.stream() << summary_to_json(out.summary).dump(2) << "\n";
    json_file.commit();
  }
  if (trace_file) {
    // A replay on the `local` system without a profile has no FLOP/s figure and so no cost
    // model; its links run no NVLS, so the link counters need none (every collective a ring).
    std::optional<CostModel> cost;
    if (run.cost_system.gpu.peak_dense_fp16_flops > 0) cost.emplace(run.cost_model());
    write_chrome_trace(trace_file.stream(), run.graph, record, out.memory, out.selection,
                       TraceInfo{run.scenario->name, run.scenario->cluster.gpus_per_node,
                                 cost ? &*cost : nullptr});
    trace_file.commit();
  }
  if (me > 0) {  // a worker of a multi-process replay: report to rank 0, print nothing
    kernels::FileRendezvous rv(opts.nccl_dir, opts.nccl_run_id, opts.nccl_timeout_s);
    rv.publish("result.rank" + std::to_string(me), rank_result(me, record).dump());
    return 0;
  }
  std::cout << format_text_summary(out.summary);
  std::cout.flush();
  if (!std::cout) throw std::runtime_error("cannot write to stdout");
  return 0;
}

}  // namespace trainsim::cli
