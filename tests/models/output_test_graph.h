// A small schedule graph and execution record built by hand, shared by the summary and trace
// writer tests. Every expected number in those tests is derived from the timeline drawn here.
//
// Two ranks (pipeline stages 0 and 1 of a TP 1 x PP 2 x DP 1 plan on one node of 2 GPUs),
// iteration window [0, 11] s:
//
// rank 0                                      rank 1
//  T0 compute fwd    [0, 2]  +100 act @start   U0 recv fwd (m0)   [0, 3]  (send T1 starts 2)
//  T1 send fwd (m0)  [2, 3]  pp, 1000 B        U1 compute fwd     [3, 4.5] +300 act @s, -300 @e
//  T2 allreduce tp   [1, 2.5] group {0}        U2 compute bwd     [4.5, 5] +200 act @s, -200 @e
//  T3 recv bwd (m1)  [3, 6]  (send U3 at 5)    U3 send bwd (m1)   [5, 6]  -50 comm @start
//  T4 compute bwd    [6, 8]  -100 act @end     U4 copy d2h        [5, 7]  +400 offload @start,
//  T5 adam gpu       [8, 9]                                                -400 @end, +400 host @end
//  T6 allreduce dp   [9, 10] (m9, {0,1})       U5 adam cpu        [7, 9.5]
//                                              U6 allreduce dp    [9.5, 10] (m9)
//                                              U7 copy h2d        [10, 11]
// Initial GPU memory: rank 0 parameters 1000, gradients 500; rank 1 parameters 2000,
// comm buffers 50. Initial host memory: rank 1 optimizer states 10000.
// FLOPs: T0 10, T4 20, U1 5, U2 7 (42 in all).
#pragma once

#include <vector>

#include "models/graph/execution_record.h"
#include "models/hardware/hardware.h"
#include "models/input/scenario.h"
#include "models/graph/schedule_graph.h"

namespace trainsim::testing {

inline Scenario two_stage_scenario() {
  Scenario sc;
  sc.name = "hand-built";
  sc.model.num_layers = 2;
  sc.model.hidden_size = 64;
  sc.model.num_attention_heads = 4;
  sc.model.seq_length = 32;
  sc.model.padded_vocab_size = 128;
  sc.model.ffn_hidden_size = 256;
  sc.model.kv_channels = 16;
  sc.parallel.tensor_model_parallel_size = 1;
  sc.parallel.pipeline_model_parallel_size = 2;
  sc.parallel.micro_batch_size = 1;
  sc.parallel.global_batch_size = 2;
  sc.parallel.data_parallel_size = 1;
  sc.parallel.num_microbatches = 2;
  sc.cluster.system = "dgx-a100-80gb";
  sc.cluster.nodes = 1;
  sc.cluster.gpus_per_node = 2;
  return sc;
}

struct HandBuilt {
  ScheduleGraph graph;
  ExecutionRecord record;
};

inline HandBuilt two_stage_run() {
  HandBuilt hb;
  ScheduleGraph& g = hb.graph;
  auto compute = [&](double flops) {
    OpDesc o;
    o.kind = OpKind::AttnFwd;
    o.flops = flops;
    o.bytes_accessed = 64;
    return g.add_op(o);
  };
  auto comm = [&](OpKind kind, GroupKind group, std::int64_t bytes, std::int64_t group_size) {
    OpDesc o;
    o.kind = kind;
    o.group = group;
    o.bytes = bytes;
    o.group_size = group_size;
    return g.add_op(o);
  };
  OpDesc adam;
  adam.kind = OpKind::OptimizerStepGpu;
  const auto adam_gpu = g.add_op(adam);
  adam.kind = OpKind::OptimizerStepCpu;
  const auto adam_cpu = g.add_op(adam);
  const auto p2p = comm(OpKind::SendRecv, GroupKind::Pipeline, 1000, 2);
  const auto ar_tp = comm(OpKind::AllReduce, GroupKind::Tensor, 4000, 1);
  const auto ar_dp = comm(OpKind::AllReduce, GroupKind::Data, 8000, 2);
  const auto d2h = comm(OpKind::CopyD2H, GroupKind::None, 2000, 1);
  const auto h2d = comm(OpKind::CopyH2D, GroupKind::None, 3000, 1);
  const auto tp_group = g.add_group(GroupKind::Tensor, {0});
  const auto dp_group = g.add_group(GroupKind::Data, {0, 1});
  const auto pp_group = g.add_group(GroupKind::Pipeline, {0, 1});

  std::vector<double> start, end;
  auto task = [&](RankId rank, std::uint32_t op, TaskKind kind, StreamId stream, Phase phase,
                  double s, double e) {
    Task t;
    t.op = op;
    t.rank = rank;
    t.kind = kind;
    t.stream = stream;
    t.phase = phase;
    t.microbatch = 0;
    const TaskId id = g.add_task(t);
    start.push_back(s);
    end.push_back(e);
    return id;
  };
  auto message = [&](RankId rank, TaskKind kind, int peer, std::uint32_t match, Phase phase,
                     double s, double e) {
    Task t;
    t.op = p2p;
    t.rank = rank;
    t.kind = kind;
    t.stream = StreamId::PpComm;
    t.phase = phase;
    t.peer = peer;
    t.match = match;
    t.group = pp_group;
    t.part = Part::Pipeline;
    t.microbatch = static_cast<std::uint16_t>(match);
    const TaskId id = g.add_task(t);
    start.push_back(s);
    end.push_back(e);
    return id;
  };
  auto collective = [&](RankId rank, std::uint32_t op, std::uint32_t group, StreamId stream,
                        std::uint32_t match, double s, double e) {
    Task t;
    t.op = op;
    t.rank = rank;
    t.kind = TaskKind::Collective;
    t.stream = stream;
    t.phase = Phase::GradSync;
    t.group = group;
    t.match = match;
    const TaskId id = g.add_task(t);
    start.push_back(s);
    end.push_back(e);
    return id;
  };
  auto mem = [&](TaskId id, std::int64_t bytes, MemCategory c, bool at_end, bool host = false) {
    g.add_memory_effect(id, MemEffect{bytes, c, at_end, host});
  };

  // rank 0
  TaskId t = task(0, compute(10), TaskKind::Compute, StreamId::Compute, Phase::Forward, 0, 2);
  mem(t, 100, MemCategory::Activations, false);
  message(0, TaskKind::Send, 1, 0, Phase::Forward, 2, 3);                      // T1
  collective(0, ar_tp, tp_group, StreamId::TpComm, 5, 1, 2.5);                   // T2
  message(0, TaskKind::Recv, 1, 1, Phase::Backward, 3, 6);                     // T3
  t = task(0, compute(20), TaskKind::Compute, StreamId::Compute, Phase::Backward, 6, 8);  // T4
  mem(t, -100, MemCategory::Activations, true);
  task(0, adam_gpu, TaskKind::OptimizerGpu, StreamId::Compute, Phase::Optimizer, 8, 9);  // T5
  collective(0, ar_dp, dp_group, StreamId::DpComm, 9, 9, 10);                    // T6
  // rank 1
  message(1, TaskKind::Recv, 0, 0, Phase::Forward, 0, 3);                      // U0
  t = task(1, compute(5), TaskKind::Compute, StreamId::Compute, Phase::Forward, 3, 4.5);  // U1
  mem(t, 300, MemCategory::Activations, false);
  mem(t, -300, MemCategory::Activations, true);
  t = task(1, compute(7), TaskKind::Compute, StreamId::Compute, Phase::Backward, 4.5, 5);  // U2
  mem(t, 200, MemCategory::Activations, false);
  mem(t, -200, MemCategory::Activations, true);
  t = message(1, TaskKind::Send, 0, 1, Phase::Backward, 5, 6);                 // U3
  mem(t, -50, MemCategory::CommBuffers, false);
  t = task(1, d2h, TaskKind::CopyD2H, StreamId::D2H, Phase::Offload, 5, 7);     // U4
  mem(t, 400, MemCategory::OffloadBuffers, false);
  mem(t, -400, MemCategory::OffloadBuffers, true);
  mem(t, 400, MemCategory::OffloadBuffers, true, /*host=*/true);
  task(1, adam_cpu, TaskKind::OptimizerCpu, StreamId::Cpu, Phase::Optimizer, 7, 9.5);  // U5
  collective(1, ar_dp, dp_group, StreamId::DpComm, 9, 9.5, 10);                  // U6
  task(1, h2d, TaskKind::CopyH2D, StreamId::H2D, Phase::ParamSync, 10, 11);     // U7

  g.world_size = 2;
  g.fold_factor = 1;
  MemVector m0{}, m1{}, host1{};
  m0[static_cast<int>(MemCategory::Parameters)] = 1000;
  m0[static_cast<int>(MemCategory::Gradients)] = 500;
  m1[static_cast<int>(MemCategory::Parameters)] = 2000;
  m1[static_cast<int>(MemCategory::CommBuffers)] = 50;
  host1[static_cast<int>(MemCategory::OptimizerStates)] = 10000;
  g.initial_gpu_memory = {m0, m1};
  g.initial_host_memory = {MemVector{}, host1};
  g.finalize();
  hb.record.start_s = start;
  hb.record.end_s = end;
  hb.record.executor = "hand-made";
  hb.record.device = "test";
  hb.record.wall_time_s = 0.25;
  return hb;
}

/// A folded graph: TP 2 x PP 2 x DP 1 on one node of 4 GPUs, representatives 0 and 2, each
/// standing for 2 ranks. Rank 0: one forward [0, 1] (flops 100, +64 act at start, initial
/// parameters 1000, host optimizer states 7); rank 2: one forward [1, 3] (flops 50, +32 act at
/// start, initial parameters 900, host optimizer states 5).
inline Scenario folded_scenario() {
  Scenario sc = two_stage_scenario();
  sc.parallel.tensor_model_parallel_size = 2;
  sc.cluster.gpus_per_node = 4;
  return sc;
}

inline HandBuilt folded_run() {
  HandBuilt hb;
  ScheduleGraph& g = hb.graph;
  OpDesc a;
  a.kind = OpKind::AttnFwd;
  a.flops = 100;
  const auto op0 = g.add_op(a);
  a.flops = 50;
  const auto op1 = g.add_op(a);
  Task t;
  t.op = op0;
  t.rank = 0;
  TaskId id = g.add_task(t);
  g.add_memory_effect(id, MemEffect{64, MemCategory::Activations, false, false});
  t.op = op1;
  t.rank = 2;
  id = g.add_task(t);
  g.add_memory_effect(id, MemEffect{32, MemCategory::Activations, false, false});
  g.world_size = 4;
  g.fold_factor = 2;
  g.layout = ParallelLayout{2, 1, 2};
  MemVector p0{}, p2{}, h0{}, h2{};
  p0[static_cast<int>(MemCategory::Parameters)] = 1000;
  p2[static_cast<int>(MemCategory::Parameters)] = 900;
  h0[static_cast<int>(MemCategory::OptimizerStates)] = 7;
  h2[static_cast<int>(MemCategory::OptimizerStates)] = 5;
  g.initial_gpu_memory = {p0, p2};
  g.initial_host_memory = {h0, h2};
  g.finalize();
  hb.record.start_s = {0, 1};
  hb.record.end_s = {1, 3};
  hb.record.executor = "hand-made";
  return hb;
}

}  // namespace trainsim::testing
