// bench_metrics.cc: see bench_metrics.h.
#include "packserve/benchclient/bench_metrics.h"

#include <algorithm>
#include <cmath>

namespace packserve::benchclient {

double percentile(std::vector<double> values, double q) {
  if (values.empty()) return 0.0;
  std::sort(values.begin(), values.end());
  q = std::clamp(q, 0.0, 100.0);
  const double rank = q / 100.0 * static_cast<double>(values.size() - 1);
  const auto lo = static_cast<size_t>(std::floor(rank));
  const size_t hi = std::min(lo + 1, values.size() - 1);
  const double frac = rank - static_cast<double>(lo);
  return values[lo] + (values[hi] - values[lo]) * frac;
}

Distribution describe(const std::vector<double>& values) {
  Distribution d;
  d.count = static_cast<int64_t>(values.size());
  if (values.empty()) return d;
  double sum = 0.0;
  for (double v : values) sum += v;
  d.mean = sum / static_cast<double>(values.size());
  double sq = 0.0;
  for (double v : values) sq += (v - d.mean) * (v - d.mean);
  d.stddev = std::sqrt(sq / static_cast<double>(values.size()));  // population, as numpy's std
  std::vector<double> sorted = values;
  std::sort(sorted.begin(), sorted.end());
  d.median = percentile(sorted, 50);
  d.p50 = d.median;
  d.p90 = percentile(sorted, 90);
  d.p99 = percentile(sorted, 99);
  d.max = sorted.back();
  return d;
}

double request_ttft_ms(const RequestRecord& r) {
  return r.chunk_ms.empty() ? 0.0 : r.chunk_ms.front() - r.send_ms;
}

std::optional<double> request_tpot_ms(const RequestRecord& r) {
  if (r.output_tokens < 2 || r.chunk_ms.empty()) return std::nullopt;
  return (r.chunk_ms.back() - r.chunk_ms.front()) / static_cast<double>(r.output_tokens - 1);
}

double request_e2el_ms(const RequestRecord& r) {
  return (r.chunk_ms.empty() ? r.end_ms : r.chunk_ms.back()) - r.send_ms;
}

int64_t max_concurrency(const std::vector<RequestRecord>& records) {
  std::vector<std::pair<double, int>> events;
  for (const RequestRecord& r : records) {
    events.emplace_back(r.send_ms, +1);
    events.emplace_back(r.end_ms, -1);
  }
  // Ends before starts at equal times: a request finishing as another starts never overlaps.
  std::sort(events.begin(), events.end());
  int64_t now = 0, peak = 0;
  for (const auto& e : events) {
    now += e.second;
    peak = std::max(peak, now);
  }
  return peak;
}

std::vector<TimePoint> in_flight_over_time(const std::vector<RequestRecord>& records,
                                           double step_s) {
  double end_ms = 0.0;
  for (const RequestRecord& r : records) end_ms = std::max(end_ms, r.end_ms);
  std::vector<TimePoint> out;
  if (step_s <= 0) return out;
  for (double t = 0.0; t * 1000.0 <= end_ms + step_s * 1000.0; t += step_s) {
    int64_t n = 0;
    for (const RequestRecord& r : records) n += (r.send_ms <= t * 1000.0 && t * 1000.0 < r.end_ms);
    out.push_back({t, static_cast<double>(n)});
  }
  return out;
}

std::string failure_reason_key(const std::string& error) {
  if (error.empty()) return "unknown";
  const size_t detail = error.find(": ");
  if (detail == std::string::npos) return error;
  std::string key = error.substr(0, detail + 2);
  bool in_number = false;
  for (size_t i = detail + 2; i < error.size(); ++i) {
    const bool digit = error[i] >= '0' && error[i] <= '9';
    if (digit && !in_number) key += 'N';
    if (!digit) key += error[i];
    in_number = digit;
  }
  return key;
}

RunSummary summarize(const std::vector<RequestRecord>& records, const SloConfig& slo) {
  RunSummary s;
  s.num_requests = static_cast<int64_t>(records.size());
  std::vector<double> ttft, tpot, itl, e2el;
  double end_ms = 0.0;
  for (const RequestRecord& r : records) {
    end_ms = std::max(end_ms, r.end_ms);
    if (!r.success) {
      ++s.failed;
      ++s.failure_reasons[failure_reason_key(r.error)];
      continue;
    }
    ++s.completed;
    s.total_input_tokens += r.prompt_tokens;
    s.total_output_tokens += r.output_tokens;
    if (r.output_tokens < r.expected_output_tokens) ++s.num_early_stops;
    if (r.server_prompt_tokens && *r.server_prompt_tokens != r.prompt_tokens) {
      ++s.server_prompt_token_mismatches;
    }
    const double t = request_ttft_ms(r);
    ttft.push_back(t);
    const std::optional<double> p = request_tpot_ms(r);
    if (p) tpot.push_back(*p);
    for (size_t i = 1; i < r.chunk_ms.size(); ++i) itl.push_back(r.chunk_ms[i] - r.chunk_ms[i - 1]);
    e2el.push_back(request_e2el_ms(r));
    const bool ttft_ok = !slo.ttft_ms || t <= *slo.ttft_ms;
    const bool tpot_ok = !slo.tpot_ms || !p || *p <= *slo.tpot_ms;
    if (ttft_ok && tpot_ok) ++s.good_requests;
  }
  s.duration_s = end_ms / 1000.0;
  if (s.duration_s > 0) {
    s.request_throughput = static_cast<double>(s.completed) / s.duration_s;
    s.output_throughput = static_cast<double>(s.total_output_tokens) / s.duration_s;
    s.total_token_throughput =
        static_cast<double>(s.total_input_tokens + s.total_output_tokens) / s.duration_s;
    if (slo.ttft_ms || slo.tpot_ms) {
      s.request_goodput = static_cast<double>(s.good_requests) / s.duration_s;
    }
  }
  s.ttft_ms = describe(ttft);
  s.tpot_ms = describe(tpot);
  s.itl_ms = describe(itl);
  s.e2el_ms = describe(e2el);
  s.max_concurrent_requests = max_concurrency(records);
  // Output tokens per 1 s bin; a chunk's tokens are output_tokens / chunks each.
  const auto num_bins = static_cast<size_t>(std::floor(s.duration_s)) + 1;
  std::vector<double> bins(num_bins, 0.0);
  for (const RequestRecord& r : records) {
    if (!r.success || r.chunk_ms.empty()) continue;
    const double per_chunk =
        static_cast<double>(r.output_tokens) / static_cast<double>(r.chunk_ms.size());
    for (double t : r.chunk_ms) {
      const auto b = static_cast<size_t>(std::max(0.0, t / 1000.0));
      if (b < bins.size()) bins[b] += per_chunk;
    }
  }
  for (size_t b = 0; b < bins.size(); ++b) {
    s.output_tokens_per_s.push_back({static_cast<double>(b), bins[b]});
    // A partial last bin would understate the peak; count only full seconds.
    if (static_cast<double>(b + 1) <= s.duration_s) {
      s.max_output_tokens_per_s = std::max(s.max_output_tokens_per_s, bins[b]);
    }
  }
  return s;
}

}  // namespace packserve::benchclient
