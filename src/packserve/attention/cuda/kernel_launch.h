// kernel_launch.h: host-side entry points of the compiled kernels (one translation unit per
// head_dim keeps the CUDA build parallel). Only for files under attention/cuda/.
//
//   launch_persistent  persistent_kernel.cuh on grid = num_ctas (queues x KV heads), 128
//                      threads, dynamic smem
//   prepare_persistent raises the kernel's dynamic shared-memory limit (call once, before any
//                      launch or graph capture)
//   persistent_smem_bytes / persistent_occupancy  resources of one (head_dim, dtype) kernel
//                      (the occupancy both KV variants allow)
//   launch_merge       merge_states.cu: combines partial states in the plan's merge order
//   launch_kv_append   kv_append.cu
// The persistent and merge kernels are programmatic dependent launches (programmatic_launch.cuh):
// each may start during the tail of the kernel before it and waits for that grid
// (griddepcontrol.wait) before it touches memory an earlier kernel writes.
// All return kUnimplemented naming (head_dim, dtype) when that kernel is not compiled.
#pragma once

#include <cuda_runtime.h>

#include "packserve/attention/cuda/cuda_check.h"
#include "packserve/attention/cuda/persistent_kernel.cuh"
#include "packserve/attention/cuda/programmatic_launch.cuh"
#include "packserve/common/dtype.h"
#include "packserve/common/status.h"

namespace packserve::attention::cuda {

// fp8_kv: the pages hold e4m3 bytes (DeviceBatch::kv_fp8), the kernel's float8 variant.
// max_pass_rows: the most query rows any pass of the plan takes (Workspace::max_pass_rows); at
// 64 or fewer, float8 at head_dim 128 runs the variant without 128-row passes (no spills; the
// decode plans). Any plan runs correctly on either variant.
Status launch_persistent(int head_dim, DType dtype, bool fp8_kv, int max_pass_rows,
                         const KernelParams& params, int num_ctas, cudaStream_t stream);
Status prepare_persistent(int head_dim, DType dtype);
Result<int> persistent_smem_bytes(int head_dim, DType dtype);
Result<int> persistent_occupancy(int head_dim, DType dtype);  // CTAs per SM

// Per-head-dim translation units (persistent_kernel_hd{64,128,256}.cu).
Status launch_persistent_hd64(bool bf16, bool fp8_kv, const KernelParams& p, int num_ctas,
                              cudaStream_t s);
Status launch_persistent_hd128(bool bf16, bool fp8_kv, int max_pass_rows, const KernelParams& p,
                               int num_ctas, cudaStream_t s);
Status launch_persistent_hd256(bool bf16, bool fp8_kv, const KernelParams& p, int num_ctas,
                               cudaStream_t s);
Status prepare_persistent_hd64(bool bf16, int* ctas_per_sm);
Status prepare_persistent_hd128(bool bf16, int* ctas_per_sm);
Status prepare_persistent_hd256(bool bf16, int* ctas_per_sm);
// wide_kernel.cuh (head_dim 128, sm_90 devices only): one CTA per SM. wide_kernel_enabled():
// an sm_90 device and PACKSERVE_WIDE_KERNEL is not "0" (read once). wide_kernel_ctas(): the
// grid (SMs x CTAs per SM); its first call raises the kernels' shared-memory limit, and
// Workspace::create makes it, so it never happens during a graph capture.
bool wide_kernel_enabled();
Result<int> wide_kernel_ctas();
Status launch_wide_hd128(bool bf16, const KernelParams& p, int num_ctas, cudaStream_t s);

struct MergeParams {
  const int32_t* plan = nullptr;  // header gives num_merges, num_kv_heads, num_partial_slots
  int off_merge_indptr = 0, off_merge_row = 0, off_merge_slots = 0;
  const void* partial_o = nullptr;  // elements of the batch's dtype
  const float* partial_lse = nullptr;
  int32_t* dispatch = nullptr;  // the attention kernels' claim counters, reset to 0 here
  void* out = nullptr;
  int num_qo_heads = 0;
  int group_size = 0;
};
// Fixed grid (CUDA-graph compatible; 2 blocks per SM on an H100): walks the header's
// num_merges entries grid-stride, merge_threads_per_pair threads per (entry, KV head, qo head).
inline constexpr int kMergeThreads = 256, kMergeBlocks = 264;
// Threads per pair for a merge of num_pairs pairs at head_dim (64/128/256): the most of a warp
// (32), head_dim / 8 (a 16-byte load per thread and slot) and head_dim / 16 (32 bytes) with
// which every pair runs in one round of the grid (kMergeBlocks x kMergeThreads threads); else
// head_dim / 16, the fewest rounds. Each round is a chain of dependent loads after the wait for
// the attention grid (H100, twenty-fourth session: PAT [1,256]'s 8192 pairs 0.0766-0.0773 ms at 8
// threads per pair against 0.0782-0.0786 at 16, which took two rounds).
int merge_threads_per_pair(int head_dim, int64_t num_pairs);
// num_pairs (the uploaded plan's num_merges x KV heads x group size) picks the mapping
// (merge_threads_per_pair); any value is correct for any plan.
Status launch_merge(int head_dim, DType dtype, const MergeParams& params, int64_t num_pairs,
                    cudaStream_t stream);

}  // namespace packserve::attention::cuda
