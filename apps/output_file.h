// Output files that a failing run never leaves partial or clobbered (issue: "no output file is
// left partial or clobbered by a failing run").
//
// An OutputFile writes to a temporary file in the same folder as the target
// (`<name>.tmp.XXXXXX`, created with mkstemp, so a rename is atomic on the same file system)
// and renames it over the target only in commit(), after a flush and a check of every write;
// a run that throws before commit() (or a write that fails: disk full) removes the temporary
// and leaves the previous content of the target untouched. A target that exists and is not a
// regular file (a terminal, a pipe, /dev/null, /dev/full) is written in place.
//
// check_distinct_paths refuses an output that names an input (the scenario, a profile, a
// trace) or another output of the same command, by file identity (device and inode for
// existing files; the canonical folder and name otherwise).
#pragma once

#include <fstream>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace trainsim::cli {

class OutputFile {
 public:
  /// Creates the temporary file; throws InputError naming `flag` and `path` when its folder
  /// cannot be written. An empty path makes a disabled output (stream() must not be used).
  OutputFile(std::string path, std::string flag);
  ~OutputFile();
  OutputFile(const OutputFile&) = delete;
  OutputFile& operator=(const OutputFile&) = delete;

  explicit operator bool() const { return !path_.empty(); }
  const std::string& path() const { return path_; }
  std::ostream& stream() { return out_; }
  /// Flushes, checks that every write succeeded and renames the temporary over the target;
  /// throws std::runtime_error naming the flag, the path and the system's reason otherwise
  /// (the target is then unchanged and the temporary removed).
  void commit();
  /// The first half of commit(): flushes, checks every write and closes the temporary, without
  /// renaming it (throws as commit() does). commit_all() runs it on every output first.
  void close_checked();

 private:
  std::string path_, flag_, tmp_;
  std::ofstream out_;
  bool committed_ = false, closed_ = false;
};

/// Commits several outputs of one command all or none: every one is flushed and checked before
/// any replaces its target (issue 35: a failed --memory-csv must not leave --json and --trace
/// renamed into place). Disabled outputs (empty paths) are skipped.
void commit_all(const std::vector<OutputFile*>& outputs);

/// A named path of the command line: {"--json", "out.json"}; empty paths are ignored.
using NamedPath = std::pair<std::string, std::string>;

/// Throws InputError when an output is the same file as an input or as another output.
void check_distinct_paths(const std::vector<NamedPath>& inputs,
                          const std::vector<NamedPath>& outputs);

/// Writes `text` to `path` through an OutputFile (atomic replace).
void write_output(const std::string& path, const std::string& flag, const std::string& text);

}  // namespace trainsim::cli
