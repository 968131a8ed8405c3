// persistent_kernel.cuh: executes one Plan's work items (plan.h) on a fixed grid of
// num_ctas (queues) x num_kv_heads CTAs.
// Must match: run_cpu.cc (same work items, same outputs), reference.cc (dtype tolerance).
//
// Dispatch. The (item, KV head) pairs are tickets 0 .. items * heads - 1: ticket t runs item
// dispatch[t / heads] (the plan buffer's dispatch region, buffer_dispatch_order() of
// plan_buffer.h: the queues' items by their planned start; the items region is stored in that
// order, so entry t / heads holds its fields) for KV head t % heads. The plan's trailing
// num_quad_items quad items (plan_buffer.h) instead take one ticket per eight KV heads (two
// groups of four, or an item's last four), after the others' tickets, and run as one quad pass
// (run_pass); the last min(num_quad_items, grid / 2) of them take one ticket per four KV heads
// instead (with more than four heads), so that the final wave of claims, about one ticket per
// CTA, runs tickets of half the length (H100, twenty-fourth session: PAT [1,256] 0.0757-0.0763
// ms against 0.0765-0.0787 with whole tickets only). With
// KernelParams::skip_wide (the wide kernel ran the leading wide items) the first ticket is
// num_wide_items * heads. CTA b starts with the first ticket + b and claims each next one from
// the workspace's counter (first + grid + atomicAdd) when its current item is done. A CTA that
// finishes early takes the next item instead of idling while a queue runs past the cost model's
// estimate (the plan's queue assignment is the static schedule this list scheduling starts from).
// The merge kernel, which runs after this grid has completed, resets the counter to 0 for the next
// launch (workspace.h). No CTA ever waits for another, so the grid need not be co-resident. Which
// CTA runs an item never changes its arithmetic: outputs are the same bits whatever the dispatch.
// Claiming inside the item's last pass, so that the round trip overlaps the epilogue, was measured
// slower: it spilled at head_dim 128 (eleventh session, against 249 registers without it); done
// after the walk of passes of up to 32 rows only, it was no faster (twenty-second session).
//
// Mapping. 128 threads = 4 warps. A work item's rows x its GQA group are folded into
// n_folded = num_rows * group_size query vectors, folded index f = k * group_size + h (item
// row k, qo head kv_head * group_size + h): the group's heads of one row are contiguous in q,
// and one K/V load serves them all. The item is processed in q passes of P folded rows,
// P = the smallest of {16, 32, 64, 128} >= min(n_folded, tile_q) (128 only at head_dim 128; at
// head_dim 64 and 256 a tile_q = 128 item runs as two passes of 64); in a deterministic plan
// P = min(tile_q, that cap): the planners make a deterministic item's tile_q a function of each of
// its rows' own request (plan.h), and a row's arithmetic depends on P, never on which other rows
// share its pass (every row's S, softmax and P V are its own; a stage past a row's causal limit
// adds exact zeros), so its bits do not depend on the rest of the batch. Passes of up to 64 rows:
// warp w owns the 16 folded rows [16 * (w % WarpsQ), +16) (WarpsQ = P / 16) and the key slice [(w /
// WarpsQ) * KeysPerWarp, +KeysPerWarp) of every KV stage, where KeysPerWarp = kStageKv * WarpsQ /
// 4: with few rows (decode) the four warps split each KV stage between them, and their states are
// combined through shared memory at the end. The 128-row pass: warp w owns two row blocks, [32 w,
// +16) and [32 w + 16, +16), and every key; each K/V fragment read from shared memory feeds both
// blocks (half the ldmatrix per MMA of a 64-row pass, and the item's KV is read once instead of
// twice). Registers: a thread whose o takes 128 registers (two row blocks at head_dim 128, one at
// head_dim 256) walks each stage's keys in two slices of 32 with one online-softmax update per
// slice, so S stays at 32 registers.
// wgmma pass (sm_90a, head_dim 128, the 64- and 128-row passes): the 4 warps are one
// warpgroup; row block mb (64 rows) gives warp w the rows [64 mb + 16 w, +16) (the wgmma
// accumulator layout, per warp the mma.m16n8k16 C fragment, so masking, softmax and the
// epilogue are shared). Per stage and row block: S of all 64 keys by wgmma.m64n64k16 (q and K
// from shared memory), softmax, O += P V by wgmma.m64n128k16 (P from registers); row block 1's
// Q K^T is issued before row block 0's P V so that its softmax overlaps that product. Its q and
// KV tiles use the split layout of wgmma.cuh instead of swizzle().
//
// KV walk. Keys [kv_begin, kv_hi) of request kv_request's page table, kv_hi = min(kv_end,
// max row position + 1) (no stage lies fully past the causal limit of every row), in stages
// of kStageKv = 64 keys. Each key's 16-byte chunks are gathered with cp.async from its page
// (token t -> kv_page_indices[kv_page_indptr[kv_request] + t / page_size], slot
// t % page_size), so any page size 1..256 works; keys >= kv_hi are zero-filled and masked.
// A stage's page ids are looked up one stage before its copies are issued (each lane of a warp
// loads one of the warp's 16 keys' ids and turns it into the key's pool row; the copying
// threads take the rows by shuffle), so the page table's round trip overlaps the compute of a
// stage instead of stalling every stage's copies.
// kStages-deep ring: stage i + kStages - 1 is issued before stage i is computed. The first
// kStages - 1 stages are issued with the bound kv_end before the row positions are known
// (their keys past kv_hi are masked), so the KV fetch overlaps the q load and position lookup.
// The plan's tile_kv is accepted for every value in kTileKvSizes; the kernel's stage is
// kStageKv whatever it is (a plan's tile_kv is a planning granularity here).
//
// Shared memory (b16 tiles swizzled, tile_mma.cuh, or split, wgmma.cuh, in a wgmma pass; every
// tile base aligned to its row stride, and to 1024 bytes where the wgmma pass is compiled):
//   q      [P][HeadDim]                           T
//   kv     [stages][2][kStageKv][HeadDim]         T   (K then V of each stage), right after q
//   rows   row_pos[128] int32, m/l scratch [4][16] f32 x 2 (between items, row_pos[0]
//          carries the claimed ticket from thread 0 to the CTA)
//   The tile area is sized for q of 64 rows and kStages stages; a pass holds as many stages as
//   fit after its own q tile (KernelTraits::stages_for): 3 at head_dim <= 128 for P <= 64, 2 for
//   P = 128 and at head_dim 256.
//   the cross-warp combine reuses kv as [4][16][HeadDim + 8] f32 once the walk is done.
//   Float8 KV: kv is one stage of f16 (the stage being computed, converted from e4m3 by the
//   warps that read it; only its V in the 16-row and quad passes, which take K from the ring:
//   run_pass kRegK) then the ring of e4m3 stages [stages][2][kStageKv][HeadDim] bytes,
//   as deep as fits (KernelTraits::fp8_stages_for: 4 at head_dim <= 128 for P <= 64, 3 for
//   P = 128, 2 at head_dim 256); q stays [P][HeadDim], converted to f16 in place (bf16 q).
//   HeadDim 64: 57 KiB, 128: 113 KiB, 256: 161 KiB.
//
// Numerics. S = q.k accumulated in f32 (mma.m16n8k16 or wgmma); online softmax in base 2 with a
// lazy row max m of S * sm_scale * log2(e) (raised only when a block's max exceeds it by more than
// kLazyMaxLog2, so o is rescaled rarely and p <= 2^8) and the running sum l; p = 2^(fma(S,
// scale, -m)) by the SFU (ex2.approx.ftz) (-inf-safe: a row that has seen no key yet keeps
// m = -inf, l = 0, o = 0); P is rounded to T for the PV product (as FA2).
// writes_final: out = o / l rounded to T. Partial: o / l (f32) and lse = m + log2(l).
#pragma once

#include <cuda_runtime.h>

#include <climits>
#include <cstdint>
#include <type_traits>

#include "packserve/attention/cuda/e4m3_convert.cuh"
#include "packserve/attention/cuda/fast_div.h"
#include "packserve/attention/cuda/programmatic_launch.cuh"
#include "packserve/attention/cuda/run_cuda.h"
#include "packserve/attention/cuda/tile_mma.cuh"
#include "packserve/attention/cuda/wgmma.cuh"
#include "packserve/attention/plan_buffer.h"

namespace packserve::attention::cuda {

struct KernelParams {
  const int32_t* plan = nullptr;  // plan buffer (plan_buffer.h layout)
  int off_dispatch = 0, off_items = 0, off_item_rows = 0;
  int* dispatch = nullptr;  // Workspace::dispatch_counters(): claimed tickets
  const void* q = nullptr;
  const void* k_pages = nullptr;
  const void* v_pages = nullptr;
  // (const char*) v_pages - (const char*) k_pages: a key's V address is its K address plus this,
  // one add from the constant bank.
  int64_t v_minus_k = 0;
  void* out = nullptr;
  void* partial_o = nullptr;  // T elements (Workspace::partial_o)
  float* partial_lse = nullptr;
  const int32_t* q_positions = nullptr;  // DeviceBatch::q_positions
  const int32_t* kv_page_indptr = nullptr;
  const int32_t* kv_page_indices = nullptr;
  int page_size = 0;
  FastDiv page_div;  // token -> page: one multiply-high, not a run-time division per key
  int num_qo_heads = 0;
  int num_kv_heads = 0;
  int group_size = 0;
  FastDiv group_div;             // folded row -> (item row, head of the group)
  float sm_scale_log2 = 0.0f;    // sm_scale * log2(e) (times DeviceBatch::k_scale)
  float v_scale = 1.0f;          // multiplies o / l: DeviceBatch::v_scale, 1 without float8 KV
  uint64_t* timeline = nullptr;  // DeviceBatch::timeline (null: no records)
  // 1: the wide kernel (wide_kernel.cuh) ran the plan's wide items just before this launch;
  // this kernel starts at the first narrow item's ticket. 0: it runs every item.
  int skip_wide = 0;
};

// Timeline mark (DeviceBatch::timeline): %globaltimer now into field `field` of the record.
__device__ __forceinline__ void timeline_phase(uint64_t* rec, int field) {
  uint64_t ns;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(ns));
  rec[field] = ns;
}

// Item start (end = false: fields 0 and 2, plus the SM and the block) or end (fields 1 and 3).
__device__ __forceinline__ void timeline_mark(uint64_t* rec, bool end) {
  timeline_phase(rec, end ? 1 : 0);
  uint64_t cycles;
  asm volatile("mov.u64 %0, %%clock64;" : "=l"(cycles));
  rec[end ? 3 : 2] = cycles;
  if (!end) {
    uint32_t sm;
    asm volatile("mov.u32 %0, %%smid;" : "=r"(sm));
    rec[4] = sm;
    rec[5] = blockIdx.x;
  }
}

// The 64- and 128-row passes at head_dim 128 run on wgmma (one warpgroup = the CTA's 4 warps)
// where the sm_90a features are compiled in; elsewhere (the compute_90 PTX) on mma.sync.
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
inline constexpr bool kHaveWgmma = true;
#else
inline constexpr bool kHaveWgmma = false;
#endif

inline constexpr int kThreads = 128;
inline constexpr int kWarps = 4;
inline constexpr int kStageKv = 64;
inline constexpr int kPassRowsMax = 128;  // row positions held per pass (pos_s)
// Lazy running max (run_pass): a row's max m (log2 units of scaled scores) is raised only when
// a slice's max exceeds it by more than this, so p = 2^(s - m) <= 2^8 (exact in f32, and its
// bf16/f16 rounding is relative) and most slices skip rescaling o.
inline constexpr float kLazyMaxLog2 = 8.0f;

// Online softmax of one warp's 16 rows over the S of keys [key_pos0, +8 Nb) (the mma.m16n8k16
// C fragments, or a wgmma accumulator's, per thread rows g and g + 8): mask (key < kv_end and
// key <= row position; `unmasked` says no key needs it, and row_pos() is then not called), row
// max, p = 2^(s * scale - m) in place, with m the lazy running max of s * scale (scale > 0, so
// the max of the raw scores, scaled, is the max of the scaled ones): it moves only when the
// keys' max exceeds it by more than kLazyMaxLog2, so most calls keep alpha = 1 exactly. l
// gains the p and is rescaled by alpha; the caller rescales o. Returns whether a row of this
// thread moved its m. Used by both kernels (persistent_kernel.cuh, wide_kernel.cuh).
template <int Nb, typename RowPos>
__device__ __forceinline__ bool online_softmax(float (&s)[Nb][4], int key_pos0, bool unmasked,
                                               int kv_end, RowPos row_pos, float scale,
                                               float (&m_run)[2], float (&l_run)[2],
                                               float (&alpha)[2]) {
  const int t4 = threadIdx.x % 4;
  float mx[2] = {-INFINITY, -INFINITY};
  if (unmasked) {
#pragma unroll
    for (int j = 0; j < Nb; ++j) {
#pragma unroll
      for (int e = 0; e < 4; ++e) mx[e >> 1] = fmaxf(mx[e >> 1], s[j][e]);
    }
  } else {  // (the diagonal and the KV end)
    const int2 pos = row_pos();
#pragma unroll
    for (int j = 0; j < Nb; ++j) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int key = key_pos0 + j * 8 + 2 * t4 + (e & 1);
        const bool visible = key < kv_end && key <= ((e >> 1) == 0 ? pos.x : pos.y);
        if (!visible) s[j][e] = -INFINITY;
        mx[e >> 1] = fmaxf(mx[e >> 1], s[j][e]);
      }
    }
  }
  float base[2];
  bool grew = false;
  // A row's max moves only if one of its four lanes' own keys exceed it by the margin: unless
  // some lane of the warp sees that, every row keeps m (alpha = 1) without the lanes' maxima
  // being combined. Warp-uniform, and a row's result is the same on either path.
  const bool own_grow =
      mx[0] * scale > m_run[0] + kLazyMaxLog2 || mx[1] * scale > m_run[1] + kLazyMaxLog2;
  if (__any_sync(0xffffffffu, own_grow)) {
#pragma unroll
    for (int hr = 0; hr < 2; ++hr) {
      mx[hr] = fmaxf(mx[hr], __shfl_xor_sync(0xffffffffu, mx[hr], 1));
      mx[hr] = fmaxf(mx[hr], __shfl_xor_sync(0xffffffffu, mx[hr], 2));
      const float mx_scaled = mx[hr] * scale;
      const bool grow = mx_scaled > m_run[hr] + kLazyMaxLog2;  // never for mx = -inf
      const float m_new = grow ? mx_scaled : m_run[hr];
      base[hr] = m_new == -INFINITY ? 0.0f : m_new;
      alpha[hr] = grow ? exp2_ftz(m_run[hr] - base[hr]) : 1.0f;  // m_run = -inf -> 0
      m_run[hr] = m_new;
      l_run[hr] *= alpha[hr];
      grew |= grow;
    }
  } else {
#pragma unroll
    for (int hr = 0; hr < 2; ++hr) {
      base[hr] = m_run[hr] == -INFINITY ? 0.0f : m_run[hr];
      alpha[hr] = 1.0f;
    }
  }
#pragma unroll
  for (int j = 0; j < Nb; ++j) {
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      s[j][e] = exp2_ftz(fmaf(s[j][e], scale, -base[e >> 1]));
      l_run[e >> 1] += s[j][e];
    }
  }
  return grew;
}

// Epilogue of one folded row held in accumulator fragments (per thread columns 8 j + 2 t4 and
// + 1 of row hr of each n8 block j): o / l rounded to T into the final output of query row
// `row`, qo head `head` (writes_final), or into partial slot `slot` with lse = m + log2 l.
template <typename T, int HeadDim, bool kFp8Kv = false>
__device__ __forceinline__ void store_row(const KernelParams& p, bool writes_final, int row,
                                          int head, size_t slot, const float (&o)[HeadDim / 8][4],
                                          int hr, float m, float l) {
  using Mma = MmaOp<T>;
  using Pair = decltype(Mma::pair(0.0f, 0.0f));
  const int t4 = threadIdx.x % 4;
  const float inv_l = kFp8Kv ? p.v_scale / l : 1.0f / l;
  if (writes_final) {
    T* dst = static_cast<T*>(p.out) + (static_cast<size_t>(row) * p.num_qo_heads + head) * HeadDim;
#pragma unroll
    for (int j = 0; j < HeadDim / 8; ++j) {
      *reinterpret_cast<Pair*>(dst + j * 8 + 2 * t4) =
          Mma::pair(o[j][2 * hr] * inv_l, o[j][2 * hr + 1] * inv_l);
    }
    return;
  }
  // A partial state stays in L2 for the merge (tile_mma.cuh st_keep_l2).
  T* dst = static_cast<T*>(p.partial_o) + slot * HeadDim;
#pragma unroll
  for (int j = 0; j < HeadDim / 8; ++j) {
    st_keep_l2(dst + j * 8 + 2 * t4, Mma::pack(o[j][2 * hr] * inv_l, o[j][2 * hr + 1] * inv_l));
  }
  if (t4 == 0) st_keep_l2(p.partial_lse + slot, __float_as_uint(m + log2f(l)));
}

template <int HeadDim>
struct KernelTraits {
  static constexpr int kStages = HeadDim <= 128 ? 3 : 2;  // KV ring depth of passes <= 64 rows
  static constexpr int kChunks = HeadDim / 8;             // 16-byte chunks per row
  static constexpr int kQElems = 64 * HeadDim;            // q tile of passes <= 64 rows
  static constexpr int kStageElems = 2 * kStageKv * HeadDim;
  static constexpr int kScratchStride = HeadDim + 8;  // f32, padded against bank conflicts
  static constexpr int kTileElems = kQElems + kStages * kStageElems;
  static constexpr int kTileBytes = kTileElems * 2;
  static constexpr int kSmallBytes = kPassRowsMax * 4 + 2 * kWarps * 16 * 4;
  static constexpr int kSmemBytes = kTileBytes + kSmallBytes;
  // Largest pass: 128 rows (two row blocks per warp) at head_dim 128 only. At 256 the o of two
  // row blocks does not fit in registers; at 64 the 128-row pass needs more than the 168
  // registers that keep 3 CTAs per SM (kMinCtasPerSm).
  static constexpr int kMaxPassRows = HeadDim == 128 ? 128 : 64;
  // CTAs per SM the registers must allow (__launch_bounds__): what the shared memory allows.
  static constexpr int kMinCtasPerSm = HeadDim == 64 ? 3 : (HeadDim == 128 ? 2 : 1);
  // KV ring depth of a pass of `rows` q rows: the stages that fit in the tile area after its
  // q tile (a 128-row pass trades the third stage for the larger q tile).
  static constexpr int stages_for(int rows) {
    const int fit = (kTileElems - rows * HeadDim) / kStageElems;
    return fit < kStages ? fit : kStages;
  }
  // Float8 KV: a stage is kStageElems bytes of e4m3, and one stage of kStageElems 16-bit values
  // holds the converted one (run_pass); the ring takes the stages that fit after both and the
  // q tile, up to kStages8: at head_dim <= 128 three in flight (48 KiB) beside bf16's two
  // (64 KiB), 2 at head_dim 256.
  static constexpr int kStages8 = 4;
  static constexpr int fp8_stages_for(int rows) {
    const int fit = (kTileBytes - rows * HeadDim * 2 - kStageElems * 2) / kStageElems;
    return fit < kStages8 ? fit : kStages8;
  }
  static_assert(kWarps * 16 * kScratchStride * 4 <= stages_for(32) * kStageElems * 2,
                "combine scratch must fit in the KV ring");
  static_assert(stages_for(kMaxPassRows) >= 2, "the largest pass needs a double-buffered ring");
};

struct ItemDesc {
  int kv_head, rows_begin, num_rows, kv_request, kv_begin, kv_end;
  bool writes_final;
  int partial_begin;  // storage slot of row 0: kv_head * num_partial_slots + the plan's slot
};

// One q pass: folded rows [f_begin, f_begin + n_pass) of the item, Mb row blocks of 16 per warp.
// rec: the item's timeline record where this thread marks the pass's phases (thread 0 of the
// item's first pass when recording), else null.
template <int HeadDim, typename T, bool kFp8Kv, int WarpsQ, int Mb, bool kQuad = false>
__device__ __forceinline__ void run_pass(const KernelParams& p, const ItemDesc& it, int f_begin,
                                         int n_pass, uint64_t* rec, unsigned char* smem,
                                         int quad_groups = 1) {
  using Tr = KernelTraits<HeadDim>;
  // The products' input type: T, or f16 over float8 KV (Tc below), whose e4m3 values f16
  // holds exactly and converts in one instruction a pair; q and o stay T in global memory.
  using Tc = std::conditional_t<kFp8Kv, __half, T>;
  using Mma = MmaOp<Tc>;
  using Out = MmaOp<T>;                          // the outputs' and partial states' type
  using Pair = decltype(Out::pair(0.0f, 0.0f));  // two T in one 32-bit word
  constexpr int kRows = WarpsQ * 16 * Mb;
  static_assert(Mb == 1 || WarpsQ == kWarps, "two row blocks per warp only with all warps on q");
  // Quad pass (plan_buffer.h is_quad_item): one query row's <= 4 folded rows for each of the
  // KV heads it.kv_head + w (w < 4), folded row f = 4 w + h (h < group; the others are pads);
  // a stage holds 16 tokens of each of the four heads, head w's in the K/V tile rows [16 w,
  // +16), which are warp w's key slice: warp w computes head w alone (its S rows of the other
  // heads are never written) and stores its own rows, with no cross-warp combine.
  // A quad ticket walks quad_groups (<= kQuadGroups) such groups of four heads one after the
  // other in one KV walk: group q's heads are it.kv_head + 4 q + w, its q rows are the tile's
  // [16 q, +16), and its stages follow the previous group's in the ring, so the next group's
  // first stages are in flight while the last ones of the group before are computed; each
  // warp stores its head's rows when its group's walk is done and starts the next from zero.
  static_assert(!kQuad || (WarpsQ == 1 && Mb == 1), "a quad pass is a 16-row pass");
  constexpr int kQuadGroups = 2;
  constexpr int kQRows = kQuad ? 16 * kQuadGroups : kRows;       // rows of the q tile
  constexpr int kStageTokens = kQuad ? kStageKv / 4 : kStageKv;  // tokens (of each head)
  constexpr int kStages = kFp8Kv ? Tr::fp8_stages_for(kQRows) : Tr::stages_for(kQRows);
  static_assert(kStages >= 2, "the q tile leaves no room for a double-buffered KV ring");
  constexpr int kWarpsKv = kWarps / WarpsQ;
  constexpr int kKeysPerWarp = kStageKv / kWarpsKv;  // 16, 32 or 64
  // o of 128 registers per thread (two row blocks at head_dim 128, or head_dim 256) leaves no
  // room for S of 64 keys: a warp that holds all 64 keys of a stage walks them in two slices
  // of 32 (one online-softmax update per slice), S stays at 32 registers.
  constexpr int kSlices = Mb * HeadDim >= 256 && kKeysPerWarp == 64 ? 2 : 1;
  constexpr int kKeysSlice = kKeysPerWarp / kSlices;
  constexpr int kNb = kKeysSlice / 8;  // n8 blocks of S per warp and slice
  constexpr int kDb = HeadDim / 8;     // n8 blocks of O
  // wgmma pass (64 and 128 rows at head_dim 128, every warp on q rows): q and KV tiles in the
  // split layout (wgmma.cuh), warp w's row blocks are [64 mb + 16 w, +16) (the wgmma
  // accumulator rows); else warp w's are [16 (w Mb + mb), +16).
  constexpr bool kWgmma = kHaveWgmma && HeadDim == 128 && WarpsQ == kWarps;
  auto tile_offset = [](int row, int chunk, int rows) {
    if constexpr (kWgmma) {
      return swizzle_split(row, chunk, rows);
    } else {
      return swizzle<HeadDim>(row, chunk);
    }
  };
  Tc* q_s = reinterpret_cast<Tc*>(smem);
  Tc* kv_s = q_s + kQRows * HeadDim;
  // Float8 KV (kFp8Kv): the ring's stages hold e4m3 bytes, the stage's K rows [kStageKv][HeadDim]
  // (each key's bytes in order) then its V rows, right after one stage of Tc at kv_s: the stage
  // being computed is converted into that one (convert_stage), in the layout the 16-bit path
  // reads from its ring, so the products below are the same code.
  constexpr int kStage8Bytes = 2 * kStageKv * HeadDim;
  unsigned char* kv8_s = reinterpret_cast<unsigned char*>(kv_s + Tr::kStageElems);
  static_assert(!kFp8Kv || kQRows * HeadDim * 2 + Tr::kStageElems * 2 + kStages * kStage8Bytes <=
                               Tr::kTileBytes,
                "the float8 ring and its converted stage must fit in the tile area");
  int* pos_s = reinterpret_cast<int*>(smem + Tr::kTileBytes);
  float* m_s = reinterpret_cast<float*>(pos_s + kPassRowsMax);
  float* l_s = m_s + kWarps * 16;

  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  const int wq = warp % WarpsQ, wk = warp / WarpsQ;
  auto block_row = [&](int mb) { return kWgmma ? mb * 64 + wq * 16 : (wq * Mb + mb) * 16; };
  const int g = lane / 4, t4 = lane % 4;
  const int group = p.group_size;
  const T* q = static_cast<const T*>(p.q);
  const int32_t* item_rows = p.plan + p.off_item_rows + it.rows_begin;

  // Start-up: the loads that depend only on the item (the page list's offset, the thread's
  // query row) are issued first, then those that depend on them (the prologue stages' page
  // ids, the row's position), then the q copies and the KV prologue's copies; a row position
  // reaches shared memory last. So the chain before the first KV copy is three dependent loads
  // (item fields, page offset, page id) and the row positions are known by then. The loops
  // that run once per pass stay rolled (unroll 1): the kernel's code is several times the SM's
  // instruction cache, and an item's start-up code is fetched again whenever a co-resident CTA
  // of another pass size has evicted it (docs/gpu.md, "Code size").
  static_assert(kRows <= kThreads, "a thread holds at most one row position");
  const int32_t* pages = p.kv_page_indices + p.kv_page_indptr[it.kv_request];
  int pos_row = -1;       // the query row whose position this thread stores (pad rows: none)
  if constexpr (kQuad) {  // every row (pads too: never written) is the one query row
    if (tid < kRows) pos_row = item_rows[0];
  } else {
    if (tid < n_pass) pos_row = item_rows[p.group_div.div(f_begin + tid)];
  }

  // A stage's copies: thread tid copies chunk tid % kChunks of the keys tid / kChunks + i *
  // kKeysPerIter (i < kIters), so warp w copies 16 keys of every stage, its key j being
  // w * kKeysPerWarpIter + j % kKeysPerWarpIter + kKeysPerIter * (j / kKeysPerWarpIter).
  constexpr int kKeysPerIter = kThreads / Tr::kChunks;
  constexpr int kIters = kStageKv / kKeysPerIter;
  constexpr int kKeysPerWarpIter = 32 / Tr::kChunks;
  static_assert(kKeysPerWarpIter * kIters == 16, "a warp copies 16 keys of a stage");
  // The token of the warp's key `lane % 16` of stage `stage` (each lane owns one of the 16).
  // Quad pass: lane % 16 owns token lane % 16 of the stage, of every head; each head group
  // walks the item's keys to kv_end (whatever the row position: keys past it are masked) in
  // end_stages stages, group q's being the ring's stages [q end_stages, (q + 1) end_stages).
  const int end_stages = (it.kv_end - it.kv_begin + kStageTokens - 1) / kStageTokens;  // to kv_end
  auto lane_token = [&](int stage) {
    const int j = lane % 16;
    if constexpr (kQuad) {
      static_assert(kQuadGroups == 2, "a stage's group is found by one compare");
      return it.kv_begin + (stage >= end_stages ? stage - end_stages : stage) * kStageTokens + j;
    }
    return it.kv_begin + stage * kStageKv + warp * kKeysPerWarpIter + j % kKeysPerWarpIter +
           kKeysPerIter * (j / kKeysPerWarpIter);
  };
  // Page lookup of the lane's key of stage `stage`: the page id (0 past bound), loaded here and
  // used a stage later by load_stage, so that the round trip to the page table overlaps a
  // stage's compute instead of stalling that stage's copies.
  auto lookup_page = [&](int stage, int bound) {
    const int tok = lane_token(stage);
    return tok < bound ? pages[p.page_div.div(tok)] : 0;
  };
  // Loads the kStageKv keys of stage `stage`, whose page ids lookup_page(stage, bound) returned
  // in each lane as `page_ids`; keys >= bound are zero-filled. Each lane first turns its own
  // key's page id into the key's row of the pool (-1 past bound), once per stage; a copy then
  // takes its key's row by shuffle and its address by one wide multiply-add, so the 16 threads
  // that copy a key's chunks do not each redo the key's slot arithmetic.
  // A thread's keys of a stage are key0 + i * kKeysPerIter, and a key's swizzle is its row & 7:
  // with kPeriod = 8 / kKeysPerIter (1 where kKeysPerIter is a multiple of 8) key i has key
  // i % kPeriod's swizzle, so its tile address is that key's plus a constant, which folds into
  // the copy's immediate offset.
  constexpr int kPeriod = kKeysPerIter >= 8 ? 1 : 8 / kKeysPerIter;
  constexpr uint32_t kPeriodBytes = kPeriod * kKeysPerIter * (kWgmma ? 64 : HeadDim) * sizeof(Tc);
  auto load_stage = [&](int stage, int bound, int page_ids) {
    Tc* k_dst = kv_s + (stage % kStages) * Tr::kStageElems;
    constexpr uint32_t kVBytes = kStageKv * HeadDim * sizeof(T);  // V's tile after K's
    const int key0 = tid / Tr::kChunks, chunk = tid % Tr::kChunks;
    const int tok = lane_token(stage);
    const int quot = p.page_div.div(tok);
    // page * page_size + slot (< 2^31 tokens in the pool)
    const int my_row = tok < bound ? page_ids * p.page_size + p.page_div.mod(tok, quot) : -1;
    const uint32_t row_bytes = static_cast<uint32_t>(p.num_kv_heads) * HeadDim * sizeof(T);
    // (quad pass: the second head group's stages read four heads further)
    const int head0 = kQuad && stage >= end_stages ? it.kv_head + 4 : it.kv_head;
    const char* k_src = static_cast<const char*>(p.k_pages) +
                        (static_cast<uint32_t>(head0) * HeadDim + chunk * 8) * sizeof(T);
    asm("" : "+l"(k_src));  // one 64-bit base for the copies' multiply-adds
    uint32_t k_dst0[kPeriod];
#pragma unroll
    for (int r = 0; r < kPeriod; ++r) {
      k_dst0[r] = smem_addr(k_dst + tile_offset(key0 + r * kKeysPerIter, chunk, kStageKv));
    }
#pragma unroll
    for (int i = 0; i < kIters; ++i) {
      // Quad pass: tile row key0 + i kKeysPerIter (key0 < kKeysPerIter, which divides 16) is
      // token key0 + (i kKeysPerIter) % 16 of head (i kKeysPerIter) / 16, a constant offset.
      const int owner =
          kQuad ? key0 + i * kKeysPerIter % 16 : key0 % kKeysPerWarpIter + kKeysPerWarpIter * i;
      const int row = __shfl_sync(0xffffffffu, my_row, owner);
      // (row -1, past bound: row 0's address, which the zero-filling copies do not read)
      const char* src = k_src +
                        static_cast<uint64_t>(static_cast<uint32_t>(max(row, 0))) * row_bytes +
                        (kQuad ? i * kKeysPerIter / 16 * HeadDim * sizeof(T) : 0);
      const uint32_t dst = k_dst0[i % kPeriod] + i / kPeriod * kPeriodBytes;
      cp_async_16_pair(dst, src, dst + kVBytes, src + p.v_minus_k, row);
    }
  };
  // The float8 stage's copies (kFp8Kv): a key's row is HeadDim bytes, kC8 16-byte chunks; lane
  // `lane` copies chunk lane % kC8 of keys that its own warp looks up (so the row comes by
  // shuffle as above): owner index j = 2 kKeysPerWarpIter i + lane / kC8 of the warp's 16, whose
  // key (lane_token's formula) is the one below. Quad pass: every warp owns every token, so
  // rows go in order, row r = 16 head + token.
  auto load_stage8 = [&](int stage, int bound, int page_ids) {
    constexpr int kC8 = HeadDim / 16;
    constexpr int kIters8 = kStageKv * kC8 / kThreads;
    static_assert(kIters8 * 2 == kIters, "a float8 stage takes half the copies");
    const int sub = lane / kC8, chunk = lane % kC8;
    const int tok = lane_token(stage);
    const int quot = p.page_div.div(tok);
    const int my_row = tok < bound ? page_ids * p.page_size + p.page_div.mod(tok, quot) : -1;
    const uint32_t row_bytes = static_cast<uint32_t>(p.num_kv_heads) * HeadDim;
    const int head0 = kQuad && stage >= end_stages ? it.kv_head + 4 : it.kv_head;
    const char* k_src =
        static_cast<const char*>(p.k_pages) + (static_cast<uint32_t>(head0) * HeadDim + chunk * 16);
    asm("" : "+l"(k_src));
    const uint32_t dst0 = smem_addr(kv8_s + (stage % kStages) * kStage8Bytes) + chunk * 16;
    // (rolled at head_dim 256, where o takes 128 registers in every pass: 268 -> 168 bytes of
    // spills; unrolled below it, without spills)
    constexpr int kUnroll8 = HeadDim == 256 ? 1 : kIters8;
#pragma unroll kUnroll8
    for (int i = 0; i < kIters8; ++i) {
      int r, owner;
      if constexpr (kQuad) {
        r = tid / kC8 + kThreads / kC8 * i;
        owner = r % 16;
      } else {
        owner = 2 * kKeysPerWarpIter * i + sub;
        r = warp * kKeysPerWarpIter + sub % kKeysPerWarpIter +
            kKeysPerIter * (2 * i + sub / kKeysPerWarpIter);
      }
      const int row = __shfl_sync(0xffffffffu, my_row, owner);
      const char* src = k_src +
                        static_cast<uint64_t>(static_cast<uint32_t>(max(row, 0))) * row_bytes +
                        (kQuad ? r / 16 * HeadDim : 0);
      const uint32_t dst = dst0 + r * HeadDim;
      cp_async_16_pair(dst, src, dst + kStageKv * HeadDim, src + p.v_minus_k, row);
    }
  };
  auto issue_stage = [&](int stage, int bound, int page_ids) {
    if constexpr (kFp8Kv) {
      load_stage8(stage, bound, page_ids);
    } else {
      load_stage(stage, bound, page_ids);
    }
  };
  // Float8 stage `stage` (landed) into the f16 stage at kv_s, exactly (e4m3_convert.cuh), 16
  // bytes of a row into their two 16-byte chunks of the tile at a time. In a pass whose warps
  // each read only their own key rows (WarpsQ 1: K and V rows [16 w, +16), the quad pass's
  // too) each warp converts its rows itself, so only the warp waits for them; in the others
  // every thread converts a share of the stage and all wait at a barrier.
  // Those passes (mma.sync) take their K operands straight from the e4m3 ring instead
  // (kRegK, the Q K^T loop below): only V is converted.
  constexpr bool kWarpLocal = WarpsQ == 1;
  constexpr bool kRegK = kFp8Kv && kWarpLocal && !kWgmma;
  auto convert_stage = [&](int stage) {
    constexpr int kC8 = HeadDim / 16;
    constexpr int kWorkers = kWarpLocal ? 32 : kThreads;
    constexpr int kRowsEach = kWarpLocal ? kKeysPerWarp : kStageKv;  // of K, and as many of V
    constexpr int kFirst = kRegK ? 1 : 0;  // the first of K (0) and V (1) converted
    const int worker = kWarpLocal ? lane : tid;
    const int row0 = kWarpLocal ? warp * kKeysPerWarp : 0;
    const unsigned char* src = kv8_s + (stage % kStages) * kStage8Bytes;
#pragma unroll 1
    for (int i = 0; i < (2 - kFirst) * kRowsEach * kC8 / kWorkers; ++i) {
      const int c = worker + i * kWorkers;
      const int kv = kFirst + c / (kRowsEach * kC8);  // 0: K, 1: V
      const int r = row0 + c % (kRowsEach * kC8) / kC8, chunk = c % kC8;
      const uint4 v =
          *reinterpret_cast<const uint4*>(src + (kv * kStageKv + r) * HeadDim + chunk * 16);
      using Cvt = E4m3To<Tc>;
      const uint4 lo = make_uint4(Cvt::template pair<true>(v.x), Cvt::template pair<false>(v.x),
                                  Cvt::template pair<true>(v.y), Cvt::template pair<false>(v.y));
      const uint4 hi = make_uint4(Cvt::template pair<true>(v.z), Cvt::template pair<false>(v.z),
                                  Cvt::template pair<true>(v.w), Cvt::template pair<false>(v.w));
      Tc* tile = kv_s + kv * kStageKv * HeadDim;
      *reinterpret_cast<uint4*>(tile + tile_offset(r, 2 * chunk, kStageKv)) = lo;
      *reinterpret_cast<uint4*>(tile + tile_offset(r, 2 * chunk + 1, kStageKv)) = hi;
    }
  };
  // A bf16 q tile over float8 KV becomes f16 in place (once, when it has landed), times 2^-6:
  // exact for 2^-10 <= |q| < 2^22 (f16's 11 significant bits hold bf16's 8), an absolute error
  // <= 2^-19 below. The softmax scale carries the 2^6 back.
  constexpr bool kQToF16 = kFp8Kv && !std::is_same_v<T, __half>;
  constexpr float kQScale = 1.0f / 64.0f;
  const float sm_scale_log2 = kQToF16 ? p.sm_scale_log2 / kQScale : p.sm_scale_log2;
  auto convert_q = [&] {
    uint4* tile = reinterpret_cast<uint4*>(q_s);
#pragma unroll 1
    for (int c = tid; c < kQRows * HeadDim / 8; c += kThreads) {
      uint4 v = tile[c];
      v.x = bf16x2_to_f16x2(v.x, kQScale);
      v.y = bf16x2_to_f16x2(v.y, kQScale);
      v.z = bf16x2_to_f16x2(v.z, kQScale);
      v.w = bf16x2_to_f16x2(v.w, kQScale);
      tile[c] = v;
    }
  };

  // Prologue before the row positions are known (they only lower the end): bounded by kv_end.
  // Keys in [kv_hi, kv_end) it loads are masked (they exceed every row's position); stages it
  // loads past num_stages are never read. Its page ids and the row position are loaded before
  // any copy is issued.
  static_assert(kStages <= 4, "the prologue holds at most three stages' page ids");
  const int prologue_stages = kQuad ? quad_groups * end_stages : end_stages;
  const int page_id0 = prologue_stages > 0 ? lookup_page(0, it.kv_end) : 0;
  const int page_id1 = kStages > 2 && prologue_stages > 1 ? lookup_page(1, it.kv_end) : 0;
  const int page_id2 = kStages > 3 && prologue_stages > 2 ? lookup_page(2, it.kv_end) : 0;
  const int row_pos = pos_row >= 0 ? p.q_positions[pos_row] : -1;  // pad rows see nothing
#pragma unroll 1
  for (int c = tid; c < kQRows * Tr::kChunks; c += kThreads) {
    const int f = c / Tr::kChunks, chunk = c % Tr::kChunks;
    const bool valid = kQuad ? f % 4 < group && f / 16 < quad_groups : f < n_pass;
    const T* src = q;
    if (valid) {
      int row, head;
      if constexpr (kQuad) {
        row = item_rows[0];
        head = (it.kv_head + f / 4) * group + f % 4;
      } else {
        const int fi = f_begin + f;
        const int k = p.group_div.div(fi);
        row = item_rows[k];
        head = it.kv_head * group + p.group_div.mod(fi, k);
      }
      src = q + (static_cast<size_t>(row) * p.num_qo_heads + head) * HeadDim + chunk * 8;
    }
    cp_async_16(q_s + tile_offset(f, chunk, kQRows), src, valid);
  }
  cp_async_commit();
#pragma unroll 1
  for (int s = 0; s < kStages - 1; ++s) {
    if (s < prologue_stages) {
      issue_stage(s, it.kv_end, s == 0 ? page_id0 : (s == 1 ? page_id1 : page_id2));
    }
    cp_async_commit();
  }
  if (tid < kRows) pos_s[tid] = row_pos;
  __syncthreads();  // pos_s visible
  if (rec != nullptr) timeline_phase(rec, kTimelinePositions);
  int max_pos = -1;  // over the pass's rows: each lane takes every 32nd, then the warp's max
#pragma unroll
  for (int f = lane; f < kRows; f += 32) max_pos = max(max_pos, pos_s[f]);
  max_pos = __reduce_max_sync(0xffffffffu, max_pos);
  const int kv_hi = min(it.kv_end, max_pos + 1);
  const int num_stages = kv_hi <= it.kv_begin
                             ? 0
                             : (kQuad ? quad_groups * end_stages
                                      : (kv_hi - it.kv_begin + kStageTokens - 1) / kStageTokens);

  // Warp row block mb holds the folded rows [block_row(mb), +16) of the pass; a thread
  // holds rows g and g + 8 of each block (hr = 0, 1).
  float o[Mb][kDb][4];
  float m_run[Mb][2], l_run[Mb][2];
  // Smallest position of the warp's real rows (pad rows, which are never written, do not
  // count): a warp slice of keys all <= it and < kv_end needs no mask.
  int warp_min_pos = INT_MAX;
#pragma unroll
  for (int mb = 0; mb < Mb; ++mb) {
#pragma unroll
    for (int j = 0; j < kDb; ++j) o[mb][j][0] = o[mb][j][1] = o[mb][j][2] = o[mb][j][3] = 0.0f;
#pragma unroll
    for (int hr = 0; hr < 2; ++hr) {
      const int f = block_row(mb) + g + hr * 8;
      m_run[mb][hr] = -INFINITY;
      l_run[mb][hr] = 0.0f;
      if (f < n_pass) warp_min_pos = min(warp_min_pos, pos_s[f]);
    }
  }
#pragma unroll
  for (int sh = 1; sh < 32; sh <<= 1) {
    warp_min_pos = min(warp_min_pos, __shfl_xor_sync(0xffffffffu, warp_min_pos, sh));
  }

  // ldmatrix lane addresses (tile_mma.cuh ldmatrix_lane_offset): q rows lane & 15, chunk
  // 2 kk + lane / 16; K rows (lane & 7) + 8 (lane / 16), chunk 2 kk + (lane / 8) % 2; V
  // (transposed) rows (lane & 7) + 8 ((lane / 8) % 2), chunk 2 d + lane / 16.
  constexpr int kRowBytes = 2 * HeadDim;
  const uint32_t q_lane =
      smem_addr(q_s) + ldmatrix_lane_offset<HeadDim>(lane & 15, lane >> 4, lane);
  const uint32_t k_lane_off =
      ldmatrix_lane_offset<HeadDim>((lane & 7) + ((lane >> 4) << 3), (lane >> 3) & 1, lane);
  const uint32_t v_lane_off =
      ldmatrix_lane_offset<HeadDim>((lane & 7) + (((lane >> 3) & 1) << 3), lane >> 4, lane);

  // online_softmax on the S of row block mb over keys [key_pos0, +8 Nb); rescale_o then
  // multiplies o (apart, so that the wgmma pass can first wait for a P V in flight).
  auto softmax = [&]<int Nb>(float(&s)[Nb][4], int mb, int key_pos0, float(&alpha)[2]) {
    const bool unmasked =
        key_pos0 + Nb * 8 - 1 <= warp_min_pos && key_pos0 + Nb * 8 <= it.kv_end;  // warp-uniform
    // Row positions from shared memory, only where a key needs the mask (registers).
    auto row_pos = [&] {
      return make_int2(pos_s[block_row(mb) + g], pos_s[block_row(mb) + g + 8]);
    };
    return online_softmax(s, key_pos0, unmasked, it.kv_end, row_pos, sm_scale_log2, m_run[mb],
                          l_run[mb], alpha);
  };
  // Rows that kept their max have alpha = 1 exactly: a warp whose rows all kept it skips the
  // rescale (a multiplication by 1, so a row's bits never depend on its warp-mates).
  auto rescale_o = [&](int mb, const float(&alpha)[2], bool grew) {
    if (__any_sync(0xffffffffu, grew)) {
#pragma unroll
      for (int j = 0; j < kDb; ++j) {
        o[mb][j][0] *= alpha[0];
        o[mb][j][1] *= alpha[0];
        o[mb][j][2] *= alpha[1];
        o[mb][j][3] *= alpha[1];
      }
    }
  };
  // P of the S blocks 2 kb, 2 kb + 1 as the m16n8k16 A fragment (also wgmma's register A).
  auto pack_p = [&]<int Nb>(const float(&s)[Nb][4], int kb, uint32_t(&a)[4]) {
    a[0] = Mma::pack(s[2 * kb][0], s[2 * kb][1]);
    a[1] = Mma::pack(s[2 * kb][2], s[2 * kb][3]);
    a[2] = Mma::pack(s[2 * kb + 1][0], s[2 * kb + 1][1]);
    a[3] = Mma::pack(s[2 * kb + 1][2], s[2 * kb + 1][3]);
  };

  // Quad pass: head group q's walk is done; warp w stores its head's rows 4 w + h, h < group
  // (held at hr = w / 2; the row sums first combine the four lanes of a row) and starts the
  // next group from zero.
  auto finish_quad = [&](int q) {
    const int hd_slots = p.plan[kHdrNumPartialSlots];
#pragma unroll
    for (int hr = 0; hr < 2; ++hr) {
      l_run[0][hr] += __shfl_xor_sync(0xffffffffu, l_run[0][hr], 1);
      l_run[0][hr] += __shfl_xor_sync(0xffffffffu, l_run[0][hr], 2);
      const int f = g + hr * 8, h = f % 4;
      if (f / 4 == warp && h < group) {
        const int head = 4 * q + warp;  // of the ticket's
        const size_t slot = static_cast<size_t>(it.partial_begin + head * hd_slots) * group + h;
        store_row<T, HeadDim, kFp8Kv>(p, it.writes_final, item_rows[0],
                                      (it.kv_head + head) * group + h, slot, o[0], hr, m_run[0][hr],
                                      l_run[0][hr]);
      }
      m_run[0][hr] = -INFINITY;
      l_run[0][hr] = 0.0f;
    }
#pragma unroll
    for (int j = 0; j < kDb; ++j) o[0][j][0] = o[0][j][1] = o[0][j][2] = o[0][j][3] = 0.0f;
  };

  // Page ids of the next stage to load (kStages - 1), looked up one stage ahead.
  int next_pages = kStages - 1 < num_stages ? lookup_page(kStages - 1, kv_hi) : 0;
  for (int stage = 0; stage < num_stages; ++stage) {
    cp_async_wait<kStages - 2>();
    // (the copies are read by wgmma, the async proxy; float8 stages by convert_stage)
    if constexpr (kWgmma && !kFp8Kv) fence_proxy_async();
    __syncthreads();  // stage landed for all threads; everyone is done with stage - 1
    if (rec != nullptr && stage == 0) timeline_phase(rec, kTimelineFirstStage);
    if (stage + kStages - 1 < num_stages) {
      issue_stage(stage + kStages - 1, kv_hi, next_pages);
      if (stage + kStages < num_stages) next_pages = lookup_page(stage + kStages, kv_hi);
    }
    cp_async_commit();
    if constexpr (kFp8Kv) {
      if (kQToF16 && stage == 0) convert_q();  // (read by every warp: the barrier below)
      convert_stage(stage);
      if constexpr (kWgmma) fence_proxy_async();  // generic writes read by wgmma
      if (kWarpLocal && stage > 0) {
        __syncwarp();  // the warp's converted rows visible to its lanes
      } else {
        __syncthreads();  // the converted stage (and q) visible
      }
    }

    const Tc* k_tile = kFp8Kv ? kv_s : kv_s + (stage % kStages) * Tr::kStageElems;
    const Tc* v_tile = k_tile + kStageKv * HeadDim;
    int stage_pos = it.kv_begin + stage * kStageTokens;
    uint32_t q_group = 0;  // quad pass: the byte offset of the stage's head group's q rows
    if constexpr (kQuad) {
      if (stage == end_stages) finish_quad(0);
      if (stage >= end_stages) {
        stage_pos -= end_stages * kStageTokens;
        q_group = 16 * kRowBytes;
      }
    }
    if constexpr (kWgmma) {
      // Row block by row block, all 64 keys of the stage at once: S = Q K^T (m64n64, 8 k16
      // steps; a step inside a 64-dim half adds 32 bytes to the start addresses, wgmma.cuh),
      // softmax, O += P V (m64n128, P from registers, V MN-major with its 64-dim halves
      // kStageKv * 128 bytes apart). Row block 1's Q K^T is issued before row block 0's P V
      // (two commit groups), so its softmax runs while that P V is on the tensor cores. Every
      // wgmma of the stage has completed before the next stage's barrier, after which its
      // ring slot is refilled.
      float s[kStageKv / 8][4];
      uint32_t a[kStageKv / 16][4];
      float alpha[2];
      // Each product's descriptors are the tiles' base descriptors advanced by constants.
      const uint64_t q_desc = smem_desc(smem_addr(q_s), 16, 1024),
                     k_desc = smem_desc(smem_addr(k_tile), 16, 1024),
                     v_desc = smem_desc(smem_addr(v_tile), kStageKv * 128, 1024);
      auto issue_qk = [&](int mb) {
#pragma unroll
        for (int kk = 0; kk < HeadDim / 16; ++kk) {
          const uint32_t step = (kk & 3) * 32;
          WgmmaOp<Tc>::qk_m64n64k16(
              s, desc_advance(q_desc, (kk >> 2) * (kRows * 128) + mb * 64 * 128 + step),
              desc_advance(k_desc, (kk >> 2) * (kStageKv * 128) + step), kk > 0);
        }
        wgmma_commit();
      };
      auto issue_pv = [&](int mb) {
#pragma unroll
        for (int kb = 0; kb < kStageKv / 16; ++kb) {
          WgmmaOp<Tc>::pv_m64n128k16(o[mb], a[kb], desc_advance(v_desc, kb * 16 * 128));
        }
        wgmma_commit();
      };
      auto pack_all = [&]() {
#pragma unroll
        for (int kb = 0; kb < kStageKv / 16; ++kb) pack_p(s, kb, a[kb]);
      };
      wgmma_fence();
      issue_qk(0);
      wgmma_wait<0>();
      fence_operands(s);
      rescale_o(0, alpha, softmax(s, 0, stage_pos, alpha));
      pack_all();
      fence_operands(o[0]);
      wgmma_fence();
      if constexpr (Mb == 2) {
        issue_qk(1);
        issue_pv(0);
        wgmma_wait<1>();  // row block 1's S; row block 0's P V may still run
        fence_operands(s);
        rescale_o(1, alpha, softmax(s, 1, stage_pos, alpha));
        wgmma_wait<0>();  // row block 0's P V: a is free again
        fence_operands(o[0]);
        fence_operands(a);
        pack_all();
        fence_operands(o[1]);
        wgmma_fence();
      }
      issue_pv(Mb - 1);
      wgmma_wait<0>();
      fence_operands(o[Mb - 1]);
      fence_operands(a);
    } else {
#pragma unroll 1
      for (int slice = 0; slice < kSlices; ++slice) {
        const int key_w = wk * kKeysPerWarp + slice * kKeysSlice;  // first key row (in the stage)
        // S = Q K^T (raw, unscaled); one K fragment serves the warp's Mb row blocks.
        float s[Mb][kNb][4];
#pragma unroll
        for (int mb = 0; mb < Mb; ++mb) {
#pragma unroll
          for (int j = 0; j < kNb; ++j)
            s[mb][j][0] = s[mb][j][1] = s[mb][j][2] = s[mb][j][3] = 0.0f;
        }
        if constexpr (kRegK) {
          // K from the e4m3 ring (kRegK): lane (g = lane / 4, t = lane % 4) loads the 16 bytes
          // [64 h + 16 t, +16) of key row key_w + 8 j + g, four k16 steps' B fragments after
          // one cvt a pair. The dot product does not depend on the order of its dimensions, so
          // step kk' of the 64-dim half h takes logical dims 2 t + {0, 1} from physical dims
          // 64 h + 16 t + 4 kk' + {0, 1} and 2 t + 8 + {0, 1} from + 2 + {0, 1}, and the q
          // fragments (A) are read in the same order: two 16-byte loads of row g and of row
          // g + 8 (chunks 8 h + 2 t, + 1) give the four steps' words.
          static_assert(Mb == 1 && HeadDim % 64 == 0, "one row block, whole 64-dim halves");
          const int g = lane >> 2, t = lane & 3;
          const unsigned char* k8 =
              kv8_s + (stage % kStages) * kStage8Bytes + (key_w + g) * HeadDim + 16 * t;
          const int q_row = static_cast<int>(q_group / kRowBytes) + g;
          using Cvt = E4m3To<Tc>;
#pragma unroll
          for (int h = 0; h < HeadDim / 64; ++h) {
            uint4 qw[2][2];  // [row g, g + 8][chunk 8 h + 2 t + c]
#pragma unroll
            for (int r = 0; r < 2; ++r) {
#pragma unroll
              for (int c = 0; c < 2; ++c) {
                qw[r][c] = *reinterpret_cast<const uint4*>(
                    q_s + swizzle<HeadDim>(q_row + 8 * r, 8 * h + 2 * t + c));
              }
            }
#pragma unroll
            for (int j = 0; j < kNb; ++j) {
              const uint4 kw = *reinterpret_cast<const uint4*>(k8 + j * 8 * HeadDim + 64 * h);
              const uint32_t kws[4] = {kw.x, kw.y, kw.z, kw.w};
#pragma unroll
              for (int step = 0; step < 4; ++step) {
                const uint4& q0 = qw[0][step / 2];
                const uint4& q1 = qw[1][step / 2];
                const uint32_t a[4] = {step % 2 ? q0.z : q0.x, step % 2 ? q1.z : q1.x,
                                       step % 2 ? q0.w : q0.y, step % 2 ? q1.w : q1.y};
                Mma::run(s[0][j], a, Cvt::template pair<true>(kws[step]),
                         Cvt::template pair<false>(kws[step]));
              }
            }
          }
        } else {
          const uint32_t k_lane = smem_addr(k_tile) + key_w * kRowBytes + k_lane_off;
#pragma unroll
          for (int kk = 0; kk < HeadDim / 16; ++kk) {
            uint32_t a[Mb][4];
#pragma unroll
            for (int mb = 0; mb < Mb; ++mb) {
              ldmatrix_x4(a[mb], (q_lane + q_group + (wq * Mb + mb) * 16 * kRowBytes) ^ (kk << 5));
            }
#pragma unroll
            for (int j = 0; j < kNb / 2; ++j) {
              uint32_t b[4];
              ldmatrix_x4(b, (k_lane ^ (kk << 5)) + j * 16 * kRowBytes);
#pragma unroll
              for (int mb = 0; mb < Mb; ++mb) {
                Mma::run(s[mb][2 * j], a[mb], b[0], b[1]);
                Mma::run(s[mb][2 * j + 1], a[mb], b[2], b[3]);
              }
            }
          }
        }  // kRegK
#pragma unroll
        for (int mb = 0; mb < Mb; ++mb) {
          float alpha[2];
          // (a quad pass's warp walks its head's tokens from the stage's first)
          rescale_o(mb, alpha, softmax(s[mb], mb, stage_pos + (kQuad ? 0 : key_w), alpha));
        }
        // O += P V; one V fragment serves the warp's Mb row blocks.
        const uint32_t v_lane = smem_addr(v_tile) + key_w * kRowBytes + v_lane_off;
#pragma unroll
        for (int kb = 0; kb < kKeysSlice / 16; ++kb) {
          uint32_t a[Mb][4];
#pragma unroll
          for (int mb = 0; mb < Mb; ++mb) pack_p(s[mb], kb, a[mb]);
#pragma unroll
          for (int d = 0; d < HeadDim / 16; ++d) {
            uint32_t b[4];
            ldmatrix_x4_trans(b, (v_lane ^ (d << 5)) + kb * 16 * kRowBytes);
#pragma unroll
            for (int mb = 0; mb < Mb; ++mb) {
              Mma::run(o[mb][2 * d], a[mb], b[0], b[1]);
              Mma::run(o[mb][2 * d + 1], a[mb], b[2], b[3]);
            }
          }
        }
      }  // slice
    }    // mma.sync
  }
  if (rec != nullptr) timeline_phase(rec, kTimelineWalkDone);
  cp_async_wait<0>();
  if constexpr (kQuad) {
    // The groups the walk has not finished: its last, or each one when no stage ran.
#pragma unroll 1
    for (int q = num_stages > end_stages ? 1 : 0; q < quad_groups; ++q) finish_quad(q);
  } else {
#pragma unroll
    for (int mb = 0; mb < Mb; ++mb) {
#pragma unroll
      for (int hr = 0; hr < 2; ++hr) {
        l_run[mb][hr] += __shfl_xor_sync(0xffffffffu, l_run[mb][hr], 1);
        l_run[mb][hr] += __shfl_xor_sync(0xffffffffu, l_run[mb][hr], 2);
      }
    }
  }
  __syncthreads();  // every warp is done with the KV ring (reused as scratch below)

  const int hd_stride = p.num_qo_heads * HeadDim;
  if constexpr (kQuad) {
    // stored by finish_quad
  } else if constexpr (kWarpsKv == 1) {
#pragma unroll
    for (int mb = 0; mb < Mb; ++mb) {
#pragma unroll
      for (int hr = 0; hr < 2; ++hr) {
        const int f = block_row(mb) + g + hr * 8;
        if (f >= n_pass) continue;
        const int fi = f_begin + f;
        const int k = p.group_div.div(fi), h = p.group_div.mod(fi, k);
        store_row<T, HeadDim, kFp8Kv>(p, it.writes_final, it.writes_final ? item_rows[k] : 0,
                                      it.kv_head * group + h,
                                      static_cast<size_t>(it.partial_begin + k) * group + h, o[mb],
                                      hr, m_run[mb][hr], l_run[mb][hr]);
      }
    }
  } else {
    // Cross-warp combine (Mb = 1): warps wk = 0..kWarpsKv-1 hold states of the same 16 rows.
    float* scratch = reinterpret_cast<float*>(kv_s) + warp * 16 * Tr::kScratchStride;
#pragma unroll
    for (int hr = 0; hr < 2; ++hr) {
      const int r = g + hr * 8;
#pragma unroll
      for (int j = 0; j < kDb; ++j) {
        *reinterpret_cast<float2*>(scratch + r * Tr::kScratchStride + j * 8 + 2 * t4) =
            make_float2(o[0][j][2 * hr], o[0][j][2 * hr + 1]);
      }
      if (t4 == 0) {
        m_s[warp * 16 + r] = m_run[0][hr];
        l_s[warp * 16 + r] = l_run[0][hr];
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
      const float inv_l = kFp8Kv ? p.v_scale / l : 1.0f / l;
      const int fi = f_begin + f;
      const int k = p.group_div.div(fi), h = p.group_div.mod(fi, k);
      if (it.writes_final) {
        const int row = item_rows[k];
        T* dst = static_cast<T*>(p.out) + static_cast<size_t>(row) * hd_stride +
                 (it.kv_head * group + h) * HeadDim + d;
        *reinterpret_cast<Pair*>(dst) = Out::pair(acc0 * inv_l, acc1 * inv_l);
      } else {
        const size_t slot = static_cast<size_t>(it.partial_begin + k) * group + h;
        st_keep_l2(static_cast<T*>(p.partial_o) + slot * HeadDim + d,
                   Out::pack(acc0 * inv_l, acc1 * inv_l));
        if (d == 0) st_keep_l2(p.partial_lse + slot, __float_as_uint(m_all + log2f(l)));
      }
    }
  }
  __syncthreads();  // the next pass rewrites q, pos and the ring
}

// kFp8Kv: the K/V pages hold e4m3 bytes (DeviceBatch::kv_fp8). kMaxPass: the most query rows
// of one pass (KernelTraits::kMaxPassRows; the head_dim 128 float8 variant with 64, whose
// register allocation has no spills, takes plans without larger passes: launch_persistent).
template <int HeadDim, typename T, bool kFp8Kv, int kMaxPass = KernelTraits<HeadDim>::kMaxPassRows>
__global__ void __launch_bounds__(kThreads, KernelTraits<HeadDim>::kMinCtasPerSm)
    persistent_attention_kernel(const KernelParams p) {
  // Every tile base must be aligned to its row stride, 2 * HeadDim bytes (ldmatrix_lane_offset):
  // the tiles start at multiples of it from smem, and smem (no static shared memory) starts at
  // the window's origin. Checked: a misaligned base would read wrong rows without a sound.
  extern __shared__ __align__(1024) unsigned char smem[];
  // The wgmma pass's split tiles need 1024 (the 128-byte swizzle's 8-row groups).
  constexpr uint32_t kAlign = kHaveWgmma && HeadDim == 128 ? 1024 : 2 * HeadDim;
  if (smem_addr(smem) % kAlign != 0) __trap();
  // The merge kernel is a programmatic dependent launch (merge_states.cu): let it be scheduled
  // now, so its blocks take the SMs this grid frees and read the merge map during its tail.
  allow_dependent_launch();
  using Tr = KernelTraits<HeadDim>;
  // Only the ticket and its bound stay live across the passes (registers are at the limit at
  // head_dim 128); the header fields an item needs are re-read from L1 per item.
  const int heads = p.num_kv_heads;
  // Tickets: one per (item, KV head) for all but the trailing quad items, then one per (quad
  // item, eight KV heads: two groups of four, or the item's last four) (plan_buffer.h
  // is_quad_item; heads is a multiple of 4 where there are quad items).
  // The last `halved` quad items take heads / 4 tickets of one group each (the final wave).
  auto single_tickets = [&] { return (p.plan[kHdrNumItems] - p.plan[kHdrNumQuadItems]) * heads; };
  const int quad_per_item = (heads + 7) / 8;
  const int halved = heads > 4 ? min(p.plan[kHdrNumQuadItems], static_cast<int>(gridDim.x) / 2) : 0;
  const int whole_quad_tickets = (p.plan[kHdrNumQuadItems] - halved) * quad_per_item;
  const int tickets = single_tickets() + whole_quad_tickets + halved * (heads / 4);
  // The first ticket of this kernel (re-read where needed: registers are at the limit).
  auto first_ticket = [&] { return p.skip_wide ? p.plan[kHdrNumWideItems] * heads : 0; };
  for (int ticket = first_ticket() + static_cast<int>(blockIdx.x); ticket < tickets;) {
    // The items region is in dispatch order: the ticket locates its item's fields directly.
    const int quad_ticket = ticket - single_tickets();         // >= 0: a quad item's
    const int half_ticket = quad_ticket - whole_quad_tickets;  // >= 0: a halved quad item's
    int index, kv_head;
    if (quad_ticket < 0) {
      index = ticket / heads;
      kv_head = ticket % heads;
    } else if (half_ticket < 0) {
      index = single_tickets() / heads + quad_ticket / quad_per_item;
      kv_head = 8 * (quad_ticket % quad_per_item);
    } else {
      index =
          single_tickets() / heads + whole_quad_tickets / quad_per_item + half_ticket / (heads / 4);
      kv_head = 4 * (half_ticket % (heads / 4));
    }
    const int32_t* f = p.plan + p.off_items + index * kItemFields;
    const bool deterministic = p.plan[kHdrDeterministic] != 0;
    ItemDesc it;
    it.kv_head = kv_head;
    it.rows_begin = f[0];
    it.num_rows = f[1] - f[0];
    it.kv_request = f[2];
    it.kv_begin = f[3];
    it.kv_end = f[4];
    const int tile_q = f[5];
    it.writes_final = f[7] != 0;
    it.partial_begin = kv_head * p.plan[kHdrNumPartialSlots] + f[8];
    // This kernel is a programmatic dependent launch too: its CTAs may start during the
    // previous kernel's tail (which writes q and the K/V pages, or merges the last run's partial
    // states). Before the first wait a CTA reads only the plan buffer, which an earlier copy
    // wrote; its first ticket is first_ticket() + blockIdx.x, every claimed one is past it.
    if (ticket == first_ticket() + static_cast<int>(blockIdx.x)) wait_for_previous_grid();
    uint64_t* rec = nullptr;
    if (p.timeline != nullptr && threadIdx.x == 0) {
      const int item = p.plan[p.off_dispatch + index];  // the plan's item id
      rec = p.timeline +
            (static_cast<size_t>(kv_head) * p.plan[kHdrNumItems] + item) * kTimelineFields;
      timeline_mark(rec, false);
    }
    const int n_folded = it.num_rows * p.group_size;
    // Deterministic plans: the pass size (and so the code path and the warps' key split, which
    // fix the summation order) is the tile_q the planner derived from the rows' own requests,
    // never from how many rows the item holds.
    static_assert(kMaxPass == 64 || kMaxPass == Tr::kMaxPassRows, "passes of 64 or kMaxPassRows");
    const int want = deterministic ? min(tile_q, kMaxPass) : min(min(n_folded, tile_q), kMaxPass);
    const int pass = want <= 16 ? 16 : (want <= 32 ? 32 : (want <= 64 ? 64 : 128));
    if (quad_ticket >= 0) {
      run_pass<HeadDim, T, kFp8Kv, 1, 1, true>(
          p, it, 0, 16, rec, smem, half_ticket >= 0 ? 1 : min(2, (heads - kv_head) / 4));
    } else {
      for (int f_begin = 0; f_begin < n_folded; f_begin += pass) {
        const int n_pass = min(pass, n_folded - f_begin);
        uint64_t* pass_rec = f_begin == 0 ? rec : nullptr;
        if (pass == 16) {
          run_pass<HeadDim, T, kFp8Kv, 1, 1>(p, it, f_begin, n_pass, pass_rec, smem);
        } else if (pass == 32) {
          run_pass<HeadDim, T, kFp8Kv, 2, 1>(p, it, f_begin, n_pass, pass_rec, smem);
        } else if (pass == 64) {
          run_pass<HeadDim, T, kFp8Kv, 4, 1>(p, it, f_begin, n_pass, pass_rec, smem);
        } else if constexpr (kMaxPass == 128) {  // pass == 128
          run_pass<HeadDim, T, kFp8Kv, 4, 2>(p, it, f_begin, n_pass, pass_rec, smem);
        }
      }
    }
    if (rec != nullptr) timeline_mark(rec, true);
    int* claim_s = reinterpret_cast<int*>(smem + Tr::kTileBytes);  // row_pos[0], free here
    if (threadIdx.x == 0) *claim_s = atomicAdd(p.dispatch, 1);
    __syncthreads();  // the claim is visible
    ticket = first_ticket() + static_cast<int>(gridDim.x) + *claim_s;
    __syncthreads();  // every thread has read the claim before the next pass rewrites row_pos
  }
  // A CTA without a ticket waits too: this grid's completion must imply the previous one's
  // (the merge kernel after it resets the claim counter once this grid has completed).
  wait_for_previous_grid();
}

}  // namespace packserve::attention::cuda
