// weights.h: the tensors of a decoder checkpoint as host views (issue 4 "Loading").
//
// A HostTensor points at row-major data owned elsewhere: a memory-mapped safetensors file or
// an owned buffer (tests, dummy models); `owner` keeps that storage alive. Linear weights keep
// Hugging Face's layout [out_features, in_features] (y = x W^T).
// Shapes (H = hidden_size, I = intermediate_size, Q = q_size(), KV = kv_size(), V = vocab):
//   embed_tokens [V, H]; lm_head [V, H] (== embed_tokens when tied); final_norm [H]
//   per layer: input_norm [H], q_proj [Q, H], k_proj [KV, H], v_proj [KV, H],
//     q_bias [Q], k_bias [KV], v_bias [KV] (qkv_bias only), q_norm [head_dim], k_norm [head_dim]
//     (qk_norm only), o_proj [H, Q], post_attention_norm [H], gate_proj [I, H], up_proj [I, H],
//     down_proj [H, I].
// Thread-safety: immutable after loading; share freely.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "packserve/common/dtype.h"
#include "packserve/common/status.h"
#include "packserve/model/config.h"

namespace packserve::model {

struct HostTensor {
  std::string name;  // the checkpoint's tensor name, for error messages
  DType dtype = DType::kF32;
  std::vector<int64_t> shape;
  const void* data = nullptr;  // nullptr: absent (an optional tensor the model does not have)
  std::shared_ptr<const void> owner;

  bool present() const { return data != nullptr; }
  int64_t num_elements() const {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    return n;
  }
  size_t num_bytes() const { return static_cast<size_t>(num_elements()) * dtype_size_bytes(dtype); }
  // Element i converted to f32 (exact for f16/bf16).
  float at(int64_t i) const;
};

struct LayerWeights {
  HostTensor input_norm, q_proj, k_proj, v_proj, q_bias, k_bias, v_bias, q_norm, k_norm, o_proj,
      post_attention_norm, gate_proj, up_proj, down_proj;
  // A float8 KV cache's scales (a float8 checkpoint's calibrated k_scale / v_scale): a key
  // (value) is stored as the e4m3 byte nearest key / k_scale and read back as byte * k_scale.
  // 1 when the checkpoint has none; unused by a KV cache in the model's dtype.
  float k_scale = 1.0f, v_scale = 1.0f;
};

struct ModelWeights {
  ModelConfig config;
  HostTensor embed_tokens, final_norm, lm_head;
  std::vector<LayerWeights> layers;
};

// "[d0, d1, ...]", as error messages write shapes.
std::string shape_text(const std::vector<int64_t>& shape);

// Checks every tensor's presence, shape and dtype against `weights.config`; errors name the
// tensor and the expected shape: `model.layers.3.self_attn.k_proj.weight: shape [512, 896],
// expected [1024, 896]`.
Status validate_weights(const ModelWeights& weights);

}  // namespace packserve::model
