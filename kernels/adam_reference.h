// The straightforward scalar Adam / AdamW that every optimized kernel in kernels/ is checked
// against, element by element. One loop, one element at a time, no SIMD, no threads.
#pragma once

#include <cstdint>

#include "kernels/adam_types.h"

namespace trainsim::kernels {

/// One Adam (or AdamW) step over `t.count` elements, 1-based `step`, with the semantics
/// written out in adam_types.h (AdamHyperParams). Gradients are converted to fp32 exactly,
/// multiplied by `grad_unscale` (1 / loss scale), and the updated fp32 params are also written
/// rounded to nearest even into `t.params_out` when it is non-null.
/// Throws std::invalid_argument on invalid arguments (check_adam_arguments).
void adam_reference_step(const AdamHyperParams& hp, std::int64_t step, float grad_unscale,
                         const AdamTensors& t);

}  // namespace trainsim::kernels
