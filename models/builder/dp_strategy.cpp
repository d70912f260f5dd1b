#include "models/builder/dp_strategy.h"

namespace trainsim::builder {

RankStateBytes DataParallelStrategy::initial_memory(const RankContext& ctx) const {
  return rank_state_bytes(ctx.scenario(), ctx.profile(), ctx.coords.pp_stage);
}

// The strategies' makers, one file each (dp_<name>.cpp).
std::unique_ptr<DataParallelStrategy> make_dp_none(const RankContext& ctx);
std::unique_ptr<DataParallelStrategy> make_dp_ddp_buckets(const RankContext& ctx);
std::unique_ptr<DataParallelStrategy> make_dp_zero12(const RankContext& ctx);
std::unique_ptr<DataParallelStrategy> make_dp_zero3(const RankContext& ctx);
std::unique_ptr<DataParallelStrategy> make_dp_distributed_optimizer(const RankContext& ctx);

std::unique_ptr<DataParallelStrategy> make_data_parallel_strategy(const RankContext& ctx) {
  const int stage = ctx.scenario().zero.stage;
  if (stage >= 3) return make_dp_zero3(ctx);
  if (stage >= 1) return make_dp_zero12(ctx);
  if (ctx.dims().dp > 1 && ctx.scenario().parallel.use_distributed_optimizer)
    return make_dp_distributed_optimizer(ctx);
  if (ctx.dims().dp > 1) return make_dp_ddp_buckets(ctx);
  return make_dp_none(ctx);
}

}  // namespace trainsim::builder
