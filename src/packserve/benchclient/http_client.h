// http_client.h: the benchmark's HTTP side: one streamed /v1/completions request per call
// (cpp-httplib, a fresh connection each), SSE decoding of the OpenAI stream into a
// RequestRecord, and small GETs (/health, /metrics) with a Prometheus gauge reader.
//
// Request body: {"model", "prompt", "max_tokens", "stream": true,
//   "stream_options": {"include_usage": true}} plus, when `ignore_eos`, "ignore_eos": true
//   (the vLLM extension field), so the run produces the trace's
//   output lengths, and the sampling fields that are given (else the server's defaults).
// Stream contract expected (OpenAI): `data: {json}` events, each a chunk whose choices[0]
// carries "text" and, in its last chunk, "finish_reason"; an optional usage-only chunk
// (choices empty, "usage": {prompt_tokens, completion_tokens}); then `data: [DONE]`. An event
// {"error": {...}} or a non-200 status fails the request with the server's message.
// Thread-safety: functions are reentrant; a CompletionStreamReader belongs to one request.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "packserve/benchclient/bench_metrics.h"
#include "packserve/benchclient/sse.h"
#include "packserve/common/status.h"

namespace packserve::benchclient {

struct Endpoint {
  std::string host;  // e.g. "127.0.0.1"
  int port = 80;
  std::string base_path;  // prefix before "/v1/..." (no trailing '/'), usually empty
};

// "http://HOST[:PORT][/PREFIX]"; kInvalidArgument naming `--url` and what was expected
// (https is not supported: the client is built without TLS).
Result<Endpoint> parse_url(std::string_view url);

// Sampling fields sent with every request; an unset one is the server's default.
struct RequestSampling {
  std::optional<double> temperature;        // "temperature"
  std::optional<int32_t> top_k;             // "top_k"
  std::optional<double> top_p;              // "top_p"
  std::optional<double> presence_penalty;   // "presence_penalty"
  std::optional<double> frequency_penalty;  // "frequency_penalty"
  bool logprobs = false;                    // "logprobs": 0 (the sampled token's logprob)
};

struct CompletionRequest {
  std::string model;   // "model" field
  std::string prompt;  // prompt text
  int32_t max_tokens = 16;
  bool ignore_eos = true;
  RequestSampling sampling;
};

std::string completion_body(const CompletionRequest& request);

// Turns the bytes of one streamed response into the fields of a RequestRecord: chunk_ms (one
// entry per chunk with a choice, stamped with the time the bytes arrived), output_tokens,
// server_prompt_tokens, finish_reason, success/error.
class CompletionStreamReader {
 public:
  explicit CompletionStreamReader(RequestRecord& record) : record_(record) {}
  // Feeds bytes that arrived at `now_ms`. Returns false when the stream is broken (an error
  // event or a chunk that is not JSON) and the request should be dropped.
  bool feed(std::string_view bytes, double now_ms);
  // Ends the stream: sets success, error and output_tokens. `transport_error` non-empty when
  // the connection failed.
  void finish(double now_ms, int http_status, const std::string& transport_error);

 private:
  bool handle_event(const SseEvent& event, double now_ms);
  RequestRecord& record_;
  SseParser parser_;
  std::string raw_;  // the body when the status was not 200 (for the error message)
  bool done_ = false;
  int32_t num_chunks_ = 0;
  std::optional<int32_t> usage_completion_tokens_;
  std::string stream_error_;
};

// Sends one streamed completion; fills `record` (send_ms, chunk_ms, end_ms, ...). Times are ms
// since `origin`. Never throws; failures land in record.error.
void stream_completion(const Endpoint& endpoint, const CompletionRequest& request,
                       std::chrono::steady_clock::time_point origin,
                       std::chrono::seconds read_timeout, RequestRecord& record);

struct HttpResponse {
  int status = 0;
  std::string body;
};
// GET `path`; kInternal naming the URL when the connection fails.
Result<HttpResponse> http_get(const Endpoint& endpoint, const std::string& path,
                              std::chrono::milliseconds timeout);

// The value of the first of `names` found as an unlabelled (or labelled: values are summed)
// sample in Prometheus text exposition `text`; nullopt when none is present.
std::optional<double> prometheus_value(std::string_view text,
                                       const std::vector<std::string>& names);

}  // namespace packserve::benchclient
