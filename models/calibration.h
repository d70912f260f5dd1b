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

  // ---- host CPU (OptimizerStepCpu)
  /// Host memory bandwidth of one node (all sockets), nominal.
  double host_memory_bw_bytes_per_s = 0;
  /// Fraction of nominal host memory bandwidth a streaming kernel (CPU Adam) achieves.
  double host_memory_efficiency = 0;
  /// Vector FLOP/s one core sustains on the Adam update (SIMD lanes x pipes x clock).
  double cpu_flops_per_core_per_s = 0;

  /// Source / note of each parameter, by parameter name (optional per parameter).
  std::map<std::string, std::string> sources;
};

/// Names of all parameters, in file order.
std::vector<std::string> calibration_parameter_names();

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
