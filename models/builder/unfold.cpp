// Partial folding: models/builder/unfold.h (the argument for what is unfolded is there).
#include "models/builder/unfold.h"

#include <algorithm>
#include <map>
#include <set>
#include <sstream>
#include <string>

#include "models/input/variability.h"

namespace trainsim::builder {

namespace {

std::string show(double x) {
  std::ostringstream os;
  os << x;
  return os.str();
}

/// What the plan is built from: the layout, every GPU's speed, each TP group's slowest speed.
struct Cluster {
  Cluster(const Scenario& sc) : layout(sc.parallel.layout()) {
    speed = gpu_speeds(sc.variability, layout.world_size());
    m = sc.parallel.num_microbatches;
  }
  /// The slowest speed of the TP group of data rank d at stage s.
  double group_speed(std::int64_t d, std::int64_t s) const {
    double v = speed[std::size_t(layout.rank_of({0, d, s}))];
    for (std::int64_t t = 1; t < layout.tp; ++t)
      v = std::min(v, speed[std::size_t(layout.rank_of({t, d, s}))]);
    return v;
  }
  /// Replica d's 1F1B time in units of one stage's nominal forward + backward (unfold.h).
  double replica_estimate(std::int64_t d) const {
    double sum = 0, worst = 0;
    for (std::int64_t s = 0; s < layout.pp; ++s) {
      const double c = 1.0 / group_speed(d, s);
      sum += c;
      worst = std::max(worst, c);
    }
    return sum + double(m - 1) * worst;
  }
  ParallelLayout layout;
  std::vector<double> speed;
  std::int64_t m = 1;
};

/// The replicas simulated besides the named ones: the critical replica (gpu_speed_cv > 0) and
/// the representative of the rest (`base`, -1 when none is left).
struct ReplicaChoice {
  std::int64_t critical = -1, base = -1;
  std::size_t others = 0;  ///< replicas the base stands for
};

ReplicaChoice choose_replicas(const Scenario& sc, const Cluster& c,
                              const std::set<std::int64_t>& named) {
  ReplicaChoice out;
  std::vector<std::pair<double, std::int64_t>> rest;  // (estimate, data rank)
  for (std::int64_t d = 0; d < c.layout.dp; ++d)
    if (!named.count(d))
      rest.push_back({sc.variability.gpu_speed_cv > 0 ? c.replica_estimate(d) : 1.0, d});
  if (sc.variability.gpu_speed_cv > 0) {
    double worst = -1;
    for (std::int64_t d = 0; d < c.layout.dp; ++d) {
      const double t = c.replica_estimate(d);
      if (t > worst) worst = t, out.critical = d;
    }
    rest.erase(std::remove_if(rest.begin(), rest.end(),
                              [&](const auto& e) { return e.second == out.critical; }),
               rest.end());
  }
  if (rest.empty()) return out;
  std::sort(rest.begin(), rest.end());  // equal estimates (no spread): the lowest data rank
  out.base = sc.variability.gpu_speed_cv > 0 ? rest[(rest.size() - 1) / 2].second : rest[0].second;
  out.others = rest.size();
  return out;
}

void add_reasons(UnfoldPlan& plan, const ReplicaChoice& choice,
                 const std::map<std::int64_t, std::set<std::int64_t>>& full_groups,
                 const std::set<std::int64_t>& named_replicas, const ParallelLayout& l) {
  auto replica_ranks = [&](std::int64_t d) {
    std::vector<RankId> v;
    for (const RankCoords& c : plan.ranks)
      if (c.dp_rank == d) v.push_back(RankId(l.rank_of(c)));
    return v;
  };
  for (const auto& [d, stages] : full_groups)
    for (std::int64_t s : stages) {
      std::vector<RankId> v;
      for (std::int64_t t = 0; t < l.tp; ++t) v.push_back(RankId(l.rank_of({t, d, s})));
      plan.unfolded.push_back({v, "the tensor-parallel group (data rank " + show(double(d)) +
                                      ", stage " + show(double(s)) + ") of a GPU that "
                                      "variability.slow_gpus or slow_links names: each member "
                                      "at its own speed"});
    }
  for (std::int64_t d : named_replicas)
    plan.unfolded.push_back({replica_ranks(d), "the pipeline replica (data rank " +
                                                   show(double(d)) + ") of a named GPU: its "
                                                   "stages wait on it"});
  if (choice.critical >= 0 && !named_replicas.count(choice.critical))
    plan.unfolded.push_back(
        {replica_ranks(choice.critical),
         "gpu_speed_cv: the pipeline replica (data rank " + show(double(choice.critical)) +
             ") with the largest 1F1B estimate sum_s c_s + (m-1) max_s c_s (c_s = 1 / its TP "
             "group's slowest speed): it decides the data-parallel barrier"});
  if (choice.base >= 0 && choice.base != 0)
    plan.unfolded.push_back(
        {replica_ranks(choice.base),
         "the folded representatives (data rank " + show(double(choice.base)) + ", the median "
         "estimate) of the " + show(double(choice.others)) + " other pipeline replicas"});
}

/// The folded plan with the ranks of `named` (ascending world ranks) unfolded.
UnfoldPlan partial_plan(const Scenario& sc, const Cluster& c, const std::vector<std::int64_t>& named) {
  const ParallelLayout& l = c.layout;
  std::map<std::int64_t, std::set<std::int64_t>> full_groups;  // data rank -> stages
  std::set<std::int64_t> named_replicas;
  for (std::int64_t r : named) {
    const RankCoords x = l.coords(r);
    full_groups[x.dp_rank].insert(x.pp_stage);
    named_replicas.insert(x.dp_rank);
  }
  const ReplicaChoice choice = choose_replicas(sc, c, named_replicas);
  std::set<std::int64_t> replicas = named_replicas;
  if (choice.critical >= 0) replicas.insert(choice.critical);
  if (choice.base >= 0) replicas.insert(choice.base);
  UnfoldPlan plan;
  for (std::int64_t s = 0; s < l.pp; ++s)
    for (std::int64_t d : replicas) {
      const bool full = full_groups.count(d) && full_groups[d].count(s);
      for (std::int64_t t = 0; t < (full ? l.tp : 1); ++t) {
        plan.ranks.push_back({t, d, s});
        plan.speeds.push_back(full ? c.speed[std::size_t(l.rank_of({t, d, s}))] : c.group_speed(d, s));
      }
    }
  plan.representatives.resize(std::size_t(l.world_size()));
  std::set<RankId> simulated;
  for (const RankCoords& x : plan.ranks) simulated.insert(RankId(l.rank_of(x)));
  for (std::int64_t r = 0; r < l.world_size(); ++r) {
    const RankCoords x = l.coords(r);
    const std::int64_t d = replicas.count(x.dp_rank) ? x.dp_rank : choice.base;
    plan.representatives[std::size_t(r)] =
        simulated.count(RankId(r)) ? RankId(r) : RankId(l.rank_of({0, d, x.pp_stage}));
  }
  add_reasons(plan, choice, full_groups, named_replicas, l);
  return plan;
}

}  // namespace

UnfoldPlan plan_unfolding(const Scenario& sc, bool fold) {
  const ParallelLayout l = sc.parallel.layout();
  UnfoldPlan plan;
  if (fold && sc.variability.any()) {
    const Cluster c(sc);
    plan = partial_plan(sc, c, named_asymmetric_ranks(sc.variability, sc.cluster.gpus_per_node));
    bool today = plan.ranks.size() == std::size_t(l.pp);  // one rank per stage, data rank 0
    for (const RankCoords& x : plan.ranks) today = today && x.dp_rank == 0 && x.tp_rank == 0;
    if (today) plan.representatives.clear();
  } else {
    for (std::int64_t s = 0; s < l.pp; ++s)
      for (std::int64_t d = 0; d < (fold ? 1 : l.dp); ++d)
        for (std::int64_t t = 0; t < (fold ? 1 : l.tp); ++t) plan.ranks.push_back({t, d, s});
    if (sc.variability.any()) {
      const std::vector<double> speed = gpu_speeds(sc.variability, l.world_size());
      for (const RankCoords& x : plan.ranks) plan.speeds.push_back(speed[std::size_t(l.rank_of(x))]);
    }
  }
  if (std::all_of(plan.speeds.begin(), plan.speeds.end(), [](double v) { return v == 1.0; }))
    plan.speeds.clear();
  return plan;
}

}  // namespace trainsim::builder
