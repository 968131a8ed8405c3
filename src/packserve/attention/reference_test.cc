// reference_test.cc: the float64 reference (reference.h) on tiny cases worked out by hand,
// and compare_with_reference().
#include "packserve/attention/reference.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

namespace packserve::attention {
namespace {

std::vector<std::byte> to_bytes(const std::vector<float>& v) {
  std::vector<std::byte> b(v.size() * 4);
  std::memcpy(b.data(), v.data(), b.size());
  return b;
}

// One request, q_len 2, kv_len 2, page_size 1, head_dim 64, 2 qo heads on 1 kv head, f32.
// Pages are stored out of order: token 0 in page 1, token 1 in page 0.
//   k0 = e0, k1 = 0;  v0 = 4 e1, v1 = 8 e1;  sm_scale = 1.
//   head 0: q = ln(3) e0 -> scores (ln 3, 0); head 1: q = 0 -> scores (0, 0).
// Row 0 (position 0) sees key 0 only: out = v0 = 4 e1 for both heads.
// Row 1 (position 1) sees keys 0, 1:
//   head 0: weights (3/4, 1/4) -> out = 3 + 2 = 5 e1;  head 1: (1/2, 1/2) -> out = 6 e1.
struct TinyCase {
  BatchLayout layout;
  std::vector<float> q, k, v;
  TinyCase() {
    layout.num_qo_heads = 2;
    layout.num_kv_heads = 1;
    layout.head_dim = 64;
    layout.page_size = 1;
    layout.num_pages = 3;  // page 2 unused, filled with NaN
    layout.dtype = DType::kF32;
    layout.qo_indptr = {0, 2};
    layout.kv_page_indptr = {0, 2};
    layout.kv_page_indices = {1, 0};
    layout.kv_last_page_len = {1};
    q.assign(2 * 2 * 64, 0.0f);
    q[0 * 128 + 0 * 64 + 0] = std::log(3.0f);  // row 0, head 0
    q[1 * 128 + 0 * 64 + 0] = std::log(3.0f);  // row 1, head 0
    k.assign(3 * 64, std::numeric_limits<float>::quiet_NaN());
    v = k;
    for (int d = 0; d < 64; ++d) {
      k[1 * 64 + d] = d == 0 ? 1.0f : 0.0f;  // token 0 in page 1
      k[0 * 64 + d] = 0.0f;                  // token 1 in page 0
      v[1 * 64 + d] = d == 1 ? 4.0f : 0.0f;
      v[0 * 64 + d] = d == 1 ? 8.0f : 0.0f;
    }
  }
};

TEST(Reference, TinyHandComputedCase) {
  TinyCase c;
  const auto qb = to_bytes(c.q), kb = to_bytes(c.k), vb = to_bytes(c.v);
  const Result<std::vector<double>> out =
      reference_attention(c.layout, AttentionTensors{qb, kb, vb, 1.0f});
  ASSERT_TRUE(out.ok()) << out.status().to_string();
  const auto at = [&](int row, int head, int d) { return (*out)[(row * 2 + head) * 64 + d]; };
  // log(3) is rounded to f32 in q: weight 3/4 becomes 3(1+e)/(3(1+e)+1) with |e| < 2^-23.
  const double tol = 1e-6;
  EXPECT_NEAR(at(0, 0, 1), 4.0, tol);
  EXPECT_NEAR(at(0, 1, 1), 4.0, tol);
  EXPECT_NEAR(at(1, 0, 1), 5.0, tol);
  EXPECT_NEAR(at(1, 1, 1), 6.0, tol);
  for (int row = 0; row < 2; ++row) {
    for (int head = 0; head < 2; ++head) {
      for (int d = 0; d < 64; ++d) {
        if (d != 1) {
          EXPECT_EQ(at(row, head, d), 0.0) << row << " " << head << " " << d;
        }
      }
    }
  }
}

TEST(Reference, Bf16InputsAreReadAsStored) {
  // Same case in bf16: 4, 8, 1, 0 are exact; ln 3 = 1.0986 has ulp 2^-7 in bf16 and
  // 0.0986 / 2^-7 = 12.62 rounds to 13, so q holds 1 + 13/128 = 1.1015625 and the head-0
  // weight of key 0 is e^1.1015625 / (e^1.1015625 + 1).
  TinyCase c;
  c.layout.dtype = DType::kBF16;
  const auto to_bf16 = [](const std::vector<float>& f) {
    std::vector<std::byte> b(f.size() * 2);
    for (size_t i = 0; i < f.size(); ++i) store_from_float(b.data(), i, DType::kBF16, f[i]);
    return b;
  };
  const auto qb = to_bf16(c.q), kb = to_bf16(c.k), vb = to_bf16(c.v);
  const Result<std::vector<double>> out =
      reference_attention(c.layout, AttentionTensors{qb, kb, vb, 1.0f});
  ASSERT_TRUE(out.ok());
  const double w = std::exp(1.1015625) / (std::exp(1.1015625) + 1.0);
  EXPECT_NEAR((*out)[(1 * 2 + 0) * 64 + 1], 4.0 * w + 8.0 * (1.0 - w), 1e-12);
}

// The same case over float8 pages (1, 4 and 8 are exact e4m3 values; NaN pages stay NaN)
// with k_scale 0.5 and v_scale 3: keys k0 = 0.5 e0, k1 = 0; values v0 = 12 e1, v1 = 24 e1.
// Row 0 sees key 0 only: 12 e1. Row 1: head 0 scores (ln(3) / 2, 0), weights (w, 1 - w) with
// w = sqrt(3) / (sqrt(3) + 1), out = (12 w + 24 (1 - w)) e1; head 1: (1/2, 1/2), 18 e1.
TEST(Reference, Fp8PagesReadAsTheirValuesTimesTheScales) {
  TinyCase c;
  c.layout.kv_fp8 = true;
  const auto to_e4m3 = [](const std::vector<float>& f) {
    std::vector<std::byte> b(f.size());
    for (size_t i = 0; i < f.size(); ++i) b[i] = std::byte{e4m3_from_float(f[i])};
    return b;
  };
  const auto qb = to_bytes(c.q), kb = to_e4m3(c.k), vb = to_e4m3(c.v);
  AttentionTensors t{qb, kb, vb, 1.0f};
  t.k_scale = 0.5f;
  t.v_scale = 3.0f;
  const Result<std::vector<double>> out = reference_attention(c.layout, t);
  ASSERT_TRUE(out.ok()) << out.status().to_string();
  const auto at = [&](int row, int head, int d) { return (*out)[(row * 2 + head) * 64 + d]; };
  // q holds ln(3) rounded to f32 (relative 2^-24): the weight moves by < 1e-7.
  const double w = std::sqrt(3.0) / (std::sqrt(3.0) + 1.0), tol = 1e-6;
  EXPECT_NEAR(at(0, 0, 1), 12.0, tol);
  EXPECT_NEAR(at(0, 1, 1), 12.0, tol);
  EXPECT_NEAR(at(1, 0, 1), 12.0 * w + 24.0 * (1.0 - w), tol);
  EXPECT_NEAR(at(1, 1, 1), 18.0, tol);
  EXPECT_EQ(at(1, 0, 0), 0.0);
}

// k_scale / v_scale: finite and > 0 over float8 pages, exactly 1 over any other pages.
TEST(Reference, RejectsBadKvScales) {
  TinyCase c;
  const auto qb = to_bytes(c.q), kb = to_bytes(c.k), vb = to_bytes(c.v);
  AttentionTensors t{qb, kb, vb, 1.0f};
  t.k_scale = 2.0f;
  const Status not_fp8 = reference_attention(c.layout, t).status();
  EXPECT_EQ(not_fp8.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(not_fp8.message(), "k_scale = 2.000000: expected 1 (the pages are not float8)");
  c.layout.kv_fp8 = true;
  const std::vector<std::byte> kb8(kb.size() / 4), vb8(kb8.size());
  for (float bad : {0.0f, -1.0f, std::numeric_limits<float>::infinity(),
                    std::numeric_limits<float>::quiet_NaN()}) {
    AttentionTensors t8{qb, kb8, vb8, 1.0f};
    t8.v_scale = bad;
    const Status s = reference_attention(c.layout, t8).status();
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << bad;
    EXPECT_NE(s.message().find("v_scale = "), std::string::npos) << s.message();
    EXPECT_NE(s.message().find(": expected a finite value > 0"), std::string::npos) << s.message();
  }
}

TEST(Reference, RejectsMismatchedTensorSizes) {
  TinyCase c;
  const auto qb = to_bytes(c.q), kb = to_bytes(c.k), vb = to_bytes(c.v);
  const std::vector<std::byte> short_k(kb.begin(), kb.end() - 4);
  const Result<std::vector<double>> out =
      reference_attention(c.layout, AttentionTensors{qb, short_k, vb, 1.0f});
  ASSERT_FALSE(out.ok());
  EXPECT_EQ(out.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(out.status().message().find("k_pages"), std::string::npos);
  BatchLayout bad = c.layout;
  bad.kv_last_page_len = {2};
  EXPECT_FALSE(reference_attention(bad, AttentionTensors{qb, kb, vb, 1.0f}).ok());
}

TEST(CompareWithReference, FlagsTheFirstFailureWithItsCoordinates) {
  TinyCase c;
  const size_t n = c.layout.q_elements();
  std::vector<double> ref(n, 1.0);
  std::vector<float> out(n, 1.0f);
  OutputComparison ok = compare_with_reference(c.layout, out, ref, 1e-5, 1e-4);
  EXPECT_TRUE(ok.ok);
  EXPECT_EQ(ok.max_abs_err, 0.0);
  // Within tolerance: 1e-5 + 1e-4 * 1 = 1.1e-4 allows an error of 1e-4.
  out[5] = 1.0001f;
  EXPECT_TRUE(compare_with_reference(c.layout, out, ref, 1e-5, 1e-4).ok);
  // Row 1, head 1, dim 3 = element (1 * 2 + 1) * 64 + 3.
  out[(1 * 2 + 1) * 64 + 3] = 1.01f;
  out[n - 1] = std::numeric_limits<float>::quiet_NaN();
  const OutputComparison bad = compare_with_reference(c.layout, out, ref, 1e-5, 1e-4);
  EXPECT_FALSE(bad.ok);
  EXPECT_EQ(bad.num_failed, 2);
  EXPECT_EQ(bad.num_nonfinite, 1);
  EXPECT_NEAR(bad.max_abs_err, 0.01, 1e-6);
  EXPECT_NE(bad.first_failure.find("request 0 row 1 (global 1) head 1 dim 3"), std::string::npos)
      << bad.first_failure;
}

}  // namespace
}  // namespace packserve::attention
