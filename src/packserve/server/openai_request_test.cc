// openai_request_test.cc: parse + validate of completion and chat bodies: every error case
// with its status, type and param; accepted forms map to the exact typed values.
#include "packserve/server/openai_request.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <set>
#include <string>

#include "packserve/server/request_json.h"

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
      {"invalid utf8", kC, "{\"model\":\"m\",\"prompt\":\"\xff\xfe\"}", nullptr, "not valid JSON"},
      {"missing model", kC, R"({"prompt": "x"})", "model", "model: required"},
      {"model wrong type", kC, R"({"model": 3, "prompt": "x"})", "model", "expected a string"},
      {"missing prompt", kC, R"({"model": "m"})", "prompt", "prompt: required"},
      {"prompt wrong type", kC, R"({"model": "m", "prompt": 5})", "prompt", "got 5"},
      {"prompt empty", kC, R"({"model": "m", "prompt": ""})", "prompt", "must not be empty"},
      {"prompt batch mixed", kC, R"({"model": "m", "prompt": ["a", [1]]})", "prompt[1]",
       "a string, as prompt[0]"},
      {"prompt batch empty", kC, R"({"model": "m", "prompt": ["a", ""]})", "prompt[1]",
       "must not be empty"},
      {"prompt batch empty ids", kC, R"({"model": "m", "prompt": [[1], []]})", "prompt[1]",
       "a string or a non-empty list of token ids"},
      {"prompt empty list", kC, R"({"model": "m", "prompt": []})", "prompt", "got []"},
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
      {"max_tokens float", kC, R"({"model": "m", "prompt": "x", "max_tokens": 1.5})", "max_tokens",
       "got 1.5"},
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
      {"n zero", kC, R"({"model": "m", "prompt": "x", "n": 0})", "n",
       "expected an integer in [1, 128], got 0"},
      {"n too many", kC, R"({"model": "m", "prompt": "x", "n": 129})", "n", "in [1, 128]"},
      {"n string", kChat, R"({"model":"m","messages":[{"role":"user","content":"x"}],"n":"2"})",
       "n", "got \"2\""},
      {"prompts x n", kC, R"({"model": "m", "prompt": ["a", "b", "c"], "n": 50})", "n",
       "3 prompts x n 50 = 150 choices exceeds the 128"},
      {"best_of above n", kC, R"({"model": "m", "prompt": "x", "n": 2, "best_of": 3})", "best_of",
       "expected n (2): best_of greater than n is not supported, got 3"},
      {"echo", kC, R"({"model": "m", "prompt": "x", "echo": 1})", "echo", "expected true or false"},
      {"allowed_token_ids", kC, R"({"model": "m", "prompt": "x", "allowed_token_ids": []})",
       "allowed_token_ids", "a non-empty list of token ids"},
      {"bad_words not a list", kC, R"({"model": "m", "prompt": "x", "bad_words": "no"})",
       "bad_words", "expected a list of at most 64 words (strings), got \"no\""},
      {"bad_words blank", kC, R"({"model": "m", "prompt": "x", "bad_words": ["ok", " \n"]})",
       "bad_words[1]", "a word (a string with text other than whitespace)"},
      {"bad_words number", kChat,
       R"({"model":"m","messages":[{"role":"user","content":"x"}],"bad_words":[3]})",
       "bad_words[0]", "got 3"},
      {"include_stop_str_in_output", kC,
       R"({"model": "m", "prompt": "x", "include_stop_str_in_output": "yes"})",
       "include_stop_str_in_output", "expected true or false"},
      {"echo in chat", kChat,
       R"({"model":"m","messages":[{"role":"user","content":"x"}],"echo":true})", "echo",
       "Unrecognized request argument"},
      {"presence_penalty", kC, R"({"model": "m", "prompt": "x", "presence_penalty": 2.5})",
       "presence_penalty", "expected a number in [-2, 2], got 2.5"},
      {"frequency_penalty", kChat,
       R"({"model":"m","messages":[{"role":"user","content":"x"}],"frequency_penalty":"1"})",
       "frequency_penalty", "expected a number in [-2, 2], got \"1\""},
      {"min_tokens", kC, R"({"model": "m", "prompt": "x", "min_tokens": -1})", "min_tokens",
       "expected an integer >= 0, got -1"},
      {"repetition_penalty", kC, R"({"model": "m", "prompt": "x", "repetition_penalty": 0})",
       "repetition_penalty", "expected a finite number > 0 (1 = off), got 0"},
      {"logit_bias list", kC, R"({"model": "m", "prompt": "x", "logit_bias": [1]})", "logit_bias",
       "expected an object of token id -> bias"},
      {"logit_bias key", kC, R"({"model": "m", "prompt": "x", "logit_bias": {"-5": 1}})",
       "logit_bias", "expected token ids as decimal strings, got \"-5\""},
      {"logit_bias huge key", kC,
       R"({"model": "m", "prompt": "x", "logit_bias": {"99999999999": 1}})", "logit_bias",
       "decimal strings"},
      {"logit_bias value", kChat,
       R"({"model":"m","messages":[{"role":"user","content":"x"}],"logit_bias":{"7":101}})",
       "logit_bias[7]", "expected a number in [-100, 100], got 101"},
      {"logprobs 21", kC, R"({"model": "m", "prompt": "x", "logprobs": 21})", "logprobs",
       "expected an integer in [0, 20]"},
      {"chat logprobs int", kChat,
       R"({"model":"m","messages":[{"role":"user","content":"x"}],"logprobs":1})", "logprobs",
       "true or false"},
      {"top_logprobs without logprobs", kChat,
       R"({"model":"m","messages":[{"role":"user","content":"x"}],"top_logprobs":3})",
       "top_logprobs", "needs \"logprobs\": true"},
      {"top_logprobs 21", kChat,
       R"({"model":"m","messages":[{"role":"user","content":"x"}],"logprobs":true,"top_logprobs":21})",
       "top_logprobs", "expected an integer in [0, 20], got 21"},
      {"top_logprobs on completions", kC, R"({"model": "m", "prompt": "x", "top_logprobs": 1})",
       "top_logprobs", "Unrecognized"},
      {"stream string", kC, R"({"model": "m", "prompt": "x", "stream": "yes"})", "stream",
       "true or false"},
      {"stream_options w/o stream", kC,
       R"({"model":"m","prompt":"x","stream_options":{"include_usage":true}})", "stream_options",
       "only allowed when stream is true"},
      {"include_usage type", kC,
       R"({"model":"m","prompt":"x","stream":true,"stream_options":{"include_usage":1}})",
       "stream_options.include_usage", "true or false"},
      {"priority float", kC, R"({"model":"m","prompt":"x","priority":0.5})", "priority",
       "an integer (lower is scheduled first)"},
      {"continuous_usage_stats type", kC,
       R"({"model":"m","prompt":"x","stream":true,"stream_options":{"continuous_usage_stats":0}})",
       "stream_options.continuous_usage_stats", "true or false"},
      {"unknown stream option", kC,
       R"({"model":"m","prompt":"x","stream":true,"stream_options":{"usage":true}})",
       "stream_options.usage", "not supported (include_usage, continuous_usage_stats)"},
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
          "ignore_eos": true, "stop_token_ids": [5, 6], "echo": false, "suffix": null,
          "min_tokens": 3, "skip_special_tokens": false, "priority": -2,
          "include_stop_str_in_output": true, "allowed_token_ids": [3, 4],
          "bad_words": ["  never", "x y"]})",
      kC);
  ASSERT_TRUE(r.ok()) << r.error().message;
  const OpenAiRequest& q = r.value();
  EXPECT_EQ(q.model, "tiny");
  ASSERT_EQ(q.prompts.size(), 1u);
  EXPECT_EQ(q.prompts[0].text, std::optional<std::string>("hello"));
  EXPECT_FALSE(q.prompts[0].token_ids.has_value());
  EXPECT_EQ(q.n, 1);
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
  EXPECT_EQ(q.priority, -2);
  EXPECT_TRUE(q.ignore_eos);
  EXPECT_EQ(q.stop_token_ids, (std::vector<int32_t>{5, 6}));
  EXPECT_EQ(q.min_tokens, 3);
  EXPECT_EQ(q.bad_words, (std::vector<std::string>{"  never", "x y"}));  // tokenized later
  const engine::SamplingParams p = to_sampling_params(q, 7);
  EXPECT_EQ(p.max_tokens, 7);
  EXPECT_EQ(p.min_tokens, 3);
  EXPECT_EQ(p.temperature, 0.0);
  EXPECT_EQ(p.stop, q.stop);
  EXPECT_TRUE(p.logprobs);
  EXPECT_EQ(p.seed, std::optional<uint64_t>(UINT64_MAX));  // choice 0 keeps the seed
  EXPECT_FALSE(p.adjusts_logits());
  EXPECT_FALSE(p.skip_special_tokens);
  EXPECT_TRUE(p.include_stop_str_in_output);
  EXPECT_EQ(p.allowed_token_ids, (std::vector<int32_t>{3, 4}));
  // The default leaves special tokens out; a non-boolean is a 400 naming the field.
  ApiResult<OpenAiRequest> d = parse_openai_request(R"({"model": "tiny", "prompt": "x"})", kC);
  ASSERT_TRUE(d.ok());
  EXPECT_TRUE(to_sampling_params(d.value(), 7).skip_special_tokens);
  ApiResult<OpenAiRequest> bad =
      parse_openai_request(R"({"model": "tiny", "prompt": "x", "skip_special_tokens": 1})", kC);
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.error().param, "skip_special_tokens");
}

// vLLM's truncate_prompt_tokens: the last k prompt tokens; -1: the model's context; over the
// context or 0 a 400 naming the field.
TEST(OpenAiRequest, TruncatePromptTokensKeepsTheLastOnes) {
  const auto request = [](const std::string& extra) {
    ApiResult<OpenAiRequest> r =
        parse_openai_request(R"({"model": "m", "prompt": "x")" + extra + "}", kC);
    EXPECT_TRUE(r.ok()) << r.error().message;
    return r.value();
  };
  std::vector<int32_t> ids = {1, 2, 3, 4, 5, 6};
  ApiResult<bool> cut = truncate_prompt(request(""), 100, ids);
  ASSERT_TRUE(cut.ok());
  EXPECT_FALSE(cut.value());
  EXPECT_EQ(ids.size(), 6u);
  cut = truncate_prompt(request(R"(, "truncate_prompt_tokens": 4)"), 100, ids);
  ASSERT_TRUE(cut.ok());
  EXPECT_TRUE(cut.value());
  EXPECT_EQ(ids, (std::vector<int32_t>{3, 4, 5, 6}));
  cut = truncate_prompt(request(R"(, "truncate_prompt_tokens": 4)"), 100, ids);  // fits now
  EXPECT_FALSE(cut.value());
  cut = truncate_prompt(request(R"(, "truncate_prompt_tokens": -1)"), 3, ids);
  EXPECT_TRUE(cut.value());
  EXPECT_EQ(ids, (std::vector<int32_t>{4, 5, 6}));
  cut = truncate_prompt(request(R"(, "truncate_prompt_tokens": 9)"), 8, ids);
  ASSERT_FALSE(cut.ok());
  EXPECT_EQ(cut.error().param, "truncate_prompt_tokens");
  EXPECT_EQ(cut.error().message,
            "truncate_prompt_tokens = 9 exceeds the model's context of 8 tokens");
  for (const char* bad : {"0", "-2", "1.5", "\"4\""}) {
    ApiResult<OpenAiRequest> r = parse_openai_request(
        std::string(R"({"model": "m", "prompt": "x", "truncate_prompt_tokens": )") + bad + "}", kC);
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_EQ(r.error().param, "truncate_prompt_tokens");
  }
}

TEST(OpenAiRequest, PenaltiesAndLogitBiasMapToTheEngine) {
  ApiResult<OpenAiRequest> r = parse_openai_request(
      R"({"model":"m","messages":[{"role":"user","content":"x"}],"presence_penalty":-2,
          "frequency_penalty":0.75,"repetition_penalty":1.1,"logit_bias":{"7":-100,"50256":2.5}})",
      kChat);
  ASSERT_TRUE(r.ok()) << r.error().message;
  const engine::SamplingParams p = to_sampling_params(r.value(), 5);
  EXPECT_EQ(p.presence_penalty, -2.0);
  EXPECT_EQ(p.frequency_penalty, 0.75);
  EXPECT_EQ(p.repetition_penalty, 1.1);
  EXPECT_EQ(p.logit_bias, (std::vector<std::pair<int32_t, double>>{{50256, 2.5}, {7, -100.0}}));
  EXPECT_TRUE(p.validate().ok());
}

TEST(OpenAiRequest, PromptForms) {
  auto ids = parse_openai_request(R"({"model": "m", "prompt": [1, 2, 3]})", kC);
  ASSERT_TRUE(ids.ok());
  ASSERT_EQ(ids.value().prompts.size(), 1u);
  EXPECT_EQ(*ids.value().prompts[0].token_ids, (std::vector<int32_t>{1, 2, 3}));
  auto nested = parse_openai_request(R"({"model": "m", "prompt": [[4]]})", kC);
  ASSERT_TRUE(nested.ok());
  ASSERT_EQ(nested.value().prompts.size(), 1u);
  EXPECT_EQ(*nested.value().prompts[0].token_ids, (std::vector<int32_t>{4}));
  auto one = parse_openai_request(R"({"model": "m", "prompt": ["hi"]})", kC);
  ASSERT_TRUE(one.ok());
  ASSERT_EQ(one.value().prompts.size(), 1u);
  EXPECT_EQ(*one.value().prompts[0].text, "hi");
  EXPECT_EQ(prompt_field(one.value(), 0), "prompt");
  auto texts = parse_openai_request(R"({"model": "m", "prompt": ["a", "bc"], "n": 3})", kC);
  ASSERT_TRUE(texts.ok()) << texts.error().message;
  ASSERT_EQ(texts.value().prompts.size(), 2u);
  EXPECT_EQ(*texts.value().prompts[1].text, "bc");
  EXPECT_EQ(texts.value().n, 3);
  EXPECT_EQ(prompt_field(texts.value(), 1), "prompt[1]");
  auto lists = parse_openai_request(R"({"model": "m", "prompt": [[1, 2], [3]], "best_of": 1})", kC);
  ASSERT_TRUE(lists.ok()) << lists.error().message;
  ASSERT_EQ(lists.value().prompts.size(), 2u);
  EXPECT_EQ(*lists.value().prompts[0].token_ids, (std::vector<int32_t>{1, 2}));
  EXPECT_EQ(*lists.value().prompts[1].token_ids, (std::vector<int32_t>{3}));
  auto max = parse_openai_request(R"({"model": "m", "prompt": [[1], [2]], "n": 64})", kC);
  ASSERT_TRUE(max.ok()) << max.error().message;  // 2 x 64 = kMaxChoices
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
  EXPECT_EQ(r.value().top_logprobs, 0);
  auto top = parse_openai_request(
      R"({"model":"m","messages":[{"role":"user","content":"x"}],"logprobs":true,"top_logprobs":5})",
      kChat);
  ASSERT_TRUE(top.ok()) << top.error().message;
  EXPECT_EQ(to_sampling_params(top.value(), 1).top_logprobs, 5);
  auto completions = parse_openai_request(R"({"model":"m","prompt":"x","logprobs":3})", kC);
  ASSERT_TRUE(completions.ok()) << completions.error().message;
  EXPECT_TRUE(completions.value().logprobs);
  EXPECT_EQ(completions.value().top_logprobs, 3);
}

TEST(OpenAiRequest, ChoiceSeedsAreDistinctAndKeepTheFirst) {
  for (uint64_t seed : {uint64_t{0}, uint64_t{1}, UINT64_MAX}) {
    std::set<uint64_t> seen;
    for (int c = 0; c < kMaxChoices; ++c) seen.insert(choice_seed(seed, c));
    EXPECT_EQ(seen.size(), static_cast<std::size_t>(kMaxChoices)) << seed;
    EXPECT_EQ(choice_seed(seed, 0), seed);
    EXPECT_EQ(choice_seed(seed, 5), choice_seed(seed, 5));
  }
  OpenAiRequest r;
  r.seed = 42;
  EXPECT_EQ(to_sampling_params(r, 3, 0).seed, std::optional<uint64_t>(42));
  EXPECT_EQ(to_sampling_params(r, 3, 2).seed, std::optional<uint64_t>(choice_seed(42, 2)));
  r.seed.reset();
  EXPECT_FALSE(to_sampling_params(r, 3, 2).seed.has_value());  // the engine's RNG
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
  // min_tokens within max_tokens, the given one or the default.
  c.min_tokens = 10;
  EXPECT_EQ(resolve_max_tokens(c, 10, 20).value(), 10);
  c.min_tokens = 11;
  auto above = resolve_max_tokens(c, 1, 100);
  ASSERT_FALSE(above.ok());
  EXPECT_EQ(*above.error().param, "min_tokens");
  EXPECT_EQ(above.error().message, "min_tokens: 11 is more than max_tokens (10)");
  c.max_tokens.reset();
  c.min_tokens = 17;
  EXPECT_EQ(resolve_max_tokens(c, 1, 100).error().message,
            "min_tokens: 17 is more than max_tokens (16)");
  c.min_tokens = 0;
  // Chat default: the whole rest of the context.
  OpenAiRequest chat;
  chat.endpoint = kChat;
  EXPECT_EQ(resolve_max_tokens(chat, 5, 64).value(), 59);
  auto chat_full = resolve_max_tokens(chat, 64, 64);
  ASSERT_FALSE(chat_full.ok());
  EXPECT_EQ(*chat_full.error().param, "messages");
  EXPECT_FALSE(resolve_max_tokens(chat, 0, 64).ok());
  // A batch names the prompt that does not fit.
  OpenAiRequest batch;
  batch.prompts.resize(3);
  auto third = resolve_max_tokens(batch, 20, 20, 2);
  ASSERT_FALSE(third.ok());
  EXPECT_EQ(*third.error().param, "prompt[2]");
}

TEST(OpenAiRequest, NestingDepthScan) {
  EXPECT_EQ(json_nesting_depth("{}", 10), 1);
  EXPECT_EQ(json_nesting_depth(R"({"a": [[1], {"b": []}]})", 10), 4);  // { [ { [
  EXPECT_EQ(json_nesting_depth(R"({"a": "[[[[[\"[["})", 10), 1);       // brackets inside strings
  EXPECT_EQ(json_nesting_depth(std::string(1000, '['), 5), 6);         // stops past the limit
}

TEST(OpenAiRequest, ErrorBodyShape) {
  EXPECT_EQ(
      error_body(bad_request("max_tokens: bad", std::string("max_tokens"))),
      R"({"error":{"code":null,"message":"max_tokens: bad","param":"max_tokens","type":"invalid_request_error"}})");
  EXPECT_EQ(
      error_body(
          ApiError{429, "rate_limit_error", "full", std::nullopt, std::string("queue_full")}),
      R"({"error":{"code":"queue_full","message":"full","param":null,"type":"rate_limit_error"}})");
}

}  // namespace
}  // namespace packserve::server
