// Peak GPU memory of dense Megatron-Core configurations against a closed form written here:
// model states (bf16 weights, FP8 weight copies, fp32 main grads, the distributed optimizer's
// 12 bytes per parameter over DP), NCCL buffers and framework, plus the activations of the
// microbatches in flight on pipeline stage 0 at the peak (1F1B: pp of them; interleaved:
// Megatron's warm-up of (pp - 1) x 2 + (v - 1) x pp chunks plus the one in its forward), each
// layer's activations counted term by term for Transformer Engine's kernels. The graph's peak
// (what `simulate` reports; tests/models/plan/test_planner.cpp shows the two agree) must be within 2%.
#include <gtest/gtest.h>

#include <string>

#include "models/hardware/calibration.h"
#include "models/builder/graph_builder.h"
#include "models/hardware/hardware.h"
#include "models/input/scenario.h"
#include "models/memory/zero_offload.h"

namespace trainsim {
namespace {

struct Dense {
  double L, h, a, g, d, f, V, s, b, t, pp, dp, vp, nmb;
  bool fp8;
};

/// Bytes of one layer's activations for one microbatch (SP with t > 1, flash, no dropout).
double layer_activations(const Dense& m) {
  const double T = m.b * m.s, Tsp = m.t > 1 ? T / m.t : T;
  const double P = m.a / m.t * m.d, Pkv = m.g / m.t * m.d, F = m.f / m.t;
  const double q = m.fp8 ? 1 : 2;  // FP8 copies of GEMM inputs
  const double attn = 2 * Tsp * m.h + 4 * Tsp + q * Tsp * m.h + 2 * T * (P + 2 * Pkv) + 2 * T * P +
                      4 * m.b * (m.a / m.t) * m.s + (m.fp8 ? T * P : 0);
  const double mlp = 2 * Tsp * m.h + 4 * Tsp + q * Tsp * m.h + 2 * T * 2 * F + q * T * F;
  return attn + mlp;
}

/// Stage 0's parameters: its layers, the word embedding (untied: the output layer sits on the
/// last stage).
double stage0_params(const Dense& m) {
  const double layer = (m.h * (m.a + 2 * m.g) * m.d + m.a * m.d * m.h + 3 * m.h * m.f) / m.t + 2 * m.h;
  return m.L / m.pp * layer + m.V / m.t * m.h;
}

double closed_form_peak(const Dense& m, const CalibrationProfile& prof, int communicators) {
  const double P = stage0_params(m);
  const double linear = m.L / m.pp * (m.h * (m.a + 2 * m.g) * m.d + m.a * m.d * m.h + 3 * m.h * m.f) / m.t;
  const double states = 2 * P + (m.fp8 ? 2 * linear : 0) + 4 * P + 12 * std::ceil(P / m.dp);
  const double fixed = communicators * prof.nccl_buffer_bytes_per_communicator + prof.framework_overhead_bytes;
  const double layers_per_chunk = m.L / m.pp / m.vp;
  const double chunks = m.vp == 1 ? std::min(m.pp, m.nmb)
                                  : std::min((m.pp - 1) * 2 + (m.vp - 1) * m.pp + 1, m.nmb * m.vp);
  return states + fixed + chunks * layers_per_chunk * layer_activations(m);
}

Scenario scenario(const Dense& m, const std::string& vpl, bool fp8) {
  const auto i = [](double x) { return std::to_string(static_cast<long long>(x)); };
  const std::string yaml =
      "runtime: megatron-core\nmodel: {num_layers: " + i(m.L) + ", hidden_size: " + i(m.h) +
      ", num_attention_heads: " + i(m.a) + ", num_query_groups: " + i(m.g) +
      ", ffn_hidden_size: " + i(m.f) + ", swiglu: true, normalization: RMSNorm, "
      "position_embedding_type: rope, untie_embeddings_and_output_weights: true, "
      "add_bias_linear: false, hidden_dropout: 0.0, attention_dropout: 0.0, attention_backend: "
      "flash, seq_length: " + i(m.s) + ", padded_vocab_size: " + i(m.V) + "}\nparallel: "
      "{tensor_model_parallel_size: " + i(m.t) + ", pipeline_model_parallel_size: " + i(m.pp) +
      ", " + vpl + "micro_batch_size: " + i(m.b) + ", global_batch_size: " +
      i(m.b * m.dp * m.nmb) + ", sequence_parallel: " + (m.t > 1 ? "true" : "false") +
      ", precision: bf16, " + (fp8 ? "fp8: hybrid, fp8_recipe: tensorwise, " : "") +
      "use_distributed_optimizer: true, overlap_grad_reduce: true}\ncluster: {system: dgx-h100, "
      "nodes: " + i(m.t * m.pp * m.dp / 8) + "}\n";
  return parse_scenario(yaml, "dense.yaml");
}

void expect_peak(const Dense& m, const std::string& vpl) {
  const Scenario sc = scenario(m, vpl, m.fp8);
  const SystemSpec& sys = find_system("dgx-h100");
  const CalibrationProfile prof = default_calibration(sys.gpu.name);
  BuildOptions opt;
  opt.fold = true;
  const ScheduleGraph g = build_schedule_graph(validated(sc), sys, opt);
  const double model = double(program_order_peak_gpu_bytes(g, 0));
  const double closed = closed_form_peak(m, prof, communicators_of_rank(sc, 0));
  EXPECT_NEAR(model / closed, 1.0, 0.02) << "model " << model / 1e9 << " GB, closed form "
                                         << closed / 1e9 << " GB";
}

// Llama 3 70B as Megatron-Bridge runs it on 64 H100 (TP 4, PP 8, VP 5, DP 2, FP8).
TEST(ModernMemory, Llama70bInterleavedFp8MatchesClosedForm) {
  expect_peak({80, 8192, 64, 8, 128, 28672, 128256, 8192, 1, 4, 8, 2, 5, 64, true},
              "num_layers_per_virtual_pipeline_stage: 2, ");
}

// The same model on 1F1B without FP8 (TP 8, PP 8, DP 1).
TEST(ModernMemory, Llama70bOneFOneBBf16MatchesClosedForm) {
  expect_peak({80, 8192, 64, 8, 128, 28672, 128256, 4096, 1, 8, 8, 2, 1, 16, false}, "");
}

// Llama 3 8B with TP 2, PP 2, DP 2, micro batch 2, FP8.
TEST(ModernMemory, Llama8bTp2Pp2Fp8MatchesClosedForm) {
  expect_peak({32, 4096, 32, 8, 128, 14336, 128256, 8192, 2, 2, 2, 2, 1, 8, true}, "");
}

// Transformer Engine's userbuffers (tp_comm_overlap) for the 70B layout: 12 buffers of
// [s b / cp, h] = 8192 x 8192 elements, the 8 all-gather ones in FP8, the reduce-scatter ones
// in bf16, a ring-exchange reduce-scatter holding 2t - 1 = 7 quarter-chunks.
TEST(ModernMemory, UserbuffersOfTheTpCommOverlap) {
  const Dense m{80, 8192, 64, 8, 128, 28672, 128256, 8192, 1, 4, 8, 2, 5, 64, true};
  const std::string vpl = "num_layers_per_virtual_pipeline_stage: 2, ";
  const double elements = 8192.0 * 8192, MiB = 1 << 20;
  EXPECT_EQ(userbuffers_bytes(scenario(m, vpl, true)), 0);  // no overlap asked for
  Scenario sc = scenario(m, vpl, true);
  sc.parallel.tp_comm_overlap = true;
  EXPECT_EQ(userbuffers_bytes(sc), 8 * elements + 2 * elements * 2 + 2 * elements * 2);
  sc.parallel.tp_comm_overlap_rs_ring = true;
  EXPECT_EQ(userbuffers_bytes(sc), 8 * elements + 2 * (elements / 4 * 7 * 2) + 2 * elements * 2);
  EXPECT_EQ(userbuffers_bytes(sc) / MiB, 1216);
  Scenario bf16 = scenario(m, vpl, false);
  bf16.parallel.tp_comm_overlap = true;
  EXPECT_EQ(userbuffers_bytes(bf16), 12 * elements * 2);
  // They sit in the rank's communication buffers from the start.
  const CalibrationProfile prof = default_calibration("H100-SXM5-80GB");
  EXPECT_EQ(rank_state_bytes(sc, prof, 0).gpu[int(MemCategory::CommBuffers)] -
                rank_state_bytes(scenario(m, vpl, true), prof, 0).gpu[int(MemCategory::CommBuffers)],
            userbuffers_bytes(sc));
}

}  // namespace
}  // namespace trainsim
