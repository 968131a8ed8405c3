// run_cpu_bench.cc: throughput of the CPU executor (attention/run_cpu.h) on a decode batch and
// a prefill batch, with the balanced plan for 132 CTAs made once outside the timed loop (as
// the engine makes one plan per step for all layers). Counters per second: query rows
// (items), KV bytes the plan reads (plan_stats kv_bytes_read) and attention FLOPs
// (4 * visible keys * head_dim per (row, qo head): Q·K and P·V multiply-adds).
// Arg = executor threads.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <limits>
#include <vector>

#include "packserve/attention/batch_spec.h"
#include "packserve/attention/plan.h"
#include "packserve/attention/plan_stats.h"
#include "packserve/attention/run_cpu.h"
#include "packserve/common/rng.h"

namespace packserve::attention {
namespace {

BatchSpec base_spec() {
  BatchSpec spec;  // a Llama-3-8B-like attention layer
  spec.num_qo_heads = 32;
  spec.num_kv_heads = 8;
  spec.head_dim = 128;
  spec.page_size = 16;
  spec.dtype = DType::kBF16;
  spec.seed = 1;
  return spec;
}

// 64 decode requests, kv_len lognormal (median 1024, sigma 0.8, in [16, 8192]).
BatchSpec decode_spec() {
  BatchSpec spec = base_spec();
  Rng rng(42);
  for (int i = 0; i < 64; ++i) {
    const double len = rng.lognormal(1024, 0.8);
    spec.requests.push_back({1, static_cast<int>(std::clamp(len, 16.0, 8192.0)), ""});
  }
  return spec;
}

// 4 full prefills of 512 tokens.
BatchSpec prefill_spec() {
  BatchSpec spec = base_spec();
  for (int i = 0; i < 4; ++i) spec.requests.push_back({512, 512, ""});
  return spec;
}

void run_bench(benchmark::State& state, const BatchSpec& spec) {
  Result<BatchData> data = build_batch(spec);
  if (!data.ok()) {
    state.SkipWithError(data.status().to_string().c_str());
    return;
  }
  PlanOptions options;
  options.policy = Policy::kBalanced;
  Result<Plan> plan = make_plan(data->layout, DeviceShape{132}, options);
  if (!plan.ok()) {
    state.SkipWithError(plan.status().to_string().c_str());
    return;
  }
  const BatchLayout& l = data->layout;
  const PlanStats stats = compute_plan_stats(*plan, l);
  double flops = 0;
  for (int r = 0; r < l.batch_size(); ++r) {
    for (int i = 0; i < l.q_len(r); ++i) {
      flops += 4.0 * (l.row_position(r, i) + 1) * l.head_dim * l.num_qo_heads;
    }
  }
  std::vector<float> out(l.q_elements(), std::numeric_limits<float>::quiet_NaN());
  const RunCpuOptions run_options{static_cast<int>(state.range(0))};
  for (auto _ : state) {
    const Status s = run_cpu(*plan, l, data->tensors(), out, run_options);
    if (!s.ok()) {
      state.SkipWithError(s.to_string().c_str());
      return;
    }
    benchmark::DoNotOptimize(out.data());
  }
  state.SetItemsProcessed(state.iterations() * l.total_rows());
  state.SetBytesProcessed(state.iterations() * stats.kv_bytes_read);
  state.counters["flops"] = benchmark::Counter(flops * static_cast<double>(state.iterations()),
                                               benchmark::Counter::kIsRate);
}

void BM_RunCpuDecode(benchmark::State& state) { run_bench(state, decode_spec()); }
void BM_RunCpuPrefill(benchmark::State& state) { run_bench(state, prefill_spec()); }

BENCHMARK(BM_RunCpuDecode)->Arg(1)->Arg(2)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_RunCpuPrefill)->Arg(1)->Arg(2)->Unit(benchmark::kMillisecond)->UseRealTime();

}  // namespace
}  // namespace packserve::attention

BENCHMARK_MAIN();
