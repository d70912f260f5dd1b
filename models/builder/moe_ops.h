// The mixture-of-experts communication descriptors of the pipeline pass
// (models/builder/pipeline_pass.cpp): the token dispatcher's dispatch / combine over the
// expert-parallel group and expert tensor parallelism's gather / scatter over the ETP group.
#pragma once

#include <cstdint>

#include "models/builder/rank_context.h"

namespace trainsim::builder {

/// The MoE token dispatch (`combine` false) or combine over the expert-parallel group, added
/// to the graph; its id.
std::uint32_t moe_exchange_op(GraphBuild& b, bool combine);
/// Expert tensor parallelism's all-gather after the dispatch (`combine` false) or its
/// reduce-scatter before the combine, added to the graph; its id.
std::uint32_t etp_exchange_op(GraphBuild& b, bool combine);

}  // namespace trainsim::builder
