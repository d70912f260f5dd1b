// The NCCL communication backend in a build without it (kernels' trainsim_nccl not built:
// no nvcc, or nccl.h not found, or TRAINSIM_WITH_NCCL=OFF): multi-process replays are refused.
#include "hw_backend/backends.h"
#include "hw_backend/comm_backend.h"
#include "models/errors.h"

namespace trainsim::hw {

namespace {
const char* const kNoNccl =
    "this build has no NCCL (kernels/nccl_comm.h was not built: nccl.h not found; configure "
    "with -DNCCL_ROOT=...)";
}

bool nccl_comm_available(std::string* why) {
  if (why) *why = kNoNccl;
  return false;
}

std::unique_ptr<CommBackend> make_nccl_comm(const CommContext&) {
  throw InputError(std::string("replay: --nprocs > 1: ") + kNoNccl);
}

}  // namespace trainsim::hw
