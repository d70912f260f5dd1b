// End-to-end: a scenario written from a Megatron-LM launch line, with the arguments that change
// neither time nor memory (learning rate and its schedule, seed, logging / evaluation / save
// intervals, data and tokenizer paths, the MoE auxiliary-loss weights) and the `bf16` alias,
// simulates like the shipped scenario it copies, and lists each of those arguments as ignored
// in the summary's notes (docs/scenario.md "Key index"; docs/summary.md `notes`).
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <regex>
#include <string>

#include "tests/e2e/cli_helpers.h"
#include "tests/support/paths.h"

namespace {

using trainsim_e2e::run;
using trainsim_e2e::slurp;
namespace fs = std::filesystem;

const char* kShipped = "scenarios/h100/llama3-8b_fp8_fsdp8_tp1_pp1_dp8_r25.09.yaml";

TEST(LaunchLineCli, IgnoredArgumentsSimulateAndAreListedAsIgnored) {
  trainsim::test_support::ScratchDir dir("launch_line");
  std::string text = slurp(trainsim::test_support::source_path(kShipped));
  // --bf16 instead of precision: bf16 (the alias), and the launch line's other flags.
  const auto at = text.find("\n  precision: bf16\n");
  ASSERT_NE(at, std::string::npos);
  text.replace(at, std::string("\n  precision: bf16\n").size(), "\n  bf16: true\n");
  const auto model = text.find("\nmodel:\n");
  ASSERT_NE(model, std::string::npos);
  text.insert(model + std::string("\nmodel:\n").size(),
              "  moe_router_load_balancing_type: aux_loss\n");
  text += "training:\n  lr: 3.0e-4\n  min_lr: 3.0e-5\n  lr_decay_style: cosine\n"
          "  lr_warmup_iters: 2000\n  seed: 1234\n  log_interval: 1\n  eval_interval: 1000\n"
          "  eval_iters: 10\n  save_interval: 5000\n  tokenizer_type: HuggingFaceTokenizer\n"
          "  data_path: /data/my-corpus_text_document\n";
  // The file's name stays the shipped one's so that both summaries name the same scenario.
  const fs::path scenario = dir.path() / fs::path(kShipped).filename();
  std::ofstream(scenario) << text;

  ASSERT_EQ(run("simulate " + scenario.string() + " --json " + (dir.path() / "line.json").string(),
                (dir.path() / "line.log").string()),
            0)
      << slurp(dir.path() / "line.log");
  ASSERT_EQ(run("simulate " + trainsim::test_support::source_path(kShipped) + " --json " +
                    (dir.path() / "shipped.json").string(),
                (dir.path() / "shipped.log").string()),
            0);
  const std::string line = slurp(dir.path() / "line.json");
  for (const char* key : {"training.lr", "training.min_lr", "training.lr_decay_style",
                          "training.lr_warmup_iters", "training.seed", "training.log_interval",
                          "training.eval_interval", "training.eval_iters",
                          "training.tokenizer_type",
                          "training.data_path", "model.moe_router_load_balancing_type"})
    EXPECT_NE(line.find(std::string("\"ignored: ") + key + " ("), std::string::npos) << key;
  // --save-interval is the checkpoint interval of `trainsim forecast` (docs/forecast.md): read,
  // not ignored, and it changes no iteration (the comparison below).
  EXPECT_EQ(line.find("ignored: training.save_interval"), std::string::npos);
  // Apart from those notes the two runs are the same run.
  const std::regex notes("\"notes\": \\[[^\\]]*\\]");
  EXPECT_EQ(std::regex_replace(line, notes, "\"notes\": []"),
            std::regex_replace(slurp(dir.path() / "shipped.json"), notes, "\"notes\": []"));
}

TEST(LaunchLineCli, AMisspelledArgumentIsStillRefusedWithASuggestion) {
  trainsim::test_support::ScratchDir dir("launch_line_typo");
  const fs::path log = dir.path() / "typo.log";
  EXPECT_EQ(run("simulate " + trainsim::test_support::source_path(kShipped) +
                    " --set training.lr_decay_styel=cosine",
                log.string()),
            1);
  const std::string msg = slurp(log);
  EXPECT_NE(msg.find("training.lr_decay_styel"), std::string::npos) << msg;
  EXPECT_NE(msg.find("lr_decay_style"), std::string::npos) << msg;
}

}  // namespace
