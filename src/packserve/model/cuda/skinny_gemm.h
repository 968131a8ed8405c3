// skinny_gemm.h: the float8 linear layer for a decode step's few rows, our own kernel beside
// cuBLASLt (gemm.h). With --quantization fp8 a decode step's GEMMs are a stream of e4m3 weights
// past a handful of rows, which cuBLASLt's float8 kernels stream at under 0.4 of copy
// bandwidth at 1-32 rows, after two launches that quantize x (benchmarks.md "H200, float8
// weights"); for rows <= kSkinnyMaxRows the CUDA forward calls this instead.
//   y [rows, out] (=|+=) w_scale * x [rows, in] * wq^T    (wq [out, in] e4m3 row-major, x bf16)
// wq and its one f32 scale (a device scalar) are as --quantization fp8 stores them (ops.h
// quantize_fp8). x stays bf16: weight-only quantization (W8A16), no quantization of x and no
// extra launch.
//
// Kernel: one CTA of 8 warps per 16 weight rows (outputs); the CTA's warps split `in` into
// contiguous ranges of 128-column blocks. Per block a lane loads 32 contiguous columns of two
// weight rows (16-byte loads that bypass L1, with a 256-byte L2 prefetch) and of its x rows
// (through L1), turns e4m3 into bf16 exactly (a sign-filling byte permute, a shift and a mask
// put the bits in a bf16, then times 2^120, the difference of the exponent biases) and runs
// eight tensor-core products (mma.sync m16n8k16, bf16 in, f32 accumulate; a product's columns
// are a fixed permutation of the block's, the same for w and x). One block at a time per
// warp, four CTAs per SM for up to 8 rows and three for 9-16 (the other warps' loads hide a
// warp's products). The warps' sums meet in shared memory and are added in warp order, then
// scaled and stored once. (bf16
// weights through this kernel, a split-K version with x shared per 128 weight rows, and a
// stream-K kernel for 17-32 rows measured slower than cuBLASLt in a decode step:
// docs/forward-cuda.md "Few-row GEMM".)
// Numerics: f32 accumulation in a fixed order that depends only on `in` (not on rows or on
// the other rows' values): a row's result is the same bits whatever rows share the call. It
// is not cuBLASLt's W8A8 product: x is not rounded to e4m3.
// Requirements (else kInvalidArgument naming the argument): 0 <= rows <= kSkinnyMaxRows
// (rows == 0 is a no-op), in > 0 and a multiple of 16, out > 0, no null pointer, x and wq
// 16-byte aligned, y bf16 or f32, accumulate only into f32. Built for sm_90 as the rest of
// the CUDA code (bf16 mma.sync).
// Launch: programmatic for up to 8 rows (device_util.cuh launch_step_kernel: the first weight
// block is loaded before the wait for the kernel before), capturable in CUDA graphs.
// Thread-safety: a pure launch.
#pragma once

#include <cstdint>

#include "packserve/attention/cuda/run_cuda.h"
#include "packserve/common/dtype.h"
#include "packserve/common/status.h"

namespace packserve::model::cuda {

inline constexpr int kSkinnyMaxRows = 16;

// Whether skinny_linear_fp8 takes a call of this shape (rows, in) with 16-byte aligned
// pointers.
inline bool skinny_fits(int64_t rows, int64_t in) {
  return rows >= 1 && rows <= kSkinnyMaxRows && in > 0 && in % 16 == 0;
}

Status skinny_linear_fp8(const uint16_t* x, int64_t rows, int64_t in, const uint8_t* wq,
                         const float* w_scale, int64_t out, void* y, DType y_dtype, bool accumulate,
                         attention::cuda::StreamHandle stream);

// The decode step's gate/up GEMM and silu_mul (ops.h) in one kernel:
//   act [rows, inner] = bf16(silu(g) * u),  g = bf16(w_scale * x wq[0, inner)^T),
//                                          u = bf16(w_scale * x wq[inner, 2 inner)^T)
// wq the fused [2 inner, in] e4m3 gate/up matrix (gate rows first), act bf16. The same bits as
// skinny_linear_fp8 into a bf16 [rows, 2 inner] buffer followed by silu_mul: a CTA takes 8 gate
// rows and their 8 up rows instead of 16 consecutive rows, and applies silu_mul's arithmetic to
// its sums (one launch and one round trip of gate_up less per layer). Requirements as
// skinny_linear_fp8's (act not null); inner > 0 else kInvalidArgument.
Status skinny_gate_up_silu_fp8(const uint16_t* x, int64_t rows, int64_t in, const uint8_t* wq,
                               const float* w_scale, int64_t inner, uint16_t* act,
                               attention::cuda::StreamHandle stream);

}  // namespace packserve::model::cuda
