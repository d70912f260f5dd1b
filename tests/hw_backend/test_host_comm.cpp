// The host backend's collectives and messages between processes (hw_backend/host_comm.h): the
// test forks three processes that share a rendezvous directory; each checks its results
// against the hand sums of what every process contributed and exits 0 only when all match.
#include "hw_backend/host_comm.h"

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <dirent.h>
#include <functional>
#include <string>
#include <vector>

#include "tests/support/paths.h"

using trainsim::hw::HostChannel;
using trainsim::hw::HostGroup;
using trainsim::kernels::DType;
using trainsim::kernels::FileRendezvous;

namespace {

constexpr int kProcs = 3;

/// Runs body(rank) in kProcs forked processes; returns how many failed (non-zero exit).
int run_processes(const std::string& dir, const std::function<bool(int, const FileRendezvous&)>& body) {
  std::vector<pid_t> pids;
  for (int r = 0; r < kProcs; ++r) {
    const pid_t pid = fork();
    if (pid == 0) {
      bool ok = false;
      try {
        FileRendezvous rv(dir, "t", 30.0, 50e-6);
        ok = body(r, rv);
      } catch (const std::exception& e) {
        std::fprintf(stderr, "rank %d: %s\n", r, e.what());
      }
      _exit(ok ? 0 : 1);
    }
    pids.push_back(pid);
  }
  int failed = 0;
  for (pid_t pid : pids) {
    int status = 0;
    waitpid(pid, &status, 0);
    failed += !(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  }
  return failed;
}

bool expect_eq(int rank, const char* what, std::size_t i, float got, float want) {
  if (got == want) return true;
  std::fprintf(stderr, "rank %d: %s[%zu] = %g, expected %g\n", rank, what, i, got, want);
  return false;
}

const std::vector<int> kWorld = {0, 1, 2};

}  // namespace

TEST(HostComm, AllReduceIsTheHandSumOnEveryProcess) {
  trainsim::test_support::ScratchDir dir("host_comm_ar");
  const int failed = run_processes(dir.path().string(), [](int r, const FileRendezvous& rv) {
    HostGroup g(rv, "w", kWorld, r);
    bool ok = true;
    for (int rep = 0; rep < 4; ++rep) {  // repeated: sequence numbers and file clean-up
      std::vector<float> buf(37);
      for (std::size_t i = 0; i < buf.size(); ++i) buf[i] = float((r + 1) * 10 + rep) + 0.5f * i;
      g.all_reduce(buf.data(), buf.size(), DType::F32);
      // sum over r = 0, 1, 2 of (r + 1) * 10 + rep + i / 2 = 60 + 3 rep + 1.5 i
      for (std::size_t i = 0; i < buf.size(); ++i)
        ok &= expect_eq(r, "all_reduce", i, buf[i], 60.0f + 3.0f * rep + 1.5f * i);
    }
    return ok;
  });
  EXPECT_EQ(failed, 0);
  // Each member removed its files but the last exchange's (host_comm.h): 3 files remain.
  int files = 0;
  if (DIR* d = opendir(dir.path().string().c_str())) {
    while (dirent* e = readdir(d)) files += std::strncmp(e->d_name, "t.cw.", 5) == 0;
    closedir(d);
  }
  EXPECT_EQ(files, kProcs);
}

TEST(HostComm, ReduceScatterAllGatherAllToAllAgainstHandValues) {
  trainsim::test_support::ScratchDir dir("host_comm_rs");
  const int failed = run_processes(dir.path().string(), [](int r, const FileRendezvous& rv) {
    HostGroup g(rv, "w", kWorld, r);
    const std::size_t n = 5;
    bool ok = true;
    // reduce-scatter: block j element i of rank q is 100 q + 10 j + i; rank r receives
    // sum_q (100 q + 10 r + i) = 300 + 30 r + 3 i.
    std::vector<float> send(n * kProcs), recv(n);
    for (int j = 0; j < kProcs; ++j)
      for (std::size_t i = 0; i < n; ++i) send[j * n + i] = float(100 * r + 10 * j + int(i));
    g.reduce_scatter(send.data(), recv.data(), n, DType::F32);
    for (std::size_t i = 0; i < n; ++i)
      ok &= expect_eq(r, "reduce_scatter", i, recv[i], float(300 + 30 * r + 3 * int(i)));
    // all-gather in place: block m of every rank = 1000 m + i.
    std::vector<float> all(n * kProcs, -1.0f);
    for (std::size_t i = 0; i < n; ++i) all[r * n + i] = float(1000 * r + int(i));
    g.all_gather(all.data() + r * n, all.data(), n, DType::F32);
    for (int m = 0; m < kProcs; ++m)
      for (std::size_t i = 0; i < n; ++i)
        ok &= expect_eq(r, "all_gather", m * n + i, all[m * n + i], float(1000 * m + int(i)));
    // all-to-all: rank r's block m is rank m's block r: 100 m + 10 r + i.
    std::vector<float> out(n * kProcs);
    g.all_to_all(send.data(), out.data(), n, DType::F32);
    for (int m = 0; m < kProcs; ++m)
      for (std::size_t i = 0; i < n; ++i)
        ok &= expect_eq(r, "all_to_all", m * n + i, out[m * n + i], float(100 * m + 10 * r + int(i)));
    return ok;
  });
  EXPECT_EQ(failed, 0);
}

TEST(HostComm, Bf16SumsInFloatAndRoundsOnce) {
  trainsim::test_support::ScratchDir dir("host_comm_bf16");
  const int failed = run_processes(dir.path().string(), [](int r, const FileRendezvous& rv) {
    HostGroup g(rv, "w", kWorld, r);
    // bf16 bit patterns: 1.0 = 0x3f80, 2^-8 = 0x3b80. Rank 0 gives 1.0, ranks 1 and 2 give
    // 2^-8 each: the float sum 1 + 2^-7 is exact in bf16 (0x3c01 -> 0x3f81: 1 + 2^-7), whereas
    // rounding after each addition would give 1.0 twice (1 + 2^-8 is a tie, to even).
    std::uint16_t v = r == 0 ? 0x3f80 : 0x3b80;
    g.all_reduce(&v, 1, DType::BF16);
    if (v != 0x3f81) std::fprintf(stderr, "rank %d: bf16 sum 0x%04x, expected 0x3f81\n", r, v);
    return v == 0x3f81;
  });
  EXPECT_EQ(failed, 0);
}

TEST(HostComm, SubgroupInRingOrderAndBufferedMessages) {
  trainsim::test_support::ScratchDir dir("host_comm_sub");
  const int failed = run_processes(dir.path().string(), [](int r, const FileRendezvous& rv) {
    bool ok = true;
    if (r != 1) {  // group [2, 0]: member 0 is rank 2
      HostGroup g(rv, "s", {2, 0}, r);
      float mine = float(r), both[2];
      g.all_gather(&mine, both, 1, DType::F32);
      ok &= expect_eq(r, "subgroup all_gather", 0, both[0], 2.0f);
      ok &= expect_eq(r, "subgroup all_gather", 1, both[1], 0.0f);
    }
    // Rank 0 sends three messages to rank 2 without waiting; rank 2 receives them in order.
    HostChannel ch(rv, "c02", 0, 2);
    for (int k = 0; k < 3; ++k) {
      float msg[4];
      if (r == 0) {
        for (int i = 0; i < 4; ++i) msg[i] = float(10 * k + i);
        ch.send(msg, sizeof msg);
      } else if (r == 2) {
        ch.recv(msg, sizeof msg);
        for (int i = 0; i < 4; ++i) ok &= expect_eq(r, "message", i, msg[i], float(10 * k + i));
      }
    }
    return ok;
  });
  EXPECT_EQ(failed, 0);
}

TEST(HostComm, AbsentPeerIsATimeoutNamingIt) {
  trainsim::test_support::ScratchDir dir("host_comm_timeout");
  FileRendezvous rv(dir.path().string(), "t", 0.2, 1e-3);
  HostGroup g(rv, "w", {0, 7}, 0);
  float x = 1.0f;
  try {
    g.all_reduce(&x, 1, DType::F32);
    FAIL() << "expected a RendezvousError";
  } catch (const trainsim::kernels::RendezvousError& e) {
    EXPECT_NE(std::string(e.what()).find("rank 7"), std::string::npos) << e.what();
  }
}
