// The verbs of the `trainsim` command line (docs/cli.md). main()
// (apps/trainsim.cpp) parses the flags into these structs and calls one function; each
// returns the process exit status (0 success, 1 bad input or a failed run, reason on stderr)
// and may throw: InputError and other exceptions are turned into exit 1 by main().
//
// Where each verb lives (apps/CMakeLists.txt):
//   simulate  -> apps/simulate.cpp (always built; without sim/ it explains and exits 1)
//   plan      -> apps/plan.cpp (always built, with simulate)
//   forecast  -> apps/forecast.cpp (always built, with simulate)
//   import-megatron, import-deepspeed -> apps/import_launch.cpp (always built)
//   replay    -> apps/replay.cpp,    when it exists and trainsim_hw is built
//   validate  -> apps/validate.cpp,  when it exists and trainsim_validation is built
//   diff      -> apps/diff.cpp (always built)
//   calibrate -> apps/calibrate.cpp, when it exists and trainsim_validation is built (its
//                fits run in trainsim; its microbenchmarks need LibTorch: trainsim-torch)
// A verb whose file or library is missing is answered by apps/verbs_unavailable.cpp ("not
// built", exit 1).
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace trainsim::cli {

/// `--set key=value` pairs, in command-line order (later ones win).
using Overrides = std::vector<std::pair<std::string, std::string>>;

/// trainsim simulate SCENARIO.yaml [--set k=v]... [--calibration profile.json]
///   [--trace out.json] [--trace-ranks LIST] [--json summary.json] [--format text|json]
///   [--memory-csv memory.csv]
struct SimulateArgs {
  std::string scenario;
  Overrides overrides;
  std::string calibration;  ///< empty: the shipped default profile of the system's GPU
  std::string trace;        ///< Chrome trace output file; empty: none
  std::string trace_ranks;  ///< empty: the default selection (trace_writer.h)
  std::string json;         ///< summary output file; empty: none
  std::string format = "text";  ///< stdout: "text" report or "json" summary (nothing else)
  std::string memory_csv;   ///< CSV memory timeline output file (extension); empty: none
  bool force = false;       ///< --force: run even above the size limits (models/run.h)
  /// --fail-on-oom: exit kExitOutOfMemory when the run's peak GPU or host memory is above its
  /// capacity (the outputs are written first; docs/cli.md "Exit status and streams").
  bool fail_on_oom = false;
};

/// simulate --fail-on-oom's status for a run that does not fit in memory (docs/cli.md).
constexpr int kExitOutOfMemory = 3;

/// trainsim replay SCENARIO.yaml [--set k=v]... [--device cuda|cpu] [--rank N] [--nprocs N]
///   [--trace out.json] [--json summary.json]
struct ReplayArgs {
  std::string scenario;
  Overrides overrides;
  std::string device;  ///< "cuda" or "cpu"; empty: cuda when a GPU is usable, else cpu
  std::int64_t rank = 0;
  /// Processes replaying ranks 0..nprocs-1 (hw_backend/launch.h): one per GPU with NCCL, or
  /// with device "cpu" one per rank through the host backend (hw_backend/host_comm.h);
  /// 0: one process, or the WORLD_SIZE of a launcher (torchrun, srun).
  std::int64_t nprocs = 0;
  std::string trace;
  std::string json;
  bool force = false;  ///< --force: replay even when the predicted memory does not fit
};

/// trainsim validate SCENARIO.yaml [--set k=v]... [--device cuda|cpu | --measured-trace T.json]
///   [--nprocs N]
///   [--calibration profile.json] [--json result.json] [--report report.html]
struct ValidateArgs {
  std::string scenario;
  Overrides overrides;
  std::string device;
  /// A replay's trace recorded elsewhere (`trainsim replay --trace`): compared instead of
  /// replaying here (validation/measured_trace.h); runs in trainsim itself, no LibTorch.
  std::string measured_trace;
  std::string calibration;
  std::string json;
  std::string report;
  /// Measured replays after one warm-up replay; the fastest is compared (others' load on the
  /// machine only ever slows a run down).
  int repeat = 3;
  bool force = false;  ///< --force: run even above the size limits (models/run.h)
  /// --nprocs N: processes replaying ranks 0..N-1 together (as replay's; apps/validate_replay.h
  /// validate_processes); rank 0's tasks are compared. 0: not given (one process, or a
  /// launcher's WORLD_SIZE).
  std::int64_t nprocs = 0;
};

/// trainsim calibrate [--device cuda|cpu] [--out profile.json] [--quick]
///   [--from-trace kineto.json --base profile.json [--allow-device-mismatch]]
struct CalibrateArgs {
  std::string device;
  std::string out;  ///< empty: print the profile JSON on stdout
  bool quick = false;      ///< smaller microbenchmark grids (tests)
  /// --nprocs N (CPU only): the compute microbenchmarks run in N processes at once and the
  /// profile keeps the rates one of them measured (local_device.processes = N), as the ranks
  /// of `validate --nprocs N` share this machine's cores. 0: not given (one process).
  std::int64_t nprocs = 0;
  /// Instead of microbenchmarks: fit `base` from the operators of a PyTorch profiler trace
  /// (validation/fit.h fit_from_operator_samples).
  std::string from_trace;
  /// Instead of microbenchmarks: fit `base` (a catalog GPU's profile) from the measurements of
  /// a profile `calibrate --device cuda` wrote on that GPU (validation/fit.h
  /// fit_from_microbenchmarks).
  std::string from_microbench;
  std::string base;
  /// Fit a trace recorded on another device than `base` describes (refused otherwise).
  bool allow_device_mismatch = false;
};

/// trainsim forecast SCENARIO.yaml [--set k=v]... [--samples N] [--seed S] [--json F]
///   [--format text|json] [--calibration profile.json]  (docs/forecast.md)
struct ForecastArgs {
  std::string scenario;
  Overrides overrides;
  std::string calibration;
  int samples = 1;           ///< iteration-time samples of the scenario's variability
  std::uint64_t seed = 0;    ///< the samples' seed (sample i: models/forecast sample_seed)
  std::string json;          ///< forecast JSON output file (docs/forecast.schema.json)
  std::string format = "text";
  bool force = false;
};

/// trainsim plan SCENARIO.yaml [--set k=v]... [--top K] [--jobs N] [--json F] [--csv F]
///   [--out DIR] [--shard i/n] | trainsim plan --merge SHARD.json...  (docs/plan.md)
struct PlanArgs {
  std::string scenario;
  Overrides overrides;
  std::int64_t top_k = 0;   ///< 0: the plan section's top_k (default 50)
  int jobs = 0;             ///< worker processes; 0: the core count
  std::string json, csv, out;
  std::string shard;        ///< "i/n": candidates with index % n == i
  std::vector<std::string> merge;  ///< shard JSON files to rank together
  bool force = false;       ///< passed to each simulation (size limits)
  std::string calibration;  ///< --calibration: the profile of every candidate (as simulate's)
  /// --objective: the ranking, tokens_per_s (default), goodput or cost (the latter two need the
  /// scenario's training: section; docs/plan.md).
  std::string objective = "tokens_per_s";
};

/// trainsim import-megatron LAUNCH.sh | -- ARGS... and trainsim import-deepspeed ds_config.json
///   [--system NAME] [--nodes N] [--gpus-per-node N] [--name NAME] [--set k=v]... [--out F]
///   (apps/import_launch.cpp, docs/cli.md)
struct ImportLaunchArgs {
  std::string input;               ///< the launch script or ds_config.json
  std::vector<std::string> words;  ///< import-megatron -- ARGS...: the command's words
  std::string system, name, out;
  std::int64_t nodes = 0, gpus_per_node = 0;
  Overrides overrides;
};

int import_megatron_main(const ImportLaunchArgs& args);
int import_deepspeed_main(const ImportLaunchArgs& args);

int simulate_main(const SimulateArgs& args);
int plan_main(const PlanArgs& args);
int forecast_main(const ForecastArgs& args);
int replay_main(const ReplayArgs& args);
int validate_main(const ValidateArgs& args);
int calibrate_main(const CalibrateArgs& args);

/// Splits "key=value" at the first '='; throws InputError naming --set and the text when there
/// is no '=' or the key is empty.
std::pair<std::string, std::string> parse_override(const std::string& text);

/// trainsim diff A.json B.json [--json F]: two summaries (simulate --json) side by side:
/// time, throughput, memory by category, breakdown, and the settings that differ.
struct DiffArgs {
  std::string a, b;
  std::string json;  ///< the comparison as JSON (docs/cli.md); empty: none
};
int diff_main(const DiffArgs& args);

}  // namespace trainsim::cli
