// metrics_text_test.cc: /metrics rendering against hand-written expected lines: cumulative
// histogram buckets in seconds, label escaping, number formatting, no engine while loading.
#include "packserve/server/metrics_text.h"

#include <gtest/gtest.h>

#include <cmath>
#include <sstream>

namespace packserve::server {
namespace {

bool has_line(const std::string& text, const std::string& line) {
  std::istringstream in(text);
  for (std::string l; std::getline(in, l);) {
    if (l == line) return true;
  }
  return false;
}

TEST(MetricsText, Numbers) {
  EXPECT_EQ(prometheus_number(0.0), "0");
  EXPECT_EQ(prometheus_number(3.0), "3");
  EXPECT_EQ(prometheus_number(0.05), "0.05");
  EXPECT_EQ(prometheus_number(1e-3), "0.001");
  EXPECT_EQ(prometheus_number(INFINITY), "+Inf");
  EXPECT_EQ(prometheus_number(-INFINITY), "-Inf");
  EXPECT_EQ(prometheus_number(NAN), "NaN");
}

TEST(MetricsText, LoadingHasStateAndHttpCountsOnly) {
  MetricsSnapshot s;
  s.state = ServerState::kLoading;
  s.http_requests = {{"/health", 503, 2}, {"other", 404, 1}};
  const std::string text = render_metrics_text(s);
  EXPECT_TRUE(has_line(text, "packserve_server_state{state=\"loading\"} 1"));
  EXPECT_TRUE(has_line(text, "packserve_server_state{state=\"ready\"} 0"));
  EXPECT_TRUE(has_line(text, "packserve_http_requests_total{route=\"/health\",status=\"503\"} 2"));
  EXPECT_TRUE(has_line(text, "packserve_http_requests_total{route=\"other\",status=\"404\"} 1"));
  EXPECT_TRUE(has_line(text, "# TYPE packserve_http_requests_total counter"));
  EXPECT_EQ(text.find("packserve_kv_pages_used"), std::string::npos);
}

TEST(MetricsText, EngineGaugesCountersAndCumulativeHistograms) {
  MetricsSnapshot s;
  s.state = ServerState::kReady;
  engine::EngineMetrics m;
  m.requests_finished_stop = 5;
  m.requests_finished_length = 7;
  m.requests_cancelled = 1;
  m.num_running = 3;
  m.num_waiting = 4;
  m.pages_in_use = 10;
  m.pages_cached = 20;
  m.pages_free = 70;
  m.pages_total = 100;
  m.prefix_lookup_tokens = 400;
  m.prefix_hit_tokens = 100;
  m.generation_tokens_total = 1234;
  m.generation_tokens_per_s = 56.5;
  m.step_seconds = 2.5;
  m.forward_seconds = 2.0;
  m.sample_seconds = 0.25;
  m.masked_rows = 77;
  m.mask_fill_seconds = 0.125;
  m.spec_draft_tokens = 90;
  m.spec_accepted_tokens = 60;
  m.backend.graph_captures = 12;
  m.backend.graph_replays = 340;
  m.backend.graph_evictions = 2;
  m.backend.capture_seconds = 0.75;
  // Buckets 10 ms, 100 ms, +Inf with 2, 3, 1 samples: cumulative 2, 5, 6.
  m.ttft_ms.upper_bounds_ms = {10.0, 100.0};
  m.ttft_ms.counts = {2, 3, 1};
  m.ttft_ms.sum_ms = 1500.0;
  m.ttft_ms.count = 6;
  // A malformed histogram (counts without +Inf): only sum and count are exported.
  m.tpot_ms.upper_bounds_ms = {10.0};
  m.tpot_ms.counts = {1};
  m.tpot_ms.sum_ms = 4.0;
  m.tpot_ms.count = 1;
  s.engine = m;
  const std::string text = render_metrics_text(s);
  const char* expected[] = {
      "packserve_server_state{state=\"ready\"} 1",
      "packserve_requests_finished_total{reason=\"stop\"} 5",
      "packserve_requests_finished_total{reason=\"length\"} 7",
      "packserve_requests_finished_total{reason=\"cancelled\"} 1",
      "packserve_requests_finished_total{reason=\"error\"} 0",
      "packserve_num_requests_running 3",
      "packserve_num_requests_waiting 4",
      "packserve_kv_pages_used 10",
      "packserve_kv_pages_cached 20",
      "packserve_kv_pages_free 70",
      "packserve_kv_pages_total 100",
      "packserve_prefix_cache_hit_rate 0.25",
      "packserve_prefix_cache_queries_total 400",
      "packserve_prefix_cache_hits_total 100",
      "packserve_generation_tokens_total 1234",
      "packserve_generation_tokens_per_second 56.5",
      "packserve_spec_decode_draft_tokens_total 90",
      "packserve_spec_decode_accepted_tokens_total 60",
      "packserve_engine_step_seconds_total 2.5",
      "packserve_engine_forward_seconds_total 2",
      "packserve_engine_sample_seconds_total 0.25",
      "packserve_engine_masked_rows_total 77",
      "packserve_engine_mask_fill_seconds_total 0.125",
      "packserve_engine_graph_captures_total 12",
      "packserve_engine_graph_replays_total 340",
      "packserve_engine_graph_evictions_total 2",
      "packserve_engine_graph_capture_seconds_total 0.75",
      "# TYPE packserve_time_to_first_token_seconds histogram",
      "packserve_time_to_first_token_seconds_bucket{le=\"0.01\"} 2",
      "packserve_time_to_first_token_seconds_bucket{le=\"0.1\"} 5",
      "packserve_time_to_first_token_seconds_bucket{le=\"+Inf\"} 6",
      "packserve_time_to_first_token_seconds_sum 1.5",
      "packserve_time_to_first_token_seconds_count 6",
      "packserve_time_per_output_token_seconds_sum 0.004",
      "packserve_time_per_output_token_seconds_count 1",
      "packserve_e2e_request_latency_seconds_count 0",
  };
  for (const char* line : expected) EXPECT_TRUE(has_line(text, line)) << line << "\n" << text;
  EXPECT_EQ(text.find("packserve_time_per_output_token_seconds_bucket"), std::string::npos);
}

TEST(MetricsText, EscapesLabelValues) {
  MetricsSnapshot s;
  s.http_requests = {{"a\"b\\c\nd", 200, 1}};
  EXPECT_TRUE(
      has_line(render_metrics_text(s),
               "packserve_http_requests_total{route=\"a\\\"b\\\\c\\nd\",status=\"200\"} 1"));
}

}  // namespace
}  // namespace packserve::server
