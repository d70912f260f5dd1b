// Strategy ddp_buckets (models/builder/dp_ddp_buckets.cpp): Megatron DDP's gradient
// all-reduce buckets, checked against hand-computed bucket boundaries.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "models/builder/dp_strategy.h"
#include "models/input/scenario.h"
#include "tests/support/paths.h"
#include "tests/support/tiny_scenario.h"

using namespace trainsim;
using namespace trainsim::testing;

namespace {

std::vector<TaskId> grad_syncs(const ScheduleGraph& g, RankId rank) {
  std::vector<TaskId> out;
  for (TaskId id : g.tasks_of_rank(rank))
    if (g.task(id).phase == Phase::GradSync && g.task(id).part == Part::Gradients) out.push_back(id);
  return out;
}

/// The compute-path task a bucket waits for (its only non-stream predecessor on the rank's
/// compute stream).
const Task* ready_task(const ScheduleGraph& g, TaskId bucket) {
  const Task* found = nullptr;
  for (auto [e, end] = boost::in_edges(bucket, g.dependencies()); e != end; ++e) {
    const Task& t = g.task(boost::source(*e, g.dependencies()));
    if (t.stream == StreamId::Compute) found = &t;
  }
  return found;
}

// dp = 2, one stage, 1M-parameter buckets, overlapped with backward.
Scenario ddp(bool overlap) {
  return tiny_scenario(std::string(R"(
parallel: {micro_batch_size: 1, global_batch_size: 4, ddp_bucket_size: 1000000, overlap_grad_reduce: )") +
                           (overlap ? "true" : "false") + "}\n",
                       2);
}

}  // namespace

TEST(DpDdpBuckets, FactoryPicksItForStageZeroWithDataParallelism) {
  const Scenario sc = ddp(true);
  builder::GraphBuild build(sc, default_calibration(find_system(sc.cluster.system).gpu.name));
  const builder::RankContext ctx(build, {0, 0, 0});
  EXPECT_STREQ(builder::make_data_parallel_strategy(ctx)->name(), "ddp_buckets");
}

TEST(DpDdpBuckets, BucketCountSizesGroupAndOrder) {
  const Scenario sc = ddp(true);
  ASSERT_EQ(sc.parallel.data_parallel_size, 2);
  const ScheduleGraph g = build_graph(sc);
  // 8 x 789,760 + 294,912 + 512 = 6,613,504 parameters: ceil(/1M) = 7 buckets, once per
  // iteration (after the last microbatch), fp16 gradients (2 B).
  const auto buckets = grad_syncs(g, 0);
  ASSERT_EQ(buckets.size(), 7u);
  for (std::size_t k = 0; k < buckets.size(); ++k) {
    const Task& t = g.task(buckets[k]);
    EXPECT_EQ(std::size_t(t.bucket), k);
    EXPECT_EQ(t.stream, StreamId::DpComm);
    EXPECT_EQ(g.op(buckets[k]).kind, OpKind::AllReduce);
    EXPECT_EQ(g.op(buckets[k]).bytes, k < 6 ? 2'000'000 : 2 * (kTinyParams - 6'000'000));
    EXPECT_EQ(g.group(t.group).ranks, (std::vector<RankId>{0, 1}));
  }
  // Gradients become ready output layer (512), layer 7, 6, ..., 0, embedding; cumulative
  // 512 + k x 789,760 crosses 1M in layer 6, 2M in 5, 3M in 4, 4M in 2, 5M in 1, 6M in 0;
  // the remainder waits for the embedding backward.
  const std::vector<int> layer_of_bucket = {6, 5, 4, 2, 1, 0};
  for (std::size_t k = 0; k < 6; ++k) {
    const Task* r = ready_task(g, buckets[k]);
    ASSERT_NE(r, nullptr) << "bucket " << k;
    EXPECT_EQ(int(r->layer), layer_of_bucket[k]) << "bucket " << k;
    EXPECT_EQ(r->phase, Phase::Backward);
    EXPECT_EQ(std::int64_t(r->microbatch), sc.parallel.num_microbatches - 1);
  }
  const Task* last = ready_task(g, buckets[6]);
  ASSERT_NE(last, nullptr);
  EXPECT_EQ(last->part, Part::Embedding);
}

TEST(DpDdpBuckets, WithoutOverlapEveryBucketWaitsForTheWholeBackward) {
  const ScheduleGraph g = build_graph(ddp(false));
  for (TaskId b : grad_syncs(g, 0)) {
    const Task* r = ready_task(g, b);
    ASSERT_NE(r, nullptr);
    EXPECT_EQ(r->part, Part::Embedding);  // the rank's last backward task
  }
}

TEST(DpDdpBuckets, Bf16GradientsAreReducedInFp32) {
  const Scenario sc = tiny_scenario(R"(
parallel: {micro_batch_size: 1, global_batch_size: 4, ddp_bucket_size: 100000000, precision: bf16}
)", 2);
  const ScheduleGraph g = build_graph(sc);
  const auto buckets = grad_syncs(g, 0);
  ASSERT_EQ(buckets.size(), 1u);
  EXPECT_EQ(g.op(buckets[0]).bytes, 4 * kTinyParams);  // accumulate_allreduce_grads_in_fp32
}

// Megatron-Core's grad_reduce_in_fp32 (DistributedDataParallelConfig; Megatron-Bridge's
// performance recipes set it to false): with false the main_grad buffer holds bf16 (2 B per
// parameter instead of 4), its reduce-scatter moves half the bytes, and the distributed
// optimizer casts the shard's gradients to a temporary fp32 copy before Adam (46 bytes of HBM
// traffic per parameter instead of 42: flops.cpp optimizer_gpu_bytes_per_param).
TEST(DpDdpBuckets, GradReduceInFp32FalseKeepsBf16Gradients) {
  struct Out {
    std::int64_t reduced_bytes, grad_memory, step_grad_bytes;
    double step_hbm_bytes;
  };
  auto run = [](const std::string& flag) {
    const ScheduleGraph g = build_graph(tiny_scenario(
        "runtime: megatron-core\nparallel: {micro_batch_size: 1, global_batch_size: 4, "
        "ddp_bucket_size: 100000000, precision: bf16, use_distributed_optimizer: true" + flag +
            "}\n",
        2));
    Out o{};
    const auto buckets = grad_syncs(g, 0);
    EXPECT_EQ(buckets.size(), 1u);
    EXPECT_EQ(g.op(buckets.at(0)).kind, OpKind::ReduceScatter);
    o.reduced_bytes = g.op(buckets.at(0)).bytes;
    o.grad_memory = g.initial_gpu_memory.at(0)[int(MemCategory::Gradients)];
    for (TaskId id : g.tasks_of_rank(0))
      if (g.task(id).kind == TaskKind::OptimizerGpu) {
        o.step_hbm_bytes = g.op(id).bytes_accessed;
        for (const MemEffect* e = g.effects_begin(id); e != g.effects_end(id); ++e)
          if (e->category == MemCategory::Gradients && e->bytes > 0) o.step_grad_bytes += e->bytes;
      }
    return o;
  };
  const std::int64_t shard = (kTinyParams + 1) / 2;
  for (const std::string& flag : {std::string(), std::string(", grad_reduce_in_fp32: true")}) {
    const Out o = run(flag);  // Megatron's default for bf16
    EXPECT_EQ(o.reduced_bytes, 4 * kTinyParams) << flag;
    EXPECT_EQ(o.grad_memory, 4 * kTinyParams) << flag;
    EXPECT_EQ(o.step_grad_bytes, 0) << flag;  // the fp32 shard is read in place
    EXPECT_DOUBLE_EQ(o.step_hbm_bytes, 42.0 * shard) << flag;
  }
  const Out o = run(", grad_reduce_in_fp32: false");
  EXPECT_EQ(o.reduced_bytes, 2 * kTinyParams);
  EXPECT_EQ(o.grad_memory, 2 * kTinyParams);
  EXPECT_EQ(o.step_grad_bytes, 4 * shard);  // model_grad.float() of the shard
  EXPECT_DOUBLE_EQ(o.step_hbm_bytes, 46.0 * shard);
}

// Megatron's optimizer reduces its found-inf flag (fp16) and gradient norm (clip_grad > 0) over
// the model-parallel group (TP x PP of one replica) before the step: 4-byte all-reduces,
// counted here per precision and switch (models/builder/pipeline_pass.cpp).
namespace {
int model_parallel_reductions(const std::string& precision, const std::string& clip, int stage,
                              RankId rank, std::vector<RankId>* members = nullptr) {
  const Scenario sc = tiny_scenario(
      "parallel: {tensor_model_parallel_size: 2, pipeline_model_parallel_size: 2, "
      "micro_batch_size: 1, global_batch_size: 4, precision: " + precision +
          ", clip_grad: " + clip + "}\ndeepspeed: {zero_optimization: {stage: " +
          std::to_string(stage) + "}}\n",
      8);
  const ScheduleGraph g = build_graph(sc);
  int n = 0;
  TaskId step = kNone;
  for (TaskId id : g.tasks_of_rank(rank)) {
    if (g.task(id).kind == TaskKind::OptimizerGpu) step = id;
    if (g.task(id).kind != TaskKind::Collective || g.op(id).group != GroupKind::ModelParallel)
      continue;
    ++n;
    EXPECT_EQ(g.op(id).kind, OpKind::AllReduce);
    EXPECT_EQ(g.op(id).bytes, 4);
    EXPECT_EQ(g.task(id).phase, Phase::Optimizer);
    EXPECT_EQ(step, kNone) << "the reductions come before the step";
    if (members) *members = g.group(g.task(id).group).ranks;
  }
  return n;
}
}  // namespace

TEST(OptimizerReductions, FoundInfWithFp16AndNormWithClipping) {
  std::vector<RankId> members;
  EXPECT_EQ(model_parallel_reductions("fp16", "1.0", 0, 0, &members), 2);
  // Rank 0's replica (dp index 0): TP ranks 0, 1 of stage 0 and 4, 5 of stage 1 (TP fastest,
  // then DP, then PP: rank = 4 pp + 2 dp + tp).
  EXPECT_EQ(members, (std::vector<RankId>{0, 1, 4, 5}));
  EXPECT_EQ(model_parallel_reductions("fp16", "1.0", 0, 6, &members), 2);
  EXPECT_EQ(members, (std::vector<RankId>{2, 3, 6, 7}));
  EXPECT_EQ(model_parallel_reductions("bf16", "1.0", 0, 0), 1);  // no loss scaler
  EXPECT_EQ(model_parallel_reductions("fp16", "0", 0, 0), 1);    // --clip-grad 0: no norm
  EXPECT_EQ(model_parallel_reductions("bf16", "0", 0, 0), 0);
  // DeepSpeed's optimizer reduces its own flag and norm: DeepSpeedReductions below.
}

TEST(OptimizerReductions, ClipGradIsValidated) {
  for (const char* bad : {"-1", "nan", "big"}) {
    try {
      tiny_scenario("parallel: {micro_batch_size: 1, global_batch_size: 1, clip_grad: " +
                        std::string(bad) + "}\n", 1);
      ADD_FAILURE() << bad << " accepted";
    } catch (const InputError& e) {
      EXPECT_NE(std::string(e.what()).find("parallel.clip_grad"), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("tiny.yaml"), std::string::npos) << e.what();
    }
  }
}

// DeepSpeed's ZeRO optimizers (v0.19.5 stage_1_and_2.py / stage3.py step()): with fp16 the
// overflow flag (1 byte, MAX), then one fp32 norm per optimizer group (4 bytes, SUM), each
// all-reduced over the data-parallel group and then the model-parallel group (TP x PP) when it
// has more than one rank; no Megatron reductions under ZeRO.
namespace {
std::vector<std::string> deepspeed_reductions(const std::string& parallel, int stage,
                                              const std::string& zero_extra = "") {
  const Scenario sc = tiny_scenario("parallel: {" + parallel +
                                        "}\ndeepspeed: {zero_optimization: {stage: " +
                                        std::to_string(stage) + zero_extra + "}}\n",
                                    8);
  const ScheduleGraph g = build_graph(sc);
  std::vector<std::string> out;
  for (TaskId id : g.tasks_of_rank(0)) {
    if (g.task(id).kind != TaskKind::Collective || g.task(id).phase != Phase::Optimizer) continue;
    const OpDesc& op = g.op(id);
    EXPECT_EQ(op.kind, OpKind::AllReduce);
    EXPECT_EQ(std::int64_t(g.group(g.task(id).group).ranks.size()), op.group_size);
    out.push_back(std::string(op.group == GroupKind::Data ? "dp" : "mp") + std::to_string(op.bytes));
  }
  return out;
}
}  // namespace

TEST(DeepSpeedReductions, OverflowFlagWithFp16ThenOneNormPerGroup) {
  // ZeRO-1, fp16, TP 2 x PP 2 x DP 2: the flag and the norm over DP, then over TP x PP.
  EXPECT_EQ(deepspeed_reductions("tensor_model_parallel_size: 2, pipeline_model_parallel_size: 2, "
                                 "micro_batch_size: 1, global_batch_size: 4, precision: fp16",
                                 1),
            (std::vector<std::string>{"dp1", "mp1", "dp4", "mp4"}));
  // ZeRO-2, bf16 (no overflow check), DP 8 only: the norm over DP.
  EXPECT_EQ(deepspeed_reductions("micro_batch_size: 1, global_batch_size: 8, precision: bf16", 2),
            (std::vector<std::string>{"dp4"}));
  // ZeRO-3, fp16, DP 8, sub-groups of 100,000 elements: the rank's partition of
  // 6,613,504 / 8 = 826,688 parameters makes ceil(8.27) = 9 sub-groups, one norm each.
  std::vector<std::string> zero3 = {"dp1"};
  for (int i = 0; i < 9; ++i) zero3.push_back("dp4");
  EXPECT_EQ(kTinyParams, 6'613'504);
  EXPECT_EQ(deepspeed_reductions("micro_batch_size: 1, global_batch_size: 8, precision: fp16", 3,
                                 ", sub_group_size: 100000"),
            zero3);
  // The default sub-group (1e9 elements) holds the whole partition: one norm.
  EXPECT_EQ(deepspeed_reductions("micro_batch_size: 1, global_batch_size: 8, precision: fp16", 3),
            (std::vector<std::string>{"dp1", "dp4"}));
}

// The distributed optimizer's step on an MoE rank updates the 1/dp shard of the dense
// parameters and the expert data-parallel shard of the local experts (the same count the
// optimizer states are held for). scenarios/small/qwen3-moe-tiny_tp1_pp1_ep2_dp2 by hand, per
// layer: norms 2 x 128, QKV (4 + 2 x 2) x 32 x 128, q/k norms 2 x 32, projection 128 x 128,
// router 8 x 128 = 50,496 dense; 8 / ep 2 = 4 local experts of fc1 2 x 96 x 128 and fc2
// 128 x 96 = 147,456 expert. Two layers, embedding and output 512 x 128 each, final norm 128:
// dense 232,192, experts 294,912. dp 2, expert dp = 2 / (pp 1 x ep 2 x etp 1) = 1:
// 116,096 + 294,912 = 411,008 parameters, 12 B each of optimizer state.
TEST(DpDdpBuckets, DistributedOptimizerShardsExpertsOverTheExpertDataParallelGroup) {
  Scenario sc = load_scenario(trainsim::test_support::source_path(
      "scenarios/small/qwen3-moe-tiny_tp1_pp1_ep2_dp2.yaml"));
  sc.cluster.system = "dgx-h100";  // the graph's shapes do not depend on the system
  const ScheduleGraph g = build_graph(sc);
  std::int64_t step_params = -1;
  for (TaskId id : g.tasks_of_rank(0))
    if (g.task(id).kind == TaskKind::OptimizerGpu) step_params = g.op(id).params;
  EXPECT_EQ(step_params, 116096 + 294912);
}
