// run_cuda.cu: run_cuda (persistent kernel + merge kernel on the workspace's fixed grid),
// supports(), kernel_occupancy(). See run_cuda.h for the contract.
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <utility>

#include "packserve/attention/cuda/cuda_check.h"
#include "packserve/attention/cuda/kernel_launch.h"
#include "packserve/attention/cuda/run_cuda.h"
#include "packserve/attention/cuda/workspace.h"

namespace packserve::attention::cuda {
namespace {

bool in(const auto& list, int v) {
  return std::find(std::begin(list), std::end(list), v) != std::end(list);
}

}  // namespace

bool supports(TileConfig tile, int head_dim, DType dtype) {
  return (dtype == DType::kBF16 || dtype == DType::kF16) && in(kSupportedHeadDims, head_dim) &&
         in(kTileQSizes, tile.tile_q) && in(kTileKvSizes, tile.tile_kv);
}

Status supports_plan(const Plan& plan, DType dtype) {
  for (size_t i = 0; i < plan.items.size(); ++i) {
    const TileConfig t = plan.items[i].tile;
    if (!supports(t, plan.head_dim, dtype)) {
      return unimplemented("work item " + std::to_string(i) + ": tile " + std::to_string(t.tile_q) +
                           "x" + std::to_string(t.tile_kv) +
                           " head_dim=" + std::to_string(plan.head_dim) +
                           " dtype=" + std::string(dtype_name(dtype)) +
                           " is not compiled (tile_q 16/32/64/128 x tile_kv 32/64/128, "
                           "head_dim 64/128/256, bf16/f16)");
    }
  }
  return ok_status();
}

Status run_cuda(const Workspace& ws, const DeviceBatch& b, StreamHandle stream) {
  if (!ws.has_plan()) return failed_precondition("run_cuda: no plan uploaded into the workspace");
  if (!b.q || !b.k_pages || !b.v_pages || !b.q_positions || !b.kv_page_indptr ||
      !b.kv_page_indices || !b.out) {
    return invalid_argument(
        "run_cuda: every DeviceBatch pointer must be a device pointer, got null");
  }
  if (b.page_size < kMinPageSize || b.page_size > kMaxPageSize) {
    return invalid_argument("batch.page_size = " + std::to_string(b.page_size) +
                            ": expected 1..256");
  }
  if (!(b.sm_scale > 0.0f) || !std::isfinite(b.sm_scale)) {
    return invalid_argument("batch.sm_scale = " + std::to_string(b.sm_scale) +
                            ": expected a finite value > 0");
  }
  for (const auto& [name, scale] : {std::pair{"k_scale", b.k_scale}, {"v_scale", b.v_scale}}) {
    if (!(scale > 0.0f) || !std::isfinite(scale) || (!b.kv_fp8 && scale != 1.0f)) {
      return invalid_argument(
          "batch." + std::string(name) + " = " + std::to_string(scale) +
          (b.kv_fp8 ? ": expected a finite value > 0" : ": expected 1 (the pages are not float8)"));
    }
  }
  const HeadConfig& h = ws.heads();
  const PlanBufferLayout& l = ws.layout();
  KernelParams p;
  p.plan = ws.plan_buffer();
  p.off_dispatch = l.off_dispatch;
  p.dispatch = ws.dispatch_counters();
  p.off_items = l.off_items;
  p.off_item_rows = l.off_item_rows;
  p.q = b.q;
  p.k_pages = b.k_pages;
  p.v_pages = b.v_pages;
  p.v_minus_k = static_cast<int64_t>(reinterpret_cast<uintptr_t>(b.v_pages) -
                                     reinterpret_cast<uintptr_t>(b.k_pages));
  p.out = b.out;
  p.partial_o = ws.partial_o();
  p.partial_lse = ws.partial_lse();
  p.q_positions = b.q_positions;
  p.kv_page_indptr = b.kv_page_indptr;
  p.kv_page_indices = b.kv_page_indices;
  p.page_size = b.page_size;
  p.page_div = FastDiv::make(b.page_size);
  p.num_qo_heads = h.num_qo_heads;
  p.num_kv_heads = h.num_kv_heads;
  p.group_size = h.group_size();
  p.group_div = FastDiv::make(h.group_size());
  p.sm_scale_log2 = b.sm_scale * b.k_scale * 1.4426950408889634f;  // (k_scale = 1: the same)
  p.v_scale = b.v_scale;
  p.timeline = b.timeline;
  // The plan's wide items (the leading tickets) on the wide kernel, then the rest on the
  // persistent kernel. Correct for any plan a captured graph replays: the wide kernel claims
  // only the wide tickets there are (none is fine), and without it the persistent kernel
  // runs every item.
  if (h.head_dim == 128 && ws.num_wide_items() > 0 && b.timeline == nullptr && !b.kv_fp8 &&
      wide_kernel_enabled()) {
    PS_ASSIGN_OR_RETURN(const int sms, wide_kernel_ctas());
    PS_RETURN_IF_ERROR(launch_wide_hd128(h.dtype == DType::kBF16, p, sms, stream));
    p.skip_wide = 1;
  }
  PS_RETURN_IF_ERROR(launch_persistent(h.head_dim, h.dtype, b.kv_fp8, ws.max_pass_rows(), p,
                                       l.num_ctas * h.num_kv_heads, stream));

  MergeParams m;
  m.plan = ws.plan_buffer();
  m.off_merge_indptr = l.off_merge_indptr;
  m.off_merge_row = l.off_merge_row;
  m.off_merge_slots = l.off_merge_slots;
  m.partial_o = ws.partial_o();
  m.partial_lse = ws.partial_lse();
  m.dispatch = ws.dispatch_counters();
  m.out = b.out;
  m.num_qo_heads = h.num_qo_heads;
  m.group_size = h.group_size();
  return launch_merge(h.head_dim, h.dtype, m,
                      int64_t{ws.num_merges()} * h.num_kv_heads * h.group_size(), stream);
}

Result<KernelOccupancy> kernel_occupancy(int head_dim, DType dtype) {
  KernelOccupancy occ;
  int device = 0;
  PS_CUDA_RETURN_IF_ERROR(cudaGetDevice(&device));
  PS_CUDA_RETURN_IF_ERROR(
      cudaDeviceGetAttribute(&occ.num_sms, cudaDevAttrMultiProcessorCount, device));
  PS_ASSIGN_OR_RETURN(occ.ctas_per_sm, persistent_occupancy(head_dim, dtype));
  PS_ASSIGN_OR_RETURN(occ.smem_bytes_per_cta, persistent_smem_bytes(head_dim, dtype));
  return occ;
}

}  // namespace packserve::attention::cuda
