#include "sim/isolate.h"

#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <stdexcept>

#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include "models/input/scenario.h"

namespace trainsim::sim {
namespace {

// Frame written by the child: one type byte, then the payload.
constexpr char kOk = 'O';
constexpr char kInputError = 'I';
constexpr char kLogicError = 'L';
constexpr char kRuntimeError = 'E';

bool write_all(int fd, const char* data, std::size_t size) {
  while (size > 0) {
    const ssize_t n = ::write(fd, data, size);
    if (n < 0) {
      if (errno == EINTR) continue;
      return false;
    }
    data += n;
    size -= std::size_t(n);
  }
  return true;
}

std::string read_all(int fd) {
  std::string out;
  char buf[1 << 16];
  for (;;) {
    const ssize_t n = ::read(fd, buf, sizeof buf);
    if (n < 0) {
      if (errno == EINTR) continue;
      throw std::runtime_error(std::string("simulator: reading the child's result failed: ") +
                               std::strerror(errno));
    }
    if (n == 0) break;
    out.append(buf, std::size_t(n));
  }
  return out;
}

std::string captured_stderr_tail(std::FILE* capture) {
  if (capture == nullptr) return {};
  std::fflush(capture);
  const int fd = fileno(capture);
  if (::lseek(fd, 0, SEEK_SET) < 0) return {};
  std::string text = read_all(fd);
  constexpr std::size_t kTail = 4000;
  if (text.size() > kTail) text = "..." + text.substr(text.size() - kTail);
  return text;
}

[[noreturn]] void child_main(int result_fd, std::FILE* capture,
                             const std::function<std::string(int)>& body) {
  const int progress_fd = ::dup(2);
  if (capture != nullptr) ::dup2(fileno(capture), 2);
  char type = kOk;
  std::string payload;
  try {
    payload = body(progress_fd);
  } catch (const InputError& e) {
    type = kInputError;
    payload = e.what();
  } catch (const std::logic_error& e) {
    type = kLogicError;
    payload = e.what();
  } catch (const std::exception& e) {
    type = kRuntimeError;
    payload = e.what();
  }
  std::fflush(stderr);
  const bool ok = write_all(result_fd, &type, 1) && write_all(result_fd, payload.data(), payload.size());
  ::close(result_fd);
  // _exit: no atexit handlers, no flushing of stdio buffers inherited from the parent, no
  // SimGrid global destructors.
  ::_exit(ok ? 0 : 3);
}

}  // namespace

std::string run_in_child(const std::function<std::string(int progress_fd)>& body) {
  int fds[2];
  if (::pipe(fds) != 0)
    throw std::runtime_error(std::string("simulator: pipe() failed: ") + std::strerror(errno));
  std::FILE* capture = std::tmpfile();  // unlinked file shared with the child
  std::fflush(nullptr);                 // no duplicated stdio output from the child
  const pid_t pid = ::fork();
  if (pid < 0) {
    const int err = errno;
    ::close(fds[0]);
    ::close(fds[1]);
    if (capture) std::fclose(capture);
    throw std::runtime_error(std::string("simulator: fork() failed: ") + std::strerror(err));
  }
  if (pid == 0) {
    ::close(fds[0]);
    child_main(fds[1], capture, body);
  }
  ::close(fds[1]);
  std::string data;
  std::string read_error;
  try {
    data = read_all(fds[0]);
  } catch (const std::exception& e) {
    read_error = e.what();
  }
  ::close(fds[0]);
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  const bool clean_exit = WIFEXITED(status) && WEXITSTATUS(status) == 0;
  if (!clean_exit || data.empty() || !read_error.empty()) {
    std::string why = WIFSIGNALED(status)
                          ? "was killed by signal " + std::to_string(WTERMSIG(status)) + " (" +
                                strsignal(WTERMSIG(status)) + ")"
                          : "exited with status " + std::to_string(WEXITSTATUS(status));
    std::string tail = captured_stderr_tail(capture);
    if (capture) std::fclose(capture);
    throw std::runtime_error("simulator: the simulation process " + why +
                             (read_error.empty() ? "" : "; " + read_error) +
                             (tail.empty() ? "" : "; its stderr:\n" + tail));
  }
  if (capture) std::fclose(capture);
  const char type = data[0];
  std::string payload = data.substr(1);
  switch (type) {
    case kOk: return payload;
    case kInputError: throw InputError(payload);
    case kLogicError: throw std::logic_error(payload);
    case kRuntimeError: throw std::runtime_error(payload);
    default: throw std::runtime_error("simulator: malformed result from the simulation process");
  }
}

}  // namespace trainsim::sim
