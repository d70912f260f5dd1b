#include "apps/output_file.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <stdexcept>

#include "models/errors.h"

namespace trainsim::cli {

namespace {

std::string folder_of(const std::string& path) {
  const auto slash = path.rfind('/');
  if (slash == std::string::npos) return ".";
  return slash == 0 ? "/" : path.substr(0, slash);
}

bool is_special_file(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 && !S_ISREG(st.st_mode);
}

}  // namespace

OutputFile::OutputFile(std::string path, std::string flag)
    : path_(std::move(path)), flag_(std::move(flag)) {
  if (path_.empty()) return;
  struct stat st {};
  if (::stat(path_.c_str(), &st) == 0 && S_ISDIR(st.st_mode))
    throw InputError(flag_ + " '" + path_ + "': is a directory, not a file");
  if (is_special_file(path_)) {  // a device or a pipe: written in place
    out_.open(path_, std::ios::binary | std::ios::out);
  } else {
    std::string templ = path_ + ".tmp.XXXXXX";
    const int fd = ::mkstemp(templ.data());
    if (fd < 0)
      throw InputError(flag_ + " '" + path_ + "': cannot create a file in " + folder_of(path_) +
                       " (" + std::strerror(errno) + ")");
    // mkstemp creates the file 0600; the output gets the mode any new file would (0666 less
    // the umask), as a plain open() would have given it.
    const mode_t mask = ::umask(0);
    ::umask(mask);
    (void)::fchmod(fd, 0666 & ~mask);
    ::close(fd);
    tmp_ = templ;
    out_.open(tmp_, std::ios::binary | std::ios::trunc);
  }
  if (!out_)
    throw InputError(flag_ + " '" + path_ + "': cannot write the file (" + std::strerror(errno) +
                     ")");
}

OutputFile::~OutputFile() {
  if (!tmp_.empty() && !committed_) {
    out_.close();
    ::unlink(tmp_.c_str());
  }
}

void OutputFile::commit() {
  if (path_.empty() || committed_) return;
  close_checked();
  if (!tmp_.empty() && std::rename(tmp_.c_str(), path_.c_str()) != 0) {
    const int e = errno;
    ::unlink(tmp_.c_str());
    committed_ = true;
    throw std::runtime_error(flag_ + " '" + path_ + "': cannot replace the file (" +
                             std::strerror(e) + ")");
  }
  committed_ = true;
}

void commit_all(const std::vector<OutputFile*>& outputs) {
  for (OutputFile* f : outputs)
    if (*f) f->close_checked();
  for (OutputFile* f : outputs)
    if (*f) f->commit();
}

void OutputFile::close_checked() {
  if (path_.empty() || committed_ || closed_) return;
  out_.flush();
  const bool wrote = static_cast<bool>(out_);
  const int err = errno;
  out_.close();
  if (!wrote || !out_) {
    if (!tmp_.empty()) ::unlink(tmp_.c_str());
    committed_ = true;
    throw std::runtime_error(flag_ + " '" + path_ + "': write failed (" +
                             std::strerror(err ? err : EIO) + "); " +
                             (tmp_.empty() ? "the output is incomplete"
                                           : "the previous file, if any, is unchanged"));
  }
  closed_ = true;
}

namespace {

/// The identity of a path: "dev:ino" for an existing file, else the canonical folder + name.
std::string identity(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) == 0)
    return std::to_string(st.st_dev) + ":" + std::to_string(st.st_ino);
  char buf[PATH_MAX];
  const std::string folder = folder_of(path);
  const std::string name = path.substr(path.rfind('/') == std::string::npos ? 0 : path.rfind('/') + 1);
  if (::realpath(folder.c_str(), buf) != nullptr) return std::string(buf) + "/" + name;
  return path;
}

}  // namespace

void check_distinct_paths(const std::vector<NamedPath>& inputs,
                          const std::vector<NamedPath>& outputs) {
  for (std::size_t i = 0; i < outputs.size(); ++i) {
    const auto& [oflag, opath] = outputs[i];
    if (opath.empty() || is_special_file(opath)) continue;
    const std::string id = identity(opath);
    for (const auto& [iflag, ipath] : inputs)
      if (!ipath.empty() && identity(ipath) == id)
        throw InputError(oflag + " '" + opath + "' is the " + iflag + " file '" + ipath +
                         "': refusing to overwrite an input");
    for (std::size_t k = 0; k < i; ++k)
      if (!outputs[k].second.empty() && identity(outputs[k].second) == id)
        throw InputError(oflag + " '" + opath + "' is also the " + outputs[k].first +
                         " output: give each output its own file");
  }
}

void write_output(const std::string& path, const std::string& flag, const std::string& text) {
  OutputFile f(path, flag);
  f.stream() << text;
  f.commit();
}

}  // namespace trainsim::cli
