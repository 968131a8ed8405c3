// prompt_tokens.h: a request's prompt -> token ids, one rule for every route that reads a
// prompt (/v1/completions, /v1/chat/completions, /tokenize), so /tokenize answers exactly the
// tokens that generation would run on:
//   text prompt: EngineApi::encode(text, add_special_tokens); completions pass true (the
//                tokenizer's template, e.g. BOS where the model has one);
//   chat:        EngineApi::render_chat(messages, add_generation_prompt, options) (completions:
//                true; the tools, with tool_choice none too unless the server excludes
//                them; chat_template_kwargs' enable_thinking),
//                then encode without special tokens (the template writes its own BOS);
//   token ids:   each must lie in [0, EngineApi::vocab_size()).
// Errors are HTTP 400 (invalid_request_error) naming the field: `prompt`, `prompt[i]`,
// `messages`, or the offending id's `<field>[i]`.
// Thread-safety: as EngineApi (callable from many HTTP threads).
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "packserve/server/api_error.h"
#include "packserve/server/engine_api.h"
#include "packserve/tokenizer/chat_template.h"

namespace packserve::server {

// Token ids of text prompt `text`, named `field` in errors.
ApiResult<std::vector<int32_t>> encode_text_prompt(const EngineApi& engine, std::string_view text,
                                                   bool add_special_tokens,
                                                   const std::string& field);

// Token ids of the chat prompt of `messages` rendered with `options` (errors name `messages`,
// or the `messages[i]...` / `tools[i]` field the template refuses).
ApiResult<std::vector<int32_t>> encode_chat_prompt(
    const EngineApi& engine, const std::vector<tokenizer::ChatMessage>& messages,
    bool add_generation_prompt, const tokenizer::ChatRenderOptions& options = {});

// The first id of `ids` outside the vocabulary, as a 400 naming `<field>[i]`; nullopt when
// all are inside.
std::optional<ApiError> check_token_ids(const EngineApi& engine, std::span<const int32_t> ids,
                                        const std::string& field);

}  // namespace packserve::server
