// Cost models. Formulas and their sources:
//  * GEMM: roofline max(compute, memory) per kernel, with wave quantization as in NVIDIA's
//    "Matrix Multiplication Background User's Guide" (docs.nvidia.com/deeplearning/performance/
//    dl-performance-matrix-multiplication): the output is cut into tile_m x tile_n tiles, the
//    tiles run in waves of one tile per SM, and the last partial wave costs a full wave; each
//    wave ends with its epilogue, the SMs storing their output tiles at the HBM rate.
//  * Memory-bound kernels: bytes / (HBM bandwidth x achieved fraction) (roofline).
//  * Every kernel pays kernel_launch_overhead_s.
//  * Ring collectives: alpha-beta, bytes per rank from NVIDIA/nccl-tests doc/PERFORMANCE.md,
//    latency = base + steps x per-step latency as in NCCL's tuning model (src/graph/tuning.cc).
#include "models/perf/cost_model.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>

#include "models/errors.h"
#include "models/perf/flops.h"

namespace trainsim {
namespace {

/// Bytes per element of a GEMM's output: FP16/BF16, also for Transformer Engine's FP8 GEMMs,
/// whose outputs are BF16 (the next op reads them in higher precision).
constexpr double kGemmOutputBytes = 2;

void require_positive(double v, const char* what) {
  TRAINSIM_CHECK(v > 0 && std::isfinite(v),
                 std::string("CostModel: ") + what + " must be > 0, got " + std::to_string(v));
}

}  // namespace

CostModel::CostModel(const SystemSpec& system, const CalibrationProfile& profile,
                     NcclVersion nccl_version)
    : system_(system), profile_(profile), nccl_version_(nccl_version) {
  require_positive(system_.gpu.peak_dense_fp16_flops, "gpu.peak_dense_fp16_flops");
  require_positive(system_.gpu.hbm_bw_bytes_per_s, "gpu.hbm_bw_bytes_per_s");
  require_positive(profile_.gemm_max_efficiency, "profile.gemm_max_efficiency");
  require_positive(profile_.hbm_efficiency, "profile.hbm_efficiency");
  require_positive(profile_.sm_count, "profile.sm_count");
  require_positive(profile_.gemm_tile_m, "profile.gemm_tile_m");
  require_positive(profile_.gemm_tile_n, "profile.gemm_tile_n");
}

const char* CostModel::gemm_role(GemmPass pass, double batch) {
  switch (pass) {
    case GemmPass::Dgrad: return batch > 1 ? "bmm" : "dgrad";
    case GemmPass::Wgrad: return "wgrad";
    case GemmPass::Forward: return batch > 1 ? "bmm" : "fwd";
    case GemmPass::None: break;
  }
  TRAINSIM_CHECK(false, std::string("gemm_role: a GEMM kernel without its pass (GemmPass ") +
                            std::to_string(static_cast<int>(pass)) + ")");
  return "";
}

double CostModel::fp8_efficiency() const {
  return profile_.gemm_fp8_max_efficiency > 0 ? profile_.gemm_fp8_max_efficiency
                                              : profile_.gemm_max_efficiency;
}

double CostModel::fp8_promotion_overhead() const {
  // The split accumulator (cuBLASLt CUBLASLT_MATMUL_DESC_FAST_ACCUM = 0) as Hopper kernels run
  // it (CUTLASS include/cutlass/gemm/collective/fp8_accumulation.hpp, GmmaFP8Accumulation:
  // every mma_promotion_interval MMAs, promote_core() does warpgroup_wait<0>() and then
  // accum(i) += accum_temp(i) for every accumulator of the tile, on the CUDA cores; DeepSeek-V3
  // technical report Sec. 3.3.2 describes the same promotion every N_C = 128 elements). Per
  // promotion a tile of tm x tn outputs has done 2 tm tn K_p FLOPs on the tensor cores, at the
  // main loop's rate (FP8 peak x efficiency), and then adds tm tn FP32 values at the CUDA
  // cores' add rate (FP32 peak / 2: the datasheet counts an FMA as two FLOPs, an FADD issues
  // at the FFMA rate). The wait makes the two serial, so the main loop grows by
  //   (tm tn / (fp32 / 2)) / (2 tm tn K_p / (fp8 x eff)) = fp8 x eff / (K_p x fp32),
  // independent of the tile: H100 SXM 1979e12 x 0.711 / (128 x 67e12) = 0.164, i.e. fast
  // accumulation runs such a GEMM 1.16x faster (a torchao float8 user measured 1.1x to 1.2x,
  // pytorch/ao issue #2377; the GPU is not named there, torchao's float8 targets H100-class
  // GPUs).
  const double kp = profile_.gemm_fp8_promotion_interval_k;
  if (!(kp > 0) || !(system_.gpu.peak_fp32_flops > 0)) return 0;
  return system_.gpu.peak_dense_fp8_flops * fp8_efficiency() / (kp * system_.gpu.peak_fp32_flops);
}

double CostModel::gemm_compute_time_s(double m, double n, double k, double batch,
                                      const std::string& role, bool fp8,
                                      bool split_accumulator) const {
  if (fp8) {
    // FP8 GEMMs (Transformer Engine): the same wave model at the dense FP8 peak times the
    // FP8 efficiency of the profile (without one, the FP16/BF16 efficiency), measured with
    // fast accumulation; with the split accumulator the main loop also waits for its
    // promotions (fp8_promotion_overhead).
    TRAINSIM_CHECK(system_.gpu.peak_dense_fp8_flops > 0,
                   "CostModel: an FP8 GEMM on " + system_.gpu.name +
                       ", which has no FP8 peak (validation refuses parallel.fp8 there)");
    const double slowdown = split_accumulator ? 1.0 + fp8_promotion_overhead() : 1.0;
    return wave_time_s(m, n, k, batch,
                       system_.gpu.peak_dense_fp8_flops * fp8_efficiency() / slowdown);
  }
  if (!profile_.gemm_efficiency.empty()) {
    // Measured profile (trainsim calibrate): the GEMM rate of this shape is the peak times the
    // efficiency measured for the nearest shapes (calibration.h interpolate_gemm_efficiency);
    // the table carries the shape dependence that wave quantization models on GPUs.
    const double eff = interpolate_gemm_efficiency(profile_.gemm_efficiency, m, n, k, batch, role);
    return 2.0 * m * n * k * batch / (system_.gpu.peak_dense_fp16_flops * eff);
  }
  // Wave quantization (NVIDIA Matrix Multiplication Background User's Guide, "Dimension
  // Quantization Effects"): tiles = ceil(m/tm) * ceil(n/tn) per product; waves =
  // ceil(batch * tiles / SMs); each wave takes the time of one full tile on every SM, i.e.
  // 2 * tm * tn * k FLOPs at the per-SM rate peak / SMs * gemm_max_efficiency, then the
  // wave's epilogue (wave_time_s). This also charges tile quantization (partial tiles cost
  // full tiles). cuBLAS has kernels in both orientations (tm x tn and tn x tm); the faster
  // one is taken.
  return wave_time_s(m, n, k, batch, system_.gpu.peak_dense_fp16_flops * profile_.gemm_max_efficiency);
}

double CostModel::wave_time_s(double m, double n, double k, double batch, double rate) const {
  const double sms = profile_.sm_count;
  const double per_sm_flops = rate / sms;
  // Epilogue of a wave: after its main loop, every SM stores its finished output tile
  // (tm x tn elements of kGemmOutputBytes) to global memory before the SM takes its next tile
  // (CUTLASS docs/efficient_gemm.md, "Epilogue": the tile leaves the SM only after the last
  // k-step). One tile per SM (256x128 tiles fill an SM's shared memory), so the tiles of a
  // wave are stored together, bound by the streaming HBM rate:
  //   epilogue_s = SMs x tm x tn x out_bytes / (HBM bw x hbm_efficiency).
  // It is independent of k, so it weighs on short main loops: at 4096^3 it adds 4% (A100
  // FP16) and 11% (H100 FP8) to the main loops, where the published cuBLASLt rates are 7% and
  // 10% below a main-loop-only model; from 16384^3 up it adds <= 1%
  // (validation/gemm_shapes.py).
  const double epilogue_s =
      hbm_time_s(sms * profile_.gemm_tile_m * profile_.gemm_tile_n * kGemmOutputBytes);
  double best = INFINITY;
  for (int orient = 0; orient < 2; ++orient) {
    const double tm = orient == 0 ? profile_.gemm_tile_m : profile_.gemm_tile_n;
    const double tn = orient == 0 ? profile_.gemm_tile_n : profile_.gemm_tile_m;
    const double tiles = std::ceil(m / tm) * std::ceil(n / tn) * batch;
    const double waves = std::ceil(tiles / sms);
    best = std::min(best, waves * (2.0 * tm * tn * k / per_sm_flops + epilogue_s));
  }
  return best;
}

double CostModel::attention_compute_time_s(double flops, bool backward, double head_dim,
                                           double seq_length) const {
  // Fused attention runs at a measured fraction of the dense peak (FlashAttention-2/3 and
  // cuDNN benchmarks, calibration/*.json): by head dimension and sequence length where the
  // profile has a table of them, else one value per direction; without either, the GEMM
  // efficiency.
  if (!profile_.flash_attention_efficiency.empty() && head_dim > 0 && seq_length > 0)
    return flops / (system_.gpu.peak_dense_fp16_flops *
                    interpolate_attention_efficiency(profile_.flash_attention_efficiency,
                                                     head_dim, seq_length, backward));
  const double eff = backward ? profile_.flash_attention_bwd_efficiency
                              : profile_.flash_attention_fwd_efficiency;
  return flops / (system_.gpu.peak_dense_fp16_flops * (eff > 0 ? eff : profile_.gemm_max_efficiency));
}

double CostModel::overlapped_gemm_time_s(double gemm_s, const KernelWork& k) const {
  if (!(k.overlap_comm_bytes > 0)) return gemm_s;
  // Transformer Engine's userbuffers move the tensor-parallel traffic peer to peer over NVLink
  // (the TP group is inside the node): each rank sends overlap_comm_bytes at its NVLink rate
  // times the profile's NVLink efficiency, X. With the GEMM's pieces taking G in all (on the
  // SMs the communication leaves: x SMs / (SMs - reserved)) and c pieces:
  //  - ring exchange: each transfer beside one piece, the first (all-gather) or last
  //    (reduce-scatter) piece alone: max(G, X + G / c);
  //  - pipeline: each piece's reduce-scatter beside the next piece, the last one after the
  //    GEMM: max(G + X / c, X + G / c);
  //  - bulk (c = 0): the collective beside the whole GEMM: max(G, X).
  const double comm_s =
      k.overlap_comm_bytes / (system_.gpu.nvlink_bw_bytes_per_s * nvlink_efficiency());
  const double sms = profile_.sm_count;
  const double g = k.overlap_sms > 0 && k.overlap_sms < sms ? gemm_s * sms / (sms - k.overlap_sms)
                                                             : gemm_s;
  const double c = k.overlap_chunks;
  if (!(c > 0)) return std::max(g, comm_s);
  if (k.overlap_pipeline) return std::max(g + comm_s / c, comm_s + g / c);
  return std::max(g, comm_s + g / c);
}

double CostModel::hbm_time_s(double bytes) const {
  return bytes / (system_.gpu.hbm_bw_bytes_per_s * profile_.hbm_efficiency);
}

double CostModel::gemm_time_s(double m, double n, double k, Precision precision,
                              double batch) const {
  TRAINSIM_CHECK(m > 0 && n > 0 && k > 0 && batch > 0, "gemm_time_s: dimensions must be > 0");
  // Operands and result move through HBM once (ideal on-chip reuse).
  const double bytes = (m * k + k * n + m * n) * element_bytes(precision) * batch;
  return std::max(gemm_compute_time_s(m, n, k, batch), hbm_time_s(bytes)) +
         profile_.kernel_launch_overhead_s;
}

double CostModel::memory_bound_time_s(double bytes) const {
  TRAINSIM_CHECK(bytes >= 0, "memory_bound_time_s: bytes < 0");
  return hbm_time_s(bytes) + profile_.kernel_launch_overhead_s;
}

double CostModel::kernel_time_s(const KernelWork& k) const {
  switch (k.cls) {
    case KernelClass::Gemm: {
      if (k.tokens_per_expert > 0 && !k.fp8 && !profile_.moe_grouped_gemm_efficiency.empty()) {
        // The local experts' FP16/BF16 GEMMs at the profile's measured rate for this many
        // tokens per expert (calibration.h moe_grouped_gemm_efficiency).
        const double eff = interpolate_moe_gemm_efficiency(profile_.moe_grouped_gemm_efficiency,
                                                           k.tokens_per_expert);
        return std::max(k.flops / (system_.gpu.peak_dense_fp16_flops * eff), hbm_time_s(k.bytes)) +
               profile_.kernel_launch_overhead_s;
      }
      // A split GEMM (KernelWork::overlap_chunks) runs as that many GEMMs of m / chunks rows
      // (the token rows; each piece has its own waves).
      const double chunks = k.overlap_chunks > 0 ? k.overlap_chunks : 1.0;
      const double gemm_s =
          chunks * std::max(gemm_compute_time_s(k.m / chunks, k.n, k.k, k.batch,
                                                gemm_role(k.pass, k.batch), k.fp8,
                                                k.split_accumulator),
                            hbm_time_s(k.bytes / chunks));
      return overlapped_gemm_time_s(gemm_s, k) + profile_.kernel_launch_overhead_s;
    }
    case KernelClass::Attention:
      return std::max(attention_compute_time_s(k.flops, k.backward, k.head_dim, k.seq_length),
                      hbm_time_s(k.bytes)) +
             profile_.kernel_launch_overhead_s;
    case KernelClass::MemoryBound: {
      // The unfused MoE unpermutation's scatter-add: atomic adds of the token copies into
      // their tokens' rows, at the profile's measured rate (calibration.h).
      if (k.scatter_add_bytes > 0 && profile_.moe_scatter_add_bytes_per_s > 0)
        return std::max(k.scatter_add_bytes / profile_.moe_scatter_add_bytes_per_s,
                        hbm_time_s(k.bytes)) +
               profile_.kernel_launch_overhead_s;
      // Transformer Engine's MXFP8 quantize (per-32-element block amax in both directions) at
      // the profile's measured rate (calibration.h mxfp8_quantize_bytes_per_s).
      if (k.mxfp8_quantize && profile_.mxfp8_quantize_bytes_per_s > 0)
        return std::max(k.bytes / profile_.mxfp8_quantize_bytes_per_s, hbm_time_s(k.bytes)) +
               profile_.kernel_launch_overhead_s;
      const auto& rates = profile_.memory_bound_bytes_per_s;
      if (!rates.empty()) {
        // Measured profile: the rate of this kernel's class (calibration.h).
        auto it = rates.find(memory_bound_class(k.name));
        if (it != rates.end()) return k.bytes / it->second + profile_.kernel_launch_overhead_s;
      }
      return memory_bound_time_s(k.bytes);
    }
  }
  TRAINSIM_CHECK(false, "kernel_time_s: KernelClass out of range");
}

const char* CostModel::memory_bound_class(const char* kernel_name) {
  const std::string n = kernel_name ? kernel_name : "";
  auto has = [&](const char* s) { return n.find(s) != std::string::npos; };
  if (has("dropout") && has("_fwd")) return "dropout";
  if (has("layernorm")) return "layernorm";
  if (has("softmax") || has("xent_exp") || has("xent_sum") || has("xent_max")) return "softmax";
  if (has("gelu")) return "gelu";
  return "elementwise";
}

double CostModel::cpu_adam_time_s(double params) const {
  // ZeRO-Offload CPU Adam (Ren et al., USENIX ATC'21; DeepSpeed csrc/adam/cpu_adam): a
  // streaming SIMD pass over fp32 param, grad, exp_avg, exp_avg_sq. Roofline over the host
  // resources of ONE GPU: the node's memory bandwidth and cores are assumed split evenly over
  // its GPUs (each rank's optimizer runs at the same time on its own share).
  const double gpus = static_cast<double>(system_.gpus_per_node);
  const double bw_share = profile_.host_memory_bw_bytes_per_s * profile_.host_memory_efficiency / gpus;
  const double cores_share = static_cast<double>(system_.cpu_cores) / gpus;
  require_positive(bw_share, "host memory bandwidth share");
  require_positive(cores_share * profile_.cpu_flops_per_core_per_s, "host FLOP/s share");
  const double memory_s = params * optimizer_cpu_bytes_per_param() / bw_share;
  const double compute_s =
      params * adam_flops_per_param() / (cores_share * profile_.cpu_flops_per_core_per_s);
  return std::max(memory_s, compute_s);
}

double CostModel::compute_time_s(const OpDesc& op) const {
  // On the local CPU device (models/hardware/local_device.h, a profile measured on a CPU) the replay
  // runs OptimizerStepGpu with the CPU Adam kernel too (hw_backend/replay.h), so it is timed
  // as CPU Adam.
  const bool local_cpu = system_.name == "local" && profile_.device.rfind("cpu", 0) == 0;
  if (op.kind == OpKind::OptimizerStepCpu || (local_cpu && op.kind == OpKind::OptimizerStepGpu)) {
    TRAINSIM_CHECK(op.params >= 0, "compute_time_s: optimizer step with params < 0");
    return cpu_adam_time_s(static_cast<double>(op.params));
  }
  TRAINSIM_CHECK(is_compute(op.kind) || op.kind == OpKind::OptimizerStepGpu,
                 std::string("compute_time_s: ") + to_string(op.kind) +
                     " is a communication op; the simulator times it on the network");
  double t = 0;
  for (const KernelWork& k : op_kernels(op)) t += kernel_time_s(k);
  return t;
}

double CostModel::launch_time_s(const OpDesc& op) const {
  const bool local_cpu = system_.name == "local" && profile_.device.rfind("cpu", 0) == 0;
  if (op.kind == OpKind::OptimizerStepCpu || (local_cpu && op.kind == OpKind::OptimizerStepGpu))
    return 0;  // compute_time_s times it as CPU Adam: no kernel
  return static_cast<double>(op_kernels(op).size()) * profile_.kernel_launch_overhead_s;
}

double CostModel::ring_bytes_per_rank(OpKind kind, double bytes, std::int64_t group_size) {
  TRAINSIM_CHECK(group_size >= 1, "ring_bytes_per_rank: group_size < 1");
  const double n = static_cast<double>(group_size);
  switch (kind) {
    case OpKind::AllReduce:  // nccl-tests PERFORMANCE.md: busbw = algbw * 2(n-1)/n
      return 2.0 * (n - 1) / n * bytes;
    case OpKind::ReduceScatter:  // (n-1)/n, S the full (input) buffer
    case OpKind::AllGather:      // (n-1)/n, S the full (gathered output) buffer
      return (n - 1) / n * bytes;
    case OpKind::SendRecv:
      return bytes;
    case OpKind::AllToAll:  // every rank keeps 1/n of its buffer and sends the rest
      return (n - 1) / n * bytes;
    default:
      TRAINSIM_CHECK(false,
                     std::string("ring_bytes_per_rank: not a collective: ") + to_string(kind));
  }
}

bool CostModel::host_transport() const {
  return system_.name == "local" && profile_.local_device.host_comm_bw_bytes_per_s > 0;
}

double CostModel::host_transport_bytes_per_rank(OpKind kind, double bytes,
                                                std::int64_t group_size) {
  TRAINSIM_CHECK(group_size >= 1, "host_transport_bytes_per_rank: group_size < 1");
  const double n = static_cast<double>(group_size);
  switch (kind) {  // hw_backend/host_comm.cpp HostGroup::exchange and its callers
    case OpKind::AllReduce:
    case OpKind::ReduceScatter:
    case OpKind::AllToAll:
      return n * bytes;  // publish S, read the n - 1 others' S
    case OpKind::AllGather:
      return bytes;  // publish S / n, read (n - 1) S / n
    case OpKind::SendRecv:
      return 2 * bytes;  // HostChannel: the sender writes S, the receiver reads it
    default:
      TRAINSIM_CHECK(false, std::string("host_transport_bytes_per_rank: not a collective: ") +
                                to_string(kind));
  }
}

double CostModel::collective_latency_s(OpKind kind, std::int64_t group_size,
                                       bool intra_node) const {
  TRAINSIM_CHECK(group_size >= 1, "collective_latency_s: group_size < 1");
  double steps = 0;
  const double n = static_cast<double>(group_size);
  switch (kind) {
    // NCCL tuning model (src/graph/tuning.cc): ring all-reduce 2(n-1) steps, reduce-scatter
    // and all-gather n-1 steps; a point-to-point message is one step.
    case OpKind::AllReduce: steps = 2 * (n - 1); break;
    case OpKind::ReduceScatter:
    case OpKind::AllGather: steps = n - 1; break;
    case OpKind::SendRecv: steps = 1; break;
    // NCCL all-to-all: grouped send/recv to every peer at once, one step of latency.
    case OpKind::AllToAll: steps = 1; break;
    default:
      TRAINSIM_CHECK(false, std::string("collective_latency_s: not a communication op: ") +
                                to_string(kind));
  }
  if (group_size == 1 && kind != OpKind::SendRecv) return 0.0;  // NCCL returns at once
  // A ring that spans nodes pays the network step latency on every step (NCCL uses the NET
  // figure for the whole ring as soon as nNodes > 1).
  // A RoCE fabric's per-message latency joins every inter-node step (0 on InfiniBand).
  const double step_s = intra_node ? profile_.nccl_step_latency_intra_node_s
                                   : profile_.nccl_step_latency_inter_node_s +
                                         system_.fabric_message_latency_s;
  return profile_.nccl_launch_latency_s + steps * step_s;
}

NcclChoice CostModel::nccl_collective(OpKind kind, double bytes, std::int64_t ranks,
                                      std::int64_t nodes) const {
  NcclGroup g;
  g.kind = kind;
  g.version = nccl_version_;
  g.ranks = ranks;
  g.nodes = nodes;
  g.compute_capability = system_.gpu.compute_capability;
  g.amd_cpu = system_.amd_cpu;
  g.arm_cpu = system_.arm_cpu;
  g.net_overhead_s = system_.nccl_net_overhead_s;
  g.channels = nodes > 1 ? system_.nccl_channels_multi_node : system_.nccl_channels;
  // The bus bandwidth the simulated links give a Simple ring (sim/platform.cpp scales the
  // same nominal figures by the same efficiencies): NVLink inside a node; across nodes also
  // the NICs, each GPU's own reached through its PCIe switch. The hierarchical ring of k
  // members per node (models/system/collective_flows.h) sends 1/k of every rank's ring bytes over that
  // rank's NIC, so the node's k NICs (at most its nics_per_node) carry the ring together:
  // NCCL's nChannels x bwInter, a channel per NIC.
  const double nvlink = system_.gpu.nvlink_bw_bytes_per_s * nvlink_efficiency();
  const double nic =
      std::min(system_.nic_bw_bytes_per_s * network_efficiency(),
               system_.gpu.pcie_bw_bytes_per_s * pcie_link_efficiency());
  const std::int64_t per_node = nodes > 0 ? std::max<std::int64_t>(ranks / nodes, 1) : 1;
  // "Node" here is the NVLink domain (models/system/collective_flows.h): its nodes' NICs.
  const double rails = double(std::min<std::int64_t>(per_node, system_.domain_nics()));
  g.bus_bw_bytes_per_s = nodes > 1 ? std::min(nvlink, nic * std::max(rails, 1.0)) : nvlink;
  g.simple_base_latency_s = profile_.nccl_launch_latency_s;
  g.simple_nvlink_step_s = profile_.nccl_step_latency_intra_node_s;
  g.simple_net_step_s = profile_.nccl_step_latency_inter_node_s;
  g.net_latency_inter_s = system_.fabric_message_latency_s;  // RoCE; 0 on InfiniBand
  // NVLS: NCCL's topology figures (src/graph/topo.h SM80/SM90/SM100_NVLINK_BW 20.0 / 20.6 /
  // 40.1 GB/s per link (v2.29.7; SM100 came in v2.25 at 40.0): v2.18.5 gives Blackwell Hopper's
  // figure; the NIC at its port speed / 8), on which NCCL's NVLS search runs.
  g.nvls = system_.nvlink_sharp;
  const int cc = system_.gpu.compute_capability;
  const double per_link_gbs = cc >= 100 && nccl_version_ != NcclVersion::V2_18_5 ? 40.1
                              : cc >= 90                                        ? 20.6
                                                                                : 20.0;
  g.topo_nvlink_bw_gbs = system_.gpu.nvlinks * per_link_gbs;
  g.topo_nic_bw_gbs = system_.nic_bw_bytes_per_s / 1e9;
  // NVLS-Tree heads: one per NIC of the NVLink domain (a NIC shared by GPUs heads one channel).
  g.nic_heads_per_node = system_.domain_nics();
  NcclChoice c = nccl_choose(g, bytes);
  // NVLS: chosen with NCCL's table, as NCCL chooses; run with the measured NVLS round in place
  // of the table's (profile nccl_nvls_latency_s, when the profile has one).
  if (is_nvls(c.algo) && profile_.nccl_nvls_latency_s > 0)
    c.latency_s += profile_.nccl_nvls_latency_s - nccl_nvls_table_latency_s(nccl_version_);
  // An NVLS / NVLS-Tree all-reduce also fills and drains its loop's pipeline, which NCCL's
  // model, and so its choice, leaves out (nvls_all_reduce_fill_s): its NVLink stages at the
  // simulated NVLink's rate, its network hops at one NIC's, its iteration at the algorithm
  // bandwidth the simulated flows are held to.
  if (is_nvls(c.algo) && kind == OpKind::AllReduce) {
    const double n = double(ranks);
    const double alg = c.bus_bw_bytes_per_s * n / (2 * (n - 1));
    c.latency_s += nvls_all_reduce_fill_s(g, c.algo == NcclAlgo::NvlsTree, bytes, nvlink, nic, alg);
  }
  return c;
}

std::optional<NcclChoice> CostModel::nvls_collective(OpKind kind, double bytes,
                                                     std::int64_t ranks,
                                                     std::int64_t nodes) const {
  if (ranks < 2 ||
      (kind != OpKind::AllReduce && kind != OpKind::ReduceScatter && kind != OpKind::AllGather))
    return std::nullopt;
  const NcclChoice c = nccl_collective(kind, bytes, ranks, nodes);
  if (!is_nvls(c.algo)) return std::nullopt;
  return c;
}

double CostModel::nccl_sm_share(const NcclChoice& c) const {
  // Each channel of a running NCCL kernel is one CTA resident on one SM for the whole
  // collective (NCCL launches one block per channel); a compute kernel running beside it
  // gets the other SMs. One CTA per SM is the first-order picture: NCCL's blocks (512-640
  // threads, tens of KB of shared memory) leave room for a GEMM's CTA on few SMs.
  if (c.channels <= 0 || !(profile_.sm_count > 0)) return 0;
  return std::min(1.0, double(c.channels) / profile_.sm_count);
}

double CostModel::collective_time_s(OpKind kind, double bytes, std::int64_t group_size,
                                    double link_bw_bytes_per_s, bool intra_node) const {
  require_positive(link_bw_bytes_per_s, "link_bw_bytes_per_s");
  const double eff = intra_node ? nvlink_efficiency() : network_efficiency();
  return collective_latency_s(kind, group_size, intra_node) +
         ring_bytes_per_rank(kind, bytes, group_size) / (link_bw_bytes_per_s * eff);
}

double CostModel::nvlink_efficiency() const { return profile_.nvlink_efficiency; }
double CostModel::network_efficiency() const { return profile_.network_efficiency; }
double CostModel::pcie_efficiency() const { return profile_.pcie_efficiency; }
double CostModel::pcie_link_efficiency() const {
  return std::max(kPcieLinkEfficiency, pcie_efficiency());
}

}  // namespace trainsim
