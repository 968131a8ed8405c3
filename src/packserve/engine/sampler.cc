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
      repetition_(params.repetition_penalty) {
  for (const auto& [token, bias] : params.logit_bias) {
    LogitAdjust a;
    a.token = token;
    a.stages = kAdjustBias;
    a.bias = bias;
    entries_.push_back(a);
  }
  if (repetition_ != 1.0) {
    for (int32_t token : prompt_token_ids) {
      LogitAdjust a;
      a.token = token;
      a.stages = kAdjustRepetition;
      a.repetition = repetition_;
      entries_.push_back(a);
    }
  }
  // One entry per token: the first of a token's entries (its bias, when it has one: ids are
  // distinct in logit_bias) takes the repetition of its prompt entries.
  std::stable_sort(entries_.begin(), entries_.end(),
                   [](const LogitAdjust& x, const LogitAdjust& y) { return x.token < y.token; });
  size_t kept = 0;
  for (size_t i = 0; i < entries_.size(); ++i) {
    if (kept > 0 && entries_[kept - 1].token == entries_[i].token) {
      if (entries_[i].stages & kAdjustRepetition) {
        entries_[kept - 1].stages |= kAdjustRepetition;
        entries_[kept - 1].repetition = repetition_;
      }
      continue;
    }
    entries_[kept++] = entries_[i];
  }
  entries_.resize(kept);
  counts_.assign(entries_.size(), 0);
}

size_t LogitAdjustments::entry_of(int32_t token) {
  auto it = std::lower_bound(entries_.begin(), entries_.end(), token,
                             [](const LogitAdjust& a, int32_t t) { return a.token < t; });
  const auto i = static_cast<size_t>(it - entries_.begin());
  if (it == entries_.end() || it->token != token) {
    LogitAdjust a;
    a.token = token;
    entries_.insert(it, a);
    counts_.insert(counts_.begin() + static_cast<std::ptrdiff_t>(i), 0);
  }
  return i;
}

void LogitAdjustments::ban(std::span<const int32_t> tokens, int32_t outputs) {
  if (outputs <= 0) return;
  ban_left_ = outputs;
  for (const int32_t token : tokens) entries_[entry_of(token)].stages |= kAdjustBan;
}

void LogitAdjustments::add_output(int32_t token) {
  if (ban_left_ > 0 && --ban_left_ == 0) {
    // The ban ends: entries left without a stage go (their counts are 0: a counted token
    // has a penalty stage).
    size_t kept = 0;
    for (size_t i = 0; i < entries_.size(); ++i) {
      entries_[i].stages &= ~kAdjustBan;
      if (entries_[i].stages == 0) continue;
      entries_[kept] = entries_[i];
      counts_[kept++] = counts_[i];
    }
    entries_.resize(kept);
    counts_.resize(kept);
  }
  const bool penalty = presence_ != 0.0 || frequency_ != 0.0;
  if (!penalty && repetition_ == 1.0) return;
  const size_t i = entry_of(token);
  LogitAdjust& a = entries_[i];
  const int32_t count = ++counts_[i];
  if (repetition_ != 1.0) {
    a.stages |= kAdjustRepetition;
    a.repetition = repetition_;
  }
  if (penalty) {
    a.stages |= kAdjustPenalty;
    a.frequency = frequency_ * count;
    a.presence = presence_;
  }
}

void LogitAdjustments::apply(std::span<const float> logits, std::vector<float>& out) const {
  out.assign(logits.begin(), logits.end());
  apply_adjusts(entries_, out);
}

RequestSampler::RequestSampler(const SamplingParams& params, uint64_t seed,
                               std::span<const int32_t> prompt_token_ids)
    : params_(params), rng_(seed) {
  if (params.adjusts_logits()) adjust_.emplace(params, prompt_token_ids);
}

void RequestSampler::ban_until(int32_t min_tokens, std::span<const int32_t> tokens) {
  if (min_tokens <= 0 || tokens.empty()) return;
  if (!adjust_.has_value()) adjust_.emplace(params_, std::span<const int32_t>{});
  adjust_->ban(tokens, min_tokens);
}

bool RequestSampler::argmax_only() const {
  return is_greedy(params_) && unadjusted() && !params_.logprobs;
}

SampleDraw RequestSampler::draw_params() const {
  SampleDraw d;
  d.logprob = params_.logprobs ? 1 : 0;
  d.top_logprobs = static_cast<uint8_t>(params_.top_logprobs);  // <= kMaxTopLogprobs (submit)
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

void RequestSampler::peek_draws(std::span<SampleDraw> out) const {
  Rng ahead = rng_;
  for (SampleDraw& d : out) {
    d = draw_params();
    if (!d.greedy) d.u = ahead.uniform();
  }
}

void RequestSampler::skip_draws(int32_t n) {
  if (is_greedy(params_)) return;
  for (int32_t i = 0; i < n; ++i) rng_.uniform();
}

SampledToken RequestSampler::sample(std::span<const float> logits) {
  const SampleResult r =
      sample_draw_adjusted(logits, adjustments(), next_draw(), adjusted_, scratch_);
  accept(r.token_id);
  return {r.token_id, r.logprob};
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
