// request_json.h: the JSON reading shared by the server's request parsers (openai_request.cc
// for /v1/completions and /v1/chat/completions, tokenize_handler.cc for /tokenize and
// /detokenize), so that every route reads a body, a field and a prompt the same way.
//
// Contract (docs/server.md "Errors"): every failure is an ApiError (HTTP 400,
// invalid_request_error) whose `param` names the field and whose message says what was
// expected and what came: `max_tokens: expected an integer >= 1, got "ten"`. A body is scanned
// for nesting depth before parsing (kMaxJsonDepth), so deeply nested input cannot exhaust the
// stack of the recursive JSON parser; invalid UTF-8, truncated JSON, NaN/Infinity literals and
// numbers that overflow a double are all 400 with no param.
// Internal to the server library (it exposes nlohmann::json, which the library links
// privately): include it from server .cc files and server tests only.
// Thread-safety: pure functions.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "packserve/common/json_depth.h"
#include "packserve/server/api_error.h"
#include "packserve/tokenizer/chat_template.h"

namespace packserve::server {

// Deepest array/object nesting accepted in a request body.
inline constexpr int kMaxJsonDepth = 32;

// A short rendering of a received value for error messages (at most 40 characters).
std::string describe(const nlohmann::json& value);

// 400 `<field>: expected <expected>, got <describe(got)>`, param `field`.
ApiError wrong(const std::string& field, const std::string& expected, const nlohmann::json& got);

// `field` is in `body` and not null (an optional field given as null counts as absent).
bool present(const nlohmann::json& body, const char* field);

// body[field] as a boolean; else 400 naming the field. Precondition: present(body, field).
ApiResult<bool> get_bool(const nlohmann::json& body, const char* field);

// A JSON list of token ids (integers in [0, 2^31)); an element that is not one is 400 naming
// `field[i]`. Precondition: `v` is an array.
ApiResult<std::vector<int32_t>> token_id_list(const nlohmann::json& v, const std::string& field);

// Any key of `body` not in `known` is 400 `Unrecognized request argument supplied: <key>` (as
// OpenAI answers), so a misspelt parameter is never silently ignored.
std::optional<ApiError> check_known_fields(const nlohmann::json& body,
                                           const std::set<std::string>& known);

// body["model"]: required, a string.
ApiResult<std::string> parse_model(const nlohmann::json& body);

// A text prompt named `field` (completions' prompt, an element of its batch, tokenize's
// prompt): a non-empty string; any other value is 400 `field: expected <expected>, got ...`.
ApiResult<std::string> parse_text_prompt(const nlohmann::json& value, const std::string& field,
                                         const std::string& expected);

// body["messages"] (chat): a non-empty list of {role, content[, name]}; role "developer" is
// read as "system"; content a string or a list of {"type": "text", "text"} parts, which are
// joined; an assistant message may have no content and may have tool_calls ([{"id", "type":
// "function", "function": {"name", "arguments"}}], arguments as JSON text or an object, whose
// keys then come sorted) and reasoning_content (a string: Qwen3's template reads it); a "tool"
// message (a call's result) has content and may have
// tool_call_id. Errors name `messages[i].<field>`.
ApiResult<std::vector<tokenizer::ChatMessage>> parse_messages(const nlohmann::json& body);

// body["chat_template_kwargs"] (vLLM's; chat) into `options`: an object whose keys read are
// "enable_thinking" (true or false: Qwen3's switch) and "date_string" (a string: Llama 3.1+'s
// "Today Date"), tokenizer::ChatRenderOptions; any other key is 400 naming it, as packserve
// does not execute the Jinja template that would read it.
std::optional<ApiError> parse_chat_template_kwargs(const nlohmann::json& body,
                                                   tokenizer::ChatRenderOptions& options);

// vLLM's body["add_generation_prompt"] (a boolean, default true: the prompt opens the
// assistant's turn) and body["continue_final_message"] (a boolean, default false: the prompt
// ends inside the final assistant message, options.continue_final_message). Continuing implies
// no generation prompt; both given true is 400 naming continue_final_message.
std::optional<ApiError> parse_generation_prompt(const nlohmann::json& body,
                                                bool& add_generation_prompt,
                                                tokenizer::ChatRenderOptions& options);

// Parses `body` as one JSON object and hands it to `parse_fields` (a callable json ->
// ApiResult<T>). Malformed JSON, nesting deeper than kMaxJsonDepth and a non-object are 400;
// a json exception escaping `parse_fields` (a type check it missed) is 400 too, never a crash.
template <typename T, typename ParseFields>
ApiResult<T> parse_json_body(std::string_view body, ParseFields&& parse_fields) {
  using nlohmann::json;
  if (json_nesting_depth(body, kMaxJsonDepth) > kMaxJsonDepth) {
    return bad_request("request body: JSON nested deeper than " + std::to_string(kMaxJsonDepth) +
                       " levels");
  }
  json parsed;
  try {
    parsed = json::parse(body.begin(), body.end());
  } catch (const json::exception& e) {
    return bad_request(std::string("request body: not valid JSON: ") + e.what());
  }
  if (!parsed.is_object()) {
    return bad_request("request body: expected a JSON object, got " + describe(parsed));
  }
  try {
    return parse_fields(parsed);
  } catch (const json::exception& e) {
    return bad_request(std::string("request body: ") + e.what());
  }
}

// Early returns for the parsers: PS_API_TRY(an std::optional<ApiError>) and
// PS_API_ASSIGN(lhs, an ApiResult<T>) return the error from the enclosing function.
#define PS_API_TRY(expr)                            \
  do {                                              \
    std::optional<ApiError> ps_api_error_ = (expr); \
    if (ps_api_error_) return *ps_api_error_;       \
  } while (0)

#define PS_API_ASSIGN(lhs, expr)                             \
  do {                                                       \
    auto ps_api_result_ = (expr);                            \
    if (!ps_api_result_.ok()) return ps_api_result_.error(); \
    lhs = ps_api_result_.value();                            \
  } while (0)

}  // namespace packserve::server
