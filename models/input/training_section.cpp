// The reader of a scenario's `training:` section (models/input/sections.h read_training): the
// table's keys (models/input/key_table.cpp add_training), the checkpoint interval (an integer or
// `auto`, also under Megatron's name save_interval), and the choices that exclude each other.
#include <string>
#include <vector>

#include "models/input/keys.h"
#include "models/input/reader.h"
#include "models/input/sections.h"

namespace trainsim::input {

namespace {

/// `interval_steps` (or save_interval): a positive integer, or `auto` (0).
std::int64_t read_interval(const Reader& r, const std::string& path) {
  const YAML::Node n = r.at(path);
  if (n.IsScalar() && n.Scalar() == "auto") return 0;
  std::int64_t v = 0;
  if (!n.IsScalar() || n.Tag() == "!" || !Reader::parse_int(n.Scalar(), v))
    r.fail(path, n, "expected a positive integer (steps between checkpoints) or 'auto'");
  if (v < 1) r.fail(path, n, "must be >= 1 (steps between checkpoints), or 'auto'");
  return v;
}

/// Refuses a file holding more than one of `paths`, naming the second.
void at_most_one(const Reader& r, const std::vector<std::string>& paths, const std::string& why) {
  std::string first;
  for (const std::string& p : paths) {
    if (!r.has(p)) continue;
    if (first.empty()) {
      first = p;
      continue;
    }
    r.fail(p, r.at(p), "is given together with " + first + ": " + why);
  }
}

}  // namespace

void read_training(const Reader& r, Scenario& s) {
  read_table_keys(r, s, "training");
  read_table_keys(r, s, "training.checkpoint");
  TrainingConfig& t = s.training;
  at_most_one(r,
              {key_at(&key_sample().training.train_tokens),
               key_at(&key_sample().training.train_iters),
               key_at(&key_sample().training.train_samples)},
              "give the run's length once");
  const std::string mttf = key_at(&key_sample().training.mttf_h);
  if (r.has(mttf))
    for (const void* rate : {static_cast<const void*>(&key_sample().training.gpu_failures_per_h),
                             static_cast<const void*>(&key_sample().training.node_failures_per_h),
                             static_cast<const void*>(&key_sample().training.link_failures_per_h)})
      if (r.has(key_at(rate)))
        r.fail(key_at(rate), r.at(key_at(rate)),
               "is given together with " + mttf +
                   ": the job's MTTF replaces the per-component rates; give one or the other");
  const std::string interval = key_at(&key_sample().training.checkpoint.interval_steps);
  const std::string save_interval = "training.save_interval";
  if (r.has(interval) && r.has(save_interval))
    r.fail(save_interval, r.at(save_interval),
           "is Megatron's name of " + interval + ": give one of the two");
  if (r.has(interval)) t.checkpoint.interval_steps = read_interval(r, interval);
  if (r.has(save_interval)) t.checkpoint.interval_steps = read_interval(r, save_interval);
}

}  // namespace trainsim::input
