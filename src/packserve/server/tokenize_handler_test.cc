// tokenize_handler_test.cc: POST /tokenize and /detokenize. The parser's every error case
// (status, type, param, message) and accepted forms; over HTTP on loopback with the scripted
// FakeEngine: the tokens equal those the generation routes submit, the round trip, every
// error path, the API key, the server states; and over the real EngineAdapter (the engine on a
// fake backend, the hand-made test tokenizer, a Llama-3 chat template) against the tokenizer
// and the chat template called directly.
#include "packserve/server/tokenize_handler.h"

#include <gtest/gtest.h>
#include <httplib.h>

#include <algorithm>
#include <chrono>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "packserve/engine/engine_test_util.h"
#include "packserve/server/engine_adapter.h"
#include "packserve/server/fake_engine_test_util.h"
#include "packserve/server/http_test_util.h"

namespace packserve::server {
namespace {

using nlohmann::json;
using testing::Answer;
using testing::ServerTest;

enum class Route { kTokenize, kDetokenize };

struct ErrorCase {
  const char* name;
  Route route;
  std::string body;
  const char* param;    // nullptr: no param
  const char* message;  // a substring of the message
};

std::optional<ApiError> parse_error(Route route, const std::string& body) {
  if (route == Route::kTokenize) {
    auto r = parse_tokenize_request(body);
    if (r.ok()) return std::nullopt;
    return r.error();
  }
  auto r = parse_detokenize_request(body);
  if (r.ok()) return std::nullopt;
  return r.error();
}

constexpr Route kTok = Route::kTokenize;
constexpr Route kDetok = Route::kDetokenize;

TEST(ServerTokenizeRequest, EveryErrorCaseIs400WithParam) {
  const std::string deep =
      R"({"model":"m","prompt":)" + std::string(40, '[') + std::string(40, ']') + "}";
  const ErrorCase cases[] = {
      {"malformed", kTok, R"({"model": "m", "prompt": )", nullptr, "not valid JSON"},
      {"not an object", kTok, R"(["m"])", nullptr, "expected a JSON object"},
      {"deep nesting", kTok, deep, nullptr, "nested deeper than 32"},
      {"missing model", kTok, R"({"prompt": "x"})", "model", "model: required"},
      {"model wrong type", kTok, R"({"model": 1, "prompt": "x"})", "model", "expected a string"},
      {"neither prompt nor messages", kTok, R"({"model": "m"})", "prompt",
       "exactly one of prompt and messages"},
      {"both prompt and messages", kTok,
       R"({"model":"m","prompt":"x","messages":[{"role":"user","content":"x"}]})", "messages",
       "exactly one of prompt (text) and messages (chat)"},
      {"prompt number", kTok, R"({"model": "m", "prompt": 5})", "prompt",
       "prompt: expected a string, got 5"},
      {"prompt token ids", kTok, R"({"model": "m", "prompt": [1, 2]})", "prompt",
       "expected a string, got [1,2]"},
      {"prompt null", kTok, R"({"model": "m", "prompt": null})", "prompt", "got null"},
      {"prompt empty", kTok, R"({"model": "m", "prompt": ""})", "prompt", "must not be empty"},
      {"messages empty", kTok, R"({"model": "m", "messages": []})", "messages", "non-empty"},
      {"messages string", kTok, R"({"model": "m", "messages": "hi"})", "messages",
       "a non-empty list of messages"},
      {"message bad role", kTok, R"({"model":"m","messages":[{"role":"bot","content":"x"}]})",
       "messages[0].role", "got \"bot\""},
      {"message content type", kTok, R"({"model":"m","messages":[{"role":"user","content":1}]})",
       "messages[0].content", "a string or a list of text parts"},
      {"add_special_tokens type", kTok, R"({"model":"m","prompt":"x","add_special_tokens":1})",
       "add_special_tokens", "expected true or false, got 1"},
      {"add_special_tokens with messages", kTok,
       R"({"model":"m","messages":[{"role":"user","content":"x"}],"add_special_tokens":true})",
       "add_special_tokens", "only with prompt"},
      {"add_generation_prompt type", kTok,
       R"({"model":"m","messages":[{"role":"user","content":"x"}],"add_generation_prompt":"no"})",
       "add_generation_prompt", "expected true or false, got \"no\""},
      {"add_generation_prompt with prompt", kTok,
       R"({"model":"m","prompt":"x","add_generation_prompt":false})", "add_generation_prompt",
       "only with messages"},
      {"unknown field", kTok, R"({"model":"m","prompt":"x","max_tokens":3})", "max_tokens",
       "Unrecognized request argument supplied: max_tokens"},
      {"detok malformed", kDetok, R"({"model":"m","tokens":[1,)", nullptr, "not valid JSON"},
      {"detok missing model", kDetok, R"({"tokens": [1]})", "model", "model: required"},
      {"detok missing tokens", kDetok, R"({"model": "m"})", "tokens", "tokens: required"},
      {"detok tokens string", kDetok, R"({"model": "m", "tokens": "12"})", "tokens",
       "expected a list of token ids, got \"12\""},
      {"detok negative id", kDetok, R"({"model": "m", "tokens": [1, -1]})", "tokens[1]",
       "expected a token id (an integer >= 0), got -1"},
      {"detok float id", kDetok, R"({"model": "m", "tokens": [1, 2, 3.5]})", "tokens[2]",
       "got 3.5"},
      {"detok string id", kDetok, R"({"model": "m", "tokens": ["7"]})", "tokens[0]", "got \"7\""},
      {"detok huge id", kDetok, R"({"model": "m", "tokens": [4294967296]})", "tokens[0]",
       "got 4294967296"},
      {"detok unknown field", kDetok, R"({"model":"m","tokens":[1],"prompt":"x"})", "prompt",
       "Unrecognized request argument supplied: prompt"},
  };
  for (const ErrorCase& c : cases) {
    SCOPED_TRACE(c.name);
    std::optional<ApiError> error = parse_error(c.route, c.body);
    ASSERT_TRUE(error.has_value());
    EXPECT_EQ(error->status, 400);
    EXPECT_EQ(error->type, "invalid_request_error");
    if (c.param) {
      ASSERT_TRUE(error->param.has_value());
      EXPECT_EQ(*error->param, c.param);
    } else {
      EXPECT_FALSE(error->param.has_value()) << *error->param;
    }
    EXPECT_NE(error->message.find(c.message), std::string::npos) << error->message;
  }
}

TEST(ServerTokenizeRequest, AcceptedFormsMapExactly) {
  auto text = parse_tokenize_request(R"({"model":"m","prompt":"hi"})");
  ASSERT_TRUE(text.ok()) << text.error().message;
  EXPECT_EQ(text.value().model, "m");
  EXPECT_EQ(text.value().prompt, "hi");
  EXPECT_FALSE(text.value().messages.has_value());
  EXPECT_TRUE(text.value().add_special_tokens);  // as a /v1/completions text prompt
  auto plain = parse_tokenize_request(R"({"model":"m","prompt":"hi","add_special_tokens":false})");
  ASSERT_TRUE(plain.ok()) << plain.error().message;
  EXPECT_FALSE(plain.value().add_special_tokens);
  // null is "not given", as for the optional fields of the generation routes.
  auto null_flag =
      parse_tokenize_request(R"({"model":"m","prompt":"hi","add_special_tokens":null})");
  ASSERT_TRUE(null_flag.ok()) << null_flag.error().message;
  EXPECT_TRUE(null_flag.value().add_special_tokens);

  auto chat = parse_tokenize_request(R"({"model":"m","messages":[
      {"role":"developer","content":"be brief"},
      {"role":"user","content":[{"type":"text","text":"a"},{"type":"text","text":"b"}]}]})");
  ASSERT_TRUE(chat.ok()) << chat.error().message;
  EXPECT_FALSE(chat.value().prompt.has_value());
  ASSERT_TRUE(chat.value().messages.has_value());
  ASSERT_EQ(chat.value().messages->size(), 2u);
  EXPECT_EQ((*chat.value().messages)[0].role, "system");
  EXPECT_EQ((*chat.value().messages)[0].content, "be brief");
  EXPECT_EQ((*chat.value().messages)[1].content, "ab");
  EXPECT_TRUE(chat.value().add_generation_prompt);
  auto no_gen = parse_tokenize_request(
      R"({"model":"m","messages":[{"role":"user","content":"x"}],"add_generation_prompt":false})");
  ASSERT_TRUE(no_gen.ok()) << no_gen.error().message;
  EXPECT_FALSE(no_gen.value().add_generation_prompt);

  auto detok = parse_detokenize_request(R"({"model":"m","tokens":[0,5,2147483647]})");
  ASSERT_TRUE(detok.ok()) << detok.error().message;
  EXPECT_EQ(detok.value().tokens, (std::vector<int32_t>{0, 5, 2147483647}));
  auto empty = parse_detokenize_request(R"({"model":"m","tokens":[]})");
  ASSERT_TRUE(empty.ok()) << empty.error().message;
  EXPECT_TRUE(empty.value().tokens.empty());
}

// ---- over HTTP, FakeEngine (one token per byte, vocab 256, context 64) ----

std::vector<int32_t> bytes_of(const std::string& text) {
  std::vector<int32_t> ids;
  for (unsigned char c : text) ids.push_back(c);
  return ids;
}

// A text prompt's tokens are the ones /v1/completions submits; messages' the ones
// /v1/chat/completions submits; neither route submits anything itself.
TEST_F(ServerTest, TokenizeGivesTheTokensGenerationRunsOn) {
  start();
  Answer text = post("/tokenize", R"({"model":"tiny","prompt":"hello"})");
  ASSERT_EQ(text.status, 200) << text.body;
  EXPECT_EQ(text.parsed(),
            json({{"count", 5}, {"max_model_len", 64}, {"tokens", bytes_of("hello")}}));
  const std::string messages =
      R"([{"role":"system","content":"be brief"},{"role":"user","content":"hi"}])";
  Answer chat = post("/tokenize", R"({"model":"tiny","messages":)" + messages + "}");
  ASSERT_EQ(chat.status, 200) << chat.body;
  EXPECT_EQ(engine_->num_submitted(), 0);  // tokenizing submits nothing

  ASSERT_EQ(post("/v1/completions", R"({"model":"tiny","prompt":"hello","max_tokens":1})").status,
            200);
  ASSERT_EQ(
      post("/v1/chat/completions", R"({"model":"tiny","max_tokens":1,"messages":)" + messages + "}")
          .status,
      200);
  const auto submitted = engine_->submitted_requests();  // in finishing order
  ASSERT_EQ(submitted.size(), 2u);
  const engine::GenerateRequest& completion = submitted[0];
  const engine::GenerateRequest& chat_request = submitted[1];
  EXPECT_EQ(text.parsed()["tokens"].get<std::vector<int32_t>>(), completion.prompt_token_ids);
  EXPECT_EQ(chat.parsed()["tokens"].get<std::vector<int32_t>>(), chat_request.prompt_token_ids);
  EXPECT_EQ(chat.parsed()["count"], chat_request.prompt_token_ids.size());
  EXPECT_EQ(chat.parsed()["tokens"].get<std::vector<int32_t>>(),
            bytes_of("system: be brief\nuser: hi\nassistant: "));  // the fake's template

  Answer no_gen = post(
      "/tokenize", R"({"model":"tiny","add_generation_prompt":false,"messages":)" + messages + "}");
  ASSERT_EQ(no_gen.status, 200) << no_gen.body;
  EXPECT_EQ(no_gen.parsed()["tokens"].get<std::vector<int32_t>>(),
            bytes_of("system: be brief\nuser: hi\n"));
  // Longer than the context: still answered, the count tells the caller it does not fit.
  Answer long_prompt =
      post("/tokenize", R"({"model":"tiny","prompt":")" + std::string(100, 'x') + "\"}");
  ASSERT_EQ(long_prompt.status, 200) << long_prompt.body;
  EXPECT_EQ(long_prompt.parsed()["count"], 100);
  EXPECT_EQ(long_prompt.parsed()["max_model_len"], 64);
}

TEST_F(ServerTest, DetokenizeRoundTrip) {
  start();
  for (const std::string text : {"plain text, 42 words; punctuation!", "x", "a  b\ttab\nline"}) {
    SCOPED_TRACE(text);
    Answer t = post("/tokenize", json{{"model", "tiny"}, {"prompt", text}}.dump());
    ASSERT_EQ(t.status, 200) << t.body;
    Answer d =
        post("/detokenize", json{{"model", "tiny"}, {"tokens", t.parsed()["tokens"]}}.dump());
    ASSERT_EQ(d.status, 200) << d.body;
    EXPECT_EQ(d.parsed(), json({{"prompt", text}}));
  }
  Answer empty = post("/detokenize", R"({"model":"tiny","tokens":[]})");
  ASSERT_EQ(empty.status, 200) << empty.body;
  EXPECT_EQ(empty.parsed(), json({{"prompt", ""}}));
  EXPECT_EQ(engine_->num_submitted(), 0);
}

TEST_F(ServerTest, TokenizerRouteErrors) {
  start();
  struct Case {
    const char* route;
    std::string body;
    int status;
    const char* param;  // nullptr: null
  };
  const Case cases[] = {
      {"/tokenize", "{not json", 400, nullptr},
      {"/tokenize", R"({"prompt":"x"})", 400, "model"},
      {"/tokenize", R"({"model":"tiny"})", 400, "prompt"},
      {"/tokenize", R"({"model":"tiny","prompt":"x","messages":[{"role":"user","content":"x"}]})",
       400, "messages"},
      {"/tokenize", R"({"model":"tiny","prompt":["x"]})", 400, "prompt"},
      {"/tokenize", R"({"model":"tiny","messages":{"role":"user"}})", 400, "messages"},
      {"/tokenize", R"({"model":"tiny","prompt":"x","add_special_tokens":"yes"})", 400,
       "add_special_tokens"},
      {"/tokenize", R"({"model":"tiny","prompt":"x","echo":true})", 400, "echo"},
      {"/detokenize", "[1,2]", 400, nullptr},
      {"/detokenize", R"({"tokens":[1]})", 400, "model"},
      {"/detokenize", R"({"model":"tiny"})", 400, "tokens"},
      {"/detokenize", R"({"model":"tiny","tokens":[1,"2"]})", 400, "tokens[1]"},
      {"/detokenize", R"({"model":"tiny","tokens":[1,-2]})", 400, "tokens[1]"},
      {"/detokenize", R"({"model":"tiny","tokens":[104,105,256]})", 400, "tokens[2]"},
      {"/detokenize", R"({"model":"tiny","tokens":[1],"skip_special_tokens":true})", 400,
       "skip_special_tokens"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(std::string(c.route) + " " + c.body);
    json e = expect_error(post(c.route, c.body), c.status, "invalid_request_error");
    if (c.param) {
      EXPECT_EQ(e["param"], c.param);
      EXPECT_NE(e["message"].get<std::string>().find(c.param), std::string::npos) << e["message"];
    } else {
      EXPECT_TRUE(e["param"].is_null());
    }
  }
  json unknown = expect_error(post("/tokenize", R"({"model":"tiny","prompt":"x","n":2})"), 400,
                              "invalid_request_error");
  EXPECT_EQ(unknown["message"], "Unrecognized request argument supplied: n");
  json out_of_range = expect_error(post("/detokenize", R"({"model":"tiny","tokens":[1,300]})"), 400,
                                   "invalid_request_error");
  EXPECT_EQ(out_of_range["message"],
            "tokens[1]: token id 300 is not in the vocabulary (ids 0 to 255)");
  for (const auto& [route, body] :
       {std::pair{"/tokenize", R"({"model":"gpt-4","prompt":"x"})"},
        std::pair{"/detokenize", R"({"model":"gpt-4","tokens":[1]})"}}) {
    SCOPED_TRACE(route);
    json e = expect_error(post(route, body), 404, "not_found_error");
    EXPECT_EQ(e["code"], "model_not_found");
    EXPECT_EQ(e["param"], "model");
  }
  expect_error(get("/tokenize"), 404, "not_found_error");  // POST only
  EXPECT_EQ(engine_->num_submitted(), 0);
}

TEST_F(ServerTest, TokenizerRoutesNeedTheApiKey) {
  ServerConfig config;
  config.api_key = "sekret";
  start(config);
  const std::string tokenize = R"({"model":"tiny","prompt":"x"})";
  const std::string detokenize = R"({"model":"tiny","tokens":[120]})";
  for (const auto& [route, body] :
       {std::pair{"/tokenize", tokenize}, std::pair{"/detokenize", detokenize}}) {
    SCOPED_TRACE(route);
    json e = expect_error(post(route, body), 401, "authentication_error");
    EXPECT_EQ(e["code"], "invalid_api_key");
    expect_error(post(route, body, {{"Authorization", "Bearer wrong"}}), 401,
                 "authentication_error");
    // Auth comes before the body is read: a bad body without the key is 401 too.
    expect_error(post(route, "{not json"), 401, "authentication_error");
    EXPECT_EQ(post(route, body, {{"Authorization", "Bearer sekret"}}).status, 200);
  }
}

// While loading there is no tokenizer: 503 "loading", as the generation routes answer. From
// ready on the tokenizer routes answer in every state, draining included, as /v1/models and
// /metrics do (they submit nothing).
TEST_F(ServerTest, TokenizerRoutesWhileLoadingAndDraining) {
  start({}, /*with_engine=*/false);
  const std::string tokenize = R"({"model":"tiny","prompt":"x"})";
  const std::string detokenize = R"({"model":"tiny","tokens":[120]})";
  json e = expect_error(post("/tokenize", tokenize), 503, "service_unavailable_error");
  EXPECT_EQ(e["code"], "loading");
  e = expect_error(post("/detokenize", detokenize), 503, "service_unavailable_error");
  EXPECT_EQ(e["code"], "loading");
  server_->set_engine(engine_);
  EXPECT_EQ(post("/tokenize", tokenize).status, 200);
  server_->begin_drain();
  e = expect_error(post("/v1/completions", tokenize), 503, "service_unavailable_error");
  EXPECT_EQ(e["code"], "draining");
  Answer t = post("/tokenize", tokenize);
  ASSERT_EQ(t.status, 200) << t.body;
  EXPECT_EQ(t.parsed()["tokens"], json({120}));
  Answer d = post("/detokenize", detokenize);
  ASSERT_EQ(d.status, 200) << d.body;
  EXPECT_EQ(d.parsed()["prompt"], "x");
  // Counted under their own route labels. httplib counts a request after writing its last
  // byte, so the last one may not be counted yet when the client has it: poll.
  const std::string lines[] = {
      "packserve_http_requests_total{route=\"/tokenize\",status=\"503\"} 1\n",
      "packserve_http_requests_total{route=\"/detokenize\",status=\"200\"} 1\n"};
  std::string metrics;
  for (int i = 0; i < 200; ++i) {
    metrics = get("/metrics").body;
    if (metrics.find(lines[0]) != std::string::npos &&
        metrics.find(lines[1]) != std::string::npos) {
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_NE(metrics.find(lines[0]), std::string::npos) << metrics;
  EXPECT_NE(metrics.find(lines[1]), std::string::npos) << metrics;
}

// ---- over the real EngineAdapter: the engine on engine_test_util's FakeBackend with the
// hand-made test tokenizer (tokenizer_test_util.h: ids 0-262 and 300-307, BOS "<s>" = 302
// from the post-processor) and a Llama-3 chat template whose BOS is "<s>" ----

constexpr int64_t kModelVocab = 308;   // ids 263..299 are no token of the tokenizer
constexpr int32_t kMaxModelLen = 512;  // the Llama-3 headers are bytes in this vocabulary

struct RealTokenizer {
  tokenizer::Tokenizer tokenizer = engine::testing::make_test_tokenizer();
  tokenizer::ChatTemplate chat_template{tokenizer::ChatTemplateFamily::kLlama3, "<s>"};
  std::shared_ptr<EngineAdapter> adapter;
};

std::unique_ptr<RealTokenizer> make_real_tokenizer() {
  auto t = std::make_unique<RealTokenizer>();
  engine::EngineConfig config;
  config.kv.num_pages = 256;
  config.kv.page_size = 4;
  config.max_model_len = kMaxModelLen;
  auto backend = std::make_unique<engine::testing::FakeBackend>(
      kModelVocab, config.kv.num_pages, config.kv.page_size, engine::testing::hash_next_token);
  auto created = engine::Engine::create(config, std::move(backend), t->tokenizer);
  EXPECT_TRUE(created.ok()) << created.status().to_string();
  if (!created.ok()) return nullptr;
  t->adapter = std::make_shared<EngineAdapter>(
      std::shared_ptr<engine::Engine>(std::move(created).value()), t->chat_template);
  return t;
}

std::vector<int32_t> encode(const tokenizer::Tokenizer& tok, const std::string& text,
                            bool add_special_tokens) {
  tokenizer::EncodeOptions options;
  options.add_special_tokens = add_special_tokens;
  auto ids = tok.encode(text, options);
  EXPECT_TRUE(ids.ok()) << ids.status().to_string();
  return ids.ok() ? ids.value() : std::vector<int32_t>{};
}

TEST_F(ServerTest, TokenizeMatchesTheTokenizerCalledDirectly) {
  auto real = make_real_tokenizer();
  ASSERT_TRUE(real);
  start_with(real->adapter);
  const std::string text = "the lower flow, slower";
  Answer with = post("/tokenize", json{{"model", "tiny"}, {"prompt", text}}.dump());
  ASSERT_EQ(with.status, 200) << with.body;
  Answer without = post(
      "/tokenize", json{{"model", "tiny"}, {"prompt", text}, {"add_special_tokens", false}}.dump());
  ASSERT_EQ(without.status, 200) << without.body;
  const auto with_ids = with.parsed()["tokens"].get<std::vector<int32_t>>();
  const auto without_ids = without.parsed()["tokens"].get<std::vector<int32_t>>();
  EXPECT_EQ(with_ids, encode(real->tokenizer, text, true));
  EXPECT_EQ(without_ids, encode(real->tokenizer, text, false));
  // The special tokens are the post-processor's BOS "<s>" = 302 and nothing else.
  std::vector<int32_t> bos_then_text = {302};
  bos_then_text.insert(bos_then_text.end(), without_ids.begin(), without_ids.end());
  EXPECT_EQ(with_ids, bos_then_text);
  EXPECT_EQ(with.parsed()["count"], with_ids.size());
  EXPECT_EQ(with.parsed()["max_model_len"], kMaxModelLen);
  // " lower" and " slower" hold the merges of the test vocabulary (ids >= 256).
  EXPECT_NE(
      std::find_if(without_ids.begin(), without_ids.end(), [](int32_t id) { return id >= 256; }),
      without_ids.end());
}

TEST_F(ServerTest, TokenizeMessagesMatchTheChatCompletionPrompt) {
  auto real = make_real_tokenizer();
  ASSERT_TRUE(real);
  start_with(real->adapter);
  const std::vector<tokenizer::ChatMessage> messages = {{"system", "be brief"},
                                                        {"user", "lower the flow"}};
  const json messages_json = json::parse(
      R"([{"role":"system","content":"be brief"},{"role":"user","content":"lower the flow"}])");
  Answer chat = post("/tokenize", json{{"model", "tiny"}, {"messages", messages_json}}.dump());
  ASSERT_EQ(chat.status, 200) << chat.body;
  const auto ids = chat.parsed()["tokens"].get<std::vector<int32_t>>();
  auto rendered = real->chat_template.render(messages, /*add_generation_prompt=*/true);
  ASSERT_TRUE(rendered.ok());
  EXPECT_EQ(ids, encode(real->tokenizer, rendered.value(), false));
  EXPECT_EQ(ids.front(), 302);  // the template's BOS, once
  EXPECT_NE(ids[1], 302);
  // The chat completion of the same messages runs on as many prompt tokens.
  Answer completion = post(
      "/v1/chat/completions",
      json{{"model", "tiny"}, {"messages", messages_json}, {"max_tokens", 1}, {"temperature", 0}}
          .dump());
  ASSERT_EQ(completion.status, 200) << completion.body;
  EXPECT_EQ(completion.parsed()["usage"]["prompt_tokens"], ids.size());
  Answer no_gen =
      post("/tokenize",
           json{{"model", "tiny"}, {"messages", messages_json}, {"add_generation_prompt", false}}
               .dump());
  ASSERT_EQ(no_gen.status, 200) << no_gen.body;
  auto rendered_no_gen = real->chat_template.render(messages, /*add_generation_prompt=*/false);
  ASSERT_TRUE(rendered_no_gen.ok());
  EXPECT_EQ(no_gen.parsed()["tokens"].get<std::vector<int32_t>>(),
            encode(real->tokenizer, rendered_no_gen.value(), false));
  EXPECT_LT(no_gen.parsed()["count"].get<std::size_t>(), ids.size());
}

// Decoded as one sequence: characters whose bytes span several tokens come out whole.
TEST_F(ServerTest, DetokenizeRoundTripWithTheTokenizer) {
  auto real = make_real_tokenizer();
  ASSERT_TRUE(real);
  start_with(real->adapter);
  for (const std::string text : {"the lower flow", "caf\u00e9 \u00fcber \u2014 \u65e5\u672c"}) {
    SCOPED_TRACE(text);
    const auto ids = encode(real->tokenizer, text, false);
    ASSERT_GT(ids.size(), 1u);
    Answer t =
        post("/tokenize",
             json{{"model", "tiny"}, {"prompt", text}, {"add_special_tokens", false}}.dump());
    ASSERT_EQ(t.status, 200) << t.body;
    EXPECT_EQ(t.parsed()["tokens"].get<std::vector<int32_t>>(), ids);
    Answer d = post("/detokenize", json{{"model", "tiny"}, {"tokens", ids}}.dump());
    ASSERT_EQ(d.status, 200) << d.body;
    EXPECT_EQ(d.parsed()["prompt"], text);
    // With the special tokens: they are written out (Hugging Face's decode default).
    Answer with = post("/tokenize", json{{"model", "tiny"}, {"prompt", text}}.dump());
    Answer d2 =
        post("/detokenize", json{{"model", "tiny"}, {"tokens", with.parsed()["tokens"]}}.dump());
    ASSERT_EQ(d2.status, 200) << d2.body;
    EXPECT_EQ(d2.parsed()["prompt"], "<s>" + text);
  }
  // Below the model's vocabulary size but no token of the tokenizer: 400 naming the id too.
  json e = expect_error(post("/detokenize", R"({"model":"tiny","tokens":[104,105,280]})"), 400,
                        "invalid_request_error");
  EXPECT_EQ(e["param"], "tokens[2]");
  EXPECT_EQ(e["message"].get<std::string>().rfind("tokens[2]: token id 280 is not a token", 0), 0u)
      << e["message"];
  e = expect_error(post("/detokenize", R"({"model":"tiny","tokens":[308]})"), 400,
                   "invalid_request_error");
  EXPECT_EQ(e["param"], "tokens[0]");
}

// The structured-output fields reach the engine: the text matches the regex, and a schema
// that does not compile is a 400 naming the field it came in.
TEST_F(ServerTest, StructuredOutputsReachTheEngine) {
  auto real = make_real_tokenizer();
  ASSERT_TRUE(real);
  start_with(real->adapter);
  const json messages = json::parse(R"([{"role":"user","content":"a number"}])");
  for (const char* extra_text :
       {R"({"guided_regex": "[1-9][0-9]{3}"})",
        R"({"structured_outputs": {"regex": "[1-9][0-9]{3}"}})",
        R"({"response_format": {"type": "json_schema", "json_schema": {"name": "n",
            "schema": {"type": "integer", "minimum": 1000, "maximum": 9999}}}})"}) {
    const json extra = json::parse(extra_text);
    SCOPED_TRACE(extra.dump());
    json body = {{"model", "tiny"}, {"messages", messages}, {"max_tokens", 10}, {"temperature", 0}};
    body.update(extra);
    Answer a = post("/v1/chat/completions", body.dump());
    ASSERT_EQ(a.status, 200) << a.body;
    const json parsed = a.parsed();
    const json& choice = parsed.at("choices").at(0);
    const std::string text = choice.at("message").at("content").get<std::string>();
    EXPECT_EQ(text.size(), 4u) << text;
    EXPECT_TRUE(std::all_of(text.begin(), text.end(), [](char c) { return c >= '0' && c <= '9'; }))
        << text;
    EXPECT_NE(text[0], '0');
    EXPECT_EQ(choice.at("finish_reason"), "stop");
  }
  Answer bad =
      post("/v1/chat/completions",
           json{{"model", "tiny"},
                {"messages", messages},
                {"response_format",
                 {{"type", "json_schema"},
                  {"json_schema", {{"schema", {{"type", "integer"}, {"multipleOf", 3}}}}}}}}
               .dump());
  ASSERT_EQ(bad.status, 400) << bad.body;
  EXPECT_EQ(bad.parsed()["error"]["param"], "response_format");
  EXPECT_EQ(
      bad.parsed()["error"]["message"].get<std::string>().rfind("response_format: json_schema", 0),
      0u)
      << bad.body;
}

}  // namespace
}  // namespace packserve::server
