// tensor_parallel.cc: shard_config and shard_weights (tensor_parallel.h).
#include "packserve/model/tensor_parallel.h"

#include <algorithm>
#include <cstddef>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

namespace packserve::model {
namespace {

std::string str(int64_t v) { return std::to_string(v); }

// Rows [begin, begin + count) of a tensor of rank 1 or 2: a view of its storage.
HostTensor row_view(const HostTensor& t, int64_t begin, int64_t count) {
  HostTensor v = t;
  const int64_t row_elems = t.shape.size() == 2 ? t.shape[1] : 1;
  v.shape[0] = count;
  v.data = static_cast<const std::byte*>(t.data) +
           static_cast<size_t>(begin * row_elems) * dtype_size_bytes(t.dtype);
  return v;
}

// Columns [begin, begin + count) of a [rows, cols] tensor: a copy.
HostTensor column_copy(const HostTensor& t, int64_t begin, int64_t count) {
  const int64_t rows = t.shape[0], cols = t.shape[1];
  const size_t elem = dtype_size_bytes(t.dtype);
  auto buffer = std::make_shared<std::vector<std::byte>>(static_cast<size_t>(rows * count) * elem);
  const auto* src = static_cast<const std::byte*>(t.data);
  for (int64_t r = 0; r < rows; ++r) {
    std::memcpy(buffer->data() + static_cast<size_t>(r * count) * elem,
                src + static_cast<size_t>(r * cols + begin) * elem,
                static_cast<size_t>(count) * elem);
  }
  HostTensor c = t;
  c.shape = {rows, count};
  c.data = buffer->data();
  c.owner = std::shared_ptr<const void>(buffer, buffer->data());
  return c;
}

}  // namespace

Result<ModelConfig> shard_config(const ModelConfig& config, int tp) {
  if (tp < 1 || tp > kMaxTensorParallel) {
    return invalid_argument("tensor_parallel = " + str(tp) + ": expected in [1, " +
                            str(kMaxTensorParallel) + "]");
  }
  const auto divides = [&](int64_t value, const char* field) -> Status {
    if (value % tp == 0) return ok_status();
    return invalid_argument(std::string(field) + " = " + str(value) +
                            " is not a multiple of tensor_parallel = " + str(tp));
  };
  PS_RETURN_IF_ERROR(divides(config.num_qo_heads, "num_qo_heads"));
  if (config.num_kv_heads % tp != 0 &&
      (config.num_kv_heads <= 0 || tp % config.num_kv_heads != 0)) {
    return invalid_argument("num_kv_heads = " + str(config.num_kv_heads) +
                            " and tensor_parallel = " + str(tp) +
                            ": one must be a multiple of the other");
  }
  PS_RETURN_IF_ERROR(divides(config.intermediate_size, "intermediate_size"));
  ModelConfig local = config;
  local.num_qo_heads /= tp;
  local.num_kv_heads = std::max<int64_t>(config.num_kv_heads / tp, 1);  // replicated: 1
  local.intermediate_size /= tp;
  return local;
}

Result<ModelWeights> shard_weights(const ModelWeights& weights, int rank, int tp) {
  PS_RETURN_IF_ERROR(validate_weights(weights));
  PS_ASSIGN_OR_RETURN(ModelConfig local, shard_config(weights.config, tp));
  if (rank < 0 || rank >= tp) {
    return invalid_argument("rank = " + str(rank) + ": expected in [0, " + str(tp) + ")");
  }
  ModelWeights out;
  out.config = local;
  out.embed_tokens = weights.embed_tokens;
  out.final_norm = weights.final_norm;
  out.lm_head = weights.lm_head;
  const int64_t q = local.q_size(), kv = local.kv_size(), inner = local.intermediate_size;
  // The rank's first KV head: its share, or, with fewer KV heads than ranks, the one head its
  // query heads attend to (tp / num_kv_heads ranks hold each).
  const int64_t kv_head0 = weights.config.num_kv_heads >= tp
                               ? rank * local.num_kv_heads
                               : rank / (tp / weights.config.num_kv_heads);
  const int64_t kv_row0 = kv_head0 * local.head_dim;
  out.layers.reserve(weights.layers.size());
  for (const LayerWeights& w : weights.layers) {
    LayerWeights s = w;  // the norms whole
    s.q_proj = row_view(w.q_proj, rank * q, q);
    s.k_proj = row_view(w.k_proj, kv_row0, kv);
    s.v_proj = row_view(w.v_proj, kv_row0, kv);
    if (local.qkv_bias) {
      s.q_bias = row_view(w.q_bias, rank * q, q);
      s.k_bias = row_view(w.k_bias, kv_row0, kv);
      s.v_bias = row_view(w.v_bias, kv_row0, kv);
    }
    s.o_proj = column_copy(w.o_proj, rank * q, q);
    s.gate_proj = row_view(w.gate_proj, rank * inner, inner);
    s.up_proj = row_view(w.up_proj, rank * inner, inner);
    s.down_proj = column_copy(w.down_proj, rank * inner, inner);
    out.layers.push_back(std::move(s));
  }
  return out;
}

}  // namespace packserve::model
