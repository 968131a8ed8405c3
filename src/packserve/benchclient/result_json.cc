// result_json.cc: see result_json.h.
#include "packserve/benchclient/result_json.h"

#include <cstdio>
#include <fstream>
#include <sstream>

namespace packserve::benchclient {
namespace {

using nlohmann::json;

void put_distribution(json& j, const std::string& m, const Distribution& d) {
  j["mean_" + m + "_ms"] = d.mean;
  j["median_" + m + "_ms"] = d.median;
  j["std_" + m + "_ms"] = d.stddev;
  j["p50_" + m + "_ms"] = d.p50;
  j["p90_" + m + "_ms"] = d.p90;
  j["p99_" + m + "_ms"] = d.p99;
}

json optional_number(const std::optional<double>& v) { return v ? json(*v) : json(nullptr); }

json time_points(const std::vector<TimePoint>& points) {
  json a = json::array();
  for (const TimePoint& p : points) a.push_back({p.t_s, p.value});
  return a;
}

void row(std::ostringstream& out, const std::string& label, double value, int precision = 2) {
  char buf[160];
  std::snprintf(buf, sizeof(buf), "%-40s %-10.*f\n", label.c_str(), precision, value);
  out << buf;
}

void section(std::ostringstream& out, const std::string& title) {
  const std::string pad((50 - std::min<size_t>(title.size(), 48)) / 2, '-');
  std::string line = pad + title + pad;
  while (line.size() < 50) line += '-';
  out << line << "\n";
}

void distribution_rows(std::ostringstream& out, const std::string& name, const Distribution& d) {
  row(out, "Mean " + name + " (ms):", d.mean);
  row(out, "Median " + name + " (ms):", d.median);
  row(out, "P90 " + name + " (ms):", d.p90);
  row(out, "P99 " + name + " (ms):", d.p99);
}

}  // namespace

json result_to_json(const RunInfo& info, const RunSummary& s,
                    const std::vector<RequestRecord>& records) {
  json j;
  j["date"] = info.date;
  j["backend"] = info.backend;
  j["model_id"] = info.model_id;
  j["trace"] = info.trace;
  j["trace_format"] = info.trace_format;
  j["num_prompts"] = s.num_requests;
  j["request_rate"] = optional_number(info.request_rate);
  j["temperature"] = optional_number(info.sampling.temperature);
  j["top_k"] = info.sampling.top_k ? json(*info.sampling.top_k) : json(nullptr);
  j["top_p"] = optional_number(info.sampling.top_p);
  j["presence_penalty"] = optional_number(info.sampling.presence_penalty);
  j["frequency_penalty"] = optional_number(info.sampling.frequency_penalty);
  j["logprobs"] = info.sampling.logprobs;
  j["time_scale"] = info.time_scale;
  j["max_concurrency"] = info.max_concurrency > 0 ? json(info.max_concurrency) : json(nullptr);
  j["slo_ttft_ms"] = optional_number(info.slo.ttft_ms);
  j["slo_tpot_ms"] = optional_number(info.slo.tpot_ms);
  j["duration"] = s.duration_s;
  j["completed"] = s.completed;
  j["failed"] = s.failed;
  j["total_input_tokens"] = s.total_input_tokens;
  j["total_output_tokens"] = s.total_output_tokens;
  j["request_throughput"] = s.request_throughput;
  j["request_goodput"] = optional_number(s.request_goodput);
  j["output_throughput"] = s.output_throughput;
  j["total_token_throughput"] = s.total_token_throughput;
  j["max_output_tokens_per_s"] = s.max_output_tokens_per_s;
  j["max_concurrent_requests"] = s.max_concurrent_requests;
  put_distribution(j, "ttft", s.ttft_ms);
  put_distribution(j, "tpot", s.tpot_ms);
  put_distribution(j, "itl", s.itl_ms);
  put_distribution(j, "e2el", s.e2el_ms);
  put_distribution(j, "tbt", s.itl_ms);
  put_distribution(j, "ttlt", s.e2el_ms);
  json input_lens = json::array(), output_lens = json::array(), ttfts = json::array(),
       itls = json::array(), start_times = json::array(), errors = json::array();
  for (const RequestRecord& r : records) {
    input_lens.push_back(r.prompt_tokens);
    output_lens.push_back(r.success ? r.output_tokens : 0);
    ttfts.push_back(r.success ? request_ttft_ms(r) / 1000.0 : 0.0);
    json gaps = json::array();
    for (size_t i = 1; r.success && i < r.chunk_ms.size(); ++i) {
      gaps.push_back((r.chunk_ms[i] - r.chunk_ms[i - 1]) / 1000.0);
    }
    itls.push_back(std::move(gaps));
    start_times.push_back(r.send_ms / 1000.0);
    errors.push_back(r.success ? "" : r.error);
  }
  j["input_lens"] = std::move(input_lens);
  j["output_lens"] = std::move(output_lens);
  j["ttfts"] = std::move(ttfts);
  j["itls"] = std::move(itls);
  j["start_times"] = std::move(start_times);
  j["errors"] = std::move(errors);
  j["failure_reasons"] = s.failure_reasons;
  j["num_early_stops"] = s.num_early_stops;
  j["prompt_token_mismatches"] = info.prompt_token_mismatches;
  j["server_prompt_token_mismatches"] = s.server_prompt_token_mismatches;
  j["running_batch_source"] = info.running_batch_source;
  j["running_batch"] = time_points(info.running_batch);
  j["output_tokens_per_s"] = time_points(s.output_tokens_per_s);
  return j;
}

std::string summary_table(const RunInfo& info, const RunSummary& s) {
  std::ostringstream out;
  out << "============ Serving Benchmark Result ============\n";
  char buf[160];
  std::snprintf(buf, sizeof(buf), "%-40s %s\n", "Backend:", info.backend.c_str());
  out << buf;
  std::snprintf(buf, sizeof(buf), "%-40s %s\n", "Trace:", info.trace.c_str());
  out << buf;
  row(out, "Successful requests:", static_cast<double>(s.completed), 0);
  row(out, "Failed requests:", static_cast<double>(s.failed), 0);
  for (const auto& [reason, count] : s.failure_reasons) {
    std::snprintf(buf, sizeof(buf), "  %6lld x %s\n", static_cast<long long>(count),
                  reason.c_str());
    out << buf;
  }
  row(out, "Benchmark duration (s):", s.duration_s);
  row(out, "Total input tokens:", static_cast<double>(s.total_input_tokens), 0);
  row(out, "Total generated tokens:", static_cast<double>(s.total_output_tokens), 0);
  row(out, "Request throughput (req/s):", s.request_throughput);
  if (s.request_goodput) row(out, "Request goodput (req/s):", *s.request_goodput);
  row(out, "Output token throughput (tok/s):", s.output_throughput);
  row(out, "Peak output token throughput (tok/s):", s.max_output_tokens_per_s);
  row(out, "Peak concurrent requests:", static_cast<double>(s.max_concurrent_requests), 0);
  row(out, "Total token throughput (tok/s):", s.total_token_throughput);
  section(out, "Time to First Token");
  distribution_rows(out, "TTFT", s.ttft_ms);
  section(out, "Time per Output Token (excl. 1st token)");
  distribution_rows(out, "TPOT", s.tpot_ms);
  section(out, "Time Between Tokens (ITL)");
  distribution_rows(out, "TBT", s.itl_ms);
  section(out, "Time To Last Token (E2EL)");
  distribution_rows(out, "TTLT", s.e2el_ms);
  out << "==================================================\n";
  return out.str();
}

Result<json> read_result_json(const std::string& path) {
  std::ifstream file(path);
  if (!file) return not_found("cannot open result file '" + path + "'");
  try {
    json j = json::parse(file);
    if (!j.is_object()) return invalid_argument(path + ": expected a JSON object");
    return j;
  } catch (const json::exception& e) {
    return invalid_argument(path + ": not valid JSON: " + e.what());
  }
}

Status write_text_file(const std::string& path, const std::string& text) {
  std::ofstream file(path, std::ios::trunc);
  if (!file) return internal_error("cannot open '" + path + "' for writing");
  file << text;
  if (!file) return internal_error("writing '" + path + "' failed");
  return ok_status();
}

}  // namespace packserve::benchclient
