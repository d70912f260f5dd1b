// The LibTorch half of the replay executor (replay.h): model state of one rank, the work of
// each task kind, the CPU and CUDA issue loops, timing and memory sampling.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <limits>
#include <map>
#include <memory>
#include <set>
#include <sstream>
#include <stdexcept>
#include <thread>

#include <ATen/CPUGeneratorImpl.h>
#include <c10/core/CPUAllocator.h>
#include <torch/torch.h>
#include <torch/version.h>

#ifdef TRAINSIM_TORCH_CUDA
#include <ATen/cuda/CUDAContext.h>
#include <ATen/cuda/CUDAEvent.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#endif
#ifdef TRAINSIM_HAVE_FUSED_ADAM
#include "kernels/fused_adam.h"
#endif
#if defined(TRAINSIM_TORCH_CUDA) && defined(TRAINSIM_HAVE_NCCL)
#include "kernels/fused_adam.h"  // kernels::cuda::set_device
#include "kernels/nccl_comm.h"
#include "kernels/rendezvous.h"
#define TRAINSIM_NCCL_REPLAY 1
#endif

#include "hw_backend/comm_plan.h"
#include "hw_backend/executor.h"
#include "hw_backend/transformer_layer.h"
#include "kernels/cpu_adam.h"
#include "models/cost_model.h"
#include "models/memory_model.h"

namespace trainsim::hw {

std::string torch_version() { return TORCH_VERSION; }

bool cuda_available(std::string* why) {
#ifdef TRAINSIM_TORCH_CUDA
  if (torch::cuda::is_available()) return true;
  if (why) *why = "LibTorch " + torch_version() + " has CUDA but no CUDA device is visible";
  return false;
#else
  if (why)
    *why = "LibTorch " + torch_version() +
           " was built without CUDA (Debian's libtorch-dev is CPU-only); configure against a "
           "CUDA LibTorch, e.g. -DCMAKE_PREFIX_PATH=$(python3 -c 'import torch; "
           "print(torch.utils.cmake_prefix_path)')";
  return false;
#endif
}

bool multiprocess_available(std::string* why) {
#ifdef TRAINSIM_NCCL_REPLAY
  std::string reason;
  if (!kernels::nccl::available(&reason)) {
    if (why) *why = "the NCCL library cannot be loaded: " + reason;
    return false;
  }
  return true;
#elif defined(TRAINSIM_TORCH_CUDA)
  if (why)
    *why = "this build has no NCCL (kernels/nccl_comm.h was not built: nccl.h not found; "
           "configure with -DNCCL_ROOT=...)";
  return false;
#else
  return cuda_available(why);  // false, with the reason: no CUDA LibTorch
#endif
}

namespace {

// ------------------------------------------------------------------ CPU allocator counter
/// A counting wrapper around LibTorch's default CPU allocator: bytes of live CPU tensors and
/// their peak. Installed once per process (SetCPUAllocator); it forwards every allocation.
class CountingCpuAllocator final : public c10::Allocator {
 public:
  explicit CountingCpuAllocator(c10::Allocator* base) : base_(base) {}

  c10::DataPtr allocate(std::size_t n) const override {
    c10::DataPtr inner = base_->allocate(n);
    void* data = inner.get();
    const c10::Device device = inner.device();
    auto* ctx = new Context{std::move(inner), static_cast<std::int64_t>(n),
                            const_cast<CountingCpuAllocator*>(this)};
    const std::int64_t now = in_use_.fetch_add(ctx->bytes) + ctx->bytes;
    std::int64_t peak = peak_.load();
    while (now > peak && !peak_.compare_exchange_weak(peak, now)) {
    }
    return {data, ctx, &release, device};
  }
  c10::DeleterFnPtr raw_deleter() const override { return nullptr; }

  std::int64_t in_use() const { return in_use_.load(); }
  std::int64_t peak() const { return peak_.load(); }
  void reset_peak() { peak_.store(in_use_.load()); }

 private:
  struct Context {
    c10::DataPtr inner;
    std::int64_t bytes;
    CountingCpuAllocator* self;
  };
  static void release(void* p) {
    auto* ctx = static_cast<Context*>(p);
    ctx->self->in_use_.fetch_sub(ctx->bytes);
    delete ctx;  // frees through the inner DataPtr's own deleter
  }

  c10::Allocator* base_;
  mutable std::atomic<std::int64_t> in_use_{0};
  mutable std::atomic<std::int64_t> peak_{0};
};

CountingCpuAllocator& cpu_counter() {
  // Never destroyed: tensors allocated through it may outlive any static destructor order.
  static CountingCpuAllocator* counter = [] {
    auto* c = new CountingCpuAllocator(c10::GetDefaultCPUAllocator());
    c10::SetCPUAllocator(c, /*priority=*/200);
    return c;
  }();
  return *counter;
}

// ------------------------------------------------------------------ helpers
struct DeviceChoice {
  bool cuda = false;
  int index = 0;
};

DeviceChoice parse_device(const std::string& s) {
  if (s == "cpu") return {};
  if (s == "cuda" || s.rfind("cuda:", 0) == 0) {
    DeviceChoice d;
    d.cuda = true;
    if (s.size() > 5) {
      try {
        std::size_t used = 0;
        d.index = std::stoi(s.substr(5), &used);
        if (used != s.size() - 5 || d.index < 0) throw std::invalid_argument(s);
      } catch (const std::exception&) {
        throw InputError("replay: --device " + s + ": expected cpu, cuda or cuda:N");
      }
    }
    std::string why;
    if (!cuda_available(&why)) throw InputError("replay: --device " + s + ": " + why);
    return d;
  }
  throw InputError("replay: --device " + s + ": expected cpu, cuda or cuda:N");
}

torch::Dtype model_dtype(const DeviceChoice& dev, const Scenario& sc, const ReplayOptions& o) {
  if (dev.cuda) return sc.parallel.precision == Precision::BF16 ? torch::kBFloat16 : torch::kHalf;
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

constexpr double kInf = std::numeric_limits<double>::infinity();

std::uint64_t block_key(std::uint32_t mb, std::uint32_t layer, Part part) {
  return (std::uint64_t(mb) << 32) | (std::uint64_t(layer) << 1) | (part == Part::Mlp ? 1 : 0);
}
std::uint64_t mb_key(std::uint32_t mb, std::uint32_t layer) {
  return (std::uint64_t(mb) << 32) | layer;
}

// ------------------------------------------------------------------ the executor
class Executor {
 public:
  Executor(const ScheduleGraph& g, const Scenario& sc, RankId rank, const std::vector<TaskId>& order,
           const ReplayOptions& o)
      : g_(g), sc_(sc), rank_(rank), order_(order), opts_(o), dev_(parse_device(o.device)) {
    dtype_ = model_dtype(dev_, sc, o);
    device_ = dev_.cuda ? torch::Device(torch::kCUDA, dev_.index) : torch::Device(torch::kCPU);
    fopts_ = torch::TensorOptions().dtype(dtype_).device(device_);
    dropout_.attention = o.attention_dropout;
    dropout_.hidden = o.hidden_dropout;
    if (o.nprocs > 1) {
      if (!dev_.cuda)
        throw InputError("replay: --nprocs " + std::to_string(o.nprocs) +
                         " (one process per GPU, NCCL) needs --device cuda");
      std::string why;
      if (!multiprocess_available(&why))
        throw InputError("replay: --nprocs " + std::to_string(o.nprocs) + ": " + why);
      if (o.nccl_dir.empty())
        throw InputError("replay: --nprocs " + std::to_string(o.nprocs) +
                         ": no rendezvous directory (set TRAINSIM_NCCL_DIR to a directory every "
                         "rank can read, on a shared file system across nodes)");
      if (static_cast<std::int64_t>(rank) >= o.nprocs)
        throw InputError("replay: rank " + std::to_string(rank) + " is not among the " +
                         std::to_string(o.nprocs) + " processes of a multi-process replay");
      nccl_ = true;
    }
  }

  ExecutionRecord run() {
    if (!dev_.cuda) cpu_counter();  // install before any tensor of the replay exists
    if (opts_.threads > 0) at::set_num_threads(opts_.threads);
    const auto wall0 = std::chrono::steady_clock::now();
    ExecutionRecord rec;
    rec.measured = true;
    rec.start_s.assign(g_.num_tasks(), std::numeric_limits<double>::quiet_NaN());
    rec.end_s.assign(g_.num_tasks(), std::numeric_limits<double>::quiet_NaN());
    replayed_as_.assign(g_.num_tasks(), std::string());
    setup();
    if (dev_.cuda)
      run_cuda(rec);
    else
      run_cpu(rec);
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
    const auto& p = sc_.parallel;
    coords_ = p.layout().coords(rank_);
    if (nccl_) plan_ = plan_communicators(g_, opts_.nprocs);

    // Which parts of the model this rank holds, and the shapes, from its compute tasks.
    const OpDesc* shape_op = nullptr;
    for (TaskId id : order_) {
      const Task& t = g_.task(id);
      const OpDesc& op = g_.op(id);
      if (t.kind == TaskKind::Compute) {
        if (!shape_op) shape_op = &op;
        if (op.kind == OpKind::EmbedFwd) has_embed_ = true;
        if (op.kind == OpKind::LogitsLossFwd) has_logits_ = true;
        if (t.part == Part::Attn || t.part == Part::Mlp) layers_.insert(t.layer);
      }
      if (t.kind == TaskKind::Collective && op.group_size > 1 && t.part != Part::Pipeline) {
        if (nccl_ && plan_.uses_nccl(g_, id))
          nccl_bytes_[int(t.stream)] = std::max(nccl_bytes_[int(t.stream)], op.bytes);
        else
          comm_bytes_ = std::max<std::int64_t>(
              comm_bytes_, std::int64_t(CostModel::ring_bytes_per_rank(op.kind, double(op.bytes),
                                                                        op.group_size)));
      }
      if (t.kind == TaskKind::CopyH2D || t.kind == TaskKind::CopyD2H)
        copy_bytes_ = std::max(copy_bytes_, op.bytes);
      if (t.kind == TaskKind::OptimizerGpu) gpu_step_params_ = std::max(gpu_step_params_, op.params);
      if (t.kind == TaskKind::OptimizerCpu) cpu_step_params_ += op.params;  // sub-groups, in order
      if (t.kind == TaskKind::CopyH2D || t.kind == TaskKind::CopyD2H) ++copies_;
    }
    if (!shape_op) throw std::logic_error("replay: rank " + std::to_string(rank_) + " has no compute task");
    d_.b = shape_op->micro_batch, d_.s = shape_op->seq, d_.h = shape_op->hidden;
    d_.heads = shape_op->heads, d_.head_dim = shape_op->head_dim, d_.ffn = shape_op->ffn;
    d_.vocab = shape_op->vocab, d_.tp = shape_op->tp;
    sequence_parallel_ = shape_op->sequence_parallel;
    selective_ = p.recompute_granularity == Recompute::Selective;

    // Parameter shapes in flat-buffer order: embedding, layers, final LayerNorm, output copy.
    std::vector<std::vector<std::int64_t>> shapes;
    if (has_embed_) shapes.push_back({d_.vocab, d_.h}), shapes.push_back({d_.s, d_.h});
    for (std::size_t i = 0; i < layers_.size(); ++i)
      for (const auto& [name, shape] : layer_param_shapes(d_)) shapes.push_back(shape);
    const bool own_output = has_logits_ && (!has_embed_ || sc_.model.untie_embeddings_and_output_weights);
    if (has_logits_) shapes.push_back({d_.h}), shapes.push_back({d_.h});
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
      word_ = params[k++], pos_ = params[k++];
      normal(word_, 0.02), normal(pos_, 0.02);  // init_method_normal(0.02)
    }
    for (std::uint16_t layer : layers_) {
      std::vector<torch::Tensor> lw(params.begin() + k, params.begin() + k + 12);
      k += 12;
      weights_[layer] = bind_layer_weights(lw);
      init_layer_weights(weights_[layer], sc_.model.num_layers, gen);
    }
    if (has_logits_) {
      final_ln_w_ = params[k++], final_ln_b_ = params[k++];
      final_ln_w_.fill_(1.0), final_ln_b_.zero_();
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

    // Inputs: token ids and labels of every microbatch (random, in this rank's vocab shard).
    const std::int64_t nmb = p.num_microbatches;
    auto ids = torch::TensorOptions().dtype(torch::kInt64);
    tokens_ = torch::randint(0, d_.vocab, {nmb, d_.b, d_.s}, gen, ids).to(device_);
    labels_ = torch::randint(0, d_.vocab, {nmb, d_.b, d_.s}, gen, ids).to(device_);
    loss_scale_ = 1.0 / static_cast<double>(nmb);

    // Pipeline staging buffers (what the absent neighbour would have sent), comm scratch.
    // Only a rank with pipeline messages needs them (they would count as memory a real run
    // does not hold).
    bool pipeline = false;
    for (TaskId id : order_) {
      const Task& t = g_.task(id);
      pipeline = pipeline || t.kind == TaskKind::Send || t.kind == TaskKind::Recv ||
                 t.part == Part::Pipeline;
    }
    if (pipeline) {
      staging_[0] = torch::randn({d_.s, d_.b, d_.h}, gen, torch::kFloat32).to(fopts_);
      staging_[1] = (torch::randn({d_.s, d_.b, d_.h}, gen, torch::kFloat32) * 1e-3).to(fopts_);
    }
    if (comm_bytes_ > 0) {
      comm_src_ = torch::zeros({comm_bytes_}, fopts_.dtype(torch::kUInt8));
      comm_dst_ = torch::empty({comm_bytes_}, fopts_.dtype(torch::kUInt8));
    }
    // NCCL collectives: one zeroed scratch buffer per stream (collectives of two streams may
    // run at once), as large as the largest op.bytes on it.
    for (const auto& [stream, bytes] : nccl_bytes_)
      nccl_buf_[stream] = torch::zeros({bytes}, fopts_.dtype(torch::kUInt8));
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
    if (it == m.end())
      throw std::logic_error("replay: task " + std::to_string(id) + " (" + g_.label(id) +
                             ") has no " + what + " for microbatch " + std::to_string(mb));
    if (pending_fill_.count(mb_key(mb, &m == &grad_ ? 1 : 0)))
      throw std::logic_error("replay: task " + std::to_string(id) + " (" + g_.label(id) +
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
    const bool full = sc_.parallel.recompute_granularity == Recompute::Full;
    switch (op.kind) {
      case OpKind::EmbedFwd: {
        torch::Tensor out = embed_forward(word_, pos_, tokens_[mb], d_, dropout_);
        embed_out_[mb] = out;
        act_[mb] = out.detach();
        return;
      }
      case OpKind::AttnFwd:
      case OpKind::MlpFwd: {
        const LayerWeights& w = weights_.at(t.layer);
        const bool attn = op.kind == OpKind::AttnFwd;
        if (t.phase == Phase::Forward && full) {
          // Full recomputation (Megatron checkpointed layer): no autograd state, keep only
          // the layer input for the recompute task.
          torch::NoGradGuard no_grad;
          torch::Tensor x = take(act_, mb, id, "input activation");
          if (attn) stash_[mb_key(mb, t.layer)] = x;
          act_[mb] = attn ? attn_forward(w, x, mask_, d_, dropout_).output
                          : mlp_forward(w, x, d_, dropout_).output;
          return;
        }
        torch::Tensor x;
        if (t.phase == Phase::Recompute && attn) {
          auto it = stash_.find(mb_key(mb, t.layer));
          if (it == stash_.end())
            throw std::logic_error("replay: recompute task " + g_.label(id) + " has no stashed input");
          x = it->second;
          stash_.erase(it);
        } else {
          x = take(act_, mb, id, "input activation");
        }
        BlockState st = attn ? attn_forward(w, x, mask_, d_, dropout_, selective_)
                             : mlp_forward(w, x, d_, dropout_);
        // The recomputed MLP output feeds nothing: the backward starts from the gradient.
        if (t.phase != Phase::Recompute || attn) act_[mb] = st.output.detach();
        blocks_[block_key(mb, t.layer, t.part)] = std::move(st);
        return;
      }
      case OpKind::AttnBwd:
      case OpKind::MlpBwd: {
        auto it = blocks_.find(block_key(mb, t.layer, t.part));
        if (it == blocks_.end())
          throw std::logic_error("replay: backward task " + g_.label(id) + " has no forward state");
        torch::Tensor g = take(grad_, mb, id, "output gradient");
        grad_[mb] = block_backward(it->second, g, mask_, d_, dropout_);
        blocks_.erase(it);
        return;
      }
      case OpKind::LogitsLossFwd: {
        torch::Tensor x = take(act_, mb, id, "input activation").detach().requires_grad_(true);
        torch::Tensor loss =
            logits_loss_forward(x, final_ln_w_, final_ln_b_, output_w_, labels_[mb], loss_scale_);
        logits_[mb] = {x, loss};
        return;
      }
      case OpKind::LogitsLossBwd: {
        auto it = logits_.find(mb);
        if (it == logits_.end())
          throw std::logic_error("replay: " + g_.label(id) + " has no forward state");
        torch::autograd::backward({it->second.second});
        grad_[mb] = it->second.first.grad();
        logits_.erase(it);
        return;
      }
      case OpKind::EmbedBwd: {
        auto it = embed_out_.find(mb);
        if (it == embed_out_.end())
          throw std::logic_error("replay: " + g_.label(id) + " has no forward state");
        torch::Tensor g = take(grad_, mb, id, "output gradient");
        torch::autograd::backward({it->second}, {g});
        embed_out_.erase(it);
        return;
      }
      default:
        throw std::logic_error(std::string("replay: compute task with op ") + to_string(op.kind));
    }
  }

  void collective(TaskId id, const Task& t, const OpDesc& op) {
    if (op.group_size <= 1) {
      ++noop_collectives_;
      replayed_as_[id] = "no-op";
      return;
    }
    const bool nccl = nccl_ && plan_.uses_nccl(g_, id);
    const int dir = t.phase == Phase::Backward ? 1 : 0;
    auto pending = pending_fill_.find(mb_key(t.microbatch, dir));
    if (t.part == Part::Pipeline && op.kind == OpKind::AllGather && pending != pending_fill_.end()) {
      // Scatter/gather pipeline message (SC'21 Sec. 4.1): the all-gather completes the
      // received tensor, which holds this TP rank's slice [off, off + n).
      torch::Tensor& dst = dir ? grad_.at(t.microbatch) : act_.at(t.microbatch);
      const auto [off, n] = pending->second;
      const std::int64_t total = dst.numel();
      pending_fill_.erase(pending);
      if (nccl && nccl_gather_in_place(id, t, dst, off, n)) return;
      // The slices the other TP ranks would have received.
      torch::Tensor flat = dst.view(-1), stage = staging_[dir].view(-1);
      if (off > 0) flat.narrow(0, 0, off).copy_(stage.narrow(0, 0, off));
      if (off + n < total) flat.narrow(0, off + n, total - off - n).copy_(stage.narrow(0, off + n, total - off - n));
      ++copied_collectives_[int(op.group)];
      replayed_as_[id] = "device-local copy";
      return;
    }
    if (nccl) return nccl_collective(id, t, op);
    const auto ring = std::int64_t(CostModel::ring_bytes_per_rank(op.kind, double(op.bytes), op.group_size));
    if (ring > 0) comm_dst_.narrow(0, 0, ring).copy_(comm_src_.narrow(0, 0, ring));
    ++copied_collectives_[int(op.group)];
    replayed_as_[id] = "device-local copy";
  }

  /// Elements of a pipeline message and where they sit in the full tensor of `numel`
  /// elements: the whole tensor, or (scatter/gather, SC'21 Sec. 4.1) this TP rank's 1/tp slice.
  std::pair<std::int64_t, std::int64_t> message_slice(const OpDesc& op, std::int64_t numel,
                                                      std::int64_t elem_bytes) const {
    const std::int64_t n = std::min<std::int64_t>(numel, op.bytes / elem_bytes);
    const std::int64_t off = n < numel ? std::min(coords_.tp_rank * n, numel - n) : 0;
    return {off, n};
  }

  void send(TaskId id, const Task& t, const OpDesc& op) {
    const int dir = t.phase == Phase::Backward ? 1 : 0;
    torch::Tensor src = take(dir ? grad_ : act_, t.microbatch, id, "tensor to send");
    const auto [off, n] = message_slice(op, src.numel(), src.element_size());
    ++sends_;
    if (nccl_ && plan_.uses_nccl(g_, id)) return nccl_send(id, t, src.contiguous().view(-1).narrow(0, off, n));
    staging_[dir].view(-1).narrow(0, 0, n).copy_(src.reshape(-1).narrow(0, off, n));
    record_stream(src, StreamId::PpComm);
    replayed_as_[id] = "device-local copy";
  }

  void recv(TaskId id, const Task& t, const OpDesc& op) {
    const int dir = t.phase == Phase::Backward ? 1 : 0;
    torch::Tensor dst = torch::empty({d_.s, d_.b, d_.h}, fopts_);
    const auto [off, n] = message_slice(op, dst.numel(), dst.element_size());
    ++recvs_;
    if (nccl_ && plan_.uses_nccl(g_, id)) {
      nccl_recv(id, t, dst.view(-1).narrow(0, off, n));
    } else {
      dst.view(-1).narrow(0, off, n).copy_(staging_[dir].view(-1).narrow(0, 0, n));
      replayed_as_[id] = "device-local copy";
    }
    if (n < dst.numel()) pending_fill_[mb_key(t.microbatch, dir)] = {off, n};
    record_stream(dst, StreamId::Compute);
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
      cpu_adam_->step(adam_hp_, /*step=*/1, /*grad_unscale=*/1.0f, a);
      return;
    }
#ifdef TRAINSIM_TORCH_CUDA
#ifdef TRAINSIM_HAVE_FUSED_ADAM
    kernels::cuda::fused_adam_step(adam_hp_, 1, 1.0f, a,
                                   static_cast<kernels::cuda::StreamHandle>(
                                       c10::cuda::getCurrentCUDAStream(dev_.index).stream()));
#else
    // kernels/ built without nvcc: the same update with LibTorch tensor operations.
    torch::NoGradGuard no_grad;
    const auto g = grads.to(torch::kFloat32);
    gpu_m_.mul_(adam_hp_.beta1).add_(g, 1 - adam_hp_.beta1);
    gpu_v_.mul_(adam_hp_.beta2).addcmul_(g, g, 1 - adam_hp_.beta2);
    const double bc1 = 1 - adam_hp_.beta1, bc2 = 1 - adam_hp_.beta2;
    gpu_master_.addcdiv_(gpu_m_, (gpu_v_.sqrt() / std::sqrt(bc2)).add_(adam_hp_.eps),
                         -adam_hp_.lr / bc1);
    out.copy_(gpu_master_);
#endif
#endif
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
    cpu_adam_->step(adam_hp_, 1, 1.0f,
                    adam_tensors(master, m, v, grads.narrow(0, at, n), out.narrow(0, at, n)));
    ++cpu_steps_;
  }

  // ---------------------------------------------------------------- NCCL (multi-process)
#ifdef TRAINSIM_NCCL_REPLAY
  const kernels::nccl::Communicator& comm_of(const Task& t) const {
    return comms_.at(static_cast<std::size_t>(plan_.comm_of_group.at(t.group)));
  }
  cudaStream_t current_stream() const { return c10::cuda::getCurrentCUDAStream(dev_.index).stream(); }

  /// The world and group communicators (collective over the job's processes, same plan on
  /// each), then a barrier on `stream`, so the ranks' iteration clocks start together.
  void setup_nccl(const c10::cuda::CUDAStream& stream) {
    namespace nc = kernels::nccl;
    const auto t0 = std::chrono::steady_clock::now();
    kernels::cuda::set_device(dev_.index);  // NCCL uses the calling thread's current device
    kernels::FileRendezvous rv(opts_.nccl_dir, opts_.nccl_run_id, opts_.nccl_timeout_s);
    world_ = nc::Communicator::init_with_rendezvous(rv, "nccl-id.world", int(opts_.nprocs), int(rank_));
    if (rank_ == 0) rv.remove("nccl-id.world");  // init returned: every rank has read it
    comms_ = nc::make_group_communicators(world_, plan_.members(g_), rv, "nccl-id.group");
    torch::Tensor one = torch::ones({1}, torch::TensorOptions().dtype(torch::kFloat32).device(device_));
    world_.all_reduce(one.data_ptr(), one.data_ptr(), 1, kernels::DType::F32, stream.stream());
    at::cuda::CUDAEvent barrier;
    barrier.record(stream);
    wait_event(barrier, "the barrier before the iteration");
    if (one.item<float>() != static_cast<float>(opts_.nprocs))
      throw std::runtime_error("replay: the NCCL barrier all-reduce of ones gave " +
                               std::to_string(one.item<float>()) + ", expected " +
                               std::to_string(opts_.nprocs));
    nccl_setup_s_ = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  }

  void nccl_collective(TaskId id, const Task& t, const OpDesc& op) {
    const kernels::nccl::Communicator& comm = comm_of(t);
    torch::Tensor& buf = nccl_buf_.at(int(t.stream));
    const std::size_t es = static_cast<std::size_t>(flat_params_.element_size());
    const std::size_t count = static_cast<std::size_t>(op.bytes) / es;
    const std::size_t part = count / static_cast<std::size_t>(comm.size());
    char* base = static_cast<char*>(buf.data_ptr());
    const std::size_t me = static_cast<std::size_t>(comm.rank());
    switch (op.kind) {
      case OpKind::AllReduce: comm.all_reduce(base, base, count, kernel_dtype(dtype_), current_stream()); break;
      case OpKind::AllGather:  // in place: this rank's block inside the gathered buffer
        comm.all_gather(base + me * part * es, base, part, kernel_dtype(dtype_), current_stream());
        break;
      case OpKind::ReduceScatter:
        comm.reduce_scatter(base, base + me * part * es, part, kernel_dtype(dtype_), current_stream());
        break;
      default:
        throw std::logic_error("replay: collective task " + g_.label(id) + " has op " + to_string(op.kind));
    }
    ++nccl_collectives_[int(op.group)];
    replayed_as_[id] = "nccl";
  }

  /// The pipeline all-gather of a received slice, in place in the received tensor; false
  /// when the slice is not this rank's block of it (then the caller fills it by copies).
  bool nccl_gather_in_place(TaskId id, const Task& t, torch::Tensor& dst, std::int64_t off,
                            std::int64_t n) {
    const kernels::nccl::Communicator& comm = comm_of(t);
    if (off != comm.rank() * n || n * comm.size() != dst.numel()) return false;
    char* base = static_cast<char*>(dst.data_ptr());
    comm.all_gather(base + off * dst.element_size(), base, static_cast<std::size_t>(n),
                    kernel_dtype(dtype_), current_stream());
    record_stream(dst, t.stream);
    ++nccl_collectives_[int(g_.op(id).group)];
    replayed_as_[id] = "nccl";
    return true;
  }

  /// ncclSend on the channel [this rank, peer], on a stream of its own per destination that
  /// first waits for what the send waited for on the pipeline stream.
  void nccl_send(TaskId id, const Task& t, const torch::Tensor& slice) {
    const kernels::nccl::Communicator& comm = comm_of(t);
    const c10::cuda::CUDAStream cur = c10::cuda::getCurrentCUDAStream(dev_.index);
    auto it = send_streams_.find(RankId(t.peer));
    if (it == send_streams_.end())
      it = send_streams_.emplace(RankId(t.peer), c10::cuda::getStreamFromPool(false, dev_.index)).first;
    const c10::cuda::CUDAStream side = it->second;
    at::cuda::CUDAEvent posted;
    posted.record(cur);
    posted.block(side);
    comm.send(slice.data_ptr(), static_cast<std::size_t>(slice.numel()), kernel_dtype(dtype_),
              /*peer=*/1, side.stream());
    c10::cuda::CUDACachingAllocator::recordStream(slice.storage().data_ptr(), side);
    sent_ev_[id] = std::make_unique<at::cuda::CUDAEvent>(cudaEventDefault);
    sent_ev_[id]->record(side);
    ++nccl_sends_;
    replayed_as_[id] = "nccl";
  }

  /// ncclRecv on the channel [peer, this rank], on the pipeline stream (blocking it).
  void nccl_recv(TaskId id, const Task& t, const torch::Tensor& slice) {
    comm_of(t).recv(slice.data_ptr(), static_cast<std::size_t>(slice.numel()), kernel_dtype(dtype_),
                    /*peer=*/0, current_stream());
    ++nccl_recvs_;
    replayed_as_[id] = "nccl";
  }

  void abort_nccl() noexcept {
    for (auto& c : comms_) c.abort();
    world_.abort();
  }

  /// Waits for `ev`. With NCCL it polls, so a peer that died, an NCCL error or a schedule
  /// whose ranks wait on each other ends in an error after nccl_timeout_s instead of a hang.
  void wait_event(const at::cuda::CUDAEvent& ev, const std::string& what) {
    if (!nccl_) return ev.synchronize();
    const auto t0 = std::chrono::steady_clock::now();
    while (!ev.query()) {
      std::string err = world_.async_error();
      for (const auto& c : comms_)
        if (err.empty()) err = c.async_error();
      const double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      if (!err.empty() || waited > opts_.nccl_timeout_s) {
        abort_nccl();
        throw std::runtime_error(
            "replay: rank " + std::to_string(rank_) + ": " +
            (err.empty() ? "NCCL operations did not finish within " + std::to_string(waited) +
                               " s (TRAINSIM_NCCL_TIMEOUT_S) while waiting for " + what +
                               ": a peer process failed or stopped, or the ranks wait on each other"
                         : "NCCL error while waiting for " + what + ": " + err));
      }
      std::this_thread::sleep_for(std::chrono::microseconds(200));
    }
  }
#else
  void nccl_collective(TaskId, const Task&, const OpDesc&) {
    throw std::logic_error("replay: NCCL collective in a build without NCCL replay");
  }
  bool nccl_gather_in_place(TaskId, const Task&, torch::Tensor&, std::int64_t, std::int64_t) { return false; }
  void nccl_send(TaskId, const Task&, const torch::Tensor&) {
    throw std::logic_error("replay: NCCL send in a build without NCCL replay");
  }
  void nccl_recv(TaskId, const Task&, const torch::Tensor&) {
    throw std::logic_error("replay: NCCL receive in a build without NCCL replay");
  }
#endif

  // ---------------------------------------------------------------- issue loops
  void run_cpu(ExecutionRecord& rec) {
    CountingCpuAllocator& counter = cpu_counter();
    rec.executor = "libtorch-" + torch_version() + "-cpu";
    rec.device = "cpu (" + std::to_string(at::get_num_threads()) + " LibTorch threads)";
    counter.reset_peak();
    const auto t0 = std::chrono::steady_clock::now();
    auto now = [&] { return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(); };
    rec.allocated_bytes_samples.emplace_back(0.0, counter.in_use());
    rec.reserved_bytes_samples.emplace_back(0.0, counter.in_use());
    for (TaskId id : order_) {
      const double start = now();
      run_task(id);
      const double end = now();
      // A zero-length span would be invisible and break start < end: clock resolution is
      // ~1 ns on Linux, so this only nudges empty tasks (no-op collectives).
      rec.start_s[id] = start;
      rec.end_s[id] = end > start ? end : std::nextafter(start, kInf);
      rec.allocated_bytes_samples.emplace_back(rec.end_s[id], counter.in_use());
      rec.reserved_bytes_samples.emplace_back(rec.end_s[id], counter.in_use());
    }
    rec.peak_allocated_bytes = counter.peak();
    rec.peak_reserved_bytes = counter.peak();
  }

#ifdef TRAINSIM_TORCH_CUDA
  void run_cuda(ExecutionRecord& rec) {
    namespace cca = c10::cuda::CUDACachingAllocator;
    c10::cuda::CUDAGuard guard(static_cast<c10::DeviceIndex>(dev_.index));
    const cudaDeviceProp* prop = at::cuda::getDeviceProperties(dev_.index);
    rec.executor = "libtorch-" + torch_version() + "-cuda";
    rec.device = "cuda:" + std::to_string(dev_.index) + " (" + prop->name + ")";
    for (int s = 0; s < kNumStreams; ++s)
      streams_.push_back(c10::cuda::getStreamFromPool(/*isHighPriority=*/false, dev_.index));
    const c10::cuda::CUDAStream marker = c10::cuda::getStreamFromPool(false, dev_.index);
    torch::cuda::synchronize(dev_.index);
#ifdef TRAINSIM_NCCL_REPLAY
    if (nccl_) setup_nccl(streams_[0]);  // communicators, then a barrier on streams_[0]
#endif
    cca::resetPeakStats(dev_.index);
    const auto stat = [&](bool reserved) {
      const auto st = cca::getDeviceStats(dev_.index);
      const auto& s = reserved ? st.reserved_bytes : st.allocated_bytes;
      return s[static_cast<std::size_t>(cca::StatType::AGGREGATE)];
    };
    at::cuda::CUDAEvent base(cudaEventDefault);
    base.record(streams_[0]);
    std::vector<std::unique_ptr<at::cuda::CUDAEvent>> start_ev(g_.num_tasks()), end_ev(g_.num_tasks());
    std::vector<std::pair<std::int64_t, std::int64_t>> mem;  // (allocated, reserved) at issue
    rec.allocated_bytes_samples.emplace_back(0.0, stat(false).current);
    rec.reserved_bytes_samples.emplace_back(0.0, stat(true).current);
    const DependencyGraph& deps = g_.dependencies();
    for (TaskId id : order_) {
      const Task& t = g_.task(id);
      start_ev[id] = std::make_unique<at::cuda::CUDAEvent>(cudaEventDefault);
      end_ev[id] = std::make_unique<at::cuda::CUDAEvent>(cudaEventDefault);
      if (t.stream == StreamId::Cpu) {
        // Host work: wait for its dependencies, mark its span on an idle stream.
        for (auto [e, end] = boost::in_edges(id, deps); e != end; ++e) {
          const auto from = static_cast<TaskId>(boost::source(*e, deps));
          if (end_ev[from]) wait_event(*end_ev[from], "task " + g_.label(from));
        }
        start_ev[id]->record(marker);
        marker.synchronize();
        run_task(id);
        end_ev[id]->record(marker);
      } else {
        const c10::cuda::CUDAStream& stream = streams_[int(t.stream)];
        c10::cuda::CUDAStreamGuard sg(stream);
        for (auto [e, end] = boost::in_edges(id, deps); e != end; ++e) {
          const auto from = static_cast<TaskId>(boost::source(*e, deps));
          if (end_ev[from] && g_.task(from).stream != t.stream) end_ev[from]->block(stream);
        }
        start_ev[id]->record(stream);
        run_task(id);
        end_ev[id]->record(stream);
      }
      mem.emplace_back(stat(false).current, stat(true).current);
    }
    if (nccl_) {  // every stream's work done, or an error after the timeout
      std::vector<c10::cuda::CUDAStream> all(streams_.begin(), streams_.end());
      all.push_back(marker);
#ifdef TRAINSIM_NCCL_REPLAY
      for (const auto& [peer, side] : send_streams_) all.push_back(side);
#endif
      for (const auto& st : all) {
        at::cuda::CUDAEvent done;
        done.record(st);
        wait_event(done, "the end of the iteration");
      }
    }
    torch::cuda::synchronize(dev_.index);
    std::size_t i = 0;
    for (TaskId id : order_) {
      // A send's span ends when its message is delivered (its own stream), not when posted.
      const at::cuda::CUDAEvent& last = sent_ev_.count(id) ? *sent_ev_.at(id) : *end_ev[id];
      rec.start_s[id] = base.elapsed_time(*start_ev[id]) * 1e-3;
      rec.end_s[id] = std::max(base.elapsed_time(last) * 1e-3, rec.start_s[id]);
      if (!(rec.end_s[id] > rec.start_s[id])) rec.end_s[id] = std::nextafter(rec.start_s[id], kInf);
      rec.allocated_bytes_samples.emplace_back(rec.end_s[id], mem[i].first);
      rec.reserved_bytes_samples.emplace_back(rec.end_s[id], mem[i].second);
      ++i;
    }
    rec.peak_allocated_bytes = stat(false).peak;
    rec.peak_reserved_bytes = stat(true).peak;
  }

  void record_stream(const torch::Tensor& t, StreamId s) {
    if (dev_.cuda && t.defined())
      c10::cuda::CUDACachingAllocator::recordStream(t.storage().data_ptr(), streams_[int(s)]);
  }
#ifndef TRAINSIM_NCCL_REPLAY
  void wait_event(const at::cuda::CUDAEvent& ev, const std::string&) { ev.synchronize(); }
#endif
#else
  void run_cuda(ExecutionRecord&) {
    throw std::logic_error("replay: CUDA issue loop in a build without CUDA LibTorch");
  }
  void record_stream(const torch::Tensor&, StreamId) {}
#endif

  /// The optimizer reads the gradients from the contiguous buffer: autograd must have
  /// accumulated into the preset .grad views (in place), not replaced them.
  void check_gradient_buffer() {
    if (dev_.cuda) torch::cuda::synchronize(dev_.index);
    const auto* base = static_cast<const char*>(flat_grads_.data_ptr());
    for (const auto& [prm, off] : grad_views_) {
      const torch::Tensor& g = prm.grad();
      if (!g.defined() || g.data_ptr() != base + off * flat_grads_.element_size())
        throw std::logic_error("replay: a parameter's gradient left the contiguous gradient "
                               "buffer (autograd replaced .grad instead of accumulating)");
    }
    if (flat_grads_.abs().max().item<double>() == 0.0)
      throw std::logic_error("replay: the backward tasks left the gradient buffer all zero");
  }

  // ---------------------------------------------------------------- notes
  void setup_notes() {
    const auto& p = sc_.parallel;
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
      notes_.push_back(std::string("precision: the scenario's ") + to_string(p.precision) +
                       " was replayed as " + dtype_name(dtype_) +
                       " on the CPU (LibTorch 1.13 CPU half-precision GEMMs are very slow or "
                       "missing)");
    else
      notes_.push_back(std::string("precision: ") + dtype_name(dtype_) + " model, fp32 master "
                       "weights and Adam moments, no loss scaling (grad_unscale 1)");
    if (d_.tp > 1)
      notes_.push_back("vocab-parallel cross entropy: softmax over this rank's vocabulary shard "
                       "only (the cross-rank max/sum all-reduces are replayed as copies)");
    if (sequence_parallel_)
      notes_.push_back("sequence parallelism: LayerNorm and dropout regions ran on the full "
                       "sequence, not s/tp (the all-gathers/reduce-scatters are copies)");
    if (p.recompute_granularity != Recompute::None)
      notes_.push_back("recomputation: dropout masks are redrawn in the recomputed forward "
                       "(Megatron restores the RNG state); the work is the same");
    const std::int64_t expected = params_per_rank(sc_, coords_.pp_stage);
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
#if defined(TRAINSIM_TORCH_CUDA) && !defined(TRAINSIM_HAVE_FUSED_ADAM)
    if (gpu_step_params_ > 0 && dev_.cuda)
      notes_.push_back("optimizer: kernels/ fused Adam not built (no nvcc): OptimizerStepGpu ran "
                       "as LibTorch tensor operations");
#endif
    notes_.push_back(dev_.cuda ? "memory: CUDA caching allocator bytes allocated / reserved, "
                                 "sampled when each task was issued"
                               : "memory: bytes of live LibTorch CPU tensors (a counting wrapper "
                                 "around the CPU allocator), sampled after each task; on the CPU "
                                 "reserved = allocated");
  }

  void finish_notes() {
    std::int64_t copied = 0;
    std::string parts;
    for (const auto& [group, n] : copied_collectives_) {
      copied += n;
      parts += (parts.empty() ? "" : ", ") + std::to_string(n) + " " +
               to_string(static_cast<GroupKind>(group));
    }
    const std::string absent =
        nccl_ ? "the other ranks of their groups are absent (this job replays ranks 0-" +
                    std::to_string(opts_.nprocs - 1) + ", one process per GPU)"
              : "the other ranks of their groups are absent (a single-process replay; `--nprocs N` "
                "on N GPUs runs the collectives among ranks 0..N-1 through NCCL)";
    if (copied > 0)
      notes_.push_back(std::to_string(copied) + " collectives (" + parts +
                       ") were replayed as device-local copies of the bytes one rank sends in a "
                       "ring (CostModel::ring_bytes_per_rank): " + absent);
    if (nccl_) {
      std::int64_t through = 0;
      std::string kinds;
      for (const auto& [group, n] : nccl_collectives_) {
        through += n;
        kinds += (kinds.empty() ? "" : ", ") + std::to_string(n) + " " +
                 to_string(static_cast<GroupKind>(group));
      }
      std::int64_t scratch = 0;
      for (const auto& [stream, bytes] : nccl_bytes_) scratch += bytes;
      std::string version;
#ifdef TRAINSIM_NCCL_REPLAY
      version = " " + std::to_string(kernels::nccl::version()) + " (" + kernels::nccl::library_path() +
                "), communicators by " +
                (kernels::nccl::has_comm_split() ? "ncclCommSplit" : "ncclCommInitRank per group");
#endif
      notes_.push_back("multi-process replay: rank " + std::to_string(rank_) + " of " +
                       std::to_string(opts_.nprocs) + " processes (one GPU each) through NCCL" +
                       version + "; " + std::to_string(plan_.groups.size()) +
                       " group communicators set up in " + std::to_string(nccl_setup_s_) +
                       " s, then a barrier aligned the ranks' iteration clocks");
      if (through > 0)
        notes_.push_back(std::to_string(through) + " collectives (" + kinds + ") ran through NCCL "
                         "on their groups' communicators, op.bytes of " + dtype_name(dtype_) +
                         " in per-stream scratch buffers (" + std::to_string(scratch) +
                         " bytes, counted in the measured memory; a pipeline all-gather works in "
                         "place in the received tensor)");
      if (nccl_sends_ + nccl_recvs_ > 0)
        notes_.push_back(std::to_string(nccl_sends_) + " pipeline sends and " +
                         std::to_string(nccl_recvs_) + " receives ran through NCCL on one "
                         "communicator per directed rank pair; each send on a stream of its own "
                         "per destination (it does not hold up the pipeline stream, as in the "
                         "simulator; its span ends when the message is delivered)");
    }
    if (cpu_steps_ > 0)
      notes_.push_back("optimizer: " + std::to_string(cpu_steps_) + " OptimizerStepCpu sub-groups (" +
                       std::to_string(cpu_step_params_) + " parameters) ran the CPU Adam kernel "
                       "(kernels/cpu_adam.h) over host fp32 master weights and moments");
    if (copies_ > 0)
      notes_.push_back(std::to_string(copies_) + " host<->device copies moved their byte count "
                       "between a device scratch buffer and a host buffer" +
                       std::string(dev_.cuda ? " (pinned, on the H2D / D2H streams)"
                                             : " (both in host memory on the CPU device)"));
    if (noop_collectives_ > 0)
      notes_.push_back(std::to_string(noop_collectives_) + " collectives of group size 1 were no-ops");
    if (sends_ - nccl_sends_ + recvs_ - nccl_recvs_ > 0)
      notes_.push_back(std::to_string(sends_ - nccl_sends_) + " pipeline sends and " +
                       std::to_string(recvs_ - nccl_recvs_) +
                       " receives were replayed as device-local copies of the message size "
                       "through a staging buffer (the neighbour stages are absent)");
    if (!act_.empty() || !grad_.empty() || !blocks_.empty() || !stash_.empty() || !logits_.empty() ||
        !embed_out_.empty())
      notes_.push_back("warning: " + std::to_string(blocks_.size() + stash_.size() + logits_.size() +
                                                    embed_out_.size()) +
                       " forward states were still alive at the end of the iteration");
  }

  // ---------------------------------------------------------------- state
  const ScheduleGraph& g_;
  const Scenario& sc_;
  const RankId rank_;
  const std::vector<TaskId>& order_;
  const ReplayOptions& opts_;
  const DeviceChoice dev_;
  torch::Dtype dtype_ = torch::kFloat32;
  torch::Device device_{torch::kCPU};
  torch::TensorOptions fopts_;
  Dropout dropout_;
  LayerDims d_;
  RankCoords coords_{0, 0, 0};
  bool has_embed_ = false, has_logits_ = false, sequence_parallel_ = false, selective_ = false;
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
  std::map<std::uint64_t, torch::Tensor> stash_;
  std::map<std::uint32_t, std::pair<torch::Tensor, torch::Tensor>> logits_;  // (input, loss)
  // Received slices (offset, elements) awaiting the pipeline all-gather.
  std::map<std::uint64_t, std::pair<std::int64_t, std::int64_t>> pending_fill_;

  // Communication stand-ins.
  torch::Tensor staging_[2];  // forward activations, backward gradients
  std::int64_t comm_bytes_ = 0, copy_bytes_ = 0;
  torch::Tensor comm_src_, comm_dst_, copy_dev_, copy_host_;
  std::map<int, std::int64_t> copied_collectives_;
  std::int64_t noop_collectives_ = 0, sends_ = 0, recvs_ = 0;
  std::vector<std::string> replayed_as_;  // per task id (ExecutionRecord::replayed_as)

  // Multi-process replay through NCCL (ReplayOptions::nprocs > 1).
  bool nccl_ = false;
  CommPlan plan_;
  std::map<int, std::int64_t> nccl_bytes_;  // per StreamId: largest op.bytes of its NCCL collectives
  std::map<int, torch::Tensor> nccl_buf_;   // per StreamId: scratch of nccl_bytes_
  std::map<int, std::int64_t> nccl_collectives_;  // per GroupKind
  std::int64_t nccl_sends_ = 0, nccl_recvs_ = 0;
  double nccl_setup_s_ = 0;

  // Optimizer.
  kernels::AdamHyperParams adam_hp_;
  std::int64_t gpu_step_params_ = 0, cpu_step_params_ = 0, gpu_offset_ = 0, cpu_offset_ = 0;
  std::int64_t cpu_cursor_ = 0, cpu_steps_ = 0, copies_ = 0;
  torch::Tensor gpu_master_, gpu_m_, gpu_v_, cpu_master_, cpu_m_, cpu_v_;
  torch::Tensor cpu_grads_host_, cpu_params_host_;
  std::unique_ptr<kernels::CpuAdam> cpu_adam_;

#ifdef TRAINSIM_TORCH_CUDA
  std::vector<c10::cuda::CUDAStream> streams_;
  std::map<TaskId, std::unique_ptr<at::cuda::CUDAEvent>> sent_ev_;  // NCCL send delivered
#endif
#ifdef TRAINSIM_NCCL_REPLAY
  // Declared after streams_ and the buffers: destroyed first (ncclCommDestroy waits for them).
  kernels::nccl::Communicator world_;
  std::vector<kernels::nccl::Communicator> comms_;  // indexed like plan_.groups
  std::map<RankId, c10::cuda::CUDAStream> send_streams_;  // per destination rank
#endif
  std::vector<std::string> notes_;
};

}  // namespace

namespace detail {

ExecutionRecord execute(const ScheduleGraph& graph, const Scenario& scenario, RankId rank,
                        const std::vector<TaskId>& order, const ReplayOptions& opts) {
  Executor ex(graph, scenario, rank, order, opts);
  return ex.run();
}

}  // namespace detail
}  // namespace trainsim::hw
