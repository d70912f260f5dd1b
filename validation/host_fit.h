// The host section of a calibration profile fitted from a replay trace's `host` thread
// (docs/trace.md "host thread"; `trainsim calibrate --from-trace`): per op class, the host
// time to issue one op.
//
// Each span of cat host_issue is one task's issue on the host, with args class (compute, comm,
// copy, optimizer), eager_ops (top-level ATen operators) and autograd_nodes (backward nodes)
// that the replay counted through LibTorch's RecordFunction callbacks. Least squares, with
// non-negative costs (the most negative is dropped and the rest refitted), over the compute and
// comm spans of
//   issue_s = eager_ops x eager_op_s + autograd_nodes x autograd_node_s
//             + [comm] x nccl_call_s + [compute] x module_overhead_s
// where module_overhead_s is the per-task cost beyond its ops (a layer's Python module call in
// Megatron; the replay's C++ task dispatch). te_module_s is not fitted: a LibTorch replay has
// no Transformer Engine modules. On the CPU device the host runs each op to completion, so
// its "issue" costs include the ops' compute: a CPU fit describes the CPU replay; a GPU
// trace's host thread gives the issue costs proper.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "validation/trace_import.h"

namespace trainsim::validation {

struct HostIssueFit {
  double eager_op_s = 0;        ///< per top-level eager (ATen) op
  double autograd_node_s = 0;   ///< per autograd node of a backward
  double nccl_call_s = 0;       ///< per communication task (collective, send, receive)
  double module_overhead_s = 0; ///< per compute task beyond its ops
  std::int64_t spans = 0;       ///< host_issue spans used
  double rms_residual_s = 0;    ///< root mean square of the fit's residuals
  /// The entries the trace could not determine (no spans with that column), left 0.
  std::vector<std::string> not_fitted;
  /// The profile's `host` section entries this fit writes, each {value, source}.
  nlohmann::json to_host_section(const std::string& trace_source) const;
};

/// Whether the trace has a host thread with counted issues (spans of cat host_issue with
/// args eager_ops).
bool has_host_issue_spans(const ImportedTrace& trace);

/// Fits the host issue costs (see the file comment). Throws InputError naming the trace when
/// it has no counted host_issue spans.
HostIssueFit fit_host_issue_costs(const ImportedTrace& trace);

}  // namespace trainsim::validation
