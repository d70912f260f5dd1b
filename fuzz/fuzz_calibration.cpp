// Fuzz target: the calibration loader (models/hardware/calibration.h parse_calibration) and the writer
// of what it accepted (calibration_to_json must read back equal). Any input must give a
// profile or an InputError.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "models/hardware/calibration.h"
#include "models/input/scenario.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  trainsim::CalibrationProfile p;
  try {
    p = trainsim::parse_calibration(text, "fuzz.json");
  } catch (const trainsim::InputError&) {
    return 0;
  }
  // What the loader accepts, the writer must write and the loader read back.
  const std::string written = trainsim::calibration_to_json(p);
  (void)trainsim::parse_calibration(written, "fuzz-rewritten.json");
  return 0;
}
