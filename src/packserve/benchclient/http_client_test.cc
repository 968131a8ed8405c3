// http_client_test.cc: URL parsing, the request body, the completion stream reader on a
// stream split at every position (timestamps come from the piece that completed each event),
// failure classification, and the Prometheus reader.
#include "packserve/benchclient/http_client.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

namespace packserve::benchclient {
namespace {

TEST(ParseUrl, Forms) {
  auto e = parse_url("http://127.0.0.1:8000");
  ASSERT_TRUE(e.ok());
  EXPECT_EQ(e->host, "127.0.0.1");
  EXPECT_EQ(e->port, 8000);
  EXPECT_EQ(e->base_path, "");
  e = parse_url("http://localhost/api/");
  ASSERT_TRUE(e.ok());
  EXPECT_EQ(e->port, 80);
  EXPECT_EQ(e->base_path, "/api");
  for (const char* bad : {"127.0.0.1:8000", "https://x", "http://h:0", "http://h:99999",
                          "http://h:abc", "http://:80"}) {
    auto r = parse_url(bad);
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(r.status().message().find("--url"), std::string::npos);
  }
}

TEST(CompletionBody, Fields) {
  const nlohmann::json j = nlohmann::json::parse(completion_body({"m", "hi", 7, true, {}}));
  EXPECT_EQ(j["model"], "m");
  EXPECT_EQ(j["prompt"], "hi");
  EXPECT_EQ(j["max_tokens"], 7);
  EXPECT_EQ(j["stream"], true);
  EXPECT_EQ(j["stream_options"]["include_usage"], true);
  EXPECT_EQ(j["ignore_eos"], true);
  EXPECT_FALSE(
      nlohmann::json::parse(completion_body({"m", "hi", 7, false, {}})).contains("ignore_eos"));
  EXPECT_FALSE(j.contains("temperature"));  // the server's default
  EXPECT_FALSE(j.contains("top_k") || j.contains("top_p") || j.contains("logprobs") ||
               j.contains("presence_penalty") || j.contains("frequency_penalty"));
  RequestSampling greedy_sampling;
  greedy_sampling.temperature = 0.0;
  const nlohmann::json greedy =
      nlohmann::json::parse(completion_body({"m", "hi", 7, true, greedy_sampling}));
  ASSERT_TRUE(greedy.contains("temperature"));
  EXPECT_EQ(greedy["temperature"], 0.0);
  const nlohmann::json nucleus = nlohmann::json::parse(completion_body({"m",
                                                                        "hi",
                                                                        7,
                                                                        true,
                                                                        {.temperature = 0.7,
                                                                         .top_k = 50,
                                                                         .top_p = 0.9,
                                                                         .presence_penalty = -0.5,
                                                                         .frequency_penalty = 1.5,
                                                                         .logprobs = true}}));
  EXPECT_EQ(nucleus["top_k"], 50);
  EXPECT_EQ(nucleus["presence_penalty"], -0.5);
  EXPECT_EQ(nucleus["frequency_penalty"], 1.5);
  EXPECT_EQ(nucleus["top_p"], 0.9);
  EXPECT_EQ(nucleus["logprobs"], 0);
}

const std::string kStream =
    "data: {\"choices\":[{\"index\":0,\"text\":\" a\",\"finish_reason\":null}]}\n\n"
    "data: {\"choices\":[{\"index\":0,\"text\":\"\",\"finish_reason\":null}]}\n\n"
    "data: {\"choices\":[{\"index\":0,\"text\":\" c\",\"finish_reason\":\"length\"}]}\n\n"
    "data: {\"choices\":[],\"usage\":{\"prompt_tokens\":5,\"completion_tokens\":3,"
    "\"total_tokens\":8}}\n\n"
    "data: [DONE]\n\n";

TEST(CompletionStreamReader, EveryCut) {
  const size_t first_event_end = kStream.find("\n\n") + 2;
  const size_t third_event_end = kStream.find("\n\n", kStream.find("length")) + 2;
  for (size_t cut = 1; cut < kStream.size(); ++cut) {
    RequestRecord r;
    CompletionStreamReader reader(r);
    ASSERT_TRUE(reader.feed(std::string_view(kStream).substr(0, cut), 10.0));
    ASSERT_TRUE(reader.feed(std::string_view(kStream).substr(cut), 20.0));
    reader.finish(30.0, 200, "");
    ASSERT_TRUE(r.success) << r.error << " cut " << cut;
    EXPECT_EQ(r.output_tokens, 3);  // usage wins over the chunk count
    EXPECT_EQ(r.server_prompt_tokens, 5);
    EXPECT_EQ(r.finish_reason, "length");
    // An empty-text chunk without finish_reason is a token (a held-back partial character).
    ASSERT_EQ(r.chunk_ms.size(), 3u);
    EXPECT_EQ(r.chunk_ms[0], cut >= first_event_end ? 10.0 : 20.0);
    EXPECT_EQ(r.chunk_ms[2], cut >= third_event_end ? 10.0 : 20.0);
    EXPECT_EQ(r.end_ms, 30.0);
  }
}

TEST(CompletionStreamReader, Failures) {
  {
    RequestRecord r;
    CompletionStreamReader reader(r);
    ASSERT_TRUE(reader.feed(kStream.substr(0, kStream.find("data: [DONE]")), 1.0));
    reader.finish(2.0, 200, "");
    EXPECT_FALSE(r.success);
    EXPECT_EQ(r.error, "stream ended without [DONE]");
  }
  {
    RequestRecord r;
    CompletionStreamReader reader(r);
    EXPECT_FALSE(reader.feed("data: {\"error\":{\"message\":\"boom\",\"type\":\"x\"}}\n\n", 1.0));
    reader.finish(2.0, 200, "");
    EXPECT_FALSE(r.success);
    EXPECT_EQ(r.error, "server error in stream: boom");
  }
  {
    RequestRecord r;
    CompletionStreamReader reader(r);
    reader.finish(2.0, 429, "");
    EXPECT_EQ(r.error, "http 429");
  }
  {
    RequestRecord r;
    CompletionStreamReader reader(r);
    reader.finish(2.0, 0, "transport: Connection");
    EXPECT_EQ(r.error, "transport: Connection");
  }
  {
    RequestRecord r;
    CompletionStreamReader reader(r);
    EXPECT_FALSE(reader.feed("data: not json\n\n", 1.0));
    reader.finish(2.0, 200, "");
    EXPECT_NE(r.error.find("not JSON"), std::string::npos);
  }
}

TEST(PrometheusValue, LabelsSumsAndPrefixes) {
  const std::string text =
      "# HELP packserve_num_requests_running x\n"
      "# TYPE packserve_num_requests_running gauge\n"
      "packserve_num_requests_running_total 99\n"
      "packserve_num_requests_running 7\n"
      "vllm:num_requests_running{model_name=\"a\"} 2\n"
      "vllm:num_requests_running{model_name=\"b\"} 3.5\n";
  EXPECT_EQ(prometheus_value(text, {"packserve_num_requests_running"}), 7.0);
  EXPECT_EQ(prometheus_value(text, {"missing", "vllm:num_requests_running"}), 5.5);
  EXPECT_FALSE(prometheus_value(text, {"packserve_num"}).has_value());
}

}  // namespace
}  // namespace packserve::benchclient
