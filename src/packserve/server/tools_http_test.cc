// tools_http_test.cc: tool calling through /v1/chat/completions end to end on loopback over a
// FakeEngine that writes a scripted output (set_output_text): the prompt shows the tools
// (with tool_choice none too, unless the server excludes them), Hermes calls come back as
// message.tool_calls and as streamed delta.tool_calls, required and named choices reach the engine
// as the exact constraint (required: the model's own call syntax), and every bad tool field is a
// 400 naming it; with --reasoning-parser qwen3 a <think> block is reasoning_content, also before
// tool calls; chat_template_kwargs.enable_thinking reaches the template.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <regex>
#include <string>
#include <vector>

#include "packserve/grammar/grammar.h"
#include "packserve/grammar/grammar_test_util.h"
#include "packserve/grammar/json_schema.h"
#include "packserve/grammar/regex.h"
#include "packserve/server/fake_engine_test_util.h"
#include "packserve/server/http_test_util.h"
#include "packserve/server/tool_request.h"

namespace packserve::server {
namespace {

using nlohmann::json;
using testing::Answer;
using testing::FakeEngine;
using testing::read_stream;
using testing::ServerTest;

constexpr const char* kWeatherTool =
    R"({"type":"function","function":{"name":"get_weather","parameters":{"type":"object",)"
    R"("properties":{"city":{"type":"string"}},"required":["city"]}}})";
constexpr const char* kNowTool = R"({"type":"function","function":{"name":"now"}})";

constexpr const char* kHermesOutput =
    "Sure.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n"
    "</tool_call>\n<tool_call>\n{\"name\": \"now\", \"arguments\": {}}\n</tool_call>";

// A chat body asking about the weather with both tools and `extra` fields ("" or ",...").
std::string body(const std::string& extra) {
  return std::string(R"({"model":"tiny","messages":[{"role":"user","content":"weather?"}],)") +
         R"("tools":[)" + kWeatherTool + "," + kNowTool + "]" + extra + "}";
}

std::string prompt_text(const engine::GenerateRequest& r) {
  return std::string(r.prompt_token_ids.begin(), r.prompt_token_ids.end());
}

void expect_call_id(const json& call) {
  EXPECT_TRUE(std::regex_match(call["id"].get<std::string>(), std::regex("call_[A-Za-z0-9]{24}")))
      << call;
  EXPECT_EQ(call["type"], "function");
}

class ToolsTest : public ServerTest {
 protected:
  void SetUp() override {
    engine_ = std::make_shared<FakeEngine>(std::chrono::milliseconds(1), 4096, 1000);
    start_with(engine_);
  }

  // A streamed chat answer: its content and calls as the deltas brought them.
  struct Streamed {
    std::string content;
    std::vector<json> calls;
    std::vector<std::size_t> call_events;  // per call: the event that brought it
    std::string finish;
  };
  Streamed stream_chat(const std::string& request_body) {
    auto c = client();
    int status = 0;
    const auto events = read_stream(c, "/v1/chat/completions", request_body, &status);
    Streamed out;
    EXPECT_EQ(status, 200);
    EXPECT_GE(events.size(), 3u);
    if (events.empty()) return out;
    EXPECT_EQ(events.back(), "[DONE]");
    for (std::size_t i = 0; i + 1 < events.size(); ++i) {
      const json choice = json::parse(events[i])["choices"][0];
      out.content += choice["delta"].value("content", "");
      if (choice["delta"].contains("tool_calls")) {
        for (const json& call : choice["delta"]["tool_calls"]) {
          out.calls.push_back(call);
          out.call_events.push_back(i);
        }
      }
      if (!choice["finish_reason"].is_null()) out.finish = choice["finish_reason"];
    }
    return out;
  }
};

TEST_F(ToolsTest, AutoHermesCallsAreToolCalls) {
  engine_->set_output_text(kHermesOutput);
  Answer a = post("/v1/chat/completions", body(""));
  ASSERT_EQ(a.status, 200) << a.body;
  const json choice = a.parsed()["choices"][0];
  EXPECT_EQ(choice["finish_reason"], "tool_calls");
  EXPECT_EQ(choice["message"]["content"], "Sure.\n");
  const json calls = choice["message"]["tool_calls"];
  ASSERT_EQ(calls.size(), 2u) << a.body;
  expect_call_id(calls[0]);
  expect_call_id(calls[1]);
  EXPECT_NE(calls[0]["id"], calls[1]["id"]);
  EXPECT_EQ(calls[0]["function"]["name"], "get_weather");
  EXPECT_EQ(calls[0]["function"]["arguments"], R"({"city":"Paris"})");
  EXPECT_EQ(calls[1]["function"]["name"], "now");
  EXPECT_EQ(calls[1]["function"]["arguments"], "{}");
  // The tools were shown to the model as the body wrote them, and nothing constrains it.
  const auto history = engine_->submitted_requests();
  ASSERT_EQ(history.size(), 1u);
  EXPECT_EQ(prompt_text(history[0]), std::string("tool: ") + kWeatherTool + "\ntool: " + kNowTool +
                                         "\nuser: weather?\nassistant: ");
  EXPECT_FALSE(history[0].sampling.structured.active());
}

// Strict tools under auto (OpenAI's function.strict): free text, and every block the model
// opens is a call of a tool, a strict one's arguments following its schema.
TEST_F(ToolsTest, AutoWithStrictToolsConstrainsTheCallsTheModelOpens) {
  engine_->set_output_text(kHermesOutput);
  const std::string strict_weather =
      R"({"type":"function","function":{"name":"get_weather","strict":true,"parameters":)"
      R"({"type":"object","properties":{"city":{"type":"string"}},"required":["city"]}}})";
  const std::string request =
      std::string(R"({"model":"tiny","messages":[{"role":"user","content":"weather?"}],)") +
      R"("tools":[)" + strict_weather + "," + kNowTool + "]}";
  Answer a = post("/v1/chat/completions", request);
  ASSERT_EQ(a.status, 200) << a.body;
  EXPECT_EQ(a.parsed()["choices"][0]["message"]["tool_calls"].size(), 2u) << a.body;
  const auto structured = engine_->submitted_requests().at(0).sampling.structured;
  EXPECT_EQ(structured.kind, engine::StructuredOutput::Kind::kStructuralTag);
  EXPECT_EQ(structured.field, "tools");
  EXPECT_EQ(structured.spec,
            R"({"structures":[{"begin":"<tool_call>\n{\"name\": \"get_weather\", \"arguments\": ",)"
            R"("schema":{"type":"object","properties":{"city":{"type":"string"}},)"
            R"("required":["city"]},"end":"}\n</tool_call>"},)"
            R"({"begin":"<tool_call>\n{\"name\": \"now\", \"arguments\": ","schema":)"
            R"({"type":"object"},"end":"}\n</tool_call>"}],"triggers":["<tool_call>"]})");
  const auto g =
      grammar::Grammar::structural_tag(structured.spec, grammar::testing::byte_vocabulary());
  ASSERT_TRUE(g.ok()) << g.status().to_string();
  const auto matches = [&](const std::string& text) {
    return grammar::testing::full_match(**g, text);
  };
  EXPECT_TRUE(matches(kHermesOutput));
  EXPECT_TRUE(matches("No call needed."));
  EXPECT_TRUE(
      matches("<tool_call>\n{\"name\": \"now\", \"arguments\": {\"a\": [[{}]]}}\n"
              "</tool_call>"));  // a tool that is not strict: any object
  EXPECT_FALSE(
      matches("<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {}}\n"
              "</tool_call>"));  // strict: "city" is required
  EXPECT_FALSE(matches("<tool_call>\n{\"name\": \"then\", \"arguments\": {}}\n</tool_call>"));
  EXPECT_FALSE(matches("Sure. <tool_call>\n{\"name\": \"now\""));  // a call left open

  // parallel_tool_calls false: the output ends with the first call.
  ASSERT_EQ(post("/v1/chat/completions",
                 request.substr(0, request.size() - 1) + R"(,"parallel_tool_calls":false})")
                .status,
            200);
  const auto one = engine_->submitted_requests().back().sampling.structured;
  EXPECT_EQ(one.spec,
            structured.spec.substr(0, structured.spec.size() - 1) + R"(,"stop_after_first":true})");
  const auto g1 = grammar::Grammar::structural_tag(one.spec, grammar::testing::byte_vocabulary());
  ASSERT_TRUE(g1.ok()) << g1.status().to_string();
  const std::string now_call = "<tool_call>\n{\"name\": \"now\", \"arguments\": {}}\n</tool_call>";
  EXPECT_TRUE(grammar::testing::full_match(**g1, "Sure. " + now_call));
  EXPECT_FALSE(grammar::testing::full_match(**g1, now_call + "\n" + now_call));

  // Without strict tools, or beside the request's own structured output, auto constrains nothing.
  ASSERT_EQ(post("/v1/chat/completions", body("")).status, 200);
  EXPECT_FALSE(engine_->submitted_requests().back().sampling.structured.active());
  const std::string with_format =
      request.substr(0, request.size() - 1) + R"(,"response_format":{"type":"json_object"}})";
  ASSERT_EQ(post("/v1/chat/completions", with_format).status, 200);
  EXPECT_EQ(engine_->submitted_requests().back().sampling.structured.kind,
            engine::StructuredOutput::Kind::kJsonObject);
}

TEST_F(ToolsTest, AutoStreamsContentThenEachCall) {
  engine_->set_output_text(kHermesOutput);
  const Streamed s = stream_chat(body(R"(,"stream":true)"));
  const std::vector<json>& calls = s.calls;
  EXPECT_EQ(s.content, "Sure.\n");
  ASSERT_EQ(calls.size(), 2u);
  EXPECT_EQ(calls[0]["index"], 0);
  EXPECT_EQ(calls[1]["index"], 1);
  expect_call_id(calls[0]);
  EXPECT_EQ(calls[0]["function"],
            json({{"name", "get_weather"}, {"arguments", R"({"city":"Paris"})"}}));
  EXPECT_EQ(calls[1]["function"], json({{"name", "now"}, {"arguments", "{}"}}));
  EXPECT_EQ(s.finish, "tool_calls");
}

TEST_F(ToolsTest, NoneShowsTheToolsAndKeepsTheText) {
  engine_->set_output_text(kHermesOutput);
  Answer a = post("/v1/chat/completions", body(R"(,"tool_choice":"none")"));
  ASSERT_EQ(a.status, 200) << a.body;
  const json choice = a.parsed()["choices"][0];
  EXPECT_EQ(choice["finish_reason"], "stop");
  EXPECT_EQ(choice["message"]["content"], kHermesOutput);
  EXPECT_FALSE(choice["message"].contains("tool_calls"));
  const engine::GenerateRequest r = engine_->submitted_requests().at(0);
  EXPECT_EQ(prompt_text(r), std::string("tool: ") + kWeatherTool + "\ntool: " + kNowTool +
                                "\nuser: weather?\nassistant: ");
  EXPECT_FALSE(r.sampling.structured.active());
}

class ToolsExcludedTest : public ToolsTest {
 protected:
  void SetUp() override {
    engine_ = std::make_shared<FakeEngine>(std::chrono::milliseconds(1), 4096, 1000);
    ServerConfig config;
    config.exclude_tools_when_tool_choice_none = true;
    start_with(engine_, config);
  }
};

TEST_F(ToolsExcludedTest, NoneLeavesTheToolsOut) {
  engine_->set_output_text(kHermesOutput);
  Answer a = post("/v1/chat/completions", body(R"(,"tool_choice":"none")"));
  ASSERT_EQ(a.status, 200) << a.body;
  EXPECT_EQ(a.parsed()["choices"][0]["message"]["content"], kHermesOutput);
  EXPECT_EQ(prompt_text(engine_->submitted_requests().at(0)), "user: weather?\nassistant: ");
  // auto still shows them.
  ASSERT_EQ(post("/v1/chat/completions", body("")).status, 200);
  EXPECT_EQ(prompt_text(engine_->submitted_requests().at(1)), std::string("tool: ") + kWeatherTool +
                                                                  "\ntool: " + kNowTool +
                                                                  "\nuser: weather?\nassistant: ");
}

TEST_F(ToolsTest, NamedChoiceConstrainsToItsArguments) {
  engine_->set_output_text(R"({"city": "Oslo"})");
  Answer a = post("/v1/chat/completions",
                  body(R"(,"tool_choice":{"type":"function","function":{"name":"get_weather"}})"));
  ASSERT_EQ(a.status, 200) << a.body;
  const json choice = a.parsed()["choices"][0];
  EXPECT_EQ(choice["finish_reason"], "stop");  // as OpenAI answers a forced function
  EXPECT_TRUE(choice["message"]["content"].is_null());
  ASSERT_EQ(choice["message"]["tool_calls"].size(), 1u);
  expect_call_id(choice["message"]["tool_calls"][0]);
  EXPECT_EQ(choice["message"]["tool_calls"][0]["function"],
            json({{"name", "get_weather"}, {"arguments", R"({"city": "Oslo"})"}}));
  const auto structured = engine_->submitted_requests().at(0).sampling.structured;
  EXPECT_EQ(structured.kind, engine::StructuredOutput::Kind::kJsonSchema);
  EXPECT_EQ(structured.spec,
            R"({"type":"object","properties":{"city":{"type":"string"}},"required":["city"]})");
  EXPECT_EQ(structured.field, "tools[0].function.parameters");

  // Streamed: the first piece opens the call, the others carry its arguments.
  auto c = client();
  int status = 0;
  const auto events = read_stream(
      c, "/v1/chat/completions",
      body(R"(,"stream":true,"tool_choice":{"type":"function","function":{"name":"now"}})"),
      &status);
  ASSERT_EQ(status, 200);
  std::string arguments;
  int opened = 0;
  for (std::size_t i = 0; i + 1 < events.size(); ++i) {
    const json delta = json::parse(events[i])["choices"][0]["delta"];
    if (!delta.contains("tool_calls")) continue;
    const json call = delta["tool_calls"][0];
    EXPECT_EQ(call["index"], 0);
    if (call.contains("id")) {
      ++opened;
      EXPECT_EQ(call["function"]["name"], "now");
    }
    arguments += call["function"]["arguments"].get<std::string>();
  }
  EXPECT_EQ(opened, 1);
  EXPECT_EQ(arguments, R"({"city": "Oslo"})");
  // A tool without parameters takes any object.
  EXPECT_EQ(engine_->submitted_requests().at(1).sampling.structured.spec, R"({"type":"object"})");
}

// Whether the whole of `text` matches `pattern` (regex.h's dialect).
bool dfa_full_match(const std::string& pattern, std::string_view text) {
  Result<grammar::Dfa> dfa = grammar::compile_regex(pattern);
  EXPECT_TRUE(dfa.ok()) << dfa.status().to_string();
  if (!dfa.ok()) return false;
  int32_t state = dfa->start_state;
  for (const char c : text) state = dfa->next(state, static_cast<uint8_t>(c));
  return dfa->accepting[static_cast<std::size_t>(state)] != 0;
}

// Whether the whole of `text` matches the constraint `s`: a regex, with free-form JSON values
// where s.spelt_out is set. The spelt-out regex agrees on a document nested at most
// kMaxFreeFormDepth deep (`shallow`).
bool full_match(const engine::StructuredOutput& s, std::string_view text, bool shallow = true) {
  const auto vocab = grammar::testing::byte_vocabulary();
  const auto g = s.spelt_out.empty()
                     ? grammar::Grammar::regex(s.spec, vocab)
                     : grammar::Grammar::regex_with_json_values(s.spec, s.spelt_out, vocab);
  EXPECT_TRUE(g.ok()) << g.status().to_string();
  if (!g.ok()) return false;
  const bool matched = grammar::testing::full_match(**g, text);
  if (!s.spelt_out.empty() && shallow) {
    EXPECT_EQ(dfa_full_match(s.spelt_out, text), matched) << text;
  }
  return matched;
}

TEST_F(ToolsTest, RequiredChoiceConstrainsToCallsInTheModelsSyntax) {
  engine_->set_output_text(
      "<tool_call>\n{\"name\": \"now\", \"arguments\": {}}\n</tool_call>\n<tool_call>\n"
      "{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Rome\"}}\n</tool_call>");
  Answer a = post("/v1/chat/completions", body(R"(,"tool_choice":"required")"));
  ASSERT_EQ(a.status, 200) << a.body;
  const json choice = a.parsed()["choices"][0];
  EXPECT_EQ(choice["finish_reason"], "tool_calls");
  EXPECT_TRUE(choice["message"]["content"].is_null());
  ASSERT_EQ(choice["message"]["tool_calls"].size(), 2u);
  EXPECT_EQ(choice["message"]["tool_calls"][0]["function"],
            json({{"name", "now"}, {"arguments", "{}"}}));
  EXPECT_EQ(choice["message"]["tool_calls"][1]["function"],
            json({{"name", "get_weather"}, {"arguments", R"({"city":"Rome"})"}}));
  // The constraint: Hermes blocks of the tools' calls, each tool's schema once.
  const auto structured = engine_->submitted_requests().at(0).sampling.structured;
  EXPECT_EQ(structured.kind, engine::StructuredOutput::Kind::kRegex);
  EXPECT_EQ(structured.field, "tools");
  const std::string schema =
      R"({"anyOf":[{"type":"object","properties":{"name":{"const":"get_weather"},"arguments":)"
      R"({"type":"object","properties":{"city":{"type":"string"}},"required":["city"]}},)"
      R"("required":["name","arguments"]},{"type":"object","properties":{"name":)"
      R"({"const":"now"},"arguments":{"type":"object"}},"required":["name","arguments"]}]})";
  grammar::JsonSchemaOptions holes;
  holes.free_form_holes = true;
  const Result<std::string> call = grammar::json_schema_to_regex(schema, holes);
  const Result<std::string> spelt_out = grammar::json_schema_to_regex(schema);
  ASSERT_TRUE(call.ok() && spelt_out.ok());
  EXPECT_EQ(structured.spec, "(?:<tool_call>\\n" + *call + "\\n</tool_call>\\n?)+");
  EXPECT_EQ(structured.spelt_out, "(?:<tool_call>\\n" + *spelt_out + "\\n</tool_call>\\n?)+");
  const std::string weather =
      "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Rome\"}}\n</tool_call>";
  EXPECT_TRUE(full_match(structured, weather));
  EXPECT_TRUE(full_match(structured, weather + "\n" + weather + "\n"));
  EXPECT_FALSE(full_match(structured, ""));
  EXPECT_FALSE(full_match(structured, "Sure. " + weather));
  EXPECT_FALSE(full_match(
      structured, "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {}}\n</tool_call>"));
  EXPECT_FALSE(
      full_match(structured, "<tool_call>\n{\"name\": \"then\", \"arguments\": {}}\n</tool_call>"));
  // "now" takes any object: nested deeper than a spelt-out free-form value may be.
  EXPECT_TRUE(full_match(structured,
                         "<tool_call>\n{\"name\": \"now\", \"arguments\": {\"a\": {\"b\": "
                         "[[1, {\"c\": null}]]}}}\n</tool_call>",
                         /*shallow=*/false));

  // parallel_tool_calls false: exactly one block.
  ASSERT_EQ(
      post("/v1/chat/completions", body(R"(,"tool_choice":"required","parallel_tool_calls":false)"))
          .status,
      200);
  const auto one = engine_->submitted_requests().at(1).sampling.structured;
  EXPECT_EQ(one.spec, "<tool_call>\\n" + *call + "\\n</tool_call>");
  EXPECT_TRUE(full_match(one, weather));
  EXPECT_FALSE(full_match(one, weather + "\n" + weather));
  // Cut off inside a block: the text is content, the reason stays "length".
  Answer cut = post("/v1/chat/completions", body(R"(,"tool_choice":"required","max_tokens":5)"));
  ASSERT_EQ(cut.status, 200) << cut.body;
  EXPECT_EQ(cut.parsed()["choices"][0]["finish_reason"], "length");
  EXPECT_EQ(cut.parsed()["choices"][0]["message"]["content"], "<tool");
  EXPECT_FALSE(cut.parsed()["choices"][0]["message"].contains("tool_calls"));
}

// A Llama 3 model's required calls: one {"name", "parameters"} object.
TEST(ToolRequest, RequiredCallsInLlama3Syntax) {
  const std::vector<Tool> tools = {Tool{"now", "", ""}};
  const ApiResult<engine::StructuredOutput> c =
      required_calls_constraint(tools, /*parallel=*/true, ToolCallFormat::kLlama3Json);
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c.value().kind, engine::StructuredOutput::Kind::kRegex);
  EXPECT_TRUE(full_match(c.value(), R"({"name": "now", "parameters": {"tz": "UTC"}})"));
  EXPECT_FALSE(full_match(c.value(), R"({"name": "now", "arguments": {}})"));
  EXPECT_FALSE(full_match(c.value(), R"({"name": "now", "parameters": {}}; )"));
  // A tool schema the compiler refuses is a 400 naming tools.
  const Tool lookahead{"f", "", R"x({"type":"object","properties":{"a":{"pattern":"(?=x)"}}})x"};
  const ApiResult<engine::StructuredOutput> bad =
      required_calls_constraint({lookahead}, true, ToolCallFormat::kHermes);
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.error().param, "tools");
  EXPECT_EQ(bad.error().message.rfind("tools: json_schema: ", 0), 0u) << bad.error().message;
}

// Strict tools in Llama 3's syntax: free text, and a `{"name":` the model writes opens a call.
TEST(ToolRequest, AutoStrictCallsInLlama3Syntax) {
  Tool weather{"get_weather", "",
               R"({"type":"object","properties":{"city":{"type":"string"}},"required":["city"]})"};
  weather.strict = true;
  const std::optional<engine::StructuredOutput> c =
      auto_calls_constraint({weather}, /*parallel=*/true, ToolCallFormat::kLlama3Json);
  ASSERT_TRUE(c.has_value());
  EXPECT_EQ(c->kind, engine::StructuredOutput::Kind::kStructuralTag);
  const auto g = grammar::Grammar::structural_tag(c->spec, grammar::testing::byte_vocabulary());
  ASSERT_TRUE(g.ok()) << g.status().to_string();
  const auto matches = [&](const std::string& text) {
    return grammar::testing::full_match(**g, text);
  };
  EXPECT_TRUE(matches(R"({"name": "get_weather", "parameters": {"city": "Rome"}})"));
  EXPECT_TRUE(matches("It is sunny."));
  EXPECT_FALSE(matches(R"({"name": "get_weather", "parameters": {}})"));
  EXPECT_FALSE(matches(R"({"name": "now", "parameters": {}})"));
  // Mistral's calls open with a control token: no constraint; nor without a strict tool.
  EXPECT_FALSE(auto_calls_constraint({weather}, true, ToolCallFormat::kMistral).has_value());
  weather.strict = false;
  EXPECT_FALSE(auto_calls_constraint({weather}, true, ToolCallFormat::kLlama3Json).has_value());
}

// A Mistral model: the request keeps special tokens in the text so that [TOOL_CALLS] reaches
// the parser, calls get the 9-character ids Mistral's template takes back, and required's
// constraint is the list without the control token.
TEST_F(ToolsTest, MistralCallsKeepTheControlTokenAndGetNineCharacterIds) {
  engine_->set_chat_template_family(tokenizer::ChatTemplateFamily::kMistral);
  engine_->set_output_text(
      R"(Checking.[TOOL_CALLS] [{"name": "get_weather", "arguments": {"city": "Paris"}}, )"
      R"({"name": "now", "arguments": {}}])");
  Answer a = post("/v1/chat/completions", body(""));
  ASSERT_EQ(a.status, 200) << a.body;
  const json choice = a.parsed()["choices"][0];
  EXPECT_EQ(choice["finish_reason"], "tool_calls");
  EXPECT_EQ(choice["message"]["content"], "Checking.");
  const json calls = choice["message"]["tool_calls"];
  ASSERT_EQ(calls.size(), 2u) << a.body;
  for (const json& call : calls) {
    EXPECT_TRUE(std::regex_match(call["id"].get<std::string>(), std::regex("[A-Za-z0-9]{9}")))
        << call;
  }
  EXPECT_EQ(calls[0]["function"],
            json({{"name", "get_weather"}, {"arguments", R"({"city":"Paris"})"}}));
  EXPECT_EQ(calls[1]["function"], json({{"name", "now"}, {"arguments", "{}"}}));
  EXPECT_FALSE(engine_->submitted_requests().at(0).sampling.skip_special_tokens);
  // tool_choice none reads no calls: special tokens stay out of the text.
  ASSERT_EQ(post("/v1/chat/completions", body(R"(,"tool_choice":"none")")).status, 200);
  EXPECT_TRUE(engine_->submitted_requests().at(1).sampling.skip_special_tokens);

  engine_->set_output_text(R"( [{"name": "now", "arguments": {}}])");
  Answer r = post("/v1/chat/completions", body(R"(,"tool_choice":"required")"));
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(r.parsed()["choices"][0]["message"]["tool_calls"][0]["function"]["name"], "now");
  const engine::SamplingParams required = engine_->submitted_requests().at(2).sampling;
  EXPECT_FALSE(required.skip_special_tokens);
  const std::string weather = R"({"name": "get_weather", "arguments": {"city": "Rome"}})";
  const std::string now = R"({"name": "now", "arguments": {}})";
  EXPECT_TRUE(full_match(required.structured, " [" + weather + "]"));
  EXPECT_TRUE(full_match(required.structured, "[" + weather + ", " + now + "]"));
  EXPECT_FALSE(full_match(required.structured, "[]"));
  EXPECT_FALSE(full_match(required.structured, "[TOOL_CALLS] [" + now + "]"));
  EXPECT_FALSE(full_match(required.structured, "[" + weather + ", ]"));
  const ApiResult<engine::StructuredOutput> one = required_calls_constraint(
      {Tool{"now", "", ""}}, /*parallel=*/false, ToolCallFormat::kMistral);
  ASSERT_TRUE(one.ok());
  EXPECT_TRUE(full_match(one.value(), "[" + now + "]"));
  EXPECT_FALSE(full_match(one.value(), "[" + now + ", " + now + "]"));
}

// Streamed, each Mistral call comes in its own delta.tool_calls entry as its list element
// closes, before the rest of the list is written.
TEST_F(ToolsTest, MistralStreamsEachCallAsItsElementCloses) {
  engine_->set_chat_template_family(tokenizer::ChatTemplateFamily::kMistral);
  engine_->set_output_text(
      R"(Checking.[TOOL_CALLS] [{"name": "get_weather", "arguments": {"city": "Paris"}}, )"
      R"({"name": "now", "arguments": {}}])");
  const Streamed s = stream_chat(body(R"(,"stream":true)"));
  const std::vector<json>& calls = s.calls;
  EXPECT_EQ(s.content, "Checking.");
  ASSERT_EQ(calls.size(), 2u);
  EXPECT_LT(s.call_events[0], s.call_events[1]);  // the first call did not wait for the second
  for (int k = 0; k < 2; ++k) {
    EXPECT_EQ(calls[k]["index"], k);
    EXPECT_TRUE(std::regex_match(calls[k]["id"].get<std::string>(), std::regex("[A-Za-z0-9]{9}")))
        << calls[k];
  }
  EXPECT_EQ(calls[0]["function"],
            json({{"name", "get_weather"}, {"arguments", R"({"city":"Paris"})"}}));
  EXPECT_EQ(calls[1]["function"], json({{"name", "now"}, {"arguments", "{}"}}));
  EXPECT_EQ(s.finish, "tool_calls");
}

TEST_F(ToolsTest, ConversationWithCallsAndResultsRenders) {
  engine_->set_output_text("It is 21 C.");
  Answer a = post("/v1/chat/completions", R"({"model":"tiny","messages":[
      {"role":"user","content":"weather?"},
      {"role":"assistant","content":null,"reasoning_content":"check it","tool_calls":[{"id":"call_1","type":"function",
        "function":{"name":"get_weather","arguments":"{\"city\": \"Paris\"}"}}]},
      {"role":"tool","tool_call_id":"call_1","content":"21 C"}]})");
  ASSERT_EQ(a.status, 200) << a.body;
  EXPECT_EQ(a.parsed()["choices"][0]["message"]["content"], "It is 21 C.");
  EXPECT_EQ(a.parsed()["choices"][0]["finish_reason"], "stop");
  EXPECT_EQ(
      prompt_text(engine_->submitted_requests().at(0)),
      "user: weather?\nassistant: \nreasoning: check it\ncall: get_weather{\"city\": \"Paris\"}\n"
      "tool: 21 C\n"
      "assistant: ");
}

// /tokenize with tools answers the tokens a chat request with those tools runs on.
TEST_F(ToolsTest, TokenizeWithToolsMatchesTheChatPrompt) {
  Answer tokens = post("/tokenize", body(""));
  ASSERT_EQ(tokens.status, 200) << tokens.body;
  ASSERT_EQ(post("/v1/chat/completions", body(R"(,"max_tokens":1)")).status, 200);
  EXPECT_EQ(tokens.parsed()["tokens"].get<std::vector<int32_t>>(),
            engine_->submitted_requests().at(0).prompt_token_ids);
  const json e = expect_error(post("/tokenize", R"({"model":"tiny","prompt":"q","tools":[]})"), 400,
                              "invalid_request_error");
  EXPECT_EQ(e["param"], "tools");
  const json bad = expect_error(
      post("/tokenize", R"({"model":"tiny","messages":[{"role":"user","content":"q"}],)"
                        R"("tools":[{"type":"function","function":{}}]})"),
      400, "invalid_request_error");
  EXPECT_EQ(bad["param"], "tools[0].function.name");
}

class ReasoningTest : public ServerTest {
 protected:
  void SetUp() override {
    engine_ = std::make_shared<FakeEngine>(std::chrono::milliseconds(1), 4096, 1000);
    ServerConfig config;
    config.reasoning_parser = "qwen3";
    start_with(engine_, config);
  }
};

constexpr const char* kThinkingOutput =
    "<think>\nThe user wants weather.\n</think>\n\nSure.\n<tool_call>\n{\"name\": \"now\", "
    "\"arguments\": {}}\n</tool_call>";

TEST_F(ReasoningTest, ThinkBlockIsReasoningContentBeforeContentAndCalls) {
  engine_->set_output_text(kThinkingOutput);
  Answer a = post("/v1/chat/completions", body(""));
  ASSERT_EQ(a.status, 200) << a.body;
  const json choice = a.parsed()["choices"][0];
  EXPECT_EQ(choice["message"]["reasoning_content"], "The user wants weather.\n");
  EXPECT_EQ(choice["message"]["content"], "Sure.\n");
  ASSERT_EQ(choice["message"]["tool_calls"].size(), 1u);
  EXPECT_EQ(choice["message"]["tool_calls"][0]["function"]["name"], "now");
  EXPECT_EQ(choice["finish_reason"], "tool_calls");

  // Streamed: the same parts, the reasoning in delta.reasoning_content.
  auto c = client();
  int status = 0;
  const auto events = read_stream(c, "/v1/chat/completions", body(R"(,"stream":true)"), &status);
  ASSERT_EQ(status, 200);
  std::string reasoning, content;
  int calls = 0;
  for (std::size_t i = 0; i + 1 < events.size(); ++i) {
    const json delta = json::parse(events[i])["choices"][0]["delta"];
    reasoning += delta.value("reasoning_content", "");
    content += delta.value("content", "");
    if (delta.contains("tool_calls")) calls += static_cast<int>(delta["tool_calls"].size());
  }
  EXPECT_EQ(reasoning, "The user wants weather.\n");
  EXPECT_EQ(content, "Sure.\n");
  EXPECT_EQ(calls, 1);

  // No think block (thinking off): all content, no reasoning_content.
  engine_->set_output_text("Paris.");
  Answer plain = post("/v1/chat/completions", body(""));
  ASSERT_EQ(plain.status, 200) << plain.body;
  EXPECT_EQ(plain.parsed()["choices"][0]["message"]["content"], "Paris.");
  EXPECT_FALSE(plain.parsed()["choices"][0]["message"].contains("reasoning_content"));
}

TEST_F(ToolsTest, WithoutTheReasoningParserThinkingIsContent) {
  engine_->set_output_text(kThinkingOutput);
  Answer a = post("/v1/chat/completions", body(R"(,"tool_choice":"none")"));
  ASSERT_EQ(a.status, 200) << a.body;
  EXPECT_EQ(a.parsed()["choices"][0]["message"]["content"], kThinkingOutput);
  EXPECT_FALSE(a.parsed()["choices"][0]["message"].contains("reasoning_content"));
}

// continue_final_message and add_generation_prompt (vLLM's) reach the template, on chat and
// /tokenize alike; the real templates' cut is chat_template_test.cc's.
TEST_F(ToolsTest, ContinueFinalMessageReachesTheTemplate) {
  const std::string messages =
      R"("messages":[{"role":"user","content":"q"},{"role":"assistant","content":"Sure"}])";
  const std::string chat = R"({"model":"tiny","max_tokens":1,)" + messages;
  const std::string tokenize = R"({"model":"tiny",)" + messages;
  ASSERT_EQ(post("/v1/chat/completions", chat + R"(,"continue_final_message":true})").status, 200);
  EXPECT_EQ(prompt_text(engine_->submitted_requests().at(0)), "user: q\nassistant: Sure");
  Answer tokens = post("/tokenize", tokenize + R"(,"continue_final_message":true})");
  ASSERT_EQ(tokens.status, 200) << tokens.body;
  EXPECT_EQ(tokens.parsed()["tokens"].get<std::vector<int32_t>>(),
            engine_->submitted_requests().at(0).prompt_token_ids);
  ASSERT_EQ(post("/v1/chat/completions", chat + R"(,"add_generation_prompt":false})").status, 200);
  EXPECT_EQ(prompt_text(engine_->submitted_requests().at(1)), "user: q\nassistant: Sure\n");
  ASSERT_EQ(post("/v1/chat/completions",
                 chat + R"(,"add_generation_prompt":false,"continue_final_message":false})")
                .status,
            200);
  EXPECT_EQ(prompt_text(engine_->submitted_requests().at(2)), "user: q\nassistant: Sure\n");
  for (const auto& [route, body] :
       {std::pair{"/v1/chat/completions", chat}, std::pair{"/tokenize", tokenize}}) {
    SCOPED_TRACE(route);
    const json both = expect_error(
        post(route, body + R"(,"add_generation_prompt":true,"continue_final_message":true})"), 400,
        "invalid_request_error");
    EXPECT_EQ(both["param"], "continue_final_message");
    const json typed = expect_error(post(route, body + R"(,"continue_final_message":1})"), 400,
                                    "invalid_request_error");
    EXPECT_EQ(typed["param"], "continue_final_message");
  }
  const json prompt = expect_error(
      post("/tokenize", R"({"model":"tiny","prompt":"q","continue_final_message":true})"), 400,
      "invalid_request_error");
  EXPECT_EQ(prompt["param"], "continue_final_message");
  EXPECT_EQ(engine_->submitted_requests().size(), 3u);
}

TEST_F(ToolsTest, EnableThinkingReachesTheTemplate) {
  const std::string chat = R"({"model":"tiny","max_tokens":1,"messages":[{"role":"user",)"
                           R"("content":"q"}],"chat_template_kwargs":)";
  ASSERT_EQ(post("/v1/chat/completions", chat + R"({"enable_thinking":false}})").status, 200);
  EXPECT_EQ(prompt_text(engine_->submitted_requests().at(0)), "user: q\nassistant (no thinking): ");
  Answer tokens = post("/tokenize", R"({"model":"tiny","messages":[{"role":"user","content":"q"}],)"
                                    R"("chat_template_kwargs":{"enable_thinking":false}})");
  ASSERT_EQ(tokens.status, 200) << tokens.body;
  EXPECT_EQ(tokens.parsed()["tokens"].get<std::vector<int32_t>>(),
            engine_->submitted_requests().at(0).prompt_token_ids);
  const json unknown = expect_error(post("/v1/chat/completions", chat + R"({"thinking":true}})"),
                                    400, "invalid_request_error");
  EXPECT_EQ(unknown["param"], "chat_template_kwargs.thinking");
  const json typed =
      expect_error(post("/v1/chat/completions", chat + R"({"enable_thinking":"no"}})"), 400,
                   "invalid_request_error");
  EXPECT_EQ(typed["param"], "chat_template_kwargs.enable_thinking");
  // date_string (Llama 3.1+'s "Today Date") reaches the template too, a string or a 400.
  ASSERT_EQ(post("/v1/chat/completions", chat + R"({"date_string":"02 Dec 2026"}})").status, 200);
  EXPECT_EQ(prompt_text(engine_->submitted_requests().at(1)),
            "user: q\ndate: 02 Dec 2026\nassistant: ");
  const json date =
      expect_error(post("/v1/chat/completions", chat + R"({"date_string":20261202}})"), 400,
                   "invalid_request_error");
  EXPECT_EQ(date["param"], "chat_template_kwargs.date_string");
  const json prompt =
      expect_error(post("/tokenize", R"({"model":"tiny","prompt":"q","chat_template_kwargs":{}})"),
                   400, "invalid_request_error");
  EXPECT_EQ(prompt["param"], "chat_template_kwargs");
  ServerConfig bad;
  bad.reasoning_parser = "deepseek_r1";
  EXPECT_FALSE(bad.validate().ok());
}

TEST_F(ToolsTest, BadToolFieldsAre400NamingTheField) {
  const std::string user = R"("messages":[{"role":"user","content":"q"}])";
  const auto expect_400 = [&](const std::string& b, const std::string& param,
                              const std::string& words,
                              const std::string& path = "/v1/chat/completions") {
    Answer a = post(path, b);
    const json e = expect_error(a, 400, "invalid_request_error");
    EXPECT_EQ(e["param"], param) << b;
    EXPECT_NE(e["message"].get<std::string>().find(words), std::string::npos) << e;
  };
  const std::string m = R"({"model":"tiny",)" + user;
  expect_400(m + R"(,"tools":{}})", "tools", "expected a list");
  expect_400(m + R"(,"tools":[{"type":"code"}]})", "tools[0].type", "expected \"function\"");
  expect_400(m + R"(,"tools":[{"type":"function"}]})", "tools[0].function", "required");
  expect_400(m + R"(,"tools":[{"type":"function","function":{"name":"a b"}}]})",
             "tools[0].function.name", "letters, digits");
  expect_400(m + R"(,"tools":[{"type":"function","function":{"name":"f","params":{}}}]})",
             "tools[0].function.params", "not expected");
  expect_400(m + R"(,"tools":[{"type":"function","function":{"name":"f","parameters":1}}]})",
             "tools[0].function.parameters", "a JSON schema object");
  expect_400(m + "," + R"("tools":[)" + kNowTool + "," + kNowTool + "]}", "tools[1].function.name",
             "names an earlier tool");
  expect_400(m + R"(,"tool_choice":"required"})", "tool_choice", "needs tools");
  expect_400(m + R"(,"tool_choice":"always","tools":[)" + kNowTool + "]}", "tool_choice",
             "\"none\", \"auto\", \"required\"");
  expect_400(m + R"(,"tool_choice":{"type":"function","function":{"name":"then"}},"tools":[)" +
                 kNowTool + "]}",
             "tool_choice.function.name", "not one of the tools");
  expect_400(m + R"(,"tool_choice":"required","response_format":{"type":"json_object"},)" +
                 R"("tools":[)" + kNowTool + "]}",
             "tool_choice", "cannot be combined with response_format");
  expect_400(m + R"(,"parallel_tool_calls":"yes"})", "parallel_tool_calls", "true or false");
  expect_400(R"({"model":"tiny","prompt":"q","tools":[]})", "tools", "Unrecognized",
             "/v1/completions");
  expect_400(R"({"model":"tiny","messages":[{"role":"user","content":"q","tool_calls":[]}]})",
             "messages[0].tool_calls", "not supported");
  expect_400(R"({"model":"tiny","messages":[{"role":"tool"}]})", "messages[0].content", "required");
  expect_400(R"({"model":"tiny","messages":[{"role":"assistant","tool_calls":[{"function":)"
             R"({"name":"f","arguments":7}}]}]})",
             "messages[0].tool_calls[0].function.arguments", "JSON text of an object");
  expect_400(R"({"model":"tiny","messages":[{"role":"assistant","tool_calls":[{"function":)"
             R"({"arguments":"{}"}}]}]})",
             "messages[0].tool_calls[0].function.name", "non-empty string");
  expect_400(R"({"model":"tiny","messages":[{"role":"assistant","reasoning_content":1}]})",
             "messages[0].reasoning_content", "a string");
  expect_400(
      R"({"model":"tiny","messages":[{"role":"user","content":"q","reasoning_content":"r"}]})",
      "messages[0].reasoning_content", "not supported");
  EXPECT_EQ(engine_->num_submitted(), 0);
}

}  // namespace
}  // namespace packserve::server
