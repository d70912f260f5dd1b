// The measuring half of `trainsim validate`: replaying the graph on this machine's device
// (apps/validate_replay.cpp, LibTorch: in trainsim-torch), or, in a program without LibTorch,
// a clear error that names --measured-trace as the way to compare a replay recorded elsewhere
// (apps/validate_replay_unavailable.cpp).
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "models/graph/execution_record.h"
#include "models/run.h"

namespace trainsim::cli {

struct ReplayMeasurement {
  ExecutionRecord record;             ///< the fastest measured replay
  RankId rank = 0;                    ///< the replayed rank (rank 0's representative)
  std::vector<double> iteration_times_s;  ///< every measured replay's span over the rank
  std::vector<std::string> notes;     ///< how it was measured, and the machine's load
  double load_before = -1, load_after = -1;  ///< 1-minute load average around the replays
  unsigned cores = 1;                 ///< hardware threads of this machine
};

/// What one other process of a multi-process validate measured (it replayed its own rank).
struct ProcessMeasurement {
  std::int64_t rank = 0;
  std::vector<double> iteration_times_s;  ///< its span over its rank's tasks, per measured replay
  std::int64_t peak_allocated_bytes = 0;
};

/// The processes of `validate --nprocs N` (hw_backend/launch.h, as `replay --nprocs`): N > 1
/// without a launcher's environment starts N workers running this command line; each worker
/// replays world rank RANK with the others (their collectives, all-to-alls and pipeline messages
/// real: NCCL between GPUs, the host backend between CPU processes) and rank 0 compares its own
/// rank's tasks with the simulation.
struct ValidateProcesses {
  bool launched = false;  ///< this process started the workers and waited: exit with exit_code
  int exit_code = 0;
  std::int64_t nprocs = 1;  ///< processes replaying ranks 0..nprocs-1
  std::int64_t rank = 0;    ///< this process's world rank
  std::string device;       ///< the replay device of this process ("cpu", "cuda:<LOCAL_RANK>")
  std::string rendezvous_dir, run_id;  ///< the job's rendezvous (hw_backend/launch.h)
  double timeout_s = 300;
};

/// Called by validate before anything is built. `nprocs` is --nprocs (0: not given), `device`
/// the resolved --device ("cpu" or "cuda"). Throws InputError naming the scenario file, the flag
/// and the value for an N that cannot run (more than the scenario's ranks, more processes than
/// GPUs, a build without the multi-process backend, a launcher's WORLD_SIZE that differs).
ValidateProcesses validate_processes(const std::string& scenario_path,
                                     const std::vector<std::pair<std::string, std::string>>& overrides,
                                     std::int64_t nprocs,
                                     const std::string& device);

/// `cuda` when this program can replay on a GPU, else `cpu`.
std::string default_replay_device();

/// One warm-up replay and `repeat` measured ones of rank 0's representative on `device`; with
/// several processes (procs.nprocs > 1) of this process's rank, every replay a collective one
/// with the other processes. Rank 0 also collects what the others measured (`others`); a
/// process of rank > 0 publishes its figures to rank 0 through the rendezvous.
ReplayMeasurement replay_for_validate(const PreparedRun& run, const ValidateProcesses& procs,
                                      int repeat, std::vector<ProcessMeasurement>* others);

}  // namespace trainsim::cli
