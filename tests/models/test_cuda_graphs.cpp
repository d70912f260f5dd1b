// CUDA graphs (docs/scenario.md "CUDA graphs"): the keys and the combinations Megatron-Core
// refuses (core_v0.16.0 transformer_config.py, arguments.py), the regions the builder marks
// (models/builder/cuda_graphs.h) and the static buffers counted in the memory category
// cuda_graphs (models/memory/cuda_graph_memory.h), against hand counts.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "models/builder/graph_builder.h"
#include "models/errors.h"
#include "models/hardware/hardware.h"
#include "models/memory/cuda_graph_memory.h"
#include "tests/support/scenario_yaml.h"

namespace trainsim {
namespace {

// A dense Llama-style layer: s 2048, h 1024, bf16.
const char* kDense =
    "num_layers: 4, hidden_size: 1024, num_attention_heads: 8, ffn_hidden_size: 2816, "
    "swiglu: true, normalization: RMSNorm, position_embedding_type: rope, add_bias_linear: false, "
    "hidden_dropout: 0.0, attention_dropout: 0.0, attention_backend: flash, seq_length: 2048, "
    "padded_vocab_size: 32000";
// The same with 8 experts (top-2) in every layer, the alltoall dispatcher.
const std::string kMoe = std::string(kDense) +
                         ", num_experts: 8, moe_router_topk: 2, moe_ffn_hidden_size: 512, "
                         "moe_grouped_gemm: true, moe_token_dispatcher_type: alltoall";
const char* kParallel =
    "pipeline_model_parallel_size: 2, micro_batch_size: 1, global_batch_size: 16, "
    "precision: bf16";

Scenario scenario(const std::string& model, const std::string& parallel,
                  const std::string& top = "") {
  return parse_scenario(top + test_support::core_scenario_yaml(model, parallel), "cg.yaml");
}

std::string refusal(const std::string& model, const std::string& parallel,
                    const std::string& top = "") {
  try {
    scenario(model, parallel, top);
  } catch (const InputError& e) {
    return e.what();
  }
  ADD_FAILURE() << "accepted: " << parallel;
  return "";
}

struct Bad {
  std::string model, parallel, field, value, top = "";
};

TEST(CudaGraphKeys, EveryBadValueNamesFileFieldAndValue) {
  const std::string P = std::string(kParallel) + ", ";
  const std::string drop = ", moe_expert_capacity_factor: 1.0";
  const std::string pad = drop + ", moe_pad_expert_input_to_capacity: true";
  const std::vector<Bad> cases = {
      {kDense, P + "cuda_graph_impl: graphs", "parallel.cuda_graph_impl", "graphs"},
      {kDense, P + "cuda_graph_impl: local, cuda_graph_scope: [attn, layer]",
       "parallel.cuda_graph_scope", "layer"},
      {kDense, P + "cuda_graph_impl: local, cuda_graph_scope: [full, attn]",
       "parallel.cuda_graph_scope", "full"},
      {kDense, P + "cuda_graph_impl: local, cuda_graph_scope: {attn: 1}",
       "parallel.cuda_graph_scope", "(a mapping)"},
      {kDense, P + "cuda_graph_scope: attn", "parallel.cuda_graph_scope", "attn"},
      {kDense, P + "enable_cuda_graph: true, cuda_graph_impl: local",
       "parallel.enable_cuda_graph", "true"},
      {kDense, P + "enable_cuda_graph: true, external_cuda_graph: true",
       "parallel.external_cuda_graph", "true"},
      {kDense, P + "enable_cuda_graph: maybe", "parallel.enable_cuda_graph", "maybe"},
      {kDense, P + "external_cuda_graph: 2", "parallel.external_cuda_graph", "2"},
      {kDense, P + "cuda_graph_impl: transformer_engine, cuda_graph_scope: full_iteration",
       "parallel.cuda_graph_scope", "full_iteration"},
      {kDense, P + "cuda_graph_impl: local, cuda_graph_scope: [full_iteration, attn]",
       "parallel.cuda_graph_scope", "attn,full_iteration"},
      {kDense, P + "cuda_graph_impl: transformer_engine, cuda_graph_scope: moe",
       "parallel.cuda_graph_scope", "moe"},
      {kDense, P + "cuda_graph_impl: transformer_engine, recompute_granularity: full",
       "parallel.cuda_graph_scope", "full"},
      {kDense, P + "cuda_graph_impl: local, cuda_graph_scope: full_iteration",
       "parallel.cuda_graph_scope", "full_iteration", "timing_log_level: 2\n"},
      {kMoe, P + "cuda_graph_impl: transformer_engine, cuda_graph_scope: [moe, moe_router]",
       "parallel.cuda_graph_scope", "moe,moe_router"},
      {kMoe, P + "cuda_graph_impl: transformer_engine, cuda_graph_scope: moe_preprocess",
       "parallel.cuda_graph_scope", "moe_preprocess"},
      {kMoe, P + "cuda_graph_impl: transformer_engine, cuda_graph_scope: mlp",
       "parallel.cuda_graph_scope", "mlp"},
      {kMoe, P + "cuda_graph_impl: transformer_engine, cuda_graph_scope: moe",
       "parallel.cuda_graph_scope", "moe"},
      {kMoe + drop,
       P + "cuda_graph_impl: transformer_engine, cuda_graph_scope: [moe_router, moe_preprocess]",
       "parallel.cuda_graph_scope", "moe_router,moe_preprocess"},
      {kMoe, P + "cuda_graph_impl: transformer_engine", "parallel.cuda_graph_scope", "full"},
      {kMoe, P + "cuda_graph_impl: local, cuda_graph_scope: full_iteration",
       "parallel.cuda_graph_scope", "full_iteration"},
      {kMoe + pad, P + "cuda_graph_impl: transformer_engine, cuda_graph_scope: moe_router, "
                       "recompute_granularity: selective, recompute_modules: [moe]",
       "parallel.cuda_graph_scope", "moe_router"},
  };
  for (const Bad& b : cases) {
    const std::string msg = refusal(b.model, b.parallel, b.top);
    EXPECT_NE(msg.find("cg.yaml"), std::string::npos) << msg;
    EXPECT_NE(msg.find(b.field), std::string::npos) << b.field << "\n" << msg;
    EXPECT_NE(msg.find(b.value), std::string::npos) << b.value << "\n" << msg;
  }
  // The 2021 runtime had no CUDA graphs.
  try {
    parse_scenario("model: {num_layers: 4, hidden_size: 1024, num_attention_heads: 8, "
                   "seq_length: 2048, padded_vocab_size: 32000}\nparallel: {" + P +
                       "cuda_graph_impl: local}\ncluster: {system: dgx-h100, nodes: 1}\n",
                   "cg.yaml");
    ADD_FAILURE() << "megatron-2021 with CUDA graphs accepted";
  } catch (const InputError& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("cg.yaml"), std::string::npos) << msg;
    EXPECT_NE(msg.find("parallel.cuda_graph_impl (local)"), std::string::npos) << msg;
  }
}

TEST(CudaGraphKeys, GoodValuesAreRead) {
  const std::string P = std::string(kParallel) + ", ";
  Scenario s = scenario(kDense, P + "enable_cuda_graph: true, cuda_graph_warmup_steps: 3");
  EXPECT_EQ(s.parallel.cuda_graph_impl, CudaGraphImpl::Local);
  EXPECT_EQ(s.parallel.cuda_graph_scope, 0);
  s = scenario(kDense, P + "external_cuda_graph: true, cuda_graph_scope: \"attn,mlp\"");
  EXPECT_EQ(s.parallel.cuda_graph_impl, CudaGraphImpl::TransformerEngine);
  EXPECT_EQ(s.parallel.cuda_graph_scope, kGraphAttn | kGraphMlp);
  s = scenario(kDense, P + "cuda_graph_impl: local, cuda_graph_scope: full");
  EXPECT_EQ(s.parallel.cuda_graph_scope, 0);
  // The local implementation captures moe_router and moe_preprocess together.
  s = scenario(kMoe, P + "cuda_graph_impl: local, cuda_graph_scope: [attn, moe_router]");
  EXPECT_EQ(s.parallel.cuda_graph_scope, kGraphAttn | kGraphMoeRouter | kGraphMoePreprocess);
}

ScheduleGraph graph_of(const Scenario& s) {
  BuildOptions opt;
  opt.fold = true;
  return build_schedule_graph(validated(s), find_system("dgx-h100"), opt);
}

TEST(CudaGraphRegions, WholeLayerIsOneRegionPerLayerMicrobatchAndPass) {
  const std::string P = std::string(kParallel) + ", ";
  const ScheduleGraph g = graph_of(scenario(kDense, P + "cuda_graph_impl: transformer_engine"));
  // 2 stages x 2 layers x 2 microbatches per data-parallel rank (16 / (1 x 4)) = 4 x 2 passes.
  const std::int64_t m = 16 / 4;
  ASSERT_EQ(g.simulated_ranks().size(), 2u);
  EXPECT_EQ(std::int64_t(g.cuda_graphs.size()), 2 * 2 * m * 2);
  for (const CudaGraphRegion& r : g.cuda_graphs) {
    EXPECT_EQ(r.capture, GraphCapture::Whole);
    // The attention block first in the forward, the MLP block first in the backward.
    EXPECT_EQ(g.task(r.first).part,
              g.task(r.first).phase == Phase::Backward ? Part::Mlp : Part::Attn);
    EXPECT_EQ(g.task(r.first).layer, g.task(r.last).layer);
    EXPECT_EQ(g.task(r.first).microbatch, g.task(r.last).microbatch);
  }
  const ScheduleGraph none = graph_of(scenario(kDense, kParallel));
  EXPECT_TRUE(none.cuda_graphs.empty());
  EXPECT_TRUE(none.cuda_graph_of_task.empty());
}

TEST(CudaGraphRegions, RouterScopeCapturesPartOfEachMoeMlpTask) {
  const std::string P = std::string(kParallel) + ", expert_model_parallel_size: 2, ";
  const ScheduleGraph g =
      graph_of(scenario(kMoe, P + "cuda_graph_impl: transformer_engine, "
                                  "cuda_graph_scope: [attn, moe_router]"));
  std::int64_t router = 0, attn = 0;
  for (const CudaGraphRegion& r : g.cuda_graphs) {
    if (r.capture == GraphCapture::Router) {
      ++router;
      EXPECT_EQ(r.first, r.last);
      EXPECT_EQ(g.task(r.first).part, Part::Mlp);
      EXPECT_EQ(g.task(r.first).kind, TaskKind::Compute);
    } else {
      ++attn;
      EXPECT_EQ(g.task(r.first).part, Part::Attn);
    }
  }
  const std::int64_t m = 16 / 4;  // dp 4 (8 GPUs / pp 2)
  EXPECT_EQ(router, 2 * 2 * m * 2);
  EXPECT_EQ(attn, 2 * 2 * m * 2);
  // The token-count syncs wait after the attention graph, never inside it.
  for (const HostSync& s : g.host_syncs) {
    const std::uint32_t r = g.cuda_graph_of_task[s.task];
    if (r != kNone) EXPECT_EQ(g.cuda_graphs[r].last, s.task);
  }
}

TEST(CudaGraphMemory, StaticBuffersMatchAHandCount) {
  const std::string P = std::string(kParallel) + ", ";
  const Scenario s =
      scenario(kDense, P + "cuda_graph_impl: transformer_engine, cuda_graph_scope: attn");
  // Hidden states of one microbatch: s 2048 x b 1 x h 1024 x 2 bytes (bf16).
  const std::int64_t hidden = 2048 * 1 * 1024 * 2;
  // 1F1B with pp 2 and 4 microbatches: stage 0 runs 1 warm-up forward then one more before its
  // first backward (2 in flight); stage 1 alternates (1 in flight). 2 layers per stage, one
  // attention graph each, 2 buffers per (graph, microbatch in flight): the static input and
  // the static output gradient.
  EXPECT_EQ(chunk_microbatches_in_flight(s, 0, 0), 2);
  EXPECT_EQ(chunk_microbatches_in_flight(s, 1, 0), 1);
  EXPECT_EQ(cuda_graph_static_bytes(s, 0), 2 * 2 * 2 * hidden);
  EXPECT_EQ(cuda_graph_static_bytes(s, 1), 2 * 1 * 2 * hidden);
  const ScheduleGraph g = graph_of(s);
  for (std::size_t i = 0; i < g.simulated_ranks().size(); ++i) {
    const std::int64_t stage = g.layout.coords(g.simulated_ranks()[i]).pp_stage;
    EXPECT_EQ(g.initial_gpu_memory[i][int(MemCategory::CudaGraphs)],
              (stage == 0 ? 2 : 1) * 2 * 2 * hidden);
  }
  // full_iteration: one static batch per microbatch, 28 bytes per token.
  const Scenario f =
      scenario(kDense, P + "cuda_graph_impl: local, cuda_graph_scope: full_iteration");
  EXPECT_EQ(cuda_graph_static_bytes(f, 0), 4 * 2048 * 28);
  EXPECT_EQ(cuda_graph_static_bytes(scenario(kDense, kParallel), 0), 0);
}

}  // namespace
}  // namespace trainsim
