// Multi-process replays: one process per GPU (hw_backend/replay.h ReplayOptions::nprocs).
//
// Who starts the processes:
//   trainsim itself   `trainsim replay S.yaml --device cuda --nprocs N` (no WORLD_SIZE in the
//                     environment): the parent makes a fresh rendezvous directory, starts N copies
//                     of its own command line (/proc/self/exe, /proc/self/cmdline) with RANK,
//                     WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, TRAINSIM_NCCL_DIR and
//                     TRAINSIM_NCCL_RUN_ID set, waits for all of them, stops the others when one
//                     fails, and removes the directory.
//   torchrun          sets RANK, WORLD_SIZE, LOCAL_RANK (and TORCHELASTIC_RUN_ID); give
//                     TRAINSIM_NCCL_DIR, a directory every rank sees.
//   srun              SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID inside a job step
//                     (SLURM_STEP_ID set) stand for RANK, WORLD_SIZE, LOCAL_RANK when WORLD_SIZE is
//                     not set; the run id defaults to SLURM_JOB_ID.SLURM_STEP_ID.
// A process that finds WORLD_SIZE (or the srun variables) is a worker and never forks. A
// worker replays world rank RANK on CUDA device LOCAL_RANK, or on device 0 when
// CUDA_VISIBLE_DEVICES shows it a single GPU (apps/replay.cpp).
// Pure POSIX, no torch, no CUDA.
#pragma once

#include <functional>
#include <string>

namespace trainsim::hw {

/// How this process was started.
struct ProcessEnv {
  bool worker = false;     ///< started by a launcher (trainsim, torchrun, srun): replay one rank
  int rank = 0;            ///< RANK
  int world_size = 1;      ///< WORLD_SIZE
  int local_rank = 0;      ///< LOCAL_RANK: the CUDA device index of this process
  std::string launcher;    ///< "trainsim", "torchrun", "srun" or "" (not a worker)
  std::string nccl_dir;    ///< TRAINSIM_NCCL_DIR (may be empty: an error for world_size > 1)
  std::string run_id;      ///< TRAINSIM_NCCL_RUN_ID, TORCHELASTIC_RUN_ID, SLURM job.step, or "run"
  double timeout_s = 300;  ///< TRAINSIM_NCCL_TIMEOUT_S: rendezvous and NCCL progress limit
};

/// Reads the environment through `getenv` (std::getenv by default; tests pass a map). Throws
/// InputError for malformed values (a non-integer RANK, RANK >= WORLD_SIZE, ...), naming the
/// variable and its value.
ProcessEnv process_env(const std::function<const char*(const char*)>& getenv = nullptr);

/// Starts `nprocs` (>= 1) workers running this program's own command line (see the file
/// comment; models/subprocess.h) and waits for them, forwarding SIGINT and SIGTERM to them.
/// Returns 0 when all exit 0, else 1 (after stopping the rest with SIGTERM, then SIGKILL after
/// 10 s). Each worker's stdout and stderr are the parent's. Throws InputError when the
/// rendezvous directory cannot be created under TMPDIR, SystemError when the workers cannot be
/// started.
int launch_local_workers(int nprocs);

/// Creates a fresh rendezvous directory $TMPDIR/<prefix>-XXXXXX (/tmp without TMPDIR) and
/// returns its path; InputError "<who>: cannot create a rendezvous directory ..." naming the
/// template and the reason when it cannot.
std::string make_rendezvous_dir(const std::string& prefix, const std::string& who);

/// Removes the plain files of `dir` (a rendezvous directory: no subdirectories) and then `dir`;
/// errors are ignored (what is left stays under TMPDIR).
void remove_rendezvous_dir(const std::string& dir);

/// `path` with ".rank<N>" inserted before its extension ("t.json" -> "t.rank1.json"): the file
/// rank N > 0 of a multi-process replay writes.
std::string per_rank_path(const std::string& path, int rank);

}  // namespace trainsim::hw
