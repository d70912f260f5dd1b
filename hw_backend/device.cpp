// Device choice, free memory and what this build can run (backends.h, replay.h). No LibTorch.
#include <fstream>
#include <sstream>
#include <stdexcept>

#include "hw_backend/backends.h"
#include "hw_backend/replay.h"
#include "models/errors.h"

namespace trainsim::hw {

DeviceChoice parse_device(const std::string& s) {
  if (s == "cpu") return {};
  if (s == "cuda" || s.rfind("cuda:", 0) == 0) {
    DeviceChoice d;
    d.cuda = true;
    if (s.size() > 5) {
      std::size_t used = 0;
      try {
        d.index = std::stoi(s.substr(5), &used);
      } catch (const std::exception&) {  // std::stoi: no digits, or out of range
        used = 0;
      }
      if (used == 0 || used != s.size() - 5 || d.index < 0)
        throw InputError("replay: --device " + s + ": expected cpu, cuda or cuda:N");
    }
    std::string why;
    if (!cuda_available(&why)) throw InputError("replay: --device " + s + ": " + why);
    return d;
  }
  throw InputError("replay: --device " + s + ": expected cpu, cuda or cuda:N");
}

std::int64_t cpu_free_memory_bytes() {
  std::ifstream in("/proc/meminfo");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("MemAvailable:", 0) != 0) continue;
    std::istringstream fields(line.substr(13));
    std::int64_t kib = -1;
    std::string unit;
    fields >> kib >> unit;
    if (kib < 0 || unit != "kB")
      throw SystemError("replay: cannot parse /proc/meminfo line '" + line + "'");
    return kib * 1024;
  }
  throw SystemError("replay: no MemAvailable in /proc/meminfo");
}

std::int64_t device_free_memory_bytes(const std::string& device) {
  const DeviceChoice d = parse_device(device);
  return d.cuda ? cuda_free_memory_bytes(d.index) : cpu_free_memory_bytes();
}

bool multiprocess_available(std::string* why) {
  if (!cuda_torch_built()) return cuda_available(why);  // false, with the reason
  return nccl_comm_available(why);
}

}  // namespace trainsim::hw
