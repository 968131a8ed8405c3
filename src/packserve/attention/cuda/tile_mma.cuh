// tile_mma.cuh: warp-level building blocks of the attention kernel (sm_80+ instructions, so
// the same code runs on sm_90a today; a Hopper wgmma/TMA path would replace this file's
// users, not this file).
//
//   cp_async_16      16-byte global -> shared copy (cp.async.cg), zero-filled when !valid
//   cp_async_16_pair two of them, zero-filled when a row index is negative
//   st_keep_l2       a 32-bit global store that L2 keeps before other lines (evict_last)
//   discard_l2       drop a dead 128-byte line from L2 without writing it back
//   ld_last_use_l2   a 32-bit global load that leaves its line at evict_first
//   ldmatrix_x4(_t)  four 8x8 b16 matrices from a shared-memory byte address (optionally
//                    transposed); ldmatrix_lane_offset gives each lane's address in a tile
//   mma_16816        D[16x8] f32 += A[16x16] * B[16x8] with bf16 or f16 operands
//   exp2_ftz         2^x on the SFU, flush-to-zero
//   swizzle          element offset of (row, 16-byte chunk) in a [rows][HeadDim] b16 tile,
//                    chunk XOR (row % 8): the eight rows one ldmatrix reads fall in eight
//                    different 16-byte bank groups (no bank conflicts).
// Fragment layouts (PTX ISA, mma.m16n8k16): g = lane / 4, t = lane % 4;
//   A regs a0:(g, 2t..2t+1) a1:(g+8, 2t..) a2:(g, 2t+8..) a3:(g+8, 2t+8..)
//   B regs b0:(k=2t..2t+1, n=g) b1:(k=2t+8.., n=g);  C c0,c1:(g, 2t..2t+1) c2,c3:(g+8, 2t..)
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

namespace packserve::attention::cuda {

template <int HeadDim>
__host__ __device__ __forceinline__ int swizzle(int row, int chunk) {
  return row * HeadDim + ((chunk ^ (row & 7)) << 3);
}

__device__ __forceinline__ uint32_t smem_addr(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// (The ignore-src predicate form: one predicate, no source-size register to compute.)
__device__ __forceinline__ void cp_async_16(uint32_t smem, const void* gmem, bool valid) {
  asm volatile(
      "{\n .reg .pred ignore;\n setp.eq.u32 ignore, %2, 0;\n"
      " cp.async.cg.shared.global [%0], [%1], 16, ignore;\n}\n" ::"r"(smem),
      "l"(gmem), "r"(static_cast<uint32_t>(valid))
      : "memory");
}
__device__ __forceinline__ void cp_async_16(void* smem, const void* gmem, bool valid) {
  cp_async_16(smem_addr(smem), gmem, valid);
}
// Two 16-byte copies (a key's K chunk and its V chunk), both zero-filled when `row` (the index
// their sources were computed from) < 0: the predicate comes from the sign in one compare.
__device__ __forceinline__ void cp_async_16_pair(uint32_t smem0, const void* gmem0, uint32_t smem1,
                                                 const void* gmem1, int row) {
  asm volatile(
      "{\n .reg .pred ignore;\n setp.lt.s32 ignore, %4, 0;\n"
      " cp.async.cg.shared.global [%0], [%1], 16, ignore;\n"
      " cp.async.cg.shared.global [%2], [%3], 16, ignore;\n}\n" ::"r"(smem0),
      "l"(gmem0), "r"(smem1), "l"(gmem1), "r"(row)
      : "memory");
}
// Partial states are written by the attention kernel and read once by the merge kernel, while
// the step streams far more K/V bytes than L2 holds. Stored as evict_last, they are still in L2
// when the merge reads them (H100: PAT [1,256] prefix 3 % faster, docs/benchmarks.md). The
// merge then discards a slot's o lines and reads the lse with ld_last_use_l2, so scratch lines
// kept at that priority do not pile up in L2 across steps (and o is never written back).
// (The policy is made inside each store: a 64-bit register held across an epilogue costs the
// head_dim 128 kernel a spill.)
__device__ __forceinline__ void st_keep_l2(void* gmem, uint32_t v) {
  asm volatile(
      "{\n .reg .b64 policy;\n createpolicy.fractional.L2::evict_last.b64 policy, 1.0;\n"
      " st.global.L2::cache_hint.b32 [%0], %1, policy;\n}\n" ::"l"(gmem),
      "r"(v)
      : "memory");
}
// `line` is 128-byte aligned; its bytes are undefined afterwards.
__device__ __forceinline__ void discard_l2(const void* line) {
  asm volatile("discard.global.L2 [%0], 128;\n" ::"l"(line) : "memory");
}
// A load that leaves its line at evict_first: the merge's read of a partial lse, whose lines
// hold other pairs' lse too (so they cannot be discarded) and are dead once every pair has read
// them.
__device__ __forceinline__ float ld_last_use_l2(const float* gmem) {
  float v;
  asm volatile(
      "{\n .reg .b64 policy;\n createpolicy.fractional.L2::evict_first.b64 policy, 1.0;\n"
      " ld.global.L2::cache_hint.f32 %0, [%1], policy;\n}\n"
      : "=f"(v)
      : "l"(gmem));
  return v;
}
__device__ __forceinline__ void cp_async_commit() {
  asm volatile("cp.async.commit_group;\n" ::: "memory");
}
template <int N>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}

// ldmatrix on a shared-window byte address (smem_addr()).
__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], uint32_t addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}
__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t (&r)[4], uint32_t addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}

// Lane addresses of the ldmatrix_x4 reads of a swizzled [rows][HeadDim] tile. Lane l reads
// row r0 + (l & 7) + 8 * hi(l), chunk 2 * kk + lo(l), with hi/lo in {0, 1} and r0 a multiple of
// 8, so row & 7 = l & 7 and the swizzled chunk is (2 kk) ^ t, t = lo(l) ^ (l & 7). Its byte
// offset is row * 2 * HeadDim + (((2 kk) ^ t) << 4) = (row * 2 * HeadDim + (t << 4)) ^ (kk << 5):
// the chunk bits lie below the row stride. With the tile base aligned to the row stride
// (2 * HeadDim bytes) the whole address is lane_base ^ (kk << 5), one LOP per read and no
// per-kk address registers.
template <int HeadDim>
__host__ __device__ __forceinline__ uint32_t ldmatrix_lane_offset(int row, int lo, int lane) {
  return static_cast<uint32_t>(row * 2 * HeadDim + (((lo ^ lane) & 7) << 4));
}

// 2^x by the SFU, denormal results flushed to zero (one MUFU.EX2; exp2f adds a denormal
// range fix-up around it). -inf -> +0.
__device__ __forceinline__ float exp2_ftz(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
  return y;
}

template <typename T>
struct MmaOp;

template <>
struct MmaOp<__nv_bfloat16> {
  static __device__ __forceinline__ void run(float (&d)[4], const uint32_t (&a)[4], uint32_t b0,
                                             uint32_t b1) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
        "{%8,%9}, {%0,%1,%2,%3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  }
  static __device__ __forceinline__ uint32_t pack(float lo, float hi) {
    __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
    return *reinterpret_cast<uint32_t*>(&v);
  }
  static __device__ __forceinline__ __nv_bfloat162 pair(float lo, float hi) {
    return __floats2bfloat162_rn(lo, hi);
  }
};

template <>
struct MmaOp<__half> {
  static __device__ __forceinline__ void run(float (&d)[4], const uint32_t (&a)[4], uint32_t b0,
                                             uint32_t b1) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
        "{%8,%9}, {%0,%1,%2,%3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  }
  static __device__ __forceinline__ uint32_t pack(float lo, float hi) {
    __half2 v = __floats2half2_rn(lo, hi);
    return *reinterpret_cast<uint32_t*>(&v);
  }
  static __device__ __forceinline__ __half2 pair(float lo, float hi) {
    return __floats2half2_rn(lo, hi);
  }
};

}  // namespace packserve::attention::cuda
