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
//      (only tokens above a floor that the kept set cannot go below are gathered, and only
//      the kept prefix is sorted), in token-id order otherwise (no sort and no candidate
//      list: per-block sums of the weights find the block, then one block is walked).
// "Most likely first" orders by (scaled logit desc, token id asc), so equal logits are broken
// by the lower id and the result is a pure function of (logits, params, RNG state).
// Cost per row of 151,936 logits: bench/cpu/sampler_bench.cc (docs/benchmarks.md).
// Determinism: each request owns its RNG (seeded from SamplingParams::seed) and draws exactly
// one uniform per non-greedy token, so a seed gives the same tokens whatever else is batched.
// Logprob: log_softmax of the raw, unmodified logits (no temperature, no filtering) at the
// sampled token -- what vLLM reports by default ("raw_logprobs"); the exponentials in float32 by
// the sampler's own polynomial (|error| < 2e-6, tested against float64 on 151,936 logits),
// summed in float64; computed only when SamplingParams::logprobs (one pass over the
// vocabulary, vectorized).
// Thread-safety: one RequestSampler per request, used by one thread.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "packserve/common/rng.h"
#include "packserve/common/temperature_sample.h"
#include "packserve/engine/engine.h"

namespace packserve::engine {

struct SampledToken {
  int32_t token_id = 0;
  float logprob = 0.0f;  // log_softmax(raw logits)[token_id]; 0 unless params.logprobs
};

class RequestSampler {
 public:
  RequestSampler(const SamplingParams& params, uint64_t seed) : params_(params), rng_(seed) {}

  // logits: [vocab_size], non-empty. Non-finite logits: NaN counts as -inf; +inf entries win.
  SampledToken sample(std::span<const float> logits);
  // Greedy without logprobs: sample() is argmax_lowest (common/argmax.h) of the logits and
  // draws nothing from the RNG, so the caller may take the argmax from the forward backend
  // (ForwardBatch::samples = kOutputArgmax) and never call sample() for this request.
  bool argmax_only() const;
  // Temperature (and min-p) without top-k, top-p or logprobs: sample() is
  // sample_temperature (common/temperature_sample.h) of the logits with next_draw(), so the
  // caller may pass next_draw() to the forward backend (ForwardBatch::samples =
  // kOutputSample), take its token, and never call sample() for this request.
  bool temperature_only() const;
  // The parameters of this request's next temperature draw; draws its one uniform from the
  // RNG, as sample() does for that token.
  TemperatureDraw next_draw();

  // The kept tokens and their renormalized probabilities (most likely first) that sample()
  // would draw from; for tests and debugging. Greedy gives the single argmax with p = 1.
  struct Candidate {
    int32_t token_id;
    double prob;
  };
  std::vector<Candidate> candidates(std::span<const float> logits);

 private:
  // candidates() of a non-greedy row whose maximum logit (NaN ignored) is m.
  std::vector<Candidate> candidates_below_max(std::span<const float> logits, float m);
  // Steps 2-3 into scratch_.weights (0 = dropped) and scratch_.block_sums; returns the sum of
  // the weights. `max_logit`: the finite maximum of the logits (NaN counting as -inf).
  double fill_weights(std::span<const float> logits, float max_logit);
  float inv_temperature() const;  // (float) (1 / temperature), as the weights use it
  float min_p() const;
  // A weight below which no token survives steps 4-5 (0 = none found): top-k from block
  // maxima, top-p from the mass at or above powers of two. For top-p alone, also sets
  // total_all to the float64 sum of all weights (its cut is relative to that).
  float candidate_floor(double& total_all) const;
  // Steps 4-5 on `kept` (weights > 0, any order: every token at or above candidate_floor)
  // -> most likely first. total_all: for top-p alone, the sum of all weights (its cut is
  // relative to every token, gathered or not); unused otherwise.
  void order_and_cut(std::vector<Candidate>& kept, double total_all) const;
  // One uniform from the RNG, walked over `kept` (renormalized probabilities).
  int32_t draw(const std::vector<Candidate>& kept);

  SamplingParams params_;
  Rng rng_;
  TemperatureScratch scratch_;  // weights [vocab] and their block sums, reused per token
};

// log_softmax(logits)[token] (NaN entries count as -inf), |error| < 2e-6: float32 exponentials,
// float64 sum.
double log_softmax_at(std::span<const float> logits, int32_t token);

}  // namespace packserve::engine
