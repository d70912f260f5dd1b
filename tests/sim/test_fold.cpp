// Folded vs unfolded simulation of real scenarios (docs/architecture.md "The schedule graph": a folded
// mode that simulates one representative per TP group and DP replica set "must agree with the
// full mode on configurations small enough to run both").
//
// For each scenario both graphs are built (BuildOptions::fold false / true), simulated, and
// summarized (make_summary over build_memory_timeline). Checked:
//  - iteration time within 1% (folding keeps every flow of a representative, including those
//    into and out of non-simulated peers; the difference comes only from link sharing with
//    flows of ranks that are no longer simulated);
//  - peak GPU memory exactly: the overall peak and every world rank's peak (a folded rank
//    reports its representative's), since memory effects and their order do not depend on
//    the other ranks;
//  - model FLOPs identical and hardware FLOPs identical (fold_factor scaling);
//  - the folded graph is smaller by the fold factor (tasks of the representatives only).
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "models/hardware/calibration.h"
#include "models/perf/cost_model.h"
#include "models/builder/graph_builder.h"
#include "models/hardware/hardware.h"
#include "models/outputs/memory_timeline.h"
#include "models/input/scenario.h"
#include "models/outputs/summary.h"
#include "sim/executor.h"
#include "tests/support/h100_nvls_scenario.h"
#include "tests/support/paths.h"

using trainsim::test_support::source_path;

namespace trainsim {
namespace {

using nlohmann::json;
using Overrides = std::vector<std::pair<std::string, std::string>>;

struct Run {
  std::size_t tasks = 0;
  std::int64_t fold_factor = 0;
  json summary;
  double wall_s = 0;
};

Run run(const Scenario& sc, bool fold) {
  const auto start = std::chrono::steady_clock::now();
  const SystemSpec& system = find_system(sc.cluster.system);
  const CalibrationProfile profile = default_calibration(system.gpu.name);
  const CostModel cost(system, profile);
  BuildOptions build;
  build.fold = fold;
  build.calibration = &profile;
  const ScheduleGraph graph = build_schedule_graph(validated(sc), system, build);
  const ExecutionRecord record = sim::simulate(graph, sc, system, cost);
  const MemoryTimeline memory =
      build_memory_timeline(graph, record, sc.cluster.gpus_per_node);
  Run r;
  r.tasks = graph.num_tasks();
  r.fold_factor = graph.fold_factor;
  r.summary = summary_to_json(make_summary(graph, record, sc, system, memory, SummaryOptions{}));
  r.wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return r;
}

void expect_fold_agrees(const Scenario& sc) {
  const auto& p = sc.parallel;
  const Run full = run(sc, false), folded = run(sc, true);
  const std::int64_t factor = p.tensor_model_parallel_size * p.data_parallel_size;
  ASSERT_GT(factor, 1) << "nothing to fold in " << sc.name;
  EXPECT_EQ(full.fold_factor, 1);
  EXPECT_EQ(folded.fold_factor, factor);
  EXPECT_FALSE(full.summary.at("folded").get<bool>());
  EXPECT_TRUE(folded.summary.at("folded").get<bool>());
  EXPECT_EQ(full.summary.at("simulated_ranks").get<std::int64_t>(), sc.world_size());
  EXPECT_EQ(folded.summary.at("simulated_ranks").get<std::int64_t>(),
            p.pipeline_model_parallel_size);
  // Ranks are identical within a TP group / DP replica set: the unfolded graph has exactly
  // fold_factor times the folded one's tasks.
  EXPECT_EQ(full.tasks, folded.tasks * std::size_t(factor));
  EXPECT_EQ(full.summary.at("tasks_not_run").get<std::int64_t>(), 0);
  EXPECT_EQ(folded.summary.at("tasks_not_run").get<std::int64_t>(), 0);

  const double t_full = full.summary.at("iteration_time_s").get<double>();
  const double t_fold = folded.summary.at("iteration_time_s").get<double>();
  ASSERT_GT(t_full, 0);
  EXPECT_NEAR(t_fold, t_full, 0.01 * t_full) << sc.name;

  EXPECT_EQ(folded.summary.at("peak_memory_bytes").get<std::int64_t>(),
            full.summary.at("peak_memory_bytes").get<std::int64_t>());
  const json& pr_full = full.summary.at("per_rank");
  const json& pr_fold = folded.summary.at("per_rank");
  ASSERT_EQ(pr_full.size(), std::size_t(sc.world_size()));
  ASSERT_EQ(pr_fold.size(), std::size_t(sc.world_size()));
  for (std::size_t r = 0; r < pr_full.size(); ++r) {
    ASSERT_EQ(pr_full[r].at("rank").get<std::size_t>(), r);
    ASSERT_EQ(pr_fold[r].at("rank").get<std::size_t>(), r);
    EXPECT_EQ(pr_fold[r].at("peak_memory_bytes").get<std::int64_t>(),
              pr_full[r].at("peak_memory_bytes").get<std::int64_t>())
        << "rank " << r;
  }
  EXPECT_EQ(folded.summary.at("host_peak_memory_bytes").get<std::int64_t>(),
            full.summary.at("host_peak_memory_bytes").get<std::int64_t>());
  EXPECT_EQ(folded.summary.at("model_flops_per_iteration").get<double>(),
            full.summary.at("model_flops_per_iteration").get<double>());
  EXPECT_NEAR(folded.summary.at("hardware_flops_per_iteration").get<double>(),
              full.summary.at("hardware_flops_per_iteration").get<double>(),
              1e-12 * full.summary.at("hardware_flops_per_iteration").get<double>());
  std::printf("[fold] %-28s ranks %3lld  tasks %7zu / %6zu  iteration %.6f s / %.6f s "
              "(rel %+.1e)  peak %lld B  wall %.2f s / %.2f s\n",
              sc.name.c_str(), static_cast<long long>(sc.world_size()), full.tasks, folded.tasks,
              t_full, t_fold, (t_fold - t_full) / t_full,
              static_cast<long long>(full.summary.at("peak_memory_bytes").get<std::int64_t>()),
              full.wall_s, folded.wall_s);
}


TEST(Fold, TinyTp2Pp2Dp2) {
  const Scenario sc = load_scenario(source_path("scenarios/small/gpt-tiny_tp2_pp2_dp2.yaml"));
  ASSERT_EQ(sc.world_size(), 8);
  expect_fold_agrees(sc);
}

// Table 1 row 1 (GPT 1.7B, TP 1, PP 1, DP over nodes, PyTorch DDP buckets overlapped with the
// backward), shrunk to 4 layers, DP 16 over 2 nodes, 2 microbatches: the DP all-reduce rings
// cross the IB fabric.
TEST(Fold, Tp1Dp16TwoNodes) {
  const Scenario sc = load_scenario(source_path("scenarios/gpt-1.7b_tp1_pp1_dp32.yaml"),
                                    Overrides{{"model.num_layers", "4"},
                                              {"cluster.nodes", "2"},
                                              {"parallel.micro_batch_size", "2"},
                                              {"parallel.global_batch_size", "64"}});
  ASSERT_EQ(sc.parallel.data_parallel_size, 16);
  ASSERT_EQ(sc.parallel.tensor_model_parallel_size, 1);
  ASSERT_EQ(sc.parallel.num_microbatches, 2);
  ASSERT_TRUE(sc.parallel.overlap_grad_reduce);
  expect_fold_agrees(sc);
}

// Table 1 row 6's shape (GPT 76.1B: TP 8 x PP 4), interleaved with 2 model chunks per stage,
// DP 2 (8 nodes; each DP ring crosses the IB fabric), 32 layers, 16 microbatches, full
// recomputation as in Table 1.
TEST(Fold, Tp8Pp4Dp2Interleaved) {
  const Scenario sc =
      load_scenario(source_path("scenarios/gpt-76.1b_tp8_pp4_dp32.yaml"),
                    Overrides{{"model.num_layers", "32"},
                              {"parallel.num_layers_per_virtual_pipeline_stage", "4"},
                              {"cluster.nodes", "8"},
                              {"parallel.micro_batch_size", "1"},
                              {"parallel.global_batch_size", "32"}});
  ASSERT_EQ(sc.parallel.tensor_model_parallel_size, 8);
  ASSERT_EQ(sc.parallel.pipeline_model_parallel_size, 4);
  ASSERT_EQ(sc.parallel.data_parallel_size, 2);
  ASSERT_EQ(sc.parallel.virtual_pipeline_size, 2);
  ASSERT_EQ(sc.parallel.num_microbatches, 16);
  ASSERT_EQ(sc.parallel.pipeline_schedule, PipelineSchedule::Interleaved);
  expect_fold_agrees(sc);
}

// Table 1 row 2's shape (GPT 3.6B: TP 2, PP 1), DP 8 over 2 nodes: 4 members of each DP group
// per node, so the all-reduce is the hierarchical ring (NVLink inside the node, one rail per
// member across the fabric), with PyTorch DDP-style overlap as in the scenario file.
TEST(Fold, Tp2Dp8HierarchicalRing) {
  const Scenario sc = load_scenario(source_path("scenarios/gpt-3.6b_tp2_pp1_dp32.yaml"),
                                    Overrides{{"model.num_layers", "4"},
                                              {"cluster.nodes", "2"},
                                              {"parallel.micro_batch_size", "2"},
                                              {"parallel.global_batch_size", "32"}});
  ASSERT_EQ(sc.parallel.tensor_model_parallel_size, 2);
  ASSERT_EQ(sc.parallel.data_parallel_size, 8);
  expect_fold_agrees(sc);
}

// A collective whose NCCL bus bandwidth is below its links' (here NVLS: NVLink SHARP, 476 GB/s
// bus but 9/8 S on each NVLink; ring LL under Hopper's cap) must take as long folded as
// unfolded: SimGrid drops the rate bound of host-to-host flows, which the folded
// representative uses toward its non-simulated peers, so the executor paces them itself.
// The shape of tests/support/h100_nvls_scenario.h.
TEST(Fold, H100Tp8NvlsAllReduces) {
  const Scenario sc = load_scenario(source_path(test_support::kH100Tp8NvlsFile),
                                    test_support::h100_tp8_nvls_overrides());
  ASSERT_EQ(sc.parallel.tensor_model_parallel_size, 8);
  ASSERT_EQ(sc.parallel.data_parallel_size, 2);
  const SystemSpec& system = find_system(sc.cluster.system);
  const CostModel cost(system, default_calibration(system.gpu.name));
  const double activations = 8192.0 * 8192 * 2;  // s x b x h bf16
  ASSERT_EQ(cost.nccl_collective(OpKind::AllReduce, activations, 8, 1).algo, NcclAlgo::Nvls);
  expect_fold_agrees(sc);
}

}  // namespace
}  // namespace trainsim
