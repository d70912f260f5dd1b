// A receive or a collective that starts before its peers shows the wait as a wait (issue 35): a
// nested "waiting for peers" span (cat wait) from the task's start until its sender started,
// checked here on every receive of the tiny TP2 x PP2 x DP2 run against the start of the send
// it matches (found by label on the sender's process), and nested inside its task's span.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <string>
#include <tuple>

#include <nlohmann/json.hpp>

#include "tests/e2e/cli_helpers.h"
#include "tests/support/paths.h"

namespace {

using nlohmann::json;
using trainsim::test_support::ScratchDir;
using trainsim::test_support::source_path;
using trainsim_e2e::run;
using trainsim_e2e::slurp;

TEST(TraceWaitCli, ReceivesWaitForTheirSendersStart) {
  ScratchDir dir("e2e_trace_wait");
  const std::string trace = (dir.path() / "t.json").string(), log = (dir.path() / "log").string();
  ASSERT_EQ(run("simulate " + source_path("scenarios/small/gpt-tiny_tp2_pp2_dp2.yaml") +
                    " --set host_model=off --trace " + trace,
                log),
            0)
      << slurp(log);
  const json t = json::parse(slurp(trace));
  // (pid, label) -> (ts, dur, tid) of the task spans; waits by (pid, task id).
  std::map<std::pair<int, std::string>, std::tuple<double, double, long>> spans;
  std::map<std::pair<int, long>, std::pair<std::string, long>> label_of_task;
  std::vector<json> waits;
  for (const json& e : t.at("traceEvents")) {
    if (e.at("ph") != "X") continue;
    const int pid = e.at("pid");
    if (e.value("cat", "") == "wait") {
      waits.push_back(e);
      continue;
    }
    if (e.value("cat", "").rfind("host_", 0) == 0) continue;
    spans[{pid, e.at("name")}] = {e.at("ts"), e.at("dur"), e.at("tid")};
    label_of_task[{pid, e.at("args").at("task").get<long>()}] = {e.at("name"), e.at("tid")};
  }
  int checked_recvs = 0;
  for (const json& w : waits) {
    const int pid = w.at("pid");
    const auto& [label, tid] = label_of_task.at({pid, w.at("args").at("task").get<long>()});
    const auto& [ts, dur, task_tid] = spans.at({pid, label});
    // Nested in its task's span, at its start, on its thread.
    EXPECT_EQ(w.at("tid").get<long>(), task_tid) << label;
    EXPECT_DOUBLE_EQ(w.at("ts").get<double>(), ts) << label;
    EXPECT_LE(w.at("dur").get<double>(), dur + 1e-3) << label;
    // "recv fwd mb3 <- rank 8" waits for "send fwd mb3 -> rank PID" on rank 8.
    const auto arrow = label.find(" <- rank ");
    if (label.rfind("recv ", 0) != 0 || arrow == std::string::npos) continue;
    const int sender = std::stoi(label.substr(arrow + 9));
    const std::string send =
        "send " + label.substr(5, arrow - 5) + " -> rank " + std::to_string(pid);
    const auto it = spans.find({sender, send});
    ASSERT_NE(it, spans.end()) << send << " on rank " << sender;
    EXPECT_NEAR(w.at("ts").get<double>() + w.at("dur").get<double>(), std::get<0>(it->second),
                2e-3)
        << label;  // microseconds, 3 decimals
    ++checked_recvs;
  }
  EXPECT_GT(checked_recvs, 0);  // the pipeline's first receives wait for the first stage
}

}  // namespace
