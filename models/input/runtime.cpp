// The table of runtime_spec (models/input/runtime.h): one RuntimeSpec per Runtime, with the
// sources of each difference beside it.
#include "models/input/runtime.h"

#include <stdexcept>

#include "models/errors.h"

namespace trainsim {
namespace {

RuntimeSpec megatron_2021() {
  RuntimeSpec s;
  s.runtime = Runtime::Megatron2021;
  s.name = "megatron-2021";
  s.kernels = KernelLists::Megatron2021;
  s.activation_terms = ActivationTerms::Korthikanti;
  s.model_flops = ModelFlopsCount::Korthikanti;
  s.fused_attention_kernels = false;      // baddbmm, FusedScaleMaskSoftmax, bmm only
  s.transformer_engine_fp8 = false;       // no FP8
  s.tp_comm_overlap_userbuffers = false;  // no userbuffers
  // megatron/schedules.py (2021) forward_backward_pipelining_with_interleaving: its
  // send_forward_recv_forward / send_backward_recv_backward /
  // send_forward_backward_recv_forward_backward calls (pipeline_schedule.h).
  s.batched_interleaved_p2p = true;
  s.finalize_grads_tp_allreduce = false;  // DistributedDataParallel.allreduce_gradients only
  s.deepspeed_zero_sharding = true;       // ZeRO from DeepSpeed; no distributed optimizer
  s.min_interleaved_pipeline_stages = 3;  // megatron/arguments.py asserts pp > 2
  s.megatron_core_features = false;
  return s;
}

RuntimeSpec megatron_core() {
  RuntimeSpec s;
  s.runtime = Runtime::MegatronCore;
  s.name = "megatron-core";
  s.kernels = KernelLists::TransformerEngine;
  s.activation_terms = ActivationTerms::TransformerEngine;
  s.model_flops = ModelFlopsCount::MegatronCore;
  s.fused_attention_kernels = true;       // TE DotProductAttention (cuDNN / flash)
  s.transformer_engine_fp8 = true;
  s.tp_comm_overlap_userbuffers = true;
  s.batched_interleaved_p2p = false;      // megatron/core/pipeline_parallel/p2p_communication.py
  s.finalize_grads_tp_allreduce = true;   // finalize_model_grads.py
  s.deepspeed_zero_sharding = false;      // distributed optimizer or FSDP
  s.min_interleaved_pipeline_stages = 2;
  s.megatron_core_features = true;
  return s;
}

}  // namespace

const RuntimeSpec& runtime_spec(Runtime runtime) {
  static const RuntimeSpec k2021 = megatron_2021(), kCore = megatron_core();
  switch (runtime) {
    case Runtime::Megatron2021: return k2021;
    case Runtime::MegatronCore: return kCore;
  }
  TRAINSIM_CHECK(false, "runtime_spec: Runtime out of range");
}

}  // namespace trainsim
