// logit_adjust.h: one token's logit bias and penalties (engine/sampler.h LogitAdjustments, the
// OpenAI and vLLM sampling parameters) as data, so that the host sampler and the forward
// backends (ForwardBatch::adjusts, model/forward.h; the CUDA backend's sample_rows on the
// device) apply the same arithmetic and get the same bits.
//
// A row's adjustments are a list of LogitAdjust with distinct tokens, each applying its stages
// in vLLM's order, each stage computed in float64 and rounded to float:
//   kAdjustBias:        x = x + bias                                  (logit_bias)
//   kAdjustRepetition:  x = x > 0 ? x / repetition : x * repetition   (repetition_penalty)
//   kAdjustPenalty:     x = x - frequency - presence                  (frequency_penalty *
//                                                                      count, presence_penalty)
//   kAdjustBan:         x = -inf                                      (min_tokens: stop tokens)
// The other logits are unchanged.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

#include "packserve/common/temperature_sample.h"  // PS_SAMPLE_HD

namespace packserve {

inline constexpr uint32_t kAdjustBias = 1;
inline constexpr uint32_t kAdjustRepetition = 2;
inline constexpr uint32_t kAdjustPenalty = 4;
inline constexpr uint32_t kAdjustBan = 8;
inline constexpr uint32_t kAdjustStages =
    kAdjustBias | kAdjustRepetition | kAdjustPenalty | kAdjustBan;

struct LogitAdjust {
  int32_t token = 0;
  uint32_t stages = 0;  // kAdjust* bits
  double bias = 0.0;
  double repetition = 1.0;  // > 0
  double frequency = 0.0;   // frequency_penalty * the token's count in the output
  double presence = 0.0;
};
static_assert(sizeof(LogitAdjust) == 40 && alignof(LogitAdjust) == 8);

namespace sample_math {

// x with a's stages applied (header). Single roundings on the device too (nvcc fuses nothing
// into the intrinsics).
PS_SAMPLE_HD float adjust_logit(float x, const LogitAdjust& a) {
#if defined(__CUDA_ARCH__)
  if (a.stages & kAdjustBias) x = static_cast<float>(__dadd_rn(x, a.bias));
  if (a.stages & kAdjustRepetition) {
    x = static_cast<float>(x > 0.0f ? __ddiv_rn(x, a.repetition) : __dmul_rn(x, a.repetition));
  }
  if (a.stages & kAdjustPenalty) {
    x = static_cast<float>(__dsub_rn(__dsub_rn(x, a.frequency), a.presence));
  }
#else
  if (a.stages & kAdjustBias) x = static_cast<float>(static_cast<double>(x) + a.bias);
  if (a.stages & kAdjustRepetition) {
    const double d = x;
    x = static_cast<float>(d > 0.0 ? d / a.repetition : d * a.repetition);
  }
  if (a.stages & kAdjustPenalty) {
    x = static_cast<float>(static_cast<double>(x) - a.frequency - a.presence);
  }
#endif
  if (a.stages & kAdjustBan) x = -__builtin_huge_valf();
  return x;
}

}  // namespace sample_math

// adjust_logit on row's entries; tokens outside the row are skipped.
inline void apply_adjusts(std::span<const LogitAdjust> adjusts, std::span<float> row) {
  for (const LogitAdjust& a : adjusts) {
    if (a.token < 0 || static_cast<size_t>(a.token) >= row.size()) continue;
    float& x = row[static_cast<size_t>(a.token)];
    x = sample_math::adjust_logit(x, a);
  }
}

}  // namespace packserve
