// e4m3_convert.cuh: float8 e4m3 bytes (the OCP "FN" variant, common/dtype.h) to the 16-bit
// MMA input types, exactly, in registers. Used by the attention kernel's float8 KV stages
// (persistent_kernel.cuh) and the few-row float8 GEMM (model/cuda/skinny_gemm.cu).
//
//   e4m3x2_to_bf16x2<Lo>(q)  bytes 0, 1 (Lo) or 2, 3 of q as a bf16x2 (element order kept)
//   e4m3x2_to_f16x2<Lo>(q)   the same as an f16x2 (one cvt)
//   E4m3To<T>::pair<Lo>(q)   either, by the MMA input type T (__nv_bfloat16 or __half)
//   bf16x2_to_f16x2(w, s)    a bf16x2 times s as an f16x2 (the attention kernel's q tile)
// No NaN comes out of the bf16 path: 0x7F/0xFF become +-480 (a KV cache or weight quantized
// with saturation never holds them).
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <cstdint>
#include <cstring>

namespace packserve::attention::cuda {

// One prmt makes each 16-bit lane [sign fill][byte] (the selector's high bit replicates the
// byte's sign); shifted left by 4 a lane is [ssss seee emmm 0000] (the next lane's spill lands
// in bits 3..0), and the mask 0x87F0 keeps the sign at bit 15 and e4m3's exponent and mantissa
// at bf16's low exponent and high mantissa bits: a bf16 of 2^-120 the e4m3 value (subnormals
// included), then times 2^120 (the difference of the exponent biases), exact. Three integer
// instructions per pair and the multiply (the byte_perm into the lanes' high halves, shift and
// two masks they replaced took four: skinny decode_gemms b1 0.69 -> 0.74 of copy bandwidth).
template <bool Lo>
__device__ __forceinline__ uint32_t e4m3x2_to_bf16x2(uint32_t q) {
  uint32_t v;
  asm("prmt.b32 %0, %1, 0, %2;" : "=r"(v) : "r"(q), "n"(Lo ? 0x9180 : 0xB3A2));
  v = (v << 4) & 0x87F087F0u;
  const uint32_t two_pow_120 = 0x7B807B80u;  // bf16x2 {2^120, 2^120}
  __nv_bfloat162 b, s;
  std::memcpy(&b, &v, 4);
  std::memcpy(&s, &two_pow_120, 4);
  b = __hmul2(b, s);
  uint32_t out;
  std::memcpy(&out, &b, 4);
  return out;
}

template <bool Lo>
__device__ __forceinline__ uint32_t e4m3x2_to_f16x2(uint32_t q) {
  const __half2_raw h = __nv_cvt_fp8x2_to_halfraw2(
      static_cast<__nv_fp8x2_storage_t>(Lo ? q & 0xFFFFu : q >> 16), __NV_E4M3);
  uint32_t out;
  std::memcpy(&out, &h, 4);
  return out;
}

// Two bf16 (a bf16x2 word) times `scale`, rounded to an f16x2 (one cvt after the two shifts
// and multiplies).
__device__ __forceinline__ uint32_t bf16x2_to_f16x2(uint32_t w, float scale) {
  const __half2 h =
      __floats2half2_rn(__uint_as_float(w << 16) * scale, __uint_as_float(w & 0xFFFF0000u) * scale);
  uint32_t out;
  std::memcpy(&out, &h, 4);
  return out;
}

template <typename T>
struct E4m3To;
template <>
struct E4m3To<__nv_bfloat16> {
  template <bool Lo>
  static __device__ __forceinline__ uint32_t pair(uint32_t q) {
    return e4m3x2_to_bf16x2<Lo>(q);
  }
};
template <>
struct E4m3To<__half> {
  template <bool Lo>
  static __device__ __forceinline__ uint32_t pair(uint32_t q) {
    return e4m3x2_to_f16x2<Lo>(q);
  }
};

}  // namespace packserve::attention::cuda
