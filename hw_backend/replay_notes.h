// The replay's notes on what the Megatron-Core layers' tasks ran (torch_executor.cpp writes
// them into the execution record; docs/validation.md "What the replay runs, per model family
// and device"): FP8 and grouped GEMMs (gemm_ops.h), multi-head latent attention and token
// dropping (core_layer.h). Each function returns one note, or a phrase of the MoE note.
//
// Internal to hw_backend/: includes LibTorch.
#pragma once

#include <cstdint>
#include <map>
#include <string>

#include <torch/torch.h>

#include "hw_backend/core_layer.h"

namespace trainsim::hw {

/// What the notes need to know of one rank's replay.
struct NoteContext {
  bool cuda = false;  ///< the replay runs on a CUDA device
  torch::Device device{torch::kCPU};
  torch::Dtype dtype = torch::kFloat32;
  std::string dtype_name;                        ///< "fp32", "bf16", "fp16"
  std::uint8_t fp8_format = 0;                   ///< ReplayModel::fp8_format (1: e4m3, else hybrid)
  std::uint8_t fp8_recipe = 0;                   ///< ModelFeatures::fp8 of the layers
  bool grouped_requested = false;                ///< a layer asks for grouped expert GEMMs
  const std::map<std::uint16_t, CoreLayerSpec>* specs = nullptr;  ///< the rank's layers
  torch::TensorOptions fopts;                    ///< the replay's floating-point tensors
  std::int64_t hidden = 0;                       ///< hidden size
  double attention_dropout = 0;
};

/// What the FP8 GEMMs of the layers ran, decided before the run.
std::string fp8_gemm_note(const NoteContext& x);
/// Whether the MoE layers' experts run as grouped GEMMs (core_layer.cpp moe_experts' test).
bool experts_grouped(const NoteContext& x);
/// How the local experts' GEMMs ran: the phrase of the MoE note.
std::string expert_gemm_phrase(const NoteContext& x);
/// What the GEMMs of the last iteration ran (gemm_ops.h counts); "" where no FP8 or grouped
/// GEMM ran at all.
std::string gemm_count_note(const NoteContext& x);
/// What AttnFwd / AttnBwd ran for multi-head latent attention.
std::string mla_note(const NoteContext& x, const CoreLayerSpec& c);
/// The token-dropping phrase of the MoE note.
std::string drop_note(const CoreLayerSpec& m);
/// What MlpFwd / MlpBwd ran for the MoE layers (`m` one of them).
std::string moe_note(const NoteContext& x, const CoreLayerSpec& m, bool token_drop);
/// How the MoE layers' tasks split (delay_wgrad_compute's held-back expert weight gradients,
/// the shared expert apart); "" where no MoE layer splits.
std::string moe_split_note(const NoteContext& x);

}  // namespace trainsim::hw
