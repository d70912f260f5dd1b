// Fuzz target: `trainsim import-megatron` (models/input/launch_import.h): a launch script parsed
// into a pretrain_gpt.py command and imported through the key table, and the scenario YAML it
// writes; and the same input as the userbuffers configuration a --tp-comm-overlap-cfg names
// (apply_tp_comm_overlap_cfg). Any input must give a scenario or an InputError.
#include <cstddef>
#include <cstdint>
#include <string>

#include "models/errors.h"
#include "models/input/launch_import.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  try {
    const trainsim::LaunchCommand command = trainsim::parse_launch_script(text, "fuzz.sh");
    const trainsim::LaunchImport imported = trainsim::import_megatron(command, "fuzz.sh");
    (void)trainsim::launch_import_yaml(imported, "# fuzz");
  } catch (const trainsim::InputError&) {
  }
  try {
    trainsim::LaunchImport imported;
    trainsim::apply_tp_comm_overlap_cfg(imported, text, "fuzz.yaml");
    (void)trainsim::launch_import_yaml(imported, "# fuzz");
  } catch (const trainsim::InputError&) {
  }
  return 0;
}
