// parallel.overlap_moe_expert_parallel_comm (Megatron-Core's combined 1F1B schedule, pp = 1)
// and delay_wgrad_compute (models/builder/pipeline_pass.cpp combined_step): the all-to-alls
// hidden against a hand calculation of the two-stream schedule, the delayed weight-gradient
// task's FLOPs by hand, the schedule nodes' host work by count, and Megatron-Core's refusals.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>

#include "models/builder/graph_builder.h"
#include "models/hardware/calibration.h"
#include "models/hardware/hardware.h"
#include "models/input/scenario.h"
#include "models/perf/cost_model.h"
#include "sim/executor.h"
#include "tests/support/sim_run.h"

namespace trainsim {
namespace {

// 4 MoE layers of hidden 1024 on 2,048 tokens, 8 experts (EP 2, DP 2), top-2, expert MLP 1024
// (no gating), 4 microbatches per rank; one DGX-H100 node (NVLink all-to-alls).
constexpr int kLayers = 4, kMicrobatches = 4;
constexpr double kHidden = 1024, kSeq = 2048, kTopk = 2, kExpertFfn = 1024;

Scenario moe(const std::string& parallel_extra, const std::string& top = "host_model: off\n") {
  const std::string yaml = R"(
name: a2a
runtime: megatron-core
)" + top + R"(model: {num_layers: 4, hidden_size: 1024, num_attention_heads: 8, seq_length: 2048,
        padded_vocab_size: 4096, num_experts: 8, moe_router_topk: 2, moe_ffn_hidden_size: 1024,
        moe_grouped_gemm: true, moe_token_dispatcher_type: alltoall, moe_permute_fusion: true}
parallel: {expert_model_parallel_size: 2, micro_batch_size: 1, global_batch_size: 8,
           precision: bf16, overlap_grad_reduce: false)" + parallel_extra + R"(}
cluster: {system: dgx-h100, nodes: 1, gpus_per_node: 2}
)";
  return parse_scenario(yaml, "a2a.yaml");
}

using test_support::SimRun;
SimRun simulate(const Scenario& sc) { return test_support::simulate_scenario(sc); }
bool is_a2a(const ScheduleGraph& g, TaskId id) { return test_support::is_expert_a2a(g, id); }

}  // namespace

// Hand calculation. In a merged step (microbatch k's backward beside k + 1's forward) each pair
// of layers issues, per Megatron-Core's TransformerLayerSchedulePlan.run:
//   EP stream:      C_b(k) | D_f(k+1), D_b(k) | C_f(k+1)
//   compute stream: A_f(k+1) | M_b(k), M_f(k+1) | A_b(k)
// When every all-to-all is shorter than every compute block, each one runs while a compute
// block of the other microbatch does (C_b beside A_f, D_f and D_b beside M_b and M_f, C_f
// beside A_b, and the last C_f beside the output layer's forward after it), so the pair takes
// A_f + M_b + M_f + A_b: the 4 all-to-alls of each layer pair are hidden. Microbatch 0's
// forward and the last backward run alone, as without the overlap. So the iteration is shorter
// by the all-to-alls of the backward of microbatches 0 .. m - 2 and of the forward of
// microbatches 1 .. m - 1, whose durations are read from the run without the overlap (device
// time: host_model off).
TEST(A2aOverlap, HidesEachMergedLayerPairsAllToAlls) {
  const SimRun off = simulate(moe(""));
  const SimRun on = simulate(moe(", overlap_moe_expert_parallel_comm: true"));
  double hidden_s = 0, longest_a2a_s = 0, shortest_block_s = 1e30;
  for (TaskId id : off.graph.tasks_of_rank(0)) {
    const Task& t = off.graph.task(id);
    const double d = off.record.end_s[id] - off.record.start_s[id];
    if (is_a2a(off.graph, id)) {
      longest_a2a_s = std::max(longest_a2a_s, d);
      const bool merged = t.phase == Phase::Backward ? t.microbatch < kMicrobatches - 1
                                                     : t.microbatch >= 1;
      if (merged) hidden_s += d;
    } else if (t.kind == TaskKind::Compute && t.layer != kNoIndex) {
      shortest_block_s = std::min(shortest_block_s, d);
    }
  }
  ASSERT_LT(longest_a2a_s, shortest_block_s);  // the hand calculation's condition
  // 2 all-to-alls per layer and pass, 3 merged steps of 4 layers: 48.
  int merged_a2a = 0;
  for (TaskId id : off.graph.tasks_of_rank(0)) merged_a2a += is_a2a(off.graph, id) ? 1 : 0;
  ASSERT_EQ(merged_a2a, 2 * 2 * kLayers * kMicrobatches);
  const double t_off = off.record.iteration_time_s(), t_on = on.record.iteration_time_s();
  EXPECT_NEAR(t_off - t_on, hidden_s, 1e-3 * hidden_s) << t_off << " " << t_on;
  // The all-to-alls run on their own stream under the overlap.
  for (TaskId id : on.graph.tasks_of_rank(0))
    if (is_a2a(on.graph, id)) EXPECT_EQ(on.graph.task(id).stream, StreamId::EpComm);
}

// delay_wgrad_compute: the merged steps' MoE MLP backward is a data-gradient task and a weight-
// gradient task (mlp.backward_dw); the latter's FLOPs are the local experts' wgrad GEMMs: for
// fc1 (h x f) and fc2 (f x h), 2 x h x f per token copy each, on the b s k copies a rank
// receives (balanced): 4 b s k h f. Together the two parts are the whole backward.
TEST(A2aOverlap, DelayedWeightGradientIsItsOwnTask) {
  const Scenario sc =
      moe(", overlap_moe_expert_parallel_comm: true, delay_wgrad_compute: true");
  BuildOptions o;
  const ScheduleGraph g = build_schedule_graph(validated(sc), find_system(sc.cluster.system), o);
  int dgrad = 0, wgrad = 0, whole = 0;
  double f_dgrad = 0, f_wgrad = 0, f_whole = 0;
  for (TaskId id : g.tasks_of_rank(0)) {
    const OpDesc& op = g.op(id);
    if (op.kind != OpKind::MlpBwd) continue;
    if (op.features.expert_wgrad == 1) ++dgrad, f_dgrad = op.flops;
    if (op.features.expert_wgrad == 2) ++wgrad, f_wgrad = op.flops;
    if (op.features.expert_wgrad == 0) ++whole, f_whole = op.flops;
  }
  // The 3 merged steps' 4 layers split; the last backward (alone) runs the whole op.
  EXPECT_EQ(dgrad, (kMicrobatches - 1) * kLayers);
  EXPECT_EQ(wgrad, (kMicrobatches - 1) * kLayers);
  EXPECT_EQ(whole, kLayers);
  EXPECT_NEAR(f_wgrad, 4 * kSeq * kTopk * kHidden * kExpertFfn, 1e-9 * f_wgrad);
  EXPECT_NEAR(f_dgrad + f_wgrad, f_whole, 1e-9 * f_whole);
}

// The schedule nodes' host work (HostWorkCause::ScheduleNode): per layer and microbatch 4
// nodes (attention, dispatch, MLP, combine) forward at 5 eager ops and backward at 6, plus the
// embedding and output layer's nodes; none without the overlap or with host_model off.
TEST(A2aOverlap, ScheduleNodesCostHostWork) {
  BuildOptions o;
  const SystemSpec& sys = find_system("dgx-h100");
  const ScheduleGraph g = build_schedule_graph(
      validated(moe(", overlap_moe_expert_parallel_comm: true", "")), sys, o);
  double ops = 0;
  for (const HostWork& w : g.host_work)
    if (g.task(w.task).rank == 0 && w.cause == HostWorkCause::ScheduleNode) ops += w.eager_ops;
  EXPECT_DOUBLE_EQ(ops, kMicrobatches * (kLayers * 4 * (5 + 6) + 2 * (5 + 6)));
  EXPECT_TRUE(build_schedule_graph(validated(moe("", "")), sys, o).host_work.empty());
  EXPECT_TRUE(
      build_schedule_graph(validated(moe(", overlap_moe_expert_parallel_comm: true")), sys, o)
          .host_work.empty());
}

TEST(A2aOverlap, OffIsTheScheduleWithoutIt) {
  BuildOptions o;
  const SystemSpec& sys = find_system("dgx-h100");
  const ScheduleGraph a = build_schedule_graph(validated(moe("")), sys, o);
  const ScheduleGraph b = build_schedule_graph(
      validated(moe(", overlap_moe_expert_parallel_comm: false, delay_wgrad_compute: false")),
      sys, o);
  ASSERT_EQ(a.num_tasks(), b.num_tasks());
  for (TaskId id = 0; id < a.num_tasks(); ++id) {
    EXPECT_EQ(a.task(id).op, b.task(id).op);
    EXPECT_EQ(a.task(id).stream, b.task(id).stream);
  }
}

// Megatron-Core's refusals (transformer_config.py __post_init__) and trainsim's own, each naming
// the file, the field and the value.
TEST(A2aOverlap, RefusalsNameTheFileTheFieldAndTheValue) {
  struct Case {
    std::string parallel, top, field, value;
  };
  const std::string on = ", overlap_moe_expert_parallel_comm: true";
  const Case cases[] = {
      {", delay_wgrad_compute: true", "", "parallel.delay_wgrad_compute", "true"},
      {on + ", recompute_granularity: full", "", "parallel.recompute_granularity", "full"},
      {on + ", recompute_granularity: selective, recompute_modules: [moe]", "",
       "parallel.recompute_modules", "moe"},
      {on + ", pipeline_schedule: gpipe", "", "parallel.pipeline_schedule", "gpipe"},
  };
  for (const Case& c : cases) {
    try {
      validated(moe(c.parallel, c.top));
      ADD_FAILURE() << c.parallel << " accepted";
    } catch (const InputError& e) {
      const std::string what = e.what();
      EXPECT_NE(what.find("a2a.yaml"), std::string::npos) << what;
      EXPECT_NE(what.find(c.field), std::string::npos) << what;
      EXPECT_NE(what.find(c.value), std::string::npos) << what;
    }
  }
  auto refused = [](const Scenario& sc, const std::string& field, const std::string& value) {
    try {
      validated(sc);
      ADD_FAILURE() << field << " accepted";
    } catch (const InputError& e) {
      const std::string what = e.what();
      EXPECT_NE(what.find("a2a.yaml"), std::string::npos) << what;
      EXPECT_NE(what.find(field), std::string::npos) << what;
      EXPECT_NE(what.find(value), std::string::npos) << what;
    }
  };
  Scenario ep1 = moe(on);
  ep1.parallel.expert_model_parallel_size = 1;
  refused(ep1, "parallel.expert_model_parallel_size", "1");
  Scenario gather = moe(on);
  gather.model.moe_token_dispatcher_type = MoeDispatcher::AllGather;
  refused(gather, "moe_token_dispatcher_type", "allgather");
  Scenario fp32 = moe(on);
  fp32.parallel.precision = Precision::FP32;
  refused(fp32, "parallel.precision", "fp32");
  Scenario mtp = moe(on);
  mtp.model.mtp_num_layers = 2;
  refused(mtp, "model.mtp_num_layers", "2");
  Scenario pp = moe(on);
  pp.parallel.pipeline_model_parallel_size = 2;
  pp.cluster.gpus_per_node = 4;
  refused(pp, "parallel.pipeline_model_parallel_size", "2");
  // A value that is not a bool.
  try {
    moe(", overlap_moe_expert_parallel_comm: sometimes");
    ADD_FAILURE() << "sometimes accepted";
  } catch (const InputError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("parallel.overlap_moe_expert_parallel_comm"), std::string::npos) << what;
    EXPECT_NE(what.find("sometimes"), std::string::npos) << what;
  }
  // Megatron-Bridge's name is an alias.
  EXPECT_TRUE(validated(moe(", moe_a2a_overlap: true")).get().parallel.overlap_moe_expert_parallel_comm);
}

}  // namespace trainsim
