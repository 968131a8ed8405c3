// workspace.h: the device workspace of the CUDA attention executor: one allocation cut into
// named, 256-byte-aligned regions at fixed addresses (FlashInfer-style), sized once from a
// PlanCapacity (plan_buffer.h) and the head configuration.
//
//   plan_buffer  [plan_buffer_layout(capacity).total_int32] int32  the serialized plan
//   partial_o    [num_kv_heads, max_partial_slots, group_size, head_dim]  the batch's dtype
//                (bf16/f16): o of split rows, rounded once as the output is (plan.h)
//   partial_lse  [num_kv_heads, max_partial_slots, group_size]            f32  base-2 lse
//   dispatch     [kDispatchCounters] int32  the attention kernels' item claim counters; 0
//                between launches (the merge kernel resets them after the attention grids)
// max_partial_slots = the layout's max_merge_slots (each partial slot is merged exactly once),
// per KV head: a plan's slot s of head h is stored at h * plan.num_partial_slots + s.
//
// Two-phase use, so a decode step can be captured in a CUDA graph: create() allocates (once),
// upload() copies a plan into the fixed plan_buffer (outside any graph; the regions the kernels
// read, not the host-side queues), run_cuda() reads it.
// Errors say which region is too small and what to do. Thread-safety: one stream at a time.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "packserve/attention/cuda/run_cuda.h"
#include "packserve/attention/plan.h"
#include "packserve/attention/plan_buffer.h"
#include "packserve/common/dtype.h"
#include "packserve/common/status.h"

namespace packserve::attention::cuda {

// Claimed tickets: [0] the persistent kernel's, [1] the wide kernel's.
inline constexpr int kDispatchCounters = 2;

struct HeadConfig {
  int num_qo_heads = 0;
  int num_kv_heads = 0;
  int head_dim = 0;            // 64, 128 or 256
  DType dtype = DType::kBF16;  // bf16 or f16
  int group_size() const { return num_kv_heads > 0 ? num_qo_heads / num_kv_heads : 0; }
};

struct WorkspaceRegion {
  std::string name;
  size_t offset_bytes = 0;
  size_t size_bytes = 0;
};

class Workspace {
 public:
  // Allocates the regions for every plan within `capacity`. kInvalidArgument naming the
  // field for a bad capacity or head config, kUnimplemented for an uncompiled (head_dim,
  // dtype), kResourceExhausted when the device allocation fails (with the byte count).
  static Result<Workspace> create(const PlanCapacity& capacity, const HeadConfig& heads);

  Workspace(Workspace&& other) noexcept;
  Workspace& operator=(Workspace&& other) noexcept;
  Workspace(const Workspace&) = delete;
  Workspace& operator=(const Workspace&) = delete;
  ~Workspace();

  // Serializes `plan` and copies it into plan_buffer on `stream` (the host staging copy is
  // taken before this returns). kResourceExhausted naming the region when the plan does not
  // fit ("plan_buffer.items: plan has 5000, capacity 4096; create the Workspace with a larger
  // PlanCapacity"), kInvalidArgument when the plan's heads/num_ctas differ from the
  // workspace's, kUnimplemented when a work item's tile is not compiled. On error the
  // previously uploaded plan stays in place and usable.
  Status upload(const Plan& plan, StreamHandle stream);

  bool has_plan() const { return has_plan_; }
  // Fields of the uploaded plan's header, read from the host copy of its buffer (a failed
  // upload leaves the copy as it was; 0 without a plan): its wide items (plan_buffer.h
  // is_wide_item), first in its dispatch order, and its merge entries.
  int num_wide_items() const { return has_plan_ ? staging_[kHdrNumWideItems] : 0; }
  int num_merges() const { return has_plan_ ? staging_[kHdrNumMerges] : 0; }
  // The most query rows one pass of the persistent kernel takes over the uploaded plan's
  // items: an item's folded rows (rows x group size) capped by its tile_q, at most 128, and
  // 128 for a deterministic plan (persistent_kernel.cuh; 0 without a plan).
  int max_pass_rows() const { return has_plan_ ? max_pass_rows_ : 0; }
  const PlanCapacity& capacity() const { return capacity_; }
  const PlanBufferLayout& layout() const { return layout_; }
  const HeadConfig& heads() const { return heads_; }
  int max_partial_slots() const { return layout_.max_merge_slots; }  // per KV head
  size_t total_bytes() const { return total_bytes_; }
  const std::vector<WorkspaceRegion>& regions() const { return regions_; }

  // Device addresses of the regions (fixed for the workspace's lifetime).
  const int32_t* plan_buffer() const;
  void* partial_o() const;  // elements of HeadConfig::dtype
  float* partial_lse() const;
  int32_t* dispatch_counters() const;

 private:
  Workspace() = default;
  void release();

  PlanCapacity capacity_;
  PlanBufferLayout layout_;
  HeadConfig heads_;
  std::vector<WorkspaceRegion> regions_;
  std::vector<int32_t> staging_;  // host copy of the serialized plan
  std::byte* base_ = nullptr;     // device allocation
  size_t total_bytes_ = 0;
  bool has_plan_ = false;
  int max_pass_rows_ = 0;
};

}  // namespace packserve::attention::cuda
