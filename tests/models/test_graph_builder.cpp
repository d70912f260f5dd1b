// Schedule graph builder: structure checked against independent calculations.
#include <gtest/gtest.h>

#include <map>
#include <set>
#include <string>
#include <vector>

#include "models/perf/flops.h"
#include "models/builder/graph_builder.h"
#include "models/hardware/hardware.h"
#include "models/memory/memory_model.h"
#include "models/input/scenario.h"
#include "tests/support/h100_nvls_scenario.h"
#include "tests/support/paths.h"

using trainsim::test_support::source_path;

using namespace trainsim;

namespace {

std::string scen(const std::string& rel) { return source_path("scenarios/" + rel); }

Scenario tiny(const std::string& extra) {
  const std::string yaml = R"(
name: t
model: {num_layers: 8, hidden_size: 256, num_attention_heads: 8, seq_length: 128, padded_vocab_size: 1024}
cluster: {system: dgx-a100-80gb, nodes: 1, gpus_per_node: 8}
)" + extra;
  return parse_scenario(yaml, "test.yaml");
}

ScheduleGraph build(const Scenario& sc, bool fold = false) {
  BuildOptions o;
  o.fold = fold;
  return build_schedule_graph(validated(sc), find_system(sc.cluster.system), o);
}

double total_flops(const ScheduleGraph& g) {
  double f = 0;
  for (TaskId id = 0; id < g.num_tasks(); ++id) f += g.op(id).flops;
  return f * double(g.fold_factor);
}

// "F3c1" / "B0c0" for the compute tasks of a rank that start a layer chunk's pass.
std::vector<std::string> pass_order(const ScheduleGraph& g, RankId rank) {
  std::vector<std::string> out;
  int last_mb = -1, last_chunk = -1;
  bool last_fwd = false;
  for (TaskId id : g.tasks_of_rank(rank)) {
    const Task& t = g.task(id);
    if (t.kind != TaskKind::Compute || t.phase == Phase::Recompute) continue;
    if (t.part != Part::Attn && t.part != Part::Mlp) continue;
    const bool fwd = t.phase == Phase::Forward;
    if (int(t.microbatch) == last_mb && int(t.chunk) == last_chunk && fwd == last_fwd) continue;
    last_mb = t.microbatch;
    last_chunk = t.chunk;
    last_fwd = fwd;
    out.push_back(std::string(fwd ? "F" : "B") + std::to_string(t.microbatch) + "c" +
                  std::to_string(t.chunk));
  }
  return out;
}

}  // namespace

TEST(GraphBuilder, OneFOneBOrderOfComputeMatchesHandWrittenOrder) {
  // PP=4, 8 microbatches (Megatron 1F1B, warm-up pp - rank - 1).
  Scenario sc = tiny(R"(parallel: {pipeline_model_parallel_size: 4, micro_batch_size: 1, global_batch_size: 16})");
  sc.cluster.gpus_per_node = 8;
  auto g = build(sc);
  ASSERT_EQ(sc.parallel.data_parallel_size, 2);
  // rank layout: stage = rank / (dp * tp) -> stage 0 = ranks 0,1; stage 3 = ranks 6,7
  const std::vector<std::string> rank0 = {"F0c0", "F1c0", "F2c0", "F3c0", "B0c0", "F4c0", "B1c0", "F5c0",
                                          "B2c0", "F6c0", "B3c0", "F7c0", "B4c0", "B5c0", "B6c0", "B7c0"};
  const std::vector<std::string> rank_last = {"F0c0", "B0c0", "F1c0", "B1c0", "F2c0", "B2c0", "F3c0", "B3c0",
                                              "F4c0", "B4c0", "F5c0", "B5c0", "F6c0", "B6c0", "F7c0", "B7c0"};
  EXPECT_EQ(pass_order(g, 0), rank0);
  EXPECT_EQ(pass_order(g, 6), rank_last);
}

TEST(GraphBuilder, InterleavedOrderOfComputeMatchesHandWrittenOrder) {
  // PP=4, v=2 (1 layer per virtual stage), 8 microbatches; rank 0 warm-up (4-0-1)*2+(2-1)*4 = 10
  // forwards, then the steady state runs forward k=10 (F6c0) before the first backward.
  Scenario sc = tiny(R"(parallel: {pipeline_model_parallel_size: 4, micro_batch_size: 1, global_batch_size: 8,
  num_layers_per_virtual_pipeline_stage: 1})");
  sc.cluster.gpus_per_node = 4;
  validate_scenario(sc);
  auto g = build(sc);
  const std::vector<std::string> rank0 = {
      "F0c0", "F1c0", "F2c0", "F3c0", "F0c1", "F1c1", "F2c1", "F3c1", "F4c0", "F5c0",
      "F6c0", "B0c1", "F7c0", "B1c1", "F4c1", "B2c1", "F5c1", "B3c1", "F6c1", "B0c0",
      "F7c1", "B1c0", "B2c0", "B3c0", "B4c1", "B5c1", "B6c1", "B7c1", "B4c0", "B5c0", "B6c0", "B7c0"};
  EXPECT_EQ(pass_order(g, 0), rank0);
  // Layers: rank r chunk c holds layer (c * pp + r) * layers_per_chunk.
  for (TaskId id : g.tasks_of_rank(1)) {
    const Task& t = g.task(id);
    if (t.kind == TaskKind::Compute && (t.part == Part::Attn || t.part == Part::Mlp))
      EXPECT_EQ(t.layer, t.chunk * 4 + 1);
  }
}

TEST(GraphBuilder, ExecutedFlopsEqualPaperFormulaUnderFullRecompute) {
  // Narayanan et al. Eq. 3: F = 96 B s l h^2 (1 + s/6h + V/16lh) under full recomputation.
  for (const char* f : {"gpt-1.7b_tp1_pp1_dp32.yaml", "gpt-39.1b_tp8_pp2_dp32.yaml",
                        "gpt-76.1b_tp8_pp4_dp32.yaml"}) {
    Scenario sc = load_scenario(scen(f));
    auto g = build(sc, true);
    EXPECT_NEAR(total_flops(g) / paper_flops_per_iteration(sc), 1.0, 1e-9) << f;
  }
}

TEST(GraphBuilder, ExecutedFlopsEqualModelFlopsWithoutRecompute) {
  Scenario sc = tiny(R"(parallel: {tensor_model_parallel_size: 2, pipeline_model_parallel_size: 2,
  micro_batch_size: 2, global_batch_size: 16})");
  auto g = build(sc);
  // 72 B s l h^2 (1 + s/6h + V/12lh): no recomputation executes exactly the model FLOPs.
  EXPECT_NEAR(total_flops(g) / model_flops_per_iteration(sc), 1.0, 1e-9);
}

TEST(GraphBuilder, SelectiveRecomputeAddsOnlyCoreAttention) {
  Scenario sc = tiny(R"(parallel: {tensor_model_parallel_size: 2, micro_batch_size: 2, global_batch_size: 8,
  recompute_granularity: selective})");
  auto g = build(sc);
  const double B = 8, s = 128, l = 8, h = 256;
  // Model FLOPs plus one more forward of QK^T and attention x V: 4 B s^2 h per layer.
  EXPECT_NEAR(total_flops(g), model_flops_per_iteration(sc) + 4 * B * s * s * h * l, 1.0);
}

TEST(GraphBuilder, MessagesAndCollectivesMatch) {
  for (const char* extra :
       {R"(parallel: {tensor_model_parallel_size: 2, pipeline_model_parallel_size: 2, micro_batch_size: 1, global_batch_size: 8})",
        R"(parallel: {pipeline_model_parallel_size: 4, micro_batch_size: 1, global_batch_size: 8, num_layers_per_virtual_pipeline_stage: 1})",
        R"(parallel: {tensor_model_parallel_size: 2, pipeline_model_parallel_size: 2, micro_batch_size: 1, global_batch_size: 8, sequence_parallel: true, overlap_grad_reduce: true})"}) {
    Scenario sc = tiny(extra);
    if (sc.parallel.virtual_pipeline_size > 1) {
      sc.cluster.gpus_per_node = 4;
      validate_scenario(sc);
    }
    auto g = build(sc);
    std::map<std::uint32_t, std::vector<TaskId>> sends, recvs, colls;
    for (TaskId id = 0; id < g.num_tasks(); ++id) {
      const Task& t = g.task(id);
      if (t.kind == TaskKind::Send) sends[t.match].push_back(id);
      if (t.kind == TaskKind::Recv) recvs[t.match].push_back(id);
      if (t.kind == TaskKind::Collective) colls[t.match].push_back(id);
    }
    ASSERT_EQ(sends.size(), recvs.size()) << extra;
    for (const auto& [m, s] : sends) {
      ASSERT_EQ(s.size(), 1u);
      ASSERT_EQ(recvs[m].size(), 1u);
      const Task& a = g.task(s[0]);
      const Task& b = g.task(recvs[m][0]);
      EXPECT_EQ(RankId(a.peer), b.rank);
      EXPECT_EQ(RankId(b.peer), a.rank);
      EXPECT_EQ(a.microbatch, b.microbatch);
      EXPECT_EQ(a.phase, b.phase);
    }
    for (const auto& [m, members] : colls) {
      const Task& first = g.task(members[0]);
      const CommGroup& grp = g.group(first.group);
      EXPECT_EQ(members.size(), grp.ranks.size()) << g.label(members[0]);
      std::set<RankId> seen;
      for (TaskId id : members) {
        EXPECT_EQ(g.task(id).op, first.op);
        seen.insert(g.task(id).rank);
      }
      EXPECT_EQ(seen, std::set<RankId>(grp.ranks.begin(), grp.ranks.end()));
    }
  }
}

TEST(GraphBuilder, FoldedRepresentativeHasTheSameProgramAsUnfolded) {
  Scenario sc = tiny(R"(parallel: {tensor_model_parallel_size: 2, pipeline_model_parallel_size: 2, micro_batch_size: 1, global_batch_size: 8})");
  auto full = build(sc, false);
  auto folded = build(sc, true);
  EXPECT_EQ(folded.fold_factor, 4);
  EXPECT_EQ(full.fold_factor, 1);
  ASSERT_EQ(folded.simulated_ranks(), (std::vector<RankId>{0, 4}));
  for (RankId r : folded.simulated_ranks()) {
    auto a = full.tasks_of_rank(r), b = folded.tasks_of_rank(r);
    ASSERT_EQ(a.size(), b.size());
    for (std::size_t i = 0; i < a.size(); ++i) EXPECT_EQ(full.label(a[i]), folded.label(b[i]));
  }
  EXPECT_NEAR(total_flops(full), total_flops(folded), 1e-6 * total_flops(full));
}

TEST(GraphBuilder, TensorParallelCollectivesPerLayer) {
  // Full recompute, TP=2, PP=1: per layer and microbatch 2 all-reduces forward, 2 in the
  // recomputed forward and 2 backward (Megatron f/g operators).
  Scenario sc = tiny(R"(parallel: {tensor_model_parallel_size: 2, micro_batch_size: 1, global_batch_size: 4, recompute_granularity: full})");
  auto g = build(sc);
  int tp_ar = 0;
  for (TaskId id : g.tasks_of_rank(0))
    if (g.task(id).kind == TaskKind::Collective && g.op(id).group == GroupKind::Tensor &&
        (g.task(id).part == Part::Attn || g.task(id).part == Part::Mlp))
      ++tp_ar;
  const int m = int(sc.parallel.num_microbatches);
  EXPECT_EQ(tp_ar, 8 * m * 6);
  // Each carries the full activation b*s*h*2 bytes.
  for (TaskId id : g.tasks_of_rank(0))
    if (g.task(id).kind == TaskKind::Collective && g.task(id).part == Part::Attn)
      EXPECT_EQ(g.op(id).bytes, 1 * 128 * 256 * 2);
}

TEST(GraphBuilder, DataParallelBucketsCoverAllParameters) {
  Scenario sc = tiny(R"(parallel: {micro_batch_size: 1, global_batch_size: 8, ddp_bucket_size: 100000})");
  auto g = build(sc);
  std::int64_t bytes = 0;
  int buckets = 0;
  for (TaskId id : g.tasks_of_rank(0))
    if (g.task(id).phase == Phase::GradSync && g.op(id).group == GroupKind::Data) {
      bytes += g.op(id).bytes;
      ++buckets;
      EXPECT_LE(g.op(id).bytes, 100000 * 2);
    }
  const std::int64_t params = params_per_rank(sc, 0);
  EXPECT_EQ(bytes, params * 2);  // fp16 gradients
  EXPECT_EQ(buckets, int((params + 99999) / 100000));
}

TEST(GraphBuilder, ParameterCountMatchesClosedForm) {
  // GPT parameter count 12 l h^2 (1 + 13/12h + (V + s)/(12 l h)) (Narayanan et al. Sec. 5.1).
  Scenario sc = load_scenario(scen("gpt-1t_tp8_pp64_dp6.yaml"));
  const double l = 128, h = 25600, V = 51200, s = 2048;
  // The paper's count leaves out the final LayerNorm (2h).
  const double expected = 12 * l * h * h * (1 + 13 / (12 * h) + (V + s) / (12 * l * h)) + 2 * h;
  EXPECT_NEAR(double(total_params(sc.model)) / expected, 1.0, 1e-12);
  std::int64_t sum = 0;
  for (std::int64_t st = 0; st < 64; ++st) sum += params_per_rank(sc, st) * 8;
  // Over the 8 TP ranks, replicated tensors count 8 times: per layer the projection and fc2
  // biases and two LayerNorms (6h), the position embedding (s h) and the final LayerNorm (2h);
  // plus the last stage's copy of the tied word embedding (V x h).
  const double replicated_extra = 7 * (6 * h * l + s * h + 2 * h);
  EXPECT_EQ(sum, total_params(sc.model) + std::int64_t(V * h + replicated_extra));
}

// Pipeline sends: in 1F1B and GPipe the compute after an exchange waits for the send's delivery
// (Megatron-LM 2021 synchronised the device after each batch_isend_irecv; Megatron-Core waits on
// the requests): every send gets exactly one successor on its rank outside its own queue, the
// first compute-stream task after it in program order. So does Megatron-LM 2021's interleaved
// schedule, whose exchanges are batches (pipeline_pass.cpp exchange()); Megatron-Core's
// interleaved sends are not waited on (pipeline_pass.cpp send()).
namespace {
struct SendWaits {
  int sends = 0, waited = 0, wrong = 0;
};
SendWaits send_waits(const ScheduleGraph& g) {
  SendWaits w;
  const auto& deps = g.dependencies();
  for (RankId rank : g.simulated_ranks()) {
    const std::vector<TaskId> order = g.tasks_of_rank(rank);
    for (std::size_t i = 0; i < order.size(); ++i) {
      if (g.task(order[i]).kind != TaskKind::Send) continue;
      ++w.sends;
      TaskId next = kNone;
      for (std::size_t j = i + 1; j < order.size() && next == kNone; ++j)
        if (g.task(order[j]).stream == StreamId::Compute) next = order[j];
      std::vector<TaskId> same_rank;
      for (auto [e, end] = boost::out_edges(order[i], deps); e != end; ++e) {
        const TaskId u = TaskId(boost::target(*e, deps));
        // Its own queue's next task follows it in stream order (the send is only posted).
        if (g.task(u).rank == rank && g.task(u).stream != StreamId::PpComm) same_rank.push_back(u);
      }
      if (same_rank.empty()) continue;
      ++w.waited;
      if (same_rank.size() != 1 || same_rank[0] != next) ++w.wrong;
    }
  }
  return w;
}
}  // namespace

TEST(GraphBuilder, ComputeWaitsForPipelineSendsOutsideInterleaving) {
  const std::string base =
      "parallel: {pipeline_model_parallel_size: 4, micro_batch_size: 1, global_batch_size: 16";
  for (const std::string runtime : {"", "runtime: megatron-core\n"})
    for (const std::string schedule : {"", ", pipeline_schedule: gpipe"}) {
      const SendWaits w = send_waits(build(tiny(runtime + base + schedule + "}")));
      EXPECT_GT(w.sends, 0) << runtime << schedule;
      EXPECT_EQ(w.wrong, 0) << runtime << schedule;
      // Each rank's last send (stage s > 0's last backward send) is followed by the optimizer
      // step on the compute stream, so it is waited on too.
      EXPECT_EQ(w.waited, w.sends) << runtime << schedule;
    }
  const SendWaits wi = send_waits(build(
      tiny("runtime: megatron-core\n" + base + ", num_layers_per_virtual_pipeline_stage: 1}")));
  EXPECT_GT(wi.sends, 0);
  EXPECT_EQ(wi.waited, 0);
  const SendWaits w21 =
      send_waits(build(tiny(base + ", num_layers_per_virtual_pipeline_stage: 1}")));
  EXPECT_GT(w21.sends, 0);
  EXPECT_EQ(w21.wrong, 0);
  EXPECT_EQ(w21.waited, w21.sends);
}

// Megatron-LM 2021's interleaved exchanges (pipeline_schedule.h
// megatron2021_interleaved_exchanges) in the graph: each batch's messages are posted together
// after the compute that precedes the batch, and the next compute waits for all of them; a
// receive may be posted one or more steps before the step that uses it, never after. With
// scatter/gather each received tensor is all-gathered over the TP group after the batch.
TEST(GraphBuilder, Megatron2021InterleavedExchangesAreSynchronisedBatches) {
  for (const std::string tp : {"1", "2"}) {
    Scenario sc = tiny("parallel: {tensor_model_parallel_size: " + tp +
                       ", pipeline_model_parallel_size: 4, micro_batch_size: 1, "
                       "global_batch_size: 16, num_layers_per_virtual_pipeline_stage: 1, "
                       "scatter_gather_tensors_in_pipeline: true}");
    const ScheduleGraph g = build(sc);
    const auto& deps = g.dependencies();
    auto preds = [&](TaskId id, bool with_queue = true) {  // with_queue: the PpComm order too
      std::set<TaskId> p;
      for (auto [e, end] = boost::in_edges(id, deps); e != end; ++e) {
        const TaskId u = TaskId(boost::source(*e, deps));
        if (with_queue || g.task(u).stream != StreamId::PpComm) p.insert(u);
      }
      return p;
    };
    int batches = 0, messages = 0, gathers = 0;
    for (RankId rank : g.simulated_ranks()) {
      const std::vector<TaskId> order = g.tasks_of_rank(rank);
      for (std::size_t i = 0; i < order.size();) {
        if (g.task(order[i]).stream != StreamId::PpComm) {
          ++i;
          continue;
        }
        // A batch: consecutive pipeline messages, all after the same compute-path task.
        std::vector<TaskId> batch;
        for (; i < order.size() && g.task(order[i]).stream == StreamId::PpComm; ++i)
          batch.push_back(order[i]);
        ++batches;
        messages += int(batch.size());
        const std::set<TaskId> first_preds = preds(batch[0], false);
        EXPECT_LE(first_preds.size(), 1u) << g.label(batch[0]);  // the compute before it
        for (TaskId m : batch) EXPECT_EQ(preds(m, false), first_preds) << g.label(m);
        // What follows on the compute path waits for every message of the batch: TP
        // all-gathers of the received tensors, then the next compute.
        std::size_t j = i;
        for (; j < order.size() && g.task(order[j]).stream == StreamId::TpComm; ++j) {
          ++gathers;
          const std::set<TaskId> p = preds(order[j]);
          for (TaskId m : batch)
            EXPECT_TRUE(p.count(m)) << g.label(order[j]) << " does not wait for " << g.label(m);
        }
        if (j < order.size() && g.task(order[j]).stream == StreamId::Compute &&
            g.task(order[j]).phase != Phase::Optimizer) {
          const std::set<TaskId> p = preds(order[j]);
          for (TaskId m : batch) EXPECT_TRUE(p.count(m)) << g.label(order[j]) << " / " << g.label(m);
        }
      }
    }
    // 16 microbatches x 2 chunks x 4 stages: one message per boundary between virtual stages
    // (7 of them) each way, counted on both ends, on each TP rank.
    EXPECT_EQ(messages, 2 * 2 * 16 * 7 * std::stoi(tp)) << "tp " << tp;
    EXPECT_GT(batches, 0);
    if (tp == "1") EXPECT_EQ(gathers, 0);
    if (tp == "2") EXPECT_EQ(gathers, 2 * 16 * 7 * 2);  // every received tensor, both TP ranks
  }
}

// NCCL's NVLS buffers (src/transport/nvls.cc) in comm_buffers: v2.29.7 sets them up for a
// communicator at its first NVLS collective, 16 channels x 2 x (128 KiB x 8 steps) x the 8
// local ranks = 256 MiB; v2.18.5 at init for every communicator with 2+ GPUs in the node,
// 16 x 2 x (4 MiB + 2 MiB) x local ranks. Llama 3 70B's layer, TP 8 without sequence
// parallelism (its 128 MiB all-reduces run NVLS), DP 2 over 2 nodes: tests/support/h100_nvls_scenario.h.
TEST(GraphBuilder, NvlsBuffersOfTheCommunicatorsThatRunNvls) {
  using test_support::h100_tp8_nvls_overrides;
  const std::string file = source_path(test_support::kH100Tp8NvlsFile);
  auto comm_buffers = [&](std::vector<std::pair<std::string, std::string>> extra) {
    const Scenario sc = load_scenario(file, h100_tp8_nvls_overrides(std::move(extra)));
    BuildOptions opt;
    opt.fold = true;
    const ScheduleGraph g = build_schedule_graph(validated(sc), find_system("dgx-h100"), opt);
    return g.initial_gpu_memory.at(0)[int(MemCategory::CommBuffers)];
  };
  const std::int64_t off = comm_buffers({{"nccl_nvls_enable", "false"}});
  const std::int64_t on = comm_buffers({});
  EXPECT_EQ(on - off, std::int64_t(16) * 2 * (128 * 1024 * 8) * 8);  // the TP group only
  // v2.18.5: every group of rank 0 with collectives and 2+ GPUs in its node (the TP group
  // at least; the DP group, one GPU per node, none): counted here from the graph's groups.
  const Scenario sc18 = load_scenario(file, h100_tp8_nvls_overrides({{"nccl_version", "2.18.5"}}));
  BuildOptions opt;
  opt.fold = true;
  const ScheduleGraph g = build_schedule_graph(validated(sc18), find_system("dgx-h100"), opt);
  std::int64_t expected = 0;
  std::set<std::uint32_t> seen;
  for (TaskId id = 0; id < g.num_tasks(); ++id) {
    const Task& t = g.task(id);
    if (t.rank != 0 || t.kind != TaskKind::Collective || t.group == kNone) continue;
    if (!seen.insert(t.group).second) continue;
    std::int64_t local = 0;
    for (RankId r : g.group(t.group).ranks) local += r / 8 == 0 ? 1 : 0;
    if (local >= 2) expected += std::int64_t(16) * 2 * ((4 << 20) + (2 << 20)) * local;
  }
  EXPECT_GE(expected, std::int64_t(16) * 2 * (6 << 20) * 8);  // at least the TP group
  EXPECT_EQ(comm_buffers({{"nccl_version", "2.18.5"}}) - off, expected);
}
