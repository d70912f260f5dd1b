// Runs a function in a forked child process and brings its result back through a pipe.
//
// SimGrid keeps its engine, models and configuration in process-wide globals and cannot be
// re-initialized in one process (the maintainers' advice is one OS process per simulation:
// simgrid/simgrid issue #185; Engine::shutdown is deprecated in 3.32 "users are not supposed to
// shutdown the Engine"). Each simulation therefore runs in a child process; the parent stays
// free of SimGrid state and can simulate any number of times.
#pragma once

#include <functional>
#include <string>

namespace trainsim::sim {

/// Calls `body(progress_fd)` in a child process (models/subprocess.h) and returns the string
/// it returns. In the child, stderr (fd 2) goes to a capture file; `progress_fd` is the original
/// stderr, for output meant for the user. Exceptions thrown by `body` come back with their
/// message (models/errors.h): InputError as InputError, a std::logic_error (TRAINSIM_CHECK's
/// InvariantError) as InvariantError, anything else as SystemError. A child that dies (signal,
/// abort, exit) gives SystemError with the end of its captured stderr.
std::string run_in_child(const std::function<std::string(int progress_fd)>& body);

}  // namespace trainsim::sim
