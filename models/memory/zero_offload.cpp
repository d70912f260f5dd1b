#include "models/memory/zero_offload.h"

#include <algorithm>
#include <cmath>
#include <sstream>
#include <stdexcept>

#include "models/errors.h"
#include "models/memory/memory_model.h"
#include "models/input/runtime.h"

namespace trainsim {

double effective_offload_ratio(const Scenario& sc) {
  const auto& o = sc.zero.offload_optimizer;
  if (!o.enabled || sc.zero.stage < 1) return 0.0;
  return o.ratio;
}

std::int64_t owned_params(const Scenario& sc, std::int64_t pp_stage) {
  const std::int64_t p = params_per_rank(sc, pp_stage);
  const std::int64_t dp = sc.parallel.data_parallel_size;
  return sc.zero.stage >= 1 ? (p + dp - 1) / dp : p;
}

std::int64_t cpu_stepped_params(const Scenario& sc, std::int64_t pp_stage) {
  // DeepSpeed assigns whole sub-groups (int(ratio * n_subgroups)); trainsim splits the
  // partition continuously (the limit of small sub_group_size).
  return static_cast<std::int64_t>(
      std::floor(effective_offload_ratio(sc) * double(owned_params(sc, pp_stage))));
}

std::int64_t gpu_stepped_params(const Scenario& sc, std::int64_t pp_stage) {
  return owned_params(sc, pp_stage) - cpu_stepped_params(sc, pp_stage);
}

std::int64_t zero3_prefetch_layers(const Scenario& sc) {
  const std::int64_t layer = largest_layer_params(sc);
  return std::max<std::int64_t>(1, (sc.zero.stage3_prefetch_bucket_size + layer - 1) / layer);
}

std::int64_t bucket_elements(const Scenario& sc, std::int64_t pp_stage) {
  if (sc.zero.stage == 0) return 0;
  return std::min(sc.zero.reduce_bucket_size, params_per_rank(sc, pp_stage));
}

int bucket_buffers(const Scenario& sc) {
  return sc.zero.stage >= 2 && sc.zero.overlap_comm ? 2 : 1;
}

std::int64_t gradient_bucket_buffer_bytes(const Scenario& sc, std::int64_t pp_stage) {
  if (sc.zero.stage < 2) return 0;
  return bucket_buffers(sc) * bucket_elements(sc, pp_stage) *
         precision_bytes(sc.parallel.precision);
}

std::int64_t offload_staging_bytes(const Scenario& sc, std::int64_t pp_stage) {
  const std::int64_t dp = sc.parallel.data_parallel_size;
  const std::int64_t share = (bucket_elements(sc, pp_stage) + dp - 1) / dp;
  if (sc.zero.stage >= 3 && sc.zero.offload_optimizer.enabled)
    return precision_bytes(sc.parallel.precision) * share;
  return effective_offload_ratio(sc) > 0 ? 4 * share : 0;
}

int communicators_of_rank(const Scenario& sc, std::int64_t pp_stage) {
  const auto& p = sc.parallel;
  int n = 0;
  if (p.tensor_model_parallel_size > 1) ++n;
  if (p.data_parallel_size * p.context_parallel_size > 1) ++n;  // DP (with CP) gradients
  if (p.context_parallel_size > 1) ++n;  // the ring-attention exchange
  if (p.pipeline_model_parallel_size > 1) {
    // NCCL p2p: one communicator per neighbour pair (previous and next stage).
    n += (pp_stage > 0) + (pp_stage < p.pipeline_model_parallel_size - 1);
    if (p.virtual_pipeline_size > 1 && p.pipeline_model_parallel_size > 2 &&
        (pp_stage == 0 || pp_stage == p.pipeline_model_parallel_size - 1))
      ++n;  // interleaved: the first and last stage also talk to each other (a new pair if pp > 2)
    if (!sc.model.untie_embeddings_and_output_weights &&
        (pp_stage == 0 || pp_stage == p.pipeline_model_parallel_size - 1))
      ++n;  // tied embedding gradients
  }
  return n;
}

/// Transformer Engine's userbuffers (parallel.tp_comm_overlap): one registered buffer per
/// overlapped GEMM of a layer, allocated once. Megatron-Core (megatron/training/initialize.py
/// _initialize_tp_communicators) gives TE (v2.9 pytorch/module/base.py initialize_ub) the shape
/// [seq_length x micro_batch_size / context_parallel_size, hidden_size]; the twelve buffers
/// (qkv/proj/fc1/fc2 x fprop/dgrad/wgrad) are 1 byte per element under FP8 for the eight
/// all-gather ones (layers_all_gather_overlap: qkv_fprop, qkv_dgrad, proj_dgrad, proj_wgrad,
/// fc1_fprop, fc1_dgrad, fc2_dgrad, fc2_wgrad), the training precision otherwise; a ring
/// exchange reduce-scatter (proj_fprop / fc2_fprop with tp_comm_overlap_rs_method ring_exchange)
/// holds 2t - 1 chunks of 1/t of it (common/comm_gemm_overlap/comm_gemm_overlap.cpp
/// CommOverlapP2PBase).
std::int64_t userbuffers_bytes(const Scenario& sc) {
  const auto& p = sc.parallel;
  if (!runtime_spec(sc.runtime).tp_comm_overlap_userbuffers || !p.uses_tp_comm_overlap()) return 0;
  const std::int64_t t = p.tensor_model_parallel_size;
  const std::int64_t elements = sc.model.seq_length * p.micro_batch_size /
                                p.context_parallel_size * sc.model.hidden_size;
  const std::int64_t e = precision_bytes(p.precision);
  const std::int64_t gather = p.fp8 != Fp8Format::None ? 1 : e;
  const std::int64_t rs_fprop =
      p.tp_comm_overlap_rs_ring ? elements / t * (2 * t - 1) * e : elements * e;
  return 8 * elements * gather + 2 * rs_fprop + 2 * elements * e;
}

RankStateBytes rank_state_bytes(const Scenario& sc, const CalibrationProfile& profile,
                                std::int64_t pp_stage) {
  const std::int64_t params = params_per_rank(sc, pp_stage);
  const std::int64_t owned = owned_params(sc, pp_stage);
  const std::int64_t cpu = cpu_stepped_params(sc, pp_stage);
  const std::int64_t gpu = owned - cpu;
  const std::int64_t e = precision_bytes(sc.parallel.precision);
  const int stage = sc.zero.stage;
  RankStateBytes out;
  auto& g = out.gpu;
  g[int(MemCategory::Parameters)] = (stage >= 3 ? owned : params) * e;
  // Transformer Engine FP8: every linear layer also keeps its weight in FP8 and the FP8
  // transpose for the backward GEMMs (1 + 1 bytes per linear weight; with FSDP/ZeRO-3 only the
  // shard is resident between gathers).
  // With fp8_param_gather the weight itself is the FP8 copy: its e-byte copy goes away.
  if (runtime_spec(sc.runtime).transformer_engine_fp8 && sc.parallel.fp8 != Fp8Format::None) {
    std::int64_t linear = linear_weights_per_rank(sc, pp_stage);
    if (stage >= 3) linear /= sc.parallel.data_parallel_size;
    g[int(MemCategory::Parameters)] += (sc.parallel.fp8_param_gather ? 2 - e : 2) * linear;
    // MXFP8: each of the two copies carries one E8M0 scale byte per 32 elements (TE
    // MXFP8Tensor: _rowwise_scale_inv and _columnwise_scale_inv).
    if (sc.parallel.fp8_recipe == Fp8Recipe::Mxfp8) g[int(MemCategory::Parameters)] += linear / 16;
  }
  if (stage == 0)
    g[int(MemCategory::Gradients)] = params * grad_element_bytes(sc);
  else if (stage == 1)
    g[int(MemCategory::Gradients)] = params * e;  // full model .grad, reduced at the boundary
  else if (stage == 2)
    // Stage 2 keeps the reduced partition on the GPU only for the GPU-stepped part; with
    // offload the CPU part is accumulated in the host fp32 buffer instead.
    g[int(MemCategory::Gradients)] = gpu * e;
  else if (!sc.zero.offload_optimizer.enabled)
    g[int(MemCategory::Gradients)] = owned * e;  // stage 3: grad partition flat buffer
  else
    // Stage 3 with offload (DeepSpeed stage3.py initialize_optimizer_states): every sub-group
    // gets a persistent fp32 gradient buffer on its own device; the fp16 partition buffer is
    // pinned host memory.
    g[int(MemCategory::Gradients)] = gpu * 4;
  g[int(MemCategory::OptimizerStates)] = (stage == 0 ? params : gpu) * 12;
  g[int(MemCategory::CommBuffers)] =
      static_cast<std::int64_t>(communicators_of_rank(sc, pp_stage) *
                                profile.nccl_buffer_bytes_per_communicator) +
      userbuffers_bytes(sc);
  g[int(MemCategory::Framework)] = static_cast<std::int64_t>(profile.framework_overhead_bytes);
  // Host: fp32 master/momentum/variance (12 B) and the fp32 gradient buffer (4 B, pinned) of
  // the CPU-stepped part.
  out.host[int(MemCategory::OptimizerStates)] = cpu * 12;
  out.host[int(MemCategory::OffloadBuffers)] =
      cpu * 4 + (stage >= 3 && sc.zero.offload_optimizer.enabled ? owned * e : 0);
  return out;
}

double host_bytes_per_node(const Scenario& sc, const SystemSpec& system,
                           const CalibrationProfile& profile) {
  (void)system;
  const auto& p = sc.parallel;
  const std::int64_t gpn = sc.cluster.gpus_per_node;
  // The ranks of node 0 .. : rank = stage * (dp * tp) + ...; take the node needing the most.
  double worst = 0;
  const std::int64_t world = sc.world_size();
  for (std::int64_t node = 0; node * gpn < world; ++node) {
    double bytes = 0;
    for (std::int64_t r = node * gpn; r < std::min(world, (node + 1) * gpn); ++r) {
      const std::int64_t stage =
          r / (p.data_parallel_size * p.context_parallel_size * p.tensor_model_parallel_size);
      const auto st = rank_state_bytes(sc, profile, stage);
      for (std::int64_t v : st.host) bytes += double(v);
    }
    worst = std::max(worst, bytes);
    if (p.pipeline_model_parallel_size == 1) break;  // all nodes alike
  }
  return worst;
}

void check_host_memory(const Scenario& sc, const SystemSpec& system,
                       const CalibrationProfile& profile) {
  if (effective_offload_ratio(sc) <= 0) return;
  const double need = host_bytes_per_node(sc, system, profile);
  if (need > system.host_memory_bytes) {
    std::ostringstream os;
    os.precision(4);
    os << sc.source_path << ": deepspeed.zero_optimization.offload_optimizer.ratio ("
       << sc.zero.offload_optimizer.ratio << (sc.zero.offload_optimizer.ratio_auto ? ", auto" : "")
       << ") puts " << need / 1e9 << " GB of optimizer states and pinned gradient buffers in the "
       << "host memory of one node, but cluster.system (" << system.name << ") has "
       << system.host_memory_bytes / 1e9
       << " GB per node; lower the ratio, use more nodes or a higher ZeRO stage";
    throw InputError(os.str());
  }
}

std::int64_t program_order_peak_gpu_bytes(const ScheduleGraph& graph, std::int64_t rank) {
  std::int64_t peak = 0;
  const auto& ranks = graph.simulated_ranks();
  for (std::size_t ri = 0; ri < ranks.size(); ++ri) {
    if (rank >= 0 && ranks[ri] != RankId(rank)) continue;
    std::int64_t cur = 0;
    if (ri < graph.initial_gpu_memory.size())
      for (std::int64_t v : graph.initial_gpu_memory[ri]) cur += v;
    peak = std::max(peak, cur);
    for (TaskId id : graph.tasks_of_rank(ranks[ri])) {
      // Start effects, then end effects; allocations before releases within each (the order
      // memory_timeline.cpp uses for effects at one instant).
      for (int at_end = 0; at_end < 2; ++at_end) {
        for (int pass = 0; pass < 2; ++pass)
          for (const MemEffect* e = graph.effects_begin(id); e != graph.effects_end(id); ++e) {
            if (e->on_host || e->at_end != bool(at_end)) continue;
            if ((pass == 0) != (e->bytes > 0)) continue;
            cur += e->bytes;
            peak = std::max(peak, cur);
          }
      }
    }
  }
  return peak;
}

}  // namespace trainsim
