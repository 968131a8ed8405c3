// ngram_bench.cc: the prompt-lookup proposer (sched/ngram_proposer.h) on one request's tokens:
// the backward scan a decode step pays per speculating request. Cases: text that repeats
// (the suffix recurs near the end: found at once) and random ids over a 32k vocabulary (no
// earlier occurrence: the whole scan), for contexts of 1k to 16k tokens.
#include <benchmark/benchmark.h>

#include <vector>

#include "packserve/common/rng.h"
#include "packserve/sched/ngram_proposer.h"

namespace {

std::vector<packserve::kv::TokenId> tokens(int64_t n, bool repeating) {
  packserve::Rng rng(5);
  std::vector<packserve::kv::TokenId> t(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    t[static_cast<size_t>(i)] = repeating && i >= 64
                                    ? t[static_cast<size_t>(i - 64)]
                                    : static_cast<int32_t>(rng.uniform_int(0, 32767));
  }
  return t;
}

void BM_NgramLookup(benchmark::State& state) {
  const std::vector<packserve::kv::TokenId> t = tokens(state.range(0), state.range(1) != 0);
  std::vector<packserve::kv::TokenId> drafts;
  for (auto _ : state) {
    packserve::sched::propose_ngram_drafts(t, 2, 4, 4, drafts);
    benchmark::DoNotOptimize(drafts.data());
  }
  state.counters["drafts"] = static_cast<double>(drafts.size());
}
BENCHMARK(BM_NgramLookup)
    ->ArgNames({"tokens", "repeating"})
    ->ArgsProduct({{1024, 4096, 16384}, {0, 1}});

}  // namespace

BENCHMARK_MAIN();
