// config.cc: Hugging Face config.json -> ModelConfig (config.h). Field names and defaults follow
// transformers' LlamaConfig / MistralConfig / Qwen2Config / Qwen3Config. A field that is present
// with the wrong type is an error, never a silent default; unknown keys are ignored (configs carry
// many that do not change the forward).
#include "packserve/model/config.h"

#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

namespace packserve::model {
namespace {

using Json = nlohmann::json;

constexpr const char* kSupportedArchitectures =
    "LlamaForCausalLM, MistralForCausalLM, Qwen2ForCausalLM, Qwen3ForCausalLM";

std::string describe(const Json& value) {
  std::string s = value.dump(-1, ' ', false, Json::error_handler_t::replace);
  if (s.size() > 60) s = s.substr(0, 57) + "...";
  return s;
}

class ConfigReader {
 public:
  ConfigReader(const Json& root, std::string source) : root_(root), source_(std::move(source)) {}

  Status error(const std::string& field, const std::string& message) const {
    return invalid_argument(source_ + ": " + field + ": " + message);
  }
  // nullptr when absent or null.
  static const Json* member(const Json& object, const char* key) {
    const auto it = object.find(key);
    return it == object.end() || it->is_null() ? nullptr : &*it;
  }

  Result<int64_t> positive_int(const Json& object, const char* key, const std::string& field,
                               std::optional<int64_t> fallback) const {
    const Json* value = member(object, key);
    if (value == nullptr) {
      if (fallback) return *fallback;
      return error(field, "missing; expected a positive integer");
    }
    if (!value->is_number_integer() || value->get<int64_t>() <= 0) {
      return error(field, "expected a positive integer, got " + describe(*value));
    }
    return value->get<int64_t>();
  }
  Result<double> positive_number(const Json& object, const char* key, const std::string& field,
                                 std::optional<double> fallback) const {
    const Json* value = member(object, key);
    if (value == nullptr) {
      if (fallback) return *fallback;
      return error(field, "missing; expected a positive number");
    }
    if (!value->is_number() || !(value->get<double>() > 0)) {
      return error(field, "expected a positive number, got " + describe(*value));
    }
    return value->get<double>();
  }
  Result<bool> boolean(const Json& object, const char* key, const std::string& field,
                       bool fallback) const {
    const Json* value = member(object, key);
    if (value == nullptr) return fallback;
    if (!value->is_boolean())
      return error(field, "expected true or false, got " + describe(*value));
    return value->get<bool>();
  }
  Result<std::vector<int64_t>> token_ids(const char* key) const {
    const Json* value = member(root_, key);
    std::vector<int64_t> ids;
    if (value == nullptr) return ids;
    auto one = [&](const Json& v, const std::string& field) -> Status {
      if (!v.is_number_integer() || v.get<int64_t>() < 0) {
        return error(field, "expected a token id (an integer >= 0), got " + describe(v));
      }
      ids.push_back(v.get<int64_t>());
      return ok_status();
    };
    if (value->is_array()) {
      for (size_t i = 0; i < value->size(); ++i) {
        PS_RETURN_IF_ERROR(one((*value)[i], std::string(key) + "[" + std::to_string(i) + "]"));
      }
    } else {
      PS_RETURN_IF_ERROR(one(*value, key));
    }
    return ids;
  }

  Result<Architecture> architecture() const {
    const Json* archs = member(root_, "architectures");
    if (archs != nullptr) {
      if (!archs->is_array() || archs->empty()) {
        return error("architectures",
                     "expected a non-empty array of strings, got " + describe(*archs));
      }
      for (const Json& a : *archs) {
        if (!a.is_string()) {
          return error("architectures", "expected strings, got " + describe(a));
        }
        const std::string name = a.get<std::string>();
        if (name == "LlamaForCausalLM") return Architecture::kLlama;
        if (name == "MistralForCausalLM") return Architecture::kMistral;
        if (name == "Qwen2ForCausalLM") return Architecture::kQwen2;
        if (name == "Qwen3ForCausalLM") return Architecture::kQwen3;
      }
      return unimplemented(source_ + ": architectures: " + describe(*archs) +
                           " is not supported; expected one of " + kSupportedArchitectures);
    }
    // Older configs name only model_type.
    const Json* type = member(root_, "model_type");
    if (type == nullptr) {
      return error("architectures", std::string("missing (and no model_type); expected one of ") +
                                        kSupportedArchitectures);
    }
    if (type->is_string()) {
      const std::string name = type->get<std::string>();
      if (name == "llama") return Architecture::kLlama;
      if (name == "mistral") return Architecture::kMistral;
      if (name == "qwen2") return Architecture::kQwen2;
      if (name == "qwen3") return Architecture::kQwen3;
    }
    return unimplemented(source_ + ": model_type: " + describe(*type) +
                         " is not supported; expected llama, mistral, qwen2 or qwen3");
  }

  // RoPE scaling from a rope_scaling or rope_parameters object; nullopt for "default".
  // max_position_embeddings: yarn's default original_max_position_embeddings.
  Result<std::optional<RopeScaling>> rope_scaling(const Json& object, const std::string& field,
                                                  int64_t max_position_embeddings) const {
    if (!object.is_object())
      return error(field, "expected an object or null, got " + describe(object));
    const Json* type = member(object, "rope_type");
    std::string type_field = field + ".rope_type";
    if (type == nullptr) {
      type = member(object, "type");
      type_field = field + ".type";
    }
    constexpr const char* kKnown = "expected \"llama3\", \"yarn\", \"linear\" or \"default\"";
    if (type == nullptr) return error(field + ".rope_type", std::string("missing; ") + kKnown);
    if (!type->is_string()) return error(type_field, "expected a string, got " + describe(*type));
    const std::string name = type->get<std::string>();
    if (name == "default") return std::optional<RopeScaling>();
    RopeScaling s;
    if (name == "llama3") {
      s.type = RopeType::kLlama3;
    } else if (name == "yarn") {
      s.type = RopeType::kYarn;
    } else if (name == "linear") {
      s.type = RopeType::kLinear;
    } else {
      return unimplemented(source_ + ": " + type_field + ": \"" + name + "\" is not supported; " +
                           kKnown);
    }
    PS_ASSIGN_OR_RETURN(s.factor, positive_number(object, "factor", field + ".factor", {}));
    const auto original = [&](std::optional<int64_t> fallback) {
      return positive_int(object, "original_max_position_embeddings",
                          field + ".original_max_position_embeddings", fallback);
    };
    if (s.type == RopeType::kLlama3) {
      PS_ASSIGN_OR_RETURN(s.low_freq_factor, positive_number(object, "low_freq_factor",
                                                             field + ".low_freq_factor", {}));
      PS_ASSIGN_OR_RETURN(s.high_freq_factor, positive_number(object, "high_freq_factor",
                                                              field + ".high_freq_factor", {}));
      if (!(s.high_freq_factor > s.low_freq_factor)) {
        return error(field + ".high_freq_factor",
                     "expected > low_freq_factor (" + std::to_string(s.low_freq_factor) +
                         "), got " + std::to_string(s.high_freq_factor));
      }
      PS_ASSIGN_OR_RETURN(s.original_max_position_embeddings, original({}));
    } else if (s.type == RopeType::kYarn) {
      PS_ASSIGN_OR_RETURN(s.original_max_position_embeddings, original(max_position_embeddings));
      PS_ASSIGN_OR_RETURN(s.beta_fast,
                          positive_number(object, "beta_fast", field + ".beta_fast", 32.0));
      PS_ASSIGN_OR_RETURN(s.beta_slow,
                          positive_number(object, "beta_slow", field + ".beta_slow", 1.0));
      PS_ASSIGN_OR_RETURN(s.truncate, boolean(object, "truncate", field + ".truncate", true));
      // The paper's attention factor, or the ratio of two with DeepSeek's mscale /
      // mscale_all_dim, unless given.
      if (member(object, "attention_factor") != nullptr) {
        PS_ASSIGN_OR_RETURN(s.attention_factor, positive_number(object, "attention_factor",
                                                                field + ".attention_factor", {}));
      } else if (member(object, "mscale") != nullptr &&
                 member(object, "mscale_all_dim") != nullptr) {
        PS_ASSIGN_OR_RETURN(const double m,
                            positive_number(object, "mscale", field + ".mscale", {}));
        PS_ASSIGN_OR_RETURN(const double all, positive_number(object, "mscale_all_dim",
                                                              field + ".mscale_all_dim", {}));
        s.attention_factor = yarn_mscale(s.factor, m) / yarn_mscale(s.factor, all);
      } else {
        s.attention_factor = yarn_mscale(s.factor, 1.0);
      }
    }
    return std::optional<RopeScaling>(s);
  }

  Result<ModelConfig> parse() const {
    ModelConfig c;
    PS_ASSIGN_OR_RETURN(c.arch, architecture());
    const Json& r = root_;
    PS_ASSIGN_OR_RETURN(c.vocab_size, positive_int(r, "vocab_size", "vocab_size", {}));
    PS_ASSIGN_OR_RETURN(c.hidden_size, positive_int(r, "hidden_size", "hidden_size", {}));
    PS_ASSIGN_OR_RETURN(c.intermediate_size,
                        positive_int(r, "intermediate_size", "intermediate_size", {}));
    PS_ASSIGN_OR_RETURN(c.num_layers,
                        positive_int(r, "num_hidden_layers", "num_hidden_layers", {}));
    PS_ASSIGN_OR_RETURN(c.num_qo_heads,
                        positive_int(r, "num_attention_heads", "num_attention_heads", {}));
    PS_ASSIGN_OR_RETURN(c.num_kv_heads, positive_int(r, "num_key_value_heads",
                                                     "num_key_value_heads", c.num_qo_heads));
    if (c.num_qo_heads % c.num_kv_heads != 0) {
      return error("num_key_value_heads", "expected a divisor of num_attention_heads (" +
                                              std::to_string(c.num_qo_heads) + "), got " +
                                              std::to_string(c.num_kv_heads));
    }
    if (member(r, "head_dim") == nullptr && c.hidden_size % c.num_qo_heads != 0) {
      return error("head_dim", "missing, and hidden_size (" + std::to_string(c.hidden_size) +
                                   ") is not a multiple of num_attention_heads (" +
                                   std::to_string(c.num_qo_heads) + ")");
    }
    PS_ASSIGN_OR_RETURN(c.head_dim,
                        positive_int(r, "head_dim", "head_dim", c.hidden_size / c.num_qo_heads));
    if (c.head_dim % 2 != 0) {
      return error("head_dim", "expected an even number (RoPE rotates pairs), got " +
                                   std::to_string(c.head_dim));
    }
    PS_ASSIGN_OR_RETURN(c.max_position_embeddings,
                        positive_int(r, "max_position_embeddings", "max_position_embeddings", {}));
    PS_ASSIGN_OR_RETURN(c.rms_norm_eps, positive_number(r, "rms_norm_eps", "rms_norm_eps", 1e-6));
    PS_ASSIGN_OR_RETURN(c.tie_word_embeddings,
                        boolean(r, "tie_word_embeddings", "tie_word_embeddings", false));

    // RoPE: transformers >= 4.56 writes rope_parameters {rope_type, rope_theta, ...}; older
    // configs a top-level rope_theta and rope_scaling.
    if (const Json* params = member(r, "rope_parameters")) {
      if (!params->is_object()) {
        return error("rope_parameters", "expected an object, got " + describe(*params));
      }
      PS_ASSIGN_OR_RETURN(c.rope_theta,
                          positive_number(*params, "rope_theta", "rope_parameters.rope_theta", {}));
      PS_ASSIGN_OR_RETURN(c.rope_scaling,
                          rope_scaling(*params, "rope_parameters", c.max_position_embeddings));
    } else {
      PS_ASSIGN_OR_RETURN(c.rope_theta, positive_number(r, "rope_theta", "rope_theta", 10000.0));
      if (const Json* scaling = member(r, "rope_scaling")) {
        PS_ASSIGN_OR_RETURN(c.rope_scaling,
                            rope_scaling(*scaling, "rope_scaling", c.max_position_embeddings));
      }
    }

    c.qkv_bias = c.arch == Architecture::kQwen2;
    c.qk_norm = c.arch == Architecture::kQwen3;
    if (c.arch != Architecture::kQwen2) {
      PS_ASSIGN_OR_RETURN(const bool bias, boolean(r, "attention_bias", "attention_bias", false));
      if (bias) return unimplemented(source_ + ": attention_bias: true is not supported");
    }
    PS_ASSIGN_OR_RETURN(const bool mlp_bias, boolean(r, "mlp_bias", "mlp_bias", false));
    if (mlp_bias) return unimplemented(source_ + ": mlp_bias: true is not supported");
    if (const Json* act = member(r, "hidden_act")) {
      if (!act->is_string() || act->get<std::string>() != "silu") {
        return unimplemented(source_ + ": hidden_act: expected \"silu\" (SwiGLU), got " +
                             describe(*act));
      }
    }
    // A sliding window shorter than the context: kept in c.sliding_window, which caps the
    // context the model is served within (config.h; no sliding-window attention here).
    PS_ASSIGN_OR_RETURN(
        const bool use_sliding,
        boolean(r, "use_sliding_window", "use_sliding_window", c.arch == Architecture::kMistral));
    if (const Json* window = member(r, "sliding_window"); window != nullptr && use_sliding) {
      if (!window->is_number_integer() || window->get<int64_t>() < 1) {
        return error("sliding_window",
                     "expected a positive integer or null, got " + describe(*window));
      }
      if (window->get<int64_t>() < c.max_position_embeddings) {
        c.sliding_window = window->get<int64_t>();
      }
    }

    const Json* dtype = member(r, "torch_dtype");
    const char* dtype_field = "torch_dtype";
    if (dtype == nullptr) {
      dtype = member(r, "dtype");
      dtype_field = "dtype";
    }
    if (dtype != nullptr) {
      auto parsed = dtype->is_string() ? parse_dtype(dtype->get<std::string>())
                                       : Result<DType>(invalid_argument(""));
      if (!parsed.ok()) {
        return error(dtype_field,
                     "expected \"bfloat16\", \"float16\" or \"float32\", got " + describe(*dtype));
      }
      c.dtype = *parsed;
    }
    PS_ASSIGN_OR_RETURN(c.eos_token_ids, token_ids("eos_token_id"));
    PS_ASSIGN_OR_RETURN(const auto bos, token_ids("bos_token_id"));
    if (const Json* b = member(r, "bos_token_id"); b != nullptr && b->is_array()) {
      return error("bos_token_id", "expected one token id or null, got " + describe(*b));
    }
    if (!bos.empty()) c.bos_token_id = bos[0];
    return c;
  }

 private:
  const Json& root_;
  std::string source_;
};

const char* model_type(Architecture arch) {
  switch (arch) {
    case Architecture::kLlama:
      return "llama";
    case Architecture::kMistral:
      return "mistral";
    case Architecture::kQwen2:
      return "qwen2";
    case Architecture::kQwen3:
      return "qwen3";
  }
  return "?";
}

}  // namespace

std::string_view rope_type_name(RopeType type) {
  switch (type) {
    case RopeType::kLlama3:
      return "llama3";
    case RopeType::kYarn:
      return "yarn";
    case RopeType::kLinear:
      return "linear";
  }
  return "?";
}

RopeScaling llama3_rope_scaling(double factor, double low_freq_factor, double high_freq_factor,
                                int64_t original_max_position_embeddings) {
  RopeScaling s;
  s.type = RopeType::kLlama3;
  s.factor = factor;
  s.low_freq_factor = low_freq_factor;
  s.high_freq_factor = high_freq_factor;
  s.original_max_position_embeddings = original_max_position_embeddings;
  return s;
}

double yarn_mscale(double scale, double mscale) {
  return scale <= 1.0 ? 1.0 : 0.1 * mscale * std::log(scale) + 1.0;
}

RopeScaling yarn_rope_scaling(double factor, int64_t original_max_position_embeddings) {
  RopeScaling s;
  s.type = RopeType::kYarn;
  s.factor = factor;
  s.original_max_position_embeddings = original_max_position_embeddings;
  s.attention_factor = yarn_mscale(factor, 1.0);
  return s;
}

std::string_view architecture_name(Architecture arch) {
  switch (arch) {
    case Architecture::kLlama:
      return "LlamaForCausalLM";
    case Architecture::kMistral:
      return "MistralForCausalLM";
    case Architecture::kQwen2:
      return "Qwen2ForCausalLM";
    case Architecture::kQwen3:
      return "Qwen3ForCausalLM";
  }
  return "?";
}

Result<ModelConfig> parse_model_config(std::string_view json_text, const std::string& source_name) {
  Json root;
  try {
    root = Json::parse(json_text.begin(), json_text.end());
  } catch (const Json::exception& e) {
    return invalid_argument(source_name + ": not valid JSON: " + e.what());
  }
  if (!root.is_object()) return invalid_argument(source_name + ": expected a JSON object");
  return ConfigReader(root, source_name).parse();
}

Result<ModelConfig> load_model_config(const std::string& path) {
  std::ifstream file(path, std::ios::binary);
  if (!file) return not_found(path + ": cannot open (a checkpoint directory holds config.json)");
  std::ostringstream text;
  text << file.rdbuf();
  return parse_model_config(text.str(), path);
}

std::string model_config_to_json(const ModelConfig& c) {
  Json j;
  j["architectures"] = Json::array({std::string(architecture_name(c.arch))});
  j["model_type"] = model_type(c.arch);
  j["vocab_size"] = c.vocab_size;
  j["hidden_size"] = c.hidden_size;
  j["intermediate_size"] = c.intermediate_size;
  j["num_hidden_layers"] = c.num_layers;
  j["num_attention_heads"] = c.num_qo_heads;
  j["num_key_value_heads"] = c.num_kv_heads;
  j["head_dim"] = c.head_dim;
  j["max_position_embeddings"] = c.max_position_embeddings;
  j["rms_norm_eps"] = c.rms_norm_eps;
  j["rope_theta"] = c.rope_theta;
  if (const std::optional<RopeScaling>& r = c.rope_scaling) {
    Json& o = j["rope_scaling"];
    o = {{"rope_type", rope_type_name(r->type)}, {"factor", r->factor}};
    if (r->type == RopeType::kLlama3) {
      o["low_freq_factor"] = r->low_freq_factor;
      o["high_freq_factor"] = r->high_freq_factor;
    }
    if (r->type != RopeType::kLinear) {
      o["original_max_position_embeddings"] = r->original_max_position_embeddings;
    }
    if (r->type == RopeType::kYarn) {
      o["beta_fast"] = r->beta_fast;
      o["beta_slow"] = r->beta_slow;
      if (!r->truncate) o["truncate"] = false;
      o["attention_factor"] = r->attention_factor;
    }
  } else {
    j["rope_scaling"] = nullptr;
  }
  j["tie_word_embeddings"] = c.tie_word_embeddings;
  j["hidden_act"] = "silu";
  j["attention_bias"] = c.qkv_bias;
  j["attention_dropout"] = 0.0;
  if (c.arch == Architecture::kMistral) {
    j["sliding_window"] = c.sliding_window > 0 ? nlohmann::json(c.sliding_window) : nullptr;
  }
  if (c.arch == Architecture::kQwen2 || c.arch == Architecture::kQwen3) {
    j["use_sliding_window"] = c.sliding_window > 0;
    if (c.sliding_window > 0) j["sliding_window"] = c.sliding_window;
  }
  j["torch_dtype"] = c.dtype == DType::kF32   ? "float32"
                     : c.dtype == DType::kF16 ? "float16"
                                              : "bfloat16";
  if (c.eos_token_ids.size() == 1) {
    j["eos_token_id"] = c.eos_token_ids[0];
  } else if (!c.eos_token_ids.empty()) {
    j["eos_token_id"] = c.eos_token_ids;
  }
  if (c.bos_token_id) j["bos_token_id"] = *c.bos_token_id;
  j["use_cache"] = true;
  return j.dump(2) + "\n";
}

}  // namespace packserve::model
