// Schedule builder for Megatron-LM PTD-P (Narayanan et al. SC'21) with DeepSpeed ZeRO stages.
//
// Per rank, the program follows megatron/core/pipeline_parallel/schedules.py: the pipeline
// order (models/pipeline_schedule.h) of forward and backward steps; within a step, per layer
// the blocks of a ParallelTransformerLayer with their tensor-parallel collectives (Megatron-LM
// Sec. 3.2 / Shoeybi et al. 2019 Fig. 3: f/g operators = one all-reduce after the attention and
// one after the MLP forward, two in backward; with sequence parallelism (Korthikanti et al.
// 2022 Sec. 4.2.2) all-gather before and reduce-scatter after each block); pipeline messages
// between stages (with the scatter/gather optimization of SC'21 Sec. 4.1: each TP rank sends
// 1/t of the activation over its own NIC, the receiver all-gathers over NVLink); the embedding
// (first stage) and logits + loss (last stage); then the data-parallel gradient all-reduce in
// buckets (Megatron DDP, overlapped with backward only with --overlap-grad-reduce), the tied
// embedding-gradient all-reduce between first and last stage, and the optimizer step.
#include "models/graph_builder.h"

#include <algorithm>
#include <map>
#include <stdexcept>
#include <unordered_map>

#include "models/flops.h"
#include "models/memory_model.h"
#include "models/pipeline_schedule.h"

namespace trainsim {

RankCoords rank_coords(const ParallelConfig& p, std::int64_t rank) {
  const std::int64_t t = p.tensor_model_parallel_size, d = p.data_parallel_size;
  return RankCoords{rank % t, (rank / t) % d, rank / (t * d)};
}

std::int64_t rank_of(const ParallelConfig& p, const RankCoords& c) {
  const std::int64_t t = p.tensor_model_parallel_size, d = p.data_parallel_size;
  return c.pp_stage * (d * t) + c.dp_rank * t + c.tp_rank;
}

namespace {

/// Rough task count of the unfolded graph (per layer and microbatch up to 12 tasks).
double estimated_tasks(const Scenario& sc) {
  const auto& p = sc.parallel;
  const double layers_per_stage = double(sc.model.num_layers) / p.pipeline_model_parallel_size;
  return double(sc.world_size()) * p.num_microbatches * layers_per_stage * 12.0;
}

constexpr std::int64_t kFoldAutoTasks = 2'000'000;

class Builder {
 public:
  Builder(const Scenario& sc, const SystemSpec& /*system*/, const BuildOptions& opt)
      : sc_(sc), opt_(opt), p_(sc.parallel), m_(sc.model) {
    t_ = p_.tensor_model_parallel_size;
    pp_ = p_.pipeline_model_parallel_size;
    dp_ = p_.data_parallel_size;
    nmb_ = p_.num_microbatches;
    v_ = p_.virtual_pipeline_size;
    lpc_ = p_.layers_per_chunk;
    b_ = p_.micro_batch_size;
    s_ = m_.seq_length;
    h_ = m_.hidden_size;
    sp_ = p_.sequence_parallel && t_ > 1;
    scatter_gather_ = p_.scatter_gather_tensors_in_pipeline && !sp_ && t_ > 1;
    act_bytes_ = s_ * b_ * h_ * precision_bytes(p_.precision);
    if (nmb_ > 0xFFFE || m_.num_layers > 0xFFFE)
      throw InputError(sc.source_path + ": more than 65534 microbatches or layers per iteration "
                       "is not supported (parallel.global_batch_size / micro_batch_size)");
    make_ops();
  }

  ScheduleGraph build() {
    g_.world_size = sc_.world_size();
    g_.fold_factor = opt_.fold ? t_ * dp_ : 1;
    for (std::int64_t stage = 0; stage < pp_; ++stage)
      for (std::int64_t d = 0; d < (opt_.fold ? 1 : dp_); ++d)
        for (std::int64_t tr = 0; tr < (opt_.fold ? 1 : t_); ++tr)
          build_rank(RankCoords{tr, d, stage});
    g_.finalize();
    // finalize() sorts the simulated ranks; initial memory was recorded per rank.
    g_.initial_gpu_memory.assign(g_.simulated_ranks().size(), MemVector{});
    g_.initial_host_memory.assign(g_.simulated_ranks().size(), MemVector{});
    for (const auto& [rank, mem] : initial_gpu_)
      g_.initial_gpu_memory[g_.rank_index(static_cast<RankId>(rank))] = mem;
    for (const auto& [rank, mem] : initial_host_)
      g_.initial_host_memory[g_.rank_index(static_cast<RankId>(rank))] = mem;
    return std::move(g_);
  }

 private:
  // ---------------------------------------------------------------- op descriptors
  OpDesc compute_op(OpKind kind) const {
    OpDesc o;
    o.kind = kind;
    o.precision = p_.precision;
    o.micro_batch = b_;
    o.seq = s_;
    o.hidden = h_;
    o.heads = m_.num_attention_heads / t_;
    o.head_dim = m_.kv_channels;
    o.ffn = m_.ffn_hidden_size / t_;
    o.vocab = m_.padded_vocab_size / t_;
    o.tp = t_;
    o.sequence_parallel = sp_;
    o.recompute_core_attention =
        kind == OpKind::AttnBwd && p_.recompute_granularity == Recompute::Selective;
    fill_work(o);
    return o;
  }
  OpDesc comm_op(OpKind kind, GroupKind group, std::int64_t bytes, std::int64_t group_size) const {
    OpDesc o;
    o.kind = kind;
    o.precision = p_.precision;
    o.group = group;
    o.bytes = bytes;
    o.group_size = group_size;
    return o;
  }

  void make_ops() {
    op_attn_fwd_ = g_.add_op(compute_op(OpKind::AttnFwd));
    op_mlp_fwd_ = g_.add_op(compute_op(OpKind::MlpFwd));
    op_attn_bwd_ = g_.add_op(compute_op(OpKind::AttnBwd));
    op_mlp_bwd_ = g_.add_op(compute_op(OpKind::MlpBwd));
    op_embed_fwd_ = g_.add_op(compute_op(OpKind::EmbedFwd));
    op_embed_bwd_ = g_.add_op(compute_op(OpKind::EmbedBwd));
    op_logits_fwd_ = g_.add_op(compute_op(OpKind::LogitsLossFwd));
    op_logits_bwd_ = g_.add_op(compute_op(OpKind::LogitsLossBwd));
    // Tensor-parallel collectives on the full activation (b s h elements).
    op_tp_ar_ = g_.add_op(comm_op(OpKind::AllReduce, GroupKind::Tensor, act_bytes_, t_));
    op_tp_ag_ = g_.add_op(comm_op(OpKind::AllGather, GroupKind::Tensor, act_bytes_, t_));
    op_tp_rs_ = g_.add_op(comm_op(OpKind::ReduceScatter, GroupKind::Tensor, act_bytes_, t_));
    // Vocab-parallel cross entropy (Megatron tensor_parallel/cross_entropy.py): all-reduces of
    // the per-token max, sum of exponentials and target logit, fp32, b*s elements each.
    op_ce_ar_ = g_.add_op(comm_op(OpKind::AllReduce, GroupKind::Tensor, 3 * b_ * s_ * 4, t_));
    // Pipeline message: the full activation, or 1/t of it with scatter/gather or SP.
    const std::int64_t msg = (scatter_gather_ || sp_) ? act_bytes_ / t_ : act_bytes_;
    op_p2p_ = g_.add_op(comm_op(OpKind::SendRecv, GroupKind::Pipeline, msg, 2));
  }

  // ---------------------------------------------------------------- task helpers
  TaskId add(Task t, std::initializer_list<MemEffect> effects = {}) {
    t.rank = static_cast<RankId>(rank_);
    const TaskId id = g_.add_task(t);
    for (const MemEffect& e : effects)
      if (e.bytes != 0) g_.add_memory_effect(id, e);
    return id;
  }
  void dep(TaskId from, TaskId to) {
    if (from != kNone) g_.add_dependency(from, to);
  }

  std::uint32_t group_id(GroupKind kind, const std::vector<RankId>& ranks) {
    return g_.add_group(kind, ranks);
  }
  /// Instance id of the k-th collective a rank issues on a group (same on every member).
  std::uint32_t collective_match(std::uint32_t group) {
    const std::uint64_t k = coll_seq_[group]++;
    const std::uint64_t key = (std::uint64_t(group) << 32) | k;
    auto it = match_ids_.find(key);
    if (it != match_ids_.end()) return it->second;
    const std::uint32_t id = next_match_++;
    match_ids_.emplace(key, id);
    return id;
  }
  std::uint32_t message_match(std::int64_t src, std::int64_t dst) {
    const std::uint64_t pair = (std::uint64_t(src) << 32) | std::uint64_t(dst);
    const std::uint64_t k = msg_seq_[pair]++;
    auto& ids = message_ids_[pair];
    if (k < ids.size()) return ids[k];
    ids.push_back(next_match_++);
    return ids.back();
  }

  /// This rank's part of a collective on `group`, depending on `after`, on the compute path
  /// (Megatron's TP collectives are synchronous with compute) or on another stream.
  TaskId collective(std::uint32_t op, std::uint32_t group, StreamId stream, Phase phase, Part part,
                    std::uint16_t mb, std::uint16_t layer, TaskId after,
                    std::uint16_t bucket = 0xFFFF) {
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
    t.match = collective_match(group);
    const TaskId id = add(t);
    dep(after, id);
    return id;
  }

  TaskId compute(std::uint32_t op, Phase phase, Part part, std::uint16_t mb, std::uint16_t layer,
                 std::uint8_t chunk, TaskId after, std::initializer_list<MemEffect> effects = {}) {
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

  // ---------------------------------------------------------------- one rank's program
  void build_rank(const RankCoords& c) {
    rank_ = rank_of(p_, c);
    coords_ = c;
    last_compute_ = kNone;
    coll_seq_.clear();  // sequence numbers count this rank's own collectives and messages
    msg_seq_.clear();
    // Groups (ring order).
    std::vector<RankId> tp_ranks, dp_ranks;
    for (std::int64_t i = 0; i < t_; ++i)
      tp_ranks.push_back(RankId(rank_of(p_, {i, c.dp_rank, c.pp_stage})));
    for (std::int64_t i = 0; i < dp_; ++i)
      dp_ranks.push_back(RankId(rank_of(p_, {c.tp_rank, i, c.pp_stage})));
    tp_group_ = group_id(GroupKind::Tensor, tp_ranks);
    dp_group_ = group_id(GroupKind::Data, dp_ranks);

    const auto layer_act = layer_activation_bytes(sc_);
    const auto layer_full = layer_activation_bytes_no_recompute(sc_);
    const bool full_recompute = p_.recompute_granularity == Recompute::Full;
    const std::int64_t sp_div = sp_ ? t_ : 1;

    // Last backward task of each local layer (for overlapped gradient buckets).
    std::map<std::int64_t, TaskId> last_bwd_of_layer;
    TaskId embed_bwd_last = kNone, logits_bwd_last = kNone;

    const auto order = pipeline_order(p_.pipeline_schedule, int(pp_), int(c.pp_stage), int(nmb_),
                                      int(v_));
    for (const PipelineStep& step : order) {
      const auto mb = static_cast<std::uint16_t>(step.microbatch);
      const auto chunk = static_cast<std::uint8_t>(step.chunk);
      const std::int64_t vstage = step.chunk * pp_ + c.pp_stage;  // virtual stage index
      const bool first_vstage = vstage == 0;
      const bool last_vstage = vstage == pp_ * v_ - 1;
      const std::int64_t first_layer = vstage * lpc_;
      if (step.forward) {
        // ---- input
        if (first_vstage) {
          last_compute_ = compute(op_embed_fwd_, Phase::Forward, Part::Embedding, mb, 0xFFFF,
                                  chunk, last_compute_,
                                  {{s_ * b_ * h_ / sp_div, MemCategory::Activations}});
        } else {
          receive(prev_rank(c, step.chunk), Phase::Forward, mb, chunk);
        }
        // ---- layers
        for (std::int64_t l = first_layer; l < first_layer + lpc_; ++l) {
          const auto layer = static_cast<std::uint16_t>(l);
          if (full_recompute) {
            layer_forward(Phase::Forward, mb, layer, chunk,
                          {{layer_act.attn, MemCategory::Activations},
                           {layer_full.attn, MemCategory::Activations},
                           {-layer_full.attn, MemCategory::Activations, true}},
                          {{layer_full.mlp, MemCategory::Activations},
                           {-layer_full.mlp, MemCategory::Activations, true}});
          } else {
            layer_forward(Phase::Forward, mb, layer, chunk,
                          {{layer_act.attn, MemCategory::Activations}},
                          {{layer_act.mlp, MemCategory::Activations}});
          }
        }
        // ---- output
        if (last_vstage) {
          // Final LayerNorm input (2sbh) and fp32 logits for the loss (4 s b V / t),
          // Korthikanti et al. Sec. 4.3.
          const std::int64_t logits_bytes = 2 * s_ * b_ * h_ / sp_div +
                                            4 * s_ * b_ * (m_.padded_vocab_size / t_);
          if (sp_)  // the sequence-parallel final LayerNorm output is gathered for the logits
            last_compute_ = tp_collective(op_tp_ag_, Phase::Forward, Part::Logits, mb, 0xFFFF);
          last_compute_ = compute(op_logits_fwd_, Phase::Forward, Part::Logits, mb, 0xFFFF, chunk,
                                  last_compute_, {{logits_bytes, MemCategory::Activations}});
          if (t_ > 1)
            last_compute_ = collective(op_ce_ar_, tp_group_, StreamId::TpComm, Phase::Forward,
                                       Part::Logits, mb, 0xFFFF, last_compute_);
        } else {
          send(next_rank(c, step.chunk), Phase::Forward, mb, chunk);
        }
      } else {
        // ---- backward input
        if (last_vstage) {
          const std::int64_t logits_bytes = 2 * s_ * b_ * h_ / sp_div +
                                            4 * s_ * b_ * (m_.padded_vocab_size / t_);
          last_compute_ = compute(op_logits_bwd_, Phase::Backward, Part::Logits, mb, 0xFFFF, chunk,
                                  last_compute_,
                                  {{-logits_bytes, MemCategory::Activations, true}});
          logits_bwd_last = last_compute_;
          if (t_ > 1)  // input gradient of the vocab-parallel output layer
            last_compute_ = collective(sp_ ? op_tp_rs_ : op_tp_ar_, tp_group_, StreamId::TpComm,
                                       Phase::Backward, Part::Logits, mb, 0xFFFF, last_compute_);
        } else {
          receive(next_rank(c, step.chunk), Phase::Backward, mb, chunk);
        }
        // ---- layers, last first
        for (std::int64_t l = first_layer + lpc_ - 1; l >= first_layer; --l) {
          const auto layer = static_cast<std::uint16_t>(l);
          if (full_recompute) {
            // Megatron's per-layer checkpoint: recompute the layer's forward, then its backward.
            layer_forward(Phase::Recompute, mb, layer, chunk,
                          {{layer_full.attn, MemCategory::Activations}},
                          {{layer_full.mlp, MemCategory::Activations}});
            layer_backward(mb, layer, chunk,
                           {{-layer_full.mlp, MemCategory::Activations, true}},
                           {{-(layer_full.attn + layer_act.attn), MemCategory::Activations, true}});
          } else {
            layer_backward(mb, layer, chunk, {{-layer_act.mlp, MemCategory::Activations, true}},
                           {{-layer_act.attn, MemCategory::Activations, true}});
          }
          last_bwd_of_layer[l] = last_compute_;
        }
        // ---- backward output
        if (first_vstage) {
          last_compute_ = compute(op_embed_bwd_, Phase::Backward, Part::Embedding, mb, 0xFFFF, chunk,
                                  last_compute_,
                                  {{-(s_ * b_ * h_ / sp_div), MemCategory::Activations, true}});
          embed_bwd_last = last_compute_;
        } else {
          send(prev_rank(c, step.chunk), Phase::Backward, mb, chunk);
        }
      }
    }

    gradient_sync_and_step(c, last_bwd_of_layer, embed_bwd_last, logits_bwd_last);
  }

  /// Attention block, its TP collective(s), MLP block, its TP collective(s).
  void layer_forward(Phase phase, std::uint16_t mb, std::uint16_t layer, std::uint8_t chunk,
                     std::initializer_list<MemEffect> attn_mem,
                     std::initializer_list<MemEffect> mlp_mem) {
    if (sp_) last_compute_ = tp_collective(op_tp_ag_, phase, Part::Attn, mb, layer);
    last_compute_ = compute(op_attn_fwd_, phase, Part::Attn, mb, layer, chunk, last_compute_, attn_mem);
    if (t_ > 1) last_compute_ = tp_collective(sp_ ? op_tp_rs_ : op_tp_ar_, phase, Part::Attn, mb, layer);
    if (sp_) last_compute_ = tp_collective(op_tp_ag_, phase, Part::Mlp, mb, layer);
    last_compute_ = compute(op_mlp_fwd_, phase, Part::Mlp, mb, layer, chunk, last_compute_, mlp_mem);
    if (t_ > 1) last_compute_ = tp_collective(sp_ ? op_tp_rs_ : op_tp_ar_, phase, Part::Mlp, mb, layer);
  }

  /// MLP backward, its TP collective(s), attention backward, its TP collective(s).
  void layer_backward(std::uint16_t mb, std::uint16_t layer, std::uint8_t chunk,
                      std::initializer_list<MemEffect> mlp_mem,
                      std::initializer_list<MemEffect> attn_mem) {
    if (sp_) last_compute_ = tp_collective(op_tp_ag_, Phase::Backward, Part::Mlp, mb, layer);
    last_compute_ = compute(op_mlp_bwd_, Phase::Backward, Part::Mlp, mb, layer, chunk, last_compute_, mlp_mem);
    if (t_ > 1)
      last_compute_ = tp_collective(sp_ ? op_tp_rs_ : op_tp_ar_, Phase::Backward, Part::Mlp, mb, layer);
    if (sp_) last_compute_ = tp_collective(op_tp_ag_, Phase::Backward, Part::Attn, mb, layer);
    last_compute_ = compute(op_attn_bwd_, Phase::Backward, Part::Attn, mb, layer, chunk, last_compute_, attn_mem);
    if (t_ > 1)
      last_compute_ = tp_collective(sp_ ? op_tp_rs_ : op_tp_ar_, Phase::Backward, Part::Attn, mb, layer);
  }

  TaskId tp_collective(std::uint32_t op, Phase phase, Part part, std::uint16_t mb, std::uint16_t layer) {
    return collective(op, tp_group_, StreamId::TpComm, phase, part, mb, layer, last_compute_);
  }

  // ---------------------------------------------------------------- pipeline messages
  /// Rank holding the previous virtual stage of `chunk` (same TP and DP coordinates).
  std::int64_t prev_rank(const RankCoords& c, int chunk) const {
    if (c.pp_stage > 0) return rank_of(p_, {c.tp_rank, c.dp_rank, c.pp_stage - 1});
    (void)chunk;  // stage 0, chunk k > 0: previous virtual stage is chunk k-1 on the last stage
    return rank_of(p_, {c.tp_rank, c.dp_rank, pp_ - 1});
  }
  std::int64_t next_rank(const RankCoords& c, int chunk) const {
    (void)chunk;
    if (c.pp_stage < pp_ - 1) return rank_of(p_, {c.tp_rank, c.dp_rank, c.pp_stage + 1});
    return rank_of(p_, {c.tp_rank, c.dp_rank, 0});
  }

  void send(std::int64_t to, Phase phase, std::uint16_t mb, std::uint8_t chunk) {
    Task t;
    t.op = op_p2p_;
    t.kind = TaskKind::Send;
    t.stream = StreamId::PpComm;
    t.phase = phase;
    t.part = Part::Pipeline;
    t.microbatch = mb;
    t.chunk = chunk;
    t.peer = static_cast<std::int32_t>(to);
    t.group = group_id(GroupKind::Pipeline, {RankId(rank_), RankId(to)});
    t.match = message_match(rank_, to);
    const TaskId id = add(t);
    dep(last_compute_, id);
  }

  void receive(std::int64_t from, Phase phase, std::uint16_t mb, std::uint8_t chunk) {
    Task t;
    t.op = op_p2p_;
    t.kind = TaskKind::Recv;
    t.stream = StreamId::PpComm;
    t.phase = phase;
    t.part = Part::Pipeline;
    t.microbatch = mb;
    t.chunk = chunk;
    t.peer = static_cast<std::int32_t>(from);
    t.group = group_id(GroupKind::Pipeline, {RankId(from), RankId(rank_)});
    t.match = message_match(from, rank_);
    const TaskId id = add(t);
    // Megatron issues the receive after the preceding compute (synchronous p2p calls).
    dep(last_compute_, id);
    last_compute_ = id;
    if (scatter_gather_)  // gather_split_1d_tensor: all-gather of the t slices over NVLink
      last_compute_ = collective(op_tp_ag_, tp_group_, StreamId::TpComm, phase, Part::Pipeline, mb,
                                 0xFFFF, last_compute_);
  }

  // ---------------------------------------------------------------- gradients and optimizer
  void gradient_sync_and_step(const RankCoords& c, const std::map<std::int64_t, TaskId>& last_bwd,
                              TaskId embed_bwd_last, TaskId logits_bwd_last) {
    const std::int64_t params = params_per_rank(sc_, c.pp_stage);
    const int stage = sc_.zero.stage;
    const auto state = state_bytes_per_param(stage, dp_);
    // Megatron accumulates and all-reduces bf16 gradients in fp32 (accumulate_allreduce_grads_in_fp32).
    const std::int64_t grad_elem_bytes = p_.precision == Precision::BF16 ? 4 : 2;

    MemVector gpu{};
    gpu[int(MemCategory::Parameters)] = static_cast<std::int64_t>(params * state.params);
    gpu[int(MemCategory::Gradients)] =
        static_cast<std::int64_t>(params * state.grads * grad_elem_bytes / 2.0);
    gpu[int(MemCategory::OptimizerStates)] = static_cast<std::int64_t>(params * state.optimizer);
    initial_gpu_[rank_] = gpu;
    initial_host_[rank_] = MemVector{};

    const TaskId final_compute = last_compute_;
    TaskId last_sync = kNone;
    if (dp_ > 1) {
      // Buckets of ddp_bucket_size parameters in the order gradients become ready (last layer
      // first, the embedding last); ZeRO-1/2 reduce-scatter so each rank owns its partition
      // (DeepSpeed stage_1_and_2.py), plain DP all-reduces (Megatron DDP).
      const bool reduce_scatter = stage >= 1;
      std::vector<std::pair<std::int64_t, TaskId>> ready;  // (params, producing task)
      for (auto it = last_bwd.rbegin(); it != last_bwd.rend(); ++it)
        ready.emplace_back(layer_params_per_rank(m_, t_), it->second);
      if (c.pp_stage == pp_ - 1 && logits_bwd_last != kNone)
        ready.insert(ready.begin(), {params - std::int64_t(last_bwd.size()) * layer_params_per_rank(m_, t_) -
                                         (c.pp_stage == 0 ? embedding_params_per_rank(m_, t_) : 0),
                                     logits_bwd_last});
      if (c.pp_stage == 0) ready.emplace_back(embedding_params_per_rank(m_, t_), embed_bwd_last);
      std::int64_t in_bucket = 0;
      TaskId bucket_ready = kNone;
      std::uint16_t bucket = 0;
      auto flush = [&](std::int64_t n) {
        if (n <= 0) return;
        const std::uint32_t op = g_.add_op(comm_op(reduce_scatter ? OpKind::ReduceScatter : OpKind::AllReduce,
                                                  GroupKind::Data, n * grad_elem_bytes, dp_));
        const TaskId after = p_.overlap_grad_reduce ? bucket_ready : final_compute;
        last_sync = collective(op, dp_group_, StreamId::DpComm, Phase::GradSync, Part::Gradients,
                               0xFFFF, 0xFFFF, after, bucket++);
      };
      for (const auto& [n, task] : ready) {
        std::int64_t left = n;
        bucket_ready = task;
        while (left > 0) {
          const std::int64_t take = std::min(left, p_.ddp_bucket_size - in_bucket);
          in_bucket += take;
          left -= take;
          if (in_bucket == p_.ddp_bucket_size) {
            flush(in_bucket);
            in_bucket = 0;
          }
        }
      }
      flush(in_bucket);
    }
    // Tied embeddings: the first and last stage hold copies of the word embedding; their
    // gradients are all-reduced after the DP reduction (Megatron _allreduce_embedding_grads).
    if (pp_ > 1 && !m_.untie_embeddings_and_output_weights &&
        (c.pp_stage == 0 || c.pp_stage == pp_ - 1)) {
      const std::uint32_t grp = group_id(
          GroupKind::Embedding, {RankId(rank_of(p_, {c.tp_rank, c.dp_rank, 0})),
                                 RankId(rank_of(p_, {c.tp_rank, c.dp_rank, pp_ - 1}))});
      const std::int64_t bytes = (m_.padded_vocab_size / t_) * h_ * grad_elem_bytes;
      const std::uint32_t op = g_.add_op(comm_op(OpKind::AllReduce, GroupKind::Embedding, bytes, 2));
      const TaskId id = collective(op, grp, StreamId::DpComm, Phase::GradSync, Part::Embedding,
                                   0xFFFF, 0xFFFF, final_compute);
      dep(last_sync, id);
      last_sync = id;
    }
    // Optimizer step on this rank's partition.
    const std::int64_t step_params = stage >= 1 ? (params + dp_ - 1) / dp_ : params;
    OpDesc adam;
    adam.kind = OpKind::OptimizerStepGpu;
    adam.precision = p_.precision;
    adam.params = step_params;
    fill_work(adam);
    Task t;
    t.op = g_.add_op(adam);
    t.kind = TaskKind::OptimizerGpu;
    t.stream = StreamId::Compute;
    t.phase = Phase::Optimizer;
    t.part = Part::Params;
    const TaskId step = add(t);
    dep(final_compute, step);
    dep(last_sync, step);
    last_compute_ = step;
    // ZeRO: all-gather the updated parameter partitions (fp16) for the next iteration.
    if (stage >= 1 && dp_ > 1) {
      const std::uint32_t op = g_.add_op(
          comm_op(OpKind::AllGather, GroupKind::Data, params * precision_bytes(p_.precision), dp_));
      last_compute_ = collective(op, dp_group_, StreamId::DpComm, Phase::ParamSync, Part::Params,
                                 0xFFFF, 0xFFFF, step);
    }
  }

  const Scenario& sc_;
  const BuildOptions& opt_;
  const ParallelConfig& p_;
  const ModelConfig& m_;
  std::int64_t t_ = 1, pp_ = 1, dp_ = 1, nmb_ = 1, v_ = 1, lpc_ = 1, b_ = 1, s_ = 1, h_ = 1;
  bool sp_ = false, scatter_gather_ = false;
  std::int64_t act_bytes_ = 0;

  ScheduleGraph g_;
  std::uint32_t op_attn_fwd_ = 0, op_mlp_fwd_ = 0, op_attn_bwd_ = 0, op_mlp_bwd_ = 0;
  std::uint32_t op_embed_fwd_ = 0, op_embed_bwd_ = 0, op_logits_fwd_ = 0, op_logits_bwd_ = 0;
  std::uint32_t op_tp_ar_ = 0, op_tp_ag_ = 0, op_tp_rs_ = 0, op_ce_ar_ = 0, op_p2p_ = 0;

  // current rank
  std::int64_t rank_ = 0;
  RankCoords coords_{0, 0, 0};
  TaskId last_compute_ = kNone;
  std::uint32_t tp_group_ = 0, dp_group_ = 0;

  // match ids
  std::uint32_t next_match_ = 0;
  std::unordered_map<std::uint32_t, std::uint64_t> coll_seq_;  // per group, per current rank
  std::unordered_map<std::uint64_t, std::uint32_t> match_ids_;
  std::unordered_map<std::uint64_t, std::uint64_t> msg_seq_;
  std::unordered_map<std::uint64_t, std::vector<std::uint32_t>> message_ids_;

  std::map<std::int64_t, MemVector> initial_gpu_, initial_host_;
};

}  // namespace

bool should_fold(const Scenario& scenario) {
  switch (scenario.simulation.fold) {
    case SimulationConfig::Fold::On: return true;
    case SimulationConfig::Fold::Off: return false;
    case SimulationConfig::Fold::Auto: break;
  }
  return estimated_tasks(scenario) > double(kFoldAutoTasks);
}

ScheduleGraph build_schedule_graph(const Scenario& scenario, const SystemSpec& system,
                                   const BuildOptions& options) {
  Builder builder(scenario, system, options);
  return builder.build();
}

}  // namespace trainsim
