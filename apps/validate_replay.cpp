// validate's replay on this machine's device (apps/validate_replay.h), in trainsim-torch.
#include "apps/validate_replay.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iostream>
#include <thread>

#include <nlohmann/json.hpp>

#include "hw_backend/launch.h"
#include "hw_backend/replay.h"
#include "kernels/rendezvous.h"
#include "models/errors.h"
#include "models/input/scenario.h"

namespace trainsim::cli {

namespace {

/// The 1-minute load average (/proc/loadavg), or -1 where unavailable.
double load_average() {
  std::ifstream f("/proc/loadavg");
  double v = -1;
  return (f >> v) ? v : -1;
}

/// Span of the rank's tasks in a record.
double rank_span_s(const ExecutionRecord& r, const std::vector<TaskId>& ids) {
  double lo = INFINITY, hi = -INFINITY;
  for (TaskId id : ids) lo = std::min(lo, r.start_s[id]), hi = std::max(hi, r.end_s[id]);
  return hi - lo;
}

/// The CUDA device of a launcher's worker, as apps/replay.cpp worker_device: LOCAL_RANK, or 0
/// when CUDA_VISIBLE_DEVICES shows the process a single GPU.
int worker_device(const hw::ProcessEnv& env) {
  const char* visible = std::getenv("CUDA_VISIBLE_DEVICES");
  if (visible && *visible && std::strchr(visible, ',') == nullptr) return 0;
  return env.local_rank;
}

}  // namespace

ValidateProcesses validate_processes(const std::string& scenario_path,
                                     const std::vector<std::pair<std::string, std::string>>& overrides,
                                     std::int64_t nprocs, const std::string& device) {
  const std::string flag = "validate " + scenario_path + ": --nprocs " + std::to_string(nprocs);
  const bool cpu = device == "cpu";
  ValidateProcesses p;
  p.device = device;
  const hw::ProcessEnv env = hw::process_env();
  if (!env.worker && nprocs <= 1) return p;
  if (env.worker) {  // started by `validate --nprocs`, torchrun or srun: replay RANK
    if (nprocs > 0 && nprocs != env.world_size)
      throw InputError(flag + " but the launcher (" + env.launcher + ") started WORLD_SIZE=" +
                       std::to_string(env.world_size) + " processes");
    p.nprocs = env.world_size, p.rank = env.rank;
    p.rendezvous_dir = env.nccl_dir, p.run_id = env.run_id, p.timeout_s = env.timeout_s;
    if (p.nprocs > 1 && p.rendezvous_dir.empty())
      throw InputError(flag + ": a multi-process validate needs TRAINSIM_NCCL_DIR, a directory "
                       "every process can read");
    if (!cpu) {
      const int gpu = worker_device(env), gpus = hw::cuda_device_count();
      if (gpu >= gpus)
        throw InputError(flag + ": rank " + std::to_string(env.rank) + " would run on cuda:" +
                         std::to_string(gpu) + ", and " + std::to_string(gpus) +
                         " CUDA device(s) are visible (LOCAL_RANK, CUDA_VISIBLE_DEVICES)");
      p.device = "cuda:" + std::to_string(gpu);
    }
    return p;
  }
  // The parent: check N, start the workers, wait for them (hw_backend/launch.h).
  const std::int64_t world = load_scenario(scenario_path, overrides).world_size();
  if (nprocs > world)
    throw InputError(flag + " is more than the " + std::to_string(world) + " ranks of the scenario "
                     "(parallel: tp x pp x dp x cp)");
  if (!cpu) {
    std::string why;
    if (!hw::multiprocess_available(&why) || !hw::cuda_available(&why))
      throw InputError(flag + " --device cuda: " + why);
    const int gpus = hw::cuda_device_count();
    if (nprocs > gpus)
      throw InputError(flag + " --device cuda runs one process per GPU: " +
                       std::to_string(gpus) + " CUDA device(s) visible on this machine");
  }
  p.launched = true;
  p.exit_code = hw::launch_local_workers(static_cast<int>(nprocs));
  return p;
}

std::string default_replay_device() { return hw::cuda_available() ? "cuda" : "cpu"; }

ReplayMeasurement replay_for_validate(const PreparedRun& run, const ValidateProcesses& procs,
                                      int repeat, std::vector<ProcessMeasurement>* others) {
  const Scenario& sc = run.scenario;
  const ScheduleGraph& graph = run.graph;
  const bool multi = procs.nprocs > 1;
  hw::ReplayOptions ro;
  ro.device = procs.device;
  if (procs.device == "cpu") ro.cpu_dtype = run.replay_dtype;
  ro.rank = hw::representative_rank(graph, sc, procs.rank);
  ro.nprocs = procs.nprocs;
  ro.nccl_dir = procs.rendezvous_dir;
  ro.nccl_timeout_s = procs.timeout_s;
  ReplayMeasurement m;
  m.rank = static_cast<RankId>(ro.rank);
  const std::vector<TaskId> ids = graph.tasks_of_rank(m.rank);
  // Every replay of a multi-process validate is a job of its own for the communication backend
  // (its exchanges numbered from 0): a run id per replay keeps their rendezvous files apart.
  auto replay_once = [&](const std::string& tag) {
    if (multi) ro.nccl_run_id = procs.run_id + "." + tag;
    return hw::replay(graph, sc, ro);
  };

  if (procs.rank == 0)
    std::cerr << "trainsim validate: replaying rank " << m.rank << " on " << procs.device
              << (multi ? " with ranks 1.." + std::to_string(procs.nprocs - 1) + " in " +
                              std::to_string(procs.nprocs - 1) + " other process(es)"
                        : std::string())
              << " (" << repeat << " measured replays after a warm-up)\n";
  m.load_before = load_average();
  (void)replay_once("warmup");  // warm-up: thread pools, allocator, first-call costs
  for (int i = 0; i < repeat; ++i) {
    ExecutionRecord r = replay_once("m" + std::to_string(i));
    m.iteration_times_s.push_back(rank_span_s(r, ids));
    if (i == 0 || m.iteration_times_s.back() < rank_span_s(m.record, ids)) m.record = std::move(r);
  }
  m.load_after = load_average();
  m.notes.push_back("measured: the fastest of " + std::to_string(repeat) +
                    " replays after one warm-up replay");
  if (multi) {
    m.notes.push_back("multi-process: " + std::to_string(procs.nprocs) + " processes replayed "
                      "ranks 0.." + std::to_string(procs.nprocs - 1) + " together (" +
                      (procs.device == "cpu" ? "the host backend between CPU processes"
                                             : "NCCL between GPUs") +
                      "), each replay a collective one; rank 0's tasks are compared");
    kernels::FileRendezvous rv(procs.rendezvous_dir, procs.run_id, procs.timeout_s);
    if (procs.rank > 0) {
      rv.publish("validate.rank" + std::to_string(procs.rank),
                 nlohmann::json{{"rank", procs.rank},
                                {"iteration_times_s", m.iteration_times_s},
                                {"peak_allocated_bytes", m.record.measured_peak_allocated_bytes()}}
                     .dump());
    } else if (others) {
      for (std::int64_t r = 1; r < procs.nprocs; ++r) {
        const std::string name = "validate.rank" + std::to_string(r);
        const auto j = nlohmann::json::parse(rv.wait(name, -1, "rank " + std::to_string(r)));
        rv.remove(name);
        others->push_back({r, j.at("iteration_times_s").get<std::vector<double>>(),
                           j.at("peak_allocated_bytes").get<std::int64_t>()});
      }
    }
  }
  m.cores = std::max(1u, std::thread::hardware_concurrency());
  if (std::max(m.load_before, m.load_after) > double(m.cores))
    m.notes.push_back("warning: the machine was busy during the replays (1-minute load average " +
                      std::to_string(std::max(m.load_before, m.load_after)) + " on " +
                      std::to_string(m.cores) + " cores): measured times include other processes' "
                      "load, and the calibration's microbenchmarks may have seen a different one");
  return m;
}

}  // namespace trainsim::cli
