// validation/host_fit.h: the host issue costs fitted from a trace's host thread, against a
// synthetic trace built from known costs (the fit must recover them) and bad input.
#include <gtest/gtest.h>

#include <string>

#include <nlohmann/json.hpp>

#include "models/errors.h"
#include "validation/host_fit.h"
#include "validation/trace_import.h"

using namespace trainsim;
using namespace trainsim::validation;

namespace {

/// A trainsim-style trace whose host_issue spans take exactly
/// 2 us per eager op + 5 us per autograd node + 30 us per comm task + 7 us per compute task.
std::string synthetic_trace(bool with_comm) {
  nlohmann::json ev = nlohmann::json::array();
  double ts = 0;
  int task = 0;
  auto add = [&](const char* cls, int ops, int nodes) {
    const double dur = 2.0 * ops + 5.0 * nodes + (std::string(cls) == "comm" ? 30.0 : 0.0) +
                       (std::string(cls) == "compute" ? 7.0 : 0.0);
    ev.push_back({{"ph", "X"}, {"pid", 0}, {"tid", 99}, {"name", "issue t" + std::to_string(task)},
                  {"cat", "host_issue"}, {"ts", ts}, {"dur", dur},
                  {"args", {{"task", task}, {"class", cls}, {"eager_ops", ops},
                            {"autograd_nodes", nodes}}}});
    ts += dur + 1;
    ++task;
  };
  for (int i = 0; i < 6; ++i) add("compute", 10 + 3 * i, 0);  // forward
  for (int i = 0; i < 6; ++i) add("compute", 2 + i, 8 + 2 * i);  // backward
  if (with_comm)
    for (int i = 0; i < 3; ++i) add("comm", i, 0);
  add("optimizer", 50, 0);  // not in the fit
  return nlohmann::json{{"traceEvents", ev}}.dump();
}

}  // namespace

TEST(HostFit, RecoversKnownCosts) {
  const ImportedTrace t = parse_chrome_trace(synthetic_trace(true), "synthetic.json");
  ASSERT_TRUE(has_host_issue_spans(t));
  const HostIssueFit f = fit_host_issue_costs(t);
  EXPECT_EQ(f.spans, 15);
  EXPECT_NEAR(f.eager_op_s, 2e-6, 1e-10);
  EXPECT_NEAR(f.autograd_node_s, 5e-6, 1e-10);
  EXPECT_NEAR(f.nccl_call_s, 30e-6, 1e-10);
  EXPECT_NEAR(f.module_overhead_s, 7e-6, 1e-10);
  EXPECT_TRUE(f.not_fitted.empty());
  const nlohmann::json h = f.to_host_section("synthetic.json");
  EXPECT_NEAR(h["eager_op_s"]["value"].get<double>(), 2e-6, 1e-10);
  EXPECT_NE(h["nccl_call_s"]["source"].get<std::string>().find("synthetic.json"), std::string::npos);
}

TEST(HostFit, ATermNoSpanHasIsLeftZeroAndSaid) {
  const HostIssueFit f =
      fit_host_issue_costs(parse_chrome_trace(synthetic_trace(false), "nocomm.json"));
  EXPECT_EQ(f.nccl_call_s, 0.0);
  ASSERT_EQ(f.not_fitted.size(), 1u);
  EXPECT_EQ(f.not_fitted[0], "nccl_call_s");
  EXPECT_NEAR(f.eager_op_s, 2e-6, 1e-10);
  EXPECT_NE(f.to_host_section("nocomm.json")["nccl_call_s"]["source"].get<std::string>().find(
                "not determined"),
            std::string::npos);
}

TEST(HostFit, ATraceWithoutAHostThreadIsAnInputError) {
  const std::string kineto =
      R"({"traceEvents":[{"ph":"X","name":"aten::mm","cat":"cpu_op","ts":0,"dur":5,"pid":1,"tid":1}]})";
  const ImportedTrace t = parse_chrome_trace(kineto, "kineto.json");
  EXPECT_FALSE(has_host_issue_spans(t));
  try {
    fit_host_issue_costs(t);
    FAIL() << "expected InputError";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("kineto.json"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("host_issue"), std::string::npos) << e.what();
  }
}
