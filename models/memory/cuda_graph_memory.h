// The static buffers of Megatron-Core's CUDA graphs (scenario parallel.cuda_graph_impl,
// docs/scenario.md "CUDA graphs"; the summary's memory category cuda_graphs, docs/summary.md).
//
// A captured graph replays on fixed addresses, so every graph keeps its inputs and outputs in
// static tensors allocated at capture time, outside the iteration's own allocations:
//  - per-layer graphs (cuda_graph_scope attn, mlp, moe, moe_router, or the whole layer): one
//    graphed callable per captured part of each layer the rank holds (the whole layer: one;
//    attn: every layer; mlp: the dense layers; moe / moe_router: the MoE layers). Its static
//    input is the layer's hidden states [s/cp (/t with sequence parallelism), b, h] in the
//    training precision, and Megatron-Core keeps one per (callable, microbatch) only until
//    that microbatch's backward has run, then reuses it for the next forward with the same
//    signature (core_v0.16.0 megatron/core/transformer/cuda_graphs.py
//    TECudaGraphHelper._get_sample_arguments: fwd_sample_queues / consumed_sample_queue; the
//    local CudaGraphManager reuses runners and buffers the same way, TensorReusePool). So a
//    callable holds as many as its model chunk has microbatches in flight (forwards whose
//    backward has not run, the pipeline schedule's maximum). Counted per such slot: two
//    hidden-state tensors, the copies a replay makes: the forward graph's static input (the
//    eager input is copied into it) and the backward graph's static output gradient (the
//    incoming gradient is copied into it) (cuda_graphs.py create_fwd_graph / create_bwd_graph,
//    static_grad_outputs). The static outputs and input gradients are the tensors the next op
//    consumes, which the activations (and the transient gradients) already are;
//  - full_iteration (the local FullCudaGraphWrapper, megatron/core/full_cuda_graph.py
//    StaticBufferLoader): one static copy of every microbatch's batch, tokens, labels and
//    position ids (int64) and the loss mask (fp32): 28 bytes per token.
// Not counted: the graphs' private memory pool beyond these buffers (the activations it holds
// are the activations already counted; its workspaces are transient).
#pragma once

#include <cstdint>

#include "models/input/scenario.h"

namespace trainsim {

/// The most microbatches of model chunk `chunk` in flight at once on pipeline stage `stage`
/// (forwards run minus backwards run, at its peak, in models/graph/pipeline_schedule.h's
/// order).
std::int64_t chunk_microbatches_in_flight(const Scenario& sc, std::int64_t stage,
                                          std::int64_t chunk);

/// Graphed callables of global layer `layer` under the scenario's scope (0 without graphs or
/// with full_iteration).
std::int64_t graphed_callables_of_layer(const Scenario& sc, std::int64_t layer);

/// Bytes of the static CUDA graph buffers on a rank of pipeline stage `stage` (header); 0 with
/// cuda_graph_impl none.
std::int64_t cuda_graph_static_bytes(const Scenario& sc, std::int64_t stage);

}  // namespace trainsim
