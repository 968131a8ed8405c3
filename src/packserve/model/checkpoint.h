// checkpoint.h: a Hugging Face checkpoint directory -> ModelWeights (issue 4 "Loading").
//
// Reads <dir>/config.json (config.h) and the safetensors tensors (safetensors.h, memory-mapped)
// under Hugging Face's names:
//   model.embed_tokens.weight, model.norm.weight, lm_head.weight (absent or ignored when tied),
//   model.layers.N.{input_layernorm, post_attention_layernorm}.weight,
//   model.layers.N.self_attn.{q,k,v,o}_proj.weight, model.layers.N.self_attn.{q,k,v}_proj.bias
//   (Qwen2), model.layers.N.self_attn.{q,k}_norm.weight (Qwen3),
//   model.layers.N.mlp.{gate,up,down}_proj.weight.
// The checkpoint's dtype is the stored dtype of model.embed_tokens.weight (config.dtype is set
// to it; every other tensor must have the same dtype). Float8 checkpoints: a layer's linear
// weights (*_proj.weight) may be F8_E4M3 with a `.weight_scale` or `.weight_scale_inv` tensor
// beside them; they are dequantized to that dtype when loaded (fp8_weights.h), and their
// `.input_scale` and `.input_scale_ub` tensors are ignored. A layer's float8 KV cache scales
// (LayerWeights::k_scale / v_scale, 1 when absent) are read from
// model.layers.N.self_attn.{k,v}_scale (llm-compressor), self_attn.{k,v}_proj.{k,v}_scale
// (ModelOpt) or one self_attn.kv_scale for both (older exports): each one finite number > 0 of
// shape [] or [1], under one of those names only.
// When tied, lm_head is a copy of the embed_tokens view. A tensor the architecture does not use
// (other than lm_head.weight when tied and *.rotary_emb.inv_freq) is an error: it means config.json
// and the weights disagree. Errors name the directory or file, the tensor and what was expected.
// Thread-safety: free functions; the result is immutable and shareable.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "packserve/common/status.h"
#include "packserve/model/weights.h"

namespace packserve::model {

// "model.layers.<layer>.<suffix>".
std::string layer_tensor_name(int64_t layer, std::string_view suffix);

// kNotFound: no config.json / no safetensors; kUnimplemented: unsupported architecture or
// feature; kInvalidArgument: a missing, unexpected, mis-shaped or mis-typed tensor.
Result<ModelWeights> load_checkpoint(const std::string& dir);

}  // namespace packserve::model
