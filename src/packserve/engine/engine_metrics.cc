// engine_metrics.cc: the fixed latency buckets and histogram updates of EngineMetrics.
#include <algorithm>

#include "packserve/engine/engine_internal.h"

namespace packserve::engine {

std::vector<double> latency_bucket_bounds_ms() {
  // Roughly 1-2.5-5 per decade from 1 ms to 2 min: covers CPU decode steps (tens of ms) and
  // GPU ones (ms), TTFT under load (seconds) and long generations (e2e, minutes).
  return {1,    2.5,  5,    10,    25,    50,    100,   250,   500,
          1000, 2500, 5000, 10000, 25000, 50000, 60000, 120000};
}

Histogram make_latency_histogram() {
  Histogram h;
  h.upper_bounds_ms = latency_bucket_bounds_ms();
  h.counts.assign(h.upper_bounds_ms.size() + 1, 0);
  return h;
}

void observe(Histogram& histogram, double value_ms) {
  // First bucket whose upper bound is >= the value (Prometheus "le"); else +Inf.
  const auto it = std::lower_bound(histogram.upper_bounds_ms.begin(),
                                   histogram.upper_bounds_ms.end(), value_ms);
  histogram.counts[static_cast<size_t>(it - histogram.upper_bounds_ms.begin())] += 1;
  histogram.sum_ms += value_ms;
  histogram.count += 1;
}

}  // namespace packserve::engine
