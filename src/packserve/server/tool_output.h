// tool_output.h: one chat choice's generated text -> OpenAI's content and tool_calls, by the
// request's tool_choice (docs/server.md "Tool calls"):
//   none:     all text is content;
//   auto:     the text is read for the chat template's call syntax (tool_calls.h: Hermes
//             <tool_call> blocks for ChatML models, Llama 3's JSON calls);
//   required: the text was constrained to calls in that syntax
//             (tool_request.h required_calls_constraint) and is read as under auto: a call cut
//             off by max_tokens stays content;
//   named:    the text was constrained to the named function's arguments: one call, whose
//             arguments stream as they come.
// Each call gets an id "call_" + 24 random letters and digits when it is first emitted.
// finish_reason: "tool_calls" when calls came out of an auto or required choice that stopped;
// a named choice keeps "stop" (as OpenAI answers a forced function).
// Thread-safety: one ChoiceToolOutput per choice, used by one thread.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "packserve/server/openai_request.h"
#include "packserve/server/openai_response.h"
#include "packserve/server/tool_calls.h"

namespace packserve::server {

// What a request's choices need to know to read their text.
struct ToolMode {
  ToolChoice choice = ToolChoice::kNone;
  ToolCallFormat format = ToolCallFormat::kHermes;  // auto: the chat template's syntax
  std::string named;                                // named: the function's name
};

// The ToolMode of `request` for a model whose chat template is `family` (nullopt: none).
ToolMode tool_mode(const OpenAiRequest& request,
                   std::optional<tokenizer::ChatTemplateFamily> family);

// A piece of one choice's output as a chunk carries it.
struct ToolOutputPiece {
  std::string content;
  std::vector<ResponseToolCall> tool_calls;
};

class ChoiceToolOutput {
 public:
  explicit ChoiceToolOutput(ToolMode mode);

  // The next text delta; returns what became certain.
  ToolOutputPiece feed(std::string_view text);
  // End of the choice's text: what was held back.
  ToolOutputPiece finish();
  // The engine's finish_reason as the response says it.
  std::string finish_reason(const std::string& engine_reason) const;

 private:
  void add_calls(std::vector<ToolCall> calls, ToolOutputPiece& out);

  ToolMode mode_;
  std::optional<ToolCallParser> parser_;  // auto and required
  int num_calls_ = 0;
};

// Adds `piece` to the `whole` of a choice, as a whole response has it: a call's continuation
// (no id: more of the named call's arguments) is appended to that call's arguments.
void merge_piece(ToolOutputPiece& whole, ToolOutputPiece piece);

}  // namespace packserve::server
