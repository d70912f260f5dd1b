// The CUDA device loop in a build against a CPU-only LibTorch (Debian's libtorch-dev):
// --device cuda is a clear error at run time (parse_device asks cuda_available first).
#include <memory>
#include <stdexcept>

#include "hw_backend/backends.h"
#include "hw_backend/replay.h"
#include "models/errors.h"

namespace trainsim::hw {

class DeviceLoop;

bool cuda_torch_built() { return false; }

bool cuda_available(std::string* why) {
  if (why)
    *why = "LibTorch " + torch_version() +
           " was built without CUDA (Debian's libtorch-dev is CPU-only); configure against a "
           "CUDA LibTorch, e.g. -DCMAKE_PREFIX_PATH=$(python3 -c 'import torch; "
           "print(torch.utils.cmake_prefix_path)')";
  return false;
}

int cuda_device_count() { return 0; }

std::int64_t cuda_free_memory_bytes(int index) {
  std::string why;
  cuda_available(&why);
  throw InputError("replay: free memory of cuda:" + std::to_string(index) + ": " + why);
}

std::unique_ptr<DeviceLoop> make_cuda_loop(int) {
  TRAINSIM_CHECK(false, "replay: CUDA device loop in a build without CUDA LibTorch");
}

}  // namespace trainsim::hw
