// sampler.cc: see sampler.h for the pipeline and its order.
#include "packserve/engine/sampler.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace packserve::engine {
namespace {

constexpr double kNegInf = -std::numeric_limits<double>::infinity();

double finite_or_neg_inf(float x) { return std::isnan(x) ? kNegInf : static_cast<double>(x); }

bool is_greedy(const SamplingParams& params) {
  return params.temperature == 0.0 || params.top_k == 1;
}

}  // namespace

int32_t argmax_lowest(std::span<const float> logits) {
  int32_t best = 0;
  double best_value = kNegInf;
  bool found = false;
  for (size_t i = 0; i < logits.size(); ++i) {
    const double v = finite_or_neg_inf(logits[i]);
    if (!found || v > best_value) {  // strict: ties keep the lower index
      best = static_cast<int32_t>(i);
      best_value = v;
      found = true;
    }
  }
  return best;
}

double log_softmax_at(std::span<const float> logits, int32_t token) {
  double m = kNegInf;
  for (float x : logits) m = std::max(m, finite_or_neg_inf(x));
  const double x_token = finite_or_neg_inf(logits[static_cast<size_t>(token)]);
  if (std::isinf(m)) {
    // All -inf: uniform. Some +inf: uniform over the +inf entries.
    int64_t n = 0;
    for (float x : logits) n += (finite_or_neg_inf(x) == m) ? 1 : 0;
    return x_token == m ? -std::log(static_cast<double>(n)) : kNegInf;
  }
  double z = 0.0;
  for (float x : logits) z += std::exp(finite_or_neg_inf(x) - m);
  return x_token - m - std::log(z);
}

std::vector<RequestSampler::Candidate> RequestSampler::candidates(
    std::span<const float> logits) const {
  std::vector<Candidate> out;
  if (logits.empty()) return out;
  if (is_greedy(params_)) {
    out.push_back({argmax_lowest(logits), 1.0});
    return out;
  }
  const double inv_t = 1.0 / params_.temperature;
  double m = kNegInf;
  for (float x : logits) m = std::max(m, finite_or_neg_inf(x));
  if (m == kNegInf || m == std::numeric_limits<double>::infinity()) {
    // Degenerate rows: every token at the maximum is equally likely.
    for (size_t i = 0; i < logits.size(); ++i) {
      if (finite_or_neg_inf(logits[i]) == m) out.push_back({static_cast<int32_t>(i), 1.0});
    }
  } else {
    // Weights relative to the most likely token (its weight is 1), so min-p compares directly.
    for (size_t i = 0; i < logits.size(); ++i) {
      const double w = std::exp((finite_or_neg_inf(logits[i]) - m) * inv_t);
      if (w > 0.0 && w >= params_.min_p) out.push_back({static_cast<int32_t>(i), w});
    }
  }
  const bool need_order = params_.top_k > 0 || params_.top_p < 1.0;
  if (need_order) {
    // Weight order equals scaled-logit order (exp is monotone); ties by the lower id.
    auto more_likely = [](const Candidate& a, const Candidate& b) {
      return a.prob != b.prob ? a.prob > b.prob : a.token_id < b.token_id;
    };
    const size_t k =
        params_.top_k > 0 ? std::min(out.size(), static_cast<size_t>(params_.top_k)) : out.size();
    std::partial_sort(out.begin(), out.begin() + static_cast<std::ptrdiff_t>(k), out.end(),
                      more_likely);
    out.resize(k);
    if (params_.top_p < 1.0) {
      double total = 0.0;
      for (const Candidate& c : out) total += c.prob;
      // Relative slack so a cut exactly on a cumulative sum is not lost to rounding.
      const double target = params_.top_p * total * (1.0 - 1e-12);
      double cum = 0.0;
      size_t keep = out.size();
      for (size_t i = 0; i < out.size(); ++i) {
        cum += out[i].prob;
        if (cum >= target) {
          keep = i + 1;
          break;
        }
      }
      out.resize(std::max<size_t>(keep, 1));
    }
  }
  double total = 0.0;
  for (const Candidate& c : out) total += c.prob;
  for (Candidate& c : out) c.prob /= total;
  return out;
}

SampledToken RequestSampler::sample(std::span<const float> logits) {
  SampledToken result;
  if (is_greedy(params_)) {
    result.token_id = argmax_lowest(logits);
  } else if (params_.top_k <= 0 && params_.top_p >= 1.0) {
    // No ordering needed (the common temperature-only case): the same walk in token-id order
    // as candidates() gives, over unnormalized weights in a reused buffer, with no candidate
    // list built per token (151,936 entries for Qwen3).
    const double inv_t = 1.0 / params_.temperature;
    double m = kNegInf;
    for (float x : logits) m = std::max(m, finite_or_neg_inf(x));
    if (m == kNegInf || m == std::numeric_limits<double>::infinity()) {
      scratch_ = candidates(logits);  // degenerate rows: the rare path
      result.token_id = draw(scratch_);
    } else {
      weights_.resize(logits.size());
      double total = 0.0;
      for (size_t i = 0; i < logits.size(); ++i) {
        double w = std::exp((finite_or_neg_inf(logits[i]) - m) * inv_t);
        if (!(w > 0.0 && w >= params_.min_p)) w = 0.0;
        weights_[i] = w;
        total += w;
      }
      const double target = rng_.uniform() * total;
      double cum = 0.0;
      result.token_id = -1;
      for (size_t i = 0; i < weights_.size(); ++i) {
        if (weights_[i] == 0.0) continue;
        result.token_id = static_cast<int32_t>(i);  // rounding fallback: the last kept token
        cum += weights_[i];
        if (cum > target) break;
      }
    }
  } else {
    scratch_ = candidates(logits);
    result.token_id = draw(scratch_);
  }
  // A full pass over the vocabulary: only when the request asked for logprobs.
  if (params_.logprobs) {
    result.logprob = static_cast<float>(log_softmax_at(logits, result.token_id));
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
