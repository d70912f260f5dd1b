// Cost models: how long an operation takes on a device, given the hardware catalog and a
// calibration profile. Every formula carries its source in a comment in cost_model.cpp.
//
// Compute ops are timed analytically here (the simulator turns the time into an Exec on the
// GPU host). Communication is *not* timed here: the simulator moves its bytes over the
// simulated links; this model supplies the per-operation software latency and the fraction of
// link bandwidth NCCL / cudaMemcpy achieve, and an analytic alpha-beta estimate used by tests
// and reports.
#pragma once

#include <optional>
#include <string>

#include "models/hardware/calibration.h"
#include "models/perf/flops.h"
#include "models/hardware/hardware.h"
#include "models/perf/nccl_model.h"
#include "models/graph/ops.h"

namespace trainsim {

class CostModel {
 public:
  /// `nccl_version`: the NCCL release whose tuning model sets the collectives' algorithm,
  /// protocol, latency and rate (scenario key `nccl_version`).
  CostModel(const SystemSpec& system, const CalibrationProfile& profile,
            NcclVersion nccl_version = kDefaultNcclVersion);

  /// Duration of a compute op (AttnFwd .. LogitsLossBwd, OptimizerStepGpu) on one GPU, or of
  /// an OptimizerStepCpu on the host cores available to one GPU. On the `local` system with a
  /// CPU-measured profile (device "cpu: ..."), OptimizerStepGpu is timed as CPU Adam too, as
  /// the CPU replay runs it. Throws std::logic_error for a communication op.
  double compute_time_s(const OpDesc& op) const;
  /// The part of compute_time_s(op) spent outside the GPU's SMs and HBM: one
  /// kernel_launch_overhead_s per kernel (every kernel_time_s adds it once); 0 for an op timed
  /// on the CPU. A slower GPU (scenario `variability`, models/input/variability.h) stretches
  /// only the rest.
  double launch_time_s(const OpDesc& op) const;

  /// Time of one GEMM (m x k) * (k x n) in `precision`, with its efficiency model.
  double gemm_time_s(double m, double n, double k, Precision precision, double batch = 1) const;
  /// Time of a memory-bound kernel touching `bytes` of device memory.
  double memory_bound_time_s(double bytes) const;

  /// Fixed software + synchronization latency of one collective of `group_size` ranks of the
  /// given kind (ring: 2(n-1) steps x per-step latency), added to the flow time.
  double collective_latency_s(OpKind kind, std::int64_t group_size, bool intra_node) const;
  /// NCCL's algorithm, protocol and latency for an all-reduce / reduce-scatter / all-gather of
  /// `bytes` over `ranks` GPUs on `nodes` nodes (models/perf/nccl_model.h), with the bus bandwidth
  /// of the simulated links: NVLink inside a node; across nodes the smaller of NVLink and the
  /// NICs of a node's members together (the hierarchical ring sends 1/k of its bytes over
  /// each of the k members' own NICs, as NCCL runs a ring channel per NIC).
  NcclChoice nccl_collective(OpKind kind, double bytes, std::int64_t ranks,
                             std::int64_t nodes) const;
  /// NCCL's choice for an all-reduce, reduce-scatter or all-gather of two or more ranks when
  /// it runs on NVLink SHARP (NVLS or NVLS-Tree); nullopt for any other collective or choice.
  /// The one test behind the NVLS traffic of a link (activity.cpp link_use) and the NVLS
  /// buffers a communicator allocates (graph_builder.cpp).
  std::optional<NcclChoice> nvls_collective(OpKind kind, double bytes, std::int64_t ranks,
                                            std::int64_t nodes) const;
  /// Share of the GPU's SMs a running NCCL collective occupies: its channels (one CTA each)
  /// over the profile's SM count; 0 when the channels are not known. The simulator slows the
  /// rank's compute by it while the collective runs (models/system/collective_flows.h gives
  /// the share, sim/executor.cpp holds it).
  double nccl_sm_share(const NcclChoice& c) const;
  /// Bytes each rank sends in a ring implementation of the collective (nccl-tests
  /// doc/PERFORMANCE.md): all-reduce 2(n-1)/n * S, reduce-scatter and all-gather (n-1)/n * S.
  static double ring_bytes_per_rank(OpKind kind, double bytes, std::int64_t group_size);
  /// Analytic alpha-beta time of a ring collective at a given per-rank link bandwidth.
  double collective_time_s(OpKind kind, double bytes, std::int64_t group_size,
                           double link_bw_bytes_per_s, bool intra_node) const;

  /// The host transport of a multi-process CPU replay (hw_backend/host_comm.h: every member
  /// publishes its contribution as a file, fsync and rename, and reads the others'): true on
  /// the `local` system with a profile whose local_device has host_comm_bw_bytes_per_s > 0
  /// (measured by `trainsim calibrate --device cpu`). Then every collective and pipeline message
  /// between two ranks (each rank its own one-device node) costs one host_comm_latency_s plus
  /// host_transport_bytes_per_rank at host_comm_bw_bytes_per_s (collective_flows.h); a profile
  /// without the figures keeps the NCCL-table pricing of a local copy (the old behaviour).
  bool host_transport() const;
  /// Bytes one member writes to and reads from the rendezvous files in one host-transport
  /// exchange of a collective of `bytes` (the graph's op.bytes, as ring_bytes_per_rank takes
  /// it) over `group_size` members (host_comm.cpp): all-reduce, reduce-scatter (S the full
  /// input) and all-to-all publish the whole buffer S and read the n - 1 others': n S;
  /// all-gather (S the gathered output) publishes S / n and reads (n - 1) S / n: S; a
  /// pipeline message (SendRecv) is written once and read once: 2 S. `calibrate` fits its
  /// latency and bandwidth on these byte counts (hw_backend/host_comm_bench.h), so the model
  /// prices what was measured.
  static double host_transport_bytes_per_rank(OpKind kind, double bytes, std::int64_t group_size);

  /// Achieved fraction of a link's nominal bandwidth for bulk transfers (NCCL on NVLink / IB,
  /// cudaMemcpy on PCIe). The simulator scales link bandwidths by these.
  double nvlink_efficiency() const;
  double network_efficiency() const;
  double pcie_efficiency() const;
  /// Fraction of its nominal rate a GPU's or NIC's own PCIe link carries (device DMA and
  /// GPUDirect RDMA): the TLP data rate kPcieLinkEfficiency, or the profile's pcie_efficiency
  /// when that is higher.
  double pcie_link_efficiency() const;

  /// Time of one kernel of an op's kernel list (models/perf/flops.h op_kernels): a GEMM's
  /// max(compute with wave quantization, HBM time of its bytes), or a memory-bound kernel's HBM
  /// time; plus the launch overhead.
  double kernel_time_s(const KernelWork& kernel) const;
  /// The class of a memory-bound kernel for CalibrationProfile::memory_bound_bytes_per_s, from
  /// its name (the kernel lists, models/perf/flops.h): "dropout" (forward dropouts: random
  /// numbers), "layernorm", "softmax" (also the cross-entropy exp/log kernels "xent_*"), "gelu",
  /// else "elementwise".
  static const char* memory_bound_class(const char* kernel_name);
  /// Compute part of a GEMM: wave-quantized tile time at gemm_max_efficiency (no launch); with
  /// a measured GEMM table, 2mnk batch / (peak x table efficiency of the shape and `role`).
  /// An FP8 GEMM with `split_accumulator` runs its main loop at the FP8 rate divided by
  /// 1 + fp8_promotion_overhead().
  double gemm_compute_time_s(double m, double n, double k, double batch = 1,
                             const std::string& role = "", bool fp8 = false,
                             bool split_accumulator = false) const;
  /// Main-loop time an FP8 GEMM with the split accumulator adds, as a fraction of its main
  /// loop: every gemm_fp8_promotion_interval_k k elements the kernel waits for its tensor-core
  /// MMAs and adds their partial sums into the FP32 accumulator on the CUDA cores, one FADD per
  /// output element of the tile (see cost_model.cpp). 0 without the profile value.
  double fp8_promotion_overhead() const;
  /// The FP8 GEMM main loop's fraction of the dense FP8 peak (gemm_fp8_max_efficiency, or
  /// gemm_max_efficiency where the profile has none).
  double fp8_efficiency() const;
  /// A fused (flash) attention kernel of `flops`: flops / (dense FP16/BF16 peak x the
  /// profile's flash efficiency, forward or backward), no launch. With the profile's table by
  /// shape (flash_attention_efficiency) and a `head_dim` and `seq_length` > 0, the table's
  /// efficiency of that shape (interpolate_attention_efficiency).
  double attention_compute_time_s(double flops, bool backward, double head_dim = 0,
                                  double seq_length = 0) const;
  /// The GEMM role of a kernel (CalibrationProfile::GemmPoint::role) from its pass
  /// (KernelWork::pass, set by the kernel lists of models/perf/): wgrad -> "wgrad"; dgrad ->
  /// "dgrad", or "bmm" when batched; forward -> "fwd", or "bmm" when batched. A GEMM without
  /// its pass (GemmPass::None) is a bug in the kernel lists (std::logic_error).
  static const char* gemm_role(GemmPass pass, double batch);
  /// Wave-quantized tile time of a GEMM at `rate` FLOP/s for a full wave of tiles, each wave
  /// followed by its epilogue (SMs x tile x 2 bytes stored at the HBM rate).
  double wave_time_s(double m, double n, double k, double batch, double rate) const;
  /// A GEMM whose pieces take `gemm_s` with a tensor-parallel collective inside it
  /// (KernelWork::overlap_*; see cost_model.cpp for the three methods); gemm_s when none.
  double overlapped_gemm_time_s(double gemm_s, const KernelWork& k) const;
  /// bytes / (HBM bandwidth x hbm_efficiency), no launch overhead.
  double hbm_time_s(double bytes) const;
  /// CPU Adam over `params` parameters on the host share of one GPU (OptimizerStepCpu).
  double cpu_adam_time_s(double params) const;

  const SystemSpec& system() const { return system_; }
  const CalibrationProfile& profile() const { return profile_; }

 private:
  SystemSpec system_;
  CalibrationProfile profile_;
  NcclVersion nccl_version_;
};

}  // namespace trainsim
