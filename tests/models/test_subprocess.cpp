// models/subprocess.h: exit statuses, signals, timeouts, output pipes, stopping on failure and
// signal forwarding, each checked against what the child was told to do.
#include "models/subprocess.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "models/errors.h"

namespace trainsim {
namespace {

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

TEST(Subprocess, ChildExitStatusComesBack) {
  Subprocess c = Subprocess::call("test", [](int) { return 3; });
  const ExitStatus s = c.wait();
  EXPECT_EQ(s.exit_code, 3);
  EXPECT_EQ(s.signal, 0);
  EXPECT_FALSE(s.ok());
  EXPECT_EQ(s.shell_status(), 3);
  EXPECT_EQ(s.describe(), "exited with status 3");
  EXPECT_FALSE(c.running());
  EXPECT_TRUE(Subprocess::call("test", [](int) { return 0; }).wait().ok());
}

TEST(Subprocess, ChildKilledByASignal) {
  Subprocess c = Subprocess::call("test", [](int) {
    ::raise(SIGKILL);
    return 0;
  });
  const ExitStatus s = c.wait();
  EXPECT_EQ(s.signal, SIGKILL);
  EXPECT_EQ(s.exit_code, -1);
  EXPECT_EQ(s.shell_status(), 128 + SIGKILL);
  EXPECT_EQ(s.describe().rfind("was killed by signal 9 (", 0), 0u) << s.describe();
}

TEST(Subprocess, AnExceptionInTheChildNeverReturnsIntoTheCaller) {
  const pid_t parent = ::getpid();
  Subprocess c = Subprocess::call("test", [&](int) -> int {
    if (::getpid() == parent) return 99;  // not in a child: fail below
    throw std::runtime_error("boom");
  });
  EXPECT_EQ(c.wait().exit_code, Subprocess::kBodyThrew);
}

TEST(Subprocess, TimeoutThenStop) {
  Subprocess c = Subprocess::call("test", [](int) {
    ::sleep(30);
    return 0;
  });
  const auto t0 = std::chrono::steady_clock::now();
  EXPECT_FALSE(c.wait_for(0.2).has_value());
  EXPECT_GE(seconds_since(t0), 0.2);
  EXPECT_TRUE(c.running());
  const ExitStatus s = c.stop(5.0);  // SIGTERM ends sleep at once
  // Ended by the SIGTERM, not by its 30 s sleep running out (that would be exit 0): no wall
  // time bound, which a loaded machine could break.
  EXPECT_EQ(s.signal, SIGTERM);
}

TEST(Subprocess, StopKillsAChildThatIgnoresSigterm) {
  Subprocess c = Subprocess::call("test", [](int out_fd) {
    ::signal(SIGTERM, SIG_IGN);
    write_all(out_fd, "ready\n", 6);
    ::sleep(30);
    return 0;
  }, ChildOptions{/*output_pipe=*/true});
  char b[6];
  ASSERT_EQ(::read(c.output_fd(), b, 6), 6);  // SIGTERM is ignored from here on
  const auto t0 = std::chrono::steady_clock::now();
  EXPECT_EQ(c.stop(0.3).signal, SIGKILL);
  EXPECT_GE(seconds_since(t0), 0.3);
}

TEST(Subprocess, OutputThroughAPipe) {
  std::string big(200000, 'x');  // more than a pipe's buffer: the parent must read while it writes
  Subprocess c = Subprocess::call("test", [&](int out_fd) {
    return write_all(out_fd, "hello\n", 6) && write_all(out_fd, big.data(), big.size()) ? 0 : 1;
  }, ChildOptions{/*output_pipe=*/true});
  ASSERT_GE(c.output_fd(), 0);
  EXPECT_EQ(read_to_end(c.output_fd(), "test"), "hello\n" + big);
  EXPECT_TRUE(c.wait().ok());
  // Without output_pipe the body's fd is -1 (an exit status of -1 reads 255).
  EXPECT_EQ(Subprocess::call("test", [](int fd) { return fd; }).wait().exit_code, 255);
}

TEST(Subprocess, ReadLinesOfSeveralChildren) {
  std::vector<Subprocess> children;
  for (int w = 0; w < 3; ++w)
    children.push_back(Subprocess::call("test", [w](int fd) {
      for (int i = 0; i < 4; ++i) {
        const std::string line = std::to_string(w) + ":" + std::to_string(i) + "\n";
        if (!write_all(fd, line.data(), line.size())) return 1;
        ::usleep(1000);
      }
      return write_all(fd, "unterminated", 12) ? 0 : 1;
    }, ChildOptions{/*output_pipe=*/true}));
  std::vector<std::vector<std::string>> lines(3);
  std::vector<int> ended(3, 0);
  const bool complete = read_lines(
      children, [&](std::size_t i, const std::string& l) { lines[i].push_back(l); },
      [&](std::size_t i) {
        ++ended[i];
        EXPECT_TRUE(children[i].wait().ok());
      },
      [] { return false; }, "test");
  EXPECT_TRUE(complete);
  for (int w = 0; w < 3; ++w) {
    EXPECT_EQ(ended[w], 1);
    const std::string p = std::to_string(w) + ":";
    EXPECT_EQ(lines[w], (std::vector<std::string>{p + "0", p + "1", p + "2", p + "3"}));
  }
}

TEST(Subprocess, ReadLinesStopsWhenAsked) {
  std::vector<Subprocess> children;
  children.push_back(Subprocess::call("test", [](int) {
    ::sleep(30);
    return 0;
  }, ChildOptions{/*output_pipe=*/true}));
  const auto t0 = std::chrono::steady_clock::now();
  EXPECT_FALSE(read_lines(
      children, [](std::size_t, const std::string&) {}, [](std::size_t) {},
      [&] { return seconds_since(t0) > 0.1; }, "test"));
  // It returned because it was asked to, not because the child (asleep for 30 s) ended.
  EXPECT_FALSE(children[0].poll().has_value());
}

TEST(Subprocess, DestructorStopsAndReapsARunningChild) {
  pid_t pid;
  {
    Subprocess c = Subprocess::call("test", [](int) {
      ::sleep(30);
      return 0;
    });
    pid = c.pid();
    EXPECT_EQ(::kill(pid, 0), 0);
  }
  EXPECT_EQ(::kill(pid, 0), -1);  // reaped: no such process (or zombie) left
}

TEST(Subprocess, ExecRunsAProgramAndReportsAFailedExec) {
  EXPECT_EQ(Subprocess::exec("test", "/bin/sh", {"sh", "-c", "exit $X"}, {"X=5"}).wait().exit_code,
            5);
  EXPECT_EQ(Subprocess::exec("test", "/nonexistent/program", {"p"}, {}).wait().exit_code,
            Subprocess::kExecFailed);
}

TEST(Subprocess, WaitAllStopsTheOthersWhenOneFails) {
  std::vector<Subprocess> children;
  children.push_back(Subprocess::call("test", [](int) {
    ::sleep(30);
    return 0;
  }));
  children.push_back(Subprocess::call("test", [](int) {
    ::usleep(50000);
    return 4;
  }));
  children.push_back(Subprocess::call("test", [](int out_fd) {
    ::signal(SIGTERM, SIG_IGN);  // needs the SIGKILL after the grace period
    write_all(out_fd, "ready\n", 6);
    ::sleep(30);
    return 0;
  }, ChildOptions{/*output_pipe=*/true}));
  char b[6];
  ASSERT_EQ(::read(children[2].output_fd(), b, 6), 6);  // SIGTERM is ignored from here on
  const auto t0 = std::chrono::steady_clock::now();
  EXPECT_EQ(wait_all_stop_on_failure(children, 0.3), 1);
  EXPECT_GE(seconds_since(t0), 0.3);  // the grace period before the SIGKILL
  // The sleeping children were stopped by signals, not waited for to the end of their sleep.
  EXPECT_EQ(children[0].status()->signal, SIGTERM);
  EXPECT_EQ(children[1].status()->exit_code, 4);
  EXPECT_EQ(children[2].status()->signal, SIGKILL);

  std::vector<Subprocess> fine;
  for (int i = 0; i < 2; ++i) fine.push_back(Subprocess::call("test", [](int) { return 0; }));
  EXPECT_EQ(wait_all_stop_on_failure(fine, 0.3), -1);
}

TEST(Subprocess, ForwardSignalsSendsSigtermOnToTheChildren) {
  // A middle process starts a sleeping grandchild, forwards signals to it, says it is ready and
  // exits with the signal that ended the grandchild.
  Subprocess middle = Subprocess::call("test", [](int fd) {
    std::vector<Subprocess> kids;
    kids.push_back(Subprocess::call("grandchild", [](int) {
      ::sleep(30);
      return 0;
    }));
    const ForwardSignals forward(kids);
    if (!write_all(fd, "ready\n", 6)) return 100;
    return kids[0].wait().signal;
  }, ChildOptions{/*output_pipe=*/true});
  char b[6];
  ASSERT_EQ(::read(middle.output_fd(), b, 6), 6);
  middle.signal(SIGTERM);
  const ExitStatus s = middle.wait();
  EXPECT_EQ(s.signal, 0) << "the middle process kept running after SIGTERM";
  EXPECT_EQ(s.exit_code, SIGTERM);
}

}  // namespace
}  // namespace trainsim
