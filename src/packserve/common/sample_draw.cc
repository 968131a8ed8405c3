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

// Masses of the weights >= 2^-4, 2^-8, ..., 2^-64 (the floors top-p alone may gather from)
// and of every weight.
struct FloorMasses {
  static constexpr int kFloors = 5;
  static constexpr float kFloor[kFloors] = {0x1p-4f, 0x1p-8f, 0x1p-16f, 0x1p-32f, 0x1p-64f};
  uint64_t at_least[kFloors] = {};
  uint64_t total = 0;
};

PACKSERVE_AVX2_CLONES
FloorMasses floor_masses(std::span<const float> w) {
  FloorMasses out;
  for (const float x : w) {
    const uint64_t mass = sample_math::weight_mass(x);
    out.total += mass;
    for (int f = 0; f < FloorMasses::kFloors; ++f) {
      out.at_least[f] += x >= FloorMasses::kFloor[f] ? mass : 0;
    }
  }
  return out;
}

// Weights below which no kept token lies (0 = none found); any such floor gives the same
// result. Top-k: the k-th largest block maximum (those k maxima are k distinct tokens).
float top_k_floor(std::span<const float> w, size_t num_blocks, int32_t top_k) {
  const size_t n = w.size();
  const size_t k = static_cast<size_t>(top_k);
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

// Top-p alone: the largest floor of FloorMasses whose weights hold the top-p mass.
float top_p_floor(const FloorMasses& masses, double top_p) {
  const uint64_t need = sample_math::top_p_need(top_p, masses.total);
  for (int f = 0; f < FloorMasses::kFloors; ++f) {
    if (masses.at_least[f] >= need) return FloorMasses::kFloor[f];
  }
  return 0.0f;
}

// In keys: the first key, most likely first, at which the running mass reaches need
// (1 <= need <= the keys' mass). Reorders the keys so that those before the returned index are
// the more likely ones (in no order); `reached`: the running mass through it. Halving by
// nth_element and summing the upper half: O(n) expected, where a sort is O(n log n) -- the
// top-p set of a near-flat distribution is most of the vocabulary.
size_t cut_by_mass(std::vector<uint64_t>& keys, uint64_t need, uint64_t& reached) {
  const auto at = [&](size_t i) { return keys.begin() + static_cast<std::ptrdiff_t>(i); };
  const std::greater<uint64_t> more_likely;
  size_t begin = 0, end = keys.size();
  uint64_t above = 0;  // the mass of keys[0, begin), each more likely than keys[begin, end)
  while (end - begin > 64) {
    const size_t mid = begin + (end - begin) / 2;
    std::nth_element(at(begin), at(mid), at(end), more_likely);
    uint64_t upper = 0;
    for (size_t i = begin; i <= mid; ++i) upper += sample_math::key_mass(keys[i]);
    if (above + upper >= need) {
      end = mid + 1;
    } else {
      above += upper;
      begin = mid + 1;
    }
  }
  std::sort(at(begin), at(end), more_likely);
  for (size_t i = begin; i < end; ++i) {
    above += sample_math::key_mass(keys[i]);
    if (above >= need) {
      reached = above;
      return i;
    }
  }
  reached = above;
  return end - 1;  // unreachable: need <= the keys' mass
}

// Top-k and top-p on `keys` (sample_key of every candidate at or above a valid floor, any
// order): leaves the kept keys (in no order) and returns their mass. total_all: the mass of
// every candidate, read by top-p alone (which cuts relative to every token, gathered or not).
uint64_t cut_kept(std::vector<uint64_t>& keys, uint64_t total_all, const SampleDraw& d) {
  uint64_t total = total_all;
  if (d.top_k > 0) {
    const size_t k = static_cast<size_t>(d.top_k);
    if (k < keys.size()) {
      std::nth_element(keys.begin(), keys.begin() + static_cast<std::ptrdiff_t>(k - 1), keys.end(),
                       std::greater<uint64_t>());
      keys.resize(k);
    }
    total = 0;
    for (const uint64_t key : keys) total += sample_math::key_mass(key);
  }
  if (d.top_p < 1.0) {
    const size_t cut = cut_by_mass(keys, sample_math::top_p_need(d.top_p, total), total);
    keys.resize(cut + 1);
  }
  return total;
}

// The kept keys, in no order, and their mass (> 0 when there is any).
struct Kept {
  std::vector<uint64_t> keys;
  uint64_t total = 0;
};

// The ordered pipeline's kept set (m: max_ignoring_nan(logits)); empty when every logit is NaN.
Kept kept_keys(std::span<const float> logits, float m, const SampleDraw& d,
               TemperatureScratch& scratch) {
  Kept out;
  uint64_t total_all = 0;
  if (degenerate_max(m)) {
    const uint64_t one = sample_math::weight_mass(1.0f);
    for (size_t i = 0; i < logits.size(); ++i) {
      if (logits[i] == m)
        out.keys.push_back(sample_math::sample_key(1.0f, static_cast<int32_t>(i)));
    }
    total_all = one * out.keys.size();
  } else {
    compute_weights(logits, m, d, scratch);
    // Only tokens at or above a floor can be kept: gather those.
    float floor = 0.0f;
    if (d.top_k > 0) {  // cut_kept sums the top-k mass itself
      floor = top_k_floor(scratch.weights, scratch.block_sums.size(), d.top_k);
    } else {
      const FloorMasses masses = floor_masses(scratch.weights);
      total_all = masses.total;
      floor = top_p_floor(masses, d.top_p);
    }
    for (size_t i = 0; i < scratch.weights.size(); ++i) {
      const float w = scratch.weights[i];
      if (w != 0.0f && w >= floor)
        out.keys.push_back(sample_math::sample_key(w, static_cast<int32_t>(i)));
    }
  }
  if (!out.keys.empty()) out.total = cut_kept(out.keys, total_all, d);
  return out;
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

std::vector<TopLogprob> top_logprobs(std::span<const float> logits, int k) {
  const size_t n = std::min(logits.size(), static_cast<size_t>(std::max(k, 0)));
  if (n == 0) return {};
  thread_local std::vector<int32_t> ids;
  ids.resize(logits.size());
  for (size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<int32_t>(i);
  auto more_likely = [&](int32_t a, int32_t b) {
    const double xa = finite_or_neg_inf(logits[static_cast<size_t>(a)]);
    const double xb = finite_or_neg_inf(logits[static_cast<size_t>(b)]);
    return xa > xb || (xa == xb && a < b);
  };
  std::partial_sort(ids.begin(), ids.begin() + static_cast<std::ptrdiff_t>(n), ids.end(),
                    more_likely);
  const float m = max_ignoring_nan(logits);
  std::vector<TopLogprob> out;
  out.reserve(n);
  if (degenerate_max(m)) {
    for (size_t i = 0; i < n; ++i) {
      out.push_back({ids[i], static_cast<float>(log_softmax_with_max(logits, ids[i], m))});
    }
    return out;
  }
  // log_softmax_with_max's expression, with its sum taken once.
  const double log_sum = std::log(sum_exp_shifted(logits.data(), logits.size(), m));
  for (size_t i = 0; i < n; ++i) {
    const double x = finite_or_neg_inf(logits[static_cast<size_t>(ids[i])]);
    out.push_back({ids[i], static_cast<float>(x - m - log_sum)});
  }
  return out;
}

RowScore score_row(std::span<const float> logits, int32_t target, int k) {
  RowScore s;
  s.logprob = static_cast<float>(log_softmax_with_max(logits, target, max_ignoring_nan(logits)));
  s.top = top_logprobs(logits, k);
  return s;
}

SampleResult sample_draw_adjusted(std::span<const float> logits,
                                  std::span<const LogitAdjust> adjusts, const SampleDraw& draw,
                                  std::vector<float>& adjusted, TemperatureScratch& scratch) {
  if (adjusts.empty()) return sample_draw(logits, draw, scratch);
  adjusted.assign(logits.begin(), logits.end());
  apply_adjusts(adjusts, adjusted);
  SampleDraw d = draw;
  d.logprob = 0;
  SampleResult r = sample_draw(adjusted, d, scratch);
  if (draw.logprob) {
    r.logprob =
        static_cast<float>(log_softmax_with_max(logits, r.token_id, max_ignoring_nan(logits)));
  }
  return r;
}

SampleResult sample_draw(std::span<const float> logits, const SampleDraw& draw) {
  thread_local TemperatureScratch scratch;
  return sample_draw(logits, draw, scratch);
}

SampleResult sample_draw_adjusted(std::span<const float> logits,
                                  std::span<const LogitAdjust> adjusts, const SampleDraw& draw) {
  thread_local std::vector<float> adjusted;
  thread_local TemperatureScratch scratch;
  return sample_draw_adjusted(logits, adjusts, draw, adjusted, scratch);
}

std::vector<SampleCandidate> sample_candidates(std::span<const float> logits, float m,
                                               const SampleDraw& d, TemperatureScratch& scratch) {
  std::vector<SampleCandidate> out;
  if (ordered(d)) {
    Kept kept = kept_keys(logits, m, d, scratch);
    std::sort(kept.keys.begin(), kept.keys.end(), std::greater<uint64_t>());
    for (const uint64_t key : kept.keys) {
      out.push_back({sample_math::key_token(key), static_cast<double>(sample_math::key_mass(key)) /
                                                      static_cast<double>(kept.total)});
    }
    return out;
  }
  // Temperature and min-p alone: every weight, in token-id order.
  if (degenerate_max(m)) {
    for (size_t i = 0; i < logits.size(); ++i) {
      if (logits[i] == m) out.push_back({static_cast<int32_t>(i), 1.0});
    }
  } else {
    compute_weights(logits, m, d, scratch);
    for (size_t i = 0; i < scratch.weights.size(); ++i) {
      if (scratch.weights[i] != 0.0f) out.push_back({static_cast<int32_t>(i), scratch.weights[i]});
    }
  }
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
    Kept kept = kept_keys(logits, m, d, scratch);
    if (!kept.keys.empty()) {  // empty: every logit NaN, token 0
      // The first kept key whose running mass exceeds the target.
      const uint64_t need = sample_math::draw_target(d.u, kept.total) + 1;
      uint64_t reached = 0;
      const size_t i = cut_by_mass(kept.keys, need, reached);
      result.token_id = sample_math::key_token(kept.keys[i]);
    }
  }
  // A full pass over the vocabulary: only when the request asked for logprobs.
  if (d.logprob)
    result.logprob = static_cast<float>(log_softmax_with_max(logits, result.token_id, m));
  return result;
}

}  // namespace packserve
