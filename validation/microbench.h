// `trainsim calibrate`: microbenchmarks on the local device that measure what the cost model
// needs, written as a calibration profile (models/hardware/calibration.h) that `simulate --calibration`
// and `validate` accept. Implemented in microbench_torch.cpp, the only LibTorch file of
// validation/ (compiled into trainsim_validation_torch when LibTorch is found); this header
// has no LibTorch types.
//
// What is measured (each timing: warm-up call, then repetitions until a time budget is used;
// the fastest repetition is kept, so that other load on the machine inflates nothing; the
// median with MicrobenchOptions::median_of_repetitions):
//   GEMM      the three products of every Linear layer of a transformer (forward X W^T with the
//             bias, input gradient dY W, weight gradient dY^T X) for hidden sizes and token
//             counts of small layers, and the two batched products of core attention (Q K^T,
//             P V), in the replay's element type; efficiency = FLOP rate / best rate, with
//             local_device.peak_flops = best rate (gemm_efficiency table).
//   memory    a large tensor copy (streaming bandwidth, local_device.memory_bw_bytes_per_s)
//             and element-wise / softmax / LayerNorm / GeLU / dropout operators over sizes; an
//             per kernel class (elementwise, layernorm, softmax, gelu, dropout: they differ by
//             50x on a CPU) the median rate over sizes -> memory_bound_bytes_per_s; an OLS line
//             duration = overhead + bytes / bandwidth over all of them gives
//             kernel_launch_overhead_s (clamped at 0) and hbm_efficiency (the fallback rate).
//   copies    host -> device, device -> host and both at once over message sizes (on the CPU:
//             copies between two host buffers, one and two threads).
//   CPU Adam  kernels/cpu_adam.h throughput against thread count (1 .. cores):
//             cpu_flops_per_core_per_s (1 thread) and host_memory_efficiency (all threads).
//   NCCL      collective bandwidth needs more than one GPU and a NCCL build: recorded as not
//             measured on this build (LibTorch 1.13 CPU).
// The profile records the device name, the date, the precision and every raw measurement
// ("measurements").
#pragma once

#include <string>

#include "models/hardware/calibration.h"

namespace trainsim::validation {

struct MicrobenchOptions {
  std::string device = "cpu";   ///< "cpu" or "cuda" (CUDA needs a CUDA LibTorch)
  /// Smaller grids and time budgets (a few seconds on 2 cores) for tests.
  bool quick = false;
  /// Intra-op threads; 0 keeps LibTorch's default (the replay's default too).
  int threads = 0;
  /// Element type: empty is the replay's on that device, fp32 on the CPU
  /// (hw_backend ReplayOptions::cpu_dtype) and bf16 on a GPU (the training precision whose
  /// tensor-core rate a GPU profile describes); or fp32, bf16, fp16.
  std::string dtype;
  /// Progress lines on stderr.
  bool progress = false;
  /// Keep the median of each timing's repetitions instead of the fastest (`calibrate --nprocs
  /// N` > 1: with N processes time-sliced on fewer cores, the fastest repetition of a short
  /// operator is one that ran while it had a core alone, whereas a replay's ranks see the
  /// typical one; alone on the machine the fastest keeps other load out).
  bool median_of_repetitions = false;
};

/// Runs the microbenchmarks and returns the measured profile. Throws InputError for an
/// unusable device (CUDA without a CUDA LibTorch or GPU) or dtype.
CalibrationProfile run_microbenchmarks(const MicrobenchOptions& options);

}  // namespace trainsim::validation
