// Fuzz target: the measured-trace reader of `validate --measured-trace`
// (validation/measured_trace.h), against the graph of a small shipped scenario
// (scenarios/small/gpt-tiny_tp1_pp1_dp1.yaml, inlined). Any input must give a measured record
// or an InputError.
#include <cstddef>
#include <cstdint>
#include <string>

#include "models/builder/graph_builder.h"
#include "models/hardware/hardware.h"
#include "models/input/scenario.h"
#include "validation/measured_trace.h"

namespace {
const char* const kScenario = R"(name: gpt-tiny_tp1_pp1_dp1
model:
  num_layers: 4
  hidden_size: 256
  num_attention_heads: 8
  seq_length: 128
  padded_vocab_size: 1024
parallel:
  tensor_model_parallel_size: 1
  pipeline_model_parallel_size: 1
  micro_batch_size: 2
  global_batch_size: 8
  recompute_granularity: null
  precision: fp16
deepspeed:
  zero_optimization: {stage: 0}
cluster:
  system: dgx-a100-80gb
  nodes: 1
  gpus_per_node: 1
)";
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static const trainsim::Scenario scenario = trainsim::parse_scenario(kScenario, "fuzz.yaml");
  static const trainsim::ScheduleGraph graph = trainsim::build_schedule_graph(
      trainsim::validated(scenario), trainsim::find_system(scenario.cluster.system), trainsim::BuildOptions{});
  const std::string text(reinterpret_cast<const char*>(data), size);
  try {
    const trainsim::validation::MeasuredTrace t = trainsim::validation::measured_record(
        trainsim::validation::parse_measured_trace(text, "fuzz.json"), graph, scenario.name);
    (void)t.record.iteration_time_s();
  } catch (const trainsim::InputError&) {
  }
  return 0;
}
