// Fuzz target: the Kineto / Chrome trace importer (validation/trace_import.h) and the fit of
// `calibrate --from-trace` (validation/fit.h) onto the shipped A100 profile. Any input must
// give a fitted profile or an InputError.
#include <cstddef>
#include <cstdint>
#include <string>

#include "models/hardware/calibration.h"
#include "models/hardware/hardware.h"
#include "models/input/scenario.h"
#include "validation/fit.h"
#include "validation/trace_import.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static const trainsim::CalibrationProfile base =
      trainsim::default_calibration(trainsim::find_system("dgx-a100-80gb").gpu.name);
  static const trainsim::SystemSpec system = trainsim::find_system("dgx-a100-80gb");
  const std::string text(reinterpret_cast<const char*>(data), size);
  try {
    const trainsim::validation::ImportedTrace trace =
        trainsim::validation::parse_chrome_trace(text, "fuzz.json");
    const auto samples = trainsim::validation::operator_samples(trace);
    trainsim::validation::FitReport report;
    (void)trainsim::validation::fit_from_operator_samples(samples, base, system, &report);
    (void)report.to_json().dump();
  } catch (const trainsim::InputError&) {
  }
  return 0;
}
