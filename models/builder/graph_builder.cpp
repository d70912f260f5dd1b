// Schedule builder for Megatron-LM PTD-P (Narayanan et al. SC'21) with DeepSpeed ZeRO stages:
// the passes of models/builder/ over every (simulated) rank's program.
//
//  - models/builder/pipeline_pass.h: the pipeline skeleton (the order of forward and backward
//    steps of models/graph/pipeline_schedule.h; embedding, layers, logits + loss; pipeline messages;
//    the tied-embedding all-reduce) that calls, at fixed points,
//  - models/builder/tensor_parallel.h: the TP / SP collectives on the compute path,
//  - models/builder/dp_strategy.h: the rank's data-parallel strategy (none, Megatron DDP
//    buckets, ZeRO-1/2, ZeRO-3), which owns gradient and parameter synchronization and their
//    memory,
//  - models/builder/optimizer_step.h and offload.h: the optimizer step, GPU and CPU (Twin-Flow).
#include "models/builder/graph_builder.h"

#include <set>
#include <utility>

#include "models/errors.h"
#include "models/builder/cuda_graphs.h"
#include "models/builder/pipeline_pass.h"
#include "models/builder/unfold.h"
#include "models/builder/rank_context.h"
#include "models/perf/cost_model.h"
#include "models/memory/cuda_graph_memory.h"
#include "models/memory/memory_model.h"
#include "models/memory/zero_offload.h"
#include "models/system/collective_flows.h"

namespace trainsim {

namespace {

/// NVLS buffers (nccl_nvls_buffer_bytes) in each simulated rank's comm_buffers: v2.29.7 sets them up at a
/// communicator's first NVLS or NVLS-Tree collective (runtime connect, NCCL_RUNTIME_CONNECT 1:
/// group.cc ncclNvlsBufferSetup), so for each group of the rank that has one by NCCL's choice
/// (CostModel::nccl_collective); v2.18.5 at init, for every communicator of the rank with two
/// or more GPUs in its node. Nothing without NVLink SHARP or with nccl_nvls_enable false.
void add_nvls_buffers(ScheduleGraph& g, const Scenario& sc, const SystemSpec& system,
                      const CalibrationProfile& profile) {
  if (!system.nvlink_sharp || !sc.nccl_nvls_enable || system.gpu.compute_capability < 90) return;
  SystemSpec cost_system = system;
  const std::int64_t gpn =
      sc.cluster.gpus_per_node > 0 ? sc.cluster.gpus_per_node : system.gpus_per_node;
  cost_system.gpus_per_node = int(gpn);
  const CostModel cost(cost_system, profile, sc.nccl_version);
  // NCCL's "node" is the NVLink domain (several trays on GB200 NVL72: collective_flows.h).
  const std::int64_t domain = nvlink_domain_ranks(sc, system);
  std::set<std::pair<RankId, std::uint32_t>> nvls;  // (rank, group) that allocate
  for (TaskId id = 0; id < g.num_tasks(); ++id) {
    const Task& t = g.task(id);
    if (t.kind != TaskKind::Collective || t.group == kNone) continue;
    const OpDesc& op = g.op(id);
    const CommGroup& grp = g.group(t.group);
    if (grp.ranks.size() < 2 || nvls.count({t.rank, t.group})) continue;
    const std::int64_t local = grp.ranks_on_node_of(t.rank, domain);
    if (local < 2) continue;
    const bool allocates =
        sc.nccl_version == NcclVersion::V2_18_5 ||
        cost.nvls_collective(op.kind, double(op.bytes), std::int64_t(grp.ranks.size()),
                             grp.nodes(domain))
            .has_value();
    if (allocates && nvls.insert({t.rank, t.group}).second) {
      const std::uint32_t index = g.rank_index(t.rank);
      g.initial_gpu_memory[index][int(MemCategory::CommBuffers)] +=
          nccl_nvls_buffer_bytes(sc.nccl_version, local, system.gpu.compute_capability,
                                 grp.nodes(gpn) > 1);
    }
  }
}

/// FSDP (Megatron-FSDP's optim_grads_params sharding, torch FSDP2's fully_shard) runs the
/// schedule of ZeRO-3: each layer's parameters all-gathered before its forward and again
/// before its backward, the next layer's gather prefetched during the current one, each
/// layer's gradients reduce-scattered after its backward, parameters, gradients and optimizer
/// states sharded over the group. The builder runs its zero3 strategy with one layer per
/// gather and per gradient bucket (Megatron-FSDP buckets by module, megatron/core/
/// distributed/fsdp). Memory follows from the same strategy.
Scenario fsdp_as_zero3(const Scenario& sc) {
  Scenario z = sc;
  const std::int64_t layer = largest_layer_params(sc);  // one layer, dense or MoE, per bucket
  z.zero.stage = 3;
  z.zero.overlap_comm = true;
  z.zero.reduce_bucket_size = layer;
  z.zero.allgather_bucket_size = layer;
  z.zero.stage3_prefetch_bucket_size = layer;
  return z;
}

/// The partial fold's representatives, reasons and GPU speeds (builder/unfold.h), once the
/// graph is finalized (its simulated ranks sorted).
void apply_unfold_plan(ScheduleGraph& g, const builder::UnfoldPlan& plan) {
  g.partial_representatives = plan.representatives;
  g.unfolded = plan.unfolded;
  if (plan.speeds.empty()) return;
  g.gpu_speed.assign(g.simulated_ranks().size(), 1.0);
  for (std::size_t i = 0; i < plan.ranks.size(); ++i)
    g.gpu_speed[g.rank_index(RankId(g.layout.rank_of(plan.ranks[i])))] = plan.speeds[i];
}

}  // namespace

std::int64_t count_schedule_tasks(const ValidScenario& valid, std::int64_t limit) {
  const Scenario& scenario_in = valid.get();
  Scenario scenario = scenario_in.parallel.uses_fsdp() ? fsdp_as_zero3(scenario_in) : scenario_in;
  scenario.zero.offload_optimizer.ratio_resolved = true;
  // The calibration profile sets memory figures only, which a count does not keep.
  builder::GraphBuild build(scenario, CalibrationProfile{});
  build.count_only = true;
  build.count_limit = limit;
  const builder::PipelinePass pipeline(build);
  try {
    for (std::int64_t stage = 0; stage < build.layout.pp; ++stage)
      pipeline.emit_rank(RankCoords{0, 0, stage});
  } catch (const builder::CountLimitReached&) {
    return build.counted_tasks + 1;  // the task it refused to count
  }
  return build.counted_tasks;
}

namespace {

/// Megatron-LM 2021 (commit a8d172b, megatron/p2p_communication.py _communicate) calls
/// torch.cuda.synchronize() after every batch_isend_irecv: with host_model on, a
/// synchronisation point after the last task of each run of consecutive sends and receives in
/// a rank's program (one batch).
void add_pipeline_synchronize(ScheduleGraph& g, const Scenario& scenario) {
  if (!scenario.host_model || scenario.runtime != Runtime::Megatron2021) return;
  auto p2p = [&](TaskId id) {
    return g.task(id).kind == TaskKind::Send || g.task(id).kind == TaskKind::Recv;
  };
  for (RankId r : g.simulated_ranks()) {
    const std::vector<TaskId> tasks = g.tasks_of_rank(r);
    for (std::size_t i = 0; i < tasks.size(); ++i)
      if (p2p(tasks[i]) && (i + 1 == tasks.size() || !p2p(tasks[i + 1])))
        g.host_syncs.push_back({tasks[i], SyncCause::PipelineSynchronize});
  }
}

}  // namespace

ScheduleGraph build_schedule_graph(const ValidScenario& valid, const SystemSpec& system,
                                   const BuildOptions& options) {
  const Scenario& scenario_in = valid.get();
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
  // Folded: one representative per pipeline stage (tensor rank 0, data rank 0), unless the
  // cluster is asymmetric (builder/unfold.h: the ranks that differ are simulated themselves).
  const builder::UnfoldPlan plan = builder::plan_unfolding(scenario, options.fold);
  for (const RankCoords& c : plan.ranks) pipeline.emit_rank(c);
  g.finalize();
  apply_unfold_plan(g, plan);
  add_pipeline_synchronize(g, scenario);
  // finalize() sorts the simulated ranks; initial memory was recorded per rank.
  g.initial_gpu_memory.assign(g.simulated_ranks().size(), MemVector{});
  g.initial_host_memory.assign(g.simulated_ranks().size(), MemVector{});
  for (const auto& [rank, mem] : build.initial_memory) {
    const std::uint32_t index = g.rank_index(static_cast<RankId>(rank));
    g.initial_gpu_memory[index] = mem.gpu;
    g.initial_host_memory[index] = mem.host;
  }
  add_nvls_buffers(g, scenario, system, profile);
  // CUDA graphs: the regions the host launches at once, and their static buffers.
  builder::add_cuda_graph_regions(g, scenario);
  for (std::size_t i = 0; i < g.simulated_ranks().size(); ++i)
    g.initial_gpu_memory[i][int(MemCategory::CudaGraphs)] += cuda_graph_static_bytes(
        scenario, layout.coords(g.simulated_ranks()[i]).pp_stage);
  // What the replay (hw_backend/) reads besides the tasks: it needs no Scenario.
  ReplayModel& rm = g.replay_model;
  rm.num_layers = scenario.model.num_layers;
  rm.num_microbatches = scenario.parallel.num_microbatches;
  rm.untie_embeddings_and_output_weights = scenario.model.untie_embeddings_and_output_weights;
  rm.recompute_full = scenario.parallel.recompute_granularity == Recompute::Full;
  rm.recompute_selective = scenario.parallel.recompute_granularity == Recompute::Selective &&
                           (scenario.parallel.recompute_modules & kRecomputeCoreAttn) != 0;
  rm.recompute_units = scenario.parallel.recompute_units(scenario.model.num_layers);
  for (std::int64_t l = 0; l < scenario.model.num_layers; ++l)
    rm.mlp_checkpointed_layers.push_back(mlp_checkpointed(scenario, l));
  rm.precision = scenario.parallel.precision;
  rm.fp8_format = static_cast<std::uint8_t>(scenario.parallel.fp8);
  rm.moe_expert_capacity_factor = scenario.model.moe_expert_capacity_factor;
  rm.moe_drop_by_position = scenario.model.moe_token_drop_policy == MoeTokenDropPolicy::Position;
  rm.moe_router_sigmoid = scenario.model.moe_router_score_function == RouterScore::Sigmoid;
  rm.moe_router_num_groups = scenario.model.moe_router_num_groups;
  rm.moe_router_group_topk = scenario.model.moe_router_group_topk;
  for (std::int64_t stage = 0; stage < layout.pp; ++stage)
    rm.params_per_stage.push_back(params_per_rank(scenario, stage));
  return std::move(g);
}

}  // namespace trainsim
