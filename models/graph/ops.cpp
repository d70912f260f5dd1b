#include "models/graph/ops.h"

#include <stdexcept>
#include <string>

#include "models/errors.h"

namespace trainsim {

bool is_compute(OpKind k) {
  switch (k) {
    case OpKind::AttnFwd:
    case OpKind::MlpFwd:
    case OpKind::AttnBwd:
    case OpKind::MlpBwd:
    case OpKind::EmbedFwd:
    case OpKind::EmbedBwd:
    case OpKind::LogitsLossFwd:
    case OpKind::LogitsLossBwd:
      return true;
    case OpKind::OptimizerStepGpu:
    case OpKind::OptimizerStepCpu:
    case OpKind::AllReduce:
    case OpKind::ReduceScatter:
    case OpKind::AllGather:
    case OpKind::SendRecv:
    case OpKind::CopyH2D:
    case OpKind::CopyD2H:
    case OpKind::AllToAll:
      return false;
  }
  TRAINSIM_CHECK(false, "is_compute: OpKind out of range: " + std::to_string(static_cast<int>(k)));
}

bool is_collective(OpKind k) {
  switch (k) {
    case OpKind::AllReduce:
    case OpKind::ReduceScatter:
    case OpKind::AllGather:
    case OpKind::AllToAll:
      return true;
    case OpKind::AttnFwd:
    case OpKind::MlpFwd:
    case OpKind::AttnBwd:
    case OpKind::MlpBwd:
    case OpKind::EmbedFwd:
    case OpKind::EmbedBwd:
    case OpKind::LogitsLossFwd:
    case OpKind::LogitsLossBwd:
    case OpKind::OptimizerStepGpu:
    case OpKind::OptimizerStepCpu:
    case OpKind::SendRecv:  // point-to-point, not a collective
    case OpKind::CopyH2D:
    case OpKind::CopyD2H:
      return false;
  }
  TRAINSIM_CHECK(false,
                 "is_collective: OpKind out of range: " + std::to_string(static_cast<int>(k)));
}

const char* to_string(OpKind k) {
  switch (k) {
    case OpKind::AttnFwd: return "attn_fwd";
    case OpKind::MlpFwd: return "mlp_fwd";
    case OpKind::AttnBwd: return "attn_bwd";
    case OpKind::MlpBwd: return "mlp_bwd";
    case OpKind::EmbedFwd: return "embed_fwd";
    case OpKind::EmbedBwd: return "embed_bwd";
    case OpKind::LogitsLossFwd: return "logits_loss_fwd";
    case OpKind::LogitsLossBwd: return "logits_loss_bwd";
    case OpKind::OptimizerStepGpu: return "optimizer_step_gpu";
    case OpKind::OptimizerStepCpu: return "optimizer_step_cpu";
    case OpKind::AllReduce: return "all_reduce";
    case OpKind::ReduceScatter: return "reduce_scatter";
    case OpKind::AllGather: return "all_gather";
    case OpKind::SendRecv: return "send_recv";
    case OpKind::CopyH2D: return "copy_h2d";
    case OpKind::CopyD2H: return "copy_d2h";
    case OpKind::AllToAll: return "all_to_all";
  }
  TRAINSIM_CHECK(false, "to_string: OpKind out of range: " + std::to_string(static_cast<int>(k)));
}

const char* to_string(GroupKind g) {
  switch (g) {
    case GroupKind::None: return "none";
    case GroupKind::Tensor: return "tensor";
    case GroupKind::Pipeline: return "pipeline";
    case GroupKind::Data: return "data";
    case GroupKind::Embedding: return "embedding";
    case GroupKind::Context: return "context";
    case GroupKind::Expert: return "expert";
    case GroupKind::ModelParallel: return "model_parallel";
  }
  TRAINSIM_CHECK(false,
                 "to_string: GroupKind out of range: " + std::to_string(static_cast<int>(g)));
}

}  // namespace trainsim
