// Tests of models/input/runtime.h: what each runtime does, field by field, as docs/
// architecture.md ("Runtimes") and the code the fields replaced state it; and that the readers
// of the fields (the kernel features, the model FLOPs, the activation terms) follow them,
// checked against closed forms written out here.
#include "models/input/runtime.h"

#include <gtest/gtest.h>

#include <stdexcept>
#include <string>

#include "models/errors.h"

#include "models/memory/memory_model.h"
#include "models/perf/flops.h"
#include "tests/support/tiny_scenario.h"

namespace trainsim {
namespace {

TEST(Runtime, Megatron2021DoesWhatSc21Ran) {
  const RuntimeSpec& r = runtime_spec(Runtime::Megatron2021);
  EXPECT_EQ(r.runtime, Runtime::Megatron2021);
  EXPECT_STREQ(r.name, "megatron-2021");
  EXPECT_STREQ(r.name, to_string(Runtime::Megatron2021));
  // "the Megatron-LM of SC'21: the 2021 kernel list, Korthikanti et al.'s activation terms"
  EXPECT_EQ(r.kernels, KernelLists::Megatron2021);
  EXPECT_EQ(r.activation_terms, ActivationTerms::Korthikanti);
  EXPECT_EQ(r.model_flops, ModelFlopsCount::Korthikanti);
  // flash attention and FP8 need megatron-core; no Transformer Engine, so no userbuffers
  EXPECT_FALSE(r.fused_attention_kernels);
  EXPECT_FALSE(r.transformer_engine_fp8);
  EXPECT_FALSE(r.tp_comm_overlap_userbuffers);
  // "For runtime: megatron-2021 the interleaved schedule's batched exchanges"
  EXPECT_TRUE(r.batched_interleaved_p2p);
  // the tensor-parallel all-reduce of replicated gradients is Megatron-Core's
  // finalize_model_grads; ZeRO is DeepSpeed's (the distributed optimizer needs megatron-core)
  EXPECT_FALSE(r.finalize_grads_tp_allreduce);
  EXPECT_TRUE(r.deepspeed_zero_sharding);
  // Megatron-LM 2021's arguments.py asserts pp > 2 for the interleaved schedule
  EXPECT_EQ(r.min_interleaved_pipeline_stages, 3);
  EXPECT_FALSE(r.megatron_core_features);
}

TEST(Runtime, MegatronCoreRunsTransformerEngine) {
  const RuntimeSpec& r = runtime_spec(Runtime::MegatronCore);
  EXPECT_EQ(r.runtime, Runtime::MegatronCore);
  EXPECT_STREQ(r.name, "megatron-core");
  EXPECT_STREQ(r.name, to_string(Runtime::MegatronCore));
  // "Transformer Engine modules: flops.cpp core_op_kernels, memory_model.cpp
  // core_layer_activation_bytes"
  EXPECT_EQ(r.kernels, KernelLists::TransformerEngine);
  EXPECT_EQ(r.activation_terms, ActivationTerms::TransformerEngine);
  EXPECT_EQ(r.model_flops, ModelFlopsCount::MegatronCore);
  EXPECT_TRUE(r.fused_attention_kernels);
  EXPECT_TRUE(r.transformer_engine_fp8);
  EXPECT_TRUE(r.tp_comm_overlap_userbuffers);
  EXPECT_FALSE(r.batched_interleaved_p2p);
  // "Megatron-Core (DDP or the distributed optimizer): after the data-parallel
  // synchronisation one all-reduce over the tensor-parallel group"
  EXPECT_TRUE(r.finalize_grads_tp_allreduce);
  EXPECT_FALSE(r.deepspeed_zero_sharding);
  EXPECT_EQ(r.min_interleaved_pipeline_stages, 2);
  EXPECT_TRUE(r.megatron_core_features);
}

TEST(Runtime, OutOfRangeIsABug) {
  EXPECT_THROW(runtime_spec(static_cast<Runtime>(7)), std::logic_error);
}

Scenario tiny(Runtime runtime) {
  Scenario sc =
      testing::tiny_scenario("parallel: {micro_batch_size: 2, global_batch_size: 16}\n", 8);
  sc.runtime = runtime;
  return sc;
}

TEST(Runtime, TheReadersFollowTheTable) {
  const double h = testing::kTinyHidden, s = testing::kTinySeq, l = testing::kTinyLayers;
  const double V = testing::kTinyVocab, a = 8, b = 2, B = 16;
  for (Runtime rt : {Runtime::Megatron2021, Runtime::MegatronCore}) {
    const RuntimeSpec& r = runtime_spec(rt);
    const Scenario sc = tiny(rt);
    // The compute ops take the Transformer Engine kernel list exactly when the table says so.
    EXPECT_EQ(model_features(sc).core, r.kernels == KernelLists::TransformerEngine) << r.name;
    // Model FLOPs: Korthikanti et al. Eq. 8-9, 72 B s l h^2 (1 + s/(6h) + V/(12 l h)); or
    // Megatron's num_floating_point_operations, 6 B s times the multiply-adds per token,
    // l (QKV 3h^2 + causal Q K^T and P V h s / 2 each + projection h^2 + MLP 8h^2) + h V.
    const double korthikanti = 72 * B * s * l * h * h * (1 + s / (6 * h) + V / (12 * l * h));
    const double core = 6 * (l * (3 * h * h + h * s + h * h + 8 * h * h) + h * V) * B * s;
    const double flops = model_flops_per_iteration(sc);
    if (r.model_flops == ModelFlopsCount::Korthikanti)
      EXPECT_DOUBLE_EQ(flops, korthikanti);
    else
      EXPECT_DOUBLE_EQ(flops, core);
    // Activations per layer without recomputation (fp16, t = 1): Korthikanti et al.'s
    // s b h (34 + 5 a s / h) with the Korthikanti terms; Transformer Engine's differ.
    const LayerActivationBytes act = layer_activation_bytes_no_recompute(sc);
    const double sbh = s * b * h;
    const double k34 = 34 * sbh + 5 * a * s * s * b;
    if (r.activation_terms == ActivationTerms::Korthikanti)
      EXPECT_EQ(double(act.attn + act.mlp), k34) << r.name;
    else
      EXPECT_NE(double(act.attn + act.mlp), k34) << r.name;
  }
}

// The interleaved schedule's stage bound comes from the runtime's table entry, and its message
// says the bound and the runtime that allows fewer stages.
TEST(Runtime, InterleavedStageBoundIsTheTables) {
  const std::string two_stages =
      "parallel: {micro_batch_size: 1, global_batch_size: 8, pipeline_model_parallel_size: 2, "
      "num_layers_per_virtual_pipeline_stage: 1}\n";
  try {
    (void)testing::tiny_scenario(two_stages, 2);
    ADD_FAILURE() << "megatron-2021 accepted an interleaved schedule on 2 stages";
  } catch (const InputError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("pipeline_model_parallel_size (2) >= " +
                        std::to_string(runtime_spec(Runtime::Megatron2021)
                                           .min_interleaved_pipeline_stages) +
                        " with runtime megatron-2021"),
              std::string::npos)
        << what;
    EXPECT_NE(what.find("megatron-core runs it with 2 stages"), std::string::npos) << what;
  }
  EXPECT_NO_THROW((void)testing::tiny_scenario("runtime: megatron-core\n" + two_stages, 2));
}

}  // namespace
}  // namespace trainsim
