// The measuring half of `trainsim validate`: replaying the graph on this machine's device
// (apps/validate_replay.cpp, LibTorch: in trainsim-torch), or, in a program without LibTorch,
// a clear error that names --measured-trace as the way to compare a replay recorded elsewhere
// (apps/validate_replay_unavailable.cpp).
#pragma once

#include <string>
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

/// `cuda` when this program can replay on a GPU, else `cpu`.
std::string default_replay_device();

/// One warm-up replay and `repeat` measured ones of rank 0's representative on `device`.
ReplayMeasurement replay_for_validate(const PreparedRun& run, const std::string& device,
                                      int repeat);

}  // namespace trainsim::cli
