// openai_response.h: the JSON bodies packserve answers with on /v1/completions and
// /v1/chat/completions, as OpenAI shapes them (docs/server.md):
//   completions:  object "text_completion", choices[i].text, finish_reason, usage
//   chat:         object "chat.completion", choices[i].message {role, content[,
//                 reasoning_content][, tool_calls]}
//   streaming:    object "text_completion" / "chat.completion.chunk", one delta of one
//                 choice (its "index") per event; chat's first chunk of a choice carries
//                 {"role": "assistant"}; the chunk with the finish_reason ends the choice; with
//                 stream_options.include_usage every chunk has "usage": null and a last chunk
//                 has "choices": [] and the usage; with vLLM's continuous_usage_stats too,
//                 every chunk has its choice's usage so far instead of null.
// Choice i of a request with P prompts and n choices per prompt is choice i % n of prompt
// i / n (OpenAI's order).
// Every string goes through JSON's replacement of invalid UTF-8, so output never fails to
// serialise.
// Thread-safety: pure functions.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "packserve/server/openai_request.h"

namespace packserve::server {

struct ResponseContext {
  Endpoint endpoint = Endpoint::kCompletions;
  std::string id;         // "cmpl-7" / "chatcmpl-7"
  int64_t created_s = 0;  // unix time
  std::string model;
  bool logprobs = false;
  int32_t top_logprobs = 0;       // alternatives per token (completions' logprobs = k)
  bool include_usage = false;     // streaming: usage: null on chunks, a last usage chunk
  bool continuous_usage = false;  // streaming, with include_usage: each chunk's usage so far
};

struct Usage {
  int64_t prompt_tokens = 0;
  int64_t completion_tokens = 0;
  int64_t cached_prompt_tokens = 0;
};

struct TokenLogprob {
  std::string token;              // the token's text
  std::optional<double> logprob;  // none for an echoed prompt's first token (then no top)
  // The ResponseContext::top_logprobs most likely tokens (text, logprob), most likely first.
  std::vector<std::pair<std::string, double>> top;
};

// A tool call of a chat choice (choice_output.h): whole in a response, or a streamed piece. A
// piece with an empty id continues call `index` (more of its arguments); name is then empty.
struct ResponseToolCall {
  int index = 0;  // the call's position among the choice's calls
  std::string id;
  std::string name;
  std::string arguments;
};

// What a chunk of one choice carries (choice_output.h), or (merged) its whole message.
// Completions: only content, the text.
struct MessageDelta {
  std::string reasoning;  // chat: reasoning_content (the reasoning parser's)
  std::string content;
  std::vector<ResponseToolCall> tool_calls;
};

// One finished choice of a non-streaming response. Chat: with tool_calls and no content the
// message's content is null; reasoning_content is there when the reasoning is not empty.
struct ChoiceText {
  MessageDelta message;
  std::string finish_reason;
  std::vector<TokenLogprob> logprobs;
};

// The whole non-streaming body; choices[i] gets "index" i.
std::string completion_body(const ResponseContext& ctx, const std::vector<ChoiceText>& choices,
                            const Usage& usage);

// One streamed chunk's JSON (without SSE framing) for choice `index`. `first` (the choice's
// first chunk) adds chat's role delta; `finish_reason` ends the choice. Chat: delta.content,
// delta.reasoning_content when not empty, and delta.tool_calls: a call's first piece with its
// id, type and name, a continuation with its index and arguments only.
// `usage`: the choice's so far, written with ctx.continuous_usage (else null, or absent).
std::string stream_chunk(const ResponseContext& ctx, int index, const MessageDelta& delta,
                         const std::optional<std::string>& finish_reason,
                         const std::vector<TokenLogprob>& logprobs, bool first,
                         const Usage& usage = {});

// The final usage chunk of a stream with include_usage ("choices": []).
std::string usage_chunk(const ResponseContext& ctx, const Usage& usage);

}  // namespace packserve::server
