// Fuzz target: the Hugging Face config.json import (models/input/hf_config.h import_hf_config,
// `trainsim import-hf` and `model: {hf_config: ...}`). It reads a path, so each input is written
// to a scratch file first. Any input must give the model keys or an InputError.
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <string>

#include "models/errors.h"
#include "models/input/hf_config.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static const std::string path = "/tmp/trainsim_fuzz_hf_config_" + std::to_string(::getpid()) +
                                  ".json";
  std::FILE* f = std::fopen(path.c_str(), "wb");
  if (!f) std::abort();
  if (size > 0 && std::fwrite(data, 1, size, f) != size) std::abort();
  std::fclose(f);
  try {
    (void)trainsim::import_hf_config(path);
  } catch (const trainsim::InputError&) {
  }
  return 0;
}
