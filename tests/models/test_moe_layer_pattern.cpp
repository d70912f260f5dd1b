// Mixture-of-experts models with dense layers (Megatron's --moe-layer-freq: DeepSeek's and
// GLM's first dense layers, Qwen3-MoE's decoder_sparse_step / mlp_only_layers, interleaved
// MoE). Checked against hand counts: which layers are MoE for each of Megatron's forms (an
// integer N, a list, the string expression), each stage's parameters, the model FLOPs, the
// built graph (a dense layer runs the dense MLP and no token exchange; an MoE layer the experts
// and two exchanges each way), each layer's activation bytes, and the Hugging Face import.
#include <gtest/gtest.h>

#include <map>
#include <set>
#include <string>
#include <vector>

#include "models/perf/flops.h"
#include "models/builder/graph_builder.h"
#include "models/hardware/hardware.h"
#include "models/input/hf_config.h"
#include "models/memory/memory_model.h"
#include "models/input/scenario.h"
#include "tests/support/paths.h"
#include "tests/support/scenario_yaml.h"

namespace trainsim {
namespace {

using test_support::ScratchDir;

// A small Qwen3-MoE-like shape: 8 layers, 8 experts of 256, dense MLP 1536.
const char* kModel =
    "num_layers: 8, hidden_size: 512, num_attention_heads: 8, num_query_groups: 4, "
    "kv_channels: 64, ffn_hidden_size: 1536, num_experts: 8, moe_router_topk: 2, "
    "moe_ffn_hidden_size: 256, moe_grouped_gemm: true, swiglu: true, normalization: RMSNorm, "
    "position_embedding_type: rope, untie_embeddings_and_output_weights: true, "
    "add_bias_linear: false, hidden_dropout: 0.0, attention_dropout: 0.0, "
    "attention_backend: flash, seq_length: 512, padded_vocab_size: 4096";

Scenario moe(const std::string& freq, const std::string& parallel) {
  return parse_scenario(
      test_support::core_scenario_yaml(
          std::string(kModel) + (freq.empty() ? "" : ", moe_layer_freq: " + freq),
          "precision: bf16, " + parallel),
      "pattern.yaml");
}

std::vector<int> layers_of(const ModelConfig& m) {
  std::vector<int> out;
  for (std::int64_t l = 0; l < m.num_layers; ++l) out.push_back(m.moe_layer(l) ? 1 : 0);
  return out;
}

const std::string kBatch = "micro_batch_size: 1, global_batch_size: 8";

TEST(MoeLayerPattern, MegatronsThreeFormsOfMoeLayerFreq) {
  // Integer N: layer i is MoE when i % N == 0 (Megatron-Core gpt_layer_specs.py).
  EXPECT_EQ(layers_of(moe("", kBatch).model), std::vector<int>(8, 1));
  EXPECT_EQ(layers_of(moe("2", kBatch).model), (std::vector<int>{1, 0, 1, 0, 1, 0, 1, 0}));
  EXPECT_EQ(layers_of(moe("3", kBatch).model), (std::vector<int>{1, 0, 0, 1, 0, 0, 1, 0}));
  // A YAML list, one 0/1 per layer.
  const std::vector<int> first3 = {0, 0, 0, 1, 1, 1, 1, 1};
  EXPECT_EQ(layers_of(moe("[0, 0, 0, 1, 1, 1, 1, 1]", kBatch).model), first3);
  // Megatron's string expression (arguments.py moe_freq_type), spaces allowed.
  EXPECT_EQ(layers_of(moe("\"([0]*3+[1]*5)\"", kBatch).model), first3);
  EXPECT_EQ(layers_of(moe("'[0] * 3 + 5 * [1]'", kBatch).model), first3);
  // Its docstring's example, "([1]*3+[0]*1)*3", repeats [1,1,1,0]; here twice (8 layers).
  EXPECT_EQ(layers_of(moe("\"([1]*3+[0]*1)*2\"", kBatch).model), (std::vector<int>{1, 1, 1, 0, 1, 1, 1, 0}));
  // Integers multiply inside an expression: [1]*(2*4).
  EXPECT_EQ(layers_of(moe("\"[1]*(2*4)\"", kBatch).model), std::vector<int>(8, 1));
}

TEST(MoeLayerPattern, BadPatternsNameTheFieldAndTheValue) {
  const std::pair<std::string, std::string> cases[] = {
      {"[1, 0]", "the pattern has 2 entries, model.num_layers is 8"},
      {"\"[1]*9\"", "the pattern has 9 entries"},
      {"[1, 2, 1, 1, 1, 1, 1, 1]", "'model.moe_layer_freq' = '2': each entry of the list is 0"},
      {"\"[1,2]*4\"", "has the entry 2"},
      {"\"([1]*8\"", "expected ')' at character 7"},
      {"\"[1]+2\"", "adds a list and an integer"},
      {"\"[1]*[2]\"", "multiplies two lists"},
      {"\"[[1]]*8\"", "nests a list in a list"},
      {"\"[1]*99999999\"", "is longer than 65534 layers"},
      {"\"[1]*8;\"", "unexpected ';'"},
      {"\"[1]*\"", "ends early"},
      {"[]", "the pattern is empty"},
      {"0", "must be a positive integer"},
      {"{a: 1}", "'model.moe_layer_freq'"},
      // Hostile expressions end in an error, not in a deep recursion or a long loop.
      {"\"" + std::string(100, '(') + "[1]" + std::string(100, ')') + "\"",
       "nests deeper than 64 levels"},
      {"\"[1]*65534" + [] {
         std::string s;
         for (int i = 0; i < 100; ++i) s += "*1";
         return s;
       }() + "\"",
       "takes more than 4194304 list operations"},
  };
  for (const auto& [value, expect] : cases) {
    try {
      moe(value, kBatch);
      ADD_FAILURE() << value << " accepted";
    } catch (const InputError& e) {
      const std::string what = e.what();
      EXPECT_NE(what.find("pattern.yaml"), std::string::npos) << what;
      EXPECT_NE(what.find("model.moe_layer_freq"), std::string::npos) << what;
      EXPECT_NE(what.find(expect), std::string::npos) << value << ": " << what;
    }
  }
  // On a dense model the key has nothing to act on.
  try {
    parse_scenario("model: {num_layers: 4, hidden_size: 512, num_attention_heads: 8, "
                   "seq_length: 512, padded_vocab_size: 4096, moe_layer_freq: 2}\n"
                   "parallel: {micro_batch_size: 1, global_batch_size: 8}\n"
                   "cluster: {system: dgx-h100, nodes: 1}\n",
                   "dense.yaml");
    ADD_FAILURE() << "moe_layer_freq accepted on a dense model";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("model.moe_layer_freq = 2 needs a mixture-of-experts"),
              std::string::npos) << e.what();
  }
}

// Per layer: attention 512 x (8 + 2 x 4) x 64 + 512 x 512, two RMSNorms 2 x 512; a dense MLP
// 3 x 512 x 1536; an MoE MLP the router 512 x 8 and 8 experts of 3 x 512 x 256.
constexpr std::int64_t kAttn = 512LL * 1024 + 512LL * 512 + 2 * 512;
constexpr std::int64_t kDense = kAttn + 3LL * 512 * 1536;
constexpr std::int64_t kMoe = kAttn + 512LL * 8 + 8 * 3LL * 512 * 256;
constexpr std::int64_t kEmbed = 2LL * 4096 * 512 + 512;  // untied embedding and output, final norm

TEST(MoeLayerPattern, ParametersCountEachLayerAsDenseOrMoe) {
  EXPECT_EQ(total_params(moe("", kBatch).model), 8 * kMoe + kEmbed);
  EXPECT_EQ(total_params(moe("\"[0]*3+[1]*5\"", kBatch).model), 3 * kDense + 5 * kMoe + kEmbed);
  EXPECT_EQ(total_params(moe("2", kBatch).model), 4 * kDense + 4 * kMoe + kEmbed);
  // PP 4 x VP 2 (one layer per virtual stage): stage s holds layers s and s + 4. With the first
  // three dense, stage 0-2 hold one dense and one MoE layer, stage 3 two MoE layers; EP 2 halves
  // the experts of each MoE layer.
  const Scenario sc = moe("\"[0]*3+[1]*5\"",
                          "pipeline_model_parallel_size: 4, num_layers_per_virtual_pipeline_stage: 1, "
                          "expert_model_parallel_size: 2, micro_batch_size: 1, global_batch_size: 8");
  const std::int64_t moe_ep2 = kMoe - 4 * 3LL * 512 * 256;
  EXPECT_EQ(params_per_rank(sc, 0), kDense + moe_ep2 + 4096LL * 512);
  EXPECT_EQ(params_per_rank(sc, 1), kDense + moe_ep2);
  EXPECT_EQ(params_per_rank(sc, 2), kDense + moe_ep2);
  EXPECT_EQ(params_per_rank(sc, 3), 2 * moe_ep2 + 4096LL * 512 + 512);
  EXPECT_EQ(expert_params_per_rank(sc, 0), 4 * 3LL * 512 * 256);
  EXPECT_EQ(expert_params_per_rank(sc, 3), 2 * 4 * 3LL * 512 * 256);
  // FP8 weights: attention and the dense MLP, or attention and the local experts.
  EXPECT_EQ(linear_weights_per_rank(sc, 0), 2 * (512LL * 1024 + 512LL * 512) +
                                                3LL * 512 * 1536 + 4 * 3LL * 512 * 256);
}

TEST(MoeLayerPattern, ModelFlopsCountTheExpertsOnMoeLayersOnly) {
  const Scenario sc = moe("\"[0]*3+[1]*5\"", kBatch);
  // Megatron-Core training.py num_floating_point_operations, per token 6 x multiply-adds:
  // attention QKV h (a + 2g) d + causal a d s + projection a d h on every layer; a dense MLP
  // 3 h f or top-2 experts 2 x 3 h f_moe; the output layer h V.
  const double attn = 512.0 * 1024 + 512.0 * 512 + 512.0 * 512;
  const double per_token = 6.0 * (8 * attn + 3 * 3.0 * 512 * 1536 + 5 * 2 * 3.0 * 512 * 256 +
                                  512.0 * 4096);
  EXPECT_DOUBLE_EQ(model_flops_per_iteration(sc), per_token * 8 * 512);
}

TEST(MoeLayerPattern, DenseLayersRunTheDenseMlpAndNoTokenExchange) {
  const Scenario sc = moe("2", "expert_model_parallel_size: 4, micro_batch_size: 1, "
                               "global_batch_size: 8");
  BuildOptions opt;
  opt.fold = false;
  const ScheduleGraph g = build_schedule_graph(validated(sc), find_system(sc.cluster.system), opt);
  const RankId r = g.simulated_ranks().front();
  const std::int64_t microbatches = sc.parallel.num_microbatches;
  std::map<int, int> exchanges;  // per layer
  std::map<int, std::set<std::int64_t>> experts;  // per layer: experts_local of its MLP ops
  std::map<int, std::int64_t> activations;  // per layer: forward allocations, one microbatch
  for (TaskId id = 0; id < g.num_tasks(); ++id) {
    const Task& t = g.task(id);
    if (t.rank != r || t.layer == kNoIndex) continue;
    const OpDesc& op = g.op(id);
    if (op.kind == OpKind::AllToAll && op.group == GroupKind::Expert) ++exchanges[t.layer];
    if (t.kind == TaskKind::Compute && t.part == Part::Mlp)
      experts[t.layer].insert(op.features.experts_local);
    if (t.kind == TaskKind::Compute && t.phase == Phase::Forward && t.microbatch == 0)
      for (const MemEffect* e = g.effects_begin(id); e != g.effects_end(id); ++e)
        if (e->category == MemCategory::Activations && e->bytes > 0 && !e->at_end)
          activations[t.layer] += e->bytes;
  }
  for (int l = 0; l < 8; ++l) {
    const bool is_moe = l % 2 == 0;
    // Dispatch and combine in the forward, their adjoints in the backward, per microbatch.
    EXPECT_EQ(exchanges[l], is_moe ? 4 * microbatches : 0) << l;
    EXPECT_EQ(experts[l], (std::set<std::int64_t>{is_moe ? 2 : 0})) << l;
    EXPECT_EQ(activations[l], layer_activation_bytes(sc, is_moe).total()) << l;
  }
  // The two kinds keep different activations (here the dense MLP's fc1 output 2 x 512 x 1536
  // against the experts' top-2 token copies of 2 x 256), so the test tells them apart.
  EXPECT_NE(layer_activation_bytes(sc, true).mlp, layer_activation_bytes(sc, false).mlp);
  // A dense layer of the MoE model keeps what the same model without experts keeps.
  Scenario dense = sc;
  dense.model.num_experts = 0;
  EXPECT_EQ(layer_activation_bytes(sc, false).total(), layer_activation_bytes(dense).total());
}

// Megatron DDP's gradient buckets (overlap_grad_reduce) fill in the order gradients become
// ready: the output layer, layer 7, 6, ..., 0, the embedding; each bucket waits for the
// backward that completes it. With MoE on even layers (3,937,280 parameters) and dense odd ones
// (3,146,752), untied output 2,097,664 and embedding 2,097,152 (32,530,944 in all), 4M-parameter
// buckets complete at cumulative 5,244,416 (layer 7), 9,181,696 (6), 12,328,448 (5),
// 16,265,728 (4), 23,349,760 (2), 26,496,512 (1), 30,433,792 (0), and the last two
// with the embedding. Layers sized as dense (the bug this guards) put them elsewhere.
TEST(MoeLayerPattern, DdpBucketsWaitForTheLayersTheyHold) {
  const Scenario sc = parse_scenario(
      "runtime: megatron-core\nmodel: {" + std::string(kModel) + ", moe_layer_freq: 2}\n"
      "parallel: {precision: bf16, micro_batch_size: 1, global_batch_size: 2, "
      "ddp_bucket_size: 4000000, overlap_grad_reduce: true}\n"
      "cluster: {system: dgx-h100, nodes: 1, gpus_per_node: 2}\n",
      "buckets.yaml");
  EXPECT_EQ(params_per_rank(sc, 0), 32530944);
  BuildOptions opt;
  opt.fold = false;
  const ScheduleGraph g = build_schedule_graph(validated(sc), find_system(sc.cluster.system), opt);
  std::vector<TaskId> buckets;
  for (TaskId id : g.tasks_of_rank(0))
    if (g.task(id).phase == Phase::GradSync && g.task(id).part == Part::Gradients)
      buckets.push_back(id);
  ASSERT_EQ(buckets.size(), 9u);
  // The compute task each bucket waits for: its layer, or kNoIndex for the embedding.
  std::vector<int> waits;
  for (TaskId b : buckets)
    for (auto [e, end] = boost::in_edges(b, g.dependencies()); e != end; ++e) {
      const Task& t = g.task(boost::source(*e, g.dependencies()));
      if (t.stream == StreamId::Compute) waits.push_back(t.layer == kNoIndex ? -1 : int(t.layer));
    }
  EXPECT_EQ(waits, (std::vector<int>{7, 6, 5, 4, 2, 1, 0, -1, -1}));
}

TEST(MoeLayerPattern, HuggingFaceQwen3MoeSparseStepAndMlpOnlyLayers) {
  ScratchDir dir("hf_pattern");
  // transformers Qwen3MoeDecoderLayer: MoE when i is not in mlp_only_layers and
  // (i + 1) % decoder_sparse_step == 0.
  const std::string path = test_support::write_hf_scenario(
      dir,
      "{\"architectures\": [\"Qwen3MoeForCausalLM\"], \"num_hidden_layers\": 8, "
      "\"hidden_size\": 512, \"num_attention_heads\": 8, \"num_key_value_heads\": 4, "
      "\"head_dim\": 64, \"intermediate_size\": 1536, \"moe_intermediate_size\": 256, "
      "\"num_experts\": 8, \"num_experts_per_tok\": 2, \"decoder_sparse_step\": 2, "
      "\"mlp_only_layers\": [5], \"hidden_act\": \"silu\", \"rms_norm_eps\": 1e-6, "
      "\"rope_theta\": 1000000, \"tie_word_embeddings\": false, \"vocab_size\": 4096}",
      512);
  const Scenario sc = load_scenario(path);
  EXPECT_EQ(layers_of(sc.model), (std::vector<int>{0, 1, 0, 1, 0, 0, 0, 1}));
  // Qwen3's per-head query and key norms (qk_layernorm), 64 weights each per layer.
  EXPECT_EQ(total_params(sc.model), 5 * kDense + 3 * kMoe + kEmbed + 8 * 2 * 64);
  // Every layer MoE: no pattern written.
  const std::string all = dir.write(
      "all.json", "{\"architectures\": [\"Qwen3MoeForCausalLM\"], \"num_hidden_layers\": 8, "
                  "\"hidden_size\": 512, \"num_attention_heads\": 8, \"intermediate_size\": 1536, "
                  "\"num_experts\": 8, \"num_experts_per_tok\": 2, \"decoder_sparse_step\": 1, "
                  "\"mlp_only_layers\": [], \"vocab_size\": 4096}");
  for (const auto& [key, value] : import_hf_config(all)) EXPECT_NE(key, "moe_layer_freq");
  const std::string bad = dir.write(
      "bad.json", "{\"architectures\": [\"Qwen3MoeForCausalLM\"], \"num_hidden_layers\": 8, "
                  "\"hidden_size\": 512, \"num_attention_heads\": 8, \"intermediate_size\": 1536, "
                  "\"num_experts\": 8, \"num_experts_per_tok\": 2, \"mlp_only_layers\": [8], "
                  "\"vocab_size\": 4096}");
  try {
    import_hf_config(bad);
    ADD_FAILURE() << "layer 8 of 8 accepted";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find(bad + ": field 'mlp_only_layers' = [8]"),
              std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace trainsim
