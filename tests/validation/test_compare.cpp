// Task-by-task comparison and the report, on synthetic records with known errors.
#include <gtest/gtest.h>

#include <cmath>

#include "models/hardware/calibration.h"
#include "models/builder/graph_builder.h"
#include "models/hardware/local_device.h"
#include "models/input/scenario.h"
#include "validation/compare.h"
#include "tests/support/paths.h"

using trainsim::test_support::source_path;

using namespace trainsim;
using namespace trainsim::validation;

namespace {

struct Fixture {
  Scenario sc = load_scenario(source_path("scenarios/small/gpt-cpu_tp1_pp1_dp1.yaml"));
  CalibrationProfile p = [] {
    CalibrationProfile q = default_calibration("A100-SXM4-80GB");
    q.device = "cpu: test";
    q.local_device = {1e10, 1e10, 8e9, 5e9, 2, 2};
    return q;
  }();
  ScheduleGraph g = [this] {
    BuildOptions bo;
    bo.calibration = &p;
    return build_schedule_graph(validated(sc), local_system(p, "t"), bo);
  }();
};

/// Back-to-back record of the rank's tasks with the given durations.
ExecutionRecord serial(const ScheduleGraph& g, const std::vector<double>& dur) {
  ExecutionRecord r;
  r.start_s.assign(g.num_tasks(), NAN);
  r.end_s.assign(g.num_tasks(), NAN);
  double t = 0;
  for (TaskId id : g.tasks_of_rank(0)) {
    r.start_s[id] = t;
    t += dur[id];
    r.end_s[id] = t;
  }
  return r;
}

}  // namespace

TEST(Compare, ErrorsAndGroupsFromKnownRecords) {
  Fixture f;
  const auto ids = f.g.tasks_of_rank(0);
  std::vector<double> sim(f.g.num_tasks(), 0), meas(f.g.num_tasks(), 0);
  double sim_total = 0, meas_total = 0, compute_meas = 0;
  TaskId slowest = kNone;
  for (TaskId id : ids) {
    const bool compute = f.g.task(id).kind == TaskKind::Compute;
    meas[id] = compute ? 1e-3 : 2e-5;
    sim[id] = compute ? 1.2e-3 : 2e-5;  // compute +20%, everything else exact
    if (compute && slowest == kNone) slowest = id, sim[id] = 3e-3;  // one big outlier
    sim_total += sim[id], meas_total += meas[id];
    if (compute) compute_meas += meas[id];
  }
  MemoryFigures mem;
  mem.simulated_peak_bytes = 105;
  mem.measured_peak_bytes = 100;
  const Comparison c = compare_records(f.g, 0, serial(f.g, sim), serial(f.g, meas), mem);
  EXPECT_NEAR(c.iteration_time_error(), (sim_total - meas_total) / meas_total, 1e-12);
  EXPECT_NEAR(c.peak_memory_error(), 0.05, 1e-12);
  const GroupStats& comp = c.groups[int(KindGroup::Compute)];
  EXPECT_NEAR(comp.measured_sum_s, compute_meas, 1e-12);
  EXPECT_NEAR(comp.error_median, 0.2, 1e-9);
  EXPECT_NEAR(comp.error_p90, 0.2, 1e-9);
  ASSERT_FALSE(c.largest.empty());
  EXPECT_EQ(c.tasks[c.largest[0]].task, slowest);
  EXPECT_NEAR(c.tasks[c.largest[0]].error(), 2.0, 1e-9);

  const nlohmann::json j = comparison_json(c);
  EXPECT_NEAR(j["iteration_time_error"].get<double>(), c.iteration_time_error(), 1e-15);
  EXPECT_EQ(j["largest_mismatches"][0]["label"], f.g.label(slowest));
  EXPECT_EQ(j["per_kind"]["compute"]["tasks"].get<std::size_t>(), comp.tasks);

  const std::string html = html_report(f.g, c, serial(f.g, sim), serial(f.g, meas),
                                       {{"scenario", "s"}}, {"a note <b>"});
  EXPECT_NE(html.find("<svg"), std::string::npos);
  EXPECT_NE(html.find("measured"), std::string::npos);
  EXPECT_NE(html.find("a note &lt;b&gt;"), std::string::npos);  // escaped
  EXPECT_EQ(html.find("<script src"), std::string::npos);       // self-contained
  EXPECT_EQ(html.find("<link"), std::string::npos);
  // The report states its sign convention, and its figures follow it: 105 B simulated against
  // 100 B measured is +5.0%.
  EXPECT_NE(html.find("error is (simulated &minus; measured) / measured"), std::string::npos);
  EXPECT_NE(html.find("<td class='big'>+5.0%</td>"), std::string::npos);
}

TEST(Compare, MissingTaskIsAnError) {
  Fixture f;
  std::vector<double> d(f.g.num_tasks(), 1e-3);
  ExecutionRecord a = serial(f.g, d), b = serial(f.g, d);
  b.start_s[f.g.tasks_of_rank(0)[3]] = NAN;
  EXPECT_THROW(compare_records(f.g, 0, a, b, MemoryFigures{1, 1, {}}), std::logic_error);
}
