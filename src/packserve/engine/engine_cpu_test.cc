// engine_cpu_test.cc: the Engine over the real CPU forward (model/forward_cpu.h) on a tiny
// random Qwen3-style model: greedy generation is deterministic, and a packed, chunked,
// continuously batched run gives the same tokens and first-token logits as running each
// request alone.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "packserve/common/rng.h"
#include "packserve/engine/engine.h"
#include "packserve/engine/engine_test_util.h"
#include "packserve/model/forward_cpu.h"
#include "packserve/model/random_weights.h"

namespace packserve::engine {
namespace {

model::ModelConfig tiny_config() {
  model::ModelConfig c;
  c.arch = model::Architecture::kQwen3;
  c.vocab_size = 308;  // the test tokenizer's ids
  c.hidden_size = 64;
  c.intermediate_size = 128;
  c.num_layers = 2;
  c.num_qo_heads = 4;
  c.num_kv_heads = 2;
  c.head_dim = 64;
  c.max_position_embeddings = 512;
  c.rms_norm_eps = 1e-6;
  c.rope_theta = 1000000.0;
  c.qk_norm = true;
  c.dtype = DType::kF32;
  return c;
}

struct RunOutput {
  std::vector<std::vector<int32_t>> tokens;
  std::vector<std::vector<float>> first_logits;
};

// alone: one request at a time (each finished before the next is submitted).
RunOutput run(const std::vector<std::vector<int32_t>>& prompts, bool alone,
              int32_t max_num_batched_tokens) {
  const model::ModelConfig config = tiny_config();
  auto weights = model::make_random_weights(config, model::RandomWeightsOptions{11, 0.1, 0.1});
  EXPECT_TRUE(weights.ok()) << weights.status().to_string();
  EngineConfig ec;
  ec.kv.num_pages = 64;
  ec.kv.page_size = 8;
  ec.scheduler.max_num_batched_tokens = max_num_batched_tokens;
  ec.scheduler.check_invariants_every_step = true;
  model::CpuForwardOptions options;
  options.plan.deterministic = true;
  auto backend = model::CpuForwardBackend::create(*weights, model::KvPoolShape{64, 8}, options);
  EXPECT_TRUE(backend.ok()) << backend.status().to_string();
  auto engine = Engine::create(ec, std::move(backend).value(), testing::make_test_tokenizer());
  EXPECT_TRUE(engine.ok()) << engine.status().to_string();
  RunOutput out;
  std::vector<std::shared_ptr<RequestStream>> streams;
  auto take = [&](RequestStream& s) {
    const testing::Collected c = testing::collect(s);
    EXPECT_TRUE(c.finished);
    EXPECT_EQ(c.last.finish_reason, "length");
    out.tokens.push_back(c.token_ids);
    out.first_logits.push_back(c.last_prompt_logits);
  };
  for (const auto& p : prompts) {
    GenerateRequest r;
    r.prompt_token_ids = p;
    r.sampling.temperature = 0.0;
    r.sampling.max_tokens = 10;
    r.return_last_prompt_logits = true;
    auto s = (*engine)->submit(r);
    EXPECT_TRUE(s.ok()) << s.status().to_string();
    if (alone) {
      take(**s);
    } else {
      streams.push_back(*s);
    }
  }
  for (auto& s : streams) take(*s);
  return out;
}

TEST(EngineCpuTest, GreedyBatchedEqualsOneAtATimeAndIsDeterministic) {
  Rng rng(5);
  std::vector<std::vector<int32_t>> prompts;
  for (int len : {1, 3, 8, 9, 17, 40}) {
    std::vector<int32_t> p;
    for (int i = 0; i < len; ++i) p.push_back(static_cast<int32_t>(rng.uniform_int(0, 255)));
    prompts.push_back(p);
  }
  prompts.push_back({prompts[4].begin(), prompts[4].begin() + 16});  // shares 2 full pages
  const RunOutput alone = run(prompts, true, 256);
  const RunOutput batched = run(prompts, false, 24);  // chunked prefill beside decode rows
  const RunOutput again = run(prompts, false, 24);
  ASSERT_EQ(alone.tokens.size(), prompts.size());
  ASSERT_EQ(batched.tokens.size(), prompts.size());
  EXPECT_NE(alone.tokens[0], alone.tokens[5]);  // the model is not degenerate
  // The batch composition of each step depends on when the engine thread picks submissions
  // up, and OpenBLAS rounds GEMMs over different row counts differently (forward_cpu.h): two
  // batched runs agree to f32 rounding (relative 1e-5), not bit for bit.
  auto expect_close = [](const std::vector<float>& got, const std::vector<float>& want) {
    ASSERT_EQ(got.size(), 308u);
    ASSERT_EQ(want.size(), 308u);
    double max_abs = 0, max_diff = 0;
    for (size_t v = 0; v < want.size(); ++v) {
      max_abs = std::max(max_abs, std::fabs(static_cast<double>(want[v])));
      max_diff = std::max(max_diff, std::fabs(static_cast<double>(got[v]) - want[v]));
    }
    EXPECT_LE(max_diff, 1e-5 * max_abs + 1e-6);
  };
  for (size_t i = 0; i < prompts.size(); ++i) {
    SCOPED_TRACE("prompt " + std::to_string(i));
    EXPECT_EQ(batched.tokens[i], again.tokens[i]);
    EXPECT_EQ(batched.tokens[i], alone.tokens[i]);
    expect_close(batched.first_logits[i], again.first_logits[i]);
    expect_close(batched.first_logits[i], alone.first_logits[i]);
  }
}

}  // namespace
}  // namespace packserve::engine
