// weights.cc: HostTensor element access and validate_weights (weights.h).
#include "packserve/model/weights.h"

#include <string>

#include "packserve/model/checkpoint.h"

namespace packserve::model {

std::string shape_text(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i > 0) s += ", ";
    s += std::to_string(shape[i]);
  }
  return s + "]";
}

namespace {

// Checks one tensor. `expected_present` false means the architecture has no such tensor, so a
// present one is a mismatch between config.json and the weights.
Status check_tensor(const HostTensor& t, const std::string& canonical_name, bool expected_present,
                    const std::vector<int64_t>& shape, DType dtype) {
  const std::string& name = t.name.empty() ? canonical_name : t.name;
  if (!expected_present) {
    if (t.present()) {
      return invalid_argument(name +
                              ": present, but config.json's architecture has no such "
                              "tensor (check qkv bias / q-k norm / tie_word_embeddings)");
    }
    return ok_status();
  }
  if (!t.present()) {
    return invalid_argument(name + ": missing, expected shape " + shape_text(shape) + " " +
                            std::string(dtype_name(dtype)));
  }
  if (t.shape != shape) {
    return invalid_argument(name + ": shape " + shape_text(t.shape) + ", expected " +
                            shape_text(shape));
  }
  if (t.dtype != dtype) {
    return invalid_argument(name + ": dtype " + std::string(dtype_name(t.dtype)) + ", expected " +
                            std::string(dtype_name(dtype)) + " (config.json's dtype)");
  }
  return ok_status();
}

}  // namespace

float HostTensor::at(int64_t i) const {
  return load_as_float(static_cast<const std::byte*>(data), static_cast<size_t>(i), dtype);
}

Status validate_weights(const ModelWeights& w) {
  const ModelConfig& c = w.config;
  const int64_t h = c.hidden_size;
  const int64_t inter = c.intermediate_size;
  const int64_t q = c.q_size();
  const int64_t kv = c.kv_size();
  const DType dt = c.dtype;
  PS_RETURN_IF_ERROR(
      check_tensor(w.embed_tokens, "model.embed_tokens.weight", true, {c.vocab_size, h}, dt));
  PS_RETURN_IF_ERROR(check_tensor(w.final_norm, "model.norm.weight", true, {h}, dt));
  PS_RETURN_IF_ERROR(check_tensor(w.lm_head, "lm_head.weight", true, {c.vocab_size, h}, dt));
  if (static_cast<int64_t>(w.layers.size()) != c.num_layers) {
    return invalid_argument(
        "model.layers: " + std::to_string(w.layers.size()) +
        " layers, expected num_hidden_layers = " + std::to_string(c.num_layers));
  }
  for (int64_t i = 0; i < c.num_layers; ++i) {
    const LayerWeights& l = w.layers[static_cast<size_t>(i)];
    auto n = [i](std::string_view suffix) { return layer_tensor_name(i, suffix); };
    PS_RETURN_IF_ERROR(check_tensor(l.input_norm, n("input_layernorm.weight"), true, {h}, dt));
    PS_RETURN_IF_ERROR(check_tensor(l.q_proj, n("self_attn.q_proj.weight"), true, {q, h}, dt));
    PS_RETURN_IF_ERROR(check_tensor(l.k_proj, n("self_attn.k_proj.weight"), true, {kv, h}, dt));
    PS_RETURN_IF_ERROR(check_tensor(l.v_proj, n("self_attn.v_proj.weight"), true, {kv, h}, dt));
    PS_RETURN_IF_ERROR(check_tensor(l.q_bias, n("self_attn.q_proj.bias"), c.qkv_bias, {q}, dt));
    PS_RETURN_IF_ERROR(check_tensor(l.k_bias, n("self_attn.k_proj.bias"), c.qkv_bias, {kv}, dt));
    PS_RETURN_IF_ERROR(check_tensor(l.v_bias, n("self_attn.v_proj.bias"), c.qkv_bias, {kv}, dt));
    PS_RETURN_IF_ERROR(
        check_tensor(l.q_norm, n("self_attn.q_norm.weight"), c.qk_norm, {c.head_dim}, dt));
    PS_RETURN_IF_ERROR(
        check_tensor(l.k_norm, n("self_attn.k_norm.weight"), c.qk_norm, {c.head_dim}, dt));
    PS_RETURN_IF_ERROR(check_tensor(l.o_proj, n("self_attn.o_proj.weight"), true, {h, q}, dt));
    PS_RETURN_IF_ERROR(
        check_tensor(l.post_attention_norm, n("post_attention_layernorm.weight"), true, {h}, dt));
    PS_RETURN_IF_ERROR(check_tensor(l.gate_proj, n("mlp.gate_proj.weight"), true, {inter, h}, dt));
    PS_RETURN_IF_ERROR(check_tensor(l.up_proj, n("mlp.up_proj.weight"), true, {inter, h}, dt));
    PS_RETURN_IF_ERROR(check_tensor(l.down_proj, n("mlp.down_proj.weight"), true, {h, inter}, dt));
  }
  return ok_status();
}

}  // namespace packserve::model
