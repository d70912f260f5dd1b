// Scenarios from launch configurations (docs/cli.md "import-megatron", "import-deepspeed"):
//  - a Megatron-LM / Megatron-Core `pretrain_gpt.py` command line, from a launch script or an
//    argument list, with its launcher (torchrun, python -m torch.distributed.run, srun) and its
//    environment (NCCL_*, CUDA_*, ...);
//  - a DeepSpeed ds_config.json (ZeRO stage and buckets, optimizer offload and its Twin-Flow
//    ratio, bf16 / fp16, the batch sizes).
// Every argument is looked up in the one key table (models/input/keys.h) by its Megatron-LM /
// DeepSpeed name: a key or an alias fills the scenario, an ignored key is listed (with the
// table's reason) in the output's comment block, anything else is refused with a did-you-mean
// suggestion (InputError naming the file, the argument and its value). The few arguments that
// are inputs of a computation rather than keys (Megatron's vocabulary padding, the virtual
// pipeline size) are named in launch_import.cpp with their formula and source.
#pragma once

#include <map>
#include <string>
#include <utility>
#include <vector>

namespace trainsim {

/// What an import found, in the order the arguments came.
struct LaunchImport {
  /// Scenario keys (dotted, canonical) and their YAML values; later arguments win.
  std::map<std::string, std::string> keys;
  /// Arguments accepted and not modelled: "ARGUMENT VALUE" and the table's key and reason.
  std::vector<std::string> ignored;
  /// Values trainsim derived (vocabulary padding, ...), one line each, with their formula.
  std::vector<std::string> derived;
  /// The file `--tp-comm-overlap-cfg` names, as written (empty: none); the caller reads it
  /// (apply_tp_comm_overlap_cfg).
  std::string tp_comm_overlap_cfg;
};

/// The words of the `pretrain_gpt.py` command of a shell launch script (`text`, read from
/// `source`) and the environment variables it sets for it: continuation lines, comments,
/// quotes, VAR=value and export assignments, arrays (VAR=( ... ), VAR+=( ... )), ${VAR},
/// ${VAR:-default}, ${ARR[@]} and `eval`. Control flow is not interpreted: the assignments of
/// every branch apply in file order (the import says so). Throws InputError naming `source`
/// when no (or more than one) pretrain_gpt.py command is found.
struct LaunchCommand {
  std::vector<std::string> words;  ///< launcher, script and arguments, expanded
  std::map<std::string, std::string> environment;
  int line = 0;  ///< the command's first line in `source` (1-based; 0: an argument list)
  bool conditional = false;  ///< the script has if/for/while/case blocks
};
LaunchCommand parse_launch_script(const std::string& text, const std::string& source);

/// An argument list (`trainsim import-megatron -- ARGS...`): leading NAME=value words are the
/// environment, then the launcher, pretrain_gpt.py and its arguments.
LaunchCommand launch_command_from_words(const std::vector<std::string>& words,
                                        const std::string& source);

/// Maps a command to scenario keys (see the file comment); `runtime: megatron-core` unless the
/// arguments say otherwise.
LaunchImport import_megatron(const LaunchCommand& command, const std::string& source);

/// Megatron-LM's `--tp-comm-overlap-cfg FILE`: Transformer Engine's userbuffers configuration
/// (Megatron-LM megatron/training/initialize.py _initialize_tp_communicators reads it with
/// yaml.safe_load and hands it to transformer_engine.pytorch's initialize_ub as ub_cfgs), its
/// `text` read from `source`. A mapping of GEMM names (qkv_fprop, proj_fprop, fc2_fprop, ...) to
/// their settings; trainsim models the `method` of the forward reduce-scatter overlaps,
/// proj_fprop and fc2_fprop, as parallel.tp_comm_overlap_rs_method (absent: TE's default,
/// pipeline; the two must agree), and lists the other GEMMs' settings as ignored. Throws
/// InputError naming `source`, the field and its value.
void apply_tp_comm_overlap_cfg(LaunchImport& imported, const std::string& text,
                               const std::string& source);

/// Maps a ds_config.json file; `world_size` (0: unknown) is the GPUs of the cluster, needed
/// only when train_batch_size is absent (DeepSpeed: train_batch_size = micro batch x gradient
/// accumulation x data-parallel ranks).
LaunchImport import_deepspeed(const std::string& path, long long world_size);

/// The scenario YAML of an import: a comment block (source, derived values, ignored
/// arguments), then the keys section by section in the key table's order.
std::string launch_import_yaml(const LaunchImport& imported, const std::string& header);

}  // namespace trainsim
