// openai_request.h: parses and validates the JSON body of POST /v1/completions and
// POST /v1/chat/completions into a typed OpenAiRequest (issue 5 "Server").
//
// Contract: every field is checked for presence and type before use; a wrong-typed, out of
// range, unsupported or unknown field is an ApiError (HTTP 400, invalid_request_error) whose
// `param` names the field and whose message says what was expected and what came:
//   `max_tokens: expected an integer >= 1, got "ten"`.
// Nothing is defaulted silently except what OpenAI documents as optional (docs/server.md).
// The body, the model, the prompt and the messages are read by request_json.h, as the
// tokenizer routes read theirs (tokenize_handler.h): nesting deeper than kMaxJsonDepth,
// invalid UTF-8, truncated JSON, NaN/Infinity literals and numbers that overflow a double are
// all 400.
// Context checks need the tokenizer and the engine's limits: resolve_max_tokens() runs after
// the prompt is tokenized.
// Thread-safety: pure functions.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "packserve/engine/engine.h"
#include "packserve/server/api_error.h"
#include "packserve/tokenizer/chat_template.h"

namespace packserve::server {

enum class Endpoint { kCompletions, kChatCompletions };

// Stop strings per request (SamplingParams' limit) and the longest one, bytes.
inline constexpr int kMaxStopStrings = 16;
inline constexpr std::size_t kMaxStopStringBytes = 256;
// bad_words per request: each becomes up to two token sequences (bare and after a space).
inline constexpr std::size_t kMaxBadWords = engine::kMaxBadWordsSequences / 2;
// The whitespace a bad word may not consist of only, and loses at its start when tokenized.
inline constexpr const char* kBadWordSpace = " \t\n\r\f\v";
// Choices per request: prompts x n, each generated as its own engine request.
inline constexpr int kMaxChoices = 128;

// One completions prompt: text, or token ids (exactly one is set).
struct Prompt {
  std::optional<std::string> text;
  std::optional<std::vector<int32_t>> token_ids;
};

// A function tool the model may call (chat's tools[i]).
struct Tool {
  std::string name;
  // tools[i] as JSON text, keys in the order written: what the chat template renders.
  std::string definition;
  // Its function.parameters schema as JSON text, keys in the order written; empty when absent
  // (no parameters: the arguments are an object).
  std::string parameters;
  // function.strict true: under tool_choice auto, its calls follow its parameters schema
  // (tool_request.h auto_calls_constraint).
  bool strict = false;
};

// tool_choice (docs/server.md "Tool calls"): kNone: the text is content (the tools are shown
// to the model unless the server excludes them); kAuto: the output is read for the chat
// template's tool-call syntax; kRequired: the output is constrained to calls of the tools in
// that syntax; kNamed: the output is constrained to tool_choice_name's arguments.
enum class ToolChoice { kNone, kAuto, kRequired, kNamed };

struct OpenAiRequest {
  Endpoint endpoint = Endpoint::kCompletions;
  std::string model;
  // Completions: the prompts (at least one; a list in the body is a batch of prompts).
  std::vector<Prompt> prompts;
  // Chat: the messages (non-empty).
  std::vector<tokenizer::ChatMessage> messages;
  // max_tokens (chat: max_completion_tokens wins over max_tokens); nullopt = the endpoint's
  // default (completions 16, chat: the rest of the context), see resolve_max_tokens().
  std::optional<int32_t> max_tokens;
  std::string max_tokens_field = "max_tokens";  // the field it came from (error params)
  double temperature = 1.0;
  double top_p = 1.0;
  int32_t top_k = 0;  // 0 = off (-1 is accepted as off too, as vLLM clients send it)
  double min_p = 0.0;
  double presence_penalty = 0.0;    // in [-2, 2]
  double frequency_penalty = 0.0;   // in [-2, 2]
  double repetition_penalty = 1.0;  // extension (vLLM): > 0, 1 = off
  // logit_bias: {"token id": bias in [-100, 100]}, at most engine::kMaxLogitBias entries (ids
  // are checked against the vocabulary by the engine).
  std::vector<std::pair<int32_t, double>> logit_bias;
  std::optional<uint64_t> seed;  // a JSON int64 reinterpreted as uint64
  std::vector<std::string> stop;
  std::vector<int32_t> stop_token_ids;     // extension (vLLM)
  std::vector<int32_t> allowed_token_ids;  // extension (vLLM): only these are drawn
  // Extension (vLLM): words that may not be generated, at most kMaxBadWords, each with text
  // other than whitespace; tokenized by the handler (bad_words_token_ids).
  std::vector<std::string> bad_words;
  bool ignore_eos = false;                  // extension (vLLM)
  bool include_stop_str_in_output = false;  // extension (vLLM): the matched stop string kept
  bool skip_special_tokens = true;          // extension (vLLM): special tokens out of the text
  int32_t min_tokens = 0;                   // extension (vLLM): <= the resolved max_tokens
  // Extension (vLLM): keep only the last this many prompt tokens (-1: the model's context);
  // unset: no truncation. Checked against the context by truncate_prompt.
  std::optional<int64_t> truncate_prompt_tokens;
  int32_t n = 1;             // choices per prompt; prompts x n <= kMaxChoices
  bool logprobs = false;     // completions: logprobs = k >= 0; chat: logprobs = true
  int32_t top_logprobs = 0;  // completions: that k; chat: top_logprobs (needs logprobs)
  // Completions: each choice's text starts with its prompt's, and with logprobs its logprobs
  // with the prompt tokens' (the first one's null), as OpenAI's legacy echo.
  bool echo = false;
  // response_format / structured_outputs / guided_* (structured_request.h); for tool_choice
  // required or a named function, the constraint that makes the output the calls
  // (tool_request.h).
  engine::StructuredOutput structured;
  // Chat: tools, tool_choice (default auto with tools, none without) and
  // parallel_tool_calls (false: required's constraint allows one call; auto returns every call
  // the model writes).
  std::vector<Tool> tools;
  ToolChoice tool_choice = ToolChoice::kNone;
  std::size_t tool_choice_index = 0;  // kNamed: the tool's index in `tools`
  bool parallel_tool_calls = true;
  // Chat: chat_template_kwargs and continue_final_message (request_json.h); the tools are added
  // when the prompt is built.
  tokenizer::ChatRenderOptions chat_options;
  // Chat: vLLM's add_generation_prompt (false with continue_final_message).
  bool add_generation_prompt = true;
  bool stream = false;
  int32_t priority = 0;        // vLLM's; needs serve --policy priority unless 0
  bool include_usage = false;  // stream_options.include_usage
  // vLLM's stream_options.continuous_usage_stats (with include_usage): every chunk's usage.
  bool continuous_usage = false;
};

// Parses `body` for `endpoint`. Errors are HTTP 400 naming the field.
ApiResult<OpenAiRequest> parse_openai_request(std::string_view body, Endpoint endpoint);

// The field naming prompt `index` of `request` in errors: "messages" (chat), "prompt" (one
// prompt) or "prompt[i]" (a batch).
std::string prompt_field(const OpenAiRequest& request, std::size_t index);

// The max_tokens to run prompt `prompt_index` with, given its length and the context length:
// an explicit max_tokens must fit (prompt + max_tokens <= max_model_len, else 400 param
// max_tokens or max_completion_tokens); a prompt with no room for one output token is 400
// param prompt_field(). The default fills the context (chat) or is 16 clipped to it
// (completions).
ApiResult<int32_t> resolve_max_tokens(const OpenAiRequest& request, int64_t num_prompt_tokens,
                                      int64_t max_model_len, std::size_t prompt_index = 0);

// vLLM's truncate_prompt_tokens: `ids` cut to its last k tokens (k = the field, or
// max_model_len for -1); true when it cut any. A k over max_model_len is a 400 naming the field.
ApiResult<bool> truncate_prompt(const OpenAiRequest& request, int64_t max_model_len,
                                std::vector<int32_t>& ids);

// The seed of choice `choice` (0-based over the whole request) of a request with `seed`:
// choice 0 keeps it (n = 1 draws as before), the others get distinct seeds mixed from it
// (splitmix64), so the choices differ yet each is reproducible.
uint64_t choice_seed(uint64_t seed, int choice);

// The engine's sampling parameters for choice `choice` of `request` with `max_tokens`.
engine::SamplingParams to_sampling_params(const OpenAiRequest& request, int32_t max_tokens,
                                          int choice = 0);

}  // namespace packserve::server
