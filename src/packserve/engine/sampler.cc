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
    const size_t k = params_.top_k > 0 ? std::min(out.size(), static_cast<size_t>(params_.top_k))
                                       : out.size();
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
  } else {
    scratch_ = candidates(logits);
    const double u = rng_.uniform();
    double cum = 0.0;
    result.token_id = scratch_.back().token_id;  // rounding fallback: the last kept token
    for (const Candidate& c : scratch_) {
      cum += c.prob;
      if (cum > u) {
        result.token_id = c.token_id;
        break;
      }
    }
  }
  result.logprob = static_cast<float>(log_softmax_at(logits, result.token_id));
  return result;
}

}  // namespace packserve::engine
