// The transport of a multi-process CPU replay (`trainsim replay --device cpu --nprocs N`,
// comm_host.cpp): collectives and pipeline messages between processes of one machine, through
// the job's rendezvous directory (kernels/rendezvous.h), as c10d's ProcessGroupGloo is the CPU
// twin of ProcessGroupNCCL. Pure C++ and POSIX (no torch): tests/hw_backend/test_host_comm.cpp
// forks processes and checks every result against the hand sum.
//
// Protocol. A collective is one exchange: every member publishes its contribution as
// "c<name>.<seq>.r<member>" (publish is atomic: write, fsync, rename), waits for the others'
// files of the same sequence number, and computes its result from them in member order, so
// every member's reduction adds the same numbers in the same order: the result is
// deterministic and identical on all members (an all-reduce of fp32 sums member 0 + member 1 +
// ... left to right in float; bf16 sums in float and rounds once, to nearest even). When a
// member finishes exchange k it removes its own file of exchange k-1: every other member has
// published exchange k, so has finished reading k-1. A pipeline message is one file
// "p<name>.<seq>", published by the sender (which does not wait: a send never blocks, as
// a buffered message), read and removed by the receiver.
//
// Members of a group must issue its collectives in the same order (comm_plan.h checks it for a
// replay, as NCCL needs too); a peer that never publishes ends in kernels::RendezvousError
// after the rendezvous's timeout, naming the file and the member it waited for.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "kernels/adam_types.h"
#include "kernels/rendezvous.h"

namespace trainsim::hw {

/// Sleep between two looks for a peer's file in the replay's host backend (comm_host.cpp) and
/// its microbenchmark (host_comm_bench.h): short, a CPU replay's collectives take microseconds
/// to milliseconds.
constexpr double kHostCommPollInterval_s = 50e-6;

/// One group of processes (a communicator): `members` are world ranks in the group's ring
/// order, `world_rank` must be one of them. `name` (letters, digits, '_', '-') keeps the files
/// of different groups of one job apart. Element types: F32 and BF16 (a CPU replay's); F16 is
/// a TRAINSIM_CHECK failure.
class HostGroup {
 public:
  HostGroup(const kernels::FileRendezvous& rv, std::string name, std::vector<int> members,
            int world_rank);

  int rank() const { return me_; }  ///< position of this process in members
  int size() const { return static_cast<int>(members_.size()); }

  /// In place: buf[i] = sum over members (in member order) of their buf[i].
  void all_reduce(void* buf, std::size_t count, kernels::DType t);
  /// send holds size() blocks of `count`; recv (count) = sum over members of their block rank().
  void reduce_scatter(const void* send, void* recv, std::size_t count, kernels::DType t);
  /// recv (size() blocks of `count`) = the members' send blocks in member order. send may
  /// alias recv's block rank() (in place).
  void all_gather(const void* send, void* recv, std::size_t count, kernels::DType t);
  /// send and recv hold size() blocks of `count`: recv block j = member j's send block rank().
  void all_to_all(const void* send, void* recv, std::size_t count, kernels::DType t);

 private:
  /// Publishes `bytes` of `data` and returns every member's payload of this exchange, in
  /// member order (this member's own included).
  std::vector<std::string> exchange(const void* data, std::size_t bytes);
  std::string file(std::int64_t seq, int member) const;

  const kernels::FileRendezvous& rv_;
  std::string name_;
  std::vector<int> members_;
  int me_ = -1;
  std::int64_t seq_ = 0;
};

/// Point-to-point messages of one directed channel src -> dst (a pipeline channel); `name`
/// as HostGroup's.
class HostChannel {
 public:
  HostChannel(const kernels::FileRendezvous& rv, std::string name, int src, int dst);
  /// Publishes the message (never blocks). Called by src.
  void send(const void* data, std::size_t bytes);
  /// Waits for the next message and copies it to `data`; its size must be `bytes`. Called by dst.
  void recv(void* data, std::size_t bytes);

 private:
  std::string file(std::int64_t seq) const;

  const kernels::FileRendezvous& rv_;
  std::string name_;
  int src_, dst_;
  std::int64_t sent_ = 0, received_ = 0;
};

}  // namespace trainsim::hw
