// result_json_test.cc: result.json carries vLLM's field names with the summary's values, and
// --compare prints both runs with B/A ratios.
#include "packserve/benchclient/result_json.h"

#include <gtest/gtest.h>

#include "packserve/benchclient/compare.h"

namespace packserve::benchclient {
namespace {

std::vector<RequestRecord> two_records() {
  RequestRecord a;
  a.send_ms = 0;
  a.chunk_ms = {100, 150, 200};
  a.output_tokens = 3;
  a.prompt_tokens = 11;
  a.success = true;
  a.end_ms = 200;
  RequestRecord b;
  b.send_ms = 50;
  b.end_ms = 60;
  b.prompt_tokens = 7;
  b.error = "http 503";
  return {a, b};
}

TEST(ResultJson, VllmFieldNames) {
  const std::vector<RequestRecord> rs = two_records();
  const RunSummary s = summarize(rs, SloConfig{});
  const nlohmann::json j = result_to_json(RunInfo{}, s, rs);
  for (const char* f : {"duration",
                        "completed",
                        "failed",
                        "total_input_tokens",
                        "total_output_tokens",
                        "request_throughput",
                        "request_goodput",
                        "output_throughput",
                        "total_token_throughput",
                        "max_output_tokens_per_s",
                        "max_concurrent_requests",
                        "input_lens",
                        "output_lens",
                        "ttfts",
                        "itls",
                        "start_times",
                        "errors",
                        "mean_ttft_ms",
                        "median_ttft_ms",
                        "std_ttft_ms",
                        "p99_ttft_ms",
                        "mean_tpot_ms",
                        "median_tpot_ms",
                        "p99_tpot_ms",
                        "mean_itl_ms",
                        "median_itl_ms",
                        "p99_itl_ms",
                        "mean_e2el_ms",
                        "median_e2el_ms",
                        "p99_e2el_ms",
                        "p90_ttft_ms",
                        "p50_tbt_ms",
                        "p99_ttlt_ms",
                        "failure_reasons"}) {
    EXPECT_TRUE(j.contains(f)) << f;
  }
  EXPECT_DOUBLE_EQ(j["duration"].get<double>(), 0.2);
  EXPECT_EQ(j["completed"], 1);
  EXPECT_EQ(j["failed"], 1);
  EXPECT_EQ(j["total_input_tokens"], 11);  // completed requests only
  EXPECT_EQ(j["input_lens"], (nlohmann::json{11, 7}));
  EXPECT_EQ(j["output_lens"], (nlohmann::json{3, 0}));
  EXPECT_DOUBLE_EQ(j["ttfts"][0].get<double>(), 0.1);  // seconds, as vLLM
  EXPECT_EQ(j["itls"][0].size(), 2u);
  EXPECT_DOUBLE_EQ(j["itls"][0][1].get<double>(), 0.05);
  EXPECT_EQ(j["errors"], (nlohmann::json{"", "http 503"}));
  EXPECT_TRUE(j["request_goodput"].is_null());
  EXPECT_DOUBLE_EQ(j["mean_tpot_ms"].get<double>(), 50.0);
  EXPECT_EQ(j["failure_reasons"]["http 503"], 1);
}

TEST(SummaryTable, HasTheSections) {
  const std::vector<RequestRecord> rs = two_records();
  const std::string t = summary_table(RunInfo{}, summarize(rs, SloConfig{}));
  for (const char* s : {"Successful requests:", "Failed requests:", "http 503", "Mean TTFT (ms):",
                        "P90 TPOT (ms):", "P99 TBT (ms):", "Median TTLT (ms):"}) {
    EXPECT_NE(t.find(s), std::string::npos) << s;
  }
}

TEST(Compare, SideBySideWithRatios) {
  nlohmann::json a = {{"completed", 10},
                      {"request_throughput", 2.0},
                      {"mean_ttft_ms", 100.0},
                      {"request_goodput", nullptr}};
  nlohmann::json b = {{"completed", 10},
                      {"request_throughput", 3.0},
                      {"mean_ttft_ms", 50.0},
                      {"request_goodput", 1.5}};
  const std::string out = compare_results(a, b, "a.json", "b.json");
  auto line_of = [&](const std::string& field) {
    const size_t at = out.find(field + " ");
    EXPECT_NE(at, std::string::npos) << field;
    return out.substr(at, out.find('\n', at) - at);
  };
  EXPECT_NE(line_of("request_throughput").find("1.500"), std::string::npos);
  EXPECT_NE(line_of("mean_ttft_ms").find("0.500"), std::string::npos);
  EXPECT_NE(line_of("completed").find("1.000"), std::string::npos);
  // A null in A: value "-" and no ratio.
  const std::string goodput = line_of("request_goodput");
  EXPECT_NE(goodput.find("1.50"), std::string::npos);
  EXPECT_EQ(goodput.substr(goodput.size() - 1), "-");
  // A field missing in both.
  EXPECT_NE(line_of("p99_e2el_ms").find("-"), std::string::npos);
  EXPECT_NE(out.find("a.json"), std::string::npos);
}

}  // namespace
}  // namespace packserve::benchclient
