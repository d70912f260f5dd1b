// Trace import and calibration fitting. The PyTorch trace is the real one committed in
// validation/data (see validation/data/README.md); the expected numbers are computed here
// straight from its JSON, not through trace_import.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "models/hardware/calibration.h"
#include "models/perf/cost_model.h"
#include "models/perf/flops.h"
#include "models/builder/graph_builder.h"
#include "models/hardware/local_device.h"
#include "models/input/scenario.h"
#include "validation/fit.h"
#include "validation/trace_import.h"
#include "tests/support/paths.h"

using trainsim::test_support::source_path;

using namespace trainsim;
using namespace trainsim::validation;

namespace {

const std::string kTrace = source_path("validation/data/kineto_gpt_tiny_cpu.json");
const std::string kScenario = source_path("scenarios/small/gpt-cpu_tp1_pp1_dp1.yaml");

nlohmann::json raw_trace() {
  std::ifstream f(kTrace);
  std::stringstream ss;
  ss << f.rdbuf();
  return nlohmann::json::parse(ss.str());
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.size() % 2 ? v[v.size() / 2] : 0.5 * (v[v.size() / 2 - 1] + v[v.size() / 2]);
}

/// A measured-style profile whose figures are deliberately far from this machine's.
CalibrationProfile start_profile() {
  CalibrationProfile p = default_calibration("A100-SXM4-80GB");
  p.device = "cpu: test";
  p.precision = "fp32";
  p.kernel_launch_overhead_s = 0;
  p.local_device = {1e11, 1e10, 8e9, 5e9, 2, 2};
  p.gemm_efficiency = {{4096, 4096, 4096, 1, 0.9}};
  return p;
}

}  // namespace

TEST(TraceImport, ReadsTheCommittedPyTorchTrace) {
  const ImportedTrace t = load_chrome_trace(kTrace);
  EXPECT_EQ(t.format, TraceFormat::Kineto);
  EXPECT_EQ(t.default_dtype, "float");
  const auto ops = operator_samples(t);
  std::size_t gemms = 0, labelled = 0;
  for (const OpSample& op : ops) {
    GemmSample g;
    if (gemm_of(op, &g)) {
      ++gemms;
      EXPECT_EQ(g.flops(), 2 * g.m * g.n * g.k * g.batch);
    }
    // aten::addmm_ runs inside aten::baddbmm on the CPU (one per product): not a leaf GEMM.
    if (op.name == "aten::addmm_") EXPECT_FALSE(gemm_of(op, &g));
    if (!op.task_label.empty()) ++labelled;
  }
  // Per microbatch and layer: forward QKV (addmm) + 3 mm, backward 2 x 4 mm, 2 + 4 bmm/baddbmm
  // ... at least 12 leaf GEMMs per (microbatch, layer).
  EXPECT_GE(gemms, 2u * 2u * 12u);
  EXPECT_GT(labelled, ops.size() / 2);
}

TEST(TraceImport, MapsAnnotationsToTasksOfTheScenarioGraph) {
  const Scenario sc = load_scenario(kScenario);
  const CalibrationProfile p = start_profile();
  const SystemSpec sys = local_system(p, "test");
  BuildOptions bo;
  bo.calibration = &p;
  const ScheduleGraph g = build_schedule_graph(validated(sc), sys, bo);
  const std::vector<double> d = task_durations(load_chrome_trace(kTrace), g, 0);
  // Independently: the durations of the user_annotation ranges, by name, in time order.
  std::map<std::string, std::vector<double>> by_name;
  std::vector<std::pair<double, nlohmann::json>> ann;
  const nlohmann::json raw = raw_trace();
  for (const auto& e : raw["traceEvents"])
    if (e["cat"] == "user_annotation") ann.emplace_back(e["ts"].get<double>(), e);
  std::sort(ann.begin(), ann.end(), [](auto& a, auto& b) { return a.first < b.first; });
  for (auto& [ts, e] : ann) by_name[e["name"]].push_back(e["dur"].get<double>() * 1e-6);
  std::size_t compute = 0;
  for (TaskId id : g.tasks_of_rank(0)) {
    if (g.task(id).kind != TaskKind::Compute) continue;
    ++compute;
    const auto& v = by_name[g.label(id)];
    ASSERT_FALSE(v.empty()) << g.label(id);
    EXPECT_DOUBLE_EQ(d[id], v.front()) << g.label(id);  // each label occurs once per iteration
  }
  EXPECT_EQ(compute, 2u * (2u * 2u * 2u + 4u));  // 2 mb x (2 layers x 2 blocks x fwd/bwd + embed/logits fwd/bwd)
}

TEST(TraceFit, GemmTimesMoveToTheTraceMedians) {
  // Independent numbers: the median duration of the QKV forward GEMM (addmm, X[128 x 128] times
  // W^T[128 x 384], tokens = b*s = 128) straight from the trace JSON.
  std::vector<double> qkv;
  const nlohmann::json raw = raw_trace();
  for (const auto& e : raw["traceEvents"])
    if (e["name"] == "aten::addmm" && e.contains("args") &&
        e["args"]["Input Dims"] == nlohmann::json::parse("[[384],[128,128],[128,384],[],[]]"))
      qkv.push_back(e["dur"].get<double>() * 1e-6);
  ASSERT_GE(qkv.size(), 4u);  // 2 layers x 2 microbatches
  const double trace_s = median(qkv);

  const CalibrationProfile before = start_profile();
  const SystemSpec sys = local_system(before, "test");
  FitReport rep;
  const CalibrationProfile after =
      fit_from_operator_samples(operator_samples(load_chrome_trace(kTrace)), before, sys, &rep);
  EXPECT_GT(rep.gemm_samples, 0u);
  const double t0 = CostModel(sys, before).gemm_compute_time_s(128, 384, 128);
  const double t1 = CostModel(local_system(after, "test"), after).gemm_compute_time_s(128, 384, 128);
  // before: 2*128*384*128 / (1e11 * eff interpolated from the one 4096^3 point = 0.9)
  EXPECT_NEAR(t0, 2.0 * 128 * 384 * 128 / (1e11 * 0.9), 1e-15);
  EXPECT_LT(std::abs(t1 - trace_s), std::abs(t0 - trace_s));
  EXPECT_NEAR(t1, trace_s, 1e-9 * trace_s);  // an exact shape of the trace: its median
}

TEST(TraceFit, TaskTimesMoveTowardTheTrace) {
  // A whole forward attention block: the simulated task time before and after fitting,
  // against the duration of its record_function range in the trace.
  const Scenario sc = load_scenario(kScenario);
  const CalibrationProfile before = start_profile();
  const SystemSpec sys0 = local_system(before, "test");
  BuildOptions bo;
  bo.calibration = &before;
  const ScheduleGraph g = build_schedule_graph(validated(sc), sys0, bo);
  double trace_s = NAN;
  const nlohmann::json raw = raw_trace();
  for (const auto& e : raw["traceEvents"])
    if (e["name"] == "fwd mb1 layer1 mlp") trace_s = e["dur"].get<double>() * 1e-6;
  ASSERT_TRUE(std::isfinite(trace_s));
  TaskId task = kNone;
  for (TaskId id : g.tasks_of_rank(0))
    if (g.label(id) == "fwd mb1 layer1 mlp") task = id;
  ASSERT_NE(task, kNone);
  const CalibrationProfile after =
      fit_from_operator_samples(operator_samples(load_chrome_trace(kTrace)), before, sys0, nullptr);
  const double t0 = CostModel(sys0, before).compute_time_s(g.op(task));
  const double t1 = CostModel(local_system(after, "test"), after).compute_time_s(g.op(task));
  EXPECT_LT(std::abs(t1 - trace_s), 0.5 * std::abs(t0 - trace_s))
      << "before " << t0 << " after " << t1 << " trace " << trace_s;
}

TEST(TraceFit, TaskDurationFitRecoversAGemmRateScale) {
  // Synthetic measurement: every compute task's GEMM kernels ran at half the modelled rate,
  // the rest as modelled. The fit must find alpha = 0.5 and then reproduce the measurement.
  const Scenario sc = load_scenario(kScenario);
  const CalibrationProfile p = start_profile();
  const SystemSpec sys = local_system(p, "test");
  BuildOptions bo;
  bo.calibration = &p;
  const ScheduleGraph g = build_schedule_graph(validated(sc), sys, bo);
  const CostModel cost(sys, p);
  std::vector<double> measured(g.num_tasks(), NAN);
  for (TaskId id : g.tasks_of_rank(0)) {
    if (g.task(id).kind != TaskKind::Compute) continue;
    double t = 0;
    for (const KernelWork& k : op_kernels(g.op(id))) {
      const double gemm = k.cls == KernelClass::Gemm
                              ? cost.gemm_compute_time_s(k.m, k.n, k.k, k.batch,
                                                         CostModel::gemm_role(k.pass, k.batch))
                              : 0;
      t += cost.kernel_time_s(k) + gemm;  // the GEMM's compute part twice as long
    }
    measured[id] = t;
  }
  FitReport rep;
  const CalibrationProfile q = fit_from_task_durations(g, measured, p, sys, &rep);
  EXPECT_NEAR(rep.gemm_rate_scale, 0.5, 1e-9);
  EXPECT_NEAR(q.local_device.peak_flops, 0.5e11, 1e-9 * 1e11);
}

namespace {

/// A trace of one aten::mm of [m, k] x [k, n] (dimensions as JSON numbers), 1 ms.
std::string mm_trace(const std::string& m, const std::string& k, const std::string& n) {
  return "{\"traceEvents\": [{\"ph\": \"X\", \"cat\": \"cpu_op\", \"name\": \"aten::mm\", "
         "\"ts\": 0, \"dur\": 1000, \"pid\": 1, \"tid\": 1, \"args\": {\"Input Dims\": [[" +
         m + ", " + k + "], [" + k + ", " + n + "]], \"Input type\": [\"float\", \"float\"]}}]}";
}

}  // namespace

// Issue 35: a GEMM of 4.6e18^3 was fitted; "no usable operator sample" did not name the file.
TEST(TraceFit, AnImpossibleGemmAndAnEmptyTraceNameTheFile) {
  const SystemSpec sys = find_system("dgx-a100-80gb");
  const CalibrationProfile base = default_calibration(sys.gpu.name);
  const std::string big = "4611686018427387904";  // 2^62
  const ImportedTrace huge = parse_chrome_trace(mm_trace(big, big, big), "huge.json");
  try {
    (void)fit_from_operator_samples(operator_samples(huge), base, sys, nullptr, "huge.json");
    ADD_FAILURE() << "a GEMM of 2^62 cubed was fitted";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("huge.json: operator 'aten::mm'"), std::string::npos)
        << e.what();
  }
  // 2^31 itself is a shape (the bound), fitted.
  const std::string edge = "2147483648";
  EXPECT_NO_THROW((void)fit_from_operator_samples(
      operator_samples(parse_chrome_trace(mm_trace(edge, "1", "1"), "edge.json")), base, sys,
      nullptr, "edge.json"));
  // No operator with shapes: the message names the trace.
  const ImportedTrace none = parse_chrome_trace(
      "{\"traceEvents\": [{\"ph\": \"X\", \"name\": \"step\", \"ts\": 0, \"dur\": 5}]}",
      "none.json");
  try {
    (void)fit_from_operator_samples(operator_samples(none), base, sys, nullptr, "none.json");
    ADD_FAILURE() << "a trace without samples was fitted";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("none.json: no usable operator sample"),
              std::string::npos)
        << e.what();
  }
}

// Issue 35: JSON nested 100,000 deep crashed the reader; the bound is 512 levels, counted
// outside strings.
TEST(TraceImport, NestingIsBoundedAt512LevelsOutsideStrings) {
  const auto trace_with_args = [](const std::string& value) {
    return "{\"traceEvents\": [{\"ph\": \"X\", \"name\": \"x\", \"ts\": 0, \"dur\": 1, "
           "\"args\": {\"v\": " + value + "}}]}";
  };
  // The event object, its args and traceEvents' list and the root: 4 levels around `v`.
  const std::size_t inner_ok = 512 - 4;
  EXPECT_NO_THROW((void)parse_chrome_trace(
      trace_with_args(std::string(inner_ok, '[') + std::string(inner_ok, ']')), "ok.json"));
  try {
    (void)parse_chrome_trace(
        trace_with_args(std::string(inner_ok + 1, '[') + std::string(inner_ok + 1, ']')),
        "deep.json");
    ADD_FAILURE() << "513 levels were parsed";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("deep.json:1: JSON nested deeper than 512 levels"),
              std::string::npos)
        << e.what();
  }
  // Brackets inside a string (and an escaped quote before them) are text, not nesting.
  EXPECT_NO_THROW((void)parse_chrome_trace(
      trace_with_args("\"\\\"" + std::string(2000, '[') + "\""), "string.json"));
}
