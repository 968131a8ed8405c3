// wgmma.cuh: warpgroup (4 warps) building blocks of the Hopper path of the attention kernel
// (sm_90a only: compiled where __CUDA_ARCH_FEAT_SM90_ALL is defined; the compute_90 PTX
// fallback keeps the mma.sync path of tile_mma.cuh).
//
//   smem_desc        64-bit wgmma shared-memory matrix descriptor, 128-byte swizzle
//   desc_advance     that descriptor for an operand a number of bytes further on
//   wgmma_fence / wgmma_commit / wgmma_wait<N> / fence_operand(s) / fence_proxy_async
//   WgmmaOp<T>::qk_m64n64k16   S[64 x 64] = Q K^T, both operands from shared memory
//   WgmmaOp<T>::qk_m64n128k16  S[64 x 128] = Q K^T, likewise (wide_kernel.cuh)
//   WgmmaOp<T>::pv_m64n128k16  O[64 x 128] += P V, P from registers, V from shared memory
//
// Shared-memory layout the descriptors describe ("split" tiles, persistent_kernel.cuh): a
// [rows][128] b16 tile is stored as two [rows][64] halves (dims 0..63, then 64..127); in a
// half, row r is 128 bytes at r * 128 and its 16-byte chunk c sits at chunk c ^ (r % 8), the
// 128-byte swizzle the hardware applies to address bits [4:6] ^ [7:9] (so every 8-row group,
// 1024 bytes, must start 1024-byte aligned). K-major operand (q rows, keys as the N of Q K^T):
// 8-row groups 1024 bytes apart (stride byte offset); a k16 step inside a half adds 32 bytes to
// the start address. MN-major operand (V as the B of P V, N = dims): 8-key groups 1024 bytes
// apart (stride byte offset), the two 64-dim halves `rows * 128` bytes apart (leading byte
// offset).
//
// Accumulator layout (PTX ISA, wgmma .m64nNk16 .f32): warp w of the warpgroup holds rows
// [16 w, +16); register 4 j + e of a thread (g = lane / 4, t = lane % 4) is row g + 8 (e / 2),
// column 8 j + 2 t + e % 2: per warp, the mma.m16n8k16 C fragment of each 8-column block.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <type_traits>

namespace packserve::attention::cuda {

// Element offset of (row, 16-byte chunk) in a split [rows][head_dim] b16 tile (layout above:
// head_dim / 64 halves of [rows][64]).
__host__ __device__ __forceinline__ int swizzle_split(int row, int chunk, int rows) {
  return (chunk >> 3) * rows * 64 + row * 64 + (((chunk & 7) ^ (row & 7)) << 3);
}

// Descriptor of a 128-byte-swizzled operand at shared-window byte address `addr`; byte
// offsets are stored >> 4 in 14-bit fields; bits 62-63 = 1: 128-byte swizzle.
__device__ __forceinline__ uint64_t smem_desc(uint32_t addr, uint32_t lbo_bytes,
                                              uint32_t sbo_bytes) {
  return static_cast<uint64_t>((addr >> 4) & 0x3FFF) |
         (static_cast<uint64_t>((lbo_bytes >> 4) & 0x3FFF) << 16) |
         (static_cast<uint64_t>((sbo_bytes >> 4) & 0x3FFF) << 32) | (1ull << 62);
}

// The descriptor of the operand `bytes` (a multiple of 16) past desc's: its start address
// field (bits 0-13, the address >> 4) gains bytes >> 4. A shared-window address is below
// 2^18, so the field never carries into the next one and one 32-bit add of the low word does.
__device__ __forceinline__ uint64_t desc_advance(uint64_t desc, uint32_t bytes) {
  const uint32_t lo = static_cast<uint32_t>(desc) + (bytes >> 4);
  return (desc & 0xFFFFFFFF00000000ull) | lo;
}

__device__ __forceinline__ void wgmma_fence() {
  asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
}
__device__ __forceinline__ void wgmma_commit() {
  asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
}
template <int N>
__device__ __forceinline__ void wgmma_wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
}
// Keeps the compiler from moving reads or writes of an accumulator register across a
// wgmma issue or wait (the asm statements above do not name the registers).
__device__ __forceinline__ void fence_operand(float& x) { asm volatile("" : "+f"(x)::"memory"); }
__device__ __forceinline__ void fence_operand(uint32_t& x) { asm volatile("" : "+r"(x)::"memory"); }
// Makes this thread's generic-proxy shared-memory writes (cp.async included) visible to the
// async proxy that wgmma reads through; then a barrier publishes them to the warpgroup.
__device__ __forceinline__ void fence_proxy_async() {
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
}

// The products as asm with the operand type spelled by PTX ("bf16" or "f16"); the type is
// part of the instruction text, so it is chosen by a macro argument, not a template parameter.
#define PS_WGMMA_QK_M64N64K16(PTX)                                                                \
  asm volatile(                                                                                   \
      "{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"                                                \
      "wgmma.mma_async.sync.aligned.m64n64k16.f32." PTX "." PTX                                   \
      " {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "                  \
      "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, %32, "    \
      "%33, p, 1, 1, 0, 0;\n}\n"                                                                  \
      : "+f"(d[0][0]), "+f"(d[0][1]), "+f"(d[0][2]), "+f"(d[0][3]), "+f"(d[1][0]), "+f"(d[1][1]), \
        "+f"(d[1][2]), "+f"(d[1][3]), "+f"(d[2][0]), "+f"(d[2][1]), "+f"(d[2][2]), "+f"(d[2][3]), \
        "+f"(d[3][0]), "+f"(d[3][1]), "+f"(d[3][2]), "+f"(d[3][3]), "+f"(d[4][0]), "+f"(d[4][1]), \
        "+f"(d[4][2]), "+f"(d[4][3]), "+f"(d[5][0]), "+f"(d[5][1]), "+f"(d[5][2]), "+f"(d[5][3]), \
        "+f"(d[6][0]), "+f"(d[6][1]), "+f"(d[6][2]), "+f"(d[6][3]), "+f"(d[7][0]), "+f"(d[7][1]), \
        "+f"(d[7][2]), "+f"(d[7][3])                                                              \
      : "l"(desc_a), "l"(desc_b), "r"(static_cast<int>(accumulate)))
// The 64 f32 accumulators d[16][4] of an m64n128 product: their operand list (operands 0-63)
// and their constraints, shared by both m64n128k16 products.
#define PS_WGMMA_D64_LIST                                                            \
  " {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "         \
  "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, " \
  "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, " \
  "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, "
#define PS_WGMMA_D64_OUTPUTS                                                                      \
  "+f"(d[0][0]), "+f"(d[0][1]), "+f"(d[0][2]), "+f"(d[0][3]), "+f"(d[1][0]), "+f"(d[1][1]),       \
      "+f"(d[1][2]), "+f"(d[1][3]), "+f"(d[2][0]), "+f"(d[2][1]), "+f"(d[2][2]), "+f"(d[2][3]),   \
      "+f"(d[3][0]), "+f"(d[3][1]), "+f"(d[3][2]), "+f"(d[3][3]), "+f"(d[4][0]), "+f"(d[4][1]),   \
      "+f"(d[4][2]), "+f"(d[4][3]), "+f"(d[5][0]), "+f"(d[5][1]), "+f"(d[5][2]), "+f"(d[5][3]),   \
      "+f"(d[6][0]), "+f"(d[6][1]), "+f"(d[6][2]), "+f"(d[6][3]), "+f"(d[7][0]), "+f"(d[7][1]),   \
      "+f"(d[7][2]), "+f"(d[7][3]), "+f"(d[8][0]), "+f"(d[8][1]), "+f"(d[8][2]), "+f"(d[8][3]),   \
      "+f"(d[9][0]), "+f"(d[9][1]), "+f"(d[9][2]), "+f"(d[9][3]), "+f"(d[10][0]), "+f"(d[10][1]), \
      "+f"(d[10][2]), "+f"(d[10][3]), "+f"(d[11][0]), "+f"(d[11][1]), "+f"(d[11][2]),             \
      "+f"(d[11][3]), "+f"(d[12][0]), "+f"(d[12][1]), "+f"(d[12][2]), "+f"(d[12][3]),             \
      "+f"(d[13][0]), "+f"(d[13][1]), "+f"(d[13][2]), "+f"(d[13][3]), "+f"(d[14][0]),             \
      "+f"(d[14][1]), "+f"(d[14][2]), "+f"(d[14][3]), "+f"(d[15][0]), "+f"(d[15][1]),             \
      "+f"(d[15][2]), "+f"(d[15][3])
#define PS_WGMMA_PV_M64N128K16(PTX)                                                \
  asm volatile(                                                                    \
      "{\n.reg .pred p;\nsetp.ne.b32 p, %69, 0;\n"                                 \
      "wgmma.mma_async.sync.aligned.m64n128k16.f32." PTX "." PTX PS_WGMMA_D64_LIST \
      "{%64, %65, %66, %67}, %68, p, 1, 1, 1;\n}\n"                                \
      : PS_WGMMA_D64_OUTPUTS                                                       \
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b), "r"(1))
#define PS_WGMMA_QK_M64N128K16(PTX)                                                \
  asm volatile(                                                                    \
      "{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"                                 \
      "wgmma.mma_async.sync.aligned.m64n128k16.f32." PTX "." PTX PS_WGMMA_D64_LIST \
      "%64, %65, p, 1, 1, 0, 0;\n}\n"                                              \
      : PS_WGMMA_D64_OUTPUTS                                                       \
      : "l"(desc_a), "l"(desc_b), "r"(static_cast<int>(accumulate)))

template <typename T>
struct WgmmaOp {
  static_assert(std::is_same_v<T, __nv_bfloat16> || std::is_same_v<T, __half>,
                "wgmma operands are bf16 or f16");
  // D[64 x 64] (+)= A[64 x 16] * B[64 x 16]^T: A (q rows) and B (keys) K-major in shared
  // memory.
  static __device__ __forceinline__ void qk_m64n64k16(float (&d)[8][4], uint64_t desc_a,
                                                      uint64_t desc_b, bool accumulate) {
    if constexpr (std::is_same_v<T, __half>) {
      PS_WGMMA_QK_M64N64K16("f16");
    } else {
      PS_WGMMA_QK_M64N64K16("bf16");
    }
  }
  // D[64 x 128] (+)= A[64 x 16] * B[128 x 16]^T: 128 keys per product (the wide kernel's
  // stages), both operands K-major in shared memory.
  static __device__ __forceinline__ void qk_m64n128k16(float (&d)[16][4], uint64_t desc_a,
                                                       uint64_t desc_b, bool accumulate) {
    if constexpr (std::is_same_v<T, __half>) {
      PS_WGMMA_QK_M64N128K16("f16");
    } else {
      PS_WGMMA_QK_M64N128K16("bf16");
    }
  }
  // D[64 x 128] += A[64 x 16] * B[16 x 128]: A in registers (each warp's 16 rows as the
  // mma.m16n8k16 A fragment), B MN-major in shared memory (V stored [keys][dims]).
  static __device__ __forceinline__ void pv_m64n128k16(float (&d)[16][4], const uint32_t (&a)[4],
                                                       uint64_t desc_b) {
    if constexpr (std::is_same_v<T, __half>) {
      PS_WGMMA_PV_M64N128K16("f16");
    } else {
      PS_WGMMA_PV_M64N128K16("bf16");
    }
  }
};

#undef PS_WGMMA_QK_M64N64K16
#undef PS_WGMMA_PV_M64N128K16
#undef PS_WGMMA_QK_M64N128K16
#undef PS_WGMMA_D64_LIST
#undef PS_WGMMA_D64_OUTPUTS

// Orders every register of an accumulator or fragment array against the wgmma asm (see
// fence_operand).
template <typename X, int R, int C>
__device__ __forceinline__ void fence_operands(X (&v)[R][C]) {
#pragma unroll
  for (int r = 0; r < R; ++r) {
#pragma unroll
    for (int c = 0; c < C; ++c) fence_operand(v[r][c]);
  }
}

}  // namespace packserve::attention::cuda
