// Internal to hw_backend/: the communication backend of a replay, one interface with one
// implementation per transport (as c10d's ProcessGroup with ProcessGroupNCCL and
// ProcessGroupGloo in their own files):
//
//   comm_local.cpp  device-local substitution (every single-process replay, and the
//                   operations of a multi-process replay whose peers are absent): a
//                   collective copies the bytes one rank sends in a ring
//                   (CostModel::ring_bytes_per_rank) between two scratch buffers; a pipeline
//                   message is copied into / out of a staging buffer that stands for the
//                   absent neighbour; a group of one rank is a no-op.
//   comm_nccl.cpp   multi-process replay (ReplayOptions::nprocs > 1): the operations whose
//                   ranks are all present (comm_plan.h) through NCCL (kernels/nccl_comm.h),
//                   the others through the local backend. Compiled when kernels' trainsim_nccl
//                   is built; otherwise comm_nccl_unavailable.cpp refuses nprocs > 1.
//   comm_host.cpp   multi-process CPU replay (--device cpu --nprocs N): the same plan, the
//                   operations between the processes through host_comm.h (files in the
//                   rendezvous directory), the others through the local backend.
//
// The executor keeps the model's tensors and decides what a message is (which tensor, which
// slice); a backend moves the bytes and says how (ExecutionRecord::replayed_as).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <torch/torch.h>

#include "hw_backend/comm_plan.h"
#include "hw_backend/device_loop.h"
#include "hw_backend/replay.h"
#include "kernels/adam_types.h"
#include "models/parallel_layout.h"

namespace trainsim::hw {

/// What a backend knows of the replay it serves.
struct CommContext {
  const ScheduleGraph* graph = nullptr;
  RankId rank = 0;
  RankCoords coords;
  const ReplayOptions* options = nullptr;
  DeviceLoop* loop = nullptr;
  /// The model's element type on the replay device.
  torch::TensorOptions tensor_options;
  kernels::DType dtype = kernels::DType::F32;
  std::string dtype_name;  ///< "fp32", "bf16", "fp16"
  /// Shape of a pipeline message's full tensor: [s, b, h].
  std::vector<std::int64_t> message_shape;
};

class CommBackend {
 public:
  virtual ~CommBackend() = default;

  /// Allocates what the rank's communication in `order` needs (scratch and staging buffers),
  /// drawing stand-in data from `gen`. Called once, before the iteration.
  virtual void prepare(const std::vector<TaskId>& order, torch::Generator& gen) = 0;
  /// Called by the device loop before its clock starts, with its first stream (NCCL: the
  /// communicators, then a barrier that aligns the ranks' clocks).
  virtual void connect(StreamHandle stream) = 0;

  /// A collective task (any group size; not the all-gather that completes a received pipeline
  /// slice). Returns how it was replayed.
  virtual std::string collective(TaskId id) = 0;
  /// The pipeline all-gather (scatter/gather, SC'21 Sec. 4.1) that completes `received`, of
  /// which elements [offset, offset + count) arrived; `backward` selects the gradient channel.
  virtual std::string complete_received(TaskId id, torch::Tensor& received, bool backward,
                                        std::int64_t offset, std::int64_t count) = 0;
  /// Sends elements [offset, offset + count) of `tensor` (Send task `id`).
  virtual std::string send(TaskId id, const torch::Tensor& tensor, bool backward,
                           std::int64_t offset, std::int64_t count) = 0;
  /// Receives elements [offset, offset + count) of `tensor` (Recv task `id`).
  virtual std::string recv(TaskId id, torch::Tensor& tensor, bool backward, std::int64_t offset,
                           std::int64_t count) = 0;

  /// Waits for `event` (for the device loop). NCCL polls, so a dead peer, an NCCL error or
  /// ranks waiting on each other end in an error after the timeout instead of a hang.
  virtual void wait(const DeviceEvent& event, const std::string& what) = 0;
  /// Streams of the backend's own the loop must wait for at the end of the iteration.
  virtual std::vector<StreamHandle> own_streams() const = 0;
  /// When the message of Send task `id` was delivered, if that is not the end of the task on
  /// its stream (NCCL sends run on streams of their own); nullptr otherwise.
  virtual const DeviceEvent* delivered(TaskId id) const = 0;

  /// Appends the record's notes on what was substituted or run through which transport.
  virtual void add_notes(std::vector<std::string>& notes) const = 0;
};

/// The device-local backend (comm_local.cpp). With `remote` (a multi-process replay's plan),
/// the collectives that plan runs through NCCL get no local scratch space.
std::unique_ptr<CommBackend> make_local_comm(const CommContext& context,
                                             const CommPlan* remote = nullptr);

/// The NCCL backend for ReplayOptions::nprocs > 1 (comm_nccl.cpp); the plan is computed from
/// the graph. In a build without NCCL (comm_nccl_unavailable.cpp) it throws InputError.
std::unique_ptr<CommBackend> make_nccl_comm(const CommContext& context);

/// The host backend for a CPU replay with ReplayOptions::nprocs > 1 (comm_host.cpp): always
/// built; needs ReplayOptions::nccl_dir (the rendezvous directory).
std::unique_ptr<CommBackend> make_host_comm(const CommContext& context);

}  // namespace trainsim::hw
