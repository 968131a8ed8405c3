// checkpoint_test.cc: load_checkpoint on small hand-built checkpoint directories: exact values
// back, single file vs shards, tied embeddings, and one test per error (missing file, missing /
// mis-shaped / mis-typed / unexpected tensor, unsupported architecture).
#include "packserve/model/checkpoint.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>

#include "packserve/model/config.h"
#include "packserve/model/safetensors.h"
#include "packserve/model/test_dir.h"

namespace packserve::model {
namespace {

// A Qwen3-shaped model small enough to write by hand: H = 8, 2 q heads / 1 kv head of dim 4
// (Q = 8, KV = 4), I = 16, V = 10, 2 layers.
ModelConfig small_config(Architecture arch, bool tied) {
  ModelConfig c;
  c.arch = arch;
  c.vocab_size = 10;
  c.hidden_size = 8;
  c.intermediate_size = 16;
  c.num_layers = 2;
  c.num_qo_heads = 2;
  c.num_kv_heads = 1;
  c.head_dim = 4;
  c.max_position_embeddings = 128;
  c.tie_word_embeddings = tied;
  c.qkv_bias = arch == Architecture::kQwen2;
  c.qk_norm = arch == Architecture::kQwen3;
  c.dtype = DType::kBF16;
  return c;
}

// The tensors weights.h documents for `c`, in Hugging Face names.
std::vector<SafetensorsTensorSpec> expected_tensors(const ModelConfig& c) {
  std::vector<SafetensorsTensorSpec> t;
  const int64_t h = c.hidden_size, q = c.q_size(), kv = c.kv_size(), inter = c.intermediate_size;
  t.push_back({"model.embed_tokens.weight", c.dtype, {c.vocab_size, h}});
  for (int64_t i = 0; i < c.num_layers; ++i) {
    const std::string p = "model.layers." + std::to_string(i) + ".";
    t.push_back({p + "input_layernorm.weight", c.dtype, {h}});
    t.push_back({p + "self_attn.q_proj.weight", c.dtype, {q, h}});
    t.push_back({p + "self_attn.k_proj.weight", c.dtype, {kv, h}});
    t.push_back({p + "self_attn.v_proj.weight", c.dtype, {kv, h}});
    if (c.qkv_bias) {
      t.push_back({p + "self_attn.q_proj.bias", c.dtype, {q}});
      t.push_back({p + "self_attn.k_proj.bias", c.dtype, {kv}});
      t.push_back({p + "self_attn.v_proj.bias", c.dtype, {kv}});
    }
    if (c.qk_norm) {
      t.push_back({p + "self_attn.q_norm.weight", c.dtype, {c.head_dim}});
      t.push_back({p + "self_attn.k_norm.weight", c.dtype, {c.head_dim}});
    }
    t.push_back({p + "self_attn.o_proj.weight", c.dtype, {h, q}});
    t.push_back({p + "post_attention_layernorm.weight", c.dtype, {h}});
    t.push_back({p + "mlp.gate_proj.weight", c.dtype, {inter, h}});
    t.push_back({p + "mlp.up_proj.weight", c.dtype, {inter, h}});
    t.push_back({p + "mlp.down_proj.weight", c.dtype, {h, inter}});
  }
  t.push_back({"model.norm.weight", c.dtype, {h}});
  if (!c.tie_word_embeddings) t.push_back({"lm_head.weight", c.dtype, {c.vocab_size, h}});
  return t;
}

// Element i of tensor number k: exact in bf16, f16 and f32 (multiples of 1/8 below 8).
float value_of(size_t k, int64_t i) {
  return static_cast<float>((static_cast<int64_t>(k) * 3 + i) % 61) * 0.125f;
}

// Writes `tensors` into the file `path`: the elements of a tensor named in `fixed` all hold its
// value there, the others value_of.
void write_tensors(const std::string& path, const std::vector<SafetensorsTensorSpec>& tensors,
                   size_t first_index, const std::map<std::string, float>& fixed = {}) {
  auto writer = SafetensorsWriter::create(path, tensors);
  ASSERT_TRUE(writer.ok()) << writer.status().to_string();
  for (size_t k = 0; k < tensors.size(); ++k) {
    int64_t n = 1;
    for (int64_t d : tensors[k].shape) n *= d;
    std::vector<std::byte> bytes(static_cast<size_t>(n) * dtype_size_bytes(tensors[k].dtype));
    const auto it = fixed.find(tensors[k].name);
    for (int64_t i = 0; i < n; ++i) {
      store_from_float(bytes.data(), static_cast<size_t>(i), tensors[k].dtype,
                       it != fixed.end() ? it->second : value_of(first_index + k, i));
    }
    ASSERT_TRUE(writer->write(bytes).ok());
  }
  ASSERT_TRUE(writer->finish().ok());
}

void write_checkpoint(const std::string& dir, const ModelConfig& c,
                      const std::vector<SafetensorsTensorSpec>& tensors,
                      const std::map<std::string, float>& fixed = {}) {
  std::filesystem::create_directories(dir);
  std::ofstream(dir + "/config.json") << model_config_to_json(c);
  write_tensors(dir + "/model.safetensors", tensors, 0, fixed);
}

void expect_error(const Status& s, StatusCode code, const std::vector<std::string>& parts) {
  EXPECT_EQ(s.code(), code) << s.to_string();
  for (const std::string& p : parts) {
    EXPECT_NE(s.message().find(p), std::string::npos) << "'" << p << "' not in: " << s.message();
  }
}

TEST(LoadCheckpoint, EveryArchitectureLoadsWithExactValues) {
  for (Architecture arch :
       {Architecture::kLlama, Architecture::kMistral, Architecture::kQwen2, Architecture::kQwen3}) {
    SCOPED_TRACE(std::string(architecture_name(arch)));
    TestDir dir("ckpt_arch");
    const ModelConfig c = small_config(arch, false);
    const auto tensors = expected_tensors(c);
    write_checkpoint(dir.path(), c, tensors);
    auto w = load_checkpoint(dir.path());
    ASSERT_TRUE(w.ok()) << w.status().to_string();
    EXPECT_EQ(w->config.arch, arch);
    ASSERT_EQ(w->layers.size(), 2u);
    // Each tensor in the file order of expected_tensors(): check it lands in the right field.
    std::map<std::string, const HostTensor*> by_name = {
        {"model.embed_tokens.weight", &w->embed_tokens},
        {"model.norm.weight", &w->final_norm},
        {"lm_head.weight", &w->lm_head},
        {"model.layers.1.self_attn.k_proj.weight", &w->layers[1].k_proj},
        {"model.layers.0.mlp.down_proj.weight", &w->layers[0].down_proj},
        {"model.layers.1.post_attention_layernorm.weight", &w->layers[1].post_attention_norm}};
    if (c.qkv_bias) by_name["model.layers.1.self_attn.v_proj.bias"] = &w->layers[1].v_bias;
    if (c.qk_norm) by_name["model.layers.0.self_attn.k_norm.weight"] = &w->layers[0].k_norm;
    for (size_t k = 0; k < tensors.size(); ++k) {
      const auto it = by_name.find(tensors[k].name);
      if (it == by_name.end()) continue;
      SCOPED_TRACE(tensors[k].name);
      const HostTensor& t = *it->second;
      EXPECT_EQ(t.name, tensors[k].name);
      EXPECT_EQ(t.shape, tensors[k].shape);
      for (int64_t i = 0; i < t.num_elements(); ++i) ASSERT_EQ(t.at(i), value_of(k, i));
    }
    EXPECT_EQ(w->layers[0].q_bias.present(), c.qkv_bias);
    EXPECT_EQ(w->layers[0].q_norm.present(), c.qk_norm);
  }
}

TEST(LoadCheckpoint, ShardsEqualTheSingleFile) {
  TestDir dir("ckpt_shards");
  const ModelConfig c = small_config(Architecture::kQwen3, false);
  const auto tensors = expected_tensors(c);
  write_checkpoint(dir.path() + "/one", c, tensors);
  const std::string sharded = dir.path() + "/two";
  std::filesystem::create_directories(sharded);
  std::ofstream(sharded + "/config.json") << model_config_to_json(c);
  const size_t half = tensors.size() / 2;
  const std::vector<SafetensorsTensorSpec> first(tensors.begin(),
                                                 tensors.begin() + static_cast<long>(half));
  const std::vector<SafetensorsTensorSpec> second(tensors.begin() + static_cast<long>(half),
                                                  tensors.end());
  write_tensors(sharded + "/model-00001-of-00002.safetensors", first, 0);
  write_tensors(sharded + "/model-00002-of-00002.safetensors", second, half);
  nlohmann::json index;
  for (size_t k = 0; k < tensors.size(); ++k) {
    index["weight_map"][tensors[k].name] =
        k < half ? "model-00001-of-00002.safetensors" : "model-00002-of-00002.safetensors";
  }
  std::ofstream(sharded + "/model.safetensors.index.json") << index.dump();
  auto a = load_checkpoint(dir.path() + "/one");
  auto b = load_checkpoint(sharded);
  ASSERT_TRUE(a.ok());
  ASSERT_TRUE(b.ok()) << b.status().to_string();
  for (int64_t i = 0; i < a->lm_head.num_elements(); ++i)
    ASSERT_EQ(a->lm_head.at(i), b->lm_head.at(i));
  for (int64_t i = 0; i < a->layers[0].up_proj.num_elements(); ++i) {
    ASSERT_EQ(a->layers[0].up_proj.at(i), b->layers[0].up_proj.at(i));
  }
}

TEST(LoadCheckpoint, TiedSharesEmbeddingAndIgnoresAStoredLmHead) {
  TestDir dir("ckpt_tied");
  const ModelConfig c = small_config(Architecture::kLlama, true);
  auto tensors = expected_tensors(c);
  tensors.push_back({"lm_head.weight", c.dtype, {c.vocab_size, c.hidden_size}});
  write_checkpoint(dir.path(), c, tensors);
  auto w = load_checkpoint(dir.path());
  ASSERT_TRUE(w.ok()) << w.status().to_string();
  EXPECT_EQ(w->lm_head.data, w->embed_tokens.data);
  EXPECT_EQ(w->lm_head.shape, w->embed_tokens.shape);
}

TEST(LoadCheckpointErrors, MissingFiles) {
  TestDir dir("ckpt_missing");
  expect_error(load_checkpoint(dir.path()).status(), StatusCode::kNotFound,
               {dir.path() + "/config.json"});
  std::ofstream(dir.path() + "/config.json")
      << model_config_to_json(small_config(Architecture::kLlama, false));
  expect_error(load_checkpoint(dir.path()).status(), StatusCode::kNotFound, {"model.safetensors"});
}

// The small Qwen3 checkpoint with `edit` applied to its tensor list (values as write_tensors,
// `fixed` included), loaded.
Result<ModelWeights> load_edited_weights(
    const std::string& dir, const std::function<void(std::vector<SafetensorsTensorSpec>&)>& edit,
    const std::map<std::string, float>& fixed = {}) {
  const ModelConfig c = small_config(Architecture::kQwen3, false);
  auto tensors = expected_tensors(c);
  edit(tensors);
  std::filesystem::remove_all(dir);
  write_checkpoint(dir, c, tensors, fixed);
  return load_checkpoint(dir);
}

// The same, its status.
Status load_edited(const std::string& dir,
                   const std::function<void(std::vector<SafetensorsTensorSpec>&)>& edit,
                   const std::map<std::string, float>& fixed = {}) {
  return load_edited_weights(dir, edit, fixed).status();
}

// A float8 checkpoint's KV cache scales under each of checkpoint.h's names, f32 or bf16, of
// shape [] or [1], layer by layer; a scale the checkpoint lacks stays 1.
TEST(LoadCheckpoint, KvCacheScalesUnderEveryName) {
  TestDir dir("ckpt_kv_scales");
  const auto add = [](std::vector<std::pair<std::string, std::vector<int64_t>>> scales) {
    return [scales](std::vector<SafetensorsTensorSpec>& t) {
      for (const auto& [name, shape] : scales) {
        t.push_back({name, name.ends_with("v_scale") ? DType::kBF16 : DType::kF32, shape});
      }
    };
  };
  auto w = load_edited_weights(dir.path(),
                               add({{"model.layers.0.self_attn.k_scale", {}},
                                    {"model.layers.0.self_attn.v_proj.v_scale", {1}},
                                    {"model.layers.1.self_attn.kv_scale", {1}}}),
                               {{"model.layers.0.self_attn.k_scale", 0.25f},
                                {"model.layers.0.self_attn.v_proj.v_scale", 3.5f},
                                {"model.layers.1.self_attn.kv_scale", 0.125f}});
  ASSERT_TRUE(w.ok()) << w.status().to_string();
  EXPECT_EQ(w->layers[0].k_scale, 0.25f);
  EXPECT_EQ(w->layers[0].v_scale, 3.5f);
  EXPECT_EQ(w->layers[1].k_scale, 0.125f);
  EXPECT_EQ(w->layers[1].v_scale, 0.125f);
  w = load_edited_weights(dir.path(),
                          add({{"model.layers.1.self_attn.k_proj.k_scale", {}},
                               {"model.layers.1.self_attn.v_scale", {}}}),
                          {{"model.layers.1.self_attn.k_proj.k_scale", 6.0f},
                           {"model.layers.1.self_attn.v_scale", 0.5f}});
  ASSERT_TRUE(w.ok()) << w.status().to_string();
  EXPECT_EQ(w->layers[0].k_scale, 1.0f);
  EXPECT_EQ(w->layers[0].v_scale, 1.0f);
  EXPECT_EQ(w->layers[1].k_scale, 6.0f);
  EXPECT_EQ(w->layers[1].v_scale, 0.5f);
}

TEST(LoadCheckpointErrors, MissingTensor) {
  TestDir dir("ckpt_bad");
  expect_error(load_edited(dir.path(),
                           [](auto& t) {
                             std::erase_if(t, [](const auto& s) {
                               return s.name == "model.layers.1.mlp.up_proj.weight";
                             });
                           }),
               StatusCode::kInvalidArgument,
               {dir.path(), "model.layers.1.mlp.up_proj.weight: missing", "[16, 8] bf16"});
}

TEST(LoadCheckpointErrors, WrongShape) {
  TestDir dir("ckpt_bad");
  expect_error(load_edited(dir.path(),
                           [](auto& t) {
                             for (auto& s : t) {
                               if (s.name == "model.layers.0.self_attn.k_proj.weight")
                                 s.shape = {8, 8};
                             }
                           }),
               StatusCode::kInvalidArgument,
               {"model.layers.0.self_attn.k_proj.weight: shape [8, 8], expected [4, 8]"});
}

TEST(LoadCheckpointErrors, WrongDtype) {
  TestDir dir("ckpt_bad");
  expect_error(load_edited(dir.path(),
                           [](auto& t) {
                             for (auto& s : t) {
                               if (s.name == "model.norm.weight") s.dtype = DType::kF32;
                             }
                           }),
               StatusCode::kInvalidArgument, {"model.norm.weight: dtype f32, expected bf16"});
}

TEST(LoadCheckpointErrors, TensorTheArchitectureDoesNotHave) {
  TestDir dir("ckpt_bad");
  expect_error(
      load_edited(dir.path(),
                  [](auto& t) {
                    t.push_back({"model.layers.0.self_attn.q_proj.bias", DType::kBF16, {8}});
                  }),
      StatusCode::kInvalidArgument,
      {"model.layers.0.self_attn.q_proj.bias: present", "no such tensor"});
  // A third layer when config.json says two.
  expect_error(
      load_edited(dir.path(),
                  [](auto& t) {
                    t.push_back({"model.layers.2.mlp.up_proj.weight", DType::kBF16, {16, 8}});
                  }),
      StatusCode::kInvalidArgument,
      {"model.layers.2.mlp.up_proj.weight: unexpected tensor", "num_hidden_layers = 2"});
}

// A KV cache scale that is not one number, not finite and > 0, given under two names, or of a
// layer config.json does not have.
TEST(LoadCheckpointErrors, KvCacheScales) {
  TestDir dir("ckpt_bad");
  const auto scale = [&](const std::vector<std::pair<std::string, std::vector<int64_t>>>& names,
                         float value) {
    std::map<std::string, float> fixed;
    for (const auto& n : names) fixed[n.first] = value;
    return load_edited(
        dir.path(),
        [&](auto& t) {
          for (const auto& [name, shape] : names) t.push_back({name, DType::kF32, shape});
        },
        fixed);
  };
  expect_error(scale({{"model.layers.0.self_attn.k_scale", {2}}}, 1.0f),
               StatusCode::kInvalidArgument,
               {dir.path(), "model.layers.0.self_attn.k_scale: shape [2], expected [] or [1]"});
  expect_error(scale({{"model.layers.1.self_attn.v_scale", {}}}, 0.0f),
               StatusCode::kInvalidArgument,
               {"model.layers.1.self_attn.v_scale = 0", "expected a finite KV cache scale > 0"});
  expect_error(scale({{"model.layers.1.self_attn.kv_scale", {1}}}, -2.0f),
               StatusCode::kInvalidArgument, {"model.layers.1.self_attn.kv_scale = -2"});
  expect_error(
      scale({{"model.layers.0.self_attn.k_scale", {}}, {"model.layers.0.self_attn.kv_scale", {}}},
            1.0f),
      StatusCode::kInvalidArgument,
      {"model.layers.0.self_attn.kv_scale: a second k scale beside "
       "model.layers.0.self_attn.k_scale"});
  expect_error(scale({{"model.layers.2.self_attn.k_scale", {}}}, 1.0f),
               StatusCode::kInvalidArgument,
               {"model.layers.2.self_attn.k_scale: unexpected tensor", "num_hidden_layers = 2"});
}

TEST(LoadCheckpointErrors, UnsupportedArchitecture) {
  TestDir dir("ckpt_arch_bad");
  const ModelConfig c = small_config(Architecture::kLlama, false);
  write_checkpoint(dir.path(), c, expected_tensors(c));
  auto j = nlohmann::json::parse(model_config_to_json(c));
  j["architectures"] = {"GemmaForCausalLM"};
  std::ofstream(dir.path() + "/config.json") << j.dump();
  expect_error(load_checkpoint(dir.path()).status(), StatusCode::kUnimplemented,
               {"config.json", "GemmaForCausalLM", "LlamaForCausalLM"});
}

}  // namespace
}  // namespace packserve::model
