// Calibration profiles: the measured (or datasheet-derived) parameters of the cost model for
// one GPU type. The hardware catalog (hardware.h) holds only published facts such as peak
// FLOP/s and HBM bandwidth; a profile says how much of them real kernels achieve.
//
// File format (JSON; see calibration/README.md):
//   {
//     "version": 1,
//     "device": "A100-SXM4-80GB",            // GpuSpec::name the profile is for
//     "source": "datasheet-derived",          // how the profile was made
//     "date": "2024-05-01",
//     "notes": "...",                          // optional free text
//     "parameters": {
//       "gemm_max_efficiency": {"value": 0.86, "source": "268/312 TFLOP/s, ..."},
//       "hbm_efficiency": 0.85,               // a bare number is allowed (no source)
//       ...
//     }
//   }
// Every parameter must be present (a profile is complete), with a value in its range.
// Unknown keys, wrong types and out-of-range values throw InputError naming the file, the
// field (dotted path) and the value.
//
// The shipped defaults (calibration/*.json in the source tree) are embedded in the binary at
// build time (models/CMakeLists.txt generates calibration_defaults.cpp), so default_calibration
// needs no data file at run time.
#pragma once

#include <map>
#include <utility>
#include <string>
#include <vector>

namespace trainsim {

/// All numeric fields start at 0 (invalid): a usable profile comes from a file or from
/// default_calibration(), so every number has one home, the JSON, with its source.
struct CalibrationProfile {
  int version = 1;
  std::string device;   ///< GpuSpec::name, e.g. "A100-SXM4-80GB"
  std::string source;   ///< e.g. "datasheet-derived", "measured: trainsim calibrate"
  std::string date;     ///< ISO date the profile was made
  std::string notes;    ///< optional free text

  // ---- GPU compute (cost_model.cpp: gemm_time_s, memory_bound_time_s)
  /// Fraction of the datasheet dense FP16/BF16 peak a full wave of large GEMM tiles sustains.
  double gemm_max_efficiency = 0;
  /// Output tile of the cuBLAS kernels modelled (NVIDIA Matrix Multiplication Background
  /// User's Guide: 256x128 for large FP16 GEMMs on A100). Both orientations are tried.
  double gemm_tile_m = 0;
  double gemm_tile_n = 0;
  /// Streaming multiprocessors (A100: 108, H100 SXM: 132).
  double sm_count = 0;
  /// Fraction of datasheet HBM bandwidth that streaming kernels achieve.
  double hbm_efficiency = 0;
  /// Fixed time per kernel launch (launch + tail), added to every kernel.
  double kernel_launch_overhead_s = 0;
  // Optional (0 = absent; cost_model.cpp says what it falls back to):
  /// Fraction of the datasheet dense FP8 peak a full wave of large FP8 GEMM tiles sustains.
  double gemm_fp8_max_efficiency = 0;
  /// FP8 GEMMs with the split accumulator (Transformer Engine's dgrad and wgrad; every GEMM
  /// of the blockwise recipe): k elements between two promotions of the tensor-core partial
  /// sums into the FP32 accumulator on the CUDA cores (cost_model.cpp gemm_compute_time_s).
  /// 0: not modelled (the FP8 rate as measured, with fast accumulation).
  double gemm_fp8_promotion_interval_k = 0;
  /// Fraction of the dense FP16/BF16 peak the fused (flash) attention kernel sustains on long
  /// causal sequences, forward and backward (FlashAttention-2 on A100, FlashAttention-3/cuDNN
  /// on H100).
  double flash_attention_fwd_efficiency = 0;
  double flash_attention_bwd_efficiency = 0;
  /// Rate of an unfused MoE unpermutation's scatter-add (torch scatter_add_ / index_add_ of
  /// the expert outputs' token copies back into token order: atomic adds of k rows into each
  /// token row), in bytes of the added rows per second. 0 (absent): the HBM rate.
  double moe_scatter_add_bytes_per_s = 0;
  /// Rate of Transformer Engine's MXFP8 quantize kernel (fp8_recipe mxfp8: one pass reading the
  /// high-precision tensor and writing its row-wise and column-wise FP8 copies with one E8M0
  /// scale per 32 elements each; KernelWork::mxfp8_quantize), in bytes read + written per
  /// second. 0 (absent): the HBM rate.
  double mxfp8_quantize_bytes_per_s = 0;

  // ---- communication (cost_model.cpp: collective_latency_s, *_efficiency)
  /// Achieved / nominal bandwidth: NCCL on NVLink, NCCL on the IB fabric, cudaMemcpy on PCIe.
  double nvlink_efficiency = 0;
  double network_efficiency = 0;
  double pcie_efficiency = 0;
  /// Fixed cost of one NCCL collective call (launch + synchronization).
  double nccl_launch_latency_s = 0;
  /// Per ring step latency inside a node (NVLink) and between nodes (IB).
  double nccl_step_latency_intra_node_s = 0;
  double nccl_step_latency_inter_node_s = 0;
  /// Latency of one NVLS round inside a node (NVLink SHARP all-reduce: every NVLS channel's
  /// multimem reduce, multicast and barriers), measured; it replaces NCCL's own NVLS entry
  /// (hwLatencies 25 us, 23 in v2.18.5) in the simulated time, while the algorithm is still
  /// chosen with NCCL's table, as NCCL chooses it. 0 (absent): NCCL's entry.
  double nccl_nvls_latency_s = 0;

  // ---- host CPU (OptimizerStepCpu)
  /// Host memory bandwidth of one node (all sockets), nominal.
  double host_memory_bw_bytes_per_s = 0;
  /// Fraction of nominal host memory bandwidth a streaming kernel (CPU Adam) achieves.
  double host_memory_efficiency = 0;
  /// Vector FLOP/s one core sustains on the Adam update (SIMD lanes x pipes x clock).
  double cpu_flops_per_core_per_s = 0;

  // ---- memory model (models/memory/zero_offload.cpp)
  /// GPU memory taken before any tensor: CUDA context, cuBLAS/cuDNN workspaces, allocator
  /// slack (bytes per GPU).
  double framework_overhead_bytes = 0;
  /// NCCL's internal buffers per communicator a rank belongs to (bytes per GPU).
  double nccl_buffer_bytes_per_communicator = 0;

  // ---- host issue costs (JSON section "host"; sim/host_thread.h, docs/scenario.md
  // "host_model"). Optional as a section: a profile without it has them all 0, and the host
  // timeline then issues every task at no cost (it binds only at synchronisation points).
  // When the section is present every entry is required. Sources: calibration/*.json.
  /// Host time to issue one forward kernel of a PyTorch eager op (dispatch + autograd record).
  double host_eager_op_s = 0;
  /// Host time of one Transformer Engine module call (a Linear: its forward GEMM's issue).
  double host_te_module_s = 0;
  /// Host time of one autograd node in the backward (issuing its kernel).
  double host_autograd_node_s = 0;
  /// Host time of one NCCL call (collective, send or receive) and of one copy's issue.
  double host_nccl_call_s = 0;
  /// Python module overhead per layer block (one compute task): the module's forward/backward
  /// call beyond its kernels' issue.
  double host_module_overhead_s = 0;
  /// Launches one stream may have pending before the host blocks (CUDA's launch queue).
  double host_launch_queue_depth = 0;
  /// Host time of one CUDA graph launch (cudaGraphLaunch of a captured region).
  double host_graph_launch_s = 0;
  /// Host time of a device-to-host synchronisation once the device has reached it
  /// (the copy's completion, the wake-up, the .item() / .cpu() return).
  double host_sync_s = 0;

  /// Source / note of each parameter, by parameter name (optional per parameter).
  std::map<std::string, std::string> sources;

  // ---- measured profiles only (trainsim calibrate); absent from the shipped GPU profiles.
  // Optional top-level JSON keys "precision", "local_device", "gemm_efficiency",
  // "measurements" (see calibration/README.md).
  /// Element type the compute figures were measured in ("fp32", "bf16", "fp16"); empty: not
  /// stated (the shipped profiles: the scenario's fp16/bf16).
  std::string precision;
  /// The measured device's own figures. They stand in for the datasheet figures of the `local`
  /// system (models/hardware/local_device.h), whose catalog entry has none. All 0: not measured.
  struct LocalDevice {
    /// FLOP/s the gemm_efficiency values are fractions of: the best GEMM rate measured.
    double peak_flops = 0;
    /// Streaming (copy) bandwidth of the device memory: bytes read + written per second.
    double memory_bw_bytes_per_s = 0;
    /// Device memory capacity (a CPU: the host's RAM).
    double memory_bytes = 0;
    /// Host <-> device copy bandwidth, per direction (a CPU: memcpy between two host buffers).
    double copy_bw_bytes_per_s = 0;
    /// Cores and the intra-op threads the measurements ran with.
    double cores = 0;
    double threads = 0;
    /// The host transport of a multi-process CPU replay (hw_backend/host_comm.h), measured
    /// between two processes by `trainsim calibrate --device cpu` (hw_backend/host_comm_bench.h):
    /// the fixed time of one exchange (a collective or a pipeline message: publish with fsync and
    /// rename, poll for the peers' files) and the rate of the bytes a member writes and reads
    /// (CostModel::host_transport_bytes_per_rank), a least-squares line through the fastest
    /// repetition of each operation and size. Optional: 0 (absent, a profile from before they
    /// were measured) prices collectives between local ranks as before, at copy_bw_bytes_per_s
    /// with the NCCL model's latencies. A latency without the bandwidth is refused.
    double host_comm_latency_s = 0;
    double host_comm_bw_bytes_per_s = 0;
    /// Processes that ran the compute microbenchmarks at once (`calibrate --nprocs N`: the
    /// rates one of N concurrent processes sees, as a `validate --nprocs N` replay's ranks
    /// share the cores). Optional: 0 (absent) means 1, one process alone.
    double processes = 0;
  } local_device;
  /// GEMM efficiency by shape: rate of C[m x n] = A[m x k] B[k x n] (`batch` products) over
  /// the peak (local_device.peak_flops, or the catalog peak when that is 0). When non-empty,
  /// CostModel::gemm_compute_time_s uses it instead of the wave-quantization model.
  struct GemmPoint {
    double m = 0, n = 0, k = 0, batch = 1, efficiency = 0;
    /// Which product of a layer it was measured as (the operand layouts differ, and so does
    /// the rate: reference BLAS runs X W^T at ~half the rate of dY W): "fwd" (X W^T), "dgrad"
    /// (dY W), "wgrad" (dY^T X), "bmm" (batched attention products); "" fits any.
    std::string role;
    bool operator==(const GemmPoint& o) const {
      return m == o.m && n == o.n && k == o.k && batch == o.batch &&
             efficiency == o.efficiency && role == o.role;
    }
  };
  std::vector<GemmPoint> gemm_efficiency;
  /// Fused (flash) attention rate by shape, as fractions of the dense FP16/BF16 peak: one point
  /// per (head dimension, sequence length) of a published or measured attention benchmark.
  /// When non-empty, CostModel times a fused attention kernel by
  /// interpolate_attention_efficiency instead of flash_attention_{fwd,bwd}_efficiency. JSON:
  /// top-level "flash_attention_efficiency": {"source": "...", "points": [[head_dim,
  /// seq_length, fwd, bwd], ...]}.
  struct AttentionPoint {
    double head_dim = 0, seq_length = 0, fwd_efficiency = 0, bwd_efficiency = 0;
    bool operator==(const AttentionPoint& o) const {
      return head_dim == o.head_dim && seq_length == o.seq_length &&
             fwd_efficiency == o.fwd_efficiency && bwd_efficiency == o.bwd_efficiency;
    }
  };
  std::vector<AttentionPoint> flash_attention_efficiency;
  std::string flash_attention_efficiency_source;  ///< where the points come from
  /// The FP16/BF16 GEMMs of a mixture-of-experts layer's local experts (Transformer Engine's
  /// GroupedLinear, or one GEMM per expert) by tokens per expert, as fractions of the dense
  /// FP16/BF16 peak: one point per shape of a published or measured expert-GEMM benchmark
  /// (the rate of all of an expert layer's GEMMs, forward and backward, at that many tokens
  /// per expert). When non-empty, CostModel times the expert GEMMs (KernelWork::
  /// tokens_per_expert > 0, not FP8) by interpolate_moe_gemm_efficiency instead of the wave
  /// model. JSON: top-level "moe_grouped_gemm_efficiency": {"source": "...", "points":
  /// [[tokens_per_expert, efficiency], ...]}. Absent from the shipped profiles
  /// (docs/validation.md, "Expert GEMMs at small shapes").
  struct MoeGemmPoint {
    double tokens_per_expert = 0, efficiency = 0;
    bool operator==(const MoeGemmPoint& o) const {
      return tokens_per_expert == o.tokens_per_expert && efficiency == o.efficiency;
    }
  };
  std::vector<MoeGemmPoint> moe_grouped_gemm_efficiency;
  std::string moe_grouped_gemm_efficiency_source;  ///< where the points come from
  /// Measured rate (bytes / s, bytes counted as models/perf/flops.h counts them) of each class of
  /// memory-bound kernel (CostModel::memory_bound_class: "elementwise", "layernorm",
  /// "softmax", "gelu", "dropout"). When non-empty, CostModel times a memory-bound kernel of
  /// a listed class at its rate instead of HBM bandwidth x hbm_efficiency (on a CPU these
  /// operators differ by 50x: an add streams, a dropout draws random numbers).
  std::map<std::string, double> memory_bound_bytes_per_s;
  /// Raw microbenchmark results kept for the record (JSON text of the "measurements" object;
  /// empty: none). Not read by the cost model.
  std::string measurements_json;
};

/// One point per shape and layout (m, n, k, batch, role) of `measured`, whose efficiency is the
/// mean of that shape's measurements, in the order each shape first appears: a GEMM table from
/// raw measurements (`trainsim calibrate`, `calibrate --from-microbench`).
std::vector<CalibrationProfile::GemmPoint> mean_gemm_points(
    const std::vector<CalibrationProfile::GemmPoint>& measured);

/// The efficiency of a GEMM shape from a measured table (CalibrationProfile::gemm_efficiency):
/// inverse-distance weighting (power 4) in log2(m), log2(n), log2(k), log2(batch) over the
/// points of the same `role` and those without a role (all points when there are none of
/// either); an exact shape returns its own value. Throws std::logic_error for an empty table or a
/// non-positive dimension.
double interpolate_gemm_efficiency(const std::vector<CalibrationProfile::GemmPoint>& table,
                                   double m, double n, double k, double batch,
                                   const std::string& role = "");

/// The fused attention efficiency of a kernel with `head_dim` and `seq_length` (the keys each
/// query block runs over) from CalibrationProfile::flash_attention_efficiency: the points of
/// the nearest head dimension (log2 distance; a tie takes the smaller), then piecewise linear in
/// log2(seq_length) between their sequence lengths, held at the end values outside them.
/// Throws std::logic_error for an empty table or a non-positive argument.
double interpolate_attention_efficiency(
    const std::vector<CalibrationProfile::AttentionPoint>& table, double head_dim,
    double seq_length, bool backward);

/// The expert-GEMM efficiency at `tokens_per_expert` from
/// CalibrationProfile::moe_grouped_gemm_efficiency: piecewise linear in log2(tokens per
/// expert) between the points, held at the end values outside them. Throws std::logic_error
/// for an empty table or a non-positive argument.
double interpolate_moe_gemm_efficiency(
    const std::vector<CalibrationProfile::MoeGemmPoint>& table, double tokens_per_expert);

/// Names of all parameters, in file order.
std::vector<std::string> calibration_parameter_names();
/// Names of the host section's entries, in file order (CalibrationProfile::host_*).
std::vector<std::string> calibration_host_names();
/// True when the profile has its host section (every host_* entry set).
bool has_host_costs(const CalibrationProfile& profile);

/// Reads a profile file. Throws InputError (file, field, value) on any problem.
CalibrationProfile load_calibration(const std::string& path);
/// Parses profile JSON text; `source_name` names it in error messages.
CalibrationProfile parse_calibration(const std::string& json_text, const std::string& source_name);
/// The JSON text of a profile (every parameter as {"value": v, "source": s} when it has a
/// source, else a bare number). parse_calibration(to_json(p)) == p.
std::string calibration_to_json(const CalibrationProfile& profile);
/// Writes a profile file. Throws InputError when the file cannot be written.
void save_calibration(const CalibrationProfile& profile, const std::string& path);

/// The shipped default profile for a GpuSpec name ("A100-SXM4-40GB", "A100-SXM4-80GB",
/// "H100-SXM5-80GB"), from the JSON embedded at build time. Throws InputError listing the
/// known devices for any other name.
CalibrationProfile default_calibration(const std::string& gpu_name);
/// Devices with a shipped default profile.
std::vector<std::string> default_calibration_devices();

bool operator==(const CalibrationProfile& a, const CalibrationProfile& b);
inline bool operator!=(const CalibrationProfile& a, const CalibrationProfile& b) {
  return !(a == b);
}

namespace detail {
/// (file name, JSON text) of calibration/*.json, generated at build time.
const std::vector<std::pair<std::string, std::string>>& embedded_calibration_files();
}  // namespace detail

}  // namespace trainsim
