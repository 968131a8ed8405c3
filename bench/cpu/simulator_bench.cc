// simulator_bench.cc: the trace-replay simulator on a synthetic 100k-request trace shaped like
// the Azure 2023 conversation trace (../shared/traces/README.md: input median 1,020, output
// median 129, ~5.5 req/s Poisson arrivals), one core. Goal (issue 3): < 60 s per replay.
// Counters: requests/s and output tokens/s of *simulation* throughput (wall clock).
#include <benchmark/benchmark.h>

#include <algorithm>
#include <cmath>

#include "packserve/common/rng.h"
#include "packserve/sched/simulator.h"

namespace {

using namespace packserve;  // NOLINT(google-build-using-namespace): benchmark glue

trace::Trace synthetic_trace(int64_t num_requests, uint64_t seed) {
  Rng rng(seed);
  trace::Trace t;
  t.requests.reserve(static_cast<size_t>(num_requests));
  double now_ms = 0;
  for (int64_t i = 0; i < num_requests; ++i) {
    now_ms += -std::log(1.0 - rng.uniform()) / 5.5 * 1000.0;
    trace::TraceRequest r;
    r.line_number = i + 2;
    r.arrival_ms = now_ms;
    r.input_tokens = static_cast<int32_t>(std::clamp(rng.lognormal(1020, 0.8), 1.0, 14050.0));
    r.output_tokens = static_cast<int32_t>(std::clamp(rng.lognormal(129, 1.0), 1.0, 1000.0));
    r.segments.push_back(
        trace::PromptSegment{(uint64_t{1} << 63) | static_cast<uint64_t>(i), r.input_tokens});
    t.requests.push_back(std::move(r));
  }
  return t;
}

void BM_SimulateAzureLike(benchmark::State& state) {
  const int64_t n = state.range(0);
  const auto policy = static_cast<sched::SchedulingPolicy>(state.range(1));
  const trace::Trace t = synthetic_trace(n, 42);
  const sched::CostModel model{sched::CostModelConfig{}};
  sched::SimulatorConfig config;
  config.scheduler.policy = policy;
  config.scheduler.packing = sched::PackingAlgorithm::kFirstFitDecreasing;
  int64_t tokens = 0;
  for (auto _ : state) {
    auto r = sched::simulate(t, model, config);
    if (!r.ok() || r->completed != n || r->pages_leaked != 0) {
      state.SkipWithError("replay failed or incomplete");
      return;
    }
    tokens = r->output_tokens;
    state.counters["sim_makespan_s"] = r->makespan_s;
    state.counters["steps"] = static_cast<double>(r->num_steps);
  }
  state.counters["requests_per_s"] =
      benchmark::Counter(static_cast<double>(n), benchmark::Counter::kIsIterationInvariantRate);
  state.counters["output_tokens_per_s"] = benchmark::Counter(
      static_cast<double>(tokens), benchmark::Counter::kIsIterationInvariantRate);
}
BENCHMARK(BM_SimulateAzureLike)
    ->Args({100000, static_cast<int64_t>(sched::SchedulingPolicy::kFcfs)})
    ->Args({100000, static_cast<int64_t>(sched::SchedulingPolicy::kAimd)})
    ->Iterations(1)
    ->Unit(benchmark::kSecond);

}  // namespace

BENCHMARK_MAIN();
