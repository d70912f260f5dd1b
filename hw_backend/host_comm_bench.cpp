// The host transport's microbenchmark and fit (host_comm_bench.h).
#include "hw_backend/host_comm_bench.h"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <limits>
#include <set>

#include "hw_backend/host_comm.h"
#include "hw_backend/launch.h"
#include "models/errors.h"
#include "models/perf/cost_model.h"

namespace trainsim::hw {
namespace {

using Clock = std::chrono::steady_clock;

const char* const kOps[] = {"all_reduce", "reduce_scatter", "all_gather", "all_to_all"};

OpKind op_kind(const std::string& op) {
  if (op == "all_reduce") return OpKind::AllReduce;
  if (op == "reduce_scatter") return OpKind::ReduceScatter;
  if (op == "all_gather") return OpKind::AllGather;
  return OpKind::AllToAll;
}

/// One call of `op` of `bytes` S (fp32) on `g`, with the buffers of host_comm.h's calls.
void run_op(HostGroup& g, const std::string& op, std::int64_t bytes, std::vector<float>& a,
            std::vector<float>& b) {
  const std::size_t count = static_cast<std::size_t>(bytes) / sizeof(float);
  const std::size_t part = count / static_cast<std::size_t>(g.size());
  const auto f32 = kernels::DType::F32;
  if (op == "all_reduce") g.all_reduce(a.data(), count, f32);
  else if (op == "reduce_scatter") g.reduce_scatter(a.data(), b.data(), part, f32);
  else if (op == "all_gather") g.all_gather(a.data() + g.rank() * part, b.data(), part, f32);
  else g.all_to_all(a.data(), b.data(), part, f32);
}

/// Every member's loop; member 0 returns the fastest time of each (op, size), in kOps x sizes
/// order.
std::vector<double> member_loop(const HostCommBenchOptions& o, const kernels::FileRendezvous& rv,
                                int member) {
  std::vector<int> members;
  for (int m = 0; m < o.processes; ++m) members.push_back(m);
  HostGroup group(rv, "bench", members, member), sync(rv, "sync", members, member);
  const std::int64_t largest = *std::max_element(o.sizes_bytes.begin(), o.sizes_bytes.end());
  std::vector<float> a(static_cast<std::size_t>(largest) / sizeof(float), 1.0f), b(a.size());
  std::vector<double> best;
  for (const char* op : kOps)
    for (std::int64_t bytes : o.sizes_bytes) {
      double fastest = std::numeric_limits<double>::infinity();
      for (int rep = 0; rep <= o.repetitions; ++rep) {  // rep 0: the warm-up
        float one = 1.0f;
        sync.all_reduce(&one, 1, kernels::DType::F32);
        const auto t0 = Clock::now();
        run_op(group, op, bytes, a, b);
        const double dt = std::chrono::duration<double>(Clock::now() - t0).count();
        if (rep > 0) fastest = std::min(fastest, dt);
      }
      best.push_back(fastest);
    }
  return best;
}

/// Waits for the forked members; `stop`: signal them first. Returns how many failed.
int reap(const std::vector<pid_t>& pids, bool stop) {
  int failed = 0;
  for (pid_t pid : pids) {
    if (stop) ::kill(pid, SIGTERM);
    int status = 0;
    ::waitpid(pid, &status, 0);
    failed += !(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  }
  return failed;
}

}  // namespace

std::vector<HostCommPoint> measure_host_collectives(const HostCommBenchOptions& o) {
  TRAINSIM_CHECK(o.processes >= 2 && !o.sizes_bytes.empty() && o.repetitions >= 1,
                 "measure_host_collectives: needs 2+ processes, a size and a repetition");
  for (std::int64_t s : o.sizes_bytes)
    TRAINSIM_CHECK(s > 0 && s % (std::int64_t(sizeof(float)) * o.processes) == 0,
                   "measure_host_collectives: size " + std::to_string(s) +
                       " is not a whole number of fp32 blocks per member");
  const std::string dir = make_rendezvous_dir("trainsim-hostcomm", "calibrate");
  const std::string run_id = "bench" + std::to_string(::getpid());
  std::fflush(nullptr);  // nothing buffered is written twice by the children
  std::vector<pid_t> pids;
  for (int m = 1; m < o.processes; ++m) {
    const pid_t pid = ::fork();
    if (pid < 0) {
      reap(pids, true);
      remove_rendezvous_dir(dir);
      throw SystemError(std::string("calibrate: cannot fork a host-transport member: ") +
                        std::strerror(errno));
    }
    if (pid == 0) {
      int rc = 1;
      try {
        kernels::FileRendezvous rv(dir, run_id, o.timeout_s, kHostCommPollInterval_s);
        member_loop(o, rv, m);
        rc = 0;
      } catch (const std::exception& e) {
        std::fprintf(stderr, "calibrate: host-transport member %d: %s\n", m, e.what());
      }
      ::_exit(rc);
    }
    pids.push_back(pid);
  }
  std::vector<double> best;
  try {
    kernels::FileRendezvous rv(dir, run_id, o.timeout_s, kHostCommPollInterval_s);
    best = member_loop(o, rv, 0);
  } catch (const std::exception& e) {
    reap(pids, true);
    remove_rendezvous_dir(dir);
    throw SystemError(std::string("calibrate: the host-transport benchmark failed: ") + e.what());
  }
  const int failed = reap(pids, false);
  remove_rendezvous_dir(dir);
  if (failed > 0)
    throw SystemError("calibrate: " + std::to_string(failed) +
                      " host-transport benchmark member(s) failed (see above)");
  std::vector<HostCommPoint> points;
  std::size_t k = 0;
  for (const char* op : kOps)
    for (std::int64_t bytes : o.sizes_bytes) {
      HostCommPoint p;
      p.op = op;
      p.bytes = bytes;
      p.processes = o.processes;
      p.transport_bytes =
          CostModel::host_transport_bytes_per_rank(op_kind(op), double(bytes), o.processes);
      p.best_s = best[k++];
      points.push_back(p);
    }
  return points;
}

HostCommFit fit_host_comm(const std::vector<HostCommPoint>& points) {
  // Weighted least squares with weights 1 / t^2: the sum of squared relative residuals
  // ((latency + x / bw - t) / t)^2, so that a 4 KiB point counts as much as a 4 MiB one (with
  // absolute residuals the largest sizes, 50x the smallest times, set the line alone and its
  // intercept, the latency, is lost).
  std::set<double> distinct;
  double sw = 0, sx = 0, sy = 0, sxx = 0, sxy = 0;
  for (const HostCommPoint& p : points) {
    TRAINSIM_CHECK(p.best_s > 0, "fit_host_comm: a point without a positive time");
    distinct.insert(p.transport_bytes);
    const double w = 1.0 / (p.best_s * p.best_s), x = p.transport_bytes, y = p.best_s;
    sw += w, sx += w * x, sy += w * y, sxx += w * x * x, sxy += w * x * y;
  }
  if (distinct.size() < 2)
    throw InputError("calibrate: the host-transport fit needs points of at least two sizes (" +
                     std::to_string(distinct.size()) + " given)");
  const double slope = (sw * sxy - sx * sy) / (sw * sxx - sx * sx);
  if (!(slope > 0))
    throw InputError("calibrate: the host-transport times do not grow with the bytes (slope " +
                     std::to_string(slope) + " s/B): no bandwidth to fit");
  HostCommFit f;
  f.bw_bytes_per_s = 1.0 / slope;
  f.latency_s = std::max(0.0, (sy - slope * sx) / sw);
  return f;
}

nlohmann::json host_comm_json(const std::vector<HostCommPoint>& points, const HostCommFit& fit) {
  nlohmann::json rows = nlohmann::json::array();
  for (const HostCommPoint& p : points)
    rows.push_back({{"op", p.op}, {"bytes", p.bytes}, {"processes", p.processes},
                    {"transport_bytes", p.transport_bytes}, {"best_s", p.best_s}});
  return {{"what", "host backend collectives (hw_backend/host_comm.h) between forked processes, "
                   "fp32, fastest of the repetitions after a barrier, timed by member 0; "
                   "transport_bytes = bytes a member writes and reads "
                   "(CostModel::host_transport_bytes_per_rank)"},
          {"fit", "time = latency + transport_bytes / bandwidth, least squares of the relative "
                  "residuals over all points (hw_backend/host_comm_bench.h)"},
          {"latency_s", fit.latency_s},
          {"bw_bytes_per_s", fit.bw_bytes_per_s},
          {"points", rows}};
}

}  // namespace trainsim::hw
