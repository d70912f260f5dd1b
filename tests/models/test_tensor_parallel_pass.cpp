// The tensor-parallel pass (models/builder/tensor_parallel.cpp): the collectives around each
// block, as Megatron-LM places them, on hand-written sequences.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "tests/support/tiny_scenario.h"

using namespace trainsim;
using namespace trainsim::testing;

namespace {

/// "AG Attn", "C Attn", "RS Attn", ... for the tasks of `rank` in the first forward step of
/// microbatch 0 (compute: C, TP collectives by kind), up to `n` entries.
std::vector<std::string> first_tasks(const ScheduleGraph& g, RankId rank, std::size_t n) {
  std::vector<std::string> out;
  for (TaskId id : g.tasks_of_rank(rank)) {
    if (out.size() == n) break;
    const Task& t = g.task(id);
    std::string what;
    if (t.kind == TaskKind::Compute) what = "C";
    else if (t.kind == TaskKind::Recv) what = "Recv";
    else if (t.kind == TaskKind::Send) what = "Send";
    else if (t.stream == StreamId::TpComm)
      what = g.op(id).kind == OpKind::AllGather ? "AG" : g.op(id).kind == OpKind::AllReduce ? "AR" : "RS";
    else
      continue;
    out.push_back(what + " " + to_string(t.part));
  }
  return out;
}

}  // namespace

TEST(TensorParallelPass, SequenceParallelGathersBeforeAndReduceScattersAfterEachBlock) {
  // t = 2 with sequence parallelism, one stage, one layer shown.
  const ScheduleGraph g = build_graph(tiny_scenario(R"(
parallel: {tensor_model_parallel_size: 2, sequence_parallel: true, micro_batch_size: 1, global_batch_size: 1}
)", 2));
  const std::vector<std::string> want = {"C embedding", "AG attn", "C attn", "RS attn",
                                         "AG mlp",      "C mlp",   "RS mlp"};
  EXPECT_EQ(first_tasks(g, 0, want.size()), want);
}

TEST(TensorParallelPass, AllReduceAfterEachBlockAndAroundTheLoss) {
  const ScheduleGraph g = build_graph(tiny_scenario(R"(
parallel: {tensor_model_parallel_size: 2, micro_batch_size: 1, global_batch_size: 1}
)", 2));
  std::vector<std::string> want = {"C embedding"};
  for (int l = 0; l < kTinyLayers; ++l)
    for (const char* block : {"attn", "mlp"}) {
      want.push_back(std::string("C ") + block);
      want.push_back(std::string("AR ") + block);
    }
  // Logits + loss, then the vocab-parallel cross entropy's all-reduce of 3 b s fp32 values.
  want.push_back("C logits");
  want.push_back("AR logits");
  EXPECT_EQ(first_tasks(g, 0, want.size()), want);
  for (TaskId id : g.tasks_of_rank(0))
    if (g.task(id).part == Part::Logits && g.task(id).phase == Phase::Forward &&
        g.task(id).kind == TaskKind::Collective) {
      EXPECT_EQ(g.op(id).bytes, 3 * 1 * kTinySeq * 4);
      EXPECT_EQ(g.op(id).group_size, 2);
    }
}

TEST(TensorParallelPass, ScatterGatherAllGathersTheReceivedSlices) {
  // pp = 2, t = 2, no SP: each TP rank sends 1/t of the activation and the receiver gathers.
  const ScheduleGraph g = build_graph(tiny_scenario(R"(
parallel: {tensor_model_parallel_size: 2, pipeline_model_parallel_size: 2, micro_batch_size: 1, global_batch_size: 1}
)", 4));
  const RankId second_stage = 2;  // rank = stage * (dp * tp) + dp_rank * tp + tp_rank
  const std::vector<std::string> want = {"Recv pipeline", "AG pipeline", "C attn"};
  EXPECT_EQ(first_tasks(g, second_stage, want.size()), want);
  const TaskId recv = g.tasks_of_rank(second_stage)[0];
  EXPECT_EQ(g.op(recv).bytes, 2 * kTinySeq * 1 * kTinyHidden / 2);  // e s b h / t
}
