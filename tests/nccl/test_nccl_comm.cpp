// NCCL communicators (kernels/nccl_comm.h). Without a GPU: the split-round packing and loading
// the library (no driver needed). With one GPU: a one-rank world (rendezvous, all-reduce,
// all-gather, reduce-scatter, split, a send/recv to itself). With two GPUs: two processes
// (fork), one per GPU, through the file rendezvous, every operation in fp32 / fp16 / bf16,
// checked element by element against sums computed here.
//
// All CUDA work runs in forked children: the test process itself never initializes CUDA
// (a child of a process that did cannot use the GPU).
#include "kernels/nccl_comm.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <dirent.h>
#include <functional>
#include <iostream>
#include <string>
#include <thread>
#include <vector>

#include "kernels/fused_adam.h"
#include "kernels/half.h"

namespace tk = trainsim::kernels;
namespace nccl = trainsim::kernels::nccl;

namespace {

// ------------------------------------------------------------------ process helpers
/// CUDA device count as seen by a child process (the parent stays CUDA-free); `why` gets the
/// runtime's reason when it is 0.
int probe_device_count(std::string* why) {
  int fds[2];
  if (::pipe(fds) != 0) return 0;
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::close(fds[0]);
    std::string reason;
    const int n = tk::cuda::device_count(&reason);
    const std::string msg = std::to_string(n) + "\n" + reason;
    (void)!::write(fds[1], msg.data(), msg.size());
    ::_exit(0);
  }
  ::close(fds[1]);
  std::string out;
  char buf[512];
  for (ssize_t r; (r = ::read(fds[0], buf, sizeof buf)) > 0;) out.append(buf, std::size_t(r));
  ::close(fds[0]);
  int status = 0;
  ::waitpid(pid, &status, 0);
  const std::size_t nl = out.find('\n');
  if (nl == std::string::npos) {
    *why = "the probe process failed";
    return 0;
  }
  *why = out.substr(nl + 1);
  return std::atoi(out.substr(0, nl).c_str());
}

/// Runs `body(rank)` in `n` forked processes; returns "" when all exit 0 within `timeout_s`,
/// else what went wrong (children still running then are killed).
std::string run_ranks(int n, double timeout_s, const std::function<int(int)>& body) {
  std::vector<pid_t> pids;
  for (int r = 0; r < n; ++r) {
    const pid_t pid = ::fork();
    if (pid == 0) {
      int rc = 1;
      try {
        rc = body(r);
      } catch (const std::exception& e) {
        std::cerr << "rank " << r << ": " << e.what() << std::endl;
        rc = 2;
      }
      std::cerr.flush();
      ::_exit(rc);
    }
    pids.push_back(pid);
  }
  std::string failures;
  const auto t0 = std::chrono::steady_clock::now();
  std::vector<bool> done(n, false);
  int remaining = n;
  while (remaining > 0) {
    for (int r = 0; r < n; ++r) {
      if (done[r]) continue;
      int status = 0;
      if (::waitpid(pids[r], &status, WNOHANG) == pids[r]) {
        done[r] = true;
        --remaining;
        if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
          failures += "rank " + std::to_string(r) + " exited with status " +
                      std::to_string(WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status)) +
                      "; ";
      }
    }
    if (remaining > 0 &&
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() > timeout_s) {
      for (int r = 0; r < n; ++r)
        if (!done[r]) {
          ::kill(pids[r], SIGKILL);
          ::waitpid(pids[r], nullptr, 0);
          failures += "rank " + std::to_string(r) + " timed out (killed); ";
        }
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return failures;
}

std::string make_temp_dir() {
  const char* tmp = std::getenv("TMPDIR");
  std::string templ = std::string(tmp && *tmp ? tmp : "/tmp") + "/trainsim-nccl-test-XXXXXX";
  std::vector<char> buf(templ.begin(), templ.end());
  buf.push_back('\0');
  if (!::mkdtemp(buf.data())) return "";
  return buf.data();
}

void remove_dir(const std::string& dir) {
  if (DIR* d = ::opendir(dir.c_str())) {
    while (dirent* e = ::readdir(d)) {
      const std::string n = e->d_name;
      if (n != "." && n != "..") std::remove((dir + "/" + n).c_str());
    }
    ::closedir(d);
  }
  ::rmdir(dir.c_str());
}

// ------------------------------------------------------------------ typed host buffers
/// Element i of rank r's input: small integers, exact in fp16 and bf16 and in their sums.
float input_value(int rank, std::size_t i) { return float((i * 7 + 3 * rank) % 23) - 11.0f; }

std::vector<char> encode(const std::vector<float>& v, tk::DType t) {
  const std::size_t es = t == tk::DType::F32 ? 4 : 2;
  std::vector<char> out(v.size() * es);
  for (std::size_t i = 0; i < v.size(); ++i) {
    if (t == tk::DType::F32) {
      std::memcpy(&out[i * 4], &v[i], 4);
    } else {
      const std::uint16_t h = t == tk::DType::F16 ? tk::float_to_fp16(v[i]) : tk::float_to_bf16(v[i]);
      std::memcpy(&out[i * 2], &h, 2);
    }
  }
  return out;
}

std::vector<float> decode(const std::vector<char>& b, tk::DType t) {
  const std::size_t es = t == tk::DType::F32 ? 4 : 2;
  std::vector<float> out(b.size() / es);
  for (std::size_t i = 0; i < out.size(); ++i) {
    if (t == tk::DType::F32) {
      std::memcpy(&out[i], &b[i * 4], 4);
    } else {
      std::uint16_t h;
      std::memcpy(&h, &b[i * 2], 2);
      out[i] = t == tk::DType::F16 ? tk::fp16_to_float(h) : tk::bf16_to_float(h);
    }
  }
  return out;
}

const char* name(tk::DType t) {
  return t == tk::DType::F32 ? "fp32" : t == tk::DType::F16 ? "fp16" : "bf16";
}

/// Counts elements of `got` that differ from `want`, printing the first.
int mismatches(const std::vector<float>& got, const std::vector<float>& want, const std::string& what) {
  int bad = 0;
  for (std::size_t i = 0; i < want.size(); ++i)
    if (i >= got.size() || got[i] != want[i]) {
      if (bad++ == 0)
        std::cerr << what << ": element " << i << " is " << (i < got.size() ? got[i] : NAN)
                  << ", expected " << want[i] << std::endl;
    }
  return bad;
}

/// Every collective on `comm` in every type, checked against sums written here. Returns the
/// number of wrong elements. `world_ranks[k]` is the world rank of communicator rank k (the
/// inputs depend on the world rank, so a wrong rank order shows).
int check_collectives(const nccl::Communicator& comm, const std::vector<int>& world_ranks) {
  const int n = comm.size(), me = comm.rank();
  constexpr std::size_t kCount = 4099;  // not a multiple of anything NCCL likes
  int bad = 0;
  for (tk::DType t : {tk::DType::F32, tk::DType::F16, tk::DType::BF16}) {
    const std::size_t es = t == tk::DType::F32 ? 4 : 2;
    const std::string tag = std::string(name(t)) + " rank " + std::to_string(me) + "/" + std::to_string(n);
    // All-reduce, in place: sum over ranks of input_value.
    {
      std::vector<float> in(kCount), want(kCount, 0.0f);
      for (std::size_t i = 0; i < kCount; ++i) {
        in[i] = input_value(world_ranks[me], i);
        for (int k = 0; k < n; ++k) want[i] += input_value(world_ranks[k], i);
      }
      tk::cuda::DeviceBuffer buf(kCount * es);
      const auto host = encode(in, t);
      buf.upload(host.data(), host.size());
      comm.all_reduce(buf.data(), buf.data(), kCount, t, nullptr);
      tk::cuda::synchronize(nullptr);
      std::vector<char> out(kCount * es);
      buf.download(out.data(), out.size());
      bad += mismatches(decode(out, t), want, "all_reduce " + tag);
    }
    // All-gather, out of place: block k is rank k's input.
    {
      std::vector<float> in(kCount), want(kCount * n);
      for (std::size_t i = 0; i < kCount; ++i) in[i] = input_value(world_ranks[me], i);
      for (int k = 0; k < n; ++k)
        for (std::size_t i = 0; i < kCount; ++i) want[k * kCount + i] = input_value(world_ranks[k], i);
      tk::cuda::DeviceBuffer src(kCount * es), dst(kCount * n * es);
      const auto host = encode(in, t);
      src.upload(host.data(), host.size());
      comm.all_gather(src.data(), dst.data(), kCount, t, nullptr);
      tk::cuda::synchronize(nullptr);
      std::vector<char> out(kCount * n * es);
      dst.download(out.data(), out.size());
      bad += mismatches(decode(out, t), want, "all_gather " + tag);
    }
    // Reduce-scatter, out of place: this rank gets block `me` of the sum.
    {
      std::vector<float> in(kCount * n), want(kCount, 0.0f);
      for (std::size_t i = 0; i < kCount * n; ++i) in[i] = input_value(world_ranks[me], i);
      for (std::size_t i = 0; i < kCount; ++i)
        for (int k = 0; k < n; ++k) want[i] += input_value(world_ranks[k], me * kCount + i);
      tk::cuda::DeviceBuffer src(kCount * n * es), dst(kCount * es);
      const auto host = encode(in, t);
      src.upload(host.data(), host.size());
      comm.reduce_scatter(src.data(), dst.data(), kCount, t, nullptr);
      tk::cuda::synchronize(nullptr);
      std::vector<char> out(kCount * es);
      dst.download(out.data(), out.size());
      bad += mismatches(decode(out, t), want, "reduce_scatter " + tag);
    }
    // Ring exchange: send to the next rank, receive from the previous one (fused pair; with
    // one rank, a message to itself).
    {
      const int next = (me + 1) % n, prev = (me + n - 1) % n;
      std::vector<float> in(kCount), want(kCount);
      for (std::size_t i = 0; i < kCount; ++i) {
        in[i] = input_value(world_ranks[me], i);
        want[i] = input_value(world_ranks[prev], i);
      }
      tk::cuda::DeviceBuffer src(kCount * es), dst(kCount * es);
      const auto host = encode(in, t);
      src.upload(host.data(), host.size());
      comm.send_recv(src.data(), kCount, next, dst.data(), kCount, prev, t, nullptr);
      tk::cuda::synchronize(nullptr);
      std::vector<char> out(kCount * es);
      dst.download(out.data(), out.size());
      bad += mismatches(decode(out, t), want, "send_recv " + tag);
    }
  }
  return bad;
}

#define SKIP_WITHOUT_GPUS(n)                                                              \
  do {                                                                                    \
    std::string why_;                                                                     \
    if (!nccl::available(&why_)) GTEST_SKIP() << "NCCL not loadable: " << why_;           \
    const int count_ = probe_device_count(&why_);                                         \
    if (count_ == 0) GTEST_SKIP() << "no CUDA device: " << why_;                          \
    if (count_ < (n))                                                                     \
      GTEST_SKIP() << "needs " << (n) << " GPUs, " << count_ << " visible";               \
  } while (0)

// ------------------------------------------------------------------ no GPU needed
TEST(NcclSplitRounds, DisjointGroupsShareARoundInListOrder) {
  // tp2 x pp2 on 4 ranks: TP groups {0,1} {2,3}, pipeline channels 0->2, 1->3, 2->0, 3->1.
  const std::vector<std::vector<int>> groups = {{0, 1}, {2, 3}, {0, 2}, {1, 3}, {2, 0}, {3, 1}};
  // By hand: {0,1},{2,3} disjoint -> round 0; {0,2} meets round 0 -> round 1; {1,3} joins
  // round 1; {2,0} meets rounds 0 and 1 -> round 2; {3,1} joins round 2.
  EXPECT_EQ(nccl::split_rounds(groups), (std::vector<int>{0, 0, 1, 1, 2, 2}));
  EXPECT_EQ(nccl::split_rounds({}), std::vector<int>{});
  EXPECT_EQ(nccl::split_rounds({{0}, {1}, {0, 1}}), (std::vector<int>{0, 0, 1}));
  EXPECT_THROW(nccl::split_rounds({{0, 1, 0}}), std::invalid_argument);
}

TEST(NcclLibrary, LoadsWithoutAGpuAndReportsItsVersion) {
  std::string why;
  if (!nccl::available(&why)) GTEST_SKIP() << "NCCL not loadable here: " << why;
  const int v = nccl::version();
  // NCCL >= 2.9 encodes major*10000 + minor*100 + patch; this module needs >= 2.7 entry points.
  EXPECT_GE(v, 20700) << nccl::library_path();
  EXPECT_LT(v, 100000) << nccl::library_path();
  EXPECT_FALSE(nccl::library_path().empty());
  if (v >= 21800) EXPECT_TRUE(nccl::has_comm_split()) << "NCCL " << v << " has ncclCommSplit";
  if (v < 21800) EXPECT_FALSE(nccl::has_comm_split());
  // A unique id needs the library only (no driver): two ids differ (they embed a random magic).
  const nccl::UniqueId a = nccl::make_unique_id(), b = nccl::make_unique_id();
  EXPECT_NE(a, b);
}

TEST(NcclLibrary, EmptyCommunicatorIsInvalid) {
  nccl::Communicator c;
  EXPECT_FALSE(c.valid());
  EXPECT_EQ(c.size(), 0);
  EXPECT_EQ(c.async_error(), "");
  EXPECT_THROW(c.split(0, 0), std::logic_error);
}

// ------------------------------------------------------------------ GPUs
TEST(NcclComm, OneRankWorldThroughTheRendezvous) {
  SKIP_WITHOUT_GPUS(1);
  const std::string dir = make_temp_dir();
  ASSERT_FALSE(dir.empty());
  const std::string failures = run_ranks(1, 120.0, [&](int rank) {
    tk::cuda::set_device(0);
    tk::FileRendezvous rv(dir, "one", 30.0);
    nccl::Communicator world = nccl::Communicator::init_with_rendezvous(rv, "world", 1, rank);
    if (world.size() != 1 || world.rank() != 0) return 3;
    int bad = check_collectives(world, {0});
    auto groups = nccl::make_group_communicators(world, {{0}}, rv, "g");
    if (groups.size() != 1 || !groups[0].valid() || groups[0].size() != 1) return 4;
    bad += check_collectives(groups[0], {0});
    if (!world.async_error().empty()) return 5;
    return bad == 0 ? 0 : 6;
  });
  remove_dir(dir);
  EXPECT_EQ(failures, "");
}

TEST(NcclComm, TwoProcessesTwoGpusCollectivesSplitsAndMessages) {
  SKIP_WITHOUT_GPUS(2);
  const std::string dir = make_temp_dir();
  ASSERT_FALSE(dir.empty());
  const std::string failures = run_ranks(2, 240.0, [&](int rank) {
    tk::cuda::set_device(rank);
    tk::FileRendezvous rv(dir, "two", 60.0);
    nccl::Communicator world = nccl::Communicator::init_with_rendezvous(rv, "world", 2, rank);
    if (world.size() != 2 || world.rank() != rank) return 3;
    int bad = check_collectives(world, {0, 1});
    // Three groups: both ranks in order, both reversed (overlaps: its own split round), and a
    // singleton of rank 1 (rank 0 joins none there).
    const std::vector<std::vector<int>> groups = {{0, 1}, {1, 0}, {1}};
    auto comms = nccl::make_group_communicators(world, groups, rv, "grp");
    if (comms.size() != 3) return 4;
    if (!comms[0].valid() || comms[0].rank() != rank) return 5;
    if (!comms[1].valid() || comms[1].rank() != 1 - rank) return 6;
    if (comms[2].valid() != (rank == 1)) return 7;
    bad += check_collectives(comms[0], {0, 1});
    bad += check_collectives(comms[1], {1, 0});
    if (rank == 1) bad += check_collectives(comms[2], {1});
    // A one-way message on the reversed communicator: world rank 0 (its rank 1) to world
    // rank 1 (its rank 0), the way a pipeline channel is used.
    constexpr std::size_t kCount = 1 << 20;
    std::vector<float> in(kCount);
    for (std::size_t i = 0; i < kCount; ++i) in[i] = input_value(7, i);
    tk::cuda::DeviceBuffer buf(kCount * 4);
    if (rank == 0) {
      buf.upload(in.data(), kCount * 4);
      comms[1].send(buf.data(), kCount, tk::DType::F32, /*peer=*/0, nullptr);
    } else {
      comms[1].recv(buf.data(), kCount, tk::DType::F32, /*peer=*/1, nullptr);
    }
    tk::cuda::synchronize(nullptr);
    if (rank == 1) {
      std::vector<float> out(kCount);
      buf.download(out.data(), kCount * 4);
      bad += mismatches(out, in, "send/recv 0 -> 1");
    }
    for (const auto& c : comms)
      if (!c.async_error().empty()) return 8;
    return bad == 0 ? 0 : 9;
  });
  remove_dir(dir);
  EXPECT_EQ(failures, "");
}

}  // namespace
