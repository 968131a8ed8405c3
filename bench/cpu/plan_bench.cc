// plan_bench.cc: make_plan() time for decode batches (issue 2 benchmarks).
//
// Batches: N decode requests (q_len 1) with lognormal context lengths (median 1024 tokens,
// sigma 1, capped at 32768), page 16, 32 qo / 8 kv heads, head_dim 128, 132 CTAs (an H100's
// SMs). "forest" batches put every request under a 2-level prefix forest: 4 roots of 2048
// tokens, each with 8 children of 512 tokens; the request's own tokens follow (same lognormal
// length). Counters: items (work items of the plan), requests/s.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <cstdint>
#include <vector>

#include "packserve/attention/plan.h"
#include "packserve/attention/plan_test_util.h"
#include "packserve/common/rng.h"

namespace {

using packserve::Rng;
using packserve::attention::BatchLayout;
using packserve::attention::DeviceShape;
using packserve::attention::make_plan;
using packserve::attention::Plan;
using packserve::attention::PlanOptions;
using packserve::attention::Policy;
using packserve::attention::testing::LayoutBuilder;

BatchLayout decode_batch(int num_requests, bool forest, uint64_t seed) {
  constexpr int kPage = 16;
  Rng rng(seed);
  LayoutBuilder b(32, 8, 128, kPage);
  std::vector<std::vector<int32_t>> leaves_of_forest;
  if (forest) {
    for (int root = 0; root < 4; ++root) {
      const std::vector<int32_t> root_pages = b.new_pages(2048 / kPage);
      for (int child = 0; child < 8; ++child) {
        std::vector<int32_t> pages = root_pages;
        const std::vector<int32_t> own = b.new_pages(512 / kPage);
        pages.insert(pages.end(), own.begin(), own.end());
        leaves_of_forest.push_back(pages);
      }
    }
  }
  for (int r = 0; r < num_requests; ++r) {
    const int own = static_cast<int>(std::min(32768.0, std::max(1.0, rng.lognormal(1024.0, 1.0))));
    if (forest) {
      const auto& prefix = leaves_of_forest[r % leaves_of_forest.size()];
      b.add(prefix, static_cast<int>(prefix.size()) * kPage + own, 1);
    } else {
      b.add({}, own, 1);
    }
  }
  return b.layout();
}

void run(benchmark::State& state, Policy policy, bool forest) {
  const BatchLayout layout = decode_batch(static_cast<int>(state.range(0)), forest, 42);
  PlanOptions options;
  options.policy = policy;
  int64_t items = 0;
  for (auto _ : state) {
    packserve::Result<Plan> plan = make_plan(layout, DeviceShape{132}, options);
    if (!plan.ok()) {
      state.SkipWithError(plan.status().to_string().c_str());
      return;
    }
    items = static_cast<int64_t>(plan->items.size());
    benchmark::DoNotOptimize(plan->items.data());
  }
  state.counters["items"] = static_cast<double>(items);
  state.SetItemsProcessed(state.iterations() * state.range(0));
}

void BM_PlanBalanced(benchmark::State& s) { run(s, Policy::kBalanced, false); }
void BM_PlanBalancedForest(benchmark::State& s) { run(s, Policy::kBalanced, true); }
void BM_PlanPrefix(benchmark::State& s) { run(s, Policy::kPrefix, false); }
void BM_PlanPrefixForest(benchmark::State& s) { run(s, Policy::kPrefix, true); }

BENCHMARK(BM_PlanBalanced)->Arg(64)->Arg(512)->Arg(2048)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_PlanBalancedForest)->Arg(64)->Arg(512)->Arg(2048)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_PlanPrefix)->Arg(64)->Arg(512)->Arg(2048)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_PlanPrefixForest)->Arg(64)->Arg(512)->Arg(2048)->Unit(benchmark::kMicrosecond);

}  // namespace

BENCHMARK_MAIN();
