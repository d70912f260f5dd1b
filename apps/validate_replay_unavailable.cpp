// validate in a program without LibTorch (trainsim when no trainsim-torch was built): it can
// compare a trace recorded elsewhere (--measured-trace), and says so when asked to replay.
#include "apps/validate_replay.h"

#include "models/errors.h"

namespace trainsim::cli {

std::string default_replay_device() { return "cpu"; }

ReplayMeasurement replay_for_validate(const PreparedRun&, const std::string& device, int) {
  throw InputError("validate --device " + device + ": replaying needs LibTorch, which this build "
                   "lacks (trainsim-torch); record a replay where it is built (`trainsim replay "
                   "SCENARIO --trace T.json`, e.g. validation/gpu_check.sh on a GPU machine) and "
                   "compare it here with --measured-trace T.json");
}

}  // namespace trainsim::cli
