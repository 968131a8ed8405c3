// plan_internal.cc: the helpers of plan_internal.h shared by the policies.
#include "packserve/attention/plan_internal.h"

#include <algorithm>
#include <array>
#include <bit>
#include <cstdint>
#include <limits>
#include <utility>
#include <vector>

#include "packserve/attention/plan_buffer.h"

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
                          int32_t kv_end, int64_t part_tokens, int32_t rows_begin, int32_t rows_end,
                          UnitList& out) {
  if (part_tokens <= 0 || kv_end - kv_begin <= part_tokens) {
    out.units.push_back({kv_request, kv_begin, kv_end, rows_begin, rows_end});
    return;
  }
  const int32_t* const rows = out.rows.data();
  for (int64_t b = kv_begin; b < kv_end; b += part_tokens) {
    const int32_t e = static_cast<int32_t>(std::min<int64_t>(b + part_tokens, kv_end));
    int32_t first = rows_begin;
    if (r >= 0) {  // causal: drop the rows that sit before this piece
      first = static_cast<int32_t>(
          std::lower_bound(rows + rows_begin, rows + rows_end, first_row_seeing(layout, r, b)) -
          rows);
    }
    if (first == rows_end) continue;  // unreachable for a tile ending at its last row
    out.units.push_back({kv_request, static_cast<int32_t>(b), e, first, rows_end});
  }
}

namespace {

// Unit indices sorted by KV length descending, ties by ascending index: a stable LSD radix
// sort of (max length - length) << 32 | index in 8-bit digits of the upper half, the digit
// histograms counted in one pass, a digit that is the same in every key skipped.
void sort_longest_first(const UnitList& list, std::vector<int32_t>& order) {
  const size_t n = list.units.size();
  const Unit* const units = list.units.data();
  int32_t max_len = 0;
  for (size_t i = 0; i < n; ++i) max_len = std::max(max_len, units[i].kv_tokens());
  int num_digits = 0;
  while (num_digits < 4 && (static_cast<uint32_t>(max_len) >> (8 * num_digits)) != 0) {
    ++num_digits;
  }
  std::vector<uint64_t> keyed(n);
  std::array<std::array<uint32_t, 256>, 4> count{};
  for (size_t i = 0; i < n; ++i) {
    const auto key = static_cast<uint32_t>(max_len - units[i].kv_tokens());
    keyed[i] = static_cast<uint64_t>(key) << 32 | static_cast<uint32_t>(i);
    for (int d = 0; d < num_digits; ++d) ++count[d][(key >> (8 * d)) & 0xffu];
  }
  std::vector<uint64_t> next(n);
  for (int d = 0; d < num_digits; ++d) {
    std::array<uint32_t, 256>& start = count[d];
    if (std::find(start.begin(), start.end(), static_cast<uint32_t>(n)) != start.end()) continue;
    uint32_t sum = 0;
    for (uint32_t& c : start) sum += std::exchange(c, sum);
    const int shift = 32 + 8 * d;
    for (size_t i = 0; i < n; ++i) next[start[(keyed[i] >> shift) & 0xffu]++] = keyed[i];
    keyed.swap(next);
  }
  order.resize(n);
  for (size_t i = 0; i < n; ++i) order[i] = static_cast<int32_t>(keyed[i] & 0xffffffffu);
}

}  // namespace

double assign_lpt(const UnitList& list, int group_size, int num_queues, const CostModel& cost,
                  std::vector<int32_t>& order, std::vector<int32_t>& queue, bool quad) {
  const size_t n = list.units.size();
  sort_longest_first(list, order);
  queue.resize(n);
  // Tournament tree over the CTAs' loads (leaves padded to a power of two with +inf): node v
  // holds the CTA of least load below it, the left one on ties, so the root is "the least
  // loaded, lowest index". Adding a unit updates one leaf-to-root path: log2(CTAs) steps
  // (the compiler's branches measured faster than mask selects here: a predicted branch
  // does not wait for the compare). Loads are sums of non-negative
  // finite costs (make_plan checks the cost terms), so they are held as their IEEE bit
  // patterns: for doubles >= +0 (and +inf) integer order is the floating-point order, and
  // an integer compare is the shorter step on the path that each unit waits for.
  auto bits = [](double x) { return std::bit_cast<int64_t>(x); };
  int leaves = 1;
  while (leaves < num_queues) leaves *= 2;
  std::vector<int64_t> load_storage(static_cast<size_t>(leaves),
                                    bits(std::numeric_limits<double>::infinity()));
  std::vector<int32_t> winner_storage(static_cast<size_t>(2 * leaves));
  int64_t* const load = load_storage.data();
  int32_t* const winner = winner_storage.data();
  std::fill_n(load, num_queues, bits(0.0));
  for (int c = 0; c < leaves; ++c) winner[leaves + c] = c;
  for (int v = leaves - 1; v >= 1; --v) {
    winner[v] = load[winner[2 * v + 1]] < load[winner[2 * v]] ? winner[2 * v + 1] : winner[2 * v];
  }
  const Unit* const units = list.units.data();
  for (size_t k = 0; k < n; ++k) {
    const int32_t best = winner[1];  // the root (a lone leaf is its own root)
    const Unit& u = units[order[k]];
    queue[k] = best;
    const int64_t folded = static_cast<int64_t>(u.num_rows()) * group_size;
    const double c = quad && is_quad_shape(u.num_rows(), group_size, u.kv_tokens())
                         ? cost.quad(folded, u.kv_tokens())
                         : cost(folded, u.kv_tokens());
    int64_t best_load = bits(std::bit_cast<double>(load[best]) + c);
    load[best] = best_load;
    // Replay the path: at each level the winner is the lighter of this side's winner (with
    // its load carried in a register) and the sibling's.
    int32_t w = best;
    for (int v = leaves + best; v > 1; v /= 2) {
      const int32_t other = winner[v ^ 1];
      const int64_t other_load = load[other];
      // Ties go to the lower CTA: the left child's.
      const bool take_other = (v & 1) ? !(best_load < other_load) : other_load < best_load;
      w = take_other ? other : w;
      best_load = take_other ? other_load : best_load;
      winner[v / 2] = w;
    }
  }
  return std::bit_cast<double>(*std::max_element(load, load + num_queues));
}

void emit_and_finalize(const UnitList& list, const std::vector<int32_t>& order,
                       const std::vector<int32_t>& cta, int total_rows, Plan& plan) {
  const size_t n = order.size();
  plan.items.reserve(n);
  size_t num_item_rows = 0;
  for (const Unit& u : list.units) num_item_rows += static_cast<size_t>(u.num_rows());
  plan.item_rows.resize(num_item_rows);
  int32_t at = 0;
  for (size_t k = 0; k < n; ++k) {
    const Unit& u = list.units[order[k]];
    WorkItem& item = plan.items.emplace_back();
    item.rows_begin = at;
    for (int32_t r = u.rows_begin; r < u.rows_end; ++r) plan.item_rows[at++] = list.rows[r];
    item.rows_end = at;
    item.kv_request = u.kv_request;
    item.kv_begin = u.kv_begin;
    item.kv_end = u.kv_end;
    item.tile.tile_q = u.tile_q != 0
                           ? u.tile_q
                           : select_tile_q(static_cast<int64_t>(u.num_rows()) * plan.group_size);
    item.tile.tile_kv = select_tile_kv(u.kv_tokens());
    item.cta = cta[k];
  }
  finalize_plan(plan, total_rows);
}

void finalize_plan(Plan& plan, int total_rows) {
  const int32_t* const item_rows = plan.item_rows.data();
  // 1. Items per row.
  std::vector<int32_t> count(static_cast<size_t>(total_rows), 0);
  for (const WorkItem& item : plan.items) {
    for (int32_t k = item.rows_begin; k < item.rows_end; ++k) ++count[item_rows[k]];
  }
  // 2. Final items and partial slots. A final item's rows are covered by it alone: their
  // count becomes 0, so count is then the partial slots of each row (a row with count > 1
  // has only partial items; a row with count 1 whose item is partial has one slot).
  int32_t slots = 0;
  for (WorkItem& item : plan.items) {
    bool alone = true;
    for (int32_t k = item.rows_begin; k < item.rows_end && alone; ++k) {
      alone = count[item_rows[k]] == 1;
    }
    item.writes_final = alone;
    item.partial_begin = 0;
    if (alone) {
      for (int32_t k = item.rows_begin; k < item.rows_end; ++k) count[item_rows[k]] = 0;
    } else {
      item.partial_begin = slots;
      slots += item.num_rows();
    }
  }
  plan.num_partial_slots = slots;
  // 3. Merge map: rows with partial slots, in row order.
  std::vector<int32_t>& cursor = count;  // reused: fill cursor of each row's entry
  plan.merge_indptr.clear();
  plan.merge_indptr.reserve(static_cast<size_t>(total_rows) + 1);
  plan.merge_indptr.push_back(0);
  plan.merge_row.clear();
  plan.merge_row.reserve(static_cast<size_t>(total_rows));
  int32_t offset = 0;
  for (int32_t row = 0; row < total_rows; ++row) {
    const int32_t n = cursor[row];
    if (n == 0) continue;
    cursor[row] = offset;
    offset += n;
    plan.merge_indptr.push_back(offset);
    plan.merge_row.push_back(row);
  }
  // Each entry's slots as kv_begin << 32 | slot, so that ordering them by kv_begin (distinct
  // within a row: its items cover disjoint key ranges) is ordering plain integers.
  std::vector<uint64_t> keyed(static_cast<size_t>(offset));
  for (const WorkItem& item : plan.items) {
    if (item.writes_final) continue;
    const uint64_t kv = static_cast<uint64_t>(item.kv_begin) << 32;
    for (int32_t k = item.rows_begin; k < item.rows_end; ++k) {
      keyed[cursor[item_rows[k]]++] =
          kv | static_cast<uint32_t>(item.partial_begin + (k - item.rows_begin));
    }
  }
  // Ascending kv_begin within each entry (entries are short: insertion sort).
  plan.merge_slots.resize(static_cast<size_t>(offset));
  const int32_t* const indptr = plan.merge_indptr.data();
  const size_t num_entries = plan.merge_row.size();
  for (size_t e = 0; e < num_entries; ++e) {
    const int32_t b = indptr[e];
    const int32_t end = indptr[e + 1];
    for (int32_t i = b + 1; i < end; ++i) {
      const uint64_t key = keyed[i];
      int32_t j = i;
      for (; j > b && keyed[j - 1] > key; --j) keyed[j] = keyed[j - 1];
      keyed[j] = key;
    }
  }
  for (size_t i = 0; i < keyed.size(); ++i) {
    plan.merge_slots[i] = static_cast<int32_t>(keyed[i] & 0xffffffffu);
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
  plan.num_ctas = ctas_per_head(device.num_ctas, layout.num_kv_heads);
  plan.group_size = layout.group_size();
  plan.num_kv_heads = layout.num_kv_heads;
  plan.head_dim = layout.head_dim;
  plan.cost = options.cost;
  return plan;
}

}  // namespace packserve::attention::internal
