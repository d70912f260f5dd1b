#include "models/graph/execution_record.h"

#include <algorithm>
#include <limits>
#include <stdexcept>

#include "models/errors.h"

namespace trainsim {

double ExecutionRecord::iteration_time_s() const {
  TRAINSIM_CHECK(start_s.size() == end_s.size(),
                 "ExecutionRecord: start_s and end_s differ in size");
  double first = std::numeric_limits<double>::infinity();
  double last = -first;
  for (std::size_t i = 0; i < start_s.size(); ++i) {
    if (start_s[i] != start_s[i] || end_s[i] != end_s[i]) continue;  // NaN: did not run
    first = std::min(first, start_s[i]);
    last = std::max(last, end_s[i]);
  }
  return last >= first ? last - first : 0.0;
}

namespace {

std::int64_t largest(std::int64_t v, const std::vector<std::pair<double, std::int64_t>>& samples) {
  for (const auto& x : samples) v = std::max(v, x.second);
  return v;
}

}  // namespace

std::int64_t ExecutionRecord::measured_peak_allocated_bytes() const {
  return largest(peak_allocated_bytes, allocated_bytes_samples);
}

std::int64_t ExecutionRecord::measured_peak_reserved_bytes() const {
  return largest(peak_reserved_bytes, reserved_bytes_samples);
}

}  // namespace trainsim
