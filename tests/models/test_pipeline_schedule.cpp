// Tests of models/pipeline_schedule: hand-written Megatron-LM orders, structural properties
// over many (schedule, pp, m, v), and an independent event-driven timing of the orders whose
// bubble must equal the SC'21 closed forms (p-1)/m and (p-1)/(v m).
#include "models/graph/pipeline_schedule.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <functional>
#include <map>
#include <stdexcept>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

namespace trainsim {
namespace {

using S = PipelineSchedule;

// Parses "F0 B3" (chunk 0) or "F0c1 B3c0" into steps; written by hand in the tests below.
std::vector<PipelineStep> parse(const std::string& text) {
  std::vector<PipelineStep> out;
  std::istringstream in(text);
  std::string tok;
  while (in >> tok) {
    PipelineStep s;
    if (tok[0] != 'F' && tok[0] != 'B') throw std::logic_error("bad token " + tok);
    s.forward = tok[0] == 'F';
    const auto c = tok.find('c');
    s.microbatch = std::stoi(tok.substr(1, c == std::string::npos ? std::string::npos : c - 1));
    s.chunk = c == std::string::npos ? 0 : std::stoi(tok.substr(c + 1));
    out.push_back(s);
  }
  return out;
}

std::string show(const std::vector<PipelineStep>& order) {
  std::string s;
  for (const auto& st : order) {
    s += (st.forward ? "F" : "B") + std::to_string(st.microbatch) + "c" +
         std::to_string(st.chunk) + " ";
  }
  return s;
}

// ---------------------------------------------------------------- hand-written orders

// PP=4, m=8, 1F1B. Rank r warms up with 3-r forwards, then alternates F/B, then drains.
TEST(PipelineOrder, OneFOneB_pp4_m8_AllRanks) {
  const char* expected[4] = {
      "F0 F1 F2 F3 B0 F4 B1 F5 B2 F6 B3 F7 B4 B5 B6 B7",
      "F0 F1 F2 B0 F3 B1 F4 B2 F5 B3 F6 B4 F7 B5 B6 B7",
      "F0 F1 B0 F2 B1 F3 B2 F4 B3 F5 B4 F6 B5 F7 B6 B7",
      "F0 B0 F1 B1 F2 B2 F3 B3 F4 B4 F5 B5 F6 B6 F7 B7",
  };
  for (int r = 0; r < 4; ++r) {
    const auto got = pipeline_order(S::OneFOneB, 4, r, 8, 1);
    EXPECT_EQ(got, parse(expected[r])) << "rank " << r << ": " << show(got);
  }
}

// PP=4, m=2 < pp: the warm-up is capped at m (rank 0 and 1 do all forwards first).
TEST(PipelineOrder, OneFOneB_pp4_m2_WarmupCapped) {
  EXPECT_EQ(pipeline_order(S::OneFOneB, 4, 0, 2, 1), parse("F0 F1 B0 B1"));
  EXPECT_EQ(pipeline_order(S::OneFOneB, 4, 1, 2, 1), parse("F0 F1 B0 B1"));
  EXPECT_EQ(pipeline_order(S::OneFOneB, 4, 2, 2, 1), parse("F0 F1 B0 B1"));
  EXPECT_EQ(pipeline_order(S::OneFOneB, 4, 3, 2, 1), parse("F0 B0 F1 B1"));
}

// PP=4, m=8, v=2 interleaved (SC'21 Fig. 4 with 8 microbatches). Forward table, k = 0..15:
// chunk 0 for microbatches 0-3, chunk 1 for 0-3, chunk 0 for 4-7, chunk 1 for 4-7; the backward
// table visits chunk 1 first. Warm-up: rank 0 10, rank 1 8, rank 3 4.
TEST(PipelineOrder, Interleaved_pp4_m8_v2) {
  EXPECT_EQ(pipeline_order(S::Interleaved, 4, 0, 8, 2),
            parse("F0c0 F1c0 F2c0 F3c0 F0c1 F1c1 F2c1 F3c1 F4c0 F5c0 "  // warm-up (10)
                  "F6c0 B0c1 F7c0 B1c1 F4c1 B2c1 F5c1 B3c1 F6c1 B0c0 F7c1 B1c0 "  // steady
                  "B2c0 B3c0 B4c1 B5c1 B6c1 B7c1 B4c0 B5c0 B6c0 B7c0"));  // cooldown
  EXPECT_EQ(pipeline_order(S::Interleaved, 4, 1, 8, 2),
            parse("F0c0 F1c0 F2c0 F3c0 F0c1 F1c1 F2c1 F3c1 "  // warm-up (8)
                  "F4c0 B0c1 F5c0 B1c1 F6c0 B2c1 F7c0 B3c1 "
                  "F4c1 B0c0 F5c1 B1c0 F6c1 B2c0 F7c1 B3c0 "
                  "B4c1 B5c1 B6c1 B7c1 B4c0 B5c0 B6c0 B7c0"));
  // The last device (Fig. 4, device 4): four chunk-0 forwards, then 1F1B from chunk 1.
  EXPECT_EQ(pipeline_order(S::Interleaved, 4, 3, 8, 2),
            parse("F0c0 F1c0 F2c0 F3c0 "  // warm-up (4)
                  "F0c1 B0c1 F1c1 B1c1 F2c1 B2c1 F3c1 B3c1 "
                  "F4c0 B0c0 F5c0 B1c0 F6c0 B2c0 F7c0 B3c0 "
                  "F4c1 B4c1 F5c1 B5c1 F6c1 B6c1 F7c1 B7c1 "
                  "B4c0 B5c0 B6c0 B7c0"));
}

// m == pp: Megatron runs all forwards, then all backwards, on every rank.
TEST(PipelineOrder, Interleaved_MicrobatchesEqualPP_AllForwardFirst) {
  const auto expected = parse("F0c0 F1c0 F0c1 F1c1 B0c1 B1c1 B0c0 B1c0");
  EXPECT_EQ(pipeline_order(S::Interleaved, 2, 0, 2, 2), expected);
  EXPECT_EQ(pipeline_order(S::Interleaved, 2, 1, 2, 2), expected);
  const auto expected3 = parse(
      "F0c0 F1c0 F2c0 F0c1 F1c1 F2c1 F0c2 F1c2 F2c2 "
      "B0c2 B1c2 B2c2 B0c1 B1c1 B2c1 B0c0 B1c0 B2c0");
  for (int r = 0; r < 3; ++r) {
    EXPECT_EQ(pipeline_order(S::Interleaved, 3, r, 3, 3), expected3) << "rank " << r;
    EXPECT_EQ(num_warmup_steps(S::Interleaved, 3, r, 3, 3), 9);
  }
}

// Megatron-Core's interleaved schedule with combined 1F1B steps (overlap_moe_expert_parallel_comm),
// pp = 2, v = 2, m = 4, written by hand. The table (g = pp = 2) of forward ids 0..7 is
// (mb, chunk) (0,0) (1,0) (0,1) (1,1) (2,0) (3,0) (2,1) (3,1); the backward ids have the chunk
// mirrored. Warm-up: (pp - r - 1) * 2 + (v - 1) * pp + 1: rank 0 5 forwards, rank 1 3; then
// forward w + k beside backward k (rank 0: 3 merged steps, rank 1: 5), then the rest alone.
TEST(PipelineOrder, CombinedInterleaved_pp2_m4_v2) {
  const CombinedOrder r0 = combined_interleaved_order(2, 0, 4, 2);
  EXPECT_EQ(r0.warmup, 5);
  EXPECT_EQ(r0.merged, 3);
  EXPECT_EQ(r0.steps, parse("F0c0 F1c0 F0c1 F1c1 F2c0 "
                            "F3c0 B0c1 F2c1 B1c1 F3c1 B0c0 "
                            "B1c0 B2c1 B3c1 B2c0 B3c0"))
      << show(r0.steps);
  const CombinedOrder r1 = combined_interleaved_order(2, 1, 4, 2);
  EXPECT_EQ(r1.warmup, 3);
  EXPECT_EQ(r1.merged, 5);
  EXPECT_EQ(r1.steps, parse("F0c0 F1c0 F0c1 "
                            "F1c1 B0c1 F2c0 B1c1 F3c0 B0c0 F2c1 B1c0 F3c1 B2c1 "
                            "B3c1 B2c0 B3c0"))
      << show(r1.steps);
  // m = pp: no all-warm-up special case (Megatron-Core's get_pp_rank_microbatches has none);
  // rank 0's 2 + 2 + 1 = 5 caps at m v = 4, rank 1's 0 + 2 + 1 = 3 leaves one merged step.
  EXPECT_EQ(combined_interleaved_order(2, 0, 2, 2).merged, 0);
  EXPECT_EQ(combined_interleaved_order(2, 1, 2, 2).merged, 1);
  EXPECT_THROW(combined_interleaved_order(2, 0, 3, 2), InputError);  // m not divisible by pp
}

TEST(PipelineOrder, GPipe_pp2_m4) {
  const auto expected = parse("F0 F1 F2 F3 B0 B1 B2 B3");
  EXPECT_EQ(pipeline_order(S::GPipe, 2, 0, 4, 1), expected);
  EXPECT_EQ(pipeline_order(S::GPipe, 2, 1, 4, 1), expected);
}

TEST(PipelineOrder, NoPipelining_pp1_IsForwardBackwardPerMicrobatch) {
  // Megatron's forward_backward_no_pipelining: F0 B0 F1 B1 ...; 1F1B with pp=1 is the same.
  EXPECT_EQ(pipeline_order(S::OneFOneB, 1, 0, 3, 1), parse("F0 B0 F1 B1 F2 B2"));
}

TEST(NumWarmupSteps, HandValues) {
  // 1F1B: pp - rank - 1, capped at m.
  EXPECT_EQ(num_warmup_steps(S::OneFOneB, 4, 0, 8, 1), 3);
  EXPECT_EQ(num_warmup_steps(S::OneFOneB, 4, 3, 8, 1), 0);
  EXPECT_EQ(num_warmup_steps(S::OneFOneB, 8, 0, 5, 1), 5);
  // Interleaved pp=4, v=2, m=8: 2*(3-r) + 4.
  EXPECT_EQ(num_warmup_steps(S::Interleaved, 4, 0, 8, 2), 10);
  EXPECT_EQ(num_warmup_steps(S::Interleaved, 4, 1, 8, 2), 8);
  EXPECT_EQ(num_warmup_steps(S::Interleaved, 4, 2, 8, 2), 6);
  EXPECT_EQ(num_warmup_steps(S::Interleaved, 4, 3, 8, 2), 4);
  // pp=8, v=4, m=16: 2*(7-r) + 3*8.
  EXPECT_EQ(num_warmup_steps(S::Interleaved, 8, 0, 16, 4), 38);
  EXPECT_EQ(num_warmup_steps(S::Interleaved, 8, 7, 16, 4), 24);
  // GPipe: all m forwards.
  EXPECT_EQ(num_warmup_steps(S::GPipe, 4, 2, 8, 1), 8);
}

TEST(BubbleFraction, ClosedForms) {
  EXPECT_DOUBLE_EQ(bubble_fraction(S::GPipe, 4, 8, 1), 3.0 / 8.0);
  EXPECT_DOUBLE_EQ(bubble_fraction(S::OneFOneB, 4, 8, 1), 0.375);
  EXPECT_DOUBLE_EQ(bubble_fraction(S::Interleaved, 4, 8, 2), 0.1875);
  EXPECT_DOUBLE_EQ(bubble_fraction(S::OneFOneB, 1, 8, 1), 0.0);
  // SC'21 Table 1 style: p=64, m = 1536 / (1*6) = 256 microbatches per pipeline.
  EXPECT_DOUBLE_EQ(bubble_fraction(S::OneFOneB, 64, 256, 1), 63.0 / 256.0);
}

// ---------------------------------------------------------------- input validation

void expect_input_error(const std::function<void()>& f, const std::string& needle) {
  try {
    f();
    ADD_FAILURE() << "expected InputError containing '" << needle << "'";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
  }
}

TEST(PipelineOrder, RejectsInvalidArguments) {
  expect_input_error([] { pipeline_order(S::OneFOneB, 0, 0, 4, 1); }, "got 0");
  expect_input_error([] { pipeline_order(S::OneFOneB, 4, 4, 4, 1); }, "rank");
  expect_input_error([] { pipeline_order(S::OneFOneB, 4, -1, 4, 1); }, "got -1");
  expect_input_error([] { pipeline_order(S::OneFOneB, 4, 0, 0, 1); }, "num_microbatches");
  expect_input_error([] { pipeline_order(S::Interleaved, 4, 0, 8, 0); }, "virtual_stages");
  expect_input_error([] { pipeline_order(S::OneFOneB, 4, 0, 8, 2); }, "1f1b");
  expect_input_error([] { pipeline_order(S::GPipe, 4, 0, 8, 2); }, "gpipe");
  expect_input_error([] { pipeline_order(S::Interleaved, 4, 0, 6, 2); },
                     "number of microbatches (6) is not divisible by "
                     "pipeline_model_parallel_size (4)");
  expect_input_error([] { pipeline_order(S::Interleaved, 1, 0, 4, 2); }, "pp) > 1");
  expect_input_error([] { num_warmup_steps(S::Interleaved, 4, 0, 6, 2); }, "(6)");
  expect_input_error([] { bubble_fraction(S::Interleaved, 4, 6, 2); }, "(6)");
  expect_input_error([] { bubble_fraction(S::OneFOneB, 4, 0, 1); }, "num_microbatches");
}

// ---------------------------------------------------------------- properties


struct Config {
  S schedule;
  int pp, m, v;
};

std::string config_name(const testing::TestParamInfo<Config>& info) {
  const Config& c = info.param;
  const char* s = c.schedule == S::GPipe ? "gpipe" : c.schedule == S::OneFOneB ? "1f1b" : "il";
  return std::string(s) + "_pp" + std::to_string(c.pp) + "_m" + std::to_string(c.m) + "_v" +
         std::to_string(c.v);
}

std::vector<Config> all_configs() {
  std::vector<Config> out;
  for (int pp : {1, 2, 3, 4, 8}) {
    for (int m : {1, 2, 3, 4, 5, 6, 8, 9, 12, 16, 24}) {
      out.push_back({S::GPipe, pp, m, 1});
      out.push_back({S::OneFOneB, pp, m, 1});
      if (pp > 1 && m % pp == 0) {
        for (int v : {1, 2, 3, 4}) out.push_back({S::Interleaved, pp, m, v});
      }
    }
  }
  return out;
}

// ---------------------------------------------------------------- Megatron-LM 2021 exchanges

// "3:sf,rf" per exchange: the step it follows (-1: before the first) and what it sends (sf:
// forward output, sb: input gradient) and receives (rf: input, rb: output gradient).
std::string show(const std::vector<PipelineExchange>& xs) {
  std::string out;
  for (const PipelineExchange& x : xs) {
    std::string f;
    for (const auto& [on, name] : {std::pair{x.send_forward, "sf"}, {x.send_backward, "sb"},
                                   {x.recv_forward, "rf"}, {x.recv_backward, "rb"}})
      if (on) f += std::string(f.empty() ? "" : ",") + name;
    out += std::string(out.empty() ? "" : " ") + std::to_string(x.after_step) + ":" + f;
  }
  return out;
}

// Written out from megatron/schedules.py (forward_backward_pipelining_with_interleaving) for
// pp 4, m 8, v 2: rank 0 warms up 10 forwards, rank 3 four. Step indices are those of
// pipeline_order (warm-up forwards, then forward/backward pairs, then the cooldown).
TEST(Megatron2021Exchanges, HandValues_pp4_m8_v2) {
  // Rank 0: nothing to receive before its first forward (chunk 0 embeds). Its warm-up
  // forwards 3..6 are followed by chunk-1 forwards (recv_prev); forward 9, the last warm-up
  // one, also receives the first output gradient. In the steady state recv_prev is off when
  // the forward pp - 1 steps back was of the last chunk; the input gradient of chunk 0 is
  // not sent (backwards 4, 5 and the cooldown's 6, 7, 12..15).
  EXPECT_EQ(show(megatron2021_interleaved_exchanges(4, 0, 8, 2)),
            "0:sf 1:sf 2:sf 3:sf,rf 4:sf,rf 5:sf,rf 6:sf,rf 7:sf 8:sf 9:sf,rb "
            "11:sf,sb,rb 13:sf,sb,rf,rb 15:sf,sb,rf,rb 17:sf,sb,rf,rb 19:sf,rf,rb 21:sf,rb "
            "22:rb 23:rb 24:sb,rb 25:sb,rb 26:sb,rb 27:sb,rb 28:rb 29:rb 30:rb");
  // Rank 3 (last): receives before its first forward; chunk 1 outputs are the loss (not sent);
  // recv_next is off while the backward pp - 1 steps back was of chunk 0.
  EXPECT_EQ(show(megatron2021_interleaved_exchanges(4, 3, 8, 2)),
            "-1:rf 0:sf,rf 1:sf,rf 2:sf,rf 3:sf,rf "
            "5:sb,rf 7:sb,rf 9:sb,rf 11:sb,rf,rb 13:sf,sb,rf,rb 15:sf,sb,rf,rb 17:sf,sb,rf,rb "
            "19:sf,sb,rf 21:sb,rf 23:sb,rf 25:sb,rf 27:sb,rb 28:sb,rb 29:sb,rb 30:sb,rb 31:sb");
  // m == pp: all forwards first; the last warm-up exchange only sends and receives forward,
  // then a separate recv_backward.
  EXPECT_EQ(show(megatron2021_interleaved_exchanges(3, 1, 3, 2)),
            "-1:rf 0:sf,rf 1:sf,rf 2:sf,rf 3:sf,rf 4:sf,rf 5:sf 5:rb "
            "6:sb,rb 7:sb,rb 8:sb,rb 9:sb,rb 10:sb,rb 11:sb");
}

TEST(Megatron2021Exchanges, RejectsWhatMegatron2021Rejects) {
  expect_input_error([] { megatron2021_interleaved_exchanges(2, 0, 4, 2); }, "pp) > 2");
  expect_input_error([] { megatron2021_interleaved_exchanges(4, 0, 6, 2); }, "(6)");
  expect_input_error([] { megatron2021_interleaved_exchanges(4, 4, 8, 2); }, "rank");
}

class Megatron2021ExchangeProperties : public testing::TestWithParam<Config> {};

std::vector<Config> exchange_configs() {
  std::vector<Config> out;
  for (int pp : {3, 4, 5, 8})
    for (int k : {1, 2, 3})
      for (int v : {1, 2, 3, 4}) out.push_back({S::Interleaved, pp, k * pp, v});
  return out;
}

// Per rank and direction (0: forward activations, 1: backward gradients): the steps that send
// and those that receive, as indices into the rank's order.
struct Traffic {
  std::vector<int> produce[2], consume[2];
};
Traffic traffic(const std::vector<PipelineStep>& order, int pp, int rank, int v) {
  Traffic t;
  for (int i = 0; i < int(order.size()); ++i) {
    const PipelineStep& s = order[i];
    const int vstage = s.chunk * pp + rank;
    const bool first = vstage == 0, last = vstage == pp * v - 1;
    const int dir = s.forward ? 0 : 1;
    if (s.forward ? !last : !first) t.produce[dir].push_back(i);
    if (s.forward ? !first : !last) t.consume[dir].push_back(i);
  }
  return t;
}

// Every output is sent by an exchange after the step that made it and before the next step of
// the same direction makes another (the builder holds one per direction); every input is
// received by an exchange before the step that uses it; the counts match the steps exactly.
TEST_P(Megatron2021ExchangeProperties, SendsFollowAndReceivesPrecedeTheirSteps) {
  const Config c = GetParam();
  for (int r = 0; r < c.pp; ++r) {
    const auto order = pipeline_order(S::Interleaved, c.pp, r, c.m, c.v);
    const Traffic t = traffic(order, c.pp, r, c.v);
    std::vector<int> sent[2], received[2];
    int last_after = -2;
    for (const PipelineExchange& x : megatron2021_interleaved_exchanges(c.pp, r, c.m, c.v)) {
      EXPECT_GE(x.after_step, last_after) << "exchanges out of order, rank " << r;
      last_after = x.after_step;
      if (x.send_forward) sent[0].push_back(x.after_step);
      if (x.send_backward) sent[1].push_back(x.after_step);
      if (x.recv_forward) received[0].push_back(x.after_step);
      if (x.recv_backward) received[1].push_back(x.after_step);
    }
    for (int dir = 0; dir < 2; ++dir) {
      ASSERT_EQ(sent[dir].size(), t.produce[dir].size()) << "rank " << r << " dir " << dir;
      ASSERT_EQ(received[dir].size(), t.consume[dir].size()) << "rank " << r << " dir " << dir;
      for (std::size_t i = 0; i < sent[dir].size(); ++i) {
        EXPECT_GE(sent[dir][i], t.produce[dir][i]) << "rank " << r << " dir " << dir;
        if (i + 1 < t.produce[dir].size())
          EXPECT_LT(sent[dir][i], t.produce[dir][i + 1]) << "rank " << r << " dir " << dir;
      }
      for (std::size_t i = 0; i < received[dir].size(); ++i)
        EXPECT_LT(received[dir][i], t.consume[dir][i]) << "rank " << r << " dir " << dir;
    }
  }
}

// The i-th tensor a rank sends forward (backward) is the i-th its neighbour receives, as NCCL
// matches the point-to-point operations of a rank pair in order: it must be the same
// microbatch, for the next (previous) virtual stage.
TEST_P(Megatron2021ExchangeProperties, InOrderMatchingDeliversTheRightTensor) {
  const Config c = GetParam();
  for (int r = 0; r < c.pp; ++r) {
    for (int dir = 0; dir < 2; ++dir) {
      const int peer = dir == 0 ? (r + 1) % c.pp : (r + c.pp - 1) % c.pp;
      const auto mine = pipeline_order(S::Interleaved, c.pp, r, c.m, c.v);
      const auto theirs = pipeline_order(S::Interleaved, c.pp, peer, c.m, c.v);
      const Traffic a = traffic(mine, c.pp, r, c.v), b = traffic(theirs, c.pp, peer, c.v);
      ASSERT_EQ(a.produce[dir].size(), b.consume[dir].size());
      for (std::size_t i = 0; i < a.produce[dir].size(); ++i) {
        const PipelineStep& x = mine[a.produce[dir][i]];
        const PipelineStep& y = theirs[b.consume[dir][i]];
        EXPECT_EQ(x.microbatch, y.microbatch) << "rank " << r << " dir " << dir << " #" << i;
        EXPECT_EQ(y.chunk * c.pp + peer, x.chunk * c.pp + r + (dir == 0 ? 1 : -1));
      }
    }
  }
}

// Blocking batches do not deadlock: each rank runs its steps and exchanges in order; an
// exchange completes once every peer has posted the exchange holding the matching operation
// (the i-th send of a pair matches the i-th receive).
TEST_P(Megatron2021ExchangeProperties, BlockingExchangesDoNotDeadlock) {
  const Config c = GetParam();
  const int pp = c.pp;
  struct Item {
    PipelineExchange x;
    bool is_exchange = false;
  };
  std::vector<std::vector<Item>> prog(pp);
  // Where (item index) each rank posts its i-th operation of each kind:
  // 0 send forward, 1 send backward, 2 recv forward, 3 recv backward.
  std::vector<std::vector<int>> at[4];
  for (auto& v : at) v.assign(pp, {});
  for (int r = 0; r < pp; ++r) {
    const auto order = pipeline_order(S::Interleaved, pp, r, c.m, c.v);
    const auto xs = megatron2021_interleaved_exchanges(pp, r, c.m, c.v);
    std::size_t next = 0;
    auto add_exchanges = [&](int i) {
      for (; next < xs.size() && xs[next].after_step == i; ++next) {
        const int idx = int(prog[r].size());
        const PipelineExchange& x = xs[next];
        if (x.send_forward) at[0][r].push_back(idx);
        if (x.send_backward) at[1][r].push_back(idx);
        if (x.recv_forward) at[2][r].push_back(idx);
        if (x.recv_backward) at[3][r].push_back(idx);
        prog[r].push_back({x, true});
      }
    };
    add_exchanges(-1);
    for (int i = 0; i < int(order.size()); ++i) {
      prog[r].push_back({});
      add_exchanges(i);
    }
    ASSERT_EQ(next, xs.size());
  }
  // The matching operation of rank r's `n`-th operation of kind k: (peer, kind).
  auto peer_of = [&](int k, int r) {
    switch (k) {
      case 0: return std::pair{(r + 1) % pp, 2};
      case 1: return std::pair{(r + pp - 1) % pp, 3};
      case 2: return std::pair{(r + pp - 1) % pp, 0};
      default: return std::pair{(r + 1) % pp, 1};
    }
  };
  std::vector<int> pc(pp, 0), seen[4];
  for (auto& v : seen) v.assign(pp, 0);
  for (bool progress = true; progress;) {
    progress = false;
    for (int r = 0; r < pp; ++r) {
      while (pc[r] < int(prog[r].size())) {
        const Item& it = prog[r][pc[r]];
        if (it.is_exchange) {
          const bool ops[4] = {it.x.send_forward, it.x.send_backward, it.x.recv_forward,
                               it.x.recv_backward};
          bool ready = true;
          for (int k = 0; k < 4 && ready; ++k) {
            if (!ops[k]) continue;
            const auto [peer, pk] = peer_of(k, r);
            ASSERT_LT(seen[k][r], int(at[pk][peer].size())) << "unmatched operation";
            ready = pc[peer] >= at[pk][peer][seen[k][r]];
          }
          if (!ready) break;
          for (int k = 0; k < 4; ++k) seen[k][r] += ops[k] ? 1 : 0;
        }
        ++pc[r];
        progress = true;
      }
    }
  }
  for (int r = 0; r < pp; ++r)
    EXPECT_EQ(pc[r], int(prog[r].size())) << "rank " << r << " blocked at item " << pc[r];
}

INSTANTIATE_TEST_SUITE_P(Configs, Megatron2021ExchangeProperties,
                         testing::ValuesIn(exchange_configs()), config_name);

class ScheduleProperties : public testing::TestWithParam<Config> {};

TEST_P(ScheduleProperties, EachStepOnceAndBackwardAfterForward) {
  const Config c = GetParam();
  for (int r = 0; r < c.pp; ++r) {
    const auto order = pipeline_order(c.schedule, c.pp, r, c.m, c.v);
    ASSERT_EQ(order.size(), static_cast<size_t>(2 * c.m * c.v));
    std::map<std::pair<int, int>, int> fwd_at, bwd_at;
    for (int i = 0; i < static_cast<int>(order.size()); ++i) {
      const auto& s = order[i];
      ASSERT_GE(s.microbatch, 0);
      ASSERT_LT(s.microbatch, c.m);
      ASSERT_GE(s.chunk, 0);
      ASSERT_LT(s.chunk, c.v);
      auto& seen = s.forward ? fwd_at : bwd_at;
      EXPECT_TRUE(seen.emplace(std::make_pair(s.microbatch, s.chunk), i).second)
          << "rank " << r << " repeats " << (s.forward ? "F" : "B") << s.microbatch << "c"
          << s.chunk;
    }
    EXPECT_EQ(fwd_at.size(), static_cast<size_t>(c.m * c.v));
    EXPECT_EQ(bwd_at.size(), static_cast<size_t>(c.m * c.v));
    for (const auto& [key, bi] : bwd_at) {
      ASSERT_TRUE(fwd_at.count(key));
      EXPECT_LT(fwd_at[key], bi) << "rank " << r << " B" << key.first << "c" << key.second
                                 << " before its forward";
    }
  }
}

// Megatron pops the oldest stored activation of a chunk for each backward (FIFO), so per chunk
// the backwards must visit microbatches in the same order as the forwards.
TEST_P(ScheduleProperties, BackwardsPerChunkInForwardOrder) {
  const Config c = GetParam();
  for (int r = 0; r < c.pp; ++r) {
    std::vector<std::vector<int>> f(c.v), b(c.v);
    for (const auto& s : pipeline_order(c.schedule, c.pp, r, c.m, c.v))
      (s.forward ? f : b)[s.chunk].push_back(s.microbatch);
    EXPECT_EQ(f, b) << "rank " << r;
  }
}

TEST_P(ScheduleProperties, InFlightBoundedByWarmupPlusOne) {
  const Config c = GetParam();
  const int total = c.m * c.v;
  for (int r = 0; r < c.pp; ++r) {
    const int w = num_warmup_steps(c.schedule, c.pp, r, c.m, c.v);
    ASSERT_GE(w, 0);
    ASSERT_LE(w, total);
    const auto order = pipeline_order(c.schedule, c.pp, r, c.m, c.v);
    int in_flight = 0, max_in_flight = 0, leading_forwards = 0;
    bool seen_backward = false;
    for (const auto& s : order) {
      in_flight += s.forward ? 1 : -1;
      ASSERT_GE(in_flight, 0);
      max_in_flight = std::max(max_in_flight, in_flight);
      if (!s.forward) seen_backward = true;
      if (!seen_backward) ++leading_forwards;
    }
    EXPECT_LE(max_in_flight, w + 1) << "rank " << r;
    // Consistency with num_warmup_steps: w forwards, then (if any step is left for the steady
    // state) the steady state's first forward, before the first backward.
    const bool steady = w < total;
    EXPECT_EQ(leading_forwards, w + (steady ? 1 : 0)) << "rank " << r;
    EXPECT_EQ(max_in_flight, w + (steady ? 1 : 0)) << "rank " << r;
  }
}

TEST_P(ScheduleProperties, BubbleFractionClosedForm) {
  const Config c = GetParam();
  EXPECT_DOUBLE_EQ(bubble_fraction(c.schedule, c.pp, c.m, c.v),
                   (c.pp - 1.0) / (static_cast<double>(c.v) * c.m));
}

// ---------------------------------------------------------------- timing check
//
// Each rank executes its order one step at a time; a step starts when the rank is free and its
// inputs exist. Virtual stage s = chunk * pp + rank (S = pp * v stages), with
//   F(mb, s) after F(mb, s-1);   B(mb, s) after B(mb, s+1) and after F(mb, s).
// Per chunk, a forward takes tf / v and a backward tb / v with tb = 2 tf; we count time in units
// of tf / v, so a forward takes 1 and a backward 2 (exact integers). No communication time.
// Returns the makespan, or -1 if the orders deadlock.
long long simulate_makespan(S schedule, int pp, int m, int v) {
  const int stages = pp * v;
  const long long dur_f = 1, dur_b = 2;
  std::vector<std::vector<long long>> done_f(m, std::vector<long long>(stages, -1));
  std::vector<std::vector<long long>> done_b = done_f;
  std::vector<std::vector<PipelineStep>> orders;
  for (int r = 0; r < pp; ++r) orders.push_back(pipeline_order(schedule, pp, r, m, v));
  std::vector<size_t> next(pp, 0);
  std::vector<long long> free_at(pp, 0);
  bool progress = true;
  while (progress) {
    progress = false;
    for (int r = 0; r < pp; ++r) {
      while (next[r] < orders[r].size()) {
        const PipelineStep& st = orders[r][next[r]];
        const int s = st.chunk * pp + r;
        long long ready = free_at[r];
        if (st.forward) {
          if (s > 0) {
            if (done_f[st.microbatch][s - 1] < 0) break;
            ready = std::max(ready, done_f[st.microbatch][s - 1]);
          }
          done_f[st.microbatch][s] = ready + dur_f;
          free_at[r] = ready + dur_f;
        } else {
          if (done_f[st.microbatch][s] < 0) break;
          ready = std::max(ready, done_f[st.microbatch][s]);
          if (s < stages - 1) {
            if (done_b[st.microbatch][s + 1] < 0) break;
            ready = std::max(ready, done_b[st.microbatch][s + 1]);
          }
          done_b[st.microbatch][s] = ready + dur_b;
          free_at[r] = ready + dur_b;
        }
        ++next[r];
        progress = true;
      }
    }
  }
  for (int r = 0; r < pp; ++r)
    if (next[r] != orders[r].size()) return -1;
  return *std::max_element(free_at.begin(), free_at.end());
}

TEST_P(ScheduleProperties, SimulatedBubbleMatchesClosedForm) {
  const Config c = GetParam();
  const long long makespan = simulate_makespan(c.schedule, c.pp, c.m, c.v);
  ASSERT_GE(makespan, 0) << "orders deadlock";
  // Ideal time per rank: m microbatches x v chunks x (1 + 2).
  const long long ideal = 3LL * c.m * c.v;
  const double measured = static_cast<double>(makespan - ideal) / static_cast<double>(ideal);
  EXPECT_NEAR(measured, bubble_fraction(c.schedule, c.pp, c.m, c.v), 1e-12)
      << "makespan " << makespan << " ideal " << ideal;
}

INSTANTIATE_TEST_SUITE_P(Configs, ScheduleProperties, testing::ValuesIn(all_configs()),
                         config_name);

// A few makespans written out: 1F1B (m + p - 1)(tf + tb); interleaved (m v + p - 1)(tf+tb)/v.
TEST(SimulatedMakespan, HandValues) {
  EXPECT_EQ(simulate_makespan(S::OneFOneB, 4, 8, 1), 33);     // (8 + 3) * 3
  EXPECT_EQ(simulate_makespan(S::GPipe, 2, 4, 1), 15);        // (4 + 1) * 3
  EXPECT_EQ(simulate_makespan(S::Interleaved, 4, 8, 2), 57);  // (16 + 3) * 3 in tf/2 units
  EXPECT_EQ(simulate_makespan(S::Interleaved, 2, 2, 2), 15);  // (4 + 1) * 3, m == pp
}

}  // namespace
}  // namespace trainsim
