// tokenize_handler.cc: see tokenize_handler.h.
#include "packserve/server/tokenize_handler.h"

#include <httplib.h>

#include <cctype>
#include <nlohmann/json.hpp>
#include <set>
#include <utility>

#include "packserve/server/generate_handler.h"
#include "packserve/server/prompt_tokens.h"
#include "packserve/server/request_json.h"
#include "packserve/server/tool_request.h"

namespace packserve::server {
namespace {

using nlohmann::json;

ApiResult<TokenizeRequest> parse_tokenize_fields(const json& body, std::string_view raw_body) {
  static const std::set<std::string> kKnown = {"model",
                                               "prompt",
                                               "messages",
                                               "add_special_tokens",
                                               "add_generation_prompt",
                                               "continue_final_message",
                                               "tools",
                                               "chat_template_kwargs"};
  PS_API_TRY(check_known_fields(body, kKnown));
  TokenizeRequest out;
  PS_API_ASSIGN(out.model, parse_model(body));
  const bool has_prompt = body.contains("prompt");
  const bool has_messages = body.contains("messages");
  if (has_prompt && has_messages) {
    return bad_request(
        "messages: not allowed together with prompt; give exactly one of prompt (text) and "
        "messages (chat)",
        "messages");
  }
  if (!has_prompt && !has_messages) {
    return bad_request(
        "prompt: required (or messages, for a chat prompt); give exactly one of prompt and "
        "messages",
        "prompt");
  }
  if (has_prompt) {
    PS_API_ASSIGN(out.prompt, parse_text_prompt(body.at("prompt"), "prompt", "a string"));
  } else {
    PS_API_ASSIGN(out.messages, parse_messages(body));
  }
  if (present(body, "add_special_tokens")) {
    if (!has_prompt) {
      return bad_request(
          "add_special_tokens: only with prompt (a chat prompt's special tokens come from the "
          "chat template)",
          "add_special_tokens");
    }
    PS_API_ASSIGN(out.add_special_tokens, get_bool(body, "add_special_tokens"));
  }
  for (const char* field : {"add_generation_prompt", "continue_final_message"}) {
    if (present(body, field) && !has_messages) {
      return bad_request(std::string(field) + ": only with messages", field);
    }
  }
  PS_API_TRY(parse_generation_prompt(body, out.add_generation_prompt, out.chat_options));
  if (present(body, "tools")) {
    if (!has_messages) return bad_request("tools: only with messages", "tools");
    std::vector<Tool> tools;
    PS_API_TRY(parse_tools(body, raw_body, tools));
    for (Tool& tool : tools) out.chat_options.tools.push_back(std::move(tool.definition));
  }
  if (present(body, "chat_template_kwargs")) {
    if (!has_messages) {
      return bad_request("chat_template_kwargs: only with messages", "chat_template_kwargs");
    }
    PS_API_TRY(parse_chat_template_kwargs(body, out.chat_options));
  }
  return out;
}

ApiResult<DetokenizeRequest> parse_detokenize_fields(const json& body) {
  static const std::set<std::string> kKnown = {"model", "tokens"};
  PS_API_TRY(check_known_fields(body, kKnown));
  DetokenizeRequest out;
  PS_API_ASSIGN(out.model, parse_model(body));
  if (!body.contains("tokens")) return bad_request("tokens: required", "tokens");
  const json& tokens = body.at("tokens");
  if (!tokens.is_array()) return wrong("tokens", "a list of token ids", tokens);
  PS_API_ASSIGN(out.tokens, token_id_list(tokens, "tokens"));
  return out;
}

// A decode failure `ids[i]: why` (EngineApi::decode) as a 400 naming tokens[i].
ApiError decode_error(const Status& status) {
  const std::string& m = status.message();
  const std::string kPrefix = "ids[";
  if (m.compare(0, kPrefix.size(), kPrefix) == 0) {
    std::size_t end = kPrefix.size();
    while (end < m.size() && std::isdigit(static_cast<unsigned char>(m[end]))) ++end;
    if (end > kPrefix.size() && m.compare(end, 2, "]:") == 0) {
      const std::string field = "tokens[" + m.substr(kPrefix.size(), end - kPrefix.size()) + "]";
      return bad_request(field + m.substr(end + 1), field);
    }
  }
  return bad_request("tokens: " + m, "tokens");
}

std::string dump(const json& body) {
  return body.dump(-1, ' ', false, json::error_handler_t::replace);
}

// The 200 body of /tokenize for `body`, or the error.
ApiResult<std::string> tokenize(const EngineApi& engine, const std::string& served_model_name,
                                std::string_view body) {
  ApiResult<TokenizeRequest> parsed = parse_tokenize_request(body);
  if (!parsed.ok()) return parsed.error();
  const TokenizeRequest& r = parsed.value();
  if (auto error = check_model(r.model, served_model_name)) return *error;
  ApiResult<std::vector<int32_t>> ids =
      r.prompt ? encode_text_prompt(engine, *r.prompt, r.add_special_tokens, "prompt")
               : encode_chat_prompt(engine, *r.messages, r.add_generation_prompt, r.chat_options);
  if (!ids.ok()) return ids.error();
  return dump(json{{"count", ids.value().size()},
                   {"max_model_len", engine.max_model_len()},
                   {"tokens", ids.value()}});
}

// The 200 body of /detokenize for `body`, or the error.
ApiResult<std::string> detokenize(const EngineApi& engine, const std::string& served_model_name,
                                  std::string_view body) {
  ApiResult<DetokenizeRequest> parsed = parse_detokenize_request(body);
  if (!parsed.ok()) return parsed.error();
  const DetokenizeRequest& r = parsed.value();
  if (auto error = check_model(r.model, served_model_name)) return *error;
  if (auto error = check_token_ids(engine, r.tokens, "tokens")) return *error;
  Result<std::string> text = engine.decode(r.tokens);
  if (!text.ok()) return decode_error(text.status());
  return dump(json{{"prompt", text.value()}});
}

void answer(const ApiResult<std::string>& result, httplib::Response& res) {
  if (!result.ok()) {
    set_error(res, result.error());
    return;
  }
  res.status = 200;
  res.set_content(result.value(), "application/json");
}

}  // namespace

ApiResult<TokenizeRequest> parse_tokenize_request(std::string_view body) {
  return parse_json_body<TokenizeRequest>(
      body, [body](const json& parsed) { return parse_tokenize_fields(parsed, body); });
}

ApiResult<DetokenizeRequest> parse_detokenize_request(std::string_view body) {
  return parse_json_body<DetokenizeRequest>(body, parse_detokenize_fields);
}

void handle_tokenize(const EngineApi& engine, const std::string& served_model_name,
                     const httplib::Request& req, httplib::Response& res) {
  answer(tokenize(engine, served_model_name, req.body), res);
}

void handle_detokenize(const EngineApi& engine, const std::string& served_model_name,
                       const httplib::Request& req, httplib::Response& res) {
  answer(detokenize(engine, served_model_name, req.body), res);
}

}  // namespace packserve::server
