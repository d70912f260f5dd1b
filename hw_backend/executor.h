// Internal to hw_backend/: the boundary between the torch-free replay driver (replay.cpp:
// rank choice, issue order) and the LibTorch executor (torch_executor.cpp). No torch types.
// The executor reads the graph only (ScheduleGraph::replay_model), never a Scenario.
#pragma once

#include <vector>

#include "hw_backend/replay.h"

namespace trainsim::hw::detail {

/// Runs `order` (task ids of one rank, a valid issue order) on the device of `opts` and fills
/// the record (see replay.h): `iterations` iterations on one model state, the record of the
/// last; `losses` (if non-null) receives each iteration's loss (replay_training).
ExecutionRecord execute(const ScheduleGraph& graph, RankId rank, const std::vector<TaskId>& order,
                        const ReplayOptions& opts, int iterations = 1,
                        std::vector<double>* losses = nullptr);

}  // namespace trainsim::hw::detail
