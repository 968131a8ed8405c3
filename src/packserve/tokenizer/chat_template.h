// chat_template.h: renders chat messages into prompt text for the two template families
// packserve supports, selected from tokenizer_config.json's "chat_template" (a Jinja
// template, recognised by its markers; it is not executed):
//   kLlama3: <|start_header_id|> ... <|end_header_id|>\n\n content <|eot_id|>, after bos_token;
//            generation prompt "<|start_header_id|>assistant<|end_header_id|>\n\n".
//            Content is trimmed of surrounding whitespace, as Meta's template does.
//   kChatml: <|im_start|>role\ncontent<|im_end|>\n (Qwen2, Qwen3 and others);
//            generation prompt "<|im_start|>assistant\n".
// Not reproduced (docs/tokenizer.md): default system prompts that some templates inject
// (Llama-3.1's "Cutting Knowledge Date", Qwen2.5's "You are Qwen"), tools, and Qwen3's
// <think> handling of earlier assistant turns.
// Thread-safety: immutable values.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "packserve/common/status.h"

namespace packserve::tokenizer {

enum class ChatTemplateFamily { kLlama3, kChatml };

// "llama3" / "chatml" <-> family; parse errors name the accepted values.
Result<ChatTemplateFamily> parse_chat_template_family(std::string_view name);
std::string_view chat_template_family_name(ChatTemplateFamily family);

struct ChatMessage {
  std::string role;  // "system", "user" or "assistant"
  std::string content;
};

class ChatTemplate {
 public:
  // From tokenizer_config.json text. With `family` given it is used as is (the config may
  // then lack a chat_template); otherwise the family is detected from chat_template (a string,
  // or a list of {"name", "template"} whose "default" entry is used) and an unknown or missing
  // template is a kInvalidArgument naming the file and field.
  static Result<ChatTemplate> from_config_text(std::string_view config_json,
                                               const std::string& source_name,
                                               std::optional<ChatTemplateFamily> family);
  // Reads `<dir>/tokenizer_config.json`.
  static Result<ChatTemplate> from_dir(const std::string& dir,
                                       std::optional<ChatTemplateFamily> family);
  // Detects the family of a Jinja chat template by its markers.
  static Result<ChatTemplateFamily> detect_family(std::string_view jinja_template);

  ChatTemplate(ChatTemplateFamily family, std::string bos_token)
      : family_(family), bos_token_(std::move(bos_token)) {}

  // Prompt text for `messages`; with `add_generation_prompt` it ends where the assistant's
  // reply begins. kInvalidArgument naming messages[i].role for a role other than system,
  // user or assistant, or when `messages` is empty.
  Result<std::string> render(const std::vector<ChatMessage>& messages,
                             bool add_generation_prompt) const;

  ChatTemplateFamily family() const { return family_; }
  const std::string& bos_token() const { return bos_token_; }

 private:
  ChatTemplateFamily family_;
  std::string bos_token_;  // Llama-3 only: prepended once (tokenizer_config's bos_token)
};

}  // namespace packserve::tokenizer
