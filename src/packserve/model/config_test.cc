// config_test.cc: config.json parsing for each architecture (the configs published with the
// real models, abridged only of keys we ignore) and one test per validation rule.
#include "packserve/model/config.h"

#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <nlohmann/json.hpp>

#include "testing/mutate.h"

namespace packserve::model {
namespace {

// Qwen/Qwen3-0.6B config.json.
constexpr const char* kQwen3 = R"({"architectures":["Qwen3ForCausalLM"],"attention_bias":false,
 "attention_dropout":0.0,"bos_token_id":151643,"eos_token_id":151645,"head_dim":128,
 "hidden_act":"silu","hidden_size":1024,"initializer_range":0.02,"intermediate_size":3072,
 "max_position_embeddings":40960,"max_window_layers":28,"model_type":"qwen3",
 "num_attention_heads":16,"num_hidden_layers":28,"num_key_value_heads":8,"rms_norm_eps":1e-06,
 "rope_scaling":null,"rope_theta":1000000,"sliding_window":null,"tie_word_embeddings":true,
 "torch_dtype":"bfloat16","use_cache":true,"use_sliding_window":false,"vocab_size":151936})";

// meta-llama/Llama-3.2-1B config.json.
constexpr const char* kLlama32 = R"({"architectures":["LlamaForCausalLM"],"attention_bias":false,
 "attention_dropout":0.0,"bos_token_id":128000,"eos_token_id":128001,"head_dim":64,
 "hidden_act":"silu","hidden_size":2048,"initializer_range":0.02,"intermediate_size":8192,
 "max_position_embeddings":131072,"mlp_bias":false,"model_type":"llama","num_attention_heads":32,
 "num_hidden_layers":16,"num_key_value_heads":8,"pretraining_tp":1,"rms_norm_eps":1e-05,
 "rope_scaling":{"factor":32.0,"high_freq_factor":4.0,"low_freq_factor":1.0,
 "original_max_position_embeddings":8192,"rope_type":"llama3"},"rope_theta":500000.0,
 "tie_word_embeddings":true,"torch_dtype":"bfloat16","use_cache":true,"vocab_size":128256})";

// Qwen/Qwen2.5-0.5B config.json (no head_dim: 896 / 14 = 64).
constexpr const char* kQwen2 = R"({"architectures":["Qwen2ForCausalLM"],"attention_dropout":0.0,
 "bos_token_id":151643,"eos_token_id":151643,"hidden_act":"silu","hidden_size":896,
 "initializer_range":0.02,"intermediate_size":4864,"max_position_embeddings":32768,
 "max_window_layers":24,"model_type":"qwen2","num_attention_heads":14,"num_hidden_layers":24,
 "num_key_value_heads":2,"rms_norm_eps":1e-06,"rope_theta":1000000.0,"sliding_window":32768,
 "tie_word_embeddings":true,"torch_dtype":"bfloat16","use_cache":true,
 "use_sliding_window":false,"vocab_size":151936})";

// mistralai/Mistral-7B-v0.3 config.json.
constexpr const char* kMistral = R"({"architectures":["MistralForCausalLM"],
 "attention_dropout":0.0,"bos_token_id":1,"eos_token_id":2,"hidden_act":"silu",
 "hidden_size":4096,"initializer_range":0.02,"intermediate_size":14336,
 "max_position_embeddings":32768,"model_type":"mistral","num_attention_heads":32,
 "num_hidden_layers":32,"num_key_value_heads":8,"rms_norm_eps":1e-05,"rope_theta":1000000.0,
 "sliding_window":null,"tie_word_embeddings":false,"torch_dtype":"bfloat16","use_cache":true,
 "vocab_size":32768})";

// transformers >= 4.56 style: rope_parameters and "dtype"; eos as a list (Llama-3.1-8B).
constexpr const char* kLlama31New = R"({"architectures":["LlamaForCausalLM"],
 "bos_token_id":128000,"eos_token_id":[128001,128008,128009],"hidden_size":4096,
 "intermediate_size":14336,"max_position_embeddings":131072,"num_attention_heads":32,
 "num_hidden_layers":32,"num_key_value_heads":8,"rms_norm_eps":1e-05,
 "rope_parameters":{"factor":8.0,"high_freq_factor":4.0,"low_freq_factor":1.0,
 "original_max_position_embeddings":8192,"rope_type":"llama3","rope_theta":500000.0},
 "tie_word_embeddings":false,"dtype":"float16","vocab_size":128256})";

TEST(ModelConfig, Qwen3) {
  auto c = parse_model_config(kQwen3, "config.json");
  ASSERT_TRUE(c.ok()) << c.status().to_string();
  EXPECT_EQ(c->arch, Architecture::kQwen3);
  EXPECT_EQ(c->vocab_size, 151936);
  EXPECT_EQ(c->hidden_size, 1024);
  EXPECT_EQ(c->intermediate_size, 3072);
  EXPECT_EQ(c->num_layers, 28);
  EXPECT_EQ(c->num_qo_heads, 16);
  EXPECT_EQ(c->num_kv_heads, 8);
  EXPECT_EQ(c->head_dim, 128);  // explicit, != 1024 / 16
  EXPECT_EQ(c->q_size(), 2048);
  EXPECT_EQ(c->kv_size(), 1024);
  EXPECT_EQ(c->max_position_embeddings, 40960);
  EXPECT_DOUBLE_EQ(c->rms_norm_eps, 1e-6);
  EXPECT_DOUBLE_EQ(c->rope_theta, 1e6);
  EXPECT_FALSE(c->rope_scaling.has_value());
  EXPECT_TRUE(c->tie_word_embeddings);
  EXPECT_TRUE(c->qk_norm);
  EXPECT_FALSE(c->qkv_bias);
  EXPECT_EQ(c->dtype, DType::kBF16);
  EXPECT_EQ(c->eos_token_ids, std::vector<int64_t>{151645});
  EXPECT_EQ(c->bos_token_id, 151643);
}

TEST(ModelConfig, Llama32WithLlama3RopeScaling) {
  auto c = parse_model_config(kLlama32, "config.json");
  ASSERT_TRUE(c.ok()) << c.status().to_string();
  EXPECT_EQ(c->arch, Architecture::kLlama);
  EXPECT_EQ(c->head_dim, 64);
  EXPECT_DOUBLE_EQ(c->rope_theta, 500000.0);
  ASSERT_TRUE(c->rope_scaling.has_value());
  EXPECT_DOUBLE_EQ(c->rope_scaling->factor, 32.0);
  EXPECT_DOUBLE_EQ(c->rope_scaling->low_freq_factor, 1.0);
  EXPECT_DOUBLE_EQ(c->rope_scaling->high_freq_factor, 4.0);
  EXPECT_EQ(c->rope_scaling->original_max_position_embeddings, 8192);
  EXPECT_TRUE(c->tie_word_embeddings);
  EXPECT_FALSE(c->qk_norm);
  EXPECT_FALSE(c->qkv_bias);
  EXPECT_DOUBLE_EQ(c->rms_norm_eps, 1e-5);
}

// Qwen3 with the YaRN block Qwen's model cards give for contexts beyond 32K; its context is
// original x factor = 131,072 (vLLM's rule), not max_position_embeddings (40,960).
TEST(ModelConfig, Qwen3WithYarnRopeScaling) {
  for (const char* key : {"rope_scaling", "rope_parameters"}) {
    SCOPED_TRACE(key);
    nlohmann::json j = nlohmann::json::parse(kQwen3);
    j[key] = {{"rope_type", "yarn"}, {"factor", 4.0}, {"original_max_position_embeddings", 32768}};
    if (std::string(key) == "rope_parameters") {
      j.erase("rope_scaling");
      j[key]["rope_theta"] = 1000000;
    }
    auto c = parse_model_config(j.dump(), "config.json");
    ASSERT_TRUE(c.ok()) << c.status().to_string();
    ASSERT_TRUE(c->rope_scaling.has_value());
    const RopeScaling& r = *c->rope_scaling;
    EXPECT_EQ(r.type, RopeType::kYarn);
    EXPECT_EQ(r.factor, 4.0);
    EXPECT_EQ(r.original_max_position_embeddings, 32768);
    EXPECT_EQ(r.beta_fast, 32.0);
    EXPECT_EQ(r.beta_slow, 1.0);
    EXPECT_TRUE(r.truncate);
    EXPECT_NEAR(r.attention_factor, 0.1 * std::log(4.0) + 1.0, 1e-15);
    EXPECT_EQ(model_context_length(*c), 131072);
  }
}

// YaRN's optional fields: an explicit attention_factor wins; DeepSeek's mscale / mscale_all_dim
// give the ratio of two paper factors; without original_max_position_embeddings the model's
// max_position_embeddings is the original context. Linear scaling: max positions x factor.
TEST(ModelConfig, YarnOptionalFieldsAndLinear) {
  const auto parse = [](const nlohmann::json& scaling) {
    nlohmann::json j = nlohmann::json::parse(kQwen3);
    j["rope_scaling"] = scaling;
    auto c = parse_model_config(j.dump(), "c");
    EXPECT_TRUE(c.ok()) << c.status().to_string();
    return c.ok() ? *c : ModelConfig{};
  };
  ModelConfig c = parse({{"rope_type", "yarn"},
                         {"factor", 2.0},
                         {"attention_factor", 0.9},
                         {"beta_fast", 16},
                         {"beta_slow", 2},
                         {"truncate", false}});
  ASSERT_TRUE(c.rope_scaling.has_value());
  EXPECT_EQ(c.rope_scaling->attention_factor, 0.9);
  EXPECT_EQ(c.rope_scaling->beta_fast, 16.0);
  EXPECT_EQ(c.rope_scaling->beta_slow, 2.0);
  EXPECT_FALSE(c.rope_scaling->truncate);
  EXPECT_EQ(c.rope_scaling->original_max_position_embeddings, 40960);
  EXPECT_EQ(model_context_length(c), 81920);
  c = parse({{"type", "yarn"}, {"factor", 40.0}, {"mscale", 0.707}, {"mscale_all_dim", 1.0}});
  ASSERT_TRUE(c.rope_scaling.has_value());
  const double l = std::log(40.0);
  EXPECT_NEAR(c.rope_scaling->attention_factor, (0.0707 * l + 1.0) / (0.1 * l + 1.0), 1e-15);
  c = parse({{"rope_type", "yarn"}, {"factor", 0.5}});  // a factor <= 1: no attention scaling
  EXPECT_EQ(c.rope_scaling->attention_factor, 1.0);
  c = parse({{"rope_type", "linear"}, {"factor", 2.0}});
  ASSERT_TRUE(c.rope_scaling.has_value());
  EXPECT_EQ(c.rope_scaling->type, RopeType::kLinear);
  EXPECT_EQ(c.rope_scaling->attention_factor, 1.0);
  EXPECT_EQ(model_context_length(c), 81920);
  // llama3 and no scaling: max_position_embeddings.
  auto llama = parse_model_config(kLlama32, "c");
  ASSERT_TRUE(llama.ok());
  EXPECT_EQ(model_context_length(*llama), 131072);
  EXPECT_EQ(model_context_length(parse(nullptr)), 40960);
}

TEST(ModelConfig, Qwen2HasQkvBiasAndDerivedHeadDim) {
  auto c = parse_model_config(kQwen2, "config.json");
  ASSERT_TRUE(c.ok()) << c.status().to_string();
  EXPECT_EQ(c->arch, Architecture::kQwen2);
  EXPECT_TRUE(c->qkv_bias);
  EXPECT_FALSE(c->qk_norm);
  EXPECT_EQ(c->head_dim, 64);
  EXPECT_EQ(c->num_kv_heads, 2);
}

TEST(ModelConfig, Mistral) {
  auto c = parse_model_config(kMistral, "config.json");
  ASSERT_TRUE(c.ok()) << c.status().to_string();
  EXPECT_EQ(c->arch, Architecture::kMistral);
  EXPECT_EQ(c->head_dim, 128);
  EXPECT_FALSE(c->tie_word_embeddings);
  EXPECT_EQ(c->eos_token_ids, std::vector<int64_t>{2});
  EXPECT_EQ(c->sliding_window, 0);
  EXPECT_EQ(model_context_length(*c), 32768);
}

// A sliding window shorter than the positions (Mistral-7B-v0.1: 4096 of 32768; Qwen2 with
// use_sliding_window) is kept and caps the context length; one at or past them, or one that
// use_sliding_window turns off, is no window at all.
TEST(ModelConfig, SlidingWindowCapsTheContextLength) {
  nlohmann::json v01 = nlohmann::json::parse(kMistral);
  v01["sliding_window"] = 4096;
  auto c = parse_model_config(v01.dump(), "config.json");
  ASSERT_TRUE(c.ok()) << c.status().to_string();
  EXPECT_EQ(c->sliding_window, 4096);
  EXPECT_EQ(model_context_length(*c), 4096);
  v01["sliding_window"] = 32768;
  c = parse_model_config(v01.dump(), "config.json");
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c->sliding_window, 0);
  EXPECT_EQ(model_context_length(*c), 32768);
  nlohmann::json qwen = nlohmann::json::parse(kQwen2);
  qwen["sliding_window"] = 4096;
  c = parse_model_config(qwen.dump(), "config.json");
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c->sliding_window, 0);  // use_sliding_window false
  qwen["use_sliding_window"] = true;
  c = parse_model_config(qwen.dump(), "config.json");
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c->sliding_window, 4096);
  EXPECT_EQ(model_context_length(*c), 4096);
  // With YaRN the smaller of the two.
  qwen["rope_scaling"] = {
      {"rope_type", "yarn"}, {"factor", 4.0}, {"original_max_position_embeddings", 512}};
  c = parse_model_config(qwen.dump(), "config.json");
  ASSERT_TRUE(c.ok()) << c.status().to_string();
  EXPECT_EQ(model_context_length(*c), 2048);
}

TEST(ModelConfig, RopeParametersDtypeAndEosList) {
  auto c = parse_model_config(kLlama31New, "config.json");
  ASSERT_TRUE(c.ok()) << c.status().to_string();
  EXPECT_DOUBLE_EQ(c->rope_theta, 500000.0);
  ASSERT_TRUE(c->rope_scaling.has_value());
  EXPECT_DOUBLE_EQ(c->rope_scaling->factor, 8.0);
  EXPECT_EQ(c->dtype, DType::kF16);
  EXPECT_EQ(c->eos_token_ids, (std::vector<int64_t>{128001, 128008, 128009}));
  EXPECT_EQ(c->head_dim, 128);  // 4096 / 32
  EXPECT_DOUBLE_EQ(c->rms_norm_eps, 1e-5);
}

TEST(ModelConfig, RoundTripsThroughJson) {
  nlohmann::json yarn = nlohmann::json::parse(kQwen3);
  yarn["rope_scaling"] = {{"rope_type", "yarn"}, {"factor", 4.0}, {"truncate", false},
                          {"beta_fast", 16},     {"mscale", 0.8}, {"mscale_all_dim", 1.0}};
  nlohmann::json linear = nlohmann::json::parse(kQwen3);
  linear["rope_scaling"] = {{"type", "linear"}, {"factor", 2.0}};
  nlohmann::json mistral_window = nlohmann::json::parse(kMistral);
  mistral_window["sliding_window"] = 4096;
  nlohmann::json qwen_window = nlohmann::json::parse(kQwen2);
  qwen_window["use_sliding_window"] = true;
  qwen_window["sliding_window"] = 8192;
  const std::string yarn_text = yarn.dump(), linear_text = linear.dump(),
                    mistral_window_text = mistral_window.dump(),
                    qwen_window_text = qwen_window.dump();
  for (const char* text :
       {kQwen3, kLlama32, kQwen2, kMistral, kLlama31New, yarn_text.c_str(), linear_text.c_str(),
        mistral_window_text.c_str(), qwen_window_text.c_str()}) {
    auto a = parse_model_config(text, "a");
    ASSERT_TRUE(a.ok());
    const std::string json = model_config_to_json(*a);
    auto b = parse_model_config(json, "b");
    ASSERT_TRUE(b.ok()) << b.status().to_string() << "\n" << json;
    EXPECT_EQ(model_config_to_json(*b), json);
    EXPECT_EQ(b->arch, a->arch);
    EXPECT_EQ(b->head_dim, a->head_dim);
    EXPECT_EQ(b->rope_theta, a->rope_theta);
    EXPECT_EQ(b->rms_norm_eps, a->rms_norm_eps);
    ASSERT_EQ(b->rope_scaling.has_value(), a->rope_scaling.has_value());
    if (a->rope_scaling) {
      EXPECT_EQ(b->rope_scaling->type, a->rope_scaling->type);
      EXPECT_EQ(b->rope_scaling->factor, a->rope_scaling->factor);
      EXPECT_EQ(b->rope_scaling->original_max_position_embeddings,
                a->rope_scaling->original_max_position_embeddings);
      EXPECT_EQ(b->rope_scaling->beta_fast, a->rope_scaling->beta_fast);
      EXPECT_EQ(b->rope_scaling->truncate, a->rope_scaling->truncate);
      EXPECT_EQ(b->rope_scaling->attention_factor, a->rope_scaling->attention_factor);
    }
    EXPECT_EQ(b->eos_token_ids, a->eos_token_ids);
    EXPECT_EQ(b->bos_token_id, a->bos_token_id);
    EXPECT_EQ(b->dtype, a->dtype);
    EXPECT_EQ(b->tie_word_embeddings, a->tie_word_embeddings);
    EXPECT_EQ(b->qkv_bias, a->qkv_bias);
    EXPECT_EQ(b->qk_norm, a->qk_norm);
    EXPECT_EQ(b->sliding_window, a->sliding_window);
  }
}

// Applies `edit` to the Qwen3 config and returns the parse status.
Status parse_edited(const std::function<void(nlohmann::json&)>& edit) {
  nlohmann::json j = nlohmann::json::parse(kQwen3);
  edit(j);
  return parse_model_config(j.dump(), "ckpt/config.json").status();
}

void expect_error(const Status& s, StatusCode code, const std::vector<std::string>& parts) {
  EXPECT_EQ(s.code(), code) << s.to_string();
  for (const std::string& p : parts) {
    EXPECT_NE(s.message().find(p), std::string::npos) << "'" << p << "' not in: " << s.message();
  }
}

TEST(ModelConfigErrors, NotJsonOrNotObject) {
  expect_error(parse_model_config("{", "x/config.json").status(), StatusCode::kInvalidArgument,
               {"x/config.json", "not valid JSON"});
  expect_error(parse_model_config("[1]", "x/config.json").status(), StatusCode::kInvalidArgument,
               {"x/config.json", "expected a JSON object"});
}

TEST(ModelConfigErrors, UnsupportedArchitecture) {
  expect_error(parse_edited([](auto& j) { j["architectures"] = {"GPT2LMHeadModel"}; }),
               StatusCode::kUnimplemented,
               {"ckpt/config.json", "architectures", "GPT2LMHeadModel", "Qwen3ForCausalLM"});
  expect_error(parse_edited([](auto& j) {
                 j.erase("architectures");
                 j.erase("model_type");
               }),
               StatusCode::kInvalidArgument, {"architectures", "missing"});
  expect_error(parse_edited([](auto& j) { j["architectures"] = "Qwen3ForCausalLM"; }),
               StatusCode::kInvalidArgument, {"architectures", "expected a non-empty array"});
}

TEST(ModelConfigErrors, ModelTypeFallback) {
  nlohmann::json j = nlohmann::json::parse(kQwen2);
  j.erase("architectures");
  auto c = parse_model_config(j.dump(), "c");
  ASSERT_TRUE(c.ok()) << c.status().to_string();
  EXPECT_EQ(c->arch, Architecture::kQwen2);
}

TEST(ModelConfigErrors, MissingOrWrongTypedCounts) {
  for (const char* key : {"vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers",
                          "num_attention_heads", "max_position_embeddings"}) {
    SCOPED_TRACE(key);
    expect_error(parse_edited([&](auto& j) { j.erase(key); }), StatusCode::kInvalidArgument,
                 {"ckpt/config.json", std::string(key) + ": missing", "positive integer"});
    expect_error(parse_edited([&](auto& j) { j[key] = "x"; }), StatusCode::kInvalidArgument,
                 {std::string(key) + ": expected a positive integer, got \"x\""});
    expect_error(parse_edited([&](auto& j) { j[key] = 0; }), StatusCode::kInvalidArgument,
                 {std::string(key) + ": expected a positive integer, got 0"});
  }
}

TEST(ModelConfigErrors, HeadCounts) {
  expect_error(parse_edited([](auto& j) { j["num_key_value_heads"] = 5; }),
               StatusCode::kInvalidArgument, {"num_key_value_heads", "divisor", "16"});
  expect_error(parse_edited([](auto& j) { j["head_dim"] = 63; }), StatusCode::kInvalidArgument,
               {"head_dim", "even"});
  expect_error(parse_edited([](auto& j) {
                 j.erase("head_dim");
                 j["num_attention_heads"] = 24;
                 j["num_key_value_heads"] = 8;
               }),
               StatusCode::kInvalidArgument, {"head_dim", "missing", "1024", "24"});
  // num_key_value_heads absent: defaults to num_attention_heads (transformers' default).
  nlohmann::json j = nlohmann::json::parse(kQwen3);
  j.erase("num_key_value_heads");
  auto c = parse_model_config(j.dump(), "c");
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c->num_kv_heads, 16);
}

TEST(ModelConfigErrors, RopeFields) {
  expect_error(parse_edited([](auto& j) { j["rope_theta"] = -1; }), StatusCode::kInvalidArgument,
               {"rope_theta", "positive number"});
  expect_error(parse_edited([](auto& j) {
                 j["rope_scaling"] = {{"rope_type", "longrope"}};
               }),
               StatusCode::kUnimplemented,
               {"rope_scaling.rope_type", "longrope", "llama3", "yarn", "linear", "default"});
  expect_error(parse_edited([](auto& j) {
                 j["rope_scaling"] = {{"type", "dynamic"}};
               }),
               StatusCode::kUnimplemented, {"rope_scaling.type", "dynamic"});
  expect_error(parse_edited([](auto& j) {
                 j["rope_scaling"] = {{"rope_type", "yarn"}};
               }),
               StatusCode::kInvalidArgument, {"rope_scaling.factor", "missing"});
  expect_error(parse_edited([](auto& j) {
                 j["rope_scaling"] = {{"rope_type", "linear"}, {"factor", 0}};
               }),
               StatusCode::kInvalidArgument, {"rope_scaling.factor", "positive number"});
  expect_error(parse_edited([](auto& j) {
                 j["rope_scaling"] = {{"rope_type", "yarn"}, {"factor", 4}, {"beta_fast", "x"}};
               }),
               StatusCode::kInvalidArgument, {"rope_scaling.beta_fast", "positive number"});
  expect_error(parse_edited([](auto& j) {
                 j["rope_scaling"] = {{"rope_type", "yarn"}, {"factor", 4}, {"truncate", 1}};
               }),
               StatusCode::kInvalidArgument, {"rope_scaling.truncate", "true or false"});
  expect_error(
      parse_edited([](auto& j) {
        j["rope_scaling"] = {{"rope_type", "yarn"}, {"factor", 4}, {"attention_factor", -1}};
      }),
      StatusCode::kInvalidArgument, {"rope_scaling.attention_factor", "positive number"});
  expect_error(parse_edited([](auto& j) {
                 j["rope_scaling"] = {{"rope_type", "yarn"},
                                      {"factor", 4},
                                      {"original_max_position_embeddings", 0.5}};
               }),
               StatusCode::kInvalidArgument,
               {"rope_scaling.original_max_position_embeddings", "positive integer"});
  expect_error(parse_edited([](auto& j) {
                 j["rope_scaling"] = {{"rope_type", "llama3"}, {"factor", 8.0}};
               }),
               StatusCode::kInvalidArgument, {"rope_scaling.low_freq_factor", "missing"});
  expect_error(parse_edited([](auto& j) { j["rope_scaling"] = 3; }), StatusCode::kInvalidArgument,
               {"rope_scaling", "expected an object"});
  expect_error(parse_edited([](auto& j) {
                 j["rope_parameters"] = {{"rope_type", "default"}};
               }),
               StatusCode::kInvalidArgument, {"rope_parameters.rope_theta", "missing"});
  // "default" means unscaled RoPE.
  nlohmann::json j = nlohmann::json::parse(kQwen3);
  j["rope_parameters"] = {{"rope_type", "default"}, {"rope_theta", 1234.0}};
  auto c = parse_model_config(j.dump(), "c");
  ASSERT_TRUE(c.ok()) << c.status().to_string();
  EXPECT_DOUBLE_EQ(c->rope_theta, 1234.0);
  EXPECT_FALSE(c->rope_scaling.has_value());
}

TEST(ModelConfigErrors, UnsupportedFeatures) {
  expect_error(parse_edited([](auto& j) { j["attention_bias"] = true; }),
               StatusCode::kUnimplemented, {"attention_bias"});
  expect_error(parse_edited([](auto& j) { j["hidden_act"] = "gelu"; }), StatusCode::kUnimplemented,
               {"hidden_act", "silu", "gelu"});
  expect_error(parse_edited([](auto& j) {
                 j["use_sliding_window"] = true;
                 j["sliding_window"] = "4096";
               }),
               StatusCode::kInvalidArgument, {"sliding_window", "positive integer", "\"4096\""});
  expect_error(parse_edited([](auto& j) {
                 j["use_sliding_window"] = true;
                 j["sliding_window"] = 0;
               }),
               StatusCode::kInvalidArgument, {"sliding_window", "positive integer"});
  expect_error(parse_edited([](auto& j) { j["tie_word_embeddings"] = "yes"; }),
               StatusCode::kInvalidArgument, {"tie_word_embeddings", "true or false"});
}

TEST(ModelConfigErrors, DtypeAndTokenIds) {
  expect_error(parse_edited([](auto& j) { j["torch_dtype"] = "int8"; }),
               StatusCode::kInvalidArgument, {"torch_dtype", "bfloat16", "int8"});
  expect_error(parse_edited([](auto& j) {
                 j["eos_token_id"] = {1, "two"};
               }),
               StatusCode::kInvalidArgument, {"eos_token_id[1]", "token id"});
  expect_error(parse_edited([](auto& j) {
                 j["bos_token_id"] = {1, 2};
               }),
               StatusCode::kInvalidArgument, {"bos_token_id", "one token id"});
}

TEST(ModelConfigErrors, LoadMissingFile) {
  auto c = load_model_config("/nonexistent/dir/config.json");
  expect_error(c.status(), StatusCode::kNotFound, {"/nonexistent/dir/config.json"});
}

// Seeded character mutations (replaced, inserted, deleted) of the four real configs: each
// parses with the header's invariants (every count > 0, num_qo_heads % num_kv_heads == 0, even
// head_dim, rope_theta and rms_norm_eps > 0, a sane rope scaling), or fails with
// kInvalidArgument or kUnimplemented naming the file.
TEST(ModelConfigErrors, MutatedConfigsParseWithTheInvariantsOrFailNamingTheFile) {
  const std::string alphabet = "{}[],:\"0123456789-.e aflnrstu";
  Rng rng(20261124);
  int parsed = 0;
  for (const char* source : {kQwen3, kLlama32, kQwen2, kMistral, kLlama31New}) {
    for (int trial = 0; trial < 600; ++trial) {
      std::string text = source;
      const int mutations = static_cast<int>(rng.uniform_int(1, 3));
      for (int m = 0; m < mutations; ++m) testing::mutate_char(text, rng, alphabet);
      const auto config = parse_model_config(text, "mutated.json");
      if (!config.ok()) {
        ASSERT_TRUE(config.status().code() == StatusCode::kInvalidArgument ||
                    config.status().code() == StatusCode::kUnimplemented)
            << config.status().to_string();
        ASSERT_NE(config.status().message().find("mutated.json"), std::string::npos)
            << config.status().to_string();
        continue;
      }
      ++parsed;
      SCOPED_TRACE("trial " + std::to_string(trial) + ": " + text);
      const ModelConfig& m = *config;
      for (int64_t n : {m.vocab_size, m.hidden_size, m.intermediate_size, m.num_layers,
                        m.num_qo_heads, m.num_kv_heads, m.head_dim, m.max_position_embeddings}) {
        ASSERT_GT(n, 0);
      }
      ASSERT_EQ(m.num_qo_heads % m.num_kv_heads, 0);
      ASSERT_EQ(m.head_dim % 2, 0);
      ASSERT_GT(m.rope_theta, 0);
      ASSERT_GT(m.rms_norm_eps, 0);
      if (m.rope_scaling) {
        ASSERT_GT(m.rope_scaling->factor, 0);
        ASSERT_GT(m.rope_scaling->original_max_position_embeddings, 0);
        ASSERT_GT(m.rope_scaling->high_freq_factor, m.rope_scaling->low_freq_factor);
        ASSERT_GT(m.rope_scaling->attention_factor, 0);
      }
    }
  }
  EXPECT_GT(parsed, 0);
  EXPECT_LT(parsed, 3000);
}

}  // namespace
}  // namespace packserve::model
