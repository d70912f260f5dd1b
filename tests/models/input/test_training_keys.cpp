// The `training:` section (models/input/key_table.cpp add_training, training_section.cpp): every
// key's bad value is refused with an InputError naming the file, the field and the value.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "models/errors.h"
#include "models/input/keys.h"
#include "models/input/scenario.h"
#include "tests/support/scenario_yaml.h"

namespace trainsim {
namespace {

using test_support::GptModel;
using test_support::gpt_scenario_yaml;

std::string yaml(const std::string& training) {
  // Global batch 16 x sequence 128: 2,048 tokens per iteration.
  return gpt_scenario_yaml("t", GptModel{2, 64, 4, 128, 1024},
                           "{micro_batch_size: 2, global_batch_size: 16}", "{stage: 0}", 8) +
         "training:\n" + training;
}

std::string refusal(const std::string& training) {
  try {
    parse_scenario(yaml(training), "t.yaml");
  } catch (const InputError& e) {
    return e.what();
  }
  ADD_FAILURE() << "accepted:\n" << training;
  return "";
}

struct Bad {
  std::string training;  ///< the section's lines
  std::string field;     ///< the field the message names
  std::string value;     ///< the value it shows
};

TEST(TrainingKeys, EveryBadValueNamesFileFieldAndValue) {
  const std::vector<Bad> cases = {
      {"  train_tokens: -5\n", "training.train_tokens", "-5"},
      {"  train_tokens: 0\n", "training.train_tokens", "0"},
      {"  train_tokens: 1000\n", "training.train_tokens", "1000"},  // below one iteration
      {"  train_iters: 0\n", "training.train_iters", "0"},
      {"  train_samples: 0\n", "training.train_samples", "0"},
      {"  train_samples: 8\n", "training.train_samples", "8"},  // below global batch 16
      {"  train_iters: 5\n  train_tokens: 1e9\n", "training.train_iters", "5"},
      {"  gpu_hour_usd: -2\n", "training.gpu_hour_usd", "-2"},
      {"  gpu_hour_usd: 0\n", "training.gpu_hour_usd", "0"},
      {"  gpu_failures_per_h: -1e-5\n", "training.gpu_failures_per_h", "-1e-5"},
      {"  node_failures_per_h: -0.1\n", "training.node_failures_per_h", "-0.1"},
      {"  link_failures_per_h: -3\n", "training.link_failures_per_h", "-3"},
      {"  mttf_h: 0\n", "training.mttf_h", "0"},
      {"  mttf_h: -4\n", "training.mttf_h", "-4"},
      {"  mttf_h: 4\n  gpu_failures_per_h: 1e-5\n", "training.gpu_failures_per_h", "1e-5"},
      {"  restart_s: -1\n", "training.restart_s", "-1"},
      {"  save_interval: 0\n", "training.save_interval", "0"},
      {"  save_interval: 10\n  checkpoint: {interval_steps: 10}\n", "training.save_interval", "10"},
      {"  checkpoint: {interval_steps: 0}\n", "training.checkpoint.interval_steps", "0"},
      {"  checkpoint: {interval_steps: -3}\n", "training.checkpoint.interval_steps", "-3"},
      {"  checkpoint: {interval_steps: often}\n", "training.checkpoint.interval_steps", "often"},
      {"  checkpoint: {write_bw_bytes_per_s: 0}\n", "training.checkpoint.write_bw_bytes_per_s", "0"},
      {"  checkpoint: {read_bw_bytes_per_s: -1e9}\n", "training.checkpoint.read_bw_bytes_per_s",
       "-1e9"},
      {"  checkpoint: {async: maybe}\n", "training.checkpoint.async", "maybe"},
      {"  checkpoint: {interval: 10}\n", "interval", "interval"},  // unknown key
  };
  for (const Bad& b : cases) {
    const std::string msg = refusal(b.training);
    EXPECT_NE(msg.find("t.yaml"), std::string::npos) << msg;
    EXPECT_NE(msg.find(b.field), std::string::npos) << b.field << "\n" << msg;
    EXPECT_NE(msg.find(b.value), std::string::npos) << b.value << "\n" << msg;
  }
}

TEST(TrainingKeys, GoodValuesAreRead) {
  const Scenario s = parse_scenario(
      yaml("  train_tokens: 4096\n  gpu_hour_usd: 2\n  mttf_h: 3\n  restart_s: 60\n"
           "  checkpoint: {write_bw_bytes_per_s: 1e11, read_bw_bytes_per_s: 2e11, async: true, "
           "interval_steps: auto}\n"),
      "t.yaml");
  EXPECT_EQ(s.training.train_tokens, 4096);
  EXPECT_EQ(s.training.gpu_hour_usd, 2);
  EXPECT_EQ(s.training.mttf_h, 3);
  EXPECT_EQ(s.training.restart_s, 60);
  EXPECT_EQ(s.training.checkpoint.write_bw_bytes_per_s, 1e11);
  EXPECT_EQ(s.training.checkpoint.read_bw_bytes_per_s, 2e11);
  EXPECT_TRUE(s.training.checkpoint.async);
  EXPECT_EQ(s.training.checkpoint.interval_steps, 0);  // auto
  const Scenario m = parse_scenario(yaml("  train_iters: 3\n  save_interval: 7\n"), "t.yaml");
  EXPECT_EQ(m.training.checkpoint.interval_steps, 7);  // Megatron's --save-interval
  EXPECT_EQ(*m.training.train_iters, 3);
  // Megatron's other training arguments stay accepted and ignored (models/input/key_table.cpp).
  const Scenario lr = parse_scenario(yaml("  lr: 3e-4\n"), "t.yaml");
  EXPECT_FALSE(lr.notes.empty());
}

}  // namespace
}  // namespace trainsim
