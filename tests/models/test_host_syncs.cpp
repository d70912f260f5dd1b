// The synchronisation points the builder adds with host_model on (ScheduleGraph::host_syncs,
// sim/host_thread.h), counted by hand from the scenario: per MoE layer forward, per optimizer
// .item(), per timer, per Megatron-LM 2021 exchange; none with host_model off.
#include <gtest/gtest.h>

#include <map>
#include <string>

#include "models/builder/graph_builder.h"
#include "models/hardware/hardware.h"
#include "models/input/scenario.h"

namespace trainsim {
namespace {

Scenario moe(const std::string& extra) {
  const std::string yaml = R"(
name: t
runtime: megatron-core
model: {num_layers: 4, hidden_size: 256, num_attention_heads: 8, seq_length: 128,
        padded_vocab_size: 1024, num_experts: 8, moe_router_topk: 2, moe_ffn_hidden_size: 128,
        moe_grouped_gemm: true, moe_token_dispatcher_type: alltoall)" + extra + R"(}
parallel: {expert_model_parallel_size: 4, micro_batch_size: 1, global_batch_size: 8,
           precision: bf16, clip_grad: 1.0}
cluster: {system: dgx-a100-80gb, nodes: 1, gpus_per_node: 4}
)";
  return parse_scenario(yaml, "test.yaml");
}

std::map<SyncCause, int> syncs_of_rank0(const Scenario& sc) {
  BuildOptions o;
  const ScheduleGraph g = build_schedule_graph(validated(sc), find_system(sc.cluster.system), o);
  std::map<SyncCause, int> n;
  for (const HostSync& s : g.host_syncs)
    if (g.task(s.task).rank == 0) ++n[s.cause];
  return n;
}

TEST(HostSyncs, MoeForwardOptimizerAndTimers) {
  const Scenario sc = moe("");
  const std::int64_t mbs = validated(sc).get().parallel.num_microbatches;
  ASSERT_EQ(mbs, 2);  // 8 / (1 x DP 4)
  auto n = syncs_of_rank0(sc);
  // One token-count read per MoE layer forward (4 layers x microbatches); the backward none.
  EXPECT_EQ(n[SyncCause::MoeTokenCounts], 4 * mbs);
  // bf16: no found-inf read; clip_grad > 0: one norm read.
  EXPECT_EQ(n[SyncCause::LossScaleItem], 0);
  EXPECT_EQ(n[SyncCause::GradNormItem], 1);
  EXPECT_EQ(n[SyncCause::Timer], 0);
  EXPECT_EQ(n[SyncCause::PipelineSynchronize], 0);
}

TEST(HostSyncs, TimersByLogLevel) {
  Scenario sc = moe("");
  const std::int64_t mbs = 2;
  sc.timing_log_level = 1;
  EXPECT_EQ(syncs_of_rank0(sc)[SyncCause::Timer], 1);  // forward-backward
  sc.timing_log_level = 2;  // + forward-compute and backward-compute of every microbatch
  EXPECT_EQ(syncs_of_rank0(sc)[SyncCause::Timer], 1 + 2 * mbs);
}

TEST(HostSyncs, DropAndPadHasNoTokenCountSyncAndOffHasNone) {
  EXPECT_EQ(syncs_of_rank0(moe(", moe_expert_capacity_factor: 1.0, "
                               "moe_pad_expert_input_to_capacity: true"))[SyncCause::MoeTokenCounts],
            0);
  // A capacity factor without padding still reads the counts ("before_permutation_1").
  const Scenario drop = moe(", moe_expert_capacity_factor: 1.0");
  EXPECT_EQ(syncs_of_rank0(drop)[SyncCause::MoeTokenCounts], 4 * 2);
  Scenario off = moe("");
  off.host_model = false;
  off.timing_log_level = 2;
  EXPECT_TRUE(syncs_of_rank0(off).empty());
}

}  // namespace
}  // namespace trainsim
