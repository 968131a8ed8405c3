// choice_output.h: one choice's generated text -> what its message (or its stream's deltas)
// carries: reasoning (with the reasoning parser on), content and tool calls
// (docs/server.md "Tool calls", "Reasoning").
// Reasoning first: with OutputMode::split_reasoning a Qwen3 `<think>...</think>` opening the
// output is the reasoning (reasoning.h) and only the text after it is read as below.
// Tool calls, by the request's tool_choice:
//   none:     all text is content;
//   auto:     the text is read for the chat template's call syntax (tool_calls.h: Hermes
//             <tool_call> blocks for ChatML models, Llama 3's JSON calls, Mistral's
//             [TOOL_CALLS] list);
//   required: the text was constrained to calls in that syntax (Mistral: the list without its
//             control token; tool_request.h required_calls_constraint) and is read as under
//             auto: a call cut off by max_tokens stays content;
//   named:    the text was constrained to the named function's arguments: one call, whose
//             arguments stream as they come.
// Each call gets an id "call_" + 24 random letters and digits when it is first emitted (Mistral:
// 9 letters and digits, the length its templates take back).
// finish_reason: "tool_calls" when calls came out of an auto or required choice that stopped;
// a named choice keeps "stop" (as OpenAI answers a forced function).
// Thread-safety: one ChoiceOutput per choice, used by one thread.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "packserve/server/openai_request.h"
#include "packserve/server/openai_response.h"
#include "packserve/server/reasoning.h"
#include "packserve/server/tool_calls.h"

namespace packserve::server {

// What a request's choices need to know to read their text.
struct OutputMode {
  ToolChoice choice = ToolChoice::kNone;
  ToolCallFormat format = ToolCallFormat::kHermes;  // auto, required: the template's syntax
  // The engine keeps special tokens in the text: Mistral's [TOOL_CALLS] is one.
  bool keep_special_tokens() const {
    return format == ToolCallFormat::kMistral &&
           (choice == ToolChoice::kAuto || choice == ToolChoice::kRequired);
  }
  std::string named;             // named: the function's name
  bool split_reasoning = false;  // the server's --reasoning-parser qwen3
};

// The OutputMode of chat request `request` for a model whose chat template is `family`
// (nullopt: none), with the reasoning parser on or off. Completions: all text is content.
OutputMode output_mode(const OpenAiRequest& request,
                       std::optional<tokenizer::ChatTemplateFamily> family, bool split_reasoning);

class ChoiceOutput {
 public:
  explicit ChoiceOutput(OutputMode mode);

  // The next text delta; returns what became certain.
  MessageDelta feed(std::string_view text);
  // End of the choice's text: what was held back.
  MessageDelta finish();
  // The engine's finish_reason as the response says it.
  std::string finish_reason(const std::string& engine_reason) const;

 private:
  // The text after the reasoning, read for tool calls.
  void feed_answer(std::string_view text, MessageDelta& out);
  void add_calls(std::vector<ToolCall> calls, MessageDelta& out);

  OutputMode mode_;
  std::optional<ReasoningSplitter> reasoning_;  // split_reasoning
  std::optional<ToolCallParser> parser_;        // auto and required
  int num_calls_ = 0;
};

// Adds `delta` to the `whole` of a choice, as a whole response has it: a call's continuation
// (no id: more of the named call's arguments) is appended to that call's arguments.
void merge_delta(MessageDelta& whole, MessageDelta delta);

}  // namespace packserve::server
