// validate in a program without LibTorch (trainsim when no trainsim-torch was built): it can
// compare a trace recorded elsewhere (--measured-trace), and says so when asked to replay.
#include "apps/validate_replay.h"

#include "models/errors.h"

namespace trainsim::cli {

std::string default_replay_device() { return "cpu"; }

ValidateProcesses validate_processes(const std::string& scenario_path,
                                     const std::vector<std::pair<std::string, std::string>>&,
                                     std::int64_t nprocs, const std::string& device) {
  if (nprocs > 1)
    throw InputError("validate " + scenario_path + ": --nprocs " + std::to_string(nprocs) +
                     ": replaying needs LibTorch, which this build lacks (trainsim-torch)");
  ValidateProcesses p;
  p.device = device;
  return p;
}

ReplayMeasurement replay_for_validate(const PreparedRun&, const ValidateProcesses& procs, int,
                                      std::vector<ProcessMeasurement>*) {
  const std::string& device = procs.device;
  throw InputError("validate --device " + device + ": replaying needs LibTorch, which this build "
                   "lacks (trainsim-torch); record a replay where it is built (`trainsim replay "
                   "SCENARIO --trace T.json`, e.g. validation/gpu_check.sh on a GPU machine) and "
                   "compare it here with --measured-trace T.json");
}

}  // namespace trainsim::cli
