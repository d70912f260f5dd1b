#include "models/graph/schedule_graph.h"

#include <algorithm>
#include <cstring>
#include <set>
#include <sstream>
#include <stdexcept>
#include <string>
#include <unordered_map>

#include <boost/graph/topological_sort.hpp>

#include "models/errors.h"

namespace trainsim {

std::int64_t CommGroup::nodes(std::int64_t gpus_per_node) const {
  std::set<std::int64_t> n;
  for (RankId r : ranks) n.insert(std::int64_t(r) / gpus_per_node);
  return std::int64_t(n.size());
}

std::int64_t CommGroup::ranks_on_node_of(RankId rank, std::int64_t gpus_per_node) const {
  const std::int64_t node = std::int64_t(rank) / gpus_per_node;
  return std::int64_t(std::count_if(ranks.begin(), ranks.end(), [&](RankId r) {
    return std::int64_t(r) / gpus_per_node == node;
  }));
}

namespace {

std::string op_key(const OpDesc& op) {
  std::ostringstream os;
  os << int(op.kind) << ',' << int(op.precision) << ',' << int(op.group) << ',' << op.micro_batch
     << ',' << op.seq << ',' << op.hidden << ',' << op.heads << ',' << op.head_dim << ','
     << op.ffn << ',' << op.vocab << ',' << op.tp << ',' << op.sequence_parallel << ','
     << op.recompute_core_attention << ',' << op.params << ',' << op.bytes << ','
     << op.group_size << ',' << op.flops << ',' << op.bytes_accessed;
  const ModelFeatures& f = op.features;
  if (f.core || f.kv_heads || f.swiglu || f.rmsnorm || f.rope || !f.bias || !f.hidden_dropout ||
      !f.attention_dropout || f.attention || f.window || f.fp8 || f.cp != 1 || f.microbatches != 1)
    os << ";f" << f.core << f.kv_heads << ',' << f.swiglu << f.rmsnorm << f.rope << f.bias
       << f.hidden_dropout << f.attention_dropout << int(f.attention) << ',' << f.window << ','
       << int(f.fp8) << ',' << f.cp << ',' << f.microbatches << ';' << f.experts_local << ','
       << f.num_experts << ',' << f.topk << ',' << f.expert_ffn << ',' << f.shared_ffn << ','
       << f.grouped_gemm << ',' << f.imbalance << ';' << int(f.main_grad_bytes)
       << f.recompute_layernorm << f.recompute_moe_act << f.checkpoint_rerun;
  if (f.expert_token_cap > 0) os << ";cap" << f.expert_token_cap << ',' << f.pad_to_capacity;
  if (f.permute_fusion) os << ";pf";
  if (f.router) os << ";rt" << int(f.router);
  if (f.etp != 1) os << ";etp" << f.etp;
  if (f.expert_wgrad) os << ";ew" << int(f.expert_wgrad);
  if (f.recompute_shared) os << ";rs";
  if (f.shared_part) os << ";sh" << int(f.shared_part);
  if (f.qk_norm) os << ";qkn";
  if (f.mtp_input) os << ";mtp";
  const DeepEpRouting& r = op.deepep;
  if (r.tokens > 0)
    os << ";deepep" << r.tokens << ',' << r.token_bytes << ',' << r.topk << ',' << r.experts
       << ',' << r.groups << ',' << r.group_topk << ',' << r.combine;
  if (r.hybrid_ep) os << ",h";
  if (f.quick_geglu || f.glu_offset != 0)
    os << ";qg" << f.quick_geglu << ',' << f.glu_clamp << ',' << f.glu_offset;
  if (f.mla)
    os << ";mla" << f.q_lora << ',' << f.kv_lora << ',' << f.qk_rope << ',' << f.v_dim << ','
       << f.qk_norm << f.recompute_mla_up;
  return os.str();
}

}  // namespace

std::uint32_t ScheduleGraph::add_op(const OpDesc& op) {
  TRAINSIM_CHECK(!finalized_, "ScheduleGraph::add_op after finalize()");
  const std::string key = op_key(op);
  auto it = op_index_.find(key);
  if (it != op_index_.end()) return it->second;
  const auto id = static_cast<std::uint32_t>(ops_.size());
  ops_.push_back(op);
  op_index_.emplace(key, id);
  return id;
}

std::uint32_t ScheduleGraph::add_group(GroupKind kind, std::vector<RankId> ranks) {
  TRAINSIM_CHECK(!finalized_, "ScheduleGraph::add_group after finalize()");
  std::string key = std::to_string(int(kind));
  for (RankId r : ranks) key += ',' + std::to_string(r);
  auto it = group_index_.find(key);
  if (it != group_index_.end()) return it->second;
  groups_.push_back(CommGroup{kind, std::move(ranks)});
  const auto id = static_cast<std::uint32_t>(groups_.size() - 1);
  group_index_.emplace(std::move(key), id);
  return id;
}

TaskId ScheduleGraph::add_task(const Task& task) {
  TRAINSIM_CHECK(!finalized_, "ScheduleGraph::add_task after finalize()");
  TRAINSIM_CHECK(task.op < ops_.size(), "ScheduleGraph::add_task: op index out of range");
  TRAINSIM_CHECK(tasks_.size() < kNone - 1, "ScheduleGraph: more than 2^32 tasks");
  tasks_.push_back(task);
  mem_offsets_.push_back(mem_offsets_.back());
  return static_cast<TaskId>(tasks_.size() - 1);
}

void ScheduleGraph::add_memory_effect(TaskId task, const MemEffect& effect) {
  TRAINSIM_CHECK(task + 1 == tasks_.size(),
                 "ScheduleGraph::add_memory_effect: only the last added task");
  mem_effects_.push_back(effect);
  ++mem_offsets_.back();
}

void ScheduleGraph::add_dependency(TaskId from, TaskId to) {
  TRAINSIM_CHECK(from < tasks_.size() && to < tasks_.size() && from != to,
                 "ScheduleGraph::add_dependency: bad task ids");
  edge_list_.emplace_back(from, to);
}

void ScheduleGraph::finalize() {
  TRAINSIM_CHECK(!finalized_, "ScheduleGraph::finalize called twice");
  // Per-rank task lists (CSR), in program order = insertion order.
  std::vector<RankId> ranks;
  ranks.reserve(tasks_.size() ? 64 : 0);
  for (const Task& t : tasks_) ranks.push_back(t.rank);
  std::sort(ranks.begin(), ranks.end());
  ranks.erase(std::unique(ranks.begin(), ranks.end()), ranks.end());
  simulated_ranks_ = ranks;
  rank_task_offsets_.assign(simulated_ranks_.size() + 1, 0);
  for (const Task& t : tasks_) ++rank_task_offsets_[rank_index(t.rank) + 1];
  for (std::size_t i = 1; i < rank_task_offsets_.size(); ++i)
    rank_task_offsets_[i] += rank_task_offsets_[i - 1];
  rank_tasks_.resize(tasks_.size());
  {
    std::vector<std::uint32_t> fill(rank_task_offsets_.begin(), rank_task_offsets_.end() - 1);
    for (TaskId id = 0; id < tasks_.size(); ++id)
      rank_tasks_[fill[rank_index(tasks_[id].rank)]++] = id;
  }
  // Stream order: consecutive tasks of one (rank, stream) queue.
  {
    std::vector<std::uint32_t> last(simulated_ranks_.size() * kNumStreams, kNone);
    for (TaskId id = 0; id < tasks_.size(); ++id) {
      const Task& t = tasks_[id];
      auto& prev = last[rank_index(t.rank) * kNumStreams + static_cast<int>(t.stream)];
      if (prev != kNone) edge_list_.emplace_back(prev, id);
      prev = id;
    }
  }
  std::sort(edge_list_.begin(), edge_list_.end());
  edge_list_.erase(std::unique(edge_list_.begin(), edge_list_.end()), edge_list_.end());
  deps_ = DependencyGraph(boost::edges_are_unsorted_multi_pass, edge_list_.begin(), edge_list_.end(),
                          tasks_.size());
  edge_list_.clear();
  edge_list_.shrink_to_fit();
  op_index_.clear();
  group_index_.clear();
  if (initial_gpu_memory.size() != simulated_ranks_.size())
    initial_gpu_memory.resize(simulated_ranks_.size(), MemVector{});
  if (initial_host_memory.size() != simulated_ranks_.size())
    initial_host_memory.resize(simulated_ranks_.size(), MemVector{});
  // Acyclicity (an invariant of every builder).
  std::vector<std::uint32_t> order;
  order.reserve(tasks_.size());
  try {
    boost::topological_sort(deps_, std::back_inserter(order));
  } catch (const boost::not_a_dag&) {
    TRAINSIM_CHECK(false, "ScheduleGraph::finalize: the schedule graph has a cycle");
  }
  finalized_ = true;
}

std::uint32_t ScheduleGraph::rank_index(RankId rank) const {
  auto it = std::lower_bound(simulated_ranks_.begin(), simulated_ranks_.end(), rank);
  if (it == simulated_ranks_.end() || *it != rank) return kNone;
  return static_cast<std::uint32_t>(it - simulated_ranks_.begin());
}

RankId ScheduleGraph::representative_of(std::int64_t rank) const {
  if (rank < 0 || rank >= world_size)
    throw InputError("rank " + std::to_string(rank) + " is outside the world (0 .. " +
                     std::to_string(world_size - 1) + ")");
  const auto rep =
      !partial_representatives.empty()
          ? partial_representatives[static_cast<std::size_t>(rank)]
          : static_cast<RankId>(fold_factor > 1 ? layout.representative(rank) : rank);
  TRAINSIM_CHECK(rank_index(rep) != kNone,
                 "rank " + std::to_string(rank) + " maps to rank " + std::to_string(rep) +
                     ", which the schedule graph does not simulate (fold_factor " +
                     std::to_string(fold_factor) + ")");
  return rep;
}

std::int64_t ScheduleGraph::ranks_represented(std::uint32_t i) const {
  if (partial_representatives.empty()) return fold_factor;
  const RankId r = simulated_ranks_.at(i);
  return std::count(partial_representatives.begin(), partial_representatives.end(), r);
}

const char* to_string(SyncCause c) {
  switch (c) {
    case SyncCause::MoeTokenCounts: return "moe token counts (before_ep_alltoall)";
    case SyncCause::LossScaleItem: return "loss scale found_inf .item()";
    case SyncCause::GradNormItem: return "grad norm .item() (clip_grad)";
    case SyncCause::PipelineSynchronize: return "torch.cuda.synchronize after p2p";
    case SyncCause::Timer: return "timer torch.cuda.synchronize (timing_log_level)";
  }
  return "?";
}

std::vector<TaskId> ScheduleGraph::tasks_of_rank(RankId rank) const {
  const std::uint32_t i = rank_index(rank);
  if (i == kNone) return {};
  return std::vector<TaskId>(rank_tasks_.begin() + rank_task_offsets_[i],
                             rank_tasks_.begin() + rank_task_offsets_[i + 1]);
}

std::string ScheduleGraph::label(TaskId id) const {
  const Task& t = tasks_[id];
  const OpDesc& o = ops_[t.op];
  std::ostringstream os;
  auto where = [&] {
    if (t.microbatch != kNoIndex) os << " mb" << t.microbatch;
    if (t.layer != kNoIndex) os << " layer" << t.layer;
    if (t.bucket != kNoIndex) os << " bucket" << t.bucket;
  };
  const char* phase = t.phase == Phase::Forward     ? "fwd"
                      : t.phase == Phase::Backward  ? "bwd"
                      : t.phase == Phase::Recompute ? "recompute"
                      : t.phase == Phase::GradSync  ? "grad-sync"
                      : t.phase == Phase::Optimizer ? "optimizer"
                      : t.phase == Phase::ParamSync ? "param-sync"
                                                    : "offload";
  switch (t.kind) {
    case TaskKind::Compute:
      os << phase;
      where();
      os << ' ' << to_string(t.part);
      break;
    case TaskKind::Collective:
      os << to_string(o.kind) << ' ' << to_string(o.group) << ' ' << phase;
      where();
      if (t.part != Part::None) os << ' ' << to_string(t.part);
      break;
    case TaskKind::Send:
    case TaskKind::Recv:
      os << (t.kind == TaskKind::Send ? "send " : "recv ") << phase;
      where();
      if (t.chunk) os << " chunk" << int(t.chunk);
      os << (t.kind == TaskKind::Send ? " -> rank " : " <- rank ") << t.peer;
      break;
    case TaskKind::CopyH2D:
    case TaskKind::CopyD2H:
      os << (t.kind == TaskKind::CopyH2D ? "h2d " : "d2h ") << to_string(t.part);
      where();
      break;
    case TaskKind::OptimizerGpu:
    case TaskKind::OptimizerCpu:
      os << (t.kind == TaskKind::OptimizerGpu ? "adam gpu" : "adam cpu");
      where();
      break;
  }
  return os.str();
}

const char* to_string(TaskKind k) {
  switch (k) {
    case TaskKind::Compute: return "compute";
    case TaskKind::Collective: return "collective";
    case TaskKind::Send: return "send";
    case TaskKind::Recv: return "recv";
    case TaskKind::CopyH2D: return "copy_h2d";
    case TaskKind::CopyD2H: return "copy_d2h";
    case TaskKind::OptimizerGpu: return "optimizer_gpu";
    case TaskKind::OptimizerCpu: return "optimizer_cpu";
  }
  return "?";
}

const char* to_string(StreamId s) {
  switch (s) {
    case StreamId::Compute: return "compute";
    case StreamId::TpComm: return "tp-comm";
    case StreamId::PpComm: return "pp-comm";
    case StreamId::DpComm: return "dp-comm";
    case StreamId::H2D: return "h2d";
    case StreamId::D2H: return "d2h";
    case StreamId::Cpu: return "cpu";
    case StreamId::EpComm: return "ep-comm";
    case StreamId::kCount: break;
  }
  return "?";
}

const char* to_string(Phase p) {
  switch (p) {
    case Phase::Forward: return "forward";
    case Phase::Backward: return "backward";
    case Phase::Recompute: return "recompute";
    case Phase::GradSync: return "grad-sync";
    case Phase::Optimizer: return "optimizer";
    case Phase::ParamSync: return "param-sync";
    case Phase::Offload: return "offload";
  }
  return "?";
}

const char* to_string(Part p) {
  switch (p) {
    case Part::Attn: return "attn";
    case Part::Mlp: return "mlp";
    case Part::Embedding: return "embedding";
    case Part::Logits: return "logits";
    case Part::Pipeline: return "pipeline";
    case Part::Gradients: return "grads";
    case Part::Params: return "params";
    case Part::None: return "-";
  }
  return "?";
}

const char* to_string(MemCategory c) {
  switch (c) {
    case MemCategory::Parameters: return "parameters";
    case MemCategory::Gradients: return "gradients";
    case MemCategory::OptimizerStates: return "optimizer_states";
    case MemCategory::Activations: return "activations";
    case MemCategory::CommBuffers: return "comm_buffers";
    case MemCategory::OffloadBuffers: return "offload_buffers";
    case MemCategory::Framework: return "framework";
    case MemCategory::CudaGraphs: return "cuda_graphs";
    case MemCategory::kCount: break;
  }
  return "?";
}

}  // namespace trainsim
