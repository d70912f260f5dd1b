// A multi-process replay's communication through NCCL (comm_backend.h): one process per GPU,
// the operations whose ranks are all present on their groups' communicators (comm_plan.h),
// the others through the device-local backend. No CUDA headers: streams and events come from
// the device loop as opaque handles (device_loop.h), NCCL through kernels/nccl_comm.h.
// Compiled when kernels' trainsim_nccl is built (hw_backend/CMakeLists.txt).
#include <chrono>
#include <map>
#include <stdexcept>
#include <thread>

#include "hw_backend/backends.h"
#include "hw_backend/comm_backend.h"
#include "kernels/fused_adam.h"  // kernels::cuda::set_device
#include "kernels/nccl_comm.h"
#include "kernels/rendezvous.h"
#include "models/errors.h"

namespace trainsim::hw {

bool nccl_comm_available(std::string* why) {
  std::string reason;
  if (!kernels::nccl::available(&reason)) {
    if (why) *why = "the NCCL library cannot be loaded: " + reason;
    return false;
  }
  return true;
}

namespace {

namespace nc = kernels::nccl;

class NcclComm final : public CommBackend {
 public:
  explicit NcclComm(const CommContext& c)
      : c_(c), plan_(plan_communicators(*c.graph, c.options->nprocs)),
        local_(make_local_comm(c, &plan_)) {}

  void prepare(const std::vector<TaskId>& order, torch::Generator& gen) override {
    const ScheduleGraph& g = *c_.graph;
    local_->prepare(order, gen);
    for (TaskId id : order) {
      const Task& t = g.task(id);
      const OpDesc& op = g.op(id);
      if (t.kind == TaskKind::Collective && op.group_size > 1 && t.part != Part::Pipeline &&
          plan_.uses_nccl(g, id)) {
        bytes_[int(t.stream)] = std::max(bytes_[int(t.stream)], op.bytes);
        if (op.kind == OpKind::AllToAll)  // its output: a buffer of its own (as Megatron's)
          a2a_bytes_[int(t.stream)] = std::max(a2a_bytes_[int(t.stream)], op.bytes);
      }
    }
    // One zeroed scratch buffer per stream (collectives of two streams may run at once), as
    // large as the largest op.bytes on it.
    for (const auto& [stream, bytes] : bytes_)
      buf_[stream] = torch::zeros({bytes}, c_.tensor_options.dtype(torch::kUInt8));
    for (const auto& [stream, bytes] : a2a_bytes_)
      a2a_out_[stream] = torch::zeros({bytes}, c_.tensor_options.dtype(torch::kUInt8));
  }

  /// The world and group communicators (collective over the job's processes, same plan on
  /// each), then a barrier on `stream`, so the ranks' iteration clocks start together.
  void connect(StreamHandle stream) override {
    const ReplayOptions& o = *c_.options;
    const auto t0 = std::chrono::steady_clock::now();
    kernels::cuda::set_device(c_.loop->index());  // NCCL uses the calling thread's device
    kernels::FileRendezvous rv(o.nccl_dir, o.nccl_run_id, o.nccl_timeout_s);
    world_ = nc::Communicator::init_with_rendezvous(rv, "nccl-id.world", int(o.nprocs), int(c_.rank));
    if (c_.rank == 0) rv.remove("nccl-id.world");  // init returned: every rank has read it
    comms_ = nc::make_group_communicators(world_, plan_.members(*c_.graph), rv, "nccl-id.group");
    torch::Tensor one = torch::ones({1}, c_.tensor_options.dtype(torch::kFloat32));
    world_.all_reduce(one.data_ptr(), one.data_ptr(), 1, kernels::DType::F32, stream);
    wait(*c_.loop->record_event(stream), "the barrier before the iteration");
    if (one.item<float>() != static_cast<float>(o.nprocs))
      throw SystemError("replay: the NCCL barrier all-reduce of ones gave " +
                        std::to_string(one.item<float>()) + ", expected " +
                        std::to_string(o.nprocs));
    setup_s_ = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  }

  std::string collective(TaskId id) override {
    const ScheduleGraph& g = *c_.graph;
    const OpDesc& op = g.op(id);
    if (op.group_size <= 1 || !plan_.uses_nccl(g, id)) return local_->collective(id);
    const nc::Communicator& comm = comm_of(id);
    torch::Tensor& buf = buf_.at(int(g.task(id).stream));
    const std::size_t es = c_.tensor_options.dtype().itemsize();
    const std::size_t count = static_cast<std::size_t>(op.bytes) / es;
    const std::size_t part = count / static_cast<std::size_t>(comm.size());
    char* base = static_cast<char*>(buf.data_ptr());
    const std::size_t me = static_cast<std::size_t>(comm.rank());
    StreamHandle stream = c_.loop->current_stream();
    switch (op.kind) {
      case OpKind::AllReduce: comm.all_reduce(base, base, count, c_.dtype, stream); break;
      case OpKind::AllGather:  // in place: this rank's block inside the gathered buffer
        comm.all_gather(base + me * part * es, base, part, c_.dtype, stream);
        break;
      case OpKind::ReduceScatter:
        comm.reduce_scatter(base, base + me * part * es, part, c_.dtype, stream);
        break;
      case OpKind::AllToAll: {
        // size() - 1 shifts, each a fused send / receive pair (NCCL's own alltoall is grouped
        // sends and receives to every peer): block `to` goes to rank `to`, block `from` arrives.
        char* out = static_cast<char*>(a2a_out_.at(int(g.task(id).stream)).data_ptr());
        const int n = comm.size(), r = comm.rank();
        for (int k = 1; k < n; ++k) {
          const int to = (r + k) % n, from = (r - k + n) % n;
          comm.send_recv(base + std::size_t(to) * part * es, part, to,
                         out + std::size_t(from) * part * es, part, from, c_.dtype, stream);
        }
        break;
      }
      default:
        TRAINSIM_CHECK(false, "replay: collective task " + g.label(id) + " has op " +
                                  to_string(op.kind));
    }
    ++collectives_[int(op.group)];
    return "nccl";
  }

  /// In place in the received tensor when the slice is this rank's block of it; otherwise
  /// (or when the group is not all present) by local copies.
  std::string complete_received(TaskId id, torch::Tensor& dst, bool backward, std::int64_t off,
                                std::int64_t n) override {
    if (!plan_.uses_nccl(*c_.graph, id)) return local_->complete_received(id, dst, backward, off, n);
    const nc::Communicator& comm = comm_of(id);
    if (off != comm.rank() * n || n * comm.size() != dst.numel())
      return local_->complete_received(id, dst, backward, off, n);
    char* base = static_cast<char*>(dst.data_ptr());
    comm.all_gather(base + off * dst.element_size(), base, static_cast<std::size_t>(n), c_.dtype,
                    c_.loop->current_stream());
    c_.loop->record_stream(dst, c_.loop->stream(c_.graph->task(id).stream));
    ++collectives_[int(c_.graph->op(id).group)];
    return "nccl";
  }

  /// ncclSend on the channel [this rank, peer], on a stream of its own per destination that
  /// first waits for what the send waited for on the pipeline stream.
  std::string send(TaskId id, const torch::Tensor& src, bool backward, std::int64_t off,
                   std::int64_t n) override {
    if (!plan_.uses_nccl(*c_.graph, id)) return local_->send(id, src, backward, off, n);
    const torch::Tensor slice = src.contiguous().view(-1).narrow(0, off, n);
    const RankId peer = RankId(c_.graph->task(id).peer);
    auto it = send_streams_.find(peer);
    if (it == send_streams_.end()) it = send_streams_.emplace(peer, c_.loop->new_stream()).first;
    const StreamHandle side = it->second;
    c_.loop->wait_stream(side, c_.loop->current_stream());
    comm_of(id).send(slice.data_ptr(), static_cast<std::size_t>(slice.numel()), c_.dtype,
                     /*peer=*/1, side);
    c_.loop->record_stream(slice, side);
    delivered_[id] = c_.loop->record_event(side);
    ++sends_;
    return "nccl";
  }

  /// ncclRecv on the channel [peer, this rank], on the pipeline stream (blocking it).
  std::string recv(TaskId id, torch::Tensor& dst, bool backward, std::int64_t off,
                   std::int64_t n) override {
    if (!plan_.uses_nccl(*c_.graph, id)) return local_->recv(id, dst, backward, off, n);
    torch::Tensor slice = dst.view(-1).narrow(0, off, n);
    comm_of(id).recv(slice.data_ptr(), static_cast<std::size_t>(slice.numel()), c_.dtype,
                     /*peer=*/0, c_.loop->current_stream());
    ++recvs_;
    return "nccl";
  }

  /// Polls `event`, so a peer that died, an NCCL error or a schedule whose ranks wait on each
  /// other ends in an error after nccl_timeout_s instead of a hang.
  void wait(const DeviceEvent& event, const std::string& what) override {
    const auto t0 = std::chrono::steady_clock::now();
    while (!event.query()) {
      std::string err = world_.async_error();
      for (const auto& c : comms_)
        if (err.empty()) err = c.async_error();
      const double waited =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      if (!err.empty() || waited > c_.options->nccl_timeout_s) {
        abort_all();
        throw SystemError(
            "replay: rank " + std::to_string(c_.rank) + ": " +
            (err.empty() ? "NCCL operations did not finish within " + std::to_string(waited) +
                               " s (TRAINSIM_NCCL_TIMEOUT_S) while waiting for " + what +
                               ": a peer process failed or stopped, or the ranks wait on each other"
                         : "NCCL error while waiting for " + what + ": " + err));
      }
      std::this_thread::sleep_for(std::chrono::microseconds(200));
    }
  }

  std::vector<StreamHandle> own_streams() const override {
    std::vector<StreamHandle> out;
    for (const auto& [peer, side] : send_streams_) out.push_back(side);
    return out;
  }

  const DeviceEvent* delivered(TaskId id) const override {
    auto it = delivered_.find(id);
    return it == delivered_.end() ? nullptr : it->second.get();
  }

  void add_notes(std::vector<std::string>& notes) const override {
    local_->add_notes(notes);
    const std::int64_t nprocs = c_.options->nprocs;
    std::int64_t through = 0;
    std::string kinds;
    for (const auto& [group, n] : collectives_) {
      through += n;
      kinds += (kinds.empty() ? "" : ", ") + std::to_string(n) + " " +
               to_string(static_cast<GroupKind>(group));
    }
    std::int64_t scratch = 0;
    for (const auto& [stream, bytes] : bytes_) scratch += bytes;
    const std::string version =
        " " + std::to_string(nc::version()) + " (" + nc::library_path() + "), communicators by " +
        (nc::has_comm_split() ? "ncclCommSplit" : "ncclCommInitRank per group");
    notes.push_back("multi-process replay: rank " + std::to_string(c_.rank) + " of " +
                    std::to_string(nprocs) + " processes (one GPU each) through NCCL" + version +
                    "; " + std::to_string(plan_.groups.size()) +
                    " group communicators set up in " + std::to_string(setup_s_) +
                    " s, then a barrier aligned the ranks' iteration clocks");
    if (through > 0)
      notes.push_back(std::to_string(through) + " collectives (" + kinds + ") ran through NCCL "
                      "on their groups' communicators, op.bytes of " + c_.dtype_name +
                      " in per-stream scratch buffers (" + std::to_string(scratch) +
                      " bytes, counted in the measured memory; a pipeline all-gather works in "
                      "place in the received tensor)");
    if (sends_ + recvs_ > 0)
      notes.push_back(std::to_string(sends_) + " pipeline sends and " + std::to_string(recvs_) +
                      " receives ran through NCCL on one communicator per directed rank pair; "
                      "each send on a stream of its own per destination (it does not hold up the "
                      "pipeline stream, as in the simulator; its span ends when the message is "
                      "delivered)");
  }

 private:
  const nc::Communicator& comm_of(TaskId id) const {
    return comms_.at(static_cast<std::size_t>(plan_.comm_of_group.at(c_.graph->task(id).group)));
  }

  void abort_all() noexcept {
    for (auto& c : comms_) c.abort();
    world_.abort();
  }

  const CommContext c_;
  CommPlan plan_;
  std::unique_ptr<CommBackend> local_;  // operations with absent peers
  std::map<int, std::int64_t> bytes_;   // per StreamId: largest op.bytes of its collectives
  std::map<int, torch::Tensor> buf_;    // per StreamId: scratch of bytes_
  std::map<int, std::int64_t> a2a_bytes_;   // per StreamId: largest all-to-all op.bytes
  std::map<int, torch::Tensor> a2a_out_;    // per StreamId: all-to-all output of a2a_bytes_
  std::map<int, std::int64_t> collectives_;  // per GroupKind
  std::int64_t sends_ = 0, recvs_ = 0;
  double setup_s_ = 0;
  std::map<RankId, StreamHandle> send_streams_;  // per destination rank
  std::map<TaskId, std::unique_ptr<DeviceEvent>> delivered_;
  // Declared after the buffers: destroyed first (ncclCommDestroy waits for their work).
  nc::Communicator world_;
  std::vector<nc::Communicator> comms_;  // indexed like plan_.groups
};

}  // namespace

std::unique_ptr<CommBackend> make_nccl_comm(const CommContext& context) {
  return std::make_unique<NcclComm>(context);
}

}  // namespace trainsim::hw
