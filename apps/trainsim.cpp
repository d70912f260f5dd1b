// trainsim: the command line (docs/cli.md). Parses the verbs and
// flags with CLI11 and dispatches to apps/verbs.h; turns every failure into exit status 1 with
// the reason on stderr (never a crash, never a message on stdout).
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <iostream>
#include <limits>
#include <string>
#include <tuple>
#include <vector>

#include <CLI/CLI.hpp>

#include "apps/verbs.h"
#include "models/input/hf_config.h"
#include "models/input/scenario.h"

namespace trainsim::cli {

namespace {

/// An integer flag in [min, max] (max: the flag's int), with a message in the user's terms
/// (CLI11's own range checks print "Value 0 not in range 0.000000 to
/// 1797693134862315708145274237317043567981...").
CLI::Validator integer_at_least(long long min, long long max = std::numeric_limits<int>::max()) {
  const std::string what =
      min == 1 ? "a positive integer (>= 1)" : "an integer >= " + std::to_string(min);
  return CLI::Validator(
      [min, max, what](std::string& in) -> std::string {
        std::size_t used = 0;
        long long v = 0;
        try {
          v = std::stoll(in, &used);
        } catch (const std::exception&) {
          used = 0;
        }
        if (used == 0 || used != in.size()) return "expected " + what + ", got '" + in + "'";
        if (v < min) return "must be " + what + ", got " + in;
        if (v > max) return "must be at most " + std::to_string(max) + ", got " + in;
        return std::string();
      },
      min == 1 ? "POSITIVE" : "NONNEGATIVE");
}

Overrides to_overrides(const std::vector<std::string>& raw) {
  Overrides out;
  for (const std::string& s : raw) out.push_back(parse_override(s));
  return out;
}

int run(int argc, char** argv) {
  CLI::App app{"trainsim: simulate, replay and validate one training iteration of a "
               "Megatron-LM / DeepSpeed scenario"};
  app.require_subcommand(1);
  app.set_version_flag("--version", "trainsim 0.1");

  const std::vector<std::string> devices = {"cuda", "cpu"};
  std::vector<std::string> sim_sets, replay_sets, validate_sets;
  auto add_sets = [](CLI::App* sub, std::vector<std::string>& target) {
    sub->add_option("--set", target,
                    "override a scenario key (dotted, YAML value), e.g. "
                    "parallel.micro_batch_size=2; repeatable")
        ->expected(1)
        ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll)
        ->type_name("KEY=VALUE");
  };

  SimulateArgs sim;
  CLI::App* simulate = app.add_subcommand("simulate", "simulate one iteration with SimGrid");
  simulate->add_option("scenario", sim.scenario, "scenario YAML file")->required();
  add_sets(simulate, sim_sets);
  simulate->add_option("--calibration", sim.calibration,
                       "calibration profile JSON (default: the shipped profile of the GPU)");
  simulate->add_option("--trace", sim.trace, "write a Chrome/Perfetto trace JSON");
  simulate->add_option("--trace-ranks", sim.trace_ranks,
                       "ranks the trace and the memory CSV cover, e.g. 0-7,3064-3071 or all "
                       "(default: all ranks up to 64, else the TP group at the first and the "
                       "last pipeline stage)");
  simulate->add_option("--json", sim.json, "write the summary JSON");
  simulate->add_option("--format", sim.format, "stdout: text report or the summary JSON only")
      ->check(CLI::IsMember({"text", "json"}));
  simulate->add_option("--memory-csv", sim.memory_csv, "write the memory timeline CSV");
  simulate->add_flag("--force", sim.force,
                     "simulate even when the estimated graph is above the size limits");
  simulate->add_flag("--fail-on-oom", sim.fail_on_oom,
                     "exit with status 3 (after writing the outputs) when the peak GPU or host "
                     "memory is above its capacity");

  ForecastArgs fc;
  std::vector<std::string> forecast_sets;
  CLI::App* forecast = app.add_subcommand(
      "forecast", "the whole run: failures, checkpoints, goodput, days and cost (docs/forecast.md)");
  forecast->add_option("scenario", fc.scenario, "scenario YAML file with a training: section")
      ->required();
  add_sets(forecast, forecast_sets);
  forecast->add_option("--calibration", fc.calibration,
                       "calibration profile JSON (default: the shipped profile of the GPU)");
  forecast->add_option("--samples", fc.samples,
                       "iteration-time samples of the scenario's variability (default 1)")
      ->check(integer_at_least(1, 100000));
  forecast->add_option("--seed", fc.seed, "seed of the samples (default 0)");
  forecast->add_option("--json", fc.json, "write the forecast JSON (docs/forecast.schema.json)");
  forecast->add_option("--format", fc.format, "stdout: text report or the forecast JSON only")
      ->check(CLI::IsMember({"text", "json"}));
  forecast->add_flag("--force", fc.force,
                     "simulate even when the estimated graph is above the size limits");

  std::string hf_path;
  CLI::App* import_hf = app.add_subcommand(
      "import-hf", "print the scenario's model: section for a Hugging Face config.json");
  import_hf->add_option("config", hf_path, "config.json (Llama, Mistral, Qwen2, Qwen3, Qwen3-MoE, Mixtral, GPT-OSS)")
      ->required();

  DiffArgs dif;
  CLI::App* diff = app.add_subcommand(
      "diff", "compare two summaries (simulate --json): time, memory, breakdown, settings");
  diff->add_option("a", dif.a, "first summary JSON (A)")->required();
  diff->add_option("b", dif.b, "second summary JSON (B)")->required();
  diff->add_option("--json", dif.json, "write the comparison as JSON");

  ImportLaunchArgs imp_mg, imp_ds;
  std::vector<std::string> imp_mg_sets, imp_ds_sets, imp_mg_words;
  CLI::App* import_megatron = app.add_subcommand(
      "import-megatron", "a Megatron-LM pretrain_gpt.py launch (script, or -- ARGS...) as a scenario");
  import_megatron->add_option("launch", imp_mg_words,
                              "the launch script, or after -- the command's words");
  CLI::App* import_deepspeed = app.add_subcommand(
      "import-deepspeed", "a DeepSpeed ds_config.json as a scenario");
  import_deepspeed->add_option("config", imp_ds.input, "ds_config.json")->required();
  for (auto [sub, a, sets] : {std::tuple{import_megatron, &imp_mg, &imp_mg_sets},
                              std::tuple{import_deepspeed, &imp_ds, &imp_ds_sets}}) {
    sub->add_option("--system", a->system, "the cluster's catalog system (e.g. dgx-h100)");
    sub->add_option("--nodes", a->nodes, "nodes")->check(integer_at_least(1));
    sub->add_option("--gpus-per-node", a->gpus_per_node, "GPUs per node")
        ->check(integer_at_least(1));
    sub->add_option("--name", a->name, "the scenario's name");
    sub->add_option("--out", a->out, "write the scenario here (default: stdout)");
    add_sets(sub, *sets);
  }

  PlanArgs pln;
  std::vector<std::string> plan_sets;
  CLI::App* plan = app.add_subcommand(
      "plan", "search the fastest parallel layout that fits (docs/plan.md)");
  plan->add_option("scenario", pln.scenario, "scenario YAML file with an optional plan: section");
  add_sets(plan, plan_sets);
  plan->add_option("--top", pln.top_k, "candidates simulated event by event (default: plan.top_k, 50)")
      ->check(integer_at_least(1));
  // Each worker is a forked process that builds or simulates a candidate's graph on its own.
  plan->add_option("--jobs", pln.jobs, "worker processes (default: the core count; at most 1024)")
      ->check(integer_at_least(1, 1024));
  plan->add_option("--json", pln.json, "write the ranked result JSON (also a shard's output)");
  plan->add_option("--csv", pln.csv, "write the ranked table as CSV");
  plan->add_option("--out", pln.out, "write each confirmed candidate's scenario YAML here");
  plan->add_option("--shard", pln.shard, "search only candidates i, i+n, ... (i/n, 0-based)");
  plan->add_option("--merge", pln.merge, "rank shard results (--json files) together")
      ->expected(1, -1);
  plan->add_flag("--force", pln.force, "simulate candidates even above the size limits");
  plan->add_option("--calibration", pln.calibration,
                   "calibration profile JSON for every candidate, as simulate's (default: the "
                   "shipped profile of the GPU)");
  plan->add_option("--objective", pln.objective,
                   "ranking: tokens_per_s (default), goodput or cost (these two need the "
                   "scenario's training: section)")
      ->check(CLI::IsMember({"tokens_per_s", "goodput", "cost"}));

  ReplayArgs rep;
  CLI::App* replay = app.add_subcommand("replay", "replay one rank's tasks on a real device");
  replay->add_option("scenario", rep.scenario, "scenario YAML file")->required();
  add_sets(replay, replay_sets);
  replay->add_option("--device", rep.device, "cuda or cpu (default: cuda when available)")
      ->check(CLI::IsMember(devices));
  replay->add_option("--rank", rep.rank, "world rank to replay (default 0)")
      ->check(integer_at_least(0));
  replay->add_option("--nprocs", rep.nprocs,
                     "processes replaying ranks 0..N-1: one per GPU with NCCL, or with "
                     "--device cpu one per rank through the host backend (default 1; under "
                     "torchrun/srun their WORLD_SIZE)")
      ->check(integer_at_least(1));
  replay->add_option("--trace", rep.trace, "write the measured Chrome/Perfetto trace JSON");
  replay->add_option("--json", rep.json, "write the measured summary JSON");
  replay->add_flag("--force", rep.force,
                   "replay even when the rank's predicted memory does not fit the device");

  ValidateArgs val;
  CLI::App* validate =
      app.add_subcommand("validate", "compare the simulation with a replay on a device");
  validate->add_option("scenario", val.scenario, "scenario YAML file")->required();
  add_sets(validate, validate_sets);
  validate->add_option("--device", val.device, "cuda or cpu")->check(CLI::IsMember(devices));
  validate->add_option("--calibration", val.calibration, "calibration profile JSON");
  validate->add_option("--measured-trace", val.measured_trace,
                       "compare this replay trace (trainsim replay --trace) instead of replaying");
  validate->add_option("--json", val.json, "write the comparison JSON");
  validate->add_option("--report", val.report, "write an HTML report");
  validate->add_option("--repeat", val.repeat,
                       "measured replays after a warm-up; the fastest is compared (default 3)")
      ->check(integer_at_least(1));
  validate->add_option("--nprocs", val.nprocs,
                       "processes replaying ranks 0..N-1 together (as replay's: one per GPU "
                       "with NCCL, or with --device cpu one per rank through the host backend); "
                       "rank 0's tasks are compared (default 1)")
      ->check(integer_at_least(1));
  validate->add_flag("--force", val.force,
                     "run even when the estimated graph is above the size limits");

  CalibrateArgs cal;
  CLI::App* calibrate =
      app.add_subcommand("calibrate", "measure a calibration profile on this machine");
  calibrate->add_option("--device", cal.device, "cuda or cpu")->check(CLI::IsMember(devices));
  calibrate->add_option("--out", cal.out, "write the profile JSON (default: stdout)");
  calibrate->add_flag("--quick", cal.quick, "smaller microbenchmark grids (a few seconds)");
  calibrate->add_option("--nprocs", cal.nprocs,
                        "--device cpu: run the compute microbenchmarks in N processes at once "
                        "and keep the rates one of them measured, as validate --nprocs N's "
                        "ranks share the cores (default: one process)")
      ->check(integer_at_least(1, 64));
  calibrate->add_option("--from-trace", cal.from_trace,
                        "fit --base from a PyTorch profiler (Kineto) trace instead of running "
                        "microbenchmarks");
  calibrate->add_option("--from-microbench", cal.from_microbench,
                        "fit --base from the measurements of a profile calibrate --device cuda "
                        "wrote on that GPU");
  calibrate->add_option("--base", cal.base, "the profile --from-trace / --from-microbench refines");
  calibrate->add_flag("--allow-device-mismatch", cal.allow_device_mismatch,
                      "fit a --from-trace trace recorded on another device than --base's");

  // A first word that is no option and no verb: CLI11 would answer "A subcommand is required".
  if (argc > 1 && argv[1][0] != '-') {
    std::string verbs;
    bool known = false;
    for (const CLI::App* sub : app.get_subcommands({})) {
      verbs += (verbs.empty() ? "" : ", ") + sub->get_name();
      known = known || sub->get_name() == argv[1];
    }
    if (!known)
      throw InputError(std::string("unknown verb '") + argv[1] + "' (the verbs: " + verbs +
                       "; trainsim --help describes them)");
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int rc = app.exit(e);  // prints help / version on stdout, errors on stderr
    return rc == 0 ? 0 : 1;
  }
  // An empty value (`--json ''`, `--trace-ranks ''`) would read as the option's absence.
  for (const CLI::App* sub : app.get_subcommands())
    for (const CLI::Option* opt : sub->get_options()) {
      if (opt->get_type_size() == 0) continue;  // a flag
      for (const std::string& value : opt->results())
        if (value.empty())
          throw InputError(sub->get_name() + " " + opt->get_name() +
                           " '': an empty value (give " + opt->get_name() +
                           " a value, or leave the option out)");
    }
  if (simulate->parsed()) {
    sim.overrides = to_overrides(sim_sets);
    return simulate_main(sim);
  }
  if (forecast->parsed()) {
    fc.overrides = to_overrides(forecast_sets);
    return forecast_main(fc);
  }
  if (import_hf->parsed()) {
    // Read first: a refused config prints nothing on stdout, only the error.
    const auto keys = import_hf_config(hf_path);
    std::cout << "# imported from " << hf_path << " (trainsim import-hf); needs runtime: megatron-core\nmodel:\n";
    for (const auto& [key, value] : keys) std::cout << "  " << key << ": " << value << "\n";
    return 0;
  }
  if (diff->parsed()) return diff_main(dif);
  if (import_megatron->parsed()) {
    imp_mg.overrides = to_overrides(imp_mg_sets);
    bool words = false;  // `-- ARGS...`: the command's words, not a script
    for (int i = 1; i < argc; ++i) words = words || std::string(argv[i]) == "--";
    if (words)
      imp_mg.words = imp_mg_words;
    else if (imp_mg_words.size() == 1)
      imp_mg.input = imp_mg_words[0];
    else
      throw InputError("import-megatron: give one launch script, or -- and the command's words");
    return import_megatron_main(imp_mg);
  }
  if (import_deepspeed->parsed()) {
    imp_ds.overrides = to_overrides(imp_ds_sets);
    return import_deepspeed_main(imp_ds);
  }
  if (plan->parsed()) {
    pln.overrides = to_overrides(plan_sets);
    if (pln.merge.empty() == pln.scenario.empty())
      throw InputError(pln.merge.empty() ? "plan: give a scenario file, or --merge shard results"
                                         : "plan: --merge takes shard results, not a scenario");
    return plan_main(pln);
  }
  if (replay->parsed()) {
    rep.overrides = to_overrides(replay_sets);
    return replay_main(rep);
  }
  if (validate->parsed()) {
    val.overrides = to_overrides(validate_sets);
    return validate_main(val);
  }
  return calibrate_main(cal);
}

}  // namespace
}  // namespace trainsim::cli

#ifdef TRAINSIM_EXEC_TORCH_VERBS
namespace {

/// The LibTorch verbs run in trainsim-torch, next to this program (apps/CMakeLists.txt): this
/// process execs it with the same arguments, so that `simulate` never loads LibTorch. Returns
/// only when the verb is not a LibTorch one (validate --measured-trace and calibrate's fits are
/// not: they read files) or trainsim-torch is not there (the verb then answers "not built").
void exec_torch_verb(char** argv) {
  const char* verb = nullptr;
  for (char** a = argv + 1; *a; ++a)
    if ((*a)[0] != '-') {
      verb = *a;
      break;
    }
  if (!verb || (std::strcmp(verb, "replay") != 0 && std::strcmp(verb, "validate") != 0 &&
                std::strcmp(verb, "calibrate") != 0))
    return;
  // validate --measured-trace compares a recorded replay, calibrate --from-trace and
  // --from-microbench fit files: no LibTorch, they run here.
  if (std::strcmp(verb, "validate") == 0)
    for (char** a = argv + 1; *a; ++a)
      if (std::strncmp(*a, "--measured-trace", 16) == 0) return;
  if (std::strcmp(verb, "calibrate") == 0)
    for (char** a = argv + 1; *a; ++a)
      if (std::strncmp(*a, "--from-trace", 12) == 0 ||
          std::strncmp(*a, "--from-microbench", 17) == 0)
        return;
  char self[4096];
  const ssize_t n = ::readlink("/proc/self/exe", self, sizeof self - 1);
  if (n <= 0) return;
  self[n] = '\0';
  std::string path(self);
  path = path.substr(0, path.rfind('/') + 1) + "trainsim-torch";
  if (::access(path.c_str(), X_OK) != 0) return;
  ::execv(path.c_str(), argv);
  std::cerr << "trainsim: cannot run " << path << ": " << std::strerror(errno) << "\n";
  std::exit(1);
}

}  // namespace
#endif

int main(int argc, char** argv) {
#ifdef TRAINSIM_EXEC_TORCH_VERBS
  exec_torch_verb(argv);
#endif
  try {
    return trainsim::cli::run(argc, argv);
  } catch (const trainsim::InputError& e) {
    std::cerr << "trainsim: " << e.what() << "\n";
  } catch (const std::exception& e) {
    std::cerr << "trainsim: error: " << e.what() << "\n";
  } catch (...) {
    std::cerr << "trainsim: error: unknown exception\n";
  }
  return 1;
}
