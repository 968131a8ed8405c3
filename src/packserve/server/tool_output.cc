// tool_output.cc: see tool_output.h.
#include "packserve/server/tool_output.h"

#include <random>
#include <utility>

namespace packserve::server {
namespace {

std::string new_call_id() {
  static constexpr char kAlphabet[] =
      "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
  thread_local std::mt19937_64 rng{std::random_device{}()};
  std::uniform_int_distribution<std::size_t> pick(0, sizeof(kAlphabet) - 2);
  std::string id = "call_";
  for (int i = 0; i < 24; ++i) id += kAlphabet[pick(rng)];
  return id;
}

}  // namespace

ToolMode tool_mode(const OpenAiRequest& request,
                   std::optional<tokenizer::ChatTemplateFamily> family) {
  ToolMode mode;
  mode.choice = request.tool_choice;
  if (family == tokenizer::ChatTemplateFamily::kLlama3) mode.format = ToolCallFormat::kLlama3Json;
  if (mode.choice == ToolChoice::kNamed) mode.named = request.tools[request.tool_choice_index].name;
  return mode;
}

ChoiceToolOutput::ChoiceToolOutput(ToolMode mode) : mode_(std::move(mode)) {
  if (mode_.choice == ToolChoice::kAuto || mode_.choice == ToolChoice::kRequired) {
    parser_.emplace(mode_.format);
  }
}

void ChoiceToolOutput::add_calls(std::vector<ToolCall> calls, ToolOutputPiece& out) {
  for (ToolCall& call : calls) {
    out.tool_calls.push_back(ResponseToolCall{num_calls_++, new_call_id(), std::move(call.name),
                                              std::move(call.arguments)});
  }
}

ToolOutputPiece ChoiceToolOutput::feed(std::string_view text) {
  ToolOutputPiece out;
  if (parser_) {
    ToolCallDelta delta = parser_->feed(text);
    out.content = std::move(delta.content);
    add_calls(std::move(delta.calls), out);
  } else if (mode_.choice == ToolChoice::kNamed) {
    // The first piece opens the call (id and name); the others carry arguments only.
    if (num_calls_ == 0) {
      add_calls({ToolCall{mode_.named, std::string(text)}}, out);
    } else if (!text.empty()) {
      out.tool_calls.push_back(ResponseToolCall{0, "", "", std::string(text)});
    }
  } else {
    out.content = text;
  }
  return out;
}

ToolOutputPiece ChoiceToolOutput::finish() {
  ToolOutputPiece out;
  if (parser_) {
    ToolCallDelta delta = parser_->finish();
    out.content = std::move(delta.content);
    add_calls(std::move(delta.calls), out);
  } else if (mode_.choice == ToolChoice::kNamed && num_calls_ == 0) {
    add_calls({ToolCall{mode_.named, ""}}, out);
  }
  return out;
}

std::string ChoiceToolOutput::finish_reason(const std::string& engine_reason) const {
  const bool calls = num_calls_ > 0 && mode_.choice != ToolChoice::kNamed;
  return calls && engine_reason == "stop" ? "tool_calls" : engine_reason;
}

void merge_piece(ToolOutputPiece& whole, ToolOutputPiece piece) {
  whole.content += piece.content;
  for (ResponseToolCall& call : piece.tool_calls) {
    if (call.id.empty() && static_cast<std::size_t>(call.index) < whole.tool_calls.size()) {
      whole.tool_calls[static_cast<std::size_t>(call.index)].arguments += call.arguments;
    } else {
      whole.tool_calls.push_back(std::move(call));
    }
  }
}

}  // namespace packserve::server
