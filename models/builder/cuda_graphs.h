// CUDA graph regions of a built schedule graph (scenario parallel.cuda_graph_impl /
// cuda_graph_scope; docs/scenario.md "CUDA graphs"), as Megatron-Core core_v0.16.0 captures
// them (megatron/core/transformer/cuda_graphs.py, transformer_layer.py, full_cuda_graph.py):
//  - the whole layer (no scope; "full"): per microbatch, one graph of each layer's forward
//    (its attention and MLP blocks, their tensor-, context- and expert-parallel collectives)
//    and one of its backward (a re-run forward of selective recomputation: one more);
//  - attn: the attention block's tasks (TransformerLayer._forward_attention); mlp: a dense
//    layer's MLP block; moe: an MoE layer's whole MLP block with its dispatch and combine
//    (drop-and-pad only); each per microbatch, forward and backward apart;
//  - moe_router (and moe_preprocess): part of an MoE layer's MLP task, the kernels up to the
//    router (pre-MLP norm, router, the shared expert, which is not overlapped with the
//    dispatch) and with moe_preprocess the token permutation (GraphCapture);
//  - full_iteration: each rank's forward-backward of all microbatches, with the gradient
//    synchronisation that finalize_model_grads runs inside it (FullCudaGraphWrapper wraps
//    forward_backward_func); the optimizer step stays outside.
// Tasks a data-parallel hook issues (GradSync, ParamSync: DDP's and the distributed
// optimizer's bucket hooks) stay outside the per-layer graphs. A synchronisation point on a
// task inside a region waits for the region's last task (the host cannot wait inside a graph);
// validation refuses the scopes whose region would hold the dispatcher's token-count copy.
#pragma once

#include "models/graph/schedule_graph.h"
#include "models/input/scenario.h"

namespace trainsim::builder {

/// Fills g.cuda_graphs and g.cuda_graph_of_task (finalized `g`; nothing without CUDA graphs)
/// and moves synchronisation points inside a region to its last task.
void add_cuda_graph_regions(ScheduleGraph& g, const Scenario& scenario);

}  // namespace trainsim::builder
