// The calibration profiles' `host` section (models/hardware/calibration.h host_*): read from
// the shipped profiles, round-tripped, optional as a whole, and every bad entry named by file,
// field and value.
#include <gtest/gtest.h>

#include <string>

#include "models/errors.h"
#include "models/hardware/calibration.h"
#include "tests/support/calibration_errors.h"

namespace trainsim {
namespace {

using test_support::expect_profile_refused;

/// The H100 profile's text with the host entry `name`'s value replaced by `value`.
std::string with_host_value(const std::string& name, const std::string& value) {
  std::string text = calibration_to_json(default_calibration("H100-SXM5-80GB"));
  const std::size_t host = text.find("\"host\"");
  const std::size_t at = text.find("\"value\"", text.find("\"" + name + "\"", host));
  const std::size_t end = text.find_first_of(",\n}", at + 8);
  text.replace(at, end - at, "\"value\": " + value);
  return text;
}

TEST(HostCalibration, ShippedProfilesHaveTheHostSectionWithSources) {
  for (const std::string& device : default_calibration_devices()) {
    const CalibrationProfile p = default_calibration(device);
    EXPECT_TRUE(has_host_costs(p)) << device;
    for (const std::string& name : calibration_host_names())
      EXPECT_FALSE(p.sources.at("host." + name).empty()) << device << " " << name;
  }
  // The figures the H100 profile cites (validation/data/h100_2026-11-26/host_dispatch.json,
  // TransformerEngine issue #2053).
  const CalibrationProfile h100 = default_calibration("H100-SXM5-80GB");
  EXPECT_DOUBLE_EQ(h100.host_autograd_node_s, 11.88e-6);
  EXPECT_DOUBLE_EQ(h100.host_te_module_s, 13.5e-6);
  EXPECT_EQ(h100.host_launch_queue_depth, 1024);
}

TEST(HostCalibration, RoundTripsAndIsOptional) {
  const CalibrationProfile p = default_calibration("H100-SXM5-80GB");
  EXPECT_EQ(parse_calibration(calibration_to_json(p), "again.json"), p);
  CalibrationProfile none = p;
  for (const std::string& name : calibration_host_names()) none.sources.erase("host." + name);
  none.host_eager_op_s = none.host_te_module_s = none.host_autograd_node_s = 0;
  none.host_nccl_call_s = none.host_module_overhead_s = none.host_graph_launch_s = 0;
  none.host_sync_s = none.host_launch_queue_depth = 0;
  const std::string text = calibration_to_json(none);
  EXPECT_EQ(text.find("\"host\""), std::string::npos);
  EXPECT_FALSE(has_host_costs(parse_calibration(text, "nohost.json")));
}

TEST(HostCalibration, BadEntriesAreNamed) {
  expect_profile_refused(with_host_value("eager_op_s", "-1"), "host.eager_op_s.value", "-1");
  expect_profile_refused(with_host_value("sync_s", "0.5"), "host.sync_s.value", "0.5");
  expect_profile_refused(with_host_value("launch_queue_depth", "0"), "host.launch_queue_depth.value",
                     "0");
  expect_profile_refused(with_host_value("launch_queue_depth", "2.5"),
                     "host.launch_queue_depth.value", "2.5");
  expect_profile_refused(with_host_value("graph_launch_s", "\"fast\""), "host.graph_launch_s.value",
                     "fast");
  // An unknown entry, and a missing one.
  std::string text = calibration_to_json(default_calibration("H100-SXM5-80GB"));
  std::string unknown = text;
  unknown.insert(unknown.find('{', unknown.find("\"host\"")) + 1, "\"warp_s\": 1e-6, ");
  expect_profile_refused(unknown, "host.warp_s", "1e-06");
  std::string missing = text;
  const std::size_t at = missing.find("\"sync_s\"", missing.find("\"host\""));
  const std::size_t close = missing.find('}', at);
  missing.erase(missing.rfind(',', at), close + 1 - missing.rfind(',', at));
  expect_profile_refused(missing, "host.sync_s", "(missing)");
  // Not an object.
  CalibrationProfile none = default_calibration("H100-SXM5-80GB");
  none.host_launch_queue_depth = 0;  // has_host_costs false: written without the section
  std::string scalar = calibration_to_json(none);
  scalar.insert(scalar.find('{') + 1, "\"host\": 3, ");
  expect_profile_refused(scalar, "host", "3");
}

}  // namespace
}  // namespace trainsim
