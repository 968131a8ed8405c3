// request_trace_test.cc: loaders on small inline files (every error names file, line, field),
// both Azure timestamp forms, BurstGPT, windows, materialization, and the two real traces in
// ../shared/traces checked against the statistics their README publishes.
#include "packserve/trace/request_trace.h"

#include <gtest/gtest.h>

#include <cmath>
#include <numeric>

#include "packserve/common/shared_dir.h"

namespace packserve::trace {
namespace {

void expect_error(const Result<Trace>& r, const std::string& where, const std::string& field) {
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find(where), std::string::npos) << r.status().message();
  EXPECT_NE(r.status().message().find(field), std::string::npos) << r.status().message();
}

TEST(MooncakeTrace, BlocksBecomeSegmentsLastPartial) {
  const std::string text =
      "{\"timestamp\": 0, \"input_length\": 1100, \"output_length\": 5, \"hash_ids\": [0, 1, 2]}\n"
      "{\"timestamp\": 3000, \"input_length\": 600, \"output_length\": 7, \"hash_ids\": [0, 9]}\n";
  auto t = parse_trace_text(text, TraceFormat::kMooncake, "m.jsonl", TraceWindow{});
  ASSERT_TRUE(t.ok()) << t.status().to_string();
  ASSERT_EQ(t->requests.size(), 2u);
  const TraceRequest& a = t->requests[0];
  // 1100 = 512 + 512 + 76.
  ASSERT_EQ(a.segments.size(), 3u);
  EXPECT_EQ(a.segments[0].num_tokens, 512);
  EXPECT_EQ(a.segments[2].num_tokens, 76);
  EXPECT_EQ(a.segments[2].key, 2u);
  EXPECT_EQ(a.output_tokens, 5);
  EXPECT_DOUBLE_EQ(t->requests[1].arrival_ms, 3000.0);
  EXPECT_EQ(t->requests[1].line_number, 2);
  // Equal hash id 0 -> equal first 512 tokens; different ids (1 vs 9) -> different tokens.
  std::vector<int32_t> ta, tb;
  materialize_prompt(a, 128256, ta);
  materialize_prompt(t->requests[1], 128256, tb);
  ASSERT_EQ(ta.size(), 1100u);
  ASSERT_EQ(tb.size(), 600u);
  EXPECT_TRUE(std::equal(ta.begin(), ta.begin() + 512, tb.begin()));
  EXPECT_FALSE(std::equal(ta.begin() + 512, ta.begin() + 600, tb.begin() + 512));
  for (int32_t v : ta) ASSERT_TRUE(v >= 0 && v < 128256);
  // Deterministic: a second materialization is identical.
  std::vector<int32_t> ta2;
  materialize_prompt(a, 128256, ta2);
  EXPECT_EQ(ta, ta2);
}

TEST(MooncakeTrace, ErrorsNameFileLineAndField) {
  const std::string ok =
      "{\"timestamp\": 0, \"input_length\": 10, \"output_length\": 5, "
      "\"hash_ids\": [0]}\n";
  auto bad = [&](const std::string& line) {
    return parse_trace_text(ok + line + "\n", TraceFormat::kMooncake, "m.jsonl", TraceWindow{});
  };
  expect_error(bad("{\"timestamp\": 1, \"output_length\": 5, \"hash_ids\": [0]}"), "m.jsonl:2",
               "input_length");
  expect_error(bad("{\"timestamp\": 1, \"input_length\": \"ten\", \"output_length\": 5, "
                   "\"hash_ids\": [0]}"),
               "m.jsonl:2", "input_length");
  expect_error(bad("{\"timestamp\": 1, \"input_length\": 10, \"output_length\": -3, "
                   "\"hash_ids\": [0]}"),
               "m.jsonl:2", "output_length");
  expect_error(bad("{\"timestamp\": 1, \"input_length\": 1000, \"output_length\": 5, "
                   "\"hash_ids\": [0]}"),
               "m.jsonl:2", "hash_ids");
  expect_error(bad("{\"timestamp\": 1, \"input_length\": 10, \"output_length\": 5, "
                   "\"hash_ids\": [\"x\"]}"),
               "m.jsonl:2", "hash_ids[0]");
  expect_error(bad("{\"timestamp\": \"noon\", \"input_length\": 10, \"output_length\": 5, "
                   "\"hash_ids\": [0]}"),
               "m.jsonl:2", "timestamp");
  expect_error(bad("{not json"), "m.jsonl:2", "JSON object");
  // Time going backwards.
  auto back = parse_trace_text(
      "{\"timestamp\": 5000, \"input_length\": 10, \"output_length\": 5, "
      "\"hash_ids\": [0]}\n" +
          ok,
      TraceFormat::kMooncake, "m.jsonl", TraceWindow{});
  expect_error(back, "m.jsonl:2", "timestamp");
}

TEST(AzureTrace, Timestamps2023FormRelativeToFirstRow) {
  const std::string text =
      "TIMESTAMP,ContextTokens,GeneratedTokens\n"
      "2023-11-16 18:15:46.6805900,374,44\n"
      "2023-11-16 18:15:50.9951690,396,109\n"
      "2023-11-16 18:16:00.0000000,10,0\n";
  auto t = parse_trace_text(text, TraceFormat::kAzure, "a.csv", TraceWindow{});
  ASSERT_TRUE(t.ok()) << t.status().to_string();
  ASSERT_EQ(t->requests.size(), 3u);
  EXPECT_DOUBLE_EQ(t->requests[0].arrival_ms, 0.0);
  EXPECT_NEAR(t->requests[1].arrival_ms, 4314.579, 1e-3);  // 50.995169 - 46.68059 s
  EXPECT_NEAR(t->requests[2].arrival_ms, 13319.41, 1e-3);  // 60.0 - 46.68059 s
  EXPECT_EQ(t->requests[0].input_tokens, 374);
  EXPECT_EQ(t->requests[1].output_tokens, 109);
  EXPECT_EQ(t->requests[2].output_tokens, 1);  // 0 raised to 1, and counted
  EXPECT_EQ(t->num_zero_output_raised, 1);
  // Unique prompts: the two requests' tokens differ.
  std::vector<int32_t> a, b;
  materialize_prompt(t->requests[0], 1000, a);
  materialize_prompt(t->requests[1], 1000, b);
  EXPECT_FALSE(std::equal(a.begin(), a.begin() + 16, b.begin()));
}

TEST(AzureTrace, Timestamps2024FormWithOffsetAndMissingFraction) {
  const std::string text =
      "TIMESTAMP,ContextTokens,GeneratedTokens\n"
      "2024-05-10 00:00:00+00:00,100,10\n"
      "2024-05-10 00:00:00.009930+00:00,200,20\n"
      "2024-05-10 01:00:01.5+01:00,300,30\n";  // = 00:00:01.5 UTC
  auto t = parse_trace_text(text, TraceFormat::kAzure, "a24.csv", TraceWindow{});
  ASSERT_TRUE(t.ok()) << t.status().to_string();
  ASSERT_EQ(t->requests.size(), 3u);
  EXPECT_NEAR(t->requests[1].arrival_ms, 9.93, 1e-6);
  EXPECT_NEAR(t->requests[2].arrival_ms, 1500.0, 1e-6);
}

TEST(AzureTrace, WallClockAcrossMonthAndYear) {
  // 2023-12-31 23:59:59 UTC -> 2024-01-01 00:00:01 UTC is 2 s; 2024 is a leap year:
  // 2024-02-28 12:00 -> 2024-03-01 12:00 is 2 days.
  auto a = parse_wall_clock_s("2023-12-31 23:59:59");
  auto b = parse_wall_clock_s("2024-01-01 00:00:01");
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_DOUBLE_EQ(*b - *a, 2.0);
  EXPECT_DOUBLE_EQ(
      *parse_wall_clock_s("2024-03-01 12:00:00") - *parse_wall_clock_s("2024-02-28 12:00:00"),
      2 * 86400.0);
  EXPECT_DOUBLE_EQ(*parse_wall_clock_s("1970-01-02 00:00:00Z"), 86400.0);
  EXPECT_FALSE(parse_wall_clock_s("2024-05-10").ok());
  EXPECT_FALSE(parse_wall_clock_s("2024-13-10 00:00:00").ok());
  EXPECT_FALSE(parse_wall_clock_s("2024-05-10 00:00:00.").ok());
  EXPECT_FALSE(parse_wall_clock_s("2024-05-10 00:00:00+0000").ok());
}

TEST(AzureTrace, ErrorsNameFileLineAndField) {
  const std::string header = "TIMESTAMP,ContextTokens,GeneratedTokens\n";
  const std::string row = "2023-11-16 18:15:46.6805900,374,44\n";
  auto parse = [&](const std::string& text) {
    return parse_trace_text(text, TraceFormat::kAzure, "a.csv", TraceWindow{});
  };
  expect_error(parse(header + row + "2023-11-16 18:15:47,abc,44\n"), "a.csv:3", "ContextTokens");
  expect_error(parse(header + row + "2023-11-16 18:15:47,3,-1\n"), "a.csv:3", "GeneratedTokens");
  expect_error(parse(header + row + "yesterday,3,4\n"), "a.csv:3", "TIMESTAMP");
  expect_error(parse(header + row + "2023-11-16 18:15:47,3\n"), "a.csv:3", "3 comma-separated");
  expect_error(parse("TIME,Context,Generated\n" + row), "a.csv:1", "header");
  auto empty = parse("");
  ASSERT_FALSE(empty.ok());
  EXPECT_NE(empty.status().message().find("a.csv"), std::string::npos);
}

TEST(BurstGptTrace, ColumnsAndSeconds) {
  const std::string text =
      "Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n"
      "5,ChatGPT,472,18,490,Conversation log\n"
      "45.5,GPT-4,1087,0,1087,API log\n"
      "46,ChatGPT,12,30,42,Conversation log\n";
  auto t = parse_trace_text(text, TraceFormat::kBurstGpt, "b.csv", TraceWindow{});
  ASSERT_TRUE(t.ok()) << t.status().to_string();
  ASSERT_EQ(t->requests.size(), 3u);
  EXPECT_DOUBLE_EQ(t->requests[1].arrival_ms, 40500.0);
  EXPECT_EQ(t->requests[1].input_tokens, 1087);
  EXPECT_EQ(t->requests[1].output_tokens, 1);  // a failed request (0 tokens), raised
  EXPECT_EQ(t->requests[2].input_tokens, 12);
  expect_error(parse_trace_text(text + "47,ChatGPT,x,1,1,API log\n", TraceFormat::kBurstGpt,
                                "b.csv", TraceWindow{}),
               "b.csv:5", "Request tokens");
}

TEST(TraceFormat, DetectedFromExtensionAndHeader) {
  EXPECT_EQ(*detect_trace_format("x.jsonl", "{\"timestamp\": 0}"), TraceFormat::kMooncake);
  EXPECT_EQ(*detect_trace_format("x.csv", "TIMESTAMP,ContextTokens,GeneratedTokens"),
            TraceFormat::kAzure);
  EXPECT_EQ(*detect_trace_format("x.csv", "Timestamp,Model,Request tokens,Response tokens"),
            TraceFormat::kBurstGpt);
  auto unknown = detect_trace_format("x.csv", "a,b,c");
  ASSERT_FALSE(unknown.ok());
  EXPECT_NE(unknown.status().message().find("--format"), std::string::npos);
  EXPECT_FALSE(detect_trace_format("x.jsonl", "a,b").ok());
  EXPECT_FALSE(parse_trace_format("splitwise").ok());
}

TEST(TraceWindow, StartDurationMaxAndScale) {
  std::string text = "TIMESTAMP,ContextTokens,GeneratedTokens\n";
  for (int s = 0; s < 10; ++s) {
    text += "2024-01-01 00:00:0" + std::to_string(s) + ",10,10\n";  // one per second
  }
  TraceWindow w;
  w.start_s = 3;
  w.duration_s = 4;  // seconds 3, 4, 5, 6
  w.time_scale = 0.5;
  auto t = parse_trace_text(text, TraceFormat::kAzure, "w.csv", w);
  ASSERT_TRUE(t.ok());
  ASSERT_EQ(t->requests.size(), 4u);
  EXPECT_DOUBLE_EQ(t->requests[0].arrival_ms, 0.0);
  EXPECT_DOUBLE_EQ(t->requests[3].arrival_ms, 1500.0);  // (6 - 3) s * 0.5
  EXPECT_EQ(t->requests[0].line_number, 5);
  w.max_requests = 2;
  auto t2 = parse_trace_text(text, TraceFormat::kAzure, "w.csv", w);
  ASSERT_TRUE(t2.ok());
  EXPECT_EQ(t2->requests.size(), 2u);
  w.time_scale = 0;
  auto bad = parse_trace_text(text, TraceFormat::kAzure, "w.csv", w);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("time_scale"), std::string::npos);
}

// ---- the real traces (../shared/traces/README.md) ----

Result<Trace> load_shared(const std::string& rel, const TraceWindow& w) {
  PS_ASSIGN_OR_RETURN(const std::string path, find_shared_file(rel));
  return load_trace(path, std::nullopt, w);
}

TEST(RealTraces, MooncakeMatchesReadme) {
  auto t = load_shared("traces/mooncake/conversation_trace.jsonl", TraceWindow{});
  ASSERT_TRUE(t.ok()) << t.status().to_string();
  EXPECT_EQ(t->format, TraceFormat::kMooncake);
  ASSERT_EQ(t->requests.size(), 12031u);                              // README: requests
  EXPECT_NEAR(t->requests.back().arrival_ms / 1000.0, 3537.0, 0.05);  // README: span
  double input = 0, output = 0;
  for (const TraceRequest& r : t->requests) {
    input += r.input_tokens;
    output += r.output_tokens;
    int64_t seg = 0;
    for (const PromptSegment& s : r.segments) seg += s.num_tokens;
    ASSERT_EQ(seg, r.input_tokens);
    ASSERT_EQ(r.segments.front().key, 0u);  // README: every request begins with block 0
  }
  EXPECT_NEAR(input / 12031.0, 12035, 0.5);  // README: input mean 12,035
  EXPECT_NEAR(output / 12031.0, 343, 0.5);   // README: output mean 343
}

TEST(RealTraces, AzureMatchesReadme) {
  auto t = load_shared("traces/azure_llm_2023/AzureLLMInferenceTrace_conv.csv", TraceWindow{});
  ASSERT_TRUE(t.ok()) << t.status().to_string();
  EXPECT_EQ(t->format, TraceFormat::kAzure);
  ASSERT_EQ(t->requests.size(), 19366u);
  EXPECT_NEAR(t->requests.back().arrival_ms / 1000.0, 3501.7, 0.05);
  double input = 0, output = 0;
  for (const TraceRequest& r : t->requests) {
    input += r.input_tokens;
    output += r.output_tokens;
  }
  EXPECT_NEAR(input / 19366.0, 1155, 0.5);
  // README output mean 211 counts zeros; raising them to 1 can only add num_zero_output_raised.
  EXPECT_NEAR((output - double(t->num_zero_output_raised)) / 19366.0, 211, 0.5);
}

TEST(RealTraces, WindowsStopEarlyAndRebase) {
  TraceWindow w;
  w.start_s = 600;
  w.duration_s = 60;
  auto t = load_shared("traces/mooncake/conversation_trace.jsonl", w);
  ASSERT_TRUE(t.ok()) << t.status().to_string();
  // README: requests per minute between 144 and 247.
  EXPECT_GE(t->requests.size(), 144u);
  EXPECT_LE(t->requests.size(), 247u);
  EXPECT_GE(t->requests.front().arrival_ms, 0.0);
  EXPECT_LT(t->requests.back().arrival_ms, 60000.0);
  EXPECT_LT(t->num_rows_read, 12031);  // stopped reading past the window
}

}  // namespace
}  // namespace packserve::trace
