// sampler.cc: see sampler.h; the arithmetic is sample_draw's (common/sample_draw.h).
#include "packserve/engine/sampler.h"

#include <algorithm>

#include "packserve/common/argmax.h"

namespace packserve::engine {
namespace {

bool is_greedy(const SamplingParams& params) {
  return params.temperature == 0.0 || params.top_k == 1;
}

}  // namespace

LogitAdjustments::LogitAdjustments(const SamplingParams& params,
                                   std::span<const int32_t> prompt_token_ids)
    : presence_(params.presence_penalty),
      frequency_(params.frequency_penalty),
      repetition_(params.repetition_penalty),
      bias_(params.logit_bias) {
  if (repetition_ != 1.0) {
    prompt_ids_.assign(prompt_token_ids.begin(), prompt_token_ids.end());
    std::sort(prompt_ids_.begin(), prompt_ids_.end());
    prompt_ids_.erase(std::unique(prompt_ids_.begin(), prompt_ids_.end()), prompt_ids_.end());
  }
}

void LogitAdjustments::apply(std::span<const float> logits, std::vector<float>& out) const {
  out.assign(logits.begin(), logits.end());
  const auto in_row = [&](int32_t token) {
    return token >= 0 && static_cast<size_t>(token) < out.size();
  };
  for (const auto& [token, bias] : bias_) {
    if (!in_row(token)) continue;
    float& x = out[static_cast<size_t>(token)];
    x = static_cast<float>(static_cast<double>(x) + bias);
  }
  if (repetition_ != 1.0) {
    const auto repeat = [&](int32_t token) {
      const double x = out[static_cast<size_t>(token)];
      out[static_cast<size_t>(token)] =
          static_cast<float>(x > 0.0 ? x / repetition_ : x * repetition_);
    };
    for (int32_t token : prompt_ids_) {
      if (in_row(token)) repeat(token);
    }
    for (const auto& [token, count] : output_counts_) {
      if (in_row(token) && !std::binary_search(prompt_ids_.begin(), prompt_ids_.end(), token)) {
        repeat(token);
      }
    }
  }
  if (presence_ == 0.0 && frequency_ == 0.0) return;
  for (const auto& [token, count] : output_counts_) {
    if (!in_row(token)) continue;
    float& y = out[static_cast<size_t>(token)];
    y = static_cast<float>(static_cast<double>(y) - frequency_ * count - presence_);
  }
}

RequestSampler::RequestSampler(const SamplingParams& params, uint64_t seed,
                               std::span<const int32_t> prompt_token_ids)
    : params_(params), rng_(seed) {
  if (params.adjusts_logits()) adjust_.emplace(params, prompt_token_ids);
}

bool RequestSampler::argmax_only() const {
  return is_greedy(params_) && !params_.logprobs && !adjust_.has_value();
}

SampleDraw RequestSampler::draw_params() const {
  SampleDraw d;
  d.logprob = params_.logprobs ? 1 : 0;
  d.greedy = is_greedy(params_) ? 1 : 0;
  if (d.greedy) return d;
  d.inv_temperature = static_cast<float>(1.0 / params_.temperature);
  d.min_p = static_cast<float>(params_.min_p);
  d.top_k = params_.top_k;
  d.top_p = params_.top_p;
  return d;
}

SampleDraw RequestSampler::next_draw() {
  SampleDraw d = draw_params();
  if (!d.greedy) d.u = rng_.uniform();
  return d;
}

SampledToken RequestSampler::sample(std::span<const float> logits) {
  if (!adjust_.has_value()) {
    const SampleResult r = sample_draw(logits, next_draw(), scratch_);
    return {r.token_id, r.logprob};
  }
  adjust_->apply(logits, adjusted_);
  SampleDraw draw = next_draw();
  draw.logprob = 0;  // the raw row's, below
  const SampleResult r = sample_draw(adjusted_, draw, scratch_);
  adjust_->add_output(r.token_id);
  return {r.token_id,
          params_.logprobs ? static_cast<float>(log_softmax_at(logits, r.token_id)) : 0.0f};
}

std::vector<RequestSampler::Candidate> RequestSampler::candidates(std::span<const float> logits) {
  if (logits.empty()) return {};
  if (adjust_.has_value()) {
    adjust_->apply(logits, adjusted_);
    logits = adjusted_;
  }
  if (is_greedy(params_)) return {{argmax_lowest(logits), 1.0}};
  return sample_candidates(logits, max_ignoring_nan(logits), draw_params(), scratch_);
}

double log_softmax_at(std::span<const float> logits, int32_t token) {
  return log_softmax_with_max(logits, token, max_ignoring_nan(logits));
}

}  // namespace packserve::engine
