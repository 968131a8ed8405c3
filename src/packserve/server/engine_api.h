// engine_api.h: the narrow view of the serving engine that the HTTP layer uses (issue 5).
//
// The server parses, validates, tokenizes and enqueues; the engine (engine/engine.h, one engine
// thread) generates. Keeping this view abstract lets the HTTP layer be tested end to end with
// a scripted fake engine (server_test) and lets `serve` adapt packserve::engine::Engine
// (engine_adapter.h) once the model is loaded.
// Thread-safety: every method may be called from many HTTP threads at once.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "packserve/common/status.h"
#include "packserve/engine/engine.h"
#include "packserve/tokenizer/chat_template.h"

namespace packserve::server {

// The caller's end of one submitted request.
class OutputStream {
 public:
  virtual ~OutputStream() = default;
  virtual engine::RequestId id() const = 0;
  // Next update, waiting up to `timeout`; nullopt on timeout or after the finished update.
  virtual std::optional<engine::RequestOutput> next(std::chrono::milliseconds timeout) = 0;
  // Every later update also notifies `signal` (engine::RequestStream::attach), so that one
  // thread can wait on the streams of several choices.
  virtual void attach(std::shared_ptr<engine::StreamSignal> signal) = 0;
};

class EngineApi {
 public:
  virtual ~EngineApi() = default;

  // Failure contract of engine::Engine::submit: kInvalidArgument (bad request, naming the
  // field), kResourceExhausted (waiting queue full -> HTTP 429), kFailedPrecondition
  // (draining or stopped -> HTTP 503).
  virtual Result<std::shared_ptr<OutputStream>> submit(engine::GenerateRequest request) = 0;
  // Unknown or finished ids are ignored.
  virtual void cancel(engine::RequestId id) = 0;
  virtual engine::EngineMetrics metrics() const = 0;

  // Prompt text -> token ids. `add_special_tokens`: the tokenizer's template (e.g. BOS), on
  // for completion prompts, off for rendered chat prompts (they carry their own BOS).
  virtual Result<std::vector<int32_t>> encode(std::string_view text,
                                              bool add_special_tokens) const = 0;
  // Token ids -> text, decoded as one sequence (a character split over several tokens comes
  // out whole; special tokens are written out, as Hugging Face's decode does by default).
  // kInvalidArgument whose message starts with `ids[i]: ` for the first id that is not a
  // token of the tokenizer. Used by /detokenize.
  virtual Result<std::string> decode(std::span<const int32_t> token_ids) const = 0;
  // Chat messages -> prompt text in the model's chat template; with `add_generation_prompt`
  // (what /v1/chat/completions uses) it ends with the assistant's generation prompt; `options`:
  // the tools shown to the model and enable_thinking (tokenizer::ChatTemplate::render).
  // kInvalidArgument when the model has no chat template, or naming the field the template
  // refuses.
  virtual Result<std::string> render_chat(const std::vector<tokenizer::ChatMessage>& messages,
                                          bool add_generation_prompt,
                                          const tokenizer::ChatRenderOptions& options) const = 0;
  // The chat template's family (which tool-call syntax its model writes); nullopt without a
  // chat template.
  virtual std::optional<tokenizer::ChatTemplateFamily> chat_template_family() const = 0;
  // Text of one token (logprobs output); lossy for a token that ends mid-character.
  virtual std::string token_text(int32_t token_id) const = 0;

  virtual int64_t vocab_size() const = 0;
  // prompt + max_tokens limit, tokens.
  virtual int64_t max_model_len() const = 0;
};

}  // namespace packserve::server
