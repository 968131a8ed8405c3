// request_fuzz_test.cc: malformed-input fuzzing of the request parser with a fixed time
// budget (seeded, so a failure replays): random bytes, truncated and mutated valid bodies,
// deep nesting, huge numbers, invalid UTF-8. Oracle: parse_openai_request and the tokenizer
// routes' parsers never crash or throw and every rejection is a 400 invalid_request_error;
// accepted requests satisfy the typed invariants. Then a short HTTP phase sends the same kinds
// of bodies to a live server (FakeEngine) on the generation and tokenizer routes: every answer
// is 200 or a 4xx with an error object, and /health is 200 after.
#include <gtest/gtest.h>
#include <httplib.h>

#include <chrono>
#include <cmath>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "packserve/common/rng.h"
#include "packserve/server/fake_engine_test_util.h"
#include "packserve/server/http_server.h"
#include "packserve/server/openai_request.h"
#include "packserve/server/tokenize_handler.h"

namespace packserve::server {
namespace {

const std::vector<std::string>& seeds() {
  static const std::vector<std::string> kSeeds = {
      R"({"model":"tiny","prompt":"hello","max_tokens":4,"temperature":0.5,"stop":["x","y"]})",
      R"({"model":"tiny","prompt":[1,2,3],"stream":true,"stream_options":{"include_usage":true}})",
      R"({"model":"tiny","messages":[{"role":"user","content":"hi"}],"max_completion_tokens":3})",
      R"({"model":"tiny","messages":[{"role":"system","content":[{"type":"text","text":"s"}]}],"seed":7,"top_k":5,"top_p":0.9,"min_p":0.1,"logprobs":true})",
      R"({"model":"tiny","prompt":"hello","add_special_tokens":false})",
      R"({"model":"tiny","messages":[{"role":"user","content":"hi"}],"add_generation_prompt":true})",
      R"({"model":"tiny","tokens":[104,105,0,255]})",
  };
  return kSeeds;
}

// One malformed body drawn from `rng`.
std::string mutant(Rng& rng) {
  const auto pick = [&](uint64_t n) { return static_cast<std::size_t>(rng.next_u64() % n); };
  const std::string& seed = seeds()[pick(seeds().size())];
  switch (pick(8)) {
    case 0: {  // random bytes
      std::string s(pick(200), '\0');
      for (char& c : s) c = static_cast<char>(rng.next_u64());
      return s;
    }
    case 1:  // truncated
      return seed.substr(0, pick(seed.size() + 1));
    case 2: {  // byte flips
      std::string s = seed;
      for (std::size_t k = 0, n = 1 + pick(4); k < n; ++k)
        s[pick(s.size())] = static_cast<char>(rng.next_u64());
      return s;
    }
    case 3: {  // deep nesting, inside a field or at the top
      const std::size_t depth = 1 + pick(100000);
      std::string nest = std::string(depth, '[') + std::string(pick(2) ? depth : depth / 2, ']');
      return pick(2) ? nest : R"({"model":"tiny","prompt":)" + nest + "}";
    }
    case 4: {  // huge or odd numbers in numeric fields
      const char* numbers[] = {"1e309",
                               "-1e309",
                               "1e-400",
                               "18446744073709551616",
                               "-9223372036854775809",
                               "99999999999999999999999999",
                               "1.0e+",
                               "0x10",
                               "-0",
                               "NaN",
                               "Infinity",
                               "2147483648",
                               "1e2"};
      // clang-format off
      const char* fields[] = {"max_tokens", "temperature", "top_p", "top_k", "seed", "n",
                              "min_p", "presence_penalty", "frequency_penalty",
                              "repetition_penalty", "logprobs"};
      // clang-format on
      return std::string(R"({"model":"tiny","prompt":"p",")") + fields[pick(11)] +
             "\":" + numbers[pick(13)] + "}";
    }
    case 5: {  // invalid UTF-8 inside strings
      const char* bad[] = {"\xff",     "\xc3",    "\xed\xa0\x80", "\xf4\x90\x80\x80",
                           "\xc0\xaf", "\\ud800", "\\udc00x"};
      return std::string(R"({"model":"tiny","prompt":"a)") + bad[pick(7)] + "b\"}";
    }
    case 6: {  // wrong types everywhere
      const char* values[] = {"null", "true", "[]", "{}", "\"s\"", "-1", "0", "[[]]", "[{}]"};
      const char* fields[] = {"model",          "prompt",     "messages",    "stop", "stream",
                              "stream_options", "max_tokens", "temperature", "seed"};
      std::string body = seed;
      body.insert(1, std::string("\"") + fields[pick(9)] + "\":" + values[pick(9)] + ",");
      return body;
    }
    default: {  // splice two seeds
      const std::string& other = seeds()[pick(seeds().size())];
      return seed.substr(0, pick(seed.size())) + other.substr(pick(other.size()));
    }
  }
}

void check_parse(const std::string& body, Endpoint endpoint) {
  ApiResult<OpenAiRequest> r = parse_openai_request(body, endpoint);
  if (!r.ok()) {
    ASSERT_EQ(r.error().status, 400) << body;
    ASSERT_EQ(r.error().type, "invalid_request_error") << body;
    ASSERT_FALSE(r.error().message.empty());
    return;
  }
  const OpenAiRequest& q = r.value();
  ASSERT_TRUE(std::isfinite(q.temperature) && q.temperature >= 0) << body;
  ASSERT_TRUE(q.top_p > 0 && q.top_p <= 1) << body;
  ASSERT_TRUE(!q.max_tokens || *q.max_tokens >= 1) << body;
  ASSERT_TRUE(q.n >= 1 && q.n <= kMaxChoices) << body;
  // Whatever the parser and then resolve_max_tokens (a 1-token prompt, a roomy context) accept
  // the engine accepts (sampling fields, penalties included). min_tokens is checked against
  // the resolved max_tokens there, so the parser alone may accept min_tokens > 1.
  ApiResult<int32_t> max_tokens = resolve_max_tokens(q, 1, int64_t{1} << 20);
  if (max_tokens.ok()) {
    const Status engine_says = to_sampling_params(q, max_tokens.value()).validate();
    ASSERT_TRUE(engine_says.ok()) << body << ": " << engine_says.to_string();
  } else {
    ASSERT_EQ(max_tokens.error().status, 400) << body;
  }
  if (endpoint == Endpoint::kCompletions) {
    ASSERT_FALSE(q.prompts.empty()) << body;
    for (const Prompt& prompt : q.prompts) {
      ASSERT_TRUE(prompt.text.has_value() != prompt.token_ids.has_value()) << body;
      ASSERT_TRUE(prompt.text ? !prompt.text->empty() : !prompt.token_ids->empty()) << body;
    }
    ASSERT_LE(q.prompts.size() * q.n, static_cast<std::size_t>(kMaxChoices)) << body;
  } else {
    ASSERT_FALSE(q.messages.empty()) << body;
  }
}

void check_parse_tokenizer_routes(const std::string& body) {
  ApiResult<TokenizeRequest> t = parse_tokenize_request(body);
  if (!t.ok()) {
    ASSERT_EQ(t.error().status, 400) << body;
    ASSERT_EQ(t.error().type, "invalid_request_error") << body;
    ASSERT_FALSE(t.error().message.empty());
  } else {
    ASSERT_TRUE(t.value().prompt.has_value() != t.value().messages.has_value()) << body;
    ASSERT_TRUE(t.value().prompt ? !t.value().prompt->empty() : !t.value().messages->empty())
        << body;
  }
  ApiResult<DetokenizeRequest> d = parse_detokenize_request(body);
  if (!d.ok()) {
    ASSERT_EQ(d.error().status, 400) << body;
    ASSERT_EQ(d.error().type, "invalid_request_error") << body;
    ASSERT_FALSE(d.error().message.empty());
  } else {
    for (const int32_t id : d.value().tokens) ASSERT_GE(id, 0) << body;
  }
}

TEST(RequestFuzz, ParserNeverCrashesAndRejectsWith400) {
  constexpr auto kBudget = std::chrono::seconds(3);
  Rng rng(20261123);
  const auto start = std::chrono::steady_clock::now();
  int64_t n = 0;
  while (std::chrono::steady_clock::now() - start < kBudget) {
    const std::string body = mutant(rng);
    SCOPED_TRACE("case " + std::to_string(n));
    check_parse(body, Endpoint::kCompletions);
    check_parse(body, Endpoint::kChatCompletions);
    check_parse_tokenizer_routes(body);
    if (::testing::Test::HasFatalFailure()) return;
    ++n;
  }
  EXPECT_GT(n, 1000);  // the budget covered a meaningful number of cases
  // Every prefix of every seed too.
  for (const std::string& seed : seeds()) {
    for (std::size_t k = 0; k < seed.size(); ++k) {
      check_parse(seed.substr(0, k), Endpoint::kCompletions);
      check_parse_tokenizer_routes(seed.substr(0, k));
    }
  }
}

TEST(RequestFuzz, HttpAnswersAre4xxAndServerStaysHealthy) {
  ServerConfig config;
  config.port = 0;
  config.served_model_name = "tiny";
  HttpServer server(config);
  ASSERT_TRUE(server.start().ok());
  auto engine = std::make_shared<testing::FakeEngine>();
  server.set_engine(engine);
  httplib::Client client("127.0.0.1", server.port());
  client.set_read_timeout(10, 0);
  Rng rng(5);
  constexpr auto kBudget = std::chrono::seconds(2);
  const auto start = std::chrono::steady_clock::now();
  int n = 0;
  while (std::chrono::steady_clock::now() - start < kBudget) {
    const std::string body = mutant(rng);
    const char* paths[] = {"/v1/completions", "/v1/chat/completions", "/tokenize", "/detokenize"};
    const char* path = paths[rng.next_u64() % 4];
    auto res = client.Post(path, body, "application/json");
    ASSERT_TRUE(res) << "no answer to case " << n << ": " << httplib::to_string(res.error());
    if (res->status != 200) {
      ASSERT_GE(res->status, 400) << body;
      ASSERT_LT(res->status, 500) << body << "\n" << res->body;
      auto j = nlohmann::json::parse(res->body, nullptr, false);
      ASSERT_TRUE(j.is_object() && j.contains("error")) << res->body;
    }
    ++n;
  }
  EXPECT_GT(n, 20);
  auto health = client.Get("/health");
  ASSERT_TRUE(health);
  EXPECT_EQ(health->status, 200);
  server.stop();
}

}  // namespace
}  // namespace packserve::server
