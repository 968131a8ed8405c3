// sampler_test.cc: RequestSampler against distributions worked out by hand (sampler.h).
#include "packserve/engine/sampler.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <map>
#include <random>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "packserve/common/argmax.h"
#include "packserve/common/sample_draw.h"
#include "packserve/common/temperature_sample.h"
#include "packserve/engine/engine_test_util.h"

namespace packserve::engine {
namespace {

// Logits whose softmax is exactly proportional to `probs`.
std::vector<float> logits_of(const std::vector<double>& probs) {
  std::vector<float> out;
  for (double p : probs) out.push_back(static_cast<float>(std::log(p)));
  return out;
}

SamplingParams params(double temperature, int top_k = 0, double top_p = 1.0, double min_p = 0.0) {
  SamplingParams p;
  p.temperature = temperature;
  p.top_k = top_k;
  p.top_p = top_p;
  p.min_p = min_p;
  return p;
}

// Expected (token -> probability) vs the sampler's candidate set; tolerance from the float32
// rounding of log(p) (relative ~1e-7).
void expect_candidates(const SamplingParams& p, const std::vector<float>& logits,
                       const std::map<int32_t, double>& expected) {
  RequestSampler sampler(p, 1);
  const auto got = sampler.candidates(logits);
  ASSERT_EQ(got.size(), expected.size());
  for (const auto& c : got) {
    ASSERT_TRUE(expected.count(c.token_id)) << "unexpected token " << c.token_id;
    EXPECT_NEAR(c.prob, expected.at(c.token_id), 1e-6) << "token " << c.token_id;
  }
}

// n logits drawn uniformly from [-bound, bound] (std::mt19937 seeded with `seed`).
std::vector<float> random_row(size_t n, unsigned seed, float bound) {
  std::vector<float> row(n);
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-bound, bound);
  for (float& x : row) x = u(rng);
  return row;
}

// p = [0.1, 0.4, 0.2, 0.3]; most likely first: 1 (0.4), 3 (0.3), 2 (0.2), 0 (0.1).
const std::vector<double> kProbs = {0.1, 0.4, 0.2, 0.3};

// kProbs at temperature 2: p_i^(1/2), renormalized.
std::map<int32_t, double> square_root_renormalized() {
  double z = 0;
  for (double p : kProbs) z += std::sqrt(p);
  std::map<int32_t, double> out;
  for (size_t i = 0; i < kProbs.size(); ++i) {
    out[static_cast<int32_t>(i)] = std::sqrt(kProbs[i]) / z;
  }
  return out;
}

TEST(SamplerTest, GreedyIsArgmaxWithTiesToLowestId) {
  RequestSampler greedy(params(0.0), 7);
  EXPECT_EQ(greedy.sample(logits_of(kProbs)).token_id, 1);
  const std::vector<float> tied = {1.0f, 3.0f, 2.0f, 3.0f};
  EXPECT_EQ(greedy.sample(tied).token_id, 1);
  EXPECT_EQ(argmax_lowest(tied), 1);
  const std::vector<float> with_nan = {NAN, -1.0f, NAN};
  EXPECT_EQ(argmax_lowest(with_nan), 1);
}

TEST(SamplerTest, ArgmaxOnlyForGreedyWithoutLogprobs) {
  EXPECT_TRUE(RequestSampler(params(0.0), 1).argmax_only());
  SamplingParams top1 = params(0.8);
  top1.top_k = 1;
  EXPECT_TRUE(RequestSampler(top1, 1).argmax_only());
  EXPECT_FALSE(RequestSampler(params(0.8), 1).argmax_only());
  SamplingParams with_logprobs = params(0.0);
  with_logprobs.logprobs = true;
  EXPECT_FALSE(RequestSampler(with_logprobs, 1).argmax_only());
  // Speculation's test (Engine::Impl::admit): each token a draw of the raw row.
  EXPECT_TRUE(RequestSampler(with_logprobs, 1).unadjusted());
  EXPECT_TRUE(RequestSampler(params(0.8, 5, 0.9, 0.1), 1).unadjusted());
  SamplingParams biased = params(0.8);
  biased.logit_bias = {{3, 1.0}};
  EXPECT_FALSE(RequestSampler(biased, 1).unadjusted());
  SamplingParams penalized = params(0.0);
  penalized.presence_penalty = 0.5;
  EXPECT_FALSE(RequestSampler(penalized, 1).unadjusted());
  RequestSampler banned(params(0.0), 1);
  const int32_t eos = 2;
  banned.ban_until(3, std::span(&eos, 1));
  EXPECT_FALSE(banned.unadjusted());
  EXPECT_FALSE(banned.argmax_only());
}

// next_draw() carries the request's parameters; greedy draws no uniform.
TEST(SamplerTest, NextDrawCarriesTheParameters) {
  SamplingParams p = params(0.8, 5, 0.9, 0.1);
  p.logprobs = true;
  RequestSampler s(p, 1);
  const SampleDraw d = s.next_draw();
  EXPECT_EQ(d.greedy, 0);
  EXPECT_EQ(d.logprob, 1);
  EXPECT_EQ(d.top_k, 5);
  EXPECT_EQ(d.top_p, 0.9);
  EXPECT_EQ(d.min_p, 0.1f);
  EXPECT_EQ(d.inv_temperature, static_cast<float>(1.0 / 0.8));
  EXPECT_NE(d.u, s.next_draw().u);
  SamplingParams g = params(0.0);
  g.logprobs = true;
  RequestSampler greedy(g, 1), twin(g, 1);
  const SampleDraw gd = greedy.next_draw();
  EXPECT_EQ(gd.greedy, 1);
  EXPECT_EQ(gd.logprob, 1);
  EXPECT_EQ(gd.u, 0.0);
}

// peek_draws() gives the draws of the next tokens without drawing them; skip_draws(n) then
// draws n of them, as n calls of next_draw() would.
TEST(SamplerTest, PeekDrawsLookAheadWithoutDrawing) {
  const SamplingParams p = params(0.7, 40, 0.95);
  RequestSampler s(p, 9), twin(p, 9);
  std::vector<SampleDraw> ahead(5);
  s.peek_draws(ahead);
  std::vector<SampleDraw> again(3);
  s.peek_draws(again);  // nothing was drawn: the same first three
  for (size_t i = 0; i < ahead.size(); ++i) {
    const SampleDraw d = twin.next_draw();
    EXPECT_EQ(ahead[i].u, d.u) << i;
    EXPECT_EQ(ahead[i].top_k, 40);
    EXPECT_EQ(ahead[i].top_p, 0.95);
    if (i < again.size()) {
      EXPECT_EQ(again[i].u, d.u) << i;
    }
  }
  s.skip_draws(2);
  EXPECT_EQ(s.next_draw().u, ahead[2].u);
  s.skip_draws(2);
  EXPECT_EQ(s.next_draw().u, twin.next_draw().u);  // 6 drawn by each
  RequestSampler greedy(params(0.0), 9);
  std::vector<SampleDraw> g(2);
  greedy.peek_draws(g);
  EXPECT_EQ(g[1].greedy, 1);
  EXPECT_EQ(g[1].u, 0.0);
}

// A sampler's tokens and logprobs are sample_draw of next_draw() on a twin sampler (the path
// the forward backends run for kOutputSample rows), token for token, for every mode (greedy,
// temperature, min-p, top-k, top-p, both, logprobs), including rows with NaN, -inf and +inf
// entries.
TEST(SamplerTest, NextDrawReproducesSample) {
  constexpr float kInf = std::numeric_limits<float>::infinity();
  std::mt19937 gen(17);
  std::uniform_real_distribution<float> dist(-6.0f, 6.0f);
  std::vector<std::vector<float>> rows;
  for (size_t n : {size_t{5}, size_t{1023}, size_t{1024}, size_t{3000}}) {
    std::vector<float> row(n);
    for (float& x : row) x = dist(gen);
    rows.push_back(row);
  }
  rows.push_back({1.0f, NAN, -kInf, 2.0f, NAN});
  rows.push_back({1.0f, kInf, 0.0f, kInf, NAN, kInf});  // +inf: uniform over the three
  rows.push_back({-kInf, -kInf, NAN});                  // max -inf: the two -inf entries
  rows.push_back({NAN, NAN});                           // nothing: token 0
  std::vector<SamplingParams> modes = {params(0.7),         params(0.7, 0, 1.0, 0.3),
                                       params(0.0),         params(0.7, 3),
                                       params(1.3, 0, 0.8), params(0.9, 40, 0.95, 0.05)};
  for (size_t i = 0, n = modes.size(); i < n; ++i) {
    modes.push_back(modes[i]);
    modes.back().logprobs = true;
  }
  for (size_t mode = 0; mode < modes.size(); ++mode) {
    RequestSampler host(modes[mode], 5), twin(modes[mode], 5);
    TemperatureScratch scratch;
    for (int round = 0; round < 20; ++round) {
      for (const std::vector<float>& row : rows) {
        const SampledToken want = host.sample(row);
        const SampleResult got = sample_draw(row, twin.next_draw(), scratch);
        ASSERT_EQ(got.token_id, want.token_id)
            << "mode " << mode << ", round " << round << ", row of " << row.size();
        ASSERT_EQ(got.logprob, want.logprob) << "mode " << mode;
      }
    }
  }
}

// With penalties and a logit bias the backend's path (next_draw() and adjustments() to
// sample_draw_adjusted, the token handed back by accept()) gives sample()'s tokens and raw
// logprobs, token for token, as the counts grow.
TEST(SamplerTest, NextDrawWithAdjustmentsReproducesSample) {
  std::mt19937 gen(23);
  std::uniform_real_distribution<float> dist(-3.0f, 3.0f);
  std::vector<float> row(2000);
  for (float& x : row) x = dist(gen);
  const std::vector<int32_t> prompt = {3, 3, 17, 1999, 40};
  std::vector<SamplingParams> modes = {params(0.0), params(0.8), params(0.9, 40, 0.95),
                                       params(1.2, 0, 0.9, 0.01)};
  for (SamplingParams& p : modes) {
    p.logprobs = true;
    p.presence_penalty = 0.4;
    p.frequency_penalty = 0.6;
    p.repetition_penalty = 1.2;
    p.logit_bias = {{17, 2.5}, {5, -1.0}};
  }
  for (size_t mode = 0; mode < modes.size(); ++mode) {
    RequestSampler host(modes[mode], 9, prompt), twin(modes[mode], 9, prompt);
    std::vector<float> adjusted;
    TemperatureScratch scratch;
    for (int step = 0; step < 60; ++step) {
      const SampledToken want = host.sample(row);
      const SampleResult got =
          sample_draw_adjusted(row, twin.adjustments(), twin.next_draw(), adjusted, scratch);
      twin.accept(got.token_id);
      ASSERT_EQ(got.token_id, want.token_id) << "mode " << mode << ", step " << step;
      ASSERT_EQ(got.logprob, want.logprob) << "mode " << mode << ", step " << step;
      EXPECT_EQ(got.logprob, static_cast<float>(log_softmax_at(row, got.token_id)));
    }
  }
}

// Every logit NaN: no candidate; the draw gives greedy's token 0 (it used to read past an
// empty candidate list).
TEST(SamplerTest, AllNanRowSamplesTokenZero) {
  RequestSampler sampler(params(1.0), 3);
  const std::vector<float> nan_row(7, NAN);
  for (int i = 0; i < 5; ++i) EXPECT_EQ(sampler.sample(nan_row).token_id, 0);
}

TEST(SamplerTest, TopKOneIsAlwaysArgmax) {
  RequestSampler sampler(params(1.5, 1), 3);
  for (int i = 0; i < 200; ++i) EXPECT_EQ(sampler.sample(logits_of(kProbs)).token_id, 1);
}

TEST(SamplerTest, TemperatureOneKeepsTheDistribution) {
  expect_candidates(params(1.0), logits_of(kProbs), {{0, 0.1}, {1, 0.4}, {2, 0.2}, {3, 0.3}});
}

TEST(SamplerTest, TemperatureTwoIsSquareRootRenormalized) {
  // p^(1/2) / sum p^(1/2).
  expect_candidates(params(2.0), logits_of(kProbs), square_root_renormalized());
}

TEST(SamplerTest, TopKKeepsTheKMostLikely) {
  expect_candidates(params(1.0, 2), logits_of(kProbs), {{1, 0.4 / 0.7}, {3, 0.3 / 0.7}});
  expect_candidates(params(1.0, 3), logits_of(kProbs),
                    {{1, 0.4 / 0.9}, {3, 0.3 / 0.9}, {2, 0.2 / 0.9}});
  expect_candidates(params(1.0, 10), logits_of(kProbs), {{0, 0.1}, {1, 0.4}, {2, 0.2}, {3, 0.3}});
}

TEST(SamplerTest, TopPKeepsTheSmallestPrefixReachingP) {
  // Cumulative: 0.4, 0.7, 0.9, 1.0.
  expect_candidates(params(1.0, 0, 0.3), logits_of(kProbs), {{1, 1.0}});
  expect_candidates(params(1.0, 0, 0.65), logits_of(kProbs), {{1, 0.4 / 0.7}, {3, 0.3 / 0.7}});
  // Exactly on a cumulative sum: that prefix suffices.
  expect_candidates(params(1.0, 0, 0.7), logits_of(kProbs), {{1, 0.4 / 0.7}, {3, 0.3 / 0.7}});
  expect_candidates(params(1.0, 0, 0.75), logits_of(kProbs),
                    {{1, 0.4 / 0.9}, {3, 0.3 / 0.9}, {2, 0.2 / 0.9}});
}

TEST(SamplerTest, MinPDropsTokensBelowFractionOfMax) {
  // max p = 0.4: min_p 0.6 -> threshold 0.24 keeps {1, 3}; min_p 0.45 -> 0.18 keeps {1, 3, 2}.
  expect_candidates(params(1.0, 0, 1.0, 0.6), logits_of(kProbs), {{1, 0.4 / 0.7}, {3, 0.3 / 0.7}});
  expect_candidates(params(1.0, 0, 1.0, 0.45), logits_of(kProbs),
                    {{1, 0.4 / 0.9}, {3, 0.3 / 0.9}, {2, 0.2 / 0.9}});
}

TEST(SamplerTest, MinPIsAppliedBeforeTopP) {
  // min_p 0.4 (threshold 0.16) drops token 0, leaving 0.4/0.9, 0.3/0.9, 0.2/0.9; top_p 0.75
  // on those: 0.444, 0.778 >= 0.75 -> {1, 3}. (top-p first on the full distribution would
  // keep {1, 3, 2}: 0.4, 0.7 < 0.75, 0.9.)
  expect_candidates(params(1.0, 0, 0.75, 0.4), logits_of(kProbs), {{1, 0.4 / 0.7}, {3, 0.3 / 0.7}});
}

TEST(SamplerTest, TiesAtTheTopKCutGoToTheLowerId) {
  const std::vector<float> logits = {0.0f, 1.0f, 1.0f, 1.0f};
  expect_candidates(params(1.0, 2), logits, {{1, 0.5}, {2, 0.5}});
}

// The pipeline of sampler.h written out plainly in float64 (exp, full sort, cuts): the
// oracle for large vocabularies, where candidates() gathers only tokens above a floor.
std::vector<RequestSampler::Candidate> reference_candidates(const SamplingParams& p,
                                                            const std::vector<float>& logits) {
  const double m = *std::max_element(logits.begin(), logits.end());
  std::vector<RequestSampler::Candidate> out;
  for (size_t i = 0; i < logits.size(); ++i) {
    const double w = std::exp((logits[i] - m) / p.temperature);
    if (w >= p.min_p) out.push_back({static_cast<int32_t>(i), w});
  }
  std::sort(out.begin(), out.end(), [](const auto& a, const auto& b) {
    return a.prob != b.prob ? a.prob > b.prob : a.token_id < b.token_id;
  });
  if (p.top_k > 0 && static_cast<size_t>(p.top_k) < out.size()) out.resize(p.top_k);
  double total = 0.0;
  for (const auto& c : out) total += c.prob;
  if (p.top_p < 1.0) {
    double cum = 0.0;
    for (size_t i = 0; i < out.size(); ++i) {
      cum += out[i].prob;
      if (cum >= p.top_p * total * (1.0 - 1e-12)) {
        out.resize(i + 1);
        break;
      }
    }
    total = cum;
  }
  for (auto& c : out) c.prob /= total;
  return out;
}

TEST(SamplerTest, LargeVocabularyCandidatesEqualThePlainPipeline) {
  // 151,936 logits on a 1/64 grid (distinct values far apart next to float32 rounding, and
  // many exact ties, so the order by (weight, id) is one and the same in both).
  std::mt19937 gen(11);
  std::normal_distribution<float> normal(0.0f, 3.0f);
  std::vector<float> logits(151936);
  for (float& x : logits) x = std::round(normal(gen) * 64.0f) / 64.0f;
  std::vector<SamplingParams> cases = {
      params(1.0, 50),       params(1.0, 5000),         params(0.7, 1000),
      params(1.0, 0, 0.5),   params(0.5, 0, 0.9),       params(0.3, 0, 0.99),
      params(1.0, 100, 0.8), params(1.0, 0, 0.9, 0.01), params(2.0, 20, 1.0, 0.5)};
  for (const SamplingParams& p : cases) {
    RequestSampler sampler(p, 1);
    const auto got = sampler.candidates(logits);
    const auto want = reference_candidates(p, logits);
    const std::string name = "T=" + std::to_string(p.temperature) +
                             " k=" + std::to_string(p.top_k) + " p=" + std::to_string(p.top_p) +
                             " min_p=" + std::to_string(p.min_p);
    ASSERT_EQ(got.size(), want.size()) << name;
    for (size_t i = 0; i < got.size(); ++i) {
      ASSERT_EQ(got[i].token_id, want[i].token_id) << name << " rank " << i;
      EXPECT_NEAR(got[i].prob, want[i].prob, 1e-5 * want[i].prob + 1e-12) << name << " rank " << i;
    }
  }
}

// sample_draw.h's ordered arithmetic written out plainly (every candidate gathered, one full
// sort, integer masses): the oracle for the floors and partial sorts of sample_draw.
int32_t plain_ordered_draw(const std::vector<float>& logits, const SampleDraw& d) {
  const float m = max_ignoring_nan(logits);
  std::vector<uint64_t> keys;
  for (size_t i = 0; i < logits.size(); ++i) {
    const float w = sample_math::weight(logits[i], m, d.inv_temperature, d.min_p);
    if (w > 0.0f) keys.push_back(sample_math::sample_key(w, static_cast<int32_t>(i)));
  }
  std::sort(keys.begin(), keys.end(), std::greater<uint64_t>());
  if (d.top_k > 0 && static_cast<size_t>(d.top_k) < keys.size()) keys.resize(d.top_k);
  uint64_t total = 0;
  for (const uint64_t key : keys) total += sample_math::key_mass(key);
  if (d.top_p < 1.0) {
    const uint64_t need = sample_math::top_p_need(d.top_p, total);
    uint64_t cum = 0;
    size_t cut = 0;
    while (cum < need) cum += sample_math::key_mass(keys[cut++]);
    keys.resize(cut);
    total = cum;
  }
  const uint64_t target = sample_math::draw_target(d.u, total);
  uint64_t cum = 0;
  for (const uint64_t key : keys) {
    cum += sample_math::key_mass(key);
    if (cum > target) return sample_math::key_token(key);
  }
  ADD_FAILURE() << "no token reached the target";
  return -1;
}

// Near-flat rows of 151,936 logits (top-p sets of most of the vocabulary, far beyond what the
// GPU sorts) and a peaked one, drawn by top-k (up to more than the vocabulary), top-p, both
// and min-p with uniforms across [0, 1): sample_draw equals the plain pipeline token for token.
TEST(SamplerTest, OrderedDrawsEqualThePlainIntegerPipeline) {
  std::mt19937 gen(23);
  std::uniform_real_distribution<double> uniform(0.0, 1.0);
  std::vector<std::vector<float>> rows;
  for (const float spread : {0.01f, 1.0f, 8.0f}) {
    std::normal_distribution<float> normal(0.0f, spread);
    std::vector<float> row(151936);
    for (float& x : row) x = normal(gen);
    rows.push_back(row);
  }
  std::vector<SampleDraw> draws;
  for (const int32_t top_k : {0, 1, 50, 5000, 20000, 200000}) {
    for (const double top_p : {1.0, 0.3, 0.9, 0.999}) {
      if (top_k == 0 && top_p == 1.0) continue;  // the temperature walk, not this arithmetic
      SampleDraw d;
      d.top_k = top_k;
      d.top_p = top_p;
      d.inv_temperature = draws.size() % 3 == 0 ? 1.0f : 1.0f / 0.7f;
      d.min_p = draws.size() % 5 == 0 ? 0.02f : 0.0f;
      draws.push_back(d);
    }
  }
  TemperatureScratch scratch;
  for (size_t r = 0; r < rows.size(); ++r) {
    for (SampleDraw d : draws) {
      for (const double u : {0.0, uniform(gen), uniform(gen), 1.0 - 0x1.0p-53}) {
        d.u = u;
        ASSERT_EQ(sample_draw(rows[r], d, scratch).token_id, plain_ordered_draw(rows[r], d))
            << "row " << r << " k " << d.top_k << " p " << d.top_p << " u " << u;
      }
    }
  }
}

// Frequencies over many draws within 5 standard deviations of the renormalized probabilities
// (binomial: sqrt(p (1 - p) / n)); a wrong pipeline is off by far more.
void expect_frequencies(const SamplingParams& p, const std::vector<float>& logits,
                        const std::map<int32_t, double>& expected) {
  RequestSampler sampler(p, 12345);
  const int n = 40000;
  std::map<int32_t, int> counts;
  for (int i = 0; i < n; ++i) counts[sampler.sample(logits).token_id] += 1;
  for (const auto& [token, count] : counts) {
    ASSERT_TRUE(expected.count(token)) << "drew token " << token << " outside the kept set";
  }
  for (const auto& [token, prob] : expected) {
    const double freq = static_cast<double>(counts[token]) / n;
    EXPECT_NEAR(freq, prob, 5.0 * std::sqrt(prob * (1.0 - prob) / n)) << "token " << token;
  }
}

TEST(SamplerTest, DrawFrequenciesMatchTheKeptDistribution) {
  expect_frequencies(params(1.0), logits_of(kProbs), {{0, 0.1}, {1, 0.4}, {2, 0.2}, {3, 0.3}});
  expect_frequencies(params(1.0, 0, 0.65), logits_of(kProbs), {{1, 0.4 / 0.7}, {3, 0.3 / 0.7}});
  expect_frequencies(params(1.0, 3), logits_of(kProbs),
                     {{1, 0.4 / 0.9}, {3, 0.3 / 0.9}, {2, 0.2 / 0.9}});
  expect_frequencies(params(1.0, 0, 1.0, 0.6), logits_of(kProbs), {{1, 0.4 / 0.7}, {3, 0.3 / 0.7}});
  // Temperature-only sampling takes a path without a candidate list: same distribution.
  expect_frequencies(params(2.0), logits_of(kProbs), square_root_renormalized());
  const float inf = std::numeric_limits<float>::infinity();
  expect_frequencies(params(1.0), {inf, 0.0f, inf, -inf}, {{0, 0.5}, {2, 0.5}});
}

TEST(SamplerTest, SameSeedSameTokens) {
  std::vector<float> logits(50);
  for (size_t i = 0; i < logits.size(); ++i) logits[i] = static_cast<float>(i % 7) * 0.3f;
  RequestSampler a(params(1.0, 0, 0.9), 99), b(params(1.0, 0, 0.9), 99),
      c(params(1.0, 0, 0.9), 100);
  std::vector<int32_t> ta, tb, tc;
  for (int i = 0; i < 100; ++i) {
    ta.push_back(a.sample(logits).token_id);
    tb.push_back(b.sample(logits).token_id);
    tc.push_back(c.sample(logits).token_id);
  }
  EXPECT_EQ(ta, tb);
  EXPECT_NE(ta, tc);
}

TEST(SamplerTest, LogprobIsRawLogSoftmax) {
  // Independent of temperature and filtering: log p of the unmodified distribution.
  const auto logits = logits_of(kProbs);
  for (double t : {0.0, 0.5, 2.0}) {
    SamplingParams p = params(t, 2);
    p.logprobs = true;
    RequestSampler s(p, 5);
    for (int i = 0; i < 20; ++i) {
      const SampledToken tok = s.sample(logits);
      EXPECT_NEAR(tok.logprob, std::log(kProbs[static_cast<size_t>(tok.token_id)]), 1e-6);
    }
  }
  // Against a float64 reference with large logits (max subtraction needed).
  const std::vector<float> big = {1000.0f, 999.0f, 990.0f};
  const double z = 1.0 + std::exp(-1.0) + std::exp(-10.0);
  EXPECT_NEAR(log_softmax_at(big, 1), -1.0 - std::log(z), 1e-6);
}

// The float32 exponentials against a plain float64 log-softmax on a Qwen3-sized row (logits
// uniform in [-12, 12], a few NaN and -inf entries, which count as -inf), at tokens across the
// range of probabilities; once flat (the sum is the bulk's) and once with a confident token.
TEST(SamplerTest, LogSoftmaxMatchesFloat64OnAFullVocabulary) {
  std::vector<float> logits(151936);
  uint64_t state = 12345;
  for (float& x : logits) {
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    x = static_cast<float>(static_cast<double>(state >> 11) * 0x1.0p-53 * 24.0 - 12.0);
  }
  logits[7] = std::numeric_limits<float>::quiet_NaN();
  logits[8] = -std::numeric_limits<float>::infinity();
  for (const float confident : {0.0f, 30.0f}) {
    SCOPED_TRACE("logit of token 100000: " + std::to_string(confident));
    logits[100000] = confident;
    double m = -std::numeric_limits<double>::infinity();
    for (float x : logits) {
      if (!std::isnan(x)) m = std::max(m, static_cast<double>(x));
    }
    double zsum = 0.0;
    for (float x : logits) {
      if (!std::isnan(x)) zsum += std::exp(static_cast<double>(x) - m);
    }
    for (const int32_t token : {0, 1, 8, 99999, 100000, 151935}) {
      const double want = logits[static_cast<size_t>(token)] - m - std::log(zsum);
      SCOPED_TRACE("token " + std::to_string(token));
      if (std::isinf(want)) {
        EXPECT_EQ(log_softmax_at(logits, token), want);
      } else {
        EXPECT_NEAR(log_softmax_at(logits, token), want, 2e-6);
      }
    }
  }
  EXPECT_EQ(log_softmax_at(logits, 7), -std::numeric_limits<double>::infinity());  // NaN
}

// top_logprobs: the k most likely tokens in order (ties to the lower id, NaN last), each with
// the float a draw reports for it; against a float64 log-softmax, on a random row with ties,
// NaN and -inf, and on degenerate rows.
TEST(SamplerTest, TopLogprobsAreTheMostLikelyWithTheDrawsLogprobs) {
  std::vector<float> logits = random_row(5000, 7, 8.0f);
  logits[10] = logits[20] = 9.5f;  // a tie at the top: 10 before 20
  logits[30] = std::numeric_limits<float>::quiet_NaN();
  logits[40] = -std::numeric_limits<float>::infinity();
  std::vector<int32_t> order(logits.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = static_cast<int32_t>(i);
  auto key = [&](int32_t i) {
    const float x = logits[static_cast<size_t>(i)];
    return std::isnan(x) ? -std::numeric_limits<double>::infinity() : static_cast<double>(x);
  };
  std::stable_sort(order.begin(), order.end(),
                   [&](int32_t a, int32_t b) { return key(a) > key(b); });
  double zsum = 0.0;
  for (float x : logits) {
    if (!std::isnan(x)) zsum += std::exp(static_cast<double>(x) - 9.5);
  }
  const auto top = top_logprobs(logits, 20);
  ASSERT_EQ(top.size(), 20u);
  EXPECT_EQ(top[0].token_id, 10);
  EXPECT_EQ(top[1].token_id, 20);
  for (size_t j = 0; j < top.size(); ++j) {
    EXPECT_EQ(top[j].token_id, order[j]) << j;
    EXPECT_NEAR(top[j].logprob, key(order[j]) - 9.5 - std::log(zsum), 2e-6) << j;
    EXPECT_EQ(top[j].logprob, static_cast<float>(log_softmax_at(logits, top[j].token_id))) << j;
  }
  // The greedy draw's own logprob is the first entry's, bit for bit.
  SamplingParams p = params(0.0);
  p.logprobs = true;
  RequestSampler greedy(p, 1);
  const SampledToken tok = greedy.sample(logits);
  EXPECT_EQ(tok.token_id, top[0].token_id);
  EXPECT_EQ(tok.logprob, top[0].logprob);
  // k beyond the vocabulary: every token, the NaN last; k = 0: none.
  const auto all = top_logprobs(logits, 1 << 20);
  ASSERT_EQ(all.size(), logits.size());
  EXPECT_EQ(all.back().token_id, 40);  // -inf and NaN tie: the lower id first
  EXPECT_EQ(all[all.size() - 2].token_id, 30);
  EXPECT_EQ(all.back().logprob, -std::numeric_limits<float>::infinity());
  EXPECT_TRUE(top_logprobs(logits, 0).empty());
  // A row with +inf entries: uniform over them, -inf for the rest.
  const std::vector<float> inf = {1.0f, std::numeric_limits<float>::infinity(), 2.0f,
                                  std::numeric_limits<float>::infinity()};
  const auto t = top_logprobs(inf, 3);
  ASSERT_EQ(t.size(), 3u);
  EXPECT_EQ(t[0].token_id, 1);
  EXPECT_EQ(t[1].token_id, 3);
  EXPECT_EQ(t[2].token_id, 2);
  EXPECT_FLOAT_EQ(t[0].logprob, static_cast<float>(-std::log(2.0)));
  EXPECT_EQ(t[2].logprob, -std::numeric_limits<float>::infinity());
}

// score_row (prompt logprobs): the target's logprob is the float a draw of it reports, against
// a float64 log-softmax, for likely, unlikely, -inf and NaN targets; the alternatives are
// top_logprobs'.
TEST(SamplerTest, ScoreRowIsTheTargetsRawLogprobAndTheTopTokens) {
  std::vector<float> logits = random_row(3000, 11, 6.0f);
  logits[7] = 8.0f;
  logits[8] = -std::numeric_limits<float>::infinity();
  logits[9] = std::numeric_limits<float>::quiet_NaN();
  double zsum = 0.0;
  for (float x : logits) {
    if (!std::isnan(x)) zsum += std::exp(static_cast<double>(x) - 8.0);
  }
  for (const int32_t target : {7, 0, 1234, 2999}) {
    const RowScore s = score_row(logits, target, 5);
    EXPECT_NEAR(s.logprob, logits[static_cast<size_t>(target)] - 8.0 - std::log(zsum), 2e-6)
        << target;
    EXPECT_EQ(s.logprob, static_cast<float>(log_softmax_at(logits, target))) << target;
    ASSERT_EQ(s.top.size(), 5u);
    const auto want = top_logprobs(logits, 5);
    for (size_t j = 0; j < want.size(); ++j) {
      EXPECT_EQ(s.top[j].token_id, want[j].token_id);
      EXPECT_EQ(s.top[j].logprob, want[j].logprob);
    }
  }
  EXPECT_EQ(score_row(logits, 7, 1).top[0].logprob, score_row(logits, 7, 0).logprob);
  EXPECT_TRUE(score_row(logits, 7, 0).top.empty());
  for (const int32_t target : {8, 9}) {
    EXPECT_EQ(score_row(logits, target, 0).logprob, -std::numeric_limits<float>::infinity());
  }
}

void expect_same_floats(const std::vector<float>& got, const std::vector<float>& want) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t v = 0; v < got.size(); ++v) {
    if (std::isnan(want[v])) {
      EXPECT_TRUE(std::isnan(got[v])) << v;
    } else {
      EXPECT_EQ(got[v], want[v]) << v;
    }
  }
}

// Every element of an adjusted row against the float64 reference: prompt ids repeated and
// beyond the row, tokens generated several times, in the prompt or not, biased or not,
// positive, zero, negative and non-finite logits.
TEST(SamplerTest, LogitAdjustmentsMatchTheFloat64Reference) {
  std::vector<float> row = random_row(3000, 3, 6.0f);
  row[4] = 0.0f;
  row[5] = std::numeric_limits<float>::infinity();
  row[6] = -std::numeric_limits<float>::infinity();
  row[7] = std::numeric_limits<float>::quiet_NaN();
  const std::vector<int32_t> prompt = {4, 9, 9, 11, 5, 6, 7, 2999, 5000, 12};
  const std::vector<int32_t> output = {12, 13, 13, 13, 4, 5, 6, 7, 9, 40, 40};
  const std::vector<std::pair<int32_t, double>> bias = {{12, 3.25}, {4, -100.0}, {5, 1.0},
                                                        {7, 2.0},   {50, 100.0}, {9000, 5.0}};
  // clang-format off
  for (const auto& [presence, frequency, repetition, biased] :
       {std::tuple{0.5, 0.3, 1.3, false}, {-0.7, 0.0, 1.0, false}, {0.0, -1.1, 0.8, true},
        {0.0, 0.0, 2.5, false}, {2.0, 2.0, 1.0, true}, {0.0, 0.0, 1.0, true}}) {
    // clang-format on
    SamplingParams p = params(1.0);
    p.presence_penalty = presence;
    p.frequency_penalty = frequency;
    p.repetition_penalty = repetition;
    if (biased) p.logit_bias = bias;
    SCOPED_TRACE(::testing::Message()
                 << presence << " " << frequency << " " << repetition << " " << biased);
    LogitAdjustments adjustments(p, prompt);
    std::vector<float> got;
    adjustments.apply(row, got);  // nothing generated yet: the bias, the prompt's repetition
    expect_same_floats(got, testing::adjusted64(row, p, prompt, {}));
    for (int32_t token : output) adjustments.add_output(token);
    adjustments.apply(row, got);
    expect_same_floats(got, testing::adjusted64(row, p, prompt, output));
    const std::span<const LogitAdjust> entries = adjustments.entries();
    for (size_t i = 1; i < entries.size(); ++i) {
      EXPECT_LT(entries[i - 1].token, entries[i].token) << i;
    }
  }
}

// Greedy with penalties takes the argmax of the penalized row, counts its own tokens and
// reports the raw row's logprob; the forward backend's argmax could not serve it.
TEST(SamplerTest, GreedyPenaltiesMoveOffARepeatedToken) {
  std::vector<float> row = {0.0f, 1.0f, 0.0f, 0.0f, 0.0f, 3.0f, 2.6f, 0.5f};
  SamplingParams p = params(0.0);
  p.logprobs = true;
  p.frequency_penalty = 0.3;
  RequestSampler sampler(p, 1, std::vector<int32_t>{5});
  EXPECT_FALSE(sampler.argmax_only());
  EXPECT_TRUE(sampler.adjustments().empty());  // nothing generated yet
  std::vector<int32_t> tokens;
  for (int i = 0; i < 4; ++i) {
    const SampledToken t = sampler.sample(row);
    tokens.push_back(t.token_id);
    EXPECT_EQ(t.logprob, static_cast<float>(log_softmax_at(row, t.token_id)));
  }
  // 3.0 - 0.3 c5 against 2.6 - 0.3 c6, the prompt not counted: 5 (3.0), 5 (2.7), 6 (2.4 <
  // 2.6), 5 (2.4 > 2.3). Counting the prompt's 5 would give 5, 6, 5, 6.
  EXPECT_EQ(tokens, (std::vector<int32_t>{5, 5, 6, 5}));
  ASSERT_EQ(sampler.adjustments().size(), 2u);  // 5 (three times) and 6
  EXPECT_EQ(sampler.adjustments()[0].frequency, 0.3 * 3);
  EXPECT_EQ(sampler.adjustments()[1].token, 6);
  // The prompt's token 5 counts for repetition_penalty only: 3.0 / 1.25 = 2.4 < 2.6.
  SamplingParams r = params(0.0);
  r.repetition_penalty = 1.25;
  RequestSampler repeat(r, 1, std::vector<int32_t>{5});
  EXPECT_EQ(repeat.sample(row).token_id, 6);
  RequestSampler no_prompt(r, 1);
  EXPECT_EQ(no_prompt.sample(row).token_id, 5);
  // Without penalties nothing changes: argmax_only, and the same token every time.
  RequestSampler plain(params(0.0), 1, std::vector<int32_t>{5});
  EXPECT_TRUE(plain.argmax_only());
}

// logit_bias: +100 makes a token the greedy choice, -100 removes the row's best; the logprob
// stays the raw row's.
TEST(SamplerTest, LogitBiasSteersGreedy) {
  const std::vector<float> row = {0.0f, 1.0f, 4.0f, 0.5f};
  SamplingParams p = params(0.0);
  p.logprobs = true;
  p.logit_bias = {{3, 100.0}};
  RequestSampler forced(p, 1);
  EXPECT_FALSE(forced.argmax_only());
  const SampledToken t = forced.sample(row);
  EXPECT_EQ(t.token_id, 3);
  EXPECT_EQ(t.logprob, static_cast<float>(log_softmax_at(row, 3)));
  p.logit_bias = {{2, -100.0}};
  RequestSampler banned(p, 1);
  EXPECT_EQ(banned.sample(row).token_id, 1);
}

// min_tokens: the banned tokens' logits are -inf until that many tokens are accepted, then the
// entries are what the other adjustments alone give (a token's logit_bias stays); the logprob
// stays the raw row's.
TEST(SamplerTest, BanUntilKeepsStopTokensOutForMinTokens) {
  const std::vector<float> row = {0.0f, 1.0f, 4.0f, 0.5f};
  SamplingParams p = params(0.0);
  p.logprobs = true;
  p.logit_bias = {{2, 1.0}};
  RequestSampler s(p, 1);
  s.ban_until(2, std::vector<int32_t>{2, 3});
  ASSERT_EQ(s.adjustments().size(), 2u);
  EXPECT_EQ(s.adjustments()[0].stages, kAdjustBias | kAdjustBan);
  EXPECT_EQ(s.adjustments()[1].stages, kAdjustBan);
  for (int i = 0; i < 2; ++i) {
    const SampledToken t = s.sample(row);
    EXPECT_EQ(t.token_id, 1) << i;  // 2 and 3 banned
    EXPECT_EQ(t.logprob, static_cast<float>(log_softmax_at(row, 1)));
  }
  ASSERT_EQ(s.adjustments().size(), 1u);  // the ban is over; the bias stays
  EXPECT_EQ(s.adjustments()[0].token, 2);
  EXPECT_EQ(s.adjustments()[0].stages, kAdjustBias);
  EXPECT_EQ(s.sample(row).token_id, 2);
  // No ban without min_tokens or without tokens: a plain greedy sampler stays argmax-only.
  RequestSampler plain(params(0.0), 1);
  plain.ban_until(0, std::vector<int32_t>{2});
  plain.ban_until(3, {});
  EXPECT_TRUE(plain.argmax_only());
  // A banned token beside a penalty: counted outputs keep their penalty entries.
  SamplingParams pen = params(0.0);
  pen.presence_penalty = 1.0;
  RequestSampler penalized(pen, 1);
  penalized.ban_until(1, std::vector<int32_t>{2});
  EXPECT_EQ(penalized.sample(row).token_id, 1);
  ASSERT_EQ(penalized.adjustments().size(), 1u);
  EXPECT_EQ(penalized.adjustments()[0].token, 1);
  EXPECT_EQ(penalized.adjustments()[0].stages, kAdjustPenalty);
}

// With a temperature and cuts, the sampler draws from the penalized row: its candidates and
// its tokens (same seed) are those of a penalty-free sampler given the reference's row.
TEST(SamplerTest, PenaltiesApplyBeforeTemperatureAndCuts) {
  std::vector<float> row = random_row(500, 5, 3.0f);
  SamplingParams p = params(0.8, 40, 0.9, 0.01);
  p.logprobs = true;
  SamplingParams plain_params = p;
  p.presence_penalty = 0.6;
  p.frequency_penalty = 0.4;
  p.repetition_penalty = 1.2;
  p.logit_bias = {{7, 1.5}, {300, -2.0}};
  const std::vector<int32_t> prompt = {1, 2, 3, 100, 200};
  RequestSampler sampler(p, 99, prompt);
  RequestSampler plain(plain_params, 99);
  std::vector<int32_t> output;
  int moved = 0;  // steps whose kept set the penalties changed
  for (int i = 0; i < 30; ++i) {
    const std::vector<float> want_row = testing::adjusted64(row, p, prompt, output);
    const auto got = sampler.candidates(row);
    const auto want = plain.candidates(want_row);
    const auto raw = plain.candidates(row);
    moved += raw.size() != want.size() ||
             !std::equal(raw.begin(), raw.end(), want.begin(), [](const auto& a, const auto& b) {
               return a.token_id == b.token_id && a.prob == b.prob;
             });
    ASSERT_EQ(got.size(), want.size()) << i;
    for (size_t j = 0; j < got.size(); ++j) {
      EXPECT_EQ(got[j].token_id, want[j].token_id) << i;
      EXPECT_EQ(got[j].prob, want[j].prob) << i;
    }
    const SampledToken t = sampler.sample(row);
    EXPECT_EQ(t.token_id, plain.sample(want_row).token_id) << i;
    EXPECT_EQ(t.logprob, static_cast<float>(log_softmax_at(row, t.token_id))) << i;
    output.push_back(t.token_id);
  }
  EXPECT_GE(moved, 25);  // not a vacuous comparison
}

}  // namespace
}  // namespace packserve::engine
