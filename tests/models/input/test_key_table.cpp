// The table of scenario keys (models/input/keys.h): defaults agree with the structs, the
// documentation agrees with the table both ways, a key added to the table alone is read,
// bounded, documented and suggested, and Megatron-LM launch-line arguments that change neither
// time nor memory are accepted and named in the notes.
#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <optional>
#include <regex>
#include <set>
#include <sstream>
#include <string>

#include "models/input/keys.h"
#include "models/input/scenario.h"
#include "models/run.h"
#include "tests/support/paths.h"
#include "tests/support/scenario_yaml.h"

namespace trainsim {
namespace {

std::string read_text(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// The member of a default-constructed Scenario, as the table's default would write it.
std::optional<double> member_value(const ScenarioKey& k, Scenario& s) {
  void* at = k.field.address(s);
  switch (k.field.kind) {
    case FieldKind::Int64: return double(*static_cast<std::int64_t*>(at));
    case FieldKind::Int32: return double(*static_cast<int*>(at));
    case FieldKind::Bool: return *static_cast<bool*>(at) ? 1.0 : 0.0;
    case FieldKind::Double: return *static_cast<double*>(at);
    case FieldKind::Enum8: return double(*static_cast<std::uint8_t*>(at));
    default: return std::nullopt;
  }
}

TEST(KeyTable, DefaultsEqualTheStructsInitializers) {
  int checked = 0;
  for (const ScenarioKey& k : scenario_keys()) {
    if (!k.field.address || !k.default_value) continue;
    Scenario s;
    const auto v = member_value(k, s);
    if (!v) continue;
    EXPECT_EQ(*v, *k.default_value) << k.path;
    ++checked;
  }
  EXPECT_GT(checked, 50);
}

TEST(KeyTable, KeyOfNamesTheMemberThroughTheTable) {
  EXPECT_EQ(key_of(&ParallelConfig::tensor_model_parallel_size),
            "parallel." + std::string("tensor_model_parallel_size"));
  EXPECT_EQ(key_of(&ModelConfig::moe_router_topk), "model.moe_router_topk");
  EXPECT_EQ(key_of(&OffloadOptimizerConfig::enabled),
            "deepspeed.zero_optimization.offload_optimizer.device");
  EXPECT_THROW(key_of(&ParallelConfig::data_parallel_size), std::logic_error);
}

// docs/scenario.md's key tables: "### `section`" (or "### Top level") then rows "| `key` |".
std::set<std::string> documented_keys(const std::string& doc) {
  std::set<std::string> out;
  std::istringstream in(doc);
  std::optional<std::string> section;
  const std::regex heading("^### `([a-z_.]+)`"), row("^\\| `([a-z0-9_]+)` \\|");
  std::smatch m;
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("## ", 0) == 0) section.reset();
    if (line == "### Top level") section = "";
    else if (std::regex_search(line, m, heading)) section = m[1].str();
    else if (section && std::regex_search(line, m, row))
      out.insert(section->empty() ? m[1].str() : *section + "." + m[1].str());
  }
  return out;
}

const char* const kIndexBegin = "<!-- key index: generated from models/input/key_table.cpp -->\n";
const char* const kIndexEnd = "<!-- end of key index -->\n";

TEST(KeyTable, DocumentationAndTableAgreeBothWays) {
  const std::string path = test_support::source_path("docs/scenario.md");
  std::string doc = read_text(path);
  const std::set<std::string> documented = documented_keys(doc);
  std::set<std::string> modelled;
  for (const ScenarioKey& k : scenario_keys())
    if (k.ignored.empty()) modelled.insert(k.path);
  for (const std::string& k : modelled)
    EXPECT_TRUE(documented.count(k)) << k << " is in the key table, not in docs/scenario.md";
  for (const std::string& k : documented)
    EXPECT_TRUE(modelled.count(k)) << k << " is documented, not in the key table";
  // The generated index (ignored keys and aliases included) is the table's.
  const std::string begin = kIndexBegin;
  const std::string want = scenario_keys_markdown();
  auto b = doc.find(kIndexBegin), e = doc.find(kIndexEnd);
  ASSERT_NE(b, std::string::npos);
  ASSERT_NE(e, std::string::npos);
  if (std::getenv("TRAINSIM_UPDATE_DOCS")) {
    doc.replace(b + begin.size(), e - b - begin.size(), want);
    std::ofstream(path) << doc;
    e = doc.find(kIndexEnd);
  }
  EXPECT_EQ(doc.substr(b + begin.size(), e - b - begin.size()), want)
      << "docs/scenario.md's key index is out of date: run this test with TRAINSIM_UPDATE_DOCS=1";
}

std::string error_of(const std::string& yaml) {
  try {
    parse_scenario(yaml, "s.yaml");
  } catch (const InputError& e) {
    return e.what();
  }
  return "";
}

const std::string kModel =
    "num_layers: 2, hidden_size: 64, num_attention_heads: 4, seq_length: 32, "
    "padded_vocab_size: 128";

std::int64_t g_test_knob = 0;
void* test_knob_address(Scenario&) { return &g_test_knob; }

TEST(KeyTable, ARegisteredKeyIsReadBoundedDocumentedAndSuggested) {
  ScenarioKey k;
  k.path = "model.test_knob_size";
  k.type = KeyType::Int;
  k.field = FieldRef{FieldKind::Int64, &test_knob_address};
  k.default_value = 3;
  k.min = 1;
  k.max = 8;
  k.doc = "a knob only this test declares";
  register_scenario_key(k);
  const std::string base = "parallel: {micro_batch_size: 1, global_batch_size: 8}\n"
                           "cluster: {system: dgx-a100-80gb, nodes: 1}\n";
  // Read, and its default when absent.
  parse_scenario("model: {" + kModel + ", test_knob_size: 5}\n" + base, "s.yaml");
  EXPECT_EQ(g_test_knob, 5);
  parse_scenario("model: {" + kModel + "}\n" + base, "s.yaml");
  EXPECT_EQ(g_test_knob, 3);
  // Bounded: the file, the field and the value.
  const std::string too_big = error_of("model: {" + kModel + ", test_knob_size: 9}\n" + base);
  EXPECT_NE(too_big.find("s.yaml:1"), std::string::npos) << too_big;
  EXPECT_NE(too_big.find("'model.test_knob_size' = '9'"), std::string::npos) << too_big;
  EXPECT_NE(too_big.find("at most 8"), std::string::npos) << too_big;
  EXPECT_NE(error_of("model: {" + kModel + ", test_knob_size: 0}\n" + base).find("positive"),
            std::string::npos);
  // Documented in the generated index, and suggested when misspelled.
  EXPECT_NE(scenario_keys_markdown().find("| `model.test_knob_size` | int | 3 | 1 to 8 |"),
            std::string::npos);
  const std::string typo = error_of("model: {" + kModel + ", test_knob_sise: 2}\n" + base);
  EXPECT_NE(typo.find("unknown key 'model.test_knob_sise'; did you mean 'test_knob_size'?"),
            std::string::npos) << typo;
  unregister_scenario_key(k.path);
  EXPECT_NE(error_of("model: {" + kModel + ", test_knob_size: 5}\n" + base).find("unknown key"),
            std::string::npos);
}

// A Megatron-LM launch line copied into a scenario: logging, learning-rate and MoE
// load-balancing-type flags are accepted and listed as ignored (the aux-loss coefficient is
// read: its kernels, models/perf/flops_moe.cpp); --bf16 and --fp8-format spell their keys.
TEST(KeyTable, MegatronLaunchLineFlagsAreAcceptedAndNoted) {
  const std::string yaml =
      "runtime: megatron-core\n"
      "model: {" + kModel + ", num_experts: 4, moe_router_topk: 2, attention_backend: flash, "
      "moe_aux_loss_coeff: 0.01, moe_router_load_balancing_type: aux_loss}\n"
      "parallel: {micro_batch_size: 1, global_batch_size: 8, bf16: true, fp8_format: hybrid}\n"
      "training: {lr: 3.0e-4, min_lr: 3.0e-5, lr_decay_style: cosine, lr_warmup_iters: 100, "
      "log_interval: 1, eval_interval: 1000, eval_iters: 10, seed: 1234, "
      "data_path: [0.5, a, 0.5, b], tokenizer_type: GPT2BPETokenizer}\n"
      "cluster: {system: dgx-h100, nodes: 1}\n";
  const Scenario s = parse_scenario(yaml, "launch.yaml");
  EXPECT_EQ(s.parallel.precision, Precision::BF16);
  EXPECT_EQ(s.parallel.fp8, Fp8Format::Hybrid);
  std::set<std::string> notes(s.notes.begin(), s.notes.end());
  for (const char* k : {"model.moe_router_load_balancing_type",
                        "training.lr", "training.min_lr", "training.lr_decay_style",
                        "training.lr_warmup_iters", "training.log_interval",
                        "training.eval_interval", "training.eval_iters", "training.seed",
                        "training.data_path", "training.tokenizer_type"}) {
    bool found = false;
    for (const std::string& n : s.notes) found = found || n.rfind(std::string("ignored: ") + k + " (", 0) == 0;
    EXPECT_TRUE(found) << k;
  }
  EXPECT_EQ(s.notes.size(), 11u);
  EXPECT_EQ(s.model.moe_aux_loss_coeff, 0.01);
  // The same model without the flags: the same plan, no notes.
  const Scenario plain = parse_scenario(
      "runtime: megatron-core\nmodel: {" + kModel + ", num_experts: 4, moe_router_topk: 2, "
      "attention_backend: flash}\nparallel: {micro_batch_size: 1, global_batch_size: 8, "
      "precision: bf16, fp8: hybrid}\ncluster: {system: dgx-h100, nodes: 1}\n", "plain.yaml");
  EXPECT_TRUE(plain.notes.empty());
  EXPECT_EQ(plain.parallel.num_microbatches, s.parallel.num_microbatches);
  // A misspelled flag is still refused, with a suggestion.
  const std::string e = error_of("model: {" + kModel + ", moe_aux_loss_coef: 0.01}\n"
                                 "parallel: {micro_batch_size: 1, global_batch_size: 8}\n"
                                 "cluster: {system: dgx-a100-80gb, nodes: 1}\n");
  EXPECT_NE(e.find("did you mean 'moe_aux_loss_coeff'?"), std::string::npos) << e;
  // An alias and its key together are refused.
  const std::string both = error_of("model: {" + kModel + "}\n"
                                    "parallel: {micro_batch_size: 1, global_batch_size: 8, "
                                    "bf16: true, precision: fp16}\n"
                                    "cluster: {system: dgx-a100-80gb, nodes: 1}\n");
  EXPECT_NE(both.find("'parallel.bf16'"), std::string::npos) << both;
}

// The notes reach the run (and so the summary's notes, models/run.cpp finish_run) from a
// scenario file, with a --set of an ignored key as well.
TEST(KeyTable, IgnoredKeysReachTheRunsNotes) {
  test_support::ScratchDir dir("key_table");
  RunRequest req;
  req.scenario_path = dir.write("launch.yaml", "model: {" + kModel +
                                                   ", moe_router_load_balancing_type: aux_loss}\n"
                                "parallel: {micro_batch_size: 1, global_batch_size: 8}\n"
                                "cluster: {system: dgx-a100-80gb, nodes: 1}\n");
  req.overrides = {{"training.log_interval", "10"}};
  const PreparedRun run = prepare_platform(req);
  ASSERT_EQ(run.notes.size(), 2u);
  EXPECT_EQ(run.notes[0].rfind("ignored: training.log_interval (", 0), 0u) << run.notes[0];
  EXPECT_EQ(run.notes[1].rfind("ignored: model.moe_router_load_balancing_type (", 0), 0u)
      << run.notes[1];
}

TEST(KeyTable, ExpertTensorParallelOneOnADenseModelIsAccepted) {
  const std::string head = "model: {" + kModel + "}\nparallel: {micro_batch_size: 1, "
                           "global_batch_size: 8, tensor_model_parallel_size: 2, ";
  const std::string tail = "}\ncluster: {system: dgx-a100-80gb, nodes: 1}\n";
  const Scenario s = parse_scenario(head + "expert_tensor_parallel_size: 1" + tail, "s.yaml");
  EXPECT_EQ(s.parallel.expert_tensor_parallel_size, 2);  // as if absent: no expert reads it
  ASSERT_EQ(s.notes.size(), 1u);
  EXPECT_NE(s.notes[0].find("expert_tensor_parallel_size"), std::string::npos);
  EXPECT_NE(error_of(head + "expert_tensor_parallel_size: 4" + tail)
                .find("needs a mixture-of-experts model"),
            std::string::npos);
}

}  // namespace
}  // namespace trainsim
