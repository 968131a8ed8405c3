// tensor_parallel.h: how a model is cut over the GPUs of one host (DESIGN.md "Beyond one GPU";
// docs/forward-cuda.md "Tensor parallelism"), as pure host functions.
//
// Megatron's split of a decoder layer over `tp` ranks: rank r holds
//   q_proj rows of query heads [r Hq / tp, +Hq / tp), k_proj / v_proj rows of KV heads
//   [r Hkv / tp, +Hkv / tp) (and those rows of the Qwen2 biases): column-parallel, so each
//   rank's attention runs on its own heads with no communication; with fewer KV heads than
//   ranks (tp a multiple of Hkv), KV head r / (tp / Hkv) alone, the one its query heads
//   attend to, replicated on tp / Hkv ranks (as vLLM does);
//   o_proj columns of its query heads: row-parallel, each rank's product is a partial sum of
//   the layer's output (the ranks' partials are summed by an all-reduce);
//   gate_proj / up_proj rows [r I / tp, +I / tp) and down_proj columns of the same range
//   (column- then row-parallel: one all-reduce after down_proj);
//   the embedding, the norms (q_norm / k_norm act per head, so they are whole on every rank),
//   the final norm and the LM head whole.
// So a rank's layer is a layer of the same architecture with Hq / tp query heads, Hkv / tp KV
// heads and I / tp intermediate width (shard_config), whose o_proj and down_proj outputs are
// partial sums.
// Thread-safety: pure functions.
#pragma once

#include "packserve/common/status.h"
#include "packserve/model/config.h"
#include "packserve/model/weights.h"

namespace packserve::model {

// The most ranks a model is cut over (a host's GPUs).
inline constexpr int kMaxTensorParallel = 8;

// The configuration of one rank's share: num_qo_heads and intermediate_size divided by tp,
// num_kv_heads too (1 when tp is a multiple of it); everything else as `config`.
// kInvalidArgument naming the field when tp is not in [1, kMaxTensorParallel] or does not
// divide num_qo_heads or intermediate_size ("num_qo_heads = 8 is not a multiple of
// tensor_parallel = 3"), or neither of num_kv_heads and tp is a multiple of the other.
Result<ModelConfig> shard_config(const ModelConfig& config, int tp);

// Rank `rank`'s tensors of validated `weights` (validate_weights), with shard_config's
// config: row ranges are views of the given tensors' storage (same dtype, `owner` shared), the
// o_proj and down_proj column ranges are copies (owned by the result). validate_weights
// accepts the result. kInvalidArgument as shard_config, or naming `rank` outside [0, tp).
Result<ModelWeights> shard_weights(const ModelWeights& weights, int rank, int tp);

}  // namespace packserve::model
