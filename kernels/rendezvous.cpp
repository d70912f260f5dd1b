// File rendezvous (rendezvous.h): write-temp-fsync-rename publishing, polling readers.
#include "kernels/rendezvous.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <sstream>
#include <thread>

namespace trainsim::kernels {

namespace {

constexpr const char* kMagic = "trainsim-rendezvous 1 ";

std::string errno_text() { return std::strerror(errno); }

void write_all(int fd, const char* data, std::size_t n, const std::string& path) {
  while (n > 0) {
    const ssize_t w = ::write(fd, data, n);
    if (w < 0) {
      if (errno == EINTR) continue;
      throw RendezvousError("rendezvous: cannot write " + path + ": " + errno_text());
    }
    data += w;
    n -= static_cast<std::size_t>(w);
  }
}

/// Reads the whole file; false when it does not exist (yet).
bool read_file(const std::string& path, std::string* out) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    if (errno == ENOENT) return false;
    throw RendezvousError("rendezvous: cannot open " + path + ": " + errno_text());
  }
  out->clear();
  char buf[4096];
  for (;;) {
    const ssize_t r = ::read(fd, buf, sizeof buf);
    if (r < 0) {
      if (errno == EINTR) continue;
      const std::string why = errno_text();
      ::close(fd);
      throw RendezvousError("rendezvous: cannot read " + path + ": " + why);
    }
    if (r == 0) break;
    out->append(buf, static_cast<std::size_t>(r));
  }
  ::close(fd);
  return true;
}

}  // namespace

bool is_rendezvous_token(const std::string& s) {
  if (s.empty()) return false;
  for (char c : s)
    if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' ||
          c == '_' || c == '-'))
      return false;
  return true;
}

FileRendezvous::FileRendezvous(std::string dir, std::string run_id, double timeout_s,
                               double poll_interval_s)
    : dir_(std::move(dir)), run_id_(std::move(run_id)), timeout_s_(timeout_s),
      poll_interval_s_(poll_interval_s) {
  if (dir_.empty()) throw std::invalid_argument("FileRendezvous: empty directory");
  if (!is_rendezvous_token(run_id_))
    throw std::invalid_argument("FileRendezvous: run id '" + run_id_ +
                                "' must be letters, digits, '.', '_' or '-'");
  if (!(timeout_s_ >= 0) || !(poll_interval_s_ > 0))
    throw std::invalid_argument("FileRendezvous: timeout_s must be >= 0 and poll_interval_s > 0");
}

std::string FileRendezvous::path_of(const std::string& name) const {
  if (!is_rendezvous_token(name))
    throw std::invalid_argument("FileRendezvous: name '" + name +
                                "' must be letters, digits, '.', '_' or '-'");
  return dir_ + "/" + run_id_ + "." + name;
}

void FileRendezvous::publish(const std::string& name, const std::string& payload) const {
  const std::string final_path = path_of(name);
  const std::string tmp = final_path + ".tmp." + std::to_string(::getpid());
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0)
    throw RendezvousError("rendezvous: cannot create " + tmp + ": " + errno_text() +
                          " (does the directory exist and is it writable?)");
  try {
    const std::string header = kMagic + std::to_string(payload.size()) + "\n";
    write_all(fd, header.data(), header.size(), tmp);
    write_all(fd, payload.data(), payload.size(), tmp);
    // The data must be on disk before the name is: a reader on another node of a shared file
    // system may otherwise see the renamed file before its content.
    if (::fsync(fd) != 0)
      throw RendezvousError("rendezvous: cannot fsync " + tmp + ": " + errno_text());
  } catch (...) {
    ::close(fd);
    ::unlink(tmp.c_str());
    throw;
  }
  ::close(fd);
  if (::rename(tmp.c_str(), final_path.c_str()) != 0) {
    const std::string why = errno_text();
    ::unlink(tmp.c_str());
    throw RendezvousError("rendezvous: cannot rename " + tmp + " to " + final_path + ": " + why);
  }
}

std::string FileRendezvous::wait(const std::string& name, std::int64_t expected_bytes,
                                 const std::string& who) const {
  const std::string path = path_of(name);
  using Clock = std::chrono::steady_clock;
  const auto t0 = Clock::now();
  std::string content;
  for (;;) {
    if (read_file(path, &content)) break;
    const double waited = std::chrono::duration<double>(Clock::now() - t0).count();
    if (waited >= timeout_s_) {
      std::ostringstream o;
      o << "rendezvous: waited " << waited << " s for " << path << ", which " << who
        << " should publish; is it running and does it see the same directory? (raise the "
           "limit with TRAINSIM_NCCL_TIMEOUT_S)";
      throw RendezvousError(o.str());
    }
    std::this_thread::sleep_for(std::chrono::duration<double>(poll_interval_s_));
  }
  const std::size_t nl = content.find('\n');
  const std::string magic = kMagic;
  if (nl == std::string::npos || content.compare(0, magic.size(), magic) != 0)
    throw RendezvousError("rendezvous: " + path + " is not a trainsim rendezvous file");
  std::int64_t declared = -1;
  try {
    std::size_t used = 0;
    const std::string num = content.substr(magic.size(), nl - magic.size());
    declared = std::stoll(num, &used);
    if (used != num.size() || declared < 0) declared = -1;
  } catch (const std::exception&) {
    declared = -1;
  }
  if (declared < 0)
    throw RendezvousError("rendezvous: " + path + " has a malformed header");
  std::string payload = content.substr(nl + 1);
  if (static_cast<std::int64_t>(payload.size()) != declared)
    throw RendezvousError("rendezvous: " + path + " holds " + std::to_string(payload.size()) +
                          " payload bytes but its header says " + std::to_string(declared));
  if (expected_bytes >= 0 && declared != expected_bytes)
    throw RendezvousError("rendezvous: " + path + " holds " + std::to_string(declared) +
                          " bytes, expected " + std::to_string(expected_bytes) +
                          " (written by another version?)");
  return payload;
}

void FileRendezvous::remove(const std::string& name) const {
  const std::string path = path_of(name);
  if (::unlink(path.c_str()) != 0 && errno != ENOENT)
    throw RendezvousError("rendezvous: cannot remove " + path + ": " + errno_text());
}

}  // namespace trainsim::kernels
