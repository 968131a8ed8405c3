// openai_response.h: the JSON bodies packserve answers with on /v1/completions and
// /v1/chat/completions, as OpenAI shapes them (docs/server.md):
//   completions:  object "text_completion", choices[0].text, finish_reason, usage
//   chat:         object "chat.completion", choices[0].message {role, content}
//   streaming:    object "text_completion" / "chat.completion.chunk", one delta per event;
//                 chat's first chunk carries {"role": "assistant"}; the chunk with the
//                 finish_reason ends the choice; with stream_options.include_usage every chunk
//                 has "usage": null and a last chunk has "choices": [] and the usage.
// Every string goes through JSON's replacement of invalid UTF-8, so output never fails to
// serialise.
// Thread-safety: pure functions.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "packserve/server/openai_request.h"

namespace packserve::server {

struct ResponseContext {
  Endpoint endpoint = Endpoint::kCompletions;
  std::string id;  // "cmpl-7" / "chatcmpl-7"
  int64_t created_s = 0;  // unix time
  std::string model;
  bool logprobs = false;
  bool include_usage = false;  // streaming: usage: null on chunks, a last usage chunk
};

struct Usage {
  int64_t prompt_tokens = 0;
  int64_t completion_tokens = 0;
  int64_t cached_prompt_tokens = 0;
};

struct TokenLogprob {
  std::string token;  // the token's text
  double logprob = 0.0;
};

// The whole non-streaming body.
std::string completion_body(const ResponseContext& ctx, const std::string& text,
                            const std::string& finish_reason, const Usage& usage,
                            const std::vector<TokenLogprob>& logprobs);

// One streamed chunk's JSON (without SSE framing). `first` adds chat's role delta;
// `finish_reason` ends the choice.
std::string stream_chunk(const ResponseContext& ctx, const std::string& text_delta,
                         const std::optional<std::string>& finish_reason,
                         const std::vector<TokenLogprob>& logprobs, bool first);

// The final usage chunk of a stream with include_usage ("choices": []).
std::string usage_chunk(const ResponseContext& ctx, const Usage& usage);

}  // namespace packserve::server
