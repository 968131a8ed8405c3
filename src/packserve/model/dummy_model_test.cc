// dummy_model_test.cc: the BPE trainer against merges worked out by hand, the dummy tokenizer
// through packserve's tokenizer, dummy checkpoints through load_checkpoint, determinism by
// seed, copy models' layer 0, and the published parameter counts of the real shapes.
#include "packserve/model/dummy_model.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include "packserve/model/checkpoint.h"
#include "packserve/model/dummy_tokenizer.h"
#include "packserve/model/fp8_weights.h"
#include "packserve/model/safetensors.h"
#include "packserve/model/test_dir.h"
#include "packserve/tokenizer/chat_template.h"
#include "packserve/tokenizer/tokenizer.h"

namespace packserve::model {
namespace {

using Merges = std::vector<std::pair<std::string, std::string>>;

std::string slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

TEST(BpeTrainer, MergesWorkedOutByHand) {
  // Words "ab", " ab", " ab": (a,b) occurs 3 times, then (" ", "ab") twice.
  EXPECT_EQ(learn_bpe_merges("ab ab ab", 10), (Merges{{"a", "b"}, {" ", "ab"}}));
  // Words "xy", " xy", " yz" x2. Counts: (x,y) 2, (" ",y) 2, (y,z) 2, (" ",x) 1: the tie goes to
  // the smallest pair (" ", "y"); then (" y", "z") 2 ties (x, y) 2 and " y" < "x"; then (x, y).
  EXPECT_EQ(learn_bpe_merges("xy xy yz yz", 10), (Merges{{" ", "y"}, {" y", "z"}, {"x", "y"}}));
  EXPECT_EQ(learn_bpe_merges("xy xy yz yz", 1), (Merges{{" ", "y"}}));
  // No pair occurs twice: nothing to merge.
  EXPECT_TRUE(learn_bpe_merges("abc", 10).empty());
}

TEST(DummyTokenizer, LoadsAndRoundTrips) {
  const DummyTokenizerFiles files = make_dummy_tokenizer();
  auto tok = tokenizer::Tokenizer::from_json_text(files.tokenizer_json, "dummy/tokenizer.json");
  ASSERT_TRUE(tok.ok()) << tok.status().to_string();
  EXPECT_EQ(static_cast<int64_t>(tok->vocab_size()), files.vocab_size);
  EXPECT_GT(files.vocab_size, 256 + 200);  // the corpus yields a few hundred merges
  EXPECT_LE(files.vocab_size, 256 + 400 + 3);
  const std::vector<std::string> texts = {
      "The quick brown fox jumps over the lazy dog.",
      "  leading spaces and trailing  \n\n",
      "Numbers 12345 and 3.14, code: def f(x): return x * 2",
      "Grüße, naïve café — 日本語のテキスト, emoji 🙂👍🏽",
      "tabs\tand\r\nnewlines",
      "<|im_start|>user\nhello<|im_end|>\n"};
  for (const std::string& text : texts) {
    SCOPED_TRACE(text);
    auto ids = tok->encode(text);
    ASSERT_TRUE(ids.ok()) << ids.status().to_string();
    auto back = tok->decode(*ids);
    ASSERT_TRUE(back.ok());
    EXPECT_EQ(*back, text);
    for (auto id : *ids) EXPECT_LT(static_cast<int64_t>(id), files.vocab_size);
  }
  // Frequent corpus words are single tokens: " the" and " serving" were merged.
  EXPECT_EQ(tok->encode(" the")->size(), 1u);
  EXPECT_EQ(tok->encode(" serving")->size(), 1u);
  // Special tokens are single ids: <|im_end|> is the first eos, <|endoftext|> the second.
  auto special = tok->encode("<|im_end|><|endoftext|>");
  ASSERT_TRUE(special.ok());
  ASSERT_EQ(special->size(), 2u);
  EXPECT_EQ((*special)[0], files.eos_token_ids[0]);
  EXPECT_EQ((*special)[1], files.eos_token_ids[1]);
  EXPECT_EQ(files.vocab_size - 1, files.eos_token_ids[0]);  // <|im_end|> is the last id
  EXPECT_EQ(tok->token_to_id("<|im_start|>"), files.vocab_size - 2);
  // Byte tokens: id = byte value.
  EXPECT_EQ(tok->token_to_id("!"), 33);
  EXPECT_EQ(tok->token_to_id("\xC4\xA0"), 32);  // "Ġ" = the space byte
}

TEST(DummyTokenizer, ChatTemplateIsChatml) {
  const DummyTokenizerFiles files = make_dummy_tokenizer();
  auto chat = tokenizer::ChatTemplate::from_config_text(files.tokenizer_config_json,
                                                        "tokenizer_config.json", std::nullopt);
  ASSERT_TRUE(chat.ok()) << chat.status().to_string();
  EXPECT_EQ(chat->family(), tokenizer::ChatTemplateFamily::kChatml);
  auto prompt = chat->render({{"user", "hi"}}, true);
  ASSERT_TRUE(prompt.ok());
  EXPECT_EQ(*prompt, "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n");
}

TEST(DummyTokenizer, Deterministic) {
  EXPECT_EQ(make_dummy_tokenizer().tokenizer_json, make_dummy_tokenizer().tokenizer_json);
}

// Mean and standard deviation of a tensor's elements.
std::pair<double, double> moments(const HostTensor& t) {
  double sum = 0, sum_sq = 0;
  const int64_t n = t.num_elements();
  for (int64_t i = 0; i < n; ++i) {
    sum += t.at(i);
    sum_sq += static_cast<double>(t.at(i)) * t.at(i);
  }
  const double mean = sum / static_cast<double>(n);
  return {mean, std::sqrt(sum_sq / static_cast<double>(n) - mean * mean)};
}

TEST(DummyModel, TinyRoundTripsThroughLoadCheckpoint) {
  for (DType dtype : {DType::kBF16, DType::kF32, DType::kF16}) {
    SCOPED_TRACE(std::string(dtype_name(dtype)));
    TestDir dir("dummy_tiny");
    DummyModelOptions options;
    options.arch = "tiny";
    options.out_dir = dir.path() + "/m";
    options.dtype = dtype;
    auto made = make_dummy_model(options);
    ASSERT_TRUE(made.ok()) << made.status().to_string();
    auto weights = load_checkpoint(*made);
    ASSERT_TRUE(weights.ok()) << weights.status().to_string();
    const ModelConfig& c = weights->config;
    const DummyTokenizerFiles tok = make_dummy_tokenizer();
    EXPECT_EQ(c.arch, Architecture::kQwen3);
    EXPECT_EQ(c.vocab_size, tok.vocab_size);
    EXPECT_EQ(c.hidden_size, 64);
    EXPECT_EQ(c.num_layers, 2);
    EXPECT_EQ(c.num_qo_heads, 4);
    EXPECT_EQ(c.num_kv_heads, 2);
    EXPECT_EQ(c.head_dim, 64);
    EXPECT_EQ(c.intermediate_size, 128);
    EXPECT_EQ(c.dtype, dtype);
    EXPECT_EQ(c.eos_token_ids, tok.eos_token_ids);
    EXPECT_TRUE(validate_weights(*weights).ok());
    // Matrices: mean 0, std 0.02; over n >= 8192 draws the sample mean's standard error is
    // 0.02 / sqrt(n) < 2.3e-4 and the sample std's relative error ~ 1 / sqrt(2n) < 1%.
    const auto [mean, sd] = moments(weights->layers[1].gate_proj);
    EXPECT_NEAR(mean, 0.0, 1e-3);
    EXPECT_NEAR(sd, 0.02, 0.02 * 0.05);
    const auto [norm_mean, norm_sd] = moments(weights->layers[0].input_norm);
    EXPECT_NEAR(norm_mean, 1.0, 0.01);  // 64 draws of std 0.02: standard error 0.0025
    EXPECT_GT(norm_sd, 0.005);
    EXPECT_LT(norm_sd, 0.04);
    // The tokenizer the directory holds loads and its chat template is detected.
    EXPECT_TRUE(tokenizer::Tokenizer::from_dir(*made).ok());
    EXPECT_TRUE(tokenizer::ChatTemplate::from_dir(*made, std::nullopt).ok());
  }
}

// --float8: the same seed's bf16 model with every layer's linear weights quantized per tensor.
// Each weight loads back (dequantized, fp8_weights.h) as e4m3_from_float(w / s) * s with
// s = max |w| / 448 of the bf16 weights w, element by element; the largest element exactly.
// The file holds F8_E4M3 weights and f32 [] scales; the rest is the bf16 model's, bit for bit.
TEST(DummyModel, Float8StoresTheBf16WeightsQuantizedPerTensor) {
  TestDir dir("dummy_float8");
  DummyModelOptions options;
  options.arch = "tiny";
  options.out_dir = dir.path() + "/bf16";
  auto plain = make_dummy_model(options);
  ASSERT_TRUE(plain.ok()) << plain.status().to_string();
  options.out_dir = dir.path() + "/fp8";
  options.float8 = true;
  options.num_threads = 3;
  auto fp8 = make_dummy_model(options);
  ASSERT_TRUE(fp8.ok()) << fp8.status().to_string();
  auto file = SafetensorsFile::open(*fp8 + "/model.safetensors");
  ASSERT_TRUE(file.ok()) << file.status().to_string();
  const SafetensorsEntry* q = (*file)->find("model.layers.1.self_attn.q_proj.weight");
  const SafetensorsEntry* qs = (*file)->find("model.layers.1.self_attn.q_proj.weight_scale");
  ASSERT_TRUE(q != nullptr && qs != nullptr);
  EXPECT_EQ(q->dtype_name, "F8_E4M3");
  EXPECT_EQ(qs->dtype_name, "F32");
  EXPECT_TRUE(qs->shape.empty());
  EXPECT_EQ((*file)->find("model.layers.1.input_layernorm.weight")->dtype_name, "BF16");
  auto a = load_checkpoint(*plain);
  auto b = load_checkpoint(*fp8);
  ASSERT_TRUE(a.ok() && b.ok()) << a.status().to_string() << b.status().to_string();
  ASSERT_EQ(b->config.dtype, DType::kBF16);
  for (size_t l = 0; l < a->layers.size(); ++l) {
    const LayerWeights &x = a->layers[l], &y = b->layers[l];
    for (const auto& [w, w8] : {std::pair{&x.q_proj, &y.q_proj},
                                {&x.k_proj, &y.k_proj},
                                {&x.v_proj, &y.v_proj},
                                {&x.o_proj, &y.o_proj},
                                {&x.gate_proj, &y.gate_proj},
                                {&x.up_proj, &y.up_proj},
                                {&x.down_proj, &y.down_proj}}) {
      SCOPED_TRACE(w->name);
      float amax = 0;
      for (int64_t i = 0; i < w->num_elements(); ++i) amax = std::max(amax, std::fabs(w->at(i)));
      const float s = amax / 448.0f;
      for (int64_t i = 0; i < w->num_elements(); ++i) {
        const float want =
            round_to_dtype(e4m3_value(e4m3_from_float(w->at(i) / s)) * s, DType::kBF16);
        ASSERT_EQ(w8->at(i), want) << "element " << i;
        if (std::fabs(w->at(i)) == amax) {
          ASSERT_EQ(std::fabs(w8->at(i)), amax);
        }
      }
    }
    for (const auto& [t, t8] : {std::pair{&x.input_norm, &y.input_norm},
                                {&x.post_attention_norm, &y.post_attention_norm},
                                {&x.q_norm, &y.q_norm}}) {
      ASSERT_EQ(std::memcmp(t->data, t8->data, t->num_bytes()), 0) << t->name;
    }
  }
  ASSERT_EQ(std::memcmp(a->embed_tokens.data, b->embed_tokens.data, a->embed_tokens.num_bytes()),
            0);
}

TEST(DummyModel, TinyVariantsLoad) {
  for (const char* arch : {"tiny-llama", "tiny-qwen2"}) {
    SCOPED_TRACE(arch);
    TestDir dir("dummy_variant");
    DummyModelOptions options;
    options.arch = arch;
    options.out_dir = dir.path();
    ASSERT_TRUE(make_dummy_model(options).ok());
    auto weights = load_checkpoint(dir.path());
    ASSERT_TRUE(weights.ok()) << weights.status().to_string();
    EXPECT_TRUE(weights->config.tie_word_embeddings);
    EXPECT_EQ(weights->lm_head.data, weights->embed_tokens.data);
    EXPECT_EQ(weights->config.qkv_bias, std::string(arch) == "tiny-qwen2");
    EXPECT_EQ(weights->config.rope_scaling.has_value(), std::string(arch) == "tiny-llama");
  }
  // tiny-yarn: tiny with YaRN x4 over 1,024 positions, through config.json and back.
  TestDir dir("dummy_yarn");
  DummyModelOptions options;
  options.arch = "tiny-yarn";
  options.out_dir = dir.path();
  ASSERT_TRUE(make_dummy_model(options).ok());
  auto weights = load_checkpoint(dir.path());
  ASSERT_TRUE(weights.ok()) << weights.status().to_string();
  const ModelConfig& c = weights->config;
  EXPECT_TRUE(c.qk_norm);
  ASSERT_TRUE(c.rope_scaling.has_value());
  EXPECT_EQ(c.rope_scaling->type, RopeType::kYarn);
  EXPECT_EQ(c.rope_scaling->factor, 4.0);
  EXPECT_EQ(c.rope_scaling->original_max_position_embeddings, 1024);
  EXPECT_EQ(c.rope_scaling->attention_factor, yarn_mscale(4.0, 1.0));
  EXPECT_EQ(model_context_length(c), 4096);
}

// --init copy builds layer 0 as a copy head (dummy_model.cc, make_copy_head): checked tensor by
// tensor on tiny-llama in f32 (exact values). GenerateCliTest.CopyModelContinuesEachPrompt-
// Periodically checks what it does.
TEST(DummyModel, CopyInitBuildsTheCopyHead) {
  TestDir dir("dummy_copy");
  DummyModelOptions options;
  options.arch = "tiny-llama";
  options.out_dir = dir.path();
  options.dtype = DType::kF32;
  options.init = DummyInit::kCopy;
  ASSERT_TRUE(make_dummy_model(options).ok());
  auto w = load_checkpoint(dir.path());
  ASSERT_TRUE(w.ok()) << w.status().to_string();
  const ModelConfig& c = w->config;
  const int64_t h = c.hidden_size, hd = c.head_dim, group = c.num_qo_heads / c.num_kv_heads;
  // Every embedding row: channel 0 = 0.02 sqrt(8 (h - 1)), the rest random.
  const float channel0 = static_cast<float>(0.02 * std::sqrt(8.0 * static_cast<double>(h - 1)));
  for (int64_t t = 0; t < c.vocab_size; ++t) ASSERT_EQ(w->embed_tokens.at(t * h), channel0) << t;
  EXPECT_NE(w->embed_tokens.at(1), w->embed_tokens.at(h + 1));
  EXPECT_EQ(w->final_norm.at(0), 0.0f);
  EXPECT_NE(w->final_norm.at(1), 0.0f);
  const LayerWeights& l0 = w->layers[0];
  // q_proj, k_proj: column 0 only, the same pattern in every head; k's second halves zero.
  for (int64_t r = 0; r < c.q_size(); ++r) {
    for (int64_t col = 1; col < h; ++col) ASSERT_EQ(l0.q_proj.at(r * h + col), 0.0f);
    ASSERT_EQ(l0.q_proj.at(r * h), l0.q_proj.at((r % hd) * h));
  }
  for (int64_t r = 0; r < c.kv_size(); ++r) {
    for (int64_t col = 1; col < h; ++col) ASSERT_EQ(l0.k_proj.at(r * h + col), 0.0f);
    if (r % hd >= hd / 2) {
      ASSERT_EQ(l0.k_proj.at(r * h), 0.0f);
    }
  }
  EXPECT_GT(l0.k_proj.at(0), 0.0f);
  // o_proj = s * v_proj^T per head, channel 0 of both zero.
  const double s = l0.o_proj.at(1 * c.q_size() + 0) / l0.v_proj.at(0 * h + 1);
  EXPECT_GT(s, 0.0);
  for (int64_t ch = 0; ch < h; ++ch) {
    for (int64_t col = 0; col < c.q_size(); ++col) {
      const int64_t kv_row = (col / hd / group) * hd + col % hd;
      const float v = l0.v_proj.at(kv_row * h + ch);
      if (ch == 0) {
        ASSERT_EQ(v, 0.0f);
      }
      ASSERT_NEAR(l0.o_proj.at(ch * c.q_size() + col), s * v, 1e-6 * std::fabs(s * v) + 1e-12);
    }
  }
  // The other layers' output projections are damped to 1 % of matrix_std.
  EXPECT_NEAR(moments(w->layers[1].o_proj).second, 0.02 * 0.01, 0.02 * 0.01 * 0.1);
  EXPECT_NEAR(moments(w->layers[1].gate_proj).second, 0.02, 0.02 * 0.05);
  // Distinct from the random init's weights, and bad options are errors.
  options.copy_distance = 0;
  const auto bad = make_dummy_model(options);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("--copy-distance: expected 1..64, got 0"),
            std::string::npos);
  EXPECT_FALSE(parse_dummy_init("flat").ok());
}

// Layer 0's score profile over distances 0..4096 peaks at copy_distance with every other
// distance at least 10 % of the peak (30 of 300) below it, for every shape.
TEST(DummyModel, CopyHeadPeaksOnlyAtItsDistance) {
  for (const std::string& name : dummy_model_names()) {
    auto config = dummy_model_config(name, 1000);
    ASSERT_TRUE(config.ok());
    for (int distance : {1, 7, 64}) {
      SCOPED_TRACE(name + " distance " + std::to_string(distance));
      const double r = copy_head_runner_up(*config, distance, 4096);
      EXPECT_LT(r, 0.9);
      EXPECT_GT(r, 0.5);  // the profile is a sum of cosines: its neighbours stay close
    }
  }
}

TEST(DummyModel, DeterministicBySeed) {
  TestDir dir("dummy_seed");
  auto make = [&](const std::string& sub, uint64_t seed, int threads) {
    DummyModelOptions options;
    options.arch = "tiny";
    options.out_dir = dir.path() + "/" + sub;
    options.seed = seed;
    options.num_threads = threads;
    EXPECT_TRUE(make_dummy_model(options).ok());
    return slurp(options.out_dir + "/model.safetensors");
  };
  const std::string a = make("a", 7, 1);
  const std::string b = make("b", 7, 3);
  const std::string c = make("c", 8, 1);
  EXPECT_GT(a.size(), 100000u);
  EXPECT_EQ(a, b);
  EXPECT_NE(a, c);
  EXPECT_EQ(a.size(), c.size());
}

TEST(DummyModel, CopiesAGivenTokenizer) {
  TestDir dir("dummy_tok");
  // A "real" tokenizer directory: the dummy one with a different eos_token in its config.
  const std::string src = dir.path() + "/tok";
  std::filesystem::create_directories(src);
  const DummyTokenizerFiles files = make_dummy_tokenizer();
  std::ofstream(src + "/tokenizer.json") << files.tokenizer_json;
  std::ofstream(src + "/tokenizer_config.json") << R"({"eos_token": "<|endoftext|>",
      "chat_template": "{{ '<|im_start|>' }}{{ '<|im_end|>' }}"})";
  DummyModelOptions options;
  options.arch = "tiny-llama";
  options.out_dir = dir.path() + "/m";
  options.tokenizer_dir = src;
  auto made = make_dummy_model(options);
  ASSERT_TRUE(made.ok()) << made.status().to_string();
  EXPECT_EQ(slurp(*made + "/tokenizer.json"), files.tokenizer_json);
  EXPECT_EQ(slurp(*made + "/tokenizer_config.json"), slurp(src + "/tokenizer_config.json"));
  auto config = load_model_config(*made + "/config.json");
  ASSERT_TRUE(config.ok());
  EXPECT_EQ(config->vocab_size, files.vocab_size);
  // The config's eos_token first, then the other known end tokens the vocabulary has.
  EXPECT_EQ(config->eos_token_ids,
            (std::vector<int64_t>{files.eos_token_ids[1], files.eos_token_ids[0]}));

  options.tokenizer_dir = dir.path() + "/absent";
  auto missing = make_dummy_model(options);
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
  EXPECT_NE(missing.status().message().find("absent/tokenizer.json"), std::string::npos);
}

TEST(DummyModel, UnknownArchNamesTheKnownOnes) {
  DummyModelOptions options;
  options.arch = "gpt-5";
  options.out_dir = "/nonexistent";
  auto made = make_dummy_model(options);
  EXPECT_EQ(made.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(made.status().message().find("\"gpt-5\""), std::string::npos);
  EXPECT_NE(made.status().message().find("qwen3-0.6b"), std::string::npos);
}

TEST(DummyModel, EnsureMakesOnceAndReuses) {
  TestDir dir("dummy_cache");
  auto first = ensure_dummy_model("tiny", dir.path() + "/cache");
  ASSERT_TRUE(first.ok()) << first.status().to_string();
  EXPECT_EQ(*first, dir.path() + "/cache/tiny-seed0-bf16");
  const auto written = std::filesystem::last_write_time(*first + "/model.safetensors");
  auto second = ensure_dummy_model("tiny", dir.path() + "/cache");
  ASSERT_TRUE(second.ok());
  EXPECT_EQ(*second, *first);
  EXPECT_EQ(std::filesystem::last_write_time(*second + "/model.safetensors"), written);
  EXPECT_TRUE(load_checkpoint(*first).ok());
  // Nothing but the finished directory is left in the cache.
  int entries = 0;
  for ([[maybe_unused]] const auto& e :
       std::filesystem::directory_iterator(dir.path() + "/cache")) {
    ++entries;
  }
  EXPECT_EQ(entries, 1);
  EXPECT_FALSE(ensure_dummy_model("nope", dir.path()).ok());
}

TEST(DummyModel, EnsureIsSafeWhenRacing) {
  TestDir dir("dummy_race");
  std::vector<Result<std::string>> results(4, Result<std::string>(internal_error("not run")));
  std::vector<std::thread> threads;
  for (size_t i = 0; i < results.size(); ++i) {
    threads.emplace_back([&, i] { results[i] = ensure_dummy_model("tiny-llama", dir.path()); });
  }
  for (auto& t : threads) t.join();
  for (const auto& r : results) {
    ASSERT_TRUE(r.ok()) << r.status().to_string();
    EXPECT_EQ(*r, dir.path() + "/tiny-llama-seed0-bf16");
  }
  EXPECT_TRUE(load_checkpoint(*results[0]).ok());
  int entries = 0;
  for ([[maybe_unused]] const auto& e : std::filesystem::directory_iterator(dir.path())) ++entries;
  EXPECT_EQ(entries, 1);  // no temporary directory left behind
}

// Parameter count of a config (embedding + layers + final norm + untied lm_head).
double num_params(const ModelConfig& c) {
  const double h = static_cast<double>(c.hidden_size);
  const double layer = h * static_cast<double>(c.q_size() + 2 * c.kv_size()) +
                       static_cast<double>(c.q_size()) * h +
                       3.0 * h * static_cast<double>(c.intermediate_size) + 2.0 * h +
                       (c.qk_norm ? 2.0 * static_cast<double>(c.head_dim) : 0.0);
  const double embed = static_cast<double>(c.vocab_size) * h;
  return embed * (c.tie_word_embeddings ? 1.0 : 2.0) + static_cast<double>(c.num_layers) * layer +
         h;
}

// The model cards' parameter counts (Hugging Face Hub): Qwen3-0.6B "0.6B, 0.44B
// non-embedding", Llama-3.2-1B 1.24B, Llama-3.1-8B 8.03B, Qwen3-8B "8.2B, 6.95B non-embedding".
TEST(DummyModel, RealShapesMatchPublishedParameterCounts) {
  struct Case {
    const char* name;
    double billions;
    double tolerance;
  };
  for (const Case& k : {Case{"qwen3-0.6b", 0.596, 0.005}, Case{"llama-3.2-1b", 1.236, 0.005},
                        Case{"llama-3.1-8b", 8.030, 0.005}, Case{"qwen3-8b", 8.19, 0.01}}) {
    SCOPED_TRACE(k.name);
    auto c = dummy_model_config(k.name, 1000);
    ASSERT_TRUE(c.ok());
    EXPECT_NEAR(num_params(*c) / 1e9, k.billions, k.tolerance);
    // Round-trips through config.json.
    auto parsed = parse_model_config(model_config_to_json(*c), "config.json");
    ASSERT_TRUE(parsed.ok()) << parsed.status().to_string();
    EXPECT_EQ(model_config_to_json(*parsed), model_config_to_json(*c));
  }
  auto qwen = dummy_model_config("qwen3-8b", 1000);
  const double non_embedding = num_params(*qwen) - 2.0 * 151936.0 * 4096.0;
  EXPECT_NEAR(non_embedding / 1e9, 6.95, 0.01);
  auto llama = dummy_model_config("llama-3.2-1b", 1000);
  ASSERT_TRUE(llama->rope_scaling.has_value());
  EXPECT_EQ(llama->rope_scaling->factor, 32.0);
  EXPECT_EQ(llama->vocab_size, 128256);  // the published vocabulary outgrows the tokenizer's
  EXPECT_EQ(dummy_model_config("qwen3-0.6b", 200000)->vocab_size, 200000);
}

}  // namespace
}  // namespace packserve::model
