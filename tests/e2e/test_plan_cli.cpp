// `trainsim plan` end to end: bad plan settings exit 1 naming the field and the
// value; a small search writes its ranked table, JSON, CSV and one scenario per
// confirmed candidate, and each written scenario simulates as is to the
// tokens/s the planner reported; shards merge into the unsharded ranking.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <vector>

#include "tests/e2e/cli_helpers.h"
#include "tests/support/paths.h"
#include "tests/support/scenario_yaml.h"

namespace {

using trainsim::test_support::ScratchDir;
using trainsim_e2e::run;
using trainsim_e2e::slurp;

/// A small model on one DGX-A100 node with the plan section `plan`.
std::string scenario(const std::string& plan) {
  return trainsim::test_support::gpt_cli_scenario_yaml(
             "plan_e2e", {8, 512, 8, 256, 1024},
             "{micro_batch_size: 1, global_batch_size: 32, precision: fp16}",
             "{system: dgx-a100-80gb, nodes: 1}") +
         "plan: " + plan + "\n";
}

const std::string kSpace =
    "{tensor_model_parallel_size: [1, 2], "
    "pipeline_model_parallel_size: [1, 2], "
    "micro_batch_size: [1, 2], recompute_granularity: "
    "[none], zero_stage: [0], top_k: 4}";

TEST(PlanCli, BadPlanSettingsNameTheFieldAndTheValue) {
  ScratchDir dir("plan_cli");
  struct Case {
    std::string plan, field, value;
  };
  const Case cases[] = {
      {"{micro_batch_size: [0]}", "plan.micro_batch_size", "'0'"},
      {"{memory_headroom: 1.5}", "plan.memory_headroom", "'1.5'"},
      {"{recompute_granularity: [sometimes]}", "plan.recompute_granularity", "'sometimes'"},
      {"{zero_stage: [4]}", "plan.zero_stage", "'4'"},
      {"{tensor_model_parallel_size: []}", "plan.tensor_model_parallel_size", "(a list)"},
      {"{pipeline_parallel: 2}", "plan.pipeline_parallel", "'2'"},
      {"{max_gpus: 12}", "plan.max_gpus", "'12'"}};
  for (const Case& c : cases) {
    const std::string path = dir.write("s.yaml", scenario(c.plan));
    const std::string log = dir.file("log").string();
    EXPECT_EQ(run("plan " + path, log), 1) << c.plan;
    const std::string out = slurp(log);
    EXPECT_NE(out.find(path), std::string::npos) << out;
    EXPECT_NE(out.find("field '" + c.field + "' = " + c.value), std::string::npos) << out;
  }
  const std::string path = dir.write("s.yaml", scenario(kSpace));
  EXPECT_EQ(run("plan " + path + " --shard 2/2", dir.file("log").string()), 1);
  EXPECT_NE(slurp(dir.file("log")).find("--shard '2/2'"), std::string::npos);
}

TEST(PlanCli, RanksWritesOutputsAndItsScenariosSimulateAsReported) {
  ScratchDir dir("plan_cli");
  const std::string path = dir.write("s.yaml", scenario(kSpace));
  const auto out = dir.file("out");
  ASSERT_EQ(run("plan " + path + " --jobs 2 --json " + dir.file("r.json").string() + " --csv " +
                    dir.file("r.csv").string() + " --out " + out.string(),
                dir.file("log").string()),
            0)
      << slurp(dir.file("log"));
  const auto j = nlohmann::json::parse(slurp(dir.file("r.json")));
  // 2 TP x 2 PP x 2 micro batches, all valid on 8 GPUs with global batch 32.
  EXPECT_EQ(j.at("enumerated"), 8);
  std::vector<double> tps;
  for (const auto& c : j.at("candidates"))
    if (c.at("simulated")) tps.push_back(c.at("tokens_per_s"));
  ASSERT_EQ(tps.size(), 4u);  // top_k
  for (std::size_t i = 1; i < tps.size(); ++i) EXPECT_GE(tps[i - 1], tps[i]);
  EXPECT_EQ(j.at("rejected").at("below_estimate_cut"), 4);
  // Each written scenario is a plain scenario: simulate gives the reported
  // tokens/s.
  int files = 0;
  for (const auto& entry : std::filesystem::directory_iterator(out)) {
    ++files;
    const std::string name = entry.path().filename().string();
    const int rank = std::stoi(name.substr(0, 3));
    ASSERT_EQ(
        run("simulate " + entry.path().string() + " --format json", dir.file("sim.json").string()),
        0)
        << slurp(dir.file("sim.json"));
    const auto s = nlohmann::json::parse(slurp(dir.file("sim.json")));
    EXPECT_NEAR(s.at("tokens_per_s").get<double>(), tps[rank - 1], 1e-6 * tps[rank - 1]) << name;
  }
  EXPECT_EQ(files, 4);
  EXPECT_NE(slurp(dir.file("r.csv")).find("rank,index,layout,tokens_per_s"), std::string::npos);
}

TEST(PlanCli, ShardsMergeIntoTheUnshardedRanking) {
  ScratchDir dir("plan_cli");
  const std::string path = dir.write("s.yaml", scenario(kSpace));
  const std::string whole = dir.file("whole.json").string();
  ASSERT_EQ(run("plan " + path + " --jobs 1 --json " + whole, dir.file("log").string()), 0);
  for (int i = 0; i < 2; ++i)
    ASSERT_EQ(run("plan " + path + " --jobs 1 --shard " + std::to_string(i) + "/2 --json " +
                      dir.file("s" + std::to_string(i) + ".json").string(),
                  dir.file("log").string()),
              0);
  const std::string merged = dir.file("merged.json").string();
  ASSERT_EQ(run("plan --merge " + dir.file("s0.json").string() + " " +
                    dir.file("s1.json").string() + " --json " + merged,
                dir.file("log").string()),
            0)
      << slurp(dir.file("log"));
  const auto a = nlohmann::json::parse(slurp(whole)), b = nlohmann::json::parse(slurp(merged));
  EXPECT_EQ(a.at("enumerated"), b.at("enumerated"));
  // The unsharded top candidate is the merged top candidate.
  EXPECT_EQ(a.at("candidates").at(0).at("layout"), b.at("candidates").at(0).at("layout"));
  EXPECT_EQ(a.at("candidates").at(0).at("tokens_per_s"),
            b.at("candidates").at(0).at("tokens_per_s"));
}

// A space where some layouts are refused says why, by reason: counted by hand, each reason with
// the first candidate it refused; the shards' reasons merge into the unsharded ones.
TEST(PlanCli, InvalidCandidatesAreCountedByReasonAndMerged) {
  ScratchDir dir("plan_cli_invalid");
  // 3 TP x 2 PP x 3 micro batches = 18 candidates on 8 GPUs, global batch 32, 8 heads.
  // TP 3 (indices 12-17) divides neither the heads nor the GPUs: 6. Micro batch 3 never divides
  // 32 / DP (TP 1-2, indices 2, 5, 8, 11): 4. The other 8 are valid.
  const std::string path = dir.write(
      "s.yaml", scenario("{tensor_model_parallel_size: [1, 2, 3], "
                         "pipeline_model_parallel_size: [1, 2], micro_batch_size: [1, 2, 3], "
                         "recompute_granularity: [none], zero_stage: [0], top_k: 2}"));
  const std::string log = dir.file("log").string(), whole = dir.file("whole.json").string();
  ASSERT_EQ(run("plan " + path + " --jobs 2 --json " + whole, log), 0) << slurp(log);
  const std::string text = slurp(log);
  EXPECT_NE(text.find("invalid 10;"), std::string::npos) << text;
  EXPECT_NE(text.find("invalid, by reason"), std::string::npos) << text;
  EXPECT_NE(text.find("     6  tp3 pp1"), std::string::npos) << text;
  EXPECT_NE(text.find("     4  tp1 pp1 dp8 mb3 norecomp: parallel.global_batch_size (32) is not "
                      "divisible"),
            std::string::npos)
      << text;
  EXPECT_EQ(text.find(path + ": parallel"), std::string::npos) << "the path repeated:\n" << text;
  const auto a = nlohmann::json::parse(slurp(whole));
  ASSERT_EQ(a.at("rejected").at("invalid"), 10);
  const auto& reasons = a.at("invalid_reasons");
  ASSERT_EQ(reasons.size(), 2u) << reasons.dump(1);
  EXPECT_EQ(reasons[0].at("count"), 6);
  EXPECT_EQ(reasons[0].at("example_index"), 12);
  EXPECT_EQ(reasons[1].at("count"), 4);
  EXPECT_EQ(reasons[1].at("example_index"), 2);
  EXPECT_EQ(reasons[1].at("example_layout"), "tp1 pp1 dp8 mb3 norecomp");
  for (int i = 0; i < 2; ++i)
    ASSERT_EQ(run("plan " + path + " --jobs 1 --shard " + std::to_string(i) + "/2 --json " +
                      dir.file("s" + std::to_string(i) + ".json").string(), log),
              0);
  const std::string merged = dir.file("merged.json").string();
  ASSERT_EQ(run("plan --merge " + dir.file("s1.json").string() + " " +
                    dir.file("s0.json").string() + " --json " + merged, log),
            0)
      << slurp(log);
  EXPECT_EQ(nlohmann::json::parse(slurp(merged)).at("invalid_reasons"), reasons);
  // Reasons that do not add up to the invalid count are refused.
  auto bad = nlohmann::json::parse(slurp(dir.file("s0.json")));
  bad["invalid_reasons"][0]["count"] = bad["invalid_reasons"][0]["count"].get<int>() + 1;
  EXPECT_EQ(run("plan --merge " + dir.write("bad.json", bad.dump()), log), 1);
  EXPECT_NE(slurp(log).find("field 'invalid_reasons' counts"), std::string::npos) << slurp(log);
}

// A written candidate is the scenario the planner simulated: with the user's --set overrides
// in it (they were dropped), and its model.hf_config found from the output folder (it is
// relative to the planned scenario's folder).
TEST(PlanCli, WrittenScenariosKeepSetOverridesAndTheirHfConfig) {
  ScratchDir dir("plan_cli_written");
  const nlohmann::json cfg = {{"architectures", {"LlamaForCausalLM"}},
                              {"hidden_act", "silu"},
                              {"hidden_size", 512},
                              {"intermediate_size", 1024},
                              {"num_attention_heads", 8},
                              {"num_hidden_layers", 8},
                              {"num_key_value_heads", 8},
                              {"tie_word_embeddings", false},
                              {"vocab_size", 1024}};
  std::filesystem::create_directories(dir.file("in"));
  dir.write("in/config.json", cfg.dump());
  const std::string path = dir.write(
      "in/s.yaml",
      "name: plan_hf\nruntime: megatron-core\nmodel: {hf_config: config.json, seq_length: 256}\n"
      "parallel: {micro_batch_size: 1, global_batch_size: 32, precision: bf16}\n"
      "cluster: {system: dgx-h100, nodes: 1}\nplan: " + kSpace + "\n");
  const auto out = dir.file("out");
  const std::string log = dir.file("log").string();
  ASSERT_EQ(run("plan " + path + " --jobs 2 --set model.num_layers=4 --json " +
                    dir.file("r.json").string() + " --out " + out.string(), log), 0)
      << slurp(log);
  const auto j = nlohmann::json::parse(slurp(dir.file("r.json")));
  std::vector<double> tps;
  for (const auto& c : j.at("candidates"))
    if (c.at("simulated")) tps.push_back(c.at("tokens_per_s"));
  int files = 0;
  std::set<std::string> names;
  for (const auto& entry : std::filesystem::directory_iterator(out)) {
    ++files;
    const std::string name = entry.path().filename().string();
    const std::string text = slurp(entry.path());
    EXPECT_NE(text.find("--set model.num_layers=4"), std::string::npos) << text;
    EXPECT_NE(text.find("num_layers: 4"), std::string::npos) << text;
    ASSERT_EQ(run("simulate " + entry.path().string() + " --format json",
                  dir.file("sim.json").string()), 0) << slurp(dir.file("sim.json"));
    const auto sim = nlohmann::json::parse(slurp(dir.file("sim.json")));
    const double want = tps.at(std::size_t(std::stoi(name.substr(0, 3)) - 1));
    EXPECT_NEAR(sim.at("tokens_per_s").get<double>(), want, 1e-6 * want) << name;
    // Each file its own name: the scenario's, then the file's rank and layout (issue 35).
    EXPECT_EQ(sim.at("name").get<std::string>(),
              "plan_hf_" + name.substr(0, name.size() - std::string(".yaml").size()));
    names.insert(sim.at("name").get<std::string>());
  }
  EXPECT_EQ(files, 4);
  EXPECT_EQ(names.size(), 4u);
}

// A merge ranks the shards of one space once each: shards record their scenario and part, and
// what cannot be one space's ranking is refused naming the files; a missing part is warned of.
TEST(PlanCli, MergeRefusesShardsThatAreNotOneSpaceOnce) {
  ScratchDir dir("plan_cli_merge");
  const std::string path = dir.write("s.yaml", scenario(kSpace));
  const std::string log = dir.file("log").string();
  auto shard = [&](int i, int n) {
    return dir.file("s" + std::to_string(i) + "of" + std::to_string(n) + ".json").string();
  };
  for (int i = 0; i < 3; ++i)
    ASSERT_EQ(run("plan " + path + " --jobs 1 --shard " + std::to_string(i) + "/3 --json " +
                      shard(i, 3), log), 0) << slurp(log);
  const auto s0 = nlohmann::json::parse(slurp(shard(0, 3)));
  EXPECT_EQ(s0.at("scenario"), "plan_e2e");
  EXPECT_EQ(s0.at("shard"), "0/3");
  EXPECT_EQ(s0.at("interrupted"), false);
  auto refused = [&](const std::string& args, const std::vector<std::string>& needles) {
    EXPECT_EQ(run("plan --merge " + args, log), 1) << args;
    const std::string out = slurp(log);
    for (const auto& n : needles) EXPECT_NE(out.find(n), std::string::npos) << n << "\n" << out;
    EXPECT_EQ(out.find("json.exception"), std::string::npos) << out;
  };
  // The same shard twice.
  refused(shard(0, 3) + " " + shard(0, 3), {"shard 0/3 again"});
  // A shard of another split of the space.
  ASSERT_EQ(run("plan " + path + " --jobs 1 --shard 1/2 --json " + shard(1, 2), log), 0);
  refused(shard(0, 3) + " " + shard(1, 2), {shard(1, 2), "'shard' = \"1/2\"", "of 3"});
  // A shard of another scenario's space.
  const std::string other = dir.write("o.yaml", "name: other\n" + scenario(kSpace).substr(15));
  const std::string o1 = dir.file("o1.json").string();
  ASSERT_EQ(run("plan " + other + " --jobs 1 --shard 1/3 --json " + o1, log), 0);
  refused(shard(0, 3) + " " + o1, {"another space", "'other'", "'plan_e2e'"});
  // A field out of its range names the candidate and the value.
  nlohmann::json bad = s0;
  bad["candidates"][0]["mfu"] = 1.5;
  const std::string bad_path = dir.write("bad.json", bad.dump());
  refused(bad_path, {"bad.json", "candidates[0].mfu", "1.5", "[0, 1]"});
  bad = s0;
  bad["candidates"][0]["index"] = -1;
  refused(dir.write("neg.json", bad.dump()), {"neg.json", "candidates[0].index", "-1"});
  bad = s0;
  bad["candidates"][0]["estimate"]["rejection"] = "maybe";
  refused(dir.write("rej.json", bad.dump()), {"candidates[0].estimate.rejection", "maybe"});
  bad = s0;  // shard 0/3 holds the candidates whose index is a multiple of 3
  bad["candidates"][0]["index"] = bad["candidates"][0]["index"].get<int>() + 1;
  refused(dir.write("part.json", bad.dump()),
          {"candidates[0].index", "not a candidate of shard 0/3"});
  bad = s0;
  ASSERT_GE(bad["candidates"].size(), 2u);
  bad["candidates"][1]["index"] = bad["candidates"][0]["index"];
  refused(dir.write("twice.json", bad.dump()), {"candidates[1].index", "a second candidate"});
  bad = s0;
  bad["plan_version"] = 2;
  refused(dir.write("v2.json", bad.dump()), {"plan_version", "2", "version 1"});
  // --out and --shard need a scenario, which shards do not carry.
  refused(shard(0, 3) + " --out " + dir.file("out").string(), {"--out"});
  refused(shard(0, 3) + " --shard 0/3", {"--shard '0/3'"});
  // Two of three parts: ranked, with a warning naming the missing part.
  EXPECT_EQ(run("plan --merge " + shard(0, 3) + " " + shard(2, 3), log), 0);
  EXPECT_NE(slurp(log).find("shards missing (1/3)"), std::string::npos) << slurp(log);
  // All three: no warning.
  EXPECT_EQ(run("plan --merge " + shard(0, 3) + " " + shard(1, 3) + " " + shard(2, 3), log), 0);
  EXPECT_EQ(slurp(log).find("warning"), std::string::npos) << slurp(log);
}

// A worker that dies (the kernel's OOM killer, a crash) takes its candidates with it: the plan
// stops with an error naming it rather than rank part of the space as if it were all.
TEST(PlanCli, AWorkerKilledStopsThePlanWithAnError) {
  ScratchDir dir("plan_cli_kill");
  const std::string log = dir.file("log").string();
  const pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    const int fd = ::open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    dup2(fd, 1);
    dup2(fd, 2);
    const std::string space = trainsim::test_support::source_path("bench/plan/gpt-1t_3072_a100.yaml");
    execl(TRAINSIM_CLI, TRAINSIM_CLI, "plan", space.c_str(), "--jobs", "2", (char*)nullptr);
    _exit(127);
  }
  // Its workers: the processes whose parent is the plan (the GPT-1T estimate stage runs for tens
  // of seconds on 2 cores, so they are there).
  auto children = [&] {
    std::vector<pid_t> out;
    for (const auto& e : std::filesystem::directory_iterator("/proc")) {
      const std::string name = e.path().filename().string();
      if (name.find_first_not_of("0123456789") != std::string::npos) continue;
      std::ifstream stat(e.path() / "stat");
      std::string text((std::istreambuf_iterator<char>(stat)), std::istreambuf_iterator<char>());
      const std::size_t close_paren = text.rfind(')');
      if (close_paren == std::string::npos) continue;
      std::istringstream rest(text.substr(close_paren + 2));
      char state = 0;
      long ppid = 0;
      rest >> state >> ppid;
      if (ppid == long(pid)) out.push_back(pid_t(std::stol(name)));
    }
    return out;
  };
  std::vector<pid_t> workers;
  for (int tries = 0; tries < 300 && workers.size() < 2; ++tries) {
    usleep(20000);
    workers = children();
  }
  ASSERT_EQ(workers.size(), 2u) << slurp(log);
  kill(workers[0], SIGKILL);
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 1) << slurp(log);
  const std::string out = slurp(log);
  EXPECT_NE(out.find("killed by signal 9"), std::string::npos) << out;
  EXPECT_NE(out.find("no ranking of part of the space"), std::string::npos) << out;
  EXPECT_EQ(out.find("rank layout"), std::string::npos) << out;
  EXPECT_TRUE(children().empty());  // the other worker was stopped too
}

// The planner models every candidate on the platform simulate would: a `local` system needs
// --calibration as simulate says, and with it the candidates run on the profile's device, so a
// written candidate simulates with that profile to the reported tokens/s.
TEST(PlanCli, CalibrationIsTheProfileOfEveryCandidate) {
  ScratchDir dir("plan_cli_calibration");
  const std::string profile = trainsim::test_support::source_path("tests/golden/cpu_profile.json");
  const std::string path = dir.write(
      "s.yaml", "name: plan_local\nmodel: {num_layers: 2, hidden_size: 64, num_attention_heads: 4, "
                "seq_length: 32, padded_vocab_size: 128}\nparallel: {micro_batch_size: 1, "
                "global_batch_size: 4, precision: fp32}\ncluster: {system: local, nodes: 1}\n"
                "plan: {micro_batch_size: [1, 2], recompute_granularity: [none], top_k: 2}\n");
  const std::string log = dir.file("log").string();
  EXPECT_EQ(run("plan " + path, log), 1);
  EXPECT_NE(slurp(log).find("needs a measured profile: pass --calibration"), std::string::npos)
      << slurp(log);
  EXPECT_EQ(slurp(log).find("enumerated"), std::string::npos) << slurp(log);
  const auto out = dir.file("out");
  ASSERT_EQ(run("plan " + path + " --jobs 2 --calibration " + profile + " --json " +
                    dir.file("r.json").string() + " --out " + out.string(), log),
            0)
      << slurp(log);
  const auto j = nlohmann::json::parse(slurp(dir.file("r.json")));
  std::vector<double> tps;
  for (const auto& c : j.at("candidates"))
    if (c.at("simulated")) tps.push_back(c.at("tokens_per_s"));
  ASSERT_EQ(tps.size(), 2u) << j.dump(1);
  int files = 0;
  for (const auto& entry : std::filesystem::directory_iterator(out)) {
    ++files;
    const int rank = std::stoi(entry.path().filename().string().substr(0, 3));
    EXPECT_NE(slurp(entry.path()).find("# simulated with --calibration " + profile),
              std::string::npos);
    ASSERT_EQ(run("simulate " + entry.path().string() + " --calibration " + profile +
                      " --format json", dir.file("sim.json").string()),
              0)
        << slurp(dir.file("sim.json"));
    const auto s = nlohmann::json::parse(slurp(dir.file("sim.json")));
    EXPECT_NEAR(s.at("tokens_per_s").get<double>(), tps[rank - 1], 1e-6 * tps[rank - 1]);
  }
  EXPECT_EQ(files, 2);
  // --merge ranks what the shards simulated: a profile there is refused.
  EXPECT_EQ(run("plan --merge " + dir.file("r.json").string() + " --calibration " + profile, log),
            1);
  EXPECT_NE(slurp(log).find("plan --merge: --calibration"), std::string::npos) << slurp(log);
}

TEST(PlanCli, CtrlCPrintsTheBestSoFarAndExits130) {
  ScratchDir dir("plan_cli");
  // The GPT-1T space takes well over the 2 s before SIGINT arrives (its
  // estimate stage alone runs for tens of seconds on 2 cores).
  const std::string log = dir.file("log").string();
  const std::string cmd = "timeout --preserve-status -s INT 2 " + std::string(TRAINSIM_CLI) +
                          " plan " +
                          trainsim::test_support::source_path("bench/plan/gpt-1t_3072_a100.yaml") +
                          " --jobs 1 > " + log + " 2>&1";
  const int status = std::system(cmd.c_str());
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 130) << slurp(log);
  const std::string out = slurp(log);
  EXPECT_NE(out.find("interrupted: the best found so far"), std::string::npos) << out;
  EXPECT_NE(out.find("enumerated 5568 candidates; not simulated:"), std::string::npos) << out;
}

}  // namespace
