// Kernel lists of a mixture-of-experts MLP block under Megatron-Core with Transformer Engine
// modules (kernel_lists.h core_moe), on flops_core.cpp's CoreShape and pieces.
#include <algorithm>
#include <cstdint>

#include "models/perf/kernel_lists.h"

namespace trainsim::kernel_lists {

namespace {

// Mixture of experts (Megatron-Core MoELayer with the alltoall token dispatcher,
// megatron/core/transformer/moe/): the pre-MLP norm; the router (a bf16 GEMM h x E, softmax
// and top-k over E scores per token); permute (gather each token's k copies in expert order);
// [the dispatch all-to-all over the EP group: a collective of its own, models/builder]; the
// local experts' MLPs (one grouped GEMM over the E / EP experts with --moe-grouped-gemm, else
// one GEMM per expert), on T k tokens arriving per rank when balanced (each rank receives what
// it sends), times the imbalance factor on the busiest rank, the routing weights applied in
// the activation (experts.py activation_func_with_probs: it reads the fp32 weights, and its
// backward writes their gradient); [the combine all-to-all]; unpermute, an unweighted gather
// back to token order; the shared expert (a dense MLP) if any.
/// The GEMMs of the local experts, each C[m x n] = A[m x k] B[k x n] with the per-expert shape
/// (m or k is the expert's tokens `te`: the token copies on this rank / its local experts).
void expert_gemms(const char* name, GemmPass pass, double m, double n, double k, double te,
                  const CoreShape& c, const ModelFeatures& f, std::vector<KernelWork>& out) {
  const double experts = double(f.experts_local);
  KernelWork w = core_gemm(name, pass, m, n, k, c, true);
  w.tokens_per_expert = te;
  if (f.grouped_gemm) {
    w.batch = experts;
    w.flops *= experts;
    w.bytes *= experts;
    out.push_back(w);
  } else {
    for (std::int64_t e = 0; e < f.experts_local; ++e) out.push_back(w);
  }
}

/// A token permutation's gather (permute forward, unpermute backward: each of the `tokens`
/// copies reads its token's row) or scatter (unpermute forward, permute backward: each copy's
/// row is added into its token's row), between the Tsp token rows and the token copies.
/// Fused (Transformer Engine's moe_permute / moe_unpermute kernels, --moe-permute-fusion):
/// streaming kernels. Unfused (Megatron-Core moe_utils.py permute: index_select, whose
/// backward is index_add_; unpermute: scatter_add_): the scatter runs atomic adds of k rows
/// into each token row, timed at the profile's moe_scatter_add_bytes_per_s
/// (KernelWork::scatter_add_bytes; docs/validation.md).
KernelWork permutation(const char* name, bool scatter, double tokens, const CoreShape& c,
                       const ModelFeatures& f) {
  KernelWork w = mem(name, tokens * c.H * c.e + c.Tsp * c.H * c.e);
  if (scatter && !f.permute_fusion) w.scatter_add_bytes = tokens * c.H * c.e;
  return w;
}

/// The shared expert's forward (a dense MLP of Fs on every token of the layer), or its re-run
/// before its backward (`rerun`, --recompute-modules shared_experts).
void shared_expert_forward(const CoreShape& c, double Fs, bool rerun,
                           std::vector<KernelWork>& out) {
  const double Fs1 = c.swiglu ? 2 * Fs : Fs;
  out.push_back(core_gemm(rerun ? "shared_fc1_gemm_recompute" : "shared_fc1_gemm",
                          GemmPass::Forward, c.T, Fs1, c.H, c, true));
  out.push_back(
      mem(rerun ? "shared_swiglu_recompute" : "shared_swiglu_fwd", c.T * (Fs1 + Fs) * c.e));
  out.push_back(core_gemm(rerun ? "shared_fc2_gemm_recompute" : "shared_fc2_gemm",
                          GemmPass::Forward, c.T, c.H, Fs, c, true));
}

/// model.moe_shared_expert_overlap (Megatron-Core shared_experts.py SharedExpertMLP with
/// shared_expert_overlap): the shared expert's kernels as ops of their own, on its side
/// stream. kSharedFc1: forward linear_fc1_forward_and_act (fc1 and the activation, issued
/// beside the dispatch all-to-all); backward the activation's and fc1's gradients (autograd
/// runs them on the stream of their forward, beside the dispatch's adjoint). kSharedFc2:
/// forward linear_fc2_forward (beside the combine); backward fc2's gradients, after the
/// checkpointed forward's re-run with --recompute-modules shared_experts. The kernels are those
/// of the in-line shared expert (core_moe), split at the activation.
void shared_expert_part(const ModelFeatures& f, const CoreShape& c, bool forward,
                        std::vector<KernelWork>& out) {
  const double Fs = double(f.shared_ffn), Fs1 = c.swiglu ? 2 * Fs : Fs;
  const bool fc1 = f.shared_part == kSharedFc1;
  if (forward && fc1) {
    out.push_back(core_gemm("shared_fc1_gemm", GemmPass::Forward, c.T, Fs1, c.H, c, true));
    out.push_back(mem("shared_swiglu_fwd", c.T * (Fs1 + Fs) * c.e));
  } else if (forward) {
    out.push_back(core_gemm("shared_fc2_gemm", GemmPass::Forward, c.T, c.H, Fs, c, true));
  } else if (fc1) {
    out.push_back(mem("shared_swiglu_bwd", c.T * (Fs + 2 * Fs1) * c.e));
    core_linear_bwd("shared_fc1_grad_cast", "shared_fc1_grad_amax", "shared_fc1_dgrad",
                    "shared_fc1_wgrad", c.T, Fs1, c.H, c, out);
  } else {
    if (f.recompute_shared) shared_expert_forward(c, Fs, true, out);
    core_linear_bwd("shared_fc2_grad_cast", "shared_fc2_grad_amax", "shared_fc2_dgrad",
                    "shared_fc2_wgrad", c.T, c.H, Fs, c, out);
  }
}

/// The router's optional kernels (ModelFeatures::router; Megatron-Core core_v0.16.0
/// megatron/core/transformer/moe/router.py TopKRouter.routing and moe_utils.py), each a
/// memory-bound pass over the rank's Tsp x E router scores (fp32, 4 bytes), timed at the
/// profile's HBM efficiency like every elementwise kernel:
///  - expert bias (aux-loss-free routing, unfused): the bias added to the scores for the top-k
///    choice (read and write, 8 B per score) and tokens_per_expert, the routing map's column
///    sums for the bias update (1 B); with moe_router_fusion TE's fused_topk_with_score_function
///    takes the bias inside the top-k kernel already counted (router_topk);
///  - aux loss: compute_routing_scores_for_aux_loss, the scores again over the full expert set
///    (read logits, write scores and the routing map: 9 B; unfused a softmax / sigmoid pass of 8 B
///    and a top-k scatter into the map of 5 B) and switch_load_balancing_loss_func's sums of the
///    map and the scores (5 B) (fused: TE's fused_compute_score_for_moe_aux_loss and
///    fused_moe_aux_loss, one kernel each); backward: the scores' gradient (read the scores,
///    write the gradient: 8 B, plus the loss gradient read: 4 B);
///  - z-loss: z_loss_func, mean(logsumexp(logits)^2), one read of the logits (4 B); backward:
///    softmax(logits) scaled into the logits' gradient (read 4 B, write 4 B).
void router_extras(const CoreShape& c, const ModelFeatures& f, bool forward,
                   std::vector<KernelWork>& out) {
  const double se = c.Tsp * double(f.num_experts);  // router scores on this rank
  const bool fused = (f.router & kRouterFusion) != 0;
  if (forward) {
    if ((f.router & kRouterExpertBias) && !fused) {
      out.push_back(mem("router_expert_bias_add", se * 2 * kFp32Bytes));
      out.push_back(mem("router_tokens_per_expert", se * 1));
    }
    if (f.router & kRouterAuxLoss) {
      if (fused) {
        out.push_back(mem("router_aux_scores", se * (2 * kFp32Bytes + 1)));
      } else {
        out.push_back(mem("router_aux_scores", se * 2 * kFp32Bytes));
        out.push_back(mem("router_aux_topk", se * (kFp32Bytes + 1)));
      }
      out.push_back(mem("router_aux_loss", se * (kFp32Bytes + 1)));
    }
    if (f.router & kRouterZLoss) out.push_back(mem("router_z_loss", se * kFp32Bytes));
    return;
  }
  if (f.router & kRouterZLoss) out.push_back(mem("router_z_loss_bwd", se * 2 * kFp32Bytes));
  if (f.router & kRouterAuxLoss)
    out.push_back(mem("router_aux_loss_bwd", se * 3 * kFp32Bytes));
}

}  // namespace

void core_moe(const OpDesc& op, const CoreShape& c, bool forward, std::vector<KernelWork>& out) {
  const ModelFeatures& f = op.features;
  if (f.shared_part == kSharedFc1 || f.shared_part == kSharedFc2)
    return shared_expert_part(f, c, forward, out);
  const double E = double(f.num_experts), kk = double(f.topk);
  // Token copies on this rank's experts; token dropping caps them at E x capacity, padding
  // fills them to it (ModelConfig::moe_expert_token_copies, docs/scenario.md).
  const double routed = c.Tsp * kk * f.imbalance;
  const double tokens = f.expert_token_cap <= 0 ? routed
                        : f.pad_to_capacity    ? f.expert_token_cap
                                               : std::min(routed, f.expert_token_cap);
  // Expert tensor parallelism: the dispatcher all-gathers the received copies over the ETP
  // group (token_dispatcher.py dispatch_postprocess), so the experts run etp x the copies on
  // their 1 / etp share of the expert MLP; the permutations stay on this rank's copies.
  const double xt = tokens * double(f.etp);            // copies the local experts process
  const double te = xt / double(f.experts_local);  // tokens per local expert
  const double Fe = double(f.expert_ffn), F1 = c.swiglu ? 2 * Fe : Fe;
  const double Fs = double(f.shared_ffn), Fs1 = c.swiglu ? 2 * Fs : Fs;
  if (forward) {
    // --recompute-modules moe re-runs the MoELayer alone: the pre-MLP norm (a separate TENorm
    // before it) and the bias-dropout-add after it are outside the checkpoint.
    const bool rerun = f.checkpoint_rerun;
    if (!rerun) core_norm_fwd("pre_mlp_norm_fwd", c, out);
    out.push_back(core_gemm("router_gemm", GemmPass::Forward, c.Tsp, E, c.H, c, false));
    out.push_back(mem("router_topk", c.Tsp * E * 2 * kFp32Bytes));
    router_extras(c, f, true, out);
    out.push_back(permutation("moe_permute", false, tokens, c, f));
    quantize("expert_fc1_input_cast", "expert_fc1_input_amax", xt * c.H, c, out);
    expert_gemms("expert_fc1_gemm", GemmPass::Forward, te, F1, c.H, te, c, f, out);
    out.push_back(mem(c.swiglu ? "expert_swiglu_fwd" : "expert_gelu_fwd",
                      xt * ((F1 + Fe) * c.e + kFp32Bytes)));
    quantize("expert_fc2_input_cast", "expert_fc2_input_amax", xt * Fe, c, out);
    expert_gemms("expert_fc2_gemm", GemmPass::Forward, te, c.H, Fe, te, c, f, out);
    out.push_back(permutation("moe_unpermute", true, tokens, c, f));
    if (Fs > 0) shared_expert_forward(c, Fs, false, out);
    if (!rerun) core_residual_fwd(c, out);
    return;
  }
  core_residual_bwd(c, out);
  // --recompute-modules layernorm: the pre-MLP norm re-runs when the MoE output's gradient
  // arrives (TransformerLayer's CheckpointWithoutOutput registers it on the MLP output).
  if (f.recompute_layernorm) core_norm_fwd("pre_mlp_norm_recompute", c, out);
  if (Fs > 0) {
    // --recompute-modules shared_experts: its checkpointed forward first.
    if (f.recompute_shared) shared_expert_forward(c, Fs, true, out);
    core_linear_bwd("shared_fc2_grad_cast", "shared_fc2_grad_amax", "shared_fc2_dgrad",
                    "shared_fc2_wgrad", c.T, c.H, Fs, c, out);
    out.push_back(mem("shared_swiglu_bwd", c.T * (Fs + 2 * Fs1) * c.e));
    core_linear_bwd("shared_fc1_grad_cast", "shared_fc1_grad_amax", "shared_fc1_dgrad",
                    "shared_fc1_wgrad", c.T, Fs1, c.H, c, out);
  }
  out.push_back(permutation("moe_unpermute_bwd", false, tokens, c, f));
  // --recompute-modules moe_act: the weighted activation (and its FP8 cast for fc2) re-runs
  // when fc2's output gradient arrives (experts.py discard_output_and_register_recompute).
  if (f.recompute_moe_act) {
    out.push_back(mem(c.swiglu ? "expert_swiglu_recompute" : "expert_gelu_recompute",
                      xt * ((F1 + Fe) * c.e + kFp32Bytes)));
    quantize("expert_fc2_input_cast_recompute", "expert_fc2_input_amax_recompute", xt * Fe, c,
             out);
  }
  quantize("expert_fc2_grad_cast", "expert_fc2_grad_amax", xt * c.H, c, out);
  expert_gemms("expert_fc2_dgrad", GemmPass::Dgrad, te, Fe, c.H, te, c, f, out);
  expert_gemms("expert_fc2_wgrad", GemmPass::Wgrad, Fe, c.H, te, te, c, f, out);
  out.push_back(mem(c.swiglu ? "expert_swiglu_bwd" : "expert_gelu_bwd",
                    xt * ((Fe + 2 * F1) * c.e + 2 * kFp32Bytes)));
  quantize("expert_fc1_grad_cast", "expert_fc1_grad_amax", xt * F1, c, out);
  expert_gemms("expert_fc1_dgrad", GemmPass::Dgrad, te, c.H, F1, te, c, f, out);
  expert_gemms("expert_fc1_wgrad", GemmPass::Wgrad, c.H, F1, te, te, c, f, out);
  out.push_back(permutation("moe_permute_bwd", true, tokens, c, f));
  router_extras(c, f, false, out);
  out.push_back(mem("router_topk_bwd", c.Tsp * E * 2 * kFp32Bytes));
  out.push_back(core_gemm("router_dgrad", GemmPass::Dgrad, c.Tsp, c.H, E, c, false));
  out.push_back(core_gemm("router_wgrad", GemmPass::Wgrad, E, c.H, c.Tsp, c, false));
  core_norm_bwd("pre_mlp_norm_bwd", c, out);
}

}  // namespace trainsim::kernel_lists
