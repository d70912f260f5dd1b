// The result file of `trainsim plan --json` (docs/plan.md): written by `plan`, read back by
// `plan --merge`. Its own file so that the fuzz target of the reader (fuzz/fuzz_plan_result.cpp)
// links it without the command line.
#pragma once

#include <cstddef>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "models/plan/planner.h"

namespace trainsim::cli {

/// The invalid candidates of a message's shape (its text with every number set aside, so that
/// "global batch 1536 is not divisible by 5 x 12" and "… by 7 x 6" are one reason): how many,
/// and the first of them in the enumeration with its own message.
struct InvalidReason {
  std::string reason;          ///< the first candidate's message, without the scenario's path
  std::size_t count = 0;
  std::size_t example_index = 0;
  std::string example_layout;
};

/// Adds `r` to the group of its message's shape in `reasons` (a new group if none): counts add,
/// the example is the one of lower index.
void add_invalid_reason(std::vector<InvalidReason>& reasons, const InvalidReason& r);
/// Orders `reasons` most candidates first, then by the example's index (deterministic).
void sort_invalid_reasons(std::vector<InvalidReason>& reasons);

/// One `plan --json` result: the ranked candidates of a scenario's space, or of one shard of it.
struct PlanResultFile {
  std::string scenario;          ///< the scenario's `name` ("" in results of earlier releases)
  std::string shard;             ///< "i/n" for `--shard i/n`; "" for the whole space
  bool interrupted = false;      ///< Ctrl-C cut the search short
  std::size_t enumerated = 0;    ///< candidates of the whole space
  std::map<std::string, std::size_t> rejected;  ///< not simulated, by reason
  /// The `invalid` ones by validation message (empty in results of earlier releases).
  std::vector<InvalidReason> invalid_reasons;
  std::vector<CandidateResult> candidates;
};

/// `--shard i/n` as (i, n); throws InputError naming --shard and the text unless 0 <= i < n,
/// written without sign, spaces or leading zeros.
std::pair<std::size_t, std::size_t> parse_shard(const std::string& spec);

/// A candidate's estimate as the plan workers send it and the result file holds it.
nlohmann::json estimate_to_json(const CandidateEstimate& e);
/// Reads what estimate_to_json wrote; every field checked (InputError naming `source`, the
/// field `field`.KEY and the value).
CandidateEstimate estimate_from_json(const nlohmann::json& j, const std::string& source,
                                     const std::string& field = "estimate");

/// The result file's JSON.
nlohmann::json plan_result_json(const PlanResultFile& result);

/// Reads a result file's text (from `source`, named in messages). Every field is checked: a
/// missing one, another type or a value out of its range is an InputError naming the source,
/// the field's path (`candidates[3].mfu`) and the value; so are an unknown plan_version, a
/// candidate index outside the enumeration or outside the file's shard, and an index twice.
/// `scenario`, `shard`, `interrupted` and `invalid_reasons` may be absent (results of earlier
/// releases); present, `invalid_reasons`' counts add up to `rejected.invalid`.
PlanResultFile parse_plan_result(const std::string& text, const std::string& source);

}  // namespace trainsim::cli
