// The CUDA device loop (device_loop.h): one CUDA stream per StreamId, dependencies across
// streams as CUDA events, spans from timing events, memory from the caching allocator. The
// only file of the replay that includes CUDA LibTorch headers; compiled only against a CUDA
// LibTorch (hw_backend/CMakeLists.txt; otherwise device_cuda_unavailable.cpp).
#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>
#include <stdexcept>

#include <ATen/cuda/CUDAContext.h>
#include <ATen/cuda/CUDAEvent.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <cuda_runtime_api.h>

#include "hw_backend/backends.h"
#include "hw_backend/comm_backend.h"
#include "hw_backend/device_loop.h"
#include "models/errors.h"

namespace trainsim::hw {

bool cuda_torch_built() { return true; }

bool cuda_available(std::string* why) {
  if (torch::cuda::is_available()) return true;
  if (why) *why = "LibTorch " + torch_version() + " has CUDA but no CUDA device is visible";
  return false;
}

int cuda_device_count() {
  return torch::cuda::is_available() ? static_cast<int>(torch::cuda::device_count()) : 0;
}

std::int64_t cuda_free_memory_bytes(int index) {
  std::string why;
  if (!cuda_available(&why)) throw InputError("replay: free memory of cuda:" + std::to_string(index) + ": " + why);
  c10::cuda::CUDAGuard guard(static_cast<c10::DeviceIndex>(index));
  std::size_t free = 0, total = 0;
  const cudaError_t err = cudaMemGetInfo(&free, &total);
  if (err != cudaSuccess)
    throw SystemError(std::string("replay: cudaMemGetInfo on cuda:") + std::to_string(index) +
                      ": " + cudaGetErrorString(err));
  return static_cast<std::int64_t>(free);
}

namespace {

namespace cca = c10::cuda::CUDACachingAllocator;

/// A timing CUDA event.
class CudaEvent final : public DeviceEvent {
 public:
  explicit CudaEvent(const c10::cuda::CUDAStream& stream) { event.record(stream); }
  bool query() const override { return event.query(); }
  void synchronize() const override { event.synchronize(); }
  mutable at::cuda::CUDAEvent event{cudaEventDefault};  // block() is not const
};

class CudaLoop final : public DeviceLoop {
 public:
  explicit CudaLoop(int index) : index_(index) {}

  torch::Device device() const override {
    return torch::Device(torch::kCUDA, static_cast<c10::DeviceIndex>(index_));
  }
  bool is_cuda() const override { return true; }
  int index() const override { return index_; }

  void run(const ScheduleGraph& g, const std::vector<TaskId>& order,
           const std::function<void(TaskId)>& run_task, CommBackend& comm,
           ExecutionRecord& rec) override {
    c10::cuda::CUDAGuard guard(static_cast<c10::DeviceIndex>(index_));
    const cudaDeviceProp* prop = at::cuda::getDeviceProperties(index_);
    rec.executor = "libtorch-" + torch_version() + "-cuda";
    rec.device = "cuda:" + std::to_string(index_) + " (" + prop->name + ")";
    for (int s = 0; s < kNumStreams; ++s)
      streams_.push_back(c10::cuda::getStreamFromPool(/*isHighPriority=*/false, index_));
    // The stream on which host tasks mark their spans; kept in extra_, so that find() (and
    // record_event() at the end of the iteration) knows it.
    extra_.push_back(c10::cuda::getStreamFromPool(false, index_));
    const c10::cuda::CUDAStream marker = extra_.back();
    torch::cuda::synchronize(index_);
    comm.connect(streams_[0].stream());  // NCCL: communicators, then a barrier on streams_[0]
    cca::resetPeakStats(index_);
    const auto stat = [&](bool reserved) {
      const auto st = cca::getDeviceStats(index_);
      const auto& s = reserved ? st.reserved_bytes : st.allocated_bytes;
      // Index 0 is StatType::AGGREGATE (all pools). The enum has moved between releases
      // (CUDACachingAllocator, then c10::CachingAllocator), its value has not.
      return s[0];
    };
    const CudaEvent base(streams_[0]);
    // The host clock's zero: when the (idle, synchronised) stream has reached `base`, so host
    // issue times and device times share one time base (to the event's resolution, ~0.5 us).
    base.synchronize();
    const auto host0 = std::chrono::steady_clock::now();
    const auto host_now = [&] {
      return std::chrono::duration<double>(std::chrono::steady_clock::now() - host0).count();
    };
    rec.host_issue_start_s.assign(rec.start_s.size(), std::numeric_limits<double>::quiet_NaN());
    rec.host_issue_end_s.assign(rec.start_s.size(), std::numeric_limits<double>::quiet_NaN());
    std::vector<std::unique_ptr<CudaEvent>> start_ev(g.num_tasks()), end_ev(g.num_tasks());
    std::vector<std::pair<std::int64_t, std::int64_t>> mem;  // (allocated, reserved) at issue
    rec.allocated_bytes_samples.emplace_back(0.0, stat(false).current);
    rec.reserved_bytes_samples.emplace_back(0.0, stat(true).current);
    const DependencyGraph& deps = g.dependencies();
    // What a dependent task waits for: a send's delivery when its backend has one (NCCL sends
    // run on streams of their own), else the end of the task on its stream.
    const auto done_event = [&](TaskId from) -> const CudaEvent* {
      if (const DeviceEvent* d = comm.delivered(from)) return static_cast<const CudaEvent*>(d);
      return end_ev[from].get();
    };
    for (TaskId id : order) {
      const Task& t = g.task(id);
      if (t.stream == StreamId::Cpu) {
        // Host work: wait for its dependencies, mark its span on an idle stream.
        for (auto [e, end] = boost::in_edges(id, deps); e != end; ++e) {
          const auto from = static_cast<TaskId>(boost::source(*e, deps));
          if (const CudaEvent* ev = done_event(from)) comm.wait(*ev, "task " + g.label(from));
        }
        start_ev[id] = std::make_unique<CudaEvent>(marker);
        marker.synchronize();
        rec.host_issue_start_s[id] = host_now();
        run_task(id);
        rec.host_issue_end_s[id] = host_now();
        end_ev[id] = std::make_unique<CudaEvent>(marker);
      } else {
        const c10::cuda::CUDAStream& stream = streams_[int(t.stream)];
        c10::cuda::CUDAStreamGuard sg(stream);
        for (auto [e, end] = boost::in_edges(id, deps); e != end; ++e) {
          const auto from = static_cast<TaskId>(boost::source(*e, deps));
          const CudaEvent* ev = done_event(from);
          if (ev && (g.task(from).stream != t.stream || ev != end_ev[from].get())) ev->event.block(stream);
        }
        rec.host_issue_start_s[id] = host_now();
        start_ev[id] = std::make_unique<CudaEvent>(stream);
        run_task(id);
        end_ev[id] = std::make_unique<CudaEvent>(stream);
        rec.host_issue_end_s[id] = host_now();
      }
      mem.emplace_back(stat(false).current, stat(true).current);
    }
    // Every stream's work done (or, with NCCL, an error after the timeout).
    std::vector<StreamHandle> all;
    for (const auto& s : streams_) all.push_back(s.stream());
    all.push_back(marker.stream());
    for (StreamHandle s : comm.own_streams()) all.push_back(s);
    for (StreamHandle s : all) comm.wait(*record_event(s), "the end of the iteration");
    torch::cuda::synchronize(index_);
    std::size_t i = 0;
    for (TaskId id : order) {
      // A send's span ends when its message is delivered (its own stream), not when posted.
      const DeviceEvent* delivered = comm.delivered(id);
      const CudaEvent& last = delivered ? static_cast<const CudaEvent&>(*delivered) : *end_ev[id];
      rec.start_s[id] = base.event.elapsed_time(start_ev[id]->event) * 1e-3;
      rec.end_s[id] = std::max(base.event.elapsed_time(last.event) * 1e-3, rec.start_s[id]);
      if (!(rec.end_s[id] > rec.start_s[id]))
        rec.end_s[id] = std::nextafter(rec.start_s[id], std::numeric_limits<double>::infinity());
      rec.allocated_bytes_samples.emplace_back(rec.end_s[id], mem[i].first);
      rec.reserved_bytes_samples.emplace_back(rec.end_s[id], mem[i].second);
      ++i;
    }
    rec.peak_allocated_bytes = stat(false).peak;
    rec.peak_reserved_bytes = stat(true).peak;
  }

  StreamHandle stream(StreamId s) const override { return streams_.at(int(s)).stream(); }
  StreamHandle current_stream() const override {
    return c10::cuda::getCurrentCUDAStream(static_cast<c10::DeviceIndex>(index_)).stream();
  }
  StreamHandle new_stream() override {
    extra_.push_back(c10::cuda::getStreamFromPool(false, index_));
    return extra_.back().stream();
  }
  void wait_stream(StreamHandle waiter, StreamHandle on) override {
    at::cuda::CUDAEvent posted;
    posted.record(find(on));
    posted.block(find(waiter));
  }
  std::unique_ptr<DeviceEvent> record_event(StreamHandle stream) override {
    return std::make_unique<CudaEvent>(find(stream));
  }
  void record_stream(const torch::Tensor& t, StreamHandle stream) override {
    if (t.defined()) cca::recordStream(t.storage().data_ptr(), find(stream));
  }
  void synchronize() override { torch::cuda::synchronize(index_); }

  std::string memory_note() const override {
    return "memory: CUDA caching allocator bytes allocated / reserved, sampled when each task "
           "was issued";
  }

 private:
  /// The loop's stream behind `handle`: one of its StreamId streams, a new_stream(), or the
  /// device's current stream.
  c10::cuda::CUDAStream find(StreamHandle handle) const {
    for (const auto& s : streams_)
      if (s.stream() == handle) return s;
    for (const auto& s : extra_)
      if (s.stream() == handle) return s;
    const c10::cuda::CUDAStream cur =
        c10::cuda::getCurrentCUDAStream(static_cast<c10::DeviceIndex>(index_));
    if (cur.stream() == handle) return cur;
    TRAINSIM_CHECK(false, "replay: a stream handle that is not the CUDA loop's");
  }

  const int index_;
  std::vector<c10::cuda::CUDAStream> streams_;  // indexed by StreamId
  std::vector<c10::cuda::CUDAStream> extra_;    // new_stream()
};

}  // namespace

std::unique_ptr<DeviceLoop> make_cuda_loop(int index) { return std::make_unique<CudaLoop>(index); }

}  // namespace trainsim::hw
