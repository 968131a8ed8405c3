// tokenize_handler.h: POST /tokenize and POST /detokenize, vLLM's tokenizer endpoints
// (docs/server.md "Tokenizer endpoints"), over an EngineApi's tokenizer:
//   /tokenize   {"model", "prompt": "<text>"[, "add_special_tokens": true]}
//            or {"model", "messages": [...][, "add_generation_prompt": true]
//                [, "continue_final_message": false][, "tools"][, "chat_template_kwargs"]}
//            -> 200 {"count": N, "max_model_len": M, "tokens": [ids]}
//   /detokenize {"model", "tokens": [ids]} -> 200 {"prompt": "<text>"}
// The tokens are those generation runs on (prompt_tokens.h): a text prompt as a
// /v1/completions text prompt (add_special_tokens defaults to true, as there), messages as
// /v1/chat/completions renders them (the chat template, with the assistant generation prompt
// unless add_generation_prompt is false, and with the tools, as a chat request shows them).
// The count is not checked against M (vLLM does not
// either): the caller learns whether a prompt fits. Detokenize writes special tokens out (as
// Hugging Face's decode does by default), so detokenize(tokenize(text)) is text with the
// special tokens' texts around it, and exactly text with add_special_tokens false.
// Bodies are read as the generation routes read theirs (request_json.h): unknown fields,
// wrong types, malformed JSON are 400 naming the field; another model name is 404
// model_not_found; exactly one of prompt and messages (else 400 naming the field); an id
// outside the vocabulary is 400 naming tokens[i].
// These routes submit nothing: no KV page, no engine thread work (http_server.cc decides
// which server states they answer in).
// Thread-safety: pure functions over a thread-safe EngineApi.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "packserve/server/api_error.h"
#include "packserve/server/engine_api.h"
#include "packserve/tokenizer/chat_template.h"

namespace httplib {
struct Request;
struct Response;
}  // namespace httplib

namespace packserve::server {

struct TokenizeRequest {
  std::string model;
  // Exactly one of the two is set.
  std::optional<std::string> prompt;                            // a non-empty text
  std::optional<std::vector<tokenizer::ChatMessage>> messages;  // non-empty
  bool add_special_tokens = true;     // prompt only: the tokenizer's template (e.g. BOS)
  bool add_generation_prompt = true;  // messages only: end with the assistant's turn
  // messages only: the tools shown to the model, chat_template_kwargs' enable_thinking.
  tokenizer::ChatRenderOptions chat_options;
};

struct DetokenizeRequest {
  std::string model;
  std::vector<int32_t> tokens;  // each >= 0 (the vocabulary is checked against the engine)
};

// Parses a /tokenize body. Errors are HTTP 400 naming the field.
ApiResult<TokenizeRequest> parse_tokenize_request(std::string_view body);
// Parses a /detokenize body. Errors are HTTP 400 naming the field (`tokens[i]` for an element
// that is not an integer in [0, 2^31)).
ApiResult<DetokenizeRequest> parse_detokenize_request(std::string_view body);

// Answer `req` (its body) as /tokenize or /detokenize with `engine`'s tokenizer.
void handle_tokenize(const EngineApi& engine, const std::string& served_model_name,
                     const httplib::Request& req, httplib::Response& res);
void handle_detokenize(const EngineApi& engine, const std::string& served_model_name,
                       const httplib::Request& req, httplib::Response& res);

}  // namespace packserve::server
