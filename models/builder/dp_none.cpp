// Strategy `none`: one data-parallel rank (stage 0, dp = 1). Nothing to synchronize; Megatron's
// optimizer steps every parameter of the rank on the GPU.
#include "models/builder/dp_strategy.h"

namespace trainsim::builder {

namespace {

class NoDataParallel final : public DataParallelStrategy {
 public:
  const char* name() const override { return "none"; }
  OptimizerStepInputs optimizer_step(const RankContext& ctx) const override {
    return replicated_optimizer_step(ctx.scenario(), ctx.coords.pp_stage);
  }
};

}  // namespace

std::unique_ptr<DataParallelStrategy> make_dp_none(const RankContext&) {
  return std::make_unique<NoDataParallel>();
}

}  // namespace trainsim::builder
