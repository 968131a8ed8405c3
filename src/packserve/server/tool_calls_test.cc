// tool_calls_test.cc: tool call parsing, against hand-written expected content and calls. Every
// case is checked on the whole text, fed byte by byte, and split in two at every position
// (expect_parse), so streaming can never disagree with the one-shot parse; the ToolCallParser*
// Streaming tests pin what each feed() returns, i.e. that content is emitted as early as
// tool_calls.h says and no earlier.
#include "packserve/server/tool_calls.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace packserve::server {
namespace {

using Calls = std::vector<ToolCall>;

// One line per call, `name arguments`, so that a failure shows both sides readably.
std::string render(const Calls& calls) {
  std::string out;
  for (const ToolCall& call : calls) out += call.name + " " + call.arguments + "\n";
  return out;
}

// Feeds `pieces` in order, then finishes; joins what every call returned.
ToolCallDelta feed_all(ToolCallFormat format, const std::vector<std::string_view>& pieces,
                       bool calls_only = false) {
  ToolCallParser parser(format, calls_only);
  ToolCallDelta all;
  auto take = [&all](ToolCallDelta delta) {
    all.content += delta.content;
    all.calls.insert(all.calls.end(), delta.calls.begin(), delta.calls.end());
  };
  for (std::string_view piece : pieces) take(parser.feed(piece));
  take(parser.finish());
  EXPECT_EQ(parser.num_calls(), static_cast<int>(all.calls.size()));
  return all;
}

void expect_delta(const ToolCallDelta& got, const std::string& content, const Calls& calls) {
  EXPECT_EQ(got.content, content);
  EXPECT_EQ(render(got.calls), render(calls));
}

// `text` parses to `content` and `calls`: whole, byte by byte, and split in two anywhere.
void expect_parse(ToolCallFormat format, std::string_view text, const std::string& content,
                  const Calls& calls, bool calls_only = false) {
  SCOPED_TRACE(std::string("text: ") + std::string(text));
  {
    SCOPED_TRACE("whole");
    expect_delta(parse_tool_calls(format, text, calls_only), content, calls);
  }
  {
    SCOPED_TRACE("byte by byte");
    std::vector<std::string_view> bytes;
    for (std::size_t i = 0; i < text.size(); ++i) bytes.push_back(text.substr(i, 1));
    expect_delta(feed_all(format, bytes, calls_only), content, calls);
  }
  const bool failed_before = ::testing::Test::HasFailure();
  for (std::size_t split = 0; split <= text.size(); ++split) {
    SCOPED_TRACE("split at " + std::to_string(split));
    expect_delta(feed_all(format, {text.substr(0, split), text.substr(split)}, calls_only), content,
                 calls);
    if (!failed_before && ::testing::Test::HasFailure()) return;  // one failing split says enough
  }
}

void expect_hermes(std::string_view text, const std::string& content, const Calls& calls) {
  expect_parse(ToolCallFormat::kHermes, text, content, calls);
}

void expect_llama3(std::string_view text, const std::string& content, const Calls& calls) {
  expect_parse(ToolCallFormat::kLlama3Json, text, content, calls);
}

void expect_mistral(std::string_view text, const std::string& content, const Calls& calls,
                    bool calls_only = false) {
  expect_parse(ToolCallFormat::kMistral, text, content, calls, calls_only);
}

const ToolCall kParis = {"get_weather", R"({"city":"Paris"})"};
const ToolCall kTime = {"get_time", R"({"tz":"UTC"})"};

TEST(ToolCallParserHermes, PlainTextIsContent) {
  expect_hermes("Just text, no tools. 1 < 2 and <b>bold</b>.",
                "Just text, no tools. 1 < 2 and <b>bold</b>.", {});
  expect_hermes("", "", {});
}

TEST(ToolCallParserHermes, ContentThenOneCall) {
  expect_hermes(
      "Let me check.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": "
      "\"Paris\"}}\n</tool_call>",
      "Let me check.\n", {kParis});
}

TEST(ToolCallParserHermes, TwoCallsWhitespaceBetweenAndAfterDropped) {
  expect_hermes(
      "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n"
      "</tool_call>\n \t<tool_call>\n{\"name\": \"get_time\", \"arguments\": {\"tz\": \"UTC\"}}\n"
      "</tool_call>\n\n",
      "", {kParis, kTime});
}

TEST(ToolCallParserHermes, ArgumentsKeepKeyOrderAndAreCompact) {
  expect_hermes(R"(<tool_call>{"name": "f", "arguments": {"b": 1, "a": [1, 2], )"
                R"("c": {"z": null, "y": true}}}</tool_call>)",
                "", {{"f", R"({"b":1,"a":[1,2],"c":{"z":null,"y":true}})"}});
}

TEST(ToolCallParserHermes, ParametersAliasStringArgumentsAndMissingArguments) {
  expect_hermes(R"(<tool_call>{"name": "f", "parameters": {"x": 1}}</tool_call>)", "",
                {{"f", R"({"x":1})"}});
  expect_hermes(R"(<tool_call>{"name": "f", "arguments": "{\"x\": 1, \"a\": 2}"}</tool_call>)", "",
                {{"f", R"({"x":1,"a":2})"}});
  expect_hermes(R"(<tool_call>{"name": "f"}</tool_call>)", "", {{"f", "{}"}});
  expect_hermes(R"(<tool_call>{"id": 7, "name": "f", "arguments": {}}</tool_call>)", "",
                {{"f", "{}"}});  // other keys ignored
}

TEST(ToolCallParserHermes, InvalidBlockIsRawContentAndLaterBlockStillACall) {
  expect_hermes(
      "<tool_call>\n{not json}\n</tool_call>\n<tool_call>{\"name\": \"get_weather\", "
      "\"arguments\": {\"city\": \"Paris\"}}</tool_call>",
      "<tool_call>\n{not json}\n</tool_call>", {kParis});
  // Each way a body can fail: not an object, no name, empty or non-string name, arguments of
  // another type, a string that does not hold an object.
  for (const char* body :
       {R"([1, 2])", R"({"arguments": {}})", R"({"name": "", "arguments": {}})", R"({"name": 3})",
        R"({"name": "f", "arguments": [1]})", R"({"name": "f", "arguments": null})",
        R"({"name": "f", "arguments": "[1]"})", R"({"name": "f", "arguments": "{bad"})"}) {
    const std::string text = std::string("Hi <tool_call>") + body + "</tool_call>";
    expect_hermes(text, text, {});
  }
}

TEST(ToolCallParserHermes, UnclosedBlockAtFinish) {
  // Valid body: a call, even with a partial close tag after it (cut off by max_tokens).
  expect_hermes("<tool_call>\n{\"name\": \"f\", \"arguments\": {\"x\": 1}}\n", "",
                {{"f", R"({"x":1})"}});
  expect_hermes("<tool_call>{\"name\": \"f\"}\n</tool_", "", {{"f", "{}"}});
  // Invalid body: the raw text, opening tag included, is content.
  expect_hermes("Sure. <tool_call>\n{\"name\": \"f\", \"argu",
                "Sure. <tool_call>\n{\"name\": \"f\", \"argu", {});
}

TEST(ToolCallParserHermes, PartialOpenTagResolvesToContent) {
  expect_hermes("a <tool_x", "a <tool_x", {});
  expect_hermes("a <tool_c", "a <tool_c", {});  // still partial at finish
  expect_hermes("<<tool_call>{\"name\": \"f\"}</tool_call>", "<", {{"f", "{}"}});
}

TEST(ToolCallParserHermes, TextAfterOrBetweenBlocksIsContentAsIs) {
  expect_hermes("<tool_call>{\"name\": \"f\"}</tool_call>\nDone.\n", "\nDone.\n", {{"f", "{}"}});
  expect_hermes(
      "<tool_call>{\"name\": \"f\"}</tool_call> and <tool_call>{\"name\": \"g\"}</tool_call>",
      " and ", {{"f", "{}"}, {"g", "{}"}});
}

TEST(ToolCallParserHermes, NonAsciiKept) {
  // Raw UTF-8 stays raw; an escaped code point comes out as its UTF-8 bytes.
  expect_hermes(
      "Voil\xc3\xa0 \xf0\x9f\x98\x80\n<tool_call>{\"name\": \"get_weather\", \"arguments\": "
      "{\"city\": \"Z\xc3\xbcrich\", \"note\": \"\\u00e9 \xe6\x9d\xb1\xe4\xba\xac\"}}</tool_call>",
      "Voil\xc3\xa0 \xf0\x9f\x98\x80\n",
      {{"get_weather",
        "{\"city\":\"Z\xc3\xbcrich\",\"note\":\"\xc3\xa9 \xe6\x9d\xb1\xe4\xba\xac\"}"}});
}

TEST(ToolCallParserHermes, TooDeepIsContent) {
  const std::string deep =
      "<tool_call>{\"name\": \"f\", \"arguments\": {\"x\": " + std::string(100, '[') +
      std::string(100, ']') + "}}</tool_call>";
  expect_delta(parse_tool_calls(ToolCallFormat::kHermes, deep), deep, {});
  const std::string bomb = "<tool_call>" + std::string(200000, '[');  // never recursed into
  expect_delta(parse_tool_calls(ToolCallFormat::kHermes, bomb), bomb, {});
}

TEST(ToolCallParserLlama3, OneCallPythonTagAndLeadingWhitespace) {
  const Calls paris = {kParis};
  expect_llama3(R"({"name": "get_weather", "parameters": {"city": "Paris"}})", "", paris);
  expect_llama3(R"(<|python_tag|>{"name": "get_weather", "parameters": {"city": "Paris"}})", "",
                paris);
  expect_llama3("\n \t{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Paris\"}}\n", "",
                paris);
  expect_llama3(
      " <|python_tag|>\n{\"name\": \"get_weather\", \"parameters\": {\"city\": "
      "\"Paris\"}}",
      "", paris);
}

TEST(ToolCallParserLlama3, TwoCallsSeparatedBySemicolon) {
  expect_llama3(R"({"name": "get_weather", "parameters": {"city": "Paris"}} ; )"
                R"({"name": "get_time", "parameters": {"tz": "UTC"}})",
                "", {kParis, kTime});
  // A ';' inside a string does not separate.
  expect_llama3(R"({"name": "f", "parameters": {"q": "a;b \";\""}})", "",
                {{"f", R"({"q":"a;b \";\""})"}});
}

TEST(ToolCallParserLlama3, ArgumentsAliasAndStringParameters) {
  expect_llama3(R"({"name": "f", "arguments": {"b": 1, "a": 2}})", "", {{"f", R"({"b":1,"a":2})"}});
  expect_llama3(R"({"name": "f", "parameters": "{\"x\": 1}"})", "", {{"f", R"({"x":1})"}});
}

TEST(ToolCallParserLlama3, TextIsContent) {
  expect_llama3("The weather in Paris is nice.", "The weather in Paris is nice.", {});
  expect_llama3("  \nHello {\"name\": \"f\"}", "  \nHello {\"name\": \"f\"}", {});
  expect_llama3("   ", "   ", {});
  expect_llama3("", "", {});
}

TEST(ToolCallParserLlama3, BraceTextThatIsNotACallIsContent) {
  for (const char* text :
       {R"({"a": 1})", "{ not json", R"({"name": "f"})", R"({"name": "f", "parameters": [1]})",
        R"({"name": "f", "parameters": {}} trailing)",
        R"({"name": "f", "parameters": {}}; {"a": 1})",
        R"( <|python_tag|>{"name": "", "parameters": {}})"}) {
    expect_llama3(text, text, {});
  }
}

TEST(ToolCallParserLlama3, PythonTagPrefixThatIsNotTheTag) {
  expect_llama3("<|pyth!", "<|pyth!", {});
  expect_llama3(" <|pyth", " <|pyth", {});
  expect_llama3("<|python_tag|>", "<|python_tag|>", {});
  expect_llama3("<|python_tag|>brave_search.call(query=\"x\")",
                "<|python_tag|>brave_search.call(query=\"x\")", {});
}

TEST(ToolCallParserMistral, ContentThenAListOfCalls) {
  expect_mistral("Sunny.", "Sunny.", {});
  // v0.3 writes a space after the control token, Nemo none; an "id" the model adds is ignored.
  expect_mistral(R"([TOOL_CALLS] [{"name": "get_weather", "arguments": {"city": "Paris"}}])", "",
                 {kParis});
  expect_mistral(R"(Let me look.[TOOL_CALLS][{"name": "get_weather", "arguments": )"
                 R"({"city": "Paris"}, "id": "abc123XYZ"}, {"name": "get_time", "arguments": )"
                 R"({"tz": "UTC"}}])",
                 "Let me look.", {kParis, kTime});
  // One object instead of a list; string arguments; no arguments.
  expect_mistral(R"([TOOL_CALLS] {"name": "get_time", "arguments": "{\"tz\": \"UTC\"}"})", "",
                 {kTime});
  expect_mistral(R"([TOOL_CALLS][{"name": "f"}])", "", {{"f", "{}"}});
}

TEST(ToolCallParserMistral, WhatIsNotAListOfCallsIsContentAsWritten) {
  for (const char* text :
       {"[TOOL_CALLS] []", R"([TOOL_CALLS] [{"name": "f", "arguments": [1]}, {"name": "g"}])",
        R"([TOOL_CALLS] [5, {"name": "g"}])", R"([TOOL_CALLS] {"name": "f"} and more)",
        "[TOOL_CALLS]", "[TOOL_CALL", "x [TOOL_CALLS] [{\"name\": \"f\"",
        R"([TOOL_CALLS] [{"name": "f"]])", R"([TOOL_CALLS] ({"name": "f"}))"}) {
    expect_mistral(text, text, {});
  }
}

TEST(ToolCallParserMistral, TheCallsBeforeAnElementThatIsNotOneStay) {
  const ToolCall f = {"f", "{}"};
  // What follows the last call is content as written, from after its comma.
  expect_mistral(R"([TOOL_CALLS] [{"name": "f"}, {"arguments": {}}])", R"( {"arguments": {}}])",
                 {f});
  expect_mistral(R"([TOOL_CALLS] [{"name": "f"},{"name": "get_weather", "arguments": {"ci)",
                 R"({"name": "get_weather", "arguments": {"ci)", {f});
  expect_mistral(R"([TOOL_CALLS] [{"name": "f"} {"name": "g"}])", R"( {"name": "g"}])", {f});
  // A list cut after a whole call (max_tokens) keeps that call.
  expect_mistral(R"([TOOL_CALLS] [{"name": "f"}, )", " ", {f});
  // After the list: text is content, whitespace is dropped; brackets in strings do not count.
  expect_mistral(R"(a[TOOL_CALLS] [{"name": "f", "arguments": {"s": "}]\"{"}}] and more)",
                 "a and more", {{"f", R"({"s":"}]\"{"})"}});
  expect_mistral("[TOOL_CALLS] [{\"name\": \"f\"}]\n \t", "", {f});
}

TEST(ToolCallParserMistral, CallsOnlyReadsTheWholeOutputAsTheList) {
  // tool_choice "required": the constraint leaves the control token out.
  expect_mistral(R"( [{"name": "get_weather", "arguments": {"city": "Paris"}}])", "", {kParis},
                 /*calls_only=*/true);
  expect_mistral(R"([{"name": "get_weather", "arguments": {"city": "Par)",
                 R"([{"name": "get_weather", "arguments": {"city": "Par)", {},
                 /*calls_only=*/true);
}

TEST(ToolCallParserStreaming, MistralContentStreamsUntilTheTagAndEachCallWhenItCloses) {
  ToolCallParser parser(ToolCallFormat::kMistral);
  expect_delta(parser.feed("Let me [TOOL_"), "Let me ", {});
  expect_delta(parser.feed("CALLS] [{\"name\": \"get_weather\", "), "", {});
  expect_delta(parser.feed("\"arguments\": {\"city\": \"Paris\"}"), "", {});
  expect_delta(parser.feed("}, {\"name\": \"get_time\", \"arguments\": {\"tz\": \"UTC\"}"), "",
               {kParis});
  EXPECT_EQ(parser.num_calls(), 1);
  expect_delta(parser.feed("}"), "", {kTime});
  expect_delta(parser.feed("]"), "", {});
  expect_delta(parser.finish(), "", {});
  EXPECT_EQ(parser.num_calls(), 2);
  // One object, not a list: held until the end.
  ToolCallParser object(ToolCallFormat::kMistral);
  expect_delta(object.feed("[TOOL_CALLS] {\"name\": \"get_time\", \"arguments\": {\"tz\": "
                           "\"UTC\"}}"),
               "", {});
  expect_delta(object.finish(), "", {kTime});
  ToolCallParser text(ToolCallFormat::kMistral);
  expect_delta(text.feed("[TOOL_"), "", {});
  expect_delta(text.feed("x"), "[TOOL_x", {});
  expect_delta(text.finish(), "", {});
}

TEST(ToolCallParserStreaming, HermesContentBeforeBlockIsEmittedEarly) {
  ToolCallParser parser(ToolCallFormat::kHermes);
  expect_delta(parser.feed("Hello <tool_call>\n{\"name\": \"get_wea"), "Hello ", {});
  expect_delta(parser.feed("ther\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_"), "", {});
  expect_delta(parser.feed("call>\n"), "", {kParis});
  EXPECT_EQ(parser.num_calls(), 1);
  expect_delta(parser.feed("Anything else?"), "", {});  // after a block: held
  expect_delta(parser.finish(), "\nAnything else?", {});
  EXPECT_EQ(parser.num_calls(), 1);
}

TEST(ToolCallParserStreaming, HermesBytewiseTextIsEmittedByteByByte) {
  ToolCallParser parser(ToolCallFormat::kHermes);
  for (char c : std::string("Hello")) expect_delta(parser.feed(std::string(1, c)), {c}, {});
  expect_delta(parser.finish(), "", {});
}

TEST(ToolCallParserStreaming, HermesHoldsOnlyAPossibleTagStart) {
  ToolCallParser parser(ToolCallFormat::kHermes);
  expect_delta(parser.feed("a <tool_"), "a ", {});
  expect_delta(parser.feed("x"), "<tool_x", {});
  expect_delta(parser.feed(" <"), " ", {});
  expect_delta(parser.finish(), "<", {});
}

TEST(ToolCallParserStreaming, HermesBetweenBlocksHeldUntilNextBlock) {
  ToolCallParser parser(ToolCallFormat::kHermes);
  expect_delta(parser.feed("<tool_call>{\"name\": \"f\"}</tool_call> then "), "", {{"f", "{}"}});
  expect_delta(parser.feed("<tool_call>{\"name\": \"g\"}</tool_call>"), " then ", {{"g", "{}"}});
  expect_delta(parser.finish(), "", {});
  EXPECT_EQ(parser.num_calls(), 2);
}

TEST(ToolCallParserStreaming, Llama3ContentStreamsAndJsonIsHeld) {
  ToolCallParser text(ToolCallFormat::kLlama3Json);
  expect_delta(text.feed("  "), "", {});
  expect_delta(text.feed("\n"), "", {});
  expect_delta(text.feed("Hi"), "  \nHi", {});
  expect_delta(text.feed(" there"), " there", {});
  expect_delta(text.finish(), "", {});

  ToolCallParser tag(ToolCallFormat::kLlama3Json);
  expect_delta(tag.feed("<|pyth"), "", {});
  expect_delta(tag.feed("!"), "<|pyth!", {});

  ToolCallParser call(ToolCallFormat::kLlama3Json);
  expect_delta(call.feed("<|python_tag|>{\"name\": \"get_weather\", "), "", {});
  expect_delta(call.feed("\"parameters\": {\"city\": \"Paris\"}}"), "", {});
  expect_delta(call.finish(), "", {kParis});
  EXPECT_EQ(call.num_calls(), 1);
}

}  // namespace
}  // namespace packserve::server
