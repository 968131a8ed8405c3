// plan_internal.cc: the helpers of plan_internal.h shared by the policies.
#include "packserve/attention/plan_internal.h"

#include <algorithm>
#include <cstdint>
#include <utility>
#include <vector>

namespace packserve::attention::internal {

int16_t select_tile_q(int64_t folded_rows) {
  for (const int m : kTileQSizes) {
    if (m >= folded_rows) return static_cast<int16_t>(m);
  }
  return static_cast<int16_t>(kMaxTileQ);
}

int16_t select_tile_kv(int64_t kv_tokens) {
  int16_t best = static_cast<int16_t>(kTileKvSizes[0]);
  for (const int n : kTileKvSizes) {
    if (2 * static_cast<int64_t>(n) <= kv_tokens) best = static_cast<int16_t>(n);
  }
  return best;
}

void append_causal_pieces(const BatchLayout& layout, int r, int32_t kv_request, int32_t kv_begin,
                          int32_t kv_end, int64_t part_tokens, const int32_t* rows,
                          int32_t num_rows, UnitList& out) {
  auto push = [&](int32_t b, int32_t e, const int32_t* first, const int32_t* last) {
    Unit u;
    u.kv_request = kv_request;
    u.kv_begin = b;
    u.kv_end = e;
    u.rows_begin = static_cast<int32_t>(out.rows.size());
    out.rows.insert(out.rows.end(), first, last);
    u.rows_end = static_cast<int32_t>(out.rows.size());
    out.units.push_back(u);
  };
  if (part_tokens <= 0 || kv_end - kv_begin <= part_tokens) {
    push(kv_begin, kv_end, rows, rows + num_rows);
    return;
  }
  for (int64_t b = kv_begin; b < kv_end; b += part_tokens) {
    const int32_t e = static_cast<int32_t>(std::min<int64_t>(b + part_tokens, kv_end));
    const int32_t* first = rows;
    if (r >= 0) {  // causal: drop the rows that sit before this piece
      first = std::lower_bound(rows, rows + num_rows, first_row_seeing(layout, r, b));
    }
    if (first == rows + num_rows) continue;  // unreachable for a tile ending at its last row
    push(static_cast<int32_t>(b), e, first, rows + num_rows);
  }
}

void assign_lpt(const UnitList& list, int group_size, int num_local_ctas, double alpha, double beta,
                std::vector<int32_t>& order, std::vector<int32_t>& local_cta) {
  const size_t n = list.units.size();
  // Sort key: (longest KV first, then lower unit index) packed into one integer.
  std::vector<uint64_t> keys(n);
  for (size_t i = 0; i < n; ++i) {
    const uint64_t inv_len = static_cast<uint64_t>(INT32_MAX - list.units[i].kv_tokens());
    keys[i] = (inv_len << 32) | static_cast<uint64_t>(i);
  }
  std::sort(keys.begin(), keys.end());
  order.resize(n);
  local_cta.resize(n);
  // Min-heap of (cost, cta) ordered by cost, then CTA index: a strict total order, so the CTA
  // on top is "the least-loaded, lowest index" whatever the heap's shape. Only the top's cost
  // grows, so one sift-down per unit keeps the heap.
  struct Load {
    double cost;
    int32_t cta;
  };
  auto lighter = [](const Load& a, const Load& b) {
    return a.cost < b.cost || (a.cost == b.cost && a.cta < b.cta);
  };
  std::vector<Load> heap(static_cast<size_t>(num_local_ctas));
  for (int c = 0; c < num_local_ctas; ++c) heap[c] = {0.0, c};  // ascending: a valid heap
  const size_t heap_size = heap.size();
  for (size_t k = 0; k < n; ++k) {
    const auto i = static_cast<int32_t>(keys[k] & 0xffffffffu);
    const Unit& u = list.units[i];
    order[k] = i;
    local_cta[k] = heap[0].cta;
    Load moved = {heap[0].cost + alpha * static_cast<double>(u.num_rows()) * group_size +
                      beta * static_cast<double>(u.kv_tokens()),
                  heap[0].cta};
    size_t at = 0;
    for (;;) {
      size_t child = 2 * at + 1;
      if (child >= heap_size) break;
      if (child + 1 < heap_size && lighter(heap[child + 1], heap[child])) ++child;
      if (!lighter(heap[child], moved)) break;
      heap[at] = heap[child];
      at = child;
    }
    heap[at] = moved;
  }
}

int local_ctas_per_head(int num_ctas, int num_kv_heads) {
  return num_ctas >= num_kv_heads ? num_ctas / num_kv_heads : 1;
}

void emit_and_finalize(const UnitList& list, const std::vector<int32_t>& order,
                       const std::vector<int32_t>& local_cta, int local_ctas, int total_rows,
                       Plan& plan) {
  const int num_heads = plan.num_kv_heads;
  const int num_ctas = plan.num_ctas;
  const size_t n = order.size();
  // Head 0 alone, on CTAs [0, local_ctas).
  size_t rows0 = 0;
  for (size_t k = 0; k < n; ++k) rows0 += static_cast<size_t>(list.units[order[k]].num_rows());
  plan.items.reserve(n * num_heads);
  plan.item_rows.reserve(rows0 * num_heads);
  plan.items.resize(n);
  plan.item_rows.resize(rows0);
  int32_t at = 0;
  for (size_t k = 0; k < n; ++k) {
    const Unit& u = list.units[order[k]];
    WorkItem& item = plan.items[k];
    item.kv_head = 0;
    item.rows_begin = at;
    std::copy(list.rows.begin() + u.rows_begin, list.rows.begin() + u.rows_end,
              plan.item_rows.begin() + at);
    at += u.num_rows();
    item.rows_end = at;
    item.kv_request = u.kv_request;
    item.kv_begin = u.kv_begin;
    item.kv_end = u.kv_end;
    item.tile.tile_q = select_tile_q(static_cast<int64_t>(u.num_rows()) * plan.group_size);
    item.tile.tile_kv = select_tile_kv(u.kv_tokens());
    item.cta = local_cta[k];
  }
  plan.num_kv_heads = 1;
  plan.num_ctas = local_ctas;
  finalize_plan(plan, total_rows);
  plan.num_kv_heads = num_heads;
  plan.num_ctas = num_ctas;
  if (num_heads == 1 && local_ctas == num_ctas) return;

  // Replicate over heads: head h's items, rows, slots, merges and queues are head 0's shifted.
  const bool spread = num_ctas >= num_heads;
  const auto n0 = static_cast<int32_t>(n);
  const auto r0 = static_cast<int32_t>(rows0);
  const int32_t s0 = plan.num_partial_slots;
  const int32_t m0 = plan.num_merges();
  const auto ms0 = static_cast<int32_t>(plan.merge_slots.size());
  // Items are appended head by head (no value-initialised storage written twice).
  for (int h = 1; h < num_heads; ++h) {
    const int32_t cta_shift = h * local_ctas;
    for (int32_t i = 0; i < n0; ++i) {
      WorkItem item = plan.items[i];
      item.kv_head = h;
      item.rows_begin += h * r0;
      item.rows_end += h * r0;
      if (!item.writes_final) item.partial_begin += h * s0;
      item.cta = spread ? item.cta + cta_shift : h % num_ctas;
      plan.items.push_back(item);
    }
    const size_t rows_at = plan.item_rows.size();
    plan.item_rows.resize(rows_at + static_cast<size_t>(r0));
    std::copy_n(plan.item_rows.begin(), r0, plan.item_rows.begin() + rows_at);
  }
  if (m0 > 0) {
    plan.merge_row.resize(static_cast<size_t>(m0) * num_heads);
    plan.merge_kv_head.assign(static_cast<size_t>(m0) * num_heads, 0);
    plan.merge_indptr.reserve(static_cast<size_t>(m0) * num_heads + 1);
    plan.merge_slots.reserve(static_cast<size_t>(ms0) * num_heads);
    for (int h = 1; h < num_heads; ++h) {
      std::copy_n(plan.merge_row.begin(), m0, plan.merge_row.begin() + static_cast<size_t>(h) * m0);
      std::fill_n(plan.merge_kv_head.begin() + static_cast<size_t>(h) * m0, m0, h);
      for (int32_t e = 0; e < m0; ++e)
        plan.merge_indptr.push_back(plan.merge_indptr[e + 1] + h * ms0);
      for (int32_t k = 0; k < ms0; ++k) plan.merge_slots.push_back(plan.merge_slots[k] + h * s0);
    }
  }
  plan.num_partial_slots = s0 * num_heads;
  if (spread) {
    std::vector<int32_t> indptr0(plan.cta_indptr.begin(), plan.cta_indptr.end());
    plan.cta_indptr.assign(static_cast<size_t>(num_ctas) + 1, n0 * num_heads);
    plan.cta_items.resize(n * num_heads);
    for (int h = 0; h < num_heads; ++h) {
      for (int c = 0; c <= local_ctas; ++c) {
        plan.cta_indptr[static_cast<size_t>(h) * local_ctas + c] = indptr0[c] + h * n0;
      }
      if (h > 0) {
        for (int32_t k = 0; k < n0; ++k) {
          plan.cta_items[static_cast<size_t>(h) * n0 + k] = plan.cta_items[k] + h * n0;
        }
      }
    }
  } else {
    build_cta_queues(plan);
  }
}

void finalize_plan(Plan& plan, int total_rows) {
  const int num_heads = plan.num_kv_heads;
  const size_t num_keys = static_cast<size_t>(total_rows) * num_heads;
  auto key_of = [total_rows](int32_t row, int32_t head) {
    return static_cast<size_t>(head) * total_rows + row;
  };
  // 1. Items per (row, head).
  std::vector<int32_t> count(num_keys, 0);
  for (const WorkItem& item : plan.items) {
    for (int32_t k = item.rows_begin; k < item.rows_end; ++k) {
      ++count[key_of(plan.item_rows[k], item.kv_head)];
    }
  }
  // 2. Final items and partial slots.
  int32_t slots = 0;
  for (WorkItem& item : plan.items) {
    bool alone = true;
    for (int32_t k = item.rows_begin; k < item.rows_end && alone; ++k) {
      alone = count[key_of(plan.item_rows[k], item.kv_head)] == 1;
    }
    item.writes_final = alone;
    item.partial_begin = 0;
    if (!alone) {
      item.partial_begin = slots;
      slots += item.num_rows();
    }
  }
  plan.num_partial_slots = slots;
  // 3. Merge map: keys covered by a partial item, in key order. A key with count > 1 has only
  // partial items; a key with count 1 whose item is partial gets a one-slot entry.
  std::vector<int32_t>& cursor = count;  // reused: partial slots per key, then fill cursor
  std::fill(cursor.begin(), cursor.end(), 0);
  for (const WorkItem& item : plan.items) {
    if (item.writes_final) continue;
    for (int32_t k = item.rows_begin; k < item.rows_end; ++k) {
      ++cursor[key_of(plan.item_rows[k], item.kv_head)];
    }
  }
  plan.merge_indptr.assign(1, 0);
  plan.merge_row.clear();
  plan.merge_kv_head.clear();
  int32_t offset = 0;
  for (size_t key = 0; key < num_keys; ++key) {
    const int32_t n = cursor[key];
    if (n == 0) continue;
    cursor[key] = offset;
    offset += n;
    plan.merge_indptr.push_back(offset);
    plan.merge_row.push_back(static_cast<int32_t>(key % total_rows));
    plan.merge_kv_head.push_back(static_cast<int32_t>(key / total_rows));
  }
  plan.merge_slots.assign(static_cast<size_t>(offset), 0);
  std::vector<int32_t> slot_kv_begin(static_cast<size_t>(offset), 0);
  for (const WorkItem& item : plan.items) {
    if (item.writes_final) continue;
    for (int32_t k = item.rows_begin; k < item.rows_end; ++k) {
      const int32_t at = cursor[key_of(plan.item_rows[k], item.kv_head)]++;
      plan.merge_slots[at] = item.partial_begin + (k - item.rows_begin);
      slot_kv_begin[at] = item.kv_begin;
    }
  }
  // Ascending kv_begin within each entry (entries are short: insertion sort).
  for (size_t e = 0; e + 1 < plan.merge_indptr.size(); ++e) {
    const int32_t b = plan.merge_indptr[e];
    const int32_t end = plan.merge_indptr[e + 1];
    for (int32_t i = b + 1; i < end; ++i) {
      const int32_t kv = slot_kv_begin[i];
      const int32_t slot = plan.merge_slots[i];
      int32_t j = i - 1;
      while (j >= b && slot_kv_begin[j] > kv) {
        slot_kv_begin[j + 1] = slot_kv_begin[j];
        plan.merge_slots[j + 1] = plan.merge_slots[j];
        --j;
      }
      slot_kv_begin[j + 1] = kv;
      plan.merge_slots[j + 1] = slot;
    }
  }
  build_cta_queues(plan);
}

void build_cta_queues(Plan& plan) {
  // Counting sort of items by cta, stable in item index.
  plan.cta_indptr.assign(static_cast<size_t>(plan.num_ctas) + 1, 0);
  for (const WorkItem& item : plan.items) ++plan.cta_indptr[item.cta + 1];
  for (int c = 0; c < plan.num_ctas; ++c) plan.cta_indptr[c + 1] += plan.cta_indptr[c];
  plan.cta_items.assign(plan.items.size(), 0);
  std::vector<int32_t> fill(plan.cta_indptr.begin(), plan.cta_indptr.end() - 1);
  for (size_t i = 0; i < plan.items.size(); ++i) {
    plan.cta_items[fill[plan.items[i].cta]++] = static_cast<int32_t>(i);
  }
}

Plan empty_plan(const BatchLayout& layout, const DeviceShape& device, const PlanOptions& options) {
  Plan plan;
  plan.policy = options.policy;
  plan.deterministic = options.deterministic;
  plan.num_ctas = device.num_ctas;
  plan.group_size = layout.group_size();
  plan.num_kv_heads = layout.num_kv_heads;
  plan.head_dim = layout.head_dim;
  plan.cost_alpha = options.cost_alpha;
  plan.cost_beta = options.cost_beta;
  return plan;
}

}  // namespace packserve::attention::internal
