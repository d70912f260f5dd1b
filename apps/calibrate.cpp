// trainsim calibrate: microbenchmarks on the local device -> a measured calibration profile
// (validation/microbench.h), or a profile refined from a PyTorch profiler trace
// (--from-trace, validation/fit.h).
#include <iostream>
#include <string>

#include "apps/verbs.h"
#include "models/calibration.h"
#include "models/hardware.h"
#include "models/local_device.h"
#include "models/scenario.h"
#include "validation/fit.h"
#include "validation/microbench.h"
#include "validation/trace_import.h"

namespace trainsim::cli {

namespace {

/// The system a profile describes: `local` for a measured profile, else the catalog system
/// whose GPU the profile names.
SystemSpec system_of_profile(const CalibrationProfile& p, const std::string& name) {
  if (has_local_device(p)) return local_system(p, name);
  for (const std::string& s : system_names())
    if (find_system(s).gpu.name == p.device) return find_system(s);
  throw InputError(name + ": field 'device' = " + p.device +
                   ": no catalog system has this GPU and the profile has no local_device");
}

}  // namespace

int calibrate_main(const CalibrateArgs& args) {
  CalibrationProfile profile;
  if (!args.from_trace.empty()) {
    if (args.base.empty())
      throw InputError("calibrate --from-trace needs --base PROFILE.json (the profile to refine)");
    const CalibrationProfile base = load_calibration(args.base);
    const SystemSpec system = system_of_profile(base, args.base);
    const validation::ImportedTrace trace = validation::load_chrome_trace(args.from_trace);
    validation::FitReport report;
    profile = validation::fit_from_operator_samples(validation::operator_samples(trace), base,
                                                    system, &report);
    profile.source = base.source + "; refined from trace " + args.from_trace;
    std::cerr << "trainsim calibrate: fitted from " << args.from_trace << ": "
              << report.to_json().dump() << "\n";
  } else {
    validation::MicrobenchOptions mo;
    mo.device = args.device.empty() ? "cpu" : args.device;
    mo.quick = args.quick;
    mo.progress = true;
    profile = validation::run_microbenchmarks(mo);
  }
  if (args.out.empty())
    std::cout << calibration_to_json(profile);
  else
    save_calibration(profile, args.out);
  return 0;
}

}  // namespace trainsim::cli
