// http_server_test.cc: the HTTP layer end to end on loopback over a scripted FakeEngine
// (fake_engine_test_util.h): exact texts, usage counts, SSE streams, every HTTP error status
// with its error type, cancellation of a stream whose client goes away, concurrent streams.
#include "packserve/server/http_server.h"

#include <gtest/gtest.h>
#include <httplib.h>

#include <algorithm>
#include <nlohmann/json.hpp>
#include <set>
#include <thread>
#include <vector>

#include "packserve/server/fake_engine_test_util.h"
#include "packserve/server/http_test_util.h"
#include "packserve/server/openai_request.h"
#include "packserve/server/sse.h"

namespace packserve::server {
namespace {

using nlohmann::json;
using testing::FakeEngine;

using testing::Answer;
using testing::read_stream;
using testing::ServerTest;

TEST_F(ServerTest, CompletionExactTextAndUsage) {
  start();
  Answer a = post("/v1/completions", R"({"model":"tiny","prompt":"hello","max_tokens":5})");
  ASSERT_EQ(a.status, 200) << a.body;
  json j = a.parsed();
  EXPECT_EQ(j["object"], "text_completion");
  EXPECT_EQ(j["model"], "tiny");
  EXPECT_EQ(j["choices"][0]["text"], "abcde");
  EXPECT_EQ(j["choices"][0]["finish_reason"], "length");
  EXPECT_EQ(j["usage"]["prompt_tokens"], 5);  // one token per byte of "hello"
  EXPECT_EQ(j["usage"]["completion_tokens"], 5);
  EXPECT_EQ(j["usage"]["total_tokens"], 10);
  EXPECT_TRUE(j["id"].get<std::string>().rfind("cmpl-", 0) == 0);
}

TEST_F(ServerTest, StopStringAndDefaults) {
  start();
  Answer a =
      post("/v1/completions", R"({"model":"tiny","prompt":"x","max_tokens":20,"stop":["de"]})");
  ASSERT_EQ(a.status, 200) << a.body;
  EXPECT_EQ(a.parsed()["choices"][0]["text"], "abc");
  EXPECT_EQ(a.parsed()["choices"][0]["finish_reason"], "stop");
  // Default max_tokens for completions: 16.
  Answer d = post("/v1/completions", R"({"model":"tiny","prompt":"x"})");
  ASSERT_EQ(d.status, 200);
  EXPECT_EQ(d.parsed()["usage"]["completion_tokens"], 16);
  EXPECT_EQ(d.parsed()["choices"][0]["text"], "abcdefghijklmnop");
  // The sampling parameters reached the engine as sent.
  auto history = engine_->submitted_requests();
  ASSERT_EQ(history.size(), 2u);
  EXPECT_EQ(history[0].sampling.stop, std::vector<std::string>{"de"});
  EXPECT_EQ(history[0].sampling.max_tokens, 20);
}

TEST_F(ServerTest, ChatCompletionUsesTemplateAndDefaultFillsContext) {
  start();
  Answer a =
      post("/v1/chat/completions",
           R"({"model":"tiny","messages":[{"role":"user","content":"hi"}],"logprobs":true})");
  ASSERT_EQ(a.status, 200) << a.body;
  json j = a.parsed();
  EXPECT_EQ(j["object"], "chat.completion");
  EXPECT_EQ(j["choices"][0]["message"]["role"], "assistant");
  // Prompt "user: hi\nassistant: " = 20 tokens; context 64 -> 44 tokens by default.
  EXPECT_EQ(j["usage"]["prompt_tokens"], 20);
  EXPECT_EQ(j["usage"]["completion_tokens"], 44);
  EXPECT_EQ(j["choices"][0]["message"]["content"].get<std::string>().size(), 44u);
  ASSERT_EQ(j["choices"][0]["logprobs"]["content"].size(), 44u);
  EXPECT_EQ(j["choices"][0]["logprobs"]["content"][0]["token"], "a");
  EXPECT_EQ(j["choices"][0]["logprobs"]["content"][0]["logprob"], -0.5);
}

// Alternatives: completions' logprobs = k gives a {text: logprob} per token (OpenAI's legacy
// shape), chat's top_logprobs a list of {token, logprob, bytes}; k reaches the engine.
TEST_F(ServerTest, TopLogprobsInBothShapes) {
  start();
  Answer a =
      post("/v1/completions", R"({"model":"tiny","prompt":"x","max_tokens":2,"logprobs":3})");
  ASSERT_EQ(a.status, 200) << a.body;
  const json lp = a.parsed()["choices"][0]["logprobs"];
  EXPECT_EQ(lp["tokens"], json({"a", "b"}));
  EXPECT_EQ(lp["token_logprobs"], json({-0.5, -0.5}));
  EXPECT_EQ(lp["top_logprobs"][0], json({{"a", -0.5}, {"b", -1.5}, {"c", -2.5}}));
  EXPECT_EQ(lp["top_logprobs"][1], json({{"b", -0.5}, {"c", -1.5}, {"d", -2.5}}));
  Answer none =
      post("/v1/completions", R"({"model":"tiny","prompt":"x","max_tokens":1,"logprobs":0})");
  EXPECT_TRUE(none.parsed()["choices"][0]["logprobs"]["top_logprobs"][0].is_null());
  Answer c = post("/v1/chat/completions",
                  R"({"model":"tiny","messages":[{"role":"user","content":"q"}],"max_tokens":1,
                      "logprobs":true,"top_logprobs":2})");
  ASSERT_EQ(c.status, 200) << c.body;
  const json content = c.parsed()["choices"][0]["logprobs"]["content"];
  ASSERT_EQ(content.size(), 1u);
  EXPECT_EQ(content[0]["top_logprobs"], json::parse(R"([{"token":"a","logprob":-0.5,"bytes":[97]},
                            {"token":"b","logprob":-1.5,"bytes":[98]}])"));
  std::vector<int32_t> ks;
  for (const auto& r : engine_->submitted_requests()) ks.push_back(r.sampling.top_logprobs);
  std::sort(ks.begin(), ks.end());
  EXPECT_EQ(ks, (std::vector<int32_t>{0, 2, 3}));
}

TEST_F(ServerTest, PenaltiesAndLogitBiasReachEveryChoice) {
  start();
  Answer a = post("/v1/completions", R"({"model":"tiny","prompt":"x","max_tokens":1,"n":2,
      "presence_penalty":0.5,"frequency_penalty":-0.25,"repetition_penalty":1.3,
      "logit_bias":{"3":-1.5}})");
  ASSERT_EQ(a.status, 200) << a.body;
  const auto submitted = engine_->submitted_requests();
  ASSERT_EQ(submitted.size(), 2u);
  for (const auto& r : submitted) {
    EXPECT_EQ(r.sampling.presence_penalty, 0.5);
    EXPECT_EQ(r.sampling.frequency_penalty, -0.25);
    EXPECT_EQ(r.sampling.repetition_penalty, 1.3);
    EXPECT_EQ(r.sampling.logit_bias, (std::vector<std::pair<int32_t, double>>{{3, -1.5}}));
  }
}

// echo: the prompt's text leads each choice's text (a token-id prompt's tokens' texts), and
// with logprobs the prompt tokens lead the logprobs (the first one's null, its alternatives
// null), text_offset counting over both; the engine is asked for prompt_logprobs = k only
// with logprobs. Streamed, the first chunk carries them.
TEST_F(ServerTest, EchoPutsThePromptBeforeTheCompletion) {
  start();
  Answer a = post("/v1/completions",
                  R"({"model":"tiny","prompt":"xyv","max_tokens":2,"echo":true,"logprobs":2})");
  ASSERT_EQ(a.status, 200) << a.body;
  const json choice = a.parsed()["choices"][0];
  EXPECT_EQ(choice["text"], "xyvab");
  const json lp = choice["logprobs"];
  EXPECT_EQ(lp["tokens"], json({"x", "y", "v", "a", "b"}));
  EXPECT_EQ(lp["token_logprobs"][0], nullptr);
  EXPECT_FLOAT_EQ(lp["token_logprobs"][1].get<float>(), -1.1f);
  EXPECT_FLOAT_EQ(lp["token_logprobs"][2].get<float>(), -1.2f);
  EXPECT_EQ(lp["token_logprobs"][3], -0.5);
  EXPECT_EQ(lp["top_logprobs"][0], nullptr);
  EXPECT_EQ(lp["top_logprobs"][2].size(), 2u);
  EXPECT_EQ(lp["top_logprobs"][2]["z"], -9.0);
  EXPECT_EQ(lp["text_offset"], json({0, 1, 2, 3, 4}));
  EXPECT_EQ(a.parsed()["usage"]["completion_tokens"], 2);
  Answer ids =
      post("/v1/completions", R"({"model":"tiny","prompt":[104,105],"max_tokens":1,"echo":true})");
  ASSERT_EQ(ids.status, 200) << ids.body;
  EXPECT_EQ(ids.parsed()["choices"][0]["text"], "hia");
  EXPECT_TRUE(ids.parsed()["choices"][0]["logprobs"].is_null());
  std::vector<int32_t> ks;
  for (const auto& r : engine_->submitted_requests()) ks.push_back(r.sampling.prompt_logprobs);
  std::sort(ks.begin(), ks.end());
  EXPECT_EQ(ks, (std::vector<int32_t>{-1, 2}));

  httplib::Client c("127.0.0.1", server_->port());
  int status = 0;
  const auto events = read_stream(c, "/v1/completions", R"({"model":"tiny","prompt":"qr",
      "max_tokens":2,"echo":true,"logprobs":0,"stream":true})",
                                  &status);
  ASSERT_EQ(status, 200);
  ASSERT_GE(events.size(), 3u);
  const json first = json::parse(events[0])["choices"][0];
  EXPECT_EQ(first["text"], "qra");
  EXPECT_EQ(first["logprobs"]["tokens"], json({"q", "r", "a"}));
  EXPECT_EQ(first["logprobs"]["token_logprobs"][0], nullptr);
  EXPECT_EQ(json::parse(events[1])["choices"][0]["text"], "b");
}

// truncate_prompt_tokens: the engine gets the prompt's last k tokens, usage counts them, and
// echo repeats what is left.
TEST_F(ServerTest, TruncatePromptTokensCutsThePromptFromTheLeft) {
  start();
  Answer a = post("/v1/completions", R"({"model":"tiny","prompt":"xyzw","max_tokens":1,
                                         "echo":true,"truncate_prompt_tokens":2})");
  ASSERT_EQ(a.status, 200) << a.body;
  EXPECT_EQ(a.parsed()["choices"][0]["text"], "zwa");
  EXPECT_EQ(a.parsed()["usage"]["prompt_tokens"], 2);
  ASSERT_EQ(engine_->submitted_requests().size(), 1u);
  EXPECT_EQ(engine_->submitted_requests()[0].prompt_token_ids.size(), 2u);
  Answer over = post("/v1/completions", R"({"model":"tiny","prompt":"x","max_tokens":1,
                                            "truncate_prompt_tokens":100000000})");
  EXPECT_EQ(over.status, 400) << over.body;
  EXPECT_EQ(over.parsed()["error"]["param"], "truncate_prompt_tokens");
}

// bad_words: each word is tokenized bare (its leading whitespace cut) and after a space, each
// sequence once, for every choice; a word of too many tokens is 400 naming it.
TEST_F(ServerTest, BadWordsBecomeTokenSequences) {
  start();
  Answer a = post("/v1/completions", R"({"model":"tiny","prompt":"x","max_tokens":1,"n":2,
                                         "bad_words":["  no","no","a b"]})");
  ASSERT_EQ(a.status, 200) << a.body;
  const auto bytes = [](std::string_view text) {
    return std::vector<int32_t>(text.begin(), text.end());  // the fake tokenizer: id = byte
  };
  const std::vector<std::vector<int32_t>> want = {bytes("no"), bytes(" no"), bytes("a b"),
                                                  bytes(" a b")};
  ASSERT_EQ(engine_->submitted_requests().size(), 2u);
  for (const auto& r : engine_->submitted_requests()) {
    EXPECT_EQ(r.sampling.bad_words_token_ids, want);
  }
  Answer chat = post("/v1/chat/completions", R"({"model":"tiny","max_tokens":1,
      "messages":[{"role":"user","content":"hi"}],"bad_words":["z"]})");
  ASSERT_EQ(chat.status, 200) << chat.body;
  EXPECT_EQ(engine_->submitted_requests().back().sampling.bad_words_token_ids,
            (std::vector<std::vector<int32_t>>{bytes("z"), bytes(" z")}));
  const std::size_t before = engine_->submitted_requests().size();
  Answer longer = post("/v1/completions", R"({"model":"tiny","prompt":"x","bad_words":["ok",")" +
                                              std::string(64, 'w') + R"("]})");
  EXPECT_EQ(longer.status, 400) << longer.body;
  EXPECT_EQ(longer.parsed()["error"]["param"], "bad_words[1]");
  EXPECT_EQ(longer.parsed()["error"]["message"], "bad_words[1]: longer than 64 tokens");
  EXPECT_EQ(engine_->submitted_requests().size(), before);  // nothing reached the engine
}

TEST_F(ServerTest, StreamingCompletionWithUsage) {
  start();
  auto c = client();
  int status = 0;
  auto events = read_stream(c, "/v1/completions",
                            R"({"model":"tiny","prompt":"abc","max_tokens":6,"stream":true,
                                "stream_options":{"include_usage":true}})",
                            &status);
  ASSERT_EQ(status, 200);
  ASSERT_GE(events.size(), 3u);
  EXPECT_EQ(events.back(), "[DONE]");
  std::string text;
  int finish_chunks = 0;
  for (std::size_t i = 0; i + 2 < events.size(); ++i) {
    json chunk = json::parse(events[i]);
    EXPECT_EQ(chunk["object"], "text_completion");
    EXPECT_TRUE(chunk["usage"].is_null());
    text += chunk["choices"][0]["text"].get<std::string>();
    if (!chunk["choices"][0]["finish_reason"].is_null()) {
      ++finish_chunks;
      EXPECT_EQ(chunk["choices"][0]["finish_reason"], "length");
    }
  }
  EXPECT_EQ(text, "abcdef");
  EXPECT_EQ(finish_chunks, 1);
  json usage = json::parse(events[events.size() - 2]);
  EXPECT_TRUE(usage["choices"].empty());
  EXPECT_EQ(usage["usage"]["prompt_tokens"], 3);
  EXPECT_EQ(usage["usage"]["completion_tokens"], 6);
  EXPECT_EQ(usage["usage"]["total_tokens"], 9);
}

// vLLM's continuous_usage_stats: every chunk carries its choice's usage so far; without
// include_usage it changes nothing.
TEST_F(ServerTest, StreamingContinuousUsage) {
  start();
  auto c = client();
  int status = 0;
  auto events = read_stream(c, "/v1/completions",
                            R"({"model":"tiny","prompt":"abc","max_tokens":4,"stream":true,
                                "stream_options":{"include_usage":true,
                                                  "continuous_usage_stats":true}})",
                            &status);
  ASSERT_EQ(status, 200);
  ASSERT_GE(events.size(), 6u);  // 4 tokens, the finish, the usage chunk, [DONE]
  EXPECT_EQ(events.back(), "[DONE]");
  int64_t last = 0;
  std::string text;
  for (std::size_t i = 0; i + 2 < events.size(); ++i) {
    const json chunk = json::parse(events[i]);
    ASSERT_TRUE(chunk["usage"].is_object()) << events[i];
    EXPECT_EQ(chunk["usage"]["prompt_tokens"], 3);
    const int64_t done = chunk["usage"]["completion_tokens"];
    text += chunk["choices"][0]["text"].get<std::string>();
    EXPECT_EQ(done, static_cast<int64_t>(text.size())) << events[i];  // one letter a token
    EXPECT_EQ(chunk["usage"]["total_tokens"], 3 + done);
    EXPECT_GE(done, last);
    last = done;
  }
  EXPECT_EQ(last, 4);
  EXPECT_EQ(json::parse(events[events.size() - 2])["usage"]["completion_tokens"], 4);
  events = read_stream(c, "/v1/completions",
                       R"({"model":"tiny","prompt":"abc","max_tokens":2,"stream":true,
                           "stream_options":{"continuous_usage_stats":true}})",
                       &status);
  ASSERT_EQ(status, 200);
  for (const std::string& e : events) {
    if (e != "[DONE]") {
      EXPECT_FALSE(json::parse(e).contains("usage")) << e;
    }
  }
}

TEST_F(ServerTest, StreamingChatRoleFirstThenContent) {
  start();
  auto c = client();
  int status = 0;
  auto events = read_stream(c, "/v1/chat/completions",
                            R"({"model":"tiny","messages":[{"role":"user","content":"q"}],
                                "max_tokens":4,"stream":true,"stop":"c"})",
                            &status);
  ASSERT_EQ(status, 200);
  ASSERT_GE(events.size(), 3u);
  EXPECT_EQ(events.back(), "[DONE]");
  json first = json::parse(events[0]);
  EXPECT_EQ(first["object"], "chat.completion.chunk");
  EXPECT_EQ(first["choices"][0]["delta"]["role"], "assistant");
  std::string text;
  for (std::size_t i = 0; i + 1 < events.size(); ++i) {
    json chunk = json::parse(events[i]);
    EXPECT_FALSE(chunk.contains("usage"));
    text += chunk["choices"][0]["delta"].value("content", "");
  }
  EXPECT_EQ(text, "ab");
  EXPECT_EQ(json::parse(events[events.size() - 2])["choices"][0]["finish_reason"], "stop");
}

TEST_F(ServerTest, ErrorStatusesAndTypes) {
  start();
  json e = expect_error(post("/v1/completions", "{not json"), 400, "invalid_request_error");
  EXPECT_TRUE(e["param"].is_null());
  e = expect_error(post("/v1/completions", R"({"model":"tiny","prompt":"x","max_tokens":0})"), 400,
                   "invalid_request_error");
  EXPECT_EQ(e["param"], "max_tokens");
  e = expect_error(post("/v1/completions", R"({"model":"tiny","prompt":"x","temperature":-1})"),
                   400, "invalid_request_error");
  EXPECT_EQ(e["param"], "temperature");
  e = expect_error(
      post("/v1/completions", R"({"model":"tiny","prompt":")" + std::string(64, 'x') + "\"}"), 400,
      "invalid_request_error");
  EXPECT_EQ(e["param"], "prompt");
  e = expect_error(post("/v1/completions", R"({"model":"tiny","prompt":"x","max_tokens":64})"), 400,
                   "invalid_request_error");
  EXPECT_EQ(e["param"], "max_tokens");
  e = expect_error(post("/v1/completions", R"({"model":"tiny","prompt":[300]})"), 400,
                   "invalid_request_error");
  EXPECT_EQ(e["param"], "prompt[0]");
  e = expect_error(post("/v1/completions", R"({"model":"gpt-4","prompt":"x"})"), 404,
                   "not_found_error");
  EXPECT_EQ(e["code"], "model_not_found");
  e = expect_error(get("/v1/nothing"), 404, "not_found_error");
  e = expect_error(post("/v1/completions", R"({"model":"tiny","prompt":"x","n":129})"), 400,
                   "invalid_request_error");
  EXPECT_EQ(e["param"], "n");
  // A batch whose second prompt leaves no room: 400 naming it, and no choice submitted.
  e = expect_error(post("/v1/completions", R"({"model":"tiny","prompt":["x",")" +
                                               std::string(64, 'y') + R"("],"n":2})"),
                   400, "invalid_request_error");
  EXPECT_EQ(e["param"], "prompt[1]");
  e = expect_error(post("/v1/completions", R"({"model":"tiny","prompt":[[1],[2,300]]})"), 400,
                   "invalid_request_error");
  EXPECT_EQ(e["param"], "prompt[1][1]");
  EXPECT_EQ(engine_->num_submitted(), 0);
}

// n choices of each prompt of a batch: OpenAI's order (choice i is choice i % n of prompt
// i / n), each prompt's tokens counted once in usage, distinct per-choice seeds.
TEST_F(ServerTest, BatchOfPromptsWithNChoices) {
  start();
  Answer a = post("/v1/completions", R"({"model":"tiny","prompt":["ab","cde"],"n":2,
                                         "max_tokens":3,"seed":7,"logprobs":0})");
  ASSERT_EQ(a.status, 200) << a.body;
  json j = a.parsed();
  ASSERT_EQ(j["choices"].size(), 4u);
  for (int i = 0; i < 4; ++i) {
    EXPECT_EQ(j["choices"][i]["index"], i);
    EXPECT_EQ(j["choices"][i]["text"], "abc");
    EXPECT_EQ(j["choices"][i]["finish_reason"], "length");
    EXPECT_EQ(j["choices"][i]["logprobs"]["tokens"].size(), 3u);
  }
  EXPECT_EQ(j["usage"]["prompt_tokens"], 5);  // 2 + 3, not 2 x (2 + 3)
  EXPECT_EQ(j["usage"]["completion_tokens"], 12);
  EXPECT_EQ(j["usage"]["total_tokens"], 17);
  // Each prompt's second choice found it cached; the usage counts what was cached before.
  EXPECT_EQ(j["usage"]["prompt_tokens_details"]["cached_tokens"], 0);
  std::multiset<std::vector<int32_t>> prompts;
  std::set<uint64_t> seeds;
  for (const auto& r : engine_->submitted_requests()) {
    prompts.insert(r.prompt_token_ids);
    ASSERT_TRUE(r.sampling.seed.has_value());
    seeds.insert(*r.sampling.seed);
  }
  const std::vector<int32_t> ab = {'a', 'b'}, cde = {'c', 'd', 'e'};
  EXPECT_EQ(prompts, (std::multiset<std::vector<int32_t>>{ab, ab, cde, cde}));
  std::set<uint64_t> expected_seeds;
  for (int c = 0; c < 4; ++c) expected_seeds.insert(choice_seed(7, c));
  EXPECT_EQ(seeds, expected_seeds);
  // The same prompt again: its tokens were cached before this request.
  Answer again = post("/v1/completions", R"({"model":"tiny","prompt":"ab","max_tokens":1})");
  ASSERT_EQ(again.status, 200) << again.body;
  EXPECT_EQ(again.parsed()["usage"]["prompt_tokens_details"]["cached_tokens"], 2);
  EXPECT_EQ(again.parsed()["choices"].size(), 1u);
}

// Streamed choices: every chunk names its choice; each choice gets the role first (chat), its
// own text and one finish chunk; one usage chunk and [DONE] end the stream.
TEST_F(ServerTest, StreamingChatWithNChoices) {
  start();
  auto c = client();
  int status = 0;
  auto events = read_stream(c, "/v1/chat/completions",
                            R"({"model":"tiny","messages":[{"role":"user","content":"q"}],
                                "max_tokens":4,"n":3,"stream":true,
                                "stream_options":{"include_usage":true}})",
                            &status);
  ASSERT_EQ(status, 200);
  ASSERT_GE(events.size(), 3u * 2 + 2);
  EXPECT_EQ(events.back(), "[DONE]");
  std::vector<std::string> text(3);
  std::vector<int> roles(3, 0), finishes(3, 0);
  for (std::size_t i = 0; i + 2 < events.size(); ++i) {
    json chunk = json::parse(events[i]);
    ASSERT_EQ(chunk["choices"].size(), 1u) << events[i];
    const int index = chunk["choices"][0]["index"];
    ASSERT_TRUE(index >= 0 && index < 3) << events[i];
    const json& delta = chunk["choices"][0]["delta"];
    if (delta.contains("role")) {
      EXPECT_EQ(finishes[index] + static_cast<int>(text[index].size()), 0) << "role not first";
      ++roles[index];
    }
    text[index] += delta.value("content", "");
    if (!chunk["choices"][0]["finish_reason"].is_null()) {
      EXPECT_EQ(chunk["choices"][0]["finish_reason"], "length");
      ++finishes[index];
    }
  }
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(text[i], "abcd") << i;
    EXPECT_EQ(roles[i], 1) << i;
    EXPECT_EQ(finishes[i], 1) << i;
  }
  json usage = json::parse(events[events.size() - 2]);
  EXPECT_TRUE(usage["choices"].empty());
  EXPECT_EQ(usage["usage"]["prompt_tokens"], 19);  // "user: q\nassistant: ", once
  EXPECT_EQ(usage["usage"]["completion_tokens"], 12);
}

// A choice that fails ends the response with a 500 and cancels the other choices: nothing is
// left running.
TEST_F(ServerTest, FailedChoiceCancelsTheOthers) {
  start({}, true, std::chrono::milliseconds(5));
  engine_->fail_prompts_with('!');
  json e = expect_error(post("/v1/completions", R"({"model":"tiny","prompt":["ok","bad!"],"n":2,
                                                     "max_tokens":50})"),
                        500, "server_error");
  EXPECT_EQ(e["code"], "generation_failed");
  wait_for_no_live();
  EXPECT_EQ(engine_->cancelled().size(), 2u);  // prompt 0's two choices
  auto c = client();
  int status = 0;
  auto events = read_stream(c, "/v1/completions",
                            R"({"model":"tiny","prompt":["ok","bad!"],"max_tokens":50,
                                "stream":true})",
                            &status);
  ASSERT_EQ(status, 200);
  ASSERT_GE(events.size(), 2u);
  EXPECT_EQ(events.back(), "[DONE]");
  EXPECT_EQ(json::parse(events[events.size() - 2])["error"]["code"], "generation_failed");
  wait_for_no_live();
  EXPECT_EQ(engine_->cancelled().size(), 3u);
}

TEST_F(ServerTest, ApiKey) {
  ServerConfig config;
  config.api_key = "sekret";
  start(config);
  const std::string body = R"({"model":"tiny","prompt":"x","max_tokens":1})";
  json e = expect_error(post("/v1/completions", body), 401, "authentication_error");
  EXPECT_EQ(e["code"], "invalid_api_key");
  expect_error(post("/v1/completions", body, {{"Authorization", "Bearer wrong"}}), 401,
               "authentication_error");
  expect_error(post("/v1/completions", body, {{"Authorization", "Bearer sekre"}}), 401,
               "authentication_error");
  EXPECT_EQ(post("/v1/completions", body, {{"Authorization", "Bearer sekret"}}).status, 200);
  EXPECT_EQ(get("/health").status, 200);  // health and metrics stay open
  EXPECT_EQ(get("/metrics").status, 200);
}

TEST_F(ServerTest, BodyOverLimitIs413) {
  ServerConfig config;
  config.max_body_bytes = 2048;
  start(config);
  const std::string body = R"({"model":"tiny","prompt":")" + std::string(4096, 'x') + "\"}";
  json e = expect_error(post("/v1/completions", body), 413, "invalid_request_error");
  EXPECT_EQ(e["code"], "request_too_large");
  EXPECT_EQ(get("/health").status, 200);
}

TEST_F(ServerTest, QueueFullIs429) {
  start({}, true, std::chrono::milliseconds(1), /*max_live=*/0);
  json e = expect_error(post("/v1/completions", R"({"model":"tiny","prompt":"x"})"), 429,
                        "rate_limit_error");
  EXPECT_EQ(e["code"], "queue_full");
}

// Choices are submitted in turn: when the engine refuses the third, the two it took are
// cancelled at once, so a refused request holds nothing.
TEST_F(ServerTest, RefusedChoiceCancelsThoseSubmitted) {
  start({}, true, std::chrono::milliseconds(1), /*max_live=*/2);
  json e = expect_error(
      post("/v1/completions", R"({"model":"tiny","prompt":"x","n":3,"max_tokens":50})"), 429,
      "rate_limit_error");
  EXPECT_EQ(e["code"], "queue_full");
  EXPECT_EQ(engine_->num_submitted(), 2);
  EXPECT_EQ(engine_->num_live(), 0);
  EXPECT_EQ(engine_->cancelled().size(), 2u);
  Answer ok = post("/v1/completions", R"({"model":"tiny","prompt":"x","n":2,"max_tokens":2})");
  ASSERT_EQ(ok.status, 200) << ok.body;
  EXPECT_EQ(ok.parsed()["choices"].size(), 2u);
}

TEST_F(ServerTest, LoadingAndDrainingAre503) {
  start({}, /*with_engine=*/false);
  EXPECT_EQ(get("/health").status, 503);
  json e = expect_error(post("/v1/completions", R"({"model":"tiny","prompt":"x"})"), 503,
                        "service_unavailable_error");
  EXPECT_EQ(e["code"], "loading");
  EXPECT_EQ(get("/v1/models").status, 200);
  server_->set_engine(engine_);
  EXPECT_EQ(get("/health").status, 200);
  Answer models = get("/v1/models");
  EXPECT_EQ(models.parsed()["data"][0]["id"], "tiny");
  EXPECT_EQ(models.parsed()["data"][0]["max_model_len"], 64);
  server_->begin_drain();
  EXPECT_EQ(get("/health").status, 503);
  e = expect_error(post("/v1/completions", R"({"model":"tiny","prompt":"x"})"), 503,
                   "service_unavailable_error");
  EXPECT_EQ(e["code"], "draining");
}

TEST_F(ServerTest, ClientThatGoesAwayCancelsItsRequest) {
  // 20 ms per token, 60 tokens: the stream would take >1 s; the client leaves after 2 events.
  start({}, true, std::chrono::milliseconds(20));
  auto c = client();
  int events_seen = 0;
  SseParser parser;
  httplib::Request req;
  req.method = "POST";
  req.path = "/v1/completions";
  req.body = R"({"model":"tiny","prompt":"x","max_tokens":60,"stream":true})";
  req.set_header("Content-Type", "application/json");
  req.content_receiver = [&](const char* data, size_t n, uint64_t, uint64_t) {
    events_seen += static_cast<int>(parser.push(std::string_view(data, n)).size());
    return events_seen < 2;
  };
  httplib::Response response;
  httplib::Error error = httplib::Error::Success;
  c.send(req, response, error);
  EXPECT_EQ(error, httplib::Error::Canceled);
  c.stop();
  wait_for_no_live();
  EXPECT_EQ(engine_->cancelled().size(), 1u);
  EXPECT_EQ(get("/health").status, 200);
  // With n choices every one of them is cancelled.
  SseParser parser2;
  int events_seen2 = 0;
  httplib::Request req2;  // fresh: the first send set req's Content-Length
  req2.method = "POST";
  req2.path = "/v1/completions";
  req2.set_header("Content-Type", "application/json");
  req2.body = R"({"model":"tiny","prompt":"x","max_tokens":60,"stream":true,"n":4})";
  req2.content_receiver = [&](const char* data, size_t n, uint64_t, uint64_t) {
    events_seen2 += static_cast<int>(parser2.push(std::string_view(data, n)).size());
    return events_seen2 < 2;
  };
  httplib::Response response2;
  auto c2 = client();
  c2.send(req2, response2, error);
  EXPECT_EQ(error, httplib::Error::Canceled) << response2.status << " " << response2.body;
  c2.stop();
  wait_for_no_live();
  EXPECT_EQ(engine_->cancelled().size(), 5u);
}

TEST_F(ServerTest, ConcurrentStreamsAllWellFormed) {
  start();
  constexpr int kClients = 32;
  std::vector<std::thread> threads;
  std::atomic<int> good{0};
  for (int i = 0; i < kClients; ++i) {
    threads.emplace_back([&, i] {
      auto c = client();
      int status = 0;
      const int n = 1 + i % 7;
      auto events = read_stream(
          c, "/v1/completions",
          R"({"model":"tiny","prompt":"p","stream":true,"max_tokens":)" + std::to_string(n) + "}",
          &status);
      std::string text;
      for (std::size_t k = 0; k + 1 < events.size(); ++k) {
        text += json::parse(events[k])["choices"][0]["text"].get<std::string>();
      }
      if (status == 200 && !events.empty() && events.back() == "[DONE]" &&
          text == std::string("abcdefg").substr(0, n)) {
        ++good;
      } else {
        ADD_FAILURE() << "client " << i << ": status " << status << ", " << events.size()
                      << " events, text \"" << text << "\"";
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(good.load(), kClients);
  wait_for_no_live();
  // httplib calls the logger that counts a request after the last byte is written, so a
  // client can see [DONE] before its request is counted: poll until the count settles.
  const std::string line =
      "packserve_http_requests_total{route=\"/v1/completions\",status=\"200\"} " +
      std::to_string(kClients) + "\n";
  std::string metrics;
  for (int i = 0; i < 200; ++i) {
    metrics = get("/metrics").body;
    if (metrics.find(line) != std::string::npos) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_NE(metrics.find(line), std::string::npos) << metrics;
}

}  // namespace
}  // namespace packserve::server
