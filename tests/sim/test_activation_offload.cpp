// Activation CPU offloading (models/builder/offload.h ActivationOffload, Megatron-Core
// cpu_offloading through Transformer Engine's get_cpu_offload_context): TE's window map by
// hand, the bytes moved per layer, the memory saved at the end of the forward, a case where
// the copies are slower than the compute so they bind (closed form), and the refusals.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "models/builder/graph_builder.h"
#include "models/builder/offload.h"
#include "models/errors.h"
#include "models/hardware/calibration.h"
#include "models/hardware/hardware.h"
#include "models/input/scenario.h"
#include "models/perf/cost_model.h"
#include "sim/executor.h"

using namespace trainsim;

namespace {

/// A small Megatron-Core model on one A100 (PCIe Gen4 host link). `layers` layers, the
/// `extra` parallel keys appended (cpu offloading).
Scenario small(int layers, const std::string& extra, int gbs = 1, int gpus = 1) {
  const std::string yaml =
      "name: offload\nruntime: megatron-core\nhost_model: false\n"
      "model: {num_layers: " + std::to_string(layers) +
      ", hidden_size: 256, num_attention_heads: 8, seq_length: 1024, padded_vocab_size: 1024}\n"
      "parallel: {micro_batch_size: 1, global_batch_size: " + std::to_string(gbs) + extra +
      "}\ncluster: {system: dgx-a100-80gb, nodes: 1, gpus_per_node: " + std::to_string(gpus) +
      "}\n";
  return parse_scenario(yaml, "offload.yaml");
}

ScheduleGraph build(const Scenario& sc) {
  return build_schedule_graph(validated(sc), find_system(sc.cluster.system), BuildOptions{});
}

std::vector<TaskId> of_kind(const ScheduleGraph& g, TaskKind kind) {
  std::vector<TaskId> out;
  for (TaskId id : g.tasks_of_rank(0))
    if (g.task(id).kind == kind && g.task(id).phase == Phase::Offload) out.push_back(id);
  return out;
}

/// The device activation bytes a layer's forward allocates (its attention and MLP tasks).
std::int64_t forward_bytes_of_layer(const ScheduleGraph& g, std::uint16_t layer) {
  std::int64_t sum = 0;
  for (TaskId id : g.tasks_of_rank(0)) {
    const Task& t = g.task(id);
    if (t.kind != TaskKind::Compute || t.phase != Phase::Forward || t.layer != layer ||
        t.microbatch != 0)
      continue;
    for (auto e = g.effects_begin(id); e != g.effects_end(id); ++e)
      if (!e->on_host && e->category == MemCategory::Activations && e->bytes > 0) sum += e->bytes;
  }
  return sum;
}

/// Device (or host) activation bytes in program order, just before the first output-layer task.
std::int64_t activations_before_logits(const ScheduleGraph& g, bool host) {
  std::int64_t level = 0;
  for (TaskId id : g.tasks_of_rank(0)) {
    if (g.task(id).part == Part::Logits) break;
    for (auto e = g.effects_begin(id); e != g.effects_end(id); ++e)
      if (e->on_host == host && e->category == MemCategory::Activations) level += e->bytes;
  }
  return level;
}

void expect_refused(const std::string& extra, const std::vector<std::string>& words,
                    int gpus = 1) {
  try {
    (void)validated(small(4, extra, 1, gpus));
    FAIL() << extra << " accepted";
  } catch (const InputError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("offload.yaml"), std::string::npos) << what;
    for (const std::string& w : words) EXPECT_NE(what.find(w), std::string::npos) << what;
  }
}

}  // namespace

TEST(ActivationOffload, WindowsAreTransformerEnginesLayerWindowMap) {
  using builder::ActivationOffload;
  // L = 80, k = 40 (Llama 3 70B on GB200): L // k = 2, no remainder: 2 (i + 1) - 1.
  const auto w70 = ActivationOffload::offload_windows(80, 40);
  ASSERT_EQ(w70.size(), 40u);
  for (std::size_t i = 0; i < 40; ++i) EXPECT_EQ(w70[i], std::int64_t(2 * i + 1)) << i;
  // L = 126, k = 92 (Llama 3.1 405B): L // k = 1, L % k = 34: (i + 1) - 1 + (i + 1) = 2i + 1
  // for i < 34, then (i + 1) - 1 + 34 = i + 34.
  const auto w405 = ActivationOffload::offload_windows(126, 92);
  ASSERT_EQ(w405.size(), 92u);
  EXPECT_EQ(w405[0], 1);
  EXPECT_EQ(w405[33], 67);
  EXPECT_EQ(w405[34], 68);
  EXPECT_EQ(w405[91], 125);
  // L = 8, k = 3: L // k = 2, L % k = 2: 1 + 1 = 2, 3 + 2 = 5, 5 + 2 = 7.
  EXPECT_EQ(ActivationOffload::offload_windows(8, 3), (std::vector<std::int64_t>{2, 5, 7}));
}

TEST(ActivationOffload, MovesEachOffloadedLayersActivationsBothWays) {
  const std::string on = ", cpu_offloading: true, cpu_offloading_num_layers: 3";
  const ScheduleGraph off_g = build(small(8, "", 2));
  const ScheduleGraph g = build(small(8, on, 2));
  const std::int64_t a = forward_bytes_of_layer(g, 0);
  ASSERT_GT(a, 0);
  // Every layer of this dense model keeps the same bytes; the offloaded ones are copied whole.
  for (std::uint16_t l = 1; l < 8; ++l) EXPECT_EQ(forward_bytes_of_layer(g, l), a) << l;
  const auto d2h = of_kind(g, TaskKind::CopyD2H), h2d = of_kind(g, TaskKind::CopyH2D);
  ASSERT_EQ(d2h.size(), 2u * 3);  // 2 microbatches x layers 0, 1, 2
  ASSERT_EQ(h2d.size(), 2u * 3);
  for (std::size_t i = 0; i < d2h.size(); ++i) {
    EXPECT_EQ(g.op(d2h[i]).bytes, a) << i;
    EXPECT_EQ(g.op(h2d[i]).bytes, a) << i;
    EXPECT_EQ(g.task(d2h[i]).layer, i % 3) << i;
    EXPECT_EQ(g.task(h2d[i]).layer, 2 - i % 3) << i;  // reloaded last layer first
    EXPECT_EQ(g.task(d2h[i]).stream, StreamId::D2H);
    EXPECT_EQ(g.task(h2d[i]).stream, StreamId::H2D);
  }
  // Memory saved at the end of the forward: 3 layers' activations leave the device and sit in
  // host memory; without offloading nothing is on the host.
  EXPECT_EQ(activations_before_logits(off_g, false) - activations_before_logits(g, false), 3 * a);
  EXPECT_EQ(activations_before_logits(g, true), 3 * a);
  EXPECT_EQ(activations_before_logits(off_g, true), 0);
  // No copy without the switch (the keys default off).
  EXPECT_TRUE(of_kind(off_g, TaskKind::CopyD2H).empty());
  EXPECT_TRUE(of_kind(off_g, TaskKind::CopyH2D).empty());
}

// Two layers, the first offloaded: TE's window map gives window[0] = 1, so layer 0's copy to
// the host starts after its forward and layer 1's forward is followed by a wait for it; in the
// backward layer 0 is reloaded before layer 1's backward and layer 0's backward waits for it.
// With the copy time c over PCIe Gen4 longer than a layer's forward (f1) and backward (b1),
// the iteration is longer by exactly (c - f1) + (c - b1).
TEST(ActivationOffload, ASlowCopyBindsByItsExcessOverTheLayersItOverlaps) {
  const Scenario off_sc = small(2, ""), on_sc = small(2, ", cpu_offloading: true, "
                                                          "cpu_offloading_num_layers: 1");
  const SystemSpec& sys = find_system("dgx-a100-80gb");
  const CalibrationProfile prof = default_calibration(sys.gpu.name);
  const CostModel cost(sys, prof);
  const ScheduleGraph off_g = build(off_sc), g = build(on_sc);
  const ValidScenario off_v = validated(off_sc), on_v = validated(on_sc);
  const ExecutionRecord off_r = sim::simulate(off_g, *off_v, sys, cost);
  const ExecutionRecord r = sim::simulate(g, *on_v, sys, cost);
  // Layer 1's forward and backward compute time, from the cost model's ops.
  double f1 = 0, b1 = 0;
  for (TaskId id : off_g.tasks_of_rank(0)) {
    const Task& t = off_g.task(id);
    if (t.kind != TaskKind::Compute || t.layer != 1) continue;
    (t.phase == Phase::Forward ? f1 : b1) += cost.compute_time_s(off_g.op(id));
  }
  const std::int64_t a = forward_bytes_of_layer(g, 0);
  // hardware.md: PCIe Gen4 x16 32 GB/s per direction, times the profile's efficiency.
  const double c = sys.pcie_latency_s + double(a) / (32e9 * prof.pcie_efficiency);
  ASSERT_GT(c, f1) << "the copy must be slower than the layer's forward for this case";
  ASSERT_GT(c, b1) << "the copy must be slower than the layer's backward for this case";
  EXPECT_NEAR(r.iteration_time_s() - off_r.iteration_time_s(), (c - f1) + (c - b1), 1e-9);
}

TEST(ActivationOffload, RefusedWhereMegatronCoreRefusesIt) {
  expect_refused(", cpu_offloading: true, cpu_offloading_num_layers: 4",
                 {"parallel.cpu_offloading_num_layers (4)", "model.num_layers (4)"});
  expect_refused(", cpu_offloading: true, cpu_offloading_num_layers: 2, "
                 "pipeline_model_parallel_size: 2",
                 {"parallel.pipeline_model_parallel_size (2)", "parallel.cpu_offloading (true)"}, 2);
  expect_refused(", cpu_offloading: true, cpu_offloading_num_layers: 2, "
                 "recompute_granularity: full, recompute_method: uniform, recompute_num_layers: 1",
                 {"parallel.recompute_granularity (full)", "parallel.cpu_offloading (true)"});
  expect_refused(", cpu_offloading: true, cpu_offloading_num_layers: 2, "
                 "cpu_offloading_activations: false",
                 {"parallel.cpu_offloading_activations (false)",
                  "parallel.cpu_offloading_weights (false)"});
  expect_refused(", cpu_offloading: true, cpu_offloading_num_layers: 2, "
                 "cpu_offloading_weights: true",
                 {"parallel.cpu_offloading_weights (true)", "not modelled"});
  expect_refused(", cpu_offloading_num_layers: -1",
                 {"parallel.cpu_offloading_num_layers", "-1"});
  expect_refused(", cpu_offloading: 3", {"parallel.cpu_offloading", "3"});
}

TEST(ActivationOffload, NeedsTheMegatronCoreRuntime) {
  const std::string yaml =
      "name: offload\nmodel: {num_layers: 4, hidden_size: 256, num_attention_heads: 8, "
      "seq_length: 128, padded_vocab_size: 1024}\nparallel: {micro_batch_size: 1, "
      "global_batch_size: 1, cpu_offloading: true, cpu_offloading_num_layers: 1}\n"
      "cluster: {system: dgx-a100-80gb, nodes: 1, gpus_per_node: 1}\n";
  try {
    (void)validated(parse_scenario(yaml, "old.yaml"));
    FAIL() << "cpu_offloading accepted under megatron-2021";
  } catch (const InputError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("old.yaml"), std::string::npos) << what;
    EXPECT_NE(what.find("parallel.cpu_offloading (true)"), std::string::npos) << what;
    EXPECT_NE(what.find("runtime"), std::string::npos) << what;
  }
}
