// config.h: the model shape and hyper-parameters read from a Hugging Face config.json
// (issue 4 "Loading"): LlamaForCausalLM, MistralForCausalLM, Qwen2ForCausalLM, Qwen3ForCausalLM.
//
// Every architecture here is a pre-norm decoder: RMSNorm -> attention (GQA, RoPE) -> residual
// -> RMSNorm -> SwiGLU MLP -> residual; the differences are flags (qkv_bias, qk_norm, tied
// embeddings, rope scaling).
// Invariants after parse_model_config(): every count > 0, num_qo_heads % num_kv_heads == 0,
// head_dim even, rope_theta > 0, rms_norm_eps > 0.
// Thread-safety: a value.
#pragma once

#include <algorithm>
#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "packserve/common/dtype.h"
#include "packserve/common/status.h"

namespace packserve::model {

enum class Architecture { kLlama, kMistral, kQwen2, kQwen3 };
std::string_view architecture_name(Architecture arch);  // "LlamaForCausalLM", ...

// RoPE frequency scaling: config.json's rope_scaling / rope_parameters "rope_type" (transformers'
// modeling_rope_utils; the formulas are in ops_cpu.h's rope_inv_freq):
//   llama3  _compute_llama3_parameters: factor, low_freq_factor, high_freq_factor,
//           original_max_position_embeddings (all required)
//   yarn    _compute_yarn_parameters: factor (required), original_max_position_embeddings
//           (default max_position_embeddings), beta_fast (32), beta_slow (1), truncate (true),
//           attention_factor (default from mscale / mscale_all_dim, else 0.1 ln(factor) + 1)
//   linear  _compute_linear_scaling_rope_parameters: factor (required)
// attention_factor multiplies RoPE's cos and sin (so q.k by its square); 1 unless yarn.
enum class RopeType { kLlama3, kYarn, kLinear };
std::string_view rope_type_name(RopeType type);  // "llama3", "yarn", "linear"

struct RopeScaling {
  RopeType type = RopeType::kLlama3;
  double factor = 8.0;
  double low_freq_factor = 1.0;                     // llama3
  double high_freq_factor = 4.0;                    // llama3
  int64_t original_max_position_embeddings = 8192;  // llama3, yarn
  double beta_fast = 32.0;                          // yarn
  double beta_slow = 1.0;                           // yarn
  bool truncate = true;                             // yarn: correction range floored / ceiled
  double attention_factor = 1.0;                    // yarn, resolved at parse time
};
RopeScaling llama3_rope_scaling(double factor, double low_freq_factor, double high_freq_factor,
                                int64_t original_max_position_embeddings);
// YaRN with the defaults above (beta 32 / 1, truncate, attention factor 0.1 ln(factor) + 1).
RopeScaling yarn_rope_scaling(double factor, int64_t original_max_position_embeddings);
// YaRN's attention factor of a scale: 0.1 mscale ln(scale) + 1, or 1 for scale <= 1.
double yarn_mscale(double scale, double mscale);

struct ModelConfig {
  Architecture arch = Architecture::kLlama;
  int64_t vocab_size = 0;
  int64_t hidden_size = 0;
  int64_t intermediate_size = 0;  // SwiGLU inner width
  int64_t num_layers = 0;         // num_hidden_layers
  int64_t num_qo_heads = 0;       // num_attention_heads
  int64_t num_kv_heads = 0;       // num_key_value_heads (defaults to num_qo_heads)
  int64_t head_dim = 0;           // "head_dim", else hidden_size / num_qo_heads
  int64_t max_position_embeddings = 0;
  double rms_norm_eps = 1e-6;
  double rope_theta = 10000.0;              // top-level rope_theta or rope_parameters.rope_theta
  std::optional<RopeScaling> rope_scaling;  // none: plain RoPE ("default")
  bool tie_word_embeddings = false;         // lm_head shares embed_tokens
  bool qkv_bias = false;                    // Qwen2: q/k/v projections have biases
  bool qk_norm = false;                     // Qwen3: per-head RMSNorm of q and k before RoPE
  DType dtype = DType::kBF16;               // torch_dtype / dtype of the checkpoint
  std::vector<int64_t> eos_token_ids;       // eos_token_id (int or list); may be empty
  std::optional<int64_t> bos_token_id;
  // > 0: each position attends to the last sliding_window positions only (Mistral-7B-v0.1's
  // sliding_window, Qwen2's with use_sliding_window). There is no sliding-window attention
  // here, so such a model is served within its window (model_context_length), where the
  // window covers every key and full causal attention is the same computation.
  int64_t sliding_window = 0;

  int64_t q_size() const { return num_qo_heads * head_dim; }   // q projection width
  int64_t kv_size() const { return num_kv_heads * head_dim; }  // k (and v) projection width
};

// The context length the model supports, vLLM's rule for its default max_model_len:
// max_position_embeddings, except yarn (original_max_position_embeddings x factor) and linear
// (max_position_embeddings x factor) scaling; at most sliding_window when the model has one.
// Inline: the engine uses it without linking the model library.
inline int64_t model_context_length(const ModelConfig& c) {
  int64_t length = c.max_position_embeddings;
  if (c.rope_scaling && c.rope_scaling->type != RopeType::kLlama3) {
    const double base = c.rope_scaling->type == RopeType::kYarn
                            ? static_cast<double>(c.rope_scaling->original_max_position_embeddings)
                            : static_cast<double>(c.max_position_embeddings);
    const double scaled = base * c.rope_scaling->factor;
    length = scaled >= 9.2e18 ? std::numeric_limits<int64_t>::max() : static_cast<int64_t>(scaled);
  }
  return c.sliding_window > 0 ? std::min(length, c.sliding_window) : length;
}

// Parses config.json text. Errors (kInvalidArgument) name the source, the field and what was
// expected: `config.json: num_attention_heads: expected a positive integer, got "x"`;
// an unknown architecture or rope_type is kUnimplemented naming the supported ones.
Result<ModelConfig> parse_model_config(std::string_view json_text, const std::string& source_name);
Result<ModelConfig> load_model_config(const std::string& path);

// Inverse of parse_model_config (the fields transformers reads), for make-dummy-model.
std::string model_config_to_json(const ModelConfig& config);

}  // namespace packserve::model
