// trainsim plan: the fastest layout that fits (models/plan/planner.h), with its
// stages run in worker processes (fork: each worker builds graphs or simulates
// on its own, the parent only collects one JSON line per candidate), progress
// and an ETA on stderr, Ctrl-C printing the best found so far, shards for job
// arrays and their merge. docs/plan.md is the reference.
#include <signal.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iomanip>
#include <iostream>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "apps/forecast_run.h"
#include "apps/output_file.h"
#include "apps/plan_result.h"
#include "apps/verbs.h"
#include "models/json_input.h"
#include "models/outputs/text_format.h"
#include "models/plan/planner.h"
#include "models/run.h"
#include "models/subprocess.h"
#ifdef TRAINSIM_HAVE_SIM
#include "sim/executor.h"
#endif

namespace trainsim::cli {

namespace {

using json = nlohmann::json;

volatile sig_atomic_t g_interrupted = 0;
void on_sigint(int) { g_interrupted = 1; }

// -----------------------------------------------------------------------
// worker processes

/// Runs work(i) for every i in [0, n) in `jobs` forked workers (models/subprocess.h); each
/// result (one line of JSON text) reaches on_result(i, text) in the parent as it arrives.
/// Stops early (killing the workers) when Ctrl-C was pressed; returns false then.
bool run_in_workers(std::size_t n, int jobs, const std::function<std::string(std::size_t)>& work,
                    const std::function<void(std::size_t, const std::string&)>& on_result) {
  jobs = std::max(1, std::min<int>(jobs, int(std::max<std::size_t>(n, 1))));
  const std::size_t step = std::size_t(jobs);
  // Worker w computes candidates w, w + jobs, ...: one "i\tRESULT" line each.
  auto worker = [&](int w, int out_fd) {
    for (std::size_t i = std::size_t(w); i < n; i += step) {
      std::string line;
      try {
        line = std::to_string(i) + "\t" + work(i) + "\n";
      } catch (const std::exception& e) {
        std::fprintf(stderr, "trainsim plan: worker %d, candidate %zu: %s\n", w, i, e.what());
        return 3;
      }
      if (!write_all(out_fd, line.data(), line.size())) return 2;
    }
    return 0;
  };
  std::vector<Subprocess> workers;
  std::vector<std::size_t> expected, received(std::size_t(jobs), 0);
  for (int w = 0; w < jobs; ++w) {
    workers.push_back(Subprocess::call(
        "plan", [&, w](int out_fd) { return worker(w, out_fd); },
        ChildOptions{/*output_pipe=*/true, /*ignore_sigint=*/true}));  // the parent decides
    expected.push_back(n > std::size_t(w) ? (n - std::size_t(w) - 1) / step + 1 : 0);
  }
  auto on_line = [&](std::size_t w, const std::string& line) {
    const std::size_t tab = line.find('\t');
    on_result(std::stoul(line.substr(0, tab)), line.substr(tab + 1));
    ++received[w];
  };
  auto on_end = [&](std::size_t w) {
    const ExitStatus st = workers[w].wait();
    if (received[w] == expected[w] && st.ok()) return;
    // A worker that ended early took its candidates with it: a ranking of part of the space
    // would look complete, so the plan stops here (the worker's message is above); the
    // Subprocess destructors stop the other workers.
    throw std::runtime_error(
        "plan: worker " + std::to_string(w) + " ended (" +
        (st.signal ? "killed by signal " + std::to_string(st.signal)
                   : "exit status " + std::to_string(st.exit_code)) +
        ") with " + std::to_string(expected[w] - received[w]) + " of its " +
        std::to_string(expected[w]) + " candidates not done; no ranking of part of the space");
  };
  return read_lines(workers, on_line, on_end, [] { return g_interrupted != 0; }, "plan");
}

/// "12/340 (4%), 25.1/s, ETA 13 s" on stderr, at most once a second.
class Progress {
 public:
  Progress(std::string stage, std::size_t total) : stage_(std::move(stage)), total_(total) {}
  void tick() {
    ++done_;
    const auto now = std::chrono::steady_clock::now();
    if (now - last_ < std::chrono::seconds(1) && done_ != total_) return;
    last_ = now;
    const double s = std::chrono::duration<double>(now - start_).count();
    const double rate = s > 0 ? double(done_) / s : 0;
    std::fprintf(stderr, "trainsim plan: %s %zu/%zu (%.0f%%), %.1f/s, ETA %.0f s\n", stage_.c_str(),
                 done_, total_, 100.0 * double(done_) / double(std::max<std::size_t>(total_, 1)),
                 rate, rate > 0 ? double(total_ - done_) / rate : 0.0);
  }
  double rate() const {
    const double s =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
    return s > 0 ? double(done_) / s : 0;
  }

 private:
  std::string stage_;
  std::size_t total_, done_ = 0;
  std::chrono::steady_clock::time_point start_ = std::chrono::steady_clock::now(), last_{};
};

// --------------------------------------------------------------------------
// stage (c)

/// Simulates one candidate as `trainsim simulate` would (prepare_run, SimGrid,
/// finish_run).
json simulate_candidate(const PlanArgs& args, const PlanCandidate& c) {
#ifdef TRAINSIM_HAVE_SIM
  try {
    RunRequest req;
    req.purpose = RunPurpose::Simulate;
    req.scenario_path = args.scenario;
    req.overrides = args.overrides;
    req.overrides.insert(req.overrides.end(), c.overrides.begin(), c.overrides.end());
    req.force = args.force;
    req.calibration_path = args.calibration;
    const PreparedRun run = prepare_run(req);
    const ExecutionRecord record =
        sim::simulate(run.graph, run.scenario, run.system, run.cost_model(), sim::SimOptions{});
    const RunOutputs out = finish_run(run, record, FinishOptions{});
    const Summary& s = out.summary;
    const double it = s.iteration_time_s > 0 ? s.iteration_time_s : 1;
    double exposed = 0, bubble = 0;
    for (const auto& r : s.per_rank) {
      exposed = std::max(exposed, r.exposed_comm_s);
      bubble = std::max(bubble, r.pipeline_bubble_s);
    }
    json result = {{"iteration_time_s", s.iteration_time_s},
                   {"tokens_per_s", s.tokens_per_s},
                   {"model_tflops_per_gpu", s.model_tflops_per_gpu},
                   {"mfu", s.mfu.value_or(0.0)},
                   {"peak_memory_bytes", s.peak_memory_bytes},
                   {"memory_capacity_bytes", s.memory_capacity_bytes},
                   {"oom", s.oom()},
                   {"bubble_share", bubble / it},
                   {"exposed_comm_share", exposed / it}};
    if (has_run_length(*run.scenario) && s.iteration_time_s > 0) {
      // The whole run at this candidate's iteration time (apps/forecast_run.h), one sample.
      const Forecast f = forecast_prepared(run, s.iteration_time_s, 1, 0, false, {});
      result["goodput"] = f.run.goodput;
      result["wall_days"] = f.wall_days;
      if (f.cost_usd) result["cost_usd"] = *f.cost_usd;
    }
    return result;
  } catch (const std::exception& e) {
    return {{"error", e.what()}};
  }
#else
  (void)args, (void)c;
  return {{"error", "this build has no simulator"}};
#endif
}

// ----------------------------------------------------------------------------
// outputs

/// Bytes in GiB, one decimal: memory is printed in binary units everywhere, as simulate's
/// report does (models/outputs/summary.cpp; docs/cli.md).
std::string gib(std::int64_t bytes) { return gib_text(double(bytes), 1); }

void print_table(std::ostream& os, const std::vector<CandidateResult>& ranked) {
  // The layout column fits the longest printed layout (module sets make long ones).
  int width = 44;
  for (const auto& r : ranked)
    if (r.simulated) width = std::max(width, int(r.candidate.layout.size()) + 2);
  os << std::left << std::setw(5) << "rank" << std::setw(width) << "layout" << std::right
     << std::setw(12) << "tokens/s" << std::setw(9) << "TFLOP/s" << std::setw(7) << "MFU"
     << std::setw(10) << "peak GiB" << std::setw(10) << "headroom" << std::setw(8) << "bubble"
     << std::setw(8) << "comm" << std::setw(9) << "est err";
  // The whole run's forecast, where the scenario has a training: section (docs/plan.md).
  const bool forecast = std::any_of(ranked.begin(), ranked.end(),
                                    [](const CandidateResult& r) { return bool(r.goodput); });
  const bool cost = std::any_of(ranked.begin(), ranked.end(),
                                [](const CandidateResult& r) { return bool(r.cost_usd); });
  if (forecast) os << std::setw(9) << "goodput" << std::setw(8) << "days";
  if (cost) os << std::setw(12) << "cost USD";
  os << "\n";
  int rank = 0;
  for (const auto& r : ranked) {
    if (!r.simulated) continue;
    os << std::left << std::setw(5) << ++rank << std::setw(width) << r.candidate.layout << std::right
       << std::fixed << std::setprecision(0) << std::setw(12) << r.tokens_per_s
       << std::setprecision(1) << std::setw(9) << r.model_tflops_per_gpu << std::setw(6)
       << 100 * r.mfu << "%" << std::setw(10) << gib(r.peak_memory_bytes) << std::setw(9)
       << 100.0 * (1.0 - double(r.peak_memory_bytes) /
                             double(std::max<std::int64_t>(r.memory_capacity_bytes, 1)))
       << "%" << std::setw(7) << 100 * r.bubble_share << "%" << std::setw(7)
       << 100 * r.exposed_comm_share << "%" << std::setw(8) << std::showpos
       << (r.tokens_per_s > 0 ? 100.0 * (r.estimate.estimate_tokens_per_s / r.tokens_per_s - 1.0)
                              : 0.0)
       << std::noshowpos << "%";
    if (forecast)
      os << std::setprecision(1) << std::setw(8) << (r.goodput ? 100 * *r.goodput : 0.0) << "%"
         << std::setw(8) << r.wall_days.value_or(0.0);
    if (cost) os << std::setprecision(0) << std::setw(12) << r.cost_usd.value_or(0.0);
    os << (r.error.empty() ? (r.oom ? "  OOM" : "") : "  error: " + r.error) << "\n";
  }
}

void write_csv(std::ostream& os, const std::vector<CandidateResult>& ranked) {
  os << "rank,index,layout,tokens_per_s,model_tflops_per_gpu,mfu,peak_memory_"
        "bytes,"
        "memory_capacity_bytes,bubble_share,exposed_comm_share,estimate_tokens_"
        "per_s,oom,overrides";
  const bool forecast = std::any_of(ranked.begin(), ranked.end(),
                                    [](const CandidateResult& r) { return bool(r.goodput); });
  if (forecast) os << ",goodput,wall_days,cost_usd";
  os << "\n";
  int rank = 0;
  for (const auto& r : ranked) {
    if (!r.simulated) continue;
    std::string ov;
    for (const auto& [k, v] : r.candidate.overrides) ov += (ov.empty() ? "" : ";") + k + "=" + v;
    os << ++rank << "," << r.candidate.index << "," << r.candidate.layout << "," << r.tokens_per_s
       << "," << r.model_tflops_per_gpu << "," << r.mfu << "," << r.peak_memory_bytes << ","
       << r.memory_capacity_bytes << "," << r.bubble_share << "," << r.exposed_comm_share << ","
       << r.estimate.estimate_tokens_per_s << "," << (r.oom ? "true" : "false") << ",\"" << ov
       << "\"";
    if (forecast) {
      auto opt = [](const std::optional<double>& v) {
        return v ? std::to_string(*v) : std::string();
      };
      os << "," << opt(r.goodput) << "," << opt(r.wall_days) << "," << opt(r.cost_usd);
    }
    os << "\n";
  }
}

/// The scenario file of a simulated candidate (`--out`): the planned scenario with the user's
/// `--set` overrides and the candidate's written in, `plan:` removed, so that `simulate` of the
/// file gives what the planner simulated (models/input/scenario.h scenario_text_with_overrides).
std::string candidate_yaml(const PlanArgs& args, const CandidateResult& r, int rank,
                           const std::string& scenario_name, const std::string& file_stem) {
  auto overrides = args.overrides;
  overrides.insert(overrides.end(), r.candidate.overrides.begin(), r.candidate.overrides.end());
  // Each file its own name (issue 35): the scenario's, with the file's rank and layout.
  overrides.emplace_back("name", scenario_name + "_" + file_stem);
  // Each comment one line: a line break in a path or a --set value must not become YAML.
  auto one_line = [](std::string text) {
    for (char& c : text)
      if (c == '\n' || c == '\r') c = ' ';
    return text;
  };
  std::ostringstream o;
  o << "# trainsim plan: rank " << rank << " of " << one_line(args.scenario) << ": "
    << r.candidate.layout << "\n";
  if (!args.calibration.empty())
    o << one_line("# simulated with --calibration " + args.calibration) << "\n";
  if (!args.overrides.empty()) {
    o << "# with";
    for (const auto& [key, value] : args.overrides) o << one_line(" --set " + key + "=" + value);
    o << "\n";
  }
  o << "# simulated " << std::fixed << std::setprecision(0) << r.tokens_per_s << " tokens/s, "
    << std::setprecision(1) << r.model_tflops_per_gpu << " model TFLOP/s per GPU, peak "
    << gib(r.peak_memory_bytes) << " GiB\n"
    << scenario_text_with_overrides(args.scenario, overrides, {"plan"});
  return o.str();
}

/// Stage (b)'s error against the simulation on the confirmed candidates.
void print_estimate_error(std::ostream& os, const std::vector<CandidateResult>& ranked) {
  double sum = 0, worst = 0;
  int n = 0;
  for (const auto& r : ranked)
    if (r.simulated && r.error.empty() && r.tokens_per_s > 0) {
      const double err = std::fabs(r.estimate.estimate_tokens_per_s / r.tokens_per_s - 1.0);
      sum += err;
      worst = std::max(worst, err);
      ++n;
    }
  if (n > 0)
    os << "estimate vs simulation on the " << n << " confirmed candidates: mean |error| "
       << std::fixed << std::setprecision(1) << 100 * sum / n << "%, largest " << 100 * worst
       << "%\n";
}

/// Why candidates were invalid: the most frequent reasons, each with its count and the first
/// such candidate's layout and message (--json lists every reason).
void print_invalid_reasons(std::ostream& os, const std::vector<InvalidReason>& invalid) {
  constexpr std::size_t kShown = 5;
  if (invalid.empty()) return;
  os << "invalid, by reason (candidates, the first of them, its message):\n";
  std::size_t rest = 0;
  for (std::size_t i = 0; i < invalid.size(); ++i) {
    if (i >= kShown) {
      rest += invalid[i].count;
      continue;
    }
    os << "  " << std::setw(6) << invalid[i].count << "  " << invalid[i].example_layout << ": "
       << invalid[i].reason << "\n";
  }
  if (rest > 0)
    os << "  " << std::setw(6) << rest << "  for " << invalid.size() - kShown
       << " other reasons (--json lists them: invalid_reasons)\n";
}

/// Ranks and writes the results of the space of scenario `scenario` (its name; `args.shard`'s
/// part of it, or shards merged).
int finish(const PlanArgs& args, std::vector<CandidateResult> results,
           std::map<std::string, std::size_t> why, std::vector<InvalidReason> invalid,
           std::size_t enumerated, bool interrupted, const std::string& scenario) {
  rank_results(results, parse_plan_objective(args.objective));
  sort_invalid_reasons(invalid);
  std::ostream& os = std::cout;
  if (interrupted) os << "interrupted: the best found so far\n";
  print_table(os, results);
  const bool any_simulated = std::any_of(results.begin(), results.end(),
                                         [](const CandidateResult& r) { return r.simulated; });
  if (interrupted && !any_simulated) {
    // Stopped before stage (c): the best estimates (not simulated) so far.
    std::vector<const CandidateResult*> est;
    for (const auto& r : results)
      if (r.estimate.rejection == PlanRejection::None ||
          r.estimate.rejection == PlanRejection::BelowCut)
        est.push_back(&r);
    std::stable_sort(est.begin(), est.end(),
                     [](const CandidateResult* a, const CandidateResult* b) {
                       return a->estimate.estimate_tokens_per_s > b->estimate.estimate_tokens_per_s;
                     });
    os << "best estimates (stage b, not simulated):\n";
    for (std::size_t i = 0; i < est.size() && i < 10; ++i)
      os << "  " << est[i]->candidate.layout << "  " << std::fixed << std::setprecision(0)
         << est[i]->estimate.estimate_tokens_per_s << " tokens/s (estimate)\n";
  }
  print_estimate_error(os, results);
  os << "enumerated " << enumerated << " candidates; not simulated:";
  for (const auto& [reason, count] : why) os << " " << reason << " " << count << ";";
  os << "\n";
  print_invalid_reasons(os, invalid);
  // Every output is written before any replaces its target (commit_all).
  OutputFile json_file(args.json, "--json"), csv_file(args.csv, "--csv");
  if (json_file) {
    PlanResultFile file;
    file.scenario = scenario;
    file.shard = args.shard;
    file.interrupted = interrupted;
    file.enumerated = enumerated;
    file.rejected = why;
    file.invalid_reasons = invalid;
    file.candidates = results;
    json_file.stream() << plan_result_json(file).dump(2) << "\n";
  }
  if (csv_file) write_csv(csv_file.stream(), results);
  std::vector<std::unique_ptr<OutputFile>> yaml_files;  // --out: checked by check_plan_outputs
  if (!args.out.empty() && !args.scenario.empty()) {
    int rank = 0;
    for (const auto& r : results) {
      if (!r.simulated || !r.error.empty()) continue;
      ++rank;
      std::string name = r.candidate.layout;
      std::replace(name.begin(), name.end(), ' ', '_');
      char prefix[16];
      std::snprintf(prefix, sizeof prefix, "%03d_", rank);
      yaml_files.push_back(std::make_unique<OutputFile>(
          (std::filesystem::path(args.out) / (prefix + name + ".yaml")).string(), "--out"));
      yaml_files.back()->stream() << candidate_yaml(args, r, rank, scenario, prefix + name);
    }
  }
  std::vector<OutputFile*> all = {&json_file, &csv_file};
  for (auto& f : yaml_files) all.push_back(f.get());
  commit_all(all);
  return interrupted ? 130 : 0;  // 128 + SIGINT, as a shell reports an interrupted command
}

/// `plan --merge`: the shards of one space ranked together. Each file is read by
/// parse_plan_result; refused, naming the files: shards of different scenarios or spaces, of
/// different splits, a shard given twice, a candidate in two files. Warned on stderr: missing
/// shards, interrupted ones (their part is incomplete).
int merge_main(const PlanArgs& args) {
  if (!args.shard.empty())
    throw InputError("plan --merge: --shard '" + args.shard + "' searches a part of a scenario's "
                     "space; --merge ranks shard results (give one or the other)");
  if (!args.calibration.empty())
    throw InputError("plan --merge: --calibration '" + args.calibration + "' models the "
                     "candidates of a search; --merge ranks what the shards simulated (give it "
                     "to the shards' runs)");
  if (!args.out.empty())
    throw InputError("plan --merge: --out writes each candidate's scenario from the scenario "
                     "file, which shards do not carry: give --out to the shards' runs");
  std::vector<CandidateResult> results;
  std::map<std::string, std::size_t> why;
  std::vector<InvalidReason> invalid;
  PlanResultFile space;  // the first file's scenario and enumeration
  std::string first;
  std::size_t parts = 0;                      // n of the shards' i/n (0: none had one)
  std::map<std::size_t, std::string> shards;  // i -> file
  std::map<std::size_t, std::string> seen;    // candidate index -> file
  for (const std::string& file : args.merge) {
    PlanResultFile r = parse_plan_result(
        read_input_file(file, "shard result (--merge)", "a `trainsim plan --json` file",
                        kLargeInputMaxBytes),
        file);
    if (first.empty()) {
      first = file;
      space.scenario = r.scenario;
      space.enumerated = r.enumerated;
    } else if (r.scenario != space.scenario || r.enumerated != space.enumerated) {
      throw InputError(file + ": a shard of another space (scenario '" + r.scenario + "', " +
                       std::to_string(r.enumerated) + " candidates) than " + first +
                       " (scenario '" + space.scenario + "', " +
                       std::to_string(space.enumerated) +
                       " candidates): merge the shards of one plan");
    }
    if (!r.shard.empty()) {
      const auto [i, n] = parse_shard(r.shard);  // checked by parse_plan_result
      if (parts != 0 && n != parts)
        throw InputError(file + ": field 'shard' = \"" + r.shard + "\": the other shards are of " +
                         std::to_string(parts));
      parts = n;
      if (!shards.emplace(i, file).second)
        throw InputError(file + ": shard " + r.shard + " again (also " + shards[i] + ")");
    }
    if (r.interrupted)
      std::fprintf(stderr, "trainsim plan: warning: %s was interrupted: its part of the space "
                           "is incomplete\n", file.c_str());
    for (const auto& [reason, count] : r.rejected) why[reason] += count;
    for (const InvalidReason& g : r.invalid_reasons) add_invalid_reason(invalid, g);
    for (CandidateResult& c : r.candidates) {
      const auto [it, fresh] = seen.emplace(c.candidate.index, file);
      if (!fresh)
        throw InputError(file + ": candidate " + std::to_string(c.candidate.index) + " (" +
                         c.candidate.layout + ") is also in " + it->second +
                         ": shards overlap");
      results.push_back(std::move(c));
    }
  }
  if (parts != 0 && shards.size() < parts) {
    std::string missing;
    for (std::size_t i = 0; i < parts; ++i)
      if (!shards.count(i))
        missing += (missing.empty() ? "" : ", ") + std::to_string(i) + "/" + std::to_string(parts);
    std::fprintf(stderr,
                 "trainsim plan: warning: shards missing (%s): the ranking covers %zu of %zu "
                 "parts\n",
                 missing.c_str(), shards.size(), parts);
  }
  return finish(args, std::move(results), std::move(why), std::move(invalid), space.enumerated,
                false, space.scenario);
}

/// The outputs checked before the search (issue 35): none may be an input or another output,
/// and --out must be a folder that exists or can be made.
void check_plan_outputs(const PlanArgs& args) {
  std::vector<NamedPath> inputs = {{"scenario", args.scenario},
                                   {"--calibration", args.calibration}};
  for (const std::string& m : args.merge) inputs.push_back({"--merge", m});
  check_distinct_paths(inputs, {{"--json", args.json}, {"--csv", args.csv}});
  // A folder that cannot be written fails now: the probes' temporaries are removed at once.
  { OutputFile json_probe(args.json, "--json"), csv_probe(args.csv, "--csv"); }
  if (args.out.empty() || !args.merge.empty()) return;
  std::error_code ec;
  if (std::filesystem::exists(args.out, ec) && !std::filesystem::is_directory(args.out, ec))
    throw InputError("--out '" + args.out + "': not a folder (--out names the folder that "
                     "receives each confirmed candidate's scenario YAML)");
  std::filesystem::create_directories(args.out, ec);
  if (ec)
    throw InputError("--out '" + args.out + "': cannot create the folder (" + ec.message() + ")");
}

/// Candidates above this many are refused without --force: stages (a) and (b) validate and
/// estimate each, at about kCandidateCoreSeconds of a core (measured: 0.35 ms for gpt-tiny,
/// 1.2 ms for gpt-145.6b on 2 cores), and every candidate and its result stay in memory (about
/// kCandidateBytes: some 20 override strings each); docs/plan.md.
constexpr double kMaxPlanCandidates = 100'000;
constexpr double kCandidateCoreSeconds = 0.002;
constexpr double kCandidateBytes = 4096;

/// "40 s", "12 min", "3.1 hours", "2e+04 days".
std::string duration_text(double s) {
  std::ostringstream o;
  o << std::setprecision(2);
  if (s < 120)
    o << s << " s";
  else if (s < 7200)
    o << s / 60 << " min";
  else if (s < 172800)
    o << s / 3600 << " hours";
  else
    o << s / 86400 << " days";
  return o.str();
}

/// Refuses a space above kMaxPlanCandidates (unless --force) with its size, and the time and
/// memory its search would take on `jobs` workers, before it is enumerated.
void check_space_size(const PlanArgs& args, const PlanConfig& plan, const ValidScenario& base,
                      int jobs) {
  const double points = count_grid_points(plan, base);
  if (points <= kMaxPlanCandidates || args.force) return;
  std::ostringstream o;
  o << std::setprecision(3) << args.scenario << ": the plan's space has " << points
    << " layouts, above the " << std::setprecision(6) << kMaxPlanCandidates
    << " a plan searches without --force: stages (a)+(b) would take about "
    << duration_text(points * kCandidateCoreSeconds / double(jobs)) << " on " << jobs
    << " workers and hold about " << std::setprecision(2) << points * kCandidateBytes / double(std::int64_t(1) << 30)
    << " GiB of candidates; narrow the plan: section (fewer values per key, max_gpus), or pass "
       "--force";
  throw InputError(o.str());
}

}  // namespace

/// --objective goodput needs the run's length, cost also its price (docs/plan.md).
void check_objective(const PlanArgs& args, const Scenario& base) {
  const PlanObjective o = parse_plan_objective(args.objective);
  if (o == PlanObjective::TokensPerS) return;
  if (!has_run_length(base))
    throw InputError(args.scenario + ": plan --objective " + args.objective +
                     " needs the run's length in the scenario's training: section "
                     "(training.train_tokens, train_iters or train_samples; docs/forecast.md)");
  if (o == PlanObjective::Cost && !(base.training.gpu_hour_usd > 0))
    throw InputError(args.scenario + ": plan --objective cost needs training.gpu_hour_usd");
}

int plan_main(const PlanArgs& args) {
  signal(SIGINT, on_sigint);
  check_plan_outputs(args);
  if (!args.merge.empty()) return merge_main(args);
  // The scenario as written (with --set) on its platform, checked once as simulate checks it: a
  // `local` system without --calibration, a profile that cannot be read, … stop the plan here
  // rather than refuse every candidate.
  RunRequest base_request;
  base_request.scenario_path = args.scenario;
  base_request.overrides = args.overrides;
  base_request.calibration_path = args.calibration;
  const PreparedRun platform = prepare_platform(base_request);
  for (const std::string& w : platform.warnings)
    std::fprintf(stderr, "trainsim plan: warning: %s\n", w.c_str());
  const ValidScenario& base = platform.scenario;
  check_objective(args, *base);
  PlanConfig plan = load_plan_config(args.scenario, base);
  if (args.top_k > 0) plan.top_k = args.top_k;
  const int jobs =
      args.jobs > 0 ? args.jobs : int(std::max(1u, std::thread::hardware_concurrency()));
  check_space_size(args, plan, base, jobs);
  std::vector<PlanCandidate> all = enumerate_candidates(plan, base);
  const std::size_t enumerated = all.size();
  if (!args.shard.empty()) {
    const auto [i, n] = parse_shard(args.shard);
    std::vector<PlanCandidate> mine;
    for (auto& c : all)
      if (c.index % n == i) mine.push_back(std::move(c));
    all = std::move(mine);
  }
  std::fprintf(stderr, "trainsim plan: %zu candidates (of %zu enumerated), %d workers\n",
               all.size(), enumerated, jobs);

  // Stages (a) and (b).
  std::vector<CandidateResult> results(all.size());
  Progress est("memory + estimate", all.size());
  bool complete = run_in_workers(
      all.size(), jobs,
      [&](std::size_t i) {
        return estimate_to_json(estimate_candidate(args.scenario, args.overrides, all[i],
                                                   plan.memory_headroom, args.calibration))
            .dump();
      },
      [&](std::size_t i, const std::string& text) {
        results[i].candidate = all[i];
        results[i].estimate = estimate_from_json(json::parse(text), "plan worker");
        est.tick();
      });
  std::fprintf(stderr, "trainsim plan: stages (a)+(b): %.1f candidates/s\n", est.rate());

  // Stage (c): the top K survivors by estimate.
  std::vector<std::size_t> survivors;
  for (std::size_t i = 0; i < results.size(); ++i)
    if (!results[i].candidate.layout.empty() &&
        results[i].estimate.rejection == PlanRejection::None)
      survivors.push_back(i);
  std::stable_sort(survivors.begin(), survivors.end(), [&](std::size_t a, std::size_t b) {
    return results[a].estimate.estimate_tokens_per_s > results[b].estimate.estimate_tokens_per_s;
  });
  for (std::size_t k = std::size_t(plan.top_k); k < survivors.size(); ++k)
    results[survivors[k]].estimate.rejection = PlanRejection::BelowCut;
  if (survivors.size() > std::size_t(plan.top_k)) survivors.resize(std::size_t(plan.top_k));
  if (complete) {
    Progress simp("simulate", survivors.size());
    complete = run_in_workers(
        survivors.size(), jobs,
        [&](std::size_t k) { return simulate_candidate(args, all[survivors[k]]).dump(); },
        [&](std::size_t k, const std::string& text) {
          CandidateResult& r = results[survivors[k]];
          const json j = json::parse(text);
          r.simulated = true;
          if (j.contains("error")) {
            r.error = j.at("error");
          } else {
            r.iteration_time_s = j.at("iteration_time_s");
            r.tokens_per_s = j.at("tokens_per_s");
            r.model_tflops_per_gpu = j.at("model_tflops_per_gpu");
            r.mfu = j.at("mfu");
            r.peak_memory_bytes = j.at("peak_memory_bytes");
            r.memory_capacity_bytes = j.at("memory_capacity_bytes");
            r.oom = j.at("oom");
            r.bubble_share = j.at("bubble_share");
            r.exposed_comm_share = j.at("exposed_comm_share");
            if (j.contains("goodput")) r.goodput = j.at("goodput").get<double>();
            if (j.contains("wall_days")) r.wall_days = j.at("wall_days").get<double>();
            if (j.contains("cost_usd")) r.cost_usd = j.at("cost_usd").get<double>();
          }
          simp.tick();
        });
    std::fprintf(stderr, "trainsim plan: stage (c): %.2f candidates/s\n", simp.rate());
  }
  std::map<std::string, std::size_t> why;
  std::vector<InvalidReason> invalid;
  std::vector<CandidateResult> kept;
  for (auto& r : results) {
    if (r.candidate.layout.empty()) continue;  // never estimated (interrupted)
    if (r.estimate.rejection != PlanRejection::None) {
      ++why[to_string(r.estimate.rejection)];
      if (r.estimate.rejection == PlanRejection::Invalid) {
        // Every message begins with the scenario's path: the reason is what follows it.
        std::string reason = r.estimate.reason;
        if (reason.rfind(args.scenario, 0) == 0) {
          reason.erase(0, args.scenario.size());
          if (reason.rfind(": ", 0) == 0) reason.erase(0, 2);
          else if (reason.rfind(" ", 0) == 0) reason.erase(0, 1);
        }
        add_invalid_reason(invalid, {reason, 1, r.candidate.index, r.candidate.layout});
        continue;
      }
    }
    kept.push_back(std::move(r));
  }
  // Rejected-but-valid candidates stay in the JSON (estimates) so that a
  // --merge can rank shards; the text table lists simulated ones only.
  return finish(args, std::move(kept), std::move(why), std::move(invalid), enumerated, !complete,
                base->name);
}

}  // namespace trainsim::cli
