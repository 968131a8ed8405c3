// forward_test_util.h: shared by the forward tests: small llama-, qwen2- and qwen3-style
// configs (head_dim 64, as the attention engine requires), seeded random weights, and a
// test-side request (Seq) whose rows are appended to a ForwardBatch.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "packserve/common/rng.h"
#include "packserve/model/config.h"
#include "packserve/model/forward.h"
#include "packserve/model/random_weights.h"
#include "packserve/model/weights.h"

namespace packserve::model::testing_util {

inline ModelConfig base_config() {
  ModelConfig c;
  c.vocab_size = 300;
  c.hidden_size = 128;
  c.intermediate_size = 256;
  c.num_layers = 2;
  c.num_qo_heads = 4;
  c.num_kv_heads = 2;
  c.head_dim = 64;
  c.max_position_embeddings = 4096;
  c.rms_norm_eps = 1e-6;
  c.dtype = DType::kF32;
  return c;
}

// Llama-3: GQA 2, llama3 rope scaling (original context 64, so it acts at short range).
inline ModelConfig llama_config() {
  ModelConfig c = base_config();
  c.arch = Architecture::kLlama;
  c.rope_theta = 500000.0;
  c.rope_scaling = llama3_rope_scaling(8.0, 1.0, 4.0, 64);
  c.rms_norm_eps = 1e-5;
  return c;
}

inline ModelConfig qwen2_config() {  // Qwen2: qkv bias, MHA
  ModelConfig c = base_config();
  c.arch = Architecture::kQwen2;
  c.num_kv_heads = 4;
  c.qkv_bias = true;
  c.rope_theta = 1000000.0;
  return c;
}

// Qwen2 with YaRN x4 over an original context of 32 (so that it acts at short range; attention
// factor 0.1 ln 4 + 1 on cos and sin).
inline ModelConfig qwen2_yarn_config() {
  ModelConfig c = qwen2_config();
  c.rope_scaling = yarn_rope_scaling(4.0, 32);
  return c;
}

// Qwen3: q/k norm, tied embeddings, q_size != hidden_size, bf16 weights.
inline ModelConfig qwen3_config() {
  ModelConfig c = base_config();
  c.arch = Architecture::kQwen3;
  c.num_qo_heads = 4;
  c.num_kv_heads = 1;
  c.hidden_size = 96;
  c.qk_norm = true;
  c.tie_word_embeddings = true;
  c.rope_theta = 1000000.0;
  c.dtype = DType::kBF16;
  return c;
}

inline ModelWeights make_weights(const ModelConfig& c, uint64_t seed = 7) {
  // std 0.1 (not 0.02) so attention scores spread over ~1 and the softmax is far from uniform.
  Result<ModelWeights> w = make_random_weights(c, RandomWeightsOptions{seed, 0.1, 0.1});
  PS_CHECK(w.ok()) << w.status().to_string();
  return std::move(w).value();
}

inline std::vector<int32_t> random_tokens(int n, int64_t vocab, Rng& rng) {
  std::vector<int32_t> t(static_cast<size_t>(n));
  for (int32_t& x : t) x = static_cast<int32_t>(rng.uniform_int(0, vocab - 1));
  return t;
}

// A test-side request: its tokens, its page table (pages for its whole length, chosen by the
// test, possibly shared) and how many tokens have KV in the pool.
struct Seq {
  std::vector<int32_t> tokens;
  std::vector<int32_t> pages;
  int computed = 0;
};

// Appends rows tokens[computed, computed + q_len) of `s` to the batch; `samples`: true or
// false for kOutputLogits or kNoOutput, or a ForwardBatch::samples value.
inline void add(ForwardBatch& b, const Seq& s, int q_len, uint8_t samples, int page_size) {
  if (b.qo_indptr.empty()) b.qo_indptr.push_back(0);
  if (b.page_indptr.empty()) b.page_indptr.push_back(0);
  const int kv_len = s.computed + q_len;
  b.token_ids.insert(b.token_ids.end(), s.tokens.begin() + s.computed, s.tokens.begin() + kv_len);
  b.qo_indptr.push_back(static_cast<int32_t>(b.token_ids.size()));
  b.kv_len.push_back(kv_len);
  const int pages = (kv_len + page_size - 1) / page_size;
  b.page_ids.insert(b.page_ids.end(), s.pages.begin(), s.pages.begin() + pages);
  b.page_indptr.push_back(static_cast<int32_t>(b.page_ids.size()));
  b.samples.push_back(samples);
}

// Runs one 20-token prefill (pages 0, 1, page size 16) on `backend` and returns its logits.
inline std::vector<float> run_prefill(ForwardBackend& backend, int64_t vocab) {
  Rng rng(11);
  Seq s{random_tokens(20, vocab, rng), {0, 1}, 0};
  ForwardBatch b;
  add(b, s, 20, true, 16);
  ForwardOutput out;
  const Status st = backend.forward(b, out);
  EXPECT_TRUE(st.ok()) << st.to_string();
  return out.logits;
}

}  // namespace packserve::model::testing_util
