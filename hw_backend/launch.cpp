// Multi-process replay launch (launch.h): environment of a worker, the local fork/exec launcher.
#include "hw_backend/launch.h"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <vector>

#include "models/errors.h"
#include "models/subprocess.h"

extern char** environ;

namespace trainsim::hw {

namespace {

int parse_int(const char* name, const char* value) {
  try {
    std::size_t used = 0;
    const int v = std::stoi(value, &used);
    if (used == std::strlen(value) && v >= 0) return v;
  } catch (const std::exception&) {
  }
  throw InputError(std::string("environment: ") + name + "='" + value +
                   "': expected a non-negative integer");
}

std::vector<std::string> own_command_line() {
  std::vector<std::string> args;
  const int fd = ::open("/proc/self/cmdline", O_RDONLY | O_CLOEXEC);
  if (fd < 0)
    throw SystemError(std::string("launch: cannot read /proc/self/cmdline: ") +
                      std::strerror(errno));
  std::string all;
  char buf[4096];
  for (ssize_t r; (r = ::read(fd, buf, sizeof buf)) > 0;) all.append(buf, std::size_t(r));
  ::close(fd);
  std::size_t at = 0;
  while (at < all.size()) {
    const std::size_t end = all.find('\0', at);
    args.push_back(all.substr(at, end == std::string::npos ? std::string::npos : end - at));
    if (end == std::string::npos) break;
    at = end + 1;
  }
  if (args.empty()) throw SystemError("launch: empty /proc/self/cmdline");
  return args;
}

}  // namespace

std::string make_rendezvous_dir(const std::string& prefix, const std::string& who) {
  const char* tmp = std::getenv("TMPDIR");
  const std::string templ = std::string(tmp && *tmp ? tmp : "/tmp") + "/" + prefix + "-XXXXXX";
  std::vector<char> buf(templ.begin(), templ.end());
  buf.push_back('\0');
  if (!::mkdtemp(buf.data()))
    throw InputError(who + ": cannot create a rendezvous directory " + templ + ": " +
                     std::strerror(errno) + " (set TMPDIR to a writable directory)");
  return buf.data();
}

void remove_rendezvous_dir(const std::string& dir) {
  if (DIR* d = ::opendir(dir.c_str())) {
    while (dirent* e = ::readdir(d)) {
      const std::string n = e->d_name;
      if (n != "." && n != "..") ::unlink((dir + "/" + n).c_str());
    }
    ::closedir(d);
  }
  ::rmdir(dir.c_str());
}

ProcessEnv process_env(const std::function<const char*(const char*)>& getenv_fn) {
  auto get = [&](const char* name) -> const char* {
    const char* v = getenv_fn ? getenv_fn(name) : std::getenv(name);
    return v && *v ? v : nullptr;
  };
  ProcessEnv e;
  if (const char* t = get("TRAINSIM_NCCL_TIMEOUT_S")) {
    char* end = nullptr;
    e.timeout_s = std::strtod(t, &end);
    if (end == t || *end != '\0' || !(e.timeout_s > 0))
      throw InputError(std::string("environment: TRAINSIM_NCCL_TIMEOUT_S='") + t +
                       "': expected a positive number of seconds");
  }
  if (const char* d = get("TRAINSIM_NCCL_DIR")) e.nccl_dir = d;
  const char* ws = get("WORLD_SIZE");
  const bool srun = !ws && get("SLURM_STEP_ID") && get("SLURM_NTASKS") && get("SLURM_PROCID");
  if (!ws && !srun) return e;  // not a worker
  e.worker = true;
  if (ws) {
    e.world_size = parse_int("WORLD_SIZE", ws);
    const char* rank = get("RANK");
    if (!rank) throw InputError("environment: WORLD_SIZE is set but RANK is not");
    e.rank = parse_int("RANK", rank);
    const char* local = get("LOCAL_RANK");
    e.local_rank = local ? parse_int("LOCAL_RANK", local) : e.rank;
    e.launcher = get("TRAINSIM_NCCL_RUN_ID") ? "trainsim" : "torchrun";
  } else {
    e.world_size = parse_int("SLURM_NTASKS", get("SLURM_NTASKS"));
    e.rank = parse_int("SLURM_PROCID", get("SLURM_PROCID"));
    const char* local = get("SLURM_LOCALID");
    e.local_rank = local ? parse_int("SLURM_LOCALID", local) : e.rank;
    e.launcher = "srun";
  }
  if (e.world_size < 1)
    throw InputError("environment: WORLD_SIZE=" + std::to_string(e.world_size) + ": expected >= 1");
  if (e.rank >= e.world_size)
    throw InputError("environment: RANK=" + std::to_string(e.rank) + " is not below WORLD_SIZE=" +
                     std::to_string(e.world_size));
  if (const char* id = get("TRAINSIM_NCCL_RUN_ID")) e.run_id = id;
  else if (const char* tid = get("TORCHELASTIC_RUN_ID")) e.run_id = tid;
  else if (srun) e.run_id = std::string("slurm-") + (get("SLURM_JOB_ID") ? get("SLURM_JOB_ID") : "job") + "." + get("SLURM_STEP_ID");
  else e.run_id = "run";
  // Run ids become file names (kernels/rendezvous.h): keep letters, digits, '.', '_', '-'.
  for (char& c : e.run_id)
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '.' && c != '_' && c != '-') c = '_';
  return e;
}

std::string per_rank_path(const std::string& path, int rank) {
  const std::size_t slash = path.find_last_of('/');
  const std::size_t dot = path.find_last_of('.');
  const std::string tag = ".rank" + std::to_string(rank);
  if (dot == std::string::npos || (slash != std::string::npos && dot < slash) ||
      dot == (slash == std::string::npos ? 0 : slash + 1))
    return path + tag;
  return path.substr(0, dot) + tag + path.substr(dot);
}

int launch_local_workers(int nprocs) {
  TRAINSIM_CHECK(nprocs >= 1, "launch: nprocs must be >= 1");
  const std::vector<std::string> args = own_command_line();
  const std::string dir = make_rendezvous_dir("trainsim-nccl", "launch");
  const std::string run_id =
      "trainsim-" + std::to_string(::getpid()) + "-" +
      std::to_string(std::chrono::steady_clock::now().time_since_epoch().count());

  std::vector<std::string> base_env;
  const char* ours[] = {"RANK=", "WORLD_SIZE=", "LOCAL_RANK=", "LOCAL_WORLD_SIZE=",
                        "TRAINSIM_NCCL_DIR=", "TRAINSIM_NCCL_RUN_ID="};
  for (char** e = environ; e && *e; ++e) {
    bool replaced = false;
    for (const char* p : ours) replaced |= std::strncmp(*e, p, std::strlen(p)) == 0;
    if (!replaced) base_env.emplace_back(*e);
  }
  std::vector<Subprocess> workers;
  try {
    for (int r = 0; r < nprocs; ++r) {
      std::vector<std::string> env = base_env;
      env.push_back("RANK=" + std::to_string(r));
      env.push_back("WORLD_SIZE=" + std::to_string(nprocs));
      env.push_back("LOCAL_RANK=" + std::to_string(r));
      env.push_back("LOCAL_WORLD_SIZE=" + std::to_string(nprocs));
      env.push_back("TRAINSIM_NCCL_DIR=" + dir);
      env.push_back("TRAINSIM_NCCL_RUN_ID=" + run_id);
      workers.push_back(Subprocess::exec("launch", "/proc/self/exe", args, env));
    }
  } catch (...) {  // fork failed: the workers started wait for peers that never come
    for (auto& w : workers) w.signal(SIGTERM);
    for (auto& w : workers) w.wait();
    remove_rendezvous_dir(dir);
    throw;
  }
  int failed_rank;
  {
    const ForwardSignals forward(workers);  // a SIGTERM to the launcher stops its workers
    failed_rank = wait_all_stop_on_failure(workers, /*grace_s=*/10);
  }
  remove_rendezvous_dir(dir);
  if (failed_rank >= 0) {
    std::cerr << "trainsim: replay: rank " << failed_rank << " of " << nprocs
              << " failed (exit status " << workers[failed_rank].status()->shell_status()
              << "); the other ranks were stopped\n";
    return 1;
  }
  return 0;
}

}  // namespace trainsim::hw
