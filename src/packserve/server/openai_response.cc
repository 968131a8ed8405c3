// openai_response.cc: see openai_response.h.
#include "packserve/server/openai_response.h"

#include <nlohmann/json.hpp>

namespace packserve::server {
namespace {

using nlohmann::json;

std::string dump(const json& value) {
  return value.dump(-1, ' ', false, json::error_handler_t::replace);
}

json usage_json(const Usage& usage) {
  return json{{"prompt_tokens", usage.prompt_tokens},
              {"completion_tokens", usage.completion_tokens},
              {"total_tokens", usage.prompt_tokens + usage.completion_tokens},
              {"prompt_tokens_details", {{"cached_tokens", usage.cached_prompt_tokens}}}};
}

// `text_offset` counts bytes of the completion text before each token (0-based).
json logprobs_json(const ResponseContext& ctx, const std::vector<TokenLogprob>& logprobs,
                   int64_t text_offset_base) {
  if (!ctx.logprobs) return nullptr;
  auto bytes_of = [](const std::string& text) {
    json bytes = json::array();
    for (unsigned char c : text) bytes.push_back(static_cast<int>(c));
    return bytes;
  };
  if (ctx.endpoint == Endpoint::kChatCompletions) {
    json content = json::array();
    for (const TokenLogprob& t : logprobs) {
      json top = json::array();
      for (const auto& [text, logprob] : t.top) {
        top.push_back(json{{"token", text}, {"logprob", logprob}, {"bytes", bytes_of(text)}});
      }
      content.push_back(json{{"token", t.token},
                             {"logprob", t.logprob.value_or(0.0)},
                             {"bytes", bytes_of(t.token)},
                             {"top_logprobs", top}});
    }
    return json{{"content", content}};
  }
  json tokens = json::array(), token_logprobs = json::array(), offsets = json::array(),
       top = json::array();
  int64_t offset = text_offset_base;
  for (const TokenLogprob& t : logprobs) {
    tokens.push_back(t.token);
    token_logprobs.push_back(t.logprob ? json(*t.logprob) : json(nullptr));
    offsets.push_back(offset);
    if (ctx.top_logprobs > 0 && t.logprob) {
      json alternatives = json::object();  // text -> logprob, as OpenAI's legacy format
      for (const auto& [text, logprob] : t.top) {
        if (!alternatives.contains(text)) alternatives[text] = logprob;
      }
      top.push_back(alternatives);
    } else {
      top.push_back(nullptr);
    }
    offset += static_cast<int64_t>(t.token.size());
  }
  return json{{"tokens", tokens},
              {"token_logprobs", token_logprobs},
              {"top_logprobs", top},
              {"text_offset", offsets}};
}

// A whole call (in a message) or a streamed piece of one (in a delta, with its index).
json tool_call_json(const ResponseToolCall& call, bool delta) {
  json out = json::object();
  if (delta) out["index"] = call.index;
  if (!call.id.empty()) {
    out["id"] = call.id;
    out["type"] = "function";
    out["function"] = json{{"name", call.name}, {"arguments", call.arguments}};
  } else {
    out["function"] = json{{"arguments", call.arguments}};
  }
  return out;
}

json tool_calls_json(const std::vector<ResponseToolCall>& calls, bool delta) {
  json out = json::array();
  for (const ResponseToolCall& call : calls) out.push_back(tool_call_json(call, delta));
  return out;
}

json base(const ResponseContext& ctx, const char* object) {
  return json{{"id", ctx.id}, {"object", object}, {"created", ctx.created_s}, {"model", ctx.model}};
}

}  // namespace

std::string completion_body(const ResponseContext& ctx, const std::vector<ChoiceText>& choices,
                            const Usage& usage) {
  const bool chat = ctx.endpoint == Endpoint::kChatCompletions;
  json body = base(ctx, chat ? "chat.completion" : "text_completion");
  json array = json::array();
  for (std::size_t i = 0; i < choices.size(); ++i) {
    const ChoiceText& c = choices[i];
    json choice = {{"index", i},
                   {"finish_reason", c.finish_reason},
                   {"logprobs", logprobs_json(ctx, c.logprobs, 0)}};
    const MessageDelta& m = c.message;
    if (chat) {
      json message = {{"role", "assistant"}};
      message["content"] =
          m.content.empty() && !m.tool_calls.empty() ? json(nullptr) : json(m.content);
      if (!m.reasoning.empty()) message["reasoning_content"] = m.reasoning;
      if (!m.tool_calls.empty()) message["tool_calls"] = tool_calls_json(m.tool_calls, false);
      choice["message"] = std::move(message);
    } else {
      choice["text"] = m.content;
    }
    array.push_back(std::move(choice));
  }
  body["choices"] = std::move(array);
  body["usage"] = usage_json(usage);
  return dump(body);
}

std::string stream_chunk(const ResponseContext& ctx, int index, const MessageDelta& message,
                         const std::optional<std::string>& finish_reason,
                         const std::vector<TokenLogprob>& logprobs, bool first,
                         const Usage& usage) {
  const bool chat = ctx.endpoint == Endpoint::kChatCompletions;
  json body = base(ctx, chat ? "chat.completion.chunk" : "text_completion");
  json choice = {{"index", index},
                 {"finish_reason", finish_reason ? json(*finish_reason) : json(nullptr)},
                 {"logprobs", logprobs_json(ctx, logprobs, 0)}};
  if (chat) {
    json delta = json::object();
    if (first) delta["role"] = "assistant";
    const bool other = !message.reasoning.empty() || !message.tool_calls.empty();
    if (!message.content.empty() || (first && !finish_reason && !other)) {
      delta["content"] = message.content;
    }
    if (!message.reasoning.empty()) delta["reasoning_content"] = message.reasoning;
    if (!message.tool_calls.empty())
      delta["tool_calls"] = tool_calls_json(message.tool_calls, true);
    choice["delta"] = delta;
  } else {
    choice["text"] = message.content;
  }
  body["choices"] = json::array({choice});
  if (ctx.include_usage) body["usage"] = ctx.continuous_usage ? usage_json(usage) : json(nullptr);
  return dump(body);
}

std::string usage_chunk(const ResponseContext& ctx, const Usage& usage) {
  const bool chat = ctx.endpoint == Endpoint::kChatCompletions;
  json body = base(ctx, chat ? "chat.completion.chunk" : "text_completion");
  body["choices"] = json::array();
  body["usage"] = usage_json(usage);
  return dump(body);
}

}  // namespace packserve::server
