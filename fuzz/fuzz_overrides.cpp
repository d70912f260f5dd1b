// Fuzz target: the `--set` parser (apps/verbs.h parse_override) and the overrides applied by
// the scenario loader. Each input line is one `--set` argument, applied to a valid scenario
// (the shipped scenarios/small/gpt-tiny_tp2_pp2_dp2.yaml, inlined). Any input must give a
// Scenario or an InputError.
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "apps/verbs.h"
#include "models/input/scenario.h"

namespace {
const char* const kBase = R"(name: gpt-tiny_tp2_pp2_dp2
model:
  num_layers: 4
  hidden_size: 256
  num_attention_heads: 8
  seq_length: 128
  padded_vocab_size: 1024
parallel:
  tensor_model_parallel_size: 2
  pipeline_model_parallel_size: 2
  micro_batch_size: 2
  global_batch_size: 16
  precision: fp16
cluster:
  system: dgx-a100-80gb
  nodes: 1
)";
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  try {
    trainsim::cli::Overrides overrides;
    std::size_t begin = 0;
    while (begin <= text.size() && overrides.size() < 16) {
      std::size_t end = text.find('\n', begin);
      if (end == std::string::npos) end = text.size();
      if (end > begin) overrides.push_back(trainsim::cli::parse_override(text.substr(begin, end - begin)));
      begin = end + 1;
    }
    trainsim::Scenario s = trainsim::parse_scenario(kBase, "fuzz.yaml", overrides);
    (void)s.world_size();
  } catch (const trainsim::InputError&) {
  }
  return 0;
}
