// sampler.cc: see sampler.h for the pipeline and its order.
#include "packserve/engine/sampler.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <functional>
#include <limits>

#include "packserve/common/argmax.h"
#include "packserve/common/target_clones.h"
#include "packserve/common/temperature_sample.h"

namespace packserve::engine {
namespace {

constexpr double kNegInf = -std::numeric_limits<double>::infinity();
constexpr float kNegInfF = -std::numeric_limits<float>::infinity();
using sample_math::block_sum;
using sample_math::exp_nonpositive;
using sample_math::kWeightBlock;

double finite_or_neg_inf(float x) { return std::isnan(x) ? kNegInf : static_cast<double>(x); }

bool is_greedy(const SamplingParams& params) {
  return params.temperature == 0.0 || params.top_k == 1;
}

// A row whose maximum is -inf (all NaN or -inf) or +inf: its candidates are the tokens at the
// maximum, equally likely.
bool degenerate_max(float m) {
  return m == kNegInfF || m == std::numeric_limits<float>::infinity();
}

// Sum of exp(x[i] - m) over i, for m >= every x[i] (NaN and -inf entries add 0): the terms by
// exp_nonpositive (relative error < 2e-7), summed in eight float32 lanes per block of
// kWeightBlock and the blocks in float64. The maximum contributes exactly 1.
PACKSERVE_AVX2_CLONES
double sum_exp_shifted(const float* x, size_t n, float m) {
  double total = 0.0;
  float terms[kWeightBlock];
  for (size_t begin = 0; begin < n; begin += kWeightBlock) {
    const size_t len = std::min(kWeightBlock, n - begin);
    for (size_t i = 0; i < len; ++i) terms[i] = exp_nonpositive(x[begin + i] - m);
    total += block_sum(terms, len);
  }
  return total;
}

// Sum of w[0, n) in float64 (four independent lanes: a fixed order).
PACKSERVE_AVX2_CLONES
double sum_f64(const float* w, size_t n) {
  double lanes[4] = {};
  size_t i = 0;
  for (; i + 4 <= n; i += 4) {
    for (size_t l = 0; l < 4; ++l) lanes[l] += static_cast<double>(w[i + l]);
  }
  double sum = (lanes[0] + lanes[1]) + (lanes[2] + lanes[3]);
  for (; i < n; ++i) sum += static_cast<double>(w[i]);
  return sum;
}

// Sum of the weights >= floor, in float32 lanes (an estimate: callers keep a margin).
PACKSERVE_AVX2_CLONES
float mass_at_least(const float* w, size_t n, float floor) { return block_sum(w, n, floor); }

// log_softmax_at with m = max_ignoring_nan(logits) already known.
double log_softmax_with_max(std::span<const float> logits, int32_t token, float m) {
  const double x_token = finite_or_neg_inf(logits[static_cast<size_t>(token)]);
  if (degenerate_max(m)) {
    // All -inf: uniform. Some +inf: uniform over the +inf entries.
    int64_t n = 0;
    for (float x : logits) n += (finite_or_neg_inf(x) == m) ? 1 : 0;
    return x_token == m ? -std::log(static_cast<double>(n)) : kNegInf;
  }
  return x_token - m - std::log(sum_exp_shifted(logits.data(), logits.size(), m));
}

}  // namespace

bool RequestSampler::argmax_only() const { return is_greedy(params_) && !params_.logprobs; }

bool RequestSampler::temperature_only() const {
  return !is_greedy(params_) && params_.top_k <= 0 && params_.top_p >= 1.0 && !params_.logprobs;
}

float RequestSampler::inv_temperature() const {
  return static_cast<float>(1.0 / params_.temperature);
}

float RequestSampler::min_p() const { return static_cast<float>(params_.min_p); }

TemperatureDraw RequestSampler::next_draw() { return {inv_temperature(), min_p(), rng_.uniform()}; }

double log_softmax_at(std::span<const float> logits, int32_t token) {
  return log_softmax_with_max(logits, token, max_ignoring_nan(logits));
}

double RequestSampler::fill_weights(std::span<const float> logits, float max_logit) {
  scratch_.weights.resize(logits.size());
  scratch_.block_sums.resize((logits.size() + kWeightBlock - 1) / kWeightBlock);
  return packserve::compute_weights(logits.data(), logits.size(), max_logit, inv_temperature(),
                                    min_p(), scratch_.weights.data(), scratch_.block_sums.data());
}

float RequestSampler::candidate_floor(double& total_all) const {
  const size_t n = scratch_.weights.size();
  if (params_.top_k > 0) {
    // The k-th largest weight is >= the k-th largest block maximum (those k maxima are k
    // distinct tokens), so no token of the top k lies below it.
    const size_t k = static_cast<size_t>(params_.top_k);
    const size_t num_blocks = scratch_.block_sums.size();
    if (k > num_blocks) return 0.0f;
    std::vector<float> block_max(num_blocks, 0.0f);
    for (size_t b = 0; b < num_blocks; ++b) {
      const size_t begin = b * kWeightBlock;
      const size_t end = std::min(n, begin + kWeightBlock);
      float mx = 0.0f;
      for (size_t i = begin; i < end; ++i) mx = scratch_.weights[i] > mx ? scratch_.weights[i] : mx;
      block_max[b] = mx;
    }
    std::nth_element(block_max.begin(), block_max.begin() + static_cast<std::ptrdiff_t>(k - 1),
                     block_max.end(), std::greater<float>());
    return block_max[k - 1];
  }
  // top-p alone: its set is a most-likely-first prefix of all tokens, so every weight >= a
  // floor whose tokens already hold the target mass covers it. Floors 2^-4, 2^-8, ... of the
  // largest weight (1); a relative margin covers the float32 estimate of the mass.
  total_all = sum_f64(scratch_.weights.data(), n);
  const double need = params_.top_p * total_all * (1.0 + 1e-5);
  for (int shift = 4; shift <= 64; shift *= 2) {
    const float floor = std::ldexp(1.0f, -shift);
    if (static_cast<double>(mass_at_least(scratch_.weights.data(), n, floor)) >= need) return floor;
  }
  return 0.0f;
}

void RequestSampler::order_and_cut(std::vector<Candidate>& kept, double total_all) const {
  if (params_.top_k <= 0 && params_.top_p >= 1.0) return;  // token-id order is kept
  // Weight order equals scaled-logit order (exp is monotone); ties by the lower id. A strict
  // total order, so "the k most likely" is one set whatever the selection algorithm.
  auto more_likely = [](const Candidate& a, const Candidate& b) {
    return a.prob != b.prob ? a.prob > b.prob : a.token_id < b.token_id;
  };
  const auto at = [&](size_t i) { return kept.begin() + static_cast<std::ptrdiff_t>(i); };
  size_t k = kept.size();
  if (params_.top_k > 0 && static_cast<size_t>(params_.top_k) < k) {
    k = static_cast<size_t>(params_.top_k);
    std::nth_element(kept.begin(), at(k - 1), kept.end(), more_likely);
    kept.resize(k);
  }
  if (params_.top_p >= 1.0) {
    std::sort(kept.begin(), kept.end(), more_likely);
    return;
  }
  // After top-k, the mass of the k kept; top-p alone: of every token, some not gathered.
  double total = total_all;
  if (params_.top_k > 0) {
    total = 0.0;
    for (const Candidate& c : kept) total += c.prob;
  }
  // Relative slack so a cut exactly on a cumulative sum is not lost to rounding.
  const double target = params_.top_p * total * (1.0 - 1e-12);
  // Sort a growing most-likely prefix until it holds the target mass: the top-p set of a
  // real next-token distribution is usually a few tokens of a vocabulary of 150k.
  size_t sorted = 0;
  size_t prefix = std::min(k, size_t{64});
  double cum = 0.0;
  for (;;) {
    if (prefix < k) std::nth_element(at(sorted), at(prefix - 1), kept.end(), more_likely);
    std::sort(at(sorted), at(prefix), more_likely);
    for (; sorted < prefix; ++sorted) {
      cum += kept[sorted].prob;
      if (cum >= target) {
        kept.resize(sorted + 1);
        return;
      }
    }
    if (prefix == k) return;  // rounding: every token kept
    prefix = std::min(k, prefix * 8);
  }
}

std::vector<RequestSampler::Candidate> RequestSampler::candidates(std::span<const float> logits) {
  if (logits.empty()) return {};
  if (is_greedy(params_)) return {{argmax_lowest(logits), 1.0}};
  return candidates_below_max(logits, max_ignoring_nan(logits));
}

std::vector<RequestSampler::Candidate> RequestSampler::candidates_below_max(
    std::span<const float> logits, float m) {
  std::vector<Candidate> out;
  double total_all = 0.0;
  if (degenerate_max(m)) {
    for (size_t i = 0; i < logits.size(); ++i) {
      if (logits[i] == m) out.push_back({static_cast<int32_t>(i), 1.0});
    }
    total_all = static_cast<double>(out.size());
  } else {
    fill_weights(logits, m);
    // With top-k or top-p on, only tokens at or above a floor can be kept: gather those.
    const bool ordered = params_.top_k > 0 || params_.top_p < 1.0;
    const float floor = ordered ? candidate_floor(total_all) : 0.0f;
    for (size_t i = 0; i < scratch_.weights.size(); ++i) {
      const float w = scratch_.weights[i];
      if (w != 0.0f && w >= floor) out.push_back({static_cast<int32_t>(i), w});
    }
  }
  order_and_cut(out, total_all);
  double total = 0.0;
  for (const Candidate& c : out) total += c.prob;
  for (Candidate& c : out) c.prob /= total;
  return out;
}

SampledToken RequestSampler::sample(std::span<const float> logits) {
  SampledToken result;
  const float m = max_ignoring_nan(logits);  // one pass, shared by the draw and the logprob
  if (is_greedy(params_)) {
    result.token_id = first_index_of_max(logits, m);
  } else if (params_.top_k <= 0 && params_.top_p >= 1.0) {
    result.token_id = sample_temperature(logits, m, next_draw(), scratch_);
  } else {
    result.token_id = draw(candidates_below_max(logits, m));
  }
  // A full pass over the vocabulary: only when the request asked for logprobs.
  if (params_.logprobs) {
    result.logprob = static_cast<float>(log_softmax_with_max(logits, result.token_id, m));
  }
  return result;
}

int32_t RequestSampler::draw(const std::vector<Candidate>& kept) {
  const double u = rng_.uniform();
  double cum = 0.0;
  for (const Candidate& c : kept) {
    cum += c.prob;
    if (cum > u) return c.token_id;
  }
  return kept.back().token_id;  // rounding fallback: the last kept token
}

}  // namespace packserve::engine
