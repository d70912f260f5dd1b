// The model half of the replay executor (replay.h): one rank's model state (its transformer
// blocks, the autograd state per microbatch and layer, the contiguous parameter and gradient
// buffers, the optimizer) and the work of each task kind. Where tasks run and how they are
// timed is the device loop's (device_loop.h: CPU, CUDA); how bytes reach the other ranks is the
// communication backend's (comm_backend.h: device-local copies, NCCL). Everything it needs
// from the model comes from the graph (ScheduleGraph::replay_model), not from a Scenario.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstring>
#include <limits>
#include <map>
#include <memory>
#include <set>
#include <sstream>
#include <stdexcept>

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/record_function.h>
#include <torch/torch.h>
#include <torch/version.h>

#include "hw_backend/backends.h"
#include "hw_backend/comm_backend.h"
#include "hw_backend/core_layer.h"
#include "hw_backend/device_loop.h"
#include "hw_backend/executor.h"
#include "hw_backend/gemm_ops.h"
#include "hw_backend/replay_notes.h"
#include "hw_backend/transformer_layer.h"
#include "kernels/cpu_adam.h"
#include "models/errors.h"
#include "models/precision.h"
#include "models/input/scenario.h"

namespace trainsim::hw {

std::string torch_version() { return TORCH_VERSION; }

namespace {

torch::Dtype model_dtype(bool cuda, Precision precision, const ReplayOptions& o) {
  if (cuda) return precision == Precision::BF16 ? torch::kBFloat16 : torch::kHalf;
  if (o.cpu_dtype == "fp32") return torch::kFloat32;
  if (o.cpu_dtype == "bf16") return torch::kBFloat16;
  throw InputError("replay: cpu_dtype " + o.cpu_dtype + ": expected fp32 or bf16");
}

kernels::DType kernel_dtype(torch::Dtype t) {
  if (t == torch::kFloat32) return kernels::DType::F32;
  if (t == torch::kBFloat16) return kernels::DType::BF16;
  return kernels::DType::F16;
}

const char* dtype_name(torch::Dtype t) {
  if (t == torch::kFloat32) return "fp32";
  if (t == torch::kBFloat16) return "bf16";
  return "fp16";
}

// ---------------------------------------------------------------- host issue counts
// What the host issues per task, counted through LibTorch's RecordFunction callbacks (the hooks
// the PyTorch profiler uses): top-level ATen operators (depth 0 on their thread: an eager op,
// not the ops it calls) and autograd nodes (RecordScope::BACKWARD_FUNCTION).
std::atomic<std::int64_t> g_eager_ops{0}, g_autograd_nodes{0};
thread_local int t_op_depth = 0;

std::unique_ptr<at::ObserverContext> count_start(const at::RecordFunction& fn) {
  if (t_op_depth++ == 0) {
    // Autograd nodes by scope, and by name where a build reports them as FUNCTION
    // ("MmBackward0", "torch::autograd::AccumulateGrad").
    const char* name = fn.name();
    if (fn.scope() == at::RecordScope::BACKWARD_FUNCTION ||
        (name && (std::strstr(name, "Backward") || std::strstr(name, "autograd::"))))
      g_autograd_nodes.fetch_add(1, std::memory_order_relaxed);
    else
      g_eager_ops.fetch_add(1, std::memory_order_relaxed);
  }
  return nullptr;
}
void count_end(const at::RecordFunction&, at::ObserverContext*) { --t_op_depth; }

/// Installs the counting callbacks for its lifetime.
class IssueCounter {
 public:
  IssueCounter()
      : handle_(at::addGlobalCallback(
            at::RecordFunctionCallback(&count_start, &count_end)
                .scopes({at::RecordScope::FUNCTION, at::RecordScope::BACKWARD_FUNCTION}))) {}
  ~IssueCounter() { at::removeCallback(handle_); }
  IssueCounter(const IssueCounter&) = delete;
  IssueCounter& operator=(const IssueCounter&) = delete;

 private:
  at::CallbackHandle handle_;
};

std::uint64_t block_key(std::uint32_t mb, std::uint32_t layer, Part part) {
  return (std::uint64_t(mb) << 32) | (std::uint64_t(layer) << 1) | (part == Part::Mlp ? 1 : 0);
}
std::uint64_t mb_key(std::uint32_t mb, std::uint32_t layer) {
  return (std::uint64_t(mb) << 32) | layer;
}

// ------------------------------------------------------------------ the executor
class Executor {
 public:
  Executor(const ScheduleGraph& g, RankId rank, const std::vector<TaskId>& order,
           const ReplayOptions& o)
      : g_(g), model_(g.replay_model), rank_(rank), order_(order), opts_(o),
        dev_(parse_device(o.device)) {
    dtype_ = model_dtype(dev_.cuda, model_.precision, o);
    device_ = dev_.cuda ? torch::Device(torch::kCUDA, dev_.index) : torch::Device(torch::kCPU);
    fopts_ = torch::TensorOptions().dtype(dtype_).device(device_);
    dropout_.attention = o.attention_dropout;
    dropout_.hidden = o.hidden_dropout;
    if (o.nprocs > 1) {
      std::string why;  // CUDA: NCCL; CPU: the host backend (comm_host.cpp), always built
      if (dev_.cuda && !multiprocess_available(&why))
        throw InputError("replay: --nprocs " + std::to_string(o.nprocs) + ": " + why);
      if (o.nccl_dir.empty())
        throw InputError("replay: --nprocs " + std::to_string(o.nprocs) +
                         ": no rendezvous directory (set TRAINSIM_NCCL_DIR to a directory every "
                         "rank can read, on a shared file system across nodes)");
      if (static_cast<std::int64_t>(rank) >= o.nprocs)
        throw InputError("replay: rank " + std::to_string(rank) + " is not among the " +
                         std::to_string(o.nprocs) + " processes of a multi-process replay");
    }
    TRAINSIM_CHECK(model_.num_layers > 0,
                   "replay: the schedule graph has no replay_model (num_layers " +
                       std::to_string(model_.num_layers) + "): build it with build_schedule_graph");
  }

  /// Runs `iterations` iterations on one model state (the optimizer steps between them) and
  /// returns the last one's record; `losses` (if non-null) receives each iteration's loss.
  void want_losses() { loss_wanted_ = true; }

  ExecutionRecord run(int iterations = 1, std::vector<double>* losses = nullptr) {
    loop_ = dev_.cuda ? make_cuda_loop(dev_.index) : make_cpu_loop();  // before any tensor
    if (opts_.threads > 0) at::set_num_threads(opts_.threads);
    const auto wall0 = std::chrono::steady_clock::now();
    ExecutionRecord rec;
    setup();
    for (int it = 0; it < std::max(1, iterations); ++it) {
      rec = ExecutionRecord{};
      rec.measured = true;
      reset_gemm_counts();  // the notes count the last iteration's GEMMs
      rec.start_s.assign(g_.num_tasks(), std::numeric_limits<double>::quiet_NaN());
      rec.end_s.assign(g_.num_tasks(), std::numeric_limits<double>::quiet_NaN());
      replayed_as_.assign(g_.num_tasks(), std::string());
      if (it > 0) {
        torch::NoGradGuard no_grad;
        flat_grads_.zero_();  // Megatron's zero_grad_buffer before each iteration
        cpu_cursor_ = 0, cpu_steps_ = 0;
      }
      loss_sum_ = 0.0;
      rec.host_eager_ops.assign(g_.num_tasks(), 0);
      rec.host_autograd_nodes.assign(g_.num_tasks(), 0);
      {
        IssueCounter counter;
        loop_->run(g_, order_, [this, &rec](TaskId id) {
          const std::int64_t ops0 = g_eager_ops.load(), nodes0 = g_autograd_nodes.load();
          run_task(id);
          rec.host_eager_ops[id] = std::int32_t(g_eager_ops.load() - ops0);
          rec.host_autograd_nodes[id] = std::int32_t(g_autograd_nodes.load() - nodes0);
        }, *comm_, rec);
      }
      ++adam_step_;
      update_expert_biases();
      if (losses) losses->push_back(has_logits_ ? loss_sum_ : std::numeric_limits<double>::quiet_NaN());
    }
    check_gradient_buffer();
    finish_notes();
    rec.notes = notes_;
    rec.replayed_as = std::move(replayed_as_);
    rec.wall_time_s =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - wall0).count();
    return rec;
  }

 private:
  // ---------------------------------------------------------------- setup
  void setup() {
    torch::manual_seed(opts_.seed);  // dropout masks (CPU and CUDA generators)
    torch::Generator gen = at::detail::createCPUGenerator(opts_.seed);
    coords_ = g_.layout.coords(rank_);

    // Which parts of the model this rank holds, and the shapes, from its compute tasks.
    const OpDesc* shape_op = nullptr;
    std::set<std::uint16_t> delayed;  // layers whose MoE backward the graph splits
    for (TaskId id : order_) {
      const Task& t = g_.task(id);
      const OpDesc& op = g_.op(id);
      if (t.kind == TaskKind::Compute) {
        if (!shape_op) shape_op = &op;
        if (op.kind == OpKind::EmbedFwd) has_embed_ = true;
        if (op.kind == OpKind::LogitsLossFwd) has_logits_ = true;
        if (t.part == Part::Attn || t.part == Part::Mlp) layers_.insert(t.layer);
        if (op.features.experts_local > 0) has_experts_ = true;
        if (op.kind == OpKind::AttnFwd || op.kind == OpKind::MlpFwd) layer_spec(t.layer, op);
        if (op.kind == OpKind::MlpBwd && op.features.expert_wgrad != 0) delayed.insert(t.layer);
        if (op.features.shared_part != 0 && t.phase == Phase::Recompute)
          throw InputError("replay: model.moe_shared_expert_overlap (true) with the MoE layer's "
                           "recomputation (recompute_granularity full, or recompute_modules moe) "
                           "is not replayed: set one of them off");
      }
      if (t.kind == TaskKind::CopyH2D || t.kind == TaskKind::CopyD2H)
        copy_bytes_ = std::max(copy_bytes_, op.bytes);
      if (t.kind == TaskKind::OptimizerGpu) gpu_step_params_ = std::max(gpu_step_params_, op.params);
      if (t.kind == TaskKind::OptimizerCpu) cpu_step_params_ += op.params;  // sub-groups, in order
      if (t.kind == TaskKind::CopyH2D || t.kind == TaskKind::CopyD2H) ++copies_;
    }
    TRAINSIM_CHECK(shape_op != nullptr,
                   "replay: rank " + std::to_string(rank_) + " has no compute task");
    for (std::uint16_t l : delayed) specs_.at(l).delay_wgrad = true;
    d_.b = shape_op->micro_batch, d_.s = shape_op->seq, d_.h = shape_op->hidden;
    d_.heads = shape_op->heads, d_.head_dim = shape_op->head_dim, d_.ffn = shape_op->ffn;
    d_.vocab = shape_op->vocab, d_.tp = shape_op->tp;
    sequence_parallel_ = shape_op->sequence_parallel;
    selective_ = model_.recompute_selective;
    core_ = shape_op->features.core;
    if (core_) {
      // Megatron-Core: this rank's s / cp tokens; dropout only where the model has it.
      d_.s = shape_op->seq / std::max<std::int64_t>(1, shape_op->features.cp);
      if (!shape_op->features.hidden_dropout) dropout_.hidden = 0;
      if (!shape_op->features.attention_dropout) dropout_.attention = 0;
      for (auto& [layer, c] : specs_) c.s = d_.s;
    }
    const bool learned_positions = !core_ || !shape_op->features.rope;
    const bool final_norm_bias = !core_ || !shape_op->features.rmsnorm;

    // Parameter shapes in flat-buffer order: embedding, layers, final LayerNorm, output copy.
    std::vector<std::vector<std::int64_t>> shapes;
    if (has_embed_) {
      shapes.push_back({d_.vocab, d_.h});
      if (learned_positions) shapes.push_back({d_.s, d_.h});
    }
    for (std::uint16_t layer : layers_)
      for (const auto& [name, shape] : layer_shapes(layer)) shapes.push_back(shape);
    const bool own_output = has_logits_ && (!has_embed_ || model_.untie_embeddings_and_output_weights);
    if (has_logits_) {
      shapes.push_back({d_.h});
      if (final_norm_bias) shapes.push_back({d_.h});
    }
    if (own_output) shapes.push_back({d_.vocab, d_.h});
    for (const auto& s : shapes) {
      std::int64_t n = 1;
      for (auto x : s) n *= x;
      total_params_ += n;
    }
    flat_params_ = torch::empty({total_params_}, fopts_);
    flat_grads_ = torch::zeros({total_params_}, fopts_);
    std::vector<torch::Tensor> params;
    std::int64_t off = 0;
    for (const auto& s : shapes) {
      std::int64_t n = 1;
      for (auto x : s) n *= x;
      torch::Tensor prm = flat_params_.narrow(0, off, n).view(s).detach().requires_grad_(true);
      prm.mutable_grad() = flat_grads_.narrow(0, off, n).view(s);  // Megatron's contiguous grads
      params.push_back(prm);
      grad_views_.emplace_back(prm, off);
      off += n;
    }
    // Bind and initialize.
    std::size_t k = 0;
    torch::NoGradGuard no_grad;
    auto normal = [&](torch::Tensor& t, double std) {
      t.copy_(torch::empty(t.sizes(), torch::kFloat32).normal_(0.0, std, gen));
    };
    if (has_embed_) {
      word_ = params[k++];
      normal(word_, 0.02);  // init_method_normal(0.02)
      if (learned_positions) pos_ = params[k++], normal(pos_, 0.02);
    }
    for (std::uint16_t layer : layers_) {
      if (core_) {
        CoreWeights& cw = core_weights_[layer];
        for (const auto& [name, shape] : layer_shapes(layer)) cw.t[name] = params[k++];
        const CoreLayerSpec& c = specs_.at(layer);
        init_core_weights(cw, c, model_.num_layers, gen);
        if (c.moe && c.expert_bias) {
          // Megatron-Core router.py: expert_bias and local_tokens_per_expert, fp32 buffers
          // (not parameters), zeros at the start.
          const auto f32 = torch::TensorOptions().dtype(torch::kFloat32).device(device_);
          cw.t["router.expert_bias"] = torch::zeros({c.num_experts}, f32);
          cw.t["router.tokens_per_expert"] = torch::zeros({c.num_experts}, f32);
        }
        continue;
      }
      std::vector<torch::Tensor> lw(params.begin() + k, params.begin() + k + 12);
      k += 12;
      weights_[layer] = bind_layer_weights(lw);
      init_layer_weights(weights_[layer], model_.num_layers, gen);
    }
    if (has_logits_) {
      final_ln_w_ = params[k++];
      final_ln_w_.fill_(1.0);
      if (final_norm_bias) final_ln_b_ = params[k++], final_ln_b_.zero_();
      if (own_output) {
        output_w_ = params[k++];
        if (has_embed_)
          normal(output_w_, 0.02);
        else
          normal(output_w_, 0.02);  // the last stage's copy of the word embedding
      } else {
        output_w_ = word_;  // tied, same rank
      }
    }
    mask_ = causal_mask(d_.s, torch::TensorOptions().device(device_));
    if (core_) {
      for (const auto& [layer, c] : specs_) {
        if (!windows_.count(c.window))
          windows_[c.window] = window_mask(d_.s, c.window, torch::TensorOptions().device(device_));
        // MLA rotates only its qk_pos_emb_head_dim columns (and always: MLASelfAttention
        // builds its own RotaryEmbedding).
        if ((c.rope || c.mla) && !rope_cos_.defined())
          std::tie(rope_cos_, rope_sin_) = rope_tables(d_.s, c.mla ? c.qk_rope : c.head_dim, fopts_);
      }
    }

    // Inputs: token ids and labels of every microbatch (random, in this rank's vocab shard).
    const std::int64_t nmb = model_.num_microbatches;
    auto ids = torch::TensorOptions().dtype(torch::kInt64);
    tokens_ = torch::randint(0, d_.vocab, {nmb, d_.b, d_.s}, gen, ids).to(device_);
    labels_ = torch::randint(0, d_.vocab, {nmb, d_.b, d_.s}, gen, ids).to(device_);
    loss_scale_ = 1.0 / static_cast<double>(nmb);

    // The communication backend's buffers (staging for absent neighbours, scratch).
    CommContext cc;
    cc.graph = &g_;
    cc.rank = rank_;
    cc.coords = coords_;
    cc.options = &opts_;
    cc.loop = loop_.get();
    cc.tensor_options = fopts_;
    cc.dtype = kernel_dtype(dtype_);
    cc.dtype_name = dtype_name(dtype_);
    cc.message_shape = {d_.s, d_.b, d_.h};
    comm_ = opts_.nprocs <= 1 ? make_local_comm(cc)
            : dev_.cuda       ? make_nccl_comm(cc)
                              : make_host_comm(cc);
    // Its buffers stand in for absent peers (staging, device-local collective scratch): a run
    // with every peer present holds none, so the CPU loop does not count them (device_loop.h).
    loop_->allocate_uncounted([&] { comm_->prepare(order_, gen); });
    if (copy_bytes_ > 0) {
      copy_dev_ = torch::zeros({copy_bytes_}, fopts_.dtype(torch::kUInt8));
      copy_host_ = torch::zeros({copy_bytes_},
                                torch::TensorOptions().dtype(torch::kUInt8).pinned_memory(dev_.cuda));
    }

    // Optimizer states: fp32 master weights, exp_avg, exp_avg_sq (GPU part on the device, CPU
    // part in host memory), initialized from the model's parameters.
    auto f32 = torch::TensorOptions().dtype(torch::kFloat32);
    // Twin-Flow / ZeRO-Offload: the CPU part is the first parameters of this rank's share, the
    // GPU part follows it.
    if (cpu_step_params_ > 0) {
      cpu_step_params_ = std::min(cpu_step_params_, total_params_);
      cpu_offset_ = partition_offset(cpu_step_params_);
    }
    if (gpu_step_params_ > 0) {
      gpu_step_params_ = std::min(gpu_step_params_, total_params_);
      gpu_offset_ = cpu_step_params_ > 0
                        ? std::min(cpu_offset_ + cpu_step_params_, total_params_ - gpu_step_params_)
                        : partition_offset(gpu_step_params_);
      gpu_master_ = flat_params_.narrow(0, gpu_offset_, gpu_step_params_).to(torch::kFloat32).clone();
      gpu_m_ = torch::zeros({gpu_step_params_}, f32.device(device_));
      gpu_v_ = torch::zeros({gpu_step_params_}, f32.device(device_));
    }
    if (cpu_step_params_ > 0) {
      auto host = f32.pinned_memory(dev_.cuda);
      cpu_master_ = torch::empty({cpu_step_params_}, host);
      cpu_master_.copy_(flat_params_.narrow(0, cpu_offset_, cpu_step_params_));
      cpu_m_ = torch::zeros({cpu_step_params_}, host);
      cpu_v_ = torch::zeros({cpu_step_params_}, host);
      if (dev_.cuda) {  // gradients arrive and fp16 params leave through pinned host buffers
        cpu_grads_host_ = torch::zeros({cpu_step_params_}, host.dtype(dtype_));
        cpu_params_host_ = torch::empty({cpu_step_params_}, host.dtype(dtype_));
      }
    }
    if (cpu_step_params_ > 0 || (gpu_step_params_ > 0 && !dev_.cuda)) {
      kernels::CpuAdamOptions ao;
      ao.num_threads = opts_.threads;
      cpu_adam_ = std::make_unique<kernels::CpuAdam>(ao);
    }
    setup_notes();
  }

  /// After each iteration (finalize_model_grads' _update_router_expert_bias): every MoE
  /// layer's expert bias from the copies its experts received on this rank (Megatron sums them
  /// over the tensor, data and context-parallel ranks first; the absent ranks' are not here).
  void update_expert_biases() {
    constexpr double kBiasUpdateRate = 1e-3;  // transformer_config.py moe_router_bias_update_rate
    for (auto& [layer, cw] : core_weights_) {
      auto bias = cw.t.find("router.expert_bias");
      if (bias != cw.t.end())
        update_expert_bias(bias->second, cw.t.at("router.tokens_per_expert"), kBiasUpdateRate);
    }
  }

  /// Records the shapes and features of `layer` from its AttnFwd or MlpFwd op.
  void layer_spec(std::uint16_t layer, const OpDesc& op) {
    CoreLayerSpec& c = specs_[layer];
    const ModelFeatures& f = op.features;
    c.b = op.micro_batch, c.s = op.seq / std::max<std::int64_t>(1, f.cp), c.h = op.hidden;
    c.rmsnorm = f.rmsnorm, c.bias = f.bias;
    // FP8 GEMMs (gemm_ops.h): the format is the scenario's --fp8-format (hybrid: e5m2
    // gradients); every Transformer Engine recipe is replayed as per-tensor current scaling.
    if (f.fp8 != 0) c.fp8 = model_.fp8_format == 1 ? GemmFp8::E4M3 : GemmFp8::Hybrid;
    if (op.kind == OpKind::AttnFwd) {
      c.heads = op.heads, c.head_dim = op.head_dim, c.window = f.window;
      c.kv_heads = f.kv_heads > 0 ? f.kv_heads : op.heads;
      c.qk_norm = f.qk_norm && !f.mla, c.rope = f.rope;
      if (f.mla) {
        // MLA (core_mla_forward): op.head_dim is dn + dr; the latent norms with qk_layernorm.
        mla_ = true;
        c.mla = true, c.latent_norm = f.qk_norm, c.up_rerun = f.recompute_mla_up;
        c.q_lora = f.q_lora, c.kv_lora = f.kv_lora, c.qk_rope = f.qk_rope, c.v_dim = f.v_dim;
      }
      return;
    }
    // model.moe_shared_expert_overlap: the shared expert's own ops carry its width; the MoE
    // MLP op (kSharedApart) runs without it (core_layer.h SharedApartState).
    if (f.shared_part == kSharedFc1 || f.shared_part == kSharedFc2) {
      c.shared_ffn = f.shared_ffn, c.shared_apart = true;
      return;
    }
    if (f.shared_part == kSharedApart) c.shared_apart = true;
    else c.shared_ffn = f.shared_ffn;
    c.ffn = op.ffn, c.swiglu = f.swiglu, c.moe = f.experts_local > 0;
    c.quick_geglu = f.quick_geglu, c.glu_clamp = f.glu_clamp, c.glu_offset = f.glu_offset;
    c.experts_local = f.experts_local, c.num_experts = f.num_experts, c.topk = f.topk;
    c.expert_ffn = f.expert_ffn;
    if (f.fp8 != 0) fp8_ = true, fp8_recipe_ = f.fp8;
    if (f.grouped_gemm) grouped_gemm_ = true;
    c.grouped_gemm = f.grouped_gemm;
    c.sigmoid = model_.moe_router_sigmoid, c.expert_bias = (f.router & kRouterExpertBias) != 0;
    c.router_groups = model_.moe_router_num_groups, c.router_group_topk = model_.moe_router_group_topk;
    if (f.expert_token_cap > 0) {
      // Token dropping (core_layer.h apply_token_dropping) with the model's capacity factor.
      token_drop_ = true;
      c.capacity_factor = model_.moe_expert_capacity_factor;
      c.drop_by_position = model_.moe_drop_by_position, c.pad_to_capacity = f.pad_to_capacity;
    }
  }

  /// Parameter names and shapes of `layer` in flat-buffer order.
  std::vector<std::pair<std::string, std::vector<std::int64_t>>> layer_shapes(std::uint16_t layer) const {
    return core_ ? core_param_shapes(specs_.at(layer)) : layer_param_shapes(d_);
  }

  /// First parameter of this rank's optimizer partition: ZeRO (stage >= 1) gives DP rank d the
  /// d-th slice of `n` parameters; without ZeRO `n` covers all and the offset is 0.
  std::int64_t partition_offset(std::int64_t n) const {
    const std::int64_t off = coords_.dp_rank * n;
    return std::max<std::int64_t>(0, std::min(off, total_params_ - n));
  }

  // ---------------------------------------------------------------- task work
  torch::Tensor take(std::map<std::uint32_t, torch::Tensor>& m, std::uint32_t mb, TaskId id,
                     const char* what) {
    auto it = m.find(mb);
    TRAINSIM_CHECK(it != m.end(), "replay: task " + std::to_string(id) + " (" + g_.label(id) +
                                      ") has no " + what + " for microbatch " +
                                      std::to_string(mb));
    TRAINSIM_CHECK(pending_fill_.count(mb_key(mb, &m == &grad_ ? 1 : 0)) == 0,
                   "replay: task " + std::to_string(id) + " (" + g_.label(id) +
                       ") uses a received tensor before its all-gather completed it");
    torch::Tensor t = it->second;
    m.erase(it);
    return t;
  }

  void run_task(TaskId id) {
    const Task& t = g_.task(id);
    const OpDesc& op = g_.op(id);
    switch (t.kind) {
      case TaskKind::Compute: return compute(id, t, op);
      case TaskKind::Collective: return collective(id, t, op);
      case TaskKind::Send: return send(id, t, op);
      case TaskKind::Recv: return recv(id, t, op);
      case TaskKind::CopyH2D:
        copy_dev_.narrow(0, 0, op.bytes).copy_(copy_host_.narrow(0, 0, op.bytes), /*non_blocking=*/true);
        return;
      case TaskKind::CopyD2H:
        copy_host_.narrow(0, 0, op.bytes).copy_(copy_dev_.narrow(0, 0, op.bytes), /*non_blocking=*/true);
        return;
      case TaskKind::OptimizerGpu: return optimizer_gpu(op);
      case TaskKind::OptimizerCpu: return optimizer_cpu(op);
    }
  }

  void compute(TaskId id, const Task& t, const OpDesc& op) {
    const std::uint32_t mb = t.microbatch;
    // The task's layer's entry of a per-layer flag of the replay model (false off its layers).
    auto of_layer = [&](const std::vector<bool>& flags) {
      return t.layer != kNoIndex && std::size_t(t.layer) < flags.size() && flags[t.layer];
    };
    // Full recomputation of this task's layer (every layer with `full`, block's first ones):
    // its checkpoint unit, and whether the layer starts it (its input is the unit's stash).
    const std::int64_t unit =
        t.layer != kNoIndex && std::size_t(t.layer) < model_.recompute_units.size()
            ? model_.recompute_units[t.layer]
            : -1;
    const bool full = unit >= 0;
    const bool unit_start = full && unit == std::int64_t(t.layer);
    // The layer's MLP module checkpointed (--recompute-modules mlp / moe).
    const bool mlp_ckpt = op.kind == OpKind::MlpFwd && of_layer(model_.mlp_checkpointed_layers);
    // The block's forward: the 2021 GPT layer, or the Megatron-Core layer (core_layer.h).
    auto forward = [&](bool attn, const torch::Tensor& x, bool selective) {
      if (core_) {
        const CoreLayerSpec& c = specs_.at(t.layer);
        const CoreWeights& cw = core_weights_.at(t.layer);
        return attn ? core_attn_forward(cw, x, c, windows_.at(c.window), rope_cos_, rope_sin_, dropout_)
                    : core_mlp_forward(cw, x, c, dropout_, &moe_stats_, wgrad_store(t, c));
      }
      const LayerWeights& w = weights_.at(t.layer);
      return attn ? attn_forward(w, x, mask_, d_, dropout_, selective) : mlp_forward(w, x, d_, dropout_);
    };
    if (op.features.shared_part != 0 && op.features.expert_wgrad == 0)
      return shared_apart(id, t, op);
    switch (op.kind) {
      case OpKind::EmbedFwd: {
        torch::Tensor out = embed_forward(word_, pos_, tokens_[mb], d_, dropout_);
        embed_out_[mb] = out;
        act_[mb] = out.detach();
        return;
      }
      case OpKind::AttnFwd:
      case OpKind::MlpFwd: {
        const bool attn = op.kind == OpKind::AttnFwd;
        if (t.phase == Phase::Forward && full) {
          // Full recomputation (Megatron checkpoint unit): no autograd state, keep only the
          // unit's input for the recompute tasks.
          torch::NoGradGuard no_grad;
          torch::Tensor x = take(act_, mb, id, "input activation");
          if (attn && unit_start) stash_[mb_key(mb, t.layer)] = x;
          act_[mb] = forward(attn, x, false).output;
          return;
        }
        if (t.phase == Phase::Forward && mlp_ckpt) {
          // A checkpointed MLP module: no autograd state, its input kept for the re-run.
          torch::NoGradGuard no_grad;
          torch::Tensor x = take(act_, mb, id, "input activation");
          stash_[mb_key(mb, t.layer)] = x;
          act_[mb] = forward(false, x, false).output;
          return;
        }
        torch::Tensor x;
        if (t.phase == Phase::Recompute && attn && full && !unit_start) {
          // Inside a checkpoint unit: the previous layer's re-run gives this layer's input.
          x = take(act_, mb, id, "re-run input");
        } else if (t.phase == Phase::Recompute && (attn || mlp_ckpt)) {
          auto it = stash_.find(mb_key(mb, t.layer));
          TRAINSIM_CHECK(it != stash_.end(),
                         "replay: recompute task " + g_.label(id) + " has no stashed input");
          x = it->second;
          stash_.erase(it);
        } else {
          x = take(act_, mb, id, "input activation");
        }
        BlockState st = forward(attn, x, selective_ && !core_);
        // The recomputed MLP output feeds nothing (the backward starts from the gradient),
        // except the next layer's re-run inside the same checkpoint unit.
        const bool unit_goes_on =
            full && !ParallelConfig::recompute_unit_end(model_.recompute_units, t.layer);
        if (t.phase != Phase::Recompute || attn || unit_goes_on) act_[mb] = st.output.detach();
        blocks_[block_key(mb, t.layer, t.part)] = std::move(st);
        return;
      }
      case OpKind::AttnBwd:
      case OpKind::MlpBwd: {
        // delay_wgrad_compute's second part (expert_wgrad 2): the held-back expert GEMMs.
        if (op.features.expert_wgrad == 2) return run_held_wgrad(id, t, true);
        auto it = blocks_.find(block_key(mb, t.layer, t.part));
        TRAINSIM_CHECK(it != blocks_.end(),
                       "replay: backward task " + g_.label(id) + " has no forward state");
        torch::Tensor g = take(grad_, mb, id, "output gradient");
        grad_[mb] = block_backward(it->second, g, mask_, d_, dropout_);
        blocks_.erase(it);
        // A whole MoE backward (the schedule's lone steps) runs its weight gradients itself.
        if (op.kind == OpKind::MlpBwd && op.features.expert_wgrad == 0) run_held_wgrad(id, t, false);
        return;
      }
      case OpKind::LogitsLossFwd: {
        torch::Tensor x = take(act_, mb, id, "input activation").detach().requires_grad_(true);
        torch::Tensor loss =
            logits_loss_forward(x, final_ln_w_, final_ln_b_, output_w_, labels_[mb], loss_scale_);
        logits_[mb] = {x, loss};
        if (loss_wanted_) loss_sum_ += loss.item<double>();  // a host sync: training runs only
        return;
      }
      case OpKind::LogitsLossBwd: {
        auto it = logits_.find(mb);
        TRAINSIM_CHECK(it != logits_.end(), "replay: " + g_.label(id) + " has no forward state");
        torch::autograd::backward({it->second.second});
        grad_[mb] = it->second.first.grad();
        logits_.erase(it);
        return;
      }
      case OpKind::EmbedBwd: {
        auto it = embed_out_.find(mb);
        TRAINSIM_CHECK(it != embed_out_.end(),
                       "replay: " + g_.label(id) + " has no forward state");
        torch::Tensor g = take(grad_, mb, id, "output gradient");
        torch::autograd::backward({it->second}, {g});
        embed_out_.erase(it);
        return;
      }
      default:
        TRAINSIM_CHECK(false, std::string("replay: compute task with op ") + to_string(op.kind));
    }
  }

  /// The wgrad store of an MoE MLP forward of task `t`'s layer and microbatch, emptied; null
  /// where the layer's backward is not split (core_layer.h CoreLayerSpec::delay_wgrad).
  DeferredWgrad* wgrad_store(const Task& t, const CoreLayerSpec& c) {
    if (!c.delay_wgrad || !c.moe) return nullptr;
    DeferredWgrad& d = wgrad_[block_key(t.microbatch, t.layer, Part::Mlp)];
    d = DeferredWgrad{};
    return &d;
  }
  /// Runs the weight-gradient GEMMs the MoE MLP backward of `t`'s layer and microbatch held
  /// back (expert_wgrad.h); `required`: the split's own task, which must find them.
  void run_held_wgrad(TaskId id, const Task& t, bool required) {
    auto it = wgrad_.find(block_key(t.microbatch, t.layer, Part::Mlp));
    TRAINSIM_CHECK(!required || it != wgrad_.end(),
                   "replay: " + g_.label(id) + " finds no held-back expert weight gradients");
    if (it == wgrad_.end()) return;
    held_wgrad_gemms_ += it->second.run();
    wgrad_.erase(it);
  }
  /// The six tasks of an MoE layer whose shared expert runs apart (core_layer.h
  /// SharedApartState, model.moe_shared_expert_overlap).
  void shared_apart(TaskId id, const Task& t, const OpDesc& op) {
    const std::uint32_t mb = t.microbatch;
    const std::uint64_t key = block_key(mb, t.layer, Part::Mlp);
    const CoreLayerSpec& c = specs_.at(t.layer);
    const CoreWeights& cw = core_weights_.at(t.layer);
    SharedApartState& st = shared_[key];
    const bool fwd = op.kind == OpKind::MlpFwd;
    switch (op.features.shared_part) {
      case kSharedFc1:
        if (fwd) return shared_fc1_forward(cw, take(act_, mb, id, "input activation"), c, st);
        grad_[mb] = shared_fc1_backward(st);
        shared_.erase(key);
        return;
      case kSharedApart:
        if (fwd) return shared_moe_forward(cw, c, &moe_stats_, wgrad_store(t, c), st);
        shared_moe_backward(st);
        return run_held_wgrad(id, t, false);
      case kSharedFc2:
        if (fwd) act_[mb] = shared_fc2_forward(cw, c, dropout_, st);
        else shared_fc2_backward(st, take(grad_, mb, id, "output gradient"));
        return;
      default:
        TRAINSIM_CHECK(false, "replay: " + g_.label(id) + " has an unknown shared-expert part");
    }
  }

  void collective(TaskId id, const Task& t, const OpDesc& op) {
    const int dir = t.phase == Phase::Backward ? 1 : 0;
    auto pending = pending_fill_.find(mb_key(t.microbatch, dir));
    if (op.group_size > 1 && t.part == Part::Pipeline && op.kind == OpKind::AllGather &&
        pending != pending_fill_.end()) {
      // Scatter/gather pipeline message (SC'21 Sec. 4.1): the all-gather completes the
      // received tensor, which holds this TP rank's slice [off, off + n).
      torch::Tensor& dst = dir ? grad_.at(t.microbatch) : act_.at(t.microbatch);
      const auto [off, n] = pending->second;
      pending_fill_.erase(pending);
      replayed_as_[id] = comm_->complete_received(id, dst, dir, off, n);
      return;
    }
    replayed_as_[id] = comm_->collective(id);
  }

  /// Elements of a pipeline message and where they sit in the full tensor of `numel`
  /// elements: the whole tensor, or (scatter/gather, SC'21 Sec. 4.1) this TP rank's 1/tp slice.
  /// The message's bytes are in the scenario's precision, whatever element type the replay
  /// runs (a CPU replay of an fp16 / bf16 scenario runs fp32).
  std::pair<std::int64_t, std::int64_t> message_slice(const OpDesc& op,
                                                      std::int64_t numel) const {
    const std::int64_t n = std::min<std::int64_t>(numel, op.bytes / precision_bytes(model_.precision));
    const std::int64_t off = n < numel ? std::min(coords_.tp_rank * n, numel - n) : 0;
    return {off, n};
  }

  void send(TaskId id, const Task& t, const OpDesc& op) {
    const int dir = t.phase == Phase::Backward ? 1 : 0;
    torch::Tensor src = take(dir ? grad_ : act_, t.microbatch, id, "tensor to send");
    const auto [off, n] = message_slice(op, src.numel());
    replayed_as_[id] = comm_->send(id, src, dir, off, n);
  }

  void recv(TaskId id, const Task& t, const OpDesc& op) {
    const int dir = t.phase == Phase::Backward ? 1 : 0;
    // Megatron-Core with sequence parallelism sends this rank's s/tp rows; the replay's layers
    // run the full sequence, so the rest of the received tensor stays zero (setup_notes).
    torch::Tensor dst = core_ ? torch::zeros({d_.s, d_.b, d_.h}, fopts_)
                              : torch::empty({d_.s, d_.b, d_.h}, fopts_);
    const auto [off, n] = message_slice(op, dst.numel());
    replayed_as_[id] = comm_->recv(id, dst, dir, off, n);
    if (n < dst.numel() && !core_) pending_fill_[mb_key(t.microbatch, dir)] = {off, n};  // SC'21 4.1
    loop_->record_stream(dst, loop_->stream(StreamId::Compute));
    (dir ? grad_ : act_)[t.microbatch] = dst;
  }

  kernels::AdamTensors adam_tensors(torch::Tensor& master, torch::Tensor& m, torch::Tensor& v,
                                    const torch::Tensor& grads, const torch::Tensor& params_out) {
    kernels::AdamTensors a;
    a.params = master.data_ptr<float>();
    a.exp_avg = m.data_ptr<float>();
    a.exp_avg_sq = v.data_ptr<float>();
    a.grads = grads.data_ptr();
    a.grad_dtype = kernel_dtype(dtype_);
    a.params_out = params_out.data_ptr();
    a.params_out_dtype = kernel_dtype(dtype_);
    a.count = static_cast<std::size_t>(master.numel());
    return a;
  }

  void optimizer_gpu(const OpDesc& op) {
    (void)op;
    if (gpu_step_params_ == 0) return;
    torch::Tensor grads = flat_grads_.narrow(0, gpu_offset_, gpu_step_params_);
    torch::Tensor out = flat_params_.narrow(0, gpu_offset_, gpu_step_params_);
    const kernels::AdamTensors a = adam_tensors(gpu_master_, gpu_m_, gpu_v_, grads, out);
    if (!dev_.cuda) {
      cpu_adam_->step(adam_hp_, adam_step_, /*grad_unscale=*/1.0f, a);
      return;
    }
    if (gpu_fused_adam_step(adam_hp_, adam_step_, 1.0f, a, loop_->current_stream())) return;
    // kernels/ built without nvcc: the same update with LibTorch tensor operations.
    torch::NoGradGuard no_grad;
    const auto g = grads.to(torch::kFloat32);
    gpu_m_.mul_(adam_hp_.beta1).add_(g, 1 - adam_hp_.beta1);
    gpu_v_.mul_(adam_hp_.beta2).addcmul_(g, g, 1 - adam_hp_.beta2);
    const double bc1 = 1 - std::pow(adam_hp_.beta1, adam_step_),
                 bc2 = 1 - std::pow(adam_hp_.beta2, adam_step_);
    gpu_master_.addcdiv_(gpu_m_, (gpu_v_.sqrt() / std::sqrt(bc2)).add_(adam_hp_.eps),
                         -adam_hp_.lr / bc1);
    out.copy_(gpu_master_);
  }

  /// One sub-group of the CPU optimizer (DeepSpeed's sub_group_size chunks, in order).
  void optimizer_cpu(const OpDesc& op) {
    const std::int64_t n = std::min(op.params, cpu_step_params_ - cpu_cursor_);
    if (n <= 0) return;
    const std::int64_t at = cpu_cursor_;
    cpu_cursor_ += n;
    // On the CPU device the model's buffers are host memory already; on CUDA the gradients
    // come from (and the params go to) pinned host buffers.
    torch::Tensor grads = dev_.cuda ? cpu_grads_host_ : flat_grads_.narrow(0, cpu_offset_, cpu_step_params_);
    torch::Tensor out = dev_.cuda ? cpu_params_host_ : flat_params_.narrow(0, cpu_offset_, cpu_step_params_);
    torch::Tensor master = cpu_master_.narrow(0, at, n), m = cpu_m_.narrow(0, at, n),
                  v = cpu_v_.narrow(0, at, n);
    cpu_adam_->step(adam_hp_, adam_step_, 1.0f,
                    adam_tensors(master, m, v, grads.narrow(0, at, n), out.narrow(0, at, n)));
    ++cpu_steps_;
  }

  /// The optimizer reads the gradients from the contiguous buffer: autograd must have
  /// accumulated into the preset .grad views (in place), not replaced them.
  void check_gradient_buffer() {
    loop_->synchronize();
    const auto* base = static_cast<const char*>(flat_grads_.data_ptr());
    for (const auto& [prm, off] : grad_views_) {
      const torch::Tensor& g = prm.grad();
      TRAINSIM_CHECK(g.defined() && g.data_ptr() == base + off * flat_grads_.element_size(),
                     "replay: a parameter's gradient left the contiguous gradient "
                     "buffer (autograd replaced .grad instead of accumulating)");
    }
    TRAINSIM_CHECK(flat_grads_.abs().max().item<double>() != 0.0,
                   "replay: the backward tasks left the gradient buffer all zero");
  }

  // ---------------------------------------------------------------- notes
  void setup_notes() {
    std::ostringstream o;
    o << "replayed rank " << rank_ << " of " << g_.world_size << " (pipeline stage "
      << coords_.pp_stage << ", tensor rank " << coords_.tp_rank << ", data rank "
      << coords_.dp_rank << "): its " << order_.size()
      << " tasks ran with their real shapes (b=" << d_.b << ", s=" << d_.s << ", h=" << d_.h
      << ", heads/rank=" << d_.heads << ", ffn/rank=" << d_.ffn << ", vocab/rank=" << d_.vocab
      << "); the other ranks' tasks were not run";
    notes_.push_back(o.str());
    if (g_.fold_factor > 1)
      notes_.push_back("folded graph: rank " + std::to_string(rank_) + " stands for " +
                       std::to_string(g_.fold_factor) + " identical ranks");
    if (!dev_.cuda)
      notes_.push_back(std::string("precision: the scenario's ") + to_string(model_.precision) +
                       " was replayed as " + dtype_name(dtype_) +
                       " on the CPU (LibTorch 1.13 CPU half-precision GEMMs are very slow or "
                       "missing)");
    else
      notes_.push_back(std::string("precision: ") + dtype_name(dtype_) + " model, fp32 master "
                       "weights and Adam moments, no loss scaling (grad_unscale 1)");
    if (core_ && !specs_.empty()) core_notes();
    if (d_.tp > 1)
      notes_.push_back("vocab-parallel cross entropy: softmax over this rank's vocabulary shard "
                       "only (the cross-rank max/sum all-reduces are replayed as copies)");
    if (sequence_parallel_)
      notes_.push_back("sequence parallelism: LayerNorm and dropout regions ran on the full "
                       "sequence, not s/tp (the all-gathers/reduce-scatters are copies)");
    if (sequence_parallel_ && core_)
      notes_.push_back("sequence parallelism: a pipeline message carries this rank's s/tp rows "
                       "of the sequence; the receiver's other rows are zeros");
    if (model_.recompute_full || model_.recompute_selective)
      notes_.push_back("recomputation: dropout masks are redrawn in the recomputed forward "
                       "(Megatron restores the RNG state); the work is the same");
    const std::int64_t expected =
        coords_.pp_stage < std::int64_t(model_.params_per_stage.size())
            ? model_.params_per_stage[std::size_t(coords_.pp_stage)]
            : -1;
    if (expected != total_params_)
      notes_.push_back("parameters: the replay holds " + std::to_string(total_params_) +
                       " but memory_model.h params_per_rank gives " + std::to_string(expected));
    if (gpu_step_params_ > 0 && gpu_step_params_ < total_params_)
      notes_.push_back("optimizer: this rank's step updates parameters [" +
                       std::to_string(gpu_offset_) + ", " +
                       std::to_string(gpu_offset_ + gpu_step_params_) + ") of " +
                       std::to_string(total_params_) + " (its ZeRO / offload share)");
    if (gpu_step_params_ > 0 && !dev_.cuda)
      notes_.push_back("optimizer: OptimizerStepGpu (" + std::to_string(gpu_step_params_) +
                       " parameters) ran as the CPU Adam kernel (kernels/cpu_adam.h, " +
                       std::to_string(cpu_adam_->num_threads()) + " threads) on the CPU device");
    if (gpu_step_params_ > 0 && dev_.cuda && !gpu_fused_adam_built())
      notes_.push_back("optimizer: kernels/ fused Adam not built (no nvcc): OptimizerStepGpu ran "
                       "as LibTorch tensor operations");
    notes_.push_back(loop_->memory_note());
  }

  /// What the Megatron-Core layers ran (core_layer.h), and where it differs from the simulated
  /// kernel list (models/perf/flops_core.cpp).
  void core_notes() {
    const CoreLayerSpec& c = specs_.begin()->second;
    std::ostringstream o;
    o << "layers: Megatron-Core layers (" << (c.rmsnorm ? "RMSNorm" : "LayerNorm") << ", ";
    if (c.mla)
      o << "multi-head latent attention of " << c.heads << " heads x (" << c.head_dim - c.qk_rope
        << " + " << c.qk_rope << " RoPE) query/key, " << c.v_dim << " value";
    else
      o << c.heads << " query heads in " << c.kv_heads << " groups x " << c.head_dim;
    o << (c.rope || c.mla ? ", RoPE" : "") << (c.qk_norm ? ", q/k norms" : "")
      << (!c.swiglu ? ", GeLU" : !c.quick_geglu ? ", SwiGLU" : ", clamped quick-GeGLU (GPT-OSS)")
      << (c.bias ? "" : ", no biases");
    std::set<std::int64_t> windows;
    for (const auto& [layer, sp] : specs_) windows.insert(sp.window);
    for (std::int64_t w : windows) o << (w > 0 ? ", sliding window " + std::to_string(w) : ", causal");
    o << ") with the real arithmetic";
    notes_.push_back(o.str());
    // MLA's attention is said in its own note (mla_note): no query groups, its own head dims.
    if (!mla_)
      notes_.push_back(have_sdpa()
                         ? "attention: AttnFwd/AttnBwd ran at::scaled_dot_product_attention (keys "
                           "and values repeated per query group)"
                         : "attention: AttnFwd/AttnBwd ran the explicit math path (LibTorch " +
                               torch_version() + " has no scaled_dot_product_attention): Q K^T, "
                               "masked fp32 softmax, P V, with keys and values repeated per query "
                               "group, where the simulated kernel list has one fused attention "
                               "kernel (Transformer Engine)");
    if (mla_) notes_.push_back(mla_note(note_context(), c));
    if (fp8_) notes_.push_back(fp8_gemm_note(note_context()));
    if (has_experts_) {
      const CoreLayerSpec* m = nullptr;
      for (const auto& [layer, sp] : specs_)
        if (sp.moe) m = &sp;
      notes_.push_back(moe_note(note_context(), *m, token_drop_));
      if (const std::string n = moe_split_note(note_context()); !n.empty()) notes_.push_back(n);
    }
  }

  /// What the notes of the layers need to know of this replay (replay_notes.h).
  NoteContext note_context() const {
    NoteContext x;
    x.cuda = dev_.cuda, x.device = device_, x.dtype = dtype_, x.dtype_name = dtype_name(dtype_);
    x.fp8_format = model_.fp8_format, x.fp8_recipe = fp8_recipe_;
    x.grouped_requested = grouped_gemm_, x.specs = &specs_, x.fopts = fopts_;
    x.hidden = d_.h, x.attention_dropout = dropout_.attention;
    return x;
  }

  void finish_notes() {
    comm_->add_notes(notes_);
    if (const std::string n = gemm_count_note(note_context()); !n.empty()) notes_.push_back(n);
    if (token_drop_ && moe_stats_.routed_copies > 0)
      notes_.push_back("MoE token dropping: capacity " + std::to_string(moe_stats_.capacity) +
                       " copies per expert; " + std::to_string(moe_stats_.dropped_copies) +
                       " of " + std::to_string(moe_stats_.routed_copies) +
                       " routed token copies dropped, " +
                       std::to_string(moe_stats_.padded_copies) +
                       " padding copies, over the replay's MoE forwards");
    if (held_wgrad_gemms_ > 0)
      notes_.push_back("MoE backward split: " + std::to_string(held_wgrad_gemms_) +
                       " held-back expert weight-gradient GEMMs ran over the replay's iterations "
                       "(expert_wgrad.h)");
    if (cpu_steps_ > 0)
      notes_.push_back("optimizer: " + std::to_string(cpu_steps_) + " OptimizerStepCpu sub-groups (" +
                       std::to_string(cpu_step_params_) + " parameters) ran the CPU Adam kernel "
                       "(kernels/cpu_adam.h) over host fp32 master weights and moments");
    if (copies_ > 0)
      notes_.push_back(std::to_string(copies_) + " host<->device copies moved their byte count "
                       "between a device scratch buffer and a host buffer" +
                       std::string(dev_.cuda ? " (pinned, on the H2D / D2H streams)"
                                             : " (both in host memory on the CPU device)"));
    if (!act_.empty() || !grad_.empty() || !blocks_.empty() || !stash_.empty() || !logits_.empty() ||
        !embed_out_.empty() || !wgrad_.empty() || !shared_.empty())
      notes_.push_back("warning: " + std::to_string(blocks_.size() + stash_.size() + logits_.size() +
                                                    embed_out_.size() + wgrad_.size() + shared_.size()) +
                       " forward states were still alive at the end of the iteration");
  }

  // ---------------------------------------------------------------- state
  const ScheduleGraph& g_;
  const ReplayModel& model_;
  const RankId rank_;
  const std::vector<TaskId>& order_;
  const ReplayOptions& opts_;
  const DeviceChoice dev_;
  std::unique_ptr<DeviceLoop> loop_;  // destroyed last: its streams outlive every buffer
  torch::Dtype dtype_ = torch::kFloat32;
  torch::Device device_{torch::kCPU};
  torch::TensorOptions fopts_;
  Dropout dropout_;
  LayerDims d_;
  RankCoords coords_{0, 0, 0};
  bool has_embed_ = false, has_logits_ = false, sequence_parallel_ = false, selective_ = false;
  bool has_experts_ = false;  ///< an MoE layer among the rank's
  // Megatron-Core layers (core_layer.h): per layer, its spec and weights.
  bool core_ = false, mla_ = false, fp8_ = false, grouped_gemm_ = false, token_drop_ = false;
  std::uint8_t fp8_recipe_ = 0;  ///< ModelFeatures::fp8 of the layers (the notes)
  std::map<std::uint16_t, CoreLayerSpec> specs_;
  std::map<std::uint16_t, CoreWeights> core_weights_;
  std::map<std::int64_t, torch::Tensor> windows_;  // attention mask per window
  torch::Tensor rope_cos_, rope_sin_;
  MoeStats moe_stats_;
  std::set<std::uint16_t> layers_;

  std::int64_t total_params_ = 0;
  torch::Tensor flat_params_, flat_grads_;
  std::vector<std::pair<torch::Tensor, std::int64_t>> grad_views_;  // (parameter, offset)
  std::map<std::uint16_t, LayerWeights> weights_;
  torch::Tensor word_, pos_, final_ln_w_, final_ln_b_, output_w_, mask_;
  torch::Tensor tokens_, labels_;
  double loss_scale_ = 1.0;

  // Live activations and gradients, per microbatch / block.
  std::map<std::uint32_t, torch::Tensor> act_, grad_, embed_out_;
  std::map<std::uint64_t, BlockState> blocks_;
  std::map<std::uint64_t, DeferredWgrad> wgrad_;         ///< held-back expert wgrads, by block
  std::map<std::uint64_t, SharedApartState> shared_;     ///< MoE layers with the shared expert apart
  std::int64_t held_wgrad_gemms_ = 0;                    ///< for the notes
  std::map<std::uint64_t, torch::Tensor> stash_;
  std::map<std::uint32_t, std::pair<torch::Tensor, torch::Tensor>> logits_;  // (input, loss)
  // Received slices (offset, elements) awaiting the pipeline all-gather.
  std::map<std::uint64_t, std::pair<std::int64_t, std::int64_t>> pending_fill_;

  // Host <-> device copies.
  std::int64_t copy_bytes_ = 0;
  torch::Tensor copy_dev_, copy_host_;
  std::vector<std::string> replayed_as_;  // per task id (ExecutionRecord::replayed_as)

  // Optimizer.
  kernels::AdamHyperParams adam_hp_;
  int adam_step_ = 1;  ///< Adam's step count (bias correction): 1 in the first iteration
  bool loss_wanted_ = false;  ///< read each microbatch's loss (replay_training)
  double loss_sum_ = 0;       ///< this iteration's loss: sum of the scaled microbatch losses
  std::int64_t gpu_step_params_ = 0, cpu_step_params_ = 0, gpu_offset_ = 0, cpu_offset_ = 0;
  std::int64_t cpu_cursor_ = 0, cpu_steps_ = 0, copies_ = 0;
  torch::Tensor gpu_master_, gpu_m_, gpu_v_, cpu_master_, cpu_m_, cpu_v_;
  torch::Tensor cpu_grads_host_, cpu_params_host_;
  std::unique_ptr<kernels::CpuAdam> cpu_adam_;

  // Declared last: destroyed first (NCCL communicators wait for the work on the buffers).
  std::unique_ptr<CommBackend> comm_;
  std::vector<std::string> notes_;
};

}  // namespace

namespace detail {

ExecutionRecord execute(const ScheduleGraph& graph, RankId rank, const std::vector<TaskId>& order,
                        const ReplayOptions& opts, int iterations, std::vector<double>* losses) {
  Executor ex(graph, rank, order, opts);
  if (losses) ex.want_losses();
  return ex.run(iterations, losses);
}

}  // namespace detail
}  // namespace trainsim::hw
