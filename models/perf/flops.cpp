// The entry points of flops.h: op_kernels (a compute op's kernel list, by the runtime's
// kernels: ModelFeatures::core picks flops_core.cpp's, else flops_megatron2021.cpp's; the
// optimizer step's one kernel), fill_work (its totals), the kernel makers every list shares
// (gemm, mem), the optimizer step's bytes and FLOPs per parameter, and the iteration FLOP
// counts (the papers' closed forms, Megatron-Core's count).
#include "models/perf/flops.h"

#include <stdexcept>
#include <string>

#include "models/errors.h"
#include "models/input/runtime.h"
#include "models/perf/kernel_lists.h"

namespace trainsim {
namespace kernel_lists {

KernelWork gemm(const char* name, GemmPass pass, double m, double n, double k, double e,
                double batch) {
  KernelWork w;
  w.name = name;
  w.cls = KernelClass::Gemm;
  w.pass = pass;
  w.m = m;
  w.n = n;
  w.k = k;
  w.batch = batch;
  w.flops = 2.0 * m * n * k * batch;
  w.bytes = (m * k + k * n + m * n) * e * batch;
  return w;
}

KernelWork mem(const char* name, double bytes) {
  KernelWork w;
  w.name = name;
  w.cls = KernelClass::MemoryBound;
  w.bytes = bytes;
  return w;
}

void need_positive(const OpDesc& op, std::int64_t v, const char* field) {
  TRAINSIM_CHECK(v > 0, std::string("op_kernels: ") + to_string(op.kind) + " needs " + field +
                            " > 0, got " + std::to_string(v));
}

}  // namespace kernel_lists

using kernel_lists::kFp32Bytes;
using kernel_lists::mem;
using kernel_lists::need_positive;

double element_bytes(Precision p) {
  switch (p) {
    case Precision::FP16:
    case Precision::BF16:
      return 2.0;
    case Precision::FP32:
      return kFp32Bytes;
  }
  TRAINSIM_CHECK(false, "element_bytes: Precision out of range");
}

std::vector<KernelWork> op_kernels(const OpDesc& op) {
  if (is_compute(op.kind) && op.features.core) {
    if (op.kind == OpKind::AttnFwd || op.kind == OpKind::AttnBwd) {
      need_positive(op, op.heads, "heads");
      need_positive(op, op.head_dim, "head_dim");
    }
    kernel_lists::shape_of(op);  // checks micro_batch, seq, hidden, tp
    std::vector<KernelWork> all = core_op_kernels(op);
    if (op.features.expert_wgrad == 0) return all;
    // delay_wgrad_compute's split of the MoE MLP backward (ModelFeatures::expert_wgrad): the
    // local experts' weight-gradient GEMMs (tokens_per_expert > 0) apart from the rest.
    std::vector<KernelWork> part;
    for (const KernelWork& k : all) {
      const bool expert_wgrad = k.pass == GemmPass::Wgrad && k.tokens_per_expert > 0;
      if (expert_wgrad == (op.features.expert_wgrad == 2)) part.push_back(k);
    }
    return part;
  }
  if (is_compute(op.kind)) return kernel_lists::megatron2021_op_kernels(op);
  std::vector<KernelWork> out;
  switch (op.kind) {
    case OpKind::OptimizerStepGpu:
      // Megatron's optimizer launches multi-tensor kernels over all parameters; modelled as
      // one memory-bound pass of optimizer_gpu_bytes_per_param bytes per parameter.
      TRAINSIM_CHECK(op.params >= 0, "op_kernels: optimizer step with params < 0");
      out.push_back(mem("mixed_precision_adam",
                        static_cast<double>(op.params) *
                            optimizer_gpu_bytes_per_param(op.precision,
                                                          op.features.main_grad_bytes)));
      break;
    case OpKind::OptimizerStepCpu:  // host memory, no device kernels
    case OpKind::AllReduce:
    case OpKind::ReduceScatter:
    case OpKind::AllGather:
    case OpKind::SendRecv:
    case OpKind::CopyH2D:
    case OpKind::CopyD2H:
    case OpKind::AllToAll:
      break;
    default:  // the compute ops, above
      break;
  }
  return out;
}

void fill_work(OpDesc& op) {
  double flops = 0, bytes = 0;
  for (const KernelWork& k : op_kernels(op)) {
    flops += k.flops;
    bytes += k.bytes;
  }
  op.flops = flops;
  op.bytes_accessed = bytes;
}

// Megatron-LM 2021 Float16OptimizerWithFloat16Params + apex FusedAdam, HBM bytes per parameter:
//   fp16 (fp16 grad buffer, dynamic loss scaling):
//     zero the fp16 grad buffer before the iteration ........... 2 (write)
//     main_grad.float() into the fp32 main param's .grad ........ 2 + 4
//     _amp_foreach_non_finite_check_and_unscale_ ................ 4 + 4
//     multi_tensor_l2norm for clip_grad_norm .................... 4
//     multi_tensor_adam: read p, g, m, v; write p, m, v ......... 16 + 12
//     copy fp32 main params to fp16 model params ................ 4 + 2
//     total 54. (The clip multi_tensor_scale, 8 more, runs only when the norm exceeds the
//     threshold: data dependent, not counted.)
//   bf16 (fp32 grad buffer, no loss scaler): zero 4, no cast, no unscale, norm 4, Adam 28,
//     copy back 6: total 42.
//   In general, with a g-byte grad buffer (parallel.grad_reduce_in_fp32: g = 4 if true, else
//   the training precision's 2): zero g; cast g + 4 unless g = 4 (Megatron-Core's
//   _copy_model_grads_to_main_grads: main_param.grad = model_grad.float()); unscale 8 with
//   fp16's loss scaler only; norm 4; Adam 28; copy back 6. bf16 with g = 2: 46; fp16 with
//   g = 4: 50.
//   fp32 (the CPU replay's plain fp32 training, hw_backend/: fp32 grads, fp32 master copy kept
//     as with mixed precision, no cast, no unscale, no norm): Adam 28, copy back 4: total 32.
double optimizer_gpu_bytes_per_param(Precision p, int main_grad_bytes) {
  if (p == Precision::FP32) return 32.0;
  const double g = main_grad_bytes > 0 ? main_grad_bytes : (p == Precision::BF16 ? 4.0 : 2.0);
  const double cast = g < kFp32Bytes ? g + kFp32Bytes : 0.0;
  const double unscale = p == Precision::FP16 ? 2 * kFp32Bytes : 0.0;
  return g + cast + unscale + kFp32Bytes + 28.0 + 6.0;
}

double optimizer_cpu_bytes_per_param() { return 4 * kFp32Bytes + 3 * kFp32Bytes + 2.0; }

// Adam(W) per parameter, counting each add/mul/div/sqrt as one FLOP:
//   m = b1 m + (1-b1) g ........ 3      v = b2 v + (1-b2) g^2 ...... 4
//   denom = sqrt(v)/sqrt(bc2) + eps  3  p -= lr/bc1 * m / denom .... 3
//   decoupled weight decay p -= lr wd p  2   -> 15
double adam_flops_per_param() { return 15.0; }

namespace {

/// Megatron-Core's model FLOPs (megatron/training/training.py num_floating_point_operations,
/// the convention of NVIDIA's published model TFLOP/s, causal attention counted as half the
/// score matrix): per token 6 (forward 1 + backward 2, 2 FLOPs per multiply-add) times the
/// multiply-adds of
///   per layer: QKV h (a + 2g) d, attention a d s / 2 for Q K^T and again for P V, projection
///     a d h, MLP h f (x 1.5 with SwiGLU's gate) for fc1 + fc2, or on MoE layers top-k routed
///     experts h f_moe (x 1.5) each plus the shared expert;
///   once: the output layer h V;
///   per multi-token prediction layer: one more layer as above, its norms and eh_proj
///     3h + 2h^2, and the output layer h V again.
/// With multi-head latent attention the attention terms are Megatron's MLA branch: q
///   Lq (h + a (dn + dr) + 1) (h a (dn + dr) without q_lora_rank), kv Lkv (h + a (dn + dv) + 1)
///   + h dr (the +1s are its norms), projection a dv h, core (a (dn + dr) + a dv) s / 2.
/// No recomputation; sliding windows are not subtracted (Megatron counts full causal).
double core_model_flops_per_iteration(const Scenario& sc) {
  const ModelConfig& m = sc.model;
  const double h = double(m.hidden_size), s = double(m.seq_length), d = double(m.kv_channels);
  const double a = double(m.num_attention_heads), g = double(m.num_query_groups);
  const double gate = m.gated_linear_unit() ? 3.0 : 2.0;  // fc1 (gated: 2 columns per unit) + fc2
  double attn = h * (a + 2 * g) * d + a * d * s + a * d * h;
  if (m.multi_latent_attention) {
    const double dn = double(m.qk_head_dim), dr = double(m.qk_pos_emb_head_dim);
    const double dv = double(m.v_head_dim), lq = double(m.q_lora_rank);
    const double lkv = double(m.kv_lora_rank);
    const double q = m.q_lora_rank > 0 ? lq * (h + a * (dn + dr) + 1) : h * a * (dn + dr);
    attn = q + lkv * (h + a * (dn + dv) + 1) + h * dr + a * dv * h +
           (a * (dn + dr) + a * dv) * s / 2;
  }
  const double dense_mlp = gate * h * double(m.ffn_hidden_size);
  double moe_mlp = dense_mlp;
  if (m.is_moe())
    moe_mlp = gate * h *
              (double(m.moe_router_topk) * double(m.moe_ffn_hidden_size) +
               double(m.moe_shared_expert_intermediate_size));
  // Multi-token prediction (training.py: num_layers + mtp_num_layers layers, the MTP ones MoE
  // when the last decoder layer is; "MTP norms and proj" 3h + 2h^2 each; the logits
  // (mtp_num_layers + 1) times).
  double layers_fma = 0;
  for (std::int64_t l = 0; l < m.num_layers + m.mtp_num_layers; ++l)
    layers_fma += attn + (m.moe_layer(l) ? moe_mlp : dense_mlp);
  const double mtp = double(m.mtp_num_layers);
  layers_fma += mtp * (3 * h + 2 * h * h);
  const double per_token = 6.0 * (layers_fma + (mtp + 1) * h * double(m.padded_vocab_size));
  return per_token * double(sc.parallel.global_batch_size) * s;
}

}  // namespace

double model_flops_per_iteration(const Scenario& sc) {
  if (runtime_spec(sc.runtime).model_flops == ModelFlopsCount::MegatronCore)
    return core_model_flops_per_iteration(sc);
  const double B = static_cast<double>(sc.parallel.global_batch_size);
  const double s = static_cast<double>(sc.model.seq_length);
  const double l = static_cast<double>(sc.model.num_layers);
  const double h = static_cast<double>(sc.model.hidden_size);
  const double V = static_cast<double>(sc.model.padded_vocab_size);
  return 72.0 * B * s * l * h * h * (1.0 + s / (6.0 * h) + V / (12.0 * l * h));
}

double paper_flops_per_iteration(const Scenario& sc) {
  const double B = static_cast<double>(sc.parallel.global_batch_size);
  const double s = static_cast<double>(sc.model.seq_length);
  const double l = static_cast<double>(sc.model.num_layers);
  const double h = static_cast<double>(sc.model.hidden_size);
  const double V = static_cast<double>(sc.model.padded_vocab_size);
  return 96.0 * B * s * l * h * h * (1.0 + s / (6.0 * h) + V / (16.0 * l * h));
}

}  // namespace trainsim
