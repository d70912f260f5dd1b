#include "models/memory/cuda_graph_memory.h"

#include <algorithm>
#include <vector>

#include "models/graph/pipeline_schedule.h"

namespace trainsim {

std::int64_t chunk_microbatches_in_flight(const Scenario& sc, std::int64_t stage,
                                          std::int64_t chunk) {
  const ParallelConfig& p = sc.parallel;
  // Under the EP overlap at pp > 1 the interleaved schedule runs one more warm-up forward
  // (combined_interleaved_order).
  const bool combined = p.overlap_moe_expert_parallel_comm && p.pipeline_model_parallel_size > 1;
  const std::vector<PipelineStep> steps =
      combined ? combined_interleaved_order(int(p.pipeline_model_parallel_size), int(stage),
                                            int(p.num_microbatches), int(p.virtual_pipeline_size))
                     .steps
               : pipeline_order(p.pipeline_schedule, int(p.pipeline_model_parallel_size),
                                int(stage), int(p.num_microbatches), int(p.virtual_pipeline_size));
  std::int64_t now = 0, peak = 0;
  for (const PipelineStep& s : steps) {
    if (s.chunk != chunk) continue;
    now += s.forward ? 1 : -1;
    peak = std::max(peak, now);
  }
  return peak;
}

std::int64_t graphed_callables_of_layer(const Scenario& sc, std::int64_t layer) {
  const std::uint8_t scope = sc.parallel.cuda_graph_scope;
  if (sc.parallel.cuda_graph_impl == CudaGraphImpl::None || (scope & kGraphFullIteration))
    return 0;
  if (scope == 0) return 1;  // the whole layer
  const bool moe = sc.model.moe_layer(layer);
  std::int64_t n = (scope & kGraphAttn) ? 1 : 0;
  if (!moe && (scope & kGraphMlp)) ++n;
  if (moe && (scope & (kGraphMoe | kGraphMoeRouter))) ++n;
  return n;
}

std::int64_t cuda_graph_static_bytes(const Scenario& sc, std::int64_t stage) {
  const ParallelConfig& p = sc.parallel;
  if (p.cuda_graph_impl == CudaGraphImpl::None) return 0;
  const std::int64_t tokens =
      sc.model.seq_length / p.context_parallel_size * p.micro_batch_size;
  if (p.cuda_graph_scope & kGraphFullIteration)
    return p.num_microbatches * tokens * (3 * 8 + 4);  // tokens, labels, position ids; mask
  const std::int64_t sp = p.sequence_parallel ? p.tensor_model_parallel_size : 1;
  const std::int64_t hidden_bytes =
      tokens / sp * sc.model.hidden_size * precision_bytes(p.precision);
  std::int64_t bytes = 0;
  for (std::int64_t c = 0; c < p.virtual_pipeline_size; ++c) {
    const std::int64_t vstage = c * p.pipeline_model_parallel_size + stage;
    const std::int64_t first = p.first_layer_of_virtual_stage(vstage);
    std::int64_t callables = 0;
    for (std::int64_t l = first; l < first + p.layers_of_virtual_stage(vstage); ++l)
      callables += graphed_callables_of_layer(sc, l);
    if (callables == 0) continue;
    bytes += callables * chunk_microbatches_in_flight(sc, stage, c) * 2 * hidden_bytes;
  }
  return bytes;
}

}  // namespace trainsim
