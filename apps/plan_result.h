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

#include "models/planner.h"

namespace trainsim::cli {

/// One `plan --json` result: the ranked candidates of a scenario's space, or of one shard of it.
struct PlanResultFile {
  std::string scenario;          ///< the scenario's `name` ("" in results of earlier releases)
  std::string shard;             ///< "i/n" for `--shard i/n`; "" for the whole space
  bool interrupted = false;      ///< Ctrl-C cut the search short
  std::size_t enumerated = 0;    ///< candidates of the whole space
  std::map<std::string, std::size_t> rejected;  ///< not simulated, by reason
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
/// `scenario`, `shard` and `interrupted` may be absent (results of earlier releases).
PlanResultFile parse_plan_result(const std::string& text, const std::string& source);

}  // namespace trainsim::cli
