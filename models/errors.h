// The two error channels of trainsim (STYLE.md "two error channels"):
//  - InputError: something the user can fix (a bad scenario, flag, profile or trace file, a
//    missing file, a run refused as too large). The message names the file or flag, the field
//    and the value; the CLI prints it and exits with status 1.
//  - Broken invariants (a bug in trainsim, never the user's input): TRAINSIM_CHECK throws
//    std::logic_error with the condition, the message and the source location, so that tests
//    catch it and the CLI still exits 1 with a message instead of aborting.
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

namespace detail {
[[noreturn]] inline void check_failed(const char* condition, const std::string& message,
                                      const char* file, int line) {
  throw std::logic_error(std::string(file) + ":" + std::to_string(line) +
                         ": broken invariant (" + condition + "): " + message);
}
}  // namespace detail

}  // namespace trainsim

/// Asserts an invariant of trainsim's own code (not of user input): throws std::logic_error
/// naming the condition, `message` (a std::string expression) and the source location.
#define TRAINSIM_CHECK(condition, message)                                              \
  do {                                                                                  \
    if (!(condition)) ::trainsim::detail::check_failed(#condition, (message), __FILE__, \
                                                       __LINE__);                       \
  } while (0)
