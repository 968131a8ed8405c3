// sampler_bench.cc: host time to sample one token from one row of Qwen3-sized logits
// (151,936 entries) with RequestSampler, per sampling mode. The engine samples every
// sampling row of a step on its thread, so this times the per-row host cost of a decode step
// (issue 5: serving latency). Logits: N(0, 3) from a fixed seed, like a flat LM head; the
// *Flat case N(0, 0.3), like the random dummy models' logits, whose top-p 0.9 set is most of
// the vocabulary. TopLogprobs20: common/sample_draw.h top_logprobs(row, 20), which the engine
// adds to the draw for a request with top_logprobs = 20. Penalties: the penalized copy of a row
// (engine LogitAdjustments::apply) for a 2,000-token prompt (repetition_penalty) and 500 output
// tokens (all three penalties), which the engine adds before the draw of a penalized request.
//   sampler_bench [benchmark flags]
#include <benchmark/benchmark.h>

#include <random>
#include <vector>

#include "packserve/common/sample_draw.h"
#include "packserve/engine/sampler.h"

namespace {

using packserve::engine::RequestSampler;
using packserve::engine::SamplingParams;

constexpr size_t kVocab = 151936;

std::vector<float> random_logits(float stddev) {
  std::mt19937 gen(7);
  std::normal_distribution<float> normal(0.0f, stddev);
  std::vector<float> logits(kVocab);
  for (float& x : logits) x = normal(gen);
  return logits;
}

void run(benchmark::State& state, SamplingParams params, float stddev = 3.0f) {
  const std::vector<float> logits = random_logits(stddev);
  RequestSampler sampler(params, 1);
  for (auto _ : state) benchmark::DoNotOptimize(sampler.sample(logits));
  state.SetItemsProcessed(state.iterations());
}

SamplingParams with(double temperature, int32_t top_k, double top_p, bool logprobs) {
  SamplingParams p;
  p.temperature = temperature;
  p.top_k = top_k;
  p.top_p = top_p;
  p.logprobs = logprobs;
  return p;
}

void BM_Greedy(benchmark::State& s) { run(s, with(0.0, 0, 1.0, false)); }
void BM_Temperature(benchmark::State& s) { run(s, with(1.0, 0, 1.0, false)); }
void BM_TemperatureLogprobs(benchmark::State& s) { run(s, with(1.0, 0, 1.0, true)); }
void BM_TopK50(benchmark::State& s) { run(s, with(1.0, 50, 1.0, false)); }
void BM_TopP09(benchmark::State& s) { run(s, with(1.0, 0, 0.9, false)); }
void BM_TopP09Flat(benchmark::State& s) { run(s, with(1.0, 0, 0.9, false), 0.3f); }
void BM_TopLogprobs20(benchmark::State& state) {
  const std::vector<float> logits = random_logits(3.0f);
  for (auto _ : state) benchmark::DoNotOptimize(packserve::top_logprobs(logits, 20));
  state.SetItemsProcessed(state.iterations());
}
void BM_Penalties(benchmark::State& state) {
  const std::vector<float> logits = random_logits(3.0f);
  SamplingParams p;
  p.presence_penalty = 0.5;
  p.frequency_penalty = 0.5;
  p.repetition_penalty = 1.1;
  std::mt19937 gen(11);
  std::uniform_int_distribution<int32_t> id(0, static_cast<int32_t>(kVocab) - 1);
  std::vector<int32_t> prompt(2000);
  for (int32_t& t : prompt) t = id(gen);
  packserve::engine::LogitAdjustments adjustments(p, prompt);
  for (int i = 0; i < 500; ++i) adjustments.add_output(id(gen));
  std::vector<float> out;
  for (auto _ : state) {
    adjustments.apply(logits, out);
    benchmark::DoNotOptimize(out.data());
  }
  state.SetItemsProcessed(state.iterations());
}

BENCHMARK(BM_Greedy);
BENCHMARK(BM_Temperature);
BENCHMARK(BM_TemperatureLogprobs);
BENCHMARK(BM_TopK50);
BENCHMARK(BM_TopP09);
BENCHMARK(BM_TopP09Flat);
BENCHMARK(BM_TopLogprobs20);
BENCHMARK(BM_Penalties);

}  // namespace

BENCHMARK_MAIN();
