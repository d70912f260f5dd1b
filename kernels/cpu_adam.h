// CPU Adam of ZeRO-Offload (Ren et al., "ZeRO-Offload: Democratizing Billion-Scale Model
// Training", USENIX ATC 2021, Sec. 5.1 "CPU-Adam"): the fp32 master parameters and both Adam
// moments live in host memory; fp16/bf16 gradients arrive from the GPU (D2H); one pass over
// memory updates params, exp_avg and exp_avg_sq and writes the fp16/bf16 copy of the updated
// params that goes back to the GPU (H2D).
//
// Vectorized with AVX-512F or AVX2+F16C, chosen at run time (half.h: detect_simd_level), with
// a portable scalar fallback; split into contiguous chunks over a persistent thread pool.
// Every level and every thread count computes each element with the same float operations in
// the same order as adam_reference_step (no FMA contraction: the kernel is bound by memory
// bandwidth, not arithmetic), so results agree with the reference bit for bit.
#pragma once

#include <cstdint>
#include <memory>

#include "kernels/adam_types.h"
#include "kernels/half.h"

namespace trainsim::kernels {

/// Options fixed for the lifetime of a CpuAdam.
struct CpuAdamOptions {
  /// Worker threads including the caller's; 0 means std::thread::hardware_concurrency().
  int num_threads = 0;
  /// Vector level; Scalar, Avx2 or Avx512 force one (the constructor throws
  /// std::invalid_argument if the CPU lacks it); leave `detect` true to pick the best.
  bool detect = true;
  SimdLevel level = SimdLevel::Scalar;
  /// Elements below which a step runs on the calling thread only (thread hand-off costs
  /// some microseconds; 64 Ki elements take about that long on one core).
  std::size_t min_elements_per_thread = 64 * 1024;
};

/// A CPU Adam optimizer kernel with its own thread pool. Not thread-safe: one step at a time.
class CpuAdam {
 public:
  explicit CpuAdam(const CpuAdamOptions& options = {});
  ~CpuAdam();
  CpuAdam(const CpuAdam&) = delete;
  CpuAdam& operator=(const CpuAdam&) = delete;

  /// One Adam step (semantics: adam_types.h) over `t.count` elements, 1-based `step`;
  /// `grad_unscale` = 1 / loss scale. Throws std::invalid_argument on invalid arguments.
  void step(const AdamHyperParams& hp, std::int64_t step, float grad_unscale, const AdamTensors& t);

  SimdLevel simd_level() const;
  int num_threads() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace trainsim::kernels
