// Fuzz target: `calibrate --from-microbench` (a measured profile, read by parse_calibration,
// then validation/fit.h fit_from_microbenchmarks onto the shipped H100 profile). Any input
// must give a fitted profile or an InputError; what the fit writes must read back.
#include <cstddef>
#include <cstdint>
#include <string>

#include "models/errors.h"
#include "models/hardware/calibration.h"
#include "models/hardware/hardware.h"
#include "validation/fit.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static const trainsim::SystemSpec system = trainsim::find_system("dgx-h100");
  static const trainsim::CalibrationProfile base = trainsim::default_calibration(system.gpu.name);
  const std::string text(reinterpret_cast<const char*>(data), size);
  try {
    const trainsim::CalibrationProfile measured =
        trainsim::parse_calibration(text, "fuzz-measured.json");
    trainsim::validation::FitReport report;
    const trainsim::CalibrationProfile fitted = trainsim::validation::fit_from_microbenchmarks(
        measured, "fuzz-measured.json", base, system, &report);
    (void)trainsim::parse_calibration(trainsim::calibration_to_json(fitted), "fuzz-fitted.json");
  } catch (const trainsim::InputError&) {
  }
  return 0;
}
