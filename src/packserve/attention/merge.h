// merge.h: the LSE composition operator of attention states (seed 004 §2.2), in base 2.
//
// An attention state of one (row, qo head) over a key set I is (o, lse):
//   o   = sum_{j in I} softmax_j * v_j      (normalised over I)   [head_dim] f32
//   lse = log2 sum_{j in I} 2^(s_j)          s_j = sm_scale * log2(e) * dot(q, k_j)
// Composition (associative and commutative in exact arithmetic):
//   lse(I ∪ J) = m + log2(2^(lse_I - m) + 2^(lse_J - m)),  m = max(lse_I, lse_J)
//   o(I ∪ J)   = (2^(lse_I - m) * o_I + 2^(lse_J - m) * o_J) / (2^(lse_I - m) + 2^(lse_J - m))
// The empty key set is (o = 0, lse = -inf) and is the identity. In floating point the order
// matters, so merge_states() folds the parts left to right, exactly in the order given
// (the plan's merge order; the CUDA merge kernel uses the same order and formulas).
// Thread-safety: pure functions.
#pragma once

#include <span>

namespace packserve::attention {

// (o, lse) <- (o, lse) ∘ (o_other, lse_other). o and o_other have the same length.
// Either lse may be -inf (empty part); both -inf gives o = 0, lse = -inf.
void merge_state_into(std::span<float> o, float& lse, std::span<const float> o_other,
                      float lse_other);

// Folds parts 0, 1, ..., n-1 left to right into (o_out, lse_out).
//   o_parts: n spans of head_dim floats; lse_parts: n values; o_out: head_dim floats.
// n == 0 gives the empty state (o = 0, lse = -inf).
void merge_states(std::span<const std::span<const float>> o_parts, std::span<const float> lse_parts,
                  std::span<float> o_out, float& lse_out);

}  // namespace packserve::attention
