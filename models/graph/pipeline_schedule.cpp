// Pipeline schedule arithmetic (see pipeline_schedule.h).
//
// Source followed: Megatron-LM megatron/core/pipeline_parallel/schedules.py, in its classic
// form (the 2023-mid 2024 core_r0.x releases, before `microbatch_group_size_per_vp_stage` was
// added; the exact last tag was not checked): the version whose interleaved schedule raises
// when `num_microbatches % pipeline_parallel_size != 0` and special-cases
// `num_microbatches == pipeline_parallel_size`. Same arithmetic as megatron/schedules.py of
// Megatron-LM v2 / v3 (SC'21 artifact).
//  - forward_backward_pipelining_without_interleaving:
//      num_warmup_microbatches = min(pp - rank - 1, num_microbatches); warm-up forwards
//      0 .. w-1; steady state i = 0 .. m-w-1 runs forward w+i then the backward of the oldest
//      outstanding microbatch (FIFO: input_tensors.pop(0)), i.e. microbatch i; cooldown runs
//      the remaining w backwards in order.
//  - forward_backward_pipelining_with_interleaving:
//      total = m * v; warm-up = total if m == pp, else
//      min((pp - rank - 1) * 2 + (v - 1) * pp, total); steady state k runs forward
//      warm-up + k then backward k; cooldown runs backwards (m*v - warm-up) .. total-1.
//      get_model_chunk_id(k, forward) = (k % (pp*v)) / pp, mirrored to v-1-that for backward;
//      get_microbatch_id_in_model_chunk(k) = (k / (pp*v)) * pp + k % pp. The backward pops the
//      oldest forward of its chunk (FIFO per chunk), which is the same microbatch formula.
//      RuntimeError when m % pp != 0 (we raise InputError).
// The newer generalization (microbatch_group_size_per_vp_stage, get_schedule_table) reduces to
// this one for group size == pp, except that it drops the m == pp "all warm-up" special case
// (it only takes all forwards first on the ranks whose warm-up count reaches m*v); we follow
// the classic special case, as the header documents.
#include "models/graph/pipeline_schedule.h"

#include <algorithm>
#include <climits>
#include <stdexcept>
#include <string>

#include "models/errors.h"

namespace trainsim {
namespace {

const char* schedule_name(PipelineSchedule s) {
  switch (s) {
    case PipelineSchedule::GPipe: return "gpipe";
    case PipelineSchedule::OneFOneB: return "1f1b";
    case PipelineSchedule::Interleaved: return "interleaved";
  }
  return "unknown";
}

[[noreturn]] void fail(const char* func, const std::string& what) {
  throw InputError(std::string(func) + ": " + what);
}

/// Checks the arguments common to all entry points (rank == INT_MIN: no rank to check).
void validate(const char* func, PipelineSchedule schedule, int pp, int rank,
              int num_microbatches, int virtual_stages) {
  if (pp < 1) fail(func, "pipeline_model_parallel_size (pp) must be >= 1, got " + std::to_string(pp));
  if (rank != INT_MIN && (rank < 0 || rank >= pp))
    fail(func, "pipeline rank must be in [0, " + std::to_string(pp) + "), got " +
                   std::to_string(rank));
  if (num_microbatches < 1)
    fail(func, "num_microbatches must be >= 1, got " + std::to_string(num_microbatches));
  if (virtual_stages < 1)
    fail(func, "virtual_stages must be >= 1, got " + std::to_string(virtual_stages));
  if (schedule != PipelineSchedule::Interleaved && virtual_stages != 1)
    fail(func, std::string("virtual_stages must be 1 for the ") + schedule_name(schedule) +
                   " schedule (only interleaved 1F1B has model chunks), got " +
                   std::to_string(virtual_stages));
  if (schedule == PipelineSchedule::Interleaved) {
    // Megatron runs forward_backward_no_pipelining (no model chunks) when pp == 1.
    if (pp < 2)
      fail(func, "the interleaved schedule needs pipeline_model_parallel_size (pp) > 1, got " +
                     std::to_string(pp));
    if (num_microbatches % pp != 0)
      fail(func, "number of microbatches (" + std::to_string(num_microbatches) +
                     ") is not divisible by pipeline_model_parallel_size (" +
                     std::to_string(pp) +
                     "), which Megatron-LM's interleaved schedule requires");
  }
  // 2 * m * v steps must be countable in an int.
  if (static_cast<long long>(num_microbatches) * virtual_stages > INT_MAX / 2)
    fail(func, "num_microbatches (" + std::to_string(num_microbatches) + ") x virtual_stages (" +
                   std::to_string(virtual_stages) + ") is too large");
}

int warmup_unchecked(PipelineSchedule schedule, int pp, int rank, int m, int v) {
  const int total = m * v;
  switch (schedule) {
    case PipelineSchedule::GPipe: return total;
    case PipelineSchedule::OneFOneB: return std::min(pp - rank - 1, m);
    case PipelineSchedule::Interleaved:
      if (m == pp) return total;
      return std::min((pp - rank - 1) * 2 + (v - 1) * pp, total);
  }
  TRAINSIM_CHECK(false, "pipeline_schedule: unhandled PipelineSchedule value");
}

/// The k-th forward (forward = true) or backward step of the interleaved table.
PipelineStep interleaved_step(int k, bool forward, int pp, int v) {
  const int group = pp * v;
  const int chunk_fwd = (k % group) / pp;
  PipelineStep s;
  s.forward = forward;
  s.chunk = forward ? chunk_fwd : v - 1 - chunk_fwd;
  s.microbatch = (k / group) * pp + k % pp;
  return s;
}

}  // namespace

int num_warmup_steps(PipelineSchedule schedule, int pp, int rank, int num_microbatches,
                     int virtual_stages) {
  validate("num_warmup_steps", schedule, pp, rank, num_microbatches, virtual_stages);
  return warmup_unchecked(schedule, pp, rank, num_microbatches, virtual_stages);
}

std::vector<PipelineStep> pipeline_order(PipelineSchedule schedule, int pp, int rank,
                                         int num_microbatches, int virtual_stages) {
  validate("pipeline_order", schedule, pp, rank, num_microbatches, virtual_stages);
  const int m = num_microbatches;
  const int v = virtual_stages;
  const int total = m * v;
  const int warmup = warmup_unchecked(schedule, pp, rank, m, v);

  // The k-th forward / backward of this rank. For GPipe and 1F1B (v == 1) the interleaved table
  // degenerates to microbatch k, chunk 0, but we spell it out to keep the two sources apart.
  auto step = [&](int k, bool forward) {
    if (schedule == PipelineSchedule::Interleaved) return interleaved_step(k, forward, pp, v);
    PipelineStep s;
    s.forward = forward;
    s.microbatch = k;
    s.chunk = 0;
    return s;
  };

  std::vector<PipelineStep> order;
  order.reserve(static_cast<std::size_t>(2) * total);
  for (int k = 0; k < warmup; ++k) order.push_back(step(k, true));
  const int remaining = total - warmup;
  for (int k = 0; k < remaining; ++k) {  // steady state: one forward, one backward
    order.push_back(step(warmup + k, true));
    order.push_back(step(k, false));
  }
  for (int k = remaining; k < total; ++k) order.push_back(step(k, false));  // cooldown

  TRAINSIM_CHECK(order.size() == static_cast<std::size_t>(2) * total,
                 "pipeline_order: expected 2*m*v steps");
  return order;
}

CombinedOrder combined_interleaved_order(int pp, int rank, int num_microbatches,
                                         int virtual_stages) {
  validate("combined_interleaved_order", PipelineSchedule::Interleaved, pp, rank,
           num_microbatches, virtual_stages);
  const int m = num_microbatches, v = virtual_stages, total = m * v;
  CombinedOrder o;
  // get_pp_rank_microbatches with overlap_moe_expert_parallel_comm (g = pp): one more forward.
  o.warmup = std::min((pp - rank - 1) * 2 + (v - 1) * pp + 1, total);
  o.merged = total - o.warmup;
  o.steps.reserve(static_cast<std::size_t>(2) * total);
  for (int k = 0; k < o.warmup; ++k) o.steps.push_back(interleaved_step(k, true, pp, v));
  for (int k = 0; k < o.merged; ++k) {  // forward warmup + k beside backward k
    o.steps.push_back(interleaved_step(o.warmup + k, true, pp, v));
    o.steps.push_back(interleaved_step(k, false, pp, v));
  }
  for (int k = o.merged; k < total; ++k) o.steps.push_back(interleaved_step(k, false, pp, v));
  return o;
}

std::vector<PipelineExchange> megatron2021_interleaved_exchanges(int pp, int rank,
                                                                 int num_microbatches,
                                                                 int virtual_stages) {
  const char* func = "megatron2021_interleaved_exchanges";
  validate(func, PipelineSchedule::Interleaved, pp, rank, num_microbatches, virtual_stages);
  if (pp <= 2)
    fail(func, "Megatron-LM 2021 runs the interleaved schedule with pipeline_model_parallel_size "
               "(pp) > 2 only, got " + std::to_string(pp));
  const int m = num_microbatches, v = virtual_stages, total = m * v;
  const int warmup = warmup_unchecked(PipelineSchedule::Interleaved, pp, rank, m, v);
  const bool all_warmup = m == pp;
  const int remaining = total - warmup;
  const bool first_rank = rank == 0, last_rank = rank == pp - 1;
  // get_model_chunk_id(k, forward), with Python's modulo for the negative ids of the steady
  // state's look-ahead.
  auto chunk_id = [&](int k, bool forward) {
    const int group = pp * v;
    const int c = ((k % group) + group) % group / pp;
    return forward ? c : v - 1 - c;
  };
  std::vector<PipelineExchange> out;
  auto emit = [&](PipelineExchange x) {
    if (x.send_forward || x.send_backward || x.recv_forward || x.recv_backward) out.push_back(x);
  };
  PipelineExchange first;  // recv_forward with virtual rank 0: none on the first stage
  first.recv_forward = !first_rank;
  emit(first);
  for (int k = 0; k < warmup; ++k) {
    PipelineExchange x;
    x.after_step = k;
    // The output is None on the last virtual stage (the virtual rank forward_step_helper set).
    x.send_forward = !(last_rank && chunk_id(k, true) == v - 1);
    x.recv_forward = !(first_rank && chunk_id(k + 1, true) == 0) && k != total - 1;
    if (k == warmup - 1 && !all_warmup) x.recv_backward = !last_rank;
    emit(x);
  }
  if (all_warmup) {  // recv_backward; the virtual rank is the last forward's, chunk v - 1
    PipelineExchange x;
    x.after_step = warmup - 1;
    x.recv_backward = !last_rank;
    emit(x);
  }
  for (int k = 0; k < remaining; ++k) {
    const int fk = warmup + k, bk = k;
    PipelineExchange x;
    x.after_step = warmup + 2 * k + 1;  // pipeline_order: w forwards, then the pairs
    x.send_forward = !(last_rank && chunk_id(fk, true) == v - 1);
    x.send_backward = !(first_rank && chunk_id(bk, false) == 0);
    // The first stage is ahead of the last by pp - 1 forwards, the last ahead of the first by
    // pp - 1 backwards.
    x.recv_forward = !(first_rank && chunk_id(fk - (pp - 1), true) == v - 1);
    x.recv_backward = !(last_rank && chunk_id(bk - (pp - 1), false) == 0);
    if (k == remaining - 1) x.recv_forward = false;
    emit(x);
  }
  for (int k = remaining; k < total; ++k) {
    PipelineExchange x;
    x.after_step = warmup + remaining + k;  // after the pairs, cool-down backward k
    x.send_backward = !(first_rank && chunk_id(k, false) == 0);
    x.recv_backward = !(last_rank && chunk_id(k + 1, false) == v - 1) && k != total - 1;
    emit(x);
  }
  return out;
}

double bubble_fraction(PipelineSchedule schedule, int pp, int num_microbatches,
                       int virtual_stages) {
  validate("bubble_fraction", schedule, pp, INT_MIN, num_microbatches, virtual_stages);
  // SC'21 Eq. 1: t_pb / t_id = (p - 1) / m; Sec. 2.2.2: interleaving divides it by v.
  return static_cast<double>(pp - 1) /
         (static_cast<double>(virtual_stages) * static_cast<double>(num_microbatches));
}

}  // namespace trainsim
