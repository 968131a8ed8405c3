// bench_metrics_test.cc: percentiles against a brute-force definition and numpy's known
// values; the summary of hand-made records with every number worked out in comments.
#include "packserve/benchclient/bench_metrics.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <random>

namespace packserve::benchclient {
namespace {

// Brute force: the piecewise-linear function through (i / (n - 1), sorted[i]), evaluated at
// q / 100 by finding its segment with a scan.
double brute_percentile(std::vector<double> v, double q) {
  std::sort(v.begin(), v.end());
  if (v.size() == 1) return v[0];
  const double x = q / 100.0;
  for (size_t i = 0; i + 1 < v.size(); ++i) {
    const double x0 = static_cast<double>(i) / static_cast<double>(v.size() - 1);
    const double x1 = static_cast<double>(i + 1) / static_cast<double>(v.size() - 1);
    if (x >= x0 - 1e-15 && x <= x1 + 1e-15) return v[i] + (v[i + 1] - v[i]) * (x - x0) / (x1 - x0);
  }
  return v.back();
}

TEST(Percentile, NumpyValues) {
  // numpy.percentile([1, 2, 3, 4], q): 50 -> 2.5, 90 -> 3.7, 99 -> 3.97, 0 -> 1, 100 -> 4.
  const std::vector<double> v = {4, 1, 3, 2};
  EXPECT_DOUBLE_EQ(percentile(v, 50), 2.5);
  EXPECT_NEAR(percentile(v, 90), 3.7, 1e-12);
  EXPECT_NEAR(percentile(v, 99), 3.97, 1e-12);
  EXPECT_DOUBLE_EQ(percentile(v, 0), 1);
  EXPECT_DOUBLE_EQ(percentile(v, 100), 4);
  EXPECT_DOUBLE_EQ(percentile({}, 50), 0);
  EXPECT_DOUBLE_EQ(percentile({7}, 99), 7);
}

TEST(Percentile, MatchesBruteForceOnRandomData) {
  std::mt19937 rng(5);
  for (int trial = 0; trial < 50; ++trial) {
    SCOPED_TRACE(trial);
    std::vector<double> v(1 + rng() % 200);
    for (double& x : v) x = std::uniform_real_distribution<double>(0, 1000)(rng);
    for (double q : {0.0, 1.0, 50.0, 90.0, 99.0, 99.9, 100.0}) {
      EXPECT_NEAR(percentile(v, q), brute_percentile(v, q), 1e-9) << q;
    }
  }
}

TEST(Describe, MeanStdMedian) {
  const Distribution d = describe({2, 4, 4, 4, 5, 5, 7, 9});
  EXPECT_DOUBLE_EQ(d.mean, 5.0);
  EXPECT_DOUBLE_EQ(d.stddev, 2.0);  // the classic population-std example
  EXPECT_DOUBLE_EQ(d.median, 4.5);
  EXPECT_DOUBLE_EQ(d.max, 9.0);
  EXPECT_EQ(d.count, 8);
}

RequestRecord rec(double send, std::vector<double> chunks, int32_t out, bool ok = true) {
  RequestRecord r;
  r.send_ms = send;
  r.chunk_ms = std::move(chunks);
  r.output_tokens = out;
  r.expected_output_tokens = out;
  r.prompt_tokens = 10;
  r.success = ok;
  r.end_ms = r.chunk_ms.empty() ? send + 5 : r.chunk_ms.back();
  if (!ok) r.error = "http 503";
  return r;
}

TEST(Summarize, HandWorkedRun) {
  // A: sent 0, tokens at 100, 150, 200 -> TTFT 100, TPOT (200-100)/2 = 50, ITL 50, 50, E2E 200.
  // B: sent 1000, tokens at 1300, 1500 -> TTFT 300, TPOT 200, ITL 200, E2E 500.
  // C: sent 1200, one token at 1250 -> TTFT 50, no TPOT, E2E 50.
  // D: failed at 1205.
  std::vector<RequestRecord> rs = {rec(0, {100, 150, 200}, 3), rec(1000, {1300, 1500}, 2),
                                   rec(1200, {1250}, 1), rec(1200, {}, 0, false)};
  SloConfig slo;
  slo.ttft_ms = 200;
  slo.tpot_ms = 100;
  const RunSummary s = summarize(rs, slo);
  EXPECT_EQ(s.completed, 3);
  EXPECT_EQ(s.failed, 1);
  EXPECT_EQ(s.failure_reasons.at("http 503"), 1);
  EXPECT_DOUBLE_EQ(s.duration_s, 1.5);  // last end: 1500 ms
  EXPECT_EQ(s.total_input_tokens, 30);
  EXPECT_EQ(s.total_output_tokens, 6);
  EXPECT_DOUBLE_EQ(s.request_throughput, 2.0);
  EXPECT_DOUBLE_EQ(s.output_throughput, 4.0);
  EXPECT_DOUBLE_EQ(s.total_token_throughput, 24.0);
  // Good: A (100 <= 200, 50 <= 100) and C (50, no TPOT); B fails TTFT.
  EXPECT_EQ(s.good_requests, 2);
  EXPECT_DOUBLE_EQ(*s.request_goodput, 2 / 1.5);
  EXPECT_DOUBLE_EQ(s.ttft_ms.mean, 150.0);
  EXPECT_DOUBLE_EQ(s.ttft_ms.median, 100.0);
  EXPECT_DOUBLE_EQ(s.tpot_ms.mean, 125.0);
  EXPECT_DOUBLE_EQ(s.itl_ms.mean, 100.0);   // 50, 50, 200
  EXPECT_DOUBLE_EQ(s.e2el_ms.mean, 250.0);  // 200, 500, 50
  // In flight: A [0, 200), B [1000, 1500), C [1200, 1250), D [1200, 1205) -> peak 3.
  EXPECT_EQ(s.max_concurrent_requests, 3);
  // Tokens per second bin: [0, 1): 3; [1, 2): 2 (1300, 1500) + 1 (1250) = 3.
  ASSERT_EQ(s.output_tokens_per_s.size(), 2u);
  EXPECT_DOUBLE_EQ(s.output_tokens_per_s[0].value, 3.0);
  EXPECT_DOUBLE_EQ(s.output_tokens_per_s[1].value, 3.0);
  EXPECT_DOUBLE_EQ(s.max_output_tokens_per_s, 3.0);  // the partial bin [1, 2) is not counted
  EXPECT_EQ(s.server_prompt_token_mismatches, 0);
  rs[0].server_prompt_tokens = 11;  // the server counted one more (a BOS)
  rs[1].server_prompt_tokens = 10;
  EXPECT_EQ(summarize(rs, slo).server_prompt_token_mismatches, 1);
  const RunSummary no_slo = summarize(rs, SloConfig{});
  EXPECT_FALSE(no_slo.request_goodput.has_value());
}

TEST(FailureReasonKey, NumbersInTheDetailGroup) {
  EXPECT_EQ(failure_reason_key("http 400: prompt (3000 tokens) exceeds 2048"),
            "http 400: prompt (N tokens) exceeds N");
  EXPECT_EQ(failure_reason_key("http 503"), "http 503");
  EXPECT_EQ(failure_reason_key(""), "unknown");
}

TEST(Summarize, EmptyRun) {
  const RunSummary s = summarize({}, SloConfig{});
  EXPECT_EQ(s.completed, 0);
  EXPECT_DOUBLE_EQ(s.request_throughput, 0.0);
  EXPECT_EQ(s.ttft_ms.count, 0);
}

}  // namespace
}  // namespace packserve::benchclient
