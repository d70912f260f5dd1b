// validate_scenario's mixture-of-experts and CUDA graph checks (models/input/validate_checks.h).
#include "models/input/validate_checks.h"

#include <sstream>
#include <string>

#include "models/input/keys.h"
#include "models/input/runtime.h"
#include "models/input/scenario.h"

namespace trainsim::validate_detail {

/// Token dropping (docs/scenario.md): Megatron-Core's TransformerConfig __post_init__ refuses
/// moe_pad_expert_input_to_capacity without moe_expert_capacity_factor; a capacity factor on
/// a dense model has no experts to cap (the key table keeps the factor above 0).
void check_moe_token_dropping(const Scenario& s, const FailFn& fail) {
  const ModelConfig& m = s.model;
  if (m.moe_expert_capacity_factor > 0 && !m.is_moe()) {
    std::ostringstream os;
    os << key_of(&ModelConfig::moe_expert_capacity_factor) << " (" << m.moe_expert_capacity_factor
       << ") needs a mixture-of-experts model (model.num_experts > 0)";
    fail(os.str());
  }
  // transformer_config.py: "Expert bias for aux-loss-free routing only supports sigmoid score
  // function."
  if (m.moe_router_enable_expert_bias && m.moe_router_score_function != RouterScore::Sigmoid)
    fail(kv_bool(key_of(&ModelConfig::moe_router_enable_expert_bias), true) + " needs " +
         key_of(&ModelConfig::moe_router_score_function) +
         " sigmoid (Megatron-Core: \"Expert bias for aux-loss-free routing only supports "
         "sigmoid score function\"); it is softmax");
  if (m.moe_pad_expert_input_to_capacity && m.moe_expert_capacity_factor <= 0)
    fail(kv_bool(key_of(&ModelConfig::moe_pad_expert_input_to_capacity), true) +
         " needs " + key_of(&ModelConfig::moe_expert_capacity_factor) +
         " (Megatron-Core pads each expert's input to its capacity; absent: dropless)");
}

/// Multi-token prediction (Megatron-Core multi_token_prediction.py) and the flex dispatcher
/// (token_dispatcher.py MoEFlexTokenDispatcher; transformer_config.py: DeepEP "is only
/// supported with flex token dispatcher"; flex runs moe_flex_dispatcher_backend, DeepEP by
/// default). The MTP layers' indices follow the decoder's, in the last virtual stage.
void check_mtp_and_flex(Scenario& s, const FailFn& fail) {
  const ModelConfig& m = s.model;
  ParallelConfig& p = s.parallel;
  const std::string mtp = kv(key_of(&ModelConfig::mtp_num_layers), m.mtp_num_layers);
  if (m.mtp_num_layers > 0 && (s.zero.stage == 3 || p.uses_fsdp()))
    fail(mtp + " with ZeRO-3 / FSDP: the sharded parameter fetches of the MTP layers are not "
         "modelled; use the distributed optimizer");
  p.mtp_first_layer = m.num_layers;
  p.mtp_layers = m.mtp_num_layers;
  const bool flex = m.moe_token_dispatcher_type == MoeDispatcher::Flex;
  const bool hybrid = m.moe_flex_dispatcher_backend == FlexBackend::HybridEP;
  // Megatron-Core core_r0.15 transformer_config.py: --moe-enable-deepep (deprecated) sets the
  // backend to deepep and refuses hybridep beside it; the flex dispatcher runs the backend,
  // deepep by default.
  if (m.moe_enable_deepep && !flex)
    fail(kv_bool(key_of(&ModelConfig::moe_enable_deepep), true) +
         " needs model.moe_token_dispatcher_type: flex (Megatron-Core: \"DeepEP backend is only "
         "supported with flex token dispatcher\")");
  if (m.moe_enable_deepep && hybrid)
    fail(kv_bool(key_of(&ModelConfig::moe_enable_deepep), true) +
         " with model.moe_flex_dispatcher_backend (hybridep) (Megatron-Core: \"Only one backend "
         "is supported for flex token dispatcher\")");
  if (hybrid && !flex)
    fail("model.moe_flex_dispatcher_backend (hybridep) needs model.moe_token_dispatcher_type: "
         "flex (Megatron-Core reads the backend for the flex dispatcher alone; trainsim refuses "
         "it elsewhere)");
  if (flex &&
      (!m.is_moe() || p.expert_tensor_parallel_size > 1 || m.moe_expert_capacity_factor > 0))
    fail("model.moe_token_dispatcher_type (flex) needs a mixture-of-experts model with "
         "parallel.expert_tensor_parallel_size 1 and no token dropping (the DeepEP and HybridEP "
         "models are dropless, one expert rank per expert)");
  const std::int64_t groups = m.moe_router_num_groups, chosen = m.moe_router_group_topk;
  bool bad_groups = (groups > 0) != (chosen > 0);
  if (groups > 0 && chosen > 0)
    bad_groups = chosen > groups || m.num_experts % groups != 0 ||
                 m.moe_router_topk > chosen * (m.num_experts / groups);
  if (bad_groups)
    fail(kv(key_of(&ModelConfig::moe_router_num_groups), groups) + " and " +
         kv(key_of(&ModelConfig::moe_router_group_topk), chosen) +
         ": both or neither, the groups dividing model.num_experts, at most the groups chosen, "
         "and the chosen groups holding model.moe_router_topk experts");
}

/// model.moe_shared_expert_overlap (Megatron-Core transformer_config.py __post_init__): the
/// shared expert's fc1 / fc2 are issued from the alltoall (or flex) dispatcher's dispatch and
/// combine (token_dispatcher.py set_shared_experts), so it needs one of them; without a shared
/// expert (moe_shared_expert_intermediate_size 0) Megatron-Core ignores it, trainsim refuses it.
void check_shared_expert_overlap(const Scenario& s, const FailFn& fail) {
  const ModelConfig& m = s.model;
  if (!m.moe_shared_expert_overlap) return;
  const std::string key = kv_bool(key_of(&ModelConfig::moe_shared_expert_overlap), true);
  if (m.moe_shared_expert_intermediate_size <= 0)
    fail(key + " with " + kv(key_of(&ModelConfig::moe_shared_expert_intermediate_size),
                             m.moe_shared_expert_intermediate_size) +
         ": there is no shared expert to overlap (Megatron-Core's MoELayer ignores the flag "
         "then; trainsim refuses it as a likely mistake)");
  if (m.moe_token_dispatcher_type == MoeDispatcher::AllGather)
    fail(key + " with " + key_of(&ModelConfig::moe_token_dispatcher_type) +
         " (allgather): Megatron-Core: \"moe_shared_expert_overlap only works with alltoall "
         "or flex token dispatcher\"");
}

/// parallel.overlap_moe_expert_parallel_comm and delay_wgrad_compute: Megatron-Core's checks
/// (megatron/core/transformer/transformer_config.py __post_init__, Megatron-LM d98e8a6,
/// l. 3002-3082), then what trainsim's combined schedule does not model (GPipe, FSDP and
/// ZeRO-3's per-step parameter units).
void check_a2a_overlap(const Scenario& s, const FailFn& fail) {
  const ModelConfig& m = s.model;
  const ParallelConfig& p = s.parallel;
  const std::string ov = kv_bool(key_of(&ParallelConfig::overlap_moe_expert_parallel_comm), true);
  if (p.delay_wgrad_compute && !p.overlap_moe_expert_parallel_comm)
    fail(kv_bool(key_of(&ParallelConfig::delay_wgrad_compute), true) + " needs " + ov +
         " (Megatron-Core: 'overlap_moe_expert_parallel_comm must be enabled when enabling "
         "delay_wgrad_compute')");
  if (!p.overlap_moe_expert_parallel_comm) return;
  if (m.moe_shared_expert_overlap)
    fail(ov + " with " + kv_bool(key_of(&ModelConfig::moe_shared_expert_overlap), true) +
         ": Megatron-Core asks to \"Disable moe_shared_expert_overlap when enabling "
         "overlap_moe_expert_parallel_comm\"");
  if (p.expert_model_parallel_size <= 1)
    fail(ov + " with " + kv(key_of(&ParallelConfig::expert_model_parallel_size),
                            p.expert_model_parallel_size) +
         ": Megatron-Core supports it only with expert model parallelism (> 1)");
  if (m.moe_token_dispatcher_type == MoeDispatcher::AllGather)
    fail(ov + " with model.moe_token_dispatcher_type allgather: Megatron-Core supports it with "
         "the alltoall and flex dispatchers only");
  if (p.recompute_granularity == Recompute::Full)
    fail(ov + " with parallel.recompute_granularity full: Megatron-Core asks to disable full "
         "recomputation when enabling overlap_moe_expert_parallel_comm");
  if (p.recompute_modules & kRecomputeMoe)
    fail(ov + " with parallel.recompute_modules 'moe': Megatron-Core asks to disable moe in "
         "recompute_modules when enabling overlap_moe_expert_parallel_comm");
  if (p.precision == Precision::FP32)
    fail(ov + " with parallel.precision fp32: Megatron-Core supports it only with bf16 or fp16");
  if (m.mtp_num_layers > 1)
    fail(ov + " with " + kv(key_of(&ModelConfig::mtp_num_layers), m.mtp_num_layers) +
         ": \"MTP supports at most one layer when enabling overlap_moe_expert_parallel_comm\" "
         "(Megatron-Core transformer_config.py)");
  // transformer_config.py l. 3007-3011: virtual stages at pp > 1 (the interleaved schedule's
  // combined steps, models/graph/pipeline_schedule.h combined_interleaved_order).
  if (p.pipeline_model_parallel_size > 1 && p.pipeline_schedule != PipelineSchedule::Interleaved)
    fail(ov + " with " + kv(key_of(&ParallelConfig::pipeline_model_parallel_size),
                            p.pipeline_model_parallel_size) +
         " and no virtual pipeline stages (parallel.num_layers_per_virtual_pipeline_stage or "
         "a pipeline_model_parallel_layout with more stages than pipeline ranks): Megatron-Core: "
         "\"If enabling EP A2A overlap, virtual_pipeline_model_parallel_size must be specified "
         "when pipeline_model_parallel_size > 1\"");
  if (p.pipeline_schedule == PipelineSchedule::GPipe)
    fail(ov + " with parallel.pipeline_schedule gpipe: Megatron-Core runs the combined schedule "
         "in place of 1F1B (at pipeline_model_parallel_size 1, forward_backward_no_pipelining's "
         "one forward and one backward per microbatch); use 1f1b");
  if (p.uses_fsdp() || s.zero.stage > 0)
    fail(ov + " with " + (p.uses_fsdp() ? std::string("FSDP") : "deepspeed.zero_optimization") +
         ": not modelled (use Megatron-Core's distributed optimizer)");
  if (s.runtime != Runtime::MegatronCore)
    fail(ov + " needs `runtime: megatron-core`");
}

/// CUDA graphs (docs/scenario.md "CUDA graphs"): Megatron-Core core_v0.16.0
/// TransformerConfig.__post_init__ "Check cuda graph scopes" refusals, quoted; and what a
/// capture cannot hold: a device-to-host synchronisation (the dropless alltoall dispatcher's
/// token counts, token_dispatcher.py cuda_sync_point; the step timers' synchronize) inside the
/// captured region fails the capture, so the whole layer or iteration is refused there.
void check_cuda_graph_scopes(Scenario& s, const FailFn& fail) {
  const ModelConfig& m = s.model;
  ParallelConfig& p = s.parallel;
  const std::string fs = key_of(&ParallelConfig::cuda_graph_scope);
  const std::string fi = key_of(&ParallelConfig::cuda_graph_impl);
  const std::string scope = fs + " (" + cuda_graph_scope_names(p.cuda_graph_scope) + ")";
  const std::string impl = fi + " (" + to_string(p.cuda_graph_impl) + ")";
  if (p.cuda_graph_impl == CudaGraphImpl::None) {
    if (p.cuda_graph_scope != 0) fail(scope + " needs " + fi + " local or transformer_engine");
    return;
  }
  if (s.runtime != Runtime::MegatronCore)
    fail(impl + " needs `runtime: megatron-core` (the Megatron-LM of 2021 had no CUDA graphs)");
  // The EP overlap's split layer nodes: Megatron-Core core_v0.16.0 (3bec9aa)
  // transformer_config.py l. 1896-1904 (any impl; it also requires transformer_engine there) and
  // Megatron-LM d98e8a6 l. 3063-3071 (transformer_engine) refuse graphs of the moe or mlp scope.
  if (s.parallel.overlap_moe_expert_parallel_comm &&
      (p.cuda_graph_scope & (kGraphMoe | kGraphMlp)) != 0)
    fail(scope + " with " +
         kv_bool(key_of(&ParallelConfig::overlap_moe_expert_parallel_comm), true) +
         ": \"CUDA graph scope on moe and mlp is not supported with "
         "overlap_moe_expert_parallel_comm\"");
  const std::uint8_t sc = p.cuda_graph_scope;
  // "local impl doesn't currently distinguish between moe_preprocess or moe_router".
  if (p.cuda_graph_impl == CudaGraphImpl::Local && (sc & (kGraphMoeRouter | kGraphMoePreprocess)))
    p.cuda_graph_scope |= kGraphMoeRouter | kGraphMoePreprocess;
  auto has = [&](std::uint8_t bit) { return (p.cuda_graph_scope & bit) != 0; };
  if (p.cuda_graph_impl == CudaGraphImpl::TransformerEngine && has(kGraphFullIteration))
    fail(scope + " with " + impl + ": \"To use full iteration cuda graph, please use "
         "cuda_graph_impl=local\"");
  if (has(kGraphFullIteration) && (p.cuda_graph_scope & ~kGraphFullIteration))
    fail(scope + ": full_iteration captures the whole forward-backward; list it alone");
  if (has(kGraphMoe) && has(kGraphMoeRouter))
    fail(scope + ": \"cuda_graph_scope must not contain both moe and moe_router\"");
  if (has(kGraphMoePreprocess) && !has(kGraphMoeRouter))
    fail(scope + ": \"moe_preprocess cuda graph is only supported with moe_router cuda graph\"");
  if (!m.is_moe() && (has(kGraphMoe) || has(kGraphMoeRouter)))
    fail(scope + ": \"moe cuda graph is only supported for MoE\" (model.num_experts is 0)");
  if (m.is_moe() && !m.has_dense_layers() && has(kGraphMlp))
    fail(scope + ": \"mlp cuda graph is only supported for dense layers\" (every layer is MoE)");
  const bool drop_pad = m.moe_expert_capacity_factor > 0 && m.moe_pad_expert_input_to_capacity;
  if (m.is_moe() && !drop_pad && has(kGraphMoe))
    fail(scope + ": \"moe cuda graph is only supported with drop-padding MoE\" (set "
         "model.moe_expert_capacity_factor and model.moe_pad_expert_input_to_capacity)");
  if (m.is_moe() && !drop_pad && m.moe_token_dispatcher_type == MoeDispatcher::AllToAll &&
      m.moe_expert_capacity_factor > 0 && has(kGraphMoePreprocess))
    fail(scope + ": \"moe_preprocess cuda graph is not supported when there are DtoH copies "
         "and synchronizations in the preprocess step\" (a capacity factor without padding)");
  const bool whole = p.cuda_graph_scope == 0 || has(kGraphFullIteration);
  if (m.is_moe() && !drop_pad && m.moe_token_dispatcher_type == MoeDispatcher::AllToAll && whole)
    fail(scope + " captures the MoE layers' token dispatch, whose alltoall dispatcher copies "
         "the token counts to the host and synchronises (token_dispatcher.py cuda_sync_point): "
         "the capture fails; capture attn / moe_router, or drop and pad the tokens");
  if (has(kGraphFullIteration) && s.timing_log_level >= 2)
    fail(scope + " with " + kv("timing_log_level", s.timing_log_level) +
         ": the step timers synchronise inside the captured forward-backward");
  if (p.recompute_granularity == Recompute::Full && p.cuda_graph_scope != kGraphFullIteration)
    fail(scope + " with parallel.recompute_granularity full: \"full recompute is only "
         "supported with full iteration CUDA graph\"");
}

/// Selective recomputation beside graphed modules (core_v0.16.0 transformer_config.py: "The
/// recompute module should be inside or outside of the graph scope").
void check_cuda_graph_recompute(const Scenario& s, const FailFn& fail) {
  const ModelConfig& m = s.model;
  const ParallelConfig& p = s.parallel;
  if (p.cuda_graph_impl == CudaGraphImpl::None ||
      p.recompute_granularity != Recompute::Selective)
    return;
  const std::string scope = key_of(&ParallelConfig::cuda_graph_scope) + " (" +
                            cuda_graph_scope_names(p.cuda_graph_scope) + ")";
  auto has = [&](std::uint8_t bit) { return (p.cuda_graph_scope & bit) != 0; };
  auto rec = [&](std::uint8_t bit) { return (p.recompute_modules & bit) != 0; };
  const bool full = p.cuda_graph_scope == 0 || has(kGraphFullIteration);
  if (p.cuda_graph_impl == CudaGraphImpl::TransformerEngine && rec(kRecomputeMoe) &&
      has(kGraphMoeRouter))
    fail(scope + " with parallel.recompute_modules moe: \"moe recompute is not supported "
         "with moe_router CUDA graph\" (transformer_engine)");
  if (m.attention_dropout != 0 && (full || has(kGraphAttn)) && rec(kRecomputeCoreAttn))
    fail(scope + " with parallel.recompute_modules core_attn and model.attention_dropout > 0: "
         "\"attention dropout is not supported with graphed attention recomputation\"");
  if (m.hidden_dropout != 0 && (((full || has(kGraphMlp)) && rec(kRecomputeMlp)) ||
                                ((full || has(kGraphMoe)) && rec(kRecomputeMoe))))
    fail(scope + " with parallel.recompute_modules mlp / moe and model.hidden_dropout > 0: "
         "\"hidden dropout is not supported with graphed MLP/MoE recomputation\"");
}

}  // namespace trainsim::validate_detail
