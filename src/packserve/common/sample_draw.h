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
//   otherwise: the weights w[i] by compute_weights (temperature and min-p) when m is finite;
//     when m = +inf or -inf, w = 1 for the tokens with logit == m and 0 elsewhere. Candidates:
//     the tokens with w > 0, "most likely first" = sample_key descending (w desc, token id asc;
//     temperature_sample.h), a strict total order. Masses are integers, weight_mass(w) =
//     floor(w * 2^40), added exactly, so no sum depends on an order. top-k keeps the first k
//     candidates; total = the kept mass (every candidate's when top-k is off or k exceeds
//     them). top-p keeps the shortest prefix whose mass reaches top_p_need(top_p, total) =
//     ceil(top_p * total * (1 - 1e-12)). The draw: S = the kept mass, target =
//     draw_target(u, S) = min(floor(u * S), S - 1); the token is the first kept one whose
//     running mass exceeds target. Token 0 when there is no candidate (every logit NaN).
//   logprob: logit[token] - m - log(sum_exp), sum_exp = the compute_weights total at
//     temperature 1 and min-p 0 (float64 log); uniform over the entries at m when m is
//     infinite (-inf for the others).
// Thread-safety: pure functions (the scratch is the caller's).
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "packserve/common/logit_adjust.h"
#include "packserve/common/temperature_sample.h"

namespace packserve {

struct SampleCandidate {
  int32_t token_id;
  double prob;  // renormalized over the kept set (mass / kept mass when top-k or top-p is on)
};

struct SampleResult {
  int32_t token_id = 0;
  float logprob = 0.0f;  // 0 unless draw.logprob
};

// The pipeline above on a non-empty row.
SampleResult sample_draw(std::span<const float> logits, const SampleDraw& draw,
                         TemperatureScratch& scratch);

// The same with a scratch of the calling thread's own, kept across calls (one vocabulary's
// weights per thread): for draws spread over a WorkerPool.
SampleResult sample_draw(std::span<const float> logits, const SampleDraw& draw);

// The draw from the row with `adjusts` applied (common/logit_adjust.h: distinct tokens; those
// outside the row are skipped), the logprob (when the draw asks for it) that of the raw row, as
// vLLM reports it. `adjusted` is the caller's buffer for the adjusted copy. Empty adjusts:
// sample_draw.
SampleResult sample_draw_adjusted(std::span<const float> logits,
                                  std::span<const LogitAdjust> adjusts, const SampleDraw& draw,
                                  std::vector<float>& adjusted, TemperatureScratch& scratch);
// The same with buffers of the calling thread's own (as sample_draw's).
SampleResult sample_draw_adjusted(std::span<const float> logits,
                                  std::span<const LogitAdjust> adjusts, const SampleDraw& draw);

// The kept tokens and their renormalized probabilities that a non-greedy draw walks, in the
// walk's order (most likely first when top-k or top-p is on, token-id order otherwise); for
// tests. m: max_ignoring_nan(logits).
std::vector<SampleCandidate> sample_candidates(std::span<const float> logits, float m,
                                               const SampleDraw& draw, TemperatureScratch& scratch);

// log_softmax(logits)[token] (NaN entries count as -inf), |error| < 2e-6: float32 exponentials,
// float64 sum. m: max_ignoring_nan(logits).
double log_softmax_with_max(std::span<const float> logits, int32_t token, float m);

struct TopLogprob {
  int32_t token_id;
  float logprob;  // log_softmax_with_max's value, rounded to float (the sampled token's own)
};

// The min(k, vocab) most likely tokens of a non-empty row, most likely first (logit
// descending, NaN as -inf, token id ascending among equals), each with its raw logprob: the
// same float a draw reports for that token (SampleResult::logprob). One pass for the sum, one
// partial sort of the ids.
std::vector<TopLogprob> top_logprobs(std::span<const float> logits, int k);

// A scored row (prompt logprobs, model/forward.h ForwardBatch::score_targets): the target
// token's raw logprob, the float a draw of that token reports (log_softmax_with_max), and the
// row's top_logprobs(logits, k).
struct RowScore {
  float logprob = 0.0f;
  std::vector<TopLogprob> top;
};
RowScore score_row(std::span<const float> logits, int32_t target, int k);

}  // namespace packserve
