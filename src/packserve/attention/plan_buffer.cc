// plan_buffer.cc: the flat int32 plan buffer of plan_buffer.h.
//
// Capacity bounds. Let R = max_rows, P = max_pages (page references). Items are head-implicit
// (plan.h), and every policy keeps the budget of plan_internal.h: the rows of request r
// appear in at most q_len(r) + num_pages_of(r) items in total. Summed over requests:
//   item rows   <= R + P
//     naive: every row once (R).
//     balanced: a row at position p sees ceil((p + 1) / L_r) <= 1 + pages / q_len chunks
//       (L_r >= kv_len / (1 + pages / q_len), chunks page-aligned from key 0), so a request's
//       rows see at most q_len + pages chunks (policy_balanced.cc).
//     prefix: decode rows (q_len 1) see at most one piece per page of their context (pieces
//       are page-aligned and the packs on a path cover disjoint pages); prefill rows stay
//       under shared nodes only when each node has >= q_len pages and those packs are cut
//       into at most pages / q_len parts, and their own causal tiles are cut so that a row
//       sees at most 1 + leaf pages / q_len parts: again <= q_len + pages (policy_prefix.cc);
//       deterministic: chunks of D_r >= L_r's floor from key 0, as balanced.
//   items       <= item rows           (every item has at least one row)
//   merge slots <= item rows           (one slot per row of a partial item)
//   merges      <= R                   (at most one entry per row)
// These hold for every plan make_plan emits for a batch within the capacity; the tests check
// them on random batches.
#include "packserve/attention/plan_buffer.h"

#include <algorithm>
#include <climits>
#include <string>
#include <vector>

namespace packserve::attention {
namespace {

int64_t align(int64_t v) {
  return (v + kPlanBufferAlignInt32 - 1) / kPlanBufferAlignInt32 * kPlanBufferAlignInt32;
}

std::string str(int64_t v) { return std::to_string(v); }

}  // namespace

Result<PlanBufferLayout> plan_buffer_layout(const PlanCapacity& capacity) {
  const struct {
    const char* name;
    int value;
  } fields[] = {{"max_rows", capacity.max_rows},
                {"max_pages", capacity.max_pages},
                {"num_ctas", capacity.num_ctas},
                {"num_kv_heads", capacity.num_kv_heads}};
  for (const auto& f : fields) {
    if (f.value < 1) {
      return invalid_argument(std::string("capacity.") + f.name + ": expected >= 1, got " +
                              str(f.value));
    }
  }
  const int64_t item_rows = static_cast<int64_t>(capacity.max_rows) + capacity.max_pages;
  const int64_t merges = capacity.max_rows;
  const int num_ctas = ctas_per_head(capacity.num_ctas, capacity.num_kv_heads);
  int64_t at = align(kHeaderFields);
  PlanBufferLayout out;
  auto region = [&at](int64_t size) {
    const int64_t offset = at;
    at = align(at + size);
    return offset;
  };
  const int64_t off_cta_indptr = region(num_ctas + 1);
  // The regions sized by item_rows: kPlanInt32PerItemRow int32 per item row (plan_buffer.h).
  const int64_t off_cta_items = region(item_rows);
  const int64_t off_dispatch = region(item_rows);
  const int64_t off_items = region(item_rows * kItemFields);
  const int64_t off_item_rows = region(item_rows);
  const int64_t off_merge_indptr = region(merges + 1);
  const int64_t off_merge_row = region(merges);
  const int64_t off_merge_slots = region(item_rows);
  // Partial storage holds max_merge_slots slots per head (workspace.h).
  if (at > INT32_MAX || item_rows * capacity.num_kv_heads > INT32_MAX) {
    return invalid_argument("capacity: the plan buffer would need " + str(at) +
                            " int32 elements and " + str(item_rows * capacity.num_kv_heads) +
                            " partial slots (> 2^31 - 1); lower max_rows or max_pages");
  }
  out.num_ctas = num_ctas;
  out.max_items = static_cast<int>(item_rows);
  out.max_item_rows = static_cast<int>(item_rows);
  out.max_merges = static_cast<int>(merges);
  out.max_merge_slots = static_cast<int>(item_rows);
  out.off_cta_indptr = static_cast<int>(off_cta_indptr);
  out.off_cta_items = static_cast<int>(off_cta_items);
  out.off_dispatch = static_cast<int>(off_dispatch);
  out.off_items = static_cast<int>(off_items);
  out.off_item_rows = static_cast<int>(off_item_rows);
  out.off_merge_indptr = static_cast<int>(off_merge_indptr);
  out.off_merge_row = static_cast<int>(off_merge_row);
  out.off_merge_slots = static_cast<int>(off_merge_slots);
  out.total_int32 = static_cast<int>(at);
  return out;
}

int item_pass_rows(const Plan& plan, const WorkItem& item) {
  return static_cast<int>(
      std::min<int64_t>(static_cast<int64_t>(item.num_rows()) * plan.group_size, item.tile.tile_q));
}

bool is_wide_item(const Plan& plan, const WorkItem& item) {
  return plan.head_dim == 128 && !plan.deterministic && item_pass_rows(plan, item) > 64;
}

bool is_quad_item(const Plan& plan, const WorkItem& item) {
  return allows_quad_items(plan) &&
         is_quad_shape(item.num_rows(), plan.group_size, item.kv_tokens());
}

bool runs_wide_phase(const Plan& plan) {
  // Per CTA queue (its items are cta_items[cta_indptr[c], cta_indptr[c + 1])): the load of all
  // its items and of its wide ones.
  double wide_cost = 0.0, all_cost = 0.0, largest_rest = 0.0, one_kernel = 0.0, wide_span = 0.0;
  for (int c = 0; c < plan.num_ctas; ++c) {
    double queue_all = 0.0, queue_wide = 0.0;
    for (int32_t k = plan.cta_indptr[c]; k < plan.cta_indptr[c + 1]; ++k) {
      const WorkItem& it = plan.items[static_cast<size_t>(plan.cta_items[k])];
      const double cost =
          plan.cost(static_cast<int64_t>(it.num_rows()) * plan.group_size, it.kv_tokens());
      queue_all += cost;
      if (is_wide_item(plan, it)) {
        queue_wide += cost;
      } else {
        largest_rest = std::max(largest_rest, cost);
      }
    }
    all_cost += queue_all;
    wide_cost += queue_wide;
    one_kernel = std::max(one_kernel, queue_all);
    wide_span = std::max(wide_span, queue_wide);
  }
  if (wide_cost == 0.0 || wide_cost < kWideKernelShare * all_cost) return false;
  const double rest_span = std::max(largest_rest, (all_cost - wide_cost) / plan.num_ctas);
  return wide_span / kWideKernelSpeedup + rest_span < one_kernel;
}

std::vector<int32_t> buffer_dispatch_order(const Plan& plan, int32_t* num_wide, int32_t* num_quad) {
  std::vector<int32_t> order = dispatch_order(plan);
  int32_t wide = 0;
  if (runs_wide_phase(plan)) {
    wide = static_cast<int32_t>(
        std::count_if(plan.items.begin(), plan.items.end(),
                      [&](const WorkItem& it) { return is_wide_item(plan, it); }));
    std::stable_partition(order.begin(), order.end(), [&](int32_t i) {
      return is_wide_item(plan, plan.items[static_cast<size_t>(i)]);
    });
  }
  if (num_wide != nullptr) *num_wide = wide;
  auto quad_shaped = [&](const WorkItem& it) {
    return is_quad_shape(it.num_rows(), plan.group_size, it.kv_tokens());
  };
  const int64_t quad = std::count_if(plan.items.begin(), plan.items.end(), quad_shaped);
  if (!uses_quad_tickets(plan, quad)) {
    if (num_quad != nullptr) *num_quad = 0;
    return order;
  }
  std::stable_partition(order.begin() + wide, order.end(), [&](int32_t i) {
    return !quad_shaped(plan.items[static_cast<size_t>(i)]);
  });
  if (num_quad != nullptr) *num_quad = static_cast<int32_t>(quad);
  return order;
}

Status serialize_plan(const Plan& plan, const PlanCapacity& capacity, std::span<int32_t> buffer) {
  PS_ASSIGN_OR_RETURN(const PlanBufferLayout layout, plan_buffer_layout(capacity));
  if (plan.num_kv_heads != capacity.num_kv_heads) {
    return invalid_argument("plan.num_kv_heads = " + str(plan.num_kv_heads) +
                            " differs from capacity.num_kv_heads = " + str(capacity.num_kv_heads));
  }
  if (plan.num_ctas != layout.num_ctas) {
    return invalid_argument("plan.num_ctas = " + str(plan.num_ctas) + " CTA queues, capacity (" +
                            str(capacity.num_ctas) + " CTAs, " + str(capacity.num_kv_heads) +
                            " heads) has " + str(layout.num_ctas) +
                            "; plan for DeviceShape{capacity.num_ctas}");
  }
  if (static_cast<int64_t>(buffer.size()) < layout.total_int32) {
    return invalid_argument("buffer: " + str(static_cast<int64_t>(buffer.size())) +
                            " int32 elements, the layout needs " + str(layout.total_int32));
  }
  const struct {
    const char* name;
    size_t size;
    int max;
  } regions[] = {{"items", plan.items.size(), layout.max_items},
                 {"item_rows", plan.item_rows.size(), layout.max_item_rows},
                 {"merges", plan.merge_row.size(), layout.max_merges},
                 {"merge_slots", plan.merge_slots.size(), layout.max_merge_slots}};
  for (const auto& r : regions) {
    if (r.size > static_cast<size_t>(r.max)) {
      return resource_exhausted(std::string(r.name) + ": plan has " +
                                str(static_cast<int64_t>(r.size)) + ", capacity " + str(r.max));
    }
  }
  if (plan.cta_indptr.size() != static_cast<size_t>(plan.num_ctas) + 1 ||
      plan.merge_indptr.size() != plan.merge_row.size() + 1 ||
      plan.cta_items.size() != plan.items.size()) {
    return invalid_argument("plan: CSR arrays have inconsistent lengths");
  }
  // The queues must be well formed: dispatch_order() walks them.
  const auto num_items = static_cast<int32_t>(plan.items.size());
  if (plan.cta_indptr.front() != 0 || plan.cta_indptr.back() != num_items) {
    return invalid_argument("plan: cta_indptr runs from " + str(plan.cta_indptr.front()) + " to " +
                            str(plan.cta_indptr.back()) + ", expected 0 to " + str(num_items) +
                            " (every item in one queue)");
  }
  for (int c = 0; c < plan.num_ctas; ++c) {
    if (plan.cta_indptr[c] < 0 || plan.cta_indptr[c + 1] < plan.cta_indptr[c] ||
        plan.cta_indptr[c + 1] > num_items) {
      return invalid_argument("plan: cta_indptr[" + str(c + 1) +
                              "] = " + str(plan.cta_indptr[c + 1]) + " outside [cta_indptr[" +
                              str(c) + "], " + str(num_items) + "]");
    }
  }
  for (size_t k = 0; k < plan.cta_items.size(); ++k) {
    if (plan.cta_items[k] < 0 || plan.cta_items[k] >= num_items) {
      return invalid_argument("plan: cta_items[" + str(static_cast<int64_t>(k)) +
                              "] = " + str(plan.cta_items[k]) + " is not an item index");
    }
  }
  int32_t* b = buffer.data();
  b[kHdrMagic] = kPlanBufferMagic;
  b[kHdrVersion] = kPlanBufferVersion;
  b[kHdrNumItems] = static_cast<int32_t>(plan.items.size());
  b[kHdrNumItemRows] = static_cast<int32_t>(plan.item_rows.size());
  b[kHdrNumCtas] = plan.num_ctas;
  b[kHdrNumMerges] = static_cast<int32_t>(plan.merge_row.size());
  b[kHdrNumMergeSlots] = static_cast<int32_t>(plan.merge_slots.size());
  b[kHdrNumPartialSlots] = plan.num_partial_slots;
  b[kHdrGroupSize] = plan.group_size;
  b[kHdrNumKvHeads] = plan.num_kv_heads;
  b[kHdrHeadDim] = plan.head_dim;
  b[kHdrDeterministic] = plan.deterministic ? 1 : 0;
  b[kHdrPolicy] = static_cast<int32_t>(plan.policy);
  std::copy(plan.cta_indptr.begin(), plan.cta_indptr.end(), b + layout.off_cta_indptr);
  std::copy(plan.cta_items.begin(), plan.cta_items.end(), b + layout.off_cta_items);
  const std::vector<int32_t> order =
      buffer_dispatch_order(plan, &b[kHdrNumWideItems], &b[kHdrNumQuadItems]);
  std::copy(order.begin(), order.end(), b + layout.off_dispatch);
  int32_t* items = b + layout.off_items;
  for (const int32_t i : order) {
    const WorkItem& it = plan.items[static_cast<size_t>(i)];
    items[0] = it.rows_begin;
    items[1] = it.rows_end;
    items[2] = it.kv_request;
    items[3] = it.kv_begin;
    items[4] = it.kv_end;
    items[5] = it.tile.tile_q;
    items[6] = it.tile.tile_kv;
    items[7] = it.writes_final ? 1 : 0;
    items[8] = it.partial_begin;
    items += kItemFields;
  }
  std::copy(plan.item_rows.begin(), plan.item_rows.end(), b + layout.off_item_rows);
  std::copy(plan.merge_indptr.begin(), plan.merge_indptr.end(), b + layout.off_merge_indptr);
  std::copy(plan.merge_row.begin(), plan.merge_row.end(), b + layout.off_merge_row);
  std::copy(plan.merge_slots.begin(), plan.merge_slots.end(), b + layout.off_merge_slots);
  return ok_status();
}

Result<Plan> deserialize_plan(const PlanCapacity& capacity, std::span<const int32_t> buffer) {
  PS_ASSIGN_OR_RETURN(const PlanBufferLayout layout, plan_buffer_layout(capacity));
  if (static_cast<int64_t>(buffer.size()) < layout.total_int32) {
    return invalid_argument("buffer: " + str(static_cast<int64_t>(buffer.size())) +
                            " int32 elements, the layout needs " + str(layout.total_int32));
  }
  const int32_t* b = buffer.data();
  if (b[kHdrMagic] != kPlanBufferMagic || b[kHdrVersion] != kPlanBufferVersion) {
    return invalid_argument("buffer: magic/version " + str(b[kHdrMagic]) + "/" +
                            str(b[kHdrVersion]) + ", expected " + str(kPlanBufferMagic) + "/" +
                            str(kPlanBufferVersion));
  }
  if (b[kHdrNumCtas] != layout.num_ctas || b[kHdrNumKvHeads] != capacity.num_kv_heads) {
    return invalid_argument("buffer: num_ctas/num_kv_heads " + str(b[kHdrNumCtas]) + "/" +
                            str(b[kHdrNumKvHeads]) + ", capacity has " + str(layout.num_ctas) +
                            "/" + str(capacity.num_kv_heads));
  }
  const struct {
    const char* name;
    int32_t value;
    int max;
  } counts[] = {{"num_items", b[kHdrNumItems], layout.max_items},
                {"num_item_rows", b[kHdrNumItemRows], layout.max_item_rows},
                {"num_merges", b[kHdrNumMerges], layout.max_merges},
                {"num_merge_slots", b[kHdrNumMergeSlots], layout.max_merge_slots}};
  for (const auto& c : counts) {
    if (c.value < 0 || c.value > c.max) {
      return invalid_argument(std::string("buffer: ") + c.name + " = " + str(c.value) +
                              " outside [0, " + str(c.max) + "]");
    }
  }
  if (b[kHdrPolicy] < 0 || b[kHdrPolicy] > static_cast<int32_t>(Policy::kPrefix)) {
    return invalid_argument("buffer: policy " + str(b[kHdrPolicy]) + " unknown");
  }
  Plan plan;
  plan.policy = static_cast<Policy>(b[kHdrPolicy]);
  plan.deterministic = b[kHdrDeterministic] != 0;
  plan.num_ctas = b[kHdrNumCtas];
  plan.group_size = b[kHdrGroupSize];
  plan.num_kv_heads = b[kHdrNumKvHeads];
  plan.head_dim = b[kHdrHeadDim];
  plan.num_partial_slots = b[kHdrNumPartialSlots];
  const int32_t num_items = b[kHdrNumItems];
  const int32_t num_merges = b[kHdrNumMerges];
  plan.cta_indptr.assign(b + layout.off_cta_indptr,
                         b + layout.off_cta_indptr + layout.num_ctas + 1);
  plan.cta_items.assign(b + layout.off_cta_items, b + layout.off_cta_items + num_items);
  std::vector<char> dispatched(static_cast<size_t>(num_items), 0);
  for (int32_t k = 0; k < num_items; ++k) {
    const int32_t i = b[layout.off_dispatch + k];
    if (i < 0 || i >= num_items || dispatched[i]) {
      return invalid_argument("buffer: dispatch[" + str(k) + "] = " + str(i) +
                              " is not a permutation of the " + str(num_items) + " items");
    }
    dispatched[i] = 1;
  }
  plan.items.resize(static_cast<size_t>(num_items));
  const int32_t* items = b + layout.off_items;
  for (int32_t k = 0; k < num_items; ++k) {  // entry k holds item dispatch[k]
    WorkItem& it = plan.items[static_cast<size_t>(b[layout.off_dispatch + k])];
    it.rows_begin = items[0];
    it.rows_end = items[1];
    it.kv_request = items[2];
    it.kv_begin = items[3];
    it.kv_end = items[4];
    it.tile.tile_q = static_cast<int16_t>(items[5]);
    it.tile.tile_kv = static_cast<int16_t>(items[6]);
    it.writes_final = items[7] != 0;
    it.partial_begin = items[8];
    items += kItemFields;
  }
  // The kernels split the tickets at num_wide_items: the first that many are wide items.
  if (b[kHdrNumWideItems] < 0 || b[kHdrNumWideItems] > num_items) {
    return invalid_argument("buffer: num_wide_items = " + str(b[kHdrNumWideItems]) +
                            " outside [0, " + str(num_items) + "]");
  }
  for (int32_t k = 0; k < b[kHdrNumWideItems]; ++k) {
    if (!is_wide_item(plan, plan.items[static_cast<size_t>(b[layout.off_dispatch + k])])) {
      return invalid_argument("buffer: dispatch[" + str(k) + "] is not a wide item, but " +
                              "num_wide_items = " + str(b[kHdrNumWideItems]));
    }
  }
  // ... and at num_items - num_quad_items: the last that many are quad items, run four KV heads
  // per ticket.
  const int32_t num_quad = b[kHdrNumQuadItems];
  if (num_quad < 0 || num_quad > num_items - b[kHdrNumWideItems]) {
    return invalid_argument("buffer: num_quad_items = " + str(num_quad) + " outside [0, " +
                            str(num_items - b[kHdrNumWideItems]) + "]");
  }
  for (int32_t k = num_items - num_quad; k < num_items; ++k) {
    if (!is_quad_item(plan, plan.items[static_cast<size_t>(b[layout.off_dispatch + k])])) {
      return invalid_argument("buffer: dispatch[" + str(k) + "] is not a quad item, but " +
                              "num_quad_items = " + str(num_quad));
    }
  }
  // The CTA of an item is implied by the queue that lists it.
  for (int c = 0; c < plan.num_ctas; ++c) {
    const int32_t lo = std::clamp(plan.cta_indptr[c], 0, num_items);
    const int32_t hi = std::clamp(plan.cta_indptr[c + 1], lo, num_items);
    for (int32_t k = lo; k < hi; ++k) {
      const int32_t i = plan.cta_items[k];
      if (i >= 0 && i < num_items) plan.items[i].cta = c;
    }
  }
  plan.item_rows.assign(b + layout.off_item_rows, b + layout.off_item_rows + b[kHdrNumItemRows]);
  plan.merge_indptr.assign(b + layout.off_merge_indptr,
                           b + layout.off_merge_indptr + num_merges + 1);
  plan.merge_row.assign(b + layout.off_merge_row, b + layout.off_merge_row + num_merges);
  plan.merge_slots.assign(b + layout.off_merge_slots,
                          b + layout.off_merge_slots + b[kHdrNumMergeSlots]);
  return plan;
}

}  // namespace packserve::attention
