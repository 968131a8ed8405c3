// persistent_kernel.cuh: executes one Plan's work items (plan.h) on a fixed grid of
// num_ctas (queues) x num_kv_heads CTAs; CTA c + h * num_ctas walks queue c,
// cta_items[cta_indptr[c] .. cta_indptr[c+1]) read from the plan buffer, for KV head h.
// Must match: run_cpu.cc (same work items, same outputs), reference.cc (dtype tolerance).
//
// Mapping. 128 threads = 4 warps. A work item's rows x its GQA group are folded into
// n_folded = num_rows * group_size query vectors, folded index f = k * group_size + h (item
// row k, qo head kv_head * group_size + h): the group's heads of one row are contiguous in q,
// and one K/V load serves them all. The item is processed in q passes of P folded rows,
// P = the smallest of {16, 32, 64} >= min(n_folded, tile_q) (tile_q = 128 runs as two passes
// of 64); in a deterministic plan P = the smallest >= min(group_size, 64), so a row's
// arithmetic never depends on which other rows share its item. Warp w owns the 16 folded rows [16 *
// (w % WarpsQ), +16) of a pass (WarpsQ = P / 16) and the key slice [(w / WarpsQ) * KeysPerWarp,
// +KeysPerWarp) of every KV stage, where KeysPerWarp = kStageKv * WarpsQ / 4: with few rows
// (decode) the four warps split each KV stage between them, and their states are combined through
// shared memory at the end.
//
// KV walk. Keys [kv_begin, kv_hi) of request kv_request's page table, kv_hi = min(kv_end,
// max row position + 1) (no stage lies fully past the causal limit of every row), in stages
// of kStageKv = 64 keys. Each key's 16-byte chunks are gathered with cp.async from its page
// (token t -> kv_page_indices[kv_page_indptr[kv_request] + t / page_size], slot
// t % page_size), so any page size 1..256 works; keys >= kv_hi are zero-filled and masked.
// kStages-deep ring: stage i + kStages - 1 is issued before stage i is computed. The first
// kStages - 1 stages are issued with the bound kv_end before the row positions are known
// (their keys past kv_hi are masked), so the KV fetch overlaps the q load and position lookup.
// The plan's tile_kv is accepted for every value in kTileKvSizes; the kernel's stage is
// kStageKv whatever it is (a plan's tile_kv is a planning granularity here).
//
// Shared memory (b16 tiles swizzled, tile_mma.cuh):
//   q      [64][HeadDim]                          T
//   kv     [kStages][2][kStageKv][HeadDim]        T   (K then V of each stage)
//   rows   row_pos[64] int32, m/l scratch [4][16] f32 x 2
//   the cross-warp combine reuses kv as [4][16][HeadDim + 8] f32 once the walk is done.
//   HeadDim 64: 56.5 KiB, 128: 112.5 KiB (3 stages), 256: 160.5 KiB (2 stages).
//
// Numerics. S = q.k accumulated in f32 by mma.m16n8k16, scaled by sm_scale * log2(e); online
// softmax in base 2 with the row max m and the running sum l (-inf-safe: a row that has seen
// no key yet keeps m = -inf, l = 0, o = 0); P is rounded to T for the PV product (as FA2).
// writes_final: out = o / l rounded to T. Partial: o / l (f32) and lse = m + log2(l).
#pragma once

#include <cuda_runtime.h>

#include <climits>
#include <cstdint>

#include "packserve/attention/cuda/tile_mma.cuh"
#include "packserve/attention/plan_buffer.h"

namespace packserve::attention::cuda {

struct KernelParams {
  const int32_t* plan = nullptr;  // plan buffer (plan_buffer.h layout)
  int off_cta_indptr = 0, off_cta_items = 0, off_items = 0, off_item_rows = 0;
  const void* q = nullptr;
  const void* k_pages = nullptr;
  const void* v_pages = nullptr;
  void* out = nullptr;
  float* partial_o = nullptr;
  float* partial_lse = nullptr;
  const int32_t* qo_indptr = nullptr;
  const int32_t* kv_page_indptr = nullptr;
  const int32_t* kv_page_indices = nullptr;
  const int32_t* kv_last_page_len = nullptr;
  int batch_size = 0;
  int page_size = 0;
  int num_qo_heads = 0;
  int num_kv_heads = 0;
  int group_size = 0;
  float sm_scale_log2 = 0.0f;  // sm_scale * log2(e)
};

inline constexpr int kThreads = 128;
inline constexpr int kWarps = 4;
inline constexpr int kStageKv = 64;
inline constexpr int kPassRowsMax = 64;

template <int HeadDim>
struct KernelTraits {
  static constexpr int kStages = HeadDim <= 128 ? 3 : 2;
  static constexpr int kChunks = HeadDim / 8;  // 16-byte chunks per row
  static constexpr int kQElems = kPassRowsMax * HeadDim;
  static constexpr int kStageElems = 2 * kStageKv * HeadDim;
  static constexpr int kScratchStride = HeadDim + 8;  // f32, padded against bank conflicts
  static constexpr int kTileBytes = (kQElems + kStages * kStageElems) * 2;
  static constexpr int kSmallBytes = kPassRowsMax * 4 + 2 * kWarps * 16 * 4;
  static constexpr int kSmemBytes = kTileBytes + kSmallBytes;
  static_assert(kWarps * 16 * kScratchStride * 4 <= kStages * kStageElems * 2,
                "combine scratch must fit in the KV ring");
};

struct ItemDesc {
  int kv_head, rows_begin, num_rows, kv_request, kv_begin, kv_end;
  bool writes_final;
  int partial_begin;  // storage slot of row 0: kv_head * num_partial_slots + the plan's slot
};

// Position of global query row `row`; its request is `hint` when the row lies in it (the
// item's kv_request: every row of a non-prefix item), else found by binary search of
// qo_indptr (layout passed validate()).
__device__ __forceinline__ int row_position(const KernelParams& p, int row, int hint) {
  int lo = 0, hi = p.batch_size - 1;
  if (p.qo_indptr[hint] <= row && row < p.qo_indptr[hint + 1]) lo = hi = hint;
  while (lo < hi) {
    const int mid = (lo + hi + 1) >> 1;
    if (p.qo_indptr[mid] <= row)
      lo = mid;
    else
      hi = mid - 1;
  }
  const int r = lo;
  const int num_pages = p.kv_page_indptr[r + 1] - p.kv_page_indptr[r];
  const int kv_len = (num_pages - 1) * p.page_size + p.kv_last_page_len[r];
  const int q_len = p.qo_indptr[r + 1] - p.qo_indptr[r];
  return kv_len - q_len + (row - p.qo_indptr[r]);
}

// One q pass: folded rows [f_begin, f_begin + n_pass) of the item.
template <int HeadDim, typename T, int WarpsQ>
__device__ __forceinline__ void run_pass(const KernelParams& p, const ItemDesc& it, int f_begin,
                                         int n_pass, unsigned char* smem) {
  using Tr = KernelTraits<HeadDim>;
  using Mma = MmaOp<T>;
  using Pair = decltype(Mma::pair(0.0f, 0.0f));  // two T in one 32-bit word
  constexpr int kRows = WarpsQ * 16;
  constexpr int kWarpsKv = kWarps / WarpsQ;
  constexpr int kKeysPerWarp = kStageKv / kWarpsKv;  // 16, 32 or 64
  constexpr int kNb = kKeysPerWarp / 8;              // n8 blocks of S per warp
  constexpr int kDb = HeadDim / 8;                   // n8 blocks of O
  T* q_s = reinterpret_cast<T*>(smem);
  T* kv_s = q_s + Tr::kQElems;
  int* pos_s = reinterpret_cast<int*>(smem + Tr::kTileBytes);
  float* m_s = reinterpret_cast<float*>(pos_s + kPassRowsMax);
  float* l_s = m_s + kWarps * 16;

  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  const int wq = warp % WarpsQ, wk = warp / WarpsQ;
  const int g = lane / 4, t4 = lane % 4;
  const int group = p.group_size;
  const T* q = static_cast<const T*>(p.q);
  const T* kp = static_cast<const T*>(p.k_pages);
  const T* vp = static_cast<const T*>(p.v_pages);
  const int32_t* item_rows = p.plan + p.off_item_rows + it.rows_begin;

  // Row positions (pad rows: -1, they see nothing) and the q tile.
  for (int f = tid; f < kRows; f += kThreads) {
    int pos = -1;
    if (f < n_pass) pos = row_position(p, item_rows[(f_begin + f) / group], it.kv_request);
    pos_s[f] = pos;
  }
  for (int c = tid; c < kRows * Tr::kChunks; c += kThreads) {
    const int f = c / Tr::kChunks, chunk = c % Tr::kChunks;
    const bool valid = f < n_pass;
    const T* src = q;
    if (valid) {
      const int fi = f_begin + f;
      const int row = item_rows[fi / group];
      const int head = it.kv_head * group + fi % group;
      src = q + (static_cast<size_t>(row) * p.num_qo_heads + head) * HeadDim + chunk * 8;
    }
    cp_async_16(q_s + swizzle<HeadDim>(f, chunk), src, valid);
  }
  cp_async_commit();
  const int32_t* pages = p.kv_page_indices + p.kv_page_indptr[it.kv_request];

  // Loads keys [base, base + kStageKv) of stage `stage`; keys >= bound are zero-filled.
  auto load_stage = [&](int stage, int bound) {
    T* k_dst = kv_s + (stage % Tr::kStages) * Tr::kStageElems;
    T* v_dst = k_dst + kStageKv * HeadDim;
    constexpr int kKeysPerIter = kThreads / Tr::kChunks;
    constexpr int kIters = kStageKv / kKeysPerIter;
    const int key0 = tid / Tr::kChunks, chunk = tid % Tr::kChunks;
    const int base = it.kv_begin + stage * kStageKv;
    int tok_row[kIters];  // page * page_size + slot (< 2^31 tokens in the pool)
#pragma unroll
    for (int i = 0; i < kIters; ++i) {
      const int tok = base + key0 + i * kKeysPerIter;
      tok_row[i] = tok < bound ? pages[tok / p.page_size] * p.page_size + tok % p.page_size : 0;
    }
#pragma unroll
    for (int i = 0; i < kIters; ++i) {
      const int key = key0 + i * kKeysPerIter;
      const bool valid = base + key < bound;
      const size_t off =
          (static_cast<size_t>(tok_row[i]) * p.num_kv_heads + it.kv_head) * HeadDim + chunk * 8;
      cp_async_16(k_dst + swizzle<HeadDim>(key, chunk), kp + off, valid);
      cp_async_16(v_dst + swizzle<HeadDim>(key, chunk), vp + off, valid);
    }
  };

  // Prologue before the row positions are known (they only lower the end): bounded by kv_end.
  // Keys in [kv_hi, kv_end) it loads are masked (they exceed every row's position); stages it
  // loads past num_stages are never read.
  const int prologue_stages = (it.kv_end - it.kv_begin + kStageKv - 1) / kStageKv;
#pragma unroll
  for (int s = 0; s < Tr::kStages - 1; ++s) {
    if (s < prologue_stages) load_stage(s, it.kv_end);
    cp_async_commit();
  }

  __syncthreads();  // pos_s visible
  int max_pos = -1;
  for (int f = 0; f < kRows; ++f) max_pos = max(max_pos, pos_s[f]);
  const int kv_hi = min(it.kv_end, max_pos + 1);
  const int num_stages = kv_hi > it.kv_begin ? (kv_hi - it.kv_begin + kStageKv - 1) / kStageKv : 0;

  float o[kDb][4];
#pragma unroll
  for (int j = 0; j < kDb; ++j) o[j][0] = o[j][1] = o[j][2] = o[j][3] = 0.0f;
  float m_run[2] = {-INFINITY, -INFINITY};
  float l_run[2] = {0.0f, 0.0f};
  const int my_pos[2] = {pos_s[wq * 16 + g], pos_s[wq * 16 + g + 8]};
  // Smallest position of the warp's real rows (pad rows, which are never written, do not
  // count): a warp slice of keys all <= it and < kv_end needs no mask.
  int warp_min_pos = INT_MAX;
#pragma unroll
  for (int hr = 0; hr < 2; ++hr) {
    if (wq * 16 + g + hr * 8 < n_pass) warp_min_pos = min(warp_min_pos, my_pos[hr]);
  }
#pragma unroll
  for (int sh = 1; sh < 32; sh <<= 1) {
    warp_min_pos = min(warp_min_pos, __shfl_xor_sync(0xffffffffu, warp_min_pos, sh));
  }

  for (int stage = 0; stage < num_stages; ++stage) {
    cp_async_wait<Tr::kStages - 2>();
    __syncthreads();  // stage landed for all threads; everyone is done with stage - 1
    if (stage + Tr::kStages - 1 < num_stages) load_stage(stage + Tr::kStages - 1, kv_hi);
    cp_async_commit();

    const T* k_tile = kv_s + (stage % Tr::kStages) * Tr::kStageElems;
    const T* v_tile = k_tile + kStageKv * HeadDim;
    const int key_w = wk * kKeysPerWarp;  // warp's first key row in the stage
    const int key_pos0 = it.kv_begin + stage * kStageKv + key_w;

    float s[kNb][4];
#pragma unroll
    for (int j = 0; j < kNb; ++j) s[j][0] = s[j][1] = s[j][2] = s[j][3] = 0.0f;
#pragma unroll
    for (int kk = 0; kk < HeadDim / 16; ++kk) {
      uint32_t a[4];
      const int qrow = wq * 16 + (lane & 15);
      ldmatrix_x4(a, q_s + swizzle<HeadDim>(qrow, kk * 2 + (lane >> 4)));
#pragma unroll
      for (int j = 0; j < kNb / 2; ++j) {
        uint32_t b[4];
        const int krow = key_w + j * 16 + (lane & 7) + ((lane >> 4) << 3);
        ldmatrix_x4(b, k_tile + swizzle<HeadDim>(krow, kk * 2 + ((lane >> 3) & 1)));
        Mma::run(s[2 * j], a, b[0], b[1]);
        Mma::run(s[2 * j + 1], a, b[2], b[3]);
      }
    }

    // Mask (key < kv_end and key <= row position), scale, row max.
    float mx[2] = {-INFINITY, -INFINITY};
    const bool unmasked = key_pos0 + kKeysPerWarp - 1 <= warp_min_pos &&
                          key_pos0 + kKeysPerWarp <= it.kv_end;  // warp-uniform
    if (unmasked) {
#pragma unroll
      for (int j = 0; j < kNb; ++j) {
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          s[j][e] *= p.sm_scale_log2;
          mx[e >> 1] = fmaxf(mx[e >> 1], s[j][e]);
        }
      }
    } else {
#pragma unroll
      for (int j = 0; j < kNb; ++j) {
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int key = key_pos0 + j * 8 + 2 * t4 + (e & 1);
          const int hr = e >> 1;
          const bool visible = key < it.kv_end && key <= my_pos[hr];
          s[j][e] = visible ? s[j][e] * p.sm_scale_log2 : -INFINITY;
          mx[hr] = fmaxf(mx[hr], s[j][e]);
        }
      }
    }
    float base[2], alpha[2];
#pragma unroll
    for (int hr = 0; hr < 2; ++hr) {
      mx[hr] = fmaxf(mx[hr], __shfl_xor_sync(0xffffffffu, mx[hr], 1));
      mx[hr] = fmaxf(mx[hr], __shfl_xor_sync(0xffffffffu, mx[hr], 2));
      const float m_new = fmaxf(m_run[hr], mx[hr]);
      base[hr] = m_new == -INFINITY ? 0.0f : m_new;
      alpha[hr] = exp2f(m_run[hr] - base[hr]);  // m_run = -inf -> 0
      m_run[hr] = m_new;
      l_run[hr] *= alpha[hr];
    }
#pragma unroll
    for (int j = 0; j < kNb; ++j) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        s[j][e] = exp2f(s[j][e] - base[e >> 1]);
        l_run[e >> 1] += s[j][e];
      }
    }
#pragma unroll
    for (int j = 0; j < kDb; ++j) {
      o[j][0] *= alpha[0];
      o[j][1] *= alpha[0];
      o[j][2] *= alpha[1];
      o[j][3] *= alpha[1];
    }
    // O += P V.
#pragma unroll
    for (int kb = 0; kb < kKeysPerWarp / 16; ++kb) {
      uint32_t a[4];
      a[0] = Mma::pack(s[2 * kb][0], s[2 * kb][1]);
      a[1] = Mma::pack(s[2 * kb][2], s[2 * kb][3]);
      a[2] = Mma::pack(s[2 * kb + 1][0], s[2 * kb + 1][1]);
      a[3] = Mma::pack(s[2 * kb + 1][2], s[2 * kb + 1][3]);
      const int vrow = key_w + kb * 16 + (lane & 7) + (((lane >> 3) & 1) << 3);
#pragma unroll
      for (int d = 0; d < HeadDim / 16; ++d) {
        uint32_t b[4];
        ldmatrix_x4_trans(b, v_tile + swizzle<HeadDim>(vrow, d * 2 + (lane >> 4)));
        Mma::run(o[2 * d], a, b[0], b[1]);
        Mma::run(o[2 * d + 1], a, b[2], b[3]);
      }
    }
  }
  cp_async_wait<0>();
#pragma unroll
  for (int hr = 0; hr < 2; ++hr) {
    l_run[hr] += __shfl_xor_sync(0xffffffffu, l_run[hr], 1);
    l_run[hr] += __shfl_xor_sync(0xffffffffu, l_run[hr], 2);
  }
  __syncthreads();  // every warp is done with the KV ring (reused as scratch below)

  const int hd_stride = p.num_qo_heads * HeadDim;
  if constexpr (kWarpsKv == 1) {
#pragma unroll
    for (int hr = 0; hr < 2; ++hr) {
      const int f = wq * 16 + g + hr * 8;
      if (f >= n_pass) continue;
      const int fi = f_begin + f;
      const int k = fi / group, h = fi % group;
      const float inv_l = 1.0f / l_run[hr];
      if (it.writes_final) {
        const int row = item_rows[k];
        T* dst = static_cast<T*>(p.out) + static_cast<size_t>(row) * hd_stride +
                 (it.kv_head * group + h) * HeadDim;
#pragma unroll
        for (int j = 0; j < kDb; ++j) {
          *reinterpret_cast<Pair*>(dst + j * 8 + 2 * t4) =
              Mma::pair(o[j][2 * hr] * inv_l, o[j][2 * hr + 1] * inv_l);
        }
      } else {
        const size_t slot = static_cast<size_t>(it.partial_begin + k) * group + h;
        float* dst = p.partial_o + slot * HeadDim;
#pragma unroll
        for (int j = 0; j < kDb; ++j) {
          *reinterpret_cast<float2*>(dst + j * 8 + 2 * t4) =
              make_float2(o[j][2 * hr] * inv_l, o[j][2 * hr + 1] * inv_l);
        }
        if (t4 == 0) p.partial_lse[slot] = m_run[hr] + log2f(l_run[hr]);
      }
    }
  } else {
    // Cross-warp combine: warps wk = 0..kWarpsKv-1 hold states of the same 16 rows.
    float* scratch = reinterpret_cast<float*>(kv_s) + warp * 16 * Tr::kScratchStride;
#pragma unroll
    for (int hr = 0; hr < 2; ++hr) {
      const int r = g + hr * 8;
#pragma unroll
      for (int j = 0; j < kDb; ++j) {
        *reinterpret_cast<float2*>(scratch + r * Tr::kScratchStride + j * 8 + 2 * t4) =
            make_float2(o[j][2 * hr], o[j][2 * hr + 1]);
      }
      if (t4 == 0) {
        m_s[warp * 16 + r] = m_run[hr];
        l_s[warp * 16 + r] = l_run[hr];
      }
    }
    __syncthreads();
    const float* all = reinterpret_cast<const float*>(kv_s);
    for (int idx = tid; idx < n_pass * (HeadDim / 2); idx += kThreads) {
      const int f = idx / (HeadDim / 2), d = (idx % (HeadDim / 2)) * 2;
      const int rq = f / 16, r = f % 16;
      float m_all = -INFINITY;
#pragma unroll
      for (int w = 0; w < kWarpsKv; ++w) m_all = fmaxf(m_all, m_s[(w * WarpsQ + rq) * 16 + r]);
      float l = 0.0f, acc0 = 0.0f, acc1 = 0.0f;
#pragma unroll
      for (int w = 0; w < kWarpsKv; ++w) {
        const int ww = w * WarpsQ + rq;
        const float mw = m_s[ww * 16 + r];
        const float scale = mw == -INFINITY ? 0.0f : exp2f(mw - m_all);
        l += l_s[ww * 16 + r] * scale;
        const float2 v =
            *reinterpret_cast<const float2*>(all + (ww * 16 + r) * Tr::kScratchStride + d);
        acc0 += v.x * scale;
        acc1 += v.y * scale;
      }
      const float inv_l = 1.0f / l;
      const int fi = f_begin + f;
      const int k = fi / group, h = fi % group;
      if (it.writes_final) {
        const int row = item_rows[k];
        T* dst = static_cast<T*>(p.out) + static_cast<size_t>(row) * hd_stride +
                 (it.kv_head * group + h) * HeadDim + d;
        *reinterpret_cast<Pair*>(dst) = Mma::pair(acc0 * inv_l, acc1 * inv_l);
      } else {
        const size_t slot = static_cast<size_t>(it.partial_begin + k) * group + h;
        *reinterpret_cast<float2*>(p.partial_o + slot * HeadDim + d) =
            make_float2(acc0 * inv_l, acc1 * inv_l);
        if (d == 0) p.partial_lse[slot] = m_all + log2f(l);
      }
    }
  }
  __syncthreads();  // the next pass rewrites q, pos and the ring
}

template <int HeadDim, typename T>
__global__ void __launch_bounds__(kThreads) persistent_attention_kernel(const KernelParams p) {
  extern __shared__ __align__(128) unsigned char smem[];
  const int32_t* cta_indptr = p.plan + p.off_cta_indptr;
  const int32_t* cta_items = p.plan + p.off_cta_items;
  const int num_queues = p.plan[kHdrNumCtas];
  const int c = static_cast<int>(blockIdx.x) % num_queues;
  const int kv_head = static_cast<int>(blockIdx.x) / num_queues;
  if (kv_head >= p.plan[kHdrNumKvHeads]) return;
  const int slot_base = kv_head * p.plan[kHdrNumPartialSlots];
  const int begin = cta_indptr[c], end = cta_indptr[c + 1];
  const bool deterministic = p.plan[kHdrDeterministic] != 0;
  for (int idx = begin; idx < end; ++idx) {
    const int32_t* f = p.plan + p.off_items + cta_items[idx] * kItemFields;
    ItemDesc it;
    it.kv_head = kv_head;
    it.rows_begin = f[0];
    it.num_rows = f[1] - f[0];
    it.kv_request = f[2];
    it.kv_begin = f[3];
    it.kv_end = f[4];
    const int tile_q = f[5];
    it.writes_final = f[7] != 0;
    it.partial_begin = slot_base + f[8];
    const int n_folded = it.num_rows * p.group_size;
    // Deterministic plans: the pass size (and so the warps' key split, which fixes the
    // summation order) depends on the group size alone, never on the item's other rows.
    const int want =
        deterministic ? min(p.group_size, kPassRowsMax) : min(min(n_folded, tile_q), kPassRowsMax);
    const int pass = want <= 16 ? 16 : (want <= 32 ? 32 : 64);
    for (int f_begin = 0; f_begin < n_folded; f_begin += pass) {
      const int n_pass = min(pass, n_folded - f_begin);
      if (pass == 16) {
        run_pass<HeadDim, T, 1>(p, it, f_begin, n_pass, smem);
      } else if (pass == 32) {
        run_pass<HeadDim, T, 2>(p, it, f_begin, n_pass, smem);
      } else {
        run_pass<HeadDim, T, 4>(p, it, f_begin, n_pass, smem);
      }
    }
  }
}

}  // namespace packserve::attention::cuda
