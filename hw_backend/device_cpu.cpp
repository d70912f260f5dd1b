// The CPU device loop (device_loop.h): one thread issues each task and runs it to completion;
// memory from a counting wrapper around LibTorch's CPU allocator.
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstring>
#include <limits>

#include <c10/core/CPUAllocator.h>

#include "hw_backend/comm_backend.h"
#include "hw_backend/device_loop.h"

namespace trainsim::hw {
namespace {

/// Set while the CPU loop allocates buffers it must not count (DeviceLoop::allocate_uncounted).
thread_local bool t_uncounted = false;

/// A counting wrapper around LibTorch's default CPU allocator: bytes of live CPU tensors and
/// their peak. Installed once per process (SetCPUAllocator); it forwards every allocation.
class CountingCpuAllocator final : public c10::Allocator {
 public:
  explicit CountingCpuAllocator(c10::Allocator* base) : base_(base) {}

  // LibTorch changed this interface at 2.3: allocate() lost its const and copy_data() became
  // pure virtual. Both spellings are defined, without `override`: whichever the release
  // declares is overridden, the other is an ordinary member.
  c10::DataPtr allocate(std::size_t n) { return allocate_counted(n); }
  c10::DataPtr allocate(std::size_t n) const { return allocate_counted(n); }
  void copy_data(void* dest, const void* src, std::size_t count) const {
    if (count > 0) std::memcpy(dest, src, count);
  }
  c10::DeleterFnPtr raw_deleter() const override { return nullptr; }

  std::int64_t in_use() const { return in_use_.load(); }
  std::int64_t peak() const { return peak_.load(); }
  void reset_peak() { peak_.store(in_use_.load()); }

 private:
  c10::DataPtr allocate_counted(std::size_t n) const {
    if (t_uncounted) return base_->allocate(n);  // freed by the base allocator's own deleter
    c10::DataPtr inner = base_->allocate(n);
    void* data = inner.get();
    const c10::Device device = inner.device();
    auto* ctx = new Context{std::move(inner), static_cast<std::int64_t>(n),
                            const_cast<CountingCpuAllocator*>(this)};
    const std::int64_t now = in_use_.fetch_add(ctx->bytes) + ctx->bytes;
    std::int64_t peak = peak_.load();
    while (now > peak && !peak_.compare_exchange_weak(peak, now)) {
    }
    return {data, ctx, &release, device};
  }

  struct Context {
    c10::DataPtr inner;
    std::int64_t bytes;
    CountingCpuAllocator* self;
  };
  static void release(void* p) {
    auto* ctx = static_cast<Context*>(p);
    ctx->self->in_use_.fetch_sub(ctx->bytes);
    delete ctx;  // frees through the inner DataPtr's own deleter
  }

  c10::Allocator* base_;
  mutable std::atomic<std::int64_t> in_use_{0};
  mutable std::atomic<std::int64_t> peak_{0};
};

CountingCpuAllocator& cpu_counter() {
  // Never destroyed: tensors allocated through it may outlive any static destructor order.
  static CountingCpuAllocator* counter = [] {
    auto* c = new CountingCpuAllocator(c10::GetDefaultCPUAllocator());
    c10::SetCPUAllocator(c, /*priority=*/200);
    return c;
  }();
  return *counter;
}

/// On the CPU every piece of work is complete when the call that issued it returns.
class ReachedEvent final : public DeviceEvent {
 public:
  bool query() const override { return true; }
  void synchronize() const override {}
};

class CpuLoop final : public DeviceLoop {
 public:
  CpuLoop() { cpu_counter(); }  // install before any tensor of the replay exists

  torch::Device device() const override { return torch::Device(torch::kCPU); }
  bool is_cuda() const override { return false; }
  int index() const override { return 0; }

  void run(const ScheduleGraph&, const std::vector<TaskId>& order,
           const std::function<void(TaskId)>& run_task, CommBackend& comm,
           ExecutionRecord& rec) override {
    CountingCpuAllocator& counter = cpu_counter();
    rec.executor = "libtorch-" + torch_version() + "-cpu";
    rec.device = "cpu (" + std::to_string(at::get_num_threads()) + " LibTorch threads)";
    comm.connect(nullptr);
    rec.host_issue_start_s.assign(rec.start_s.size(), std::numeric_limits<double>::quiet_NaN());
    rec.host_issue_end_s.assign(rec.start_s.size(), std::numeric_limits<double>::quiet_NaN());
    counter.reset_peak();
    const auto t0 = std::chrono::steady_clock::now();
    auto now = [&] { return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(); };
    rec.allocated_bytes_samples.emplace_back(0.0, counter.in_use());
    rec.reserved_bytes_samples.emplace_back(0.0, counter.in_use());
    for (TaskId id : order) {
      const double start = now();
      run_task(id);
      const double end = now();
      // A zero-length span would be invisible and break start < end: clock resolution is
      // ~1 ns on Linux, so this only nudges empty tasks (no-op collectives).
      rec.start_s[id] = start;
      rec.end_s[id] = end > start ? end : std::nextafter(start, std::numeric_limits<double>::infinity());
      // The host issues each task and runs it to completion: its host issue span is its span.
      rec.host_issue_start_s[id] = rec.start_s[id];
      rec.host_issue_end_s[id] = rec.end_s[id];
      rec.allocated_bytes_samples.emplace_back(rec.end_s[id], counter.in_use());
      rec.reserved_bytes_samples.emplace_back(rec.end_s[id], counter.in_use());
    }
    rec.peak_allocated_bytes = counter.peak();
    rec.peak_reserved_bytes = counter.peak();
  }

  StreamHandle stream(StreamId) const override { return nullptr; }
  StreamHandle current_stream() const override { return nullptr; }
  StreamHandle new_stream() override { return nullptr; }
  void wait_stream(StreamHandle, StreamHandle) override {}
  std::unique_ptr<DeviceEvent> record_event(StreamHandle) override {
    return std::make_unique<ReachedEvent>();
  }
  void record_stream(const torch::Tensor&, StreamHandle) override {}
  void synchronize() override {}

  void allocate_uncounted(const std::function<void()>& allocate) override {
    t_uncounted = true;
    try {
      allocate();
    } catch (...) {
      t_uncounted = false;
      throw;
    }
    t_uncounted = false;
  }

  std::string memory_note() const override {
    return "memory: bytes of live LibTorch CPU tensors (a counting wrapper around the CPU "
           "allocator), sampled after each task; on the CPU reserved = allocated; not counted: "
           "the communication backend's own buffers (staging of what absent pipeline "
           "neighbours send, scratch of device-local collectives), which a run with its peers "
           "does not hold";
  }
};

}  // namespace

std::unique_ptr<DeviceLoop> make_cpu_loop() { return std::make_unique<CpuLoop>(); }

}  // namespace trainsim::hw
