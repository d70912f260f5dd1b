// Where each rank sits in the parallel plan: Megatron-LM's rank layout
// (megatron/core/parallel_state.py initialize_model_parallel: tensor-parallel ranks fastest,
// then data-parallel, then pipeline stages):
//
//   rank = pp_stage * (dp * tp) + dp_rank * tp + tp_rank
//
// and the groups a rank belongs to, in ring order. Folding (ScheduleGraph::representative_of)
// is defined on these coordinates: the representative of a rank is the rank with the same
// pipeline stage and tensor rank 0, data rank 0.
#pragma once

#include <cstdint>
#include <vector>

namespace trainsim {

struct RankCoords {
  std::int64_t tp_rank = 0, dp_rank = 0, pp_stage = 0;
};

struct ParallelLayout {
  std::int64_t tp = 1;  ///< tensor_model_parallel_size
  std::int64_t dp = 1;  ///< data_parallel_size
  std::int64_t pp = 1;  ///< pipeline_model_parallel_size

  std::int64_t world_size() const { return tp * dp * pp; }
  RankCoords coords(std::int64_t rank) const {
    return RankCoords{rank % tp, (rank / tp) % dp, rank / (tp * dp)};
  }
  std::int64_t rank_of(const RankCoords& c) const {
    return c.pp_stage * (dp * tp) + c.dp_rank * tp + c.tp_rank;
  }
  /// The tensor-parallel group of `rank` (same data rank and stage), by tensor rank.
  std::vector<std::int64_t> tensor_group(std::int64_t rank) const {
    const RankCoords c = coords(rank);
    std::vector<std::int64_t> out;
    for (std::int64_t i = 0; i < tp; ++i) out.push_back(rank_of({i, c.dp_rank, c.pp_stage}));
    return out;
  }
  /// The data-parallel group of `rank` (same tensor rank and stage), by data rank.
  std::vector<std::int64_t> data_group(std::int64_t rank) const {
    const RankCoords c = coords(rank);
    std::vector<std::int64_t> out;
    for (std::int64_t i = 0; i < dp; ++i) out.push_back(rank_of({c.tp_rank, i, c.pp_stage}));
    return out;
  }
  /// The rank standing for `rank` when TP peers and DP replicas are folded: tensor rank 0,
  /// data rank 0 of its pipeline stage.
  std::int64_t representative(std::int64_t rank) const {
    return rank_of({0, 0, coords(rank).pp_stage});
  }
};

}  // namespace trainsim
