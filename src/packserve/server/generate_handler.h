// generate_handler.h: POST /v1/completions and /v1/chat/completions over an EngineApi:
// parse + validate (openai_request.h) -> tokenize -> resolve max_tokens -> submit -> answer
// as one JSON body or as server-sent events (sse.h, openai_response.h).
// Choices: each of a request's prompts x n choices is its own engine request, submitted
// together; the copies of a prompt share its KV pages through the engine's prefix cache (the
// first one computes them, the others wait for them: scheduler prefix wait). A refused submit
// cancels the choices already submitted; a choice that fails ends the response (500, or an
// error event when streaming) and cancels the others.
// Engine refusals map to HTTP: kInvalidArgument 400, kResourceExhausted 429,
// kFailedPrecondition 503, anything else 500.
// Cancellation: a stream whose writes fail (the client went away) or that the HTTP layer
// abandons cancels its engine requests (the content provider's releaser).
// Thread-safety: called concurrently from HTTP workers; shares nothing but the engine.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>

#include "packserve/server/api_error.h"
#include "packserve/server/engine_api.h"
#include "packserve/server/openai_request.h"

namespace httplib {
struct Request;
struct Response;
}  // namespace httplib

namespace packserve::server {

// Counts streaming responses not yet released, so that shutdown can let streams whose engine
// requests already finished write their last events before the sockets close.
class OpenStreams {
 public:
  void opened();
  void closed();
  // true when none is open (now or before `timeout` passes).
  bool wait_all_closed(std::chrono::milliseconds timeout);

 private:
  std::mutex mutex_;
  std::condition_variable cv_;
  int64_t open_ = 0;  // guarded by mutex_
};

struct GenerateOptions {
  std::string served_model_name;
  int64_t heartbeat_ms = 2000;
  const std::atomic<bool>* stopping = nullptr;  // the server is shutting down
  OpenStreams* open_streams = nullptr;          // optional: told of each streaming response
  // Chat: split a Qwen3 <think> block off into reasoning_content (ServerConfig).
  bool split_reasoning = false;
  // tool_choice none leaves the tools out of the prompt (ServerConfig).
  bool exclude_tools_when_tool_choice_none = false;
};

// Writes `error` as the response.
void set_error(httplib::Response& res, const ApiError& error);

// Maps an engine submit() failure to an HTTP error.
ApiError engine_error(const Status& status);

void handle_generate(const std::shared_ptr<EngineApi>& engine, const GenerateOptions& options,
                     Endpoint endpoint, const httplib::Request& req, httplib::Response& res);

}  // namespace packserve::server
