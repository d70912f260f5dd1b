// `--set key=value` (apps/verbs.h parse_override): its own file so that the fuzz target of the
// override parser (fuzz/fuzz_overrides.cpp) links it without the command line's main().
#include "apps/verbs.h"
#include "models/input/scenario.h"

namespace trainsim::cli {

std::pair<std::string, std::string> parse_override(const std::string& text) {
  const auto eq = text.find('=');
  if (eq == std::string::npos || eq == 0)
    throw InputError("--set '" + text + "': expected key=value, e.g. parallel.micro_batch_size=2");
  return {text.substr(0, eq), text.substr(eq + 1)};
}

}  // namespace trainsim::cli
