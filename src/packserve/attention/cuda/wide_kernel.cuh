// wide_kernel.cuh: a warp-specialised persistent kernel for the work items whose q passes are
// 128 folded rows (head_dim 128, sm_90a): shared-prefix roots and packed prefill tiles, the
// compute-bound items (docs/gpu.md, "The wide kernel").
// Must match: persistent_kernel.cuh (same tickets, item fields, outputs and partial states).
//
// One CTA per SM, three warpgroups (FlashAttention-3's division of work):
//   producer  (warpgroup 0, setmaxnreg down to kProducerRegs): claims the tickets, reads each
//             pass's row positions, and gathers its q rows and its KV stages from the pages
//             with cp.async into shared memory, running ahead of the consumers by as much as
//             the rings allow (two q slots, two KV stages): the next pass's q and first KV
//             stage load while the consumers finish the current one.
//   consumers (warpgroups 1 and 2, setmaxnreg up to kConsumerRegs): consumer c computes the
//             pass's folded rows [64 c, +64) with wgmma: per 128-key stage S = Q K^T
//             (m64n128k16, q and K from shared memory), the online softmax of
//             persistent_kernel.cuh (lazy max, base 2), O += P V (m64n128k16, P from
//             registers). The consumers take turns issuing their products, and each runs its
//             softmax while its own previous P V and the other's products keep the tensor
//             cores busy; o takes 64 registers per thread, so S holds 128 keys.
// Hand-offs are mbarriers (phases counted by both sides in the same order):
//   q_full[s]   256 arrivals: each producer thread once after writing the pass's row positions
//               and descriptor, once more (cp.async.mbarrier.arrive.noinc) when its q copies land
//   k_full[s], v_full[s]  128 arrivals: each producer thread's copies of the stage have landed
//   *_empty[s]  8 arrivals: lane 0 of each consumer warp once its wgmma reading the slot is done
// The copies are generic-proxy writes that wgmma reads through the async proxy: a consumer
// fences (fence.proxy.async) after each full-barrier wait.
//
// Shared memory (all tiles in wgmma.cuh's split layout, 1024-aligned):
//   q    [2 slots][128 rows][128]  T   64 KiB
//   k, v [2 stages][128 keys][128] T   128 KiB
//   pos  [2 slots][128] int32, desc [2 slots][kDescInts] int32, producer scratch, 12 mbarriers
// The pass descriptor: n_pass (-1: no more work, the consumers exit), f_begin, rows_begin,
// kv_head, kv_begin, kv_end, num_stages, writes_final, partial_begin (storage slot of row 0).
#pragma once

#include "packserve/attention/cuda/persistent_kernel.cuh"

namespace packserve::attention::cuda {

namespace wide {
inline constexpr int kThreads = 384;
inline constexpr int kHeadDim = 128;
inline constexpr int kRows = 128;  // folded rows per pass (consumer c: [64 c, +64))
inline constexpr int kKeys = 128;  // keys per KV stage
inline constexpr int kChunks = kHeadDim / 8;
inline constexpr int kQBytes = kRows * kHeadDim * 2;
inline constexpr int kKvBytes = kKeys * kHeadDim * 2;  // K (or V) of one stage
inline constexpr int kDescInts = 16;
// Two q slots and two KV stages of 128 keys (one q slot and three stages measured 0.90x on
// prefill_8k: the next pass's q no longer loads during the current pass).
inline constexpr int kQSlots = 2, kKvStages = 2;
// Shared-memory layout.
struct Layout {
  static constexpr int kOffQ = 0;
  static constexpr int kOffK = kOffQ + kQSlots * kQBytes;
  static constexpr int kOffV = kOffK + kKvStages * kKvBytes;
  static constexpr int kOffPos = kOffV + kKvStages * kKvBytes;
  static constexpr int kOffDesc = kOffPos + kQSlots * kRows * 4;
  static constexpr int kOffScratch = kOffDesc + kQSlots * kDescInts * 4;  // [2][4] maxima, claim
  static constexpr int kOffBars = kOffScratch + 16 * 4;
  // mbarrier indices
  static constexpr int kQFull = 0, kQEmpty = kQSlots, kKFull = 2 * kQSlots;
  static constexpr int kKEmpty = kKFull + kKvStages, kVFull = kKEmpty + kKvStages;
  static constexpr int kVEmpty = kVFull + kKvStages;
  static constexpr int kNumBars = 2 * kQSlots + 4 * kKvStages;
  static constexpr int kSmemBytes = kOffBars + kNumBars * 8;
  static_assert(kOffBars % 8 == 0, "mbarriers are 8-byte aligned");
  static_assert(kSmemBytes <= 227 * 1024, "one CTA per SM");
};
// The producer's registers set how much of its gather it keeps in flight: 40 measured 0.87x,
// 56 1.00x, 72 1.02-1.03x, 96 1.02x on prefill (H100, fifteenth session); the consumers need
// about 200 (o, S and P of a 128-key stage).
inline constexpr int kProducerRegs = 72, kConsumerRegs = 208;
static_assert(kProducerRegs * 128 + kConsumerRegs * 256 <= 65536, "register file");
}  // namespace wide

__device__ __forceinline__ void mbar_init(uint32_t bar, int count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(count) : "memory");
}
__device__ __forceinline__ void mbar_arrive(uint32_t bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(bar) : "memory");
}
// Arrives on `bar` once every cp.async this thread has issued so far has landed; counts toward
// the barrier's expected arrivals (.noinc).
__device__ __forceinline__ void cp_async_mbar_arrive(uint32_t bar) {
  asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];\n" ::"r"(bar) : "memory");
}
// Returns once the phase of parity `parity` of `bar` has completed.
__device__ __forceinline__ void mbar_wait(uint32_t bar, uint32_t parity) {
  uint32_t done = 0;
  do {
    asm volatile(
        "{\n.reg .pred p;\nmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n"
        "selp.u32 %0, 1, 0, p;\n}\n"
        : "=r"(done)
        : "r"(bar), "r"(parity)
        : "memory");
  } while (done == 0);
}
__device__ __forceinline__ void producer_bar_sync() {  // the producer warpgroup's 128 threads
  asm volatile("bar.sync 1, 128;\n" ::: "memory");
}
// The consumers' turns on the tensor cores: named barrier 2 + c is consumer c's turn; it
// completes when consumer c's 128 threads sync and the other consumer's 128 have arrived.
__device__ __forceinline__ void turn_sync(int c) {
  asm volatile("bar.sync %0, 256;\n" ::"r"(2 + c) : "memory");
}
__device__ __forceinline__ void turn_arrive(int c) {
  asm volatile("bar.arrive %0, 256;\n" ::"r"(2 + c) : "memory");
}

// The producer's copy of 128 rows of 256 bytes into a [128][128] split tile (wgmma.cuh):
// thread tid knows the source of row tid (`my_off` bytes from `src`, -1: zero-fill). Warp w
// copies rows [32 w, +32), two rows of 16 chunks per instruction (512 contiguous bytes of
// each pair of rows), each row's offset broadcast from its owner by a shuffle.
__device__ __forceinline__ void gather_rows(unsigned char* dst, const char* src, int64_t my_off) {
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32 % 4;
  const int hi = lane / 16, chunk = lane % 16;
  unsigned char* dst_lane = dst + (chunk >> 3) * (wide::kRows * 128) + (warp * 32 + hi) * 128;
#pragma unroll
  for (int i = 0; i < 16; ++i) {
    const int r = 2 * i + hi;  // row within the warp's 32; r % 8 = (2 i) % 8 + hi
    const int64_t off = __shfl_sync(0xffffffffu, my_off, r);
    const int sw = ((chunk & 7) ^ (r & 7)) << 4;
    cp_async_16(dst_lane + 2 * i * 128 + sw, src + (off < 0 ? 0 : off) + chunk * 16, off >= 0);
  }
}

template <typename T>
__device__ __forceinline__ void wide_produce(const KernelParams& p, unsigned char* smem,
                                             uint32_t bars) {
  using namespace wide;
  using L = Layout;
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  const T* q = static_cast<const T*>(p.q);
  const T* kp = static_cast<const T*>(p.k_pages);
  const T* vp = static_cast<const T*>(p.v_pages);
  int* pos_s = reinterpret_cast<int*>(smem + L::kOffPos);
  int* desc_s = reinterpret_cast<int*>(smem + L::kOffDesc);
  int* scratch = reinterpret_cast<int*>(smem + L::kOffScratch);
  const int heads = p.num_kv_heads, group = p.group_size;
  const int tickets = p.plan[kHdrNumWideItems] * heads;  // the wide items lead (plan_buffer.h)
  int qs = 0, ks = 0;  // passes and KV stages produced so far (the rings' phases)
  for (int ticket = static_cast<int>(blockIdx.x); ticket < tickets;) {
    const int kv_head = ticket % heads;
    const int32_t* f = p.plan + p.off_items + ticket / heads * kItemFields;
    const int rows_begin = f[0], n_folded = (f[1] - f[0]) * group;
    const int kv_begin = f[3], kv_end = f[4];
    const int32_t* item_rows = p.plan + p.off_item_rows + rows_begin;
    const int32_t* pages = p.kv_page_indices + p.kv_page_indptr[f[2]];
    // Byte offset of key `base + tid` of the item's KV for this KV head, -1 past `bound`: one
    // page lookup per key, shared by its K and V copies (gather_rows).
    auto key_offset = [&](int base, int bound) -> int64_t {
      const int tok = base + tid;
      if (tok >= bound) return -1;
      const int page = p.page_div.div(tok);
      const int64_t row =
          static_cast<int64_t>(pages[page]) * p.page_size + p.page_div.mod(tok, page);
      return (row * heads + kv_head) * (kHeadDim * 2);
    };
    for (int f_begin = 0; f_begin < n_folded; f_begin += kRows) {
      const int n_pass = min(kRows, n_folded - f_begin);
      const int slot = qs % kQSlots;
      mbar_wait(bars + 8 * (L::kQEmpty + slot), ((qs / kQSlots) & 1) ^ 1);
      const int pos = tid < n_pass ? p.q_positions[item_rows[p.group_div.div(f_begin + tid)]] : -1;
      pos_s[slot * kRows + tid] = pos;
      int64_t q_off = -1;  // folded row tid's q vector, bytes
      if (tid < n_pass) {
        const int fi = f_begin + tid;
        const int k = p.group_div.div(fi);
        const int head = kv_head * group + p.group_div.mod(fi, k);
        q_off = (static_cast<int64_t>(item_rows[k]) * p.num_qo_heads + head) * (kHeadDim * 2);
      }
      gather_rows(smem + L::kOffQ + slot * kQBytes, reinterpret_cast<const char*>(q), q_off);
      const int warp_max = __reduce_max_sync(0xffffffffu, pos);
      const int red = (qs & 1) * 4;  // alternate halves: a pass's maxima survive the next's
      if (lane == 0) scratch[red + warp] = warp_max;
      producer_bar_sync();
      const int max_pos =
          max(max(scratch[red], scratch[red + 1]), max(scratch[red + 2], scratch[red + 3]));
      const int kv_hi = min(kv_end, max_pos + 1);
      const int num_stages = kv_hi > kv_begin ? (kv_hi - kv_begin + kKeys - 1) / kKeys : 0;
      if (tid == 0) {
        int* d = desc_s + slot * kDescInts;
        d[0] = n_pass;
        d[1] = f_begin;
        d[2] = rows_begin;
        d[3] = kv_head;
        d[4] = kv_begin;
        d[5] = kv_end;
        d[6] = num_stages;
        d[7] = f[7];
        d[8] = kv_head * p.plan[kHdrNumPartialSlots] + f[8];
      }
      mbar_arrive(bars + 8 * (L::kQFull + slot));
      cp_async_mbar_arrive(bars + 8 * (L::kQFull + slot));
      ++qs;
#pragma unroll 1
      for (int st = 0; st < num_stages; ++st, ++ks) {
        const int s = ks % kKvStages;
        const uint32_t parity = ((ks / kKvStages) & 1) ^ 1;
        const int base = kv_begin + st * kKeys;
        const int64_t key_off = key_offset(base, kv_hi);
        mbar_wait(bars + 8 * (L::kKEmpty + s), parity);
        gather_rows(smem + L::kOffK + s * kKvBytes, reinterpret_cast<const char*>(kp), key_off);
        cp_async_mbar_arrive(bars + 8 * (L::kKFull + s));
        mbar_wait(bars + 8 * (L::kVEmpty + s), parity);
        gather_rows(smem + L::kOffV + s * kKvBytes, reinterpret_cast<const char*>(vp), key_off);
        cp_async_mbar_arrive(bars + 8 * (L::kVFull + s));
      }
    }
    if (tid == 0) scratch[8] = static_cast<int>(gridDim.x) + atomicAdd(p.dispatch + 1, 1);
    producer_bar_sync();
    ticket = scratch[8];
    producer_bar_sync();  // read by all before the next claim rewrites it
  }
  // No more work: a pass descriptor with n_pass = -1.
  const int slot = qs % kQSlots;
  mbar_wait(bars + 8 * (L::kQEmpty + slot), ((qs / kQSlots) & 1) ^ 1);
  if (tid == 0) desc_s[slot * kDescInts] = -1;
  mbar_arrive(bars + 8 * (L::kQFull + slot));
  cp_async_mbar_arrive(bars + 8 * (L::kQFull + slot));
  cp_async_wait<0>();
}

template <typename T>
__device__ __forceinline__ void wide_consume(const KernelParams& p, unsigned char* smem,
                                             uint32_t bars, int c) {
  using namespace wide;
  using L = Layout;
  using Mma = MmaOp<T>;
  constexpr int kDb = kHeadDim / 8;  // n8 blocks of O
  constexpr int kNb = kKeys / 8;     // n8 blocks of S
  const int tid = threadIdx.x - 128 * (c + 1), warp = tid / 32, lane = tid % 32;
  const int g = lane / 4;
  const int row0 = 64 * c + 16 * warp;  // the warp's first folded row of the pass
  const int* pos_all = reinterpret_cast<const int*>(smem + L::kOffPos);
  const int* desc_s = reinterpret_cast<const int*>(smem + L::kOffDesc);
  const int group = p.group_size;
  const float scale = p.sm_scale_log2;
  if (c == 1) turn_arrive(0);  // consumer 0 takes the first turn
  int qs = 0, ks = 0;
  for (;;) {
    const int slot = qs % kQSlots;
    mbar_wait(bars + 8 * (L::kQFull + slot), (qs / kQSlots) & 1);
    const int* d = desc_s + slot * kDescInts;
    const int n_pass = d[0];
    if (n_pass < 0) break;
    const int f_begin = d[1], rows_begin = d[2], kv_head = d[3], kv_begin = d[4], kv_end = d[5];
    const int num_stages = d[6];
    const bool writes_final = d[7] != 0;
    const int partial_begin = d[8];
    const int* pos = pos_all + slot * kRows;
    const int row_pos[2] = {pos[row0 + g], pos[row0 + g + 8]};
    // Smallest position of the warp's real rows: a stage of keys all <= it and < kv_end
    // needs no mask.
    int warp_min_pos = INT_MAX;
#pragma unroll
    for (int hr = 0; hr < 2; ++hr) {
      if (row0 + g + 8 * hr < n_pass) warp_min_pos = min(warp_min_pos, row_pos[hr]);
    }
    warp_min_pos = __reduce_min_sync(0xffffffffu, warp_min_pos);
    float o[kDb][4];
    float m_run[2] = {-INFINITY, -INFINITY}, l_run[2] = {0.0f, 0.0f};
#pragma unroll
    for (int j = 0; j < kDb; ++j) o[j][0] = o[j][1] = o[j][2] = o[j][3] = 0.0f;
    const uint64_t q_desc =
        smem_desc(smem_addr(smem + L::kOffQ + slot * kQBytes) + 64 * c * 128, 16, 1024);
    // Phases st = 0 .. num_stages: phase st issues S = Q K^T of stage st and O += P V of stage
    // st - 1 as one turn on the tensor cores (the consumers take turns: turn_sync waits for the
    // other consumer's turn_arrive), then runs the softmax of stage st as soon as its S has
    // landed, while its own P V and the other consumer's products run (FA3's intra-warpgroup
    // overlap); o is rescaled and P(st) packed once that P V is done (it reads a and writes o).
    float sacc[kNb][4];
    uint32_t a[kKeys / 16][4];
    int prev_s = 0;  // KV slot of stage st - 1
    uint32_t prev_parity = 0;
    // One phase; kPv and kQk are compile-time so that no wgmma sits on a branch (ptxas
    // serialises every wgmma of the kernel otherwise, C7520).
    auto phase = [&]<bool kPv, bool kQk>(int st) {
      const int s = ks % kKvStages;
      const uint32_t parity = (ks / kKvStages) & 1;
      const int v_slot = prev_s;  // stage st - 1's (prev_s moves on below)
      if (kQk) mbar_wait(bars + 8 * (L::kKFull + s), parity);
      if (kPv) mbar_wait(bars + 8 * (L::kVFull + v_slot), prev_parity);
      turn_sync(c);
      fence_proxy_async();
      fence_operands(o);
      fence_operands(a);
      wgmma_fence();
      if constexpr (kQk) {
        const uint64_t k_desc = smem_desc(smem_addr(smem + L::kOffK + s * kKvBytes), 16, 1024);
#pragma unroll
        for (int kk = 0; kk < kHeadDim / 16; ++kk) {
          const uint32_t step = (kk & 3) * 32;
          WgmmaOp<T>::qk_m64n128k16(sacc, desc_advance(q_desc, (kk >> 2) * (kRows * 128) + step),
                                    desc_advance(k_desc, (kk >> 2) * (kKeys * 128) + step), kk > 0);
        }
        wgmma_commit();
      }
      if constexpr (kPv) {
        const uint64_t v_desc =
            smem_desc(smem_addr(smem + L::kOffV + v_slot * kKvBytes), kKeys * 128, 1024);
#pragma unroll
        for (int kb = 0; kb < kKeys / 16; ++kb) {
          WgmmaOp<T>::pv_m64n128k16(o, a[kb], desc_advance(v_desc, kb * 16 * 128));
        }
        wgmma_commit();
      }
      turn_arrive(1 - c);
      float alpha[2];
      bool grew = false;
      if constexpr (kQk) {
        if constexpr (kPv) {
          wgmma_wait<1>();  // S of stage st; P V of stage st - 1 may still run
        } else {
          wgmma_wait<0>();
        }
        fence_operands(sacc);
        __syncwarp();
        if (lane == 0) mbar_arrive(bars + 8 * (L::kKEmpty + s));
        prev_s = s;
        prev_parity = parity;
        ++ks;
        const int key_pos0 = kv_begin + st * kKeys;
        const bool unmasked = key_pos0 + kKeys - 1 <= warp_min_pos && key_pos0 + kKeys <= kv_end;
        grew = online_softmax(
            sacc, key_pos0, unmasked, kv_end, [&] { return make_int2(row_pos[0], row_pos[1]); },
            scale, m_run, l_run, alpha);
      }
      if constexpr (kPv) {
        wgmma_wait<0>();  // P V of stage st - 1: o is complete, a is free
        fence_operands(o);
        fence_operands(a);
        __syncwarp();
        if (lane == 0) mbar_arrive(bars + 8 * (L::kVEmpty + v_slot));
      }
      if constexpr (kQk) {
        if (__any_sync(0xffffffffu, grew)) {  // o holds every stage before st: rescale it
#pragma unroll
          for (int j = 0; j < kDb; ++j) {
            o[j][0] *= alpha[0];
            o[j][1] *= alpha[0];
            o[j][2] *= alpha[1];
            o[j][3] *= alpha[1];
          }
        }
#pragma unroll
        for (int kb = 0; kb < kKeys / 16; ++kb) {
          a[kb][0] = Mma::pack(sacc[2 * kb][0], sacc[2 * kb][1]);
          a[kb][1] = Mma::pack(sacc[2 * kb][2], sacc[2 * kb][3]);
          a[kb][2] = Mma::pack(sacc[2 * kb + 1][0], sacc[2 * kb + 1][1]);
          a[kb][3] = Mma::pack(sacc[2 * kb + 1][2], sacc[2 * kb + 1][3]);
        }
      }
    };
    if (num_stages > 0) {
      phase.template operator()<false, true>(0);
#pragma unroll 1
      for (int st = 1; st < num_stages; ++st) phase.template operator()<true, true>(st);
      phase.template operator()<true, false>(num_stages);
    } else {
      phase.template operator()<false, false>(0);  // keeps the consumers' turns in step
    }
    __syncwarp();
    if (lane == 0) mbar_arrive(bars + 8 * (L::kQEmpty + slot));
    ++qs;

    // Epilogue: o / l of each real row, final or partial (persistent_kernel.cuh's formulas).
    const int32_t* item_rows = p.plan + p.off_item_rows + rows_begin;
#pragma unroll
    for (int hr = 0; hr < 2; ++hr) {
      l_run[hr] += __shfl_xor_sync(0xffffffffu, l_run[hr], 1);
      l_run[hr] += __shfl_xor_sync(0xffffffffu, l_run[hr], 2);
      const int fr = row0 + g + hr * 8;
      if (fr >= n_pass) continue;
      const int fi = f_begin + fr;
      const int k = p.group_div.div(fi), h = p.group_div.mod(fi, k);
      store_row<T, kHeadDim>(p, writes_final, writes_final ? item_rows[k] : 0, kv_head * group + h,
                             static_cast<size_t>(partial_begin + k) * group + h, o, hr, m_run[hr],
                             l_run[hr]);
    }
  }
}

template <typename T>
__global__ void __launch_bounds__(wide::kThreads, 1) wide_attention_kernel(const KernelParams p) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  using namespace wide;
  using L = Layout;
  extern __shared__ __align__(1024) unsigned char smem[];
  if (smem_addr(smem) % 1024 != 0) __trap();  // the split tiles' 128-byte swizzle atoms
  const uint32_t bars = smem_addr(smem + L::kOffBars);
  if (threadIdx.x == 0) {
    for (int s = 0; s < kQSlots; ++s) {
      mbar_init(bars + 8 * (L::kQFull + s), 256);
      mbar_init(bars + 8 * (L::kQEmpty + s), 8);
    }
    for (int s = 0; s < kKvStages; ++s) {
      mbar_init(bars + 8 * (L::kKFull + s), 128);
      mbar_init(bars + 8 * (L::kKEmpty + s), 8);
      mbar_init(bars + 8 * (L::kVFull + s), 128);
      mbar_init(bars + 8 * (L::kVEmpty + s), 8);
    }
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
  }
  __syncthreads();
  // Programmatic launches (kernel_launch.h): wait for the previous grid before any thread
  // reads q or the pages, then let the next kernel be scheduled.
  wait_for_previous_grid();
  allow_dependent_launch();
  if (threadIdx.x < 128) {
    asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(kProducerRegs));
    wide_produce<T>(p, smem, bars);
  } else {
    asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(kConsumerRegs));
    wide_consume<T>(p, smem, bars, threadIdx.x / 128 - 1);
  }
#else
  __trap();  // launched only on sm_90 devices (run_cuda.cu), whose sm_90a code has wgmma
#endif
}

}  // namespace packserve::attention::cuda
