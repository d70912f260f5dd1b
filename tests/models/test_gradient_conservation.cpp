// Every parameter's gradient is reduced over the data-parallel group exactly once per
// iteration (Megatron DDP, the distributed optimizer, ZeRO-1: after the last microbatch), or
// once per microbatch (ZeRO-2: each microbatch's buckets), whatever the pipeline layout: the
// bytes of a rank's gradient reductions are its stage's parameters (models/memory/memory_model.h
// params_per_rank, checked against published counts in test_modern_models.cpp) times the
// gradient element size times that count. Layouts: 1F1B and interleaved stages, an uneven
// split, tensor parallelism with fp32 gradient reduction, MoE with dense layers.
#include <gtest/gtest.h>

#include <map>
#include <string>

#include "models/builder/graph_builder.h"
#include "models/hardware/hardware.h"
#include "models/memory/memory_model.h"
#include "models/input/scenario.h"

namespace trainsim {
namespace {

struct Case {
  std::string yaml;             ///< runtime, parallel and deepspeed keys
  std::int64_t element_bytes;   ///< of the reduced gradients
  std::int64_t reductions = 1;  ///< per iteration: 1, or the microbatches (ZeRO-2)
  std::string model_extra = "";  ///< more model keys (experts)
};

TEST(GradientConservation, EachRankReducesItsStagesParametersOncePerIterationOrMicrobatch) {
  const std::string core = "runtime: megatron-core\nparallel: {micro_batch_size: 1, "
                           "global_batch_size: 16, precision: bf16, ";
  const Case cases[] = {
      {core + "pipeline_model_parallel_size: 2, grad_reduce_in_fp32: false}\n", 2},
      {core + "pipeline_model_parallel_size: 2, grad_reduce_in_fp32: false, "
              "use_distributed_optimizer: true}\n", 2},
      {core + "pipeline_model_parallel_size: 2, num_layers_per_virtual_pipeline_stage: 2, "
              "grad_reduce_in_fp32: false, use_distributed_optimizer: true}\n", 2},
      {core + "pipeline_model_parallel_size: 2, num_layers_per_virtual_pipeline_stage: 2, "
              "grad_reduce_in_fp32: false}\n", 2},
      {core + "pipeline_model_parallel_size: 2, decoder_first_pipeline_num_layers: 3, "
              "grad_reduce_in_fp32: false, use_distributed_optimizer: true}\n", 2},
      {core + "tensor_model_parallel_size: 2, pipeline_model_parallel_size: 2, "
              "grad_reduce_in_fp32: true, use_distributed_optimizer: true}\n", 4},
      {"parallel: {pipeline_model_parallel_size: 2, micro_batch_size: 1, global_batch_size: 16, "
       "precision: fp16}\ndeepspeed: {zero_optimization: {stage: 1}}\n", 2},
      // ZeRO-2: 16 sequences over 8 replicas, 2 microbatches each.
      {"parallel: {micro_batch_size: 1, global_batch_size: 16, precision: fp16}\n"
       "deepspeed: {zero_optimization: {stage: 2}}\n", 2, 2},
      // MoE on every other layer (a dense and an MoE layer differ in size), interleaved stages,
      // gradient buckets overlapped with the backward.
      {core + "pipeline_model_parallel_size: 2, num_layers_per_virtual_pipeline_stage: 2, "
              "expert_model_parallel_size: 2, grad_reduce_in_fp32: false, "
              "use_distributed_optimizer: true, overlap_grad_reduce: true}\n", 2, 1,
       ", num_experts: 4, moe_ffn_hidden_size: 512, moe_layer_freq: 2"},
  };
  for (const Case& c : cases) {
    const Scenario sc = parse_scenario(
        "name: conservation\nmodel: {num_layers: 8, hidden_size: 512, num_attention_heads: 8, "
        "seq_length: 256, padded_vocab_size: 4096" + c.model_extra +
            "}\ncluster: {system: dgx-h100, nodes: 1}\n" +
            c.yaml,
        "conservation.yaml");
    BuildOptions opt;
    opt.fold = false;
    const ScheduleGraph g = build_schedule_graph(validated(sc), find_system(sc.cluster.system), opt);
    std::map<RankId, std::int64_t> reduced;
    for (TaskId id = 0; id < g.num_tasks(); ++id) {
      const Task& t = g.task(id);
      const OpDesc& op = g.op(id);
      if (t.kind == TaskKind::Collective && t.phase == Phase::GradSync &&
          op.group == GroupKind::Data)
        reduced[t.rank] += op.bytes;
    }
    const std::int64_t per_stage = 8 / sc.parallel.pipeline_model_parallel_size;
    ASSERT_EQ(reduced.size(), 8u) << c.yaml;
    for (const auto& [rank, bytes] : reduced) {
      const std::int64_t stage = std::int64_t(rank) / per_stage;
      EXPECT_EQ(bytes, params_per_rank(sc, stage) * c.element_bytes * c.reductions)
          << c.yaml << "rank " << rank;
    }
  }
}

}  // namespace
}  // namespace trainsim
