// A file rendezvous: how the processes of one job exchange small blobs (an NCCL unique id, a
// summary of each rank's result) without MPI or a TCP store, through a directory they all see
// (a local directory for one node, a shared file system for several).
//
// Protocol (one writer per name, any number of readers):
//   publish  writes "<dir>/<run_id>.<name>.tmp.<pid>" in full (a header line
//            "trainsim-rendezvous 1 <payload bytes>\n", then the payload), fsyncs it, and
//            renames it to "<dir>/<run_id>.<name>". rename(2) within one directory is atomic, so
//            a reader sees either no file or the complete file, never a partial one.
//   wait     polls for "<dir>/<run_id>.<name>" until it exists or `timeout_s` passes; then
//            checks the header (a file that exists but is not a complete rendezvous file is
//            an error at once, not a reason to keep waiting) and returns the payload.
// The run id keeps files of different jobs that share a directory apart (a stale unique id of
// an earlier job would make NCCL wait forever for peers that are gone).
//
// Pure C++ and POSIX: no CUDA, no NCCL (kernels/nccl_comm.h builds on it), so the protocol is
// tested on machines without a GPU (tests/kernels/test_rendezvous.cpp).
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>

namespace trainsim::kernels {

/// A rendezvous failure: a timeout (the peer that should publish never did), an unreadable or
/// malformed file, or a directory that cannot be written. what() names the file and the cause.
class RendezvousError : public std::runtime_error {
 public:
  explicit RendezvousError(const std::string& message) : std::runtime_error(message) {}
};

class FileRendezvous {
 public:
  /// `dir` must exist (it is not created); `run_id` and names are made of letters, digits,
  /// '.', '_' and '-' (std::invalid_argument otherwise). `timeout_s` bounds every wait;
  /// `poll_interval_s` is the sleep between two looks at the directory.
  FileRendezvous(std::string dir, std::string run_id, double timeout_s,
                 double poll_interval_s = 0.005);

  /// Publishes `payload` under `name` (atomically, see the file comment). Publishing a name
  /// twice replaces the earlier payload. Throws RendezvousError when the file cannot be written.
  void publish(const std::string& name, const std::string& payload) const;

  /// Waits for `name` and returns its payload. `expected_bytes` >= 0 also checks the payload's
  /// size. Throws RendezvousError after timeout_s (naming the file, the time waited and
  /// `who` — e.g. "rank 0", the process expected to publish it), or at once for a malformed
  /// file.
  std::string wait(const std::string& name, std::int64_t expected_bytes = -1,
                   const std::string& who = "the publishing process") const;

  /// Removes the published file of `name` if it exists (no error when it does not).
  void remove(const std::string& name) const;

  /// The path a name is published at.
  std::string path_of(const std::string& name) const;

  const std::string& dir() const { return dir_; }
  const std::string& run_id() const { return run_id_; }
  double timeout_s() const { return timeout_s_; }

 private:
  std::string dir_;
  std::string run_id_;
  double timeout_s_;
  double poll_interval_s_;
};

/// Whether `s` is a non-empty string of letters, digits, '.', '_' and '-'.
bool is_rendezvous_token(const std::string& s);

}  // namespace trainsim::kernels
