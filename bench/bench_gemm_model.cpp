// The simulator's GEMM time for given shapes, as a GEMM microbenchmark reports it: one
// kernel of C[m x n] = A[m x k] * B[k x n] on one GPU of a catalog system, timed by the cost
// model (models/perf/cost_model.h: the wave-quantized tile time at the profile's GEMM efficiency
// with each wave's epilogue, or the HBM time of its operands, whichever is longer), without the launch overhead (a
// benchmark loop launches back to back). validation/gemm_shapes.py prints it next to
// published cuBLASLt figures.
//
//   bench_gemm_model [--system dgx-a100-80gb|dgx-h100] [--fp8] m,n,k [m,n,k ...]
// Prints one tab-separated line per shape: m  n  k  time_s  tflops
#include <cstdio>
#include <exception>
#include <sstream>
#include <string>
#include <vector>

#include "models/hardware/calibration.h"
#include "models/perf/cost_model.h"
#include "models/hardware/hardware.h"

int main(int argc, char** argv) {
  using namespace trainsim;
  std::string system = "dgx-a100-80gb";
  bool fp8 = false;
  std::vector<std::vector<double>> shapes;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--system" && i + 1 < argc) {
      system = argv[++i];
      continue;
    }
    if (a == "--fp8") {
      fp8 = true;
      continue;
    }
    std::vector<double> dims;
    std::stringstream in(a);
    std::string item;
    while (std::getline(in, item, ',')) {
      try {
        dims.push_back(std::stod(item));
      } catch (const std::exception&) {
        dims.clear();
        break;
      }
    }
    if (dims.size() != 3 || !(dims[0] >= 1 && dims[1] >= 1 && dims[2] >= 1)) {
      std::fprintf(stderr, "usage: %s [--system NAME] [--fp8] m,n,k [m,n,k ...] (bad '%s')\n",
                   argv[0], a.c_str());
      return a == "-h" || a == "--help" ? 0 : 1;
    }
    shapes.push_back(dims);
  }
  try {
    const SystemSpec& sys = find_system(system);
    const CostModel cost(sys, default_calibration(sys.gpu.name));
    for (const auto& s : shapes) {
      const double m = s[0], n = s[1], k = s[2];
      // Operand bytes as models/perf/flops.cpp counts a GEMM's (A, B and C once): FP8 operands
      // with a 16-bit output under FP8, 16-bit throughout otherwise.
      const double bytes = fp8 ? m * k + k * n + 2 * m * n : 2 * (m * k + k * n + m * n);
      const double t =
          std::max(cost.gemm_compute_time_s(m, n, k, 1, "", fp8), cost.hbm_time_s(bytes));
      std::printf("%.0f\t%.0f\t%.0f\t%.9g\t%.1f\n", m, n, k, t, 2 * m * n * k / t / 1e12);
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_gemm_model: %s\n", e.what());
    return 1;
  }
  return 0;
}
