// Fuzz target: the cluster system file reader (models/hardware/system_file.h
// parse_system_file, `cluster: {system_file: ...}`, docs/cluster.md). Any input must give a
// system or an InputError.
#include <cstddef>
#include <cstdint>
#include <string>

#include "models/errors.h"
#include "models/hardware/system_file.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  try {
    (void)trainsim::parse_system_file(text, "fuzz.yaml");
  } catch (const trainsim::InputError&) {
  }
  return 0;
}
