// plan_buffer.h: a Plan serialized into one flat int32 buffer with fixed capacity, so a GPU
// reads it from fixed addresses and a captured CUDA graph can replay a *different* plan of
// the same capacity (seed 004 §3.3.1, "CUDA-graph compatible").
//
// Layout (every region at a fixed offset that depends only on PlanCapacity; all int32):
//   header      [kHeaderFields]                     PlanBufferHeader fields, in order
//   cta_indptr  [num_ctas + 1]                      into cta_items (num_ctas = the queues,
//                                                   ctas_per_head(capacity) of plan.h)
//   cta_items   [max_items]                         item ids per queue, in execution order
//   dispatch    [max_items]                         item ids in buffer_dispatch_order() (below):
//                                                   the order the CUDA kernels' CTAs claim them
//   items       [max_items * kItemFields]           WorkItem fields, item-major, in dispatch
//               order (entry j is item dispatch[j], so a claimed ticket reads its item's
//               fields without first reading its id): rows_begin, rows_end, kv_request,
//               kv_begin, kv_end, tile_q, tile_kv, writes_final (0/1), partial_begin
//   item_rows   [max_item_rows]                     global query rows per item
//   merge_indptr[max_merges + 1]                    into merge_slots
//   merge_row   [max_merges]
//   merge_slots [max_merge_slots]
// Items are head-implicit (plan.h): a kernel runs queue c for KV head h on CTA
// c + h * num_ctas, and partial slot s of head h is storage slot h * num_partial_slots + s.
// Every region starts at a multiple of kPlanBufferAlignInt32 elements (64 bytes), so a kernel
// can vector-load any region. Unused tails of each region are left as they were (a kernel
// reads only the counts the header gives). The cost model (Plan::cost) is a
// planning input, not part of the buffer: deserialize_plan leaves it at its defaults, checks
// that the dispatch region is a permutation of the items and puts each item back at its id
// (the order is derived from the queues and the cost model, not a field of Plan).
// Thread-safety: pure functions.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "packserve/attention/plan.h"
#include "packserve/common/status.h"

namespace packserve::attention {

inline constexpr int32_t kPlanBufferMagic = 0x50534e50;  // "PNSP"
inline constexpr int32_t kPlanBufferVersion = 6;
inline constexpr int kItemFields = 9;
// int32 elements of the plan buffer per item row: the cta_items, dispatch, items (kItemFields),
// item_rows and merge_slots regions (plan_buffer_layout). Beside them the workspace holds a
// partial state per item row and query head (cuda/workspace.h).
inline constexpr int kPlanInt32PerItemRow = kItemFields + 4;
inline constexpr int kPlanBufferAlignInt32 = 16;

// Header field indices.
enum PlanBufferHeader : int {
  kHdrMagic = 0,
  kHdrVersion,
  kHdrNumItems,
  kHdrNumItemRows,
  kHdrNumCtas,
  kHdrNumMerges,
  kHdrNumMergeSlots,
  kHdrNumPartialSlots,
  kHdrGroupSize,
  kHdrNumKvHeads,
  kHdrHeadDim,
  kHdrDeterministic,
  kHdrPolicy,        // Policy as its integer value (appended; informational)
  kHdrNumWideItems,  // the first this many items of the dispatch region are wide (below)
  kHdrNumQuadItems,  // the last this many items of the dispatch region are quad items (below)
  kHeaderFields,
};

// What a buffer must hold. The derived maxima are upper bounds for every plan that
// make_plan can emit for a batch of at most max_rows query rows and max_pages KV page
// references (sum of all requests' page-list lengths) for a device of num_ctas CTAs
// (DeviceShape::num_ctas) and num_kv_heads KV heads; how each bound follows from the
// policies is written in plan_buffer.cc.
struct PlanCapacity {
  int max_rows = 0;
  int max_pages = 0;
  int num_ctas = 0;
  int num_kv_heads = 0;
};

struct PlanBufferLayout {  // offsets and sizes in int32 elements
  int num_ctas = 0;        // CTA queues of every plan for this capacity: ctas_per_head() (plan.h)
  int max_items = 0, max_item_rows = 0, max_merges = 0, max_merge_slots = 0;
  int off_cta_indptr = 0, off_cta_items = 0, off_dispatch = 0, off_items = 0, off_item_rows = 0;
  int off_merge_indptr = 0, off_merge_row = 0, off_merge_slots = 0;
  int total_int32 = 0;
};

// Wide items: those whose q passes are 128 folded rows on the CUDA kernels (head_dim 128, not
// deterministic, min(num_rows x group_size, tile_q) > 64), the compute-bound items the wide
// kernel can run (cuda/wide_kernel.cuh). It runs them, as a phase before the persistent kernel
// runs the rest, when (runs_wide_phase) they carry at least kWideKernelShare of the plan's
// modelled cost (plan.cost) and the rest, run after them, does not cost more than the phase
// saves: the wide items' largest load on one CTA queue / kWideKernelSpeedup + the rest's span
// (its largest item, at least its mean load per queue) < the plan's largest queue load (one
// kernel). Then the buffer's dispatch region is dispatch_order() (plan.h) with the wide items
// moved to the front (stable), and the header's num_wide_items counts them. Otherwise it is
// dispatch_order() and num_wide_items is 0 (one kernel, which overlaps the wide items with the
// others: H100, fifteenth session, docs/benchmarks.md). The second condition keeps a prefill
// chunk's step with a few long decode rows in one kernel: alone after the wide phase each row's
// item streams at one CTA's rate (twenty-eighth session: a 1536-row chunk beside 4 rows of
// ~2,000 keys, 0.104 ms as two phases, the chunk alone 0.069 ms).
inline constexpr double kWideKernelShare = 0.9;
// The wide kernel's speed on wide items over the persistent kernel's, the least measured (H100,
// fifteenth session: prefill_48 424 against 396 TFLOP/s; prefill_8k 498 against 434).
inline constexpr double kWideKernelSpeedup = 1.07;
// The query rows the persistent kernel's passes over `item` take before its per-kernel cap
// (cuda/persistent_kernel.cuh): the item's folded rows (rows x group_size), at most its tile_q.
int item_pass_rows(const Plan& plan, const WorkItem& item);
bool is_wide_item(const Plan& plan, const WorkItem& item);
bool runs_wide_phase(const Plan& plan);
// Quad items: short single-query items (one row, group_size <= 4, so at most 4 folded rows; at
// most kQuadMaxKeys keys; num_kv_heads a multiple of 4; not deterministic), which the persistent
// kernel runs for eight KV heads per ticket (two groups of four, or an item's last four), one
// head of a group per warp, in one 16-row pass (cuda/persistent_kernel.cuh): a ticket then moves
// eight heads' bytes for one start-up. When a plan
// has at least kQuadMinPerQueue of them per CTA queue (one quad ticket per CTA; fewer, and
// their coarser tickets only lengthen the tail), they are the last items of the dispatch
// region (stable) and the header's num_quad_items counts them; otherwise it is 0. A kernel's
// tickets are (num_items - num_quad) x heads single-head ones, then ceil(heads / 8) per quad
// item, except that the last of them (the final wave) take heads / 4 tickets of four heads
// each (cuda/persistent_kernel.cuh). H100 (twenty-second session, docs/benchmarks.md): PAT
// [1,256]'s 128-key leaves 1.05x with four heads per ticket (eight: 1.01x more, twenty-third
// session); with 512-key items decode B=32 0.90x and PAT [1,4,64]'s 256-key leaves 0.94x.
inline constexpr int kQuadMaxKeys = 128;
inline constexpr int kQuadMinPerQueue = 4;
bool is_quad_item(const Plan& plan, const WorkItem& item);
// is_quad_item's rule in parts, for planners that cost units before they are items: the shape
// of one item, whether the plan allows quad items at all, and whether a plan with `count` items
// of that shape runs them as quad tickets.
inline bool is_quad_shape(int64_t num_rows, int group_size, int64_t kv_tokens) {
  return num_rows == 1 && group_size <= 4 && kv_tokens <= kQuadMaxKeys;
}
inline bool allows_quad_items(const Plan& plan) {
  return !plan.deterministic && plan.num_kv_heads % 4 == 0;
}
inline bool uses_quad_tickets(const Plan& plan, int64_t count) {
  return allows_quad_items(plan) && count >= int64_t{kQuadMinPerQueue} * plan.num_ctas;
}
// The dispatch region's order; *num_wide (if not null) = the leading items the wide kernel runs,
// *num_quad (if not null) = the trailing quad items.
std::vector<int32_t> buffer_dispatch_order(const Plan& plan, int32_t* num_wide = nullptr,
                                           int32_t* num_quad = nullptr);

// Region offsets for a capacity; kInvalidArgument when a field is < 1.
Result<PlanBufferLayout> plan_buffer_layout(const PlanCapacity& capacity);

// Writes `plan` into `buffer` (size >= layout.total_int32). kResourceExhausted naming the
// region ("items: plan has 5000, capacity 4096") when the plan does not fit; kInvalidArgument
// when plan.num_kv_heads differs from capacity.num_kv_heads or plan.num_ctas from the
// layout's queues (the grid is fixed by the capacity). The buffer is unchanged on error.
Status serialize_plan(const Plan& plan, const PlanCapacity& capacity, std::span<int32_t> buffer);

// Reads a plan back (for tests and the CPU executor's round-trip check).
Result<Plan> deserialize_plan(const PlanCapacity& capacity, std::span<const int32_t> buffer);

}  // namespace packserve::attention
