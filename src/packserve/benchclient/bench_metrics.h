// bench_metrics.h: per-request measurements of a benchmark run and the summary computed from
// them (DESIGN.md "Metrics": their meaning is fixed).
//   TTFT  = first output token time - send time
//   TPOT  = (last token time - first token time) / (output tokens - 1), requests with >= 2 tokens
//   TBT   = every gap between consecutive streamed chunks (vLLM calls it ITL)
//   TTLT  = last token time - send time (vLLM's E2EL)
//   goodput = completed requests meeting both SLOs (TTFT <= slo_ttft_ms and, with >= 2 output
//             tokens, TPOT <= slo_tpot_ms) / duration
// Times are ms on the run's steady clock, 0 = the run's start. Percentiles interpolate linearly
// between order statistics (numpy's default, as vLLM reports them).
// Thread-safety: values and pure functions.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace packserve::benchclient {

struct RequestRecord {
  int64_t index = 0;                   // position in the replayed request list
  double scheduled_ms = 0.0;           // arrival time the trace asked for
  double send_ms = 0.0;                // when the request was sent
  int32_t prompt_tokens = 0;           // synthesized prompt length (client side)
  int32_t expected_output_tokens = 0;  // max_tokens sent
  bool success = false;
  std::string error;             // non-empty when !success: the reason
  std::vector<double> chunk_ms;  // arrival time of each streamed chunk carrying output
  int32_t output_tokens = 0;     // from the server's usage, else the number of chunks
  std::optional<int32_t> server_prompt_tokens;  // usage.prompt_tokens when reported
  double end_ms = 0.0;                          // last byte received (or failure time)
  std::string finish_reason;
};

struct Distribution {
  int64_t count = 0;
  double mean = 0.0, median = 0.0, stddev = 0.0, p50 = 0.0, p90 = 0.0, p99 = 0.0, max = 0.0;
};

// Linear-interpolated percentile q in [0, 100] of `values` (need not be sorted); 0 when empty.
double percentile(std::vector<double> values, double q);
Distribution describe(const std::vector<double>& values);

struct SloConfig {
  std::optional<double> ttft_ms;  // unset = no TTFT condition
  std::optional<double> tpot_ms;  // unset = no TPOT condition
};

struct TimePoint {
  double t_s = 0.0;
  double value = 0.0;
};

struct RunSummary {
  int64_t num_requests = 0, completed = 0, failed = 0;
  std::map<std::string, int64_t> failure_reasons;           // failure_reason_key(error) -> count
  double duration_s = 0.0;                                  // run start -> last request end
  int64_t total_input_tokens = 0, total_output_tokens = 0;  // completed requests only
  double request_throughput = 0.0, output_throughput = 0.0, total_token_throughput = 0.0;
  std::optional<double> request_goodput;  // req/s; set when an SLO is given
  int64_t good_requests = 0;
  double max_output_tokens_per_s = 0.0;  // peak over 1 s bins
  int64_t max_concurrent_requests = 0;
  int64_t num_early_stops = 0;  // completed with fewer tokens than max_tokens
  // Completed requests whose server-reported prompt_tokens differ from prompt_tokens (the
  // server's tokenizer is the oracle of prompt synthesis; a BOS the server adds shows as +1).
  int64_t server_prompt_token_mismatches = 0;
  Distribution ttft_ms, tpot_ms, itl_ms, e2el_ms;
  std::vector<TimePoint> output_tokens_per_s;  // 1 s bins, bin start time
};

// Output-token timestamps of one request: chunk k carries its share of output_tokens (all
// tokens spread evenly when chunks carry several).
double request_ttft_ms(const RequestRecord& r);
std::optional<double> request_tpot_ms(const RequestRecord& r);
double request_e2el_ms(const RequestRecord& r);

// The key under which `error` is counted in failure_reasons: the text before the first ": "
// as is (e.g. "http 400"), the detail after it with each number replaced by "N", so requests
// failing for the same reason with different lengths count together.
std::string failure_reason_key(const std::string& error);

RunSummary summarize(const std::vector<RequestRecord>& records, const SloConfig& slo);

// Peak number of requests in flight (send_ms .. end_ms intervals overlapping).
int64_t max_concurrency(const std::vector<RequestRecord>& records);
// In-flight count at each time of `times_s`.
std::vector<TimePoint> in_flight_over_time(const std::vector<RequestRecord>& records,
                                           double step_s);

}  // namespace packserve::benchclient
