// trainsim diff's comparison (models/outputs/summary_diff.h) on hand-written summaries: each
// delta and ratio is computed here from the two values, and the settings that differ are the
// ones the test changed.
#include <gtest/gtest.h>

#include <fstream>

#include "models/errors.h"
#include "models/outputs/summary_diff.h"
#include "tests/support/paths.h"

namespace trainsim {
namespace {

using nlohmann::json;

json summary(double time_s, double tokens_per_s, std::int64_t world) {
  return {{"summary_version", 1},
          {"name", "s"},
          {"world_size", world},
          {"micro_batch_size", 1},
          {"iteration_time_s", time_s},
          {"tokens_per_s", tokens_per_s},
          {"mfu", nullptr},
          {"peak_memory_bytes", 8.0 * (1 << 30)},
          {"peak_memory_by_category", {{"activations", 4.0 * (1 << 30)}, {"parameters", 0}}},
          {"breakdown_s", {{"compute", 1.5}, {"dp_comm", 0.5}}},
          {"settings", {{"sequence_parallel", false}, {"context_parallel_size", 1}}}};
}

const DiffMetric& metric(const SummaryDiff& d, const std::string& key) {
  for (const DiffMetric& m : d.metrics)
    if (m.key == key) return m;
  throw std::runtime_error("no metric " + key);
}

TEST(SummaryDiff, DeltasAndRatiosOfEachFigure) {
  json a = summary(2.0, 1000, 8), b = summary(2.5, 800, 8);
  b["breakdown_s"]["compute"] = 2.0;
  const SummaryDiff d = diff_summaries(a, b);
  const DiffMetric& t = metric(d, "iteration_time_s");
  EXPECT_DOUBLE_EQ(*t.delta(), 0.5);
  EXPECT_DOUBLE_EQ(*t.relative(), 0.25);
  // tokens_per_s_per_gpu is absent from both: derived as tokens_per_s / world_size.
  const DiffMetric& g = metric(d, "tokens_per_s_per_gpu");
  EXPECT_DOUBLE_EQ(*g.a, 125.0);
  EXPECT_DOUBLE_EQ(*g.b, 100.0);
  EXPECT_DOUBLE_EQ(*g.relative(), -0.2);
  EXPECT_DOUBLE_EQ(*metric(d, "breakdown_s.compute").delta(), 0.5);
  EXPECT_DOUBLE_EQ(*metric(d, "breakdown_s.dp_comm").relative(), 0.0);
  // A zero base has no ratio; a null (mfu) is absent on both sides.
  EXPECT_FALSE(metric(d, "peak_memory_by_category.parameters").relative());
  EXPECT_FALSE(metric(d, "mfu").a);
  EXPECT_TRUE(d.settings.empty());
}

TEST(SummaryDiff, ListsOnlyTheSettingsThatDiffer) {
  json a = summary(1, 1, 8), b = summary(1, 1, 8);
  b["micro_batch_size"] = 2;
  b["settings"]["sequence_parallel"] = true;
  b["settings"]["fsdp"] = "torch_fsdp2";  // absent from A
  const SummaryDiff d = diff_summaries(a, b);
  ASSERT_EQ(d.settings.size(), 3u);
  EXPECT_EQ(d.settings[0].key, "micro_batch_size");
  EXPECT_EQ(d.settings[0].a, "1");
  EXPECT_EQ(d.settings[0].b, "2");
  EXPECT_EQ(d.settings[1].key, "settings.sequence_parallel");
  EXPECT_EQ(d.settings[2].key, "settings.fsdp");
  EXPECT_EQ(d.settings[2].a, "(absent)");
  const json j = diff_to_json(d);
  EXPECT_EQ(j["settings_differ"].size(), 3u);
  EXPECT_TRUE(j["metrics"][0]["delta"].is_number());
}

TEST(SummaryDiff, TextLeavesOutRowsZeroInBoth) {
  const std::string text = format_text_diff(diff_summaries(summary(2, 1, 1), summary(3, 1, 1)));
  EXPECT_NE(text.find("iteration_time_s"), std::string::npos);
  EXPECT_NE(text.find("+50.0%"), std::string::npos);
  EXPECT_EQ(text.find("peak_memory_by_category.parameters"), std::string::npos);
  EXPECT_NE(text.find("settings: the same"), std::string::npos);
}

std::string refusal(const json& j) {
  test_support::ScratchDir dir("summary_diff");
  const std::string path = (dir.path() / "s.json").string();
  std::ofstream(path) << j.dump();
  try {
    read_summary_file(path);
  } catch (const InputError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find(path), std::string::npos) << what;
    return what;
  }
  ADD_FAILURE() << "accepted " << j.dump();
  return "";
}

TEST(SummaryDiff, RefusesWhatIsNotASummary) {
  EXPECT_NE(refusal(json::array()).find("not a trainsim summary"), std::string::npos);
  EXPECT_NE(refusal({{"x", 1}}).find("'summary_version' is missing"), std::string::npos);
  json newer = summary(1, 1, 1);
  newer["summary_version"] = 99;
  EXPECT_NE(refusal(newer).find("'summary_version' = 99"), std::string::npos);
  json text_time = summary(1, 1, 1);
  text_time["iteration_time_s"] = "fast";
  EXPECT_NE(refusal(text_time).find("'iteration_time_s' = \"fast\""), std::string::npos);
  json bad_category = summary(1, 1, 1);
  bad_category["breakdown_s"]["compute"] = true;
  EXPECT_NE(refusal(bad_category).find("'breakdown_s.compute' = true"), std::string::npos);
  json missing = summary(1, 1, 1);
  missing.erase("breakdown_s");
  EXPECT_NE(refusal(missing).find("'breakdown_s' is missing"), std::string::npos);
}

}  // namespace
}  // namespace trainsim
