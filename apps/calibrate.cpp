// trainsim calibrate: microbenchmarks on the local device -> a measured calibration profile
// (validation/microbench.h), or a profile refined from a PyTorch profiler trace
// (--from-trace, validation/fit.h).
#include <iostream>
#include <string>
#include <utility>
#include <vector>

#include "apps/output_file.h"
#include "apps/verbs.h"
#include "models/hardware/calibration.h"
#include "models/hardware/hardware.h"
#include "models/hardware/local_device.h"
#include "models/input/scenario.h"
#include "validation/fit.h"
#include "validation/gpu_info.h"
#include "validation/host_fit.h"
#include "validation/microbench.h"
#include "validation/trace_import.h"
#ifndef TRAINSIM_NO_MICROBENCH
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

#include "hw_backend/host_comm_bench.h"
#endif

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

/// The fit report on stderr, and a warning for every figure the fit moved by more than
/// kFitWarningFactor (a refinement of the same device moves rates by tens of percent).
void report_fit(const std::string& source, const std::string& base_path,
                const validation::FitReport& report, const CalibrationProfile& base,
                const CalibrationProfile& fitted) {
  std::cerr << "trainsim calibrate: fitted from " << source << ": " << report.to_json().dump()
            << "\n";
  for (const validation::FitChange& c :
       validation::large_fit_changes(base, fitted, validation::kFitWarningFactor))
    std::cerr << "trainsim calibrate: warning: the fit moves " << c.field << " from " << c.before
              << " to " << c.after << " (" << c.factor << "x, more than the "
              << validation::kFitWarningFactor
              << "x a refinement of the same device should need; check that " << source
              << " comes from the device of " << base_path << ")\n";
}

#ifndef TRAINSIM_NO_MICROBENCH
/// The host transport of a multi-process CPU replay (hw_backend/host_comm_bench.h), measured
/// between two processes; --quick: three sizes, five repetitions. Run before the LibTorch
/// microbenchmarks, so that the forked members start before LibTorch's thread pools.
std::vector<hw::HostCommPoint> measure_host_transport(bool quick) {
  hw::HostCommBenchOptions o;
  if (quick) {
    o.sizes_bytes = {4096, 65536, 1048576};
    o.repetitions = 5;
  }
  std::cerr << "trainsim calibrate: host transport (hw_backend/host_comm.h) between "
            << o.processes << " processes, " << o.sizes_bytes.size() << " sizes\n";
  return hw::measure_host_collectives(o);
}

/// The fit of `points` into local_device.host_comm_* and the points into
/// measurements.host_comm.
void add_host_transport(CalibrationProfile& p, const std::vector<hw::HostCommPoint>& points) {
  const hw::HostCommFit fit = hw::fit_host_comm(points);
  p.local_device.host_comm_latency_s = fit.latency_s;
  p.local_device.host_comm_bw_bytes_per_s = fit.bw_bytes_per_s;
  nlohmann::json m = p.measurements_json.empty() ? nlohmann::json::object()
                                                 : nlohmann::json::parse(p.measurements_json);
  m["host_comm"] = hw::host_comm_json(points, fit);
  p.measurements_json = m.dump();
  std::cerr << "trainsim calibrate: host transport: " << fit.latency_s * 1e3 << " ms + bytes / "
            << fit.bw_bytes_per_s / 1e9 << " GB/s\n";
}
/// calibrate --nprocs N: N - 1 forked processes run the same microbenchmarks over and over
/// while this one (member 0) measures, and are stopped (SIGTERM) when it is done. The profile
/// keeps member 0's rates: every one of its measurements ran while the N - 1 others competed
/// for the cores, as the ranks of `validate --nprocs N` do (a member that finished its grid
/// first would have measured its last shapes alone). The forked members write nothing.
class Competitors {
 public:
  Competitors(const validation::MicrobenchOptions& mo, std::int64_t nprocs) {
    validation::MicrobenchOptions quiet = mo;
    quiet.progress = false;
    std::fflush(nullptr);
    for (std::int64_t m = 1; m < nprocs; ++m) {
      const pid_t pid = ::fork();
      if (pid < 0) {
        stop();
        throw SystemError(std::string("calibrate --nprocs: cannot fork: ") +
                          std::strerror(errno));
      }
      if (pid == 0) {
        try {
          for (;;) (void)validation::run_microbenchmarks(quiet);
        } catch (...) {
        }
        ::_exit(1);
      }
      pids_.push_back(pid);
    }
    if (!pids_.empty())
      std::cerr << "trainsim calibrate: " << pids_.size() << " more process(es) run the same "
                << "microbenchmarks while this one measures (--nprocs " << nprocs << ")\n";
  }
  ~Competitors() { stop(); }
  Competitors(const Competitors&) = delete;
  Competitors& operator=(const Competitors&) = delete;

 private:
  void stop() {
    for (pid_t pid : pids_) ::kill(pid, SIGTERM);
    for (pid_t pid : pids_) ::waitpid(pid, nullptr, 0);
    pids_.clear();
  }
  std::vector<pid_t> pids_;
};
#endif

}  // namespace

int calibrate_main(const CalibrateArgs& args) {
  CalibrationProfile profile;
  nlohmann::json host_section;  // the fitted `host` section (--from-trace of a replay trace)
  check_distinct_paths({{"--base", args.base},
                        {"--from-trace", args.from_trace},
                        {"--from-microbench", args.from_microbench}},
                       {{"--out", args.out}});
  // Checked before the fit or the microbenchmarks: a folder that cannot be written fails now.
  OutputFile out_file(args.out, "--out");
  if (!args.from_trace.empty() && !args.from_microbench.empty())
    throw InputError("calibrate --from-trace and --from-microbench: one source per fit");
  if (args.from_trace.empty() && args.from_microbench.empty() && !args.base.empty())
    throw InputError("calibrate --base " + args.base +
                     ": --base is the profile that --from-trace or --from-microbench refines, "
                     "and neither was given (microbenchmarks measure a new profile; drop --base "
                     "or add --from-trace TRACE.json / --from-microbench MEASURED.json)");
  if (args.from_trace.empty() && args.allow_device_mismatch)
    throw InputError("calibrate --allow-device-mismatch applies only with --from-trace");
  // The two fits refine a --base profile (with the system it is for); the measuring flags do
  // not apply to them. `flag`: the fit's flag; `base_is`: what --base stands for; `applies_to`:
  // where --quick / --device belong instead.
  const auto fit_base = [&](const std::string& flag, const std::string& base_is,
                            const std::string& applies_to) {
    if (args.base.empty())
      throw InputError("calibrate " + flag + " needs --base PROFILE.json (" + base_is + ")");
    if (!args.device.empty() || args.quick || args.nprocs > 0)
      throw InputError("calibrate " + flag + ": " +
                       (args.quick           ? std::string("--quick")
                        : args.nprocs > 0    ? "--nprocs " + std::to_string(args.nprocs)
                                             : "--device " + args.device) +
                       " applies to " + applies_to);
    CalibrationProfile base = load_calibration(args.base);
    SystemSpec system = system_of_profile(base, args.base);
    return std::make_pair(std::move(base), std::move(system));
  };
  if (!args.from_microbench.empty()) {
    const auto [base, system] = fit_base(
        "--from-microbench",
        "the catalog GPU's profile to refine, e.g. calibration/h100-sxm5-80gb.json",
        "measuring, not to a fit from measurements");
    const CalibrationProfile measured = load_calibration(args.from_microbench);
    if (validation::gpu_name_of_profile_device(measured.device).empty())
      std::cerr << "trainsim calibrate: note: " << args.from_microbench << " says its device is '"
                << measured.device << "', which names no GPU (written by a calibrate that did "
                << "not record it); its rates are taken as the " << system.gpu.name
                << "'s (a rate above its peak is refused)\n";
    validation::FitReport report;
    profile = validation::fit_from_microbenchmarks(measured, args.from_microbench, base, system,
                                                   &report);
    report_fit(args.from_microbench, args.base, report, base, profile);
  } else if (!args.from_trace.empty()) {
    const auto [base, system] = fit_base("--from-trace", "the profile to refine",
                                         "microbenchmarks, not to a fit from a trace");
    const validation::ImportedTrace trace = validation::load_chrome_trace(args.from_trace);
    const std::string mismatch = validation::trace_device_mismatch(trace, base.device);
    if (!mismatch.empty()) {
      if (!args.allow_device_mismatch)
        throw InputError("calibrate --from-trace " + args.from_trace + " --base " + args.base +
                         ": " + mismatch +
                         "; a fit would carry one device's speed into the other's profile "
                         "(pass --allow-device-mismatch to fit anyway)");
      std::cerr << "trainsim calibrate: warning: " << mismatch
                << " (--allow-device-mismatch)\n";
    }
    const std::vector<validation::OpSample> samples = validation::operator_samples(trace);
    if (validation::has_host_issue_spans(trace)) {
      // A replay trace's host thread (docs/trace.md): the profile's `host` section.
      const validation::HostIssueFit hf = validation::fit_host_issue_costs(trace);
      host_section = hf.to_host_section(args.from_trace);
      std::cerr << "trainsim calibrate: host issue costs fitted from " << hf.spans
                << " host_issue spans of " << args.from_trace << ": " << host_section.dump() << "\n";
    }
    if (samples.empty() && !host_section.is_null()) {
      profile = base;  // no operator samples: only the host section is fitted
    } else {
      validation::FitReport report;
      profile = validation::fit_from_operator_samples(samples, base, system, &report, args.from_trace);
      report_fit(args.from_trace, args.base, report, base, profile);
    }
    profile.source = base.source + "; refined from trace " + args.from_trace;
  } else {
#ifdef TRAINSIM_NO_MICROBENCH
    throw InputError("calibrate: measuring this machine runs LibTorch microbenchmarks, which this "
                     "build lacks (trainsim-torch was not built); --from-trace and "
                     "--from-microbench fit a profile without them");
#else
    validation::MicrobenchOptions mo;
    mo.device = args.device.empty() ? "cpu" : args.device;
    mo.quick = args.quick;
    mo.progress = true;
    mo.median_of_repetitions = args.nprocs > 1;  // time-sliced: the typical repetition
    if (args.nprocs > 0 && mo.device != "cpu")
      throw InputError("calibrate --device " + mo.device + " --nprocs " +
                       std::to_string(args.nprocs) +
                       ": --nprocs measures the CPU's rates as N processes sharing its cores "
                       "see them (--device cpu); a GPU runs one replay process");
    std::vector<hw::HostCommPoint> transport;
    if (mo.device == "cpu") transport = measure_host_transport(args.quick);
    // Started before this process's LibTorch thread pools, as the transport's members.
    const Competitors competitors(mo, args.nprocs);
    profile = validation::run_microbenchmarks(mo);
    if (args.nprocs > 0) profile.local_device.processes = double(args.nprocs);
    if (!transport.empty()) add_host_transport(profile, transport);
#endif
  }
  std::string text = calibration_to_json(profile);
  if (!host_section.is_null()) {
    // The fitted host section (CalibrationProfile's host_* entries, calibration.h) beside what
    // the base profile has.
    nlohmann::ordered_json j = nlohmann::ordered_json::parse(text);
    nlohmann::ordered_json host = j.contains("host") ? j["host"] : nlohmann::ordered_json::object();
    for (const auto& [k, v] : host_section.items()) host[k] = v;
    j["host"] = host;
    text = j.dump(2) + "\n";
  }
  if (args.out.empty()) {
    std::cout << text;
  } else {
    out_file.stream() << text;
    out_file.commit();
  }
  return 0;
}

}  // namespace trainsim::cli
