// MXFP8 (parallel.fp8_recipe: mxfp8) against hand counts of bytes: Transformer Engine's MXFP8
// quantize writes the row-wise and the column-wise FP8 copies of its input with one E8M0 scale
// byte per 32 elements each, in one kernel without an amax pass (docs/scenario.md, fp8_recipe);
// the GEMMs read those scales with their operands; the saved FP8 activation copies and the FP8
// weight copies carry their scales in memory; the quantize kernels run at the profile's measured
// mxfp8_quantize_bytes_per_s. A bad value of that profile parameter names file, field and value.
#include <gtest/gtest.h>

#include <map>
#include <string>

#include "models/builder/graph_builder.h"
#include "models/errors.h"
#include "models/hardware/calibration.h"
#include "models/hardware/hardware.h"
#include "models/input/scenario.h"
#include "models/memory/memory_model.h"
#include "models/memory/zero_offload.h"
#include "models/perf/cost_model.h"
#include "models/perf/flops.h"
#include "tests/support/scenario_yaml.h"

namespace trainsim {
namespace {

const char* kLlama8b =
    "num_layers: 32, hidden_size: 4096, num_attention_heads: 32, num_query_groups: 8, "
    "ffn_hidden_size: 14336, swiglu: true, normalization: RMSNorm, position_embedding_type: rope, "
    "untie_embeddings_and_output_weights: true, add_bias_linear: false, hidden_dropout: 0.0, "
    "attention_dropout: 0.0, attention_backend: flash, seq_length: 8192, padded_vocab_size: 128256";

Scenario b200(const std::string& recipe, const std::string& extra = "") {
  const std::string par = "micro_batch_size: 2, global_batch_size: 16, precision: bf16, "
                          "fp8: hybrid, fp8_recipe: " + recipe + extra;
  return parse_scenario(test_support::core_scenario_yaml(kLlama8b, par, 1, "dgx-b200"),
                        "mxfp8.yaml");
}

/// Every kernel of the scenario's folded graph by name (the last one of each name).
std::map<std::string, KernelWork> kernels(const Scenario& sc) {
  BuildOptions opt;
  opt.fold = true;
  const ScheduleGraph g = build_schedule_graph(validated(sc), find_system(sc.cluster.system), opt);
  std::map<std::string, KernelWork> out;
  for (const OpDesc& o : g.ops())
    for (const KernelWork& k : op_kernels(o)) out[k.name] = k;
  return out;
}

// T = 2 x 8192 tokens, h = 4096, query width P = 4096, ffn F = 14336 (SwiGLU: fc1 writes 2F).
constexpr double T = 2 * 8192, h = 4096, P = 4096, F = 14336;

TEST(Mxfp8, QuantizeWritesBothCopiesAndTheirScalesWithoutAnAmaxPass) {
  const auto k = kernels(b200("mxfp8"));
  // read 2 bytes, write 1 + 1 bytes of FP8 data and 1/32 + 1/32 bytes of E8M0 scales
  const double per_element = 2 + 2 * (1 + 1.0 / 32);
  EXPECT_DOUBLE_EQ(k.at("qkv_input_cast").bytes, T * h * per_element);
  EXPECT_DOUBLE_EQ(k.at("fc1_input_cast").bytes, T * h * per_element);
  EXPECT_DOUBLE_EQ(k.at("proj_input_cast").bytes, T * P * per_element);
  EXPECT_DOUBLE_EQ(k.at("fc2_input_cast").bytes, T * F * per_element);
  EXPECT_TRUE(k.at("fc1_input_cast").mxfp8_quantize);
  for (const auto& [name, w] : k) EXPECT_EQ(name.find("_amax"), std::string::npos) << name;
  // Delayed scaling on the same GPU: the two FP8 copies, no scales, a streaming kernel.
  const auto d = kernels(b200("delayed"));
  EXPECT_DOUBLE_EQ(d.at("fc1_input_cast").bytes, T * h * (2 + 2));
  EXPECT_FALSE(d.at("fc1_input_cast").mxfp8_quantize);
}

TEST(Mxfp8, SequenceParallelCastsTheLocalShardRowWiseWithItsScales) {
  const auto k = kernels(b200("mxfp8", ", tensor_model_parallel_size: 4, sequence_parallel: true"));
  const double Tsp = T / 4;
  EXPECT_DOUBLE_EQ(k.at("qkv_input_cast").bytes, Tsp * h * (2 + 1 + 1.0 / 32));
  EXPECT_DOUBLE_EQ(k.at("fc1_input_cast").bytes, Tsp * h * (2 + 1 + 1.0 / 32));
}

TEST(Mxfp8, GemmsReadOneScaleBytePer32OperandElements) {
  const auto k = kernels(b200("mxfp8"));
  // fc1 forward: [T x h] x [h x 2F] on FP8 operands with scales, BF16 output.
  EXPECT_DOUBLE_EQ(k.at("fc1_gemm").bytes, (T * h + h * 2 * F) * (1 + 1.0 / 32) + T * 2 * F * 2);
  const auto d = kernels(b200("delayed"));
  EXPECT_DOUBLE_EQ(d.at("fc1_gemm").bytes, (T * h + h * 2 * F) * 1 + T * 2 * F * 2);
}

TEST(Mxfp8, QuantizeRunsAtTheProfilesMeasuredRate) {
  const SystemSpec& sys = find_system("dgx-b200");
  const CalibrationProfile prof = default_calibration(sys.gpu.name);
  ASSERT_DOUBLE_EQ(prof.mxfp8_quantize_bytes_per_s, 5.21e12);
  const CostModel cm(sys, prof);
  const KernelWork w = kernels(b200("mxfp8")).at("fc1_input_cast");
  EXPECT_DOUBLE_EQ(cm.kernel_time_s(w), w.bytes / 5.21e12 + prof.kernel_launch_overhead_s);
  // Without the rate (absent: 0) the kernel streams at the HBM rate.
  CalibrationProfile no_rate = prof;
  no_rate.mxfp8_quantize_bytes_per_s = 0;
  EXPECT_DOUBLE_EQ(CostModel(sys, no_rate).kernel_time_s(w),
                   w.bytes / (sys.gpu.hbm_bw_bytes_per_s * prof.hbm_efficiency) +
                       prof.kernel_launch_overhead_s);
}

TEST(Mxfp8, SavedFp8CopiesCarryTheirScales) {
  // Per layer, the FP8 copies kept for the backward: the QKV input (T h), the projection input
  // (T P), the fc1 input (T h) and the fc2 input (T F), one scale byte per 32 elements each.
  const LayerActivationBytes mx = layer_activation_bytes_no_recompute(b200("mxfp8"));
  const LayerActivationBytes de = layer_activation_bytes_no_recompute(b200("delayed"));
  EXPECT_EQ(mx.attn - de.attn, std::int64_t(T * (h + P) / 32));
  EXPECT_EQ(mx.mlp - de.mlp, std::int64_t(T * (h + F) / 32));
}

TEST(Mxfp8, WeightCopiesCarryTwoScaleBytesPer32Weights) {
  const Scenario mx = validated(b200("mxfp8")), de = validated(b200("delayed"));
  const CalibrationProfile prof = default_calibration("B200-SXM-180GB");
  const auto params = [&](const Scenario& sc) {
    return rank_state_bytes(sc, prof, 0).gpu[int(MemCategory::Parameters)];
  };
  // The linear weights of 32 layers: QKV h (P + 2 Pkv) + proj P h + fc1 h 2F + fc2 F h.
  const double linear = 32 * (h * (P + 2 * 1024) + P * h + h * 2 * F + F * h);
  EXPECT_EQ(linear_weights_per_rank(mx, 0), std::int64_t(linear));
  EXPECT_EQ(params(mx) - params(de), std::int64_t(linear) / 16);
}

TEST(Mxfp8, BadQuantizeRateNamesFileFieldAndValue) {
  std::string text = calibration_to_json(default_calibration("B200-SXM-180GB"));
  const std::string value = "\"value\": ";
  const auto at = text.find(value, text.find("\"mxfp8_quantize_bytes_per_s\""));
  ASSERT_NE(at, std::string::npos);
  const auto end = text.find_first_of(",\n}", at + value.size());
  text = text.substr(0, at + value.size()) + "-5" + text.substr(end);
  try {
    parse_calibration(text, "bad_b200.json");
    FAIL() << "expected InputError";
  } catch (const InputError& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("bad_b200.json"), std::string::npos) << msg;
    EXPECT_NE(msg.find("mxfp8_quantize_bytes_per_s"), std::string::npos) << msg;
    EXPECT_NE(msg.find("-5"), std::string::npos) << msg;
  }
}

}  // namespace
}  // namespace trainsim
