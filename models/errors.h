// The error channels of trainsim (docs/architecture.md "Errors"). The rule: code in models/,
// sim/ and hw_backend/ throws one of these three, never a bare std::logic_error,
// std::invalid_argument or std::runtime_error.
//  - InputError: something the user can fix (a bad scenario, flag, environment variable,
//    profile or trace file, a missing file, a run refused as too large). The message names the
//    file, flag or variable, the field and the value; the CLI prints it and exits with status 1.
//  - InvariantError, thrown by TRAINSIM_CHECK only: a broken invariant, a bug in trainsim and
//    never the user's input. It names the condition, the message and the source location, so
//    that tests catch it and the CLI still exits 1 with a message instead of aborting.
//  - SystemError: the operating system or a device failed a call that correct input and
//    correct code expect to succeed (pipe, fork, reading /proc, a CUDA or NCCL call, a
//    simulation process that died). The message names the call and the system's reason; the
//    CLI prints it and exits 1. A failure the user can fix (a file that cannot be opened, a
//    directory that cannot be created where the user pointed) is an InputError instead.
// Code that catches "anything" catches std::exception: all three derive from it.
#pragma once

#include <stdexcept>
#include <string>

namespace trainsim {

/// A user error in a scenario, a flag or another input file. The message names the file (or
/// flag), the field (dotted path, e.g. `parallel.tensor_model_parallel_size`), the offending
/// value and, where known, the line.
class InputError : public std::runtime_error {
 public:
  explicit InputError(const std::string& message) : std::runtime_error(message) {}
};

/// A broken invariant of trainsim's own code (TRAINSIM_CHECK). `message` is the whole text:
/// "FILE:LINE: broken invariant (CONDITION): MESSAGE" as TRAINSIM_CHECK writes it.
class InvariantError : public std::logic_error {
 public:
  explicit InvariantError(const std::string& message) : std::logic_error(message) {}
};

/// The operating system or a device failed (see the file comment): "WHAT: REASON".
class SystemError : public std::runtime_error {
 public:
  explicit SystemError(const std::string& message) : std::runtime_error(message) {}
};

namespace detail {
[[noreturn]] inline void check_failed(const char* condition, const std::string& message,
                                      const char* file, int line) {
  throw InvariantError(std::string(file) + ":" + std::to_string(line) + ": broken invariant (" +
                       condition + "): " + message);
}
}  // namespace detail

}  // namespace trainsim

/// Asserts an invariant of trainsim's own code (not of user input): throws InvariantError
/// naming the condition, `message` (a std::string expression, evaluated only on failure) and
/// the source location.
#define TRAINSIM_CHECK(condition, message)                                              \
  do {                                                                                  \
    if (!(condition)) ::trainsim::detail::check_failed(#condition, (message), __FILE__, \
                                                       __LINE__);                       \
  } while (0)
