// sim_metrics.cc: percentiles and the TBT histogram; contract in sim_metrics.h.
#include "packserve/sched/sim_metrics.h"

#include <algorithm>
#include <cmath>

namespace packserve::sched {
namespace {
size_t rank_of(double q, int64_t n) {
  const auto r = static_cast<int64_t>(std::ceil(q * static_cast<double>(n)));
  return static_cast<size_t>(std::clamp<int64_t>(r, 1, n) - 1);
}
const double kLogRatio = std::log(LatencyHistogram::kRatio);
const size_t kNumBuckets =
    static_cast<size_t>(std::log(LatencyHistogram::kMaxMs / LatencyHistogram::kMinMs) / kLogRatio) +
    2;
}  // namespace

LatencySummary summarize_exact(std::vector<double>& samples) {
  LatencySummary s;
  s.count = static_cast<int64_t>(samples.size());
  if (samples.empty()) return s;
  std::sort(samples.begin(), samples.end());
  double sum = 0;
  for (double v : samples) sum += v;
  s.mean = sum / static_cast<double>(s.count);
  s.p50 = samples[rank_of(0.50, s.count)];
  s.p90 = samples[rank_of(0.90, s.count)];
  s.p99 = samples[rank_of(0.99, s.count)];
  return s;
}

LatencyHistogram::LatencyHistogram() : counts_(kNumBuckets, 0) {}

void LatencyHistogram::add(double value_ms) {
  ++count_;
  sum_ += value_ms;
  size_t b = 0;
  if (value_ms >= kMinMs) {
    b = 1 + static_cast<size_t>(std::log(value_ms / kMinMs) / kLogRatio);
    b = std::min(b, kNumBuckets - 1);
  }
  ++counts_[b];
}

double LatencyHistogram::value_of(size_t bucket) const {
  if (bucket == 0) return 0.0;
  // Bucket b >= 1 holds [kMin * r^(b-1), kMin * r^b): its geometric centre.
  return kMinMs * std::exp((static_cast<double>(bucket) - 0.5) * kLogRatio);
}

LatencySummary LatencyHistogram::summary() const {
  LatencySummary s;
  s.count = count_;
  if (count_ == 0) return s;
  s.mean = sum_ / static_cast<double>(count_);
  const int64_t ranks[3] = {static_cast<int64_t>(rank_of(0.50, count_)),
                            static_cast<int64_t>(rank_of(0.90, count_)),
                            static_cast<int64_t>(rank_of(0.99, count_))};
  double* outs[3] = {&s.p50, &s.p90, &s.p99};
  int64_t seen = 0;
  int k = 0;
  for (size_t b = 0; b < counts_.size() && k < 3; ++b) {
    seen += counts_[b];
    while (k < 3 && ranks[k] < seen) *outs[k++] = value_of(b);
  }
  return s;
}

}  // namespace packserve::sched
