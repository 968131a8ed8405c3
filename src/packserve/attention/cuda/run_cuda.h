// run_cuda.h: host API of the CUDA attention executor (issue 6): runs a Plan (plan.h) that
// was uploaded into a Workspace (workspace.h) on a batch whose tensors live on the device.
//
// Contract (same as run_cpu.h): every (row, qo head) of the batch gets
//   out[row, head, :] = softmax_j(sm_scale * q . k_j) v_j over the keys j <= row position,
// computed from the work items and the merge map of the uploaded plan, in the plan's merge
// order. Numerics: bf16/f16 in, f32 accumulate, online softmax in base 2, partial states
// (o normalised and rounded to the input dtype, lse base 2 in f32), output rounded once to the
// input dtype.
//
// Stream order: both kernels are programmatic dependent launches (sm_90): the attention kernel
// may start during the tail of the kernel before it in the stream and reads only the uploaded
// plan before that kernel has completed, so that kernel may write every DeviceBatch array
// (q by RoPE, the pages by kv_append) but not the workspace.
//
// CUDA graphs: run_cuda never allocates and never synchronises; it launches a fixed grid
// (the workspace's CTA queues x KV heads, plan.h) whose kernels read the plan from the workspace's
// fixed address. Uploading a different plan of the same capacity into the same workspace (outside
// the graph) and replaying a captured run_cuda executes the new plan. The captured launch bakes the
// DeviceBatch pointers: a replayed batch must reuse those device arrays (row counts, lengths,
// positions and pages may change within the capacity).
//
// No CUDA header is included here (STYLE.md §1): streams are passed as StreamHandle, which is
// the same type as cudaStream_t. Thread-safety: run_cuda may be called concurrently on
// different workspaces; one workspace is used by one stream at a time.
#pragma once

#include <cstdint>

#include "packserve/attention/plan.h"
#include "packserve/attention/plan_buffer.h"
#include "packserve/common/dtype.h"
#include "packserve/common/status.h"

struct CUstream_st;  // cudaStream_t is CUstream_st*

namespace packserve::attention::cuda {

using StreamHandle = CUstream_st*;  // nullptr = the legacy default stream

class Workspace;

// The batch as the kernels read it; every pointer is device memory.
struct DeviceBatch {
  const void* q = nullptr;        // [total_rows, num_qo_heads, head_dim] of dtype
  const void* k_pages = nullptr;  // [num_pages, page_size, num_kv_heads, head_dim]
  const void* v_pages = nullptr;  // same shape as k_pages
  // Float8 KV cache: the pages hold e4m3 bytes, whose values times k_scale (v_scale) are the
  // keys (values); else elements of dtype, and the scales must stay 1. k_scale folds into the
  // softmax scale, v_scale into the output's normalisation (o / l). The wide kernel
  // (wide_kernel.cuh) has no float8 variant: such a plan's wide items run on the persistent
  // kernel.
  bool kv_fp8 = false;
  float k_scale = 1.0f;
  float v_scale = 1.0f;
  // [total_rows]: the position of each query row in its request's context,
  // BatchLayout::row_position (kv_len - q_len + i for row i of its request); the causal mask.
  // Per row rather than derived from the layout's qo_indptr and kv_last_page_len so that a
  // work item's rows from several requests (the prefix policy) cost one load each, not a
  // binary search of dependent loads. The model step already has it (its RoPE positions).
  const int32_t* q_positions = nullptr;
  const int32_t* kv_page_indptr = nullptr;   // [batch_size + 1]
  const int32_t* kv_page_indices = nullptr;  // [kv_page_indptr[batch_size]]
  int page_size = 0;                         // tokens per page, 1..256
  float sm_scale = 0.0f;                     // softmax scale, usually 1 / sqrt(head_dim)
  void* out = nullptr;  // [total_rows, num_qo_heads, head_dim] of dtype, written
  // Optional kernel timeline, for profiling (attention_bench --timeline): when not null, the
  // attention kernel writes one record of kTimelineFields uint64 per (KV head h, work item i)
  // at timeline[(h * num_items + i) * kTimelineFields]: start and end of the item in
  // %globaltimer ns, start and end in the SM's clock64 cycles, the SM id and the CTA (block)
  // index, then three phases of the item's first q pass in %globaltimer ns (kTimelinePositions
  // onwards). Needs num_kv_heads * plan items * kTimelineFields uint64 of device memory.
  uint64_t* timeline = nullptr;
};
// Phase fields of a timeline record: the pass's row positions known (its KV prologue issued),
// its first KV stage landed in shared memory, its KV walk done (the epilogue follows).
inline constexpr int kTimelinePositions = 6;
inline constexpr int kTimelineFirstStage = 7;
inline constexpr int kTimelineWalkDone = 8;
inline constexpr int kTimelineFields = 9;

// Whether a tile configuration is compiled for (head_dim, dtype). The planner asks this
// (ggml's supports_op); run_cuda returns kUnimplemented naming the shape otherwise.
// Compiled: head_dim 64/128/256 x bf16/f16 x tile_q {16,32,64,128} x tile_kv {32,64,128}.
bool supports(TileConfig tile, int head_dim, DType dtype);
// kOk, or kUnimplemented naming the first work item whose configuration is not compiled.
Status supports_plan(const Plan& plan, DType dtype);

// Executes the plan last uploaded into `workspace` on `batch` (see the contract above).
// Errors: kFailedPrecondition when no plan was uploaded; kInvalidArgument naming the field
// when batch pointers are null or page_size/sm_scale/k_scale/v_scale are out of range (scales
// other than 1 without kv_fp8 too); kInternal with the
// CUDA call text and file:line when a launch fails. Asynchronous: kernel faults surface at
// the caller's next synchronisation.
Status run_cuda(const Workspace& workspace, const DeviceBatch& batch, StreamHandle stream);

// Persistent CTAs per SM that fit for (head_dim, dtype) and the device's SM count, so a
// caller can build DeviceShape{grid_ctas()}. Queries the current device (the planner itself
// never does).
struct KernelOccupancy {
  int num_sms = 0;
  int ctas_per_sm = 0;
  int smem_bytes_per_cta = 0;
  int grid_ctas() const { return num_sms * ctas_per_sm; }  // the persistent grid
};
Result<KernelOccupancy> kernel_occupancy(int head_dim, DType dtype);

// Writes new K/V rows of a step into their pages:
//   k_pages[page[i], slot[i], h, :] = k_new[i, h, :] (same for v) for i < num_rows.
// k_new/v_new: [num_rows, num_kv_heads, head_dim] of dtype; page/slot: [num_rows] int32,
// device. dtype kFP8E4M3: the rows are e4m3 bytes already (a float8 KV cache). Rows must name
// distinct (page, slot) pairs. kInvalidArgument on null pointers or
// num_rows < 0; kInternal on a launch failure.
struct KvAppendArgs {
  const void* k_new = nullptr;
  const void* v_new = nullptr;
  const int32_t* page = nullptr;
  const int32_t* slot = nullptr;
  int num_rows = 0;
  void* k_pages = nullptr;
  void* v_pages = nullptr;
  int page_size = 0;
  int num_kv_heads = 0;
  int head_dim = 0;
  DType dtype = DType::kBF16;
};
Status kv_append(const KvAppendArgs& args, StreamHandle stream);

}  // namespace packserve::attention::cuda
