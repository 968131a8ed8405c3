// sampler.cc: see sampler.h; the arithmetic is sample_draw's (common/sample_draw.h).
#include "packserve/engine/sampler.h"

#include "packserve/common/argmax.h"

namespace packserve::engine {
namespace {

bool is_greedy(const SamplingParams& params) {
  return params.temperature == 0.0 || params.top_k == 1;
}

}  // namespace

bool RequestSampler::argmax_only() const { return is_greedy(params_) && !params_.logprobs; }

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
  const SampleResult r = sample_draw(logits, next_draw(), scratch_);
  return {r.token_id, r.logprob};
}

std::vector<RequestSampler::Candidate> RequestSampler::candidates(std::span<const float> logits) {
  if (logits.empty()) return {};
  if (is_greedy(params_)) return {{argmax_lowest(logits), 1.0}};
  return sample_candidates(logits, max_ignoring_nan(logits), draw_params(), scratch_);
}

double log_softmax_at(std::span<const float> logits, int32_t token) {
  return log_softmax_with_max(logits, token, max_ignoring_nan(logits));
}

}  // namespace packserve::engine
