// workspace.cu: Workspace allocation, region layout and plan upload (workspace.h).
#include <cuda_runtime.h>

#include <algorithm>
#include <string>
#include <utility>

#include "packserve/attention/cuda/cuda_check.h"
#include "packserve/attention/cuda/kernel_launch.h"
#include "packserve/attention/cuda/workspace.h"

namespace packserve::attention::cuda {
namespace {

constexpr size_t kRegionAlignBytes = 256;

size_t align_up(size_t n) {
  return (n + kRegionAlignBytes - 1) / kRegionAlignBytes * kRegionAlignBytes;
}

Status check_heads(const HeadConfig& h) {
  if (h.num_qo_heads < 1 || h.num_kv_heads < 1 || h.num_qo_heads % h.num_kv_heads != 0) {
    return invalid_argument("heads: num_qo_heads = " + std::to_string(h.num_qo_heads) +
                            ", num_kv_heads = " + std::to_string(h.num_kv_heads) +
                            ": expected both >= 1 and num_qo_heads % num_kv_heads == 0");
  }
  return ok_status();
}

}  // namespace

Result<Workspace> Workspace::create(const PlanCapacity& capacity, const HeadConfig& heads) {
  PS_RETURN_IF_ERROR(check_heads(heads));
  if (capacity.num_kv_heads != heads.num_kv_heads) {
    return invalid_argument(
        "capacity.num_kv_heads = " + std::to_string(capacity.num_kv_heads) +
        " differs from heads.num_kv_heads = " + std::to_string(heads.num_kv_heads));
  }
  PS_RETURN_IF_ERROR(prepare_persistent(heads.head_dim, heads.dtype));
  if (heads.head_dim == 128 && wide_kernel_enabled()) {
    PS_RETURN_IF_ERROR(wide_kernel_ctas().status());
  }
  PS_ASSIGN_OR_RETURN(const PlanBufferLayout layout, plan_buffer_layout(capacity));
  Workspace ws;
  ws.capacity_ = capacity;
  ws.layout_ = layout;
  ws.heads_ = heads;
  // Partial slots per head (the plan's) times the heads: slot s of head h at h * plan slots + s.
  const size_t slots =
      static_cast<size_t>(layout.max_merge_slots) * heads.num_kv_heads * heads.group_size();
  size_t offset = 0;
  auto add = [&](std::string name, size_t bytes) {
    ws.regions_.push_back({std::move(name), offset, bytes});
    offset += align_up(bytes);
  };
  add("plan_buffer", static_cast<size_t>(layout.total_int32) * sizeof(int32_t));
  add("partial_o", slots * heads.head_dim * dtype_size_bytes(heads.dtype));
  add("partial_lse", slots * sizeof(float));
  add("dispatch", kDispatchCounters * sizeof(int32_t));
  ws.total_bytes_ = offset;
  void* base = nullptr;
  const cudaError_t err = cudaMalloc(&base, ws.total_bytes_);
  if (err != cudaSuccess) {
    (void)cudaGetLastError();
    return resource_exhausted("workspace: cudaMalloc of " + std::to_string(ws.total_bytes_) +
                              " bytes failed (" + cudaGetErrorString(err) +
                              "); reduce PlanCapacity.max_rows / max_pages");
  }
  ws.base_ = static_cast<std::byte*>(base);
  // run_cuda leaves the dispatch counter at 0 after every launch; it starts there. Waited
  // for: a caller's non-blocking stream is not ordered after the legacy stream's memset.
  PS_CUDA_RETURN_IF_ERROR(
      cudaMemset(ws.dispatch_counters(), 0, kDispatchCounters * sizeof(int32_t)));
  PS_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(nullptr));
  ws.staging_.assign(static_cast<size_t>(layout.total_int32), 0);
  return Result<Workspace>(std::move(ws));
}

Workspace::Workspace(Workspace&& o) noexcept { *this = std::move(o); }

Workspace& Workspace::operator=(Workspace&& o) noexcept {
  if (this != &o) {
    release();
    capacity_ = o.capacity_;
    layout_ = o.layout_;
    heads_ = o.heads_;
    regions_ = std::move(o.regions_);
    staging_ = std::move(o.staging_);
    base_ = std::exchange(o.base_, nullptr);
    total_bytes_ = std::exchange(o.total_bytes_, 0);
    has_plan_ = std::exchange(o.has_plan_, false);
    max_pass_rows_ = o.max_pass_rows_;
  }
  return *this;
}

Workspace::~Workspace() { release(); }

void Workspace::release() {
  if (base_ != nullptr) (void)cudaFree(base_);
  base_ = nullptr;
}

const int32_t* Workspace::plan_buffer() const {
  return reinterpret_cast<const int32_t*>(base_ + regions_[0].offset_bytes);
}
void* Workspace::partial_o() const { return base_ + regions_[1].offset_bytes; }
float* Workspace::partial_lse() const {
  return reinterpret_cast<float*>(base_ + regions_[2].offset_bytes);
}
int32_t* Workspace::dispatch_counters() const {
  return reinterpret_cast<int32_t*>(base_ + regions_[3].offset_bytes);
}

Status Workspace::upload(const Plan& plan, StreamHandle stream) {
  if (base_ == nullptr) return failed_precondition("workspace: used after move");
  if (plan.num_kv_heads != heads_.num_kv_heads || plan.group_size != heads_.group_size() ||
      plan.head_dim != heads_.head_dim) {
    return invalid_argument(
        "plan heads (num_kv_heads=" + std::to_string(plan.num_kv_heads) + ", group_size=" +
        std::to_string(plan.group_size) + ", head_dim=" + std::to_string(plan.head_dim) +
        ") differ from the workspace's (" + std::to_string(heads_.num_kv_heads) + ", " +
        std::to_string(heads_.group_size()) + ", " + std::to_string(heads_.head_dim) + ")");
  }
  if (plan.num_ctas != layout_.num_ctas) {
    return invalid_argument(
        "plan.num_ctas = " + std::to_string(plan.num_ctas) +
        " CTA queues differ from the workspace's " + std::to_string(layout_.num_ctas) +
        ": make the plan with DeviceShape{num_ctas = " + std::to_string(capacity_.num_ctas) + "}");
  }
  PS_RETURN_IF_ERROR(supports_plan(plan, heads_.dtype));
  if (plan.num_partial_slots > max_partial_slots()) {
    return resource_exhausted("workspace region partial_o: plan needs " +
                              std::to_string(plan.num_partial_slots) + " partial slots, capacity " +
                              std::to_string(max_partial_slots()) +
                              "; create the Workspace with a larger PlanCapacity");
  }
  const Status s = serialize_plan(plan, capacity_, staging_);
  if (!s.ok()) {
    return Status(s.code(), "workspace region plan_buffer: " + s.message() +
                                "; create the Workspace with a larger PlanCapacity");
  }
  // Only the used head of each region the kernels read travels (they read only the counts
  // the header gives), not the whole capacity-sized buffer; the queues (cta_indptr,
  // cta_items) stay on the host, the attention kernel claims items from the dispatch region.
  // From pageable memory: each copy returns once its source is staged, so staging_ may be
  // reused.
  const int32_t* b = staging_.data();
  const struct {
    int offset;
    int64_t count;
  } used[] = {{0, kHeaderFields},
              {layout_.off_dispatch, b[kHdrNumItems]},
              {layout_.off_items, static_cast<int64_t>(b[kHdrNumItems]) * kItemFields},
              {layout_.off_item_rows, b[kHdrNumItemRows]},
              {layout_.off_merge_indptr, b[kHdrNumMerges] + 1},
              {layout_.off_merge_row, b[kHdrNumMerges]},
              {layout_.off_merge_slots, b[kHdrNumMergeSlots]}};
  auto* device_plan = reinterpret_cast<int32_t*>(base_ + regions_[0].offset_bytes);
  for (const auto& r : used) {
    if (r.count == 0) continue;
    PS_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(device_plan + r.offset, b + r.offset,
                                            static_cast<size_t>(r.count) * sizeof(int32_t),
                                            cudaMemcpyHostToDevice, stream));
  }
  // (A deterministic plan counts as 128 whatever its items: its bits must not depend on which
  // kernel variant the rest of the batch selects.)
  int widest = plan.deterministic ? 128 : 0;
  for (const WorkItem& it : plan.items) widest = std::max(widest, item_pass_rows(plan, it));
  max_pass_rows_ = std::min(widest, 128);
  has_plan_ = true;
  return ok_status();
}

}  // namespace packserve::attention::cuda
