// reference_forward.h: the oracle of the model forward. Float64, naive, one request at a
// time, no pages, no plan: every position's hidden state is recomputed from the token ids with
// textbook loops (pre-norm decoder: RMSNorm -> q/k/v (+ Qwen2 bias) -> Qwen3 per-head q/k
// RMSNorm -> RoPE (rotate-half, inv_freq of ops_cpu.h's rope_inv_freq) -> causal softmax
// attention with scale 1/sqrt(head_dim), GQA head h reading KV head h / group_size ->
// o_proj -> residual -> RMSNorm -> silu(gate) * up -> down -> residual; final RMSNorm ->
// lm_head). Weights are read exactly (f16/bf16 -> double), so the forward backends are
// compared with the same model up to their own rounding.
// Thread-safety: a pure function.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "packserve/common/status.h"
#include "packserve/model/weights.h"

namespace packserve::model {

// Logits of every position of one sequence: [token_ids.size(), vocab_size], row i after
// tokens 0..i. kInvalidArgument when validate_weights() fails, token_ids is empty, or an id is
// outside [0, vocab_size) (naming its index).
Result<std::vector<double>> reference_forward(const ModelWeights& weights,
                                              std::span<const int32_t> token_ids);

}  // namespace packserve::model
