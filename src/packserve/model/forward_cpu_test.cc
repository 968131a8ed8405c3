// forward_cpu_test.cc: CpuForwardBackend on llama-, qwen2- and qwen3-style random models.
// Oracles: (1) the same request run alone, unchunked, in a fresh backend (packing, paging,
// chunking and plan policy must not change the math: relative error < 1e-5, the f32
// bound); (2) reference_forward, float64 without pages (relative error < kRefRelTol below).
// Relative error of a logits vector = max_i |a_i - b_i| / max_i |b_i| (a max-norm, so no
// element averages a wrong one away).
#include "packserve/model/forward_cpu.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <ostream>
#include <vector>

#include "packserve/common/argmax.h"
#include "packserve/common/rng.h"
#include "packserve/model/checkpoint.h"
#include "packserve/model/dummy_model.h"
#include "packserve/model/forward_test_util.h"
#include "packserve/model/reference_forward.h"
#include "packserve/model/test_dir.h"

namespace packserve::model {
namespace {

using namespace testing_util;  // NOLINT(google-build-using-namespace)

// f32 forward vs float64: each layer's GEMMs (sums of <= 256 products) and the attention
// carry ~1e-7 relative rounding, amplified by the depth (2 layers) and the final norm; 1e-5
// leaves margin over the <= 1.3e-6 observed (packed vs alone: <= 1.7e-6) while an error in
// any formula gives O(1e-2) or more.
constexpr double kRefRelTol = 1e-5;
constexpr double kPackedRelTol = 1e-5;  // the bound for packed vs alone

double rel_err(std::span<const float> a, std::span<const double> b) {
  PS_CHECK(a.size() == b.size()) << a.size() << " vs " << b.size();
  double num = 0.0, den = 0.0;
  for (size_t i = 0; i < a.size(); ++i) {
    if (!std::isfinite(a[i])) return INFINITY;
    num = std::max(num, std::abs(a[i] - b[i]));
    den = std::max(den, std::abs(b[i]));
  }
  return num / den;
}
double rel_err(std::span<const float> a, std::span<const float> b) {
  return rel_err(a, std::vector<double>(b.begin(), b.end()));
}

constexpr KvPoolShape kPool{64, 16};

std::unique_ptr<CpuForwardBackend> make_backend(const ModelWeights& w,
                                                const CpuForwardOptions& options = {}) {
  auto b = CpuForwardBackend::create(w, kPool, options);
  PS_CHECK(b.ok()) << b.status().to_string();
  return std::move(b).value();
}

// Logits after `tokens` computed as one unchunked prefill in a fresh backend.
std::vector<float> run_alone(const ModelWeights& w, std::span<const int32_t> tokens) {
  auto backend = make_backend(w);
  Seq s{std::vector<int32_t>(tokens.begin(), tokens.end()), {}, 0};
  for (int p = 0; p * kPool.page_size < static_cast<int>(tokens.size()); ++p) s.pages.push_back(p);
  ForwardBatch b;
  add(b, s, static_cast<int>(tokens.size()), true, kPool.page_size);
  ForwardOutput out;
  const Status st = backend->forward(b, out);
  PS_CHECK(st.ok()) << st.to_string();
  return out.logits;
}

std::vector<double> reference_last(const ModelWeights& w, std::span<const int32_t> tokens) {
  Result<std::vector<double>> all = reference_forward(w, tokens);
  PS_CHECK(all.ok()) << all.status().to_string();
  const size_t v = static_cast<size_t>(w.config.vocab_size);
  return std::vector<double>(all->end() - static_cast<std::ptrdiff_t>(v), all->end());
}

struct ArchCase {
  const char* name;
  ModelConfig (*config)();
};
void PrintTo(const ArchCase& c, std::ostream* os) { *os << c.name; }
class ForwardCpuArch : public testing::TestWithParam<ArchCase> {};

// Two steps (the scenario below), checked by expect_packed_equals_alone_and_reference.
// Step 1 prefills A (40 tokens) and D's first chunk and decodes nothing. Step 2 is
// the batch under test: A decodes one row; B shares A's first two pages (32 identical tokens)
// and prefills 14 more; C shares A's first 40 tokens through a copy-on-write of A's partial
// third page and prefills 6; D prefills its second chunk without sampling; E prefills 23 fresh
// tokens. Every sampling row is compared with the request alone and with the reference.
void expect_packed_equals_alone_and_reference(const ModelWeights& w, attention::Policy policy) {
  const ModelConfig& config = w.config;
  const int ps = kPool.page_size;
  {
    SCOPED_TRACE(std::string(attention::policy_name(policy)));
    CpuForwardOptions options;
    options.num_threads = 2;
    options.num_ctas = 3;
    options.plan.policy = policy;
    auto backend = make_backend(w, options);
    Rng rng(11);
    Seq a{random_tokens(41, config.vocab_size, rng), {0, 1, 2}, 0};
    Seq b{random_tokens(46, config.vocab_size, rng), {0, 1, 3}, 32};
    std::copy_n(a.tokens.begin(), 32, b.tokens.begin());
    Seq c{random_tokens(46, config.vocab_size, rng), {0, 1, 4}, 40};
    std::copy_n(a.tokens.begin(), 40, c.tokens.begin());
    Seq d{random_tokens(30, config.vocab_size, rng), {5, 6}, 0};
    Seq e{random_tokens(23, config.vocab_size, rng), {7, 8}, 0};

    ForwardBatch step1;
    add(step1, a, 40, true, ps);
    add(step1, d, 9, false, ps);
    ForwardOutput out;
    const std::vector<float>& logits = out.logits;
    ASSERT_TRUE(backend->forward(step1, out).ok());
    ASSERT_EQ(logits.size(), static_cast<size_t>(config.vocab_size));
    EXPECT_LT(rel_err(logits, reference_last(w, std::span(a.tokens).first(40))), kRefRelTol);
    a.computed = 40;
    d.computed = 9;

    ForwardBatch step2;
    add(step2, a, 1, true, ps);
    add(step2, b, 14, true, ps);
    add(step2, c, 6, true, ps);
    add(step2, d, 21, false, ps);
    add(step2, e, 23, true, ps);
    step2.page_copies.push_back(kv::PageCopy{2, 4, 8});
    ASSERT_TRUE(backend->forward(step2, out).ok());
    const std::vector<const Seq*> sampled = {&a, &b, &c, &e};
    ASSERT_EQ(logits.size(), sampled.size() * static_cast<size_t>(config.vocab_size));
    for (size_t i = 0; i < sampled.size(); ++i) {
      SCOPED_TRACE(testing::Message() << "sampled request " << i);
      const std::span<const float> got =
          std::span<const float>(logits).subspan(i * config.vocab_size, config.vocab_size);
      EXPECT_LT(rel_err(got, run_alone(w, sampled[i]->tokens)), kPackedRelTol);
      EXPECT_LT(rel_err(got, reference_last(w, sampled[i]->tokens)), kRefRelTol);
    }
  }
}

TEST_P(ForwardCpuArch, PackedBatchEqualsAloneAndReference) {
  const ModelWeights w = make_weights(GetParam().config());
  for (attention::Policy policy :
       {attention::Policy::kNaive, attention::Policy::kBalanced, attention::Policy::kPrefix}) {
    expect_packed_equals_alone_and_reference(w, policy);
  }
}

// The same scenario on the bundled tiny dummy checkpoint (make_dummy_model "tiny", bf16,
// default init), written to disk and loaded back through load_checkpoint.
TEST(ForwardCpuDummy, TinyCheckpointPackedEqualsAloneAndReference) {
  TestDir dir("forward_cpu_tiny");
  DummyModelOptions options;
  options.arch = "tiny";
  options.out_dir = dir.path();
  options.seed = 5;
  options.num_threads = 1;
  const Result<std::string> made = make_dummy_model(options);
  ASSERT_TRUE(made.ok()) << made.status().to_string();
  const Result<ModelWeights> w = load_checkpoint(dir.path());
  ASSERT_TRUE(w.ok()) << w.status().to_string();
  expect_packed_equals_alone_and_reference(*w, attention::Policy::kPrefix);
}

// A 50-token prompt in chunks of 17, 16 and 17 over three steps, beside a decoding request,
// equals the unchunked prefill; each chunk's last row equals the reference at its position.
TEST_P(ForwardCpuArch, ChunkedPrefillEqualsUnchunked) {
  const ModelConfig config = GetParam().config();
  const ModelWeights w = make_weights(config, 21);
  auto backend = make_backend(w);
  Rng rng(5);
  Seq p{random_tokens(50, config.vocab_size, rng), {10, 3, 12, 1}, 0};
  Seq other{random_tokens(12, config.vocab_size, rng), {20}, 0};
  ForwardOutput out;
  const std::vector<float>& logits = out.logits;
  for (int chunk : {17, 16, 17}) {
    ForwardBatch b;
    add(b, other, other.computed == 0 ? 9 : 1, true, kPool.page_size);
    add(b, p, chunk, true, kPool.page_size);
    ASSERT_TRUE(backend->forward(b, out).ok());
    other.computed += b.qo_indptr[1];
    p.computed += chunk;
    const std::span<const float> got =
        std::span<const float>(logits).subspan(config.vocab_size, config.vocab_size);
    const std::span<const int32_t> prefix = std::span(p.tokens).first(p.computed);
    EXPECT_LT(rel_err(got, reference_last(w, prefix)), kRefRelTol) << p.computed;
    if (p.computed == 50) {
      EXPECT_LT(rel_err(got, run_alone(w, p.tokens)), kPackedRelTol);
    }
  }
}

// The argmax rows of a batch are argmax_lowest of the logits the same rows give as logits
// rows, and its sample rows sample_draw of them with their draws (token and logprob), drawn
// on three threads, in request order; the logits rows beside them are unchanged (a second
// backend on the same weights).
TEST_P(ForwardCpuArch, ArgmaxAndSampleRowsReduceTheirLogits) {
  const ModelConfig config = GetParam().config();
  const ModelWeights w = make_weights(config, 8);
  Rng rng(9);
  const std::vector<Seq> seqs = {{random_tokens(19, config.vocab_size, rng), {0, 1}, 0},
                                 {random_tokens(7, config.vocab_size, rng), {2}, 0},
                                 {random_tokens(33, config.vocab_size, rng), {3, 4, 5}, 0}};
  // Row 0 at temperature 0.7 with a min-p cut, row 2 at temperature 1.5; then with top-k,
  // top-p and logprobs.
  std::vector<SampleDraw> draws = {{1.0f / 0.7f, 0.05f, 0.61}, {}, {1.0f / 1.5f, 0.0f, 0.23}};
  std::vector<LogitAdjust> adjusts;  // none until the last run
  std::vector<int32_t> adjust_indptr;
  const auto run = [&](const std::vector<uint8_t>& outputs) {
    ForwardBatch b;
    for (size_t i = 0; i < seqs.size(); ++i) {
      add(b, seqs[i], static_cast<int>(seqs[i].tokens.size()), outputs[i], kPool.page_size);
    }
    if (std::count(outputs.begin(), outputs.end(), kOutputSample) > 0) b.draws = draws;
    b.adjusts = adjusts;
    b.adjust_indptr = adjust_indptr;
    ForwardOutput out;
    CpuForwardOptions options;
    options.sample_threads = 3;
    const Status st = make_backend(w, options)->forward(b, out);
    EXPECT_TRUE(st.ok()) << st.to_string();
    return out;
  };
  const ForwardOutput all = run({kOutputLogits, kOutputLogits, kOutputLogits});
  const ForwardOutput mixed = run({kOutputArgmax, kOutputLogits, kOutputArgmax});
  const size_t v = static_cast<size_t>(config.vocab_size);
  ASSERT_EQ(all.logits.size(), 3 * v);
  const auto row = [&](size_t i) { return std::span<const float>(all.logits).subspan(i * v, v); };
  EXPECT_LT(rel_err(mixed.logits, row(1)), 1e-6);
  EXPECT_EQ(mixed.argmax, (std::vector<int32_t>{argmax_lowest(row(0)), argmax_lowest(row(2))}));
  EXPECT_TRUE(all.argmax.empty());
  EXPECT_TRUE(mixed.sampled.empty());

  ForwardOutput drawn = run({kOutputSample, kOutputArgmax, kOutputSample});
  TemperatureScratch scratch;
  const auto expect = [&](size_t i) { return sample_draw(row(i), draws[i], scratch); };
  EXPECT_EQ(drawn.sampled, (std::vector<int32_t>{expect(0).token_id, expect(2).token_id}));
  EXPECT_EQ(drawn.sampled_logprobs, (std::vector<float>{0.0f, 0.0f}));
  ASSERT_EQ(drawn.top_logprobs.size(), 2u);
  EXPECT_TRUE(drawn.top_logprobs[0].empty() && drawn.top_logprobs[1].empty());
  EXPECT_EQ(drawn.argmax, std::vector<int32_t>{argmax_lowest(row(1))});
  EXPECT_TRUE(drawn.logits.empty());
  // The two draws differ from greedy here (flat dummy logits), so the rows really sampled.
  EXPECT_NE(drawn.sampled, mixed.argmax);

  draws[0].top_k = 3;
  draws[0].logprob = 1;
  draws[2].top_p = 0.5;
  draws[2].top_k = 40;
  draws[2].logprob = 1;
  drawn = run({kOutputSample, kOutputArgmax, kOutputSample});
  for (size_t i : {size_t{0}, size_t{2}}) {
    const SampleResult want = expect(i);
    EXPECT_EQ(drawn.sampled[i / 2], want.token_id) << i;
    EXPECT_EQ(drawn.sampled_logprobs[i / 2], want.logprob) << i;
    EXPECT_LT(want.logprob, 0.0f);
  }

  // With a logit bias and penalties: sample_draw_adjusted of the same rows (the draw from the
  // adjusted row, the raw row's logprob; the alternatives the raw row's top_logprobs); +50 on
  // a token makes it row 2's every draw.
  draws[2].top_logprobs = 4;
  const int32_t forced = 7;
  adjusts = {{3, kAdjustRepetition | kAdjustPenalty, 0.0, 1.3, 0.6, 0.2},
             {forced, kAdjustBias, 1.0},
             {11, kAdjustBias, -100.0},
             {forced, kAdjustBias, 50.0}};
  adjust_indptr = {0, 3, 3, 4};
  drawn = run({kOutputSample, kOutputArgmax, kOutputSample});
  std::vector<float> adjusted;
  for (size_t i : {size_t{0}, size_t{2}}) {
    const std::span<const LogitAdjust> a(
        adjusts.data() + adjust_indptr[i],
        static_cast<size_t>(adjust_indptr[i + 1] - adjust_indptr[i]));
    const SampleResult want = sample_draw_adjusted(row(i), a, draws[i], adjusted, scratch);
    EXPECT_EQ(drawn.sampled[i / 2], want.token_id) << i;
    EXPECT_EQ(drawn.sampled_logprobs[i / 2], want.logprob) << i;
    EXPECT_EQ(want.logprob, static_cast<float>(log_softmax_with_max(row(i), want.token_id,
                                                                    max_ignoring_nan(row(i)))));
  }
  EXPECT_EQ(drawn.sampled[1], forced);
  EXPECT_TRUE(drawn.top_logprobs[0].empty());
  const std::vector<TopLogprob> top = top_logprobs(row(2), 4);
  ASSERT_EQ(drawn.top_logprobs[1].size(), 4u);
  for (size_t j = 0; j < 4; ++j) {
    EXPECT_EQ(drawn.top_logprobs[1][j].token_id, top[j].token_id) << j;
    EXPECT_EQ(drawn.top_logprobs[1][j].logprob, top[j].logprob) << j;
  }
}

// Token masks (ForwardBatch::masks): an argmax row's id is argmax_lowest of its masked logits,
// a sample row's draw, logprob and alternatives those of sample_draw_adjusted and
// top_logprobs on the masked row (adjusts after the mask, a bias of +50 on a masked token
// cannot bring it back); a row whose mask allows nothing gives argmax 0; rows without a mask,
// and the logits row, are unchanged.
TEST_P(ForwardCpuArch, MaskedRowsDrawFromTheirMaskedLogits) {
  const ModelConfig config = GetParam().config();
  const ModelWeights w = make_weights(config, 8);
  Rng rng(13);
  std::vector<Seq> seqs;
  for (int i = 0; i < 6; ++i) {
    seqs.push_back({random_tokens(5 + 3 * i, config.vocab_size, rng), {2 * i, 2 * i + 1}, 0});
  }
  const int64_t v = config.vocab_size;
  const auto words = static_cast<size_t>(mask_words(v));
  const int32_t banned = 7;  // masked out everywhere, biased +50 on request 3's row
  std::vector<uint32_t> masks(3 * words, 0);
  for (int64_t t = 0; t < v; ++t) {
    for (size_t k = 0; k < 2; ++k) {
      if (t != banned && rng.uniform() < (k == 0 ? 0.2 : 0.5)) {
        masks[k * words + static_cast<size_t>(t / 32)] |= 1u << (t % 32);
      }
    }
  }  // mask 2 allows nothing
  const std::vector<uint8_t> outputs = {kOutputArgmax, kOutputSample, kOutputLogits,
                                        kOutputSample, kOutputArgmax, kOutputArgmax};
  const std::vector<int32_t> mask_index = {0, 1, -1, 0, 2, -1};
  std::vector<SampleDraw> draws(6);
  draws[1] = {1.0f / 0.8f, 0.0f, 0.37};
  draws[1].logprob = 1;
  draws[1].top_logprobs = 5;
  draws[3] = {1.0f, 0.0f, 0.91};
  draws[3].logprob = 1;
  draws[3].top_k = 50;
  const std::vector<LogitAdjust> adjusts = {{banned, kAdjustBias, 50.0}, {11, kAdjustBias, 2.0}};
  const std::vector<int32_t> adjust_indptr = {0, 0, 0, 0, 2, 2, 2};
  int fills = 0;
  const auto run = [&](bool masked, bool late = false) {
    ForwardBatch b;
    for (size_t i = 0; i < seqs.size(); ++i) {
      add(b, seqs[i], static_cast<int>(seqs[i].tokens.size()), masked ? outputs[i] : kOutputLogits,
          kPool.page_size);
    }
    if (masked) {
      b.draws = draws;
      b.adjusts = adjusts;
      b.adjust_indptr = adjust_indptr;
      b.mask_index = mask_index;
      b.masks = masks;
    }
    if (late) {  // ForwardBatch::fill_masks writes them; masks gives only their size
      std::fill(b.masks.begin(), b.masks.end(), 0u);
      b.fill_masks = [&](std::span<uint32_t> dest) {
        ASSERT_EQ(dest.size(), masks.size());
        std::copy(masks.begin(), masks.end(), dest.begin());
        ++fills;
      };
    }
    ForwardOutput out;
    const Status st = make_backend(w, CpuForwardOptions{})->forward(b, out);
    EXPECT_TRUE(st.ok()) << st.to_string();
    return out;
  };
  const ForwardOutput raw = run(false), got = run(true);
  ASSERT_EQ(raw.logits.size(), static_cast<size_t>(6 * v));
  const auto masked_row = [&](size_t i) {
    std::vector<float> row(raw.logits.begin() + static_cast<int64_t>(i) * v,
                           raw.logits.begin() + static_cast<int64_t>(i + 1) * v);
    if (mask_index[i] >= 0) {
      mask_logits(row, std::span<const uint32_t>(masks).subspan(
                           static_cast<size_t>(mask_index[i]) * words, words));
    }
    return row;
  };
  EXPECT_EQ(got.logits, std::vector<float>(raw.logits.begin() + 2 * v, raw.logits.begin() + 3 * v));
  EXPECT_EQ(got.argmax,
            (std::vector<int32_t>{argmax_lowest(masked_row(0)), argmax_lowest(masked_row(4)),
                                  argmax_lowest(masked_row(5))}));
  EXPECT_EQ(got.argmax[1], 0);  // mask 2 allows nothing
  EXPECT_NE(argmax_lowest(masked_row(0)), argmax_lowest(masked_row(5)));
  ASSERT_EQ(got.sampled.size(), 2u);
  for (const auto& [j, i] : {std::pair{size_t{0}, size_t{1}}, std::pair{size_t{1}, size_t{3}}}) {
    SCOPED_TRACE(i);
    const std::vector<float> row = masked_row(i);
    const std::span<const LogitAdjust> a(
        adjusts.data() + adjust_indptr[i],
        static_cast<size_t>(adjust_indptr[i + 1] - adjust_indptr[i]));
    const SampleResult want = sample_draw_adjusted(row, a, draws[i]);
    EXPECT_EQ(got.sampled[j], want.token_id);
    // The LM head's rows sit in another order here than in `raw` (last bits may differ).
    EXPECT_NEAR(got.sampled_logprobs[j], want.logprob, 1e-5);
    const size_t bit =
        static_cast<size_t>(mask_index[i]) * words * 32 + static_cast<size_t>(want.token_id);
    EXPECT_TRUE((masks[bit / 32] >> (bit % 32)) & 1u) << want.token_id;
    const std::vector<TopLogprob> top = top_logprobs(row, draws[i].top_logprobs);
    ASSERT_EQ(got.top_logprobs[j].size(), top.size());
    for (size_t k = 0; k < top.size(); ++k) {
      EXPECT_EQ(got.top_logprobs[j][k].token_id, top[k].token_id);
      EXPECT_NEAR(got.top_logprobs[j][k].logprob, top[k].logprob, 1e-5);
    }
  }
  EXPECT_NE(got.sampled[1], banned);
  const ForwardOutput late = run(true, true);
  EXPECT_EQ(fills, 1);
  EXPECT_EQ(late.argmax, got.argmax);
  EXPECT_EQ(late.sampled, got.sampled);
  EXPECT_EQ(late.sampled_logprobs, got.sampled_logprobs);
  EXPECT_EQ(late.logits, got.logits);
}

// Argmax and draw rows before a request's last (ForwardBatch::extra_rows, speculative
// drafts' verification): each is the argmax, or sample_draw with its extra_draws entry, of the
// logits its prefix gives as a last row, in row order, beside a plain argmax request, a
// logits request and a plain draw.
TEST_P(ForwardCpuArch, ExtraRowsAreTheirPrefixesArgmaxAndDraws) {
  const ModelConfig config = GetParam().config();
  const ModelWeights w = make_weights(config, 8);
  Rng rng(21);
  Seq a{random_tokens(13, config.vocab_size, rng), {0, 1}, 8};  // 8 computed, 5 rows now
  const Seq b{random_tokens(6, config.vocab_size, rng), {2}, 0};
  const Seq c{random_tokens(4, config.vocab_size, rng), {3}, 0};
  const Seq d{random_tokens(7, config.vocab_size, rng), {4}, 0};
  auto backend = make_backend(w, {});
  {  // a's first 8 tokens into its pages
    Seq prefix = a;
    prefix.computed = 0;
    ForwardBatch fill;
    add(fill, prefix, 8, kNoOutput, kPool.page_size);
    ForwardOutput ignored;
    ASSERT_TRUE(backend->forward(fill, ignored).ok());
  }
  ForwardBatch batch;
  add(batch, b, 6, kOutputLogits, kPool.page_size);
  add(batch, a, 5, kOutputArgmax, kPool.page_size);
  add(batch, d, 7, kOutputSample, kPool.page_size);
  add(batch, c, 4, kOutputArgmax, kPool.page_size);
  add(batch, c, 1, kOutputSample, kPool.page_size);  // c's first token again, as a plain draw
  batch.kv_len.back() = 1;
  batch.page_ids.back() = 5;
  batch.extra_rows = {0, 4, 3, 0, 0};
  SampleDraw hot;  // d's rows: a hot draw, a greedy one with alternatives, top-k with logprob
  hot.inv_temperature = 0.5f;
  hot.u = 0.73;
  SampleDraw greedy;
  greedy.greedy = 1;
  greedy.logprob = 1;
  greedy.top_logprobs = 3;
  SampleDraw top_k;
  top_k.top_k = 5;
  top_k.u = 0.41;
  top_k.logprob = 1;
  batch.extra_draws = {hot, greedy, top_k};
  SampleDraw last;
  last.inv_temperature = 1.25f;
  last.u = 0.2;
  batch.draws = {SampleDraw{}, SampleDraw{}, last, SampleDraw{}, hot};
  ForwardOutput got;
  Status st = backend->forward(batch, got);
  ASSERT_TRUE(st.ok()) << st.to_string();
  ASSERT_EQ(got.argmax.size(), 6u);   // a's 5 rows, then c's last
  ASSERT_EQ(got.sampled.size(), 5u);  // d's 4 rows, then the plain draw
  ASSERT_EQ(got.top_logprobs.size(), 5u);
  ASSERT_EQ(got.logits.size(), static_cast<size_t>(config.vocab_size));
  auto reference = make_backend(w, {});
  const auto last_row_logits = [&](const Seq& s, int rows) {
    Seq prefix = s;
    prefix.computed = 0;
    ForwardBatch one;
    add(one, prefix, rows, kOutputLogits, kPool.page_size);
    ForwardOutput want;
    EXPECT_TRUE(reference->forward(one, want).ok());
    return want.logits;
  };
  for (int j = 0; j < 5; ++j) {
    EXPECT_EQ(got.argmax[j], argmax_lowest(last_row_logits(a, 9 + j))) << j;
  }
  EXPECT_EQ(got.argmax[5], argmax_lowest(last_row_logits(c, 4)));
  const SampleDraw* d_draws[] = {&hot, &greedy, &top_k, &last};
  for (int j = 0; j < 4; ++j) {
    const std::vector<float> row = last_row_logits(d, 4 + j);
    const SampleResult want = sample_draw_adjusted(row, {}, *d_draws[j]);
    EXPECT_EQ(got.sampled[j], want.token_id) << j;
    // (The logits of a row in a pass of 23 rows and in one of 4 + j differ in their last bits.)
    EXPECT_NEAR(got.sampled_logprobs[j], want.logprob, 1e-4) << j;
    const std::vector<TopLogprob> top = top_logprobs(row, d_draws[j]->top_logprobs);
    ASSERT_EQ(got.top_logprobs[j].size(), top.size()) << j;
    for (size_t k = 0; k < top.size(); ++k) {
      EXPECT_EQ(got.top_logprobs[j][k].token_id, top[k].token_id) << j << " " << k;
      EXPECT_NEAR(got.top_logprobs[j][k].logprob, top[k].logprob, 1e-4) << j << " " << k;
    }
  }
  EXPECT_EQ(got.top_logprobs[1].size(), 3u);
  EXPECT_EQ(got.sampled[4], sample_draw_adjusted(last_row_logits(c, 1), {}, hot).token_id);
}

// Scored rows (prompt logprobs): each is score_row of the logits its prefix gives as a last
// row, with the next prompt token as target, across two prefill chunks; beside a request
// that scores nothing, and whether the chunk's last row samples or not.
TEST_P(ForwardCpuArch, ScoredRowsAreTheirPrefixesLastRowScores) {
  const ModelConfig config = GetParam().config();
  const ModelWeights w = make_weights(config, 8);
  Rng rng(13);
  Seq a{random_tokens(19, config.vocab_size, rng), {0, 1}, 0};
  const Seq b{random_tokens(7, config.vocab_size, rng), {2}, 0};
  auto backend = make_backend(w, {});
  const auto targets = [&](int first, int n) {
    return std::vector<int32_t>(a.tokens.begin() + first + 1, a.tokens.begin() + first + 1 + n);
  };
  // Chunk 1: A's rows 0-10, all scored, no sample; B a prefill with an argmax and no scores.
  ForwardBatch first;
  add(first, a, 11, kNoOutput, kPool.page_size);
  add(first, b, 7, kOutputArgmax, kPool.page_size);
  first.score_indptr = {0, 11, 11};
  first.score_targets = targets(0, 11);
  first.score_top = {3, 0};
  ForwardOutput got1;
  Status st = backend->forward(first, got1);
  ASSERT_TRUE(st.ok()) << st.to_string();
  ASSERT_EQ(got1.scores.size(), 11u);
  ASSERT_EQ(got1.argmax.size(), 1u);
  // Chunk 2: rows 11-18, the first 7 scored, the last one's logits returned.
  a.computed = 11;
  ForwardBatch second;
  add(second, a, 8, kOutputLogits, kPool.page_size);
  second.score_indptr = {0, 7};
  second.score_targets = targets(11, 7);
  second.score_top = {3};
  ForwardOutput got2;
  st = backend->forward(second, got2);
  ASSERT_TRUE(st.ok()) << st.to_string();
  ASSERT_EQ(got2.scores.size(), 7u);
  std::vector<RowScore> got = got1.scores;
  got.insert(got.end(), got2.scores.begin(), got2.scores.end());

  auto reference = make_backend(w, {});
  for (int j = 0; j < 19; ++j) {
    Seq prefix = a;
    prefix.computed = 0;
    ForwardBatch one;
    add(one, prefix, j + 1, kOutputLogits, kPool.page_size);
    ForwardOutput want;
    st = reference->forward(one, want);
    ASSERT_TRUE(st.ok()) << st.to_string();
    if (j == 18) {  // the unscored last row, as a logits row
      EXPECT_LT(rel_err(got2.logits, want.logits), 1e-5);
      break;
    }
    const RowScore ref = score_row(want.logits, a.tokens[static_cast<size_t>(j + 1)], 3);
    const RowScore& s = got[static_cast<size_t>(j)];
    EXPECT_NEAR(s.logprob, ref.logprob, 1e-4) << j;
    ASSERT_EQ(s.top.size(), 3u) << j;
    for (size_t k = 0; k < 3; ++k) {
      EXPECT_EQ(s.top[k].token_id, ref.top[k].token_id) << j << " " << k;
      EXPECT_NEAR(s.top[k].logprob, ref.top[k].logprob, 1e-4) << j << " " << k;
    }
  }
  // score_top 0: the logprobs alone.
  a.computed = 0;
  first.score_top = {0, 0};
  st = backend->forward(first, got1);
  ASSERT_TRUE(st.ok()) << st.to_string();
  for (size_t j = 0; j < 11; ++j) {
    EXPECT_TRUE(got1.scores[j].top.empty());
    EXPECT_EQ(got1.scores[j].logprob, got[j].logprob) << j;
  }
}

INSTANTIATE_TEST_SUITE_P(Archs, ForwardCpuArch,
                         testing::Values(ArchCase{"llama", llama_config},
                                         ArchCase{"qwen2", qwen2_config},
                                         ArchCase{"qwen2_yarn", qwen2_yarn_config},
                                         ArchCase{"qwen3", qwen3_config}),
                         [](const auto& param_info) { return std::string(param_info.param.name); });

}  // namespace
}  // namespace packserve::model
