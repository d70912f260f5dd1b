// Hostile and malformed input to the command line (issue 9, items 1, 2, 4, 5 and 10): every
// reproduction exits 1 (never a signal, never exit 0 with garbage) with a message naming the
// file or flag, the field and the value, in the user's terms (no library error codes).
#include <gtest/gtest.h>

#include "tests/e2e/cli_helpers.h"

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

namespace {

using trainsim_e2e::run;
using trainsim_e2e::slurp;

namespace fs = std::filesystem;

const std::string kSrc = TRAINSIM_SOURCE_DIR;
const std::string kScenario = kSrc + "/scenarios/small/gpt-tiny_tp2_pp2_dp2.yaml";
const std::string kA100 = kSrc + "/calibration/a100-sxm4-80gb.json";
const std::string kCpuTrace = kSrc + "/validation/data/kineto_gpt_tiny_cpu.json";

class HostileInput : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::path(TRAINSIM_BINARY_DIR) / "e2e_hostile_input" /
           ::testing::UnitTest::GetInstance()->current_test_info()->name();
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  std::string path(const std::string& name) const { return (dir_ / name).string(); }
  std::string write(const std::string& name, const std::string& text) const {
    std::ofstream(path(name), std::ios::binary) << text;
    return path(name);
  }
  /// Runs `trainsim ARGS`, expects exit 1 and stderr holding every one of `needles` and no
  /// JSON-library internals.
  void expect_refused(const std::string& args, const std::vector<std::string>& needles) {
    const std::string log = path("log.txt");
    const int rc = run(args, log);
    const std::string out = slurp(log);
    EXPECT_EQ(rc, 1) << args << "\n" << out;
    for (const auto& n : needles) EXPECT_NE(out.find(n), std::string::npos) << n << "\n" << out;
    EXPECT_EQ(out.find("json.exception"), std::string::npos) << out;
    EXPECT_EQ(out.find("1797693134"), std::string::npos) << out;
  }
  fs::path dir_;
};

std::string sim_set(const std::string& sets) { return "simulate " + kScenario + " " + sets; }

// ---- items 1 and 2: sizes near 2^62 (SIGFPE, wrapped products, garbage with exit 0)

TEST_F(HostileInput, HugeNodeCountIsRefusedWithItsBound) {
  expect_refused(sim_set("--set cluster.nodes=2305843009213693952"),
                 {"gpt-tiny_tp2_pp2_dp2.yaml", "cluster.nodes", "2305843009213693952",
                  "at most 1048576"});
}

TEST_F(HostileInput, HugeMicroBatchIsRefusedWithItsBound) {
  expect_refused(sim_set("--set parallel.tensor_model_parallel_size=1 "
                         "--set parallel.micro_batch_size=4611686018427387904"),
                 {"gpt-tiny_tp2_pp2_dp2.yaml", "parallel.micro_batch_size",
                  "4611686018427387904", "at most 1048576"});
  expect_refused(sim_set("--set parallel.micro_batch_size=9223372036854775807"),
                 {"parallel.micro_batch_size", "9223372036854775807", "at most"});
  // Beyond 64 bits: still the bound, not "floating-point number".
  expect_refused(sim_set("--set parallel.micro_batch_size=99999999999999999999"),
                 {"parallel.micro_batch_size", "99999999999999999999", "at most"});
}

TEST_F(HostileInput, HugeModelSizesAreRefusedWithTheirBounds) {
  for (const char* field : {"model.seq_length", "model.padded_vocab_size", "model.kv_channels",
                            "model.ffn_hidden_size", "model.num_layers", "model.hidden_size",
                            "model.num_attention_heads", "parallel.global_batch_size"})
    expect_refused(sim_set(std::string("--set ") + field + "=4611686018427387904"),
                   {"gpt-tiny_tp2_pp2_dp2.yaml", field, "4611686018427387904", "at most"});
  expect_refused(sim_set("--set model.hidden_size=4294967296 --set model.num_attention_heads=2"),
                 {"model.hidden_size", "4294967296", "at most 1048576"});
  // Bucket sizes accept 5e8-style floats: a huge one is refused with the bound too.
  expect_refused(sim_set("--set parallel.ddp_bucket_size=1e300"),
                 {"parallel.ddp_bucket_size", "1e300", "at most"});
}

TEST_F(HostileInput, ExplicitZeroKvChannelsIsAnErrorNotTheDefault) {
  expect_refused(sim_set("--set model.kv_channels=0"),
                 {"gpt-tiny_tp2_pp2_dp2.yaml", "model.kv_channels", "'0'", "positive"});
  expect_refused(sim_set("--set model.ffn_hidden_size=0"), {"model.ffn_hidden_size", "'0'"});
}

TEST_F(HostileInput, DerivedSizesAreBounded) {
  // Each key within its bound, their products not: microbatches (16-bit task numbering) and
  // activation bytes.
  expect_refused(sim_set("--set parallel.global_batch_size=1000000 "
                         "--set parallel.micro_batch_size=1"),
                 {"gpt-tiny_tp2_pp2_dp2.yaml", "parallel.global_batch_size (1000000)",
                  "parallel.micro_batch_size (1)", "65534"});
  expect_refused(sim_set("--set model.seq_length=4194304 --set parallel.micro_batch_size=1048576 "
                         "--set parallel.global_batch_size=2097152"),
                 {"gpt-tiny_tp2_pp2_dp2.yaml", "model.seq_length (4194304)", "2^60"});
}

TEST_F(HostileInput, TooManyLayersNamesNumLayers) {
  expect_refused(sim_set("--set model.num_layers=65536"), {"model.num_layers", "65536", "65534"});
}

TEST_F(HostileInput, AMillionGpusNamesTheFileAndClusterNodes) {
  expect_refused(sim_set("--set cluster.nodes=125000"),
                 {"gpt-tiny_tp2_pp2_dp2.yaml", "cluster.nodes", "125000", "1000000 GPUs",
                  "at most 2000 nodes"});
}

// ---- item 4: silently ignored input

TEST_F(HostileInput, SecondYamlDocumentIsAnError) {
  const std::string two =
      write("two.yaml", slurp(kScenario) + "---\nmodel: {num_layers: 2}\n");
  expect_refused("simulate " + two, {"two.yaml", "second YAML document"});
}

TEST_F(HostileInput, OffloadRatioWithoutOffloadDeviceIsAnError) {
  expect_refused(sim_set("--set deepspeed.zero_optimization.offload_optimizer.ratio=0.5"),
                 {"gpt-tiny_tp2_pp2_dp2.yaml",
                  "deepspeed.zero_optimization.offload_optimizer.ratio", "'0.5'",
                  "offload_optimizer.device"});
  expect_refused(sim_set("--set deepspeed.zero_optimization.offload_optimizer.ratio=0.5 "
                         "--set deepspeed.zero_optimization.offload_optimizer.device=none"),
                 {"offload_optimizer.ratio", "'none'"});
}

TEST_F(HostileInput, CalibrateBaseWithoutFromTraceIsAnError) {
  expect_refused("calibrate --base " + kA100, {"--base", "a100-sxm4-80gb.json", "--from-trace"});
}

// ---- item 5: a trace from another device

#ifdef TRAINSIM_HAVE_VALIDATE_TRACE  // calibrate's fits run in trainsim (apps/CMakeLists.txt)
TEST_F(HostileInput, CalibrateRefusesATraceFromAnotherDevice) {
  expect_refused("calibrate --from-trace " + kCpuTrace + " --base " + kA100,
                 {"kineto_gpt_tiny_cpu.json", "a100-sxm4-80gb.json", "CPU", "A100-SXM4-80GB",
                  "--allow-device-mismatch"});
}

TEST_F(HostileInput, AllowedDeviceMismatchWarnsAboutLargeMoves) {
  const std::string log = path("log.txt");
  const int rc = run("calibrate --from-trace " + kCpuTrace + " --base " + kA100 +
                         " --allow-device-mismatch --out " + path("fitted.json"),
                     log);
  const std::string out = slurp(log);
  EXPECT_EQ(rc, 0) << out;
  // The memory-bound fit of a CPU trace moves the A100's hbm_efficiency 0.79 by ~1000x.
  EXPECT_NE(out.find("warning: the fit moves parameters.hbm_efficiency from 0.79 to"),
            std::string::npos)
      << out;
  EXPECT_NE(out.find("more than the 4x"), std::string::npos) << out;
}
#endif

// ---- item 10: messages in the user's terms

TEST_F(HostileInput, CalibrationNumberOverflowNamesFileFieldAndValue) {
  std::string text = slurp(kA100);
  const std::string from = "\"value\": 0.79,";  // hbm_efficiency
  ASSERT_NE(text.find(from), std::string::npos);
  text.replace(text.find(from), from.size(), "\"value\": 1e999,");
  const std::string cal = write("overflow.json", text);
  expect_refused(sim_set("--calibration " + cal),
                 {"overflow.json:", "parameters.hbm_efficiency.value", "1e999", "out of range"});
}

#ifdef TRAINSIM_HAVE_VALIDATE_TRACE  // calibrate's fits run in trainsim (apps/CMakeLists.txt)
TEST_F(HostileInput, TraceErrorsNameTheEventAndField) {
  const std::string ts = write(
      "ts.json", R"({"traceEvents":[{"ph":"X","cat":"cpu_op","name":"aten::mm","ts":"abc","dur":3}]})");
  expect_refused("calibrate --from-trace " + ts + " --base " + kA100,
                 {"ts.json", "traceEvents[0]", "'ts'", "\"abc\"", "expected a number"});
  const std::string obj = write("obj.json", R"({"traceEvents":{"a":1}})");
  expect_refused("calibrate --from-trace " + obj + " --base " + kA100,
                 {"obj.json", "'traceEvents'", "expected a list"});
}
#endif

TEST_F(HostileInput, DirectoryAsScenarioSaysItIsADirectory) {
  expect_refused("simulate " + dir_.string(), {dir_.string(), "is a directory"});
}

// Every file a verb reads goes through one reader (models/json_input.h read_input_file): a
// missing file or a directory is refused naming the path, what the file was for and why.
TEST_F(HostileInput, EveryInputFileMissingOrADirectoryIsRefusedByName) {
  const std::string missing = path("missing.json");
  expect_refused("simulate " + path("missing.yaml"),
                 {"missing.yaml", "cannot open the scenario file", "No such file"});
  expect_refused("simulate " + kScenario + " --calibration " + dir_.string(),
                 {dir_.string(), "is a directory, not a calibration profile"});
  expect_refused("simulate " + kScenario + " --calibration " + missing,
                 {"missing.json", "cannot open the calibration profile", "No such file"});
  // A directory named as the Hugging Face config was read as an empty JSON text.
  expect_refused(sim_set("--set model.hf_config=" + dir_.string()),
                 {"gpt-tiny_tp2_pp2_dp2.yaml: field 'model.hf_config': " + dir_.string(),
                  "is a directory, not a Hugging Face config"});
  expect_refused("plan --merge " + missing,
                 {"missing.json", "cannot open the shard result (--merge)", "No such file"});
  // A shard that is not JSON: the parser's line and column (was the JSON library's own text).
  const std::string bad = write("shard.json", "{\n  \"enumerated\": 3,\n  oops\n}\n");
  expect_refused("plan --merge " + bad, {"shard.json:3:", "invalid JSON"});
  // JSON, but not a shard: the missing key in the user's terms (expect_refused: no library code).
  const std::string partial = write("partial.json", R"({"enumerated": 3})");
  expect_refused("plan --merge " + partial, {"partial.json", "field 'plan_version' is missing"});
  // A device without end stops at the size limit (was read until memory ran out).
  expect_refused("simulate " + kScenario + " --calibration /dev/zero",
                 {"/dev/zero", "more than 64 MiB, too large for a calibration profile"});
  expect_refused("simulate /dev/zero", {"/dev/zero", "too large for a scenario file"});
#ifdef TRAINSIM_HAVE_VALIDATE_TRACE
  expect_refused("validate " + kScenario + " --measured-trace " + dir_.string(),
                 {dir_.string(), "is a directory, not a measured trace"});
#endif
#ifdef TRAINSIM_HAVE_VALIDATE_TRACE  // calibrate's fits run in trainsim (apps/CMakeLists.txt)
  expect_refused("calibrate --from-trace " + missing + " --base " + kA100,
                 {"missing.json", "cannot open the trace", "No such file"});
#endif
}

TEST_F(HostileInput, FlagRangeErrorsAreInTheUsersTerms) {
  expect_refused("replay " + kScenario + " --nprocs 0",
                 {"--nprocs", "must be a positive integer", "got 0"});
  expect_refused("replay " + kScenario + " --rank -1", {"--rank", "got -1"});
  expect_refused("validate " + kScenario + " --repeat abc", {"--repeat", "'abc'"});
  // Past the flag's type, or past the fork()ed workers a machine should start (each builds or
  // simulates a graph), named as such (was "positive integer" for a too large value).
  expect_refused("replay " + kScenario + " --nprocs 99999999999",
                 {"--nprocs", "at most 2147483647", "99999999999"});
  expect_refused("plan " + kScenario + " --jobs 100000", {"--jobs", "at most 1024", "100000"});
}

}  // namespace
