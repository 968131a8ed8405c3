// prompt_tokens.cc: see prompt_tokens.h.
#include "packserve/server/prompt_tokens.h"

#include <utility>

namespace packserve::server {

ApiResult<std::vector<int32_t>> encode_text_prompt(const EngineApi& engine, std::string_view text,
                                                   bool add_special_tokens,
                                                   const std::string& field) {
  Result<std::vector<int32_t>> ids = engine.encode(text, add_special_tokens);
  if (!ids.ok()) return bad_request(field + ": " + ids.status().message(), field);
  return std::move(ids.value());
}

ApiResult<std::vector<int32_t>> encode_chat_prompt(
    const EngineApi& engine, const std::vector<tokenizer::ChatMessage>& messages,
    bool add_generation_prompt, const tokenizer::ChatRenderOptions& options) {
  Result<std::string> rendered = engine.render_chat(messages, add_generation_prompt, options);
  if (!rendered.ok()) {
    // The template names the message or tool it refuses; other errors are the messages'.
    const std::string& m = rendered.status().message();
    if (m.starts_with("messages[") || m.starts_with("tools[")) {
      return bad_request(m, m.substr(0, m.find(':')));
    }
    return bad_request("messages: " + m, "messages");
  }
  return encode_text_prompt(engine, rendered.value(), /*add_special_tokens=*/false, "messages");
}

std::optional<ApiError> check_token_ids(const EngineApi& engine, std::span<const int32_t> ids,
                                        const std::string& field) {
  const int64_t vocab_size = engine.vocab_size();
  for (std::size_t i = 0; i < ids.size(); ++i) {
    if (ids[i] < 0 || ids[i] >= vocab_size) {
      const std::string f = field + "[" + std::to_string(i) + "]";
      return bad_request(f + ": token id " + std::to_string(ids[i]) +
                             " is not in the vocabulary (ids 0 to " +
                             std::to_string(vocab_size - 1) + ")",
                         f);
    }
  }
  return std::nullopt;
}

}  // namespace packserve::server
