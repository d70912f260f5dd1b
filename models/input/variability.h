// An asymmetric cluster (scenario section `variability:`, docs/scenario.md "variability"):
// the speed factor of every GPU, from the listed slow GPUs and the seeded lognormal spread.
//
// A GPU's speed multiplies its sustained compute and HBM rates: the device part of each of its
// kernels (CostModel::compute_time_s less CostModel::launch_time_s) lasts 1 / speed as long.
// The spread `gpu_speed_cv` = c draws each GPU's speed from a lognormal of mean 1 and
// coefficient of variation c: ln(speed) ~ N(mu, sigma^2) with sigma^2 = ln(1 + c^2) and
// mu = -sigma^2 / 2 (the lognormal's mean exp(mu + sigma^2 / 2) = 1 and variance
// (exp(sigma^2) - 1) mean^2 = c^2). It is not capped at 1: the calibration profile's rates are
// the fleet's mean (a profile is a measurement of typical GPUs), and a cap would make the mean
// fall below 1 as c grows, mixing a spread with a slowdown. A GPU listed in `slow_gpus` gets its
// sample times its speed. The sample is drawn for ranks 0, 1, ... in order from std::mt19937_64
// (whose output the C++ standard fixes) seeded with `variability.seed`, through Box-Muller, so
// one seed gives the same speeds on every platform and for every parallel layout of the same
// cluster.
#pragma once

#include <cstdint>
#include <vector>

#include "models/input/scenario.h"

namespace trainsim {

/// The speed factor of every GPU of the cluster (world_size entries, rank order); all 1 without
/// a `variability:` section. `gpus_per_node` is the cluster's (the system's when the scenario
/// gives none).
std::vector<double> gpu_speeds(const VariabilityConfig& v, std::int64_t world_size);

/// The ranks whose GPU or links differ from their peers' in a way the scenario names: a listed
/// slow GPU with speed < 1, every GPU of a node with a slow NIC (bandwidth < 1; which GPUs use
/// that NIC depends on the platform's rail mapping, so the whole node counts), the GPU of a
/// slow NVLink port. Ascending, without duplicates.
std::vector<std::int64_t> named_asymmetric_ranks(const VariabilityConfig& v,
                                                 std::int64_t gpus_per_node);

}  // namespace trainsim
