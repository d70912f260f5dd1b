// The host transport's microbenchmark (hw_backend/host_comm_bench.h): the fit against a line
// computed here, its refusals, and one short real run between forked processes whose points
// are checked for what they are (operations, sizes, the bytes a member moves by
// CostModel::host_transport_bytes_per_rank's rule), never for how long they took.
#include "hw_backend/host_comm_bench.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

#include "models/errors.h"

using trainsim::hw::HostCommPoint;
using trainsim::hw::fit_host_comm;

namespace {

HostCommPoint point(const std::string& op, double transport_bytes, double best_s) {
  HostCommPoint p;
  p.op = op;
  p.transport_bytes = transport_bytes;
  p.best_s = best_s;
  return p;
}

}  // namespace

TEST(HostCommBench, FitRecoversAnExactLine) {
  // time = 2 ms + x / 1.25 GB/s at three byte counts, two operations each.
  const double lat = 2e-3, bw = 1.25e9;
  std::vector<HostCommPoint> pts;
  for (double x : {8192.0, 131072.0, 2097152.0}) {
    pts.push_back(point("all_reduce", x, lat + x / bw));
    pts.push_back(point("all_to_all", x, lat + x / bw));
  }
  const auto f = fit_host_comm(pts);
  EXPECT_NEAR(f.latency_s, lat, 1e-12);
  EXPECT_NEAR(f.bw_bytes_per_s / bw, 1.0, 1e-9);
}

TEST(HostCommBench, FitWeighsRelativeResiduals) {
  // Two times at x = 0 (1 ms and 3 ms) and one at x = 1 MB (2 ms). Relative residuals: at x = 0
  // the latency is the mean weighted by 1 / t^2, (1 x 1 + 3 x 1/9) / (1 + 1/9) = 1.2 ms, and
  // the line passes through the single point at 1 MB: slope 0.8 ms / 1e6 B (1.25 GB/s).
  // Absolute residuals would give 2 ms and a slope of 0 instead.
  const auto f = fit_host_comm({point("a", 0, 1e-3), point("a", 0, 3e-3), point("a", 1e6, 2e-3)});
  EXPECT_NEAR(f.latency_s, 1.2e-3, 1e-12);
  EXPECT_NEAR(f.bw_bytes_per_s / 1.25e9, 1.0, 1e-9);
}

TEST(HostCommBench, FitHoldsTheLatencyAtZero) {
  // Two points on time = -1 ms + x / 1 GB/s: the intercept is negative, held at 0.
  const auto f = fit_host_comm({point("a", 2e6, 1e-3), point("a", 4e6, 3e-3)});
  EXPECT_EQ(f.latency_s, 0.0);
  EXPECT_NEAR(f.bw_bytes_per_s, 1e9, 1e-3);
}

TEST(HostCommBench, FitRefusesOneSizeAndTimesThatDoNotGrow) {
  EXPECT_THROW(fit_host_comm({point("a", 4096, 1e-3), point("b", 4096, 2e-3)}),
               trainsim::InputError);
  try {
    fit_host_comm({point("a", 4096, 2e-3), point("a", 8192, 1e-3)});
    FAIL() << "expected an InputError";
  } catch (const trainsim::InputError& e) {
    EXPECT_NE(std::string(e.what()).find("do not grow"), std::string::npos) << e.what();
  }
}

TEST(HostCommBench, ShortRunBetweenTwoProcessesMeasuresEveryOperationAndSize) {
  trainsim::hw::HostCommBenchOptions o;
  o.sizes_bytes = {4096, 65536};
  o.repetitions = 1;
  o.timeout_s = 30;
  const auto pts = trainsim::hw::measure_host_collectives(o);
  ASSERT_EQ(pts.size(), 8u);  // 4 operations x 2 sizes
  const char* ops[] = {"all_reduce", "reduce_scatter", "all_gather", "all_to_all"};
  for (std::size_t i = 0; i < pts.size(); ++i) {
    const HostCommPoint& p = pts[i];
    EXPECT_EQ(p.op, ops[i / 2]);
    EXPECT_EQ(p.bytes, o.sizes_bytes[i % 2]);
    EXPECT_EQ(p.processes, 2);
    // 2 members: an all-gather publishes S / 2 and reads S / 2, the others publish S, read S.
    EXPECT_EQ(p.transport_bytes, p.op == "all_gather" ? double(p.bytes) : 2.0 * p.bytes);
    EXPECT_GT(p.best_s, 0.0);
  }
  const auto j = trainsim::hw::host_comm_json(pts, {1e-3, 1e9});
  EXPECT_EQ(j.at("points").size(), 8u);
  EXPECT_EQ(j.at("latency_s"), 1e-3);
}
