// trainsim import-megatron / import-deepspeed: a launch configuration as a scenario YAML
// (models/input/launch_import.h; docs/cli.md). The launch carries no cluster: --system, --nodes
// and --gpus-per-node (or --set) add it. The output is loaded and validated as simulate would
// load it before anything is written, so a refused import prints nothing on stdout.
#include <filesystem>
#include <iostream>
#include <string>

#include "apps/output_file.h"
#include "apps/verbs.h"
#include "models/errors.h"
#include "models/input/launch_import.h"
#include "models/input/reader.h"
#include "models/input/scenario.h"
#include "models/json_input.h"

namespace trainsim::cli {

namespace {

void add_cluster(LaunchImport& imported, const ImportLaunchArgs& args) {
  if (!args.system.empty()) imported.keys["cluster.system"] = args.system;
  if (args.nodes > 0) imported.keys["cluster.nodes"] = std::to_string(args.nodes);
  if (args.gpus_per_node > 0) imported.keys["cluster.gpus_per_node"] = std::to_string(args.gpus_per_node);
  if (!args.name.empty()) imported.keys["name"] = args.name;
}

/// The YAML with --set applied (the same checks as simulate's --set), validated.
std::string finish(LaunchImport& imported, const ImportLaunchArgs& args, const std::string& verb,
                   const std::string& source, const std::string& extra_header) {
  add_cluster(imported, args);
  const std::string header = "# imported from " + source + " by trainsim " + verb + "\n" + extra_header;
  std::string text = launch_import_yaml(imported, header);
  if (!args.overrides.empty()) {
    // The leading comment lines stay; the keys are read, overridden and written again.
    std::size_t body = 0;
    while (body < text.size() && text[body] == '#') body = text.find('\n', body) + 1;
    YAML::Node root = input::load_yaml_document(text.substr(body), source);
    for (const auto& [k, v] : args.overrides) input::apply_override(root, k, v, "--set");
    YAML::Emitter e;
    e << root;
    text = text.substr(0, body) + e.c_str() + "\n";
  }
  const bool cluster_given = imported.keys.count("cluster.system") ||
                             imported.keys.count("cluster.system_file") ||
                             text.find("\ncluster:") != std::string::npos;
  if (!cluster_given)
    throw InputError(verb + ": " + source + " does not say which cluster it runs on: give "
                     "--system NAME and --nodes N (or --set cluster.system=NAME)");
  // Loaded as simulate loads a file from the current directory: every key checked.
  (void)validated(parse_scenario(text, source + " (imported)"));
  return text;
}

int write(const std::string& text, const std::string& out) {
  if (out.empty()) {
    std::cout << text;
    std::cout.flush();
    if (!std::cout) throw std::runtime_error("cannot write to stdout");
    return 0;
  }
  OutputFile file(out, "--out");
  file.stream() << text;
  commit_all({&file});
  return 0;
}

}  // namespace

int import_megatron_main(const ImportLaunchArgs& args) {
  check_distinct_paths({{"launch script", args.input}}, {{"--out", args.out}});
  LaunchCommand command;
  std::string source = args.input;
  if (!args.words.empty()) {
    source = "the argument list";
    command = launch_command_from_words(args.words, source);
  } else {
    if (args.input.empty())
      throw InputError("import-megatron: give a launch script, or -- and the command's words");
    command = parse_launch_script(
        read_input_file(args.input, "launch script", "a .sh file", kSmallInputMaxBytes), args.input);
  }
  LaunchImport imported = import_megatron(command, source);
  if (!imported.tp_comm_overlap_cfg.empty()) {
    // Megatron-LM opens the path from its working directory, the script's checkout; a relative
    // path is read next to the script here (the argument list: the current directory).
    std::filesystem::path cfg = imported.tp_comm_overlap_cfg;
    if (cfg.is_relative() && args.words.empty())
      cfg = std::filesystem::path(args.input).parent_path() / cfg;
    const std::string text = read_input_file(cfg.string(), "--tp-comm-overlap-cfg file",
                                             "a .yaml file", kSmallInputMaxBytes);
    apply_tp_comm_overlap_cfg(imported, text, cfg.string());
  }
  std::string extra;
  if (command.line > 0) extra += "# the pretrain_gpt.py command of line " + std::to_string(command.line) + "\n";
  if (command.conditional)
    extra += "# note: the script has if/for/case blocks; trainsim does not run them: every "
             "assignment applied in file order\n";
  if (!imported.keys.count("model.padded_vocab_size"))
    throw InputError("import-megatron: " + source + " gives no --vocab-size (the tokenizer "
                     "decides it at run time): add --set model.padded_vocab_size=N");
  return write(finish(imported, args, "import-megatron", source, extra), args.out);
}

int import_deepspeed_main(const ImportLaunchArgs& args) {
  check_distinct_paths({{"ds_config", args.input}}, {{"--out", args.out}});
  const long long world = args.nodes > 0 && args.gpus_per_node > 0 ? args.nodes * args.gpus_per_node : 0;
  LaunchImport imported = import_deepspeed(args.input, world);
  return write(finish(imported, args, "import-deepspeed", args.input, ""), args.out);
}

}  // namespace trainsim::cli
