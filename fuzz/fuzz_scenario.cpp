// Fuzz target: the scenario loader (models/input/scenario.h parse_scenario, i.e. load_scenario less
// the file read). Any input must give a Scenario or an InputError; every other exception,
// crash, hang or sanitizer report is a finding.
#include <cstddef>
#include <cstdint>
#include <string>

#include "models/input/scenario.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  try {
    trainsim::Scenario s = trainsim::parse_scenario(text, "fuzz.yaml");
    (void)s.world_size();
  } catch (const trainsim::InputError&) {
  }
  return 0;
}
