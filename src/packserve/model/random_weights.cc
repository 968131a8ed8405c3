#include "packserve/model/random_weights.h"

#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "packserve/common/dtype.h"
#include "packserve/common/rng.h"

namespace packserve::model {
namespace {

// Draws `shape` values as mean + std * N(0, 1), stored in `dtype`, owned by the tensor.
HostTensor random_tensor(std::string name, std::vector<int64_t> shape, DType dtype, double mean,
                         double std, Rng& rng) {
  HostTensor t;
  t.name = std::move(name);
  t.dtype = dtype;
  t.shape = std::move(shape);
  const size_t n = static_cast<size_t>(t.num_elements());
  auto storage = std::make_shared<std::vector<std::byte>>(n * dtype_size_bytes(dtype));
  for (size_t i = 0; i < n; ++i) {
    store_from_float(storage->data(), i, dtype, static_cast<float>(mean + std * rng.normal()));
  }
  t.data = storage->data();
  t.owner = std::shared_ptr<const void>(storage, storage->data());
  return t;
}

std::string layer_name(int64_t layer, const char* suffix) {
  return "model.layers." + std::to_string(layer) + "." + suffix;
}

Status check_positive(int64_t value, const char* field) {
  if (value <= 0) {
    return invalid_argument(std::string(field) + ": expected > 0, got " + std::to_string(value));
  }
  return ok_status();
}

}  // namespace

Result<ModelWeights> make_random_weights(const ModelConfig& c,
                                         const RandomWeightsOptions& options) {
  PS_RETURN_IF_ERROR(check_positive(c.vocab_size, "vocab_size"));
  PS_RETURN_IF_ERROR(check_positive(c.hidden_size, "hidden_size"));
  PS_RETURN_IF_ERROR(check_positive(c.intermediate_size, "intermediate_size"));
  PS_RETURN_IF_ERROR(check_positive(c.num_layers, "num_layers"));
  PS_RETURN_IF_ERROR(check_positive(c.num_qo_heads, "num_qo_heads"));
  PS_RETURN_IF_ERROR(check_positive(c.num_kv_heads, "num_kv_heads"));
  PS_RETURN_IF_ERROR(check_positive(c.head_dim, "head_dim"));
  if (c.head_dim % 2 != 0) {
    return invalid_argument("head_dim: expected an even number, got " + std::to_string(c.head_dim));
  }
  if (c.num_qo_heads % c.num_kv_heads != 0) {
    return invalid_argument(
        "num_qo_heads = " + std::to_string(c.num_qo_heads) +
        ": expected a multiple of num_kv_heads = " + std::to_string(c.num_kv_heads));
  }
  for (const auto& [value, field] :
       {std::pair{options.matrix_std, "matrix_std"}, std::pair{options.norm_std, "norm_std"}}) {
    if (!std::isfinite(value) || value < 0.0) {
      return invalid_argument(std::string(field) + ": expected a finite value >= 0, got " +
                              std::to_string(value));
    }
  }

  Rng rng(options.seed);
  const DType dt = c.dtype;
  const double ms = options.matrix_std;
  const double ns = options.norm_std;
  const int64_t h = c.hidden_size;
  const int64_t inter = c.intermediate_size;
  const int64_t q = c.q_size();
  const int64_t kv = c.kv_size();

  ModelWeights w;
  w.config = c;
  w.embed_tokens = random_tensor("model.embed_tokens.weight", {c.vocab_size, h}, dt, 0.0, ms, rng);
  w.layers.resize(static_cast<size_t>(c.num_layers));
  for (int64_t i = 0; i < c.num_layers; ++i) {
    LayerWeights& l = w.layers[static_cast<size_t>(i)];
    auto n = [i](const char* suffix) { return layer_name(i, suffix); };
    l.input_norm = random_tensor(n("input_layernorm.weight"), {h}, dt, 1.0, ns, rng);
    l.q_proj = random_tensor(n("self_attn.q_proj.weight"), {q, h}, dt, 0.0, ms, rng);
    l.k_proj = random_tensor(n("self_attn.k_proj.weight"), {kv, h}, dt, 0.0, ms, rng);
    l.v_proj = random_tensor(n("self_attn.v_proj.weight"), {kv, h}, dt, 0.0, ms, rng);
    if (c.qkv_bias) {
      l.q_bias = random_tensor(n("self_attn.q_proj.bias"), {q}, dt, 0.0, ms, rng);
      l.k_bias = random_tensor(n("self_attn.k_proj.bias"), {kv}, dt, 0.0, ms, rng);
      l.v_bias = random_tensor(n("self_attn.v_proj.bias"), {kv}, dt, 0.0, ms, rng);
    }
    if (c.qk_norm) {
      l.q_norm = random_tensor(n("self_attn.q_norm.weight"), {c.head_dim}, dt, 1.0, ns, rng);
      l.k_norm = random_tensor(n("self_attn.k_norm.weight"), {c.head_dim}, dt, 1.0, ns, rng);
    }
    l.o_proj = random_tensor(n("self_attn.o_proj.weight"), {h, q}, dt, 0.0, ms, rng);
    l.post_attention_norm =
        random_tensor(n("post_attention_layernorm.weight"), {h}, dt, 1.0, ns, rng);
    l.gate_proj = random_tensor(n("mlp.gate_proj.weight"), {inter, h}, dt, 0.0, ms, rng);
    l.up_proj = random_tensor(n("mlp.up_proj.weight"), {inter, h}, dt, 0.0, ms, rng);
    l.down_proj = random_tensor(n("mlp.down_proj.weight"), {h, inter}, dt, 0.0, ms, rng);
  }
  w.final_norm = random_tensor("model.norm.weight", {h}, dt, 1.0, ns, rng);
  if (c.tie_word_embeddings) {
    w.lm_head = w.embed_tokens;
  } else {
    w.lm_head = random_tensor("lm_head.weight", {c.vocab_size, h}, dt, 0.0, ms, rng);
  }
  return w;
}

}  // namespace packserve::model
