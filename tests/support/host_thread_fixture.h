// The fixture of the host-thread tests (tests/sim/test_host_thread.cpp,
// test_cuda_graph_host.cpp): one DGX A100 rank whose profile issues every compute task at
// `module_overhead_s` alone, a layer-sized MLP op, and a chain of N such tasks.
#pragma once

#include "models/graph/schedule_graph.h"
#include "models/hardware/calibration.h"
#include "models/hardware/hardware.h"
#include "models/input/scenario.h"
#include "models/perf/flops.h"

namespace trainsim::test_support {

struct HostThreadEnv {
  SystemSpec system = find_system("dgx-a100-80gb");
  CalibrationProfile profile = default_calibration(system.gpu.name);
  Scenario scenario;
  HostThreadEnv() {
    scenario.cluster.system = system.name;
    scenario.cluster.nodes = 1;
    scenario.cluster.gpus_per_node = 8;
    // Every compute task costs exactly `module_overhead_s` to issue (no per-kernel cost), so
    // h is set by one number.
    profile.host_eager_op_s = profile.host_te_module_s = profile.host_autograd_node_s = 0;
    profile.host_nccl_call_s = 0;
    profile.host_sync_s = 0;
  }
};

/// A tensor-parallel MLP forward of one layer (b 1, s 2048, h 4096, TP 4).
inline OpDesc layer_op() {
  OpDesc op;
  op.kind = OpKind::MlpFwd;
  op.micro_batch = 1;
  op.seq = 2048;
  op.hidden = 4096;
  op.ffn = 4096;
  op.heads = 8;
  op.head_dim = 128;
  op.tp = 4;
  fill_work(op);
  return op;
}

/// N compute tasks of one op on rank 0's compute stream (stream order only).
inline ScheduleGraph chain(int n, const OpDesc& op) {
  ScheduleGraph g;
  const auto o = g.add_op(op);
  for (int i = 0; i < n; ++i) {
    Task t;
    t.kind = TaskKind::Compute;
    t.rank = 0;
    t.stream = StreamId::Compute;
    t.op = o;
    g.add_task(t);
  }
  return g;
}

}  // namespace trainsim::test_support
