// Tests of models/trace_writer (Chrome trace-event JSON, docs/trace.md) and of
// the rank-list syntax of --trace-ranks, on the hand-built graph of output_test_graph.h.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "models/outputs/activity.h"
#include "models/outputs/memory_timeline.h"
#include "models/outputs/trace_writer.h"
#include "output_test_graph.h"

namespace trainsim {
namespace {

using nlohmann::json;

std::string write(const testing::HandBuilt& run, const Scenario& sc, const TraceSelection& sel,
                  std::int64_t gpus_per_node) {
  const MemoryTimeline m = build_memory_timeline(run.graph, run.record, gpus_per_node);
  std::ostringstream out;
  write_chrome_trace(out, run.graph, run.record, m, sel, TraceInfo{sc.name, gpus_per_node});
  return out.str();
}

json trace_of(std::int64_t gpus_per_node = 2) {
  const testing::HandBuilt run = testing::two_stage_run();
  const Scenario sc = testing::two_stage_scenario();
  const TraceSelection sel = select_trace_ranks(run.graph, "");
  return json::parse(write(run, sc, sel, gpus_per_node));
}

std::vector<json> events(const json& t, const std::string& ph, std::int64_t pid) {
  std::vector<json> out;
  for (const json& e : t.at("traceEvents"))
    if (e.at("ph") == ph && e.at("pid") == pid) out.push_back(e);
  return out;
}

TEST(TraceWriter, ProcessAndThreadMetadata) {
  const json t = trace_of();
  std::map<std::int64_t, std::string> process_names;
  std::map<std::pair<std::int64_t, std::int64_t>, std::string> thread_names;
  for (const json& e : t.at("traceEvents")) {
    if (e.at("ph") != "M") continue;
    if (e.at("name") == "process_name")
      process_names[e.at("pid")] = e.at("args").at("name").get<std::string>();
    if (e.at("name") == "thread_name")
      thread_names[{e.at("pid"), e.at("tid")}] = e.at("args").at("name").get<std::string>();
  }
  const std::map<std::int64_t, std::string> want_processes = {
      {0, "rank 0 (node 0 gpu 0)"}, {1, "rank 1 (node 0 gpu 1)"}, {2, "host node 0"}};
  EXPECT_EQ(process_names, want_processes);
  // Rank 0 uses compute, tp-comm, pp-comm, dp-comm; rank 1 compute, pp-comm, dp-comm, h2d,
  // d2h, cpu (StreamId order 0..6).
  EXPECT_EQ(thread_names.at({0, 0}), "compute");
  EXPECT_EQ(thread_names.at({0, 1}), "tp-comm");
  EXPECT_EQ(thread_names.at({0, 2}), "pp-comm");
  EXPECT_EQ(thread_names.at({0, 3}), "dp-comm");
  EXPECT_EQ(thread_names.count({0, 4}), 0u);
  EXPECT_EQ(thread_names.at({1, 4}), "h2d");
  EXPECT_EQ(thread_names.at({1, 5}), "d2h");
  EXPECT_EQ(thread_names.at({1, 6}), "cpu");
  EXPECT_EQ(t.at("otherData").at("trace_ranks"), "0-1");
  EXPECT_EQ(t.at("otherData").at("scenario"), "hand-built");
}

TEST(TraceWriter, CompleteEventsCarryTaskIdsAndWork) {
  const testing::HandBuilt run = testing::two_stage_run();
  const json t = trace_of();
  std::set<std::int64_t> ids;
  int waits = 0;
  for (std::int64_t pid : {0, 1})
    for (const json& e : events(t, "X", pid)) {
      const std::int64_t id = e.at("args").at("task");
      if (e.value("cat", "") == "wait") {
        // A receive posted before its send, or a collective entered before its peers: nested
        // at its start, until the last participant's start (the send's, or the latest member's).
        const Task& w = run.graph.task(TaskId(id));
        ASSERT_TRUE(w.kind == TaskKind::Recv || w.kind == TaskKind::Collective);
        const bool p2p = w.kind == TaskKind::Recv;
        double last_start = run.record.start_s[id];
        for (TaskId s = 0; s < run.graph.num_tasks(); ++s) {
          const Task& o = run.graph.task(s);
          const bool same = p2p ? o.kind == TaskKind::Send : o.kind == TaskKind::Collective;
          if (same && o.match == w.match) last_start = std::max(last_start, run.record.start_s[s]);
        }
        EXPECT_DOUBLE_EQ(e.at("ts").get<double>(), run.record.start_s[id] * 1e6);
        EXPECT_NEAR(e.at("dur").get<double>(), (last_start - run.record.start_s[id]) * 1e6, 1e-3);
        ++waits;
        continue;
      }
      ids.insert(id);
      EXPECT_EQ(e.at("name"), run.graph.label(TaskId(id)));
      EXPECT_EQ(e.at("pid"), run.graph.task(TaskId(id)).rank);
      EXPECT_EQ(e.at("tid"), int(run.graph.task(TaskId(id)).stream));
      EXPECT_DOUBLE_EQ(e.at("ts").get<double>(), run.record.start_s[id] * 1e6);
      EXPECT_DOUBLE_EQ(e.at("dur").get<double>(),
                       (run.record.end_s[id] - run.record.start_s[id]) * 1e6);
      EXPECT_TRUE(e.at("args").contains("flops"));
      EXPECT_TRUE(e.at("args").contains("bytes"));
      EXPECT_TRUE(e.at("args").contains("kind"));
      EXPECT_TRUE(e.at("args").contains("op"));
    }
  EXPECT_EQ(ids.size(), run.graph.num_tasks());
  EXPECT_GT(waits, 0);
  // T4 (backward, 20 FLOPs, 64 bytes accessed); U4 (d2h copy of 2000 bytes).
  for (const json& e : events(t, "X", 0))
    if (e.at("args").at("task") == 4) {
      EXPECT_EQ(e.at("args").at("flops"), 20);
      EXPECT_EQ(e.at("args").at("bytes"), 64);
      EXPECT_EQ(e.at("args").at("kind"), "compute");
      EXPECT_EQ(e.at("ts"), 6e6);
    }
  for (const json& e : events(t, "X", 1))
    if (e.at("args").at("task") == 11) {
      EXPECT_EQ(e.at("args").at("bytes"), 2000);
      EXPECT_EQ(e.at("args").at("op"), to_string(OpKind::CopyD2H));
    }
}

// Counter values of `series` over time, for counter `name` of process `pid`.
std::vector<std::pair<double, double>> counter(const json& t, std::int64_t pid,
                                               const std::string& name, const std::string& series) {
  std::vector<std::pair<double, double>> out;
  for (const json& e : events(t, "C", pid))
    if (e.at("name") == name)
      out.emplace_back(e.at("ts").get<double>() / 1e6, e.at("args").at(series).get<double>());
  return out;
}

TEST(TraceWriter, MemoryCounters) {
  const json t = trace_of();
  using V = std::vector<std::pair<double, double>>;
  EXPECT_EQ(counter(t, 0, "memory", "activations"), (V{{0, 100}, {8, 0}}));
  EXPECT_EQ(counter(t, 0, "memory", "parameters"), (V{{0, 1000}, {8, 1000}}));
  EXPECT_EQ(counter(t, 1, "memory", "offload_buffers"),
            (V{{0, 0}, {3, 0}, {4.5, 0}, {5, 400}, {7, 0}}));
  EXPECT_EQ(counter(t, 2, "host memory", "offload_buffers"), (V{{0, 0}, {7, 400}}));
  EXPECT_EQ(counter(t, 2, "host memory", "optimizer_states"), (V{{0, 10000}, {7, 10000}}));
}

TEST(TraceWriter, LinkCountersFromCommAndCopies) {
  using V = std::vector<std::pair<double, double>>;
  const json t = trace_of(/*gpus_per_node=*/2);
  // Rank 0: send T1 1000 B over [2,3] (its recv was posted at 0): 1000 B/s on NVLink (peer on
  // the same node); dp all-reduce of 8000 B over 2 ranks: ring 2(n-1)/n x 8000 = 8000 B sent in
  // [9.5, 10] (the peer arrives at 9.5): 16000 B/s. The TP all-reduce of one rank moves nothing.
  EXPECT_EQ(counter(t, 0, "link bytes/s", "NVLink"),
            (V{{0, 0}, {2, 1000}, {3, 0}, {9.5, 16000}, {10, 0}}));
  EXPECT_EQ(counter(t, 0, "link bytes/s", "NIC"), (V{{0, 0}, {2, 0}, {3, 0}, {9.5, 0}, {10, 0}}));
  const V d2h = counter(t, 1, "link bytes/s", "PCIe D2H");
  const V h2d = counter(t, 1, "link bytes/s", "PCIe H2D");
  auto at = [](const V& v, double time) {  // value after the last change at `time`
    double x = -1;
    for (const auto& [tt, val] : v)
      if (tt <= time) x = val;
    return x;
  };
  EXPECT_EQ(at(d2h, 5.5), 1000);
  EXPECT_EQ(at(d2h, 7.5), 0);
  EXPECT_EQ(at(h2d, 10.5), 3000);
  EXPECT_EQ(at(h2d, 11), 0);
  EXPECT_EQ(at(counter(t, 1, "link bytes/s", "NVLink"), 5.5), 1000);
  // With one GPU per node the same transfers leave the node: NIC instead of NVLink.
  const json t1 = trace_of(/*gpus_per_node=*/1);
  EXPECT_EQ(at(counter(t1, 0, "link bytes/s", "NIC"), 9.7), 16000);
  EXPECT_EQ(at(counter(t1, 0, "link bytes/s", "NVLink"), 9.7), 0);
}

TEST(TraceWriter, DeterministicAndStreamingFormat) {
  const testing::HandBuilt run = testing::two_stage_run();
  const Scenario sc = testing::two_stage_scenario();
  const TraceSelection sel = select_trace_ranks(run.graph, "1");
  const std::string a = write(run, sc, sel, 2), b = write(run, sc, sel, 2);
  EXPECT_EQ(a, b);
  // One event per line; only rank 1 and its host are present.
  const json t = json::parse(a);
  for (const json& e : t.at("traceEvents")) EXPECT_TRUE(e.at("pid") == 1 || e.at("pid") == 2);
  EXPECT_EQ(std::count(a.begin(), a.end(), '\n'), std::int64_t(t.at("traceEvents").size()) + 2);
}

TEST(TraceSelection, DefaultsAndFolding) {
  // Small unfolded run: all ranks.
  const testing::HandBuilt run = testing::two_stage_run();
  const Scenario sc = testing::two_stage_scenario();
  TraceSelection sel = select_trace_ranks(run.graph, "");
  EXPECT_EQ(sel.ranks, (std::vector<RankId>{0, 1}));
  EXPECT_NE(sel.note.find("all ranks"), std::string::npos);
  // Folded: ranks 1 and 3 are represented by 0 and 2.
  const testing::HandBuilt folded = testing::folded_run();
  const Scenario fsc = testing::folded_scenario();
  sel = select_trace_ranks(folded.graph, "1,3");
  EXPECT_EQ(sel.ranks, (std::vector<RankId>{0, 2}));
  EXPECT_NE(sel.note.find("folded"), std::string::npos) << sel.note;
  EXPECT_NE(sel.note.find("0,2"), std::string::npos) << sel.note;
  sel = select_trace_ranks(folded.graph, "");
  EXPECT_EQ(sel.ranks, (std::vector<RankId>{0, 2}));
  const json t = json::parse(write(folded, fsc, sel, 4));
  bool labelled = false;
  for (const json& e : t.at("traceEvents"))
    if (e.at("ph") == "M" && e.at("name") == "process_labels") labelled = true;
  EXPECT_TRUE(labelled);
}

TEST(TraceSelection, LargeRunDefaultIsFirstAndLastStageTpGroup) {
  // 128 ranks: TP 4 x PP 4 x DP 8, one representative-free (unfolded) graph of 1 task per rank.
  ScheduleGraph g;
  OpDesc o;
  const auto op = g.add_op(o);
  for (RankId r = 0; r < 128; ++r) {
    Task t;
    t.op = op;
    t.rank = r;
    g.add_task(t);
  }
  g.world_size = 128;
  g.layout = ParallelLayout{4, 8, 4};  // tp, dp, pp
  g.finalize();
  const TraceSelection sel = select_trace_ranks(g, "");
  // Megatron layout rank = stage * (dp * tp) + dp_rank * tp + tp_rank: stage 0 dp 0 -> 0-3,
  // stage 3 dp 0 -> 96-99.
  EXPECT_EQ(format_rank_list(sel.ranks), "0-3,96-99");
  EXPECT_NE(sel.note.find("--trace-ranks"), std::string::npos);
}

TEST(RankList, ParsesRangesAndLists) {
  EXPECT_EQ(parse_rank_list("0-7,3064-3071", 3072).size(), 16u);
  EXPECT_EQ(parse_rank_list("5, 1-2 ,2", 8), (std::vector<RankId>{1, 2, 5}));
  EXPECT_EQ(parse_rank_list("all", 3), (std::vector<RankId>{0, 1, 2}));
  EXPECT_EQ(format_rank_list({0, 1, 2, 3, 7, 9, 10}), "0-3,7,9-10");
  EXPECT_EQ(format_rank_list(parse_rank_list("0-7,3064-3071", 3072)), "0-7,3064-3071");
  EXPECT_EQ(format_rank_list({}), "");
}

TEST(RankList, RejectsBadInputNamingTheFlagAndValue) {
  for (const char* bad :
       {"", "1-", "-3", "a", "3-1", "1,,2", "8", "0-8", "1.5", "99999999999999"}) {
    try {
      parse_rank_list(bad, 8);
      ADD_FAILURE() << "accepted '" << bad << "'";
    } catch (const InputError& e) {
      const std::string msg = e.what();
      EXPECT_NE(msg.find("--trace-ranks"), std::string::npos) << msg;
      EXPECT_NE(msg.find(std::string("'") + bad + "'"), std::string::npos) << msg;
    }
  }
}

TEST(JsonQuote, EscapesSpecialCharacters) {
  EXPECT_EQ(json_quote("a\"b\\c\n\x01"), "\"a\\\"b\\\\c\\n\\u0001\"");
  EXPECT_EQ(json::parse(json_quote("x\"\\\t\x02")).get<std::string>(), "x\"\\\t\x02");
}

}  // namespace
}  // namespace trainsim

namespace trainsim {
namespace {

// Pipeline sends in flight overlap without nesting (the second starts before the first is
// delivered): each goes to its own track of the stream, so every track's slices nest (Perfetto
// drops the others). A third send after both ended goes back to the first track.
TEST(TraceWriter, OverlappingSendsGetTracksOfTheirOwn) {
  ScheduleGraph g;
  OpDesc o;
  o.kind = OpKind::SendRecv;
  o.bytes = 64;
  const auto op = g.add_op(o);
  const auto group = g.add_group(GroupKind::Pipeline, {0, 1});
  const double start[] = {0.0, 1.0, 5.0}, end[] = {2.0, 3.0, 6.0};
  ExecutionRecord rec;
  for (int i = 0; i < 3; ++i) {
    Task t;
    t.op = op;
    t.rank = 0;
    t.kind = TaskKind::Send;
    t.stream = StreamId::PpComm;
    t.phase = Phase::Forward;
    t.part = Part::Pipeline;
    t.microbatch = static_cast<std::uint16_t>(i);
    t.peer = 1;
    t.group = group;
    t.match = static_cast<std::uint32_t>(i);
    g.add_task(t);
    rec.start_s.push_back(start[i]);
    rec.end_s.push_back(end[i]);
  }
  g.world_size = 1;  // rank 0 alone; its peer is outside the graph
  g.initial_gpu_memory = {MemVector{}};
  g.initial_host_memory = {MemVector{}};
  g.finalize();
  rec.executor = "hand-made";
  const MemoryTimeline m = build_memory_timeline(g, rec, 2);
  TraceSelection sel;
  sel.ranks = {0};
  std::ostringstream out;
  write_chrome_trace(out, g, rec, m, sel, TraceInfo{"lanes", 2});
  const json t = json::parse(out.str());
  const long pp = static_cast<long>(StreamId::PpComm);
  std::vector<long> tids;
  std::map<long, std::string> names;
  for (const json& e : t.at("traceEvents")) {
    if (e.at("ph") == "X" && e.value("cat", "") != "wait") tids.push_back(e.at("tid").get<long>());
    if (e.at("ph") == "M" && e.at("name") == "thread_name")
      names[e.at("tid").get<long>()] = e.at("args").at("name").get<std::string>();
  }
  EXPECT_EQ(tids, (std::vector<long>{pp, 100 + pp, pp}));
  EXPECT_EQ(names[pp], "pp-comm");
  EXPECT_EQ(names[100 + pp], "pp-comm #2");
}

}  // namespace
}  // namespace trainsim
