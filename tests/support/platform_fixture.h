// The setup of the sim/platform tests: a catalog system, its GPU's default calibration profile
// and the cost model over both, and the names of a route's links.
#pragma once

#include <string>
#include <vector>

#include "models/hardware/calibration.h"
#include "models/hardware/hardware.h"
#include "models/perf/cost_model.h"
#include "sim/platform.h"

namespace trainsim::test_support {

/// The catalog system `system_name` (systems/*.yaml), the shipped profile of its GPU and the
/// cost model a PlatformModel is built with.
struct PlatformFixture {
  explicit PlatformFixture(const std::string& system_name)
      : system(find_system(system_name)), profile(default_calibration(system.gpu.name)) {}
  SystemSpec system;
  CalibrationProfile profile;
  CostModel cost{system, profile};
};

/// The links of `r` in order, each "LINK:up" or "LINK:down" (the direction it is crossed in).
inline std::vector<std::string> link_names(const sim::PlatformModel& p, const sim::Route& r) {
  std::vector<std::string> out;
  for (const sim::Hop& h : r.hops) out.push_back(p.links()[h.link].name + (h.up ? ":up" : ":down"));
  return out;
}

}  // namespace trainsim::test_support
