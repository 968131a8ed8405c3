// policy_naive.cc: the `naive` policy, the padding-free but unbalanced baseline (issue 2).
//
// One work item per request (run for every KV head, plan.h): all rows of the request, the
// whole KV [0, kv_len),
// tile_q = the smallest compiled tile covering min(rows * group_size, 128) folded rows (an
// item with more folded rows re-reads its KV once per query tile), tile_kv from the KV
// length (plan_internal.h). Items are in request order and dealt to the CTA queues
// round-robin (item i -> queue i % num_ctas): no balancing at all, which is the point of the
// baseline. Every item writes the final output (one item per row), so the plan has no
// partial slots and no merges. Budget: each row appears once.
#include "packserve/attention/plan_internal.h"

namespace packserve::attention::internal {

Result<Plan> make_plan_naive(const BatchLayout& layout, const DeviceShape& device,
                             const PlanOptions& options) {
  Plan plan = empty_plan(layout, device, options);
  const int batch = layout.batch_size();
  plan.items.reserve(static_cast<size_t>(batch));
  plan.item_rows.reserve(static_cast<size_t>(layout.total_rows()));
  for (int r = 0; r < batch; ++r) {
    WorkItem item;
    item.rows_begin = static_cast<int32_t>(plan.item_rows.size());
    for (int32_t x = layout.qo_indptr[r]; x < layout.qo_indptr[r + 1]; ++x) {
      plan.item_rows.push_back(x);
    }
    item.rows_end = static_cast<int32_t>(plan.item_rows.size());
    item.kv_request = r;
    item.kv_begin = 0;
    item.kv_end = layout.kv_len(r);
    item.tile.tile_q = select_tile_q(static_cast<int64_t>(layout.q_len(r)) * layout.group_size());
    item.tile.tile_kv = select_tile_kv(layout.kv_len(r));
    item.cta = r % plan.num_ctas;
    plan.items.push_back(item);
  }
  finalize_plan(plan, layout.total_rows());
  return plan;
}

}  // namespace packserve::attention::internal
