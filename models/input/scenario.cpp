// The scenario's types (models/input/scenario.h): the names of its enums, the recompute
// modules, the cluster's system and the MoE layer's token counts. Reading a scenario file is
// load.cpp; validate_scenario is validate.cpp.
#include "models/input/scenario.h"

#include <cmath>

namespace trainsim {

const SystemSpec& cluster_system(const ClusterConfig& cluster) {
  return cluster.file_system ? *cluster.file_system : find_system(cluster.system);
}

const char* to_string(Precision p) {
  switch (p) {
    case Precision::FP16: return "fp16";
    case Precision::BF16: return "bf16";
    case Precision::FP32: return "fp32";
  }
  TRAINSIM_CHECK(false, "to_string: Precision out of range");
  return "";
}

namespace {
const std::pair<const char*, std::uint8_t> kRecomputeModuleNames[] = {
    {"core_attn", kRecomputeCoreAttn}, {"layernorm", kRecomputeLayernorm},
    {"moe_act", kRecomputeMoeAct},     {"mlp", kRecomputeMlp},
    {"moe", kRecomputeMoe},            {"mla_up_proj", kRecomputeMlaUpProj},
    {"shared_experts", kRecomputeSharedExperts}};
std::string join_modules(std::uint8_t bits, const char* sep) {
  std::string out;
  for (const auto& [name, bit] : kRecomputeModuleNames)
    if (bits & bit) out += (out.empty() ? "" : sep) + std::string(name);
  return out;
}
}  // namespace

std::optional<std::uint8_t> recompute_module_bit(const std::string& name) {
  for (const auto& [n, bit] : kRecomputeModuleNames)
    if (name == n) return bit;
  return std::nullopt;
}

std::string recompute_modules_yaml(std::uint8_t bits) { return "[" + join_modules(bits, ", ") + "]"; }

std::string recompute_modules_token(std::uint8_t bits) { return join_modules(bits, "+"); }

const char* to_string(Recompute r) {
  switch (r) {
    case Recompute::None: return "none";
    case Recompute::Selective: return "selective";
    case Recompute::Full: return "full";
  }
  TRAINSIM_CHECK(false, "to_string: Recompute out of range");
  return "";
}

const char* to_string(Runtime r) {
  return r == Runtime::MegatronCore ? "megatron-core" : "megatron-2021";
}
const char* to_string(Normalization n) {
  return n == Normalization::RMSNorm ? "RMSNorm" : "LayerNorm";
}
const char* to_string(PositionEmbedding p) {
  return p == PositionEmbedding::Rope ? "rope" : "learned_absolute";
}
const char* to_string(AttentionBackend a) {
  switch (a) {
    case AttentionBackend::Unfused: return "unfused";
    case AttentionBackend::Fused: return "fused";
    case AttentionBackend::Flash: return "flash";
  }
  TRAINSIM_CHECK(false, "to_string: AttentionBackend out of range");
  return "";
}
const char* to_string(MoeDispatcher d) {
  if (d == MoeDispatcher::AllGather) return "allgather";
  return d == MoeDispatcher::Flex ? "flex" : "alltoall";
}
const char* to_string(Fp8Format f) {
  switch (f) {
    case Fp8Format::None: return "none";
    case Fp8Format::E4M3: return "e4m3";
    case Fp8Format::Hybrid: return "hybrid";
  }
  TRAINSIM_CHECK(false, "to_string: Fp8Format out of range");
  return "";
}
const char* to_string(Fp8Recipe r) {
  switch (r) {
    case Fp8Recipe::Delayed: return "delayed";
    case Fp8Recipe::Tensorwise: return "tensorwise";
    case Fp8Recipe::Mxfp8: return "mxfp8";
    case Fp8Recipe::Blockwise: return "blockwise";
  }
  TRAINSIM_CHECK(false, "to_string: Fp8Recipe out of range");
  return "";
}

const char* to_string(CudaGraphImpl i) {
  switch (i) {
    case CudaGraphImpl::None: return "none";
    case CudaGraphImpl::Local: return "local";
    case CudaGraphImpl::TransformerEngine: return "transformer_engine";
  }
  TRAINSIM_CHECK(false, "to_string: CudaGraphImpl out of range");
  return "";
}

std::string cuda_graph_scope_names(std::uint8_t bits) {
  static const std::pair<std::uint8_t, const char*> names[] = {
      {kGraphAttn, "attn"},         {kGraphMlp, "mlp"},
      {kGraphMoe, "moe"},           {kGraphMoeRouter, "moe_router"},
      {kGraphMoePreprocess, "moe_preprocess"}, {kGraphMamba, "mamba"},
      {kGraphFullIteration, "full_iteration"}};
  std::string out;
  for (const auto& [bit, name] : names)
    if (bits & bit) out += (out.empty() ? "" : ",") + std::string(name);
  return out.empty() ? "full" : out;
}

const char* to_string(PipelineSchedule s) {
  switch (s) {
    case PipelineSchedule::GPipe: return "gpipe";
    case PipelineSchedule::OneFOneB: return "1f1b";
    case PipelineSchedule::Interleaved: return "interleaved";
  }
  TRAINSIM_CHECK(false, "to_string: PipelineSchedule out of range");
  return "";
}


std::int64_t ModelConfig::moe_expert_capacity(std::int64_t rank_tokens) const {
  if (moe_expert_capacity_factor <= 0 || num_experts <= 0) return 0;
  // moe_utils.py get_capacity(num_tokens * topk, num_experts, capacity_factor):
  // ceil((num_tokens / num_experts) * capacity_factor), no minimum (the router passes none).
  return std::int64_t(std::ceil(double(rank_tokens * moe_router_topk) / double(num_experts) *
                                moe_expert_capacity_factor));
}

double ModelConfig::moe_expert_token_copies(std::int64_t rank_tokens) const {
  const double routed = double(rank_tokens * moe_router_topk) * moe_token_imbalance_factor;
  if (moe_expert_capacity_factor <= 0) return routed;
  // Megatron-Core router.py / moe_utils.py apply_router_token_dropping keeps at most capacity
  // copies per expert on each rank (pad_to_capacity: exactly capacity, the missing ones
  // zero-weighted padding); the busiest rank's E / EP experts receive them from EP ranks.
  const double cap = double(num_experts * moe_expert_capacity(rank_tokens));
  return moe_pad_expert_input_to_capacity ? cap : std::min(routed, cap);
}

}  // namespace trainsim
