#include "sim/isolate.h"

#include <unistd.h>

#include <cstdio>
#include <stdexcept>

#include "models/errors.h"
#include "models/subprocess.h"

namespace trainsim::sim {
namespace {

// Frame written by the child: one type byte, then the payload.
constexpr char kOk = 'O';
constexpr char kInputError = 'I';
constexpr char kInvariantError = 'L';
constexpr char kOtherError = 'E';

std::string captured_stderr_tail(std::FILE* capture) {
  if (capture == nullptr) return {};
  std::fflush(capture);
  const int fd = fileno(capture);
  if (::lseek(fd, 0, SEEK_SET) < 0) return {};
  std::string text;
  try {
    text = read_to_end(fd, "simulator: reading the child's stderr");
  } catch (const SystemError&) {
    return {};
  }
  constexpr std::size_t kTail = 4000;
  if (text.size() > kTail) text = "..." + text.substr(text.size() - kTail);
  return text;
}

/// The child's side: runs body with stderr going to `capture`, writes the frame to result_fd;
/// its exit status is 0 once the frame is written, 3 when it could not be.
int child_main(int result_fd, std::FILE* capture, const std::function<std::string(int)>& body) {
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
    type = kInvariantError;
    payload = e.what();
  } catch (const std::exception& e) {
    type = kOtherError;
    payload = e.what();
  }
  std::fflush(stderr);
  const bool ok = write_all(result_fd, &type, 1) && write_all(result_fd, payload.data(), payload.size());
  return ok ? 0 : 3;
}

}  // namespace

std::string run_in_child(const std::function<std::string(int progress_fd)>& body) {
  std::FILE* capture = std::tmpfile();  // unlinked file shared with the child
  std::string data, read_error;
  ExitStatus status;
  try {
    Subprocess child = Subprocess::call(
        "simulator", [&](int result_fd) { return child_main(result_fd, capture, body); },
        ChildOptions{/*output_pipe=*/true, /*ignore_sigint=*/false});
    try {
      data = read_to_end(child.output_fd(), "simulator: reading the child's result");
    } catch (const SystemError& e) {
      read_error = e.what();
    }
    child.close_output();
    status = child.wait();
  } catch (...) {
    if (capture) std::fclose(capture);
    throw;
  }
  if (!status.ok() || data.empty() || !read_error.empty()) {
    const std::string tail = captured_stderr_tail(capture);
    if (capture) std::fclose(capture);
    throw SystemError("simulator: the simulation process " + status.describe() +
                      (read_error.empty() ? "" : "; " + read_error) +
                      (tail.empty() ? "" : "; its stderr:\n" + tail));
  }
  if (capture) std::fclose(capture);
  const char type = data[0];
  std::string payload = data.substr(1);
  switch (type) {
    case kOk: return payload;
    case kInputError: throw InputError(payload);
    case kInvariantError: throw InvariantError(payload);
    case kOtherError: throw SystemError(payload);
    default: throw SystemError("simulator: malformed result from the simulation process");
  }
}

}  // namespace trainsim::sim
