// Numeric precision of a run: element sizes of parameters, gradients and activations.
#pragma once

#include <cstdint>

namespace trainsim {

/// FP16 / BF16: mixed-precision training (2-byte parameters, gradients and activations; fp32
/// master copy and Adam moments). FP32: plain fp32 training (4-byte parameters, gradients and
/// activations; fp32 master copy and moments as with mixed precision): the LibTorch CPU
/// replay's precision (hw_backend/replay.h ReplayOptions::cpu_dtype), used to validate
/// against it.
enum class Precision : std::uint8_t { FP16, BF16, FP32 };

/// Bytes of one element in `p`.
inline std::int64_t precision_bytes(Precision p) { return p == Precision::FP32 ? 4 : 2; }

/// "fp16", "bf16", "fp32" (the scenario's spelling).
const char* to_string(Precision p);

}  // namespace trainsim
