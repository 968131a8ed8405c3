// chat_template.h: renders chat messages into prompt text for the template families packserve
// supports, selected from tokenizer_config.json's "chat_template" (a Jinja
// template, recognised by its markers; it is not executed):
//   kLlama3: <|start_header_id|> ... <|end_header_id|>\n\n content <|eot_id|>, after bos_token;
//            generation prompt "<|start_header_id|>assistant<|end_header_id|>\n\n".
//            Content is trimmed of surrounding whitespace, as Meta's template does.
//   kChatml: <|im_start|>role\ncontent<|im_end|>\n (Qwen2, Qwen3 and others);
//            generation prompt "<|im_start|>assistant\n".
//   kMistral: Mistral-7B-Instruct-v0.3's: bos_token, "[INST] content[/INST]" per user turn
//            (the system message, which must come first, goes before the content of the last
//            message when that is a user turn, then "\n\n"; the template's `loop.last`),
//            " content|trim" + eos_token per assistant turn; user and assistant must alternate
//            (tool calls and results aside); no generation prompt (the model goes on after
//            "[/INST]"). Detected by "[INST] " + content + "[/INST]" in the Jinja text.
//   kMistralTekken: Mistral-Nemo's (tekken tokenizer) form of the same: "[INST]content[/INST]"
//            (no space after [INST]), "content" + eos_token per assistant turn (no space, no
//            trim). Detected by "[INST]" + content + "[/INST]".
//   kMistralV1: Mistral-7B-Instruct-v0.1/v0.2's template as their model pages now have it:
//            bos_token, " [INST] content [/INST]" per user turn (the system message before the
//            first user turn's content, then "\n\n"; `loop.first`), " content" + eos_token per
//            assistant turn (no trim); user and assistant alternate; no tools. Detected by
//            ' [INST] ' + content + ' [/INST]'. (The first v0.1 form, "[INST] " without the
//            leading space and no system message, is refused unless the family is given.)
// Llama 3.1 / 3.2 / 3.3 templates (those with "Cutting Knowledge Date", Llama3System) always
// open with a system turn: ["Environment: ipython\n" with tools] "Cutting Knowledge Date:
// December 2023\nToday Date: DATE\n\n" + the system message's content|trim; DATE is the
// request's date_string, else the template's default: today as "%d %b %Y" (local time) where
// the template calls strftime_now (3.2, 3.3), else "26 Jul 2024" (3.1). Llama 3.0's template
// has no such turn (the messages as they come), except with tools (3.1's form, 26 Jul 2024).
// Tools (render's `tools`, and the messages that call them and answer them) follow each
// family's tool-calling template:
//   kChatml: Qwen2.5 / Qwen3 (Hermes): the tools as JSON lines inside <tools></tools> in a
//            system turn (after the system message's content), calls as
//            <tool_call>\n{"name": ..., "arguments": ...}\n</tool_call> in the assistant turn,
//            results as <tool_response>\n...\n</tool_response> in one user turn per run of
//            tool messages;
//   kLlama3: Llama 3.1 (JSON tool calling): "Environment: ipython" and the dates in the system
//            turn, the tools (JSON, indent 4) and the call instructions in the first user
//            turn, a call as {"name": ..., "parameters": ...}, a result as an "ipython" turn
//            with its content as a JSON string (the template's `tojson`), one call per
//            assistant turn.
//   kMistral, kMistralTekken: "[AVAILABLE_TOOLS] [TOOL, ...][/AVAILABLE_TOOLS]" before every
//            user turn equal to the last one (`message == user_messages[-1]`), each TOOL the
//            function's fields but "return" (strings quoted as is, others as `tojson`);
//            calls as "[TOOL_CALLS] [" + {"name": ..., "arguments": ..., "id": ID}, ... + "]"
//            + eos_token (an assistant turn that calls drops its content); results as
//            "[TOOL_RESULTS] {"content": CONTENT, "call_id": ID}[/TOOL_RESULTS]" with the
//            content as is. Tekken writes no space after [AVAILABLE_TOOLS], [TOOL_CALLS] and
//            [TOOL_RESULTS]. IDs are 9 characters (kMistralCallIdLength; the templates raise
//            otherwise): longer ones are cut to their last 9, as vLLM does; shorter ones are an
//            error.
// JSON is written as the templates' `tojson` (Python's json.dumps: ", " and ": ", keys in
// the order given, non-ASCII as is).
// A ChatML template that reads `enable_thinking` (Qwen3's; thinking_switch()) also gets Qwen3's
// handling of assistant reasoning: a turn's reasoning (its `reasoning`, else the text before
// `</think>` in its content) is dropped, except in the turns after the last user query (a
// tool-calling loop), where a turn with reasoning, and the last message, are written as
// `<think>\nREASONING\n</think>\n\nCONTENT`.
// A ChatML template with Qwen2.5's default system message (ChatTemplateTraits::default_system)
// writes it when the messages have none: as its own system turn, or before the tools.
// Thread-safety: immutable values.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "packserve/common/status.h"

namespace packserve::tokenizer {

enum class ChatTemplateFamily { kLlama3, kChatml, kMistral, kMistralTekken, kMistralV1 };

// The length of a tool call id in Mistral's templates.
inline constexpr std::size_t kMistralCallIdLength = 9;

// "llama3" / "chatml" / "mistral" / "mistral-tekken" / "mistral-v1" <-> family; parse errors
// name the accepted values.
Result<ChatTemplateFamily> parse_chat_template_family(std::string_view name);
std::string_view chat_template_family_name(ChatTemplateFamily family);

// One call an assistant turn made: the function's name and its arguments as JSON text of an
// object (OpenAI's tool_calls[i].function).
struct ChatToolCall {
  std::string name;
  std::string arguments;
  std::string id = "";  // the call's id (Mistral's templates write it)
};

// What a request adds to its messages' rendering.
struct ChatRenderOptions {
  // The function tools the model may call, each the JSON text of one {"type": "function",
  // "function": {...}} as the request gave it (key order kept).
  std::vector<std::string> tools = {};
  // Qwen3's `enable_thinking` (chat_template_kwargs): false ends the generation prompt with an
  // empty <think></think> block, so the model answers without reasoning. Only a template that
  // reads it (ChatTemplate::thinking_switch) changes; others ignore it, as their Jinja would.
  bool enable_thinking = true;
  // Llama 3.1+'s `date_string` (chat_template_kwargs): the system turn's "Today Date".
  std::optional<std::string> date_string = std::nullopt;
  // vLLM's / Hugging Face's `continue_final_message`: the prompt ends inside the final
  // (assistant) message, right after its content, so the model continues it.
  bool continue_final_message = false;
};

// Which system turn a Llama 3 template writes (chat_template.h's header comment).
enum class Llama3System {
  kWithToolsOnly,  // Llama 3.0's template: none unless there are tools
  kFixedDate,      // Llama 3.1's: always, dated 26 Jul 2024 by default
  kToday,          // Llama 3.2 / 3.3's: always, dated today by default (strftime_now)
};

// What a template does beyond its family's form, read from its Jinja text (detect_traits).
struct ChatTemplateTraits {
  // ChatML: reads `enable_thinking` (Qwen3's; thinking_switch()).
  bool thinking_switch = false;
  // Llama 3: "Cutting Knowledge Date" (and "strftime_now") in the template.
  Llama3System llama3_system = Llama3System::kWithToolsOnly;
  // ChatML: the system message written when the messages have none (Qwen2.5's "You are
  // Qwen, created by Alibaba Cloud. You are a helpful assistant."); empty: none.
  std::string default_system = "";
};

struct ChatMessage {
  std::string role;  // "system", "user", "assistant" or "tool" (a tool call's result)
  std::string content;
  std::vector<ChatToolCall> tool_calls = {};  // assistant only
  // Assistant only: its reasoning_content, when given (Qwen3's template reads it).
  std::optional<std::string> reasoning = std::nullopt;
  std::string tool_call_id = "";  // tool only: the call it answers (Mistral's templates write it)
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
  // Its traits, by the strings that give them away.
  static ChatTemplateTraits detect_traits(std::string_view jinja_template);

  ChatTemplate(ChatTemplateFamily family, std::string bos_token, std::string eos_token = "",
               ChatTemplateTraits traits = {})
      : family_(family),
        bos_token_(std::move(bos_token)),
        eos_token_(std::move(eos_token)),
        traits_(std::move(traits)) {}

  // Prompt text for `messages`; with `add_generation_prompt` it ends where the assistant's
  // reply begins. kInvalidArgument naming the field: messages[i].role for a role other than system,
  // user, assistant or tool; tool_calls outside an assistant turn; arguments or tools[i] that are
  // not JSON objects; an empty `messages`; Llama 3: tools without a user message to put them
  // in (messages[i]), or several calls in one assistant turn; Mistral: a tool call id shorter
  // than kMistralCallIdLength (messages[i].tool_calls[j].id, messages[i].tool_call_id), tools
  // or calls with v0.1/v0.2's template. With options.continue_final_message: the whole
  // conversation cut after the final message's content (its trailing whitespace kept where the
  // template keeps it and it has none before it, as Hugging Face's); kInvalidArgument with
  // add_generation_prompt, when the final message is not an assistant message of text
  // (messages[i].role / .tool_calls / .content), or when the template changed that text so it is
  // not in the prompt.
  Result<std::string> render(const std::vector<ChatMessage>& messages, bool add_generation_prompt,
                             const ChatRenderOptions& options = {}) const;

  ChatTemplateFamily family() const { return family_; }
  const std::string& bos_token() const { return bos_token_; }
  // The template reads `enable_thinking` (Qwen3's): detected in its Jinja text.
  bool thinking_switch() const { return traits_.thinking_switch; }
  Llama3System llama3_system() const { return traits_.llama3_system; }
  const ChatTemplateTraits& traits() const { return traits_; }

 private:
  Result<std::string> render_continuing(const std::vector<ChatMessage>& messages,
                                        bool add_generation_prompt,
                                        const ChatRenderOptions& options) const;

  ChatTemplateFamily family_;
  std::string bos_token_;  // Llama-3, Mistral: prepended once (tokenizer_config's bos_token)
  std::string eos_token_;  // Mistral: after each assistant turn (tokenizer_config's eos_token)
  ChatTemplateTraits traits_;
};

}  // namespace packserve::tokenizer
