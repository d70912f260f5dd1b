// The mixture-of-experts and CUDA graph checks of validate_scenario (models/input/validate.cpp;
// models/input/scenario.h): token dropping, multi-token prediction and the flex dispatcher, the
// combined 1F1B schedule's expert-parallel overlap, CUDA graph scopes and their recomputation.
// Each refusal names the file (through `fail`), the fields and their values.
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include "models/input/scenario.h"

namespace trainsim::validate_detail {

/// Throws the InputError of the scenario being validated (its file prefixed to `what`).
using FailFn = std::function<void(const std::string& what)>;

inline std::string kv(const std::string& field, std::int64_t value) {
  return field + " (" + std::to_string(value) + ")";
}
inline std::string kv_bool(const std::string& field, bool value) {
  return field + (value ? " (true)" : " (false)");
}

void check_moe_token_dropping(const Scenario& s, const FailFn& fail);
void check_mtp_and_flex(Scenario& s, const FailFn& fail);
void check_shared_expert_overlap(const Scenario& s, const FailFn& fail);
void check_a2a_overlap(const Scenario& s, const FailFn& fail);
void check_cuda_graph_scopes(Scenario& s, const FailFn& fail);
void check_cuda_graph_recompute(const Scenario& s, const FailFn& fail);

}  // namespace trainsim::validate_detail
