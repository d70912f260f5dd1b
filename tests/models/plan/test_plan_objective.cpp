// plan --objective (models/plan/planner.h rank_results): goodput ranks higher goodput first,
// cost lower cost first, a candidate without the figure after those with it, failed or OOM
// candidates last whatever the objective; ties by tokens/s.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "models/errors.h"
#include "models/plan/planner.h"

namespace trainsim {
namespace {

CandidateResult ok(std::size_t index, double tokens, std::optional<double> goodput,
                   std::optional<double> cost) {
  CandidateResult r;
  r.candidate.index = index;
  r.simulated = true;
  r.tokens_per_s = tokens;
  r.goodput = goodput;
  r.cost_usd = cost;
  return r;
}

std::vector<std::size_t> order(std::vector<CandidateResult> v, PlanObjective o) {
  rank_results(v, o);
  std::vector<std::size_t> out;
  for (const auto& r : v) out.push_back(r.candidate.index);
  return out;
}

TEST(PlanObjective, RanksByTheChosenFigure) {
  std::vector<CandidateResult> v = {ok(0, 100, 0.90, 500), ok(1, 300, 0.80, 400),
                                    ok(2, 200, 0.95, 450), ok(3, 250, std::nullopt, std::nullopt)};
  CandidateResult oom = ok(4, 1000, 0.99, 10);
  oom.oom = true;
  v.push_back(oom);
  EXPECT_EQ(order(v, PlanObjective::TokensPerS), (std::vector<std::size_t>{1, 3, 2, 0, 4}));
  EXPECT_EQ(order(v, PlanObjective::Goodput), (std::vector<std::size_t>{2, 0, 1, 3, 4}));
  EXPECT_EQ(order(v, PlanObjective::Cost), (std::vector<std::size_t>{1, 2, 0, 3, 4}));
}

TEST(PlanObjective, TiesGoToTokensPerSecond) {
  std::vector<CandidateResult> v = {ok(0, 100, 0.9, 5), ok(1, 200, 0.9, 5)};
  EXPECT_EQ(order(v, PlanObjective::Goodput), (std::vector<std::size_t>{1, 0}));
  EXPECT_EQ(order(v, PlanObjective::Cost), (std::vector<std::size_t>{1, 0}));
}

TEST(PlanObjective, NamesParseAndABadOneIsRefused) {
  EXPECT_EQ(parse_plan_objective("goodput"), PlanObjective::Goodput);
  EXPECT_EQ(parse_plan_objective("cost"), PlanObjective::Cost);
  EXPECT_EQ(parse_plan_objective("tokens_per_s"), PlanObjective::TokensPerS);
  try {
    parse_plan_objective("speed");
    ADD_FAILURE() << "accepted";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("--objective 'speed'"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace trainsim
