// The file rendezvous of multi-process replays (kernels/rendezvous.h): publish / wait across
// processes (fork), the timeout and its message, atomicity under concurrent reads, malformed
// files, run-id separation. No GPU needed.
#include "kernels/rendezvous.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <dirent.h>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

using trainsim::kernels::FileRendezvous;
using trainsim::kernels::RendezvousError;

namespace {

/// A fresh directory per test, removed with its files afterwards.
class Rendezvous : public ::testing::Test {
 protected:
  void SetUp() override {
    const char* tmp = std::getenv("TMPDIR");
    std::string templ = std::string(tmp && *tmp ? tmp : "/tmp") + "/trainsim-rv-test-XXXXXX";
    std::vector<char> buf(templ.begin(), templ.end());
    buf.push_back('\0');
    ASSERT_NE(::mkdtemp(buf.data()), nullptr);
    dir_ = buf.data();
  }
  void TearDown() override {
    for (const std::string& f : files()) std::remove((dir_ + "/" + f).c_str());
    ::rmdir(dir_.c_str());
  }
  std::vector<std::string> files() const {
    std::vector<std::string> out;
    if (DIR* d = ::opendir(dir_.c_str())) {
      while (dirent* e = ::readdir(d)) {
        const std::string n = e->d_name;
        if (n != "." && n != "..") out.push_back(n);
      }
      ::closedir(d);
    }
    return out;
  }
  std::string dir_;
};

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

/// Payload of generation `g`: `n` bytes, all equal to 'a' + g % 26 (checkable byte by byte).
std::string generation_payload(int g, std::size_t n) { return std::string(n, char('a' + g % 26)); }

int wait_child(pid_t pid) {
  int status = 0;
  if (::waitpid(pid, &status, 0) != pid) return -1;
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

TEST_F(Rendezvous, PublishThenWaitReturnsThePayloadAndLeavesNoTemporaryFile) {
  FileRendezvous rv(dir_, "job1", 1.0);
  std::string payload = "unique-id";
  payload.push_back('\0');  // binary payloads survive
  payload += "\xff\x01tail";
  rv.publish("nccl-id.world", payload);
  EXPECT_EQ(rv.path_of("nccl-id.world"), dir_ + "/job1.nccl-id.world");
  EXPECT_EQ(rv.wait("nccl-id.world", static_cast<std::int64_t>(payload.size())), payload);
  EXPECT_EQ(files(), std::vector<std::string>{"job1.nccl-id.world"});
  // Header line, then the payload: the documented file format.
  std::ifstream f(rv.path_of("nccl-id.world"), std::ios::binary);
  std::string content((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  EXPECT_EQ(content, "trainsim-rendezvous 1 " + std::to_string(payload.size()) + "\n" + payload);
  rv.remove("nccl-id.world");
  EXPECT_TRUE(files().empty());
  rv.remove("nccl-id.world");  // removing a missing name is not an error
}

TEST_F(Rendezvous, WaitTimesOutWithTheFileAndThePublisherInTheMessage) {
  FileRendezvous rv(dir_, "job1", 0.2);
  const auto t0 = std::chrono::steady_clock::now();
  try {
    rv.wait("nccl-id.world", 128, "rank 0");
    FAIL() << "wait returned without a published file";
  } catch (const RendezvousError& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find(dir_ + "/job1.nccl-id.world"), std::string::npos) << msg;
    EXPECT_NE(msg.find("rank 0"), std::string::npos) << msg;
    EXPECT_NE(msg.find("TRAINSIM_NCCL_TIMEOUT_S"), std::string::npos) << msg;
  }
  // A lower bound only: the timeout was honoured (a loaded machine can only make it longer).
  EXPECT_GE(seconds_since(t0), 0.2);
}

TEST_F(Rendezvous, AnotherProcessPublishesLaterAndTheWaiterGetsIt) {
  const std::string payload = generation_payload(7, 1 << 20);
  const pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    std::this_thread::sleep_for(std::chrono::milliseconds(150));
    try {
      FileRendezvous(dir_, "job2", 10.0).publish("blob", generation_payload(7, 1 << 20));
    } catch (...) {
      ::_exit(3);
    }
    ::_exit(0);
  }
  FileRendezvous rv(dir_, "job2", 10.0);
  const std::string got = rv.wait("blob", 1 << 20, "the child");
  EXPECT_EQ(got, payload);
  EXPECT_EQ(wait_child(pid), 0);
}

TEST_F(Rendezvous, ReadersNeverSeeAPartialFile) {
  // A child republishes large payloads (each all one byte value) as fast as it can; the parent
  // reads the name concurrently. Every read must be a complete file of one generation: a
  // writer that wrote the final name in place would be caught mid-write (size or byte mismatch).
  constexpr int kGenerations = 40;
  constexpr std::size_t kBytes = 4 << 20;
  const pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    try {
      FileRendezvous w(dir_, "job3", 10.0);
      for (int g = 0; g < kGenerations; ++g) w.publish("blob", generation_payload(g, kBytes));
    } catch (...) {
      ::_exit(3);
    }
    ::_exit(0);
  }
  FileRendezvous rv(dir_, "job3", 10.0, 0.0005);
  int reads = 0, bad = 0;
  std::string first_bad;
  for (;;) {
    int status = 0;
    const bool done = ::waitpid(pid, &status, WNOHANG) == pid;
    try {
      const std::string got = rv.wait("blob", kBytes);
      ++reads;
      if (got.find_first_not_of(got[0]) != std::string::npos) ++bad;
    } catch (const RendezvousError& e) {
      if (first_bad.empty()) first_bad = e.what();
      ++bad;
    }
    if (done) {
      EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
      break;
    }
  }
  EXPECT_EQ(bad, 0) << first_bad;
  EXPECT_GT(reads, 0);
  // The last generation is what stays, and no temporary file is left behind.
  EXPECT_EQ(rv.wait("blob", kBytes), generation_payload(kGenerations - 1, kBytes));
  EXPECT_EQ(files(), std::vector<std::string>{"job3.blob"});
}

TEST_F(Rendezvous, MalformedOrWrongSizeFilesFailAtOnce) {
  // The errors are the file's faults, not the 30 s timeout's: a malformed file fails on the
  // first read (the message names the file and the fault, never TRAINSIM_NCCL_TIMEOUT_S).
  FileRendezvous rv(dir_, "job4", 30.0);
  auto fault_of = [&](const std::string& name, std::int64_t bytes) -> std::string {
    try {
      rv.wait(name, bytes);
    } catch (const RendezvousError& e) {
      return e.what();
    }
    return "no error";
  };
  {
    std::ofstream f(rv.path_of("garbage"));
    f << "not a rendezvous file";
  }
  std::string msg = fault_of("garbage", -1);
  EXPECT_NE(msg.find("is not a trainsim rendezvous file"), std::string::npos) << msg;
  {
    std::ofstream f(rv.path_of("short"));
    f << "trainsim-rendezvous 1 10\nabc";  // header promises 10 bytes, 3 follow
  }
  msg = fault_of("short", -1);
  EXPECT_NE(msg.find(rv.path_of("short")), std::string::npos) << msg;
  EXPECT_EQ(msg.find("TRAINSIM_NCCL_TIMEOUT_S"), std::string::npos) << msg;
  rv.publish("id", std::string(100, 'x'));
  msg = fault_of("id", 128);  // an id of another size
  EXPECT_NE(msg.find("holds"), std::string::npos) << msg;
  EXPECT_EQ(msg.find("TRAINSIM_NCCL_TIMEOUT_S"), std::string::npos) << msg;
  EXPECT_EQ(rv.wait("id", 100), std::string(100, 'x'));
}

TEST_F(Rendezvous, RunIdsKeepJobsApartAndNamesAreChecked) {
  FileRendezvous old_job(dir_, "old", 0.1), new_job(dir_, "new", 0.1);
  old_job.publish("nccl-id.world", "stale");
  EXPECT_THROW(new_job.wait("nccl-id.world"), RendezvousError);  // the stale id is not seen
  new_job.publish("nccl-id.world", "fresh");
  EXPECT_EQ(new_job.wait("nccl-id.world"), "fresh");
  EXPECT_EQ(old_job.wait("nccl-id.world"), "stale");
  EXPECT_THROW(new_job.publish("../escape", "x"), std::invalid_argument);
  EXPECT_THROW(new_job.publish("a/b", "x"), std::invalid_argument);
  EXPECT_THROW(FileRendezvous(dir_, "bad id", 1.0), std::invalid_argument);
  EXPECT_THROW(FileRendezvous(dir_ + "/missing-dir", "j", 1.0).publish("x", "y"), RendezvousError);
}

}  // namespace
