// forward_graph_test.cu [label gpu]: the CUDA-graph path of CudaForwardBackend (forward_step.cu)
// against the eager path of a second backend with the same weights (the oracle: eager is
// itself checked against the f32 CPU backend in forward_cuda_test.cu). Both run the same
// steps; a graph is captured for a shape's first step and replayed for later steps of that
// shape with other requests, positions, pages and a page copy (a shape's first step runs
// eagerly, then is captured without being launched). Expected: the replayed step
// launches the same kernels with the same arguments on the same data, so the KV pools are
// bit-identical and the logits agree to 1e-3 of max |logit| (a bf16 rounding is 2^-9 = 2e-3;
// cuBLAS may pick another algorithm inside a capture); observed differences are printed (0 on
// the H100 so far). Argmax rows (kOutputArgmax: the graph backend's on-device argmax) must
// equal argmax_lowest of eager's logits of the row exactly, and draw rows (kOutputSample: its
// on-device draw) sample_draw of them with the row's draw (the logprob to a float ulp or two),
// their top_logprobs the host's top_logprobs of those logits (ids exactly, logprobs as above);
// with a nonzero logits difference a near-tie could flip one, and the printed difference would
// show it.
// Every test skips without a CUDA device.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <memory>
#include <span>
#include <vector>

#include "packserve/common/argmax.h"
#include "packserve/common/dtype.h"
#include "packserve/common/rng.h"
#include "packserve/common/sample_draw.h"
#include "packserve/model/cuda/forward_cuda.h"
#include "packserve/model/forward_test_util.h"

namespace packserve::model {
namespace {

namespace tu = testing_util;
constexpr KvPoolShape kPool{32, 16};
constexpr double kLogitsRelTol = 1e-3;

bool has_device() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    (void)cudaGetLastError();
    return false;
  }
  return n > 0;
}
#define SKIP_WITHOUT_DEVICE() \
  if (!has_device()) GTEST_SKIP() << "no CUDA device"

ModelConfig llama_bf16() {
  ModelConfig c = tu::llama_config();
  c.dtype = DType::kBF16;
  return c;
}

void add(ForwardBatch& b, tu::Seq& s, int q_len, uint8_t samples) {
  tu::add(b, s, q_len, samples, kPool.page_size);
  s.computed += q_len;
}

struct Backends {
  std::unique_ptr<CudaForwardBackend> eager, graph;
};

// GEMM autotune off: both backends then use the heuristic's algorithm for every shape, so
// graph and eager run the very same kernels (with autotune each backend times its own).
Backends make_backends(const ModelWeights& w, int max_graph_rows,
                       WeightQuantization quantization = WeightQuantization::kNone,
                       KvCacheDtype kv_cache_dtype = KvCacheDtype::kAuto) {
  CudaForwardOptions options;
  options.quantization = quantization;
  options.kv_cache_dtype = kv_cache_dtype;
  options.max_batch_rows = 128;
  options.max_batch_page_ids = 64;
  options.gemm_tuning = GemmTuning::kHeuristic;
  options.step.max_graph_rows = 0;
  auto eager = CudaForwardBackend::create(w, kPool, options);
  EXPECT_TRUE(eager.ok()) << eager.status().to_string();
  options.step.max_graph_rows = max_graph_rows;
  auto graph = CudaForwardBackend::create(w, kPool, options);
  EXPECT_TRUE(graph.ok()) << graph.status().to_string();
  if (!eager.ok() || !graph.ok()) return {};
  return {std::move(eager).value(), std::move(graph).value()};
}

// Runs `step` on `graph` and, with the logits of every sampling row, on `eager`; expects the
// logits rows to agree, each argmax row of `graph` (the on-device argmax) to be argmax_lowest
// of eager's logits of that row, and every layer's KV pool to be identical.
void expect_same_step(Backends& be, const ForwardBatch& step, int num_layers, const char* what) {
  SCOPED_TRACE(what);
  ForwardBatch all_logits = step;
  for (uint8_t& s : all_logits.samples) s = s == kNoOutput ? kNoOutput : kOutputLogits;
  all_logits.adjust_indptr.clear();
  all_logits.adjusts.clear();
  all_logits.mask_index.clear();
  all_logits.masks.clear();
  all_logits.fill_masks = nullptr;
  std::vector<uint32_t> masks = step.masks;  // the masks the step will see
  if (step.fill_masks) step.fill_masks(masks);
  ForwardOutput eager, got;
  const Status se = be.eager->forward(all_logits, eager);
  ASSERT_TRUE(se.ok()) << se.to_string();
  const Status sg = be.graph->forward(step, got);
  ASSERT_TRUE(sg.ok()) << sg.to_string();
  const size_t V = static_cast<size_t>(be.eager->config().vocab_size);
  std::vector<float> want;
  std::vector<int32_t> want_argmax, want_sampled;
  std::vector<float> want_logprobs;
  std::vector<std::vector<TopLogprob>> want_top;
  TemperatureScratch scratch;
  size_t row = 0;
  for (size_t r = 0; r < step.samples.size(); ++r) {
    const uint8_t s = step.samples[r];
    if (s == kNoOutput) continue;
    std::span<const float> logits = std::span<const float>(eager.logits).subspan(row++ * V, V);
    std::vector<float> masked;  // forward.h: a row's mask applies first
    if (!step.mask_index.empty() && step.mask_index[r] >= 0) {
      const auto words = static_cast<size_t>(mask_words(static_cast<int64_t>(V)));
      masked.assign(logits.begin(), logits.end());
      mask_logits(masked, std::span<const uint32_t>(masks).subspan(
                              static_cast<size_t>(step.mask_index[r]) * words, words));
      logits = masked;
    }
    if (s == kOutputArgmax) {
      want_argmax.push_back(argmax_lowest(logits));
    } else if (s == kOutputSample) {
      std::vector<float> adjusted;
      const SampleResult s = sample_draw_adjusted(logits, step.adjusts_of(static_cast<int>(r)),
                                                  step.draws[r], adjusted, scratch);
      want_sampled.push_back(s.token_id);
      want_logprobs.push_back(s.logprob);
      want_top.push_back(top_logprobs(logits, step.draws[r].top_logprobs));
    } else {
      want.insert(want.end(), logits.begin(), logits.end());
    }
  }
  EXPECT_EQ(got.argmax, want_argmax);
  EXPECT_EQ(got.sampled, want_sampled);
  ASSERT_EQ(got.sampled_logprobs.size(), want_logprobs.size());
  for (size_t i = 0; i < want_logprobs.size(); ++i) {
    EXPECT_NEAR(got.sampled_logprobs[i], want_logprobs[i],
                3e-7 * std::max(1.0f, std::fabs(want_logprobs[i])))
        << "draw row " << i;
  }
  const auto near = [](float got, float want) {  // a float ulp or two, or the same infinity
    return std::isinf(want) ? got == want
                            : std::fabs(got - want) <= 3e-7 * std::max(1.0f, std::fabs(want));
  };
  ASSERT_EQ(got.top_logprobs.size(), want_top.size());
  for (size_t i = 0; i < want_top.size(); ++i) {
    ASSERT_EQ(got.top_logprobs[i].size(), want_top[i].size()) << "draw row " << i;
    for (size_t j = 0; j < want_top[i].size(); ++j) {
      EXPECT_EQ(got.top_logprobs[i][j].token_id, want_top[i][j].token_id) << i << ", " << j;
      EXPECT_PRED2(near, got.top_logprobs[i][j].logprob, want_top[i][j].logprob) << i << ", " << j;
    }
  }
  ASSERT_EQ(got.logits.size(), want.size());
  double num = 0, den = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    ASSERT_TRUE(std::isfinite(got.logits[i])) << "logit " << i;
    num = std::max(num, std::abs(double(got.logits[i]) - want[i]));
    den = std::max(den, std::abs(double(want[i])));
  }
  std::printf("%s: graph vs eager logits max-norm relative difference %.3g\n", what,
              den > 0 ? num / den : num);
  EXPECT_LE(num, kLogitsRelTol * den);
  for (int l = 0; l < num_layers; ++l) {
    std::vector<uint16_t> ke, ve, kg, vg;
    ASSERT_TRUE(be.eager->read_kv_pages(l, ke, ve).ok());
    ASSERT_TRUE(be.graph->read_kv_pages(l, kg, vg).ok());
    EXPECT_TRUE(ke == kg) << "layer " << l << ": k pages differ";
    EXPECT_TRUE(ve == vg) << "layer " << l << ": v pages differ";
  }
}

TEST(CudaForwardGraph, ReplayedDecodeStepsEqualEager) {
  SKIP_WITHOUT_DEVICE();
  const ModelConfig c = llama_bf16();
  const ModelWeights w = tu::make_weights(c);
  Backends be = make_backends(w, 16);
  ASSERT_TRUE(be.eager && be.graph);
  Rng rng(23);
  auto tokens = [&](int n) { return tu::random_tokens(n, c.vocab_size, rng); };
  tu::Seq a{tokens(60), {0, 1, 2, 3}}, b{tokens(60), {4, 5, 6, 7}}, cc{tokens(60), {8, 9, 10, 11}},
      d{tokens(60), {12, 13, 14, 15}};
  const int L = static_cast<int>(c.num_layers);
  const CudaStepProfile& prof = be.graph->last_step_profile();

  ForwardBatch s0;  // 99 rows > max_graph_rows: eager on both
  add(s0, a, 40, true);
  add(s0, b, 33, true);
  add(s0, cc, 17, false);
  add(s0, d, 9, true);
  expect_same_step(be, s0, L, "prefill (eager)");
  EXPECT_FALSE(prof.graph_replayed);

  ForwardBatch s1;  // shape (3 rows, 3 requests, 3 samples): captured
  add(s1, a, 1, true);
  add(s1, b, 1, true);
  add(s1, cc, 1, true);
  expect_same_step(be, s1, L, "decode a b c (eager, then captured)");
  EXPECT_TRUE(prof.graph_captured);
  EXPECT_FALSE(prof.graph_replayed);

  // Same shape, other requests and positions, plus a fork of a at 40 tokens whose partial
  // page 2 (8 tokens) is copied to page 16 before the replay.
  tu::Seq e{std::vector<int32_t>(a.tokens.begin(), a.tokens.begin() + 40), {0, 1, 16, 17}, 40};
  const auto e_tail = tokens(12);
  e.tokens.insert(e.tokens.end(), e_tail.begin(), e_tail.end());
  ForwardBatch s2;
  s2.page_copies.push_back(kv::PageCopy{2, 16, 8});
  add(s2, d, 1, true);
  add(s2, e, 1, true);
  add(s2, b, 1, true);
  expect_same_step(be, s2, L, "decode d e b + page copy (replay)");
  EXPECT_FALSE(prof.graph_captured);
  EXPECT_TRUE(prof.graph_replayed);

  ForwardBatch s3;  // a new shape: (5, 5, 4)
  add(s3, a, 1, true);
  add(s3, b, 1, false);
  add(s3, cc, 1, true);
  add(s3, d, 1, true);
  add(s3, e, 1, true);
  expect_same_step(be, s3, L, "decode 5 rows, 4 samples (capture)");
  EXPECT_TRUE(prof.graph_captured);

  ForwardBatch s4;  // back to (3, 3, 3): replay, requests in another order, a 2-row chunk
  add(s4, e, 1, true);
  add(s4, cc, 1, true);
  add(s4, a, 1, true);
  expect_same_step(be, s4, L, "decode e c a (replay)");
  EXPECT_FALSE(prof.graph_captured);
  EXPECT_TRUE(prof.graph_replayed);

  ForwardBatch s5;  // (4 rows, 3 requests, 3 samples): a chunk of 2 rows in a graphed step
  add(s5, d, 2, true);
  add(s5, b, 1, true);
  add(s5, a, 1, true);
  expect_same_step(be, s5, L, "chunk of 2 + 2 decodes (capture)");
  EXPECT_TRUE(prof.graph_captured);
  EXPECT_EQ(be.graph->num_cuda_graphs(), 3);

  // Greedy rows: (3, 3, 3) with 2 argmax rows is another shape; then a replay of it.
  ForwardBatch s6;
  add(s6, a, 1, kOutputArgmax);
  add(s6, b, 1, kOutputLogits);
  add(s6, cc, 1, kOutputArgmax);
  expect_same_step(be, s6, L, "decode with 2 argmax rows (capture)");
  EXPECT_TRUE(prof.graph_captured);
  ForwardBatch s7;
  add(s7, e, 1, kOutputArgmax);
  add(s7, d, 1, kOutputLogits);
  add(s7, b, 1, kOutputArgmax);
  expect_same_step(be, s7, L, "decode with 2 argmax rows (replay)");
  EXPECT_TRUE(prof.graph_replayed);
  ForwardBatch s8;  // every row an argmax row, one of them a 2-row chunk
  add(s8, cc, 2, kOutputArgmax);
  add(s8, a, 1, kOutputArgmax);
  expect_same_step(be, s8, L, "chunk of 2 + decode, argmax only (capture)");
  EXPECT_TRUE(prof.graph_captured);
  EXPECT_EQ(be.graph->num_cuda_graphs(), 5);

  // Draw rows: (3, 3, 3) with 1 argmax and 2 draw rows is another shape; its replay reads
  // other draws (temperature, min-p, top-k, top-p, greedy, logprob, u) from the step's
  // metadata.
  ForwardBatch s9;
  add(s9, a, 1, kOutputSample);
  add(s9, b, 1, kOutputArgmax);
  add(s9, cc, 1, kOutputSample);
  s9.draws = {{1.0f / 0.8f, 0.0f, 0.37}, {}, {1.0f / 1.3f, 0.02f, 0.91}};
  expect_same_step(be, s9, L, "decode with 2 draw rows (capture)");
  EXPECT_TRUE(prof.graph_captured);
  ForwardBatch s10;
  add(s10, d, 1, kOutputSample);
  add(s10, e, 1, kOutputArgmax);
  add(s10, b, 1, kOutputSample);
  s10.draws = {{1.0f / 2.0f, 0.1f, 0.05, 0.9, 20, 0, 1, 5}, {}, {1.0f, 0.0f, 0.999, 1.0, 0, 1, 1}};
  expect_same_step(be, s10, L, "decode with 2 draw rows (replay)");
  EXPECT_TRUE(prof.graph_replayed);
  EXPECT_EQ(be.graph->num_cuda_graphs(), 6);
  // The same shape with a logit bias and penalties on the draw rows (ForwardBatch::adjusts):
  // the replay reads them from the step's metadata and the adjust buffer; +30 on token 7 makes
  // the greedy row's draw, and a second replay with other adjusts sees those.
  ForwardBatch s11 = s10;
  s11.draws[2].greedy = 1;
  s11.adjusts = {{3, kAdjustRepetition | kAdjustPenalty, 0.0, 1.4, 1.0, 0.5},
                 {11, kAdjustBias, -2.0},
                 {7, kAdjustBias, 30.0},
                 {90, kAdjustBias | kAdjustRepetition, 1.5, 0.7}};
  s11.adjust_indptr = {0, 2, 2, 4};
  expect_same_step(be, s11, L, "decode with adjusted draw rows (replay)");
  EXPECT_TRUE(prof.graph_replayed);
  ForwardOutput forced;
  ASSERT_TRUE(be.graph->forward(s11, forced).ok());
  EXPECT_EQ(forced.sampled[1], 7);
  s11.adjusts = {{5, kAdjustBias, 30.0}};
  s11.adjust_indptr = {0, 0, 0, 1};
  s11.draws[0].top_logprobs = 0;  // the alternatives of the adjusted greedy row now
  s11.draws[2].top_logprobs = 20;
  expect_same_step(be, s11, L, "decode with other adjusts (replay)");
  ASSERT_TRUE(be.graph->forward(s11, forced).ok());
  EXPECT_EQ(forced.sampled[1], 5);
  EXPECT_EQ(be.graph->num_cuda_graphs(), 6);
  EXPECT_EQ(be.eager->num_cuda_graphs(), 0);
}

// Float8 layers: every GEMM's input is quantized into one scratch and each layer's matrix
// brings its own scales, so a replay must quantize and scale as the eager step does.
// Float8 KV pool: the replayed epilogue writes e4m3 bytes and the attention reads them.
void expect_fp8_replays_equal_eager(WeightQuantization quantization, KvCacheDtype kv_cache_dtype) {
  const ModelConfig c = llama_bf16();
  ModelWeights w = tu::make_weights(c);
  // A float8 KV pool with per-layer scales other than 1 (a checkpoint's), which the captured
  // launches carry.
  for (size_t l = 0; kv_cache_dtype == KvCacheDtype::kFp8E4m3 && l < w.layers.size(); ++l) {
    w.layers[l].k_scale = 0.37f + 0.5f * static_cast<float>(l);
    w.layers[l].v_scale = 1.9f / (1.0f + static_cast<float>(l));
  }
  Backends be = make_backends(w, 16, quantization, kv_cache_dtype);
  ASSERT_TRUE(be.eager && be.graph);
  Rng rng(29);
  auto tokens = [&](int n) { return tu::random_tokens(n, c.vocab_size, rng); };
  tu::Seq a{tokens(40), {0, 1, 2}}, b{tokens(40), {4, 5, 6}}, d{tokens(40), {8, 9, 10}};
  const int L = static_cast<int>(c.num_layers);
  const CudaStepProfile& prof = be.graph->last_step_profile();
  ForwardBatch s0;  // 60 rows: eager on both
  add(s0, a, 30, true);
  add(s0, b, 20, true);
  add(s0, d, 10, true);
  expect_same_step(be, s0, L, "fp8 prefill (eager)");
  for (int step = 0; step < 3; ++step) {  // (2 rows, 2 requests): captured, then replayed
    ForwardBatch sd;
    add(sd, step % 2 == 0 ? a : d, 1, true);
    add(sd, b, 1, true);
    expect_same_step(be, sd, L, step == 0 ? "fp8 decode (capture)" : "fp8 decode (replay)");
    EXPECT_EQ(prof.graph_captured, step == 0);
    EXPECT_EQ(prof.graph_replayed, step > 0);
  }
}
TEST(CudaForwardGraph, Fp8ReplayedDecodeStepsEqualEager) {
  SKIP_WITHOUT_DEVICE();
  expect_fp8_replays_equal_eager(WeightQuantization::kFp8, KvCacheDtype::kAuto);
}
TEST(CudaForwardGraph, Fp8KvCacheReplayedDecodeStepsEqualEager) {
  SKIP_WITHOUT_DEVICE();
  expect_fp8_replays_equal_eager(WeightQuantization::kNone, KvCacheDtype::kFp8E4m3);
}

// Draw rows the device leaves to the host (ops.h sample_rows: a row whose maximum logit is
// infinite) are drawn on the host from their logits, in a graph step and an eager one, beside
// rows the device draws (near-flat logits over a 20,000-token vocabulary at top-p 0.99: the
// radix descent; top-k 5; temperature), with the same tokens and logprobs as sample_draw of
// eager's logits. The LM head's row kInfToken is +inf in column 0 and 0 elsewhere, so that
// token's logit is +inf or -inf by the sign of the normed hidden state's first element.
TEST(CudaForwardGraph, DrawRowsLeftToTheHostEqualTheHostDraw) {
  SKIP_WITHOUT_DEVICE();
  ModelConfig c = llama_bf16();
  c.vocab_size = 20000;
  c.tie_word_embeddings = false;
  ModelWeights w = tu::make_weights(c);
  constexpr int64_t kInfToken = 123;
  auto head = std::make_shared<std::vector<uint16_t>>(
      static_cast<const uint16_t*>(w.lm_head.data),
      static_cast<const uint16_t*>(w.lm_head.data) + w.lm_head.num_elements());
  const int64_t H = c.hidden_size;
  std::fill_n(head->begin() + kInfToken * H, H, uint16_t{0});
  (*head)[static_cast<size_t>(kInfToken * H)] = 0x7f80;  // bf16 +inf
  w.lm_head.data = head->data();
  w.lm_head.owner = head;
  Backends be = make_backends(w, 32);
  ASSERT_TRUE(be.eager && be.graph);
  Rng rng(37);
  auto tokens = [&](int n) { return tu::random_tokens(n, c.vocab_size, rng); };
  std::vector<tu::Seq> seqs;
  for (int i = 0; i < 6; ++i) seqs.push_back(tu::Seq{tokens(2 + i), {i}});  // 27 rows: a graph
  const int L = static_cast<int>(c.num_layers);
  ForwardBatch s;
  for (tu::Seq& q : seqs) add(s, q, static_cast<int>(q.tokens.size()), kOutputSample);
  s.draws = {{1.0f, 0.0f, 0.42, 0.99, 0, 0, 1},         {1.0f, 0.0f, 0.77, 1.0, 5, 0, 1},
             {1.0f / 0.9f, 0.0f, 0.13, 0.995, 0, 0, 0}, {1.0f, 0.0f, 0.5, 1.0, 0, 0, 1},
             {1.0f, 0.0f, 0.93, 0.99, 0, 0, 1},         {1.0f / 0.7f, 0.0f, 0.61, 0.9, 40, 0, 1}};
  expect_same_step(be, s, L, "draw rows, some left to the host");
  for (SampleDraw& d : s.draws) d.top_logprobs = d.logprob ? 7 : 0;
  expect_same_step(be, s, L, "draw rows with top_logprobs, some left to the host");
  // With a logit bias and penalties on every other row (kInfToken among them): the rows left to
  // the host are drawn there from their raw logits with the adjustments.
  s.adjusts.clear();
  s.adjust_indptr = {0};
  for (size_t r = 0; r < seqs.size(); ++r) {
    if (r % 2 == 0) {
      s.adjusts.push_back({7, kAdjustBias, 4.0});
      s.adjusts.push_back({static_cast<int32_t>(kInfToken), kAdjustRepetition | kAdjustPenalty, 0.0,
                           1.3, 0.4, 0.2});
      s.adjusts.push_back({19999, kAdjustBias | kAdjustPenalty, -1.0, 1.0, 0.0, 0.5});
    }
    s.adjust_indptr.push_back(static_cast<int32_t>(s.adjusts.size()));
  }
  expect_same_step(be, s, L, "adjusted draw rows, some left to the host");
  // Which rows have an infinite maximum: eager's logits of the same step (the positions are
  // written again with the same K/V).
  ForwardBatch all_logits = s;
  for (uint8_t& x : all_logits.samples) x = kOutputLogits;
  all_logits.adjust_indptr.clear();
  all_logits.adjusts.clear();
  ForwardOutput logits;
  ASSERT_TRUE(be.eager->forward(all_logits, logits).ok());
  int infinite = 0;
  const size_t V = static_cast<size_t>(c.vocab_size);
  for (size_t r = 0; r < seqs.size(); ++r) {
    const std::span<const float> row = std::span<const float>(logits.logits).subspan(r * V, V);
    infinite += max_ignoring_nan(row) == INFINITY ? 1 : 0;
  }
  ASSERT_GE(infinite, 1);  // the test's premise: both kinds of row in one step
  ASSERT_LT(infinite, static_cast<int>(seqs.size()));
  EXPECT_EQ(be.graph->last_step_profile().host_sampled_rows, infinite);
  ForwardOutput eager;
  ASSERT_TRUE(be.eager->forward(s, eager).ok());
  EXPECT_EQ(be.eager->last_step_profile().host_sampled_rows, infinite);
}

// Token masks (ForwardBatch::masks, structured outputs) on argmax and draw rows: their ids,
// logprobs and alternatives are those of eager's logits masked on the host, in a captured step
// and in replays that read other masks, masking other rows, from the mask buffer; a logit bias
// of +40 on a token the mask clears does not bring it back; a row whose mask allows nothing
// gives argmax 0 and a draw left to the host. Unmasked steps of the same shape are another
// graph, and masked steps of the eager backend agree too.
TEST(CudaForwardGraph, MaskedRowsReplayNewMasks) {
  SKIP_WITHOUT_DEVICE();
  const ModelConfig c = llama_bf16();
  const ModelWeights w = tu::make_weights(c);
  Backends be = make_backends(w, 16);
  ASSERT_TRUE(be.eager && be.graph);
  Rng rng(41);
  auto tokens = [&](int n) { return tu::random_tokens(n, c.vocab_size, rng); };
  std::vector<tu::Seq> q;
  for (int i = 0; i < 4; ++i) q.push_back(tu::Seq{tokens(40), {3 * i, 3 * i + 1, 3 * i + 2}});
  const int L = static_cast<int>(c.num_layers);
  const int64_t V = c.vocab_size;
  const auto words = static_cast<size_t>(mask_words(V));
  const auto random_masks = [&](std::initializer_list<double> allowed) {
    std::vector<uint32_t> m;
    for (double p : allowed) {
      const size_t first = m.size();
      m.resize(first + words, 0);
      for (int64_t t = 0; t < V; ++t) {
        if (rng.uniform() < p) m[first + static_cast<size_t>(t / 32)] |= 1u << (t % 32);
      }
    }
    return m;
  };
  const CudaStepProfile& prof = be.graph->last_step_profile();
  ForwardBatch prefill;  // 116 rows: eager on both
  for (tu::Seq& s : q) add(prefill, s, 29, kNoOutput);
  expect_same_step(be, prefill, L, "prefill");

  const auto decode = [&](std::vector<int> order) {
    ForwardBatch s;
    const uint8_t kinds[4] = {kOutputArgmax, kOutputSample, kOutputLogits, kOutputSample};
    for (int i = 0; i < 4; ++i) {
      add(s, q[static_cast<size_t>(order[static_cast<size_t>(i)])], 1, kinds[i]);
    }
    s.draws = {
        {}, {1.0f / 0.8f, 0.0f, 0.37, 1.0, 0, 0, 1, 5}, {}, {1.0f, 0.0f, 0.71, 0.9, 0, 0, 1, 3}};
    return s;
  };
  ForwardBatch s0 = decode({0, 1, 2, 3});
  s0.mask_index = {0, 1, -1, 2};
  s0.masks = random_masks({0.1, 0.5, 0.02});
  expect_same_step(be, s0, L, "masked rows (eager, then captured)");
  EXPECT_TRUE(prof.graph_captured);

  // The draw row 1 unmasked now, other masks, written late (ForwardBatch::fill_masks: while
  // the device runs the step; the masks vector holds only their size).
  ForwardBatch s1 = decode({3, 0, 1, 2});
  s1.mask_index = {1, -1, -1, 0};
  const std::vector<uint32_t> late = random_masks({0.3, 0.05});
  s1.masks.assign(late.size(), 0);
  int fills = 0;
  s1.fill_masks = [&](std::span<uint32_t> dest) {
    ASSERT_EQ(dest.size(), late.size());
    std::copy(late.begin(), late.end(), dest.begin());
    ++fills;
  };
  int32_t cleared = 0;  // a token mask 0 (row 3's) clears
  while ((late[static_cast<size_t>(cleared / 32)] >> (cleared % 32)) & 1u) ++cleared;
  s1.adjusts = {{cleared, kAdjustBias, 40.0}, {cleared + 1, kAdjustBias, 1.0}};
  s1.adjust_indptr = {0, 0, 0, 0, 2};
  expect_same_step(be, s1, L, "other masks, a bias on a masked token (replay)");
  EXPECT_TRUE(prof.graph_replayed);
  ForwardOutput out;
  ASSERT_TRUE(be.graph->forward(s1, out).ok());
  EXPECT_NE(out.sampled[1], cleared);
  EXPECT_EQ(fills, 3);  // expect_same_step's own, the graph backend's, this forward's

  ForwardBatch s2 = decode({1, 2, 3, 0});  // every masked row's mask allows nothing
  s2.mask_index = {0, 0, -1, 0};
  s2.masks.assign(words, 0);
  expect_same_step(be, s2, L, "masks that allow nothing (replay)");
  EXPECT_TRUE(prof.graph_replayed);
  ASSERT_TRUE(be.graph->forward(s2, out).ok());
  EXPECT_EQ(out.argmax, std::vector<int32_t>{0});
  EXPECT_EQ(prof.host_sampled_rows, 2);
  EXPECT_EQ(be.graph->num_cuda_graphs(), 1);

  expect_same_step(be, decode({2, 3, 0, 1}), L, "the same shape unmasked (capture)");
  EXPECT_TRUE(prof.graph_captured);
  EXPECT_EQ(be.graph->num_cuda_graphs(), 2);

  // The eager backend masks too: its masked step against its own logits.
  ForwardBatch s3 = decode({0, 1, 2, 3});
  s3.mask_index = {0, 1, -1, 0};
  s3.masks = random_masks({0.2, 0.2});
  ForwardOutput masked, raw;
  ASSERT_TRUE(be.eager->forward(s3, masked).ok());
  ForwardBatch s3_raw = s3;
  for (uint8_t& x : s3_raw.samples) x = x == kNoOutput ? kNoOutput : kOutputLogits;
  s3_raw.mask_index.clear();
  s3_raw.masks.clear();
  ASSERT_TRUE(be.eager->forward(s3_raw, raw).ok());
  std::vector<float> row0(raw.logits.begin(), raw.logits.begin() + V);
  mask_logits(row0, std::span<const uint32_t>(s3.masks).subspan(0, words));
  EXPECT_EQ(masked.argmax, std::vector<int32_t>{argmax_lowest(row0)});
}

TEST(CudaForwardGraph, LeastRecentlyUsedGraphIsDropped) {
  SKIP_WITHOUT_DEVICE();
  const ModelConfig c = llama_bf16();
  const ModelWeights w = tu::make_weights(c);
  Backends be = make_backends(w, 16);
  ASSERT_TRUE(be.eager && be.graph);
  CudaStepOptions step;
  step.max_graph_rows = 16;
  step.max_cuda_graphs = 2;
  ASSERT_TRUE(be.graph->set_step_options(step).ok());
  Rng rng(29);
  std::vector<tu::Seq> seqs;
  for (int i = 0; i < 4; ++i) {
    seqs.push_back(tu::Seq{tu::random_tokens(40, c.vocab_size, rng),
                           {4 * i, 4 * i + 1, 4 * i + 2, 4 * i + 3}});
  }
  // Batches of 1, 2, 3, then 1 again: the third capture drops shape 1 (least recently used),
  // so the fourth step captures again; results stay equal to eager throughout. Then 3 again
  // replays. stats() counts them (expect_same_step runs each batch once on each backend).
  const CudaStepProfile& prof = be.graph->last_step_profile();
  const BackendStats before = be.graph->stats();
  const std::pair<int, bool> steps[] = {{1, true}, {2, true}, {3, true}, {1, true}, {3, false}};
  for (const auto& [num, captures] : steps) {
    ForwardBatch s;
    for (int i = 0; i < num; ++i) add(s, seqs[static_cast<size_t>(i)], 1, true);
    expect_same_step(be, s, static_cast<int>(c.num_layers), "lru step");
    EXPECT_EQ(prof.graph_captured, captures) << num << " rows";
    EXPECT_EQ(prof.graph_replayed, !captures) << num << " rows";
    EXPECT_LE(be.graph->num_cuda_graphs(), 2);
  }
  const BackendStats after = be.graph->stats();
  EXPECT_EQ(after.graph_captures - before.graph_captures, 4);
  EXPECT_EQ(after.graph_replays - before.graph_replays, 1);
  EXPECT_EQ(after.graph_evictions - before.graph_evictions, 2);
  EXPECT_GT(after.capture_seconds, before.capture_seconds);
  const BackendStats eager = be.eager->stats();
  EXPECT_EQ(eager.graph_captures + eager.graph_replays + eager.graph_evictions, 0);
}

// graph_capture_after 3: a shape's first two steps run eagerly (neither captured nor
// replayed), the third captures, the fourth replays; results equal eager throughout.
TEST(CudaForwardGraph, ShapesAreCapturedAtTheirNthStep) {
  SKIP_WITHOUT_DEVICE();
  const ModelConfig c = llama_bf16();
  const ModelWeights w = tu::make_weights(c);
  Backends be = make_backends(w, 16);
  ASSERT_TRUE(be.eager && be.graph);
  CudaStepOptions step;
  step.max_graph_rows = 16;
  step.graph_capture_after = 3;
  ASSERT_TRUE(be.graph->set_step_options(step).ok());
  Rng rng(37);
  std::vector<tu::Seq> seqs;
  for (int i = 0; i < 2; ++i) {
    seqs.push_back(tu::Seq{tu::random_tokens(40, c.vocab_size, rng),
                           {4 * i, 4 * i + 1, 4 * i + 2, 4 * i + 3}});
  }
  const CudaStepProfile& prof = be.graph->last_step_profile();
  const BackendStats before = be.graph->stats();
  for (int k = 0; k < 4; ++k) {
    ForwardBatch s;
    for (tu::Seq& q : seqs) add(s, q, 1, true);
    expect_same_step(be, s, static_cast<int>(c.num_layers), "capture-after step");
    EXPECT_EQ(prof.graph_captured, k == 2) << k;
    EXPECT_EQ(prof.graph_replayed, k == 3) << k;
  }
  const BackendStats after = be.graph->stats();
  EXPECT_EQ(after.graph_captures - before.graph_captures, 1);
  EXPECT_EQ(after.graph_replays - before.graph_replays, 1);
  step.graph_capture_after = 0;
  const Status s = be.graph->set_step_options(step);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("step.graph_capture_after = 0"), std::string::npos) << s.to_string();
}

// The logits buffer a step reserves: an eager step its sampling rows; a graphed step at once
// min(max_graph_rows, max_batch_rows, max_sampling_rows) rows, at least kMinLogitsRows (what
// gpu_non_kv_bytes counts), so that later steps keep their graphs. More sampling rows than
// max_sampling_rows grow the buffer (a hint, not a limit).
TEST(CudaForwardGraph, LogitsReserveFollowsTheSamplingRows) {
  SKIP_WITHOUT_DEVICE();
  const ModelConfig c = llama_bf16();
  const ModelWeights w = tu::make_weights(c);
  const size_t row_bytes = static_cast<size_t>(c.vocab_size) * 4;
  struct Case {
    int max_graph_rows, max_sampling_rows;
    size_t rows;  // the reserve after a 2-row step
  };
  for (const Case& k :
       {Case{0, 0, 2}, Case{100, 0, 100}, Case{100, 80, 80}, Case{100, 3, 64}, Case{16, 0, 64}}) {
    SCOPED_TRACE(std::to_string(k.max_graph_rows) + " graph rows, " +
                 std::to_string(k.max_sampling_rows) + " sampling rows");
    CudaForwardOptions options;
    options.max_batch_rows = 128;
    options.max_sampling_rows = k.max_sampling_rows;
    options.step.max_graph_rows = k.max_graph_rows;
    const KvPoolShape pool{80, 16};
    auto be = CudaForwardBackend::create(w, pool, options);
    ASSERT_TRUE(be.ok()) << be.status().to_string();
    // Steps of one-token prompts, each on a page of its own, each sampling its row.
    Rng rng(31);
    const auto step = [&](int requests) {
      ForwardBatch b;
      for (int i = 0; i < requests; ++i) {
        tu::add(b, tu::Seq{tu::random_tokens(1, c.vocab_size, rng), {i}}, 1, kOutputArgmax,
                pool.page_size);
      }
      ForwardOutput out;
      const Status st = be.value()->forward(b, out);
      EXPECT_TRUE(st.ok()) << st.to_string();
      EXPECT_EQ(out.argmax.size(), static_cast<size_t>(requests));
    };
    step(2);
    EXPECT_EQ(be.value()->logits_bytes(), k.rows * row_bytes);
    EXPECT_EQ(be.value()->last_step_profile().graph_captured, k.max_graph_rows > 0);
    step(70);  // more rows than any case reserved but one
    EXPECT_EQ(be.value()->logits_bytes(), std::max<size_t>(k.rows, 70) * row_bytes);
  }
  CudaForwardOptions bad;
  bad.max_sampling_rows = -1;
  auto r = CudaForwardBackend::create(w, kPool, bad);
  ASSERT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("max_sampling_rows = -1"), std::string::npos)
      << r.status().to_string();
}

TEST(CudaForwardGraph, StepOptionsAreValidated) {
  SKIP_WITHOUT_DEVICE();
  const ModelWeights w = tu::make_weights(llama_bf16());
  CudaForwardOptions options;
  options.max_batch_rows = 64;
  options.step.max_graph_rows = -1;
  auto bad = CudaForwardBackend::create(w, kPool, options);
  ASSERT_EQ(bad.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(bad.status().message().find("step.max_graph_rows = -1"), std::string::npos)
      << bad.status().to_string();
  options.step = CudaStepOptions{};
  auto good = CudaForwardBackend::create(w, kPool, options);
  ASSERT_TRUE(good.ok()) << good.status().to_string();
  CudaStepOptions step;
  step.max_cuda_graphs = 0;
  const Status s = good.value()->set_step_options(step);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("step.max_cuda_graphs = 0"), std::string::npos) << s.to_string();
}

}  // namespace
}  // namespace packserve::model
