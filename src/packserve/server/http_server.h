// http_server.h: the OpenAI-compatible HTTP front end (issue 5 "Server"; docs/server.md).
//
// Routes: POST /v1/completions, POST /v1/chat/completions (JSON or, with stream: true,
// server-sent events ending in `data: [DONE]`), GET /v1/models, POST /tokenize and
// POST /detokenize (tokenize_handler.h), GET /health, GET /metrics.
// Threads: cpp-httplib's pool of `num_http_threads` workers; each request's worker parses,
// validates, tokenizes and submits to the EngineApi, then waits on the request's stream
// (one engine thread, inside the engine, generates). A streaming client that goes away is
// noticed when a write fails (a comment line is written after `heartbeat_ms` of silence so
// a queued request notices too) and its request is cancelled: its pages return to the pool.
// Lifecycle: kLoading (generation and tokenizer routes answer 503) -> set_engine() -> kReady
// -> begin_drain() -> kDraining (generation 503 again; live requests go on; /tokenize,
// /detokenize, /v1/models and /metrics still answer) -> wait_streams_flushed() -> stop().
// Failure contract: every answer to a bad request is an OpenAI error object (api_error.h);
// an exception inside a handler becomes a 500 error object, never a crash.
// Thread-safety: all public methods are thread-safe.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "packserve/common/status.h"
#include "packserve/server/engine_api.h"
#include "packserve/server/metrics_text.h"

namespace packserve::server {

struct ServerConfig {
  std::string host = "127.0.0.1";
  // TCP port; 0 = any free port (port() tells which after start()).
  int port = 8000;
  // When non-empty, /v1/*, /tokenize and /detokenize need `Authorization: Bearer <api_key>`
  // (else 401); /health and /metrics stay open.
  std::string api_key;
  // Largest request body, bytes; larger bodies are answered 413. >= 1024.
  std::size_t max_body_bytes = 8u << 20;
  // HTTP worker threads; a streaming request holds one for its lifetime. >= 2.
  int num_http_threads = 128;
  // The model name of /v1/models; requests must name it (else 404).
  std::string served_model_name = "model";
  // Silence on a stream after which a comment line is written, ms. >= 10.
  int64_t heartbeat_ms = 2000;
  // vLLM's --reasoning-parser: "" (none: the model's text is all content) or "qwen3" (a
  // <think>...</think> opening a chat output is message.reasoning_content, reasoning.h).
  std::string reasoning_parser;
  // vLLM's --exclude-tools-when-tool-choice-none: with tool_choice "none" the prompt leaves
  // the tools out (default false: the model sees them, as vLLM and OpenAI show them, and
  // answers in text).
  bool exclude_tools_when_tool_choice_none = false;
  // Names the first bad field.
  Status validate() const;
};

class HttpServer {
 public:
  explicit HttpServer(ServerConfig config);
  ~HttpServer();  // stop()
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  // Binds host:port and serves on a background thread. kInvalidArgument for a bad config,
  // kInternal naming host:port when the port cannot be bound.
  Status start();
  int port() const;

  // kLoading -> kReady: generation routes now go to `engine`.
  void set_engine(std::shared_ptr<EngineApi> engine);
  // -> kDraining: new generation requests get 503; requests already running go on.
  void begin_drain();
  ServerState state() const;
  // Waits until every streaming response has written its last event (or its client left):
  // call after the engine drained, before stop(), so finished streams are not cut. false
  // when some were still open after `timeout`.
  bool wait_streams_flushed(std::chrono::milliseconds timeout);
  // Stops accepting, ends the worker threads (open streams end) and joins. Idempotent.
  void stop();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace packserve::server
