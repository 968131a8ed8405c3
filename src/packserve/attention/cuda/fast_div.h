// fast_div.h: division of non-negative int32 values by a divisor fixed at launch (the KV page
// size) with one multiply-high, one add and one shift instead of a run-time integer division
// (tens of instructions on the GPU). Granlund and Montgomery's round-up method: for d >= 1 take
// l = ceil(log2 d) and m = floor(2^32 (2^l - d) / d) + 1; then for 0 <= n < 2^31
//   n / d = (mulhi(m, n) + n) >> l,
// where mulhi(m, n) <= n, so the sum stays below 2^32. Host and device (attention/fast_div_test.cc
// checks it against `/` on the host).
#pragma once

#include <cstdint>

#if defined(__CUDACC__)
#define PS_HOST_DEVICE __host__ __device__
#else
#define PS_HOST_DEVICE
#endif

namespace packserve::attention::cuda {

struct FastDiv {
  uint32_t magic = 1;  // m
  uint32_t shift = 0;  // l
  int32_t divisor = 1;

  // d in [1, 2^31).
  static FastDiv make(int32_t d) {
    FastDiv f;
    f.divisor = d;
    uint32_t l = 0;
    while ((uint64_t{1} << l) < static_cast<uint64_t>(d)) ++l;
    f.shift = l;
    f.magic = static_cast<uint32_t>(
        (((uint64_t{1} << l) - static_cast<uint64_t>(d)) << 32) / static_cast<uint64_t>(d) + 1);
    return f;
  }

  // n in [0, 2^31).
  PS_HOST_DEVICE int32_t div(int32_t n) const {
    const uint32_t u = static_cast<uint32_t>(n);
#if defined(__CUDA_ARCH__)
    const uint32_t hi = __umulhi(magic, u);
#else
    const uint32_t hi = static_cast<uint32_t>((uint64_t{magic} * u) >> 32);
#endif
    return static_cast<int32_t>((hi + u) >> shift);
  }
  PS_HOST_DEVICE int32_t mod(int32_t n, int32_t quotient) const { return n - quotient * divisor; }
};

}  // namespace packserve::attention::cuda
