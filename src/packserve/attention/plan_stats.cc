// plan_stats.cc: compute_plan_stats() of plan_stats.h; the formulas are written there.
#include "packserve/attention/plan_stats.h"

#include <algorithm>
#include <numeric>
#include <utility>

namespace packserve::attention {

PlanStats compute_plan_stats(const Plan& plan, const BatchLayout& layout) {
  PlanStats stats;
  const int64_t g = layout.group_size();
  const int64_t d = layout.head_dim;
  const auto e = static_cast<int64_t>(dtype_size_bytes(layout.dtype));
  const auto e_kv = static_cast<int64_t>(dtype_size_bytes(layout.kv_dtype()));
  constexpr int64_t kF32Bytes = 4;
  const int64_t heads = plan.num_kv_heads;
  stats.num_work_items = static_cast<int64_t>(plan.items.size()) * heads;
  stats.num_merges = static_cast<int64_t>(plan.num_merges()) * heads;
  stats.cta_cost.assign(static_cast<size_t>(std::max(plan.num_ctas, 0)), 0.0);
  for (const WorkItem& it : plan.items) {
    const int64_t folded = static_cast<int64_t>(it.num_rows()) * g;
    const int64_t tiles = (folded + it.tile.tile_q - 1) / it.tile.tile_q;
    stats.kv_bytes_read += heads * tiles * it.kv_tokens() * 2 * d * e_kv;
    stats.q_bytes_read += heads * folded * d * e;
    if (it.cta >= 0 && it.cta < plan.num_ctas) {
      stats.cta_cost[it.cta] += plan.cost(folded, it.kv_tokens());
    }
  }
  // Distinct pages with the most tokens any request uses in them.
  std::vector<std::pair<int32_t, int32_t>> used;  // (page, tokens)
  used.reserve(layout.kv_page_indices.size());
  for (int r = 0; r < layout.batch_size(); ++r) {
    const int n = layout.num_pages_of(r);
    for (int p = 0; p < n; ++p) {
      const int32_t tokens = p + 1 == n ? layout.kv_last_page_len[r] : layout.page_size;
      used.emplace_back(layout.kv_page_indices[layout.kv_page_indptr[r] + p], tokens);
    }
  }
  std::sort(used.begin(), used.end());
  int64_t unique_tokens = 0;
  for (size_t i = 0; i < used.size(); ++i) {
    if (i + 1 == used.size() || used[i + 1].first != used[i].first) unique_tokens += used[i].second;
  }
  stats.kv_bytes_unique = unique_tokens * layout.num_kv_heads * 2 * d * e_kv;
  stats.output_bytes_written =
      static_cast<int64_t>(layout.total_rows()) * layout.num_qo_heads * d * e;
  const int64_t slot_bytes = d * e + kF32Bytes;  // o in the dtype, lse in f32
  stats.partial_bytes_written = heads * plan.num_partial_slots * g * slot_bytes;
  stats.partial_bytes_read = heads * static_cast<int64_t>(plan.merge_slots.size()) * g * slot_bytes;
  stats.predicted_traffic_bytes = stats.q_bytes_read + stats.kv_bytes_read +
                                  stats.output_bytes_written + stats.partial_bytes_written +
                                  stats.partial_bytes_read;
  if (!stats.cta_cost.empty()) {
    const double total = std::accumulate(stats.cta_cost.begin(), stats.cta_cost.end(), 0.0);
    const double mean = total / static_cast<double>(stats.cta_cost.size());
    const double max = *std::max_element(stats.cta_cost.begin(), stats.cta_cost.end());
    stats.imbalance = mean > 0.0 ? max / mean : 0.0;
  }
  return stats;
}

}  // namespace packserve::attention
