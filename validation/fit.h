// Calibration fitting: turns measured per-op or per-task times into cost-model parameters
// (models/hardware/calibration.h), so that the simulator's times move toward what the hardware did.
//
// Two sources:
//  * operator samples of a PyTorch profiler (Kineto) trace (trace_import.h):
//      GEMMs (aten::mm / addmm / bmm / baddbmm with shapes): per shape, efficiency =
//        2 m n k batch / (median duration x peak); written into the profile's gemm_efficiency
//        table (a shape already in the table is replaced, new shapes are added), which
//        CostModel::gemm_compute_time_s reads (the trace does not give operand layouts: its
//        points have no role and replace every point of their shape). peak = the profile's local_device.peak_flops,
//        else the system's datasheet peak.
//      memory-bound operators (element-wise, softmax, LayerNorm, dropout, copies): an
//        ordinary least-squares line  duration = overhead + bytes / bandwidth  over all samples
//        (bytes from elementwise_bytes); overhead -> kernel_launch_overhead_s, bandwidth /
//        device bandwidth -> hbm_efficiency (only when both come out positive and the
//        efficiency is <= 1; otherwise they are left unchanged and the report says why).
//  * per-task durations of a measured trainsim trace (or an ExecutionRecord): one scale
//    factor alpha for the GEMM rate, least squares over the compute tasks of
//      measured = gemm_time / alpha + other_time
//    (gemm_time, other_time: the current cost model's split of the task's kernels), applied to
//    local_device.peak_flops (measured profiles) or to gemm_max_efficiency and the table
//    (datasheet profiles; capped at 1, reported).
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "models/hardware/calibration.h"
#include "models/hardware/hardware.h"
#include "models/graph/schedule_graph.h"
#include "validation/trace_import.h"

namespace trainsim::validation {

struct FitReport {
  std::size_t gemm_samples = 0;       ///< GEMM operator samples used
  std::size_t gemm_shapes = 0;        ///< distinct shapes written to the table
  std::size_t memory_samples = 0;     ///< memory-bound samples used
  bool memory_fit_applied = false;
  double fitted_overhead_s = 0;       ///< intercept of the memory-bound fit
  double fitted_bandwidth_bytes_per_s = 0;  ///< 1 / slope of the memory-bound fit
  double gemm_rate_scale = 1;         ///< alpha of the per-task fit
  std::vector<std::string> notes;
  nlohmann::json to_json() const;
};

/// Names of the ATen operators treated as memory-bound by the fit.
const std::vector<std::string>& memory_bound_operator_names();

/// Fits `profile` from the operator samples of a Kineto trace (see the file comment) for
/// `system` (the system the profile is for; for `local`, models/hardware/local_device.h). Returns the
/// new profile; `report` (if not null) says what was fitted. Throws InputError naming `source`
/// (the trace's file) when the trace has no usable operator sample, or a GEMM with a dimension
/// above kMaxGemmDim.
CalibrationProfile fit_from_operator_samples(const std::vector<OpSample>& samples,
                                             const CalibrationProfile& profile,
                                             const SystemSpec& system, FitReport* report,
                                             const std::string& source = "the trace");

/// The largest GEMM dimension (m, n, k or batch) a fit accepts: 2^31, past any GEMM a device
/// runs (a 2^31 x 2^31 16-bit operand is 8 EiB); a trace's larger shape is corrupt (issue 35:
/// a GEMM of 4.6e18^3 was fitted).
inline constexpr double kMaxGemmDim = 2147483648.0;

/// Fits the GEMM rate scale from per-task measured durations (indexed by task id, NaN where
/// not measured) of `graph` (see the file comment). Throws InputError when no compute task has
/// a measured duration.
CalibrationProfile fit_from_task_durations(const ScheduleGraph& graph,
                                           const std::vector<double>& measured_s,
                                           const CalibrationProfile& profile,
                                           const SystemSpec& system, FitReport* report);

/// Fits a datasheet profile of a catalog GPU (`base`, for `system`) from the microbenchmarks
/// that `trainsim calibrate --device cuda` measured on that GPU (`measured`: its
/// "measurements"; `measured_name` names the file in messages):
///   GEMMs: every measured point (m, n, k, batch, layout role) enters the gemm_efficiency table
///     at rate / the GPU's dense FP16/BF16 peak (points of one shape and role measured twice:
///     their mean), which CostModel::gemm_compute_time_s then interpolates instead of the wave
///     model. A rate above the datasheet peak is an InputError (measured on another GPU).
///   hbm_efficiency: the streaming copy's bytes (read + written) per second / the HBM
///     bandwidth, as the shipped profiles define it (a STREAM Copy).
///   pcie_efficiency: the mean of the host-to-device and device-to-host pinned copies at the
///     largest size / the system's PCIe bandwidth per direction.
/// Left as they are: the memory-bound class rates (calibrate measures them at one row length,
/// 128, which says little about a transformer's LayerNorm), kernel_launch_overhead_s (the
/// element-wise intercept measures host dispatch of back-to-back tiny operators), FP8,
/// attention, NCCL and network figures. Throws InputError for a CPU's measurements, another
/// GPU's (the device string names a GPU that is not `system`'s: gpu_name_matches), a 32-bit
/// precision, or a file without measurements.
CalibrationProfile fit_from_microbenchmarks(const CalibrationProfile& measured,
                                            const std::string& measured_name,
                                            const CalibrationProfile& base,
                                            const SystemSpec& system, FitReport* report);

/// A calibration figure that a fit moved by more than a factor (large_fit_changes).
struct FitChange {
  std::string field;  ///< e.g. "parameters.hbm_efficiency", "gemm_efficiency[m=64 n=128 k=128 batch=1]"
  double before = 0;
  double after = 0;
  double factor = 1;  ///< max(after / before, before / after)
};

/// The factor above which `trainsim calibrate --from-trace` warns that a fit moved a figure:
/// a calibration refines a profile of the same device, whose rates should move by tens of
/// percent, not by multiples (a trace from another device moves them by 100x and more).
constexpr double kFitWarningFactor = 4.0;

/// Figures of `after` that differ from `before` by more than `factor` either way: every
/// numeric parameter, every memory-bound class rate both have, and the efficiency of every
/// gemm_efficiency shape of `after` against `before`'s table (interpolated; skipped when
/// `before` has no table).
std::vector<FitChange> large_fit_changes(const CalibrationProfile& before,
                                         const CalibrationProfile& after, double factor);

}  // namespace trainsim::validation
