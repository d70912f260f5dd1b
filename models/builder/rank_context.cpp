#include "models/builder/rank_context.h"

#include <algorithm>

#include "models/input/runtime.h"

namespace trainsim::builder {

ModelDims::ModelDims(const Scenario& sc) {
  const ParallelConfig& p = sc.parallel;
  t = p.tensor_model_parallel_size;
  pp = p.pipeline_model_parallel_size;
  cp = p.context_parallel_size;
  dp = p.data_parallel_size * cp;  // gradients reduce over DP x CP
  nmb = p.num_microbatches;
  v = p.virtual_pipeline_size;
  lpc = p.layers_per_chunk;
  b = p.micro_batch_size;
  s = sc.model.seq_length;
  h = sc.model.hidden_size;
  layers = sc.model.num_layers;
  precision = p.precision;
  e = precision_bytes(p.precision);
  sp = p.sequence_parallel && t > 1;
  scatter_gather = p.scatter_gather_tensors_in_pipeline && !sp && t > 1;
  act_bytes = s * b * h * e / cp;  // this rank's s / cp tokens
  const RuntimeSpec& runtime = runtime_spec(sc.runtime);
  fp8_input_gather = sp && runtime.transformer_engine_fp8 && p.fp8 != Fp8Format::None;
  fp8_amax_reduce = fp8_input_gather && p.fp8_recipe == Fp8Recipe::Tensorwise;
  moe = sc.model.is_moe();
  // The decoder's layers, then the multi-token prediction layers' (ModelConfig::moe_layer).
  const std::int64_t all_layers = sc.model.num_layers + sc.model.mtp_num_layers;
  moe_layers.assign(std::size_t(all_layers), false);
  for (std::int64_t l = 0; l < all_layers; ++l) moe_layers[std::size_t(l)] = sc.model.moe_layer(l);
  // The routed experts run no tensor-parallel collectives: the token dispatcher moves the
  // tokens (over the EP group, and the ETP group with expert tensor parallelism).
  moe_block_local = moe && sp && sc.model.moe_shared_expert_intermediate_size == 0;
  tp_overlap = runtime.tp_comm_overlap_userbuffers && p.uses_tp_comm_overlap();
  const ModelConfig& m = sc.model;
  shared_rerun = moe && m.moe_shared_expert_intermediate_size > 0 &&
                 (p.recompute_modules & kRecomputeSharedExperts) != 0;
  mla = m.multi_latent_attention;
  mla_up_rerun = mla && (p.recompute_modules & kRecomputeMlaUpProj) != 0;
  if (mla) {
    const std::int64_t tokens = s * b / cp;
    mla_q_elements = tokens * (m.q_lora_rank > 0 ? m.q_lora_rank : h);
    mla_kv_elements = tokens * m.kv_lora_rank;
    mla_rope_elements = tokens * m.qk_pos_emb_head_dim;
  }
}

std::uint32_t MatchIds::collective(std::uint32_t group, std::uint64_t k) {
  const std::uint64_t key = (std::uint64_t(group) << 32) | k;
  auto it = collective_ids_.find(key);
  if (it != collective_ids_.end()) return it->second;
  const std::uint32_t id = next_++;
  collective_ids_.emplace(key, id);
  return id;
}

std::uint32_t MatchIds::message(std::int64_t src, std::int64_t dst, std::uint64_t k) {
  const std::uint64_t pair = (std::uint64_t(src) << 32) | std::uint64_t(dst);
  auto& ids = message_ids_[pair];
  if (k < ids.size()) return ids[k];
  ids.push_back(next_++);
  return ids.back();
}

GraphBuild::GraphBuild(const Scenario& sc, const CalibrationProfile& calibration)
    : scenario(sc), profile(calibration), dims(sc), layout(sc.parallel.layout()) {}

RankContext::RankContext(GraphBuild& build, const RankCoords& c)
    : coords(c), rank(build.layout.rank_of(c)), build_(build) {
  const ParallelLayout& l = build.layout;
  std::vector<RankId> tp_ranks, dp_ranks;
  for (std::int64_t i = 0; i < l.tp; ++i)
    tp_ranks.push_back(RankId(l.rank_of({i, c.dp_rank, c.pp_stage})));
  for (std::int64_t i = 0; i < l.dp; ++i)
    dp_ranks.push_back(RankId(l.rank_of({c.tp_rank, i, c.pp_stage})));
  tp_group = add_group(GroupKind::Tensor, tp_ranks);
  dp_group = add_group(GroupKind::Data, dp_ranks);
  const std::int64_t cp = build.dims.cp;
  if (cp > 1) {  // data coordinate d * cp + c (ParallelConfig::layout): same d, every c
    std::vector<RankId> cp_ranks;
    for (std::int64_t j = 0; j < cp; ++j)
      cp_ranks.push_back(RankId(l.rank_of({c.tp_rank, c.dp_rank / cp * cp + j, c.pp_stage})));
    cp_group = add_group(GroupKind::Context, cp_ranks);
  }
  // Expert parallelism: Megatron-Core lays the expert ranks of a pipeline stage out as
  // etp -> ep -> edp (parallel_state.py, the expert RankGenerator), so within the stage an EP
  // group is EP ranks ETP apart with the same ETP rank.
  const ParallelConfig& p = build.scenario.parallel;
  const std::int64_t ep = p.expert_model_parallel_size, etp = p.expert_tensor_parallel_size;
  if (build.scenario.model.is_moe() && ep > 1) {
    const std::int64_t per_stage = l.tp * l.dp, base = c.pp_stage * per_stage;
    const std::int64_t r = rank - base;
    std::vector<RankId> ep_ranks;
    for (std::int64_t j = 0; j < ep; ++j)
      ep_ranks.push_back(RankId(base + ((r / (ep * etp)) * ep + j) * etp + r % etp));
    ep_group = add_group(GroupKind::Expert, ep_ranks);
  }
  // Expert tensor parallelism: the ETP group is ETP consecutive expert ranks of the stage
  // (etp is the fastest coordinate of the expert RankGenerator).
  if (build.scenario.model.is_moe() && etp > 1) {
    const std::int64_t per_stage = l.tp * l.dp, base = c.pp_stage * per_stage;
    const std::int64_t r = rank - base;
    std::vector<RankId> etp_ranks;
    for (std::int64_t j = 0; j < etp; ++j) etp_ranks.push_back(RankId(base + r / etp * etp + j));
    etp_group = add_group(GroupKind::Expert, etp_ranks);
  }
}

TaskId RankContext::add(Task t, std::initializer_list<MemEffect> effects) {
  if (build_.count_only) {  // a placeholder id, distinct from kNone and from the others
    if (build_.counted_tasks >= build_.count_limit) throw CountLimitReached{};
    join_next.clear();
    unwaited_sends.clear();
    return TaskId(build_.counted_tasks++ % kNone);
  }
  t.rank = static_cast<RankId>(rank);
  const TaskId id = graph().add_task(t);
  for (const MemEffect& e : effects)
    if (e.bytes != 0) graph().add_memory_effect(id, e);
  if (!join_next.empty() && t.stream != StreamId::DpComm) {
    for (TaskId j : join_next) graph().add_dependency(j, id);
    join_next.clear();
  }
  if (t.stream == StreamId::Compute && !unwaited_sends.empty()) {
    for (TaskId send : unwaited_sends) graph().add_dependency(send, id);
    unwaited_sends.clear();
  }
  return id;
}

ChunkSpan RankContext::chunk_span(std::int64_t chunk) const {
  const ModelDims& d = dims();
  const ParallelConfig& p = scenario().parallel;
  const std::int64_t vstage = chunk * d.pp + coords.pp_stage;
  return {vstage == 0, vstage == d.pp * d.v - 1, p.first_layer_of_virtual_stage(vstage),
          p.layers_of_virtual_stage(vstage)};
}

void RankContext::add_effect(TaskId task, const MemEffect& effect) {
  if (!build_.count_only) graph().add_memory_effect(task, effect);
}

void RankContext::dep(TaskId from, TaskId to) {
  if (from != kNone && !build_.count_only) graph().add_dependency(from, to);
}

void RankContext::host_sync(TaskId task, SyncCause cause) {
  if (task == kNone || build_.count_only || !scenario().host_model) return;
  auto& syncs = graph().host_syncs;
  if (!syncs.empty() && syncs.back().task == task) return;  // one wait covers both reads
  syncs.push_back({task, cause});
}

void RankContext::host_work(TaskId task, double eager_ops, HostWorkCause cause) {
  if (task == kNone || build_.count_only || !scenario().host_model || eager_ops <= 0) return;
  graph().host_work.push_back({task, eager_ops, cause});
}

std::uint32_t RankContext::add_op(const OpDesc& op) {
  return build_.count_only ? 0 : graph().add_op(op);
}

std::uint32_t RankContext::add_group(GroupKind kind, const std::vector<RankId>& ranks) {
  return build_.count_only ? 0 : graph().add_group(kind, ranks);
}

OpDesc RankContext::comm_op(OpKind kind, GroupKind group, std::int64_t bytes,
                            std::int64_t group_size) const {
  OpDesc o;
  o.kind = kind;
  o.precision = dims().precision;
  o.group = group;
  o.bytes = bytes;
  o.group_size = group_size;
  return o;
}

TaskId RankContext::collective(std::uint32_t op, std::uint32_t group, StreamId stream, Phase phase,
                               Part part, std::uint16_t mb, std::uint16_t layer, TaskId after,
                               std::uint16_t bucket, std::initializer_list<MemEffect> effects) {
  Task t;
  t.op = op;
  t.kind = TaskKind::Collective;
  t.stream = stream;
  t.phase = phase;
  t.part = part;
  t.microbatch = mb;
  t.layer = layer;
  t.bucket = bucket;
  t.group = group;
  if (!build_.count_only) t.match = build_.matches.collective(group, collective_seq_[group]++);
  const TaskId id = add(t, effects);
  dep(after, id);
  return id;
}

TaskId RankContext::compute(std::uint32_t op, Phase phase, Part part, std::uint16_t mb,
                            std::uint16_t layer, std::uint8_t chunk, TaskId after,
                            std::initializer_list<MemEffect> effects) {
  Task t;
  t.op = op;
  t.kind = TaskKind::Compute;
  t.stream = StreamId::Compute;
  t.phase = phase;
  t.part = part;
  t.microbatch = mb;
  t.layer = layer;
  t.chunk = chunk;
  const TaskId id = add(t, effects);
  dep(after, id);
  return id;
}

TaskId RankContext::message(std::uint32_t op, TaskKind kind, std::int64_t peer, Phase phase,
                            std::uint16_t mb, std::uint8_t chunk) {
  const std::int64_t src = kind == TaskKind::Send ? rank : peer;
  const std::int64_t dst = kind == TaskKind::Send ? peer : rank;
  Task t;
  t.op = op;
  t.kind = kind;
  t.stream = StreamId::PpComm;
  t.phase = phase;
  t.part = Part::Pipeline;
  t.microbatch = mb;
  t.chunk = chunk;
  t.peer = static_cast<std::int32_t>(peer);
  if (!build_.count_only) {
    t.group = add_group(GroupKind::Pipeline, {RankId(src), RankId(dst)});
    const std::uint64_t pair = (std::uint64_t(src) << 32) | std::uint64_t(dst);
    t.match = build_.matches.message(src, dst, message_seq_[pair]++);
  }
  const TaskId id = add(t);
  dep(last_compute, id);
  return id;
}

}  // namespace trainsim::builder
