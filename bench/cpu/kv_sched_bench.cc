// kv_sched_bench.cc: the KV-cache manager and the scheduler on the CPU (issue 3 benchmarks).
//
// BM_KvAdmitComputeFree: one request's lifetime in the KV manager: add_request of a
//   `prompt` token prompt whose first half is a cached shared prefix (page 16), commit of the
//   rest, then free. items = prompt tokens.
// BM_KvDecodeToken: one decode token of one request: allocate_slots(1) + commit_computed(1),
//   with a page allocation and a page publish every 16 tokens. items = tokens.
// BM_SchedulerDecodeStep: schedule + commit of a steady decode batch of `running` requests
//   (each 1024-token prompt, effectively endless output) with a zero-cost executor.
//   items = decode rows.
// BM_SchedulerReplay: a whole replay of 10,000 requests (lognormal prompts median 1024 capped
//   at 16k, outputs median 128 capped at 1024, Poisson arrivals at 20 req/s, 30 ms per step
//   plus 0.05 ms per batched token) through schedule/commit: what the simulator pays for the
//   scheduler alone. items = requests; counters: steps, output tokens per second of CPU time.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <memory>
#include <vector>

#include "packserve/common/log.h"
#include "packserve/common/rng.h"
#include "packserve/kv/kv_cache.h"
#include "packserve/sched/scheduler.h"

namespace {

using packserve::Rng;
namespace kv = packserve::kv;
namespace sched = packserve::sched;

std::vector<kv::TokenId> make_tokens(int32_t n, kv::TokenId first) {
  std::vector<kv::TokenId> t(static_cast<size_t>(n));
  for (int32_t i = 0; i < n; ++i) t[static_cast<size_t>(i)] = first + i;
  return t;
}

void BM_KvAdmitComputeFree(benchmark::State& state) {
  const int32_t prompt = static_cast<int32_t>(state.range(0));
  kv::KvCacheConfig config;
  config.num_pages = 65536;
  config.page_size = 16;
  kv::KvCacheManager manager(config);
  std::vector<kv::TokenId> tokens = make_tokens(prompt, 1);
  std::vector<kv::PageCopy> copies;
  // Warm the shared prefix (first half).
  {
    std::vector<kv::TokenId> prefix(tokens.begin(), tokens.begin() + prompt / 2);
    auto r = manager.add_request(0, prefix, prompt, &copies);
    (void)manager.commit_computed(0, prefix, r->num_new_tokens);
    (void)manager.free_request(0);
  }
  kv::RequestId id = 1;
  kv::TokenId suffix = 1 << 20;
  for (auto _ : state) {
    // A fresh second half per iteration so only the prefix hits.
    for (int32_t i = prompt / 2; i < prompt; ++i) tokens[static_cast<size_t>(i)] = suffix++;
    auto r = manager.add_request(id, tokens, prompt, &copies);
    benchmark::DoNotOptimize(r);
    (void)manager.commit_computed(id, tokens, r->num_new_tokens);
    (void)manager.free_request(id);
    ++id;
    copies.clear();
  }
  state.SetItemsProcessed(state.iterations() * prompt);
  state.counters["hit_rate"] = manager.stats().prefix_hit_rate();
}
BENCHMARK(BM_KvAdmitComputeFree)->Arg(1024)->Arg(8192);

void BM_KvDecodeToken(benchmark::State& state) {
  kv::KvCacheConfig config;
  config.num_pages = 1 << 20;
  config.page_size = 16;
  kv::KvCacheManager manager(config);
  std::vector<kv::TokenId> tokens = make_tokens(16, 1);
  std::vector<kv::PageCopy> copies;
  auto r = manager.add_request(0, tokens, 16, &copies);
  (void)manager.commit_computed(0, tokens, r->num_new_tokens);
  tokens.reserve(1 << 24);
  for (auto _ : state) {
    tokens.push_back(static_cast<kv::TokenId>(tokens.size()));
    (void)manager.allocate_slots(0, 1, &copies);
    (void)manager.commit_computed(0, tokens, 1);
    if (tokens.size() >= static_cast<size_t>(config.num_pages / 2) * 16) {
      state.PauseTiming();
      (void)manager.free_request(0);
      tokens.resize(16);
      r = manager.add_request(0, tokens, 16, &copies);
      (void)manager.commit_computed(0, tokens, r->num_new_tokens);
      state.ResumeTiming();
    }
  }
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_KvDecodeToken);

// Samples token 7 everywhere; no model time.
sched::StepOutput zero_cost_output(const sched::ScheduledBatch& batch, double step_ms) {
  sched::StepOutput out;
  out.sampled_token_ids.assign(batch.sequences.size(), 7);
  out.step_duration_ms = step_ms;
  return out;
}

void BM_SchedulerDecodeStep(benchmark::State& state) {
  const int32_t running = static_cast<int32_t>(state.range(0));
  sched::SchedulerConfig config;
  config.max_num_batched_tokens = 8192;
  config.max_num_running_requests = running;
  kv::KvCacheConfig kv_config;
  kv_config.num_pages = 1 << 20;
  kv_config.page_size = 16;
  auto scheduler = std::move(sched::Scheduler::create(config, kv_config)).value();
  for (int32_t i = 0; i < running; ++i) {
    sched::Request r;
    r.id = static_cast<kv::RequestId>(i);
    r.prompt_token_ids = make_tokens(1024, i * 4096);
    r.max_output_tokens = 1 << 28;
    (void)scheduler->add_request(std::move(r));
  }
  double now = 0.0;
  // Prefill everything first.
  while (scheduler->num_running() < running || scheduler->num_waiting() > 0) {
    auto b = scheduler->schedule(now);
    (void)scheduler->commit(zero_cost_output(**b, 1.0));
    now += 1.0;
  }
  sched::StepOutput out;
  for (auto _ : state) {
    auto b = scheduler->schedule(now);
    out.sampled_token_ids.assign((*b)->sequences.size(), 7);
    out.step_duration_ms = 1.0;
    auto e = scheduler->commit(out);
    benchmark::DoNotOptimize(e);
    now += 1.0;
  }
  state.SetItemsProcessed(state.iterations() * running);
}
BENCHMARK(BM_SchedulerDecodeStep)->Arg(64)->Arg(256);

void BM_SchedulerReplay(benchmark::State& state) {
  const int num_requests = 10000;
  const bool aimd = state.range(0) != 0;
  int64_t steps = 0, output_tokens = 0;
  for (auto _ : state) {
    state.PauseTiming();
    Rng rng(42);
    std::vector<sched::Request> requests(static_cast<size_t>(num_requests));
    double t = 0.0;
    for (int i = 0; i < num_requests; ++i) {
      t += -std::log(1.0 - rng.uniform()) * 50.0;  // 20 req/s
      sched::Request& r = requests[static_cast<size_t>(i)];
      r.id = static_cast<kv::RequestId>(i);
      r.arrival_time_ms = t;
      const int32_t prompt = std::clamp(static_cast<int32_t>(rng.lognormal(1024.0, 1.0)), 1, 16384);
      // A shared 512-token system prompt for half of the requests.
      const bool shared = rng.uniform() < 0.5;
      r.prompt_token_ids = make_tokens(prompt, shared ? 1 : (i + 1) * 20000);
      r.max_output_tokens = std::clamp(static_cast<int32_t>(rng.lognormal(128.0, 1.0)), 1, 1024);
    }
    sched::SchedulerConfig config;
    config.policy = aimd ? sched::SchedulingPolicy::kAimd : sched::SchedulingPolicy::kFcfs;
    config.packing = sched::PackingAlgorithm::kFirstFitDecreasing;
    kv::KvCacheConfig kv_config;
    kv_config.num_pages = 26000;  // ~55 GB of Llama-3.1-8B bf16 KV at 16 tokens per page
    kv_config.page_size = 16;
    auto scheduler = std::move(sched::Scheduler::create(config, kv_config)).value();
    state.ResumeTiming();

    size_t next = 0;
    double now = 0.0;
    sched::StepOutput out;
    while (next < requests.size() || scheduler->has_unfinished_requests()) {
      while (next < requests.size() && requests[next].arrival_time_ms <= now) {
        (void)scheduler->add_request(std::move(requests[next]));
        ++next;
      }
      auto b = scheduler->schedule(now);
      const sched::ScheduledBatch& batch = **b;
      out.sampled_token_ids.assign(batch.sequences.size(), 7);
      out.step_duration_ms = batch.empty() ? 0.0 : 30.0 + 0.05 * batch.num_batched_tokens;
      auto e = scheduler->commit(out);
      output_tokens += static_cast<int64_t>((*e)->tokens.size());
      ++steps;
      if (batch.empty()) {
        double wake = next < requests.size() ? requests[next].arrival_time_ms : now + 1.0;
        if (auto deadline = scheduler->staging_deadline_ms()) wake = std::min(wake, *deadline);
        now = std::max(now + 1e-3, wake);
      } else {
        now = (*e)->end_time_ms;
      }
    }
  }
  state.SetItemsProcessed(state.iterations() * num_requests);
  state.counters["steps"] =
      benchmark::Counter(static_cast<double>(steps), benchmark::Counter::kAvgIterations);
  state.counters["output_tokens_per_s"] =
      benchmark::Counter(static_cast<double>(output_tokens), benchmark::Counter::kIsRate);
}
BENCHMARK(BM_SchedulerReplay)->Arg(0)->Arg(1)->Unit(benchmark::kMillisecond)->Iterations(1);

}  // namespace

int main(int argc, char** argv) {
  packserve::set_log_level("warn");  // the scheduler logs its resolved config at info
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
