// sample_draw.cc: sample_draw, sample_candidates and log_softmax_with_max of sample_draw.h; the
// arithmetic is written there.
#include "packserve/common/sample_draw.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>

#include "packserve/common/argmax.h"
#include "packserve/common/target_clones.h"

namespace packserve {
namespace {

constexpr double kNegInf = -std::numeric_limits<double>::infinity();
constexpr float kNegInfF = -std::numeric_limits<float>::infinity();
using sample_math::block_sum;
using sample_math::exp_nonpositive;
using sample_math::kWeightBlock;

double finite_or_neg_inf(float x) { return std::isnan(x) ? kNegInf : static_cast<double>(x); }

// A row whose maximum is -inf (all NaN or -inf) or +inf: its candidates are the tokens at the
// maximum, equally likely.
bool degenerate_max(float m) {
  return m == kNegInfF || m == std::numeric_limits<float>::infinity();
}

bool ordered(const SampleDraw& d) { return d.top_k > 0 || d.top_p < 1.0; }

// compute_weights' total at temperature 1 and min-p 0 (the same terms and order) without
// storing the weights: exp(x[i] - m) by exp_nonpositive, eight float32 lanes per block of
// kWeightBlock, the blocks in float64. The maximum contributes exactly 1.
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

// Sum of the weights >= floor, in float32 lanes (an estimate: callers keep a margin).
PACKSERVE_AVX2_CLONES
float mass_at_least(const float* w, size_t n, float floor) { return block_sum(w, n, floor); }

// A weight below which no kept token lies (0 = none found): for top-k the k-th largest block
// maximum (those k maxima are k distinct tokens), for top-p alone the largest of 2^-4, 2^-8,
// ... (of the largest weight, 1) at or above which the weights already hold the top-p mass,
// with a relative margin for the float32 estimate. Any valid floor gives the same result.
float candidate_floor(std::span<const float> w, std::span<const double> block_sums,
                      double total_all, const SampleDraw& d) {
  const size_t n = w.size();
  if (d.top_k > 0) {
    const size_t k = static_cast<size_t>(d.top_k);
    const size_t num_blocks = block_sums.size();
    if (k > num_blocks) return 0.0f;
    std::vector<float> block_max(num_blocks, 0.0f);
    for (size_t b = 0; b < num_blocks; ++b) {
      const size_t begin = b * kWeightBlock;
      const size_t end = std::min(n, begin + kWeightBlock);
      float mx = 0.0f;
      for (size_t i = begin; i < end; ++i) mx = w[i] > mx ? w[i] : mx;
      block_max[b] = mx;
    }
    std::nth_element(block_max.begin(), block_max.begin() + static_cast<std::ptrdiff_t>(k - 1),
                     block_max.end(), std::greater<float>());
    return block_max[k - 1];
  }
  const double need = d.top_p * total_all * (1.0 + 1e-5);
  for (int shift = 4; shift <= 64; shift *= 2) {
    const float floor = std::ldexp(1.0f, -shift);
    if (static_cast<double>(mass_at_least(w.data(), n, floor)) >= need) return floor;
  }
  return 0.0f;
}

// Top-k and top-p on `kept` (every token at or above a valid floor, any order): leaves the
// kept set most likely first. total_all: the sum of all weights (top-p alone cuts relative
// to every token, gathered or not).
void order_and_cut(std::vector<SampleCandidate>& kept, double total_all, const SampleDraw& d) {
  // Weight order equals scaled-logit order (exp is monotone); ties by the lower id.
  auto more_likely = [](const SampleCandidate& a, const SampleCandidate& b) {
    return a.prob != b.prob ? a.prob > b.prob : a.token_id < b.token_id;
  };
  const auto at = [&](size_t i) { return kept.begin() + static_cast<std::ptrdiff_t>(i); };
  size_t k = kept.size();
  double total = total_all;
  if (d.top_k > 0) {
    if (static_cast<size_t>(d.top_k) < k) {
      k = static_cast<size_t>(d.top_k);
      std::nth_element(kept.begin(), at(k - 1), kept.end(), more_likely);
      kept.resize(k);
    }
    std::sort(kept.begin(), kept.end(), more_likely);
    total = 0.0;
    for (const SampleCandidate& c : kept) total += c.prob;
  }
  if (d.top_p >= 1.0) {
    std::sort(kept.begin(), kept.end(), more_likely);
    return;
  }
  // Relative slack so a cut exactly on a cumulative sum is not lost to rounding.
  const double target = d.top_p * total * (1.0 - 1e-12);
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

int32_t walk_kept(const std::vector<SampleCandidate>& kept, double u) {
  double cum = 0.0;
  for (const SampleCandidate& c : kept) {
    cum += c.prob;
    if (cum > u) return c.token_id;
  }
  return kept.back().token_id;  // rounding fallback: the last kept token
}

}  // namespace

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

std::vector<SampleCandidate> sample_candidates(std::span<const float> logits, float m,
                                               const SampleDraw& d, TemperatureScratch& scratch) {
  std::vector<SampleCandidate> out;
  double total_all = 0.0;
  if (degenerate_max(m)) {
    for (size_t i = 0; i < logits.size(); ++i) {
      if (logits[i] == m) out.push_back({static_cast<int32_t>(i), 1.0});
    }
    total_all = static_cast<double>(out.size());
  } else {
    scratch.weights.resize(logits.size());
    scratch.block_sums.resize((logits.size() + kWeightBlock - 1) / kWeightBlock);
    total_all = compute_weights(logits.data(), logits.size(), m, d.inv_temperature, d.min_p,
                                scratch.weights.data(), scratch.block_sums.data());
    // With top-k or top-p on, only tokens at or above a floor can be kept: gather those.
    const float floor =
        ordered(d) ? candidate_floor(scratch.weights, scratch.block_sums, total_all, d) : 0.0f;
    for (size_t i = 0; i < scratch.weights.size(); ++i) {
      const float w = scratch.weights[i];
      if (w != 0.0f && w >= floor) out.push_back({static_cast<int32_t>(i), w});
    }
  }
  if (ordered(d)) order_and_cut(out, total_all, d);
  double total = 0.0;
  for (const SampleCandidate& c : out) total += c.prob;
  for (SampleCandidate& c : out) c.prob /= total;
  return out;
}

SampleResult sample_draw(std::span<const float> logits, const SampleDraw& d,
                         TemperatureScratch& scratch) {
  SampleResult result;
  const float m = max_ignoring_nan(logits);  // one pass, shared by the draw and the logprob
  if (d.greedy) {
    result.token_id = first_index_of_max(logits, m);
  } else if (!ordered(d)) {
    result.token_id = sample_temperature(logits, m, d, scratch);
  } else {
    const std::vector<SampleCandidate> kept = sample_candidates(logits, m, d, scratch);
    result.token_id = kept.empty() ? 0 : walk_kept(kept, d.u);  // empty: every logit NaN
  }
  // A full pass over the vocabulary: only when the request asked for logprobs.
  if (d.logprob)
    result.logprob = static_cast<float>(log_softmax_with_max(logits, result.token_id, m));
  return result;
}

}  // namespace packserve
