// argmax.h: the argmax of a row of logits as greedy sampling defines it, shared by the sampler
// (engine/sampler.h) and the forward backends that return only the argmax of a row
// (model/forward.h, ForwardBatch::samples = kOutputArgmax). The CUDA backend's on-device
// argmax (model/cuda/ops.h argmax_rows) follows the same rules and is tested against this.
// Rules: NaN never wins (it counts as -inf); ties go to the lowest index; a row whose maximum
// is -inf (every entry NaN or -inf) gives index 0; +0.0 and -0.0 are equal.
// Thread-safety: pure functions.
#pragma once

#include <cstdint>
#include <span>

namespace packserve {

// max(x) with NaN ignored; -inf when every entry is NaN or -inf (or x is empty).
float max_ignoring_nan(std::span<const float> x);

// The first index i with x[i] == m, for m = max_ignoring_nan(x); 0 when m is -inf.
int32_t first_index_of_max(std::span<const float> x, float m);

// first_index_of_max(x, max_ignoring_nan(x)): two vectorizable passes.
int32_t argmax_lowest(std::span<const float> x);

}  // namespace packserve
