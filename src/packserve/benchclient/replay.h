// replay.h: replays a list of requests at their arrival times against a RequestSender (an HTTP
// server, or the engine in-process) and collects one RequestRecord per request, plus a running
// batch size sampled during the run.
//
// Timing: arrival_ms is relative to the run's start (origin); the dispatcher sleeps until
// then and starts the request on its own thread. With max_concurrency > 0 a request that
// arrives while that many are in flight waits for a slot (it is sent late; TTFT counts from the
// send, as vLLM's benchmark does, and scheduled_ms keeps the trace's time).
// poisson_arrivals() replaces the trace's arrival times by a Poisson process of a given rate
// (exponential gaps from a seeded generator: the same seed gives the same times).
// Thread-safety: replay() owns its threads and joins them all before returning; the sender's
// send() is called from many threads at once and must be thread-safe.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "packserve/benchclient/bench_metrics.h"

namespace packserve::benchclient {

struct ReplayRequest {
  int64_t index = 0;
  double arrival_ms = 0.0;  // from the run's start
  std::string prompt;
  int32_t prompt_tokens = 0;
  int32_t max_tokens = 1;
};

class RequestSender {
 public:
  virtual ~RequestSender() = default;
  // Runs one request to its end and fills `record` (times in ms since `origin`).
  virtual void send(const ReplayRequest& request, std::chrono::steady_clock::time_point origin,
                    RequestRecord& record) = 0;
  // The server's running batch size now, when the sender can see it (nullopt otherwise).
  virtual std::optional<double> running_batch_size() = 0;
  // Names where running_batch_size() comes from, for the plot title.
  virtual std::string running_batch_source() const = 0;
};

struct ReplayProgress {
  int64_t num_total = 0, num_done = 0, num_failed = 0, num_in_flight = 0;
  int64_t output_tokens = 0;
  double elapsed_s = 0.0;
};

struct ReplayOptions {
  int32_t max_concurrency = 0;     // 0 = unlimited
  double sample_interval_s = 0.5;  // running-batch sampling period
  double progress_interval_s = 0.2;
  std::function<void(const ReplayProgress&)> on_progress;  // called from the sampling thread
};

struct ReplayResult {
  std::vector<RequestRecord> records;    // in request order
  std::vector<TimePoint> running_batch;  // (t, running requests) samples
  std::string running_batch_source;      // "server /metrics" or "client in-flight count"
};

ReplayResult replay(const std::vector<ReplayRequest>& requests, RequestSender& sender,
                    const ReplayOptions& options);

// Arrival times of a Poisson process of `rate_per_s` (> 0), the first at its first gap.
std::vector<double> poisson_arrivals_ms(size_t n, double rate_per_s, uint64_t seed);

}  // namespace packserve::benchclient
