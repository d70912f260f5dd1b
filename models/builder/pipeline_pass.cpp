#include "models/builder/pipeline_pass.h"

#include <algorithm>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "models/builder/dp_strategy.h"
#include "models/builder/moe_ops.h"
#include "models/builder/offload.h"
#include "models/builder/optimizer_step.h"
#include "models/errors.h"
#include "models/perf/flops.h"
#include "models/memory/memory_model.h"
#include "models/graph/pipeline_schedule.h"
#include "models/memory/zero_offload.h"
#include "models/input/runtime.h"

namespace trainsim::builder {

namespace {

/// Where a pipeline step runs: its chunk's span (RankContext::chunk_span), its microbatch and
/// chunk index.
struct StepAt : ChunkSpan {
  std::uint16_t mb = 0;
  std::uint8_t chunk = 0;
};

/// The program of one rank, emitted in issue order by run().
class RankProgram {
 public:
  RankProgram(GraphBuild& build, const ComputeOps& ops, const TensorParallelPass& tp,
              std::uint32_t p2p_op, const RankCoords& coords)
      : ctx_(build, coords), ops_(ops), tp_(tp), p2p_op_(p2p_op),
        dp_(make_data_parallel_strategy(ctx_)),
        bytes_{layer_bytes(build.scenario, false), layer_bytes(build.scenario, true)},
        units_(build.scenario.parallel.recompute_units(build.scenario.model.num_layers)),
        batched_exchanges_(runtime_spec(build.scenario.runtime).batched_interleaved_p2p &&
                           build.scenario.parallel.pipeline_schedule ==
                               PipelineSchedule::Interleaved),
        combined_(build.scenario.parallel.overlap_moe_expert_parallel_comm),
        act_offload_(build.scenario, [this](std::int64_t l) {
          const LayerBytes& lb = bytes_of(l);
          return lb.kept.attn + lb.kept.mlp;
        }) {}

  void run() {
    const ModelDims& d = ctx_.dims();
    const std::vector<PipelineStep> steps = order();
    std::vector<PipelineExchange> exchanges;
    if (batched_exchanges_) {
      exchanges = megatron2021_interleaved_exchanges(int(d.pp), int(ctx_.coords.pp_stage),
                                                     int(d.nmb), int(d.v));
      for (const PipelineStep& step : steps) {  // the steps that receive, in order
        const StepAt s = at(step);
        if (step.forward && !s.first_vstage) inputs_[0].push_back(s);
        if (!step.forward && !s.last_vstage) inputs_[1].push_back(s);
      }
    }
    std::size_t next_exchange = 0;
    auto exchanges_after = [&](int i) {
      for (; next_exchange < exchanges.size() && exchanges[next_exchange].after_step == i;
           ++next_exchange)
        exchange(exchanges[next_exchange]);
    };
    exchanges_after(-1);
    for (std::size_t i = 0; i < steps.size(); ++i) {
      if (merged_at(steps, i)) {  // the combined 1F1B schedule's merged step
        dp_->on_step_begin(ctx_, steps[i]);
        dp_->on_step_begin(ctx_, steps[i + 1]);
        const bool backward_first = !steps[i].forward;
        combined_step(at(steps[backward_first ? i : i + 1]), at(steps[backward_first ? i + 1 : i]));
        if (step_timers_sync()) ctx_.host_sync(ctx_.last_compute, SyncCause::Timer);
        dp_->on_step_end(ctx_, steps[i]);
        dp_->on_step_end(ctx_, steps[i + 1]);
        ++i;
        continue;
      }
      dp_->on_step_begin(ctx_, steps[i]);
      if (steps[i].forward)
        forward_step(at(steps[i]));
      else
        backward_step(at(steps[i]));
      if (step_timers_sync()) ctx_.host_sync(ctx_.last_compute, SyncCause::Timer);
      dp_->on_step_end(ctx_, steps[i]);
      exchanges_after(int(i));
    }
    TRAINSIM_CHECK(next_exchange == exchanges.size() && !pending_send_[0] && !pending_send_[1] &&
                       received_[0] == inputs_[0].size() && received_[1] == inputs_[1].size(),
                   "pipeline pass: the batched exchanges of rank " + std::to_string(ctx_.rank) +
                       " do not match its steps");
    finish();
  }

 private:
  /// This rank's steps: pipeline_order, or under the combined schedule at pp > 1
  /// combined_interleaved_order (whose merged steps merged_at finds).
  std::vector<PipelineStep> order() {
    const ModelDims& d = ctx_.dims();
    const int rank = int(ctx_.coords.pp_stage);
    if (combined_ && d.pp > 1) {
      CombinedOrder o = combined_interleaved_order(int(d.pp), rank, int(d.nmb), int(d.v));
      merged_begin_ = std::size_t(o.warmup);
      merged_end_ = std::size_t(o.warmup + 2 * o.merged);
      return std::move(o.steps);
    }
    return pipeline_order(ctx_.scenario().parallel.pipeline_schedule, int(d.pp), rank,
                          int(d.nmb), int(d.v));
  }
  /// Whether steps i and i + 1 run as one merged step: at pp = 1
  /// (combined_1f1b_schedule_for_no_pipelining) microbatch k's backward and k + 1's forward; at
  /// pp > 1 the steady state's pairs of combined_interleaved_order (a forward, then a backward).
  bool merged_at(const std::vector<PipelineStep>& steps, std::size_t i) const {
    if (!combined_ || i + 1 >= steps.size()) return false;
    if (ctx_.dims().pp == 1) return !steps[i].forward && steps[i + 1].forward;
    return i >= merged_begin_ && i < merged_end_ && (i - merged_begin_) % 2 == 0;
  }
  StepAt at(const PipelineStep& step) const {
    StepAt s{ctx_.chunk_span(step.chunk)};
    s.mb = static_cast<std::uint16_t>(step.microbatch);
    s.chunk = static_cast<std::uint8_t>(step.chunk);
    return s;
  }

  void forward_step(const StepAt& s) {
    if (s.first_vstage)
      embedding_forward(s);
    else
      receive(prev_rank(), Phase::Forward, s);
    for (std::int64_t l = s.first_layer; l < s.first_layer + s.layers; ++l) {
      dp_->before_unit(ctx_, true, {UnitKind::Layer, l});
      const LayerBytes& lb = bytes_of(l);
      if (unit_start(l))  // only the unit's input is stashed; the rest is freed
        layer_forward(Phase::Forward, s, l,
                      {{lb.act.attn, MemCategory::Activations},
                       {lb.full.attn, MemCategory::Activations},
                       {-lb.full.attn, MemCategory::Activations, true}},
                      {{lb.full.mlp, MemCategory::Activations},
                       {-lb.full.mlp, MemCategory::Activations, true}});
      else if (recomputed(l))  // inside a unit: nothing stashed
        layer_forward(Phase::Forward, s, l,
                      {{lb.full.attn, MemCategory::Activations},
                       {-lb.full.attn, MemCategory::Activations, true}},
                      {{lb.full.mlp, MemCategory::Activations},
                       {-lb.full.mlp, MemCategory::Activations, true}});
      else
        layer_forward(Phase::Forward, s, l, {{lb.kept.attn, MemCategory::Activations}},
                      {{lb.kept.mlp, MemCategory::Activations}});
      act_offload_.after_forward(ctx_, s.mb, l);  // activation CPU offloading (offload.h)
    }
    if (s.last_vstage)
      output_forward(s);
    else
      send(next_rank(), Phase::Forward, s);
  }

  void backward_step(const StepAt& s) {
    if (s.last_vstage)
      output_backward(s);
    else
      receive(next_rank(), Phase::Backward, s);
    for (std::int64_t l = s.first_layer + s.layers - 1; l >= s.first_layer; --l) {
      // The DP strategy's hook at each layer's first use in the backward pass: its re-run
      // when it is checkpointed (a unit's layers in forward order), else its backward.
      if (!recomputed(l)) dp_->before_unit(ctx_, false, {UnitKind::Layer, l});
      const LayerBytes& lb = bytes_of(l);
      if (recomputed(l)) {
        // Megatron's checkpoint unit: before the backward of its last layer, the forward of
        // all its layers again (each re-materializing its activations); each layer's backward
        // then frees its own, the unit's first layer also the stashed input.
        if (unit_end(l))
          for (std::int64_t k = units_[std::size_t(l)]; k <= l; ++k) {
            dp_->before_unit(ctx_, false, {UnitKind::Layer, k});
            const LayerBytes& kb = bytes_of(k);
            layer_forward(Phase::Recompute, s, k, {{kb.full.attn, MemCategory::Activations}},
                          {{kb.full.mlp, MemCategory::Activations}});
          }
        const std::int64_t stash = unit_start(l) ? lb.act.attn : 0;
        layer_backward(s, l, {{-lb.full.mlp, MemCategory::Activations, true}},
                       {{-(lb.full.attn + stash), MemCategory::Activations, true}});
      } else if (mlp_checkpointed(ctx_.scenario(), l)) {
        // --recompute-modules mlp / moe: the MLP module's forward again (its token exchanges
        // too), re-materializing what it dropped, then the layer's backward frees all of it.
        moe_exchange(Phase::Recompute, s, l, false);
        block(moe_mlp(l) ? ops_.mlp_rerun : ops_.mlp_rerun_dense, Phase::Recompute, Part::Mlp, s,
              l, false, true, {{lb.kept.mlp_rerun, MemCategory::Activations}});
        moe_exchange(Phase::Recompute, s, l, true);
        layer_backward(s, l, {{-(lb.kept.mlp + lb.kept.mlp_rerun), MemCategory::Activations, true}},
                       {{-lb.kept.attn, MemCategory::Activations, true}});
      } else {
        act_offload_.before_backward(ctx_, s.mb, l);  // the reloads (offload.h)
        layer_backward(s, l, {{-lb.kept.mlp, MemCategory::Activations, true}},
                       {{-lb.kept.attn, MemCategory::Activations, true}});
      }
      tails_.layers[l] = ctx_.last_compute;
      dp_->on_grads_ready(ctx_, {UnitKind::Layer, l}, ctx_.last_compute);
    }
    if (s.first_vstage)
      embedding_backward(s);
    else
      send(prev_rank(), Phase::Backward, s);
  }

  /// One transformer block: its TP prologue, the compute, the DP strategy's hook, its TP
  /// epilogue.
  void block(std::uint32_t op, Phase phase, Part part, const StepAt& s, std::int64_t l,
             bool first, bool last, std::initializer_list<MemEffect> effects) {
    const auto layer = static_cast<std::uint16_t>(l);
    tp_.before_block(ctx_, phase, part, s.mb, layer);
    const TaskId before = ctx_.last_compute;
    ctx_.last_compute =
        ctx_.compute(op, phase, part, s.mb, layer, s.chunk, ctx_.last_compute, effects);
    node_work(ctx_.last_compute, phase);
    if (ctx_.dims().cp > 1 && part == Part::Attn) {  // ring attention's exchange, alongside
      const TaskId x = ctx_.collective(phase == Phase::Backward ? ops_.cp_bwd : ops_.cp_fwd,
                                       ctx_.cp_group, StreamId::TpComm, phase, part, s.mb, layer,
                                       before);
      ctx_.join_next.push_back(x);
    }
    dp_->on_block_computed(ctx_, {{UnitKind::Layer, l}, phase, first, last, ctx_.last_compute});
    tp_.after_block(ctx_, phase, part, s.mb, layer);
  }
  bool full_attention(std::int64_t l) const {
    const std::int64_t freq = ctx_.scenario().model.window_attn_skip_freq;
    return freq > 0 && (l + 1) % freq == 0;
  }
  /// The MoE layer's dispatch (`second` false) or combine on the compute path (Megatron-Core's
  /// token dispatchers wait for them). The backward runs the adjoints in reverse: first the
  /// combine's (a reduce-scatter's adjoint is an all-gather: the dispatch op), then the
  /// dispatch's (the combine op); an all-to-all is its own adjoint.
  /// With expert tensor parallelism the ETP all-gather follows the first all-to-all and the
  /// reduce-scatter precedes the second (in the backward too: the adjoint of the combine's
  /// reduce-scatter is an all-gather, of the dispatch's all-gather a reduce-scatter).
  ///
  /// Before a forward's dispatch (its re-run too) the host reads the token counts:
  /// moe_token_count_sync().
  ///
  /// model.moe_shared_expert_overlap: the shared expert's op of this side (kSharedFc1 beside
  /// the dispatch or its adjoint, kSharedFc2 beside the combine or its adjoint; a re-run
  /// forward's too) starts with the exchange, on the compute stream, behind the last compute
  /// (the pre-MLP norm's output, or the output gradient); the next compute waits for both
  /// (Megatron-Core shared_experts.py: its side stream waits on the main stream before fc1,
  /// the main stream on it after fc2). The MoE MLP op then holds no shared expert.
  void moe_exchange(Phase phase, const StepAt& s, std::int64_t l, bool second) {
    if (!moe_mlp(l)) return;
    const TaskId before = ctx_.last_compute;
    if (!second && phase != Phase::Backward && moe_token_count_sync())
      ctx_.host_sync(ctx_.last_compute, SyncCause::MoeTokenCounts);
    // Under the combined schedule the dispatcher's collectives run on their own stream.
    const StreamId stream = combined_ ? StreamId::EpComm : StreamId::TpComm;
    auto run = [&](std::uint32_t op, std::uint32_t group) {
      ctx_.last_compute = ctx_.collective(op, group, stream, phase, Part::Mlp, s.mb,
                                          std::uint16_t(l), ctx_.last_compute);
    };
    if (second && ctx_.etp_group != kNone) run(ops_.etp_scatter, ctx_.etp_group);
    if (ctx_.ep_group != kNone) {
      run(second ? ops_.moe_combine : ops_.moe_dispatch, ctx_.ep_group);
      node_work(ctx_.last_compute, phase);  // the dispatch or combine schedule node
    }
    if (!second && ctx_.etp_group != kNone) run(ops_.etp_gather, ctx_.etp_group);
    if (!ctx_.scenario().model.moe_shared_expert_overlap) return;
    const bool fc1 = second == (phase == Phase::Backward);  // forward: dispatch; bwd: 2nd
    const std::uint32_t op = phase == Phase::Backward
                                 ? (fc1 ? ops_.shared_fc1_bwd : ops_.shared_fc2_bwd)
                                 : (fc1 ? ops_.shared_fc1_fwd : ops_.shared_fc2_fwd);
    ctx_.join_next.push_back(
        ctx_.compute(op, phase, Part::Mlp, s.mb, std::uint16_t(l), s.chunk, before));
  }
  void layer_forward(Phase phase, const StepAt& s, std::int64_t l,
                     std::initializer_list<MemEffect> attn, std::initializer_list<MemEffect> mlp) {
    block(full_attention(l) ? ops_.attn_fwd_full : ops_.attn_fwd, phase, Part::Attn, s, l, true,
          false, attn);
    moe_exchange(phase, s, l, false);  // dispatch
    block(moe_mlp(l) ? ops_.mlp_fwd : ops_.mlp_fwd_dense, phase, Part::Mlp, s, l, false, true, mlp);
    moe_exchange(phase, s, l, true);  // combine
  }
  void layer_backward(const StepAt& s, std::int64_t l, std::initializer_list<MemEffect> mlp,
                      std::initializer_list<MemEffect> attn) {
    moe_exchange(Phase::Backward, s, l, false);  // the combine's adjoint
    block(moe_mlp(l) ? ops_.mlp_bwd : ops_.mlp_bwd_dense, Phase::Backward, Part::Mlp, s, l, true,
          false, mlp);
    moe_exchange(Phase::Backward, s, l, true);  // the dispatch's adjoint
    block(full_attention(l) ? ops_.attn_bwd_full : ops_.attn_bwd, Phase::Backward, Part::Attn, s,
          l, false, true, attn);
  }

  // ---- the combined 1F1B schedule (parallel.overlap_moe_expert_parallel_comm). At pp = 1
  // Megatron-Core combined_1f1b.py combined_1f1b_schedule_for_no_pipelining: microbatch 0's
  // forward alone, then microbatch k's backward beside k + 1's forward, the last backward alone.
  // At pp > 1 (virtual stages required) the interleaved schedule's steady-state steps
  // (combined_interleaved_order, models/graph/pipeline_schedule.h); its warm-up forwards and
  // cool-down backwards run alone (forward_step / backward_step, their exchanges on the EP
  // stream and their schedule nodes' host work as in a merged step).

  /// The host work of one ScheduleNode call beyond its ops' issue (Megatron-Core
  /// pipeline_parallel/utils.py ScheduleNode, Megatron-LM d98e8a6): stream_acquire_context's
  /// event.wait, torch.cuda.stream enter and exit and event.record (4), then in the forward
  /// the input's detach (5 in all), in the backward a separate autograd engine call
  /// (run_backward, default_backward_func) and the gradient's record_stream (6 in all); at the
  /// profile's eager_op_s each (the engine call's own start-up is not measured: a lower bound).
  /// One node per attention (pre_dispatch_computation), dispatch, MLP and combine of each layer,
  /// and the embedding and output; only under the combined schedule.
  void node_work(TaskId task, Phase phase) {
    if (!combined_) return;
    constexpr double kForwardNodeOps = 5, kBackwardNodeOps = 6;
    ctx_.host_work(task, phase == Phase::Backward ? kBackwardNodeOps : kForwardNodeOps,
                   HostWorkCause::ScheduleNode);
  }
  /// TransformerModelChunkSchedulePlan.run (Megatron-LM d98e8a6
  /// models/common/model_chunk_schedule_plan.py l. 500-620): the forward's input (pre_forward:
  /// its pipeline receive, then the embedding on the first virtual stage) and the backward's
  /// (pre_backward: its gradient's receive, then the output layer on the last virtual stage);
  /// then forward layer i beside backward layer L_b - 1 - i for i < min(L_f, L_b), the
  /// backward's remaining layers alone, the forward's remaining layers alone; then post_forward
  /// (the forward's send) and post_backward (the backward's send), the forward's output layer
  /// on the last virtual stage and the backward's embedding on the first. The two chains are
  /// separate: each task waits for its own chain, the compute tasks for the compute stream's
  /// order, the all-to-alls for the EP stream's. The pipeline messages are posted as
  /// receive() / send() post them outside the combined schedule.
  void combined_step(const StepAt& b, const StepAt& f) {
    Chains c{ctx_.last_compute, ctx_.last_compute};
    on_chain(c.f, [&] {
      if (f.first_vstage) embedding_forward(f);
      else receive(prev_rank(), Phase::Forward, f);
    });
    on_chain(c.b, [&] {
      if (b.last_vstage) output_backward(b, false);
      else receive(next_rank(), Phase::Backward, b);
    });
    const std::vector<std::int64_t> fl = plan_layers(f);
    std::vector<std::int64_t> bl = plan_layers(b);
    std::reverse(bl.begin(), bl.end());
    const std::size_t both = std::min(fl.size(), bl.size());
    for (std::size_t i = 0; i < both; ++i) combined_layer(b, f, bl[i], fl[i], c);
    for (std::size_t i = both; i < bl.size(); ++i) combined_layer(b, f, bl[i], -1, c);
    for (std::size_t i = both; i < fl.size(); ++i) combined_layer(b, f, -1, fl[i], c);
    on_chain(c.f, [&] {
      if (f.last_vstage) output_forward(f, false);
      else send(next_rank(), Phase::Forward, f);
    });
    on_chain(c.b, [&] {
      if (b.first_vstage) embedding_backward(b);
      else send(prev_rank(), Phase::Backward, b);
    });
    ctx_.last_compute = c.b;  // the last compute task issued (the compute stream's order)
  }
  /// The layers of a chunk's schedule plan in forward order: its decoder layers, then on the last
  /// virtual stage the MTP layers (model_chunk_schedule_plan.py l. 418-423).
  std::vector<std::int64_t> plan_layers(const StepAt& s) const {
    std::vector<std::int64_t> out;
    for (std::int64_t l = s.first_layer; l < s.first_layer + s.layers; ++l) out.push_back(l);
    const ModelConfig& m = ctx_.scenario().model;
    if (s.last_vstage)
      for (std::int64_t k = 0; k < m.mtp_num_layers; ++k) out.push_back(m.num_layers + k);
    return out;
  }
  struct Chains {
    TaskId f, b;  ///< the last task of the forward's and of the backward's chain
  };
  template <typename Fn>
  void on_chain(TaskId& chain, Fn fn) {
    ctx_.last_compute = chain;
    fn();
    chain = ctx_.last_compute;
  }
  /// TransformerLayerSchedulePlan.run (model_chunk_schedule_plan.py l. 236-300), in its issue
  /// order: comm stream: combine_bwd | dispatch_fwd, dispatch_bwd | combine_fwd; compute
  /// stream: pre_dispatch_fwd (attention) | mlp_bwd, mlp_bwd_dw, mlp_fwd | pre_dispatch_bwd.
  /// Backward layer `bl` beside forward layer `fl`; -1: that side has no layer (run alone, as
  /// Megatron runs a chunk's remaining layers with the other side None).
  /// With delay_wgrad_compute the MoE MLP backward's expert weight-gradient GEMMs are their own
  /// task (mlp.backward_dw) after the forward's dispatch is issued; the backward's dispatch
  /// waits only for the data gradient. A dense MLP checkpointed by recompute_modules 'mlp'
  /// runs its forward again before its backward (Megatron-Core's CheckpointWithoutOutput
  /// recomputes it inside the MLP node's backward), on the backward's chain.
  void combined_layer(const StepAt& b, const StepAt& f, std::int64_t bl, std::int64_t fl,
                      Chains& c) {
    const bool fwd = fl >= 0, bwd = bl >= 0;
    const LayerBytes& fb = bytes_of(fwd ? fl : 0);
    const LayerBytes& bb = bytes_of(bwd ? bl : 0);
    const bool split = bwd && moe_mlp(bl) && ctx_.scenario().parallel.delay_wgrad_compute;
    const bool rerun = bwd && mlp_checkpointed(ctx_.scenario(), bl);
    const MemEffect free_mlp{-(bb.kept.mlp + (rerun ? bb.kept.mlp_rerun : 0)),
                             MemCategory::Activations, true};
    const std::int64_t mtp_from = ctx_.scenario().model.num_layers;  // MTP layers' indices
    if (bwd) on_chain(c.b, [&] {
      if (bl >= mtp_from) mtp_head_backward(b, bl);
      dp_->before_unit(ctx_, false, {UnitKind::Layer, bl});
      moe_exchange(Phase::Backward, b, bl, false);  // combine_bwd
    });
    if (fwd) on_chain(c.f, [&] {
      if (fl >= mtp_from) mtp_input_forward(f, fl);
      dp_->before_unit(ctx_, true, {UnitKind::Layer, fl});
      block(full_attention(fl) ? ops_.attn_fwd_full : ops_.attn_fwd, Phase::Forward, Part::Attn, f,
            fl, true, false, {{fb.kept.attn, MemCategory::Activations}});
    });
    if (bwd) on_chain(c.b, [&] {
      if (rerun)
        block(moe_mlp(bl) ? ops_.mlp_rerun : ops_.mlp_rerun_dense, Phase::Recompute, Part::Mlp, b,
              bl, false, true, {{bb.kept.mlp_rerun, MemCategory::Activations}});
      if (split)
        block(ops_.mlp_bwd_dgrad, Phase::Backward, Part::Mlp, b, bl, true, false, {});
      else
        block(moe_mlp(bl) ? ops_.mlp_bwd : ops_.mlp_bwd_dense, Phase::Backward, Part::Mlp, b, bl,
              true, false, {free_mlp});
    });
    if (fwd) on_chain(c.f, [&] { moe_exchange(Phase::Forward, f, fl, false); });  // dispatch_fwd
    if (split) {  // mlp.backward_dw: off the backward's chain (the compute stream orders it)
      TaskId dw = c.b;
      on_chain(dw, [&] {
        block(ops_.mlp_bwd_wgrad, Phase::Backward, Part::Mlp, b, bl, false, false, {free_mlp});
      });
    }
    if (bwd) on_chain(c.b, [&] { moe_exchange(Phase::Backward, b, bl, true); });  // dispatch_bwd
    if (fwd) on_chain(c.f, [&] {
      block(moe_mlp(fl) ? ops_.mlp_fwd : ops_.mlp_fwd_dense, Phase::Forward, Part::Mlp, f, fl,
            false, true, {{fb.kept.mlp, MemCategory::Activations}});
      moe_exchange(Phase::Forward, f, fl, true);  // combine_fwd
      if (fl >= mtp_from) mtp_head_forward(f, fl);
    });
    if (bwd) on_chain(c.b, [&] {
      block(full_attention(bl) ? ops_.attn_bwd_full : ops_.attn_bwd, Phase::Backward, Part::Attn,
            b, bl, false, true, {{-bb.kept.attn, MemCategory::Activations, true}});
      if (bl >= mtp_from) mtp_input_backward(b, bl);
      tails_.layers[bl] = ctx_.last_compute;
      dp_->on_grads_ready(ctx_, {UnitKind::Layer, bl}, ctx_.last_compute);
    });
  }

  /// A single-block unit (embedding, output layer): the DP strategy's hooks around it.
  void unit_block(std::uint32_t op, Phase phase, Part part, const StepAt& s, UnitKind kind,
                  std::initializer_list<MemEffect> effects) {
    dp_->before_unit(ctx_, phase == Phase::Forward, {kind});
    ctx_.last_compute =
        ctx_.compute(op, phase, part, s.mb, kNoIndex, s.chunk, ctx_.last_compute, effects);
    node_work(ctx_.last_compute, phase);
    dp_->on_block_computed(ctx_, {{kind}, phase, true, true, ctx_.last_compute});
  }
  void embedding_forward(const StepAt& s) {
    unit_block(ops_.embed_fwd, Phase::Forward, Part::Embedding, s, UnitKind::Embedding,
               {{embedding_dropout_mask_bytes(ctx_.scenario()), MemCategory::Activations}});
  }
  void embedding_backward(const StepAt& s) {
    unit_block(ops_.embed_bwd, Phase::Backward, Part::Embedding, s, UnitKind::Embedding,
               {{-embedding_dropout_mask_bytes(ctx_.scenario()), MemCategory::Activations, true}});
    tails_.embedding = ctx_.last_compute;
    dp_->on_grads_ready(ctx_, {UnitKind::Embedding}, ctx_.last_compute);
  }
  /// `mtp` false: the MTP layers ran as layers of a merged step (combined_step).
  void output_forward(const StepAt& s, bool mtp = true) {
    if (mtp) mtp_forward(s);
    tp_.before_block(ctx_, Phase::Forward, Part::Logits, s.mb, kNoIndex);
    unit_block(ops_.logits_fwd, Phase::Forward, Part::Logits, s, UnitKind::Output,
               {{logits_activation_bytes(ctx_.scenario()), MemCategory::Activations}});
    tp_.after_loss(ctx_, s.mb);
  }
  void output_backward(const StepAt& s, bool mtp = true) {
    const std::int64_t logits = logits_activation_bytes(ctx_.scenario());
    const std::int64_t grad = logits_gradient_bytes(ctx_.scenario());
    tp_.before_output_backward(ctx_, s.mb);  // the input, re-gathered for the weight gradient
    unit_block(ops_.logits_bwd, Phase::Backward, Part::Logits, s, UnitKind::Output,
               {{grad, MemCategory::Activations},
                {-logits - grad, MemCategory::Activations, true}});
    tails_.output = ctx_.last_compute;
    tp_.after_block(ctx_, Phase::Backward, Part::Logits, s.mb, kNoIndex);  // input gradient
    dp_->on_grads_ready(ctx_, {UnitKind::Output}, ctx_.last_compute);
    if (mtp) mtp_backward(s);
  }

  /// Multi-token prediction (model.mtp_num_layers; Megatron-Core GPTModel with
  /// MultiTokenPredictionBlock): after the decoder's layers, per MTP layer k (global layer
  /// index num_layers + k) its input (mtp_input: embedding of the shifted tokens, norms,
  /// eh_proj), its transformer layer (with the MoE layer's token exchanges) and its own pass
  /// through the shared output head and loss; then the main output layer. The backward runs
  /// them in reverse after the main output layer's. Each MTP layer keeps its transformer
  /// layer's activations as selective recomputation leaves them (its checkpointed MLP re-runs as
  /// any layer's; full recomputation does not reach it: all kept, none re-run), the eh_proj
  /// input (2 h per token) and a logits output like the main head's. Not modelled: the tensor-parallel gathers
  /// around eh_proj and the MTP head (docs/scenario.md mtp_num_layers).
  std::int64_t mtp_input_bytes() const {
    const ModelDims& d = ctx_.dims();
    return 2 * d.act_bytes;  // [enorm(embedding), hnorm(hidden)] over T tokens
  }
  /// An MTP layer's own pieces: its input (embedding, norms, eh_proj) and its pass through the
  /// output head and loss, forward and backward. In a merged step they are Megatron-Core's MTP
  /// layer plan's (model_chunk_schedule_plan.py l. 31-56, 236-300): the input inside
  /// pre_dispatch_computation, the head as mtp_post_process after the combine (backward: before
  /// the combine's adjoint).
  void mtp_input_forward(const StepAt& s, std::int64_t l) {
    ctx_.last_compute = ctx_.compute(ops_.mtp_input_fwd, Phase::Forward, Part::Embedding, s.mb,
                                     std::uint16_t(l), s.chunk, ctx_.last_compute,
                                     {{mtp_input_bytes(), MemCategory::Activations}});
  }
  void mtp_head_forward(const StepAt& s, std::int64_t l) {
    ctx_.last_compute = ctx_.compute(
        ops_.logits_fwd, Phase::Forward, Part::Logits, s.mb, std::uint16_t(l), s.chunk,
        ctx_.last_compute, {{logits_activation_bytes(ctx_.scenario()), MemCategory::Activations}});
  }
  void mtp_head_backward(const StepAt& s, std::int64_t l) {
    const std::int64_t logits = logits_activation_bytes(ctx_.scenario());
    const std::int64_t grad = logits_gradient_bytes(ctx_.scenario());
    ctx_.last_compute = ctx_.compute(
        ops_.logits_bwd, Phase::Backward, Part::Logits, s.mb, std::uint16_t(l), s.chunk,
        ctx_.last_compute,
        {{grad, MemCategory::Activations}, {-logits - grad, MemCategory::Activations, true}});
  }
  void mtp_input_backward(const StepAt& s, std::int64_t l) {
    ctx_.last_compute = ctx_.compute(ops_.mtp_input_bwd, Phase::Backward, Part::Embedding, s.mb,
                                     std::uint16_t(l), s.chunk, ctx_.last_compute,
                                     {{-mtp_input_bytes(), MemCategory::Activations, true}});
  }
  void mtp_forward(const StepAt& s) {
    const ModelConfig& m = ctx_.scenario().model;
    for (std::int64_t k = 0; k < m.mtp_num_layers; ++k) {
      const std::int64_t l = m.num_layers + k;
      mtp_input_forward(s, l);
      dp_->before_unit(ctx_, true, {UnitKind::Layer, l});
      const LayerBytes& lb = bytes_of(l);
      layer_forward(Phase::Forward, s, l, {{lb.kept.attn, MemCategory::Activations}},
                    {{lb.kept.mlp, MemCategory::Activations}});
      mtp_head_forward(s, l);
    }
  }
  void mtp_backward(const StepAt& s) {
    const ModelConfig& m = ctx_.scenario().model;
    for (std::int64_t k = m.mtp_num_layers - 1; k >= 0; --k) {
      const std::int64_t l = m.num_layers + k;
      mtp_head_backward(s, l);
      dp_->before_unit(ctx_, false, {UnitKind::Layer, l});
      const LayerBytes& lb = bytes_of(l);
      std::int64_t rerun = 0;
      if (mlp_checkpointed(ctx_.scenario(), l)) {  // --recompute-modules moe / mlp, as any layer
        rerun = lb.kept.mlp_rerun;
        moe_exchange(Phase::Recompute, s, l, false);
        block(moe_mlp(l) ? ops_.mlp_rerun : ops_.mlp_rerun_dense, Phase::Recompute, Part::Mlp, s,
              l, false, true, {{rerun, MemCategory::Activations}});
        moe_exchange(Phase::Recompute, s, l, true);
      }
      layer_backward(s, l, {{-(lb.kept.mlp + rerun), MemCategory::Activations, true}},
                     {{-lb.kept.attn, MemCategory::Activations, true}});
      mtp_input_backward(s, l);
      tails_.layers[l] = ctx_.last_compute;
      dp_->on_grads_ready(ctx_, {UnitKind::Layer, l}, ctx_.last_compute);
    }
  }

  // ---- pipeline messages
  /// The rank holding the previous virtual stage (same TP and DP coordinates); from stage 0
  /// that is the last stage (chunk k - 1 of the interleaved schedule).
  std::int64_t prev_rank() const {
    const RankCoords& c = ctx_.coords;
    const std::int64_t stage = c.pp_stage > 0 ? c.pp_stage - 1 : ctx_.dims().pp - 1;
    return ctx_.layout().rank_of({c.tp_rank, c.dp_rank, stage});
  }
  std::int64_t next_rank() const {
    const RankCoords& c = ctx_.coords;
    const std::int64_t stage = c.pp_stage < ctx_.dims().pp - 1 ? c.pp_stage + 1 : 0;
    return ctx_.layout().rank_of({c.tp_rank, c.dp_rank, stage});
  }
  void receive(std::int64_t from, Phase phase, const StepAt& s) {
    if (batched_exchanges_) {  // received by an earlier exchange, which the compute waited for
      const int dir = phase == Phase::Forward ? 0 : 1;
      TRAINSIM_CHECK(consumed_[dir] < received_[dir],
                     "pipeline pass: rank " + std::to_string(ctx_.rank) +
                         " reaches a step before the exchange that receives its input");
      ++consumed_[dir];
      return;
    }
    ctx_.last_compute = ctx_.message(p2p_op_, TaskKind::Recv, from, phase, s.mb, s.chunk);
    tp_.after_receive(ctx_, phase, s.mb);
  }
  /// The exchanges of the non-interleaved schedules are waited on: Megatron-LM 2021
  /// (megatron/p2p_communication.py, commit a8d172b) synchronises the device after each
  /// batch_isend_irecv, and Megatron-Core (pipeline_parallel/p2p_communication.py _communicate)
  /// waits on the requests (wait_on_reqs; overlap_p2p_comm is off without interleaving, and
  /// batch_p2p_sync synchronises): the next compute starts once the message is delivered. In
  /// 1F1B that is the exchange send_forward_recv_backward / send_backward_recv_forward between
  /// a forward and a backward, which this rank's receive queue posts in the same order.
  /// Megatron-LM 2021's interleaved schedule exchanges in batches (exchange()); Megatron-Core's
  /// (overlap_p2p_comm) does not wait on its sends.
  void send(std::int64_t to, Phase phase, const StepAt& s) {
    if (batched_exchanges_) {  // sent by the exchange that follows the step (or the pair)
      pending_send_[phase == Phase::Forward ? 0 : 1] = s;
      return;
    }
    const TaskId id = ctx_.message(p2p_op_, TaskKind::Send, to, phase, s.mb, s.chunk);
    if (ctx_.scenario().parallel.pipeline_schedule != PipelineSchedule::Interleaved)
      ctx_.unwaited_sends.push_back(id);
  }
  /// One exchange of Megatron-LM 2021's interleaved schedule (pipeline_schedule.h
  /// megatron2021_interleaved_exchanges): megatron/p2p_communication.py _communicate posts the
  /// sends and receives together (torch.distributed.batch_isend_irecv), waits for them and
  /// calls torch.cuda.synchronize(), then (scatter/gather) all-gathers each received tensor
  /// over the tensor-parallel group. So the rank's next compute starts when every message of
  /// the batch is delivered, including its own sends: a send waits for the peer to reach the
  /// exchange that receives it. A receive is labelled with the step that will use it.
  void exchange(const PipelineExchange& x) {
    std::vector<TaskId> batch;
    const auto send_pending = [&](int dir, std::int64_t to, Phase phase) {
      TRAINSIM_CHECK(pending_send_[dir].has_value(),
                     "pipeline pass: an exchange sends a tensor no step produced");
      batch.push_back(ctx_.message(p2p_op_, TaskKind::Send, to, phase, pending_send_[dir]->mb,
                                   pending_send_[dir]->chunk));
      pending_send_[dir].reset();
    };
    if (x.send_forward) send_pending(0, next_rank(), Phase::Forward);
    if (x.send_backward) send_pending(1, prev_rank(), Phase::Backward);
    TRAINSIM_CHECK(!pending_send_[0] && !pending_send_[1],
                   "pipeline pass: a step's output is not sent by its exchange");
    struct Received {
      TaskId task;
      Phase phase;
      std::uint16_t mb;
    };
    std::vector<Received> recvs;
    const auto recv_next_input = [&](int dir, std::int64_t from, Phase phase) {
      TRAINSIM_CHECK(received_[dir] < inputs_[dir].size(),
                     "pipeline pass: an exchange receives more than the steps use");
      const StepAt& s = inputs_[dir][received_[dir]++];
      recvs.push_back({ctx_.message(p2p_op_, TaskKind::Recv, from, phase, s.mb, s.chunk), phase,
                       s.mb});
      batch.push_back(recvs.back().task);
    };
    if (x.recv_forward) recv_next_input(0, prev_rank(), Phase::Forward);
    if (x.recv_backward) recv_next_input(1, next_rank(), Phase::Backward);
    const TaskId before = ctx_.last_compute;
    for (const Received& r : recvs) {  // gather_split_1d_tensor after the synchronize
      ctx_.last_compute = r.task;
      tp_.after_receive(ctx_, r.phase, r.mb);
      if (ctx_.last_compute == r.task) {  // no gather
        ctx_.last_compute = before;
      } else {
        for (TaskId b : batch)
          if (b != r.task) ctx_.dep(b, ctx_.last_compute);
      }
    }
    for (TaskId b : batch) ctx_.join_next.push_back(b);  // torch.cuda.synchronize()
  }

  // ---- after the last step
  void finish() {
    ctx_.build().initial_memory[ctx_.rank] = dp_->initial_memory(ctx_);
    const TaskId final_compute = ctx_.last_compute;
    TaskId last_sync = dp_->reduce_gradients(ctx_, tails_);
    last_sync = non_tensor_parallel_allreduce(final_compute, last_sync);
    last_sync = tied_embedding_allreduce(final_compute, last_sync);
    // Megatron-Core's forward-backward timer (log level 1, training.py train_step) stops after
    // the schedule, whose finalize_model_grads ends the gradient synchronisation.
    if (ctx_.scenario().runtime != Runtime::Megatron2021 && ctx_.scenario().timing_log_level >= 1)
      ctx_.host_sync(last_sync != kNone ? last_sync : final_compute, SyncCause::Timer);
    const OptimizerStepInputs inputs = dp_->optimizer_step(ctx_);
    last_sync = optimizer_reductions(final_compute, last_sync);
    last_sync = deepspeed_reductions(final_compute, last_sync, inputs);
    const OptimizerStepTasks step = emit_optimizer_step(ctx_, inputs, final_compute, last_sync);
    dp_->after_optimizer_step(ctx_, step);
  }

  /// Megatron's optimizer (Megatron-LM 2021, commit a8d172b: megatron/optimizer/optimizer.py
  /// _unscale_main_grads_and_check_for_nan, megatron/optimizer/clip_grads.py
  /// clip_grad_norm_fp32; Megatron-Core keeps both) reduces two scalars over the model-parallel
  /// group before the step, each followed by a host read (.item()): with fp16 the found-inf flag
  /// of the dynamic loss scaler (MAX), and with clip_grad > 0 the squared gradient norm (SUM).
  /// Their kernels (unscale, l2norm) are in the step's memory pass (flops.cpp). DeepSpeed's
  /// ZeRO optimizers reduce over other groups (deepspeed_reductions); FSDP's are not emitted.
  TaskId optimizer_reductions(TaskId final_compute, TaskId last_sync) {
    const Scenario& sc = ctx_.scenario();
    if (sc.zero.stage != 0 || sc.parallel.uses_fsdp()) return last_sync;
    const ModelDims& d = ctx_.dims();
    const int count =
        (d.precision == Precision::FP16 ? 1 : 0) + (sc.parallel.clip_grad > 0 ? 1 : 0);
    TaskId prev = last_sync;
    for (int i = 0; i < count; ++i) {
      prev = model_parallel_reduction(4, final_compute, prev);
      // The .item() of each scalar (found_inf first with fp16, then the norm): after its
      // reduction, or after the gradient sync when the group is one rank.
      const bool found_inf = i == 0 && d.precision == Precision::FP16;
      ctx_.host_sync(prev != kNone ? prev : final_compute,
                     found_inf ? SyncCause::LossScaleItem : SyncCause::GradNormItem);
    }
    return prev;
  }

  /// DeepSpeed's ZeRO optimizers (v0.19.5, deepspeed/runtime/zero/stage_1_and_2.py step(),
  /// has_overflow, get_grad_norm_direct / complete_grad_norm_calculation_for_cpu_offload;
  /// stage3.py step(), _overflow_check_and_loss_scale_update, _get_norm_groups): with fp16
  /// (engine.py: check_grad_overflow) the overflow flag, a 1-byte MAX all-reduce over the
  /// data-parallel group and then over the model-parallel group (when it has more than one
  /// rank); then, whether or not gradients are clipped, one fp32 norm per optimizer group, a
  /// 4-byte SUM all-reduce over the same two groups. Groups: stage 3 steps sub-groups of
  /// sub_group_size elements of the rank's partition (_create_fp16_sub_groups, taken here as
  /// ceil(partition / sub_group_size)); stages 1 and 2 step the client's parameter groups,
  /// taken as one (deepspeed.initialize(model.parameters())).
  TaskId deepspeed_reductions(TaskId final_compute, TaskId last_sync,
                              const OptimizerStepInputs& inputs) {
    const Scenario& sc = ctx_.scenario();
    if (sc.zero.stage == 0 || sc.parallel.uses_fsdp()) return last_sync;
    const ModelDims& d = ctx_.dims();
    const std::int64_t partition = inputs.gpu_params + inputs.cpu_params;
    const std::int64_t sub = std::max<std::int64_t>(1, sc.zero.sub_group_size);
    const std::int64_t norms =
        sc.zero.stage == 3 ? std::max<std::int64_t>(1, (partition + sub - 1) / sub) : 1;
    std::vector<std::int64_t> bytes;
    if (d.precision == Precision::FP16) bytes.push_back(1);
    for (std::int64_t i = 0; i < norms; ++i) bytes.push_back(4);
    TaskId prev = last_sync;
    for (const std::int64_t b : bytes) {
      if (d.dp > 1) {
        const std::uint32_t op = ctx_.add_op(ctx_.comm_op(OpKind::AllReduce, GroupKind::Data, b, d.dp));
        const TaskId id = ctx_.collective(op, ctx_.dp_group, StreamId::DpComm, Phase::Optimizer,
                                          Part::Params, kNoIndex, kNoIndex, final_compute);
        ctx_.dep(prev, id);
        prev = id;
      }
      prev = model_parallel_reduction(b, final_compute, prev);
    }
    return prev;
  }

  /// One all-reduce of `bytes` over this replica's model-parallel group (TP x PP), after
  /// `prev`; nothing when the group is one rank.
  TaskId model_parallel_reduction(std::int64_t bytes, TaskId final_compute, TaskId prev) {
    const ModelDims& d = ctx_.dims();
    if (d.t * d.pp <= 1) return prev;
    if (mp_group_ == kNoGroup) {  // this replica's TP x PP ranks, built once per rank
      const RankCoords& c = ctx_.coords;
      std::vector<RankId> ranks;
      for (std::int64_t p = 0; p < d.pp; ++p)
        for (std::int64_t t = 0; t < d.t; ++t)
          ranks.push_back(RankId(ctx_.layout().rank_of({t, c.dp_rank, p})));
      std::sort(ranks.begin(), ranks.end());
      mp_group_ = ctx_.add_group(GroupKind::ModelParallel, ranks);
    }
    const std::uint32_t op = ctx_.add_op(
        ctx_.comm_op(OpKind::AllReduce, GroupKind::ModelParallel, bytes, d.t * d.pp));
    const TaskId id = ctx_.collective(op, mp_group_, StreamId::DpComm, Phase::Optimizer,
                                      Part::Params, kNoIndex, kNoIndex, final_compute);
    ctx_.dep(prev, id);
    return id;
  }

  /// Megatron-Core's finalize_model_grads (finalize_model_grads.py, after finish_grad_sync):
  /// _allreduce_non_tensor_model_parallel_grads sums, over the tensor-parallel group, the
  /// gradients of the parameters replicated over it that saw only part of the work
  /// (tp_reduced_grad_params: with sequence parallelism the norms, row-parallel biases, the
  /// router and MLA's down projections; the q/k norms of qk_layernorm), flattened into one
  /// all-reduce of their main_grad elements. Megatron-Core's data-parallel paths (DDP and the
  /// distributed optimizer); Megatron-FSDP reduces the local shards and is not emitted here.
  TaskId non_tensor_parallel_allreduce(TaskId final_compute, TaskId last_sync) {
    const Scenario& sc = ctx_.scenario();
    if (!runtime_spec(sc.runtime).finalize_grads_tp_allreduce || sc.zero.stage != 0 ||
        sc.parallel.uses_fsdp())
      return last_sync;
    const std::int64_t params = tp_reduced_grad_params(sc, ctx_.coords.pp_stage);
    if (params == 0) return last_sync;
    const std::uint32_t op = ctx_.add_op(ctx_.comm_op(
        OpKind::AllReduce, GroupKind::Tensor, params * grad_element_bytes(sc), ctx_.dims().t));
    const TaskId id = ctx_.collective(op, ctx_.tp_group, StreamId::DpComm, Phase::GradSync,
                                      Part::Gradients, kNoIndex, kNoIndex, final_compute);
    ctx_.dep(last_sync, id);
    return id;
  }

  /// Tied embeddings (or multi-token prediction): the first and last stage hold copies of the
  /// word embedding; their gradients are all-reduced after the DP reduction (Megatron
  /// _allreduce_embedding_grads).
  TaskId tied_embedding_allreduce(TaskId final_compute, TaskId last_sync) {
    const ModelDims& d = ctx_.dims();
    const RankCoords& c = ctx_.coords;
    const ModelConfig& m = ctx_.scenario().model;
    const bool holds_copy = c.pp_stage == 0 || c.pp_stage == d.pp - 1;
    // Multi-token prediction looks up the word embedding on the last stage as well: its copy
    // there is kept in sync the same way, tied or not (Megatron-Core finalize_model_grads.py
    // _allreduce_word_embedding_grads, mtp_process).
    const bool shared = !m.untie_embeddings_and_output_weights || m.mtp_num_layers > 0;
    if (d.pp <= 1 || !shared || !holds_copy) return last_sync;
    const std::uint32_t group = ctx_.add_group(
        GroupKind::Embedding, {RankId(ctx_.layout().rank_of({c.tp_rank, c.dp_rank, 0})),
                               RankId(ctx_.layout().rank_of({c.tp_rank, c.dp_rank, d.pp - 1}))});
    const std::int64_t bytes =
        word_embedding_params_per_rank(m, d.t) * grad_element_bytes(ctx_.scenario());
    const std::uint32_t op =
        ctx_.add_op(ctx_.comm_op(OpKind::AllReduce, GroupKind::Embedding, bytes, 2));
    const TaskId id = ctx_.collective(op, group, StreamId::DpComm, Phase::GradSync, Part::Embedding,
                                      kNoIndex, kNoIndex, final_compute);
    ctx_.dep(last_sync, id);
    return id;
  }

  RankContext ctx_;
  const ComputeOps& ops_;
  const TensorParallelPass& tp_;
  const std::uint32_t p2p_op_;
  std::unique_ptr<DataParallelStrategy> dp_;
  /// A layer's activation bytes (models/memory/memory_model.h): `act` kept until its backward under
  /// the scenario's recomputation, `full` all of them (what a recomputed layer materializes
  /// again), `kept` what a layer that is not recomputed keeps (under `full`: a layer the block
  /// method leaves out keeps all of it).
  struct LayerBytes {
    LayerActivationBytes act, full, kept;
  };
  static LayerBytes layer_bytes(const Scenario& sc, bool moe_layer) {
    LayerBytes out;
    out.act = layer_activation_bytes(sc, moe_layer);
    out.full = layer_activation_bytes_no_recompute(sc, moe_layer);
    out.kept = sc.parallel.recompute_granularity == Recompute::Full ? out.full : out.act;
    return out;
  }
  bool moe_mlp(std::int64_t l) const { return ctx_.dims().moe_layer(l); }
  /// The forward-compute / backward-compute timers of each microbatch step synchronise
  /// (timers.py Timer.stop: torch.cuda.synchronize()): always in Megatron-LM 2021 (commit
  /// a8d172b schedules.py forward_step / backward_step time every step; its timers have no
  /// level), at timing_log_level 2 in Megatron-Core (schedules.py log_level=2).
  bool step_timers_sync() const {
    const Scenario& sc = ctx_.scenario();
    return sc.runtime == Runtime::Megatron2021 || sc.timing_log_level >= 2;
  }
  /// Megatron-Core's alltoall dispatcher (token_dispatcher.py MoEAlltoAllTokenDispatcher
  /// preprocess) copies the token counts to the host and synchronises once per forward of an
  /// MoE layer (cuda_sync_point "before_ep_alltoall" dropless with EP > 1 or several local
  /// experts, "before_permutation_1" with a capacity factor and no padding, "before_finish"
  /// otherwise), except with drop-and-pad, whose split sizes are the static capacity. Its
  /// backward reuses the host split sizes (no sync). The sync is placed after the task before
  /// the dispatch (the router runs inside the MLP task here). The allgather dispatcher is
  /// not given one.
  bool moe_token_count_sync() const {
    const ModelConfig& m = ctx_.scenario().model;
    // DeepEP's normal dispatch (the flex dispatcher) waits on the host for the received-token
    // count too: "the CPU will wait for GPU's signal to arrive" (deepseek-ai/DeepEP
    // docs/legacy.md, dispatch_forward; csrc/deep_ep.cpp Buffer::internode_dispatch polls
    // moe_recv_counter); the backward's dispatch reuses the handle without it.
    if (m.moe_token_dispatcher_type == MoeDispatcher::Flex) return true;
    return m.moe_token_dispatcher_type == MoeDispatcher::AllToAll &&
           !(m.moe_expert_capacity_factor > 0 && m.moe_pad_expert_input_to_capacity);
  }
  const LayerBytes& bytes_of(std::int64_t l) const { return bytes_[moe_mlp(l) ? 1 : 0]; }

  const LayerBytes bytes_[2];  ///< [0] a dense layer's, [1] an MoE layer's
  /// Per global layer: the first layer of its checkpoint unit under full recomputation, -1
  /// for a layer that keeps its activations (`kept`) (ParallelConfig::recompute_units).
  const std::vector<std::int64_t> units_;
  bool recomputed(std::int64_t l) const { return units_[std::size_t(l)] >= 0; }
  /// The unit's first layer (its input is the unit's stash) and its last (the unit's forward
  /// runs again before its backward).
  bool unit_start(std::int64_t l) const { return units_[std::size_t(l)] == l; }
  bool unit_end(std::int64_t l) const { return ParallelConfig::recompute_unit_end(units_, l); }
  /// Megatron-LM 2021's interleaved schedule exchanges in batches (exchange()).
  const bool batched_exchanges_;
  /// parallel.overlap_moe_expert_parallel_comm: the combined 1F1B schedule.
  const bool combined_;
  /// pp > 1: the steps [merged_begin_, merged_end_) are combined_interleaved_order's merged pairs.
  std::size_t merged_begin_ = 0, merged_end_ = 0;
  ActivationOffload act_offload_;  ///< activation CPU offloading (off: does nothing)
  /// Batched exchanges, per direction (0: forward activations, 1: backward gradients): the
  /// steps that receive, in order; how many of them an exchange has received and how many
  /// steps have started on theirs; the output of the last step, until its exchange sends it.
  std::vector<StepAt> inputs_[2];
  std::size_t received_[2] = {0, 0}, consumed_[2] = {0, 0};
  std::optional<StepAt> pending_send_[2];
  BackwardTails tails_;
  static constexpr std::uint32_t kNoGroup = ~std::uint32_t(0);
  std::uint32_t mp_group_ = kNoGroup;  ///< the model-parallel group, once built
};

/// The pipeline message: the full activation, or 1/t of it with scatter/gather or SP.
OpDesc p2p_op(const ModelDims& d) {
  OpDesc o;
  o.kind = OpKind::SendRecv;
  o.precision = d.precision;
  o.group = GroupKind::Pipeline;
  o.bytes = (d.scatter_gather || d.sp) ? d.act_bytes / d.t : d.act_bytes;
  o.group_size = 2;
  return o;
}

}  // namespace

PipelinePass::PipelinePass(GraphBuild& build)
    : build_(build), ops_(add_compute_ops(build)), tp_(build.graph, build.dims),
      p2p_op_(build.graph.add_op(p2p_op(build.dims))) {}

void PipelinePass::emit_rank(const RankCoords& coords) const {
  RankProgram(build_, ops_, tp_, p2p_op_, coords).run();
}

}  // namespace trainsim::builder
