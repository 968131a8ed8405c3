// forward_batch_test.cc: one test per validation rule of forward_batch.h, run through
// CpuForwardBackend::forward: the error is kInvalidArgument, the message names the field, and
// nothing was written (the KV pool of every layer and the logits are unchanged, the batch's
// valid page_copies did not run). Plus CpuForwardBackend::create's checks.
#include "packserve/model/forward_batch.h"

#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <string>
#include <vector>

#include "packserve/model/forward_cpu.h"
#include "packserve/model/forward_test_util.h"

namespace packserve::model {
namespace {

using namespace testing_util;  // NOLINT(google-build-using-namespace)

constexpr KvPoolShape kPool{12, 16};

struct Rule {
  const char* name;
  std::function<void(ForwardBatch&)> mutate;
  const char* expected;  // substring of the message
};

std::vector<float> snapshot(const CpuForwardBackend& b) {
  std::vector<float> all;
  for (int l = 0; l < b.config().num_layers; ++l) {
    all.insert(all.end(), b.k_pages(l).begin(), b.k_pages(l).end());
    all.insert(all.end(), b.v_pages(l).begin(), b.v_pages(l).end());
  }
  return all;
}

// Makes request r of x a kOutputSample row with valid draws for every request; its draw.
SampleDraw& draw_row(ForwardBatch& x, size_t r) {
  x.samples[r] = kOutputSample;
  x.draws.assign(x.samples.size(), SampleDraw{});
  return x.draws[r];
}

// Makes x score request 1's 3 rows against valid targets (alternatives 2); score_targets.
std::vector<int32_t>& score_rows(ForwardBatch& x) {
  x.score_indptr = {0, 0, 3};
  x.score_targets = {4, 5, 6};
  x.score_top = {0, 2};
  return x.score_targets;
}

// Makes request 1 of x a kOutputSample row with two valid adjusts (tokens 3 and 8); them.
std::vector<LogitAdjust>& adjust_row(ForwardBatch& x) {
  draw_row(x, 1);
  x.adjusts = {{3, kAdjustBias, 1.5}, {8, kAdjustRepetition | kAdjustPenalty, 0.0, 1.2, 0.5, 0.1}};
  x.adjust_indptr = {0, 0, 2};
  return x.adjusts;
}

// Makes request 1 of x an argmax row with one valid mask (every token allowed, vocab 300:
// 10 words); the masks.
std::vector<uint32_t>& mask_row(ForwardBatch& x) {
  x.samples[1] = kOutputArgmax;
  x.mask_index = {-1, 0};
  x.masks.assign(10, ~0u);
  return x.masks;
}

TEST(ForwardBatchValidation, EveryRuleRejectsAndWritesNothing) {
  const ModelConfig config = llama_config();
  const ModelWeights w = make_weights(config);
  auto created = CpuForwardBackend::create(w, kPool, {});
  ASSERT_TRUE(created.ok()) << created.status().to_string();
  CpuForwardBackend& backend = **created;
  Rng rng(3);
  Seq a{random_tokens(21, config.vocab_size, rng), {0, 1}, 0};
  Seq b{random_tokens(8, config.vocab_size, rng), {2}, 0};
  ForwardBatch first;
  add(first, a, 20, true, kPool.page_size);
  add(first, b, 5, true, kPool.page_size);
  ForwardOutput out;
  ASSERT_TRUE(backend.forward(first, out).ok());
  a.computed = 20;
  b.computed = 5;
  // The valid batch every rule breaks: A decodes, B prefills 3, page 0 is copied to page 9.
  ForwardBatch valid;
  add(valid, a, 1, true, kPool.page_size);
  add(valid, b, 3, true, kPool.page_size);
  valid.page_copies.push_back(kv::PageCopy{0, 9, 16});

  const int64_t v = config.vocab_size;
  const std::vector<Rule> rules = {
      {"qo_indptr length", [](ForwardBatch& x) { x.qo_indptr.pop_back(); }, "qo_indptr: length"},
      {"qo_indptr[0]", [](ForwardBatch& x) { x.qo_indptr[0] = 1; }, "qo_indptr[0] = 1"},
      {"qo_indptr order", [](ForwardBatch& x) { x.qo_indptr[1] = 5; }, "qo_indptr[2] = 4 <"},
      {"qo_indptr end", [](ForwardBatch& x) { x.token_ids.push_back(1); },
       "expected token_ids.size() = 5"},
      {"q_len 0", [](ForwardBatch& x) { x.qo_indptr[1] = 0; }, "request 0 has q_len = 0"},
      {"page_indptr length", [](ForwardBatch& x) { x.page_indptr.push_back(3); },
       "page_indptr: length"},
      {"page_indptr end", [](ForwardBatch& x) { x.page_ids.push_back(3); },
       "page_indptr[2] = 3: expected page_ids.size() = 4"},
      {"samples", [](ForwardBatch& x) { x.samples.pop_back(); }, "samples: length 1"},
      {"samples value", [](ForwardBatch& x) { x.samples[1] = 4; },
       "samples[1] = 4: expected 0 (no output), 1 (logits), 2 (argmax) or 3 (sample)"},
      {"draws missing", [](ForwardBatch& x) { x.samples[1] = kOutputSample; },
       "draws: length 0, expected num_requests = 2"},
      {"draws temperature", [](ForwardBatch& x) { draw_row(x, 1).inv_temperature = 0.0f; },
       "draws[1].inv_temperature = 0.000000: expected finite and > 0"},
      {"draws min_p", [](ForwardBatch& x) { draw_row(x, 1).min_p = NAN; },
       "draws[1].min_p = nan: expected in [0, 1]"},
      {"draws u", [](ForwardBatch& x) { draw_row(x, 0).u = 1.0; },
       "draws[0].u = 1.000000: expected in [0, 1)"},
      {"draws top_k", [](ForwardBatch& x) { draw_row(x, 1).top_k = -2; },
       "draws[1].top_k = -2: expected >= 0 (0 = off)"},
      {"draws top_p", [](ForwardBatch& x) { draw_row(x, 1).top_p = 0.0; },
       "draws[1].top_p = 0.000000: expected in (0, 1]"},
      {"draws flags", [](ForwardBatch& x) { draw_row(x, 0).greedy = 2; },
       "draws[0]: greedy = 2, logprob = 0: expected 0 or 1"},
      {"draws top_logprobs 21",
       [](ForwardBatch& x) {
         SampleDraw& d = draw_row(x, 1);
         d.logprob = 1;
         d.top_logprobs = 21;
       },
       "draws[1].top_logprobs = 21: expected in [0, 20], and 0 unless logprob = 1"},
      {"draws top_logprobs without logprob",
       [](ForwardBatch& x) {
         SampleDraw& d = draw_row(x, 0);
         d.greedy = 1;
         d.top_logprobs = 2;
       },
       "draws[0].top_logprobs = 2: expected in [0, 20]"},
      {"score targets without indptr", [](ForwardBatch& x) { x.score_targets.resize(1); },
       "score_targets / score_top: lengths 1 / 0 with an empty score_indptr, expected 0"},
      {"score_indptr end", [](ForwardBatch& x) { score_rows(x).pop_back(); },
       "score_indptr[2] = 3: expected score_targets.size() = 2"},
      {"score_top length",
       [](ForwardBatch& x) {
         score_rows(x);
         x.score_top.pop_back();
       },
       "score_top: length 1, expected num_requests = 2"},
      {"score rows beyond q_len",
       [](ForwardBatch& x) {
         score_rows(x).push_back(7);
         x.score_indptr = {0, 2, 4};
       },
       "score_indptr: request 0 scores 2 rows, expected at most its q_len = 1"},
      {"score_top 21",
       [](ForwardBatch& x) {
         score_rows(x);
         x.score_top[1] = 21;
       },
       "score_top[1] = 21: expected in [0, 20]"},
      {"score target high", [v](ForwardBatch& x) { score_rows(x)[2] = static_cast<int32_t>(v); },
       "score_targets[2] = 300: expected in [0, vocab_size = 300)"},
      {"score target negative", [](ForwardBatch& x) { score_rows(x)[0] = -1; },
       "score_targets[0] = -1: expected in [0, vocab_size = 300)"},
      {"adjusts without indptr", [](ForwardBatch& x) { x.adjusts.resize(1); },
       "adjusts: length 1 with an empty adjust_indptr, expected 0"},
      {"adjust_indptr length", [](ForwardBatch& x) { adjust_row(x).clear(); },
       "adjust_indptr[2] = 2: expected adjusts.size() = 0"},
      {"adjusts of an argmax row",
       [](ForwardBatch& x) {
         adjust_row(x);
         x.adjust_indptr = {0, 1, 2};
       },
       "adjust_indptr: request 0 has 1 adjusts with samples[0] = 1, expected 0"},
      {"adjust token high",
       [v](ForwardBatch& x) { adjust_row(x)[1].token = static_cast<int32_t>(v); },
       "adjusts[1].token = 300: expected in [0, vocab_size = 300)"},
      {"adjust tokens repeated", [](ForwardBatch& x) { adjust_row(x)[1].token = 3; },
       "adjusts[1].token = 3: expected above the previous token of request 1"},
      {"adjust stages", [](ForwardBatch& x) { adjust_row(x)[0].stages = 17; },
       "adjusts[0].stages = 17: expected bits of 15"},
      {"adjust repetition", [](ForwardBatch& x) { adjust_row(x)[1].repetition = 0.0; },
       "adjusts[1]: bias, frequency and presence must be finite and repetition finite and > 0"},
      {"adjust bias", [](ForwardBatch& x) { adjust_row(x)[0].bias = INFINITY; },
       "adjusts[0]: bias"},
      {"masks without mask_index", [](ForwardBatch& x) { x.masks.resize(10); },
       "masks: length 10 with an empty mask_index, expected 0"},
      {"mask_index length", [](ForwardBatch& x) { mask_row(x), x.mask_index = {0}; },
       "mask_index: length 1, expected num_requests = 2 or 0"},
      {"masks length", [](ForwardBatch& x) { mask_row(x).resize(15); },
       "masks: length 15, expected a multiple of mask_words = 10 (ceil(vocab_size / 32))"},
      {"mask index high", [](ForwardBatch& x) { mask_row(x), x.mask_index[1] = 1; },
       "mask_index[1] = 1: expected -1 or a mask in [0, 1)"},
      {"mask index negative", [](ForwardBatch& x) { mask_row(x), x.mask_index[1] = -2; },
       "mask_index[1] = -2: expected -1 or a mask in [0, 1)"},
      {"mask of a logits row",
       [](ForwardBatch& x) {
         mask_row(x), x.mask_index = {0, 0};
       },
       "mask_index[0] = 0 with samples[0] = 1, expected -1 (masks apply to argmax or sample rows"},
      {"extra_rows length", [](ForwardBatch& x) { x.extra_rows = {0}; },
       "extra_rows: length 1, expected 0 or num_requests = 2"},
      {"extra_rows of a logits row",
       [](ForwardBatch& x) {
         x.extra_rows = {0, 1};
       },
       "extra_rows[1] = 1: expected 0, or in [1, q_len - 1 = 2] for an argmax or sample request "
       "(samples = 2 or 3) without a mask or adjusts"},
      {"extra_rows beyond the rows",
       [](ForwardBatch& x) {
         x.samples[1] = kOutputArgmax;
         x.extra_rows = {0, 3};
       },
       "extra_rows[1] = 3: expected 0, or in [1, q_len - 1 = 2]"},
      {"extra_rows negative",
       [](ForwardBatch& x) {
         x.samples[1] = kOutputArgmax;
         x.extra_rows = {0, -1};
       },
       "extra_rows[1] = -1"},
      {"extra_rows with a mask",
       [](ForwardBatch& x) {
         mask_row(x), x.extra_rows = {0, 2};
       },
       "extra_rows[1] = 2: expected 0, or in [1, q_len - 1 = 2] for an argmax or sample request "
       "(samples = 2 or 3) without a mask or adjusts"},
      {"extra_rows with adjusts",
       [](ForwardBatch& x) {
         adjust_row(x);
         x.extra_rows = {0, 1};
         x.extra_draws.resize(1);
       },
       "extra_rows[1] = 1: expected 0, or in [1, q_len - 1 = 2]"},
      {"extra_draws missing",
       [](ForwardBatch& x) {
         draw_row(x, 1);
         x.extra_rows = {0, 2};
         x.extra_draws.resize(1);
       },
       "extra_draws: length 1, expected 2 (the extra_rows of sample requests)"},
      {"extra_draws of argmax rows",
       [](ForwardBatch& x) {
         x.samples[1] = kOutputArgmax;
         x.extra_rows = {0, 2};
         x.extra_draws.resize(2);
       },
       "extra_draws: length 2, expected 0"},
      {"extra_draws u",
       [](ForwardBatch& x) {
         draw_row(x, 1);
         x.extra_rows = {0, 2};
         x.extra_draws.resize(2);
         x.extra_draws[1].u = -0.5;
       },
       "extra_draws[1].u = -0.500000: expected in [0, 1)"},
      {"kv_len < q_len", [](ForwardBatch& x) { x.kv_len[1] = 2; }, "kv_len[1] = 2"},
      {"too few pages", [](ForwardBatch& x) { x.kv_len[1] = 17; },
       "request 1 has 1 pages, expected ceil(kv_len[1] = 17"},
      {"page id high", [](ForwardBatch& x) { x.page_ids[2] = 12; }, "page_ids[2] = 12"},
      {"page id negative", [](ForwardBatch& x) { x.page_ids[1] = -1; }, "page_ids[1] = -1"},
      {"token id high", [v](ForwardBatch& x) { x.token_ids[3] = static_cast<int32_t>(v); },
       "token_ids[3] = 300: expected in [0, vocab_size = 300)"},
      {"token id negative", [](ForwardBatch& x) { x.token_ids[0] = -5; }, "token_ids[0] = -5"},
      {"copy src", [](ForwardBatch& x) { x.page_copies[0].src_page = 12; },
       "page_copies[0].src_page = 12"},
      {"copy dst", [](ForwardBatch& x) { x.page_copies[0].dst_page = -1; },
       "page_copies[0].dst_page = -1"},
      {"copy same page", [](ForwardBatch& x) { x.page_copies[0].dst_page = 0; },
       "page_copies[0]: src_page = dst_page = 0"},
      {"copy tokens", [](ForwardBatch& x) { x.page_copies[0].num_tokens = 17; },
       "page_copies[0].num_tokens = 17"},
      // B's page table points at A's last page, where both rows write slot 4 (position 20).
      {"slot written twice",
       [](ForwardBatch& x) {
         x.page_ids[2] = 1;
         x.kv_len[1] = 5;
         x.qo_indptr[2] = 2;
         x.token_ids.resize(2);
       },
       "both write KV page 1 slot 4"},
  };
  const std::vector<float> before = snapshot(backend);
  const std::vector<float> sentinel(7, 42.0f);
  for (const Rule& rule : rules) {
    SCOPED_TRACE(rule.name);
    ForwardBatch bad = valid;
    rule.mutate(bad);
    out.logits = sentinel;
    out.argmax = {7};
    const Status s = backend.forward(bad, out);
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s.to_string();
    EXPECT_NE(s.message().find(rule.expected), std::string::npos) << s.message();
    EXPECT_EQ(out.logits, sentinel);
    EXPECT_EQ(out.argmax, std::vector<int32_t>{7});
    EXPECT_TRUE(snapshot(backend) == before);
  }
  // The valid batch itself runs, and runs its page copy.
  ASSERT_TRUE(backend.forward(valid, out).ok());
  EXPECT_EQ(out.logits.size(), static_cast<size_t>(2 * v));
  EXPECT_TRUE(out.argmax.empty());
  const size_t page_elems = static_cast<size_t>(kPool.page_size * config.kv_size());
  const std::span<const float> k0 = backend.k_pages(1);
  EXPECT_TRUE(std::equal(k0.begin(), k0.begin() + page_elems, k0.begin() + 9 * page_elems));
}

TEST(ForwardBatchValidation, EmptyBatchRunsOnlyPageCopies) {
  const ModelWeights w = make_weights(qwen2_config());
  auto backend = std::move(CpuForwardBackend::create(w, kPool, {})).value();
  ForwardBatch empty;
  empty.qo_indptr = {0};
  empty.page_indptr = {0};
  ForwardOutput out{std::vector<float>(3, 1.0f), {4}, {5}, {6.0f}, {{{7, -1.0f}}}, {{-2.0f, {}}}};
  ASSERT_TRUE(backend->forward(empty, out).ok());
  EXPECT_TRUE(out.logits.empty());
  EXPECT_TRUE(out.argmax.empty());
  EXPECT_TRUE(out.sampled.empty());
  EXPECT_TRUE(out.sampled_logprobs.empty());
  EXPECT_TRUE(out.top_logprobs.empty());
  EXPECT_TRUE(out.scores.empty());
}

TEST(CpuForwardBackendCreate, RejectsUnsupportedShapesAndBadWeights) {
  ModelConfig c = llama_config();
  c.head_dim = 32;
  ModelWeights w = make_weights(c);
  auto r = CpuForwardBackend::create(w, kPool, {});
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("head_dim = 32"), std::string::npos);

  w = make_weights(llama_config());
  r = CpuForwardBackend::create(w, KvPoolShape{0, 16}, {});
  EXPECT_NE(r.status().message().find("num_pages = 0"), std::string::npos);
  r = CpuForwardBackend::create(w, KvPoolShape{4, 300}, {});
  EXPECT_NE(r.status().message().find("page_size = 300"), std::string::npos);
  r = CpuForwardBackend::create(w, kPool, CpuForwardOptions{0, 8, {}, 0});
  EXPECT_NE(r.status().message().find("num_threads = 0"), std::string::npos);
  r = CpuForwardBackend::create(w, kPool, CpuForwardOptions{1, 8, {}, 65});
  EXPECT_NE(r.status().message().find("sample_threads = 65"), std::string::npos);

  w.layers[1].k_proj.shape = {64, 128};
  r = CpuForwardBackend::create(w, kPool, {});
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("model.layers.1.self_attn.k_proj.weight"), std::string::npos)
      << r.status().message();
}

}  // namespace
}  // namespace packserve::model
