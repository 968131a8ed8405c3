// merge_test.cc: the LSE composition operator (merge.h) against a float64 oracle: attention
// over a whole key set computed directly vs. the f32 merge of the states of its parts.
#include "packserve/attention/merge.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "packserve/common/rng.h"

namespace packserve::attention {
namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();

// State of keys [begin, end) in double: o normalised, lse in base 2. scores are base-2 logits.
void state_of(const std::vector<double>& scores, const std::vector<std::vector<double>>& v,
              int begin, int end, std::vector<double>& o, double& lse) {
  const int dim = static_cast<int>(v[0].size());
  double m = -std::numeric_limits<double>::infinity();
  for (int j = begin; j < end; ++j) m = std::max(m, scores[j]);
  double l = 0;
  o.assign(dim, 0.0);
  for (int j = begin; j < end; ++j) {
    const double w = std::exp2(scores[j] - m);
    l += w;
    for (int d = 0; d < dim; ++d) o[d] += w * v[j][d];
  }
  for (double& x : o) x /= l;
  lse = m + std::log2(l);
}

TEST(Merge, MatchesWholeSetAttentionForRandomSplits) {
  for (uint64_t seed = 1; seed <= 40; ++seed) {
    SCOPED_TRACE("seed " + std::to_string(seed));
    Rng rng(seed);
    const int n = static_cast<int>(rng.uniform_int(2, 300));
    const int dim = 64;
    const double spread = rng.uniform(0.5, 30.0);  // score scale: from flat to very peaked
    std::vector<double> scores(n);
    std::vector<std::vector<double>> v(n, std::vector<double>(dim));
    for (int j = 0; j < n; ++j) {
      scores[j] = spread * rng.normal();
      for (double& x : v[j]) x = rng.normal();
    }
    // Cut points: 1 .. 6 parts, in key order.
    std::vector<int> cuts = {0};
    const int parts = static_cast<int>(rng.uniform_int(1, std::min(6, n)));
    for (int p = 1; p < parts; ++p) cuts.push_back(static_cast<int>(rng.uniform_int(1, n - 1)));
    cuts.push_back(n);
    std::sort(cuts.begin(), cuts.end());
    std::vector<std::vector<float>> o_f(parts, std::vector<float>(dim));
    std::vector<float> lse_f(parts);
    for (int p = 0; p < parts; ++p) {
      std::vector<double> o;
      double lse;
      if (cuts[p] == cuts[p + 1]) {  // an empty part is (0, -inf)
        o.assign(dim, 0.0);
        lse = -std::numeric_limits<double>::infinity();
      } else {
        state_of(scores, v, cuts[p], cuts[p + 1], o, lse);
      }
      for (int d = 0; d < dim; ++d) o_f[p][d] = static_cast<float>(o[d]);
      lse_f[p] = static_cast<float>(lse);
    }
    std::vector<std::span<const float>> spans(o_f.begin(), o_f.end());
    std::vector<float> o_out(dim);
    float lse_out;
    merge_states(spans, lse_f, o_out, lse_out);
    std::vector<double> o_ref;
    double lse_ref;
    state_of(scores, v, 0, n, o_ref, lse_ref);
    // Tolerance: inputs carry f32 rounding (2^-24 relative) and each merge step adds a few
    // f32 roundings of weights in [0, 1]; 1e-5 absolute on o (|o| <~ 4) and 1e-5 relative on
    // lse bounds 6 steps with margin.
    EXPECT_NEAR(lse_out, lse_ref, 1e-5 * std::max(1.0, std::abs(lse_ref)));
    for (int d = 0; d < dim; ++d) {
      ASSERT_NEAR(o_out[d], o_ref[d], 1e-5 + 1e-5 * std::abs(o_ref[d])) << "dim " << d;
    }
  }
}

TEST(Merge, EmptyStateIsTheIdentityBitForBit) {
  std::vector<float> o = {0.25f, -1.5f, 3.0f, 1e-7f};
  float lse = 12.75f;
  const std::vector<float> empty(4, 0.0f);
  std::vector<float> before = o;
  merge_state_into(o, lse, empty, -kInf);
  EXPECT_EQ(std::memcmp(o.data(), before.data(), 16), 0);
  EXPECT_EQ(lse, 12.75f);
  // Empty on the left: takes the other side exactly.
  std::vector<float> left(4, 0.0f);
  float left_lse = -kInf;
  merge_state_into(left, left_lse, before, 12.75f);
  EXPECT_EQ(std::memcmp(left.data(), before.data(), 16), 0);
  EXPECT_EQ(left_lse, 12.75f);
}

TEST(Merge, BothEmptyStaysEmpty) {
  std::vector<float> o = {1.0f, 2.0f};
  float lse = -kInf;
  const std::vector<float> other = {5.0f, 6.0f};
  merge_state_into(o, lse, other, -kInf);
  EXPECT_EQ(o[0], 0.0f);
  EXPECT_EQ(o[1], 0.0f);
  EXPECT_EQ(lse, -kInf);
  std::vector<float> out(2, 7.0f);
  float out_lse = 0.0f;
  merge_states({}, {}, out, out_lse);  // no parts
  EXPECT_EQ(out[0], 0.0f);
  EXPECT_EQ(out_lse, -kInf);
}

TEST(Merge, TwoEqualHalvesAverage) {
  // Equal lse: weights 1/2 each, lse + 1 (log2 of 2), exactly representable.
  std::vector<float> o = {1.0f, -2.0f};
  float lse = 3.0f;
  merge_state_into(o, lse, std::vector<float>{3.0f, 6.0f}, 3.0f);
  EXPECT_EQ(o[0], 2.0f);
  EXPECT_EQ(o[1], 2.0f);
  EXPECT_EQ(lse, 4.0f);
}

TEST(Merge, HugeLseGapsNeitherOverflowNorProduceNan) {
  std::vector<float> o = {1.0f};
  float lse = 500.0f;
  merge_state_into(o, lse, std::vector<float>{-1.0f}, -500.0f);
  EXPECT_EQ(o[0], 1.0f);  // 2^-1000 underflows to 0 in f32
  EXPECT_EQ(lse, 500.0f);
}

}  // namespace
}  // namespace packserve::attention
