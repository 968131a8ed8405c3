// fp8_weights_test.cc: float8 checkpoints (fp8_weights.h). Every e4m3 byte against a decode
// through f32 bits; dequantization with per-tensor, per-row and block scales against a
// reference indexed independently; every refusal; and load_checkpoint on a float8 checkpoint
// giving, bit for bit, the weights of the bf16 checkpoint of its dequantized values.
#include "packserve/model/fp8_weights.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "packserve/common/rng.h"
#include "packserve/model/checkpoint.h"
#include "packserve/model/config.h"
#include "packserve/model/forward_test_util.h"
#include "packserve/model/test_dir.h"

namespace packserve::model {
namespace {

// e4m3 through f32 bits (normal bytes) or m * 2^-9 (subnormal ones).
float reference_e4m3(uint8_t b) {
  const uint32_t sign = (b & 0x80u) << 24, exponent = (b >> 3) & 0xFu, mantissa = b & 0x7u;
  if (exponent == 0) {
    const float m = static_cast<float>(mantissa) / 512.0f;
    return sign != 0 ? -m : m;
  }
  const uint32_t bits = sign | ((exponent - 7 + 127) << 23) | (mantissa << 20);
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

TEST(Fp8Weights, E4m3DecodesEveryByte) {
  for (int b = 0; b < 256; ++b) {
    const auto byte = static_cast<uint8_t>(b);
    if ((b & 0x7F) == 0x7F) {
      EXPECT_TRUE(std::isnan(e4m3_value(byte))) << b;
      continue;
    }
    const float want = reference_e4m3(byte), got = e4m3_value(byte);
    EXPECT_EQ(std::memcmp(&want, &got, 4), 0) << "byte " << b << ": " << got << " vs " << want;
  }
  EXPECT_EQ(e4m3_value(0x7E), 448.0f);
  EXPECT_EQ(e4m3_value(0x38), 1.0f);
  EXPECT_EQ(e4m3_value(0xB8), -1.0f);
  EXPECT_EQ(e4m3_value(0x01), std::ldexp(1.0f, -9));
  EXPECT_EQ(e4m3_value(0x08), std::ldexp(1.0f, -6));
  EXPECT_TRUE(std::signbit(e4m3_value(0x80)));
}

// Every finite value encodes to its own byte; the midpoint of two neighbours to the even one
// (mantissa's low bit 0); values past 448 saturate; NaN is 0x7F.
TEST(Fp8Weights, E4m3EncodesToNearestEven) {
  for (int b = 0; b < 256; ++b) {
    if ((b & 0x7F) == 0x7F) continue;
    const auto byte = static_cast<uint8_t>(b);
    const float v = e4m3_value(byte);
    // (-0 and +0 keep their signs.)
    EXPECT_EQ(e4m3_from_float(v), byte) << "byte " << b << " value " << v;
    if ((b & 0x7F) == 0x7E) continue;  // 448: no finite neighbour above
    const auto next = static_cast<uint8_t>(b + 1);
    const float mid = (v + e4m3_value(next)) / 2;
    const uint8_t even = (byte & 1) == 0 ? byte : next;
    EXPECT_EQ(e4m3_from_float(mid), even) << "midpoint of bytes " << b << " and " << b + 1;
    EXPECT_EQ(e4m3_from_float(std::nextafter(mid, 0.0f)), byte) << "below the midpoint " << b;
  }
  EXPECT_EQ(e4m3_from_float(460.0f), 0x7E);
  EXPECT_EQ(e4m3_from_float(1e30f), 0x7E);
  EXPECT_EQ(e4m3_from_float(-1e30f), 0xFE);
  EXPECT_EQ(e4m3_from_float(std::numeric_limits<float>::infinity()), 0x7E);
  EXPECT_EQ(e4m3_from_float(NAN), 0x7F);
  EXPECT_EQ(e4m3_from_float(std::ldexp(1.0f, -11)), 0x00);  // a quarter of the smallest step
}

// n random finite e4m3 bytes.
std::vector<std::byte> random_e4m3(Rng& rng, size_t n) {
  std::vector<std::byte> v(n);
  for (std::byte& b : v) {
    uint8_t u;
    do {
      u = static_cast<uint8_t>(rng.uniform_int(0, 255));
    } while ((u & 0x7F) == 0x7F);
    b = static_cast<std::byte>(u);
  }
  return v;
}

HostTensor owned_f32(const std::string& name, std::vector<int64_t> shape,
                     const std::vector<float>& values) {
  auto storage = std::make_shared<std::vector<float>>(values);
  HostTensor t;
  t.name = name;
  t.dtype = DType::kF32;
  t.shape = std::move(shape);
  t.data = storage->data();
  t.owner = std::shared_ptr<const void>(storage, storage->data());
  return t;
}

std::vector<float> random_scales(Rng& rng, size_t n) {
  std::vector<float> v(n);
  for (float& s : v) {
    s = std::ldexp(1.0f + static_cast<float>(rng.uniform()),
                   static_cast<int>(rng.uniform_int(-12, -4)));
  }
  return v;
}

// Each scale format on a weight of 300 x 272 (a partial 128-row and 128-column block) into
// each output dtype, against scale_of(o, i) computed here.
TEST(Fp8Weights, DequantizesEachScaleFormat) {
  Rng rng(3);
  const int64_t out = 300, in = 272;
  const auto bytes = random_e4m3(rng, static_cast<size_t>(out * in));
  struct Case {
    const char* what;
    std::vector<int64_t> scale_shape;
    Fp8ScaleKind kind;
    std::function<size_t(int64_t, int64_t)> index;  // the scale of (o, i)
  };
  const Case cases[] = {
      {"per tensor []", {}, Fp8ScaleKind::kPerTensorOrRow, [](int64_t, int64_t) { return 0; }},
      {"per tensor [1]", {1}, Fp8ScaleKind::kPerTensorOrRow, [](int64_t, int64_t) { return 0; }},
      {"per row [out]",
       {out},
       Fp8ScaleKind::kPerTensorOrRow,
       [](int64_t o, int64_t) { return static_cast<size_t>(o); }},
      {"per row [out, 1]",
       {out, 1},
       Fp8ScaleKind::kPerTensorOrRow,
       [](int64_t o, int64_t) { return static_cast<size_t>(o); }},
      {"128 x 128 blocks",
       {3, 3},
       Fp8ScaleKind::kBlock,
       [](int64_t o, int64_t i) { return static_cast<size_t>(o / 128 * 3 + i / 128); }},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.what);
    size_t n = 1;
    for (int64_t d : c.scale_shape) n *= static_cast<size_t>(d);
    const auto values = random_scales(rng, n);
    const HostTensor scale = owned_f32("w.weight_scale", c.scale_shape, values);
    for (const DType dtype : {DType::kBF16, DType::kF16, DType::kF32}) {
      auto t = dequantize_fp8_weight("w.weight", bytes, {out, in}, scale, c.kind, dtype);
      ASSERT_TRUE(t.ok()) << t.status().to_string();
      ASSERT_EQ(t->dtype, dtype);
      ASSERT_EQ(t->shape, (std::vector<int64_t>{out, in}));
      for (int64_t o = 0; o < out; ++o) {
        for (int64_t i = 0; i < in; ++i) {
          const auto at = static_cast<size_t>(o * in + i);
          const float want = round_to_dtype(
              reference_e4m3(static_cast<uint8_t>(bytes[at])) * values[c.index(o, i)], dtype);
          ASSERT_EQ(t->at(static_cast<int64_t>(at)), want) << "at [" << o << ", " << i << "]";
        }
      }
    }
  }
}

TEST(Fp8Weights, RefusesWhatItCannotRead) {
  Rng rng(4);
  auto bytes = random_e4m3(rng, 8 * 16);
  const HostTensor one = owned_f32("w.weight_scale", {}, {0.5f});
  const auto code_of = [&](std::span<const std::byte> b, const std::vector<int64_t>& shape,
                           const HostTensor& scale, Fp8ScaleKind kind, const std::string& part) {
    auto t = dequantize_fp8_weight("w.weight", b, shape, scale, kind, DType::kBF16);
    EXPECT_NE(t.status().message().find(part), std::string::npos) << t.status().to_string();
    EXPECT_NE(t.status().message().find("w.weight"), std::string::npos);
    return t.status().code();
  };
  constexpr auto kBad = StatusCode::kInvalidArgument;
  constexpr auto kRow = Fp8ScaleKind::kPerTensorOrRow;
  EXPECT_EQ(code_of(bytes, {128}, one, kRow, "expected [out, in]"), kBad);
  EXPECT_EQ(code_of(bytes, {8, 15}, one, kRow, "bytes for shape [8, 15]"), kBad);
  EXPECT_EQ(code_of(bytes, {8, 16}, owned_f32("s", {7}, std::vector<float>(7, 1.0f)), kRow,
                    "s of shape [7]: expected [], [1], [8] or [8, 1]"),
            kBad);
  EXPECT_EQ(code_of(bytes, {8, 16}, owned_f32("s", {8, 2}, std::vector<float>(16, 1.0f)), kRow,
                    "per tensor or per output row"),
            kBad);
  EXPECT_EQ(code_of(bytes, {8, 16}, owned_f32("s", {3, 2}, std::vector<float>(6, 1.0f)),
                    Fp8ScaleKind::kBlock, "power-of-two blocks"),
            kBad);
  EXPECT_EQ(code_of(bytes, {8, 16}, owned_f32("s", {2}, {1.0f, 1.0f}), Fp8ScaleKind::kBlock,
                    "power-of-two blocks"),
            kBad);
  EXPECT_EQ(code_of(bytes, {8, 16}, owned_f32("s", {}, {NAN}), kRow, "expected a finite scale"),
            kBad);
  bytes[3 * 16 + 5] = std::byte{0xFF};
  EXPECT_EQ(code_of(bytes, {8, 16}, one, kRow, "element [3, 5] is a float8 NaN (byte 0xff)"), kBad);
}

// A safetensors file of raw entries (any dtype name), written by hand.
struct RawTensor {
  std::string name, dtype;
  std::vector<int64_t> shape;
  std::vector<std::byte> bytes;
};

void write_raw_safetensors(const std::string& path, const std::vector<RawTensor>& tensors) {
  nlohmann::json header = nlohmann::json::object();
  uint64_t offset = 0;
  for (const RawTensor& t : tensors) {
    header[t.name] = {{"dtype", t.dtype},
                      {"shape", t.shape},
                      {"data_offsets", {offset, offset + t.bytes.size()}}};
    offset += t.bytes.size();
  }
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');
  std::ofstream f(path, std::ios::binary);
  const uint64_t n = text.size();
  f.write(reinterpret_cast<const char*>(&n), 8);
  f.write(text.data(), static_cast<std::streamsize>(text.size()));
  for (const RawTensor& t : tensors) {
    f.write(reinterpret_cast<const char*>(t.bytes.data()),
            static_cast<std::streamsize>(t.bytes.size()));
  }
}

std::vector<std::byte> bf16_bytes(const std::vector<float>& values) {
  std::vector<std::byte> b(values.size() * 2);
  for (size_t i = 0; i < values.size(); ++i) store_from_float(b.data(), i, DType::kBF16, values[i]);
  return b;
}
std::vector<std::byte> f32_bytes(const std::vector<float>& values) {
  std::vector<std::byte> b(values.size() * 4);
  std::memcpy(b.data(), values.data(), b.size());
  return b;
}

// forward_test_util.h's 2-layer Llama (H = 128, Q = 256, KV = 128, I = 256) in bf16, its
// linear weights float8 with a different scale format per projection (blocks of 64 x 64), next
// to the bf16 checkpoint of their dequantized values (computed here): both load to the same
// bytes. The float8 one also carries input_scale / input_scale_ub tensors, which are ignored,
// and k_scale / v_scale tensors of 1 (a float8 KV cache's scales, checkpoint_test.cc). Then: a
// float8 weight without its scale is refused, naming both.
TEST(Fp8Weights, Fp8CheckpointLoadsAsItsDequantizedBf16Twin) {
  ModelConfig c = testing_util::llama_config();
  c.dtype = DType::kBF16;
  Rng rng(5);
  std::vector<RawTensor> fp8, bf16;
  const auto both = [&](const std::string& name, std::vector<int64_t> shape) {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    std::vector<float> v(static_cast<size_t>(n));
    for (float& x : v) x = static_cast<float>(rng.uniform()) - 0.5f;
    fp8.push_back({name, "BF16", shape, bf16_bytes(v)});
    bf16.push_back({name, "BF16", shape, bf16_bytes(v)});
  };
  both("model.embed_tokens.weight", {c.vocab_size, c.hidden_size});
  both("model.norm.weight", {c.hidden_size});
  both("lm_head.weight", {c.vocab_size, c.hidden_size});
  const int64_t h = c.hidden_size, q = c.q_size(), kv = c.kv_size(), inter = c.intermediate_size;
  for (int64_t l = 0; l < c.num_layers; ++l) {
    both(layer_tensor_name(l, "input_layernorm.weight"), {h});
    both(layer_tensor_name(l, "post_attention_layernorm.weight"), {h});
    struct Linear {
      const char* suffix;
      int64_t out, in;
      std::vector<int64_t> scale_shape;  // block scales: 64 x 64 blocks
      bool block;
    };
    constexpr int64_t kB = 64;
    const Linear linears[] = {
        {"self_attn.q_proj.weight", q, h, {}, false},
        {"self_attn.k_proj.weight", kv, h, {kv}, false},
        {"self_attn.v_proj.weight", kv, h, {kv, 1}, false},
        {"self_attn.o_proj.weight", h, q, {h / kB, q / kB}, true},
        {"mlp.gate_proj.weight", inter, h, {1}, false},
        {"mlp.up_proj.weight", inter, h, {inter / kB, h / kB}, true},
        {"mlp.down_proj.weight", h, inter, {h}, false},
    };
    for (const Linear& lin : linears) {
      const std::string name = layer_tensor_name(l, lin.suffix);
      const auto bytes = random_e4m3(rng, static_cast<size_t>(lin.out * lin.in));
      size_t n = 1;
      for (int64_t d : lin.scale_shape) n *= static_cast<size_t>(d);
      const auto scales = random_scales(rng, n);
      fp8.push_back({name, "F8_E4M3", {lin.out, lin.in}, bytes});
      fp8.push_back({name + (lin.block ? "_scale_inv" : "_scale"), "F32", lin.scale_shape,
                     f32_bytes(scales)});
      std::vector<float> values(bytes.size());
      for (int64_t o = 0; o < lin.out; ++o) {
        for (int64_t i = 0; i < lin.in; ++i) {
          const size_t k = n == 1       ? 0
                           : !lin.block ? static_cast<size_t>(o)
                                        : static_cast<size_t>(o / kB * lin.scale_shape[1] + i / kB);
          values[static_cast<size_t>(o * lin.in + i)] =
              reference_e4m3(static_cast<uint8_t>(bytes[static_cast<size_t>(o * lin.in + i)])) *
              scales[k];
        }
      }
      bf16.push_back({name, "BF16", {lin.out, lin.in}, bf16_bytes(values)});
    }
    for (const char* extra : {"self_attn.q_proj.input_scale", "mlp.down_proj.input_scale_ub",
                              "self_attn.k_scale", "self_attn.v_scale"}) {
      fp8.push_back({layer_tensor_name(l, extra), "F32", {}, f32_bytes({1.0f})});
    }
  }
  TestDir dir("fp8_checkpoint");
  for (const auto& [sub, tensors] : {std::pair{"fp8", &fp8}, std::pair{"bf16", &bf16}}) {
    std::filesystem::create_directories(dir.path() + "/" + sub);
    std::ofstream(dir.path() + "/" + sub + "/config.json") << model_config_to_json(c);
    write_raw_safetensors(dir.path() + "/" + sub + "/model.safetensors", *tensors);
  }
  auto a = load_checkpoint(dir.path() + "/fp8");
  ASSERT_TRUE(a.ok()) << a.status().to_string();
  auto b = load_checkpoint(dir.path() + "/bf16");
  ASSERT_TRUE(b.ok()) << b.status().to_string();
  ASSERT_EQ(a->config.dtype, DType::kBF16);
  const auto same = [](const HostTensor& x, const HostTensor& y) {
    ASSERT_EQ(x.dtype, y.dtype) << x.name;
    ASSERT_EQ(x.shape, y.shape) << x.name;
    ASSERT_EQ(std::memcmp(x.data, y.data, x.num_bytes()), 0) << x.name;
  };
  same(a->embed_tokens, b->embed_tokens);
  same(a->lm_head, b->lm_head);
  for (size_t l = 0; l < a->layers.size(); ++l) {
    const LayerWeights &x = a->layers[l], &y = b->layers[l];
    for (const auto& [p, r] : {std::pair{&x.q_proj, &y.q_proj},
                               {&x.k_proj, &y.k_proj},
                               {&x.v_proj, &y.v_proj},
                               {&x.o_proj, &y.o_proj},
                               {&x.gate_proj, &y.gate_proj},
                               {&x.up_proj, &y.up_proj},
                               {&x.down_proj, &y.down_proj},
                               {&x.input_norm, &y.input_norm}}) {
      same(*p, *r);
    }
  }

  // Without its scale the float8 weight is refused.
  std::erase_if(fp8, [](const RawTensor& t) {
    return t.name == layer_tensor_name(1, "self_attn.k_proj.weight_scale");
  });
  write_raw_safetensors(dir.path() + "/fp8/model.safetensors", fp8);
  auto missing = load_checkpoint(dir.path() + "/fp8");
  EXPECT_EQ(missing.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(missing.status().message().find(
                "model.layers.1.self_attn.k_proj.weight: float8 weight without "
                "model.layers.1.self_attn.k_proj.weight_scale"),
            std::string::npos)
      << missing.status().to_string();
}

}  // namespace
}  // namespace packserve::model
