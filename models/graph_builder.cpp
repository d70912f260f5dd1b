// Schedule builder for Megatron-LM PTD-P (Narayanan et al. SC'21) with DeepSpeed ZeRO stages:
// the passes of models/builder/ over every (simulated) rank's program.
//
//  - models/builder/pipeline_pass.h: the pipeline skeleton (the order of forward and backward
//    steps of models/pipeline_schedule.h; embedding, layers, logits + loss; pipeline messages;
//    the tied-embedding all-reduce) that calls, at fixed points,
//  - models/builder/tensor_parallel.h: the TP / SP collectives on the compute path,
//  - models/builder/dp_strategy.h: the rank's data-parallel strategy (none, Megatron DDP
//    buckets, ZeRO-1/2, ZeRO-3), which owns gradient and parameter synchronization and their
//    memory,
//  - models/builder/optimizer_step.h and offload.h: the optimizer step, GPU and CPU (Twin-Flow).
#include "models/graph_builder.h"

#include "models/builder/pipeline_pass.h"
#include "models/builder/rank_context.h"
#include "models/memory_model.h"
#include "models/zero_offload.h"

namespace trainsim {

namespace {

/// FSDP (Megatron-FSDP's optim_grads_params sharding, torch FSDP2's fully_shard) runs the
/// schedule of ZeRO-3: each layer's parameters all-gathered before its forward and again
/// before its backward, the next layer's gather prefetched during the current one, each
/// layer's gradients reduce-scattered after its backward, parameters, gradients and optimizer
/// states sharded over the group. The builder runs its zero3 strategy with one layer per
/// gather and per gradient bucket (Megatron-FSDP buckets by module, megatron/core/
/// distributed/fsdp). Memory follows from the same strategy.
Scenario fsdp_as_zero3(const Scenario& sc) {
  Scenario z = sc;
  const std::int64_t layer = layer_params_per_rank(sc.model, sc.parallel.tensor_model_parallel_size);
  z.zero.stage = 3;
  z.zero.overlap_comm = true;
  z.zero.reduce_bucket_size = layer;
  z.zero.allgather_bucket_size = layer;
  z.zero.stage3_prefetch_bucket_size = layer;
  return z;
}

}  // namespace

ScheduleGraph build_schedule_graph(const Scenario& scenario_in, const SystemSpec& system,
                                   const BuildOptions& options) {
  const Scenario scenario =
      scenario_in.parallel.uses_fsdp() ? fsdp_as_zero3(scenario_in) : scenario_in;
  const auto& off = scenario.zero.offload_optimizer;
  TRAINSIM_CHECK(!off.ratio_auto || off.ratio_resolved,
                 scenario.source_path + ": `offload_optimizer.ratio: auto` must be resolved "
                 "(resolve_offload_ratio, models/run.h) before the graph is built");
  const CalibrationProfile profile =
      options.calibration ? *options.calibration : default_calibration(system.gpu.name);
  if (effective_offload_ratio(scenario) > 0) check_host_memory(scenario, system, profile);
  const auto& p = scenario.parallel;
  if (p.num_microbatches > kNoIndex - 1 || scenario.model.num_layers > kNoIndex - 1)
    throw InputError(scenario.source_path + ": more than 65534 microbatches or layers per "
                     "iteration is not supported (parallel.global_batch_size / micro_batch_size)");

  builder::GraphBuild build(scenario, profile);
  ScheduleGraph& g = build.graph;
  const ParallelLayout& layout = build.layout;
  g.world_size = scenario.world_size();
  g.layout = layout;
  g.fold_factor = options.fold ? layout.tp * layout.dp : 1;
  const builder::PipelinePass pipeline(build);
  // Folded: one representative per pipeline stage (tensor rank 0, data rank 0).
  for (std::int64_t stage = 0; stage < layout.pp; ++stage)
    for (std::int64_t d = 0; d < (options.fold ? 1 : layout.dp); ++d)
      for (std::int64_t t = 0; t < (options.fold ? 1 : layout.tp); ++t)
        pipeline.emit_rank(RankCoords{t, d, stage});
  g.finalize();
  // finalize() sorts the simulated ranks; initial memory was recorded per rank.
  g.initial_gpu_memory.assign(g.simulated_ranks().size(), MemVector{});
  g.initial_host_memory.assign(g.simulated_ranks().size(), MemVector{});
  for (const auto& [rank, mem] : build.initial_memory) {
    const std::uint32_t index = g.rank_index(static_cast<RankId>(rank));
    g.initial_gpu_memory[index] = mem.gpu;
    g.initial_host_memory[index] = mem.host;
  }
  // What the replay (hw_backend/) reads besides the tasks: it needs no Scenario.
  ReplayModel& rm = g.replay_model;
  rm.num_layers = scenario.model.num_layers;
  rm.num_microbatches = scenario.parallel.num_microbatches;
  rm.untie_embeddings_and_output_weights = scenario.model.untie_embeddings_and_output_weights;
  rm.recompute_full = scenario.parallel.recompute_granularity == Recompute::Full;
  rm.recompute_selective = scenario.parallel.recompute_granularity == Recompute::Selective;
  rm.precision = scenario.parallel.precision;
  for (std::int64_t stage = 0; stage < layout.pp; ++stage)
    rm.params_per_stage.push_back(params_per_rank(scenario, stage));
  return std::move(g);
}

}  // namespace trainsim
