// Fuzz target: the reader of `trainsim plan --json` results (apps/plan_result.h
// parse_plan_result, what `plan --merge` reads). Any input must give a result or an
// InputError; what it accepts must write (plan_result_json) and read back to the same result.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "apps/plan_result.h"
#include "models/errors.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  try {
    const trainsim::cli::PlanResultFile r = trainsim::cli::parse_plan_result(text, "fuzz.json");
    const std::string written = trainsim::cli::plan_result_json(r).dump();
    const trainsim::cli::PlanResultFile again =
        trainsim::cli::parse_plan_result(written, "written.json");
    if (trainsim::cli::plan_result_json(again).dump() != written) std::abort();
  } catch (const trainsim::InputError&) {
  }
  return 0;
}
