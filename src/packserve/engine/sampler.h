// sampler.h: turns one row of logits into one token (issue 4 "Forward and sampling").
//
// Pipeline, applied in this order (vLLM v1's order):
//   1. temperature == 0 (or top_k == 1): greedy, the argmax; ties go to the lowest token id.
//   2. scale logits by 1 / temperature; weights w = exp(scaled - max) (float32, our own
//      polynomial exp: relative error < 1e-6, the same bits on every machine), p = w / sum(w).
//   3. min-p: drop tokens with p < min_p * max(p), i.e. w < min_p.
//   4. top-k: keep the k most likely survivors.
//   5. top-p: of the survivors renormalized, keep the smallest most-likely-first prefix whose
//      mass is >= top_p (always at least one token).
//   6. draw u ~ U[0, 1) from the request's own RNG and walk the kept tokens until their
//      cumulative (renormalized) mass exceeds u: most likely first when top-k or top-p is on
//      (only tokens above a floor that the kept set cannot go below are gathered, and the
//      cuts are found by halving with nth_element), in token-id order otherwise (no sort and
//      no candidate list: per-block sums of the weights find the block, then one block is
//      walked).
// "Most likely first" orders by (scaled logit desc, token id asc), so equal logits are broken
// by the lower id and the result is a pure function of (logits, params, RNG state).
// The arithmetic (top-k / top-p masses as exact integers, the temperature walk's float64 sums
// in a fixed order) is sample_draw's (common/sample_draw.h): a forward backend draws the same
// tokens (ForwardBatch::samples = kOutputSample).
// Cost per row of 151,936 logits: bench/cpu/sampler_bench.cc (docs/benchmarks.md).
// Determinism: each request owns its RNG (seeded from SamplingParams::seed) and draws exactly
// one uniform per non-greedy token, so a seed gives the same tokens whatever else is batched.
// Logprob: log_softmax of the raw, unmodified logits (no temperature, no filtering) at the
// sampled token -- what vLLM reports by default ("raw_logprobs"); the exponentials in float32 by
// the sampler's own polynomial (|error| < 2e-6, tested against float64 on 151,936 logits),
// summed in float64; computed only when SamplingParams::logprobs (one pass over the
// vocabulary, vectorized).
// Logit bias and penalties (SamplingParams::adjusts_logits): the row is first copied with them
// applied (LogitAdjustments), and the pipeline above runs on that copy; the logprob stays that
// of the raw logits (sample_draw_adjusted). sample() counts the token it returns as the
// request's output; a caller that had the backend draw the token counts it with accept().
// Thread-safety: one RequestSampler per request, used by one thread.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <vector>

#include "packserve/common/rng.h"
#include "packserve/common/sample_draw.h"
#include "packserve/common/temperature_sample.h"
#include "packserve/engine/engine.h"

namespace packserve::engine {

struct SampledToken {
  int32_t token_id = 0;
  float logprob = 0.0f;  // log_softmax(raw logits)[token_id]; 0 unless params.logprobs
};

// A request's logit bias and penalties (SamplingParams::adjusts_logits) as the list of
// common/logit_adjust.h, one entry per token they apply to, kept up to date as outputs are
// counted. In vLLM's order, each stage computed in float64 from the previous stage's float and
// rounded to float: x + bias for a token of logit_bias; then
// x > 0 ? x / repetition : x * repetition for a token of the prompt or the output
// (repetition_penalty != 1); then x - frequency_penalty * c - presence_penalty for a token
// generated c > 0 times; and -inf for a banned token (ban()). Ids outside the row are ignored.
class LogitAdjustments {
 public:
  LogitAdjustments(const SamplingParams& params, std::span<const int32_t> prompt_token_ids);
  // tokens get -inf until `outputs` more tokens are counted (min_tokens: the stop tokens).
  void ban(std::span<const int32_t> tokens, int32_t outputs);
  // Counts a generated token (where a penalty needs the counts or a ban ends).
  void add_output(int32_t token);
  // out = logits with the bias and the penalties applied.
  void apply(std::span<const float> logits, std::vector<float>& out) const;
  // The adjustments of the next row: distinct tokens in increasing order.
  std::span<const LogitAdjust> entries() const { return entries_; }

 private:
  size_t entry_of(int32_t token);  // the token's entry, inserted without stages if new
  double presence_, frequency_, repetition_;
  int32_t ban_left_ = 0;              // outputs until the banned tokens are allowed
  std::vector<LogitAdjust> entries_;  // by token
  std::vector<int32_t> counts_;       // [entries_.size()]: the token's count in the output
};

class RequestSampler {
 public:
  // prompt_token_ids: what repetition_penalty applies to besides the output (not kept when it
  // is 1).
  RequestSampler(const SamplingParams& params, uint64_t seed,
                 std::span<const int32_t> prompt_token_ids = {});

  // logits: [vocab_size], non-empty. Non-finite logits: NaN counts as -inf; +inf entries win.
  // sample_draw (common/sample_draw.h) of the logits with next_draw().
  SampledToken sample(std::span<const float> logits);
  // Greedy without logprobs: sample() is argmax_lowest (common/argmax.h) of the logits and
  // draws nothing from the RNG, so the caller may take the argmax from the forward backend
  // (ForwardBatch::samples = kOutputArgmax) and never call sample() for this request.
  // False with a logit bias or penalties.
  bool argmax_only() const;
  // No logit bias, penalties or min_tokens' ban: each token is the draw of next_draw() from its
  // raw row (its argmax when greedy), logprobs or not.
  bool unadjusted() const { return !adjust_.has_value(); }
  // The logit bias and penalties of the next token (empty without them): a caller that passes
  // next_draw() to the forward backend passes these with it (ForwardBatch::adjusts) and then
  // hands the backend's token to accept().
  std::span<const LogitAdjust> adjustments() const {
    return adjust_.has_value() ? adjust_->entries() : std::span<const LogitAdjust>{};
  }
  // min_tokens: `tokens` (the request's stop tokens) cannot be drawn until min_tokens tokens
  // were accepted; none with min_tokens = 0 or no tokens.
  void ban_until(int32_t min_tokens, std::span<const int32_t> tokens);
  // Counts a token the forward backend drew (sample() counts its own) for the penalties.
  void accept(int32_t token) {
    if (adjust_.has_value()) adjust_->add_output(token);
  }
  // The parameters of this request's next token (SampleDraw, common/temperature_sample.h);
  // draws its one uniform from the RNG unless greedy, as sample() does for that token. A
  // caller may pass it to the forward backend (ForwardBatch::samples = kOutputSample), take
  // its token, logprob and top_logprobs (the request's SamplingParams::top_logprobs), and never
  // call sample() for this token.
  SampleDraw next_draw();
  // The draws of this request's next out.size() tokens, as next_draw() would give them one after
  // the other, drawing nothing from the RNG: a caller that has the backend draw speculative
  // drafts' rows (ForwardBatch::extra_draws) passes them, and then skip_draws() the tokens it
  // keeps, so that each token has the uniform it would have without drafts.
  void peek_draws(std::span<SampleDraw> out) const;
  // Draws the uniforms of n tokens from the RNG, as n calls of next_draw() (nothing when greedy).
  void skip_draws(int32_t n);

  // The kept tokens and their renormalized probabilities (in the draw's walk order) that
  // sample() would draw from; for tests and debugging. Greedy gives the single argmax with
  // p = 1. Draws nothing from the RNG.
  using Candidate = SampleCandidate;
  std::vector<Candidate> candidates(std::span<const float> logits);

 private:
  SampleDraw draw_params() const;  // next_draw() without its uniform
  SamplingParams params_;
  Rng rng_;
  TemperatureScratch scratch_;  // weights [vocab] and their block sums, reused per token
  std::optional<LogitAdjustments> adjust_;  // params_.adjusts_logits() or ban_until()
  std::vector<float> adjusted_;             // the row with the bias and penalties, reused per token
};

// log_softmax(logits)[token] (NaN entries count as -inf), |error| < 2e-6: float32 exponentials,
// float64 sum.
double log_softmax_at(std::span<const float> logits, int32_t token);

}  // namespace packserve::engine
