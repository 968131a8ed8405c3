// forward_cpu_fp8_kv_test.cc: CpuForwardBackend with a float8 e4m3 KV pool
// (CpuForwardOptions::kv_cache_dtype = kFp8E4m3) against the same backend with its f32 pool,
// step by step over the same mixed prefill / decode batches (shared prefix pages, a
// copy-on-write page copy, a chunked prefill, decode rows).
// Oracles:
//  - layer 0's pool, every element of every page: exactly e4m3_from_float(f32 / scale) of the
//    f32 backend's element. Layer 0's K and V are computed from the embeddings alone (RMSNorm,
//    the qkv GEMM, the Qwen3 k norm, RoPE), the same f32 arithmetic on the same rows in both
//    backends, so the f32 values before rounding are bit-identical and the check is exact.
//    From layer 1 on the inputs differ (layer 0's attention read e4m3 values), so later
//    layers are held to a bound instead (kLaterLayerRelTol below);
//  - logits: max-norm relative error against the f32 backend within kLogitsRelTol, and not
//    zero (a pool that silently stayed f32 would fail);
//  - kAuto: scales ignored and the pool f32, bit for bit the backend without scales.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <memory>
#include <span>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "packserve/common/dtype.h"
#include "packserve/common/rng.h"
#include "packserve/model/forward_cpu.h"
#include "packserve/model/forward_test_util.h"

namespace packserve::model {
namespace {

using namespace testing_util;  // NOLINT(google-build-using-namespace)

constexpr KvPoolShape kPool{24, 16};

// Logits with an e4m3 pool against the f32 pool, max-norm relative (forward_cpu_test.cc's
// rel_err). e4m3 keeps 3 mantissa bits: each K/V element moves by up to 2^-4 of itself
// (half a step) and the attention of these random models (scores spread over ~1) turns that
// into a few percent of its output, compounded over two layers. Measured over the three
// architectures, both scale pairs and the four steps: 0.056 to 0.104 (the CUDA backend's
// e4m3 pool against this f32 one: 0.10-0.14, forward_cuda_test.cu, whose bound is also 0.2).
// A scale left out on the read side moves the logits by O(1) relative.
constexpr double kLogitsRelTol = 0.2;
// Layer >= 1 K/V element, decoded (byte value x scale), against the f32 pool's element:
// max |decoded - f32| <= kLaterLayerRelTol * max |f32| over that pool: half an e4m3 step
// (<= 2^-4 of the element) plus what layer 0's rounding changed in the layer's inputs.
// Measured: 0.069 to 0.086.
constexpr double kLaterLayerRelTol = 0.15;

double rel_err(std::span<const float> a, std::span<const float> b) {
  PS_CHECK(a.size() == b.size()) << a.size() << " vs " << b.size();
  double num = 0.0, den = 0.0;
  for (size_t i = 0; i < a.size(); ++i) {
    if (!std::isfinite(a[i])) return INFINITY;
    num = std::max(num, std::abs(static_cast<double>(a[i]) - b[i]));
    den = std::max(den, std::abs(static_cast<double>(b[i])));
  }
  return num / den;
}

std::unique_ptr<CpuForwardBackend> make_backend(const ModelWeights& w, KvCacheDtype dtype) {
  CpuForwardOptions options;
  options.num_threads = 2;
  options.num_ctas = 3;  // splits long KV: partial states and merges over e4m3 pages too
  options.kv_cache_dtype = dtype;
  auto b = CpuForwardBackend::create(w, kPool, options);
  PS_CHECK(b.ok()) << b.status().to_string();
  return std::move(b).value();
}

// The scenario: step 1 prefills A (40 tokens) and D's first chunk (9, no logits); step 2
// decodes A, prefills B over A's first two pages (32 shared tokens) + 14, C over A's first 40
// tokens through a copy-on-write of A's partial third page (page 2 -> 4, 8 tokens) + 6, D's
// second chunk (21) and E (23 fresh); steps 3 and 4 decode one row of every request.
struct Scenario {
  std::vector<ForwardBatch> steps;
};

Scenario make_scenario(int64_t vocab) {
  const int ps = kPool.page_size;
  Rng rng(11);
  Scenario s;
  Seq a{random_tokens(43, vocab, rng), {0, 1, 2}, 0};
  Seq b{random_tokens(48, vocab, rng), {0, 1, 3}, 32};
  std::copy_n(a.tokens.begin(), 32, b.tokens.begin());
  Seq c{random_tokens(48, vocab, rng), {0, 1, 4}, 40};
  std::copy_n(a.tokens.begin(), 40, c.tokens.begin());
  Seq d{random_tokens(32, vocab, rng), {5, 6}, 0};
  Seq e{random_tokens(25, vocab, rng), {7, 8}, 0};
  const auto step = [&](std::vector<std::pair<Seq*, int>> rows) {
    ForwardBatch batch;
    for (auto& [seq, q_len] : rows) {
      add(batch, *seq, q_len, seq != &d || seq->computed + q_len == 30, ps);
      seq->computed += q_len;
    }
    s.steps.push_back(std::move(batch));
  };
  step({{&a, 40}, {&d, 9}});
  b.computed = 32;
  c.computed = 40;
  step({{&a, 1}, {&b, 14}, {&c, 6}, {&d, 21}, {&e, 23}});
  s.steps.back().page_copies.push_back(kv::PageCopy{2, 4, 8});
  step({{&a, 1}, {&b, 1}, {&c, 1}, {&d, 1}, {&e, 1}});
  step({{&a, 1}, {&b, 1}, {&c, 1}, {&d, 1}, {&e, 1}});
  return s;
}

// Layer 0's e4m3 pool is exactly the f32 pool divided by the scale and rounded; counts the
// nonzero bytes (so an all-zero pool cannot pass) and the saturated ones.
struct PoolCheck {
  int64_t nonzero = 0, saturated = 0;
};
PoolCheck expect_layer0_exact(const CpuForwardBackend& f32, const CpuForwardBackend& fp8,
                              const LayerWeights& w) {
  PoolCheck check;
  for (const auto& [ref, got, scale, name] :
       {std::tuple{f32.k_pages(0), fp8.k_pages_fp8(0), w.k_scale, "k"},
        std::tuple{f32.v_pages(0), fp8.v_pages_fp8(0), w.v_scale, "v"}}) {
    EXPECT_EQ(got.size(), ref.size()) << name;
    if (got.size() != ref.size()) return check;
    int64_t mismatches = 0;
    for (size_t i = 0; i < ref.size(); ++i) {
      const uint8_t want = e4m3_from_float(ref[i] / scale);
      if (got[i] != want && mismatches++ < 3) {
        ADD_FAILURE() << name << " layer 0 element " << i << " (page "
                      << i / (ref.size() / kPool.num_pages) << "): byte " << int{got[i]}
                      << ", expected " << int{want} << " = e4m3(" << ref[i] << " / " << scale
                      << ")";
      }
      check.nonzero += got[i] != 0;
      check.saturated += (got[i] & 0x7F) == 0x7E;
    }
    EXPECT_EQ(mismatches, 0) << name;
  }
  return check;
}

// Layers >= 1: the decoded element within kLaterLayerRelTol (max-norm) of the f32 one.
double later_layers_rel_err(const CpuForwardBackend& f32, const CpuForwardBackend& fp8,
                            const ModelWeights& w) {
  double worst = 0.0;
  for (int l = 1; l < w.config.num_layers; ++l) {
    const LayerWeights& lw = w.layers[static_cast<size_t>(l)];
    for (const auto& [ref, got, scale] :
         {std::tuple{f32.k_pages(l), fp8.k_pages_fp8(l), lw.k_scale},
          std::tuple{f32.v_pages(l), fp8.v_pages_fp8(l), lw.v_scale}}) {
      std::vector<float> decoded(got.size());
      for (size_t i = 0; i < got.size(); ++i) decoded[i] = e4m3_value(got[i]) * scale;
      worst = std::max(worst, rel_err(decoded, ref));
    }
  }
  return worst;
}

struct Fp8Case {
  const char* name;
  ModelConfig (*config)();
  float k_scale, v_scale;  // every layer's
};
void PrintTo(const Fp8Case& c, std::ostream* os) {
  *os << c.name << " k_scale " << c.k_scale << " v_scale " << c.v_scale;
}
class ForwardCpuFp8Kv : public testing::TestWithParam<Fp8Case> {};

// (1) scales 1 and (2) a float8 checkpoint's calibrated scales (0.37 / 1.9, not powers of
// two, so the division rounds): logits near the f32 pool's, layer 0 exact, later layers
// bounded, after every step of the scenario.
TEST_P(ForwardCpuFp8Kv, MatchesTheF32PoolStepByStep) {
  ModelWeights w = make_weights(GetParam().config());
  for (LayerWeights& l : w.layers) {
    l.k_scale = GetParam().k_scale;
    l.v_scale = GetParam().v_scale;
  }
  auto f32 = make_backend(w, KvCacheDtype::kAuto);
  auto fp8 = make_backend(w, KvCacheDtype::kFp8E4m3);
  EXPECT_EQ(fp8->kv_pool_bytes() * 4, f32->kv_pool_bytes());
  const Scenario scenario = make_scenario(w.config.vocab_size);
  double worst_logits = 0.0, worst_later = 0.0;
  for (size_t i = 0; i < scenario.steps.size(); ++i) {
    SCOPED_TRACE("step " + std::to_string(i + 1));
    ForwardOutput want, got;
    ASSERT_TRUE(f32->forward(scenario.steps[i], want).ok());
    const Status st = fp8->forward(scenario.steps[i], got);
    ASSERT_TRUE(st.ok()) << st.to_string();
    ASSERT_EQ(got.logits.size(), want.logits.size());
    ASSERT_FALSE(want.logits.empty());
    const double e = rel_err(got.logits, want.logits);
    EXPECT_LT(e, kLogitsRelTol);
    worst_logits = std::max(worst_logits, e);
    const PoolCheck check = expect_layer0_exact(*f32, *fp8, w.layers[0]);
    EXPECT_GT(check.nonzero, 0);
    EXPECT_EQ(check.saturated, 0);  // the scales keep these models' K/V far below 448
    const double later = later_layers_rel_err(*f32, *fp8, w);
    EXPECT_LT(later, kLaterLayerRelTol);
    worst_later = std::max(worst_later, later);
  }
  EXPECT_GT(worst_logits, 0.0) << "the e4m3 pool gave the f32 logits bit for bit";
  RecordProperty("max_logits_rel_err", std::to_string(worst_logits));
  RecordProperty("max_later_layer_kv_rel_err", std::to_string(worst_later));
}

INSTANTIATE_TEST_SUITE_P(Archs, ForwardCpuFp8Kv,
                         testing::Values(Fp8Case{"llama", llama_config, 1.0f, 1.0f},
                                         Fp8Case{"qwen2", qwen2_config, 1.0f, 1.0f},
                                         Fp8Case{"qwen3", qwen3_config, 1.0f, 1.0f},
                                         Fp8Case{"llama", llama_config, 0.37f, 1.9f},
                                         Fp8Case{"qwen2", qwen2_config, 0.37f, 1.9f},
                                         Fp8Case{"qwen3", qwen3_config, 0.37f, 1.9f}),
                         [](const testing::TestParamInfo<Fp8Case>& param_info) {
                           return std::string(param_info.param.name) +
                                  (param_info.param.k_scale == 1.0f ? "_Scale1" : "_Scaled");
                         });

// Scales small enough that K / k_scale and V / v_scale pass 448: the bytes saturate at
// +-448 (0x7E / 0xFE) exactly as e4m3_from_float does, never NaN; the logits are not checked
// (saturation is the documented loss).
TEST(ForwardCpuFp8KvSaturation, LayerZeroSaturatesAsTheEncoder) {
  ModelWeights w = make_weights(llama_config());
  for (LayerWeights& l : w.layers) l.k_scale = l.v_scale = 1.0f / 4096;
  auto f32 = make_backend(w, KvCacheDtype::kAuto);
  auto fp8 = make_backend(w, KvCacheDtype::kFp8E4m3);
  const Scenario scenario = make_scenario(w.config.vocab_size);
  for (size_t i = 0; i < 2; ++i) {
    ForwardOutput a, b;
    ASSERT_TRUE(f32->forward(scenario.steps[i], a).ok());
    ASSERT_TRUE(fp8->forward(scenario.steps[i], b).ok());
    for (float x : b.logits) ASSERT_TRUE(std::isfinite(x));
  }
  const PoolCheck check = expect_layer0_exact(*f32, *fp8, w.layers[0]);
  EXPECT_GT(check.saturated, 0);
  for (int l = 0; l < w.config.num_layers; ++l) {
    for (std::span<const uint8_t> pages : {fp8->k_pages_fp8(l), fp8->v_pages_fp8(l)}) {
      EXPECT_EQ(
          std::count_if(pages.begin(), pages.end(), [](uint8_t b) { return (b & 0x7F) == 0x7F; }),
          0)
          << "layer " << l << ": a NaN byte";
    }
  }
}

// (3) kAuto: the pool stays f32 and the scales are ignored: non-1 scales give the same logits
// and the same pool bits as scales 1 (the CUDA backend's tests compare against exactly this).
TEST(ForwardCpuFp8KvAuto, IgnoresTheScalesAndKeepsF32) {
  const ModelWeights plain = make_weights(qwen2_config());
  ModelWeights scaled = plain;
  for (LayerWeights& l : scaled.layers) {
    l.k_scale = 0.37f;
    l.v_scale = 1.9f;
  }
  auto a = make_backend(plain, KvCacheDtype::kAuto);
  auto b = make_backend(scaled, KvCacheDtype::kAuto);
  EXPECT_EQ(b->kv_cache_dtype(), KvCacheDtype::kAuto);
  const size_t elements = static_cast<size_t>(kPool.num_pages) * kPool.page_size *
                          static_cast<size_t>(plain.config.kv_size());
  EXPECT_EQ(b->kv_pool_bytes(), elements * 2 * plain.config.num_layers * sizeof(float));
  const Scenario scenario = make_scenario(plain.config.vocab_size);
  for (const ForwardBatch& step : scenario.steps) {
    ForwardOutput x, y;
    ASSERT_TRUE(a->forward(step, x).ok());
    ASSERT_TRUE(b->forward(step, y).ok());
    EXPECT_EQ(x.logits, y.logits);
  }
  for (int l = 0; l < plain.config.num_layers; ++l) {
    EXPECT_TRUE(b->k_pages_fp8(l).empty());
    ASSERT_EQ(b->k_pages(l).size(), elements);
    EXPECT_TRUE(std::equal(a->k_pages(l).begin(), a->k_pages(l).end(), b->k_pages(l).begin()));
    EXPECT_TRUE(std::equal(a->v_pages(l).begin(), a->v_pages(l).end(), b->v_pages(l).begin()));
  }
}

// A batch that fails validation leaves the e4m3 pool unchanged (forward_batch.h's contract),
// its page copies included.
TEST(ForwardCpuFp8KvContract, InvalidBatchLeavesTheBytes) {
  const ModelWeights w = make_weights(llama_config());
  auto fp8 = make_backend(w, KvCacheDtype::kFp8E4m3);
  const Scenario scenario = make_scenario(w.config.vocab_size);
  ForwardOutput out;
  ASSERT_TRUE(fp8->forward(scenario.steps[0], out).ok());
  const std::vector<uint8_t> before(fp8->k_pages_fp8(1).begin(), fp8->k_pages_fp8(1).end());
  ForwardBatch bad = scenario.steps[1];
  bad.token_ids[0] = static_cast<int32_t>(w.config.vocab_size);  // out of the vocabulary
  EXPECT_EQ(fp8->forward(bad, out).code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(std::equal(before.begin(), before.end(), fp8->k_pages_fp8(1).begin()));
}

// create(): the scales must be finite and > 0 with kFp8E4m3 (named with their layer); with
// kAuto they are not read.
TEST(ForwardCpuFp8KvCreate, RejectsBadScalesAndDtypes) {
  ModelWeights w = make_weights(llama_config());
  w.layers[1].v_scale = 0.0f;
  CpuForwardOptions options;
  options.kv_cache_dtype = KvCacheDtype::kFp8E4m3;
  const auto bad = CpuForwardBackend::create(w, kPool, options);
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(bad.status().message(),
            "layers[1].v_scale = 0.000000: expected a finite KV cache scale > 0 "
            "(kv_cache_dtype fp8_e4m3)");
  w.layers[1].v_scale = 1.0f;
  w.layers[0].k_scale = std::numeric_limits<float>::infinity();
  EXPECT_NE(CpuForwardBackend::create(w, kPool, options)
                .status()
                .message()
                .find("layers[0].k_scale = inf"),
            std::string::npos);
  EXPECT_TRUE(CpuForwardBackend::create(w, kPool, CpuForwardOptions{}).ok());  // kAuto
  w.layers[0].k_scale = 1.0f;
  options.kv_cache_dtype = static_cast<KvCacheDtype>(7);
  EXPECT_EQ(CpuForwardBackend::create(w, kPool, options).status().message(),
            "kv_cache_dtype = 7: expected auto or fp8_e4m3");
}

}  // namespace
}  // namespace packserve::model
