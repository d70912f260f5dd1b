// Trace import: reads Chrome trace-event JSON as PyTorch's profiler writes it (Kineto,
// `torch.profiler.profile(...).export_chrome_trace(path)`) and as trainsim writes it
// (models/outputs/trace_writer.h, simulated or measured), maps its events to schedule-graph tasks, and
// extracts the per-op samples that calibration fitting (validation/fit.h) reads.
//
// Kineto traces (PyTorch 1.13 / 2.x): a JSON object with "traceEvents"; operators are complete
// events (ph "X") of cat "cpu_op" (CPU) or "kernel" (GPU), `ts`/`dur` in microseconds; with
// record_shapes=True an operator's args carry "Input Dims" (a list of shapes, one per input,
// [] for scalars) and "Input type" ("float", "c10::BFloat16", "c10::Half", ...). Ranges from
// torch.profiler.record_function are events of cat "user_annotation".
//
// Mapping to tasks: a trainsim trace names each span by the task label and carries args.task
// (the task id). A Kineto trace has no task ids: an operator belongs to the task whose label
// equals the name of the innermost user_annotation range enclosing it on the same thread
// (the producer wraps each task's work in record_function("<task label>"), as
// validation/data/make_kineto_trace.py does). Operators outside any matching range stay
// unmapped and are still used for fitting.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "models/graph/schedule_graph.h"

namespace trainsim::validation {

enum class TraceFormat { Kineto, Trainsim };

/// One complete event (ph "X").
struct TraceSpan {
  std::string name;
  std::string cat;
  double start_s = 0;
  double dur_s = 0;
  std::int64_t pid = 0;
  std::int64_t tid = 0;
  nlohmann::json args;  ///< the event's args (object) or null
};

struct ImportedTrace {
  TraceFormat format = TraceFormat::Kineto;
  std::string source;           ///< file name
  std::vector<TraceSpan> spans; ///< complete events, sorted by (pid, tid, start, -dur)
  /// Element type for operators without "Input type" (profilers that record no dtypes): the
  /// top-level "trainsim_meta": {"dtype": ...} a producer may add; empty when absent.
  std::string default_dtype;
  /// The device the trace was recorded on: "cpu" when it has no GPU evidence, else the GPU's
  /// name from Kineto's "deviceProperties" (e.g. "NVIDIA A100-SXM4-80GB"), or "cuda" when it
  /// has GPU kernel events but no name. A top-level "trainsim_meta": {"device": ...} wins.
  std::string device;
};

/// Why the trace's device differs from the device `profile_device` (CalibrationProfile::device:
/// a catalog GPU name such as "A100-SXM4-80GB", or "cpu: ..." for a measured CPU profile)
/// describes, or "" when they agree or cannot be told apart (a GPU trace with no name).
std::string trace_device_mismatch(const ImportedTrace& trace, const std::string& profile_device);

/// Parses a Chrome trace (object with "traceEvents", or a bare event array). The format is
/// trainsim when some span has an integer args.task, else Kineto. Events without "cat" (the
/// legacy autograd profiler's export, which torch.profiler falls back to in builds without
/// Kineto) get cat "cpu_op" when named aten::*, else "user_annotation". Throws InputError
/// naming the file for unreadable JSON or a trace with no complete events.
ImportedTrace parse_chrome_trace(const std::string& json_text, const std::string& source);
ImportedTrace load_chrome_trace(const std::string& path);

/// An operator sample for fitting: a leaf ATen operator with its shapes.
struct OpSample {
  std::string name;              ///< "aten::addmm", "aten::softmax", ...
  double dur_s = 0;
  std::vector<std::vector<std::int64_t>> input_dims;
  std::string dtype;             ///< first "Input type" that is a floating type ("float", ...)
  std::string task_label;        ///< enclosing user_annotation (Kineto) or span name; may be empty
};

/// Operators of a Kineto trace (cat cpu_op or kernel) that have shapes ("Input Dims").
std::vector<OpSample> operator_samples(const ImportedTrace& trace);

/// A GEMM taken from an operator sample: C[m x n] = A[m x k] B[k x n], `batch` products.
struct GemmSample {
  double m = 0, n = 0, k = 0, batch = 1;
  double dur_s = 0;
  double flops() const { return 2.0 * m * n * k * batch; }
};
/// The GEMM of aten::mm ([m,k],[k,n]), aten::addmm (bias,[m,k],[k,n]), aten::bmm
/// ([b,m,k],[b,k,n]) and aten::baddbmm (C,[b,m,k],[b,k,n]); false for any other operator or
/// malformed shapes. (aten::linear / aten::matmul are composites whose time includes these
/// leaves and are not used, so nothing is counted twice.)
bool gemm_of(const OpSample& op, GemmSample* out);

/// Bytes an element-wise / reduction operator moves: its floating inputs read once plus one
/// output of the first input's size written, at the element size of `dtype`. Used for the
/// memory-bound fit (fit.h); false when the operator has no tensor input.
bool elementwise_bytes(const OpSample& op, double* bytes);
/// Element size of a Kineto "Input type" string (float 4, double 8, Half/BFloat16 2, bool and
/// (unsigned) char 1, long 8, int 4); 0 for anything else.
double kineto_element_bytes(const std::string& type);

/// Per-task durations taken from a trace: for a trainsim trace, the span of each task id; for
/// a Kineto trace, the user_annotation range whose name is the task's label (the first one,
/// in time order, among ranges of that name not yet taken, so that repeated labels map in
/// order). Indexed by task id; NaN where the trace has no span for the task.
std::vector<double> task_durations(const ImportedTrace& trace, const ScheduleGraph& graph,
                                   RankId rank);

}  // namespace trainsim::validation
