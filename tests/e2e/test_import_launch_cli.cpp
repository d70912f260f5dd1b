// End-to-end: `trainsim import-megatron` and `import-deepspeed` (docs/cli.md). A Megatron-LM
// launch script for Llama 3 70B (examples/launch/llama3_70b_h100_fp8.sh, in the form of NVIDIA's
// examples/llama scripts) and the ZeRO-Offload++ tutorial's Twin-Flow ds_config.json
// (examples/launch/ds_config_twinflow.json) import to scenarios that simulate exactly as the
// shipped scenarios of the same runs; the shell features of launch scripts; and refusals that
// name the file, the argument and its value.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "tests/e2e/cli_helpers.h"
#include "tests/support/paths.h"

namespace {

using trainsim::test_support::source_path;
using trainsim_e2e::run;
using trainsim_e2e::slurp;
namespace fs = std::filesystem;

/// Simulates `scenario` with `sets` and returns its summary JSON.
std::string summary(const fs::path& dir, const std::string& tag, const std::string& scenario,
                    const std::string& sets = "") {
  const fs::path json = dir / (tag + ".json"), log = dir / (tag + ".log");
  EXPECT_EQ(run("simulate " + scenario + " " + sets + " --json " + json.string(), log.string()), 0)
      << slurp(log);
  return slurp(json);
}

TEST(ImportMegatron, Llama3_70bLaunchScriptSimulatesAsTheShippedScenario) {
  trainsim::test_support::ScratchDir dir("import_megatron");
  const fs::path out = dir.path() / "llama.yaml", log = dir.path() / "import.log";
  // Nothing but the cluster (a launch line does not name it) and the scenario's name: the
  // script carries the rest, its --tp-comm-overlap-cfg file TE's ring exchange.
  ASSERT_EQ(run("import-megatron " + source_path("examples/launch/llama3_70b_h100_fp8.sh") +
                    " --system dgx-h100 --name llama3-70b_fp8_tp4_pp8_vp5_dp2_r25.09 --out " +
                    out.string(),
                log.string()),
            0)
      << slurp(log);
  const std::string yaml = slurp(out);
  // Derived: 80 layers / (PP 8 x 5 virtual stages); 128256 padded to a multiple of 128 x TP 4
  // (ceil(128256 / 512) = 251, 251 x 512 = 128512), as Megatron-Bridge pads it too.
  EXPECT_NE(yaml.find("num_layers_per_virtual_pipeline_stage: 2"), std::string::npos) << yaml;
  EXPECT_NE(yaml.find("padded_vocab_size: 128512"), std::string::npos) << yaml;
  EXPECT_NE(yaml.find("tp_comm_overlap_rs_method: ring_exchange"), std::string::npos) << yaml;
  EXPECT_NE(yaml.find("nodes: 8"), std::string::npos) << yaml;
  for (const char* ignored : {"#   --lr 1.5e-4: training.lr (", "#   --rotary-base 500000: model.rotary_base (",
                              "#   CUDA_DEVICE_MAX_CONNECTIONS=1: environment.cuda_device_max_connections (",
                              "#   --fp8-amax-history-len 1024: parallel.fp8_amax_history_len (",
                              "#   --tp-comm-overlap-cfg qkv_dgrad: not modelled"})
    EXPECT_NE(yaml.find(ignored), std::string::npos) << ignored << "\n" << yaml;
  // The whole summary, byte for byte: time, memory, breakdown, settings.
  const std::string shipped = summary(
      dir.path(), "shipped", source_path("scenarios/h100/llama3-70b_fp8_tp4_pp8_vp5_dp2_r25.09.yaml"));
  EXPECT_EQ(summary(dir.path(), "imported", out.string()), shipped);
}

/// Imports a one-line launch script with `--tp-comm-overlap-cfg ub.yaml` (`cfg` written next
/// to it); returns the exit status and the output in `text`.
int import_with_ub_cfg(const fs::path& dir, const std::string& cfg, std::string& text) {
  std::ofstream(dir / "ub.yaml") << cfg;
  std::ofstream(dir / "run.sh")
      << "torchrun pretrain_gpt.py --num-layers 4 --hidden-size 1024 --num-attention-heads 16 "
         "--seq-length 1024 --vocab-size 50257 --micro-batch-size 1 --global-batch-size 16 "
         "--tensor-model-parallel-size 2 --sequence-parallel --tp-comm-overlap "
         "--tp-comm-overlap-cfg ub.yaml\n";
  const fs::path out = dir / "s.yaml", log = dir / "log";
  fs::remove(out);
  const int rc = run("import-megatron " + (dir / "run.sh").string() +
                         " --system dgx-h100 --nodes 1 --out " + out.string(),
                     log.string());
  text = rc == 0 ? slurp(out) : slurp(log);
  return rc;
}

TEST(ImportMegatron, TpCommOverlapCfgGivesTheReduceScatterMethod) {
  trainsim::test_support::ScratchDir dir("import_ub_cfg");
  const std::string ub = (dir.path() / "ub.yaml").string();
  std::string text;
  // Transformer Engine's default for proj_fprop / fc2_fprop (initialize_ub): pipeline.
  ASSERT_EQ(import_with_ub_cfg(dir.path(), "qkv_fprop:\n  method: ring_exchange\n", text), 0) << text;
  EXPECT_NE(text.find("tp_comm_overlap_rs_method: pipeline"), std::string::npos) << text;
  EXPECT_NE(text.find("--tp-comm-overlap-cfg qkv_fprop: not modelled"), std::string::npos) << text;
  ASSERT_EQ(import_with_ub_cfg(dir.path(), "proj_fprop: {method: ring_exchange}\n"
                                           "fc2_fprop: {method: ring_exchange}\n", text), 0) << text;
  EXPECT_NE(text.find("tp_comm_overlap_rs_method: ring_exchange"), std::string::npos) << text;
  // Refusals name the file, the field and the value.
  EXPECT_EQ(import_with_ub_cfg(dir.path(), "proj_fprop:\n  method: bulk\n", text), 1);
  EXPECT_NE(text.find(ub + ": field 'proj_fprop.method' = 'bulk'"), std::string::npos) << text;
  EXPECT_EQ(import_with_ub_cfg(dir.path(), "proj_fprop: {method: ring_exchange}\n", text), 1);
  EXPECT_NE(text.find(ub + ": field 'fc2_fprop.method' = 'pipeline': differs from proj_fprop's "
                           "'ring_exchange'"), std::string::npos) << text;
  EXPECT_EQ(import_with_ub_cfg(dir.path(), "- proj_fprop\n", text), 1);
  EXPECT_NE(text.find(ub + ": a userbuffers configuration is a mapping"), std::string::npos) << text;
  fs::remove(ub);
  std::ofstream(dir.path() / "run.sh") << "torchrun pretrain_gpt.py --tp-comm-overlap-cfg ub.yaml\n";
  EXPECT_EQ(run("import-megatron " + (dir.path() / "run.sh").string() + " --system dgx-h100",
                (dir.path() / "log").string()), 1);
  EXPECT_NE(slurp(dir.path() / "log").find(ub + ": cannot open"), std::string::npos)
      << slurp(dir.path() / "log");
}

TEST(ImportDeepSpeed, TwinFlowConfigSimulatesAsTheShippedOffloadScenarios) {
  trainsim::test_support::ScratchDir dir("import_deepspeed");
  const fs::path out = dir.path() / "opt.yaml", log = dir.path() / "import.log";
  // The model is not in a ds_config: OPT-13B's shape from the shipped scenario.
  ASSERT_EQ(run("import-deepspeed " + source_path("examples/launch/ds_config_twinflow.json") +
                    " --system dgx-a100-40gb --nodes 1 --name opt-13b_zero3_dp8_offload-r0.3"
                    " --set model.num_layers=40 --set model.hidden_size=5120"
                    " --set model.num_attention_heads=40 --set model.seq_length=2048"
                    " --set model.padded_vocab_size=50304"
                    " --set parallel.recompute_granularity=full --out " + out.string(),
                log.string()),
            0)
      << slurp(log);
  const std::string yaml = slurp(out);
  for (const char* key : {"stage: 3", "ratio: 0.3", "device: cpu", "precision: fp16",
                          "global_batch_size: 24", "micro_batch_size: 3"})
    EXPECT_NE(yaml.find(key), std::string::npos) << key << "\n" << yaml;
  EXPECT_NE(yaml.find("#   fp16.loss_scale_window 500: loss scaling"), std::string::npos) << yaml;
  const std::string r1 = source_path("scenarios/offload/opt-13b_zero3_dp8_offload-r1.yaml");
  const std::string ratio = "deepspeed.zero_optimization.offload_optimizer.ratio";
  // The tutorial's ratio 0.3 is its own shipped scenario; the pair's 1.0 and auto.
  EXPECT_EQ(summary(dir.path(), "imp03", out.string()),
            summary(dir.path(), "r03",
                    source_path("scenarios/offload/opt-13b_zero3_dp8_offload-r0.3.yaml")));
  EXPECT_EQ(summary(dir.path(), "imp1", out.string(),
                    "--set " + ratio + "=1.0 --set name=opt-13b_zero3_dp8_offload-r1"),
            summary(dir.path(), "r1", r1));
  EXPECT_EQ(summary(dir.path(), "impauto", out.string(),
                    "--set " + ratio + "=auto --set name=opt-13b_zero3_dp8_offload-auto"),
            summary(dir.path(), "auto",
                    source_path("scenarios/offload/opt-13b_zero3_dp8_offload-auto.yaml")));
}

/// Writes `text` to DIR/NAME and returns the path.
std::string write(const fs::path& dir, const std::string& name, const std::string& text) {
  std::ofstream(dir / name) << text;
  return (dir / name).string();
}

const char* kShape =
    "--num-layers 4 --hidden-size 1024 --num-attention-heads 16 --seq-length 1024 "
    "--vocab-size 50257 --micro-batch-size 1 --global-batch-size 16";

TEST(ImportMegatron, ShellFeaturesOfLaunchScripts) {
  trainsim::test_support::ScratchDir dir("import_shell");
  const std::string script = write(dir.path(), "run.sh", std::string(R"(#!/bin/bash
# a comment
export NCCL_NVLS_ENABLE=0
TP=${TP:-2}            # default used: TP is not set
NODES=1
GPUS=$(( 4 * 2 ))
DP_ARGS="--use-distributed-optimizer \
         --overlap-grad-reduce"
ARGS=(
    --tensor-model-parallel-size $TP   # trailing comment
    "--recompute-granularity full"
)
ARGS+=(--sequence-parallel)
if [ "$TP" -gt 1 ]; then
    echo "tp $TP"
fi
run="srun -N $NODES --ntasks-per-node=1 python -m torch.distributed.run --nproc-per-node $GPUS \
    pretrain_gpt.py )") + kShape + R"( ${ARGS[@]} $DP_ARGS --lr 1e-4 --no-save-optim"
eval $run 2>&1 | tee log.txt
)");
  const fs::path out = dir.path() / "s.yaml", log = dir.path() / "log";
  ASSERT_EQ(run("import-megatron " + script + " --system dgx-a100-80gb --out " + out.string(),
                log.string()),
            0)
      << slurp(log);
  const std::string yaml = slurp(out);
  for (const char* key : {"nccl_nvls_enable: false", "tensor_model_parallel_size: 2",
                          "recompute_granularity: full", "sequence_parallel: true",
                          "use_distributed_optimizer: true", "overlap_grad_reduce: true",
                          "nodes: 1", "gpus_per_node: 8", "runtime: megatron-core",
                          // 50257 padded to a multiple of 128 x 2 = 256: 197 x 256.
                          "padded_vocab_size: 50432", "#   --no-save-optim: training.save_optim (",
                          "if/for/case blocks"})
    EXPECT_NE(yaml.find(key), std::string::npos) << key << "\n" << yaml;
  EXPECT_EQ(run("simulate " + out.string(), (dir.path() / "sim.log").string()), 0)
      << slurp(dir.path() / "sim.log");
}

TEST(ImportMegatron, ArgumentListForm) {
  trainsim::test_support::ScratchDir dir("import_words");
  const fs::path out = dir.path() / "s.yaml", log = dir.path() / "log";
  ASSERT_EQ(run(std::string("import-megatron --system dgx-h100 --out ") + out.string() +
                    " -- CUDA_DEVICE_MAX_CONNECTIONS=1 torchrun --nnodes=2 --nproc_per_node=8 "
                    "pretrain_gpt.py " + kShape + " --bf16",
                log.string()),
            0)
      << slurp(log);
  const std::string yaml = slurp(out);
  for (const char* key : {"precision: bf16", "nodes: 2", "padded_vocab_size: 50304"})
    EXPECT_NE(yaml.find(key), std::string::npos) << key << "\n" << yaml;
}

/// The refusal of `args`: exit 1 with every piece of `expect` in the message, nothing written.
void refused(const std::string& args, const std::vector<std::string>& expect) {
  trainsim::test_support::ScratchDir dir("import_bad");
  const fs::path out = dir.path() / "out.yaml", log = dir.path() / "log";
  // --out right after the verb: after `--` every word is the command's.
  const std::size_t verb_end = args.find(' ');
  EXPECT_EQ(run(args.substr(0, verb_end) + " --out " + out.string() + args.substr(verb_end),
                log.string()),
            1)
      << args;
  const std::string msg = slurp(log);
  for (const std::string& e : expect) EXPECT_NE(msg.find(e), std::string::npos) << e << "\n" << msg;
  EXPECT_FALSE(fs::exists(out)) << args;
}

TEST(ImportMegatron, BadInputIsRefusedNamingFileArgumentAndValue) {
  trainsim::test_support::ScratchDir dir("import_megatron_bad");
  const std::string typo = write(dir.path(), "typo.sh", std::string("torchrun pretrain_gpt.py ") +
                                                            kShape + " --hiden-size 8\n");
  refused("import-megatron " + typo + " --system dgx-h100 --nodes 1",
          {typo, "'--hiden-size'", "'8'", "did you mean '--hidden-size'"});
  const std::string env = write(dir.path(), "env.sh", std::string("export NCCL_ALGO=Ring\n"
                                                                  "torchrun pretrain_gpt.py ") + kShape + "\n");
  refused("import-megatron " + env + " --system dgx-h100 --nodes 1", {env, "NCCL_ALGO", "'Ring'"});
  const std::string none = write(dir.path(), "none.sh", "echo hello\n");
  refused("import-megatron " + none + " --system dgx-h100", {none, "no pretrain_gpt.py command"});
  const std::string ok = write(dir.path(), "ok.sh", std::string("torchrun pretrain_gpt.py ") + kShape + "\n");
  refused("import-megatron " + ok, {ok, "--system"});
  refused("import-megatron --system dgx-h100 --nodes 1 -- pretrain_gpt.py " + std::string(kShape) +
              " --tensor-model-parallel-size 0",
          {"parallel.tensor_model_parallel_size", "0"});
  refused("import-megatron --system dgx-h100 --nodes 1 -- pretrain_gpt.py " + std::string(kShape) +
              " --optimizer sgd",
          {"'--optimizer'", "'sgd'"});
  const std::string quote = write(dir.path(), "quote.sh", "torchrun pretrain_gpt.py --lr '1e-4\n");
  refused("import-megatron " + quote + " --system dgx-h100 --nodes 1", {quote, "quote"});
  // Hostile nesting: refused with the line, never a crash or a loop.
  const std::string deep = write(dir.path(), "deep.sh",
                                 "X=$((" + std::string(100000, '(') + "1" + std::string(100000, ')') +
                                     "))\ntorchrun pretrain_gpt.py\n");
  refused("import-megatron " + deep + " --system dgx-h100 --nodes 1", {deep + ":1:", "nested deeper"});
  std::string chain = "1";
  for (int i = 0; i < 1000; ++i) chain = "${U:-" + chain + "}";
  const std::string defaults = write(dir.path(), "defaults.sh", "X=" + chain + "\n");
  refused("import-megatron " + defaults + " --system dgx-h100 --nodes 1", {defaults + ":1:", "nested deeper"});
  const std::string loop = write(dir.path(), "loop.sh", "X='eval $X'\neval $X\n");
  refused("import-megatron " + loop + " --system dgx-h100 --nodes 1", {loop + ":2:", "eval nested deeper"});
  // Found by mutating the example script: a '<' inside an array ended in a loop; a value that
  // is not YAML ("[1,") reached the YAML parser's own message.
  const std::string arr = write(dir.path(), "arr.sh", std::string("A=(\n  < --lr 1\n)\n"
                                                                  "torchrun pretrain_gpt.py ") + kShape + " ${A[@]}\n");
  // (as bash reads it: `< --lr` redirects from a file "--lr", the 1 joins the batch size).
  refused("import-megatron " + arr + " --system dgx-h100 --nodes 1",
          {arr, "parallel.global_batch_size", "[16, 1]"});
  refused("import-megatron --system dgx-h100 --nodes 1 -- pretrain_gpt.py " + std::string(kShape) +
              " --tensor-model-parallel-size '[1,'",
          {"parallel.tensor_model_parallel_size", "[1,"});
  refused("import-megatron --system dgx-h100 --nodes 1 -- pretrain_gpt.py --num-layers 4 "
          "--hidden-size 1024 --num-attention-heads 16 --seq-length 1024 --micro-batch-size 1 "
          "--global-batch-size 16",
          {"--vocab-size", "padded_vocab_size"});
}

TEST(ImportDeepSpeed, BadInputIsRefusedNamingFileFieldAndValue) {
  trainsim::test_support::ScratchDir dir("import_deepspeed_bad");
  const std::string sys = " --system dgx-a100-40gb --nodes 1 --set model.num_layers=2"
                          " --set model.hidden_size=1024 --set model.num_attention_heads=16"
                          " --set model.seq_length=1024 --set model.padded_vocab_size=50304";
  const std::string typo = write(dir.path(), "typo.json",
                                 R"({"train_batch_size": 8, "train_micro_batch_size_per_gpu": 1,
                                     "zero_optimization": {"stagee": 3}})");
  refused("import-deepspeed " + typo + sys, {typo, "'zero_optimization.stagee'", "3", "did you mean 'stage'"});
  const std::string param = write(dir.path(), "param.json",
                                  R"({"train_batch_size": 8, "zero_optimization": {"stage": 3,
                                      "offload_param": {"device": "cpu"}}})");
  refused("import-deepspeed " + param + sys, {param, "offload_param.device", "cpu"});
  const std::string both = write(dir.path(), "both.json",
                                 R"({"train_batch_size": 8, "fp16": {"enabled": true}, "bf16": {"enabled": true}})");
  refused("import-deepspeed " + both + sys, {both, "fp16.enabled", "bf16.enabled"});
  const std::string autov = write(dir.path(), "auto.json", R"({"train_batch_size": "auto"})");
  refused("import-deepspeed " + autov + sys, {autov, "train_batch_size", "auto"});
  const std::string nobatch = write(dir.path(), "nobatch.json", R"({"train_micro_batch_size_per_gpu": 2})");
  refused("import-deepspeed " + nobatch + sys, {nobatch, "train_batch_size"});
  const std::string ratio = write(dir.path(), "ratio.json",
                                  R"({"train_batch_size": 8, "train_micro_batch_size_per_gpu": 1,
                                      "zero_optimization": {"stage": 3, "offload_optimizer":
                                      {"device": "cpu", "ratio": 1.5}}})");
  refused("import-deepspeed " + ratio + sys, {"offload_optimizer.ratio", "1.5"});
  refused("import-deepspeed " + (dir.path() / "missing.json").string() + sys, {"missing.json"});
}

}  // namespace
