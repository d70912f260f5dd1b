// The host transport's microbenchmark (`trainsim calibrate --device cpu`): collectives of the
// host backend (host_comm.h, the transport of `replay --device cpu --nprocs N`) between
// processes of this machine, timed over message sizes, and the latency + bandwidth line the
// CPU profile's local_device.host_comm_latency_s / host_comm_bw_bytes_per_s hold
// (models/hardware/calibration.h; the simulator prices with them, CostModel::host_transport).
//
// How: the calling process is member 0 and forks the other members (as
// tests/hw_backend/test_host_comm.cpp does); they share a fresh rendezvous directory under
// $TMPDIR (or /tmp), the directory kind `replay --nprocs` uses (launch.h), polled at the
// replay's interval (host_comm.h kHostCommPollInterval_s). For each operation and size every member runs
// a barrier (a one-float all-reduce on a group of its own), then the operation; member 0 times
// the operation, from its call to its return, as the replay's trace times a collective task.
// One warm-up, then `repetitions`; the fastest is kept (other load on the machine only adds).
// The forked members touch no LibTorch (pure POSIX), so calibrate runs this before its LibTorch
// microbenchmarks start their thread pools.
//
// The fit: a line time = latency + x / bandwidth through the fastest times, x the bytes a
// member writes and reads in the exchange (CostModel::host_transport_bytes_per_rank: n S for an
// all-reduce, reduce-scatter or all-to-all of S bytes over n members, S for an all-gather), over
// all operations and sizes together, least squares of the relative residuals (weights 1 / t^2:
// the sizes span three orders of magnitude of time, and absolute residuals would leave the
// small messages, and so the latency, to the largest ones); the latency is held at >= 0.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace trainsim::hw {

struct HostCommBenchOptions {
  int processes = 2;  ///< members of the group (>= 2)
  /// Sizes S of each operation, in bytes of fp32 (the graph's op.bytes: an all-reduce's buffer,
  /// a reduce-scatter's input, an all-gather's output, an all-to-all's per-member buffer).
  std::vector<std::int64_t> sizes_bytes = {4096, 16384, 65536, 262144, 1048576, 4194304};
  int repetitions = 10;  ///< timed calls per operation and size (after one warm-up)
  double timeout_s = 60;  ///< a member that never publishes ends the benchmark (RendezvousError)
};

/// One measured point: the fastest repetition of `op` ("all_reduce", "reduce_scatter",
/// "all_gather", "all_to_all") of `bytes` S over `processes` members, and the bytes x a member
/// wrote and read in it.
struct HostCommPoint {
  std::string op;
  std::int64_t bytes = 0;
  int processes = 0;
  double transport_bytes = 0;
  double best_s = 0;
};

struct HostCommFit {
  double latency_s = 0;
  double bw_bytes_per_s = 0;
};

/// Runs the benchmark (see the file comment). Throws InputError when the rendezvous directory
/// cannot be made, SystemError when a member cannot be forked or fails.
std::vector<HostCommPoint> measure_host_collectives(const HostCommBenchOptions& options);

/// The line through (transport_bytes, best_s) of the points, relative least squares (file
/// comment).
/// Throws InputError when fewer than two distinct byte counts are given or the slope is not
/// positive (times that do not grow with the bytes: nothing to fit a bandwidth to).
HostCommFit fit_host_comm(const std::vector<HostCommPoint>& points);

/// The points and the fit as the profile's measurements.host_comm record.
nlohmann::json host_comm_json(const std::vector<HostCommPoint>& points, const HostCommFit& fit);

}  // namespace trainsim::hw
