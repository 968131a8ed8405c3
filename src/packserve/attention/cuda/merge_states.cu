// merge_states.cu: combines the partial attention states of split rows (seed 004 §2.2, the
// LSE composition) in the plan's merge order and writes the final output.
// Must match: merge.h / run_cpu.cc (same order, same operator), within f32 rounding.
//
// Mapping: kDims consecutive dims per thread, HeadDim / kDims threads per (merge entry e, KV
// head, qo head h of the group): a warp per pair (kDims = HeadDim / 32), or one 16-byte
// (kDims = 8) or 32-byte (kDims = 16) load per thread and slot where the merge has more pairs
// than a warp each fits in one round of the grid (kernel_launch.h merge_threads_per_pair; H100:
// a warp per pair keeps PAT [1,4,64]'s 2048 pairs 1.02x faster than 16-byte chunks, sixteenth
// session; PAT [1,256]'s 8192 pairs take one round at 32 bytes, 1.02x faster than two at 16,
// twenty-fourth). Fixed grid, grid-stride over
// num_merges * num_kv_heads * group_size pairs read from the plan buffer header, so a captured
// graph replays any plan of the capacity. Slot s of KV head kv is storage slot
// kv * num_partial_slots + s (plan.h). The merge is a few dependent round trips per thread
// (latency, not bytes): a thread reads its entry's row and first slot ids before it waits for
// the attention grid (wait_for_previous_grid).
// Numerics (base 2, f32; a slot's o is stored in the batch's dtype, its lse in f32): folding
// slot s into the running state (o, lse):
//   mx = max(lse, lse_s); w = 2^(lse - mx); w_s = 2^(lse_s - mx);
//   o = (o w + o_s w_s) / (w + w_s); lse = mx + log2(w + w_s).
// The running state starts as the first slot; the output is o rounded to T.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <string>

#include "packserve/attention/cuda/cuda_check.h"
#include "packserve/attention/cuda/kernel_launch.h"
#include "packserve/attention/cuda/workspace.h"

namespace packserve::attention::cuda {
namespace {

// Two T in one 32-bit word (tile_mma.cuh MmaOp<T>::pair rounds two floats into one).
template <typename T>
using Pair2 = decltype(MmaOp<T>::pair(0.0f, 0.0f));
// A thread's kDims elements of a slot as pairs (one load), and a pair's floats.
template <typename T, int kDims>
struct alignas(2 * kDims) Chunk {
  Pair2<T> v[kDims / 2];
};
__device__ __forceinline__ float2 to_float2(__nv_bfloat162 x) { return __bfloat1622float2(x); }
__device__ __forceinline__ float2 to_float2(__half2 x) { return __half22float2(x); }

template <int HeadDim, typename T, int kDims>
__global__ void __launch_bounds__(kMergeThreads, 2) merge_states_kernel(const MergeParams p) {
  constexpr int kPairThreads = HeadDim / kDims;  // threads per (entry, kv head, qo head)
  // Slots loaded together (at 32 bytes per slot, four keep the registers under the bound of two
  // blocks per SM).
  constexpr int kBatch = kDims == 16 ? 4 : 8;
  const int num_merges = p.plan[kHdrNumMerges];
  const int group = p.group_size;
  const int num_kv_heads = p.plan[kHdrNumKvHeads];
  const int num_partial_slots = p.plan[kHdrNumPartialSlots];
  const int total = num_merges * num_kv_heads * group * kPairThreads;
  const int32_t* indptr = p.plan + p.off_merge_indptr;
  const int32_t* slots = p.plan + p.off_merge_slots;
  // The next attention launch may be scheduled as soon as every merge block runs: it waits for
  // this grid before it touches the partial states (programmatic_launch.cuh).
  allow_dependent_launch();
  // The plan's merge map does not depend on the attention kernel, so a thread reads it first
  // and waits for the attention grid only before the partial states.
  bool waited = false;
  for (int t = blockIdx.x * blockDim.x + threadIdx.x; t < total; t += gridDim.x * blockDim.x) {
    const int w = t / kPairThreads, c = t % kPairThreads;
    const unsigned pair_lanes = kPairThreads == 32
                                    ? 0xffffffffu
                                    : ((1u << kPairThreads) - 1)
                                          << (threadIdx.x % 32 / kPairThreads * kPairThreads);
    const int e = w / (num_kv_heads * group);
    const int kv_head = w / group % num_kv_heads, h = w % group;
    const int row = p.plan[p.off_merge_row + e];
    const int first = indptr[e], n = indptr[e + 1] - first;
    // Storage slot of (kv head, plan slot s, qo head h): base + s * group.
    const size_t base = static_cast<size_t>(kv_head) * num_partial_slots * group + h;
    int slot0[kBatch];  // the first batch's slot ids, read before the wait
#pragma unroll
    for (int j = 0; j < kBatch; ++j) slot0[j] = j < n ? slots[first + j] : 0;
    // Storage slot of slot b + j of the entry (of this KV head and qo head).
    auto storage_slot = [&](int b, int j) {
      const int sid = b == 0 ? slot0[j] : slots[first + b + j];
      return base + static_cast<size_t>(sid) * group;
    };
    if (!waited) {
      wait_for_previous_grid();
      waited = true;
    }
    float o[kDims] = {};
    float lse = -INFINITY;
    // Slots are read kBatch at a time, every load of a batch issued before the first fold, so
    // a pair's merge waits on about one L2 round trip per batch; the folds run in the plan's
    // order (the running state starts as the first slot).
    for (int b = 0; b < n; b += kBatch) {
      float lse_b[kBatch];
      Chunk<T, kDims> o_b[kBatch];
#pragma unroll
      for (int j = 0; j < kBatch; ++j) {
        if (b + j >= n) break;
        const size_t slot = storage_slot(b, j);
        lse_b[j] = ld_last_use_l2(p.partial_lse + slot);
        o_b[j] = *reinterpret_cast<const Chunk<T, kDims>*>(static_cast<const T*>(p.partial_o) +
                                                           slot * HeadDim + kDims * c);
      }
#pragma unroll
      for (int j = 0; j < kBatch; ++j) {
        if (b + j >= n) break;
        float x[kDims];
#pragma unroll
        for (int i = 0; i < kDims / 2; ++i) {
          const float2 f = to_float2(o_b[j].v[i]);
          x[2 * i] = f.x;
          x[2 * i + 1] = f.y;
        }
        if (b + j == 0) {
#pragma unroll
          for (int i = 0; i < kDims; ++i) o[i] = x[i];
          lse = lse_b[j];
          continue;
        }
        const float mx = fmaxf(lse, lse_b[j]);
        const float wa = exp2f(lse - mx), wb = exp2f(lse_b[j] - mx);
        const float inv = 1.0f / (wa + wb);
#pragma unroll
        for (int i = 0; i < kDims; ++i) o[i] = (o[i] * wa + x[i] * wb) * inv;
        lse = mx + log2f(wa + wb);
      }
      // The batch's slots are dead once all of the pair's threads hold them: the first thread
      // of each 128-byte line drops it from L2 unwritten (tile_mma.cuh discard_l2; the
      // attention kernel stored them as evict_last). A pair's threads are consecutive lanes
      // that run the same slots.
      __syncwarp(pair_lanes);
      if ((kDims * sizeof(T) * c) % 128 == 0) {
#pragma unroll
        for (int j = 0; j < kBatch; ++j) {
          if (b + j >= n) break;
          discard_l2(static_cast<const T*>(p.partial_o) + storage_slot(b, j) * HeadDim + kDims * c);
        }
      }
    }
    // 4-byte stores (the output needs only the alignment the attention kernel's stores need);
    // a warp's are contiguous.
    T* dst = static_cast<T*>(p.out) +
             (static_cast<size_t>(row) * p.num_qo_heads + kv_head * group + h) * HeadDim +
             kDims * c;
#pragma unroll
    for (int i = 0; i < kDims / 2; ++i) {
      *reinterpret_cast<Pair2<T>*>(dst + 2 * i) = MmaOp<T>::pair(o[2 * i], o[2 * i + 1]);
    }
  }
  // A thread without pairs waits too: this grid's completion must imply the attention grid's
  // for the launch after it.
  if (!waited) wait_for_previous_grid();
  // The attention grids have completed, so no CTA claims any more: reset their claim counters
  // for the next launch (every attention launch is followed by this one, run_cuda).
  if (blockIdx.x == 0 && threadIdx.x < kDispatchCounters) p.dispatch[threadIdx.x] = 0;
}

template <int HeadDim, typename T>
Status launch(const MergeParams& p, int threads_per_pair, cudaStream_t s) {
  const dim3 grid(kMergeBlocks), block(kMergeThreads);
  if (threads_per_pair == HeadDim / 16) {
    return launch_programmatic(merge_states_kernel<HeadDim, T, 16>, grid, block, 0, s, p);
  }
  if (threads_per_pair == HeadDim / 8 && HeadDim / 8 != 32) {
    return launch_programmatic(merge_states_kernel<HeadDim, T, 8>, grid, block, 0, s, p);
  }
  return launch_programmatic(merge_states_kernel<HeadDim, T, HeadDim / 32>, grid, block, 0, s, p);
}

template <typename T>
Status launch_typed(int head_dim, const MergeParams& p, int threads_per_pair, cudaStream_t s) {
  switch (head_dim) {
    case 64:
      return launch<64, T>(p, threads_per_pair, s);
    case 128:
      return launch<128, T>(p, threads_per_pair, s);
    case 256:
      return launch<256, T>(p, threads_per_pair, s);
    default:
      return unimplemented("merge kernel for head_dim=" + std::to_string(head_dim) +
                           " is not compiled (64/128/256)");
  }
}

}  // namespace

int merge_threads_per_pair(int head_dim, int64_t num_pairs) {
  constexpr int64_t kGridThreads = int64_t{kMergeBlocks} * kMergeThreads;
  for (const int threads : {32, head_dim / 8}) {
    if (num_pairs * threads <= kGridThreads) return threads;
  }
  return head_dim / 16;
}

Status launch_merge(int head_dim, DType dtype, const MergeParams& params, int64_t num_pairs,
                    cudaStream_t stream) {
  const int threads = merge_threads_per_pair(head_dim, num_pairs);
  if (dtype == DType::kBF16) return launch_typed<__nv_bfloat16>(head_dim, params, threads, stream);
  if (dtype == DType::kF16) return launch_typed<__half>(head_dim, params, threads, stream);
  return unimplemented("merge kernel for dtype=" + std::string(dtype_name(dtype)) +
                       " is not compiled (bf16/f16)");
}

}  // namespace packserve::attention::cuda
