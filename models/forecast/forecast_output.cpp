// The forecast's outputs (models/forecast/forecast.h): the JSON of docs/forecast.schema.json and
// the text report (docs/forecast.md "Outputs").
#include <cstdio>
#include <string>

#include "models/forecast/forecast.h"

namespace trainsim {

namespace {

nlohmann::json optional_number(const std::optional<double>& v) {
  return v ? nlohmann::json(*v) : nlohmann::json(nullptr);
}

std::string fmt(const char* format, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, format, v);
  return buf;
}

}  // namespace

nlohmann::json forecast_to_json(const Forecast& f) {
  nlohmann::json j;
  j["scenario"] = f.scenario_name;
  j["gpus"] = f.gpus;
  j["nodes"] = f.nodes;
  j["tokens_per_step"] = f.tokens_per_step;
  j["steps"] = f.steps;
  j["train_tokens"] = f.train_tokens;
  const IterationTimes& it = f.iteration;
  j["iteration_time_s"] = {{"deterministic", it.deterministic_s}, {"mean", it.mean_s},
                           {"p50", it.p50_s}, {"p90", it.p90_s}, {"p99", it.p99_s},
                           {"samples", it.samples}, {"seed", it.seed},
                           {"variable", it.variable}};
  j["checkpoint_bytes"] = f.shards.total_bytes;
  j["checkpoint_bytes_per_rank_max"] = f.shards.max_rank_bytes;
  j["checkpoint_async"] = f.checkpoint.async;
  j["checkpoint_copy_s"] = f.checkpoint.copy_s;
  j["checkpoint_write_s"] = f.checkpoint.write_s;
  j["checkpoint_save_s"] = f.checkpoint.save_s();
  j["checkpoint_save_blocking_s"] = f.run.checkpoint_blocking_s;
  j["checkpoint_load_s"] = f.checkpoint.load_s();
  j["failures_per_h"] = f.failures_per_h;
  j["mtbf_h"] = f.failures_per_h > 0 ? nlohmann::json(f.mtbf_h) : nlohmann::json(nullptr);
  j["restart_s"] = f.restart_s;
  j["checkpoint_interval_steps"] = f.run.interval_steps;
  j["checkpoint_interval_auto"] = f.interval_auto;
  j["checkpoints"] = f.run.checkpoints;
  j["optimal_checkpoint_interval_steps"] = f.optimal_interval_steps;
  j["young_daly_interval_s"] = optional_number(f.young_daly_interval_s);
  j["young_daly_interval_steps"] = optional_number(f.young_daly_interval_steps);
  j["expected_interruptions"] = f.run.expected_interruptions;
  j["lost_work_per_failure_s"] = f.run.lost_work_per_failure_s;
  j["useful_time_s"] = f.run.useful_s;
  j["wall_s"] = f.run.wall_s;
  j["goodput"] = f.run.goodput;
  j["wall_days"] = f.wall_days;
  j["gpu_hours"] = f.gpu_hours;
  j["gpu_hour_usd"] = optional_number(f.gpu_hour_usd);
  j["cost_usd"] = optional_number(f.cost_usd);
  return j;
}

std::string format_forecast_text(const Forecast& f) {
  const IterationTimes& it = f.iteration;
  std::string o;
  o += "forecast " + f.scenario_name + ": " + std::to_string(f.gpus) + " GPUs on " +
       std::to_string(f.nodes) + " nodes\n";
  o += "  run                 " + std::to_string(f.steps) + " steps x " +
       fmt("%.0f", f.tokens_per_step) + " tokens = " + fmt("%.4g", f.train_tokens) + " tokens\n";
  o += "  iteration time      " + fmt("%.4f s", it.deterministic_s) + " deterministic; p50 " +
       fmt("%.4f", it.p50_s) + ", p90 " + fmt("%.4f", it.p90_s) + ", p99 " +
       fmt("%.4f s", it.p99_s) + " over " + std::to_string(it.samples) + " sample(s)" +
       (it.variable ? "" : " (no variability: all equal)") + "\n";
  o += "  checkpoint          " + fmt("%.4g GB", f.shards.total_bytes / 1e9) + " (" +
       fmt("%.4g GB", f.shards.max_rank_bytes / 1e9) + " on the largest rank); save " +
       fmt("%.4g s", f.checkpoint.save_s()) + " (blocking " +
       fmt("%.4g s", f.run.checkpoint_blocking_s) + (f.checkpoint.async ? ", async" : "") +
       "), load " + fmt("%.4g s", f.checkpoint.load_s()) + "\n";
  o += "  failures            " + fmt("%.4g /h", f.failures_per_h) +
       (f.failures_per_h > 0 ? " (MTBF " + fmt("%.3g h", f.mtbf_h) + ")" : "") + ", restart " +
       fmt("%.0f s", f.restart_s) + "\n";
  o += "  checkpoint interval " + std::to_string(f.run.interval_steps) + " steps" +
       (f.interval_auto ? " (auto)" : "") + "; optimum " +
       std::to_string(f.optimal_interval_steps) + " steps; Young/Daly " +
       (f.young_daly_interval_steps ? fmt("%.1f steps", *f.young_daly_interval_steps) +
                                          fmt(" (%.0f s)", *f.young_daly_interval_s)
                                    : std::string("none (no failures)")) + "\n";
  o += "  interruptions       " + fmt("%.4g", f.run.expected_interruptions) + " expected, " +
       fmt("%.4g s", f.run.lost_work_per_failure_s) + " of work lost per failure\n";
  o += "  goodput             " + fmt("%.2f%%", 100.0 * f.run.goodput) + " (useful " +
       fmt("%.4g s", f.run.useful_s) + " / wall " + fmt("%.4g s", f.run.wall_s) + ")\n";
  o += "  wall clock          " + fmt("%.2f days", f.wall_days) + ", " +
       fmt("%.4g GPU-hours", f.gpu_hours) +
       (f.cost_usd ? fmt(", %.4g USD", *f.cost_usd) + fmt(" at %.4g USD/GPU-hour", *f.gpu_hour_usd)
                   : std::string(", no cost (training.gpu_hour_usd not set)")) +
       "\n";
  return o;
}

}  // namespace trainsim
