// plan_stats.h: what a Plan costs, predicted from the plan and the layout alone (issue 2
// "Plan statistics"; seed 002 §5.1 counts memory accesses the same way).
//
// Every byte count is for ONE attention layer and counts all KV heads. Element sizes:
// Q, K, V, the output and a partial state's o are layout.dtype (2 bytes for bf16/f16, 4 for
// f32), K and V 1 byte with kv_fp8 (e_kv below, else e_kv = e); a partial state's lse is f32. (Seed 002 §5.1 keeps every intermediate in FP32; the
// CUDA executor, whose traffic these count, rounds a partial o once as it rounds the output;
// the CPU executor keeps it in f32, plan.h.) Formulas (g = group_size,
// d = head_dim, e = dtype bytes, H = num_kv_heads, tiles(i) = ceil(num_rows(i) * g /
// tile_q(i)); every item is run once per KV head, plan.h):
//   num_work_items       = items * H (the (item, head) pairs the grid runs)
//   num_merges           = merge entries * H (the (row, head) outputs merged)
//   kv_bytes_read        = H * sum over items of tiles(i) * kv_tokens(i) * 2 * d * e_kv
//                          (K and V of one head, re-read once per query tile)
//   kv_bytes_unique      = sum over distinct physical pages of used_tokens(page) *
//                          num_kv_heads * 2 * d * e_kv, where used_tokens(page) is the most tokens
//                          any request uses in that page (page_size, or last_page_len for a
//                          request's last page)
//   q_bytes_read         = H * sum over items of num_rows(i) * g * d * e
//   output_bytes_written = total_rows * num_qo_heads * d * e (each output element once, by a
//                          final item or by a merge)
//   partial_bytes_written = H * num_partial_slots * g * (d * e + 4)   (o and lse per qo head)
//   partial_bytes_read    = H * merge_slots.size() * g * (d * e + 4)
//   predicted_traffic_bytes = q_bytes_read + kv_bytes_read + output_bytes_written +
//                             partial_bytes_written + partial_bytes_read
//   cta_cost[c]  = sum over items of queue c of plan.cost(num_rows * g, kv_tokens) (the
//                  planner's own cost model, plan.h CostModel); every head's CTA running
//                  queue c has this cost
//   imbalance    = max(cta_cost) / mean(cta_cost) over the plan's num_ctas queues (idle ones
//                  count as 0); 1 is perfect; 0 for an empty plan.
// Thread-safety: pure function.
#pragma once

#include <cstdint>
#include <vector>

#include "packserve/attention/batch_layout.h"
#include "packserve/attention/plan.h"

namespace packserve::attention {

struct PlanStats {
  int64_t num_work_items = 0;
  int64_t num_merges = 0;
  int64_t kv_bytes_read = 0;
  int64_t kv_bytes_unique = 0;
  int64_t q_bytes_read = 0;
  int64_t output_bytes_written = 0;
  int64_t partial_bytes_written = 0;
  int64_t partial_bytes_read = 0;
  int64_t predicted_traffic_bytes = 0;
  std::vector<double> cta_cost;  // [num_ctas]: per CTA queue
  double imbalance = 0.0;
};

// Preconditions: layout passed validate(); plan was made for it (check_invariants holds).
PlanStats compute_plan_stats(const Plan& plan, const BatchLayout& layout);

}  // namespace packserve::attention
