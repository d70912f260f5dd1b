// The table of scenario keys (models/input/keys.h): one declaration per key. Names follow
// Megatron-LM's arguments (model, parallel, training) and DeepSpeed's config keys (deepspeed),
// so a user can copy them from a launch script; docs/scenario.md describes each (the
// documentation check, tests/models/input/test_key_table.cpp, keeps the two in step). The
// bounds are explained in models/input/scenario.h (ScenarioSizeLimit).
#include "models/input/keys.h"

#include "models/hardware/reliability.h"

namespace trainsim::input {

namespace {

constexpr std::int64_t k2p16 = std::int64_t(1) << 16, k2p20 = std::int64_t(1) << 20,
                       k2p22 = std::int64_t(1) << 22, k2p24 = std::int64_t(1) << 24,
                       k2p30 = std::int64_t(1) << 30, k2p50 = std::int64_t(1) << 50;
constexpr std::int64_t kLayers = 0xFFFE;  // the schedule graph numbers layers in 16 bits

// ---- builders: one per type
ScenarioKey base(std::string path, FieldRef f, KeyType type, std::string unit, std::string doc) {
  ScenarioKey k;
  k.path = std::move(path);
  k.field = f;
  k.type = type;
  k.unit = std::move(unit);
  k.doc = std::move(doc);
  return k;
}
/// An integer with a default (nullopt: the member keeps its "absent" value).
ScenarioKey int_key(std::string path, FieldRef f, std::optional<double> def, std::int64_t min,
                    std::int64_t max, std::string unit, std::string doc) {
  ScenarioKey k = base(std::move(path), f, KeyType::Int, std::move(unit), std::move(doc));
  k.default_value = def;
  k.min = min;
  k.max = max;
  return k;
}
ScenarioKey required_int(std::string path, FieldRef f, std::int64_t max, std::string unit,
                         std::string doc) {
  ScenarioKey k = int_key(std::move(path), f, std::nullopt, 1, max, std::move(unit), std::move(doc));
  k.required = true;
  return k;
}
/// DeepSpeed's sizes: the float form 5e8 accepted when integral.
ScenarioKey size_key(std::string path, FieldRef f, double def, std::int64_t min, std::string doc) {
  ScenarioKey k = int_key(std::move(path), f, def, min, k2p50, "elements", std::move(doc));
  k.type = KeyType::IntOrFloat;
  return k;
}
ScenarioKey bool_key(std::string path, FieldRef f, std::optional<bool> def, std::string doc) {
  ScenarioKey k = base(std::move(path), f, KeyType::Bool, "", std::move(doc));
  if (def) k.default_value = *def ? 1 : 0;
  return k;
}
ScenarioKey number_key(std::string path, FieldRef f, double def, double lo, double hi,
                       bool hi_open, std::string doc) {
  ScenarioKey k = base(std::move(path), f, KeyType::Number, "", std::move(doc));
  k.default_value = def;
  k.lo = lo;
  k.hi = hi;
  k.hi_open = hi_open;
  return k;
}
ScenarioKey enum_key(std::string path, FieldRef f, std::vector<KeyChoice> choices,
                     std::optional<int> def, std::string doc) {
  ScenarioKey k = base(std::move(path), f, KeyType::Enum, "", std::move(doc));
  k.choices = std::move(choices);
  if (def) k.default_value = *def;
  return k;
}
/// Read by its section's reader (models/input/sections.cpp), which the doc line names; the
/// choices, where given, are the names that reader accepts, in its order.
ScenarioKey custom_key(std::string path, FieldRef f, std::string doc, bool list_ok = false,
                       std::vector<KeyChoice> choices = {}) {
  ScenarioKey k = base(std::move(path), f, KeyType::Custom, "", std::move(doc));
  k.list_ok = list_ok;
  k.choices = std::move(choices);
  return k;
}
/// A launch-line argument that changes neither time nor memory: accepted, listed as ignored.
ScenarioKey ignored(std::string path, std::string why) {
  ScenarioKey k = base(std::move(path), FieldRef{}, KeyType::Any, "", "");
  k.list_ok = true;
  k.ignored = std::move(why);
  return k;
}
template <typename E>
KeyChoice choice(const char* name, E value) {
  return {name, int(value)};
}

#define TOP(m) #m, field<&Scenario::m>()
#define M(m) "model." #m, field<&Scenario::model, &ModelConfig::m>()
#define P(m) "parallel." #m, field<&Scenario::parallel, &ParallelConfig::m>()
#define Z(m) "deepspeed.zero_optimization." #m, field<&Scenario::zero, &ZeroConfig::m>()
#define OFF(m)                                                       \
  "deepspeed.zero_optimization.offload_optimizer." #m,               \
      field<&Scenario::zero, &ZeroConfig::offload_optimizer, &OffloadOptimizerConfig::m>()
#define C(m) "cluster." #m, field<&Scenario::cluster, &ClusterConfig::m>()
#define V(m) "variability." #m, field<&Scenario::variability, &VariabilityConfig::m>()
#define T(m) "training." #m, field<&Scenario::training, &TrainingConfig::m>()
#define CK(m) "training.checkpoint." #m, \
              field<&Scenario::training, &TrainingConfig::checkpoint, &CheckpointConfig::m>()

void add_top_and_model_shape(std::vector<ScenarioKey>& v) {
  using A = AttentionBackend;
  v.push_back(custom_key(TOP(name), "reported as the summary's name; absent: the file's stem"));
  v.push_back(enum_key(TOP(runtime), {choice("megatron-2021", Runtime::Megatron2021),
                                      choice("megatron-core", Runtime::MegatronCore)},
                       int(Runtime::Megatron2021), "the runtime whose kernels the scenario assumes"));
  v.push_back(custom_key("nccl_version", FieldRef{}, "the NCCL release whose tuning model applies"));
  v.push_back(bool_key(TOP(nccl_nvls_enable), true, "NCCL's NVLS algorithms (NCCL_NVLS_ENABLE)"));
  v.push_back(bool_key(TOP(host_model), true,
                       "the host timeline: issue costs, launch queue, synchronisation points"));
  v.push_back(int_key(TOP(timing_log_level), 0, 0, 2, "",
                      "Megatron --timing-log-level: timers that synchronise (host_model on)"));
  v.push_back(required_int(M(num_layers), kLayers, "layers", "transformer layers"));
  v.push_back(required_int(M(hidden_size), k2p20, "", "hidden size"));
  v.push_back(required_int(M(num_attention_heads), k2p16, "", "attention heads"));
  v.push_back(required_int(M(seq_length), k2p22, "tokens", "sequence length"));
  v.push_back(required_int(M(padded_vocab_size), k2p24, "tokens", "padded vocabulary"));
  v.push_back(int_key(M(ffn_hidden_size), std::nullopt, 1, k2p22, "", "MLP size; absent: 4 x hidden"));
  v.push_back(int_key(M(kv_channels), std::nullopt, 1, k2p16, "", "head dimension; absent: hidden / heads"));
  v.push_back(bool_key(M(untie_embeddings_and_output_weights), false, "a separate output layer"));
  v.push_back(int_key(M(num_query_groups), std::nullopt, 1, k2p16, "groups", "GQA key/value groups"));
  v.push_back(custom_key(M(group_query_attention), "GQA; absent: whether num_query_groups is given"));
  v.push_back(bool_key(M(swiglu), false, "gated SiLU MLP"));
  v.push_back(bool_key(M(quick_geglu), false, "gated quick-GELU MLP (GPT-OSS)"));
  v.push_back(number_key(M(activation_func_clamp_value), 0, 0, 1e6, false,
                         "quick_geglu's clamp of fc1's output; 0 = none"));
  v.push_back(number_key(M(glu_linear_offset), 0, -1e6, 1e6, false,
                         "offset added to a gated MLP's linear half"));
  v.push_back(enum_key(M(normalization), {choice("LayerNorm", Normalization::LayerNorm),
                                          choice("RMSNorm", Normalization::RMSNorm)},
                       int(Normalization::LayerNorm), "the norm layers"));
  v.push_back(enum_key(M(position_embedding_type),
                       {choice("learned_absolute", PositionEmbedding::LearnedAbsolute),
                        choice("rope", PositionEmbedding::Rope)},
                       int(PositionEmbedding::LearnedAbsolute), "position embedding"));
  v.push_back(bool_key(M(add_bias_linear), true, "biases on the linear layers"));
  v.push_back(bool_key(M(add_qkv_bias), false, "biases on the QKV projection alone"));
  v.push_back(number_key(M(hidden_dropout), 0.1, 0, 1, true, "hidden dropout probability"));
  v.push_back(number_key(M(attention_dropout), 0.1, 0, 1, true, "attention dropout probability"));
  ScenarioKey window = custom_key(M(window_size), "sliding-window span, or [left, 0]", true);
  window.default_value = 0;
  window.max = k2p22;
  window.unit = "tokens";
  v.push_back(window);
  v.push_back(int_key(M(window_attn_skip_freq), 0, 0, kLayers, "layers", "every N-th layer attends fully"));
  v.push_back(enum_key(M(attention_backend),
                       {choice("unfused", A::Unfused), choice("fused", A::Fused),
                        choice("flash", A::Flash), choice("auto", A::Flash)},
                       int(A::Unfused), "the attention kernel"));
  v.push_back(custom_key("model.use_flash_attn", FieldRef{}, "true: attention_backend flash"));
}

void add_model_mla_moe(std::vector<ScenarioKey>& v) {
  v.push_back(bool_key(M(multi_latent_attention), false, "multi-head latent attention (MLA)"));
  v.push_back(int_key(M(q_lora_rank), std::nullopt, 1, k2p20, "", "MLA query latent; absent: none"));
  v.push_back(int_key(M(kv_lora_rank), 32, 1, k2p20, "", "MLA key/value latent"));
  v.push_back(int_key(M(qk_head_dim), 128, 1, k2p16, "", "MLA query/key head dimension without RoPE"));
  v.push_back(int_key(M(qk_pos_emb_head_dim), 64, 1, k2p16, "", "MLA RoPE head dimension"));
  v.push_back(int_key(M(v_head_dim), 128, 1, k2p16, "", "MLA value head dimension"));
  v.push_back(bool_key(M(qk_layernorm), false, "norms on the query and key (or MLA's latents)"));
  v.push_back(int_key(M(mtp_num_layers), 0, 0, kLayers, "layers",
                      "multi-token prediction layers on the last stage"));
  v.push_back(custom_key("model.mla_down_proj_fusion", FieldRef{}, "not modelled: only false"));
  v.push_back(int_key(M(num_experts), 0, 0, k2p16, "experts", "experts per MoE layer; 0: dense"));
  v.push_back(int_key(M(moe_router_topk), 2, 1, k2p16, "experts", "experts per token"));
  v.push_back(int_key(M(moe_ffn_hidden_size), std::nullopt, 1, k2p22, "", "expert MLP size; absent: ffn_hidden_size"));
  v.push_back(int_key(M(moe_shared_expert_intermediate_size), 0, 0, k2p22, "", "shared expert size; 0: none"));
  v.push_back(bool_key(M(moe_shared_expert_overlap), false,
                       "shared expert beside the token dispatch / combine"));
  ScenarioKey freq = custom_key(M(moe_layer_freq), "MoE layer frequency, list or pattern", true);
  freq.min = 1;
  freq.max = kLayers;
  freq.default_value = 1;
  freq.unit = "layers";
  v.push_back(freq);
  v.push_back(enum_key(M(moe_token_dispatcher_type),
                       {choice("alltoall", MoeDispatcher::AllToAll),
                        choice("allgather", MoeDispatcher::AllGather),
                        choice("flex", MoeDispatcher::Flex)},
                       int(MoeDispatcher::AllToAll), "the token exchange"));
  v.push_back(bool_key(M(moe_enable_deepep), false, "DeepEP kernels (dispatcher flex)"));
  v.push_back(enum_key(M(moe_flex_dispatcher_backend),
                       {choice("deepep", FlexBackend::DeepEP),
                        choice("hybridep", FlexBackend::HybridEP)},
                       int(FlexBackend::DeepEP), "the flex dispatcher's kernels"));
  v.push_back(int_key(M(moe_router_num_groups), 0, 0, k2p16, "groups",
                      "group-limited routing's expert groups; 0: none"));
  v.push_back(int_key(M(moe_router_group_topk), 0, 0, k2p16, "groups",
                      "groups a token's experts come from"));
  v.push_back(bool_key(M(moe_grouped_gemm), false, "grouped expert GEMMs"));
  v.push_back(number_key(M(moe_token_imbalance_factor), 1.0, 1, 1024, false,
                         "tokens of the busiest expert rank / the mean"));
  // Token dropping (Megatron-Core moe_utils.py get_capacity / apply_router_token_dropping;
  // docs/scenario.md): absent = dropless.
  ScenarioKey cf = number_key(M(moe_expert_capacity_factor), 0, 0, 1024, false,
                              "expert capacity / the balanced share; absent: dropless");
  cf.default_value.reset();
  cf.lo_open = true;
  v.push_back(cf);
  v.push_back(bool_key(M(moe_pad_expert_input_to_capacity), false,
                       "every expert processes its full capacity (needs the capacity factor)"));
  v.push_back(enum_key(M(moe_token_drop_policy),
                       {choice("probs", MoeTokenDropPolicy::Probs),
                        choice("position", MoeTokenDropPolicy::Position)},
                       int(MoeTokenDropPolicy::Probs),
                       "which copies drop, not how many: same time and memory"));
  v.push_back(bool_key(M(moe_permute_fusion), false,
                       "TE's fused permute / unpermute; false: index_select and scatter_add_"));
  v.push_back(enum_key(M(moe_router_score_function),
                       {choice("softmax", RouterScore::Softmax),
                        choice("sigmoid", RouterScore::Sigmoid)},
                       int(RouterScore::Softmax), "the router's score function"));
  v.push_back(bool_key(M(moe_router_enable_expert_bias), false,
                       "aux-loss-free expert bias (sigmoid): its kernels"));
  v.push_back(bool_key(M(moe_router_fusion), false, "TE's fused router kernels"));
  v.push_back(number_key(M(moe_aux_loss_coeff), 0, 0, 1e9, false,
                         "load-balancing loss weight; > 0: its kernels"));
  v.push_back(number_key(M(moe_z_loss_coeff), 0, 0, 1e9, false,
                         "router z-loss weight; > 0: its kernels"));
  ScenarioKey hf = base(M(hf_config), KeyType::String, "", "a Hugging Face config.json to import");
  v.push_back(hf);
}

void add_parallel(std::vector<ScenarioKey>& v) {
  v.push_back(int_key(P(tensor_model_parallel_size), 1, 1, k2p16, "GPUs", "tensor-parallel ranks"));
  v.push_back(int_key(P(pipeline_model_parallel_size), 1, 1, k2p16, "GPUs", "pipeline stages"));
  v.push_back(required_int(P(micro_batch_size), k2p20, "sequences", "microbatch size"));
  v.push_back(required_int(P(global_batch_size), k2p30, "sequences", "global batch size"));
  v.push_back(int_key(P(num_layers_per_virtual_pipeline_stage), std::nullopt, 1, kLayers, "layers",
                      "set: the interleaved schedule"));
  v.push_back(enum_key(P(recompute_granularity),
                       {choice("full", Recompute::Full), choice("selective", Recompute::Selective)},
                       int(Recompute::None), "activation recomputation; absent: none"));
  v.push_back(custom_key(P(recompute_modules), "selective recomputation's modules", true));
  v.push_back(custom_key("parallel.recompute_method",
                         field<&Scenario::parallel, &ParallelConfig::recompute_block>(),
                         "checkpointed layers of a chunk (full recomputation)", false,
                         {{"uniform", 0}, {"block", 1}}));
  ScenarioKey rnl = custom_key(P(recompute_num_layers), "layers per checkpoint unit (full recomputation)");
  rnl.unit = "layers";
  rnl.min = 1;
  rnl.default_value = 1;
  v.push_back(rnl);
  v.push_back(bool_key(P(sequence_parallel), false, "sequence parallelism"));
  v.push_back(enum_key(P(precision), {choice("fp16", Precision::FP16), choice("bf16", Precision::BF16),
                                      choice("fp32", Precision::FP32)},
                       int(Precision::FP16), "training precision"));
  v.push_back(bool_key(P(overlap_grad_reduce), false, "gradient buckets reduced during backward"));
  v.push_back(bool_key(P(scatter_gather_tensors_in_pipeline), true, "pipeline messages split over TP"));
  ScenarioKey ddp = size_key(P(ddp_bucket_size), 40'000'000, 1, "DDP gradient bucket");
  ddp.unit = "parameters";
  v.push_back(ddp);
  v.push_back(number_key(P(clip_grad), 1.0, 0, 1e9, false, "gradient clipping; > 0 adds a norm all-reduce"));
  v.push_back(custom_key(P(pipeline_schedule), "the pipeline schedule", false,
                         {choice("1f1b", PipelineSchedule::OneFOneB),
                          choice("gpipe", PipelineSchedule::GPipe),
                          choice("interleaved", PipelineSchedule::Interleaved)}));
}

/// CUDA graphs (Megatron-Core core_v0.16.0 transformer_config.py "Cuda Graphs" and
/// arguments.py --cuda-graph-*; docs/scenario.md "CUDA graphs"); the combinations Megatron
/// refuses are refused by validate_scenario.
void add_cuda_graphs(std::vector<ScenarioKey>& v) {
  v.push_back(enum_key(P(cuda_graph_impl),
                       {choice("none", CudaGraphImpl::None), choice("local", CudaGraphImpl::Local),
                        choice("transformer_engine", CudaGraphImpl::TransformerEngine)},
                       int(CudaGraphImpl::None), "CUDA graph capture: one launch per region"));
  v.push_back(bool_key(P(enable_cuda_graph), false, "deprecated: cuda_graph_impl local"));
  v.push_back(bool_key(P(external_cuda_graph), false,
                       "deprecated: cuda_graph_impl transformer_engine"));
  v.push_back(custom_key(P(cuda_graph_scope), "the captured parts of each layer; absent: full",
                         true));
  v.push_back(ignored("parallel.cuda_graph_warmup_steps",
                      "eager iterations before capture: not in a steady-state iteration"));
  v.push_back(ignored("parallel.cuda_graph_retain_backward_graph",
                      "backward captured with retain_graph: same kernels and buffers"));
  v.push_back(ignored("parallel.cuda_graph_use_single_mempool",
                      "one memory pool for all graphs: the static buffers counted are the same"));
}

void add_parallel_core(std::vector<ScenarioKey>& v) {
  v.push_back(int_key(P(context_parallel_size), 1, 1, k2p16, "GPUs", "context-parallel ranks"));
  v.push_back(int_key(P(expert_model_parallel_size), 1, 1, k2p16, "GPUs", "expert-parallel ranks"));
  v.push_back(int_key(P(expert_tensor_parallel_size), std::nullopt, 1, k2p16, "GPUs",
                      "expert tensor-parallel ranks; absent: the TP size"));
  // At least 1: Megatron-Core's TransformerConfig.__post_init__ refuses an empty first or
  // last stage ("num_layers_in_first_pipeline_stage must be larger than 0").
  v.push_back(int_key(P(decoder_first_pipeline_num_layers), std::nullopt, 1, kLayers, "layers",
                      "layers of the first stage"));
  v.push_back(int_key(P(decoder_last_pipeline_num_layers), std::nullopt, 1, kLayers, "layers",
                      "layers of the last stage"));
  v.push_back(base(P(pipeline_model_parallel_layout), KeyType::String, "",
                   "Megatron-Core's hand-written layout string; sets the virtual stages"));
  v.push_back(bool_key(P(account_for_embedding_in_pipeline_split), false, "embedding counts as a layer"));
  v.push_back(bool_key(P(account_for_loss_in_pipeline_split), false, "loss counts as a layer"));
  v.push_back(bool_key(P(use_distributed_optimizer), false, "Megatron-Core's distributed optimizer"));
  v.push_back(bool_key(P(overlap_param_gather), false, "parameter all-gather overlapped"));
  v.push_back(bool_key(P(tp_comm_overlap), false, "TP communication inside the GEMMs"));
  v.push_back(bool_key(P(overlap_moe_expert_parallel_comm), false,
                       "combined 1F1B: EP all-to-all beside another microbatch's compute"));
  v.push_back(bool_key(P(delay_wgrad_compute), false,
                       "expert wgrad GEMMs after the other microbatch's dispatch"));
  v.push_back(custom_key("parallel.tp_comm_overlap_rs_method",
                         field<&Scenario::parallel, &ParallelConfig::tp_comm_overlap_rs_ring>(),
                         "the overlap's forward reduce-scatters", false,
                         {{"pipeline", 0}, {"ring_exchange", 1}}));
  v.push_back(bool_key(P(cpu_offloading), false, "Megatron-Core activation CPU offloading"));
  v.push_back(int_key(P(cpu_offloading_num_layers), 0, 0, kLayers, "layers",
                      "layers whose activations are offloaded (cpu_offloading)"));
  v.push_back(bool_key(P(cpu_offloading_activations), true, "offload the layers' activations"));
  v.push_back(bool_key(P(cpu_offloading_weights), false, "offload the layers' weights (refused)"));
  v.push_back(bool_key(P(use_megatron_fsdp), false, "Megatron FSDP"));
  v.push_back(bool_key(P(use_torch_fsdp2), false, "PyTorch FSDP2"));
  v.push_back(int_key(P(fsdp_sharding_group_size), std::nullopt, 1, k2p20, "GPUs", "FSDP group; absent: DP x CP"));
  v.push_back(enum_key(P(fp8), {choice("e4m3", Fp8Format::E4M3), choice("hybrid", Fp8Format::Hybrid)},
                       int(Fp8Format::None), "FP8 format; absent: no FP8"));
  v.push_back(custom_key(P(fp8_recipe), "FP8 scaling recipe", false,
                         {choice("delayed", Fp8Recipe::Delayed),
                          choice("tensorwise", Fp8Recipe::Tensorwise),
                          choice("mxfp8", Fp8Recipe::Mxfp8),
                          choice("blockwise", Fp8Recipe::Blockwise)}));
  v.push_back(bool_key(P(fp8_param_gather), false, "weights kept and gathered in FP8"));
  v.push_back(bool_key(P(grad_reduce_in_fp32), std::nullopt, "fp32 gradient buffer; absent: by precision"));
  add_cuda_graphs(v);
}

void add_deepspeed_cluster(std::vector<ScenarioKey>& v) {
  v.push_back(custom_key(Z(stage), "ZeRO stage 0-3"));  // an int member: FieldKind::Int32
  v.push_back(size_key(Z(reduce_bucket_size), 500'000'000, 1, "gradient bucket"));
  v.push_back(size_key(Z(allgather_bucket_size), 500'000'000, 1, "accepted, not used by the model"));
  v.push_back(bool_key(Z(overlap_comm), true, "reduce-scatter during backward"));
  v.push_back(size_key(Z(stage3_prefetch_bucket_size), 50'000'000, 1, "ZeRO-3 prefetch"));
  v.push_back(size_key(Z(stage3_max_live_parameters), 1'000'000'000, 1, "ZeRO-3 gathered limit"));
  v.push_back(size_key(Z(stage3_param_persistence_threshold), 100'000, 0, "ZeRO-3 persistent tensors"));
  v.push_back(size_key(Z(stage3_max_reuse_distance), 1'000'000'000, 0, "ZeRO-3 reuse distance"));
  v.push_back(size_key(Z(sub_group_size), 1'000'000'000, 1, "optimizer sub-group"));
  v.push_back(custom_key("deepspeed.zero_optimization.offload_optimizer.device",
                         field<&Scenario::zero, &ZeroConfig::offload_optimizer,
                               &OffloadOptimizerConfig::enabled>(),
                         "the optimizer on the CPU", false, {{"cpu", 1}, {"none", 0}}));
  v.push_back(bool_key(OFF(pin_memory), true, "accepted, not used by the model"));
  v.push_back(custom_key(OFF(ratio), "Twin-Flow CPU fraction, or auto"));
  // One of the two is required (read_cluster_and_simulation): a catalog name or a file.
  v.push_back(base(C(system), KeyType::String, "", "hardware catalog system"));
  v.push_back(base(C(system_file), KeyType::String, "",
                   "a cluster file (docs/cluster.md), relative to the scenario, instead of system"));
  v.push_back(required_int(C(nodes), k2p20, "nodes", "nodes"));
  v.push_back(int_key(C(gpus_per_node), std::nullopt, 1, k2p16, "GPUs", "GPUs per node; absent: the system's"));
  v.push_back(custom_key("simulation.fold", FieldRef{}, "auto, true or false"));
}

/// A number >= 0 (lo_open: > 0) with a unit; `def` nullopt: absent keeps the member's 0.
ScenarioKey amount_key(std::string path, FieldRef f, std::optional<double> def, bool lo_open,
                       std::string unit, std::string doc) {
  ScenarioKey k = number_key(std::move(path), f, 0, 0, 1e30, false, std::move(doc));
  k.default_value = def;
  k.lo_open = lo_open;
  k.unit = std::move(unit);
  return k;
}

/// The run as a whole (trainsim forecast, docs/forecast.md): length, price, failures and
/// checkpoints. Megatron-LM's names where it has one (--train-iters, --train-samples,
/// --save-interval, --async-save); defaults from the reliability catalog, each with its source
/// (models/hardware/reliability.h).
void add_training(std::vector<ScenarioKey>& v) {
  namespace rel = reliability;
  v.push_back(amount_key(T(train_tokens), std::nullopt, true, "tokens",
                         "tokens the run trains on (or train_iters / train_samples)"));
  v.push_back(int_key(T(train_iters), std::nullopt, 1, k2p50, "steps", "Megatron --train-iters"));
  v.push_back(int_key(T(train_samples), std::nullopt, 1, k2p50, "sequences",
                      "Megatron --train-samples"));
  v.push_back(amount_key(T(gpu_hour_usd), std::nullopt, true, "USD", "price of one GPU-hour; absent: no cost"));
  v.push_back(amount_key(T(gpu_failures_per_h), rel::kGpuFailuresPerHour, false, "1/h",
                         "interruptions per GPU-hour (Llama 3 Table 5)"));
  v.push_back(amount_key(T(node_failures_per_h), rel::kNodeFailuresPerHour, false, "1/h",
                         "interruptions per node-hour (Llama 3 Table 5)"));
  v.push_back(amount_key(T(link_failures_per_h), rel::kLinkFailuresPerHour, false, "1/h",
                         "interruptions per NIC-link-hour (Llama 3 Table 5)"));
  v.push_back(amount_key(T(mttf_h), std::nullopt, true, "h",
                         "the job's mean time to failure, instead of the rates"));
  v.push_back(amount_key(T(restart_s), rel::kRestartS, false, "s",
                         "interruption to running again, before the load (assumed)"));
  ScenarioKey save_interval = custom_key("training.save_interval", FieldRef{},
                                         "Megatron --save-interval: checkpoint.interval_steps");
  v.push_back(save_interval);
  v.push_back(amount_key(CK(write_bw_bytes_per_s), rel::kStorageWriteBwBytesPerS, true, "B/s",
                         "storage write bandwidth, whole cluster (Llama 3: Tectonic)"));
  v.push_back(amount_key(CK(read_bw_bytes_per_s), rel::kStorageReadBwBytesPerS, true, "B/s",
                         "storage read bandwidth, whole cluster (Llama 3: Tectonic)"));
  v.push_back(bool_key(CK(async), false, "Megatron --async-save: only the host copy blocks"));
  ScenarioKey interval = custom_key(CK(interval_steps), "steps between saves, or auto (--save-interval)");
  interval.min = 1;
  interval.unit = "steps";
  v.push_back(interval);
}

/// More of them, as NVIDIA's launch scripts and DeepSpeed configs write them (`trainsim
/// import-megatron` / `import-deepspeed`, models/input/launch_import.h; a --no-NAME form of an
/// ignored argument is ignored too), and the environment variables of a launch
/// (`environment.NAME`, the variable's name in lower case).
void add_ignored_launch(std::vector<ScenarioKey>& v, const std::string& opt,
                        const std::string& sched, const std::string& log,
                        const std::string& data) {
  for (const char* k : {"lr_decay_samples", "lr_warmup_samples", "decoupled_lr", "decoupled_min_lr"})
    v.push_back(ignored(std::string("training.") + k, sched));
  for (const char* k : {"log_throughput", "log_timers_to_tensorboard", "log_memory_to_tensorboard",
                        "log_validation_ppl_to_tensorboard", "wandb_exp_name", "wandb_save_dir",
                        "ckpt_format", "save_optim", "save_rng", "load_optim", "load_rng",
                        "use_checkpoint_args", "exit_on_missing_checkpoint", "profile",
                        "profile_step_start", "profile_step_end", "use_pytorch_profiler",
                        "distributed_timeout_minutes", "exit_duration_in_mins", "exit_interval",
                        "rerun_mode"})
    v.push_back(ignored(std::string("training.") + k, log));
  for (const char* k : {"mock_data", "data_cache_path", "mmap_bin_files",
                        "create_attention_mask_in_dataloader", "tiktoken_pattern",
                        "dataloader_type"})
    v.push_back(ignored(std::string("training.") + k, data));
  v.push_back(ignored("training.distributed_backend",
                      "the process-group backend's name: trainsim's collectives are NCCL's"));
  v.push_back(ignored("training.manual_gc",
                      "when Python collects garbage: trainsim models no host-side pauses"));
  v.push_back(ignored("training.manual_gc_interval",
                      "when Python collects garbage: trainsim models no host-side pauses"));
  v.push_back(ignored("model.max_position_embeddings",
                      "the position table's capacity: trainsim sizes a learned table by "
                      "seq_length, RoPE has none"));
  v.push_back(ignored("model.rotary_base", "RoPE's frequency base: the same kernel and work"));
  v.push_back(ignored("model.apply_layernorm_1p",
                      "a norm weight stored as 1 + w: the same kernel and memory"));
  for (const char* k : {"fp8_amax_history_len", "fp8_amax_compute_algo", "fp8_margin", "fp8_interval"})
    v.push_back(ignored(std::string("parallel.") + k,
                        "FP8 delayed scaling's bookkeeping: a few scalars per tensor (the "
                        "recipe itself is fp8_recipe)"));
  v.push_back(ignored("environment.cuda_device_max_connections",
                      "one hardware queue per stream, which Megatron-LM needs (1) for its TP "
                      "and sequence-parallel overlap ordering: trainsim's streams run in that order"));
  v.push_back(ignored("environment.cuda_visible_devices",
                      "which local GPUs a process sees: the cluster is the scenario's"));
  for (const char* k : {"nccl_debug", "nccl_debug_subsys", "nccl_debug_file"})
    v.push_back(ignored(std::string("environment.") + k, "NCCL's logging: " + log));
  for (const char* k : {"nccl_socket_ifname", "nccl_ib_hca", "nccl_ib_timeout", "nccl_ib_retry_cnt",
                        "nccl_async_error_handling", "torch_nccl_async_error_handling"})
    v.push_back(ignored(std::string("environment.") + k,
                        "which network devices NCCL binds and how it reports failures: the "
                        "links are the cluster's (docs/cluster.md)"));
  for (const char* k : {"zero_allow_untested_optimizer", "optimizer"})
    v.push_back(ignored(std::string("deepspeed.") + k, opt + " (Adam's states as docs/scenario.md says)"));
  v.push_back(ignored("deepspeed.scheduler", sched));
  for (const char* k : {"tensorboard", "wandb", "csv_monitor", "comms_logger", "flops_profiler"})
    v.push_back(ignored(std::string("deepspeed.") + k, log));
  v.push_back(ignored("deepspeed.prescale_gradients",
                      "whether gradients are divided by the DP size before or after the "
                      "reduction: one elementwise scale either way"));
  v.push_back(ignored("deepspeed.gradient_accumulation_steps",
                      "implied by train_batch_size / (micro batch x data-parallel ranks), "
                      "which trainsim derives"));
  for (const char* k : {"contiguous_gradients", "reduce_scatter", "allgather_partitions",
                        "round_robin_gradients", "stage3_gather_16bit_weights_on_model_save",
                        "elastic_checkpoint", "load_from_fp32_weights", "ignore_unused_parameters"})
    v.push_back(ignored(std::string("deepspeed.zero_optimization.") + k,
                        "a ZeRO implementation option trainsim's model of the stage already "
                        "assumes (DeepSpeed's defaults) or a checkpoint format"));
  (void)data;
}

/// Megatron-LM and DeepSpeed arguments that change neither time nor memory in trainsim's
/// model of one training iteration: accepted so that a launch line can be copied, and listed
/// in the summary's notes. (clip_grad is not among them: its norm all-reduce is modelled.)
void add_ignored(std::vector<ScenarioKey>& v) {
  const std::string opt = "optimizer hyper-parameter: same kernels, same states";
  const std::string sched = "learning-rate schedule: a scalar per step";
  const std::string log = "logging, evaluation or checkpoint interval: outside the iteration";
  const std::string data = "tokenizer or data input: the token counts are the scenario's";
  for (const char* k : {"lr", "min_lr", "weight_decay", "adam_beta1", "adam_beta2", "adam_eps",
                        "init_method_std"})
    v.push_back(ignored(std::string("training.") + k, opt));
  for (const char* k : {"lr_decay_style", "lr_warmup_iters", "lr_warmup_fraction",
                        "lr_decay_iters", "lr_warmup_init"})
    v.push_back(ignored(std::string("training.") + k, sched));
  for (const char* k : {"seed", "log_interval", "eval_interval", "eval_iters", "save", "load", "tensorboard_dir", "wandb_project"})
    v.push_back(ignored(std::string("training.") + k, k == std::string("seed")
                                                          ? "random seed: same work" : log));
  for (const char* k : {"tokenizer_type", "tokenizer_model", "vocab_file", "merge_file",
                        "data_path", "split", "num_workers"})
    v.push_back(ignored(std::string("training.") + k, data));
  v.push_back(ignored("model.moe_router_load_balancing_type",
                      "how the router's loss balances: tokens per expert are "
                      "moe_token_imbalance_factor's"));
  v.push_back(ignored("deepspeed.steps_per_print", log));
  v.push_back(ignored("deepspeed.wall_clock_breakdown", log));
  add_ignored_launch(v, opt, sched, log, data);
}

/// `variability:` (models/input/variability.h): the lists are read by read_variability.
void add_variability(std::vector<ScenarioKey>& v) {
  v.push_back(custom_key("variability.slow_gpus", FieldRef{},
                         "GPUs slower than the catalog: [{rank, speed}], speed in (0, 1]", true));
  v.push_back(custom_key("variability.slow_links", FieldRef{},
                         "slow links: [{node, nic | nvlink_gpu, bandwidth}], bandwidth in (0, 1]",
                         true));
  v.push_back(number_key(V(gpu_speed_cv), 0, 0, 1, false,
                         "coefficient of variation of the per-GPU lognormal speed (mean 1)"));
  v.push_back(int_key(V(seed), 0, 0, k2p50, "", "seed of gpu_speed_cv's sample"));
}

#undef TOP
#undef M
#undef P
#undef Z
#undef OFF
#undef C
#undef V
#undef T
#undef CK

}  // namespace

std::vector<ScenarioKey> shipped_scenario_keys() {
  std::vector<ScenarioKey> v;
  add_top_and_model_shape(v);
  add_model_mla_moe(v);
  add_parallel(v);
  add_parallel_core(v);
  add_deepspeed_cluster(v);
  add_training(v);
  add_ignored(v);
  add_variability(v);
  return v;
}

std::vector<KeyAlias> shipped_scenario_key_aliases() {
  return {
      {"parallel.fp8_format", "parallel.fp8", {}, "Megatron's --fp8-format spelling"},
      {"parallel.bf16", "parallel.precision", {{"true", "bf16"}, {"false", ""}}, "--bf16"},
      {"parallel.fp16", "parallel.precision", {{"true", "fp16"}, {"false", ""}}, "--fp16"},
      {"model.disable_bias_linear", "model.add_bias_linear", {{"true", "false"}, {"false", ""}},
       "--disable-bias-linear"},
      {"parallel.grad_reduce_in_bf16", "parallel.grad_reduce_in_fp32",
       {{"true", "false"}, {"false", ""}}, "--grad-reduce-in-bf16"},
      {"parallel.accumulate_allreduce_grads_in_fp32", "parallel.grad_reduce_in_fp32",
       {{"true", "true"}, {"false", ""}}, "Megatron-LM's --accumulate-allreduce-grads-in-fp32"},
      {"parallel.moe_a2a_overlap", "parallel.overlap_moe_expert_parallel_comm", {},
       "Megatron-Bridge's performance-script name"},
      {"deepspeed.train_batch_size", "parallel.global_batch_size", {}, "DeepSpeed's name"},
      {"deepspeed.train_micro_batch_size_per_gpu", "parallel.micro_batch_size", {},
       "DeepSpeed's name"},
      {"deepspeed.gradient_clipping", "parallel.clip_grad", {}, "DeepSpeed's name"},
      {"parallel.recompute_activations",
       "parallel.recompute_granularity",
       {{"true", "selective"}, {"false", ""}},
       "--recompute-activations (selective recomputation)"},
  };
}

}  // namespace trainsim::input
