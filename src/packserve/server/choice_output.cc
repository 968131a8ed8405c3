// choice_output.cc: see choice_output.h.
#include "packserve/server/choice_output.h"

#include <random>
#include <utility>

namespace packserve::server {
namespace {

// Mistral's templates take 9-character ids (chat_template.h), so that a client sending the calls
// back renders them as they were.
std::string new_call_id(ToolCallFormat format) {
  static constexpr char kAlphabet[] =
      "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
  thread_local std::mt19937_64 rng{std::random_device{}()};
  std::uniform_int_distribution<std::size_t> pick(0, sizeof(kAlphabet) - 2);
  const bool mistral = format == ToolCallFormat::kMistral;
  std::string id = mistral ? "" : "call_";
  const std::size_t length = mistral ? tokenizer::kMistralCallIdLength : 24;
  for (std::size_t i = 0; i < length; ++i) id += kAlphabet[pick(rng)];
  return id;
}

}  // namespace

OutputMode output_mode(const OpenAiRequest& request,
                       std::optional<tokenizer::ChatTemplateFamily> family, bool split_reasoning) {
  OutputMode mode;
  if (request.endpoint != Endpoint::kChatCompletions) return mode;
  mode.choice = request.tool_choice;
  if (family == tokenizer::ChatTemplateFamily::kLlama3) mode.format = ToolCallFormat::kLlama3Json;
  if (family == tokenizer::ChatTemplateFamily::kMistral ||
      family == tokenizer::ChatTemplateFamily::kMistralTekken) {
    mode.format = ToolCallFormat::kMistral;
  }
  if (mode.choice == ToolChoice::kNamed) mode.named = request.tools[request.tool_choice_index].name;
  // A constrained output starts with the calls: there is no reasoning to split off.
  mode.split_reasoning = split_reasoning && !request.structured.active() &&
                         mode.choice != ToolChoice::kRequired && mode.choice != ToolChoice::kNamed;
  return mode;
}

ChoiceOutput::ChoiceOutput(OutputMode mode) : mode_(std::move(mode)) {
  if (mode_.split_reasoning) reasoning_.emplace();
  if (mode_.choice == ToolChoice::kAuto || mode_.choice == ToolChoice::kRequired) {
    parser_.emplace(mode_.format, /*calls_only=*/mode_.choice == ToolChoice::kRequired);
  }
}

void ChoiceOutput::add_calls(std::vector<ToolCall> calls, MessageDelta& out) {
  for (ToolCall& call : calls) {
    out.tool_calls.push_back(ResponseToolCall{num_calls_++, new_call_id(mode_.format),
                                              std::move(call.name), std::move(call.arguments)});
  }
}

void ChoiceOutput::feed_answer(std::string_view text, MessageDelta& out) {
  if (parser_) {
    ToolCallDelta delta = parser_->feed(text);
    out.content += delta.content;
    add_calls(std::move(delta.calls), out);
  } else if (mode_.choice == ToolChoice::kNamed) {
    // The first piece opens the call (id and name); the others carry arguments only.
    if (num_calls_ == 0) {
      add_calls({ToolCall{mode_.named, std::string(text)}}, out);
    } else if (!text.empty()) {
      out.tool_calls.push_back(ResponseToolCall{0, "", "", std::string(text)});
    }
  } else {
    out.content += text;
  }
}

MessageDelta ChoiceOutput::feed(std::string_view text) {
  MessageDelta out;
  if (!reasoning_) {
    feed_answer(text, out);
    return out;
  }
  ReasoningPiece piece = reasoning_->feed(text);
  out.reasoning = std::move(piece.reasoning);
  if (!piece.content.empty()) feed_answer(piece.content, out);
  return out;
}

MessageDelta ChoiceOutput::finish() {
  MessageDelta out;
  if (reasoning_) {
    ReasoningPiece piece = reasoning_->finish();
    out.reasoning = std::move(piece.reasoning);
    if (!piece.content.empty()) feed_answer(piece.content, out);
  }
  if (parser_) {
    ToolCallDelta delta = parser_->finish();
    out.content += delta.content;
    add_calls(std::move(delta.calls), out);
  } else if (mode_.choice == ToolChoice::kNamed && num_calls_ == 0) {
    add_calls({ToolCall{mode_.named, ""}}, out);
  }
  return out;
}

std::string ChoiceOutput::finish_reason(const std::string& engine_reason) const {
  const bool calls = num_calls_ > 0 && mode_.choice != ToolChoice::kNamed;
  return calls && engine_reason == "stop" ? "tool_calls" : engine_reason;
}

void merge_delta(MessageDelta& whole, MessageDelta delta) {
  whole.reasoning += delta.reasoning;
  whole.content += delta.content;
  for (ResponseToolCall& call : delta.tool_calls) {
    if (call.id.empty() && static_cast<std::size_t>(call.index) < whole.tool_calls.size()) {
      whole.tool_calls[static_cast<std::size_t>(call.index)].arguments += call.arguments;
    } else {
      whole.tool_calls.push_back(std::move(call));
    }
  }
}

}  // namespace packserve::server
