#include "models/builder/cuda_graphs.h"

#include <tuple>
#include <vector>

#include "models/errors.h"

namespace trainsim::builder {
namespace {

/// Issued by a data-parallel hook, not by the layer's module (header).
bool hooked(const Task& t) { return t.phase == Phase::GradSync || t.phase == Phase::ParamSync; }

/// The captured part of a layer task under `scope` (kGraph* bits; 0: the whole layer):
/// 0 not captured, 1 the whole layer, 2 its attention block, 3 its MLP block, 4 the router
/// part of its MLP task.
int captured_part(const Task& t, const Scenario& sc) {
  if (t.layer == kNoIndex || hooked(t) || t.phase == Phase::Optimizer || t.phase == Phase::Offload)
    return 0;
  if (t.part != Part::Attn && t.part != Part::Mlp) return 0;
  const std::uint8_t scope = sc.parallel.cuda_graph_scope;
  if (scope == 0) return 1;
  if (t.part == Part::Attn) return (scope & kGraphAttn) ? 2 : 0;
  const bool moe = sc.model.moe_layer(t.layer);
  if ((!moe && (scope & kGraphMlp)) || (moe && (scope & kGraphMoe))) return 3;
  if (moe && (scope & kGraphMoeRouter) && t.kind == TaskKind::Compute) return 4;
  return 0;
}

/// Per-layer regions of one rank's program: consecutive captured tasks of one (phase,
/// microbatch, layer, chunk, part), hooked tasks between them left out.
void layer_regions(ScheduleGraph& g, const Scenario& sc, const std::vector<TaskId>& tasks) {
  using Key = std::tuple<Phase, std::uint16_t, std::uint16_t, std::uint8_t, int>;
  const GraphCapture partial = (sc.parallel.cuda_graph_scope & kGraphMoePreprocess)
                                   ? GraphCapture::RouterPreprocess
                                   : GraphCapture::Router;
  bool open = false;
  Key key{};
  for (TaskId id : tasks) {
    const Task& t = g.task(id);
    if (hooked(t)) continue;
    const int part = captured_part(t, sc);
    if (part == 0) {
      open = false;
      continue;
    }
    const Key k{t.phase, t.microbatch, t.layer, t.chunk, part};
    if (!open || k != key || part == 4) {
      g.cuda_graphs.push_back({id, id, part == 4 ? partial : GraphCapture::Whole});
      open = true;
      key = k;
    }
    g.cuda_graphs.back().last = id;
    g.cuda_graph_of_task[id] = std::uint32_t(g.cuda_graphs.size() - 1);
  }
}

/// full_iteration: the rank's tasks before its first optimizer task.
void iteration_region(ScheduleGraph& g, const std::vector<TaskId>& tasks) {
  bool open = false;
  for (TaskId id : tasks) {
    if (g.task(id).phase == Phase::Optimizer) break;
    if (!open) g.cuda_graphs.push_back({id, id, GraphCapture::Whole});
    open = true;
    g.cuda_graphs.back().last = id;
    g.cuda_graph_of_task[id] = std::uint32_t(g.cuda_graphs.size() - 1);
  }
}

}  // namespace

void add_cuda_graph_regions(ScheduleGraph& g, const Scenario& scenario) {
  if (scenario.parallel.cuda_graph_impl == CudaGraphImpl::None) return;
  g.cuda_graph_of_task.assign(g.num_tasks(), kNone);
  for (RankId r : g.simulated_ranks()) {
    const std::vector<TaskId> tasks = g.tasks_of_rank(r);
    if (scenario.parallel.cuda_graph_scope & kGraphFullIteration)
      iteration_region(g, tasks);
    else
      layer_regions(g, scenario, tasks);
  }
  // The host cannot wait inside a graph: a synchronisation point on a region's task waits for
  // the region's end. A partial capture (the router) leaves its task's other kernels eager,
  // so a sync there keeps its task.
  for (HostSync& s : g.host_syncs) {
    const std::uint32_t r = g.cuda_graph_of_task[s.task];
    if (r == kNone || g.cuda_graphs[r].capture != GraphCapture::Whole) continue;
    TRAINSIM_CHECK(s.cause != SyncCause::MoeTokenCounts || g.cuda_graphs[r].last == s.task ||
                       g.task(s.task).part == Part::Attn,
                   "add_cuda_graph_regions: a token-count sync inside a captured MoE block");
    s.task = g.cuda_graphs[r].last;
  }
}

}  // namespace trainsim::builder
