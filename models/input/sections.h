// The section readers of a scenario file: each fills its part of the Scenario from the YAML
// tree (models/input/reader.h), with Megatron-LM's and DeepSpeed's defaults, and refuses
// contradicting keys of its section. Internal to models/input/; validate_scenario checks the
// whole plan afterwards.
#pragma once

#include <yaml-cpp/yaml.h>

#include <string>
#include <vector>

#include "models/errors.h"
#include "models/input/reader.h"
#include "models/input/scenario.h"

namespace trainsim::input {

/// The keys of `section` ("" for the top level) that the table reads by type
/// (models/input/keys.h), in table order; an absent key gets the table's default.
void read_table_keys(const Reader& r, Scenario& s, const std::string& section);
/// "ignored: KEY (why)" in s.notes for each ignored key the file holds.
void note_ignored_keys(const Reader& r, Scenario& s);

/// model: Megatron-LM and Megatron-Core arguments (shape, attention, MLA, MoE).
void read_model(const Reader& r, Scenario& s);
/// parallel: the Megatron-LM parallel plan, recomputation and Megatron-Core parallelism.
void read_parallel(const Reader& r, Scenario& s);
/// deepspeed.zero_optimization and its offload_optimizer (DeepSpeed config keys).
void read_zero(const Reader& r, Scenario& s);
/// The cluster (a catalog system) and the simulation options.
void read_cluster_and_simulation(const Reader& r, Scenario& s);
/// training: the run's length, price, failure rates and checkpoints (docs/forecast.md);
/// models/input/training_section.cpp.
void read_training(const Reader& r, Scenario& s);

/// variability: slow GPUs and links, the speed spread (models/input/variability.cpp); after
/// the cluster, whose size bounds its ranks, nodes and NICs.
void read_variability(const Reader& r, Scenario& s);

/// `model: {hf_config: path}`: the Hugging Face config's keys fill the model section where
/// the scenario (or a --set) does not give them (models/input/hf_config.h). The path is
/// relative to the scenario file.
struct HfImport {
  std::string config_path;        ///< the config.json read ("" when the scenario imports none)
  std::vector<std::string> keys;  ///< the dotted model keys it filled, e.g. "model.hidden_size"
};
HfImport import_hf_into(YAML::Node& root, const std::string& source);

/// `e` with, when its message names a key the import filled (e.g. "model.hidden_size (4095) is
/// not divisible by ..."), where that value came from: "(model.hidden_size was imported from
/// CONFIG)". A refusal of an imported value then names the Hugging Face file.
InputError with_import_origin(const InputError& e, const HfImport& imported);

}  // namespace trainsim::input
