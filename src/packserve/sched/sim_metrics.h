// sim_metrics.h: latency statistics for the simulator's report (DESIGN.md "Metrics"):
// percentiles by nearest rank (as ../shared/traces/trace_stats.py), exact over stored samples,
// and a log-bucketed histogram for the per-token TBT samples, whose count (one per output
// token) is too large to keep for 100k-request replays.
// Thread-safety: values.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace packserve::sched {

struct LatencySummary {
  int64_t count = 0;
  double p50 = 0, p90 = 0, p99 = 0, mean = 0;  // 0 when count == 0
};

// Nearest rank: the ceil(q * n)-th smallest (1-based, at least the first). Reorders `samples`.
LatencySummary summarize_exact(std::vector<double>& samples);

// Geometric buckets of ratio kRatio over [kMinMs, kMaxMs]; a percentile is the geometric
// centre of its bucket, so its relative error is at most sqrt(kRatio) - 1 (0.05 %); values
// below kMinMs (including 0) land in bucket 0 and report as 0. The mean is exact.
class LatencyHistogram {
 public:
  static constexpr double kMinMs = 1e-3;
  static constexpr double kMaxMs = 1e8;
  static constexpr double kRatio = 1.001;
  LatencyHistogram();
  void add(double value_ms);
  LatencySummary summary() const;

 private:
  double value_of(size_t bucket) const;
  std::vector<int64_t> counts_;
  int64_t count_ = 0;
  double sum_ = 0;
};

}  // namespace packserve::sched
