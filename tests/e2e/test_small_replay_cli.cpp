// The small Megatron-Core scenarios (scenarios/small/llama-tiny_*, qwen3-moe-tiny_*) end to end
// on the CPU: `validate --device cpu` simulates each with the checked-in CPU profile, replays
// its rank 0 through the Megatron-Core layers (hw_backend/core_layer.h), with --nprocs N
// together with ranks 1..N-1 in their own processes (the MoE scenario's all-to-alls, the
// pipeline's messages and the distributed optimizer's buckets real), and pairs every task of
// the rank (the count of rank 0's tasks comes from the simulator's own trace); the time and
// memory errors are printed, not asserted (wall time on a shared machine is not a test). Then a
// replay trace's host thread feeds `calibrate --from-trace`, which writes the `host` section.
#include <gtest/gtest.h>

#include "tests/e2e/cli_helpers.h"

#include <cstdlib>
#include <iostream>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "tests/support/paths.h"

using trainsim::test_support::source_path;
using trainsim_e2e::run;
using trainsim_e2e::slurp;

namespace {

const std::string kOut = std::string(TRAINSIM_BINARY_DIR) + "/e2e_small_replay_cli";
const std::string kProfile = source_path("tests/golden/cpu_profile.json");

/// Task spans (args.task) of pid 0 in a trace.
int rank0_tasks(const std::string& trace) {
  int n = 0;
  const nlohmann::json t = nlohmann::json::parse(slurp(trace));
  for (const auto& e : t["traceEvents"])
    if (e.value("ph", "") == "X" && e.value("pid", -1) == 0 && e.contains("args") &&
        e["args"].contains("task") && e.value("cat", "").rfind("host_", 0) != 0 &&
        e.value("cat", "") != "wait")
      ++n;
  return n;
}

}  // namespace

TEST(SmallReplayCli, ValidateOnTheCpuPairsEveryTask) {
#ifndef TRAINSIM_HAVE_VALIDATE
  GTEST_SKIP() << "the validate verb is not in this build (LibTorch or SimGrid missing)";
#endif
  std::system(("mkdir -p " + kOut).c_str());
  // The MoE scenario over its 2 ranks (its EP 2 all-to-alls between the processes) and the
  // two-stage distributed-optimizer one over its 4 (pipeline messages, reduce-scatter and
  // all-gather buckets real); the dense one in one process.
  const std::vector<std::pair<std::string, int>> runs = {{"llama-tiny_tp1_pp1_dp1", 1},
                                                         {"qwen3-moe-tiny_tp1_pp1_ep2_dp2", 2},
                                                         {"llama-tiny_tp1_pp2_dp2_distopt", 4}};
  for (const auto& [name, nprocs] : runs) {
    SCOPED_TRACE(name);
    const std::string sc = source_path(std::string("scenarios/small/") + name + ".yaml");
    const std::string base = kOut + "/" + name;
    ASSERT_EQ(run("simulate " + sc + " --calibration " + kProfile + " --trace " + base +
                      ".sim.json --trace-ranks 0",
                  base + ".sim.log"),
              0)
        << slurp(base + ".sim.log");
    ASSERT_EQ(run("validate " + sc + " --device cpu --calibration " + kProfile +
                      " --repeat 1 --nprocs " + std::to_string(nprocs) + " --json " + base +
                      ".json",
                  base + ".log"),
              0)
        << slurp(base + ".log");
    const auto r = nlohmann::json::parse(slurp(base + ".json"));
    EXPECT_EQ(r["rank"], 0);
    // The comparison ran and paired every task of the traced rank.
    EXPECT_EQ(r["tasks_compared"].get<int>(), rank0_tasks(base + ".sim.json"));
    std::string notes;
    for (const auto& n : r["notes"]) notes += n.get<std::string>() + "\n";
    EXPECT_NE(notes.find("Megatron-Core layers"), std::string::npos) << notes;
    EXPECT_EQ(notes.find("not replayed"), std::string::npos) << notes;
    if (nprocs > 1) {
      EXPECT_EQ(r["processes"].get<int>(), nprocs);
      ASSERT_EQ(r["measured_per_rank"].size(), std::size_t(nprocs));
      for (int p = 0; p < nprocs; ++p) {
        EXPECT_EQ(r["measured_per_rank"][p]["rank"].get<int>(), p);
        EXPECT_EQ(r["measured_per_rank"][p]["iteration_times_s"].size(), 1u);  // --repeat 1
      }
      EXPECT_NE(notes.find("multi-process CPU replay: rank 0 of " + std::to_string(nprocs)),
                std::string::npos) << notes;
      // Every collective and pipeline message among ranks all present ran between processes:
      // none is a device-local substitute (all ranks of each scenario are launched).
      EXPECT_NE(notes.find("ran between the processes"), std::string::npos) << notes;
      EXPECT_EQ(notes.find("device-local copies"), std::string::npos) << notes;
    }
    std::cout << "[ NOTE ] " << name << ": iteration_time_error " << r["iteration_time_error"]
              << ", peak_memory_error " << r["peak_memory_error"] << " (printed, not asserted)\n";
  }
}

TEST(SmallReplayCli, CalibrateFitsTheHostSectionFromAReplayTrace) {
#ifndef TRAINSIM_HAVE_VALIDATE
  GTEST_SKIP() << "calibrate --from-trace of a replay trace is tested in the LibTorch build";
#endif
  std::system(("mkdir -p " + kOut).c_str());
  // The checked-in CPU replay trace (validation/data/replay_llama-tiny_cpu.trace.json).
  const std::string trace = source_path("validation/data/replay_llama-tiny_cpu.trace.json");
  const std::string out = kOut + "/host_profile.json";
  ASSERT_EQ(run("calibrate --from-trace " + trace + " --base " + kProfile + " --out " + out,
                kOut + "/calibrate_host.log"),
            0)
      << slurp(kOut + "/calibrate_host.log");
  const auto p = nlohmann::json::parse(slurp(out));
  ASSERT_TRUE(p.contains("host")) << p.dump(1);
  for (const char* k : {"eager_op_s", "autograd_node_s", "nccl_call_s", "module_overhead_s"}) {
    ASSERT_TRUE(p["host"].contains(k)) << k;
    EXPECT_GE(p["host"][k]["value"].get<double>(), 0.0) << k;
    EXPECT_NE(p["host"][k]["source"].get<std::string>().find("replay_llama-tiny_cpu"),
              std::string::npos);
  }
  // On the CPU each op runs to completion inside its issue: a positive per-op cost.
  EXPECT_GT(p["host"]["eager_op_s"]["value"].get<double>() +
                p["host"]["autograd_node_s"]["value"].get<double>(),
            0.0);
}

// Done-when of the replay issue: every scenarios/h100/*.yaml, shrunk to fit the CPU with --set
// (the same parallel layout; tiny widths, few layers, few microbatches), replays its rank 0
// with its own layer types: the notes name the Megatron-Core layers and nothing "not replayed".
TEST(SmallReplayCli, ShrunkH100ScenariosReplayTheirOwnLayersOnTheCpu) {
#ifndef TRAINSIM_HAVE_REPLAY
  GTEST_SKIP() << "the replay verb is not in this build (LibTorch was not found)";
#endif
  std::system(("mkdir -p " + kOut).c_str());
  const std::string common =
      " --set model.hidden_size=128 --set model.num_attention_heads=16 --set "
      "model.num_query_groups=8 --set model.kv_channels=8 --set model.ffn_hidden_size=256 --set "
      "model.seq_length=64 --set model.padded_vocab_size=1024";
  const std::string moe = " --set model.num_experts=32 --set model.moe_ffn_hidden_size=64";
  // Layers: two virtual chunks per stage (405B and 235B count the embedding and the loss as
  // a layer each in the split); microbatches: a multiple of the stages.
  const std::vector<std::pair<std::string, std::string>> runs = {
      {"gpt-oss-120b_bf16_tp1_pp4_ep8_dp16_r25.11",
       moe + " --set model.num_layers=4 --set model.window_size=16 --set parallel.global_batch_size=64"},
      {"llama3-70b_fp8-cs_tp4_pp8_vp5_dp2_r25.11",
       " --set model.num_layers=32 --set parallel.global_batch_size=16"},
      {"llama3-70b_fp8_tp4_pp8_vp5_dp2_r25.09",
       " --set model.num_layers=32 --set parallel.global_batch_size=16"},
      {"llama3-8b_fp8-cs_fsdp8_tp1_pp1_dp8_r25.11",
       " --set model.num_layers=2 --set parallel.global_batch_size=16"},
      {"llama3-8b_fp8_fsdp8_tp1_pp1_dp8_r25.09",
       " --set model.num_layers=2 --set parallel.global_batch_size=16"},
      {"llama3.1-405b_fp8-cs_tp8_pp8_cp2_vp8_dp8_r25.11",
       " --set model.num_layers=30 --set parallel.global_batch_size=64"},
      {"llama3.1-405b_fp8_tp8_pp8_cp2_vp8_dp8_r25.09",
       " --set model.num_layers=30 --set parallel.global_batch_size=64"},
      {"qwen3-235b-a22b_fp8-cs_tp2_pp8_vp4_ep32_dp16_r25.11",
       moe + " --set model.num_layers=46 --set parallel.global_batch_size=128"},
      // The recipe's EP overlap with its delayed weight gradients: 8 microbatches over 2 stages
      // of 2 virtual chunks leave a steady state, whose merged steps split the MoE backward.
      {"qwen3-30b-a3b_fp8-cs_tp1_pp2_vp24_ep8_dp8_r25.11",
       moe + " --set model.num_layers=4 --set parallel.global_batch_size=128"},
  };
  for (const auto& [name, sets] : runs) {
    SCOPED_TRACE(name);
    const std::string base = kOut + "/h100_" + name;
    ASSERT_EQ(run("replay " + source_path("scenarios/h100/" + name + ".yaml") + common + sets +
                      " --device cpu --json " + base + ".json",
                  base + ".log"),
              0)
        << slurp(base + ".log");
    const auto r = nlohmann::json::parse(slurp(base + ".json"));
    std::string notes;
    for (const auto& n : r["notes"]) notes += n.get<std::string>() + "\n";
    EXPECT_NE(notes.find("layers: Megatron-Core layers (RMSNorm"), std::string::npos) << notes;
    for (const char* substituted : {"not replayed", "ran grouped-query attention", "dropless",
                                    "2021 GPT layer", "substituted"})
      EXPECT_EQ(notes.find(substituted), std::string::npos) << substituted << "\n" << notes;
    if (sets.find("num_experts") != std::string::npos)
      EXPECT_NE(notes.find("MoE: MlpFwd/MlpBwd ran router"), std::string::npos) << notes;
    if (name.rfind("gpt-oss", 0) == 0)  // model.quick_geglu with its clamp and offset
      EXPECT_NE(notes.find("clamped quick-GeGLU (GPT-OSS)"), std::string::npos) << notes;
    if (name.rfind("qwen3-30b", 0) == 0) {  // delay_wgrad_compute: the split ran its GEMMs
      EXPECT_NE(notes.find("MoE backward split (parallel.delay_wgrad_compute)"), std::string::npos)
          << notes;
      EXPECT_NE(notes.find("held-back expert weight-gradient GEMMs ran"), std::string::npos) << notes;
    }
    EXPECT_EQ(notes.find("forward states were still alive"), std::string::npos) << notes;
  }
}

// The shared expert apart with the MoE layer re-run in the backward is refused with the keys
// named (the replay runs the shared expert's tasks with autograd state only), exit 1.
TEST(SmallReplayCli, TheSharedExpertApartWithMoeRecomputationIsRefused) {
#ifndef TRAINSIM_HAVE_REPLAY
  GTEST_SKIP() << "the replay verb is not in this build (LibTorch was not found)";
#endif
  std::system(("mkdir -p " + kOut).c_str());
  const std::string log = kOut + "/shared_apart_recompute.log";
  const std::string sets =
      " --set model.hidden_size=128 --set model.num_attention_heads=16 --set "
      "model.ffn_hidden_size=256 --set model.seq_length=64 --set model.padded_vocab_size=1024 "
      "--set model.qk_head_dim=4 --set model.qk_pos_emb_head_dim=4 --set model.v_head_dim=8 "
      "--set model.q_lora_rank=32 --set model.kv_lora_rank=16 --set model.num_experts=64 --set "
      "model.moe_ffn_hidden_size=64 --set model.moe_shared_expert_intermediate_size=64 --set "
      "parallel.global_batch_size=32 --set parallel.recompute_modules=[mla_up_proj,moe]";
  EXPECT_EQ(run("replay " + source_path("scenarios/b200/deepseek-v3_fp8-mx_tp1_pp16_ep8_dp16_r25.11.yaml") +
                    sets + " --device cpu",
                log),
            1);
  EXPECT_NE(slurp(log).find("model.moe_shared_expert_overlap (true) with the MoE layer's "
                            "recomputation (recompute_granularity full, or recompute_modules moe)"),
            std::string::npos)
      << slurp(log);
}

// validate --nprocs refuses what cannot run, naming the scenario file, the flag and the value.
TEST(SmallReplayCli, ValidateRefusesBadProcessCounts) {
#ifndef TRAINSIM_HAVE_VALIDATE
  GTEST_SKIP() << "the validate verb is not in this build (LibTorch or SimGrid missing)";
#endif
  std::system(("mkdir -p " + kOut).c_str());
  const std::string sc = source_path("scenarios/small/qwen3-moe-tiny_tp1_pp1_ep2_dp2.yaml");
  const std::string log = kOut + "/validate_bad_nprocs.log";
  const std::string common = "validate " + sc + " --device cpu --calibration " + kProfile;
  // More processes than the scenario's 2 ranks.
  EXPECT_EQ(run(common + " --nprocs 3", log), 1);
  EXPECT_NE(slurp(log).find(sc + ": --nprocs 3 is more than the 2 ranks"), std::string::npos)
      << slurp(log);
  // A launcher's WORLD_SIZE that differs from --nprocs.
  EXPECT_EQ(run(common + " --nprocs 2", log, "env RANK=0 WORLD_SIZE=3 TRAINSIM_NCCL_DIR=/tmp"), 1);
  EXPECT_NE(slurp(log).find("--nprocs 2 but the launcher"), std::string::npos) << slurp(log);
  EXPECT_NE(slurp(log).find("WORLD_SIZE=3"), std::string::npos) << slurp(log);
  // 0 processes: the flag's own check.
  EXPECT_NE(run(common + " --nprocs 0", log), 0);
  EXPECT_NE(slurp(log).find("--nprocs"), std::string::npos) << slurp(log);
}

// The same for the DeepSeek-V3 scenarios (multi-head latent attention) and every scenario of
// scenarios/b200 and scenarios/gb200, plus one with token dropping: no note says a layer was
// substituted (no "not replayed", no grouped-query attention in place of MLA, no "dropless").
// FP8 notes ("the CPU has no FP8 GEMMs") say which task ran what and are allowed.
TEST(SmallReplayCli, ShrunkDeepSeekB200AndGb200ScenariosReplayTheirOwnLayersOnTheCpu) {
#ifndef TRAINSIM_HAVE_REPLAY
  GTEST_SKIP() << "the replay verb is not in this build (LibTorch was not found)";
#endif
  std::system(("mkdir -p " + kOut).c_str());
  const std::string widths =
      " --set model.hidden_size=128 --set model.num_attention_heads=16 --set "
      "model.ffn_hidden_size=256 --set model.seq_length=64 --set model.padded_vocab_size=1024";
  const std::string gqa = widths + " --set model.num_query_groups=8 --set model.kv_channels=8";
  // MLA: q/k head 4 + 4 RoPE (= kv_channels 8), value 8, latents 32 and 16.
  const std::string mla = widths +
                          " --set model.qk_head_dim=4 --set model.qk_pos_emb_head_dim=4 --set "
                          "model.v_head_dim=8 --set model.q_lora_rank=32 --set "
                          "model.kv_lora_rank=16";
  const std::string moe32 = " --set model.num_experts=32 --set model.moe_ffn_hidden_size=64";
  const std::string moe64 = " --set model.num_experts=64 --set model.moe_ffn_hidden_size=64 --set "
                            "model.moe_shared_expert_intermediate_size=64";
  struct Run {
    std::string file, sets;
  };
  const std::vector<Run> runs = {
      // The recipe's EP overlap with its delayed weight gradients (no steady state at 8
      // microbatches over 8 stages of 4 chunks: every MoE backward runs whole).
      {"h100/deepseek-v3_bf16_tp2_pp8_vp4_ep64_dp64_r25.09",
       mla + moe64 + " --set parallel.global_batch_size=512"},
      // model.moe_shared_expert_overlap: the shared expert in tasks of its own.
      {"b200/deepseek-v3_fp8-mx_tp1_pp16_ep8_dp16_r25.11", mla + moe64 + " --set parallel.global_batch_size=32"},
      {"gb200/deepseek-v3_bf16_tp1_pp4_vp4_ep64_dp64_r25.11", mla + moe64 + " --set parallel.global_batch_size=256"},
      {"gb200/deepseek-v3_fp8-mx_tp1_pp8_vp4_ep32_dp32_r25.11", mla + moe64 + " --set parallel.global_batch_size=256"},
      {"gb200/qwen3-235b-a22b_bf16_tp1_pp8_vp3_ep32_dp32_r25.11", gqa + moe32 + " --set parallel.global_batch_size=256"},
      {"gb200/qwen3-30b-a3b_fp8-mx_tp1_pp1_ep8_dp8_r25.11",
       gqa + moe32 + " --set model.num_layers=4 --set parallel.global_batch_size=64"},
      {"b200/gpt-oss-120b_bf16_tp1_pp1_ep8_dp64_r25.11",
       gqa + moe32 + " --set model.num_layers=4 --set model.window_size=16 --set parallel.global_batch_size=256"},
      {"gb200/gpt-oss-120b_bf16_tp1_pp1_ep64_dp64_r25.11",
       gqa + moe64 + " --set model.num_layers=4 --set model.window_size=16 --set parallel.global_batch_size=64"},
      {"b200/llama3-8b_fp8-cs_tp1_pp1_dp8_r25.11", gqa + " --set model.num_layers=2 --set parallel.global_batch_size=16"},
      {"b200/llama3-8b_fp8-mx_tp1_pp1_dp8_r25.11", gqa + " --set model.num_layers=2 --set parallel.global_batch_size=16"},
      {"gb200/llama3-8b_fp8-cs_tp1_pp1_dp8_r25.11", gqa + " --set model.num_layers=2 --set parallel.global_batch_size=16"},
      {"gb200/llama3-8b_fp8-mx_tp1_pp1_dp8_r25.11", gqa + " --set model.num_layers=2 --set parallel.global_batch_size=16"},
      {"gb200/llama3-8b_fp8_tp1_pp1_dp8_r25.09", gqa + " --set model.num_layers=2 --set parallel.global_batch_size=16"},
      {"b200/llama3.1-405b_fp8-cs_tp4_pp8_cp2_vp8_dp2_r25.11", gqa + " --set model.num_layers=30 --set parallel.global_batch_size=16"},
      {"b200/llama3.1-405b_fp8-mx_tp4_pp8_cp2_vp8_dp2_r25.11", gqa + " --set model.num_layers=30 --set parallel.global_batch_size=16"},
      {"gb200/llama3.1-405b_fp8-cs_tp4_pp16_vp4_dp4_r25.11", gqa + " --set model.num_layers=62 --set parallel.global_batch_size=64"},
      {"gb200/llama3.1-405b_fp8_fsdp64_tp2_pp1_dp64_offload92_r25.09", gqa + " --set parallel.global_batch_size=64"},
      {"gb200/llama3-70b_fp8-cs_fsdp64_tp1_pp1_dp64_offload40_r25.11", gqa + " --set parallel.global_batch_size=128"},
      {"gb200/llama3-70b_fp8_fsdp64_tp1_pp1_dp64_offload40_r25.09", gqa + " --set parallel.global_batch_size=128"},
      {"b200/qwen3-235b-a22b_fp8-mx_tp1_pp8_vp2_ep8_dp8_r25.11", gqa + moe32 + " --set parallel.global_batch_size=64"},
      {"b200/qwen3-30b-a3b_fp8-mx_tp1_pp1_ep8_dp8_r25.11", gqa + moe32 + " --set model.num_layers=4 --set parallel.global_batch_size=16"},
      // Token dropping with padding (no shipped scenario drops tokens).
      {"b200/qwen3-30b-a3b_fp8-mx_tp1_pp1_ep8_dp8_r25.11",
       gqa + moe32 + " --set model.num_layers=4 --set parallel.global_batch_size=16 --set "
                     "model.moe_expert_capacity_factor=1.0 --set model.moe_pad_expert_input_to_capacity=true"},
  };
  int i = 0;
  for (const Run& r : runs) {
    SCOPED_TRACE(r.file);
    const std::string base = kOut + "/more_" + std::to_string(i++);
    ASSERT_EQ(run("replay " + source_path("scenarios/" + r.file + ".yaml") + r.sets +
                      " --device cpu --json " + base + ".json",
                  base + ".log"),
              0)
        << slurp(base + ".log");
    const auto j = nlohmann::json::parse(slurp(base + ".json"));
    std::string notes;
    for (const auto& n : j["notes"]) notes += n.get<std::string>() + "\n";
    EXPECT_NE(notes.find("layers: Megatron-Core layers (RMSNorm"), std::string::npos) << notes;
    for (const char* substituted : {"not replayed", "ran grouped-query attention", "dropless",
                                    "2021 GPT layer", "substituted"})
      EXPECT_EQ(notes.find(substituted), std::string::npos) << substituted << "\n" << notes;
    if (r.file.find("deepseek") != std::string::npos)
      EXPECT_NE(notes.find("multi-head latent attention (Megatron-Core MLASelfAttention): AttnFwd "
                           "ran the input RMSNorm, linear_q_down_proj (128 -> 32)"),
                std::string::npos)
          << notes;
    if (r.file.find("deepseek-v3_fp8-mx") != std::string::npos)  // the r25.11 router
      EXPECT_NE(notes.find("sigmoid scores normalized over the k, group-limited: the top 4 of 8 "
                           "expert groups, the expert bias"),
                std::string::npos)
          << notes;
    if (r.sets.find("capacity_factor") != std::string::npos)
      EXPECT_NE(notes.find("MoE token dropping: capacity"), std::string::npos) << notes;
    if (r.file.rfind("b200/deepseek-v3", 0) == 0)  // moe_shared_expert_overlap
      EXPECT_NE(notes.find("MoE shared expert apart (model.moe_shared_expert_overlap)"),
                std::string::npos)
          << notes;
    EXPECT_EQ(notes.find("forward states were still alive"), std::string::npos) << notes;
  }
}
