// model.moe_shared_expert_overlap (Megatron-Core shared_experts.py: the shared expert's fc1
// beside the dispatch all-to-all, its fc2 beside the combine; models/builder/pipeline_pass.cpp
// moe_exchange): the iteration shortened by a hand calculation over the exchanges, the split
// ops' kernels those of the in-line shared expert, off the same graph, and the refusals.
#include <gtest/gtest.h>

#include <algorithm>
#include <functional>
#include <string>
#include <vector>

#include "models/builder/graph_builder.h"
#include "models/errors.h"
#include "models/hardware/calibration.h"
#include "models/hardware/hardware.h"
#include "models/input/scenario.h"
#include "models/perf/cost_model.h"
#include "sim/executor.h"
#include "tests/support/sim_run.h"

namespace trainsim {
namespace {

// 4 MoE layers of hidden 1024 on 2,048 tokens, 8 experts (EP 2, DP 2), top-2, expert MLP 1024,
// a shared expert of 2048, 4 microbatches per rank; one DGX-H100 node (NVLink all-to-alls).
constexpr int kLayers = 4, kMicrobatches = 4;

Scenario moe(const std::string& model_extra, const std::string& parallel_extra = "") {
  const std::string yaml = R"(
name: shared
runtime: megatron-core
host_model: off
model: {num_layers: 4, hidden_size: 1024, num_attention_heads: 8, seq_length: 2048,
        padded_vocab_size: 4096, num_experts: 8, moe_router_topk: 2, moe_ffn_hidden_size: 1024,
        moe_shared_expert_intermediate_size: 2048, moe_grouped_gemm: true,
        moe_token_dispatcher_type: alltoall, moe_permute_fusion: true)" + model_extra + R"(}
parallel: {expert_model_parallel_size: 2, micro_batch_size: 1, global_batch_size: 8,
           precision: bf16, overlap_grad_reduce: false)" + parallel_extra + R"(}
cluster: {system: dgx-h100, nodes: 1, gpus_per_node: 2}
)";
  return parse_scenario(yaml, "shared.yaml");
}

using test_support::SimRun;
SimRun simulate(const Scenario& sc) { return test_support::simulate_scenario(sc); }
bool is_a2a(const ScheduleGraph& g, TaskId id) { return test_support::is_expert_a2a(g, id); }
bool is_shared(const ScheduleGraph& g, TaskId id) {
  const std::uint8_t part = g.op(id).features.shared_part;
  return g.task(id).kind == TaskKind::Compute && (part == kSharedFc1 || part == kSharedFc2);
}
bool is_moe_mlp(const ScheduleGraph& g, TaskId id) {
  const OpKind k = g.op(id).kind;
  return g.task(id).kind == TaskKind::Compute && (k == OpKind::MlpFwd || k == OpKind::MlpBwd);
}

}  // namespace

// Hand calculation. Per layer and microbatch, each of the 4 exchanges (forward dispatch and
// combine, backward the combine's adjoint and the dispatch's adjoint) starts at the same time as
// the shared expert's op beside it, and the next compute waits for both: the pair takes
// max(A, S) where, without the overlap, it took A (the all-to-all) and then S inside the MLP
// op. Every such pair is on the critical path (pp 1, both ranks alike), so the iteration is
// shorter by the sum over the exchanges of A + S - max(A, S) = min(A, S), A read from the run
// without the overlap, S from the split ops (device time: host_model off).
TEST(SharedExpertOverlap, EachExchangeHidesTheSharedExpertBesideIt) {
  const SimRun off = simulate(moe(""));
  const SimRun on = simulate(moe(", moe_shared_expert_overlap: true"));
  std::vector<double> a2a_s, shared_s;
  double mlp_off_s = 0, mlp_on_s = 0;
  for (TaskId id : off.graph.tasks_of_rank(0)) {
    if (is_a2a(off.graph, id)) a2a_s.push_back(off.duration_s(id));
    if (is_moe_mlp(off.graph, id)) mlp_off_s += off.duration_s(id);
  }
  for (TaskId id : on.graph.tasks_of_rank(0)) {
    if (is_shared(on.graph, id)) shared_s.push_back(on.duration_s(id));
    if (is_moe_mlp(on.graph, id)) mlp_on_s += on.duration_s(id);  // shared ops included
  }
  ASSERT_EQ(a2a_s.size(), std::size_t(2 * 2 * kLayers * kMicrobatches));
  ASSERT_EQ(shared_s.size(), a2a_s.size());  // one shared op beside each exchange
  // The split moves kernels, it adds none: the MLP ops' device time is the same.
  EXPECT_NEAR(mlp_on_s, mlp_off_s, 1e-9 * mlp_off_s);
  double hidden_s = 0;
  for (std::size_t i = 0; i < a2a_s.size(); ++i) hidden_s += std::min(a2a_s[i], shared_s[i]);
  ASSERT_GT(hidden_s, 0);
  const double t_off = off.record.iteration_time_s(), t_on = on.record.iteration_time_s();
  EXPECT_NEAR(t_off - t_on, hidden_s, 1e-3 * hidden_s) << t_off << " " << t_on;
}

// The shared ops' FLOPs: forward fc1 2 T h (2 Fs) (SwiGLU off: h -> Fs, so 2 T h Fs) and fc2
// 2 T Fs h; the backward twice each; together with the MLP op what the in-line op held.
TEST(SharedExpertOverlap, SplitOpsHoldTheSharedExpertsFlops) {
  BuildOptions o;
  const SystemSpec& sys = find_system("dgx-h100");
  const ScheduleGraph off = build_schedule_graph(validated(moe("")), sys, o);
  const ScheduleGraph on =
      build_schedule_graph(validated(moe(", moe_shared_expert_overlap: true")), sys, o);
  const double T = 2048, h = 1024, Fs = 2048;
  double fwd_shared = 0, bwd_shared = 0, fwd_main_on = 0, fwd_off = 0;
  for (TaskId id : on.tasks_of_rank(0)) {
    const OpDesc& op = on.op(id);
    if (on.task(id).microbatch != 0 || on.task(id).layer != 0) continue;
    if (is_shared(on, id)) (op.kind == OpKind::MlpFwd ? fwd_shared : bwd_shared) += op.flops;
    if (is_moe_mlp(on, id) && !is_shared(on, id) && op.kind == OpKind::MlpFwd)
      fwd_main_on += op.flops;
  }
  for (TaskId id : off.tasks_of_rank(0))
    if (off.task(id).microbatch == 0 && off.task(id).layer == 0 && is_moe_mlp(off, id) &&
        off.op(id).kind == OpKind::MlpFwd)
      fwd_off += off.op(id).flops;
  EXPECT_NEAR(fwd_shared, 2 * 2 * T * h * Fs, 1e-9 * fwd_shared);
  EXPECT_NEAR(bwd_shared, 2 * fwd_shared, 1e-9 * bwd_shared);
  EXPECT_NEAR(fwd_main_on + fwd_shared, fwd_off, 1e-9 * fwd_off);
}

// --recompute-modules moe: the re-run MoE forward runs the shared expert's two forward ops
// beside its exchanges too: 6 shared ops per layer and microbatch (2 forward, 2 re-run, 2
// backward), and the MLP ops' FLOPs summed are those of the in-line shared expert.
TEST(SharedExpertOverlap, ReRunForwardRunsTheSharedOpsToo) {
  BuildOptions o;
  const SystemSpec& sys = find_system("dgx-h100");
  const std::string rerun = ", recompute_granularity: selective, recompute_modules: [moe]";
  const ScheduleGraph off = build_schedule_graph(validated(moe("", rerun)), sys, o);
  const ScheduleGraph on =
      build_schedule_graph(validated(moe(", moe_shared_expert_overlap: true", rerun)), sys, o);
  int shared = 0;
  double flops_on = 0, flops_off = 0;
  for (TaskId id : on.tasks_of_rank(0)) {
    shared += is_shared(on, id) ? 1 : 0;
    if (is_moe_mlp(on, id)) flops_on += on.op(id).flops;
  }
  for (TaskId id : off.tasks_of_rank(0))
    if (is_moe_mlp(off, id)) flops_off += off.op(id).flops;
  EXPECT_EQ(shared, 6 * kLayers * kMicrobatches);
  EXPECT_NEAR(flops_on, flops_off, 1e-9 * flops_off);
}

TEST(SharedExpertOverlap, OffIsTheGraphWithoutIt) {
  BuildOptions o;
  const SystemSpec& sys = find_system("dgx-h100");
  const ScheduleGraph a = build_schedule_graph(validated(moe("")), sys, o);
  const ScheduleGraph b =
      build_schedule_graph(validated(moe(", moe_shared_expert_overlap: false")), sys, o);
  ASSERT_EQ(a.num_tasks(), b.num_tasks());
  for (TaskId id = 0; id < a.num_tasks(); ++id) EXPECT_EQ(a.task(id).op, b.task(id).op);
}

// Megatron-Core's checks (transformer_config.py), each naming the file, the field and the value.
TEST(SharedExpertOverlap, RefusalsNameTheFileTheFieldAndTheValue) {
  // parse_scenario validates too: a case is a function that parses (and edits) its scenario.
  auto refused = [](const std::function<Scenario()>& make,
                    const std::vector<std::string>& expect) {
    try {
      validated(make());
      ADD_FAILURE() << expect.front() << " accepted";
    } catch (const InputError& e) {
      const std::string what = e.what();
      EXPECT_NE(what.find("shared.yaml"), std::string::npos) << what;
      for (const std::string& s : expect) EXPECT_NE(what.find(s), std::string::npos) << what;
    }
  };
  const std::string on = ", moe_shared_expert_overlap: true";
  refused([&] {
    Scenario sc = moe(on);
    sc.model.moe_shared_expert_intermediate_size = 0;
    return sc;
  }, {"model.moe_shared_expert_overlap (true)",
                 "model.moe_shared_expert_intermediate_size (0)"});
  refused([&] {
    Scenario sc = moe(on);
    sc.model.moe_token_dispatcher_type = MoeDispatcher::AllGather;
    return sc;
  }, {"model.moe_shared_expert_overlap (true)", "model.moe_token_dispatcher_type",
                   "allgather"});
  refused([&] { return moe(on, ", overlap_moe_expert_parallel_comm: true"); },
          {"parallel.overlap_moe_expert_parallel_comm (true)",
           "model.moe_shared_expert_overlap (true)",
           "Disable moe_shared_expert_overlap when enabling overlap_moe_expert_parallel_comm"});
  try {  // a value that is not a bool
    moe(", moe_shared_expert_overlap: maybe");
    ADD_FAILURE() << "maybe accepted";
  } catch (const InputError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("shared.yaml"), std::string::npos) << what;
    EXPECT_NE(what.find("model.moe_shared_expert_overlap"), std::string::npos) << what;
    EXPECT_NE(what.find("maybe"), std::string::npos) << what;
  }
}

}  // namespace trainsim
