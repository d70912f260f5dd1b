#include "models/builder/optimizer_step.h"

#include "models/builder/offload.h"
#include "models/perf/flops.h"
#include "models/memory/memory_model.h"

namespace trainsim::builder {

OptimizerStepInputs replicated_optimizer_step(const Scenario& sc, std::int64_t pp_stage) {
  OptimizerStepInputs in;
  in.gpu_params = params_per_rank(sc, pp_stage);
  // A main_grad narrower than fp32 is cast to a temporary fp32 .grad for the step.
  in.fp32_grad_bytes = grad_element_bytes(sc) < 4 ? 4 * in.gpu_params : 0;
  return in;
}

OptimizerStepTasks emit_optimizer_step(RankContext& ctx, OptimizerStepInputs in,
                                       TaskId final_compute, TaskId last_sync) {
  OptimizerStepTasks out;
  out.final_compute = final_compute;
  if (in.gpu_params > 0) {
    OpDesc adam;
    adam.kind = OpKind::OptimizerStepGpu;
    adam.precision = ctx.dims().precision;
    adam.params = in.gpu_params;
    adam.features.main_grad_bytes = model_features(ctx.scenario()).main_grad_bytes;
    fill_work(adam);
    Task t;
    t.op = ctx.add_op(adam);
    t.kind = TaskKind::OptimizerGpu;
    t.stream = StreamId::Compute;
    t.phase = Phase::Optimizer;
    t.part = Part::Params;
    out.gpu_step = ctx.add(t, {{in.fp32_grad_bytes, MemCategory::Gradients},
                               {-in.fp32_grad_bytes, MemCategory::Gradients, true}});
    for (const MemEffect& e : in.buffers_freed) ctx.add_effect(out.gpu_step, e);
    in.buffers_freed.clear();
    ctx.dep(final_compute, out.gpu_step);
    ctx.dep(last_sync, out.gpu_step);
    ctx.dep(in.last_d2h, out.gpu_step);
    ctx.dep(in.last_grad_h2d, out.gpu_step);
    ctx.last_compute = out.gpu_step;
  }
  out.last_h2d = emit_cpu_adam(ctx, in.cpu_params, {final_compute, last_sync, in.last_d2h},
                               in.buffers_freed);
  return out;
}

}  // namespace trainsim::builder
