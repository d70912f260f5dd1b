// Strategy `zero3`: DeepSpeed ZeRO stage 3 (runtime/zero/stage3.py, partitioned_param_
// coordinator.py; = FSDP full sharding), pp = 1 (DeepSpeed refuses stage 3 with pipelines). Parameters are partitioned too and gathered
// over the data-parallel group before use; gradients go through reduce-scatter buckets as at
// stage 2. Two granularities:
//
//  * DeepSpeed (dense models): what DeepSpeed's module hooks do (PartitionedParameterCoordinator
//    fetch_sub_module / release_sub_module, DeepSpeed v0.19.5). Each submodule with parameters
//    (norms, QKV, projection, fc1, fc2, embedding, output) is fetched by its own all-gather of
//    its non-persistent tensors; tensors below stage3_param_persistence_threshold elements stay
//    gathered and are never fetched. At a submodule's pre-forward/backward hook the coordinator
//    fetches it and prefetches the next submodules of the pass, in use order, while fewer than
//    min(stage3_prefetch_bucket_size, stage3_max_live_parameters - gathered elements) are being
//    prefetched (it checks before adding, so at least one goes; gathered ones are skipped and
//    then kept until that use). After use a submodule is released unless it is used again
//    before stage3_max_reuse_distance elements of other submodules (__params_to_release, DeepSpeed
//    v0.19.5); with full recomputation the backward pass re-runs every layer's forward, which
//    fetches the layer's submodules again (those released since the forward; a checkpoint
//    unit of several layers re-runs all of them, in order, before their backward). The gathers
//    issued at block c's hook start once block c-1 has run, so what was prefetched for c+1
//    overlaps block c. The blocks are the skeleton's attention and MLP tasks; a block waits
//    for the gathers of all its submodules.
//  * FSDP (Megatron-FSDP, torch FSDP2; and MoE layers): one unit per layer of the step's model
//    chunk (the embedding on the model's first virtual stage, the chunk's layers, the output
//    layer on the last; in the order of first use: forward, then reversed in backward except
//    that a checkpoint unit's layers come in forward order, at its re-run), gathered up to
//    zero3_prefetch_layers units ahead, released after the unit's last block of the pass. With
//    pipeline parallelism (Megatron-FSDP) a pass is one pipeline step's chunk.
#include <algorithm>
#include <map>
#include <vector>

#include "models/builder/dp_strategy.h"
#include "models/builder/zero_buckets.h"
#include "models/memory/memory_model.h"
#include "models/errors.h"

namespace trainsim::builder {

namespace {

class Zero3 final : public DataParallelStrategy {
 public:
  explicit Zero3(const RankContext& ctx)
      : submodules_(!ctx.scenario().parallel.uses_fsdp() && !ctx.scenario().model.is_moe()),
        ckpt_units_(ctx.scenario().parallel.recompute_units(ctx.scenario().model.num_layers)),
        buckets_(ctx),
        gathers_(ctx.dims().dp > 1),
        layers_(ctx.dims().layers),
        prefetch_(zero3_prefetch_layers(ctx.scenario())),
        fp8_layers_(ctx.scenario().parallel.fp8_param_gather) {
    const ModelConfig& m = ctx.scenario().model;
    embed_params_ = embedding_params_per_rank(m, ctx.dims().t);
    output_params_ = word_embedding_params_per_rank(m, ctx.dims().t);
    const ZeroConfig& z = ctx.scenario().zero;
    const std::int64_t thr = z.stage3_param_persistence_threshold;
    auto fetched_of = [thr](std::int64_t n) { return n >= thr ? n : 0; };
    // The embedding's word table (output_params_, the same per-rank word table) and position
    // table; the output layer's (tied) word table (its final norm is below any useful
    // threshold and stays gathered).
    embed_fetched_ = fetched_of(output_params_) + fetched_of(embed_params_ - output_params_);
    output_fetched_ = fetched_of(output_params_);
    embed_tensors_ = (fetched_of(output_params_) > 0) + (fetched_of(embed_params_ - output_params_) > 0);
    output_tensors_ = fetched_of(output_params_) > 0 ? 1 : 0;
    for (const LayerSubmodule& sub : layer_submodules_per_rank(m, ctx.dims().t)) {
      std::int64_t fetched = 0, tensors = 0;  // its tensors that are not persistent
      for (std::int64_t n : sub.params) {
        fetched += fetched_of(n);
        tensors += fetched_of(n) > 0 ? 1 : 0;
      }
      if (fetched == 0) continue;
      (sub.mlp ? mlp_subs_ : attn_subs_).push_back(fetched);
      (sub.mlp ? mlp_tensors_ : attn_tensors_).push_back(tensors);
    }
  }
  const char* name() const override { return "zero3"; }

  /// A pass over the units starts with each step (pp = 1: a step runs the whole model).
  void on_step_begin(RankContext& ctx, const PipelineStep& step) override {
    if (submodules_) {
      if (gathers_) begin_submodule_pass(ctx, step.forward);
      return;
    }
    // The step's model chunk (one pipeline stage's share, or the whole model at pp = 1): the
    // embedding on the model's first virtual stage, its layers, the output on the last.
    const ChunkSpan c = ctx.chunk_span(step.chunk);
    has_embedding_ = c.first_vstage;
    has_output_ = c.last_vstage;
    first_layer_ = c.first_layer;
    chunk_layers_ = c.layers;
    units_.clear();
    const bool head = step.forward ? has_embedding_ : has_output_;
    const bool tail = step.forward ? has_output_ : has_embedding_;
    if (head) units_.push_back({step.forward ? embed_params_ : output_params_, false});
    // The chunk's layers in the order of their first use (a dense or an MoE layer's
    // parameters): forward in order; backward reversed, except that a checkpoint unit re-runs
    // its layers in forward order first.
    std::vector<std::int64_t> order;
    if (step.forward) {
      for (std::int64_t l = 0; l < chunk_layers_; ++l) order.push_back(first_layer_ + l);
    } else {
      order = backward_first_uses(first_layer_, chunk_layers_);
    }
    layer_pos_.assign(std::size_t(chunk_layers_), 0);
    for (std::size_t i = 0; i < order.size(); ++i) {
      layer_pos_[std::size_t(order[i] - first_layer_)] = i;
      units_.push_back({layer_params_at(ctx.scenario(), order[i]), true});
    }
    if (tail) units_.push_back({step.forward ? output_params_ : embed_params_, false});
    gather_.assign(units_.size(), kNone);
    next_ = 0;
  }
  void before_unit(RankContext& ctx, bool forward, const Unit& unit) override;
  void on_block_computed(RankContext& ctx, const Block& block) override;
  void on_grads_ready(RankContext& ctx, const Unit& unit, TaskId ready) override {
    buckets_.on_grads_ready(ctx, unit, ready);
  }
  void on_step_end(RankContext& ctx, const PipelineStep& step) override {
    if (submodules_ && gathers_) end_submodule_pass(ctx);
    if (!step.forward) buckets_.flush(ctx);  // the rest of this microbatch's gradients
  }
  TaskId reduce_gradients(RankContext&, const BackwardTails&) override {
    return buckets_.last_sync();
  }
  OptimizerStepInputs optimizer_step(const RankContext& ctx) const override {
    return buckets_.optimizer_step(ctx);
  }

 private:
  /// Position of `unit` in the current pass (the step's chunk): forward embedding, layers,
  /// output; backward the reverse.
  std::size_t index_of(bool forward, const Unit& unit) const {
    const std::size_t head = (forward ? has_embedding_ : has_output_) ? 1 : 0;
    const std::size_t layers = std::size_t(chunk_layers_);
    switch (unit.kind) {
      case UnitKind::Embedding: return forward ? 0 : head + layers;
      case UnitKind::Layer: return head + layer_pos_[std::size_t(unit.layer - first_layer_)];
      case UnitKind::Output: return forward ? head + layers : 0;
    }
    return 0;
  }
  /// The layers [first, first + n) in the order the backward pass first uses them: from the
  /// last down, a checkpoint unit's layers (ParallelConfig::recompute_units) in forward order
  /// at its last layer, when its forward runs again.
  std::vector<std::int64_t> backward_first_uses(std::int64_t first, std::int64_t n) const {
    std::vector<std::int64_t> out;
    for (std::int64_t l = first + n - 1; l >= first; --l) {
      const std::int64_t unit = ckpt_units_[std::size_t(l)];
      if (unit < 0)
        out.push_back(l);
      else if (ParallelConfig::recompute_unit_end(ckpt_units_, l))
        for (std::int64_t k = unit; k <= l; ++k) out.push_back(k);
    }
    return out;
  }
  static Part part_of(const Unit& unit) {
    switch (unit.kind) {
      case UnitKind::Embedding: return Part::Embedding;
      case UnitKind::Layer: return Part::Params;
      case UnitKind::Output: return Part::Logits;
    }
    return Part::None;
  }

  // ---- DeepSpeed granularity (see the file comment)
  /// A compute block of the pass and the submodules (ids into numel_) it uses.
  struct Consumer {
    UnitKind kind;
    std::int64_t layer;
    std::vector<int> subs;
  };
  void begin_submodule_pass(RankContext& ctx, bool forward);
  void add_consumer(UnitKind kind, std::int64_t layer, bool mlp, bool backward = false);
  /// DeepSpeed's pre-hook of consumer `c`: fetch its submodules, prefetch the next ones; the
  /// gathers may start after `after`.
  void fetch(RankContext& ctx, std::size_t c, TaskId after);
  void issue(RankContext& ctx, int sub, TaskId after);
  /// DeepSpeed's post-hook of consumer `c` (block `task`): release what is not reused soon.
  void release_after(RankContext& ctx, std::size_t c, TaskId task);
  void release(RankContext& ctx, int sub, TaskId task);
  void end_submodule_pass(RankContext& ctx);
  void submodule_block(RankContext& ctx, const Block& block);

  std::vector<std::int64_t> attn_subs_, mlp_subs_;  ///< fetched elements per layer submodule
  std::vector<std::int64_t> attn_tensors_, mlp_tensors_;  ///< and its fetched tensors
  std::int64_t embed_fetched_ = 0, output_fetched_ = 0;
  std::int64_t embed_tensors_ = 0, output_tensors_ = 0;
  std::vector<std::int64_t> numel_;                 ///< per submodule id of the pass
  std::vector<std::int64_t> tensors_;               ///< per submodule id: fetched tensors
  std::vector<Consumer> consumers_;
  std::map<int, TaskId> live_;  ///< gathered (or in flight) submodules and their gathers
  /// Submodules a prefetch scan skipped (gathered) at a later use: kept until that consumer.
  std::map<int, std::size_t> protect_;
  std::int64_t live_numel_ = 0;
  std::size_t cursor_ = 0;      ///< the next consumer to be computed
  const bool submodules_;
  /// Per global layer: the first layer of its checkpoint unit, -1 when it is not recomputed.
  const std::vector<std::int64_t> ckpt_units_;

  ZeroGradientBuckets buckets_;
  const bool gathers_;  ///< dp > 1: there is something to gather
  const std::int64_t layers_, prefetch_;
  std::int64_t embed_params_ = 0, output_params_ = 0;
  // The current pass (the step's chunk): parameters per rank of each unit in use order, the
  // all-gather issued for each, the next one to issue.
  struct PassUnit {
    std::int64_t params = 0;
    bool layer = false;  ///< a transformer layer (else the embedding or the output layer)
  };
  std::vector<PassUnit> units_;
  bool has_embedding_ = false, has_output_ = false;  ///< the chunk's ends of the model
  std::int64_t first_layer_ = 0, chunk_layers_ = 0;   ///< the chunk's global layers
  std::vector<std::size_t> layer_pos_;  ///< per local layer: its place among the pass's layers
  /// --fp8-param-gather (FSDP): the layers' weights are gathered in FP8 (1 byte; their few
  /// bf16 norm elements are neglected, as for the distributed optimizer's gathers).
  bool fp8_layers_ = false;
  /// Bytes of unit i's gathered parameters.
  std::int64_t unit_bytes(std::size_t i, std::int64_t e) const {
    return units_[i].params * (units_[i].layer && fp8_layers_ ? 1 : e);
  }
  std::vector<TaskId> gather_;
  std::size_t next_ = 0;
  TaskId wait_ = kNone;  ///< the gather the next compute block waits for
  /// Gathered bytes of each unit in use (by its place in the pass), freed at the end of the
  /// unit's last block: several at once while a checkpoint unit re-runs its layers.
  std::map<std::size_t, std::int64_t> release_;
};

/// Issues the all-gathers of the units up to `unit` + prefetch (each may start once the
/// compute issued so far is done), makes the next block wait for this unit's and its last
/// block release it.
void Zero3::begin_submodule_pass(RankContext& ctx, bool forward) {
  numel_.clear();
  tensors_.clear();
  consumers_.clear();
  live_.clear();
  protect_.clear();
  live_numel_ = 0;
  cursor_ = 0;
  if (forward) {
    add_consumer(UnitKind::Embedding, -1, false);
    for (std::int64_t l = 0; l < layers_; ++l) {
      add_consumer(UnitKind::Layer, l, false);
      add_consumer(UnitKind::Layer, l, true);
    }
    add_consumer(UnitKind::Output, -1, false);
    return;
  }
  add_consumer(UnitKind::Output, -1, false);
  for (std::int64_t l = layers_ - 1; l >= 0; --l) {
    const std::int64_t unit = ckpt_units_[std::size_t(l)];
    if (unit >= 0) {
      // A checkpoint unit's forward runs again before the backward of its last layer, each
      // layer with its own hooks.
      if (ParallelConfig::recompute_unit_end(ckpt_units_, l))
        for (std::int64_t k = unit; k <= l; ++k) {
          add_consumer(UnitKind::Layer, k, false);
          add_consumer(UnitKind::Layer, k, true);
        }
    } else if (mlp_checkpointed(ctx.scenario(), l)) {  // the checkpointed MLP module re-runs
      add_consumer(UnitKind::Layer, l, true);
    }
    add_consumer(UnitKind::Layer, l, true, true);
    add_consumer(UnitKind::Layer, l, false, true);
  }
  add_consumer(UnitKind::Embedding, -1, false);
}

/// Submodule ids: the embedding's and the output's (one each) and every layer's, numbered in
/// the order they are first met; a consumer of a layer block names the same ids each time.
void Zero3::add_consumer(UnitKind kind, std::int64_t layer, bool mlp, bool backward) {
  Consumer c{kind, layer, {}};
  // Key space: 0 embedding, 1 output, 2 + 8 l + k layer l submodule k (k < 8).
  auto ensure = [&](std::size_t id, std::int64_t numel, std::int64_t tensors) {
    if (numel_.size() <= id) numel_.resize(id + 1, 0);
    if (tensors_.size() <= id) tensors_.resize(id + 1, 0);
    numel_[id] = numel;
    tensors_[id] = tensors;
    c.subs.push_back(int(id));
  };
  if (kind == UnitKind::Embedding) {
    if (embed_fetched_ > 0) ensure(0, embed_fetched_, embed_tensors_);
  } else if (kind == UnitKind::Output) {
    if (output_fetched_ > 0) ensure(1, output_fetched_, output_tensors_);
  } else {
    const std::vector<std::int64_t>& subs = mlp ? mlp_subs_ : attn_subs_;
    const std::vector<std::int64_t>& tensors = mlp ? mlp_tensors_ : attn_tensors_;
    for (std::size_t k = 0; k < subs.size(); ++k) {
      // The backward runs a block's submodules in reverse order.
      const std::size_t i = backward ? subs.size() - 1 - k : k;
      ensure(2 + 8 * std::size_t(layer) + (mlp ? 4 : 0) + i, subs[i], tensors[i]);
    }
  }
  consumers_.push_back(std::move(c));
}

void Zero3::issue(RankContext& ctx, int sub, TaskId after) {
  const ModelDims& d = ctx.dims();
  const std::int64_t bytes = numel_[std::size_t(sub)] * d.e;
  const std::uint32_t op = ctx.add_op(ctx.comm_op(OpKind::AllGather, GroupKind::Data, bytes, d.dp));
  const Part part = sub == 0 ? Part::Embedding : sub == 1 ? Part::Logits : Part::Params;
  live_[sub] = ctx.collective(op, ctx.dp_group, StreamId::DpComm, Phase::ParamSync, part,
                              kNoIndex, kNoIndex, after, kNoIndex,
                              {{bytes - bytes / d.dp, MemCategory::Parameters}});
  // The hooks' host work for this fetch (its gather, wait and release), with the gather's issue.
  ctx.host_work(live_[sub], zero3_fetch_eager_ops(tensors_[std::size_t(sub)]),
                HostWorkCause::Zero3FetchHook);
  live_numel_ += numel_[std::size_t(sub)];
}

void Zero3::fetch(RankContext& ctx, std::size_t c, TaskId after) {
  for (int sub : consumers_[c].subs)
    if (!live_.count(sub)) issue(ctx, sub, after);
  // Prefetch (fetch_sub_module): walk the submodules to come, skipping gathered ones, while
  // fewer than the budget's elements are being prefetched.
  const ZeroConfig& z = ctx.scenario().zero;
  const std::int64_t budget =
      std::min(z.stage3_prefetch_bucket_size, z.stage3_max_live_parameters - live_numel_);
  std::int64_t prefetching = 0;
  for (std::size_t j = c + 1; j < consumers_.size() && prefetching < budget; ++j) {
    for (int sub : consumers_[j].subs) {
      if (prefetching >= budget) break;
      if (live_.count(sub)) {  // skipped: gathered already; keep it gathered until that use
        protect_[sub] = std::max(protect_[sub], j);
        continue;
      }
      issue(ctx, sub, after);
      prefetching += numel_[std::size_t(sub)];
    }
  }
}

void Zero3::release(RankContext& ctx, int sub, TaskId task) {
  const ModelDims& d = ctx.dims();
  const std::int64_t bytes = numel_[std::size_t(sub)] * d.e;
  ctx.add_effect(task, {-(bytes - bytes / d.dp), MemCategory::Parameters, true});
  live_.erase(sub);
  live_numel_ -= numel_[std::size_t(sub)];
}

void Zero3::release_after(RankContext& ctx, std::size_t c, TaskId task) {
  const std::int64_t reuse = ctx.scenario().zero.stage3_max_reuse_distance;
  for (int sub : consumers_[c].subs) {
    // Elements of the other submodules used before this one's next use in the pass.
    // DeepSpeed (__params_to_release) walks the next submodules while fewer than the reuse
    // distance's elements were traversed; a submodule met on the way stays.
    std::int64_t traversed = 0;
    bool reused = false;
    for (std::size_t j = c + 1; j < consumers_.size() && !reused; ++j) {
      for (int other : consumers_[j].subs) {
        if (traversed >= reuse) break;
        if (other == sub) reused = true;
        traversed += numel_[std::size_t(other)];
      }
      if (traversed >= reuse) break;
    }
    // A prefetch that skipped a later use of it (it was gathered) keeps it too.
    const auto p = protect_.find(sub);
    if (p != protect_.end() && p->second > c) reused = true;
    if (!reused && live_.count(sub)) release(ctx, sub, task);
  }
}

void Zero3::end_submodule_pass(RankContext&) {
  TRAINSIM_CHECK(live_.empty() && cursor_ == consumers_.size(),
                 "zero3: a pass ended with gathered parameters or blocks left");
}

void Zero3::submodule_block(RankContext& ctx, const Block& block) {
  TRAINSIM_CHECK(cursor_ < consumers_.size() && consumers_[cursor_].kind == block.unit.kind &&
                     (block.unit.kind != UnitKind::Layer ||
                      consumers_[cursor_].layer == block.unit.layer),
                 "zero3: compute block out of the order of DeepSpeed's submodule hooks");
  for (int sub : consumers_[cursor_].subs) ctx.dep(live_.at(sub), block.task);
  release_after(ctx, cursor_, block.task);
  // The pass's last block releases what is still gathered (the next pass fetches anew).
  if (cursor_ + 1 == consumers_.size())
    while (!live_.empty()) release(ctx, live_.begin()->first, block.task);
  ++cursor_;
  if (cursor_ < consumers_.size()) fetch(ctx, cursor_, block.task);
}

void Zero3::before_unit(RankContext& ctx, bool forward, const Unit& unit) {
  if (!gathers_) return;
  if (submodules_) {
    if (cursor_ == 0 && live_.empty()) fetch(ctx, 0, ctx.last_compute);  // the pass's first hook
    return;
  }
  const ModelDims& d = ctx.dims();
  const std::size_t k = index_of(forward, unit);
  const std::size_t until = std::min(units_.size(), k + 1 + std::size_t(prefetch_));
  for (; next_ < until; ++next_) {
    const std::int64_t bytes = unit_bytes(next_, d.e);
    const std::uint32_t op =
        ctx.add_op(ctx.comm_op(OpKind::AllGather, GroupKind::Data, bytes, d.dp));
    // The gathered copy (the rank's own partition is already counted in Parameters).
    gather_[next_] = ctx.collective(op, ctx.dp_group, StreamId::DpComm, Phase::ParamSync,
                                    part_of(unit), kNoIndex, kNoIndex, ctx.last_compute, kNoIndex,
                                    {{bytes - bytes / d.dp, MemCategory::Parameters}});
  }
  wait_ = gather_[k];
  const std::int64_t bytes = unit_bytes(k, d.e);
  release_[k] = bytes - bytes / d.dp;
}

void Zero3::on_block_computed(RankContext& ctx, const Block& block) {
  if (submodules_) {
    buckets_.on_block_computed(ctx, block);  // its memory effects land on the block first
    if (gathers_) submodule_block(ctx, block);
    return;
  }
  if (wait_ != kNone) {
    ctx.dep(wait_, block.task);
    wait_ = kNone;
  }
  buckets_.on_block_computed(ctx, block);
  if (!block.last || block.phase == Phase::Recompute) return;
  const auto r = release_.find(index_of(block.phase == Phase::Forward, block.unit));
  if (r == release_.end()) return;
  if (r->second > 0) ctx.add_effect(block.task, {-r->second, MemCategory::Parameters, true});
  release_.erase(r);
}

}  // namespace

double zero3_fetch_eager_ops(std::int64_t tensors) {
  // Per fetched tensor (dp_strategy.h): gather 3 (empty, narrow, view), wait 3 (work wait,
  // event record, wait_stream), release 2 (record_stream, empty(0)).
  constexpr double kEagerOpsPerTensor = 3 + 3 + 2;
  return kEagerOpsPerTensor * double(tensors);
}

std::unique_ptr<DataParallelStrategy> make_dp_zero3(const RankContext& ctx) {
  return std::make_unique<Zero3>(ctx);
}

}  // namespace trainsim::builder
