// skinny_gemm.cu: skinny_linear_fp8 (skinny_gemm.h).
//
// Fragments: mma.sync m16n8k16 takes, in lane (g = lane / 4, t = lane % 4), A (the weights) at
// rows g and g + 8, columns {2t, 2t+1} and {2t+8, 2t+9}, and B (x^T) at the same columns of x
// row g. Product s (0..7) of a 128-column block gives those four logical columns the physical
// columns 32t + 4s + {0, 1, 2, 3}: a lane reads only its own 32 contiguous columns, and the
// products together cover the block once. Out of range columns (in % 128 != 0) and x rows past
// `rows` are loaded as zeros; weight rows past `out` are clamped and never stored.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstring>
#include <string>

#include "packserve/attention/cuda/e4m3_convert.cuh"
#include "packserve/model/cuda/device_util.cuh"
#include "packserve/model/cuda/skinny_gemm.h"

namespace packserve::model::cuda {
namespace {

constexpr int kWarps = 8;
constexpr int kTileRows = 16;                                // weight rows per CTA
constexpr int kBlockCols = 128;                              // columns per warp step

// A 16-byte load of weights, read once: not kept in L1, the next 256 bytes prefetched to L2.
__device__ __forceinline__ uint4 load_stream(const void* p) {
  uint4 v;
  asm volatile("ld.global.nc.L1::no_allocate.L2::256B.v4.u32 {%0, %1, %2, %3}, [%4];"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "l"(p));
  return v;
}

__device__ __forceinline__ uint4 load_x16(const void* p) {
  return __ldg(reinterpret_cast<const uint4*>(p));
}

__device__ __forceinline__ uint32_t word(const uint4& v, int i) {
  return i == 0 ? v.x : i == 1 ? v.y : i == 2 ? v.z : v.w;
}

// Two e4m3 bytes of q (bytes 0, 1 for Lo, 2, 3 for !Lo) as bf16x2, exactly (e4m3_convert.cuh).
using attention::cuda::e4m3x2_to_bf16x2;

__device__ __forceinline__ void mma_bf16(float (&c)[4], uint32_t a0, uint32_t a1, uint32_t a2,
                                         uint32_t a3, uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
      "{%8, %9}, {%0, %1, %2, %3};"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

struct Args {
  const uint16_t* x;
  int rows, in;
  const uint8_t* w;
  const float* w_scale;
  int out;
  void* y;
  bool y_f32, accumulate;
  // > 0: the gated mode (skinny_gate_up_silu_fp8): w is [2 inner, in], y the bf16 [rows, inner]
  // act; a CTA takes 8 gate rows and their 8 up rows.
  int inner;
};

// One lane's share of a 128-column block: its 32 columns of weight rows g and g + 8 (two
// 16-byte pieces each) and of its NT x rows 8 nt + g (four pieces each).
template <int NT>
struct Frag {
  uint4 w[2][2];
  uint4 x[NT][4];
};

// The weight pieces of block kb (they depend on no earlier kernel).
template <int NT>
__device__ __forceinline__ void load_w(Frag<NT>& f, const Args& a, int kb, const uint8_t* w_row0,
                                       const uint8_t* w_row1, int t) {
  const int col = kb * kBlockCols + 32 * t;  // the lane's first column
#pragma unroll
  for (int h = 0; h < 2; ++h) {  // 16-column halves (in % 16 == 0: each wholly in or out)
    const bool in_range = col + 16 * h < a.in;
    f.w[0][h] = in_range ? load_stream(w_row0 + col + 16 * h) : make_uint4(0, 0, 0, 0);
    f.w[1][h] = in_range ? load_stream(w_row1 + col + 16 * h) : make_uint4(0, 0, 0, 0);
  }
}

template <int NT>
__device__ __forceinline__ void load_x(Frag<NT>& f, const Args& a, int kb, int g, int t) {
  const int col = kb * kBlockCols + 32 * t;
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const bool in_range = col + 16 * h < a.in;
#pragma unroll
    for (int nt = 0; nt < NT; ++nt) {
      const int xr = 8 * nt + g;
      const bool ok = in_range && xr < a.rows;
      const uint16_t* xp = a.x + static_cast<size_t>(xr) * a.in + col + 16 * h;
      f.x[nt][2 * h] = ok ? load_x16(xp) : make_uint4(0, 0, 0, 0);
      f.x[nt][2 * h + 1] = ok ? load_x16(xp + 8) : make_uint4(0, 0, 0, 0);
    }
  }
}

template <int NT>
__device__ __forceinline__ void block_products(float (&acc)[NT][4], const Frag<NT>& f) {
#pragma unroll
  for (int s = 0; s < 8; ++s) {
    // a0: row g cols (2t, 2t+1); a1: row g+8; a2, a3: cols (2t+8, 2t+9). Columns 4s..4s+3 of
    // the lane's 32: the bytes of word s % 4 of piece s / 4; of x, words 2 (s % 2), + 1 of
    // piece s / 2.
    uint32_t a[4];
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const uint32_t q = word(f.w[r][s / 4], s % 4);
      a[r] = e4m3x2_to_bf16x2<true>(q);       // bytes 0, 1
      a[r + 2] = e4m3x2_to_bf16x2<false>(q);  // bytes 2, 3
    }
#pragma unroll
    for (int nt = 0; nt < NT; ++nt) {
      const uint32_t b0 = word(f.x[nt][s / 2], 2 * (s % 2));
      const uint32_t b1 = word(f.x[nt][s / 2], 2 * (s % 2) + 1);
      mma_bf16(acc[nt], a[0], a[1], a[2], a[3], b0, b1);
    }
  }
}

// Four CTAs per SM for one x tile (at most 64 registers), three for two (80); no spill.
template <int NT>
__global__ void __launch_bounds__(kWarps * 32, NT == 1 ? 4 : 3) skinny_kernel(Args a) {
  __shared__ float partial[kWarps][NT * 8][kTileRows];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  const int n0 = blockIdx.x * kTileRows;
  const int blocks = (a.in + kBlockCols - 1) / kBlockCols;
  const int per_warp = (blocks + kWarps - 1) / kWarps;
  const int kb_begin = warp * per_warp;
  const int kb_end = min(blocks, kb_begin + per_warp);
  // Tile rows g and g + 8: weight rows n0 + g and n0 + g + 8, or in the gated mode gate row
  // m0 + g and its up row inner + m0 + g (m0 = 8 blockIdx.x).
  const int m0 = blockIdx.x * 8;
  const size_t r0 = a.inner > 0 ? min(m0 + g, a.inner - 1) : min(n0 + g, a.out - 1);
  const size_t r1 = a.inner > 0 ? a.inner + r0 : min(n0 + g + 8, a.out - 1);
  const uint8_t* w_row0 = a.w + r0 * a.in;
  const uint8_t* w_row1 = a.w + r1 * a.in;

  // One block at a time: the loads of the SM's other warps (four CTAs of one x tile or three of
  // two per SM) overlap a warp's products. Loading the next block ahead of them took more
  // registers, fewer CTAs and was slower (docs/forward-cuda.md "Few-row GEMM").
  // A programmatic launch (device_util.cuh launch_step_kernel): the first block's weights are
  // requested during the tail of the kernel before, which writes x (and y). The next kernel is
  // left to start as this grid's blocks exit: letting it be scheduled once they all run
  // (allow_dependent_launch here) made the float8 decode steps at batch 16 1.16x slower
  // (H200, benchmarks.md "Programmatic launches in the decode step").
  float acc[NT][4] = {};
  Frag<NT> f;
  if (kb_begin < kb_end) load_w(f, a, kb_begin, w_row0, w_row1, t);
  attention::cuda::wait_for_previous_grid();
  for (int kb = kb_begin; kb < kb_end; ++kb) {
    if (kb != kb_begin) load_w(f, a, kb, w_row0, w_row1, t);
    load_x(f, a, kb, g, t);
    block_products(acc, f);
  }
#pragma unroll
  for (int nt = 0; nt < NT; ++nt) {
    // c0, c1: weight row g, x rows 8 nt + 2t, + 1; c2, c3: weight row g + 8.
    partial[warp][8 * nt + 2 * t][g] = acc[nt][0];
    partial[warp][8 * nt + 2 * t + 1][g] = acc[nt][1];
    partial[warp][8 * nt + 2 * t][g + 8] = acc[nt][2];
    partial[warp][8 * nt + 2 * t + 1][g + 8] = acc[nt][3];
  }
  __syncthreads();
  const float scale = *a.w_scale;
  if (a.inner > 0) {
    // As skinny_linear_fp8 into a bf16 gate_up, then silu_mul_vec_kernel (ops.cu): the same
    // roundings and the same float operations.
    for (int i = threadIdx.x; i < NT * 8 * 8; i += blockDim.x) {
      const int xr = i / 8, j = i % 8, m = m0 + j;
      if (xr >= a.rows || m >= a.inner) continue;
      float sg = 0.0f, su = 0.0f;
#pragma unroll
      for (int k = 0; k < kWarps; ++k) {
        sg += partial[k][xr][j];
        su += partial[k][xr][j + 8];
      }
      const float gv = __bfloat162float(__float2bfloat16_rn(scale * sg));
      const float uv = __bfloat162float(__float2bfloat16_rn(scale * su));
      static_cast<__nv_bfloat16*>(a.y)[static_cast<size_t>(xr) * a.inner + m] =
          __float2bfloat16_rn(gv / (1.0f + __expf(-gv)) * uv);
    }
    return;
  }
  for (int i = threadIdx.x; i < NT * 8 * kTileRows; i += blockDim.x) {
    const int xr = i / kTileRows, wr = i % kTileRows, n = n0 + wr;
    if (xr >= a.rows || n >= a.out) continue;
    float sum = 0.0f;
#pragma unroll
    for (int k = 0; k < kWarps; ++k) sum += partial[k][xr][wr];
    const size_t at = static_cast<size_t>(xr) * a.out + n;
    if (a.y_f32) {
      float* y = static_cast<float*>(a.y);
      y[at] = a.accumulate ? y[at] + scale * sum : scale * sum;
    } else {
      static_cast<__nv_bfloat16*>(a.y)[at] = __float2bfloat16_rn(scale * sum);
    }
  }
}

// A size as the kernel's int (out of range values are refused by launch_skinny).
int to_int(int64_t v) { return static_cast<int>(std::clamp<int64_t>(v, 0, int64_t{1} << 30)); }

// The checks both entry points share (skinny_gemm.h "Requirements"), then the launch.
Status launch_skinny(const char* name, const Args& a, int64_t rows, int64_t in, int64_t out,
                     unsigned grid, attention::cuda::StreamHandle stream) {
  const auto bad = [name](const std::string& what) {
    return invalid_argument(std::string(name) + ": " + what);
  };
  if (rows < 0 || rows > kSkinnyMaxRows) {
    return bad("rows = " + std::to_string(rows) + ", expected 0.." +
               std::to_string(kSkinnyMaxRows));
  }
  if (rows == 0) return ok_status();
  if (in <= 0 || in % 16 != 0 || in > (int64_t{1} << 30)) {
    return bad("in = " + std::to_string(in) + ", expected a positive multiple of 16");
  }
  if (out <= 0 || out > (int64_t{1} << 30)) {
    return bad("out = " + std::to_string(out) + ", expected positive");
  }
  if (a.x == nullptr || a.w == nullptr || a.w_scale == nullptr || a.y == nullptr) {
    return bad(std::string("x, wq, w_scale and ") + (a.inner > 0 ? "act" : "y") +
               " must not be null");
  }
  const auto misaligned = [](const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 != 0; };
  if (misaligned(a.x) || misaligned(a.w)) return bad("x and wq must be 16-byte aligned");
  const cudaError_t e =
      launch_step_kernel(a.rows, rows <= 8 ? skinny_kernel<1> : skinny_kernel<2>, dim3(grid),
                         kWarps * 32, 0, static_cast<cudaStream_t>(stream), a);
  if (e != cudaSuccess) {
    (void)cudaGetLastError();
    return internal_error(std::string(name) + ": launch failed: " + cudaGetErrorName(e));
  }
  return ok_status();
}

}  // namespace

Status skinny_linear_fp8(const uint16_t* x, int64_t rows, int64_t in, const uint8_t* wq,
                         const float* w_scale, int64_t out, void* y, DType y_dtype, bool accumulate,
                         attention::cuda::StreamHandle stream) {
  const auto bad = [](const std::string& what) {
    return invalid_argument("skinny_linear_fp8: " + what);
  };
  if (y_dtype != DType::kF32 && y_dtype != DType::kBF16) {
    return bad("y dtype " + std::string(dtype_name(y_dtype)) + ", expected f32 or bf16");
  }
  if (accumulate && y_dtype != DType::kF32) return bad("accumulate needs an f32 y");
  const Args a{.x = x,
               .rows = to_int(rows),
               .in = to_int(in),
               .w = wq,
               .w_scale = w_scale,
               .out = to_int(out),
               .y = y,
               .y_f32 = y_dtype == DType::kF32,
               .accumulate = accumulate,
               .inner = 0};
  return launch_skinny(
      "skinny_linear_fp8", a, rows, in, out,
      static_cast<unsigned>((std::max<int64_t>(out, 0) + kTileRows - 1) / kTileRows), stream);
}

Status skinny_gate_up_silu_fp8(const uint16_t* x, int64_t rows, int64_t in, const uint8_t* wq,
                               const float* w_scale, int64_t inner, uint16_t* act,
                               attention::cuda::StreamHandle stream) {
  if (inner <= 0 || inner > (int64_t{1} << 29)) {
    return invalid_argument("skinny_gate_up_silu_fp8: inner = " + std::to_string(inner) +
                            ", expected 1..2^29");
  }
  const Args a{.x = x,
               .rows = to_int(rows),
               .in = to_int(in),
               .w = wq,
               .w_scale = w_scale,
               .out = to_int(2 * inner),
               .y = act,
               .y_f32 = false,
               .accumulate = false,
               .inner = static_cast<int>(inner)};
  return launch_skinny("skinny_gate_up_silu_fp8", a, rows, in, 2 * inner,
                       static_cast<unsigned>((inner + 7) / 8), stream);
}

}  // namespace packserve::model::cuda
