// What the replay tests on the CPU share (tests/hw_backend/test_core_layer.cpp,
// test_core_mla.cpp, test_replay.cpp): a shipped scenario's path, its schedule graph as the
// replay reads it, CPU replay options, the record's notes as one text, and the check that a
// tiny model trains.
#pragma once

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "hw_backend/replay.h"
#include "models/builder/graph_builder.h"
#include "models/hardware/hardware.h"
#include "models/input/scenario.h"
#include "tests/support/paths.h"

namespace trainsim::test_support {

/// `rel` under scenarios/ of the source tree.
inline std::string scenario_path(const std::string& rel) { return source_path("scenarios/" + rel); }

/// The graph of a (`local`-system) scenario as the replay reads it: the replay reads the graph
/// only, so any catalog system builds it (the simulation's figures do not matter here).
inline ScheduleGraph replay_graph(Scenario sc) {
  sc.cluster.system = "dgx-h100";
  return build_schedule_graph(validated(sc), find_system(sc.cluster.system), BuildOptions{});
}

/// Replay of world rank `rank` on the CPU, 2 intra-op threads.
inline hw::ReplayOptions cpu_replay_options(std::int64_t rank = 0) {
  hw::ReplayOptions o;
  o.device = "cpu";
  o.rank = rank;
  o.threads = 2;
  return o;
}

/// The notes one per line.
inline std::string joined_notes(const std::vector<std::string>& notes) {
  std::string s;
  for (const auto& n : notes) s += n + "\n";
  return s;
}

/// A training replay's losses (one per iteration) are finite and the last is below the first
/// by more than 0.5 (nats): the model trains. The caller checks their count first.
inline void expect_loss_falls(const std::vector<double>& losses) {
  for (double l : losses) EXPECT_TRUE(std::isfinite(l));
  EXPECT_LT(losses.back(), losses.front() - 0.5)
      << "first " << losses.front() << " last " << losses.back();
}

}  // namespace trainsim::test_support
