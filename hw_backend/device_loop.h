// Internal to hw_backend/: the device loop of a replay, one interface with one implementation
// per device kind (as c10d's ProcessGroup with one file per backend):
//
//   device_cpu.cpp   one host thread issues each task and runs it to completion (like
//                    Megatron's Python loop); spans from the host steady clock; memory from a
//                    counting wrapper around LibTorch's CPU allocator.
//   device_cuda.cpp  one CUDA stream per StreamId, dependencies across streams as CUDA events,
//                    spans from timing events; memory from the CUDA caching allocator's
//                    statistics. Compiled only against a CUDA LibTorch: the only file of the
//                    replay that includes CUDA LibTorch headers.
//
// The executor (torch_executor.cpp) knows the model and what each task does; the loop knows
// streams, events, clocks and allocators. Streams and events cross this boundary as opaque
// handles, so the communication backends (comm_backend.h) need no CUDA headers either.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <torch/torch.h>

#include "models/graph/execution_record.h"
#include "models/graph/schedule_graph.h"

namespace trainsim::hw {

class CommBackend;

/// A device queue as an opaque pointer: a cudaStream_t on CUDA, nullptr on the CPU.
using StreamHandle = void*;

/// A point in one stream's work (a CUDA event); on the CPU always reached.
class DeviceEvent {
 public:
  virtual ~DeviceEvent() = default;
  /// Whether the work issued before it has finished (cudaEventQuery).
  virtual bool query() const = 0;
  /// Blocks the host until it has (cudaEventSynchronize).
  virtual void synchronize() const = 0;
};

class DeviceLoop {
 public:
  virtual ~DeviceLoop() = default;

  virtual torch::Device device() const = 0;
  virtual bool is_cuda() const = 0;
  /// The CUDA device index (0 on the CPU).
  virtual int index() const = 0;

  /// Issues `order` (a rank's task ids, a valid issue order of `graph`): run_task(id) for each
  /// id, on the stream of its StreamId. Calls comm.connect() before the clock starts, waits
  /// for other streams' events through comm.wait() (NCCL turns a dead peer into an error),
  /// and fills rec.executor, rec.device, start_s / end_s of the issued tasks (a send's span
  /// ends at comm.delivered(id) when it has one), one memory sample per task plus one at
  /// time 0, and the peaks; and the host thread's issue span of each task
  /// (rec.host_issue_start_s / host_issue_end_s, on the same time base: on the CPU the task's
  /// span, on CUDA the host wall clock around the task's issue).
  virtual void run(const ScheduleGraph& graph, const std::vector<TaskId>& order,
                   const std::function<void(TaskId)>& run_task, CommBackend& comm,
                   ExecutionRecord& rec) = 0;

  /// The stream of StreamId `s` (valid during run()); nullptr on the CPU.
  virtual StreamHandle stream(StreamId s) const = 0;
  /// The stream the task being issued runs on; nullptr on the CPU.
  virtual StreamHandle current_stream() const = 0;
  /// A new stream of the loop's device (owned by the loop); nullptr on the CPU.
  virtual StreamHandle new_stream() = 0;
  /// Makes `waiter` wait for the work issued on `on` so far (an event recorded on `on`).
  virtual void wait_stream(StreamHandle waiter, StreamHandle on) = 0;
  /// An event recorded on `stream` now.
  virtual std::unique_ptr<DeviceEvent> record_event(StreamHandle stream) = 0;
  /// Tells the caching allocator that `t` is used on `stream` (CUDA recordStream), so its
  /// memory is not reused before that stream's work is done; nothing on the CPU.
  virtual void record_stream(const torch::Tensor& t, StreamHandle stream) = 0;
  /// Waits for all work on the device.
  virtual void synchronize() = 0;

  /// Runs `allocate` (which creates buffers that live for the whole replay) with its
  /// allocations left out of the memory samples and peaks where the loop can tell them apart:
  /// the CPU loop's counting allocator skips them (device_cpu.cpp); the CUDA loop reads the
  /// caching allocator's totals, which include them (the default runs `allocate` as is).
  virtual void allocate_uncounted(const std::function<void()>& allocate) { allocate(); }

  /// The record's note on what the memory samples measure.
  virtual std::string memory_note() const = 0;
};

/// The CPU loop (device_cpu.cpp). Installs the counting CPU allocator (process-wide, once):
/// create the loop before any tensor of the replay.
std::unique_ptr<DeviceLoop> make_cpu_loop();

/// The CUDA loop of device `index` (device_cuda.cpp). In a build against a CPU-only LibTorch
/// (device_cuda_unavailable.cpp) it throws std::logic_error: parse_device refuses CUDA first.
std::unique_ptr<DeviceLoop> make_cuda_loop(int index);

}  // namespace trainsim::hw
