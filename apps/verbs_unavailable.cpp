// The verbs this build does not have (apps/CMakeLists.txt defines TRAINSIM_NO_<VERB> when the
// verb's source file or library is missing): a clear message and exit status 1.
#include <iostream>

#include "apps/verbs.h"

namespace trainsim::cli {

namespace {
[[maybe_unused]] int unavailable(const char* verb, const char* needs) {
  std::cerr << "trainsim " << verb << ": not built yet in this build (needs " << needs << ")\n";
  return 1;
}
}  // namespace

#ifdef TRAINSIM_NO_REPLAY
int replay_main(const ReplayArgs&) {
  return unavailable("replay", "apps/replay.cpp and the trainsim_hw library (LibTorch)");
}
#endif
#ifdef TRAINSIM_NO_VALIDATE
int validate_main(const ValidateArgs&) {
  return unavailable("validate", "the simulator (SimGrid, TRAINSIM_WITH_SIM) and the "
                                 "trainsim_validation library; to replay as well, LibTorch");
}
#endif
#ifdef TRAINSIM_NO_CALIBRATE
int calibrate_main(const CalibrateArgs&) {
  return unavailable("calibrate", "apps/calibrate.cpp and the trainsim_validation library");
}
#endif

}  // namespace trainsim::cli
