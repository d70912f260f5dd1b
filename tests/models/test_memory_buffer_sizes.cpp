// The activation and buffer sizes the builder takes from models/memory/memory_model.h and
// models/memory/zero_offload.h, against values written out by hand for the tiny GPT
// (s = 128, b = 1, h = 256, V = 1024, fp16).
#include <gtest/gtest.h>

#include "models/memory/memory_model.h"
#include "models/memory/zero_offload.h"
#include "tests/support/tiny_scenario.h"

using namespace trainsim;
using namespace trainsim::testing;

TEST(MemoryBufferSizes, LogitsAndEmbeddingActivations) {
  const Scenario sc = tiny_scenario("parallel: {micro_batch_size: 1, global_batch_size: 1}\n", 1);
  // Final LayerNorm input 2 s b h = 65,536 + fp32 logits 4 s b V = 524,288.
  EXPECT_EQ(logits_activation_bytes(sc), 65'536 + 524'288);
  EXPECT_EQ(logits_gradient_bytes(sc), 2 * 128 * 1024);  // e s b V
  EXPECT_EQ(embedding_dropout_mask_bytes(sc), 128 * 256);  // 1-byte mask, s b h
  EXPECT_EQ(word_embedding_params_per_rank(sc.model, 1), 1024 * 256);
}

TEST(MemoryBufferSizes, SequenceParallelSplitsTheReplicatedRegions) {
  const Scenario sc = tiny_scenario(R"(
parallel: {tensor_model_parallel_size: 2, sequence_parallel: true, micro_batch_size: 1, global_batch_size: 1}
)", 2);
  // LayerNorm input / t, logits V / t; mask / t.
  EXPECT_EQ(logits_activation_bytes(sc), 65'536 / 2 + 524'288 / 2);
  EXPECT_EQ(logits_gradient_bytes(sc), 2 * 128 * 512);
  EXPECT_EQ(embedding_dropout_mask_bytes(sc), 128 * 256 / 2);
}

TEST(MemoryBufferSizes, BucketAndStagingBuffers) {
  const Scenario z2 = tiny_scenario(R"(
parallel: {micro_batch_size: 1, global_batch_size: 2}
deepspeed:
  zero_optimization: {stage: 2, reduce_bucket_size: 1000000, overlap_comm: true,
                      offload_optimizer: {device: cpu, ratio: 1.0}}
)", 2);
  // Two fp16 bucket buffers of 1M elements; the fp32 staging of one bucket's half.
  EXPECT_EQ(gradient_bucket_buffer_bytes(z2, 0), 2 * 1'000'000 * 2);
  EXPECT_EQ(offload_staging_bytes(z2, 0), 4 * 500'000);
  const Scenario z3 = tiny_scenario(R"(
parallel: {micro_batch_size: 1, global_batch_size: 2}
deepspeed:
  zero_optimization: {stage: 3, reduce_bucket_size: 1000000, overlap_comm: false,
                      offload_optimizer: {device: cpu, ratio: 0.5}}
)", 2);
  EXPECT_EQ(gradient_bucket_buffer_bytes(z3, 0), 1 * 1'000'000 * 2);
  EXPECT_EQ(offload_staging_bytes(z3, 0), 2 * 500'000);  // the fp16 reduce-scatter output
  const Scenario z1 = tiny_scenario(R"(
parallel: {micro_batch_size: 1, global_batch_size: 2}
deepspeed:
  zero_optimization: {stage: 1, reduce_bucket_size: 1000000}
)", 2);
  EXPECT_EQ(gradient_bucket_buffer_bytes(z1, 0), 0);  // reduces .grad in place
  EXPECT_EQ(offload_staging_bytes(z1, 0), 0);
}
