// NCCL communicators (nccl_comm.h): the library loaded with dlopen, one wrapper per call.
#include "kernels/nccl_comm.h"

#include <dlfcn.h>

#include <nccl.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <set>

static_assert(NCCL_UNIQUE_ID_BYTES == std::tuple_size<trainsim::kernels::nccl::UniqueId>::value,
              "UniqueId must hold exactly NCCL_UNIQUE_ID_BYTES");

#if NCCL_VERSION_CODE >= NCCL_VERSION(2, 18, 0)
#define TRAINSIM_NCCL_HEADER_HAS_SPLIT 1
#endif

namespace trainsim::kernels::nccl {

namespace {

/// The NCCL entry points, resolved with dlsym. Optional ones (newer than 2.12) may be null.
struct Api {
  void* handle = nullptr;
  std::string path;
  std::string load_error;
  decltype(&ncclGetVersion) GetVersion = nullptr;
  decltype(&ncclGetUniqueId) GetUniqueId = nullptr;
  decltype(&ncclCommInitRank) CommInitRank = nullptr;
  decltype(&ncclCommDestroy) CommDestroy = nullptr;
  decltype(&ncclCommAbort) CommAbort = nullptr;
  decltype(&ncclCommGetAsyncError) CommGetAsyncError = nullptr;
  decltype(&ncclGetErrorString) GetErrorString = nullptr;
  decltype(&ncclAllReduce) AllReduce = nullptr;
  decltype(&ncclAllGather) AllGather = nullptr;
  decltype(&ncclReduceScatter) ReduceScatter = nullptr;
  decltype(&ncclSend) Send = nullptr;
  decltype(&ncclRecv) Recv = nullptr;
  decltype(&ncclGroupStart) GroupStart = nullptr;
  decltype(&ncclGroupEnd) GroupEnd = nullptr;
  const char* (*GetLastError)(ncclComm_t) = nullptr;  // NCCL >= 2.13
#ifdef TRAINSIM_NCCL_HEADER_HAS_SPLIT
  decltype(&ncclCommSplit) CommSplit = nullptr;  // NCCL >= 2.18
#endif
  int version = 0;
};

template <class F>
bool resolve(void* h, const char* name, F* out) {
  *out = reinterpret_cast<F>(::dlsym(h, name));
  return *out != nullptr;
}

Api load() {
  Api a;
  std::vector<std::string> candidates = {"libnccl.so.2"};
  if (const char* env = std::getenv("TRAINSIM_NCCL_LIBRARY"); env && *env) candidates.push_back(env);
#ifdef TRAINSIM_NCCL_LIBRARY_PATH
  candidates.push_back(TRAINSIM_NCCL_LIBRARY_PATH);
#endif
  for (const std::string& c : candidates) {
    ::dlerror();
    a.handle = ::dlopen(c.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (a.handle) {
      a.path = c;
      break;
    }
    const char* e = ::dlerror();
    a.load_error += (a.load_error.empty() ? "" : "; ") + std::string(e ? e : c + ": not loadable");
  }
  if (!a.handle) return a;
  std::string missing;
  auto need = [&](const char* name, auto* fn) {
    if (!resolve(a.handle, name, fn)) missing += (missing.empty() ? "" : ", ") + std::string(name);
  };
  need("ncclGetVersion", &a.GetVersion);
  need("ncclGetUniqueId", &a.GetUniqueId);
  need("ncclCommInitRank", &a.CommInitRank);
  need("ncclCommDestroy", &a.CommDestroy);
  need("ncclCommAbort", &a.CommAbort);
  need("ncclCommGetAsyncError", &a.CommGetAsyncError);
  need("ncclGetErrorString", &a.GetErrorString);
  need("ncclAllReduce", &a.AllReduce);
  need("ncclAllGather", &a.AllGather);
  need("ncclReduceScatter", &a.ReduceScatter);
  need("ncclSend", &a.Send);
  need("ncclRecv", &a.Recv);
  need("ncclGroupStart", &a.GroupStart);
  need("ncclGroupEnd", &a.GroupEnd);
  resolve(a.handle, "ncclGetLastError", &a.GetLastError);
#ifdef TRAINSIM_NCCL_HEADER_HAS_SPLIT
  resolve(a.handle, "ncclCommSplit", &a.CommSplit);
#endif
  if (!missing.empty()) {
    a.load_error = a.path + " lacks " + missing + " (NCCL older than 2.7?)";
    ::dlclose(a.handle);
    a.handle = nullptr;
    return a;
  }
  if (a.GetVersion(&a.version) != ncclSuccess) a.version = 0;
  return a;
}

const Api& api_or_null() {
  static const Api a = load();  // thread-safe static initialization
  return a;
}

const Api& api() {
  const Api& a = api_or_null();
  if (!a.handle) throw NcclError("NCCL is not available: " + a.load_error);
  return a;
}

std::string describe(ncclResult_t r, ncclComm_t comm) {
  const Api& a = api();
  std::string s = std::string(a.GetErrorString(r)) + " (ncclResult " + std::to_string(int(r)) + ")";
  if (a.GetLastError) {
    const char* last = a.GetLastError(comm);
    if (last && *last) s += ": " + std::string(last);
  }
  return s;
}

// The one wrapper of NCCL calls (as NCCLCHECK in nccl-tests): file, line, call, NCCL's error
// string and its last-error text.
#define NCCLCHECK(comm, call)                                                                 \
  do {                                                                                        \
    const ncclResult_t trainsim_nccl_r_ = (call);                                             \
    if (trainsim_nccl_r_ != ncclSuccess)                                                      \
      throw ::trainsim::kernels::nccl::NcclError(std::string(__FILE__) + ":" +                \
                                                 std::to_string(__LINE__) + ": " + #call +    \
                                                 ": " + describe(trainsim_nccl_r_, (comm)));  \
  } while (0)

ncclDataType_t nccl_type(DType t) {
  switch (t) {
    case DType::F32: return ncclFloat32;
    case DType::F16: return ncclFloat16;
    case DType::BF16: return ncclBfloat16;
  }
  throw std::invalid_argument("nccl: unknown DType");
}

cudaStream_t as_stream(StreamHandle s) { return static_cast<cudaStream_t>(s); }

}  // namespace

bool available(std::string* why) {
  const Api& a = api_or_null();
  if (!a.handle && why) *why = a.load_error;
  return a.handle != nullptr;
}

int version() { return api().version; }
std::string library_path() { return api().path; }

bool has_comm_split() {
#ifdef TRAINSIM_NCCL_HEADER_HAS_SPLIT
  const Api& a = api_or_null();
  return a.handle && a.CommSplit != nullptr && a.version >= NCCL_VERSION(2, 18, 0);
#else
  return false;
#endif
}

UniqueId make_unique_id() {
  ncclUniqueId id;
  NCCLCHECK(nullptr, api().GetUniqueId(&id));
  UniqueId out;
  std::memcpy(out.data(), id.internal, out.size());
  return out;
}

// ------------------------------------------------------------------ Communicator
Communicator::~Communicator() {
  if (comm_) {
    // Destroy waits for the communicator's pending work; errors cannot be thrown here.
    api().CommDestroy(static_cast<ncclComm_t>(comm_));
  }
}

Communicator::Communicator(Communicator&& o) noexcept : comm_(o.comm_), rank_(o.rank_), size_(o.size_) {
  o.comm_ = nullptr, o.rank_ = -1, o.size_ = 0;
}

Communicator& Communicator::operator=(Communicator&& o) noexcept {
  if (this != &o) {
    if (comm_) api().CommDestroy(static_cast<ncclComm_t>(comm_));
    comm_ = o.comm_, rank_ = o.rank_, size_ = o.size_;
    o.comm_ = nullptr, o.rank_ = -1, o.size_ = 0;
  }
  return *this;
}

Communicator Communicator::init(const UniqueId& id, int nranks, int rank) {
  if (nranks < 1 || rank < 0 || rank >= nranks)
    throw std::invalid_argument("nccl: init with rank " + std::to_string(rank) + " of " +
                                std::to_string(nranks));
  ncclUniqueId uid;
  std::memcpy(uid.internal, id.data(), id.size());
  ncclComm_t comm = nullptr;
  NCCLCHECK(nullptr, api().CommInitRank(&comm, nranks, uid, rank));
  return Communicator(comm, rank, nranks);
}

Communicator Communicator::init_with_rendezvous(const FileRendezvous& rv, const std::string& name,
                                                int nranks, int rank) {
  UniqueId id;
  if (rank == 0) {
    id = make_unique_id();
    rv.publish(name, std::string(id.data(), id.size()));
  } else {
    const std::string bytes =
        rv.wait(name, static_cast<std::int64_t>(id.size()), "rank 0 of communicator " + name);
    std::memcpy(id.data(), bytes.data(), id.size());
  }
  return init(id, nranks, rank);
}

Communicator Communicator::split(int color, int key) const {
  if (!comm_) throw std::logic_error("nccl: split of an empty communicator");
#ifdef TRAINSIM_NCCL_HEADER_HAS_SPLIT
  if (!has_comm_split())
    throw NcclError("nccl: ncclCommSplit needs NCCL >= 2.18; loaded " + library_path() +
                    " is version " + std::to_string(version()));
  ncclComm_t out = nullptr;
  NCCLCHECK(static_cast<ncclComm_t>(comm_),
            api().CommSplit(static_cast<ncclComm_t>(comm_), color < 0 ? NCCL_SPLIT_NOCOLOR : color,
                            key, &out, nullptr));
  if (!out) return {};
  int r = -1, n = 0;
  // ncclCommUserRank / ncclCommCount exist in every NCCL that has ncclCommSplit.
  auto user_rank = reinterpret_cast<decltype(&ncclCommUserRank)>(::dlsym(api().handle, "ncclCommUserRank"));
  auto count = reinterpret_cast<decltype(&ncclCommCount)>(::dlsym(api().handle, "ncclCommCount"));
  if (!user_rank || !count) throw NcclError("nccl: " + library_path() + " lacks ncclCommUserRank/Count");
  NCCLCHECK(out, user_rank(out, &r));
  NCCLCHECK(out, count(out, &n));
  return Communicator(out, r, n);
#else
  (void)color, (void)key;
  throw NcclError("nccl: this build's nccl.h (" + std::to_string(NCCL_VERSION_CODE) +
                  ") has no ncclCommSplit (NCCL >= 2.18)");
#endif
}

void Communicator::all_reduce(const void* send, void* recv, std::size_t count, DType dtype,
                              StreamHandle stream) const {
  auto c = static_cast<ncclComm_t>(comm_);
  NCCLCHECK(c, api().AllReduce(send, recv, count, nccl_type(dtype), ncclSum, c, as_stream(stream)));
}

void Communicator::all_gather(const void* send, void* recv, std::size_t send_count, DType dtype,
                              StreamHandle stream) const {
  auto c = static_cast<ncclComm_t>(comm_);
  NCCLCHECK(c, api().AllGather(send, recv, send_count, nccl_type(dtype), c, as_stream(stream)));
}

void Communicator::reduce_scatter(const void* send, void* recv, std::size_t recv_count, DType dtype,
                                  StreamHandle stream) const {
  auto c = static_cast<ncclComm_t>(comm_);
  NCCLCHECK(c, api().ReduceScatter(send, recv, recv_count, nccl_type(dtype), ncclSum, c,
                                   as_stream(stream)));
}

void Communicator::send(const void* buf, std::size_t count, DType dtype, int peer,
                        StreamHandle stream) const {
  auto c = static_cast<ncclComm_t>(comm_);
  NCCLCHECK(c, api().Send(buf, count, nccl_type(dtype), peer, c, as_stream(stream)));
}

void Communicator::recv(void* buf, std::size_t count, DType dtype, int peer,
                        StreamHandle stream) const {
  auto c = static_cast<ncclComm_t>(comm_);
  NCCLCHECK(c, api().Recv(buf, count, nccl_type(dtype), peer, c, as_stream(stream)));
}

void Communicator::send_recv(const void* send_buf, std::size_t send_count, int send_peer,
                             void* recv_buf, std::size_t recv_count, int recv_peer, DType dtype,
                             StreamHandle stream) const {
  auto c = static_cast<ncclComm_t>(comm_);
  const Api& a = api();
  NCCLCHECK(c, a.GroupStart());
  ncclResult_t r1 = a.Send(send_buf, send_count, nccl_type(dtype), send_peer, c, as_stream(stream));
  ncclResult_t r2 = a.Recv(recv_buf, recv_count, nccl_type(dtype), recv_peer, c, as_stream(stream));
  const ncclResult_t r3 = a.GroupEnd();  // always close the group, even after an error
  NCCLCHECK(c, r1);
  NCCLCHECK(c, r2);
  NCCLCHECK(c, r3);
}

std::string Communicator::async_error() const {
  if (!comm_) return "";
  ncclResult_t r = ncclSuccess;
  const ncclResult_t q = api().CommGetAsyncError(static_cast<ncclComm_t>(comm_), &r);
  if (q != ncclSuccess) return "ncclCommGetAsyncError failed: " + describe(q, static_cast<ncclComm_t>(comm_));
  if (r == ncclSuccess) return "";
#if NCCL_VERSION_CODE >= NCCL_VERSION(2, 14, 0)
  if (r == ncclInProgress) return "";
#endif
  return describe(r, static_cast<ncclComm_t>(comm_));
}

void Communicator::abort() noexcept {
  if (comm_) api_or_null().CommAbort(static_cast<ncclComm_t>(comm_));
  comm_ = nullptr, rank_ = -1, size_ = 0;
}

// ------------------------------------------------------------------ groups
std::vector<int> split_rounds(const std::vector<std::vector<int>>& groups) {
  std::vector<int> round(groups.size(), -1);
  std::vector<std::set<int>> used;  // ranks already in a group of each round
  for (std::size_t g = 0; g < groups.size(); ++g) {
    const std::set<int> members(groups[g].begin(), groups[g].end());
    if (members.size() != groups[g].size())
      throw std::invalid_argument("nccl: group " + std::to_string(g) + " lists a rank twice");
    std::size_t r = 0;
    for (; r < used.size(); ++r) {
      bool disjoint = true;
      for (int m : members)
        if (used[r].count(m)) {
          disjoint = false;
          break;
        }
      if (disjoint) break;
    }
    if (r == used.size()) used.emplace_back();
    used[r].insert(members.begin(), members.end());
    round[g] = static_cast<int>(r);
  }
  return round;
}

std::vector<Communicator> make_group_communicators(const Communicator& world,
                                                   const std::vector<std::vector<int>>& groups,
                                                   const FileRendezvous& rv,
                                                   const std::string& name_prefix) {
  if (!world.valid()) throw std::logic_error("nccl: make_group_communicators without a world");
  const int me = world.rank();
  for (const auto& g : groups)
    for (int r : g)
      if (r < 0 || r >= world.size())
        throw std::invalid_argument("nccl: group rank " + std::to_string(r) + " outside the world of " +
                                    std::to_string(world.size()));
  std::vector<Communicator> out(groups.size());
  if (has_comm_split()) {
    const std::vector<int> round = split_rounds(groups);
    const int rounds = groups.empty() ? 0 : *std::max_element(round.begin(), round.end()) + 1;
    for (int r = 0; r < rounds; ++r) {
      int color = -1, key = 0;
      std::size_t mine = groups.size();
      for (std::size_t g = 0; g < groups.size(); ++g) {
        if (round[g] != r) continue;
        auto it = std::find(groups[g].begin(), groups[g].end(), me);
        if (it == groups[g].end()) continue;
        color = static_cast<int>(g);  // distinct per group of the round
        key = static_cast<int>(it - groups[g].begin());
        mine = g;
      }
      Communicator c = world.split(color, key);
      if (mine < groups.size()) {
        if (!c.valid() || c.size() != static_cast<int>(groups[mine].size()))
          throw std::logic_error("nccl: split of group " + std::to_string(mine) + " gave " +
                                 std::to_string(c.size()) + " ranks, expected " +
                                 std::to_string(groups[mine].size()));
        out[mine] = std::move(c);
      }
    }
    return out;
  }
  for (std::size_t g = 0; g < groups.size(); ++g) {
    auto it = std::find(groups[g].begin(), groups[g].end(), me);
    if (it == groups[g].end()) continue;
    const int key = static_cast<int>(it - groups[g].begin());
    const std::string name = name_prefix + "." + std::to_string(g);
    out[g] = Communicator::init_with_rendezvous(rv, name, static_cast<int>(groups[g].size()), key);
    // ncclCommInitRank returned: every member has joined, so has read the id.
    if (key == 0) rv.remove(name);
  }
  return out;
}

}  // namespace trainsim::kernels::nccl
