// Child processes: the one place trainsim calls fork() (POSIX). Three users:
//  - sim/isolate.cpp: each simulation in a child, its result back through a pipe (SimGrid
//    cannot be re-initialised in one process; sim/isolate.h);
//  - apps/plan.cpp: the planner's workers, one JSON line per candidate through a pipe each,
//    SIGINT ignored in them (the parent decides, docs/plan.md);
//  - hw_backend/launch.cpp: the multi-process replay, N copies of this program (exec), the
//    others stopped when one fails, SIGINT and SIGTERM forwarded to them (hw_backend/launch.h).
// A bottom unit of models/ (POSIX and the standard library only), so that sim/, apps/ and
// hw_backend/ share it without depending on each other. Failures of pipe, fork, poll or read
// are SystemErrors (models/errors.h) naming the caller's `what` and the system's reason.
#pragma once

#include <sys/types.h>

#include <cstddef>
#include <functional>
#include <optional>
#include <string>
#include <vector>

namespace trainsim {

/// How a child process ended.
struct ExitStatus {
  int exit_code = -1;  ///< its exit status (0..255); -1 when a signal ended it
  int signal = 0;      ///< the signal that ended it; 0 when it exited
  bool ok() const { return signal == 0 && exit_code == 0; }
  /// exit_code, or 128 + signal as a shell's `$?` reports it.
  int shell_status() const { return signal != 0 ? 128 + signal : exit_code; }
  /// "exited with status 3", "was killed by signal 9 (Killed)".
  std::string describe() const;
};

/// Options of Subprocess::call.
struct ChildOptions {
  /// A pipe from the child to the parent: body's `out_fd` is its write end, output_fd() its read
  /// end. Without one `out_fd` is -1.
  bool output_pipe = false;
  /// The child ignores SIGINT: the parent decides when its children stop (a Ctrl-C reaches the
  /// whole foreground process group).
  bool ignore_sigint = false;
};

/// One child process, owned by the Subprocess object: move-only; the destructor kills
/// (SIGKILL) and reaps a child that is still running and closes the output pipe, so that an
/// exception in the parent leaves no child behind.
class Subprocess {
 public:
  /// Exit status of a `call` child whose body threw (the message is on its stderr).
  static constexpr int kBodyThrew = 3;
  /// Exit status of an `exec` child whose execve failed (as a shell's "command not found").
  static constexpr int kExecFailed = 127;

  /// fork()s a child that runs `body(out_fd)` and _exit()s with its return value: it never
  /// returns into the caller's code (the child is a copy of the parent), runs no atexit handler
  /// and flushes no stdio buffer inherited from the parent (stdout and stderr are flushed before
  /// the fork). An exception escaping `body` prints "trainsim: WHAT: MESSAGE" on stderr and exits
  /// kBodyThrew. Throws SystemError ("WHAT: pipe() failed: REASON", "WHAT: fork() failed: ...").
  static Subprocess call(const std::string& what, const std::function<int(int out_fd)>& body,
                         ChildOptions options = {});
  /// fork()s a child that runs execve(path, argv, env) (argv[0] included, env as "NAME=value");
  /// the strings are prepared before the fork, so the child makes async-signal-safe calls only.
  /// When execve fails the child prints "trainsim: WHAT: execve(PATH) failed" and exits
  /// kExecFailed. Its stdin, stdout and stderr are the parent's. Throws SystemError.
  static Subprocess exec(const std::string& what, const std::string& path,
                         const std::vector<std::string>& argv, const std::vector<std::string>& env);

  Subprocess(Subprocess&& other) noexcept;
  Subprocess& operator=(Subprocess&& other) noexcept;
  Subprocess(const Subprocess&) = delete;
  Subprocess& operator=(const Subprocess&) = delete;
  ~Subprocess();

  pid_t pid() const { return pid_; }
  /// The read end of the output pipe; -1 without one or once closed.
  int output_fd() const { return fd_; }
  void close_output();
  /// Not yet reaped (it may have ended: poll() tells).
  bool running() const { return pid_ > 0 && !status_; }
  /// The status once reaped.
  const std::optional<ExitStatus>& status() const { return status_; }

  /// Reaps the child if it has ended (waitpid WNOHANG); its status, or nullopt while it runs.
  std::optional<ExitStatus> poll();
  /// Blocks until the child ends; its status.
  ExitStatus wait();
  /// Waits at most `timeout_s` seconds; the status, or nullopt when it is still running then.
  std::optional<ExitStatus> wait_for(double timeout_s);
  /// Sends `sig` to the child; nothing once it is reaped.
  void signal(int sig);
  /// SIGTERM, then SIGKILL if it has not ended after `grace_s` seconds; its status.
  ExitStatus stop(double grace_s);

 private:
  Subprocess(pid_t pid, int fd, std::string what) : pid_(pid), fd_(fd), what_(std::move(what)) {}
  pid_t pid_ = -1;
  int fd_ = -1;
  std::string what_;
  std::optional<ExitStatus> status_;
};

/// Reads `fd` to its end, retrying on EINTR. Throws SystemError "WHAT: read() failed: REASON".
std::string read_to_end(int fd, const std::string& what);
/// Writes all of `size` bytes to `fd`, retrying on EINTR and short writes; false on an error.
bool write_all(int fd, const char* data, std::size_t size);

/// Reads the output pipes of `children` as data arrives and splits it into lines: on_line(i,
/// line) for each line of child i (without its '\n'; an unterminated last line is dropped), in
/// the order each child wrote them; on_end(i) once child i's pipe reaches its end (the child
/// closed it or ended; on_end typically waits for it). Returns true when every pipe has ended,
/// false as soon as `stop()` is true (checked at least every 200 ms). A callback's exception
/// leaves the function (the Subprocess destructors then stop the children).
bool read_lines(std::vector<Subprocess>& children,
                const std::function<void(std::size_t, const std::string&)>& on_line,
                const std::function<void(std::size_t)>& on_end, const std::function<bool()>& stop,
                const std::string& what);

/// Waits for every child. When one ends with a status other than 0, the others get SIGTERM and,
/// `grace_s` seconds later, SIGKILL. Returns the index of the first child that failed, or -1;
/// every child is reaped (its status()).
int wait_all_stop_on_failure(std::vector<Subprocess>& children, double grace_s);

/// Signal forwarding: while it lives, SIGINT and SIGTERM sent to this process are sent on to
/// every running child of `children` (the process keeps running and sees its children end).
/// One at a time per process; `children` must outlive it and not grow meanwhile.
class ForwardSignals {
 public:
  explicit ForwardSignals(const std::vector<Subprocess>& children);
  ~ForwardSignals();
  ForwardSignals(const ForwardSignals&) = delete;
  ForwardSignals& operator=(const ForwardSignals&) = delete;
};

}  // namespace trainsim
