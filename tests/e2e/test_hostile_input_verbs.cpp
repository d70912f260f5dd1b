// Hostile input to every verb (issue 35): deeply nested JSON in every reader, outputs that name
// inputs, failed runs that must leave earlier outputs alone, nonsense values, unclear messages,
// runaway plan spaces. Each case exits 1 (never a signal) with a message naming the file or
// flag, and leaves the files it was given as they were.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "tests/e2e/cli_helpers.h"
#include "tests/support/paths.h"

#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

namespace {

using trainsim_e2e::run;
using trainsim_e2e::slurp;

namespace fs = std::filesystem;

using trainsim::test_support::ScratchDir;
using trainsim::test_support::source_path;

const std::string kSrc = TRAINSIM_SOURCE_DIR;
const std::string kScenario = source_path("scenarios/small/gpt-tiny_tp2_pp2_dp2.yaml");
const std::string kA100 = source_path("calibration/a100-sxm4-80gb.json");
const std::string kH100Trace =
    source_path("validation/data/h100_2026-11-26/replay_gpt-1.7b.trace.json");
const std::string k17b = source_path("scenarios/gpt-1.7b_tp1_pp1_dp32.yaml");

class HostileVerbs : public ::testing::Test {
 public:
  void SetUp() override {
    scratch_ = std::make_unique<ScratchDir>("e2e_hostile_input_verbs");
    dir_ = scratch_->path();
  }
  std::string path(const std::string& name) const { return scratch_->file(name).string(); }
  std::string write(const std::string& name, const std::string& text) const {
    return scratch_->write(name, text);
  }
  /// Runs `trainsim ARGS`: exit 1 and every needle in its output, which it returns.
  std::string expect_refused(const std::string& args, const std::vector<std::string>& needles) {
    const std::string log = path("log.txt");
    const int rc = run(args, log);
    const std::string out = slurp(log);
    EXPECT_EQ(rc, 1) << args << "\n" << out;
    for (const auto& n : needles) EXPECT_NE(out.find(n), std::string::npos) << n << "\n" << out;
    return out;
  }
  /// The gpt-tiny scenario with `plan_section` appended (a scenario with a plan: section).
  std::string plan_scenario(const std::string& plan_section) const {
    return write("plan.yaml", slurp(kScenario) + "\n" + plan_section);
  }
  std::unique_ptr<ScratchDir> scratch_;
  fs::path dir_;
};

/// A JSON value nested `depth` deep inside an object: {"a": [[[...]]]}.
std::string nested(std::size_t depth) {
  return "{\"a\": " + std::string(depth, '[') + std::string(depth, ']') + "}";
}

// ---- JSON nested 100,000 deep (a SIGSEGV before): refused before parsing, naming the file

TEST_F(HostileVerbs, DeeplyNestedJsonIsRefusedByEveryReader) {
  const std::string deep = write("deep.json", nested(100000));
  const std::vector<std::string> needles = {deep, "nested deeper than 512 levels"};
  expect_refused("import-hf " + deep, needles);
  expect_refused("simulate " + kScenario + " --calibration " + deep, needles);
  expect_refused("plan --merge " + deep, needles);
#ifdef TRAINSIM_HAVE_VALIDATE_TRACE  // and calibrate's fits (apps/CMakeLists.txt)
  expect_refused("validate " + kScenario + " --measured-trace " + deep, needles);
  expect_refused("calibrate --from-trace " + deep + " --base " + kA100, needles);
  expect_refused("calibrate --from-microbench " + deep + " --base " + kA100, needles);
  expect_refused("calibrate --from-trace " + kSrc + "/validation/data/kineto_gpt_tiny_cpu.json" +
                     " --base " + deep,
                 needles);
#endif
  // model.hf_config in a scenario reads the config through the same reader.
  const std::string scenario = write(
      "hf.yaml", "name: hf\nmodel:\n  hf_config: " + deep + "\n  seq_length: 128\n");
  expect_refused("simulate " + scenario, needles);
}

// ---- outputs that name inputs or each other: refused before anything is written

TEST_F(HostileVerbs, PlanRefusesOutputsThatAreInputsOrEachOther) {
  const std::string scenario = write("s.yaml", slurp(kScenario));
  const std::string profile = write("p.json", slurp(kA100));
  expect_refused("plan " + scenario + " --json " + scenario, {"--json", "refusing to overwrite"});
  expect_refused("plan " + scenario + " --csv " + scenario, {"--csv", "refusing to overwrite"});
  expect_refused("plan " + scenario + " --calibration " + profile + " --json " + profile,
                 {"--json", "--calibration", "refusing to overwrite"});
  const std::string x = path("x.out");
  expect_refused("plan " + scenario + " --json " + x + " --csv " + x,
                 {"--csv", "also the --json output"});
  EXPECT_FALSE(fs::exists(x));
  const std::string a = write("a.json", "{\"kept\": true}"), b = write("b.json", "{}");
  expect_refused("plan --merge " + a + " " + b + " --json " + a,
                 {"--json", "--merge", "refusing to overwrite"});
  EXPECT_EQ(slurp(scenario), slurp(kScenario));
  EXPECT_EQ(slurp(profile), slurp(kA100));
  EXPECT_EQ(slurp(a), "{\"kept\": true}");
}

// calibrate's fits run in trainsim whenever trainsim_validation is built (as validate
// --measured-trace, which needs the simulator as well).
TEST_F(HostileVerbs, CalibrateRefusesAnOutputThatIsAnInput) {
#ifndef TRAINSIM_HAVE_VALIDATE_TRACE
  GTEST_SKIP() << "calibrate's fits need trainsim_validation in this build";
#endif
  const std::string base = write("base.json", slurp(kA100));
  const std::string kineto = slurp(kSrc + "/validation/data/kineto_gpt_tiny_cpu.json");
  const std::string trace = write("t.json", kineto);
  const std::string fit = "calibrate --allow-device-mismatch --from-trace " + trace + " --base " + base;
  expect_refused(fit + " --out " + base, {"--out", "--base", "refusing to overwrite"});
  expect_refused(fit + " --out " + trace, {"--out", "--from-trace", "refusing to overwrite"});
  EXPECT_EQ(slurp(base), slurp(kA100));
  EXPECT_EQ(slurp(trace), kineto);
  // The same fit to another file is written (the refusal is the overlap's).
  const std::string log = path("fit.log");
  EXPECT_EQ(run(fit + " --out " + path("fitted.json"), log), 0) << slurp(log);
  EXPECT_NE(slurp(path("fitted.json")).find("refined from trace"), std::string::npos);
}

TEST_F(HostileVerbs, CalibrateFitsRefuseImpossibleShapesAndRolesNamingTheFile) {
#ifndef TRAINSIM_HAVE_VALIDATE_TRACE
  GTEST_SKIP() << "calibrate's fits need trainsim_validation in this build";
#else
  const std::string big = "4611686018427387904";  // 2^62: the GEMM of 4.6e18^3
  const std::string huge = write(
      "huge.json",
      "{\"traceEvents\": [{\"ph\": \"X\", \"cat\": \"cpu_op\", \"name\": \"aten::mm\", "
      "\"ts\": 0, \"dur\": 1000, \"args\": {\"Input Dims\": [[" + big + ", " + big + "], [" +
          big + ", " + big + "]], \"Input type\": [\"float\", \"float\"]}}]}");
  expect_refused("calibrate --allow-device-mismatch --from-trace " + huge + " --base " + kA100,
                 {huge, "aten::mm", "above 2^31"});
  const std::string none = write(
      "none.json", "{\"traceEvents\": [{\"ph\": \"X\", \"name\": \"step\", \"ts\": 0, "
                   "\"dur\": 5}]}");
  expect_refused("calibrate --allow-device-mismatch --from-trace " + none + " --base " + kA100,
                 {none + ": no usable operator sample"});
  // A measured GEMM of role 'sideways' would give a profile that simulate refuses.
  nlohmann::json measured = nlohmann::json::parse(
      slurp(kSrc + "/validation/data/h100_2026-11-26/calibrate_cuda.json"));
  measured["measurements"]["gemm"][0]["role"] = "sideways";
  const std::string sideways = write("sideways.json", measured.dump());
  const std::string out = path("out.json");
  expect_refused("calibrate --from-microbench " + sideways + " --base " + kSrc +
                     "/calibration/h100-sxm5-80gb.json --out " + out,
                 {sideways, "measurements.gemm[0]", "'sideways'"});
  EXPECT_FALSE(fs::exists(out));
#endif
}

TEST_F(HostileVerbs, CalibrateWithoutLibTorchSaysWhatIsMissing) {
#if defined(TRAINSIM_HAVE_VALIDATE) || !defined(TRAINSIM_HAVE_VALIDATE_TRACE)
  GTEST_SKIP() << "for builds whose calibrate fits but cannot measure";
#else
  expect_refused("calibrate --device cpu --quick", {"LibTorch", "--from-trace"});
#endif
}

// ---- a failed run leaves every earlier output as it was

TEST_F(HostileVerbs, AFailedOutputLeavesTheOtherOutputsUnchanged) {
  if (!fs::exists("/dev/full")) GTEST_SKIP() << "no /dev/full here";
  const std::string keep = write("keep.json", "old summary"),
                    trace = write("keep.trace.json", "old trace");
  expect_refused("simulate " + kScenario + " --json " + keep + " --trace " + trace +
                     " --memory-csv /dev/full",
                 {"--memory-csv", "/dev/full", "write failed"});
  EXPECT_EQ(slurp(keep), "old summary");
  EXPECT_EQ(slurp(trace), "old trace");
  for (const auto& e : fs::directory_iterator(dir_))  // no temporary left behind
    EXPECT_EQ(e.path().filename().string().find(".tmp."), std::string::npos) << e.path();
}

TEST_F(HostileVerbs, PlanChecksOutBeforeTheSearch) {
  const std::string keep = write("keepplan.json", "old plan"), file = write("FILE", "a file");
  const std::string out = expect_refused("plan " + kScenario + " --json " + keep + " --out " + file,
                                         {"--out", file, "not a folder"});
  // Refused before the search: the search's first progress line ("N candidates (of M
  // enumerated), K workers") never came.
  EXPECT_EQ(out.find("candidates (of"), std::string::npos) << out;
  EXPECT_EQ(slurp(keep), "old plan");
  EXPECT_EQ(slurp(file), "a file");
  // So is a --json in a folder that does not exist.
  const std::string out2 =
      expect_refused("plan " + kScenario + " --json " + path("no/such/folder/p.json"),
                     {"--json", "cannot create a file"});
  EXPECT_EQ(out2.find("candidates (of"), std::string::npos) << out2;
}

// ---- nonsense values

TEST_F(HostileVerbs, PlanRefusesARepeatedValueAndARepeatedKey) {
  expect_refused("plan " + plan_scenario("plan:\n  micro_batch_size: [1, 2, 1]\n"),
                 {"plan.micro_batch_size", "'1'", "listed twice"});
  expect_refused("plan " + plan_scenario("plan:\n  recompute_granularity: [selective, full, selective]\n"),
                 {"plan.recompute_granularity", "listed twice"});
  expect_refused("plan " + plan_scenario("plan:\n  top_k: 3\n  top_k: 4\n"),
                 {"plan.top_k", "given twice"});
}

TEST_F(HostileVerbs, MergeRefusesAnImpossibleTokenRate) {
  nlohmann::json cand = {{"index", 0},
                         {"layout", "tp1 pp1 dp8 mb1 norecomp"},
                         {"overrides", nlohmann::json::array()},
                         {"estimate",
                          {{"rejection", "none"},
                           {"reason", ""},
                           {"world_size", 8},
                           {"peak_memory_bytes", 1000},
                           {"memory_capacity_bytes", 2000},
                           {"estimate_iteration_s", 1.0},
                           {"estimate_tokens_per_s", 1000.0}}},
                         {"simulated", true},
                         {"error", ""},
                         {"iteration_time_s", 1.0},
                         {"tokens_per_s", 1e308},
                         {"model_tflops_per_gpu", 100.0},
                         {"mfu", 0.3},
                         {"peak_memory_bytes", 1000},
                         {"memory_capacity_bytes", 2000},
                         {"bubble_share", 0.1},
                         {"exposed_comm_share", 0.1},
                         {"oom", false}};
  nlohmann::json shard = {{"plan_version", 1},         {"scenario", "x"},
                          {"interrupted", false},      {"enumerated", 1},
                          {"rejected", nlohmann::json::object()},
                          {"invalid_reasons", nlohmann::json::array()},
                          {"candidates", {cand}}};
  const std::string bad = write("bad.json", shard.dump());
  expect_refused("plan --merge " + bad, {bad, "tokens_per_s", "1e+12"});
  // The same shard with a plausible rate merges (the bound is what refused it).
  shard["candidates"][0]["tokens_per_s"] = 5e5;
  const std::string good = write("good.json", shard.dump());
  EXPECT_EQ(run("plan --merge " + good, path("good.log")), 0) << slurp(path("good.log"));
}

TEST_F(HostileVerbs, EmptyOutputPathsAreRefused) {
  expect_refused("simulate " + kScenario + " --json ''", {"--json", "empty value"});
  expect_refused("simulate " + kScenario + " --trace-ranks ''", {"--trace-ranks", "empty value"});
  expect_refused("plan " + kScenario + " --csv ''", {"--csv", "empty value"});
}

#ifdef TRAINSIM_HAVE_VALIDATE_TRACE
/// The H100 replay trace with `edit` applied, written to `name`.
template <typename Edit>
std::string edited_trace(const HostileVerbs& t, const std::string& name, Edit edit) {
  nlohmann::json j = nlohmann::json::parse(slurp(kH100Trace));
  edit(j);
  std::ofstream(t.path(name)) << j.dump();
  return t.path(name);
}
#endif

TEST_F(HostileVerbs, ValidateRefusesATraceSpanningCenturies) {
#ifndef TRAINSIM_HAVE_VALIDATE_TRACE
  GTEST_SKIP() << "validate --measured-trace needs the simulator in this build";
#else
  const std::string trace = edited_trace(*this, "far.json", [](nlohmann::json& j) {
    for (auto it = j["traceEvents"].rbegin(); it != j["traceEvents"].rend(); ++it)
      if ((*it)["ph"] == "X") {
        (*it)["ts"] = 1e300;
        break;
      }
  });
  expect_refused("validate " + k17b + " --set cluster.system=dgx-h100 --measured-trace " + trace,
                 {trace, "more than a day"});
#endif
}

TEST_F(HostileVerbs, ValidateWarnsOfAProfileOfAnotherGpu) {
#ifndef TRAINSIM_HAVE_VALIDATE_TRACE
  GTEST_SKIP() << "validate --measured-trace needs the simulator in this build";
#else
  const std::string log = path("log.txt");
  ASSERT_EQ(run("validate " + k17b + " --set cluster.system=dgx-h100 --measured-trace " +
                    kH100Trace + " --calibration " + kA100,
                log),
            0)
      << slurp(log);
  const std::string out = slurp(log);
  EXPECT_NE(out.find("warning: --calibration '" + kA100 + "' is a profile for"),
            std::string::npos)
      << out;
  EXPECT_NE(out.find("H100"), std::string::npos) << out;
#endif
}

// ---- messages that say what was given

TEST_F(HostileVerbs, ACpuTraceWithoutProfileNamesTheTraceNotDevice) {
#ifndef TRAINSIM_HAVE_VALIDATE_TRACE
  GTEST_SKIP() << "validate --measured-trace needs the simulator in this build";
#else
  const std::string trace = edited_trace(*this, "cpu.json", [](nlohmann::json& j) {
    j["otherData"]["executor"] = "libtorch-2.11.0-cpu";
  });
  const std::string out = expect_refused(
      "validate " + k17b + " --measured-trace " + trace,
      {"--measured-trace " + trace, "ran on the CPU", "--calibration"});
  EXPECT_EQ(out.find("--device cpu needs"), std::string::npos) << out;
#endif
}

TEST_F(HostileVerbs, AnUnknownVerbIsNamedWithTheVerbs) {
  expect_refused("frobnicate", {"unknown verb 'frobnicate'", "simulate", "plan", "calibrate"});
  expect_refused("frobnicate " + kScenario, {"unknown verb 'frobnicate'"});
}

// ---- runaway plan spaces: counted before they are enumerated

TEST_F(HostileVerbs, AHugePlanSpaceIsRefusedWithItsSizeBeforeEnumerating) {
  // 400 micro-batch sizes x 400 virtual-stage sizes x the default TP, PP and recompute choices:
  // far above the bound (the layers per stage limit which virtual sizes pass, not the count).
  std::string mbs, vpls;
  for (int i = 1; i <= 400; ++i) {
    mbs += (i > 1 ? ", " : "") + std::to_string(i);
    vpls += (i > 1 ? ", " : "") + std::to_string(i);
  }
  const std::string scenario =
      plan_scenario("plan:\n  micro_batch_size: [" + mbs +
                    "]\n  num_layers_per_virtual_pipeline_stage: [" + vpls + "]\n");
  const std::string out =
      expect_refused("plan " + scenario + " --jobs 2",
                     {scenario, "layouts, above the 100000", "on 2 workers", "GiB of candidates",
                      "--force"});
  // Refused from the count, before enumerating or searching: no search progress line.
  EXPECT_EQ(out.find("candidates (of"), std::string::npos) << out;
}

}  // namespace
