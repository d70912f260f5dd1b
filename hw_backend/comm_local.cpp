// Device-local substitution of a replay's communication (comm_backend.h): what the absent
// peers would have sent is copied on this rank's device.
#include <algorithm>
#include <map>

#include "hw_backend/comm_backend.h"
#include "models/perf/cost_model.h"

namespace trainsim::hw {
namespace {

class LocalComm final : public CommBackend {
 public:
  LocalComm(const CommContext& c, const CommPlan* remote) : c_(c), remote_(remote) {}

  void prepare(const std::vector<TaskId>& order, torch::Generator& gen) override {
    const ScheduleGraph& g = *c_.graph;
    // Pipeline staging buffers (what the absent neighbour would have sent), comm scratch.
    // Only a rank with pipeline messages needs them (they would count as memory a real run
    // does not hold).
    bool pipeline = false;
    for (TaskId id : order) {
      const Task& t = g.task(id);
      const OpDesc& op = g.op(id);
      pipeline = pipeline || t.kind == TaskKind::Send || t.kind == TaskKind::Recv ||
                 t.part == Part::Pipeline;
      if (t.kind == TaskKind::Collective && op.group_size > 1 && t.part != Part::Pipeline &&
          !(remote_ && remote_->uses_nccl(g, id)))
        comm_bytes_ = std::max<std::int64_t>(
            comm_bytes_,
            std::int64_t(CostModel::ring_bytes_per_rank(op.kind, double(op.bytes), op.group_size)));
    }
    if (pipeline) {
      staging_[0] = torch::randn(c_.message_shape, gen, torch::kFloat32).to(c_.tensor_options);
      staging_[1] = (torch::randn(c_.message_shape, gen, torch::kFloat32) * 1e-3).to(c_.tensor_options);
    }
    if (comm_bytes_ > 0) {
      comm_src_ = torch::zeros({comm_bytes_}, c_.tensor_options.dtype(torch::kUInt8));
      comm_dst_ = torch::empty({comm_bytes_}, c_.tensor_options.dtype(torch::kUInt8));
    }
  }

  void connect(StreamHandle) override {}

  std::string collective(TaskId id) override {
    const OpDesc& op = c_.graph->op(id);
    if (op.group_size <= 1) {
      ++noop_collectives_;
      return "no-op";
    }
    const auto ring =
        std::int64_t(CostModel::ring_bytes_per_rank(op.kind, double(op.bytes), op.group_size));
    if (ring > 0) comm_dst_.narrow(0, 0, ring).copy_(comm_src_.narrow(0, 0, ring));
    ++copied_collectives_[int(op.group)];
    return "device-local copy";
  }

  std::string complete_received(TaskId id, torch::Tensor& dst, bool backward, std::int64_t off,
                                std::int64_t n) override {
    // The slices the other TP ranks would have received.
    const std::int64_t total = dst.numel();
    torch::Tensor flat = dst.view(-1), stage = staging_[backward].view(-1);
    if (off > 0) flat.narrow(0, 0, off).copy_(stage.narrow(0, 0, off));
    if (off + n < total)
      flat.narrow(0, off + n, total - off - n).copy_(stage.narrow(0, off + n, total - off - n));
    ++copied_collectives_[int(c_.graph->op(id).group)];
    return "device-local copy";
  }

  std::string send(TaskId, const torch::Tensor& src, bool backward, std::int64_t off,
                   std::int64_t n) override {
    staging_[backward].view(-1).narrow(0, 0, n).copy_(src.reshape(-1).narrow(0, off, n));
    c_.loop->record_stream(src, c_.loop->stream(StreamId::PpComm));
    ++sends_;
    return "device-local copy";
  }

  std::string recv(TaskId, torch::Tensor& dst, bool backward, std::int64_t off,
                   std::int64_t n) override {
    dst.view(-1).narrow(0, off, n).copy_(staging_[backward].view(-1).narrow(0, 0, n));
    ++recvs_;
    return "device-local copy";
  }

  void wait(const DeviceEvent& event, const std::string&) override { event.synchronize(); }
  std::vector<StreamHandle> own_streams() const override { return {}; }
  const DeviceEvent* delivered(TaskId) const override { return nullptr; }

  void add_notes(std::vector<std::string>& notes) const override {
    std::int64_t copied = 0;
    std::string parts;
    for (const auto& [group, n] : copied_collectives_) {
      copied += n;
      parts += (parts.empty() ? "" : ", ") + std::to_string(n) + " " +
               to_string(static_cast<GroupKind>(group));
    }
    const std::int64_t nprocs = c_.options->nprocs;
    const std::string absent =
        nprocs > 1 ? "the other ranks of their groups are absent (this job replays ranks 0-" +
                         std::to_string(nprocs - 1) + ", one process per GPU)"
                   : "the other ranks of their groups are absent (a single-process replay; "
                     "`--nprocs N` on N GPUs runs the collectives among ranks 0..N-1 through NCCL)";
    if (copied > 0)
      notes.push_back(std::to_string(copied) + " collectives (" + parts +
                      ") were replayed as device-local copies of the bytes one rank sends in a "
                      "ring (CostModel::ring_bytes_per_rank): " + absent);
    if (noop_collectives_ > 0)
      notes.push_back(std::to_string(noop_collectives_) + " collectives of group size 1 were no-ops");
    if (sends_ + recvs_ > 0)
      notes.push_back(std::to_string(sends_) + " pipeline sends and " + std::to_string(recvs_) +
                      " receives were replayed as device-local copies of the message size "
                      "through a staging buffer (the neighbour stages are absent)");
  }

 private:
  const CommContext c_;
  const CommPlan* remote_;
  torch::Tensor staging_[2];  // forward activations, backward gradients
  std::int64_t comm_bytes_ = 0;
  torch::Tensor comm_src_, comm_dst_;
  std::map<int, std::int64_t> copied_collectives_;  // per GroupKind
  std::int64_t noop_collectives_ = 0, sends_ = 0, recvs_ = 0;
};

}  // namespace

std::unique_ptr<CommBackend> make_local_comm(const CommContext& context, const CommPlan* remote) {
  return std::make_unique<LocalComm>(context, remote);
}

}  // namespace trainsim::hw
