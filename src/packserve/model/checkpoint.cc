// checkpoint.cc: load_checkpoint (checkpoint.h).
#include "packserve/model/checkpoint.h"

#include <cmath>
#include <set>
#include <string>
#include <string_view>
#include <utility>

#include "packserve/common/log.h"
#include "packserve/model/config.h"
#include "packserve/model/fp8_weights.h"
#include "packserve/model/safetensors.h"

namespace packserve::model {
namespace {

// Fetches `name` into `out` when the checkpoint has it; otherwise leaves `out` absent with
// its name set, so validate_weights reports it by name.
Status take(const SafetensorsCheckpoint& ckpt, const std::string& name, std::set<std::string>& used,
            HostTensor& out) {
  out = HostTensor{};
  out.name = name;
  if (!ckpt.contains(name)) return ok_status();
  PS_ASSIGN_OR_RETURN(out, ckpt.tensor(name));
  used.insert(name);
  return ok_status();
}

// A float8 linear weight (fp8_weights.h): its bytes and scale, dequantized to `dtype`.
// Otherwise as take().
Status take_linear(const SafetensorsCheckpoint& ckpt, const std::string& name, DType dtype,
                   std::set<std::string>& used, HostTensor& out) {
  if (!ckpt.contains(name)) return take(ckpt, name, used, out);
  PS_ASSIGN_OR_RETURN(const auto raw, ckpt.raw(name));
  if (raw.first->dtype_name != "F8_E4M3") return take(ckpt, name, used, out);
  const std::string per_row = name + "_scale", block = name + "_scale_inv";
  const bool has_block = ckpt.contains(block);
  if (!has_block && !ckpt.contains(per_row)) {
    return invalid_argument(name + ": float8 weight without " + per_row + " or " + block);
  }
  const std::string& scale_name = has_block ? block : per_row;
  PS_ASSIGN_OR_RETURN(const HostTensor scale, ckpt.tensor(scale_name));
  PS_ASSIGN_OR_RETURN(
      out, dequantize_fp8_weight(name, raw.second, raw.first->shape, scale,
                                 has_block ? Fp8ScaleKind::kBlock : Fp8ScaleKind::kPerTensorOrRow,
                                 dtype));
  used.insert(name);
  used.insert(scale_name);
  return ok_status();
}

// Layer `layer`'s float8 KV cache scales (checkpoint.h names them) into l.k_scale / l.v_scale.
Status take_kv_scales(const SafetensorsCheckpoint& ckpt, int64_t layer, std::set<std::string>& used,
                      LayerWeights& l) {
  const std::string both = layer_tensor_name(layer, "self_attn.kv_scale");
  for (const auto& [which, scale] : {std::pair{"k", &l.k_scale}, std::pair{"v", &l.v_scale}}) {
    const std::string w = which;
    const std::string names[] = {
        layer_tensor_name(layer, "self_attn." + w + "_scale"),
        layer_tensor_name(layer, "self_attn." + w + "_proj." + w + "_scale"), both};
    const std::string* found = nullptr;
    for (const std::string& name : names) {
      if (!ckpt.contains(name)) continue;
      if (found != nullptr) {
        return invalid_argument(name + ": a second " + w + " scale beside " + *found +
                                " (expected one)");
      }
      found = &name;
    }
    if (found == nullptr) continue;
    PS_ASSIGN_OR_RETURN(const HostTensor t, ckpt.tensor(*found));
    if (t.num_elements() != 1 || t.shape.size() > 1) {
      return invalid_argument(*found + ": shape " + shape_text(t.shape) + ", expected [] or [1]");
    }
    const float v = t.at(0);
    if (!std::isfinite(v) || !(v > 0.0f)) {
      return invalid_argument(*found + " = " + std::to_string(v) +
                              ", expected a finite KV cache scale > 0");
    }
    *scale = v;
    used.insert(*found);
  }
  return ok_status();
}

bool ignorable(const std::string& name, const ModelConfig& config) {
  if (name == "lm_head.weight" && config.tie_word_embeddings) return true;
  // Static activation scales (and FBGEMM's bound on them) of float8 checkpoints: activations
  // are quantized per step (--quantization fp8).
  for (const std::string_view suffix : {"rotary_emb.inv_freq", ".input_scale", ".input_scale_ub"}) {
    if (name.ends_with(suffix)) return true;
  }
  return false;
}

}  // namespace

std::string layer_tensor_name(int64_t layer, std::string_view suffix) {
  return "model.layers." + std::to_string(layer) + "." + std::string(suffix);
}

Result<ModelWeights> load_checkpoint(const std::string& dir) {
  ModelWeights w;
  PS_ASSIGN_OR_RETURN(w.config, load_model_config(dir + "/config.json"));
  PS_ASSIGN_OR_RETURN(auto ckpt, SafetensorsCheckpoint::open_dir(dir));
  std::set<std::string> used;
  auto error = [&](const Status& s) { return Status(s.code(), dir + ": " + s.message()); };

  Status s = take(ckpt, "model.embed_tokens.weight", used, w.embed_tokens);
  if (!s.ok()) return error(s);
  if (w.embed_tokens.present() && w.embed_tokens.dtype != w.config.dtype) {
    PS_LOG_INFO("model", "dir={} stored_dtype={} config_dtype={}: using the stored dtype", dir,
                dtype_name(w.embed_tokens.dtype), dtype_name(w.config.dtype));
    w.config.dtype = w.embed_tokens.dtype;
  }
  const ModelConfig& c = w.config;
  s = take(ckpt, "model.norm.weight", used, w.final_norm);
  if (!s.ok()) return error(s);
  if (c.tie_word_embeddings) {
    w.lm_head = w.embed_tokens;
  } else {
    s = take(ckpt, "lm_head.weight", used, w.lm_head);
    if (!s.ok()) return error(s);
  }
  w.layers.resize(static_cast<size_t>(c.num_layers));
  for (int64_t i = 0; i < c.num_layers; ++i) {
    LayerWeights& l = w.layers[static_cast<size_t>(i)];
    const std::pair<const char*, HostTensor*> tensors[] = {
        {"input_layernorm.weight", &l.input_norm},
        {"self_attn.q_proj.weight", &l.q_proj},
        {"self_attn.k_proj.weight", &l.k_proj},
        {"self_attn.v_proj.weight", &l.v_proj},
        {"self_attn.q_proj.bias", &l.q_bias},
        {"self_attn.k_proj.bias", &l.k_bias},
        {"self_attn.v_proj.bias", &l.v_bias},
        {"self_attn.q_norm.weight", &l.q_norm},
        {"self_attn.k_norm.weight", &l.k_norm},
        {"self_attn.o_proj.weight", &l.o_proj},
        {"post_attention_layernorm.weight", &l.post_attention_norm},
        {"mlp.gate_proj.weight", &l.gate_proj},
        {"mlp.up_proj.weight", &l.up_proj},
        {"mlp.down_proj.weight", &l.down_proj},
    };
    for (const auto& [suffix, tensor] : tensors) {
      const std::string name = layer_tensor_name(i, suffix);
      const bool linear = std::string_view(suffix).ends_with("_proj.weight");
      s = linear ? take_linear(ckpt, name, c.dtype, used, *tensor)
                 : take(ckpt, name, used, *tensor);
      if (!s.ok()) return error(s);
    }
    s = take_kv_scales(ckpt, i, used, l);
    if (!s.ok()) return error(s);
  }
  s = validate_weights(w);
  if (!s.ok()) return error(s);
  for (const std::string& name : ckpt.tensor_names()) {
    if (used.count(name) == 0 && !ignorable(name, c)) {
      return invalid_argument(dir + ": " + name + ": unexpected tensor for " +
                              std::string(architecture_name(c.arch)) +
                              " with num_hidden_layers = " + std::to_string(c.num_layers) +
                              " (config.json and the weights disagree)");
    }
  }
  return w;
}

}  // namespace packserve::model
