// ops_cpu_test.cc: the f32 ops of ops_cpu.h against float64 formulas written out here.
// Tolerances: each op does O(dim) f32 operations on O(1) values, so 1e-5 relative (about
// 100 f32 ulps) bounds the rounding with room; a wrong formula misses by O(1).
#include "packserve/model/ops_cpu.h"

#include <gtest/gtest.h>

#include <cmath>
#include <numbers>
#include <utility>
#include <vector>

#include "packserve/common/rng.h"

namespace packserve::model {
namespace {

std::vector<float> random_vec(size_t n, Rng& rng, double scale = 1.0) {
  std::vector<float> v(n);
  for (float& x : v) x = static_cast<float>(scale * rng.normal());
  return v;
}

TEST(RmsNorm, MatchesFloat64Formula) {
  Rng rng(1);
  for (int64_t dim : {1, 7, 64, 1000}) {
    SCOPED_TRACE(dim);
    const int64_t rows = 3;
    const std::vector<float> x = random_vec(static_cast<size_t>(rows * dim), rng, 3.0);
    const std::vector<float> w = random_vec(static_cast<size_t>(dim), rng);
    std::vector<float> y(x.size());
    rmsnorm(x, w, dim, 1e-6f, y);
    for (int64_t r = 0; r < rows; ++r) {
      double ss = 0.0;
      for (int64_t i = 0; i < dim; ++i) ss += double(x[r * dim + i]) * x[r * dim + i];
      const double inv = 1.0 / std::sqrt(ss / double(dim) + double(1e-6f));
      for (int64_t i = 0; i < dim; ++i) {
        const double ref = double(x[r * dim + i]) * inv * w[i];
        EXPECT_NEAR(y[r * dim + i], ref, 1e-5 * std::abs(ref) + 1e-7) << r << " " << i;
      }
    }
    std::vector<float> in_place = x;
    rmsnorm(in_place, w, dim, 1e-6f, in_place);
    EXPECT_EQ(in_place, y);
  }
}

TEST(RopeInvFreq, PlainIsThetaPower) {
  const std::vector<double> f = rope_inv_freq(64, 10000.0, std::nullopt);
  ASSERT_EQ(f.size(), 32u);
  EXPECT_DOUBLE_EQ(f[0], 1.0);
  EXPECT_NEAR(f[1], 1.0 / std::pow(10000.0, 2.0 / 64.0), 1e-15);
  EXPECT_NEAR(f[16], 0.01, 1e-15);  // 10000^(-32/64)
}

// Llama-3 scaling, worked by hand for head_dim 64, theta 500000, factor 8, low 1, high 4,
// original 8192: low_freq_wavelen = 8192, high_freq_wavelen = 2048; wavelen(p) =
// 2 pi 500000^(p/32): p = 0 (2 pi) is high frequency -> unchanged; p = 31 (~2.0e6) is low
// frequency -> / 8; p = 16 (2 pi * 707.1 = 4442.9) is medium -> smoothed with
// s = (8192 / 4442.9 - 1) / 3 = 0.28129, i.e. inv_freq * ((1 - s) / 8 + s) = inv_freq * 0.37113.
TEST(RopeInvFreq, Llama3ScalingBands) {
  const RopeScaling scaling = llama3_rope_scaling(8.0, 1.0, 4.0, 8192);
  const std::vector<double> plain = rope_inv_freq(64, 500000.0, std::nullopt);
  const std::vector<double> f = rope_inv_freq(64, 500000.0, scaling);
  EXPECT_DOUBLE_EQ(f[0], plain[0]);
  EXPECT_DOUBLE_EQ(f[31], plain[31] / 8.0);
  EXPECT_NEAR(plain[16], 1.0 / std::sqrt(500000.0), 1e-15);
  EXPECT_NEAR(f[16] / plain[16], 0.37113, 1e-4);
  const double wavelen = 2.0 * std::numbers::pi * std::sqrt(500000.0);
  const double s = (8192.0 / wavelen - 1.0) / 3.0;
  EXPECT_NEAR(f[16], plain[16] * ((1.0 - s) / 8.0 + s), 1e-18);
  // Bands are monotone: scaled frequencies never exceed the plain ones.
  for (size_t p = 0; p < f.size(); ++p) EXPECT_LE(f[p], plain[p] * (1 + 1e-15)) << p;
}

// The real meta-llama/Llama-3.2-1B parameters (config.json: head_dim 64, rope_theta 500000,
// rope_scaling llama3, factor 32, low 1, high 4, original 8192), values worked by hand:
// inv_freq(p) = 500000^(-p/32), wavelen = 2 pi 500000^(p/32); high band (unchanged) while
// wavelen < 2048, i.e. p <= 14 (p = 14: 1956.50); low band (/ 32) while wavelen > 8192, i.e.
// p >= 18 (p = 18: 10089.06); p = 15, 16, 17 (wavelen 2948.30, 4442.88, 6695.11) are smoothed
// with s = (8192 / wavelen - 1) / 3 = 0.592849, 0.281283, 0.074527 and ratio (1 - s) / 32 + s.
// transformers 5.17 (float32 inv_freq) matched these to 2.1e-7 relative on an H100
// (scripts/model_f32_check.py, docs/forward-cuda.md).
TEST(RopeInvFreq, Llama32OneBParametersByHand) {
  const RopeScaling scaling = llama3_rope_scaling(32.0, 1.0, 4.0, 8192);
  const std::vector<double> f = rope_inv_freq(64, 500000.0, scaling);
  ASSERT_EQ(f.size(), 32u);
  const std::pair<int, double> expected[] = {
      {0, 1.0},                  // high band
      {14, 3.211445994753e-03},  // high band, 500000^(-14/32)
      {15, 1.290547928209e-03},  // 2.131119536912e-03 * 0.6055727545
      {16, 4.295567965594e-04},  // 1.414213562373e-03 * 0.3037425238
      {17, 9.708287802628e-05},  // 9.384738703574e-04 * 0.1034476090
      {18, 1.946163818483e-05},  // 6.227724219146e-04 / 32
      {31, 9.418306725435e-08},  // 3.013858152139e-06 / 32
  };
  for (const auto& [p, want] : expected) {
    EXPECT_NEAR(f[static_cast<size_t>(p)], want, want * 1e-11) << "p = " << p;
  }
}

// YaRN with the tiny-yarn dummy's parameters (head_dim 64, theta 1e6, factor 4, original 1024),
// worked by hand: c(b) = 64 ln(1024 / (2 pi b)) / (2 ln 1e6); c(32) = 3.7705 -> low = 3,
// c(1) = 11.7980 -> high = 12 (truncated); ramp(p) = clamp((p - 3) / 9, 0, 1), so pairs 0-3
// keep theta^(-p/32), pairs 12-31 are divided by 4, and pair 7 (ramp 4/9) is multiplied by
// 4/9 / 4 + 5/9 = 2/3. Without truncation pair 7's ramp is (7 - 3.7705) / (11.7980 - 3.7705) =
// 0.402305. Linear scaling divides every pair by the factor.
TEST(RopeInvFreq, YarnAndLinearBandsByHand) {
  const std::vector<double> plain = rope_inv_freq(64, 1e6, std::nullopt);
  RopeScaling yarn = yarn_rope_scaling(4.0, 1024);
  const std::vector<double> f = rope_inv_freq(64, 1e6, yarn);
  ASSERT_EQ(f.size(), 32u);
  for (int p = 0; p <= 3; ++p) EXPECT_DOUBLE_EQ(f[p], plain[p]) << p;
  for (int p = 12; p < 32; ++p) EXPECT_DOUBLE_EQ(f[p], plain[p] / 4.0) << p;
  EXPECT_NEAR(plain[7], 0.04869675251658631, 1e-16);
  EXPECT_NEAR(f[7], plain[7] * 2.0 / 3.0, 1e-17);
  EXPECT_NEAR(f[8], plain[8] * (5.0 / 9.0 / 4.0 + 4.0 / 9.0), 1e-17);
  yarn.truncate = false;
  const std::vector<double> g = rope_inv_freq(64, 1e6, yarn);
  EXPECT_NEAR(g[7], plain[7] * (0.402305351 / 4.0 + 1.0 - 0.402305351), 1e-11);
  EXPECT_DOUBLE_EQ(g[3], plain[3]);          // below c(32) = 3.77
  EXPECT_LT(g[4], plain[4]);                 // above it, partly interpolated
  EXPECT_DOUBLE_EQ(g[12], plain[12] / 4.0);  // above c(1) = 11.80
  RopeScaling linear;
  linear.type = RopeType::kLinear;
  linear.factor = 2.5;
  const std::vector<double> l = rope_inv_freq(64, 1e6, linear);
  for (int p = 0; p < 32; ++p) EXPECT_DOUBLE_EQ(l[p], plain[p] / 2.5) << p;
  // The attention factor: 0.1 ln 4 + 1 for yarn, 1 for the others and without scaling.
  EXPECT_NEAR(rope_attention_factor(yarn), 1.1386294361, 1e-10);
  EXPECT_EQ(rope_attention_factor(linear), 1.0);
  EXPECT_EQ(rope_attention_factor(std::nullopt), 1.0);
}

// rope_table scales cos and sin by the attention factor.
TEST(Rope, TableCarriesTheAttentionFactor) {
  const std::vector<int32_t> positions = {0, 3, 700};
  const std::vector<double> inv_freq = rope_inv_freq(8, 10000.0, std::nullopt);
  std::vector<float> cos_sin;
  rope_table(positions, inv_freq, 1.25, cos_sin);
  ASSERT_EQ(cos_sin.size(), 3u * 4 * 2);
  for (size_t r = 0; r < 3; ++r) {
    for (size_t p = 0; p < 4; ++p) {
      const double angle = positions[r] * inv_freq[p];
      EXPECT_EQ(cos_sin[(r * 4 + p) * 2], static_cast<float>(1.25 * std::cos(angle)));
      EXPECT_EQ(cos_sin[(r * 4 + p) * 2 + 1], static_cast<float>(1.25 * std::sin(angle)));
    }
  }
}

TEST(Rope, MatchesFloat64RotateHalf) {
  Rng rng(2);
  const int64_t heads = 3, d = 64, rows = 4, stride = heads * d + 5;
  const std::vector<int32_t> positions = {0, 1, 77, 5000};
  const std::vector<double> inv_freq = rope_inv_freq(d, 10000.0, std::nullopt);
  std::vector<float> cos_sin;
  rope_table(positions, inv_freq, 1.0, cos_sin);
  const std::vector<float> x0 = random_vec(static_cast<size_t>(rows * stride), rng);
  std::vector<float> x = x0;
  apply_rope(x, rows, stride, heads, d, cos_sin);
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t h = 0; h < heads; ++h) {
      for (int64_t p = 0; p < d / 2; ++p) {
        const double angle = positions[r] * inv_freq[p];
        const size_t i = static_cast<size_t>(r * stride + h * d + p);
        const size_t j = i + static_cast<size_t>(d / 2);
        const double a = x0[i], b = x0[j];
        EXPECT_NEAR(x[i], a * std::cos(angle) - b * std::sin(angle), 1e-6) << r << h << p;
        EXPECT_NEAR(x[j], b * std::cos(angle) + a * std::sin(angle), 1e-6) << r << h << p;
      }
    }
    // The 5 padding floats after the heads are untouched.
    for (int64_t e = heads * d; e < stride; ++e) EXPECT_EQ(x[r * stride + e], x0[r * stride + e]);
  }
  // Position 0 is the identity, exactly.
  for (int64_t e = 0; e < heads * d; ++e) EXPECT_EQ(x[e], x0[e]);
}

TEST(SiluMul, MatchesFloat64Formula) {
  Rng rng(3);
  const int64_t rows = 2, inner = 33;
  const std::vector<float> gu = random_vec(static_cast<size_t>(rows * 2 * inner), rng, 4.0);
  std::vector<float> y(static_cast<size_t>(rows * inner));
  silu_mul(gu, rows, inner, y);
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t i = 0; i < inner; ++i) {
      const double g = gu[r * 2 * inner + i], u = gu[r * 2 * inner + inner + i];
      const double ref = g / (1.0 + std::exp(-g)) * u;
      EXPECT_NEAR(y[r * inner + i], ref, 1e-5 * std::abs(ref) + 1e-7);
    }
  }
}

TEST(Linear, MatchesFloat64MatmulWithBiasAndAccumulate) {
  Rng rng(4);
  for (int64_t rows : {1, 5}) {
    const int64_t in = 37, out = 11;
    const std::vector<float> x = random_vec(static_cast<size_t>(rows * in), rng);
    const std::vector<float> w = random_vec(static_cast<size_t>(out * in), rng);
    const std::vector<float> bias = random_vec(static_cast<size_t>(out), rng);
    const std::vector<float> y0 = random_vec(static_cast<size_t>(rows * out), rng);
    for (bool with_bias : {false, true}) {
      for (bool accumulate : {false, true}) {
        SCOPED_TRACE(testing::Message() << rows << with_bias << accumulate);
        std::vector<float> y = y0;
        linear(x, rows, in, w, out,
               with_bias ? std::span<const float>(bias) : std::span<const float>(), y, accumulate);
        for (int64_t r = 0; r < rows; ++r) {
          for (int64_t o = 0; o < out; ++o) {
            double ref = (accumulate ? y0[r * out + o] : 0.0) + (with_bias ? bias[o] : 0.0);
            double mag = std::abs(ref);
            for (int64_t i = 0; i < in; ++i) {
              ref += double(x[r * in + i]) * w[o * in + i];
              mag += std::abs(double(x[r * in + i]) * w[o * in + i]);
            }
            // f32 dot of 37 terms: error <= ~in * 2^-24 * sum |terms|.
            EXPECT_NEAR(y[r * out + o], ref, 4e-6 * mag) << r << " " << o;
          }
        }
      }
    }
  }
}

}  // namespace
}  // namespace packserve::model
