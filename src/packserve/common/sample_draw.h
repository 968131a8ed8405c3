// sample_draw.h: one token from one row of logits by the sampling pipeline of engine/sampler.h
// (greedy, temperature, min-p, top-k, top-p, the draw, the raw logprob), as a pure function of
// (logits, SampleDraw). RequestSampler::sample is this function with the request's next draw;
// the CPU backend runs it for ForwardBatch::samples = kOutputSample rows, and the CUDA backend's
// sample_rows (model/cuda/ops.h) gives the same token ids on the device (tested), falling back
// to this function for the rows it does not take.
//
// Arithmetic, fixed so that the host and the GPU get the same bits (m = max_ignoring_nan):
//   greedy: first_index_of_max (common/argmax.h).
//   top_k == 0 and top_p == 1: sample_temperature (common/temperature_sample.h).
//   otherwise, m finite: weights w[i] and total_all by compute_weights (temperature and min-p).
//     Candidates: the tokens with w > 0, "most likely first" = (w desc, token id asc), a strict
//     total order. top-k keeps the first k; total = the kept w summed in that order
//     (float64) when top-k is on, else total_all. top-p keeps the shortest prefix whose running
//     float64 sum in that order reaches top_p * total * (1 - 1e-12) (every candidate when rounding
//     leaves it unreached). The kept weights are summed in order (float64) to s, p = w / s,
//     and the draw walks the kept in order, cum += p, until cum > u (the last kept token when
//     rounding leaves u unreached).
//   otherwise, m = +inf or -inf: the candidates are the tokens with logit == m, each of weight
//     1, ordered by token id; then as above (top-k and top-p over equal weights keep the
//     lowest ids); token 0 when there is none (every logit NaN).
//   logprob: logit[token] - m - log(sum_exp), sum_exp = the compute_weights total at
//     temperature 1 and min-p 0 (float64 log); uniform over the entries at m when m is
//     infinite (-inf for the others).
// Thread-safety: pure functions (the scratch is the caller's).
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "packserve/common/temperature_sample.h"

namespace packserve {

struct SampleCandidate {
  int32_t token_id;
  double prob;  // renormalized over the kept set
};

struct SampleResult {
  int32_t token_id = 0;
  float logprob = 0.0f;  // 0 unless draw.logprob
};

// The pipeline above on a non-empty row.
SampleResult sample_draw(std::span<const float> logits, const SampleDraw& draw,
                         TemperatureScratch& scratch);

// The kept tokens and their renormalized probabilities that a non-greedy draw walks, in the
// walk's order (most likely first when top-k or top-p is on, token-id order otherwise); for
// tests. m: max_ignoring_nan(logits).
std::vector<SampleCandidate> sample_candidates(std::span<const float> logits, float m,
                                               const SampleDraw& draw, TemperatureScratch& scratch);

// log_softmax(logits)[token] (NaN entries count as -inf), |error| < 2e-6: float32 exponentials,
// float64 sum. m: max_ignoring_nan(logits).
double log_softmax_with_max(std::span<const float> logits, int32_t token, float m);

}  // namespace packserve
