// End-to-end tests of the `trainsim` command line (docs/cli.md): the
// built binary (TRAINSIM_CLI) run on the small scenarios, its exit codes, stdout and files.
#include <gtest/gtest.h>

#include "tests/e2e/cli_helpers.h"
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <optional>
#include <string>
#include <vector>
#include "tests/support/paths.h"

using trainsim::test_support::source_path;

namespace {

using trainsim_e2e::slurp;

namespace fs = std::filesystem;
using nlohmann::json;

struct Result {
  int rc = -1;
  std::string out, err;
};

class Cli : public ::testing::Test {
 protected:
  void SetUp() override {
    scratch_.emplace("trainsim_e2e");
    dir_ = scratch_->path();
  }
  void TearDown() override { scratch_.reset(); }

  // Runs `trainsim ARGS` (ARGS already shell-quoted where needed).
  Result run(const std::string& args) const {
    const fs::path out = dir_ / "stdout.txt", err = dir_ / "stderr.txt";
    const std::string cmd = std::string("'") + TRAINSIM_CLI + "' " + args + " > '" + out.string() +
                            "' 2> '" + err.string() + "' < /dev/null";
    const int status = std::system(cmd.c_str());
    Result r;
    r.rc = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    r.out = slurp(out);
    r.err = slurp(err);
    return r;
  }
  fs::path file(const std::string& name) const { return dir_ / name; }

  std::optional<trainsim::test_support::ScratchDir> scratch_;
  fs::path dir_;
};


std::vector<std::string> small_scenarios() {
  std::vector<std::string> out;
  for (const auto& e : fs::directory_iterator(source_path("scenarios/small"))) {
    if (e.path().extension() != ".yaml") continue;
    // Scenarios of the `local` system (this machine) need a measured profile from `trainsim
    // calibrate`: tests/e2e/test_validate_cli.cpp covers them.
    std::ifstream f(e.path());
    std::stringstream text;
    text << f.rdbuf();
    if (text.str().find("system: local") != std::string::npos) continue;
    out.push_back(e.path().string());
  }
  std::sort(out.begin(), out.end());
  return out;
}

const std::string kTiny = "scenarios/small/gpt-tiny_tp2_pp2_dp2.yaml";

TEST_F(Cli, SimulateJsonOnStdoutHasTheContractKeys) {
  const auto scenarios = small_scenarios();
  ASSERT_FALSE(scenarios.empty()) << "no scenarios/small/*.yaml";
  for (const std::string& sc : scenarios) {
    SCOPED_TRACE(sc);
    const Result r = run("simulate '" + sc + "' --format json");
    ASSERT_EQ(r.rc, 0) << r.err;
    json s;
    ASSERT_NO_THROW(s = json::parse(r.out)) << "stdout is not only the summary:\n" << r.out;
    for (const char* key : {"iteration_time_s",
                            "tokens_per_s",
                            "model_tflops_per_gpu",
                            "hardware_tflops_per_gpu",
                            "mfu",
                            "peak_memory_bytes",
                            "per_rank",
                            "breakdown_s",
                            "oom",
                            "world_size",
                            "schedule",
                            "microbatches",
                            "folded",
                            "fold_factor",
                            "simulated_ranks",
                            "tasks",
                            "executor",
                            "calibration",
                            "trace_ranks",
                            "breakdown_note"})
      EXPECT_TRUE(s.contains(key)) << key;
    const double it = s.at("iteration_time_s").get<double>();
    EXPECT_GT(it, 0);
    double sum = 0;
    for (const char* k :
         {"compute", "tp_comm", "pp_comm", "dp_comm", "pipeline_bubble", "optimizer", "offload"})
      sum += s.at("breakdown_s").at(k).get<double>();
    // With the host timeline (host_model on, the default) the eighth component.
    ASSERT_TRUE(s.at("breakdown_s").contains("host_bound"));
    sum += s.at("breakdown_s").at("host_bound").get<double>();
    EXPECT_NEAR(sum, it, 1e-9 * it);
    EXPECT_EQ(s.at("per_rank").size(), s.at("world_size").get<std::size_t>());
    std::int64_t max_peak = 0;
    for (const json& pr : s.at("per_rank"))
      max_peak = std::max(max_peak, pr.at("peak_memory_bytes").get<std::int64_t>());
    EXPECT_EQ(s.at("peak_memory_bytes").get<std::int64_t>(), max_peak);
    EXPECT_NEAR(s.at("mfu").get<double>(), s.at("model_tflops_per_gpu").get<double>() / 312.0,
                1e-12);
    EXPECT_FALSE(s.at("oom").get<bool>());
  }
}

// `trainsim import-hf CONFIG.json` prints a scenario's model section from a Hugging Face
// config: each key checked here against the config's own field (Megatron's names for HF's),
// the section then simulates as part of a scenario; a refused config prints nothing on stdout.
TEST_F(Cli, ImportHfPrintsTheModelSectionOfAConfigOrNothing) {
  const std::string cfg_path = source_path("scenarios/h100/hf/llama3-8b.config.json");
  const json cfg = json::parse(slurp(cfg_path));
  const Result r = run("import-hf '" + cfg_path + "'");
  ASSERT_EQ(r.rc, 0) << r.err;
  auto line = [](const std::string& key, const json& v) {
    return "\n  " + key + ": " + std::to_string(v.get<long long>()) + "\n";
  };
  EXPECT_NE(r.out.find("\nmodel:\n"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find(line("num_layers", cfg["num_hidden_layers"])), std::string::npos) << r.out;
  EXPECT_NE(r.out.find(line("hidden_size", cfg["hidden_size"])), std::string::npos) << r.out;
  EXPECT_NE(r.out.find(line("num_attention_heads", cfg["num_attention_heads"])), std::string::npos);
  EXPECT_NE(r.out.find(line("num_query_groups", cfg["num_key_value_heads"])), std::string::npos);
  EXPECT_NE(r.out.find(line("ffn_hidden_size", cfg["intermediate_size"])), std::string::npos);
  const long long vocab = cfg["vocab_size"].get<long long>();
  EXPECT_NE(r.out.find(line("padded_vocab_size", json((vocab + 127) / 128 * 128))),
            std::string::npos);
  EXPECT_NE(r.out.find("\n  swiglu: true\n"), std::string::npos);  // hidden_act silu
  // The section is a scenario's model: with parallel and cluster sections it simulates.
  {
    std::ofstream f(file("imported.yaml"));
    f << "name: imported\nruntime: megatron-core\n" << r.out.substr(r.out.find("model:\n"))
      << "  seq_length: 2048\n"
      << "parallel: {tensor_model_parallel_size: 8, micro_batch_size: 1, global_batch_size: 8,\n"
      << "           precision: bf16}\ncluster: {system: dgx-h100, nodes: 1}\n";
  }
  const Result sim = run("simulate '" + file("imported.yaml").string() + "' --format json");
  ASSERT_EQ(sim.rc, 0) << sim.err;
  EXPECT_GT(json::parse(sim.out).at("iteration_time_s").get<double>(), 0);
  // A config that cannot be read: the error alone, nothing on stdout for a script to keep.
  const Result bad = run("import-hf '" + file("missing.config.json").string() + "'");
  EXPECT_EQ(bad.rc, 1);
  EXPECT_EQ(bad.out, "");
  EXPECT_NE(bad.err.find("cannot open the Hugging Face config"), std::string::npos) << bad.err;
}

// A DeepSeek-V3 config.json with its one multi-token-prediction layer: imported as Megatron-
// Bridge's bridge maps it (model.mtp_num_layers 1 on stdout); the imported latent-attention
// model simulates on 8 GPUs with and without it, and its model FLOPs per iteration are
// Megatron-Core's MLA count (training.py num_floating_point_operations) written out here.
TEST_F(Cli, ImportHfDeepSeekV3ImportsItsMtpLayerAndSimulates) {
  json cfg = {{"architectures", {"DeepseekV3ForCausalLM"}}, {"num_hidden_layers", 4},
              {"hidden_size", 7168}, {"num_attention_heads", 128}, {"q_lora_rank", 1536},
              {"kv_lora_rank", 512}, {"qk_nope_head_dim", 128}, {"qk_rope_head_dim", 64},
              {"v_head_dim", 128}, {"intermediate_size", 18432},
              {"moe_intermediate_size", 2048}, {"n_routed_experts", 256},
              {"n_shared_experts", 1}, {"num_experts_per_tok", 8},
              {"first_k_dense_replace", 1}, {"hidden_act", "silu"}, {"rms_norm_eps", 1e-6},
              {"rope_theta", 10000}, {"tie_word_embeddings", false},
              {"num_nextn_predict_layers", 1}, {"vocab_size", 129280}};
  {
    std::ofstream f(file("dsv3.json"));
    f << cfg.dump();
  }
  const Result imported = run("import-hf '" + file("dsv3.json").string() + "'");
  ASSERT_EQ(imported.rc, 0) << imported.err;
  EXPECT_NE(imported.out.find("mtp_num_layers: 1"), std::string::npos) << imported.out;
  // training.py num_floating_point_operations, MLA branch, per token: 6 x (attention per
  // layer + MLP (1 dense layer of 18432, 3 MoE layers of 8 routed + 1 shared expert of
  // 2048, SwiGLU) + logits); the MTP layer adds one more MoE layer, its eh_proj and norms
  // (3h + 2h^2) and the logits once more.
  const double h = 7168, s = 4096, a = 128, v = 129280;
  const double attn = 1536 * (h + a * 192 + 1) + 512 * (h + a * 256 + 1) + h * 64 +
                      a * 128 * h + (a * 192 + a * 128) * s / 2;
  const double moe_layer = attn + 3 * h * 9 * 2048;
  const double base = 4 * attn + 3 * h * 18432 + 3 * (3 * h * 9 * 2048) + h * v;
  for (int nextn : {0, 1}) {
    cfg["num_nextn_predict_layers"] = nextn;
    {
      std::ofstream f(file("dsv3.json"));
      f << cfg.dump();
      std::ofstream y(file("dsv3.yaml"));
      y << "name: dsv3\nruntime: megatron-core\nmodel: {hf_config: dsv3.json, seq_length: 4096}\n"
        << "parallel: {tensor_model_parallel_size: 2, sequence_parallel: true,\n"
        << "  expert_model_parallel_size: 4, expert_tensor_parallel_size: 1, micro_batch_size: 1,\n"
        << "  global_batch_size: 8, precision: bf16}\ncluster: {system: dgx-h100, nodes: 1}\n";
    }
    const Result sim = run("simulate '" + file("dsv3.yaml").string() + "' --format json");
    ASSERT_EQ(sim.rc, 0) << sim.err;
    const json out = json::parse(sim.out);
    EXPECT_GT(out.at("iteration_time_s").get<double>(), 0);
    const double per_token =
        6 * (base + nextn * (moe_layer + 3 * h + 2 * h * h + h * v));
    const double model_flops = per_token * 8 * 4096;
    EXPECT_NEAR(out.at("model_tflops_per_gpu").get<double>() * 1e12 * 8 *
                    out.at("iteration_time_s").get<double>() / model_flops,
                1.0, 1e-3) << "num_nextn_predict_layers " << nextn;
  }
}

TEST_F(Cli, DefaultOutputIsTheTextReport) {
  const Result r = run("simulate '" + source_path(kTiny) + "'");
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_NE(r.out.find("iteration time"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("pipeline_bubble"), std::string::npos) << r.out;
}

TEST_F(Cli, RunsAreDeterministic) {
  auto once = [&](const std::string& tag) {
    const Result r =
        run("simulate '" + source_path(kTiny) + "' --format json --json '" +
            file(tag + ".json").string() + "' --trace '" + file(tag + ".trace.json").string() +
            "' --memory-csv '" + file(tag + ".csv").string() + "'");
    EXPECT_EQ(r.rc, 0) << r.err;
    return r;
  };
  const Result a = once("a"), b = once("b");
  EXPECT_EQ(slurp(file("a.trace.json")), slurp(file("b.trace.json")));
  EXPECT_EQ(slurp(file("a.csv")), slurp(file("b.csv")));
  // The summaries agree byte for byte (no wall-clock figure in them).
  EXPECT_EQ(slurp(file("a.json")), slurp(file("b.json")));
  EXPECT_EQ(a.out, b.out);
  EXPECT_EQ(json::parse(a.out), json::parse(slurp(file("a.json"))));
  EXPECT_FALSE(slurp(file("a.trace.json")).empty());
}

TEST_F(Cli, TraceCoversTheChosenRanks) {
  const Result r = run("simulate '" + source_path(kTiny) + "' --trace '" + file("t.json").string() +
                       "' --trace-ranks 1,4-5 --json '" + file("s.json").string() + "'");
  ASSERT_EQ(r.rc, 0) << r.err;
  const json t = json::parse(slurp(file("t.json")));
  std::set<std::int64_t> pids, process_named, tasks;
  std::size_t memory_counters = 0, link_counters = 0;
  for (const json& e : t.at("traceEvents")) {
    pids.insert(e.at("pid").get<std::int64_t>());
    if (e.at("ph") == "M" && e.at("name") == "process_name")
      process_named.insert(e.at("pid").get<std::int64_t>());
    if (e.at("ph") == "X") {
      tasks.insert(e.at("args").at("task").get<std::int64_t>());
      EXPECT_GE(e.at("dur").get<double>(), 0);
    }
    if (e.at("ph") == "C" && e.at("name") == "memory") ++memory_counters;
    if (e.at("ph") == "C" && e.at("name") == "link bytes/s") ++link_counters;
  }
  // Ranks 1, 4, 5 and the host of node 0 (8 GPUs per node: pid world_size + 0 = 8).
  EXPECT_EQ(pids, (std::set<std::int64_t>{1, 4, 5, 8}));
  EXPECT_EQ(process_named, pids);
  EXPECT_GT(tasks.size(), 10u);
  EXPECT_GT(memory_counters, 3u);
  EXPECT_GT(link_counters, 3u);
  const json s = json::parse(slurp(file("s.json")));
  EXPECT_EQ(s.at("trace_ranks"), "1,4-5");
}

TEST_F(Cli, MemoryCsvHasOneColumnPerCategory) {
  const Result r =
      run("simulate '" + source_path(kTiny) + "' --memory-csv '" + file("m.csv").string() + "'");
  ASSERT_EQ(r.rc, 0) << r.err;
  std::istringstream csv(slurp(file("m.csv")));
  std::string header, line;
  std::getline(csv, header);
  EXPECT_EQ(header,
            "time_s,device,id,parameters,gradients,optimizer_states,activations,comm_buffers,"
            "offload_buffers,framework,total");
  std::size_t rows = 0;
  while (std::getline(csv, line)) {
    ++rows;
    EXPECT_EQ(std::count(line.begin(), line.end(), ','), 10) << line;
  }
  EXPECT_GT(rows, 8u);
}

void expect_input_error(const Result& r, const std::vector<std::string>& mentions) {
  EXPECT_EQ(r.rc, 1) << r.err;
  EXPECT_TRUE(r.out.empty()) << "stdout: " << r.out;
  for (const std::string& m : mentions) EXPECT_NE(r.err.find(m), std::string::npos) << r.err;
}

TEST_F(Cli, BadInputExitsOneWithFileFieldAndValue) {
  expect_input_error(run("simulate '" + file("missing.yaml").string() + "'"), {"missing.yaml"});
  expect_input_error(
      run("simulate '" + source_path(kTiny) + "' --set parallel.tensor_model_parallel_size=3"),
      {"gpt-tiny_tp2_pp2_dp2.yaml", "tensor_model_parallel_size", "3"});
  expect_input_error(run("simulate '" + source_path(kTiny) + "' --set parallel.no_such_key=1"),
                     {"no_such_key"});
  expect_input_error(run("simulate '" + source_path(kTiny) + "' --set parallel.micro_batch_size"),
                     {"--set", "parallel.micro_batch_size"});
  expect_input_error(run("simulate '" + source_path(kTiny) + "' --trace-ranks 3-99"),
                     {"--trace-ranks", "3-99"});
  expect_input_error(
      run("simulate '" + source_path(kTiny) + "' --calibration '" + file("nope.json").string() + "'"),
      {"nope.json"});
  expect_input_error(run("simulate '" + source_path(kTiny) + "' --json /nonexistent-dir/s.json"),
                     {"--json", "/nonexistent-dir/s.json"});
  std::ofstream(file("broken.yaml")) << "name: x\nmodel: [1, 2\n";
  expect_input_error(run("simulate '" + file("broken.yaml").string() + "'"), {"broken.yaml"});
}

TEST_F(Cli, CommandLineErrorsExitOne) {
  expect_input_error(run(""), {});
  expect_input_error(run("frobnicate"), {});
  expect_input_error(run("simulate"), {"scenario"});
  expect_input_error(run("simulate '" + source_path(kTiny) + "' --format xml"), {"--format"});
  expect_input_error(run("replay '" + source_path(kTiny) + "' --device tpu"), {"--device"});
  expect_input_error(run("replay '" + source_path(kTiny) + "' --rank -1"), {"--rank"});
  expect_input_error(run("validate"), {"scenario"});
  expect_input_error(run("calibrate --device tpu"), {"--device"});
  const Result help = run("simulate --help");
  EXPECT_EQ(help.rc, 0);
  for (const char* flag :
       {"--set", "--calibration", "--trace", "--trace-ranks", "--json", "--format", "--memory-csv"})
    EXPECT_NE(help.out.find(flag), std::string::npos) << flag;
  for (const char* verb : {"replay", "validate", "calibrate"}) {
    const Result h = run(std::string(verb) + " --help");
    EXPECT_EQ(h.rc, 0) << verb;
    EXPECT_NE(h.out.find("--device"), std::string::npos) << verb;
  }
}

}  // namespace
