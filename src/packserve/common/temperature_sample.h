// temperature_sample.h: the draw of a token from softmax(logits / T) with an optional min-p
// cut, as a pure function of (logits, T, min_p, u) where u ~ U[0, 1) is the request's one
// uniform for this token. It is RequestSampler::sample's path when top-k and top-p are off
// (engine/sampler.h steps 2, 3 and 6, token-id order), and the forward backends run it for
// ForwardBatch::samples = kOutputSample rows (model/forward.h): the CUDA backend on the device
// (model/cuda/ops.h sample_rows, tested to give the same token ids), the CPU backend here.
//
// Arithmetic, fixed so that every machine and the GPU get the same bits:
//   m = max_ignoring_nan(logits) (common/argmax.h).
//   m = +inf or -inf ("degenerate"): the candidates are the tokens with logit == m, equally
//     likely; walk them in token-id order adding 1.0 / count (float64) until the sum exceeds
//     u; the last one if rounding leaves u unreached; token 0 when there is none (every logit
//     NaN), as greedy's argmax.
//   otherwise: w[i] = exp_nonpositive((x[i] - m) * inv_t) in float32 (below; NaN -> 0), and 0
//     where w[i] < min_p. Block b (kWeightBlock = 1024 weights) sums its weights in float32 in
//     eight lanes (lane l adds w[8j + l] for j = 0, 1, ...; a tail of fewer than eight is
//     added in order to a zero, then lanes 0..7 in order); total = the block sums in order in
//     float64; target = u * total. Walk the blocks while cum + block_sum[b] <= target (never
//     past the last), then the block's nonzero weights in order, cum += w (float64), until
//     cum > target; the block's last nonzero weight if rounding leaves it unreached.
// Multiplications and additions are single roundings (no fused multiply-add), which the host
// compilers give without -mfma and CUDA code gets through __fmul_rn / __fadd_rn.
// Thread-safety: pure functions (the scratch is the caller's).
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#if defined(__CUDACC__)
#define PS_SAMPLE_HD __host__ __device__ __forceinline__
#else
#define PS_SAMPLE_HD __attribute__((always_inline)) inline
#endif

namespace packserve::sample_math {

inline constexpr size_t kWeightBlock = 1024;
inline constexpr int kBlockLanes = 8;

// Single roundings and bit casts: the CUDA intrinsics on the device (nvcc fuses nothing into
// them), plain operators on the host.
#if defined(__CUDA_ARCH__)
PS_SAMPLE_HD float mul(float a, float b) { return __fmul_rn(a, b); }
PS_SAMPLE_HD float add(float a, float b) { return __fadd_rn(a, b); }
PS_SAMPLE_HD float sub(float a, float b) { return __fsub_rn(a, b); }
PS_SAMPLE_HD int32_t float_bits(float x) { return __float_as_int(x); }
PS_SAMPLE_HD float bits_float(int32_t x) { return __int_as_float(x); }
#else
PS_SAMPLE_HD float mul(float a, float b) { return a * b; }
PS_SAMPLE_HD float add(float a, float b) { return a + b; }
PS_SAMPLE_HD float sub(float a, float b) { return a - b; }
PS_SAMPLE_HD int32_t float_bits(float x) { return __builtin_bit_cast(int32_t, x); }
PS_SAMPLE_HD float bits_float(int32_t x) { return __builtin_bit_cast(float, x); }
#endif

// exp(y) for y <= 0 in float32; 0 for y < -87 (where the result would be subnormal) and for
// NaN. y = n ln2 + f with |f| <= ln2 / 2 (ln2 split in two so f is exact), e^f by its Taylor
// polynomial of degree 7 (truncation < 4e-9), 2^n from the exponent bits. Branch-free, so
// the host's weight loop vectorizes; no libm, so every machine gets the same bits.
PS_SAMPLE_HD float exp_nonpositive(float y) {
  constexpr float kLog2e = 1.44269504088896341f;
  constexpr float kLn2Hi = 0.693145751953125f;  // 11 significant bits: n * kLn2Hi is exact
  constexpr float kLn2Lo = 1.42860682030941723e-6f;
  constexpr float kRound = 12582912.0f;      // 1.5 * 2^23: t + kRound rounds t to an integer
  const float yc = y > -87.0f ? y : -87.0f;  // also maps NaN to -87 (the result is fixed below)
  const float shifted = add(mul(yc, kLog2e), kRound);
  const float n = sub(shifted, kRound);  // round(y log2 e), in [-126, 0]
  const float f = sub(sub(yc, mul(n, kLn2Hi)), mul(n, kLn2Lo));
  float p = 1.0f / 5040.0f;
  p = add(mul(p, f), 1.0f / 720.0f);
  p = add(mul(p, f), 1.0f / 120.0f);
  p = add(mul(p, f), 1.0f / 24.0f);
  p = add(mul(p, f), 1.0f / 6.0f);
  p = add(mul(p, f), 0.5f);
  p = add(mul(p, f), 1.0f);
  p = add(mul(p, f), 1.0f);
  const int32_t e = float_bits(shifted) - float_bits(kRound);
  const float two_n = bits_float((e + 127) << 23);
  return y >= -87.0f ? mul(p, two_n) : 0.0f;
}

// The weight of logit x: exp((x - m) inv_t), 0 below min_p (and for NaN).
PS_SAMPLE_HD float weight(float x, float m, float inv_t, float min_p) {
  const float v = exp_nonpositive(mul(sub(x, m), inv_t));
  return v >= min_p ? v : 0.0f;
}

// The fixed-point mass of a weight w in [0, 1]: floor(w * 2^40) (the product is exact). The
// ordered draws of sample_draw.h add masses as integers, so every sum is exact and the same in
// any order; 2^20 of them fit in 64 bits.
PS_SAMPLE_HD uint64_t weight_mass(float w) { return static_cast<uint64_t>(mul(w, 0x1p40f)); }

// "Most likely first" as one integer order, descending: the weight's bits (a positive float
// orders as its bits), then the complement of the token id (the lower id first). w > 0.
PS_SAMPLE_HD uint64_t sample_key(float w, int32_t token) {
  return (static_cast<uint64_t>(static_cast<uint32_t>(float_bits(w))) << 32) |
         (0xffffffffu - static_cast<uint32_t>(token));
}
PS_SAMPLE_HD float key_weight(uint64_t key) {
  return bits_float(static_cast<int32_t>(static_cast<uint32_t>(key >> 32)));
}
PS_SAMPLE_HD int32_t key_token(uint64_t key) {
  return static_cast<int32_t>(0xffffffffu - static_cast<uint32_t>(key));
}
PS_SAMPLE_HD uint64_t key_mass(uint64_t key) { return weight_mass(key_weight(key)); }

// The top-p cut's mass, of a kept mass total: ceil(top_p * total * (1 - 1e-12)) (the slack
// keeps a cut that lies exactly on a running sum), clamped to [1, total].
PS_SAMPLE_HD uint64_t top_p_need(double top_p, uint64_t total) {
#if defined(__CUDA_ARCH__)
  const double x = __dmul_rn(__dmul_rn(top_p, static_cast<double>(total)), 1.0 - 1e-12);
#else
  const double x = top_p * static_cast<double>(total) * (1.0 - 1e-12);
#endif
  const uint64_t need = static_cast<uint64_t>(ceil(x));
  return need < 1 ? 1 : need > total ? total : need;
}

// The draw's target in a kept mass total: floor(u * total), at most total - 1. The drawn
// token is the first kept one (most likely first) whose running mass exceeds it.
PS_SAMPLE_HD uint64_t draw_target(double u, uint64_t total) {
#if defined(__CUDA_ARCH__)
  const double x = __dmul_rn(u, static_cast<double>(total));
#else
  const double x = u * static_cast<double>(total);
#endif
  const uint64_t target = static_cast<uint64_t>(x);
  return target < total ? target : total - 1;
}

// Host: the sum of the w[i] >= floor over [0, n) in the header's eight-lane float32 order
// (floor 0 sums every weight: weights are >= 0). Always inlined, so each target clone of its
// callers vectorizes it.
__attribute__((always_inline)) inline float block_sum(const float* w, size_t n,
                                                      float floor = 0.0f) {
  float lanes[kBlockLanes] = {};
  size_t i = 0;
  for (; i + kBlockLanes <= n; i += kBlockLanes) {
    for (size_t l = 0; l < kBlockLanes; ++l) lanes[l] += w[i + l] >= floor ? w[i + l] : 0.0f;
  }
  float sum = 0.0f;
  for (; i < n; ++i) sum += w[i] >= floor ? w[i] : 0.0f;
  for (float lane : lanes) sum += lane;
  return sum;
}

}  // namespace packserve::sample_math

namespace packserve {

// One sampled token's parameters (common/sample_draw.h runs the whole pipeline; this header's
// draw reads the first three): (float) (1 / temperature), finite and > 0; min_p in [0, 1]; the
// request's uniform u in [0, 1); top_k >= 0 (0 = off); top_p in (0, 1] (1 = off); greedy: the
// argmax, nothing else read but logprob; logprob: also return log_softmax(raw logits)[token];
// top_logprobs (0 to kMaxTopLogprobs, needs logprob): a forward backend also returns the raw
// row's this-many most likely tokens (sample_draw.h top_logprobs; sample_draw ignores it).
// Trivially copyable: the CUDA backend uploads an array of them.
inline constexpr int kMaxTopLogprobs = 20;  // vLLM's default cap
struct SampleDraw {
  float inv_temperature = 1.0f;
  float min_p = 0.0f;
  double u = 0.0;
  double top_p = 1.0;
  int32_t top_k = 0;
  uint8_t greedy = 0;
  uint8_t logprob = 0;
  uint8_t top_logprobs = 0;
};

// Reused buffers of sample_temperature (sized to the vocabulary on first use).
struct TemperatureScratch {
  std::vector<float> weights;
  std::vector<double> block_sums;
};

// Weights of sample_math::weight into w[0, n) and their block sums (the header's order) into
// block_sums[0, ceil(n / kWeightBlock)); returns the float64 total.
double compute_weights(const float* x, size_t n, float max_logit, float inv_t, float min_p,
                       float* w, double* block_sums);

// compute_weights of the logits with the draw's temperature and min-p into scratch (sized to
// the logits); returns the total.
double compute_weights(std::span<const float> logits, float max_logit, const SampleDraw& draw,
                       TemperatureScratch& scratch);

// The walk of the header over weights w and their block sums, for target = u * total.
int32_t walk_weights(std::span<const float> w, std::span<const double> block_sums, double target);

// The token the header's draw picks. logits: non-empty; m: max_ignoring_nan(logits).
int32_t sample_temperature(std::span<const float> logits, float m, const SampleDraw& draw,
                           TemperatureScratch& scratch);

}  // namespace packserve
