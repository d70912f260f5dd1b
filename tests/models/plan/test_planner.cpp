// The planner's stages against independent counts and against `simulate`
// itself: the enumeration of a small space against a hand count, the memory
// filter (stage a) against the simulated peak and OOM verdict of every
// candidate, the reduced microbatch counts against Megatron's warm-up formula,
// and the ranking's tie rule.
#include <gtest/gtest.h>

#include <fstream>
#include <string>

#include "models/plan/planner.h"
#include "models/run.h"
#include "sim/executor.h"
#include "tests/support/paths.h"

namespace trainsim {
namespace {

using test_support::ScratchDir;

std::string slurp_text(const std::string& path) {
  std::ifstream in(path);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

/// `trainsim simulate` of a scenario file with overrides: its summary.
Summary simulated(const std::string& path,
                  const std::vector<std::pair<std::string, std::string>>& overrides = {}) {
  RunRequest req;
  req.scenario_path = path;
  req.overrides = overrides;
  const PreparedRun run = prepare_run(req);
  const ExecutionRecord rec =
      sim::simulate(run.graph, run.scenario, run.system, run.cost_model(), {});
  return finish_run(run, rec, {}).summary;
}

/// Stages (a) and (b) for the scenario file as written (no candidate overrides).
CandidateEstimate estimate_as_written(const std::string& path) {
  PlanCandidate c;
  c.layout = "as written";
  return estimate_candidate(path, {}, c, 0.0);
}

/// The largest exposed communication time of a rank.
double max_exposed_comm_s(const Summary& s) {
  double exposed = 0;
  for (const auto& r : s.per_rank) exposed = std::max(exposed, r.exposed_comm_s);
  return exposed;
}

/// Stage (b)'s estimate of the scenario as written lies within `tolerance` (relative) of its
/// simulated iteration, whose slowest rank exposes more than `min_comm_share` of it as
/// communication (the case exercises the communication the estimate models).
void expect_estimate_near_simulated(const std::string& path, double tolerance,
                                    double min_comm_share) {
  const CandidateEstimate e = estimate_as_written(path);
  ASSERT_EQ(e.rejection, PlanRejection::None) << e.reason;
  const Summary sum = simulated(path);
  EXPECT_NEAR(e.estimate_iteration_s, sum.iteration_time_s, tolerance * sum.iteration_time_s);
  EXPECT_GT(max_exposed_comm_s(sum), min_comm_share * sum.iteration_time_s);
}

/// The layouts of a scenario file's plan space, in enumeration order; each candidate must pass
/// the planner's validation (none refused as invalid, out of memory or otherwise).
std::vector<std::string> valid_layouts(const std::string& path) {
  const ValidScenario base = validated(load_scenario(path));
  std::vector<std::string> layouts;
  for (const auto& c : enumerate_candidates(load_plan_config(path, base), base)) {
    layouts.push_back(c.layout);
    const CandidateEstimate e = estimate_candidate(path, {}, c, 0.05);
    EXPECT_EQ(e.rejection, PlanRejection::None) << c.layout << ": " << e.reason;
  }
  return layouts;
}

std::string plan_yaml(const std::string& model, const std::string& parallel,
                      const std::string& plan, const std::string& system = "dgx-a100-80gb") {
  return "name: plan_test\nmodel: " + model + "\nparallel: " + parallel +
         "\ncluster: {system: " + system + ", nodes: 1}\nplan: " + plan + "\n";
}

TEST(PlannerEnumeration, CountMatchesAHandCount) {
  ScratchDir dir("plan");
  const std::string path =
      dir.write("s.yaml", plan_yaml("{num_layers: 8, hidden_size: 256, num_attention_heads: 8, "
                                    "seq_length: "
                                    "128, padded_vocab_size: 1024}",
                                    "{micro_batch_size: 1, global_batch_size: 16}",
                                    "{tensor_model_parallel_size: [1, 2], "
                                    "pipeline_model_parallel_size: [1, 2, 4], "
                                    "num_layers_per_virtual_pipeline_stage: all, micro_batch_size: "
                                    "[1, 2], "
                                    "recompute_granularity: [none, full], zero_stage: [0, 1]}"));
  const ValidScenario base = validated(load_scenario(path));
  const PlanConfig plan = load_plan_config(path, base);
  // Virtual-stage choices by hand: pp 1 -> {none}; pp 2 (4 layers per stage) ->
  // {none, 1, 2}; pp 4 (2 per stage) -> {none, 1}: 1 + 3 + 2 = 6 pipeline
  // shapes per TP. 2 TP x 6 x 2 micro batches x 2 recompute x 2 ZeRO stages
  // = 96.
  const auto all = enumerate_candidates(plan, base);
  EXPECT_EQ(all.size(), 96u);
  // No grid point repeats another here: the count before enumerating is the hand count too.
  EXPECT_EQ(count_grid_points(plan, base), 96.0);
  for (std::size_t i = 0; i < all.size(); ++i) EXPECT_EQ(all[i].index, i);
  EXPECT_EQ(all.front().layout, "tp1 pp1 dp8 mb1 norecomp");
}

TEST(PlannerEnumeration, DefaultsCoverPowersOfTwoTpAndEveryPipelineDivisor) {
  ScratchDir dir("plan");
  const std::string path =
      dir.write("s.yaml", plan_yaml("{num_layers: 12, hidden_size: 256, num_attention_heads: 8, "
                                    "seq_length: "
                                    "128, padded_vocab_size: 1024}",
                                    "{micro_batch_size: 1, global_batch_size: 16}", "{}"));
  const ValidScenario base = validated(load_scenario(path));
  const PlanConfig plan = load_plan_config(path, base);
  EXPECT_EQ(plan.tensor_model_parallel_size, (std::vector<std::int64_t>{1, 2, 4, 8}));
  EXPECT_EQ(plan.pipeline_model_parallel_size, (std::vector<std::int64_t>{1, 2, 3, 4, 6, 12}));
  EXPECT_EQ(plan.top_k, 50);
  // 4 TP x 6 PP x 4 micro batches x 3 recompute x 2 ZeRO stages (no
  // interleaving by default).
  EXPECT_EQ(enumerate_candidates(plan, base).size(), 4u * 6 * 4 * 3 * 2);
}

TEST(PlannerEnumeration, FlashAttentionDropsSelectiveRecomputationAsARepeatOfNone) {
  ScratchDir dir("plan");
  const std::string path = dir.write(
      "s.yaml", "name: plan_test\nruntime: megatron-core\nmodel: {num_layers: 8, hidden_size: 256, "
                "num_attention_heads: 8, seq_length: 128, padded_vocab_size: 1024, "
                "attention_backend: flash}\nparallel: {micro_batch_size: 1, global_batch_size: 16}\n"
                "cluster: {system: dgx-h100, nodes: 1}\nplan: {tensor_model_parallel_size: [1, 2], "
                "pipeline_model_parallel_size: [1, 2], micro_batch_size: [1], zero_stage: [0]}\n");
  const ValidScenario base = validated(load_scenario(path));
  // 2 TP x 2 PP x {none, full}: selective would rebuild the same graph as none.
  EXPECT_EQ(enumerate_candidates(load_plan_config(path, base), base).size(), 8u);
  // The count before enumerating is of the grid: selective included (an upper bound).
  EXPECT_EQ(count_grid_points(load_plan_config(path, base), base), 12.0);
}

// A Megatron-Core launch line (sequence parallelism, the distributed optimizer with its
// overlapped parameter gather, interleaving) planned with no `plan:` section: what it does not
// vary stays as written, so its own layout is a candidate and none is refused for a choice the
// planner made.
TEST(PlannerEnumeration, DimensionsNotPlannedKeepTheScenariosChoices) {
  ScratchDir dir("plan");
  const std::string model =
      "model: {num_layers: 8, hidden_size: 256, num_attention_heads: 8, seq_length: 128, "
      "padded_vocab_size: 1024, attention_backend: flash}\n";
  const std::string path = dir.write(
      "s.yaml", "name: plan_test\nruntime: megatron-core\n" + model +
                    "parallel: {tensor_model_parallel_size: 2, pipeline_model_parallel_size: 2, "
                    "num_layers_per_virtual_pipeline_stage: 2, micro_batch_size: 1, "
                    "global_batch_size: 16, sequence_parallel: true, "
                    "use_distributed_optimizer: true, overlap_param_gather: true}\n"
                    "cluster: {system: dgx-h100, nodes: 1}\n");
  const ValidScenario base = validated(load_scenario(path));
  const PlanConfig plan = load_plan_config(path, base);
  EXPECT_EQ(plan.sequence_parallel, std::vector<bool>{true});
  EXPECT_EQ(plan.use_distributed_optimizer, std::vector<bool>{true});
  EXPECT_EQ(plan.zero_stage, std::vector<std::int64_t>{0});  // Megatron-Core: no DeepSpeed ZeRO
  EXPECT_EQ(plan.context_parallel_size, std::vector<std::int64_t>{1});
  const auto all = enumerate_candidates(plan, base);
  // Virtual stages by hand, 8 layers: pp 1 -> {none}; pp 2 (4 per stage) -> {none, 2};
  // pp 4 (2 per stage: one chunk of 2) -> {none}; pp 8 -> {none}. 5 pipeline shapes x 4 TP x
  // 4 micro batches x {none, full}: 160. At TP 1 sequence parallelism is off (Megatron).
  EXPECT_EQ(all.size(), 160u);
  std::size_t own = 0, refused = 0;
  for (const auto& c : all) {
    if (c.layout == "tp2 pp2 dp2 vpl2 mb1 norecomp sp distopt") ++own;
    const CandidateEstimate e = estimate_candidate(path, {}, c, 0.05);
    if (e.rejection == PlanRejection::Invalid) {
      ++refused;
      // Only divisibility may refuse a candidate of this space: of the GPUs by TP x PP, of the
      // global batch by micro batch x DP, of the microbatches by PP when interleaved.
      EXPECT_TRUE(e.reason.find("does not divide the 8 GPUs") != std::string::npos ||
                  e.reason.find("global_batch_size (16) is not divisible") != std::string::npos ||
                  e.reason.find("number of microbatches (1 = ") != std::string::npos)
          << c.layout << ": " << e.reason;
    }
    if (c.layout.rfind("tp1 ", 0) == 0) EXPECT_EQ(c.layout.find(" sp"), std::string::npos);
  }
  EXPECT_EQ(own, 1u);
  EXPECT_GT(refused, 0u);  // e.g. tp2 pp8, and tp1 pp1 dp8 mb4: 16 / (4 x 8)
}

// Sequence parallelism on and off asked at TP 1 is one run (Megatron turns it off), enumerated
// once; without the distributed optimizer the parameter gather's overlap is dropped, as
// tp_comm_overlap is without sequence parallelism.
TEST(PlannerEnumeration, ChoicesMegatronMergesOrRefusesAreEnumeratedOnce) {
  ScratchDir dir("plan");
  const std::string path = dir.write(
      "s.yaml",
      "name: plan_test\nruntime: megatron-core\nmodel: {num_layers: 8, hidden_size: 256, "
      "num_attention_heads: 8, seq_length: 128, padded_vocab_size: 1024}\n"
      "parallel: {micro_batch_size: 1, global_batch_size: 16, use_distributed_optimizer: true, "
      "overlap_param_gather: true}\ncluster: {system: dgx-h100, nodes: 1}\n"
      "plan: {tensor_model_parallel_size: [1, 2], pipeline_model_parallel_size: [1], "
      "micro_batch_size: [1], recompute_granularity: [none], sequence_parallel: [true, false], "
      "use_distributed_optimizer: [false, true]}\n");
  const std::vector<std::string> layouts = valid_layouts(path);
  // TP 1: sp false only (x 2 distopt); TP 2: sp true and false (x 2 distopt).
  EXPECT_EQ(layouts, (std::vector<std::string>{
                         "tp1 pp1 dp8 mb1 norecomp", "tp1 pp1 dp8 mb1 norecomp distopt",
                         "tp2 pp1 dp4 mb1 norecomp sp", "tp2 pp1 dp4 mb1 norecomp sp distopt",
                         "tp2 pp1 dp4 mb1 norecomp", "tp2 pp1 dp4 mb1 norecomp distopt"}));
}

// A scenario that offloads its optimizer (ZeRO-3, Twin-Flow `ratio: auto`) plans offloaded
// candidates and the same layouts without offload; the ratio goes where DeepSpeed takes it, so
// no candidate is refused for the ratio.
TEST(PlannerEnumeration, AnOffloadingScenarioPlansOffloadWithItsRatioWhereDeepSpeedTakesIt) {
  ScratchDir dir("plan");
  const std::string path = dir.write(
      "s.yaml", "name: plan_test\nmodel: {num_layers: 4, hidden_size: 256, num_attention_heads: 8, "
                "seq_length: 128, padded_vocab_size: 1024}\nparallel: {micro_batch_size: 1, "
                "global_batch_size: 8}\ndeepspeed: {zero_optimization: {stage: 3, "
                "offload_optimizer: {device: cpu, ratio: auto}}}\n"
                "cluster: {system: dgx-a100-80gb, nodes: 1}\n"
                "plan: {tensor_model_parallel_size: [1], pipeline_model_parallel_size: [1], "
                "micro_batch_size: [1], recompute_granularity: [none]}\n");
  const ValidScenario base = validated(load_scenario(path));
  const PlanConfig plan = load_plan_config(path, base);
  EXPECT_TRUE(plan.allow_offload);
  EXPECT_EQ(plan.zero_stage, (std::vector<std::int64_t>{0, 1, 3}));  // megatron-2021: 0, 1, own
  // ZeRO 0 without offload; 1 and 3 with and without: 5.
  const auto all = enumerate_candidates(plan, base);
  std::vector<std::string> layouts;
  for (const auto& c : all) {
    layouts.push_back(c.layout);
    const CandidateEstimate e = estimate_candidate(path, {}, c, 0.05);
    EXPECT_EQ(e.rejection, PlanRejection::None) << c.layout << ": " << e.reason;
    std::string ratio = "(scenario's)";
    for (const auto& [k, v] : c.overrides)
      if (k == "deepspeed.zero_optimization.offload_optimizer.ratio") ratio = v;
    if (c.layout == "tp1 pp1 dp8 mb1 norecomp zero1 offload") EXPECT_EQ(ratio, "1.0");
    if (c.layout == "tp1 pp1 dp8 mb1 norecomp zero3 offload") EXPECT_EQ(ratio, "(scenario's)");
    if (c.layout.find("offload") == std::string::npos) EXPECT_EQ(ratio, "null") << c.layout;
  }
  EXPECT_EQ(layouts, (std::vector<std::string>{
                         "tp1 pp1 dp8 mb1 norecomp", "tp1 pp1 dp8 mb1 norecomp zero1",
                         "tp1 pp1 dp8 mb1 norecomp zero1 offload", "tp1 pp1 dp8 mb1 norecomp zero3",
                         "tp1 pp1 dp8 mb1 norecomp zero3 offload"}));
}

// Where the embedding and the loss count as pipeline layers (Megatron-Core
// account_for_*_in_pipeline_split), `all` stages divide layers + 2, and the scenario's own
// stage count is a candidate even where it divides neither.
TEST(PlannerEnumeration, PipelineStagesDivideWhatThePipelineSplits) {
  ScratchDir dir("plan");
  const std::string path = dir.write(
      "s.yaml", "name: plan_test\nruntime: megatron-core\nmodel: {num_layers: 6, hidden_size: 256, "
                "num_attention_heads: 8, seq_length: 128, padded_vocab_size: 1024}\n"
                "parallel: {pipeline_model_parallel_size: 4, "
                "account_for_embedding_in_pipeline_split: true, "
                "account_for_loss_in_pipeline_split: true, micro_batch_size: 1, "
                "global_batch_size: 8}\ncluster: {system: dgx-h100, nodes: 1}\n");
  const ValidScenario base = validated(load_scenario(path));
  EXPECT_EQ(load_plan_config(path, base).pipeline_model_parallel_size,
            (std::vector<std::int64_t>{1, 2, 4, 8}));  // divisors of 6 + 2
  const std::string uneven = dir.write(
      "u.yaml", "name: plan_test\nruntime: megatron-core\nmodel: {num_layers: 7, hidden_size: 256, "
                "num_attention_heads: 8, seq_length: 128, padded_vocab_size: 1024}\n"
                "parallel: {pipeline_model_parallel_size: 2, decoder_first_pipeline_num_layers: 3, "
                "micro_batch_size: 1, global_batch_size: 8}\n"
                "cluster: {system: dgx-h100, nodes: 1}\n");
  const ValidScenario ub = validated(load_scenario(uneven));
  EXPECT_EQ(load_plan_config(uneven, ub).pipeline_model_parallel_size,
            (std::vector<std::int64_t>{1, 2, 7}));  // 7's divisors and the scenario's 2
}

// An FSDP scenario names its sharding group (the Megatron-Bridge table's `fsdp` column, its own
// DP): each candidate shards over its own DP x CP, so a layout with another DP is not refused.
TEST(PlannerEnumeration, FsdpCandidatesShardOverTheirOwnDataParallelGroup) {
  ScratchDir dir("plan");
  const std::string path = dir.write(
      "s.yaml", "name: plan_test\nruntime: megatron-core\nmodel: {num_layers: 4, hidden_size: 256, "
                "num_attention_heads: 8, seq_length: 128, padded_vocab_size: 1024}\n"
                "parallel: {use_megatron_fsdp: true, fsdp_sharding_group_size: 8, "
                "micro_batch_size: 1, global_batch_size: 8}\n"
                "cluster: {system: dgx-h100, nodes: 1}\n"
                "plan: {tensor_model_parallel_size: [1, 2], pipeline_model_parallel_size: [1, 2], "
                "micro_batch_size: [1], recompute_granularity: [none]}\n");
  EXPECT_EQ(valid_layouts(path).size(), 4u);
}

// A scenario with block recomputation (recompute_method, recompute_num_layers) plans candidates
// without full recomputation too: those drop the method, which Megatron takes with `full` only.
TEST(PlannerEnumeration, RecomputeMethodGoesWithFullRecomputationOnly) {
  ScratchDir dir("plan");
  const std::string path = dir.write(
      "s.yaml", "name: plan_test\nruntime: megatron-core\nmodel: {num_layers: 4, hidden_size: 256, "
                "num_attention_heads: 8, seq_length: 128, padded_vocab_size: 1024}\n"
                "parallel: {micro_batch_size: 1, global_batch_size: 8, recompute_granularity: full, "
                "recompute_method: block, recompute_num_layers: 1}\n"
                "cluster: {system: dgx-h100, nodes: 1}\n"
                "plan: {tensor_model_parallel_size: [1], pipeline_model_parallel_size: [1, 2], "
                "micro_batch_size: [1], recompute_granularity: [none, full]}\n");
  // The scenario's block method is named in its full candidates' layouts.
  EXPECT_EQ(valid_layouts(path), (std::vector<std::string>{
                                    "tp1 pp1 dp8 mb1 norecomp", "tp1 pp1 dp8 mb1 block1",
                                    "tp1 pp2 dp4 mb1 norecomp", "tp1 pp2 dp4 mb1 block1"}));
  // plan.recompute_num_layers: each layer count a full candidate of its own.
  std::string text = slurp_text(path);
  const std::string plan_end = "recompute_granularity: [none, full]}";
  ASSERT_NE(text.find(plan_end), std::string::npos);
  text.replace(text.find(plan_end), plan_end.size(),
               "recompute_granularity: [none, full], recompute_num_layers: [1, 2]}");
  EXPECT_EQ(valid_layouts(dir.write("b.yaml", text)), (std::vector<std::string>{
                         "tp1 pp1 dp8 mb1 norecomp", "tp1 pp1 dp8 mb1 block1",
                         "tp1 pp1 dp8 mb1 block2", "tp1 pp2 dp4 mb1 norecomp",
                         "tp1 pp2 dp4 mb1 block1", "tp1 pp2 dp4 mb1 block2"}));
  // A scenario whose own method is uniform with units of 2 layers: its full candidates keep
  // them, and say so.
  text = slurp_text(path);
  text.replace(text.find("recompute_method: block, recompute_num_layers: 1"),
               std::string("recompute_method: block, recompute_num_layers: 1").size(),
               "recompute_method: uniform, recompute_num_layers: 2");
  EXPECT_EQ(valid_layouts(dir.write("u.yaml", text)), (std::vector<std::string>{
                                    "tp1 pp1 dp8 mb1 norecomp", "tp1 pp1 dp8 mb1 uniform2",
                                    "tp1 pp2 dp4 mb1 norecomp", "tp1 pp2 dp4 mb1 uniform2"}));
}

TEST(PlannerReducedGraph, MicrobatchesReachTheFullRunsWarmUp) {
  ParallelConfig p;
  p.pipeline_model_parallel_size = 4;
  p.num_microbatches = 64;
  p.pipeline_schedule = PipelineSchedule::OneFOneB;
  // 1F1B: stage 0 holds pp microbatches, again at the forward after its first backward.
  EXPECT_EQ(reduced_microbatches(p), 5);
  p.pipeline_schedule = PipelineSchedule::GPipe;
  EXPECT_EQ(reduced_microbatches(p), 64);  // GPipe holds all of them
  p.pipeline_schedule = PipelineSchedule::Interleaved;
  p.virtual_pipeline_size = 2;
  // Megatron's warm-up on stage 0: (pp - 1) * 2 + (v - 1) * pp = 6 + 4 = 10
  // chunks, one more in flight, one after the first backward: 12 chunks = 6 microbatches of 2
  // chunks, rounded up to a multiple of pp: 8.
  EXPECT_EQ(reduced_microbatches(p), 8);
  p.num_microbatches = 4;
  EXPECT_EQ(reduced_microbatches(p), 4);  // never more than the run has
}

// Stage (a) against simulate: for every valid candidate of a space where some layouts do not
// fit, the memory filter's peak is the simulated peak and its verdict simulate's OOM. Three
// spaces: Megatron-LM's DDP on a 40 GB A100; Megatron-FSDP with pipeline stages, and DeepSpeed
// ZeRO-2/3, whose gradient buckets appear with the first backward (a forward after it must be
// in the reduced graph).
// plan.recompute_modules: each module set a selective candidate of its own, named in its layout
// and written to its scenario; the other granularities are not multiplied. [] recomputes nothing
// with flash attention (the run of none) and is not enumerated; 'moe' on a model without MoE
// layers is an invalid candidate (validation refuses it).
TEST(PlannerEnumeration, RecomputeModuleSetsAreSelectiveCandidatesOfTheirOwn) {
  ScratchDir dir("plan");
  const std::string head =
      "name: plan_test\nruntime: megatron-core\nmodel: {num_layers: 4, hidden_size: 256, "
      "num_attention_heads: 8, seq_length: 128, padded_vocab_size: 1024, "
      "attention_backend: flash, num_experts: 4, moe_ffn_hidden_size: 256, "
      "moe_layer_freq: [0, 1, 1, 1]}\n"
      "parallel: {micro_batch_size: 1, global_batch_size: 8}\n"
      "cluster: {system: dgx-h100, nodes: 1}\n"
      "plan: {tensor_model_parallel_size: [1], pipeline_model_parallel_size: [1], "
      "micro_batch_size: [1], recompute_granularity: [none, selective, full], ";
  const std::string path =
      dir.write("s.yaml", head + "recompute_modules: [[], [moe], [mlp, moe, layernorm], [moe]]}\n");
  EXPECT_EQ(valid_layouts(path),
            (std::vector<std::string>{"tp1 pp1 dp8 mb1 norecomp", "tp1 pp1 dp8 mb1 selective+moe",
                                      "tp1 pp1 dp8 mb1 selective+layernorm+mlp+moe",
                                      "tp1 pp1 dp8 mb1 full"}));
  const ValidScenario base = validated(load_scenario(path));
  const std::vector<PlanCandidate> cands = enumerate_candidates(load_plan_config(path, base), base);
  ASSERT_EQ(cands.size(), 4u);
  auto override_of = [](const PlanCandidate& c, const std::string& key) {
    std::string v = "(unset)";
    for (const auto& [k, value] : c.overrides)
      if (k == key) v = value;
    return v;
  };
  EXPECT_EQ(override_of(cands[1], "parallel.recompute_modules"), "[moe]");
  EXPECT_EQ(override_of(cands[2], "parallel.recompute_modules"), "[layernorm, mlp, moe]");
  EXPECT_EQ(override_of(cands[3], "parallel.recompute_modules"), "null");
  // The candidate's scenario is the one simulated: its modules as set.
  EXPECT_EQ(load_scenario(path, cands[2].overrides).parallel.recompute_modules,
            kRecomputeLayernorm | kRecomputeMlp | kRecomputeMoe);

  // Bad sets name the field and the value.
  const std::pair<std::string, std::string> bad[] = {
      {"recompute_modules: [moe]}", "'moe': expected a list of module lists"},
      {"recompute_modules: [[moe, attention]]}", "'attention': expected core_attn, layernorm"},
      {"recompute_modules: []}", "(a list): expected a list of module lists"},
  };
  for (const auto& [plan, expect] : bad) {
    const std::string p = dir.write("bad.yaml", head + plan + "\n");
    try {
      load_plan_config(p, validated(load_scenario(p)));
      ADD_FAILURE() << plan << " accepted";
    } catch (const InputError& e) {
      EXPECT_NE(std::string(e.what()).find("field 'plan.recompute_modules' = " + expect),
                std::string::npos) << e.what();
    }
  }
  // 'mlp' on a model whose layers are all MoE: an invalid candidate, with validation's reason.
  std::string all_moe = head + "recompute_modules: [[mlp]]}\n";
  all_moe.replace(all_moe.find(", moe_layer_freq: [0, 1, 1, 1]"),
                  std::string(", moe_layer_freq: [0, 1, 1, 1]").size(), "");
  const std::string p = dir.write("all_moe.yaml", all_moe);
  const ValidScenario b = validated(load_scenario(p));
  for (const PlanCandidate& c : enumerate_candidates(load_plan_config(p, b), b)) {
    const CandidateEstimate e = estimate_candidate(p, {}, c, 0.05);
    if (c.layout.find("selective") == std::string::npos) continue;
    EXPECT_EQ(e.rejection, PlanRejection::Invalid) << c.layout;
    EXPECT_NE(e.reason.find("'mlp' recomputes dense layers' MLPs"), std::string::npos) << e.reason;
  }
}

TEST(PlannerMemoryFilter, AgreesWithSimulateOnEveryCandidate) {
  ScratchDir dir("plan");
  const std::string model =
      "{num_layers: 16, hidden_size: 4096, num_attention_heads: 32, seq_length: 2048, "
      "padded_vocab_size: 51200}";
  const std::string spaces[] = {
      plan_yaml(model, "{micro_batch_size: 1, global_batch_size: 8, precision: fp16}",
                "{tensor_model_parallel_size: [1, 2, 4, 8], pipeline_model_parallel_size: [1, 2], "
                "micro_batch_size: [1, 2], recompute_granularity: [none, full], zero_stage: [0]}",
                "dgx-a100-40gb"),
      "name: plan_test\nruntime: megatron-core\nmodel: {num_layers: 16, hidden_size: 4096, "
      "num_attention_heads: 32, seq_length: 4096, padded_vocab_size: 51200, "
      "attention_backend: flash}\nparallel: {use_megatron_fsdp: true, micro_batch_size: 1, "
      "global_batch_size: 32, precision: bf16}\ncluster: {system: dgx-h100, nodes: 1}\n"
      "plan: {tensor_model_parallel_size: [1, 2], pipeline_model_parallel_size: [1, 2, 4], "
      "micro_batch_size: [2, 4], recompute_granularity: [none]}\n",
      plan_yaml(model, "{micro_batch_size: 1, global_batch_size: 32, precision: fp16}",
                "{tensor_model_parallel_size: [1, 2], pipeline_model_parallel_size: [1], "
                "micro_batch_size: [1, 4, 8], recompute_granularity: [none], "
                "zero_stage: [2, 3]}",
                "dgx-a100-40gb"),
      // MoE with dense layers, whole-module recomputation sets.
      "name: plan_test\nruntime: megatron-core\nmodel: {num_layers: 8, hidden_size: 2048, "
      "num_attention_heads: 16, seq_length: 4096, padded_vocab_size: 51200, "
      "attention_backend: flash, swiglu: true, num_experts: 16, moe_router_topk: 4, "
      "moe_ffn_hidden_size: 1024, moe_grouped_gemm: true, moe_layer_freq: \"[0]*2+[1]*6\"}\n"
      "parallel: {use_distributed_optimizer: true, expert_model_parallel_size: 8, "
      "micro_batch_size: 1, global_batch_size: 64, precision: bf16}\n"
      "cluster: {system: dgx-h100, nodes: 1}\n"
      "plan: {tensor_model_parallel_size: [1], pipeline_model_parallel_size: [1], "
      "micro_batch_size: [2, 8], recompute_granularity: [none, selective], "
      "recompute_modules: [[moe_act, layernorm], [moe], [mlp, moe]]}\n"};
  for (std::size_t i = 0; i < std::size(spaces); ++i) {
    const std::string path = dir.write("s" + std::to_string(i) + ".yaml", spaces[i]);
    const ValidScenario base = validated(load_scenario(path));
    const PlanConfig plan = load_plan_config(path, base);
    int valid = 0, oom = 0;
    for (const PlanCandidate& c : enumerate_candidates(plan, base)) {
      const CandidateEstimate e = estimate_candidate(path, {}, c, 0.0);
      if (e.rejection == PlanRejection::Invalid) continue;
      ++valid;
      const Summary s = simulated(path, c.overrides);
      EXPECT_EQ(e.peak_memory_bytes, s.peak_memory_bytes) << "space " << i << ": " << c.layout;
      EXPECT_EQ(e.rejection == PlanRejection::OutOfMemory, s.oom()) << c.layout;
      oom += s.oom() ? 1 : 0;
    }
    EXPECT_GE(valid, 6) << "space " << i;
    if (i == 0) {
      EXPECT_GT(oom, 0);      // the space has layouts that do not fit ...
      EXPECT_LT(oom, valid);  // ... and layouts that do
    }
  }
}

// The memory filter counts the CUDA graphs' static buffers (memory category cuda_graphs,
// models/memory/cuda_graph_memory.h) as simulate does: with graphs of the attention on a
// pipeline of 2 stages the estimate's peak is the simulated peak, and it exceeds the same
// run's without graphs by the static bytes of the peak rank's stage, which live from the start.
// Hand count (that header): per layer one graphed callable; stage 0 of 1F1B holds 2
// microbatches in flight, 4 layers: 4 x 2 slots x 2 hidden-state tensors of s b h x 2 bytes
// (2048 x 1 x 2048 x 2 = 8 MiB): 128 MiB; stage 1 holds 1: 64 MiB.
TEST(PlannerMemoryFilter, CountsTheCudaGraphsStaticBuffers) {
  ScratchDir dir("plan");
  const std::string scenario = [](const std::string& graphs) {
    return "name: plan_test\nruntime: megatron-core\nmodel: {num_layers: 8, hidden_size: 2048, "
           "num_attention_heads: 16, seq_length: 2048, padded_vocab_size: 32000, "
           "attention_backend: flash}\nparallel: {pipeline_model_parallel_size: 2, "
           "micro_batch_size: 1, global_batch_size: 16, precision: bf16" +
           graphs + "}\ncluster: {system: dgx-h100, nodes: 1, gpus_per_node: 2}\n";
  }(", cuda_graph_impl: transformer_engine, cuda_graph_scope: [attn]");
  const std::string with = dir.write("graphs.yaml", scenario);
  const CandidateEstimate e = estimate_as_written(with);
  ASSERT_EQ(e.rejection, PlanRejection::None) << e.reason;
  const Summary s = simulated(with);
  EXPECT_EQ(e.peak_memory_bytes, s.peak_memory_bytes);
  const std::int64_t graphs = s.peak_memory_by_category[int(MemCategory::CudaGraphs)];
  const std::int64_t mib = 1 << 20;
  EXPECT_TRUE(graphs == 128 * mib || graphs == 64 * mib) << graphs;
  const std::string without =
      dir.write("eager.yaml", scenario.substr(0, scenario.find(", cuda_graph_impl")) +
                                  "}\ncluster: {system: dgx-h100, nodes: 1, gpus_per_node: 2}\n");
  const CandidateEstimate eager = estimate_as_written(without);
  ASSERT_EQ(eager.rejection, PlanRejection::None) << eager.reason;
  EXPECT_GE(e.peak_memory_bytes - eager.peak_memory_bytes, 64 * mib);
  EXPECT_LE(e.peak_memory_bytes - eager.peak_memory_bytes, 128 * mib);
}

// Stage (b) costs a data-parallel all-reduce as the simulator runs it: NCCL's algorithm and
// protocol for its size and group (models/perf/nccl_model.h). 67 buckets of 200 KB over 128 ranks on
// 16 nodes, after the backward: by the plain ring formula each would pay 2 x 127 network steps
// of latency (about 3.6 ms; 0.24 s in all), far from what NCCL picks (a tree with LL) and the
// simulation shows.
TEST(PlannerEstimate, SmallBucketsAcrossNodesCostWhatNcclChooses) {
  ScratchDir dir("plan");
  // The tiny model's kernels last less than their issue: with the host timeline on the
  // simulation is host-bound, which the planner's hardware estimate does not model.
  const std::string path = dir.write(
      "s.yaml",
      "name: plan_test\nhost_model: off\nmodel: {num_layers: 8, hidden_size: 256, num_attention_heads: 8, "
      "seq_length: 128, padded_vocab_size: 1024}\nparallel: {micro_batch_size: 1, "
      "global_batch_size: 128, ddp_bucket_size: 100000}\ncluster: {system: dgx-a100-80gb, "
      "nodes: 16}\n");
  const CandidateEstimate e = estimate_as_written(path);
  ASSERT_EQ(e.rejection, PlanRejection::None) << e.reason;
  const double T = simulated(path).iteration_time_s;
  EXPECT_NEAR(e.estimate_iteration_s, T, 0.03 * T);
  RunRequest req;
  req.scenario_path = path;
  const CostModel cm = prepare_platform(req).cost_model();
  const double ring_formula_tail =
      67 * cm.collective_latency_s(OpKind::AllReduce, 128, /*intra_node=*/false);
  EXPECT_GT(ring_formula_tail, 0.5 * T);  // the case tells the two models apart
}

// Stage (b) costs an expert-parallel all-to-all across nodes as the simulator moves it: each
// rank's (n - k)/n of the buffer leaves on its own NIC (50 GB/s on H100), not over the node's
// eight NICs together; the MoE layers of this model are communication-bound, so the iteration
// estimated the other way comes out about twice as fast as simulated.
TEST(PlannerEstimate, AllToAllAcrossNodesCostsTheRanksOwnNic) {
  ScratchDir dir("plan");
  const std::string path = dir.write(
      "s.yaml",
      "name: plan_test\nruntime: megatron-core\nmodel: {num_layers: 4, hidden_size: 2048, "
      "num_attention_heads: 16, seq_length: 4096, padded_vocab_size: 32768, "
      "attention_backend: flash, num_experts: 64, moe_router_topk: 8, moe_ffn_hidden_size: 768, "
      "moe_grouped_gemm: true, moe_token_dispatcher_type: alltoall}\n"
      "parallel: {expert_model_parallel_size: 32, micro_batch_size: 1, global_batch_size: 64, "
      "precision: bf16, use_distributed_optimizer: true}\n"
      "cluster: {system: dgx-h100, nodes: 4}\n");
  // Within 5%; the all-to-all matters here (over 30% of the iteration exposed).
  expect_estimate_near_simulated(path, 0.05, 0.3);
}

// Stage (b) with DeepSpeed ZeRO-3 across nodes: every microbatch gathers each submodule in
// both passes and reduce-scatters its gradients, on the data-parallel stream beside the
// compute; a gather prefetched one block ahead delays the block after it when it outlasts the
// block it overlaps. Counting the reduced graph's gathers once per iteration (the builder files
// them under no microbatch) estimated this run 17% too fast (the shipped ZeRO-3 scenarios'
// candidates 30-80%); counting them per microbatch as their stream runs them, 5%.
TEST(PlannerEstimate, ZeroThreeGathersCountEveryMicrobatchAsTheirStreamRunsThem) {
  ScratchDir dir("plan");
  const std::string path = dir.write(
      "s.yaml",
      "name: plan_test\nmodel: {num_layers: 8, hidden_size: 4096, num_attention_heads: 32, "
      "seq_length: 2048, padded_vocab_size: 51200}\nparallel: {micro_batch_size: 1, "
      "global_batch_size: 1024, precision: fp16}\ndeepspeed: {zero_optimization: {stage: 3}}\n"
      "cluster: {system: dgx-a100-80gb, nodes: 8}\n");
  // Within 7%; the gathers matter here (over 10% of the iteration exposed).
  expect_estimate_near_simulated(path, 0.07, 0.1);
}

TEST(PlannerRanking, TokensPerSecondThenMemoryThenEnumerationOrder) {
  auto result = [](std::size_t index, double tps, std::int64_t peak) {
    CandidateResult r;
    r.candidate.index = index;
    r.simulated = true;
    r.tokens_per_s = tps;
    r.peak_memory_bytes = peak;
    return r;
  };
  std::vector<CandidateResult> v = {result(0, 100, 5), result(1, 200, 9), result(2, 200, 7),
                                    result(3, 200, 7), result(4, 50, 1)};
  v[4].oom = true;  // an OOM run ranks after every run that fits
  rank_results(v);
  std::vector<std::size_t> order;
  for (const auto& r : v) order.push_back(r.candidate.index);
  EXPECT_EQ(order, (std::vector<std::size_t>{2, 3, 1, 0, 4}));
}

// GB200 NVL72 (a 72-GPU NVLink domain across trays of 4): tensor parallelism is offered up to
// the domain, and a candidate whose TP x CP group would leave the domain is no candidate
// (Megatron's TP x CP blocks stay inside it; collective_flows.h nvlink_domain_ranks).
TEST(PlannerEnumeration, NvlinkDomainAcrossTraysBoundsTheGroups) {
  ScratchDir dir("plan");
  const std::string model =
      "{num_layers: 8, hidden_size: 4096, num_attention_heads: 64, seq_length: 128, "
      "padded_vocab_size: 1024}";
  const std::string path = dir.write(
      "s.yaml", plan_yaml(model, "{micro_batch_size: 1, global_batch_size: 16}", "{}", "gb200-nvl72"));
  const ValidScenario base = validated(load_scenario(path));
  EXPECT_EQ(load_plan_config(path, base).tensor_model_parallel_size,
            (std::vector<std::int64_t>{1, 2, 4, 8, 16, 32, 64}));
  const std::string grid = dir.write(
      "g.yaml",
      plan_yaml(model, "{micro_batch_size: 1, global_batch_size: 16}",
                "{tensor_model_parallel_size: [8, 64], context_parallel_size: [1, 2], "
                "pipeline_model_parallel_size: [1], micro_batch_size: [1], "
                "recompute_granularity: [none], zero_stage: [0]}",
                "gb200-nvl72"));
  const ValidScenario gbase = validated(load_scenario(grid));
  // 2 TP x 2 CP = 4 grid points; TP 64 x CP 2 = 128 > 72 leaves the domain: 3 candidates.
  const auto all = enumerate_candidates(load_plan_config(grid, gbase), gbase);
  ASSERT_EQ(all.size(), 3u);
  for (const auto& c : all) EXPECT_EQ(c.layout.find("tp64 pp1 cp2"), std::string::npos) << c.layout;
}

}  // namespace
}  // namespace trainsim
