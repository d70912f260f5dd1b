// Fuzz target: `trainsim import-deepspeed` (models/input/launch_import.h import_deepspeed): a
// DeepSpeed ds_config.json imported through the key table, with and without the cluster's GPU
// count (train_batch_size absent: micro batch x accumulation x GPUs), and the scenario YAML it
// writes. It reads a path, so each input is written to a scratch file first. Any input must
// give a scenario or an InputError.
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "models/errors.h"
#include "models/input/launch_import.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static const std::string path = "/tmp/trainsim_fuzz_ds_config_" + std::to_string(::getpid()) +
                                  ".json";
  std::FILE* f = std::fopen(path.c_str(), "wb");
  if (!f) std::abort();
  if (size > 0 && std::fwrite(data, 1, size, f) != size) std::abort();
  std::fclose(f);
  for (const long long world_size : {0LL, 8LL}) {
    try {
      const trainsim::LaunchImport imported = trainsim::import_deepspeed(path, world_size);
      (void)trainsim::launch_import_yaml(imported, "# fuzz");
    } catch (const trainsim::InputError&) {
    }
  }
  return 0;
}
