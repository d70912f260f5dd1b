// parallel.overlap_moe_expert_parallel_comm at pipeline_model_parallel_size > 1: Megatron-Core's
// interleaved schedule with combined 1F1B steps (models/graph/pipeline_schedule.h
// combined_interleaved_order, models/builder/pipeline_pass.cpp combined_step). The merged steps
// counted by hand from the schedule, the all-to-alls they hide, and the refusal of pp > 1
// without virtual stages.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "models/builder/graph_builder.h"
#include "models/hardware/calibration.h"
#include "models/hardware/hardware.h"
#include "models/input/scenario.h"
#include "models/perf/cost_model.h"
#include "sim/executor.h"
#include "tests/support/sim_run.h"

namespace trainsim {
namespace {

// 4 MoE layers of hidden 1024 on 2,048 tokens, 8 experts (EP 2 inside DP 2), top-2, expert MLP
// 1024; PP 2 with one layer per virtual stage (v = 2 chunks of 1 layer per rank), 4 microbatches
// per pipeline; one DGX-H100 node (NVLink all-to-alls and pipeline messages).
constexpr int kLayersPerChunk = 1;

Scenario moe(const std::string& parallel_extra, const std::string& top = "host_model: off\n") {
  const std::string yaml = R"(
name: a2a-pp
runtime: megatron-core
)" + top + R"(model: {num_layers: 4, hidden_size: 1024, num_attention_heads: 8, seq_length: 2048,
        padded_vocab_size: 4096, num_experts: 8, moe_router_topk: 2, moe_ffn_hidden_size: 1024,
        moe_grouped_gemm: true, moe_token_dispatcher_type: alltoall, moe_permute_fusion: true}
parallel: {expert_model_parallel_size: 2, pipeline_model_parallel_size: 2, micro_batch_size: 1,
           global_batch_size: 8, precision: bf16, overlap_grad_reduce: false)" +
                           parallel_extra + R"(}
cluster: {system: dgx-h100, nodes: 1, gpus_per_node: 4}
)";
  return parse_scenario(yaml, "a2a-pp.yaml");
}
const std::string kVp = ", num_layers_per_virtual_pipeline_stage: 1";
const std::string kOn = kVp + ", overlap_moe_expert_parallel_comm: true";

using test_support::SimRun;
SimRun simulate(const Scenario& sc) { return test_support::simulate_scenario(sc); }
bool is_a2a(const ScheduleGraph& g, TaskId id) { return test_support::is_expert_a2a(g, id); }

// The merged steps of each pipeline rank, by hand from Megatron-Core's schedule (pp 2, v 2,
// m 4; tests/models/test_pipeline_schedule.cpp writes the orders out): rank 0 warms up with
// (2 - 0 - 1) * 2 + (2 - 1) * 2 + 1 = 5 forwards, so 8 - 5 = 3 merged steps, the backwards of
// virtual ids 0, 1, 2: (mb, chunk) (0,1) (1,1) (0,0); rank 1 with 3, so 5 merged steps, the
// backwards of ids 0..4: (0,1) (1,1) (0,0) (1,0) (2,1). Their forwards: rank 0 ids 5, 6, 7:
// (3,0) (2,1) (3,1); rank 1 ids 3..7: (1,1) (2,0) (3,0) (2,1) (3,1).
using MbChunk = std::pair<int, int>;
const std::vector<MbChunk> kMergedBackward[2] = {{{0, 1}, {1, 1}, {0, 0}},
                                                 {{0, 1}, {1, 1}, {0, 0}, {1, 0}, {2, 1}}};
const std::vector<MbChunk> kMergedForward[2] = {{{3, 0}, {2, 1}, {3, 1}},
                                                {{1, 1}, {2, 0}, {3, 0}, {2, 1}, {3, 1}}};

// A collective task names its layer, not its chunk: layer l is virtual stage l (one layer
// each), so chunk l / pp of rank l % pp.
bool merged(int stage, const Task& t) {
  const auto& list = t.phase == Phase::Backward ? kMergedBackward[stage] : kMergedForward[stage];
  const int chunk = int(t.layer) / kLayersPerChunk / 2;
  return std::find(list.begin(), list.end(), MbChunk{t.microbatch, chunk}) != list.end();
}

std::string describe(const ScheduleGraph& g, TaskId id) {
  const Task& t = g.task(id);
  return std::string(t.phase == Phase::Backward ? "B" : "F") + " mb " +
         std::to_string(t.microbatch) + " layer " +
         std::to_string(t.layer);
}

/// The time of [start, end) that the rank's compute tasks cover (their union).
double covered_s(const SimRun& r, const std::vector<TaskId>& compute, double start, double end) {
  std::vector<std::pair<double, double>> spans;
  for (TaskId id : compute)
    spans.emplace_back(std::max(start, r.record.start_s[id]), std::min(end, r.record.end_s[id]));
  std::sort(spans.begin(), spans.end());
  double covered = 0, reach = start;
  for (const auto& [a, b] : spans) {
    if (b <= a || b <= reach) continue;
    covered += b - std::max(a, reach);
    reach = b;
  }
  return covered;
}

}  // namespace

// delay_wgrad_compute splits the MoE MLP backward of the merged steps only (mlp.backward_dw is
// a task of its own there): rank 0's 3 merged steps and rank 1's 5 of one layer each; the
// warm-up forwards and cool-down backwards run alone (the whole backward op).
TEST(A2aOverlapInterleaved, MergedStepsAreTheScheduleCountedByHand) {
  const Scenario sc = moe(kOn + ", delay_wgrad_compute: true");
  BuildOptions o;
  const ScheduleGraph g = build_schedule_graph(validated(sc), find_system(sc.cluster.system), o);
  std::map<int, std::vector<MbChunk>> split;  // stage -> the (mb, chunk) of its wgrad tasks
  std::map<int, int> whole;
  for (int stage = 0; stage < 2; ++stage) {
    // Ranks are laid out TP, DP, then PP: rank 2 * stage is DP rank 0 of the stage.
    for (TaskId id : g.tasks_of_rank(RankId(2 * stage))) {
      const Task& t = g.task(id);
      if (t.kind != TaskKind::Compute || g.op(id).kind != OpKind::MlpBwd) continue;
      if (g.op(id).features.expert_wgrad == 2) split[stage].push_back({t.microbatch, t.chunk});
      if (g.op(id).features.expert_wgrad == 0) ++whole[stage];
    }
    EXPECT_EQ(split[stage], kMergedBackward[stage]) << "stage " << stage;
    EXPECT_EQ(whole[stage], (8 - int(kMergedBackward[stage].size())) * kLayersPerChunk);
  }
}

// A multi-token prediction layer is a layer of the last chunk's schedule plan (Megatron-Core
// model_chunk_schedule_plan.py), merged as the decoder layers are: on stage 1 (whose chunk 1 is
// the last virtual stage: layer 3, then the MTP layer, global index 4) the merged backwards of
// chunk 1, (0,1) (1,1) (2,1), split their MoE MLP backward for 2 layers each, those of chunk 0,
// (0,0) (1,0), for 1: 3 x 2 + 2 = 8 weight-gradient tasks, 3 of them the MTP layer's.
TEST(A2aOverlapInterleaved, MtpLayerIsMergedAsALayerOfTheLastChunk) {
  Scenario sc = moe(kOn + ", delay_wgrad_compute: true");
  sc.model.mtp_num_layers = 1;
  BuildOptions o;
  const ScheduleGraph g = build_schedule_graph(validated(sc), find_system(sc.cluster.system), o);
  int wgrad = 0, mtp_wgrad = 0;
  for (TaskId id : g.tasks_of_rank(RankId(2))) {
    const Task& t = g.task(id);
    if (t.kind != TaskKind::Compute || g.op(id).features.expert_wgrad != 2) continue;
    ++wgrad;
    mtp_wgrad += t.layer == 4 ? 1 : 0;
  }
  EXPECT_EQ(wgrad, 8);
  EXPECT_EQ(mtp_wgrad, 3);
}

// Every all-to-all of a merged step runs beside the other microbatch's compute; those of the
// warm-up forwards and the cool-down backwards run alone. Hand calculation (as at pp = 1,
// tests/sim/test_a2a_overlap.cpp): when every all-to-all is shorter than every compute block,
// each of a merged step's runs while a compute block of the other pass of that step does, so
// the compute tasks of its rank cover it whole, except where it waits for its pass's pipeline
// receive (then it starts when the message arrives, which may be after the other pass's compute
// has run: at most the step's first all-to-all); an unmerged step's all-to-all waits for its
// own compute and its compute for it, so nothing covers it. Of the 16 steps of a rank, rank 0
// merges 3 pairs (10 steps alone: 20 exposed all-to-alls), rank 1 5 pairs (6 alone: 12).
TEST(A2aOverlapInterleaved, MergedStepsHideTheirAllToAlls) {
  const SimRun on = simulate(moe(kOn));
  const SimRun off = simulate(moe(kVp));
  for (int stage = 0; stage < 2; ++stage) {
    const RankId rank = RankId(2 * stage);
    std::vector<TaskId> compute, a2a;
    double longest_a2a_s = 0, shortest_block_s = 1e30;
    for (TaskId id : on.graph.tasks_of_rank(rank)) {
      const Task& t = on.graph.task(id);
      const double d = on.record.end_s[id] - on.record.start_s[id];
      if (is_a2a(on.graph, id)) {
        a2a.push_back(id);
        longest_a2a_s = std::max(longest_a2a_s, d);
        EXPECT_EQ(t.stream, StreamId::EpComm);
      } else if (t.kind == TaskKind::Compute) {
        compute.push_back(id);
        if (t.layer != kNoIndex) shortest_block_s = std::min(shortest_block_s, d);
      }
    }
    ASSERT_LT(longest_a2a_s, shortest_block_s);  // the hand calculation's condition
    // The end of each pipeline receive of the rank, by (phase, microbatch, chunk).
    std::map<std::tuple<int, int, int>, double> recv_end_s;
    for (TaskId id : on.graph.tasks_of_rank(rank)) {
      const Task& t = on.graph.task(id);
      if (t.kind == TaskKind::Recv)
        recv_end_s[{int(t.phase), t.microbatch, t.chunk}] = on.record.end_s[id];
    }
    int exposed = 0, hidden = 0;
    double waited_s = 0;
    for (TaskId id : a2a) {
      const double s = on.record.start_s[id], e = on.record.end_s[id];
      const double c = covered_s(on, compute, s, e);
      const Task& t = on.graph.task(id);
      if (merged(stage, t)) {
        // Hidden whole, unless it is the first of its pass in the step and waits for that pass's
        // pipeline receive (the other stage's output or gradient): then it starts when the
        // message arrives, after the other pass's compute it could have run beside.
        const auto recv = recv_end_s.find({int(t.phase), t.microbatch, int(t.layer) / 2});
        const bool waited = recv != recv_end_s.end() && std::abs(recv->second - s) < 1e-12;
        if (!waited)
          EXPECT_NEAR(c, e - s, 1e-9 + 1e-6 * (e - s))
              << "merged a2a not hidden, stage " << stage << " " << describe(on.graph, id);
        waited_s += waited ? e - s - c : 0;
        ++hidden;
      } else {
        EXPECT_NEAR(c, 0.0, 1e-9)
            << "unmerged a2a overlapped, stage " << stage << " " << describe(on.graph, id);
        ++exposed;
      }
    }
    const int merged_steps = int(kMergedBackward[stage].size());
    EXPECT_EQ(hidden, 2 * 2 * kLayersPerChunk * merged_steps);  // 2 passes x 2 all-to-alls
    EXPECT_EQ(exposed, 2 * kLayersPerChunk * (16 - 2 * merged_steps));
    // The receive waits leave at most one all-to-all per merged step exposed.
    EXPECT_LE(waited_s, merged_steps * longest_a2a_s * (1 + 1e-9));
  }
  EXPECT_LT(on.record.iteration_time_s(), off.record.iteration_time_s());
}

// Megatron-Core refuses the overlap at pp > 1 without virtual stages (transformer_config.py);
// the message names the file, the field and the value.
TEST(A2aOverlapInterleaved, PipelineWithoutVirtualStagesIsRefused) {
  try {
    validated(moe(", overlap_moe_expert_parallel_comm: true"));
    ADD_FAILURE() << "accepted";
  } catch (const InputError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("a2a-pp.yaml"), std::string::npos) << what;
    EXPECT_NE(what.find("parallel.pipeline_model_parallel_size"), std::string::npos) << what;
    EXPECT_NE(what.find("(2)"), std::string::npos) << what;
    EXPECT_NE(what.find("virtual_pipeline_model_parallel_size must be specified"),
              std::string::npos)
        << what;
  }
  EXPECT_NO_THROW(validated(moe(kOn)));
}

// CUDA graphs of the moe or mlp scope with the overlap: Megatron-Core's "CUDA graph scope on moe
// and mlp is not supported with overlap_moe_expert_parallel_comm" (transformer_config.py).
TEST(A2aOverlapInterleaved, MoeScopeCudaGraphIsRefused) {
  try {
    validated(moe(kOn + ", cuda_graph_impl: transformer_engine, cuda_graph_scope: [moe]"));
    ADD_FAILURE() << "accepted";
  } catch (const InputError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("a2a-pp.yaml"), std::string::npos) << what;
    EXPECT_NE(what.find("parallel.cuda_graph_scope"), std::string::npos) << what;
    EXPECT_NE(what.find("(moe)"), std::string::npos) << what;
    EXPECT_NE(what.find("not supported with overlap_moe_expert_parallel_comm"), std::string::npos)
        << what;
  }
  EXPECT_NO_THROW(
      validated(moe(kOn + ", cuda_graph_impl: transformer_engine, cuda_graph_scope: [attn]")));
}

// Off: the interleaved schedule exactly as without the key.
TEST(A2aOverlapInterleaved, OffIsTheInterleavedSchedule) {
  BuildOptions o;
  const SystemSpec& sys = find_system("dgx-h100");
  const ScheduleGraph a = build_schedule_graph(validated(moe(kVp)), sys, o);
  const ScheduleGraph b = build_schedule_graph(
      validated(moe(kVp + ", overlap_moe_expert_parallel_comm: false")), sys, o);
  ASSERT_EQ(a.num_tasks(), b.num_tasks());
  for (TaskId id = 0; id < a.num_tasks(); ++id) EXPECT_EQ(a.task(id).op, b.task(id).op);
}

}  // namespace trainsim
