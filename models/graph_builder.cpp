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
#include "models/zero_offload.h"

namespace trainsim {

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
  Builder(const Scenario& sc, const SystemSpec& system, const BuildOptions& opt)
      : sc_(sc), opt_(opt), p_(sc.parallel), m_(sc.model),
        profile_(opt.calibration ? *opt.calibration : default_calibration(system.gpu.name)) {
    zstage_ = sc.zero.stage;
    layer_params_ = layer_params_per_rank(m_, p_.tensor_model_parallel_size);
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
    g_.layout = layout_;
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
    rank_ = layout_.rank_of(c);
    coords_ = c;
    last_compute_ = kNone;
    coll_seq_.clear();  // sequence numbers count this rank's own collectives and messages
    msg_seq_.clear();
    z3_units_.clear();
    z3_gather_.clear();
    z3_wait_ = kNone;
    z3_release_ = 0;
    bucket_lo_ = bucket_hi_ = 0;
    bucket_ready_ = last_sync_ = last_d2h_ = last_grad_h2d_ = kNone;
    bucket_index_ = 0;
    staging_bytes_ = bucket_buffer_bytes_ = 0;
    buffers_allocated_ = false;
    layer_grad_bytes_ = zstage_ >= 2 ? layer_params_ * precision_bytes(p_.precision) : 0;
    // Groups (ring order).
    std::vector<RankId> tp_ranks, dp_ranks;
    for (std::int64_t i = 0; i < t_; ++i)
      tp_ranks.push_back(RankId(layout_.rank_of({i, c.dp_rank, c.pp_stage})));
    for (std::int64_t i = 0; i < dp_; ++i)
      dp_ranks.push_back(RankId(layout_.rank_of({c.tp_rank, i, c.pp_stage})));
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
        if (zstage_ >= 3) {  // ZeRO-3 (pp = 1): embedding, layers, logits in forward order
          std::vector<std::int64_t> units{embed_params()};
          for (std::int64_t l = 0; l < m_.num_layers; ++l) units.push_back(layer_params_);
          units.push_back((m_.padded_vocab_size / t_) * h_);
          z3_begin(std::move(units));
        }
        if (first_vstage) {
          if (zstage_ >= 3) z3_need(0, Part::Embedding);
          last_compute_ = compute(op_embed_fwd_, Phase::Forward, Part::Embedding, mb, 0xFFFF,
                                  chunk, last_compute_,
                                  {{dropout_mask_bytes(p_.precision) * s_ * b_ * h_ / sp_div,
                                    MemCategory::Activations}});  // embedding dropout mask
          zero_on_block(true, true, Phase::Forward);
        } else {
          receive(prev_rank(c, step.chunk), Phase::Forward, mb, chunk);
        }
        // ---- layers
        for (std::int64_t l = first_layer; l < first_layer + lpc_; ++l) {
          const auto layer = static_cast<std::uint16_t>(l);
          if (zstage_ >= 3) z3_need(std::size_t(1 + l), Part::Params);
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
          const std::int64_t logits_bytes = precision_bytes(p_.precision) * s_ * b_ * h_ / sp_div +
                                            4 * s_ * b_ * (m_.padded_vocab_size / t_);
          if (sp_)  // the sequence-parallel final LayerNorm output is gathered for the logits
            last_compute_ = tp_collective(op_tp_ag_, Phase::Forward, Part::Logits, mb, 0xFFFF);
          if (zstage_ >= 3) z3_need(std::size_t(1 + m_.num_layers), Part::Logits);
          last_compute_ = compute(op_logits_fwd_, Phase::Forward, Part::Logits, mb, 0xFFFF, chunk,
                                  last_compute_, {{logits_bytes, MemCategory::Activations}});
          zero_on_block(true, true, Phase::Forward);
          if (t_ > 1)
            last_compute_ = collective(op_ce_ar_, tp_group_, StreamId::TpComm, Phase::Forward,
                                       Part::Logits, mb, 0xFFFF, last_compute_);
        } else {
          send(next_rank(c, step.chunk), Phase::Forward, mb, chunk);
        }
      } else {
        // ---- backward input
        if (zstage_ >= 3) {  // backward order: logits, layers last to first, embedding
          std::vector<std::int64_t> units{(m_.padded_vocab_size / t_) * h_};
          for (std::int64_t l = 0; l < m_.num_layers; ++l) units.push_back(layer_params_);
          units.push_back(embed_params());
          z3_begin(std::move(units));
        }
        const bool last_mb = step.microbatch == nmb_ - 1;
        if (last_vstage) {
          const std::int64_t logits_bytes = precision_bytes(p_.precision) * s_ * b_ * h_ / sp_div +
                                            4 * s_ * b_ * (m_.padded_vocab_size / t_);
          if (zstage_ >= 3) z3_need(0, Part::Logits);
          // The gradient of the logits (e s b V / t, the input of the output layer's dgrad and
          // wgrad GEMMs) exists during the logits backward on top of the saved activations.
          const std::int64_t logits_grad_bytes =
              precision_bytes(p_.precision) * s_ * b_ * (m_.padded_vocab_size / t_);
          last_compute_ = compute(op_logits_bwd_, Phase::Backward, Part::Logits, mb, 0xFFFF, chunk,
                                  last_compute_,
                                  {{logits_grad_bytes, MemCategory::Activations},
                                   {-logits_bytes - logits_grad_bytes, MemCategory::Activations, true}});
          if (zstage_ >= 2 && !buffers_allocated_) {
            alloc_bucket_buffers(last_compute_);
            buffers_allocated_ = true;
          }
          zero_on_block(false, false, Phase::Forward);
          if (zstage_ >= 2)  // the tied word embedding's gradient lives until the embedding backward
            g_.add_memory_effect(last_compute_, {(m_.padded_vocab_size / t_) * h_ * precision_bytes(p_.precision),
                                                 MemCategory::Gradients});
          if (z3_release_ > 0) {  // the gathered output embedding is released after its backward
            g_.add_memory_effect(last_compute_, {-z3_release_, MemCategory::Parameters, true});
            z3_release_ = 0;
          }
          logits_bwd_last = last_compute_;
          if (t_ > 1)  // input gradient of the vocab-parallel output layer
            last_compute_ = collective(sp_ ? op_tp_rs_ : op_tp_ar_, tp_group_, StreamId::TpComm,
                                       Phase::Backward, Part::Logits, mb, 0xFFFF, last_compute_);
        } else {
          receive(next_rank(c, step.chunk), Phase::Backward, mb, chunk);
        }
        // ---- layers, last first
        if (last_vstage && zstage_ >= 2) {  // final LayerNorm (and untied output layer) gradients
          const std::int64_t tail = params_per_rank(sc_, c.pp_stage) - embed_params() -
                                    m_.num_layers * layer_params_;
          grads_ready(embed_params() + m_.num_layers * layer_params_,
                      embed_params() + m_.num_layers * layer_params_ + tail, last_compute_, last_mb);
        }
        for (std::int64_t l = first_layer + lpc_ - 1; l >= first_layer; --l) {
          const auto layer = static_cast<std::uint16_t>(l);
          if (zstage_ >= 3) z3_need(std::size_t(m_.num_layers - l), Part::Params);
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
          if (zstage_ >= 2)
            grads_ready(embed_params() + l * layer_params_, embed_params() + (l + 1) * layer_params_,
                        last_compute_, last_mb);
        }
        // ---- backward output
        if (first_vstage) {
          if (zstage_ >= 3) z3_need(std::size_t(1 + m_.num_layers), Part::Embedding);
          last_compute_ = compute(op_embed_bwd_, Phase::Backward, Part::Embedding, mb, 0xFFFF, chunk,
                                  last_compute_,
                                  {{-(dropout_mask_bytes(p_.precision) * s_ * b_ * h_ / sp_div),
                                    MemCategory::Activations, true}});
          zero_on_block(false, false, Phase::Forward);
          if (zstage_ >= 2) {  // position-embedding gradient, then both copied into the bucket
            const std::int64_t e = precision_bytes(p_.precision);
            g_.add_memory_effect(last_compute_, {s_ * h_ * e, MemCategory::Gradients});
            g_.add_memory_effect(last_compute_, {-embed_params() * e, MemCategory::Gradients, true});
          }
          if (z3_release_ > 0) {
            g_.add_memory_effect(last_compute_, {-z3_release_, MemCategory::Parameters, true});
            z3_release_ = 0;
          }
          embed_bwd_last = last_compute_;
          if (zstage_ >= 2) {
            grads_ready(0, embed_params(), last_compute_, last_mb);
            flush_bucket(last_mb);  // the rest of this microbatch's gradients
          }
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
    zero_on_block(true, false, phase);
    if (t_ > 1) last_compute_ = tp_collective(sp_ ? op_tp_rs_ : op_tp_ar_, phase, Part::Attn, mb, layer);
    if (sp_) last_compute_ = tp_collective(op_tp_ag_, phase, Part::Mlp, mb, layer);
    last_compute_ = compute(op_mlp_fwd_, phase, Part::Mlp, mb, layer, chunk, last_compute_, mlp_mem);
    zero_on_block(false, true, phase);
    if (t_ > 1) last_compute_ = tp_collective(sp_ ? op_tp_rs_ : op_tp_ar_, phase, Part::Mlp, mb, layer);
  }

  /// MLP backward, its TP collective(s), attention backward, its TP collective(s).
  void layer_backward(std::uint16_t mb, std::uint16_t layer, std::uint8_t chunk,
                      std::initializer_list<MemEffect> mlp_mem,
                      std::initializer_list<MemEffect> attn_mem) {
    if (sp_) last_compute_ = tp_collective(op_tp_ag_, Phase::Backward, Part::Mlp, mb, layer);
    last_compute_ = compute(op_mlp_bwd_, Phase::Backward, Part::Mlp, mb, layer, chunk, last_compute_, mlp_mem);
    zero_on_block(true, false, Phase::Backward);
    if (t_ > 1)
      last_compute_ = tp_collective(sp_ ? op_tp_rs_ : op_tp_ar_, Phase::Backward, Part::Mlp, mb, layer);
    if (sp_) last_compute_ = tp_collective(op_tp_ag_, Phase::Backward, Part::Attn, mb, layer);
    last_compute_ = compute(op_attn_bwd_, Phase::Backward, Part::Attn, mb, layer, chunk, last_compute_, attn_mem);
    zero_on_block(false, true, Phase::Backward);
    if (t_ > 1)
      last_compute_ = tp_collective(sp_ ? op_tp_rs_ : op_tp_ar_, Phase::Backward, Part::Attn, mb, layer);
  }

  TaskId tp_collective(std::uint32_t op, Phase phase, Part part, std::uint16_t mb, std::uint16_t layer) {
    return collective(op, tp_group_, StreamId::TpComm, phase, part, mb, layer, last_compute_);
  }

  // ---------------------------------------------------------------- pipeline messages
  /// Rank holding the previous virtual stage of `chunk` (same TP and DP coordinates).
  std::int64_t prev_rank(const RankCoords& c, int chunk) const {
    if (c.pp_stage > 0) return layout_.rank_of({c.tp_rank, c.dp_rank, c.pp_stage - 1});
    (void)chunk;  // stage 0, chunk k > 0: previous virtual stage is chunk k-1 on the last stage
    return layout_.rank_of({c.tp_rank, c.dp_rank, pp_ - 1});
  }
  std::int64_t next_rank(const RankCoords& c, int chunk) const {
    (void)chunk;
    if (c.pp_stage < pp_ - 1) return layout_.rank_of({c.tp_rank, c.dp_rank, c.pp_stage + 1});
    return layout_.rank_of({c.tp_rank, c.dp_rank, 0});
  }

  /// A pipeline message task of this rank: a Send to `peer` or a Recv from it, after the
  /// preceding compute (Megatron issues its p2p calls synchronously after it).
  TaskId message(TaskKind kind, std::int64_t peer, Phase phase, std::uint16_t mb, std::uint8_t chunk) {
    const std::int64_t src = kind == TaskKind::Send ? rank_ : peer;
    const std::int64_t dst = kind == TaskKind::Send ? peer : rank_;
    Task t;
    t.op = op_p2p_;
    t.kind = kind;
    t.stream = StreamId::PpComm;
    t.phase = phase;
    t.part = Part::Pipeline;
    t.microbatch = mb;
    t.chunk = chunk;
    t.peer = static_cast<std::int32_t>(peer);
    t.group = group_id(GroupKind::Pipeline, {RankId(src), RankId(dst)});
    t.match = message_match(src, dst);
    const TaskId id = add(t);
    dep(last_compute_, id);
    return id;
  }

  void send(std::int64_t to, Phase phase, std::uint16_t mb, std::uint8_t chunk) {
    message(TaskKind::Send, to, phase, mb, chunk);
  }

  void receive(std::int64_t from, Phase phase, std::uint16_t mb, std::uint8_t chunk) {
    const TaskId id = message(TaskKind::Recv, from, phase, mb, chunk);
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
    // Megatron accumulates and all-reduces bf16 gradients in fp32 (accumulate_allreduce_grads_in_fp32).
    const std::int64_t grad_elem_bytes = grad_element_bytes(sc_);

    // Model states, NCCL buffers and framework memory held before the iteration
    // (models/zero_offload.h).
    const RankStateBytes state = rank_state_bytes(sc_, profile_, c.pp_stage);
    initial_gpu_[rank_] = state.gpu;
    initial_host_[rank_] = state.host;

    const TaskId final_compute = last_compute_;
    TaskId& last_sync = last_sync_;
    if (dp_ > 1 && stage == 0) {
      // Megatron DDP (no ZeRO): buckets of ddp_bucket_size parameters all-reduced in place in
      // the order gradients become ready (last layer first, the embedding last). ZeRO stages
      // reduce-scatter DeepSpeed's reduce_bucket_size buckets (flush_bucket).
      const bool reduce_scatter = false;
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
    if (stage == 1) {
      // DeepSpeed ZeRO-1: the full gradients are reduce-scattered once, after the last
      // microbatch, in reduce_bucket_size buckets (last parameters first).
      for (std::int64_t cur = params; cur > 0;) {
        const std::int64_t take = std::min(cur, sc_.zero.reduce_bucket_size);
        bucket_hi_ = cur;
        bucket_lo_ = cur - take;
        bucket_ready_ = final_compute;
        flush_bucket(true);
        cur -= take;
      }
    }
    // Tied embeddings: the first and last stage hold copies of the word embedding; their
    // gradients are all-reduced after the DP reduction (Megatron _allreduce_embedding_grads).
    if (pp_ > 1 && !m_.untie_embeddings_and_output_weights &&
        (c.pp_stage == 0 || c.pp_stage == pp_ - 1)) {
      const std::uint32_t grp = group_id(
          GroupKind::Embedding, {RankId(layout_.rank_of({c.tp_rank, c.dp_rank, 0})),
                                 RankId(layout_.rank_of({c.tp_rank, c.dp_rank, pp_ - 1}))});
      const std::int64_t bytes = (m_.padded_vocab_size / t_) * h_ * grad_elem_bytes;
      const std::uint32_t op = g_.add_op(comm_op(OpKind::AllReduce, GroupKind::Embedding, bytes, 2));
      const TaskId id = collective(op, grp, StreamId::DpComm, Phase::GradSync, Part::Embedding,
                                   0xFFFF, 0xFFFF, final_compute);
      dep(last_sync, id);
      last_sync = id;
    }
    // Optimizer step. Twin-Flow (DeepSpeed ZeRO-Offload++): the GPU part by fused Adam on the
    // compute stream and the CPU part by CPU Adam on the host, with no dependency between them;
    // each CPU sub-group's updated fp16 parameters go back host->device after its step.
    const std::int64_t gpu_params = stage == 0 ? params : gpu_stepped_params(sc_, c.pp_stage);
    const std::int64_t cpu_params = stage == 0 ? 0 : cpu_stepped_params(sc_, c.pp_stage);
    // The fp32 gradients the step reads: Megatron fp16 main_grad.float() (4 B/param; bf16
    // main_grad is fp32 already), DeepSpeed's fp32 gradient partition of the GPU part.
    // (Stage 3 with offload keeps the GPU part's fp32 gradients in a persistent buffer instead.)
    const std::int64_t fp32_grad_bytes =
        stage == 0 ? (p_.precision == Precision::FP16 ? 4 * params : 0)
        : stage >= 3 && sc_.zero.offload_optimizer.enabled ? 0
                                                            : 4 * gpu_params;
    const std::int64_t e = precision_bytes(p_.precision);
    // Bucket and staging buffers are free once every reduction and copy is done (the step
    // waits for them, as DeepSpeed synchronizes its streams before the step).
    auto release_buffers = [&](TaskId id) {
      if (bucket_buffer_bytes_ > 0) g_.add_memory_effect(id, {-bucket_buffer_bytes_, MemCategory::CommBuffers});
      if (staging_bytes_ > 0) g_.add_memory_effect(id, {-staging_bytes_, MemCategory::OffloadBuffers});
      bucket_buffer_bytes_ = staging_bytes_ = 0;
    };
    TaskId gpu_step = kNone;
    if (gpu_params > 0) {
      OpDesc adam;
      adam.kind = OpKind::OptimizerStepGpu;
      adam.precision = p_.precision;
      adam.params = gpu_params;
      fill_work(adam);
      Task t;
      t.op = g_.add_op(adam);
      t.kind = TaskKind::OptimizerGpu;
      t.stream = StreamId::Compute;
      t.phase = Phase::Optimizer;
      t.part = Part::Params;
      gpu_step = add(t, {{fp32_grad_bytes, MemCategory::Gradients},
                         {-fp32_grad_bytes, MemCategory::Gradients, true}});
      release_buffers(gpu_step);
      dep(final_compute, gpu_step);
      dep(last_sync, gpu_step);
      dep(last_d2h_, gpu_step);
      dep(last_grad_h2d_, gpu_step);
      last_compute_ = gpu_step;
    }
    TaskId last_h2d = kNone;
    for (std::int64_t off = 0; off < cpu_params; off += sc_.zero.sub_group_size) {
      const std::int64_t n = std::min(sc_.zero.sub_group_size, cpu_params - off);
      const auto chunk = static_cast<std::uint16_t>(std::min<std::int64_t>(off / sc_.zero.sub_group_size, 0xFFFE));
      OpDesc adam;
      adam.kind = OpKind::OptimizerStepCpu;
      adam.precision = p_.precision;
      adam.params = n;
      Task t;
      t.op = g_.add_op(adam);
      t.kind = TaskKind::OptimizerCpu;
      t.stream = StreamId::Cpu;
      t.phase = Phase::Optimizer;
      t.part = Part::Params;
      t.bucket = chunk;
      const TaskId cpu_step = add(t);
      release_buffers(cpu_step);
      dep(final_compute, cpu_step);
      dep(last_sync, cpu_step);
      dep(last_d2h_, cpu_step);
      Task h;
      h.op = g_.add_op(comm_op(OpKind::CopyH2D, GroupKind::None, n * e, 1));
      h.kind = TaskKind::CopyH2D;
      h.stream = StreamId::H2D;
      h.phase = Phase::Offload;
      h.part = Part::Params;
      h.bucket = chunk;
      last_h2d = add(h);
      dep(cpu_step, last_h2d);
    }
    // ZeRO-1/2: all-gather the updated parameter partitions (fp16) for the next iteration
    // (ZeRO-3 keeps them partitioned and gathers per layer).
    if ((stage == 1 || stage == 2) && dp_ > 1) {
      const std::uint32_t op = g_.add_op(comm_op(OpKind::AllGather, GroupKind::Data, params * e, dp_));
      const TaskId ag = collective(op, dp_group_, StreamId::DpComm, Phase::ParamSync, Part::Params,
                                   0xFFFF, 0xFFFF, gpu_step != kNone ? gpu_step : final_compute);
      dep(last_h2d, ag);
      last_compute_ = ag;
    }
  }

  const Scenario& sc_;
  const BuildOptions& opt_;
  const ParallelConfig& p_;
  const ModelConfig& m_;
  const ParallelLayout layout_ = p_.layout();
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

  // ---------------------------------------------------------------- ZeRO / offload state
  CalibrationProfile profile_;
  int zstage_ = 0;
  std::int64_t layer_params_ = 0;
  // ZeRO-3 parameter gathering (models/zero_offload.h): the units of the current pass
  // (forward: embedding, layers, logits; backward: the reverse), the all-gather issued for
  // each, and the next one to issue.
  std::vector<std::int64_t> z3_units_;
  std::vector<TaskId> z3_gather_;
  std::size_t z3_next_ = 0;
  TaskId z3_wait_ = kNone;       ///< gather the next compute task waits for
  std::int64_t z3_release_ = 0;  ///< gathered bytes released at the end of the unit's last block
  std::int64_t layer_grad_bytes_ = 0;  ///< stage >= 2: a layer's full gradients during its backward
  // Stage 2/3 gradient buckets of the current microbatch, in parameter-order coordinates
  // [bucket_lo_, bucket_hi_) (backward fills them from high to low).
  std::int64_t bucket_lo_ = 0, bucket_hi_ = 0;
  TaskId bucket_ready_ = kNone;
  std::uint16_t bucket_index_ = 0;
  TaskId last_sync_ = kNone, last_d2h_ = kNone, last_grad_h2d_ = kNone;
  std::int64_t staging_bytes_ = 0, bucket_buffer_bytes_ = 0;
  bool buffers_allocated_ = false;

  /// Called right after a compute task of a layer was added (it is the last task added).
  void zero_on_block(bool first_block, bool last_block, Phase phase) {
    if (z3_wait_ != kNone) {
      dep(z3_wait_, last_compute_);
      z3_wait_ = kNone;
    }
    if (phase == Phase::Backward && layer_grad_bytes_ > 0) {
      // The layer's gradients are produced during its backward and copied into the bucket
      // buffer (then freed) at its end (DeepSpeed reduce_independent_p_g_buckets_and_remove_grads).
      if (first_block) g_.add_memory_effect(last_compute_, {layer_grad_bytes_, MemCategory::Gradients});
      if (last_block)
        g_.add_memory_effect(last_compute_, {-layer_grad_bytes_, MemCategory::Gradients, true});
    }
    if (last_block && phase != Phase::Recompute && z3_release_ > 0) {
      g_.add_memory_effect(last_compute_, {-z3_release_, MemCategory::Parameters, true});
      z3_release_ = 0;
    }
  }

  bool zero3_gathers() const { return zstage_ >= 3 && dp_ > 1; }

  /// Starts a ZeRO-3 pass over parameter units (elements per rank, in use order).
  void z3_begin(std::vector<std::int64_t> units) {
    z3_units_ = std::move(units);
    z3_gather_.assign(z3_units_.size(), kNone);
    z3_next_ = 0;
  }
  /// Before the first compute of unit k: issues the all-gathers of units up to k + prefetch
  /// (each may start once the compute issued so far is done), makes the next compute wait for
  /// unit k's gather and its last block release it.
  void z3_need(std::size_t k, Part part) {
    if (!zero3_gathers()) return;
    const std::size_t until = std::min(z3_units_.size(), k + 1 + std::size_t(zero3_prefetch_layers(sc_)));
    for (; z3_next_ < until; ++z3_next_) {
      const std::int64_t bytes = z3_units_[z3_next_] * precision_bytes(p_.precision);
      const std::uint32_t op = g_.add_op(comm_op(OpKind::AllGather, GroupKind::Data, bytes, dp_));
      Task t;
      t.op = op;
      t.kind = TaskKind::Collective;
      t.stream = StreamId::DpComm;
      t.phase = Phase::ParamSync;
      t.part = part;
      t.group = dp_group_;
      t.match = collective_match(dp_group_);
      // The gathered copy (the rank's own partition is already counted in Parameters).
      const std::int64_t gathered = bytes - bytes / dp_;
      const TaskId id = add(t, {{gathered, MemCategory::Parameters}});
      dep(last_compute_, id);
      z3_gather_[z3_next_] = id;
    }
    z3_wait_ = z3_gather_[k];
    const std::int64_t bytes = z3_units_[k] * precision_bytes(p_.precision);
    z3_release_ = bytes - bytes / dp_;
  }

  /// Parameter-order position of a unit: embedding [0, E), layer l [E + l Lp, E + (l+1) Lp),
  /// the rest (final LayerNorm) after the last layer.
  std::int64_t embed_params() const { return embedding_params_per_rank(m_, t_); }

  /// Stage 2/3: gradients of parameters [lo, hi) are complete after task `ready`.
  void grads_ready(std::int64_t lo, std::int64_t hi, TaskId ready, bool last_microbatch) {
    if (zstage_ < 2 || hi <= lo) return;
    if (bucket_hi_ == bucket_lo_) bucket_hi_ = bucket_lo_ = hi;
    if (bucket_lo_ != hi) throw std::logic_error("grads_ready: gradient ranges must arrive from high to low");
    const std::int64_t cap = sc_.zero.reduce_bucket_size;
    std::int64_t cur = hi;
    while (cur > lo) {
      const std::int64_t take = std::min(cur - lo, cap - (bucket_hi_ - bucket_lo_));
      bucket_lo_ -= take;
      cur -= take;
      bucket_ready_ = ready;
      if (bucket_hi_ - bucket_lo_ == cap) flush_bucket(last_microbatch);
    }
  }

  /// Reduce-scatters the current bucket (stage >= 1) and copies the CPU-stepped part of this
  /// rank's share to the host.
  void flush_bucket(bool last_microbatch) {
    (void)last_microbatch;
    const std::int64_t n = bucket_hi_ - bucket_lo_;
    if (n <= 0) return;
    const TaskId after = sc_.zero.overlap_comm || zstage_ == 1 ? bucket_ready_ : last_compute_;
    TaskId done = after;
    if (dp_ > 1) {
      const std::uint32_t op = g_.add_op(
          comm_op(OpKind::ReduceScatter, GroupKind::Data, n * precision_bytes(p_.precision), dp_));
      done = collective(op, dp_group_, StreamId::DpComm, Phase::GradSync, Part::Gradients, 0xFFFF,
                        0xFFFF, after, bucket_index_);
      if (!buffers_allocated_) {  // stage 1: the buffers appear with the first reduction
        alloc_bucket_buffers(done);
        buffers_allocated_ = true;
      }
      dep(last_sync_, done);
      last_sync_ = done;
    }
    // CPU part: the first r of the parameters (DeepSpeed Twin-Flow), this rank's 1/dp share.
    const std::int64_t cpu_prefix = static_cast<std::int64_t>(
        std::floor(effective_offload_ratio(sc_) * double(params_per_rank(sc_, coords_.pp_stage))));
    const std::int64_t cpu_overlap =
        std::max<std::int64_t>(0, std::min(bucket_hi_, cpu_prefix) - bucket_lo_);
    auto share = [&](std::int64_t n) { return (n + dp_ - 1) / dp_; };
    auto copy = [&](TaskKind kind, std::int64_t bytes, TaskId after) {
      Task t;
      t.op = g_.add_op(comm_op(kind == TaskKind::CopyD2H ? OpKind::CopyD2H : OpKind::CopyH2D,
                               GroupKind::None, bytes, 1));
      t.kind = kind;
      t.stream = kind == TaskKind::CopyD2H ? StreamId::D2H : StreamId::H2D;
      t.phase = Phase::Offload;
      t.part = Part::Gradients;
      t.bucket = bucket_index_;
      const TaskId id = add(t);
      if (!buffers_allocated_) {  // dp = 1: the staging buffer appears with the first copy
        alloc_bucket_buffers(id);
        buffers_allocated_ = true;
      }
      dep(after, id);
      return id;
    };
    if (zstage_ >= 3 && sc_.zero.offload_optimizer.enabled) {
      // DeepSpeed stage3.py with offload_optimizer: the reduced fp16 partition goes to the
      // pinned host grad_partitions_flat_buffer (device->host, 2 B/elem), then into each
      // sub-group's fp32 gradient: on the host for the CPU part, back host->device for the GPU
      // part (copy_ converts fp16->fp32 on the source device, the host: 4 B/elem). This is the
      // round trip the Twin-Flow blog lists as "unnecessary D2H/H2D memcpy".
      const TaskId d2h = copy(TaskKind::CopyD2H, share(n) * precision_bytes(p_.precision), done);
      dep(last_d2h_, d2h);
      last_d2h_ = d2h;
      const std::int64_t gpu_part = n - cpu_overlap;
      if (gpu_part > 0) {
        const TaskId h2d = copy(TaskKind::CopyH2D, share(gpu_part) * 4, d2h);
        dep(last_grad_h2d_, h2d);
        last_grad_h2d_ = h2d;
      }
    } else if (cpu_overlap > 0) {
      // ZeRO-1/2 offload: the CPU part's gradients cast to fp32 on the GPU (copy_ converts on
      // the source device) and copied into the pinned fp32 host buffer (4 B/elem).
      const TaskId d2h = copy(TaskKind::CopyD2H, share(cpu_overlap) * 4, done);
      dep(last_d2h_, d2h);
      last_d2h_ = d2h;
    }
    ++bucket_index_;
    bucket_hi_ = bucket_lo_;
  }

  /// Bucket buffers (CommBuffers) and the offload fp32 staging buffer (OffloadBuffers) live
  /// from the first backward to the last reduction / device->host copy.
  void alloc_bucket_buffers(TaskId task) {
    const std::int64_t elems = bucket_elements(sc_, coords_.pp_stage);
    bucket_buffer_bytes_ = zstage_ >= 2 ? bucket_buffers(sc_) * elems * precision_bytes(p_.precision) : 0;
    // Offload staging on the GPU: stage 1/2 cast one bucket's share to fp32 before the copy;
    // stage 3 copies the reduce-scatter output (fp16) of one bucket.
    const bool z3_offload = zstage_ >= 3 && sc_.zero.offload_optimizer.enabled;
    staging_bytes_ = z3_offload ? precision_bytes(p_.precision) * ((elems + dp_ - 1) / dp_)
                     : effective_offload_ratio(sc_) > 0 ? 4 * ((elems + dp_ - 1) / dp_)
                                                        : 0;
    if (bucket_buffer_bytes_ > 0) g_.add_memory_effect(task, {bucket_buffer_bytes_, MemCategory::CommBuffers});
    if (staging_bytes_ > 0) g_.add_memory_effect(task, {staging_bytes_, MemCategory::OffloadBuffers});
  }
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
  const auto& off = scenario.zero.offload_optimizer;
  TRAINSIM_CHECK(!off.ratio_auto || off.ratio_resolved,
                 scenario.source_path + ": `offload_optimizer.ratio: auto` must be resolved "
                 "(resolve_offload_ratio, models/run.h) before the graph is built");
  if (effective_offload_ratio(scenario) > 0)
    check_host_memory(scenario, system,
                      options.calibration ? *options.calibration : default_calibration(system.gpu.name));
  Builder builder(scenario, system, options);
  ScheduleGraph graph = builder.build();
  // What the replay (hw_backend/) reads besides the tasks: it needs no Scenario.
  ReplayModel& rm = graph.replay_model;
  rm.num_layers = scenario.model.num_layers;
  rm.num_microbatches = scenario.parallel.num_microbatches;
  rm.untie_embeddings_and_output_weights = scenario.model.untie_embeddings_and_output_weights;
  rm.recompute_full = scenario.parallel.recompute_granularity == Recompute::Full;
  rm.recompute_selective = scenario.parallel.recompute_granularity == Recompute::Selective;
  rm.precision = scenario.parallel.precision;
  for (std::int64_t stage = 0; stage < scenario.parallel.pipeline_model_parallel_size; ++stage)
    rm.params_per_stage.push_back(params_per_rank(scenario, stage));
  return graph;
}

}  // namespace trainsim
