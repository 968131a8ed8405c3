// openai_request_test.cc: parse + validate of completion and chat bodies: every error case
// with its status, type and param; accepted forms map to the exact typed values.
#include "packserve/server/openai_request.h"

#include <gtest/gtest.h>

#include <string>

namespace packserve::server {
namespace {

struct ErrorCase {
  const char* name;
  Endpoint endpoint;
  std::string body;
  const char* param;    // nullptr: no param
  const char* message;  // a substring of the message
};

constexpr Endpoint kC = Endpoint::kCompletions;
constexpr Endpoint kChat = Endpoint::kChatCompletions;

TEST(OpenAiRequest, EveryErrorCaseIs400WithParam) {
  const std::string deep = std::string(40, '[') + std::string(40, ']');
  const ErrorCase cases[] = {
      {"malformed", kC, R"({"model": "m", "prompt": )", nullptr, "not valid JSON"},
      {"empty body", kC, "", nullptr, "not valid JSON"},
      {"not an object", kC, "[1, 2]", nullptr, "expected a JSON object"},
      {"nan literal", kC, R"({"model":"m","prompt":"x","temperature":NaN})", nullptr,
       "not valid JSON"},
      {"deep nesting", kC, deep, nullptr, "nested deeper than 32"},
      {"invalid utf8", kC, "{\"model\":\"m\",\"prompt\":\"\xff\xfe\"}", nullptr,
       "not valid JSON"},
      {"missing model", kC, R"({"prompt": "x"})", "model", "model: required"},
      {"model wrong type", kC, R"({"model": 3, "prompt": "x"})", "model", "expected a string"},
      {"missing prompt", kC, R"({"model": "m"})", "prompt", "prompt: required"},
      {"prompt wrong type", kC, R"({"model": "m", "prompt": 5})", "prompt", "got 5"},
      {"prompt empty", kC, R"({"model": "m", "prompt": ""})", "prompt", "must not be empty"},
      {"prompt batch", kC, R"({"model": "m", "prompt": ["a", "b"]})", "prompt", "batched"},
      {"prompt bad id", kC, R"({"model": "m", "prompt": [1, -2]})", "prompt[1]", "token id"},
      {"prompt float id", kC, R"({"model": "m", "prompt": [1, 2.5]})", "prompt[1]", "token id"},
      {"missing messages", kChat, R"({"model": "m"})", "messages", "messages: required"},
      {"messages empty", kChat, R"({"model": "m", "messages": []})", "messages", "non-empty"},
      {"message no role", kChat, R"({"model": "m", "messages": [{"content": "x"}]})",
       "messages[0].role", "required"},
      {"message bad role", kChat,
       R"({"model": "m", "messages": [{"role": "wizard", "content": "x"}]})", "messages[0].role",
       "got \"wizard\""},
      {"message no content", kChat, R"({"model": "m", "messages": [{"role": "user"}]})",
       "messages[0].content", "required"},
      {"message content type", kChat,
       R"({"model": "m", "messages": [{"role": "user", "content": 7}]})", "messages[0].content",
       "a string or a list of text parts"},
      {"message image part", kChat,
       R"({"model":"m","messages":[{"role":"user","content":[{"type":"image_url"}]}]})",
       "messages[0].content[0]", "only text parts"},
      {"message extra key", kChat,
       R"({"model":"m","messages":[{"role":"user","content":"x","tool_calls":[]}]})",
       "messages[0].tool_calls", "not supported"},
      {"unknown field", kC, R"({"model": "m", "prompt": "x", "temprature": 1})", "temprature",
       "Unrecognized request argument"},
      {"max_tokens zero", kC, R"({"model": "m", "prompt": "x", "max_tokens": 0})", "max_tokens",
       "expected an integer >= 1, got 0"},
      {"max_tokens string", kC, R"({"model": "m", "prompt": "x", "max_tokens": "ten"})",
       "max_tokens", "expected an integer >= 1, got \"ten\""},
      {"max_tokens float", kC, R"({"model": "m", "prompt": "x", "max_tokens": 1.5})",
       "max_tokens", "got 1.5"},
      {"max_tokens huge", kC, R"({"model": "m", "prompt": "x", "max_tokens": 99999999999})",
       "max_tokens", "got 99999999999"},
      {"max_completion_tokens", kChat,
       R"({"model":"m","messages":[{"role":"user","content":"x"}],"max_completion_tokens":-1})",
       "max_completion_tokens", "expected an integer >= 1"},
      {"temperature negative", kC, R"({"model": "m", "prompt": "x", "temperature": -0.5})",
       "temperature", "expected a finite number >= 0"},
      {"temperature overflow", kC, R"({"model": "m", "prompt": "x", "temperature": 1e400})",
       nullptr, "not valid JSON"},
      {"temperature string", kC, R"({"model": "m", "prompt": "x", "temperature": "NaN"})",
       "temperature", "got \"NaN\""},
      {"top_p zero", kC, R"({"model": "m", "prompt": "x", "top_p": 0})", "top_p", "(0, 1]"},
      {"top_p big", kC, R"({"model": "m", "prompt": "x", "top_p": 1.5})", "top_p", "(0, 1]"},
      {"top_k negative", kC, R"({"model": "m", "prompt": "x", "top_k": -2})", "top_k", ">= 0"},
      {"min_p big", kC, R"({"model": "m", "prompt": "x", "min_p": 2})", "min_p", "[0, 1]"},
      {"seed float", kC, R"({"model": "m", "prompt": "x", "seed": 1.5})", "seed", "an integer"},
      {"stop number", kC, R"({"model": "m", "prompt": "x", "stop": 3})", "stop", "non-empty"},
      {"stop empty", kC, R"({"model": "m", "prompt": "x", "stop": ["a", ""]})", "stop[1]",
       "a non-empty string"},
      {"stop too many", kC,
       R"({"model":"m","prompt":"x","stop":["1","2","3","4","5","6","7","8","9","10","11","12","13","14","15","16","17"]})",
       "stop", "at most 16"},
      {"n two", kC, R"({"model": "m", "prompt": "x", "n": 2})", "n", "expected 1"},
      {"best_of", kC, R"({"model": "m", "prompt": "x", "best_of": 3})", "best_of", "expected 1"},
      {"echo", kC, R"({"model": "m", "prompt": "x", "echo": true})", "echo", "not supported"},
      {"presence_penalty", kC, R"({"model": "m", "prompt": "x", "presence_penalty": 0.5})",
       "presence_penalty", "not supported"},
      {"frequency_penalty", kChat,
       R"({"model":"m","messages":[{"role":"user","content":"x"}],"frequency_penalty":-1})",
       "frequency_penalty", "not supported"},
      {"logprobs 5", kC, R"({"model": "m", "prompt": "x", "logprobs": 5})", "logprobs",
       "expected 0"},
      {"chat logprobs int", kChat,
       R"({"model":"m","messages":[{"role":"user","content":"x"}],"logprobs":1})", "logprobs",
       "true or false"},
      {"top_logprobs", kChat,
       R"({"model":"m","messages":[{"role":"user","content":"x"}],"top_logprobs":3})",
       "top_logprobs", "expected 0"},
      {"stream string", kC, R"({"model": "m", "prompt": "x", "stream": "yes"})", "stream",
       "true or false"},
      {"stream_options w/o stream", kC,
       R"({"model":"m","prompt":"x","stream_options":{"include_usage":true}})", "stream_options",
       "only allowed when stream is true"},
      {"include_usage type", kC,
       R"({"model":"m","prompt":"x","stream":true,"stream_options":{"include_usage":1}})",
       "stream_options.include_usage", "true or false"},
      {"prompt in chat", kChat,
       R"({"model":"m","messages":[{"role":"user","content":"x"}],"prompt":"y"})", "prompt",
       "Unrecognized"},
  };
  for (const ErrorCase& c : cases) {
    SCOPED_TRACE(c.name);
    ApiResult<OpenAiRequest> r = parse_openai_request(c.body, c.endpoint);
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.error().status, 400);
    EXPECT_EQ(r.error().type, "invalid_request_error");
    if (c.param) {
      ASSERT_TRUE(r.error().param.has_value());
      EXPECT_EQ(*r.error().param, c.param);
    } else {
      EXPECT_FALSE(r.error().param.has_value()) << *r.error().param;
    }
    EXPECT_NE(r.error().message.find(c.message), std::string::npos) << r.error().message;
  }
}

TEST(OpenAiRequest, CompletionFieldsMapExactly) {
  ApiResult<OpenAiRequest> r = parse_openai_request(
      R"({"model": "tiny", "prompt": "hello", "max_tokens": 7, "temperature": 0,
          "top_p": 0.5, "top_k": -1, "min_p": 0.1, "seed": -1, "stop": "\n",
          "n": 1, "presence_penalty": 0, "frequency_penalty": 0.0, "logprobs": 0,
          "stream": true, "stream_options": {"include_usage": true}, "user": "u",
          "ignore_eos": true, "stop_token_ids": [5, 6], "echo": false, "suffix": null})",
      kC);
  ASSERT_TRUE(r.ok()) << r.error().message;
  const OpenAiRequest& q = r.value();
  EXPECT_EQ(q.model, "tiny");
  EXPECT_EQ(q.prompt_text, std::optional<std::string>("hello"));
  EXPECT_FALSE(q.prompt_token_ids.has_value());
  EXPECT_EQ(q.max_tokens, std::optional<int32_t>(7));
  EXPECT_EQ(q.temperature, 0.0);
  EXPECT_EQ(q.top_p, 0.5);
  EXPECT_EQ(q.top_k, 0);
  EXPECT_EQ(q.min_p, 0.1);
  EXPECT_EQ(q.seed, std::optional<uint64_t>(UINT64_MAX));  // -1 as uint64
  EXPECT_EQ(q.stop, std::vector<std::string>{"\n"});
  EXPECT_TRUE(q.logprobs);
  EXPECT_TRUE(q.stream);
  EXPECT_TRUE(q.include_usage);
  EXPECT_TRUE(q.ignore_eos);
  EXPECT_EQ(q.stop_token_ids, (std::vector<int32_t>{5, 6}));
  const engine::SamplingParams p = to_sampling_params(q, 7);
  EXPECT_EQ(p.max_tokens, 7);
  EXPECT_EQ(p.temperature, 0.0);
  EXPECT_EQ(p.stop, q.stop);
  EXPECT_TRUE(p.logprobs);
}

TEST(OpenAiRequest, PromptForms) {
  auto ids = parse_openai_request(R"({"model": "m", "prompt": [1, 2, 3]})", kC);
  ASSERT_TRUE(ids.ok());
  EXPECT_EQ(*ids.value().prompt_token_ids, (std::vector<int32_t>{1, 2, 3}));
  auto nested = parse_openai_request(R"({"model": "m", "prompt": [[4]]})", kC);
  ASSERT_TRUE(nested.ok());
  EXPECT_EQ(*nested.value().prompt_token_ids, (std::vector<int32_t>{4}));
  auto one = parse_openai_request(R"({"model": "m", "prompt": ["hi"]})", kC);
  ASSERT_TRUE(one.ok());
  EXPECT_EQ(*one.value().prompt_text, "hi");
  auto defaults = parse_openai_request(R"({"model": "m", "prompt": "x", "max_tokens": null})", kC);
  ASSERT_TRUE(defaults.ok());
  EXPECT_FALSE(defaults.value().max_tokens.has_value());
  EXPECT_EQ(defaults.value().temperature, 1.0);
  EXPECT_FALSE(defaults.value().stream);
}

TEST(OpenAiRequest, ChatMessages) {
  auto r = parse_openai_request(
      R"({"model": "m", "messages": [{"role": "developer", "content": "be brief"},
          {"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]},
          {"role": "assistant", "content": null}], "max_tokens": 3, "max_completion_tokens": 5,
          "logprobs": true, "top_logprobs": 0})",
      kChat);
  ASSERT_TRUE(r.ok()) << r.error().message;
  const auto& m = r.value().messages;
  ASSERT_EQ(m.size(), 3u);
  EXPECT_EQ(m[0].role, "system");
  EXPECT_EQ(m[0].content, "be brief");
  EXPECT_EQ(m[1].content, "ab");
  EXPECT_EQ(m[2].role, "assistant");
  EXPECT_EQ(m[2].content, "");
  EXPECT_EQ(r.value().max_tokens, std::optional<int32_t>(5));
  EXPECT_EQ(r.value().max_tokens_field, "max_completion_tokens");
  EXPECT_TRUE(r.value().logprobs);
}

TEST(OpenAiRequest, ResolveMaxTokensAgainstContext) {
  OpenAiRequest c;
  c.endpoint = kC;
  // Default 16, clipped to the room left: context 20, prompt 10 -> 10.
  EXPECT_EQ(resolve_max_tokens(c, 1, 100).value(), 16);
  EXPECT_EQ(resolve_max_tokens(c, 10, 20).value(), 10);
  // Prompt fills the context: 400 on prompt.
  auto full = resolve_max_tokens(c, 20, 20);
  ASSERT_FALSE(full.ok());
  EXPECT_EQ(full.error().status, 400);
  EXPECT_EQ(*full.error().param, "prompt");
  EXPECT_NE(full.error().message.find("20 tokens"), std::string::npos);
  // Explicit max_tokens must fit: 10 + 11 > 20.
  c.max_tokens = 11;
  auto over = resolve_max_tokens(c, 10, 20);
  ASSERT_FALSE(over.ok());
  EXPECT_EQ(*over.error().param, "max_tokens");
  c.max_tokens = 10;
  EXPECT_EQ(resolve_max_tokens(c, 10, 20).value(), 10);
  // Chat default: the whole rest of the context.
  OpenAiRequest chat;
  chat.endpoint = kChat;
  EXPECT_EQ(resolve_max_tokens(chat, 5, 64).value(), 59);
  auto chat_full = resolve_max_tokens(chat, 64, 64);
  ASSERT_FALSE(chat_full.ok());
  EXPECT_EQ(*chat_full.error().param, "messages");
  EXPECT_FALSE(resolve_max_tokens(chat, 0, 64).ok());
}

TEST(OpenAiRequest, NestingDepthScan) {
  EXPECT_EQ(json_nesting_depth("{}", 10), 1);
  EXPECT_EQ(json_nesting_depth(R"({"a": [[1], {"b": []}]})", 10), 4);  // { [ { [
  EXPECT_EQ(json_nesting_depth(R"({"a": "[[[[[\"[["})", 10), 1);  // brackets inside strings
  EXPECT_EQ(json_nesting_depth(std::string(1000, '['), 5), 6);    // stops past the limit
}

TEST(OpenAiRequest, ErrorBodyShape) {
  EXPECT_EQ(error_body(bad_request("max_tokens: bad", std::string("max_tokens"))),
            R"({"error":{"code":null,"message":"max_tokens: bad","param":"max_tokens","type":"invalid_request_error"}})");
  EXPECT_EQ(error_body(ApiError{429, "rate_limit_error", "full", std::nullopt,
                                std::string("queue_full")}),
            R"({"error":{"code":"queue_full","message":"full","param":null,"type":"rate_limit_error"}})");
}

}  // namespace
}  // namespace packserve::server
