// NCCL communicators for the replay backend (docs/architecture.md "Executors": collectives through
// NCCL), one process per GPU, set up without MPI:
//
//   world    rank 0 calls ncclGetUniqueId and publishes the id through a FileRendezvous
//            (kernels/rendezvous.h: a directory the launcher gives every process); the other
//            ranks wait for the file (with a timeout and a clear error) and all call
//            ncclCommInitRank.
//   groups   sub-communicators (a tensor-parallel group, a data-parallel group, one pipeline
//            channel) come from ncclCommSplit of the world communicator when the loaded NCCL
//            has it (>= 2.18; groups whose members do not overlap share one split call), else
//            from one ncclCommInitRank per group with its own unique-id file.
//   ops      all-reduce (sum), all-gather, reduce-scatter (sum), send, recv and a fused
//            send+recv pair (ncclGroupStart/End), on fp16 / bf16 / fp32 device buffers,
//            enqueued on a CUDA stream passed as an opaque pointer (asynchronous).
//
// The library is loaded lazily with dlopen (first "libnccl.so.2", which is the copy a CUDA
// LibTorch already loaded when there is one, so one process never holds two NCCLs; then the
// TRAINSIM_NCCL_LIBRARY environment variable; then the libnccl found at configure time):
// programs that link this module start, and report "NCCL not available", on machines without
// NCCL or without a GPU driver.
//
// This header has no CUDA or NCCL types (opaque handles), so torch-free and CUDA-free code can
// include it. Every failed NCCL call throws NcclError with the file, line, call, NCCL's error
// string and its last-error text (as NCCLCHECK in nccl-tests).
#pragma once

#include <array>
#include <cstddef>
#include <stdexcept>
#include <string>
#include <vector>

#include "kernels/adam_types.h"
#include "kernels/rendezvous.h"

namespace trainsim::kernels::nccl {

/// A failed NCCL call, or NCCL not loadable.
class NcclError : public std::runtime_error {
 public:
  explicit NcclError(const std::string& message) : std::runtime_error(message) {}
};

/// A cudaStream_t as an opaque pointer; nullptr is the legacy default stream.
using StreamHandle = void*;

/// Whether the NCCL library can be loaded; `why` (if non-null) receives the dlopen errors when
/// not. Loads it on the first call. Needs no GPU and no driver.
bool available(std::string* why = nullptr);

/// The loaded library's version code (ncclGetVersion: major*10000 + minor*100 + patch for
/// NCCL >= 2.9) and the path it was loaded from. Throw NcclError when not available().
int version();
std::string library_path();

/// Whether the loaded library has ncclCommSplit (NCCL >= 2.18, and this module compiled
/// against a header that declares it).
bool has_comm_split();

/// ncclUniqueId's bytes (NCCL_UNIQUE_ID_BYTES = 128, checked against nccl.h at compile time).
using UniqueId = std::array<char, 128>;

/// ncclGetUniqueId. Needs the library (not a GPU).
UniqueId make_unique_id();

/// One NCCL communicator (ncclComm_t), owned: destroyed (ncclCommDestroy) by the destructor,
/// or aborted by abort(). A default-constructed or moved-from Communicator is empty (valid()
/// false): the result of a split for a rank outside the group.
class Communicator {
 public:
  Communicator() = default;
  ~Communicator();
  Communicator(const Communicator&) = delete;
  Communicator& operator=(const Communicator&) = delete;
  Communicator(Communicator&& other) noexcept;
  Communicator& operator=(Communicator&& other) noexcept;

  /// ncclCommInitRank on the current CUDA device (select it first, e.g. with
  /// kernels::cuda::set_device). Blocks until all `nranks` ranks have joined.
  static Communicator init(const UniqueId& id, int nranks, int rank);

  /// The world communicator through a rendezvous: rank 0 makes a unique id and publishes it
  /// under `name`, the others wait for it (RendezvousError after the rendezvous' timeout).
  static Communicator init_with_rendezvous(const FileRendezvous& rendezvous,
                                           const std::string& name, int nranks, int rank);

  bool valid() const { return comm_ != nullptr; }
  int rank() const { return rank_; }
  int size() const { return size_; }

  /// ncclCommSplit: collective over all ranks of this communicator. color < 0: this rank
  /// joins no new communicator (the result is empty). Ranks order by key, then by old rank.
  /// Throws NcclError when !has_comm_split().
  Communicator split(int color, int key) const;

  /// Sum all-reduce of `count` elements (in place when send == recv).
  void all_reduce(const void* send, void* recv, std::size_t count, DType dtype,
                  StreamHandle stream) const;
  /// All-gather: every rank contributes `send_count` elements; recv holds size()*send_count,
  /// rank r's at r*send_count. In place when send == recv + rank()*send_count.
  void all_gather(const void* send, void* recv, std::size_t send_count, DType dtype,
                  StreamHandle stream) const;
  /// Sum reduce-scatter: send holds size()*recv_count elements; rank r receives block r. In
  /// place when recv == send + rank()*recv_count.
  void reduce_scatter(const void* send, void* recv, std::size_t recv_count, DType dtype,
                      StreamHandle stream) const;
  /// Point-to-point; the peer must post the matching recv / send (same count and type).
  /// Blocking for the stream (the GPU waits for the peer), not for the host.
  void send(const void* buf, std::size_t count, DType dtype, int peer, StreamHandle stream) const;
  void recv(void* buf, std::size_t count, DType dtype, int peer, StreamHandle stream) const;
  /// A send to `send_peer` and a receive from `recv_peer` fused in one ncclGroupStart/End, so
  /// they progress together (two ranks exchanging messages cannot deadlock).
  void send_recv(const void* send_buf, std::size_t send_count, int send_peer, void* recv_buf,
                 std::size_t recv_count, int recv_peer, DType dtype, StreamHandle stream) const;

  /// The error NCCL raised asynchronously on this communicator (ncclCommGetAsyncError), or ""
  /// when none ("in progress" counts as none).
  std::string async_error() const;

  /// ncclCommAbort: frees the communicator without waiting for pending operations (after a
  /// timeout or a peer's failure). Leaves this object empty.
  void abort() noexcept;

 private:
  Communicator(void* comm, int rank, int size) : comm_(comm), rank_(rank), size_(size) {}
  void* comm_ = nullptr;  // ncclComm_t
  int rank_ = -1;
  int size_ = 0;
};

/// Rounds of ncclCommSplit calls for `groups` (each a list of world ranks): groups whose
/// member sets are disjoint share a round (one split call, a color per group), assigned
/// greedily in list order. Returns the round of each group. Pure (tested without a GPU).
std::vector<int> split_rounds(const std::vector<std::vector<int>>& groups);

/// The communicators of `groups` for this process (world.rank()): one per group, in order;
/// empty where this rank is not a member. A group's ranks are numbered in list order. Every
/// rank of `world` must call this with the same groups (collective). Splits `world` in
/// split_rounds() rounds when has_comm_split(); otherwise one ncclCommInitRank per group, its
/// unique id published by the group's first member through `rendezvous` under
/// "<name_prefix>.<group index>" (groups initialized in list order, which cannot deadlock:
/// every member reaches group k after the groups before it, each of which completes).
std::vector<Communicator> make_group_communicators(const Communicator& world,
                                                   const std::vector<std::vector<int>>& groups,
                                                   const FileRendezvous& rendezvous,
                                                   const std::string& name_prefix);

}  // namespace trainsim::kernels::nccl
