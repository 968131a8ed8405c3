// result_json.h: the result file of `packserve bench --out DIR` (DIR/result.json) and the
// stdout summary table.
// Field names follow vLLM's benchmark_serving result file where the meaning is the same:
//   duration (s), completed, failed, total_input_tokens, total_output_tokens,
//   request_throughput (req/s), request_goodput (req/s, null without an SLO),
//   output_throughput, total_token_throughput (tok/s), max_output_tokens_per_s,
//   max_concurrent_requests, input_lens, output_lens, ttfts (s), itls (s, per request),
//   start_times (s), errors ("" for a success), and for m in ttft, tpot, itl, e2el:
//   mean_{m}_ms, median_{m}_ms, std_{m}_ms, p50_{m}_ms, p90_{m}_ms, p99_{m}_ms.
// packserve's own fields: date, backend, model_id, trace, trace_format, num_prompts,
//   request_rate (null = trace arrival times), time_scale, max_concurrency, slo_ttft_ms,
//   slo_tpot_ms, failure_reasons {reason: count}, num_early_stops, prompt_token_mismatches,
//   server_prompt_token_mismatches,
//   running_batch_source, running_batch [[t_s, n], ...], output_tokens_per_s [[t_s, tok/s]],
//   tbt = itl (DESIGN.md calls it TBT), ttlt = e2el.
// Thread-safety: pure functions.
#pragma once

#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "packserve/benchclient/bench_metrics.h"
#include "packserve/benchclient/http_client.h"
#include "packserve/common/status.h"

namespace packserve::benchclient {

struct RunInfo {
  std::string date;     // UTC, "YYYY-MM-DD HH:MM:SS"
  std::string backend;  // "openai-http URL" or "in-process"
  std::string model_id;
  std::string trace;
  std::string trace_format;
  std::optional<double> request_rate;  // req/s when a Poisson rate replaced arrival times
  RequestSampling sampling;            // sent with every request (unset: the server's default)
  double time_scale = 1.0;
  int32_t max_concurrency = 0;
  SloConfig slo;
  int64_t prompt_token_mismatches = 0;
  std::string running_batch_source;
  std::vector<TimePoint> running_batch;
};

nlohmann::json result_to_json(const RunInfo& info, const RunSummary& summary,
                              const std::vector<RequestRecord>& records);
// The human-readable summary (vLLM's "Serving Benchmark Result" layout plus p90 and TBT).
std::string summary_table(const RunInfo& info, const RunSummary& summary);

// Reads a result.json; kNotFound / kInvalidArgument naming the path.
Result<nlohmann::json> read_result_json(const std::string& path);
Status write_text_file(const std::string& path, const std::string& text);

}  // namespace packserve::benchclient
