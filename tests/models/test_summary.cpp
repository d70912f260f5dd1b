// Tests of models/summary, models/memory_timeline and the activity rules (models/activity) on
// hand-built graphs and records (tests/models/output_test_graph.h), every expected number
// worked out by hand from the timeline drawn there.
#include <gtest/gtest.h>

#include <cmath>
#include <sstream>
#include <string>

#include "models/outputs/activity.h"
#include "models/outputs/memory_timeline.h"
#include "models/outputs/summary.h"
#include "output_test_graph.h"

namespace trainsim {
namespace {

using nlohmann::json;
using testing::two_stage_run;
using testing::two_stage_scenario;

constexpr int kParams = static_cast<int>(MemCategory::Parameters);
constexpr int kActs = static_cast<int>(MemCategory::Activations);
constexpr int kComm = static_cast<int>(MemCategory::CommBuffers);
constexpr int kOffload = static_cast<int>(MemCategory::OffloadBuffers);
constexpr int kOptim = static_cast<int>(MemCategory::OptimizerStates);

struct Fixture {
  testing::HandBuilt run = two_stage_run();
  Scenario scenario = two_stage_scenario();
  SystemSpec system = find_system("dgx-a100-80gb");
  MemoryTimeline memory() const {
    return build_memory_timeline(run.graph, run.record, 2);
  }
  Summary typed() const {
    SummaryOptions o;
    o.calibration_source = "test profile";
    o.trace_ranks = "0-1";
    o.trace_ranks_note = "test";
    return make_summary(run.graph, run.record, scenario, system, memory(), o);
  }
  json summary() const { return summary_to_json(typed()); }
};

TEST(ExecutionRecord, IterationTimeSkipsTasksThatDidNotRun) {
  ExecutionRecord r;
  r.start_s = {1.0, 2.0, std::nan("")};
  r.end_s = {3.0, 7.5, std::nan("")};
  EXPECT_DOUBLE_EQ(r.iteration_time_s(), 6.5);
  EXPECT_DOUBLE_EQ(ExecutionRecord{}.iteration_time_s(), 0.0);
}

TEST(Activity, ActiveStartWaitsForAllParticipants) {
  Fixture f;
  const auto a = active_start_s(f.run.graph, f.run.record);
  // rank 0: T1 send starts 2, its recv U0 (task 7) at 0 -> 2; T3 recv at 3, send U3 at 5 -> 5;
  // T6 dp all-reduce at 9, U6 at 9.5 -> 9.5; a compute task keeps its own start.
  EXPECT_DOUBLE_EQ(a[1], 2.0);
  EXPECT_DOUBLE_EQ(a[7], 2.0);
  EXPECT_DOUBLE_EQ(a[3], 5.0);
  EXPECT_DOUBLE_EQ(a[6], 9.5);
  EXPECT_DOUBLE_EQ(a[13], 9.5);
  EXPECT_DOUBLE_EQ(a[4], 6.0);
}

TEST(Activity, ExposedTimePerRankByPriority) {
  Fixture f;
  const auto& g = f.run.graph;
  const auto a = active_start_s(g, f.run.record);
  const ExposedTime r0 = exposed_time(g, f.run.record, a, g.tasks_of_rank(0), 0, 11);
  // compute [0,2]+[6,8]; tp [2,2.5] (its [1,2] hides under compute); pp [2.5,3]+[5,6];
  // optimizer [8,9]; dp [9.5,10]; idle [3,5]+[9,9.5]+[10,11].
  EXPECT_DOUBLE_EQ(r0.by_activity_s[int(Activity::Compute)], 4.0);
  EXPECT_DOUBLE_EQ(r0.by_activity_s[int(Activity::TpComm)], 0.5);
  EXPECT_DOUBLE_EQ(r0.by_activity_s[int(Activity::PpComm)], 1.5);
  EXPECT_DOUBLE_EQ(r0.by_activity_s[int(Activity::Optimizer)], 1.0);
  EXPECT_DOUBLE_EQ(r0.by_activity_s[int(Activity::DpComm)], 0.5);
  EXPECT_DOUBLE_EQ(r0.by_activity_s[int(Activity::Offload)], 0.0);
  EXPECT_DOUBLE_EQ(r0.idle_s, 3.5);
  const ExposedTime r1 = exposed_time(g, f.run.record, a, g.tasks_of_rank(1), 0, 11);
  // idle [0,2]; pp [2,3] (the send [5,6] hides under the d2h copy); compute [3,5];
  // offload [5,7]+[10,11]; optimizer (cpu adam) [7,9.5]; dp [9.5,10].
  EXPECT_DOUBLE_EQ(r1.idle_s, 2.0);
  EXPECT_DOUBLE_EQ(r1.by_activity_s[int(Activity::PpComm)], 1.0);
  EXPECT_DOUBLE_EQ(r1.by_activity_s[int(Activity::Compute)], 2.0);
  EXPECT_DOUBLE_EQ(r1.by_activity_s[int(Activity::Offload)], 3.0);
  EXPECT_DOUBLE_EQ(r1.by_activity_s[int(Activity::Optimizer)], 2.5);
  EXPECT_DOUBLE_EQ(r1.by_activity_s[int(Activity::DpComm)], 0.5);
}

TEST(MemoryTimeline, PeaksFollowTheSameInstantOrderingRule) {
  Fixture f;
  const MemoryTimeline m = f.memory();
  ASSERT_EQ(m.gpu.size(), 2u);
  EXPECT_EQ(m.gpu[0].peak_bytes, 1600);  // 1000 + 500 + 100 activations at t = 0
  EXPECT_DOUBLE_EQ(m.gpu[0].peak_time_s, 0.0);
  // Rank 1 at t = 4.5: U1's release (end) comes before U2's allocation (start): 2250, not
  // 2550. At t = 5, after U2's end: U4's +400 allocation before U3's -50 release (both at a
  // start): 2000 + 50 + 400 = 2450 (a release-first order would give 2400, peak 2350 at 3).
  EXPECT_EQ(m.gpu[1].peak_bytes, 2450);
  EXPECT_DOUBLE_EQ(m.gpu[1].peak_time_s, 5.0);
  EXPECT_EQ(m.gpu[1].peak_by_category[kParams], 2000);
  EXPECT_EQ(m.gpu[1].peak_by_category[kComm], 50);
  EXPECT_EQ(m.gpu[1].peak_by_category[kOffload], 400);
  EXPECT_EQ(m.gpu[1].peak_by_category[kActs], 0);
  EXPECT_EQ(total_bytes(m.gpu[1].final_bytes), 2000);
  // Host memory of the node (both GPUs): 10000 + 400 offloaded at t = 7.
  ASSERT_EQ(m.num_nodes(), 1);
  EXPECT_EQ(m.host(0).peak_bytes, 10400);
  EXPECT_DOUBLE_EQ(m.host(0).peak_time_s, 7.0);
  EXPECT_EQ(m.host(0).peak_by_category[kOptim], 10000);
  // Steps: the initial state, then one per distinct time (3, 4.5, 5, 7 for rank 1).
  std::vector<std::pair<double, std::int64_t>> steps;
  m.gpu[1].for_each_step(
      m.start_s, [&](double t, const MemVector& v) { steps.emplace_back(t, total_bytes(v)); });
  const std::vector<std::pair<double, std::int64_t>> want = {
      {0, 2050}, {3, 2350}, {4.5, 2250}, {5, 2400}, {7, 2000}};
  EXPECT_EQ(steps, want);
}

TEST(MemoryTimeline, ZeroDurationTaskShowsItsTransientAllocation) {
  ScheduleGraph g;
  OpDesc o;
  const auto op = g.add_op(o);
  Task t;
  t.op = op;
  const TaskId a = g.add_task(t);
  g.add_memory_effect(a, {100, MemCategory::CommBuffers, false, false});
  g.add_memory_effect(a, {-100, MemCategory::CommBuffers, true, false});
  const TaskId b = g.add_task(t);  // ends at 1 (duration 1): its release is class 1
  g.add_memory_effect(b, {-10, MemCategory::Activations, true, false});
  g.world_size = 1;
  MemVector init{};
  init[kActs] = 10;
  g.initial_gpu_memory = {init};
  g.finalize();
  ExecutionRecord r;
  r.start_s = {1, 0};
  r.end_s = {1, 1};
  const MemoryTimeline m = build_memory_timeline(g, r, 1);
  // At t = 1: b's release (end of a task with duration), then a's +100 (start), then a's
  // -100 (end of a zero-length task): peak 100 at t = 1.
  EXPECT_EQ(m.gpu[0].peak_bytes, 100);
  EXPECT_DOUBLE_EQ(m.gpu[0].peak_time_s, 1.0);
}

TEST(Summary, IterationThroughputAndFlops) {
  Fixture f;
  const json s = f.summary();
  const double it = 11.0;
  EXPECT_DOUBLE_EQ(s.at("iteration_time_s").get<double>(), it);
  EXPECT_DOUBLE_EQ(s.at("tokens_per_s").get<double>(), 2.0 * 32 / it);
  // 72 B s l h^2 (1 + s/6h + V/12lh), B = 2, s = 32, l = 2, h = 64, V = 128 (SC'21 / Korthikanti).
  const double model = 72.0 * 2 * 32 * 2 * 64 * 64 * (1 + 32.0 / (6 * 64) + 128.0 / (12 * 2 * 64));
  EXPECT_DOUBLE_EQ(s.at("model_flops_per_iteration").get<double>(), model);
  EXPECT_DOUBLE_EQ(s.at("model_tflops_per_gpu").get<double>(), model / it / 2 / 1e12);
  EXPECT_DOUBLE_EQ(s.at("hardware_flops_per_iteration").get<double>(), 42.0);
  EXPECT_DOUBLE_EQ(s.at("hardware_tflops_per_gpu").get<double>(), 42.0 / it / 2 / 1e12);
  EXPECT_DOUBLE_EQ(s.at("mfu").get<double>(), model / it / 2 / 312e12);
  EXPECT_EQ(s.at("world_size"), 2);
  EXPECT_EQ(s.at("tasks"), 15);
  EXPECT_EQ(s.at("tasks_not_run"), 0);
  EXPECT_EQ(s.at("folded"), false);
  EXPECT_EQ(s.at("executor"), "hand-made");
  EXPECT_EQ(s.at("calibration"), "test profile");
  EXPECT_FALSE(s.contains("wall_time_s"));  // determinism: no wall-clock figure
}

TEST(Summary, BreakdownIsTheAverageOfRanksAndSumsToTheIteration) {
  Fixture f;
  const json s = f.summary();
  const json& b = s.at("breakdown_s");
  EXPECT_DOUBLE_EQ(b.at("compute").get<double>(), (4.0 + 2.0) / 2);
  EXPECT_DOUBLE_EQ(b.at("tp_comm").get<double>(), 0.5 / 2);
  EXPECT_DOUBLE_EQ(b.at("pp_comm").get<double>(), (1.5 + 1.0) / 2);
  EXPECT_DOUBLE_EQ(b.at("dp_comm").get<double>(), 0.5);
  EXPECT_DOUBLE_EQ(b.at("optimizer").get<double>(), (1.0 + 2.5) / 2);
  EXPECT_DOUBLE_EQ(b.at("offload").get<double>(), 3.0 / 2);
  EXPECT_DOUBLE_EQ(b.at("pipeline_bubble").get<double>(), (3.5 + 2.0) / 2);
  double sum = 0;
  for (const auto& [k, v] : b.items()) sum += v.get<double>();
  EXPECT_NEAR(sum, 11.0, 1e-12);
  EXPECT_EQ(b.size(), 7u);
  EXPECT_TRUE(s.at("breakdown_note").get<std::string>().find("average") != std::string::npos);
  // Slowest rank: rank 1 finishes at 11 (its h2d copy), rank 0 at 10.
  const json& sl = s.at("breakdown_slowest_rank");
  EXPECT_EQ(sl.at("rank"), 1);
  EXPECT_DOUBLE_EQ(sl.at("finish_s").get<double>(), 11.0);
  EXPECT_DOUBLE_EQ(sl.at("breakdown_s").at("offload").get<double>(), 3.0);
  EXPECT_DOUBLE_EQ(sl.at("breakdown_s").at("pipeline_bubble").get<double>(), 2.0);
}

TEST(Summary, PerRankAndMemoryWithoutOom) {
  Fixture f;
  const json s = f.summary();
  EXPECT_EQ(s.at("peak_memory_bytes"), 2450);
  EXPECT_EQ(s.at("peak_memory_rank"), 1);
  EXPECT_EQ(s.at("peak_memory_by_category").at("offload_buffers"), 400);
  EXPECT_EQ(s.at("oom"), false);
  EXPECT_FALSE(s.contains("oom_ranks"));
  EXPECT_FALSE(s.contains("measured_peak_allocated_bytes"));  // a simulated record
  EXPECT_EQ(s.at("host_peak_memory_bytes"), 10400);
  ASSERT_EQ(s.at("per_rank").size(), 2u);
  const json& r0 = s.at("per_rank").at(0);
  EXPECT_EQ(r0.at("rank"), 0);
  EXPECT_EQ(r0.at("peak_memory_bytes"), 1600);
  EXPECT_DOUBLE_EQ(r0.at("finish_s").get<double>(), 10.0);
  EXPECT_DOUBLE_EQ(r0.at("exposed_comm_s").get<double>(), 0.5 + 1.5 + 0.5);
  EXPECT_DOUBLE_EQ(r0.at("pipeline_bubble_s").get<double>(), 3.5);
  EXPECT_FALSE(r0.contains("represented_by"));
}

TEST(Summary, OomNamesRanksExcessAndDominantCategory) {
  Fixture f;
  f.system.gpu.hbm_bytes = 2000;  // rank 1 peaks at 2450, rank 0 at 1600
  const json s = f.summary();
  EXPECT_EQ(s.at("oom"), true);
  EXPECT_EQ(s.at("oom_ranks"), json::array({1}));
  EXPECT_EQ(s.at("oom_ranks_total"), 1);
  EXPECT_EQ(s.at("oom_capacity_bytes"), 2000);
  EXPECT_EQ(s.at("oom_peak_bytes"), 2450);
  EXPECT_EQ(s.at("oom_excess_bytes"), 450);
  EXPECT_EQ(s.at("oom_dominant_category"), "parameters");
  const std::string text = format_text_summary(f.typed());
  EXPECT_NE(text.find("OUT OF MEMORY"), std::string::npos) << text;
}

TEST(Summary, FoldedRanksAreReplicated) {
  testing::HandBuilt run = testing::folded_run();
  const Scenario sc = testing::folded_scenario();
  const SystemSpec sys = find_system("dgx-a100-80gb");
  const MemoryTimeline m = build_memory_timeline(run.graph, run.record, 4);
  const json s = summary_to_json(make_summary(run.graph, run.record, sc, sys, m, SummaryOptions{}));
  EXPECT_EQ(s.at("folded"), true);
  EXPECT_EQ(s.at("fold_factor"), 2);
  EXPECT_EQ(s.at("simulated_ranks"), 2);
  // (100 + 50) FLOPs x 2 ranks each.
  EXPECT_DOUBLE_EQ(s.at("hardware_flops_per_iteration").get<double>(), 300.0);
  const json& pr = s.at("per_rank");
  ASSERT_EQ(pr.size(), 4u);
  const std::int64_t want_peak[] = {1064, 1064, 932, 932};
  const RankId want_rep[] = {0, 0, 2, 2};
  for (int r = 0; r < 4; ++r) {
    EXPECT_EQ(pr.at(r).at("rank"), r);
    EXPECT_EQ(pr.at(r).at("represented_by"), want_rep[r]);
    EXPECT_EQ(pr.at(r).at("peak_memory_bytes"), want_peak[r]);
  }
  // One node of 4 GPUs: 2 x 7 + 2 x 5 bytes of host optimizer states.
  EXPECT_EQ(s.at("host_peak_memory_bytes"), 24);
  // Rank 0 busy [0,1] of [0,3], rank 2 busy [1,3]: compute (1 + 2) / 2, bubble (2 + 1) / 2.
  EXPECT_DOUBLE_EQ(s.at("breakdown_s").at("compute").get<double>(), 1.5);
  EXPECT_DOUBLE_EQ(s.at("breakdown_s").at("pipeline_bubble").get<double>(), 1.5);
}

TEST(Summary, PartialRecordAveragesOverTheRanksThatRan) {
  // A replay-like record: only rank 0 ran (rank 1's tasks 7..14 are NaN), with allocator samples.
  Fixture f;
  for (TaskId id = 7; id < 15; ++id)
    f.run.record.start_s[id] = f.run.record.end_s[id] = std::nan("");
  f.run.record.measured = true;
  f.run.record.allocated_bytes_samples = {{0.0, 10}, {1.0, 30}, {2.0, 20}};
  f.run.record.reserved_bytes_samples = {{0.0, 64}};
  f.run.record.peak_reserved_bytes = 96;  // a peak inside a task, larger than every sample
  const json s = f.summary();
  EXPECT_EQ(s.at("tasks_not_run"), 8);
  EXPECT_DOUBLE_EQ(s.at("iteration_time_s").get<double>(), 10.0);
  EXPECT_EQ(s.at("measured_peak_allocated_bytes"), 30);
  EXPECT_EQ(s.at("measured_peak_reserved_bytes"), 96);
  // Without their peers, rank 0's comm starts at its own start: pp [2.5,3] + [3,6], dp [9,10].
  const json& b = s.at("breakdown_s");
  EXPECT_DOUBLE_EQ(b.at("compute").get<double>(), 4.0);
  EXPECT_DOUBLE_EQ(b.at("pp_comm").get<double>(), 3.5);
  EXPECT_DOUBLE_EQ(b.at("dp_comm").get<double>(), 1.0);
  EXPECT_DOUBLE_EQ(b.at("pipeline_bubble").get<double>(), 0.0);
  EXPECT_NE(s.at("breakdown_note").get<std::string>().find("1 of 2"), std::string::npos);
  EXPECT_EQ(s.at("per_rank").at(1).at("ran"), false);
  EXPECT_FALSE(s.at("per_rank").at(0).contains("ran"));
  EXPECT_EQ(s.at("breakdown_slowest_rank").at("rank"), 0);
}

TEST(Summary, TextSummaryMentionsTheHeadlineNumbers) {
  Fixture f;
  const std::string text = format_text_summary(f.typed());
  EXPECT_NE(text.find("hand-built"), std::string::npos);
  EXPECT_NE(text.find("11.000000 s"), std::string::npos) << text;
  EXPECT_NE(text.find("pipeline_bubble"), std::string::npos);
  EXPECT_EQ(text.find("OUT OF MEMORY"), std::string::npos);
}

TEST(MemoryCsv, OneRowPerDeviceAndChange) {
  Fixture f;
  const MemoryTimeline m = f.memory();
  std::ostringstream out;
  write_memory_csv(out, m, {1});
  const std::string want =
      "time_s,device,id,parameters,gradients,optimizer_states,activations,comm_buffers,"
      "offload_buffers,framework,total\n"
      "0.000000000,gpu,1,2000,0,0,0,50,0,0,2050\n"
      "3.000000000,gpu,1,2000,0,0,300,50,0,0,2350\n"
      "4.500000000,gpu,1,2000,0,0,200,50,0,0,2250\n"
      "5.000000000,gpu,1,2000,0,0,0,0,400,0,2400\n"
      "7.000000000,gpu,1,2000,0,0,0,0,0,0,2000\n"
      "0.000000000,host,0,0,0,10000,0,0,0,0,10000\n"
      "7.000000000,host,0,0,0,10000,0,0,400,0,10400\n";
  EXPECT_EQ(out.str(), want);
}

}  // namespace
}  // namespace trainsim
