// Scale benchmark of the simulator (issue 2 "done when": the 3072-GPU GPT-1T iteration of
// Megatron SC'21 Table 1 simulates within 60 s of wall time and 2 GB of memory).
//
// A plain program, not a Google Benchmark (one run of this size is the measurement):
//   bench_sim_scale [--scenario PATH | PATH] [--unfolded] [--quiet]
// Default scenario: scenarios/gpt-1t_tp8_pp64_dp6.yaml of the source tree. It builds the
// schedule graph (folded unless --unfolded), simulates it (sim::simulate with stats and
// progress on stderr), computes the summary (memory timeline + make_summary) and prints:
// wall time of each phase and in total, peak RSS of this process (getrusage RUSAGE_SELF) and
// of the SimGrid child process (SimStats::child_peak_rss_bytes, its VmHWM), tasks, SimGrid
// activities, tasks per second of simulation wall time, the simulated iteration time, and the
// budget checks as PASS/FAIL lines.
// Exit status: 0 when every budget passes, 2 when one fails, 1 on an error.
#include <sys/resource.h>

#include <chrono>
#include <cstdlib>
#include <cstdio>
#include <cstring>
#include <exception>
#include <string>

#include <nlohmann/json.hpp>

#include "models/hardware/calibration.h"
#include "models/perf/cost_model.h"
#include "models/builder/graph_builder.h"
#include "models/hardware/hardware.h"
#include "models/outputs/memory_timeline.h"
#include "models/input/scenario.h"
#include "models/outputs/summary.h"
#include "sim/executor.h"

namespace {

using Clock = std::chrono::steady_clock;

/// Budgets of issue 2: one simulated GPT-1T iteration in <= 60 s and <= 2 GB (taken as
/// 2 GiB = 2^31 bytes of resident memory, for the parent and the simulation child each).
/// The Llama 3.1 405B-class run on 16,384 H100s (bench/scale/) has a 30 s budget: pass
/// --budget-wall-s 30.
double kBudgetWallS = 60.0;
constexpr double kBudgetRssBytes = 2.0 * 1024 * 1024 * 1024;

double seconds_since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

/// Peak resident set of this process so far (Linux reports ru_maxrss in KiB).
double self_peak_rss_bytes() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return double(u.ru_maxrss) * 1024.0;
}

void usage(const char* argv0) {
  std::fprintf(stderr,
               "usage: %s [--scenario PATH | PATH] [--unfolded] [--quiet] [--budget-wall-s S]\n",
               argv0);
}

}  // namespace

int main(int argc, char** argv) {
  std::string path = std::string(TRAINSIM_SOURCE_DIR) + "/scenarios/gpt-1t_tp8_pp64_dp6.yaml";
  bool unfolded = false, progress = true;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--scenario" && i + 1 < argc) {
      path = argv[++i];
    } else if (a == "--budget-wall-s" && i + 1 < argc) {
      kBudgetWallS = std::atof(argv[++i]);
    } else if (a == "--unfolded") {
      unfolded = true;
    } else if (a == "--quiet") {
      progress = false;
    } else if (a == "-h" || a == "--help") {
      usage(argv[0]);
      return 0;
    } else if (!a.empty() && a[0] != '-') {
      path = a;
    } else {
      usage(argv[0]);
      return 1;
    }
  }
  try {
    using namespace trainsim;
    const auto t_start = Clock::now();
    const Scenario sc = load_scenario(path);
    const SystemSpec& system = find_system(sc.cluster.system);
    const CalibrationProfile profile = default_calibration(system.gpu.name);
    const CostModel cost(system, profile);

    const auto t_build = Clock::now();
    BuildOptions build;
    build.fold = !unfolded;
    build.calibration = &profile;
    const ScheduleGraph graph = build_schedule_graph(validated(sc), system, build);
    const double build_s = seconds_since(t_build);

    const auto t_sim = Clock::now();
    sim::SimStats stats;
    sim::SimOptions options;
    options.progress = progress;
    options.stats = &stats;
    const ExecutionRecord record = sim::simulate(graph, sc, system, cost, options);
    const double simulate_s = seconds_since(t_sim);

    const auto t_sum = Clock::now();
    const MemoryTimeline memory =
        build_memory_timeline(graph, record, sc.cluster.gpus_per_node);
    const nlohmann::json summary =
        summary_to_json(make_summary(graph, record, sc, system, memory, SummaryOptions{}));
    const double summary_s = seconds_since(t_sum);
    const double total_s = seconds_since(t_start);

    const double parent_rss = self_peak_rss_bytes();
    const double child_rss = double(stats.child_peak_rss_bytes);
    const double tasks = double(graph.num_tasks());
    const auto& p = sc.parallel;

    std::printf("scenario            %s (%s)\n", sc.name.c_str(), path.c_str());
    std::printf("parallel            tp %lld x pp %lld x dp %lld = %lld GPUs, %lld microbatches, %s\n",
                (long long)p.tensor_model_parallel_size, (long long)p.pipeline_model_parallel_size,
                (long long)p.data_parallel_size, (long long)sc.world_size(),
                (long long)p.num_microbatches, to_string(p.pipeline_schedule));
    std::printf("mode                %s (fold factor %lld, %zu simulated ranks)\n",
                graph.fold_factor > 1 ? "folded" : "unfolded", (long long)graph.fold_factor,
                graph.simulated_ranks().size());
    std::printf("tasks               %.0f\n", tasks);
    std::printf("activities          %llu\n", (unsigned long long)record.activities);
    std::printf("actors              %llu\n", (unsigned long long)stats.actors);
    std::printf("hosts/links/routes  %llu / %llu / %llu\n", (unsigned long long)stats.hosts,
                (unsigned long long)stats.links, (unsigned long long)stats.routes);
    std::printf("wall build          %.3f s\n", build_s);
    std::printf("wall simulate       %.3f s (prepare %.3f s in the parent, SimGrid %.3f s in the child)\n",
                simulate_s, stats.prepare_wall_s, stats.simulate_wall_s);
    std::printf("wall summary        %.3f s\n", summary_s);
    std::printf("wall total          %.3f s (incl. scenario load)\n", total_s);
    std::printf("tasks per second    %.0f (simulate phase)\n", tasks / simulate_s);
    std::printf("peak RSS parent     %.1f MiB\n", parent_rss / (1024.0 * 1024.0));
    std::printf("peak RSS child      %.1f MiB\n", child_rss / (1024.0 * 1024.0));
    std::printf("iteration time      %.6f s simulated, %.1f model TFLOP/s per GPU, peak memory %.2f GiB\n",
                summary.at("iteration_time_s").get<double>(),
                summary.at("model_tflops_per_gpu").get<double>(),
                summary.at("peak_memory_bytes").get<double>() / (1024.0 * 1024.0 * 1024.0));

    bool ok = true;
    auto check = [&](const char* what, bool pass, const std::string& detail) {
      std::printf("%s %s: %s\n", pass ? "PASS" : "FAIL", what, detail.c_str());
      ok = ok && pass;
    };
    char buf[128];
    std::snprintf(buf, sizeof buf, "%.3f s <= %.0f s", total_s, kBudgetWallS);
    check("wall time", total_s <= kBudgetWallS, buf);
    std::snprintf(buf, sizeof buf, "%.1f MiB <= %.0f MiB", parent_rss / 1048576.0, kBudgetRssBytes / 1048576.0);
    check("peak RSS parent", parent_rss <= kBudgetRssBytes, buf);
    std::snprintf(buf, sizeof buf, "%.1f MiB <= %.0f MiB", child_rss / 1048576.0, kBudgetRssBytes / 1048576.0);
    check("peak RSS child", child_rss > 0 && child_rss <= kBudgetRssBytes, buf);
    return ok ? 0 : 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_sim_scale: %s\n", e.what());
    return 1;
  }
}
