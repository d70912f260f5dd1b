#include "models/subprocess.h"

#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <iostream>
#include <thread>

#include "models/errors.h"

namespace trainsim {
namespace {

ExitStatus from_wait_status(int st) {
  ExitStatus s;
  if (WIFSIGNALED(st)) s.signal = WTERMSIG(st);
  else s.exit_code = WEXITSTATUS(st);
  return s;
}

[[noreturn]] void throw_errno(const std::string& what, const char* call) {
  throw SystemError(what + ": " + call + " failed: " + std::strerror(errno));
}

/// fork() after flushing the parent's output (no buffered text printed twice).
pid_t flushed_fork() {
  std::cout.flush();
  std::cerr.flush();
  std::fflush(nullptr);
  return ::fork();
}

// The children ForwardSignals sends signals on to: a copy of their pids, read by the handler.
constexpr std::size_t kMaxForwarded = 4096;
pid_t g_forward_pids[kMaxForwarded];
volatile sig_atomic_t g_forward_count = 0;
bool g_forwarding = false;
struct sigaction g_previous_int, g_previous_term;

extern "C" void forward_signal(int sig) {
  const int saved = errno;
  for (sig_atomic_t i = 0; i < g_forward_count; ++i) ::kill(g_forward_pids[i], sig);
  errno = saved;
}

}  // namespace

std::string ExitStatus::describe() const {
  if (signal != 0)
    return "was killed by signal " + std::to_string(signal) + " (" + strsignal(signal) + ")";
  return "exited with status " + std::to_string(exit_code);
}

Subprocess Subprocess::call(const std::string& what, const std::function<int(int)>& body,
                            ChildOptions options) {
  int fds[2] = {-1, -1};
  if (options.output_pipe && ::pipe(fds) != 0) throw_errno(what, "pipe()");
  const pid_t pid = flushed_fork();
  if (pid < 0) {
    const int err = errno;
    if (fds[0] >= 0) {
      ::close(fds[0]);
      ::close(fds[1]);
    }
    errno = err;
    throw_errno(what, "fork()");
  }
  if (pid == 0) {
    if (fds[0] >= 0) ::close(fds[0]);
    if (options.ignore_sigint) ::signal(SIGINT, SIG_IGN);
    int code = kBodyThrew;
    try {
      code = body(fds[1]);
    } catch (const std::exception& e) {
      std::fprintf(stderr, "trainsim: %s: %s\n", what.c_str(), e.what());
    } catch (...) {
      std::fprintf(stderr, "trainsim: %s: unknown error\n", what.c_str());
    }
    std::fflush(stderr);
    ::_exit(code);
  }
  if (fds[1] >= 0) ::close(fds[1]);
  return Subprocess(pid, fds[0], what);
}

Subprocess Subprocess::exec(const std::string& what, const std::string& path,
                            const std::vector<std::string>& argv,
                            const std::vector<std::string>& env) {
  // Everything the child needs is built before fork(): between fork and exec only
  // async-signal-safe calls.
  std::vector<std::string> strings = argv;
  strings.insert(strings.end(), env.begin(), env.end());
  std::vector<char*> args, envp;
  for (std::size_t i = 0; i < strings.size(); ++i)
    (i < argv.size() ? args : envp).push_back(strings[i].data());
  args.push_back(nullptr);
  envp.push_back(nullptr);
  const std::string failed = "trainsim: " + what + ": execve(" + path + ") failed\n";
  const pid_t pid = flushed_fork();
  if (pid < 0) throw_errno(what, "fork()");
  if (pid == 0) {
    ::execve(path.c_str(), args.data(), envp.data());
    (void)!::write(2, failed.data(), failed.size());
    ::_exit(kExecFailed);
  }
  return Subprocess(pid, -1, what);
}

Subprocess::Subprocess(Subprocess&& other) noexcept
    : pid_(other.pid_), fd_(other.fd_), what_(std::move(other.what_)), status_(other.status_) {
  other.pid_ = -1;
  other.fd_ = -1;
}

Subprocess& Subprocess::operator=(Subprocess&& other) noexcept {
  if (this != &other) {
    Subprocess old(std::move(*this));  // stops and reaps the child this one held
    pid_ = other.pid_;
    fd_ = other.fd_;
    what_ = std::move(other.what_);
    status_ = other.status_;
    other.pid_ = -1;
    other.fd_ = -1;
  }
  return *this;
}

Subprocess::~Subprocess() {
  close_output();
  if (running()) {
    ::kill(pid_, SIGKILL);
    while (::waitpid(pid_, nullptr, 0) < 0 && errno == EINTR) {
    }
  }
}

void Subprocess::close_output() {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
}

std::optional<ExitStatus> Subprocess::poll() {
  if (!running()) return status_;
  int st = 0;
  pid_t r;
  while ((r = ::waitpid(pid_, &st, WNOHANG)) < 0 && errno == EINTR) {
  }
  if (r < 0) throw_errno(what_, "waitpid()");
  if (r == pid_) status_ = from_wait_status(st);
  return status_;
}

ExitStatus Subprocess::wait() {
  TRAINSIM_CHECK(pid_ > 0, "Subprocess::wait: no child");
  if (status_) return *status_;
  int st = 0;
  while (::waitpid(pid_, &st, 0) < 0) {
    if (errno != EINTR) throw_errno(what_, "waitpid()");
  }
  status_ = from_wait_status(st);
  return *status_;
}

std::optional<ExitStatus> Subprocess::wait_for(double timeout_s) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
  while (!poll()) {
    if (std::chrono::steady_clock::now() >= deadline) return std::nullopt;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return status_;
}

void Subprocess::signal(int sig) {
  if (running()) ::kill(pid_, sig);
}

ExitStatus Subprocess::stop(double grace_s) {
  signal(SIGTERM);
  if (auto s = wait_for(grace_s)) return *s;
  signal(SIGKILL);
  return wait();
}

std::string read_to_end(int fd, const std::string& what) {
  std::string out;
  char buf[1 << 16];
  for (;;) {
    const ssize_t n = ::read(fd, buf, sizeof buf);
    if (n < 0) {
      if (errno == EINTR) continue;
      throw_errno(what, "read()");
    }
    if (n == 0) return out;
    out.append(buf, std::size_t(n));
  }
}

bool write_all(int fd, const char* data, std::size_t size) {
  while (size > 0) {
    const ssize_t n = ::write(fd, data, size);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    data += n;
    size -= std::size_t(n);
  }
  return true;
}

bool read_lines(std::vector<Subprocess>& children,
                const std::function<void(std::size_t, const std::string&)>& on_line,
                const std::function<void(std::size_t)>& on_end, const std::function<bool()>& stop,
                const std::string& what) {
  std::vector<std::string> buffers(children.size());
  for (;;) {
    if (stop()) return false;
    std::vector<pollfd> pfds;
    std::vector<std::size_t> owner;
    for (std::size_t i = 0; i < children.size(); ++i)
      if (children[i].output_fd() >= 0) {
        pfds.push_back({children[i].output_fd(), POLLIN, 0});
        owner.push_back(i);
      }
    if (pfds.empty()) return true;
    if (::poll(pfds.data(), pfds.size(), 200) < 0) {
      if (errno == EINTR) continue;
      throw_errno(what, "poll()");
    }
    for (std::size_t k = 0; k < pfds.size(); ++k) {
      if (!(pfds[k].revents & (POLLIN | POLLHUP | POLLERR))) continue;
      const std::size_t i = owner[k];
      char buf[65536];
      const ssize_t n = ::read(pfds[k].fd, buf, sizeof buf);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) {
        children[i].close_output();
        on_end(i);
        continue;
      }
      std::string& b = buffers[i];
      b.append(buf, std::size_t(n));
      std::size_t start = 0;
      for (std::size_t nl; (nl = b.find('\n', start)) != std::string::npos; start = nl + 1)
        on_line(i, b.substr(start, nl - start));
      b.erase(0, start);
    }
  }
}

int wait_all_stop_on_failure(std::vector<Subprocess>& children, double grace_s) {
  int failed = -1;
  std::chrono::steady_clock::time_point stopped_at;
  bool killed = false;
  for (;;) {
    bool progressed = false, all_done = true;
    for (std::size_t i = 0; i < children.size(); ++i) {
      if (!children[i].running()) continue;
      if (!children[i].poll()) {
        all_done = false;
        continue;
      }
      progressed = true;
      if (children[i].status()->ok() || failed >= 0) continue;
      failed = static_cast<int>(i);
      stopped_at = std::chrono::steady_clock::now();
      for (auto& c : children) c.signal(SIGTERM);
    }
    if (all_done) return failed;
    if (failed >= 0 && !killed &&
        std::chrono::steady_clock::now() - stopped_at > std::chrono::duration<double>(grace_s)) {
      for (auto& c : children) c.signal(SIGKILL);
      killed = true;
    }
    if (!progressed) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

ForwardSignals::ForwardSignals(const std::vector<Subprocess>& children) {
  TRAINSIM_CHECK(!g_forwarding, "ForwardSignals: one at a time");
  g_forwarding = true;
  TRAINSIM_CHECK(children.size() <= kMaxForwarded, "ForwardSignals: too many children");
  sig_atomic_t n = 0;
  for (const auto& c : children)
    if (c.running()) g_forward_pids[n++] = c.pid();
  g_forward_count = n;
  struct sigaction sa {};
  sa.sa_handler = forward_signal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;
  ::sigaction(SIGINT, &sa, &g_previous_int);
  ::sigaction(SIGTERM, &sa, &g_previous_term);
}

ForwardSignals::~ForwardSignals() {
  ::sigaction(SIGINT, &g_previous_int, nullptr);
  ::sigaction(SIGTERM, &g_previous_term, nullptr);
  g_forward_count = 0;
  g_forwarding = false;
}

}  // namespace trainsim
