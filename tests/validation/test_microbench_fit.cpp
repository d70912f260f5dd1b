// `calibrate --from-microbench`: the shipped H100 profile fitted from the microbenchmarks that
// `trainsim calibrate --device cuda` measured on a lent H100 (validation/data/h100_2026-11-26/).
// The expected numbers are computed here straight from the measurement JSON and the hardware
// catalog, not through the fit.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <map>
#include <sstream>
#include <tuple>

#include <nlohmann/json.hpp>

#include "models/hardware/calibration.h"
#include "models/perf/cost_model.h"
#include "models/hardware/hardware.h"
#include "models/input/scenario.h"
#include "validation/fit.h"
#include "validation/gpu_info.h"
#include "tests/support/paths.h"

using trainsim::test_support::source_path;

using namespace trainsim;
using namespace trainsim::validation;

namespace {

const std::string kMeasured = source_path("validation/data/h100_2026-11-26/calibrate_cuda.json");

nlohmann::json measurements() {
  std::ifstream f(kMeasured);
  std::stringstream ss;
  ss << f.rdbuf();
  return nlohmann::json::parse(ss.str())["measurements"];
}

/// The InputError message of fitting `measured` (from `path`) onto `base` for `system`; a test
/// failure naming `what` when the fit is accepted.
std::string fit_refusal(const CalibrationProfile& measured, const std::string& path,
                        const CalibrationProfile& base, const SystemSpec& system,
                        const std::string& what) {
  try {
    (void)fit_from_microbenchmarks(measured, path, base, system, nullptr);
  } catch (const InputError& e) {
    return e.what();
  }
  ADD_FAILURE() << what << " was fitted";
  return "";
}

}  // namespace

TEST(MicrobenchFit, H100MeasurementsBecomeTheH100ProfilesTables) {
  const SystemSpec h100 = find_system("dgx-h100");
  const CalibrationProfile base = default_calibration(h100.gpu.name);
  const CalibrationProfile measured = load_calibration(kMeasured);
  FitReport rep;
  const CalibrationProfile p = fit_from_microbenchmarks(measured, kMeasured, base, h100, &rep);
  const nlohmann::json m = measurements();

  // One table point per (m, n, k, batch, role), the mean of its measurements, as a fraction of
  // the datasheet's dense 16-bit peak.
  std::map<std::tuple<double, double, double, double, std::string>, std::vector<double>> want;
  for (const auto& r : m["gemm"])
    want[{r["m"], r["n"], r["k"], r["batch"], r["role"]}].push_back(
        r["flops_per_s"].get<double>() / h100.gpu.peak_dense_fp16_flops);
  ASSERT_EQ(p.gemm_efficiency.size(), want.size());
  for (const auto& pt : p.gemm_efficiency) {
    const auto& effs = want.at({pt.m, pt.n, pt.k, pt.batch, pt.role});
    double mean = 0;
    for (double e : effs) mean += e / double(effs.size());
    EXPECT_DOUBLE_EQ(pt.efficiency, mean) << pt.m << "x" << pt.n << "x" << pt.k << " " << pt.role;
  }
  EXPECT_EQ(rep.gemm_shapes, want.size());

  // HBM: the streaming copy over the datasheet bandwidth; PCIe: the mean of both directions at
  // the largest pinned copy over the x16 link.
  EXPECT_DOUBLE_EQ(p.hbm_efficiency,
                   m["stream_copy"]["bytes_per_s"].get<double>() / h100.gpu.hbm_bw_bytes_per_s);
  double largest = 0, both = 0;
  for (const auto& r : m["copies"])
    if (r["bytes"].get<double>() > largest) {
      largest = r["bytes"];
      both = 0.5 * (r["h2d_bytes_per_s"].get<double>() + r["d2h_bytes_per_s"].get<double>());
    }
  EXPECT_DOUBLE_EQ(p.pcie_efficiency, both / h100.gpu.pcie_bw_bytes_per_s);
  EXPECT_NE(p.sources.at("hbm_efficiency").find("calibrate_cuda.json"), std::string::npos);
  // What the fit leaves alone.
  EXPECT_EQ(p.kernel_launch_overhead_s, base.kernel_launch_overhead_s);
  EXPECT_EQ(p.gemm_fp8_max_efficiency, base.gemm_fp8_max_efficiency);
  EXPECT_EQ(p.memory_bound_bytes_per_s, base.memory_bound_bytes_per_s);

  // The cost model then times a measured shape at its measured rate: 8192^3 forward.
  double rate = 0;
  for (const auto& r : m["gemm"])
    if (r["m"] == 8192 && r["n"] == 8192 && r["k"] == 8192 && r["role"] == "fwd") rate = r["flops_per_s"];
  ASSERT_GT(rate, 0);
  const CostModel cost(h100, p);
  EXPECT_NEAR(cost.gemm_compute_time_s(8192, 8192, 8192, 1, "fwd", false, false),
              2.0 * 8192 * 8192 * 8192 / rate, 1e-12);
}

TEST(MicrobenchFit, MeasurementsOfAnotherDeviceAreRefused) {
  const CalibrationProfile measured = load_calibration(kMeasured);
  // H100 rates above an A100's peak: measured on another GPU.
  const SystemSpec a100 = find_system("dgx-a100-80gb");
  const std::string above = fit_refusal(measured, kMeasured, default_calibration(a100.gpu.name),
                                        a100, "H100 measurements onto an A100");
  EXPECT_NE(above.find("above the"), std::string::npos) << above;
  // A CPU's measurements.
  const std::string cpu_path = source_path("tests/golden/cpu_profile.json");
  const SystemSpec h100 = find_system("dgx-h100");
  const CalibrationProfile base = default_calibration(h100.gpu.name);
  const std::string cpu =
      fit_refusal(load_calibration(cpu_path), cpu_path, base, h100, "a CPU profile onto an H100");
  EXPECT_NE(cpu.find("microbenchmarks of a CPU"), std::string::npos) << cpu;
  // A measured (local) profile as the base.
  EXPECT_THROW((void)fit_from_microbenchmarks(measured, kMeasured, measured, h100, nullptr),
               InputError);
}

TEST(GpuName, CudaNamesMatchTheirCatalogGpu) {
  EXPECT_TRUE(gpu_name_matches("NVIDIA H100 80GB HBM3", "H100-SXM5-80GB"));
  EXPECT_TRUE(gpu_name_matches("NVIDIA A100-SXM4-80GB", "A100-SXM4-80GB"));
  EXPECT_TRUE(gpu_name_matches("NVIDIA A100-SXM4-40GB", "A100-SXM4-40GB"));
  EXPECT_FALSE(gpu_name_matches("NVIDIA A100-SXM4-40GB", "A100-SXM4-80GB"));
  EXPECT_FALSE(gpu_name_matches("NVIDIA H100 80GB HBM3", "A100-SXM4-80GB"));
  EXPECT_FALSE(gpu_name_matches("NVIDIA H200", "H100-SXM5-80GB"));
  EXPECT_FALSE(gpu_name_matches("", "H100-SXM5-80GB"));
}

TEST(GpuName, TheProfileDeviceStringCarriesTheName) {
  const std::string named = cuda_profile_device({"NVIDIA H100 80GB HBM3", std::int64_t(85) << 30}, "2.11.0", "bf16");
  EXPECT_EQ(named, "cuda: NVIDIA H100 80GB HBM3 (LibTorch 2.11.0, bf16)");
  EXPECT_EQ(gpu_name_of_profile_device(named), "NVIDIA H100 80GB HBM3");
  const std::string unnamed = cuda_profile_device({}, "2.11.0", "bf16");
  EXPECT_EQ(unnamed, "cuda (LibTorch 2.11.0, bf16)");
  EXPECT_EQ(gpu_name_of_profile_device(unnamed), "");
  EXPECT_EQ(gpu_name_of_profile_device("cpu: AMD EPYC (2 cores, LibTorch 1.13.0 fp32, 1 threads)"), "");
}

// A profile measured on a named GPU that is not --base's is refused before any rate is read.
TEST(MicrobenchFit, ANamedGpuMustBeTheBasesGpu) {
  CalibrationProfile measured = load_calibration(kMeasured);
  measured.device = "cuda: NVIDIA A100-SXM4-80GB (LibTorch 2.11.0, bf16)";
  const SystemSpec h100 = find_system("dgx-h100");
  const std::string other = fit_refusal(measured, kMeasured, default_calibration(h100.gpu.name),
                                        h100, "an A100's measurements onto an H100");
  EXPECT_NE(other.find("measured on NVIDIA A100-SXM4-80GB"), std::string::npos) << other;
  measured.device = "cuda: NVIDIA H100 80GB HBM3 (LibTorch 2.11.0, bf16)";
  EXPECT_NO_THROW((void)fit_from_microbenchmarks(measured, kMeasured,
                                                 default_calibration(h100.gpu.name), h100, nullptr));
}

// Issue 35: a role that no GEMM table takes (the profile the fit writes would be refused by
// simulate) and a dimension past any GEMM are refused, naming the file and the row.
TEST(MicrobenchFit, AnUnknownRoleOrAnImpossibleShapeIsRefused) {
  const SystemSpec h100 = find_system("dgx-h100");
  const CalibrationProfile base = default_calibration(h100.gpu.name);
  CalibrationProfile measured = load_calibration(kMeasured);
  nlohmann::json m = measurements();
  m["gemm"][1]["role"] = "sideways";
  measured.measurements_json = m.dump();
  const std::string role = fit_refusal(measured, "m.json", base, h100, "role 'sideways'");
  EXPECT_NE(role.find("m.json: measurements.gemm[1]: field 'role' = 'sideways'"),
            std::string::npos)
      << role;
  m = measurements();
  m["gemm"][2]["k"] = 4.6e18;
  measured.measurements_json = m.dump();
  const std::string huge = fit_refusal(measured, "m.json", base, h100, "k = 4.6e18");
  EXPECT_NE(huge.find("m.json: measurements.gemm[2]"), std::string::npos) << huge;
  EXPECT_NE(huge.find("above 2^31"), std::string::npos) << huge;
}
