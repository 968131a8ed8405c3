// forward_cpu_bench.cc: decode steps of the CPU forward backend (model/forward_cpu.h) on random
// weights: `batch` requests, each with `context` tokens already in the KV pool, decode one row
// each per step (the same step repeated: position `context` is rewritten every iteration).
// Models: "tiny" (the dummy tiny shape: Qwen3-style, hidden 64, 2 layers, 4/2 heads, head_dim
// 64, intermediate 128, vocab 4096) and "small" (Llama-style, hidden 512, 4 layers, 8/2 heads,
// head_dim 64, intermediate 1536, vocab 8192). Args: batch, context tokens, attention threads.
// Counters: items_per_second = decode rows (tokens) per second; weight_bytes_per_second = the
// f32 weights the GEMMs stream per step, a memory-bound ceiling to compare with.
#include <benchmark/benchmark.h>

#include <memory>
#include <vector>

#include "packserve/model/dummy_model.h"
#include "packserve/model/forward_cpu.h"
#include "packserve/model/random_weights.h"

namespace packserve::model {
namespace {

ModelConfig small_config() {
  ModelConfig c;
  c.arch = Architecture::kLlama;
  c.vocab_size = 8192;
  c.hidden_size = 512;
  c.intermediate_size = 1536;
  c.num_layers = 4;
  c.num_qo_heads = 8;
  c.num_kv_heads = 2;
  c.head_dim = 64;
  c.max_position_embeddings = 4096;
  c.rope_theta = 500000.0;
  c.dtype = DType::kBF16;
  return c;
}

void decode_bench(benchmark::State& state, const ModelConfig& config) {
  const int batch = static_cast<int>(state.range(0));
  const int context = static_cast<int>(state.range(1));
  const int page_size = 16;
  const int pages_per_request = (context + 1 + page_size - 1) / page_size;
  Result<ModelWeights> weights = make_random_weights(config, RandomWeightsOptions{1, 0.02, 0.02});
  if (!weights.ok()) return state.SkipWithError(weights.status().to_string().c_str());
  CpuForwardOptions options;
  options.num_threads = static_cast<int>(state.range(2));
  auto backend = CpuForwardBackend::create(
      *weights, KvPoolShape{batch * pages_per_request, page_size}, options);
  if (!backend.ok()) return state.SkipWithError(backend.status().to_string().c_str());

  // Prefill every request's context (untimed), then build the decode step.
  ForwardBatch prefill, decode;
  prefill.qo_indptr = decode.qo_indptr = {0};
  prefill.page_indptr = decode.page_indptr = {0};
  for (int r = 0; r < batch; ++r) {
    std::vector<int32_t> pages;
    for (int p = 0; p < pages_per_request; ++p) pages.push_back(r * pages_per_request + p);
    for (int t = 0; t < context; ++t) {
      prefill.token_ids.push_back(static_cast<int32_t>((r * 131 + t * 7) % config.vocab_size));
    }
    prefill.qo_indptr.push_back(static_cast<int32_t>(prefill.token_ids.size()));
    prefill.kv_len.push_back(context);
    const int prefill_pages = (context + page_size - 1) / page_size;
    prefill.page_ids.insert(prefill.page_ids.end(), pages.begin(), pages.begin() + prefill_pages);
    prefill.page_indptr.push_back(static_cast<int32_t>(prefill.page_ids.size()));
    prefill.samples.push_back(0);

    decode.token_ids.push_back(static_cast<int32_t>(r % config.vocab_size));
    decode.qo_indptr.push_back(r + 1);
    decode.kv_len.push_back(context + 1);
    decode.page_ids.insert(decode.page_ids.end(), pages.begin(), pages.end());
    decode.page_indptr.push_back(static_cast<int32_t>(decode.page_ids.size()));
    decode.samples.push_back(1);
  }
  ForwardOutput out;
  if (Status s = (*backend)->forward(prefill, out); !s.ok()) {
    return state.SkipWithError(s.to_string().c_str());
  }
  for (auto _ : state) {
    if (Status s = (*backend)->forward(decode, out); !s.ok()) {
      return state.SkipWithError(s.to_string().c_str());
    }
    benchmark::DoNotOptimize(out.logits.data());
  }
  const int64_t h = config.hidden_size;
  const int64_t layer_params = h * (config.q_size() + 2 * config.kv_size()) + config.q_size() * h +
                               3 * h * config.intermediate_size;
  const double weight_bytes =
      4.0 * static_cast<double>(config.num_layers * layer_params + config.vocab_size * h);
  state.SetItemsProcessed(state.iterations() * batch);
  state.counters["weight_bytes_per_second"] = benchmark::Counter(
      weight_bytes * static_cast<double>(state.iterations()), benchmark::Counter::kIsRate);
}

void BM_DecodeTiny(benchmark::State& state) {
  Result<ModelConfig> config = dummy_model_config("tiny", 4096);
  if (!config.ok()) return state.SkipWithError(config.status().to_string().c_str());
  decode_bench(state, *config);
}
void BM_DecodeSmall(benchmark::State& state) { decode_bench(state, small_config()); }

BENCHMARK(BM_DecodeTiny)
    ->Args({1, 512, 1})
    ->Args({8, 512, 1})
    ->Args({32, 512, 1})
    ->Args({32, 512, 2})
    ->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_DecodeSmall)
    ->Args({1, 512, 1})
    ->Args({8, 512, 1})
    ->Args({32, 512, 1})
    ->Args({32, 512, 2})
    ->Unit(benchmark::kMicrosecond);

}  // namespace
}  // namespace packserve::model
BENCHMARK_MAIN();
