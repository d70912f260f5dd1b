// A multi-process CPU replay's communication (comm_backend.h): one process per rank on this
// machine, the operations whose ranks are all present (comm_plan.h) between the processes
// through host_comm.h (files in the job's rendezvous directory), the others through the
// device-local backend. The CPU twin of comm_nccl.cpp: the same plan, the same scratch buffers
// (op.bytes per stream, as NCCL moves them), the same in-place pipeline all-gather.
#include <algorithm>
#include <chrono>
#include <map>
#include <memory>

#include "hw_backend/comm_backend.h"
#include "hw_backend/host_comm.h"
#include "kernels/rendezvous.h"
#include "models/errors.h"

namespace trainsim::hw {
namespace {

/// Sleep between two looks for a peer's file (host_comm.h kHostCommPollInterval_s).
constexpr double kPollInterval_s = kHostCommPollInterval_s;

class HostComm final : public CommBackend {
 public:
  explicit HostComm(const CommContext& c)
      : c_(c), plan_(plan_communicators(*c.graph, c.options->nprocs)),
        local_(make_local_comm(c, &plan_)),
        rv_(c.options->nccl_dir, c.options->nccl_run_id, c.options->nccl_timeout_s,
            kPollInterval_s) {}

  void prepare(const std::vector<TaskId>& order, torch::Generator& gen) override {
    const ScheduleGraph& g = *c_.graph;
    local_->prepare(order, gen);
    for (TaskId id : order) {
      const Task& t = g.task(id);
      const OpDesc& op = g.op(id);
      if (t.kind == TaskKind::Collective && op.group_size > 1 && t.part != Part::Pipeline &&
          plan_.uses_nccl(g, id))
        bytes_[int(t.stream)] = std::max(bytes_[int(t.stream)], op.bytes);
    }
    for (const auto& [stream, bytes] : bytes_)
      buf_[stream] = torch::zeros({bytes}, c_.tensor_options.dtype(torch::kUInt8));
  }

  /// The groups of the plan (each process builds the same list; once: the sequence numbers
  /// of their exchanges go on across iterations), then a world all-reduce of ones as the
  /// barrier that starts the ranks' iteration clocks together.
  void connect(StreamHandle) override {
    const auto t0 = std::chrono::steady_clock::now();
    const int me = static_cast<int>(c_.rank);
    if (!world_) {
      const std::vector<std::vector<int>> members = plan_.members(*c_.graph);
      for (std::size_t k = 0; k < plan_.groups.size(); ++k) {
        const bool member =
            std::find(members[k].begin(), members[k].end(), me) != members[k].end();
        groups_.push_back(member ? std::make_unique<HostGroup>(
                                       rv_, "g" + std::to_string(plan_.groups[k]), members[k], me)
                                 : nullptr);
      }
      std::vector<int> world;
      for (std::int64_t r = 0; r < c_.options->nprocs; ++r) world.push_back(static_cast<int>(r));
      world_ = std::make_unique<HostGroup>(rv_, "world", world, me);
    }
    float one = 1.0f;
    world_->all_reduce(&one, 1, kernels::DType::F32);
    if (one != static_cast<float>(c_.options->nprocs))
      throw SystemError("replay: the barrier all-reduce of ones gave " + std::to_string(one) +
                        ", expected " + std::to_string(c_.options->nprocs));
    setup_s_ = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  }

  std::string collective(TaskId id) override {
    const ScheduleGraph& g = *c_.graph;
    const OpDesc& op = g.op(id);
    if (op.group_size <= 1 || !plan_.uses_nccl(g, id)) return local_->collective(id);
    HostGroup& grp = group_of(id);
    torch::Tensor& buf = buf_.at(int(g.task(id).stream));
    const std::size_t es = c_.tensor_options.dtype().itemsize();
    const std::size_t count = static_cast<std::size_t>(op.bytes) / es;
    const std::size_t part = count / static_cast<std::size_t>(grp.size());
    char* base = static_cast<char*>(buf.data_ptr());
    const std::size_t me = static_cast<std::size_t>(grp.rank());
    switch (op.kind) {
      case OpKind::AllReduce: grp.all_reduce(base, count, c_.dtype); break;
      case OpKind::AllGather: grp.all_gather(base + me * part * es, base, part, c_.dtype); break;
      case OpKind::ReduceScatter:
        grp.reduce_scatter(base, base + me * part * es, part, c_.dtype);
        break;
      case OpKind::AllToAll: grp.all_to_all(base, base, part, c_.dtype); break;
      default:
        TRAINSIM_CHECK(false, "replay: collective task " + g.label(id) + " has op " +
                                  to_string(op.kind));
    }
    ++collectives_[int(op.group)];
    ++ops_[to_string(op.kind)];
    return "host processes";
  }

  std::string complete_received(TaskId id, torch::Tensor& dst, bool backward, std::int64_t off,
                                std::int64_t n) override {
    if (!plan_.uses_nccl(*c_.graph, id)) return local_->complete_received(id, dst, backward, off, n);
    HostGroup& grp = group_of(id);
    if (off != grp.rank() * n || n * grp.size() != dst.numel())
      return local_->complete_received(id, dst, backward, off, n);
    char* base = static_cast<char*>(dst.data_ptr());
    grp.all_gather(base + off * dst.element_size(), base, static_cast<std::size_t>(n), c_.dtype);
    ++collectives_[int(c_.graph->op(id).group)];
    ++ops_["pipeline all-gather"];
    return "host processes";
  }

  std::string send(TaskId id, const torch::Tensor& src, bool backward, std::int64_t off,
                   std::int64_t n) override {
    if (!plan_.uses_nccl(*c_.graph, id)) return local_->send(id, src, backward, off, n);
    const torch::Tensor slice = src.contiguous().view(-1).narrow(0, off, n);
    channel_of(id, RankId(c_.rank), RankId(c_.graph->task(id).peer))
        .send(slice.data_ptr(), static_cast<std::size_t>(slice.numel() * slice.element_size()));
    ++sends_;
    return "host processes";
  }

  std::string recv(TaskId id, torch::Tensor& dst, bool backward, std::int64_t off,
                   std::int64_t n) override {
    if (!plan_.uses_nccl(*c_.graph, id)) return local_->recv(id, dst, backward, off, n);
    torch::Tensor slice = dst.view(-1).narrow(0, off, n);
    channel_of(id, RankId(c_.graph->task(id).peer), RankId(c_.rank))
        .recv(slice.data_ptr(), static_cast<std::size_t>(slice.numel() * slice.element_size()));
    ++recvs_;
    return "host processes";
  }

  void wait(const DeviceEvent& event, const std::string&) override { event.synchronize(); }
  std::vector<StreamHandle> own_streams() const override { return {}; }
  const DeviceEvent* delivered(TaskId) const override { return nullptr; }

  void add_notes(std::vector<std::string>& notes) const override {
    local_->add_notes(notes);
    std::int64_t through = 0;
    std::string kinds;
    for (const auto& [group, n] : collectives_) {
      through += n;
      kinds += (kinds.empty() ? "" : ", ") + std::to_string(n) + " " +
               to_string(static_cast<GroupKind>(group));
    }
    notes.push_back("multi-process CPU replay: rank " + std::to_string(c_.rank) + " of " +
                    std::to_string(c_.options->nprocs) + " processes on this machine, " +
                    std::to_string(plan_.groups.size()) + " groups of the plan between them "
                    "through the host backend (hw_backend/host_comm.h: each member publishes its "
                    "contribution as a file in the rendezvous directory and reduces the members' "
                    "in member order); set up in " + std::to_string(setup_s_) +
                    " s, then a barrier aligned the ranks' iteration clocks");
    std::string ops;
    for (const auto& [op, n] : ops_) ops += (ops.empty() ? "" : ", ") + std::to_string(n) + " " + op;
    if (through > 0)
      notes.push_back(std::to_string(through) + " collectives (" + kinds + "; " + ops +
                      ") ran between the processes, op.bytes of " + c_.dtype_name +
                      " in per-stream scratch buffers as the NCCL backend moves them (a pipeline "
                      "all-gather in place in the received tensor)");
    if (sends_ + recvs_ > 0)
      notes.push_back(std::to_string(sends_) + " pipeline sends and " + std::to_string(recvs_) +
                      " receives moved the activation / gradient slices between the processes "
                      "(a send is buffered and does not wait for its receiver)");
  }

 private:
  HostGroup& group_of(TaskId id) {
    const int k = plan_.comm_of_group.at(c_.graph->task(id).group);
    TRAINSIM_CHECK(k >= 0 && groups_.at(std::size_t(k)),
                   "replay: " + c_.graph->label(id) + ": this rank has no group for its task");
    return *groups_[std::size_t(k)];
  }

  HostChannel& channel_of(TaskId id, RankId src, RankId dst) {
    const std::uint32_t group = c_.graph->task(id).group;
    auto it = channels_.find(group);
    if (it == channels_.end())
      it = channels_
               .emplace(group, std::make_unique<HostChannel>(rv_, "g" + std::to_string(group),
                                                             int(src), int(dst)))
               .first;
    return *it->second;
  }

  const CommContext c_;
  CommPlan plan_;
  std::unique_ptr<CommBackend> local_;  // operations with absent peers
  kernels::FileRendezvous rv_;
  std::vector<std::unique_ptr<HostGroup>> groups_;  // indexed like plan_.groups
  std::unique_ptr<HostGroup> world_;                // the barrier
  std::map<std::uint32_t, std::unique_ptr<HostChannel>> channels_;  // per graph group
  std::map<int, std::int64_t> bytes_;   // per StreamId: largest op.bytes of its collectives
  std::map<int, torch::Tensor> buf_;    // per StreamId: scratch of bytes_
  std::map<int, std::int64_t> collectives_;  // per GroupKind
  std::map<std::string, std::int64_t> ops_;  // per op kind
  std::int64_t sends_ = 0, recvs_ = 0;
  double setup_s_ = 0;
};

}  // namespace

std::unique_ptr<CommBackend> make_host_comm(const CommContext& context) {
  return std::make_unique<HostComm>(context);
}

}  // namespace trainsim::hw
