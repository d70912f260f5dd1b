// The mixture-of-experts communication descriptors (models/builder/moe_ops.h).
#include "models/builder/moe_ops.h"

#include <cstdint>

#include "models/input/scenario.h"

namespace trainsim::builder {

/// The MoE token dispatch or combine over the expert-parallel group (T = b s / (cp t) tokens
/// per rank with sequence parallelism, h elements each):
///  - alltoall dispatcher (MoEAlltoAllTokenDispatcher): an all-to-all of the T k token copies
///    each rank sends (times the imbalance factor), both ways; with token dropping the copies
///    the busiest rank's experts keep (ModelConfig::moe_expert_token_copies: at most E x
///    capacity; with drop_and_pad the dispatcher's splits are capacity per expert,
///    token_dispatcher.py MoEAlltoAllTokenDispatcher.preprocess, so exactly E x capacity);
///  - allgather dispatcher (MoEAllGatherTokenDispatcher): every rank gathers the EP group's
///    tokens (an all-gather of EP x T tokens) and the combine reduce-scatters the outputs back;
///  - flex dispatcher (MoEFlexTokenDispatcher): DeepEP's or HybridEP's fused dispatch / combine
///    kernels (moe_flex_dispatcher_backend), one all-to-all op each way carrying the routing
///    (DeepEpRouting) from which the system model derives the bytes per node (RDMA) and per
///    rank (NVLink).
std::uint32_t moe_exchange_op(GraphBuild& b, bool combine) {
  const Scenario& sc = b.scenario;
  const ModelDims& d = b.dims;
  const std::int64_t tokens = d.b * d.s / d.cp / (d.sp ? d.t : 1);
  const std::int64_t ep = sc.parallel.expert_model_parallel_size;
  OpDesc o;
  o.precision = d.precision;
  o.group = GroupKind::Expert;
  o.group_size = ep;
  if (sc.model.moe_token_dispatcher_type == MoeDispatcher::Flex) {
    // DeepEP's normal kernels or HybridEP's (the flex dispatcher): the routing they move the
    // copies by; the system model prices it (collective_flows.h). bytes: the copies, reported.
    const ModelConfig& m = sc.model;
    o.kind = OpKind::AllToAll;
    o.deepep = {double(tokens) * m.moe_token_imbalance_factor, double(d.h * d.e),
                m.moe_router_topk, m.num_experts, m.moe_router_num_groups,
                m.moe_router_group_topk, combine,
                m.moe_flex_dispatcher_backend == FlexBackend::HybridEP};
    o.bytes = std::int64_t(double(tokens * m.moe_router_topk * d.h * d.e) *
                           m.moe_token_imbalance_factor);
  } else if (sc.model.moe_token_dispatcher_type == MoeDispatcher::AllGather) {
    o.kind = combine ? OpKind::ReduceScatter : OpKind::AllGather;
    o.bytes = ep * tokens * d.h * d.e;
  } else {
    o.kind = OpKind::AllToAll;
    o.bytes = sc.model.moe_expert_capacity_factor > 0
                  ? std::int64_t(sc.model.moe_expert_token_copies(tokens) * double(d.h * d.e))
                  : std::int64_t(double(tokens * sc.model.moe_router_topk * d.h * d.e) *
                                 sc.model.moe_token_imbalance_factor);
  }
  return b.graph.add_op(o);
}

/// Expert tensor parallelism (MoEAlltoAllTokenDispatcher with expt_tp of ETP > 1,
/// token_dispatcher.py dispatch_postprocess / combine_preprocess): after the EP all-to-all the
/// received copies and their fp32 routing probabilities are all-gathered over the ETP group
/// (gather_from_sequence_parallel_region), and before the combine's all-to-all the experts'
/// outputs are reduce-scattered back (reduce_scatter_to_sequence_parallel_region). Both
/// carry the gathered size: ETP x the copies this rank receives (as the dispatch all-to-all
/// counts them) x (h e bytes of hidden state + 4 bytes of probability).
std::uint32_t etp_exchange_op(GraphBuild& b, bool combine) {
  const Scenario& sc = b.scenario;
  const ModelDims& d = b.dims;
  const std::int64_t tokens = d.b * d.s / d.cp / (d.sp ? d.t : 1);
  const std::int64_t etp = sc.parallel.expert_tensor_parallel_size;
  const double copies = sc.model.moe_expert_capacity_factor > 0
                            ? sc.model.moe_expert_token_copies(tokens)
                            : double(tokens * sc.model.moe_router_topk) *
                                  sc.model.moe_token_imbalance_factor;
  OpDesc o;
  o.precision = d.precision;
  o.group = GroupKind::Expert;
  o.group_size = etp;
  o.kind = combine ? OpKind::ReduceScatter : OpKind::AllGather;
  o.bytes = std::int64_t(double(etp) * copies * double(d.h * d.e + (combine ? 0 : 4)));
  return b.graph.add_op(o);
}

}  // namespace trainsim::builder
