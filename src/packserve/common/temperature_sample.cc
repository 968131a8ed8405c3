// temperature_sample.cc: compute_weights, walk_weights and sample_temperature of
// temperature_sample.h; the arithmetic is written there.
#include "packserve/common/temperature_sample.h"

#include <algorithm>
#include <limits>

#include "packserve/common/target_clones.h"

namespace packserve {

using sample_math::kWeightBlock;

// An AVX2 clone is picked at load time where the CPU has it: no FMA and a fixed summation
// order, so both clones give the same bits.
PACKSERVE_AVX2_CLONES
double compute_weights(const float* x, size_t n, float max_logit, float inv_t, float min_p,
                       float* w, double* block_sums) {
  for (size_t i = 0; i < n; ++i) w[i] = sample_math::weight(x[i], max_logit, inv_t, min_p);
  double total = 0.0;
  for (size_t begin = 0, b = 0; begin < n; begin += kWeightBlock, ++b) {
    block_sums[b] = sample_math::block_sum(w + begin, std::min(kWeightBlock, n - begin));
    total += block_sums[b];
  }
  return total;
}

double compute_weights(std::span<const float> logits, float max_logit, const SampleDraw& draw,
                       TemperatureScratch& scratch) {
  scratch.weights.resize(logits.size());
  scratch.block_sums.resize((logits.size() + kWeightBlock - 1) / kWeightBlock);
  return compute_weights(logits.data(), logits.size(), max_logit, draw.inv_temperature, draw.min_p,
                         scratch.weights.data(), scratch.block_sums.data());
}

int32_t walk_weights(std::span<const float> w, std::span<const double> block_sums, double target) {
  double cum = 0.0;
  size_t b = 0;
  for (; b + 1 < block_sums.size(); ++b) {
    if (cum + block_sums[b] > target) break;
    cum += block_sums[b];
  }
  // Block b holds the target (or is the last block, when rounding left it unreached).
  const size_t begin = b * kWeightBlock;
  const size_t end = std::min(w.size(), begin + kWeightBlock);
  int32_t last_kept = -1;
  for (size_t i = begin; i < end; ++i) {
    if (w[i] == 0.0f) continue;
    last_kept = static_cast<int32_t>(i);
    cum += w[i];
    if (cum > target) return last_kept;
  }
  if (last_kept >= 0) return last_kept;  // rounding fallback: the last kept token of the block
  for (size_t i = begin; i-- > 0;) {
    if (w[i] != 0.0f) return static_cast<int32_t>(i);
  }
  return 0;  // unreachable: the most likely token always has weight 1
}

int32_t sample_temperature(std::span<const float> logits, float m, const SampleDraw& draw,
                           TemperatureScratch& scratch) {
  constexpr float kInf = std::numeric_limits<float>::infinity();
  if (m == kInf || m == -kInf) {
    int64_t count = 0;
    for (float x : logits) count += x == m ? 1 : 0;
    if (count == 0) return 0;  // every logit NaN: greedy's answer
    const double p = 1.0 / static_cast<double>(count);
    double cum = 0.0;
    int32_t last = 0;
    for (size_t i = 0; i < logits.size(); ++i) {
      if (logits[i] != m) continue;
      last = static_cast<int32_t>(i);
      cum += p;
      if (cum > draw.u) return last;
    }
    return last;  // rounding fallback: the last candidate
  }
  const double total = compute_weights(logits, m, draw, scratch);
  return walk_weights(scratch.weights, scratch.block_sums, draw.u * total);
}

}  // namespace packserve
