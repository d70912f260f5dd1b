// Two summaries side by side (`trainsim diff A.json B.json`, docs/cli.md): what moved
// between two runs (time, throughput, memory by category, the exposed-time breakdown) and the
// settings that differ between them (the parallel layout and SummarySettings, which every
// summary repeats). Works on the JSON form (docs/summary.md), so it compares any two summary
// files: simulated, replayed, or from another trainsim build of the same summary_version.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace trainsim {

/// One figure of both runs. `a`/`b` are absent where that summary lacks the key (an older
/// summary without tokens_per_s_per_gpu, a run without host memory).
struct DiffMetric {
  std::string key;    ///< the summary key, dotted for nested ones ("breakdown_s.dp_comm")
  std::string unit;   ///< "s", "bytes", "tokens/s", "TFLOP/s", "" (a fraction)
  std::optional<double> a, b;
  /// b - a, and b / a - 1 (absent when either side is absent, or a is 0).
  std::optional<double> delta() const;
  std::optional<double> relative() const;
};

/// One setting whose values differ (values as the summary spells them, JSON text).
struct DiffSetting {
  std::string key;
  std::string a, b;  ///< "(absent)" where that summary lacks it
};

struct SummaryDiff {
  std::string name_a, name_b;
  std::vector<DiffMetric> metrics;
  std::vector<DiffSetting> settings;  ///< only the ones that differ
};

/// Reads a summary file (docs/summary.md) for diff: JSON, an object with `summary_version`
/// (an integer no newer than this build's kSummaryVersion) and the numeric keys diff compares.
/// Throws InputError naming the file, the field and the value.
nlohmann::json read_summary_file(const std::string& path);

/// The comparison of two summaries read by read_summary_file.
SummaryDiff diff_summaries(const nlohmann::json& a, const nlohmann::json& b);

/// JSON form (docs/cli.md "diff"): {a, b, metrics: [{key, unit, a, b, delta, relative}],
/// settings_differ: [{key, a, b}]}; absent values are null.
nlohmann::json diff_to_json(const SummaryDiff& d);

/// A readable table: one line per metric (memory in GiB), then the settings that differ.
std::string format_text_diff(const SummaryDiff& d);

}  // namespace trainsim
