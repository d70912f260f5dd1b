#include "tests/support/synthetic_graph.h"

#include <string>

#include "models/perf/flops.h"

namespace trainsim::testing {

SyntheticPipeline synthetic_pipeline_graph(const SyntheticPipelineSpec& spec) {
  if (spec.stages < 1 || spec.tp < 1 || spec.layers_per_stage < 1 || spec.gpus_per_node < 1 ||
      spec.gpus_per_node % spec.tp != 0 || spec.heads % spec.tp != 0 || spec.tasks_per_rank < 1)
    throw InputError("synthetic_pipeline_graph: need stages, tp, layers >= 1, tp dividing "
                     "gpus_per_node and heads");
  const std::int64_t L = spec.layers_per_stage;
  const std::int64_t tasks_per_mb = 2 * (4 * L + 2);
  const std::int64_t mbs = std::max<std::int64_t>(1, spec.tasks_per_rank / tasks_per_mb);
  if (mbs > kNoIndex - 1) throw InputError("synthetic_pipeline_graph: more than 65534 microbatches");

  SyntheticPipeline out;
  out.microbatches = mbs;
  const std::int64_t world = spec.stages * spec.tp;
  out.scenario.name = "synthetic-pipeline";
  out.scenario.cluster.system = spec.system;
  out.scenario.cluster.gpus_per_node = spec.gpus_per_node;
  out.scenario.cluster.nodes = (world + spec.gpus_per_node - 1) / spec.gpus_per_node;
  ScheduleGraph& g = out.graph;
  g.world_size = world;
  g.fold_factor = spec.fold ? spec.tp : 1;
  g.layout = ParallelLayout{spec.tp, 1, spec.stages};

  auto layer_op = [&](OpKind kind) {
    OpDesc op;
    op.kind = kind;
    op.micro_batch = spec.micro_batch;
    op.seq = spec.seq;
    op.hidden = spec.hidden;
    op.heads = spec.heads / spec.tp;
    op.head_dim = spec.hidden / spec.heads;
    op.ffn = 4 * spec.hidden / spec.tp;
    op.tp = spec.tp;
    fill_work(op);
    return g.add_op(op);
  };
  const std::uint32_t attn_f = layer_op(OpKind::AttnFwd), mlp_f = layer_op(OpKind::MlpFwd);
  const std::uint32_t attn_b = layer_op(OpKind::AttnBwd), mlp_b = layer_op(OpKind::MlpBwd);
  // Activations b x s x h in fp16: Megatron's all-reduce after attention / MLP and the
  // pipeline message have this size.
  const std::int64_t act_bytes = spec.micro_batch * spec.seq * spec.hidden * 2;
  OpDesc ar;
  ar.kind = OpKind::AllReduce;
  ar.group = GroupKind::Tensor;
  ar.bytes = act_bytes;
  ar.group_size = spec.tp;
  const std::uint32_t ar_op = g.add_op(ar);
  OpDesc p2p;
  p2p.kind = OpKind::SendRecv;
  p2p.group = GroupKind::Pipeline;
  p2p.bytes = act_bytes;
  const std::uint32_t p2p_op = g.add_op(p2p);

  const std::int64_t members = spec.fold ? 1 : spec.tp;
  const std::uint32_t messages_per_dir = std::uint32_t(mbs * world);
  for (std::int64_t s = 0; s < spec.stages; ++s) {
    std::vector<RankId> tp_ranks;
    for (std::int64_t i = 0; i < spec.tp; ++i) tp_ranks.push_back(RankId(s * spec.tp + i));
    const std::uint32_t tp_group = g.add_group(GroupKind::Tensor, tp_ranks);
    for (std::int64_t member = 0; member < members; ++member) {
      const RankId rank = RankId(s * spec.tp + member);
      for (int dir = 0; dir < 2; ++dir) {  // 0 forward, 1 backward
        const bool fwd = dir == 0;
        const Phase phase = fwd ? Phase::Forward : Phase::Backward;
        const std::int64_t from = fwd ? s - 1 : s + 1;  // stage we receive from
        const std::int64_t to = fwd ? s + 1 : s - 1;    // stage we send to
        for (std::int64_t m = 0; m < mbs; ++m) {
          const std::int64_t mb = fwd ? m : mbs - 1 - m;
          TaskId prev = kNone;
          auto add = [&](Task t) {
            t.microbatch = std::uint16_t(mb);
            t.phase = phase;
            const TaskId id = g.add_task(t);
            if (prev != kNone) g.add_dependency(prev, id);
            prev = id;
            return id;
          };
          // Message id: direction, microbatch, sending rank.
          auto message = [&](std::int64_t sender) {
            return std::uint32_t(dir) * messages_per_dir + std::uint32_t(mb * world + sender);
          };
          if (from >= 0 && from < spec.stages) {
            Task t;
            t.op = p2p_op;
            t.rank = rank;
            t.kind = TaskKind::Recv;
            t.stream = StreamId::PpComm;
            t.peer = std::int32_t(from * spec.tp + member);
            t.part = Part::Pipeline;
            t.match = message(t.peer);
            add(t);
          }
          for (std::int64_t l = 0; l < L; ++l) {
            const std::int64_t layer = fwd ? s * L + l : s * L + (L - 1 - l);
            for (int part = 0; part < 2; ++part) {
              const bool attn = fwd ? part == 0 : part == 1;
              Task c;
              c.op = fwd ? (attn ? attn_f : mlp_f) : (attn ? attn_b : mlp_b);
              c.rank = rank;
              c.layer = std::uint16_t(layer);
              c.part = attn ? Part::Attn : Part::Mlp;
              add(c);
              Task a;
              a.op = ar_op;
              a.rank = rank;
              a.kind = TaskKind::Collective;
              a.stream = StreamId::TpComm;
              a.group = tp_group;
              // Same id for every member of the TP group: (stage, dir, mb, layer, part).
              a.match = std::uint32_t((((s * 2 + dir) * mbs + mb) * L + l) * 2 + part);
              a.layer = std::uint16_t(layer);
              a.part = c.part;
              add(a);
            }
          }
          if (to >= 0 && to < spec.stages) {
            Task t;
            t.op = p2p_op;
            t.rank = rank;
            t.kind = TaskKind::Send;
            t.stream = StreamId::PpComm;
            t.peer = std::int32_t(to * spec.tp + member);
            t.part = Part::Pipeline;
            t.match = message(rank);
            add(t);
          }
        }
      }
    }
  }
  // Cross-rank edges Send -> Recv (the data dependency of each message).
  std::vector<TaskId> send_of(2 * std::size_t(messages_per_dir), kNone);
  for (TaskId id = 0; id < g.num_tasks(); ++id)
    if (g.task(id).kind == TaskKind::Send) send_of[g.task(id).match] = id;
  for (TaskId id = 0; id < g.num_tasks(); ++id)
    if (g.task(id).kind == TaskKind::Recv) g.add_dependency(send_of[g.task(id).match], id);
  g.finalize();
  return out;
}

}  // namespace trainsim::testing
