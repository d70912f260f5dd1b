// The forecast of a prepared run (apps/forecast.cpp), shared by `trainsim forecast` and the
// planner's --objective goodput|cost (apps/plan.cpp): the checkpoint's shards and their
// simulated transfers (sim/checkpoint_io.h), the iteration-time samples, the failure model
// (models/forecast/forecast.h). Built with the simulator only (TRAINSIM_HAVE_SIM).
#pragma once

#include <cstdint>
#include <functional>

#include "models/forecast/forecast.h"
#include "models/run.h"

namespace trainsim::cli {

/// `deterministic_s`: the run's simulated iteration time. `variable`: the scenario has
/// variability, and `sampler` simulates one sample (the seam of forecast.h IterationSampler);
/// otherwise nothing is simulated again. `progress(done, total)` after each sample.
Forecast forecast_prepared(const PreparedRun& run, double deterministic_s, int samples,
                           std::uint64_t seed, bool variable, const IterationSampler& sampler,
                           const std::function<void(int, int)>& progress = {});

}  // namespace trainsim::cli
