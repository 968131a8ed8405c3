// plan.cc: policy names, make_plan() (option checks + policy dispatch), check_invariants()
// and to_text() of plan.h. The policies live in policy_{naive,balanced,prefix}.cc.
#include "packserve/attention/plan.h"

#include <algorithm>
#include <cmath>
#include <sstream>
#include <string>
#include <vector>

#include "packserve/attention/plan_internal.h"

namespace packserve::attention {

std::string_view policy_name(Policy policy) {
  switch (policy) {
    case Policy::kNaive:
      return "naive";
    case Policy::kBalanced:
      return "balanced";
    case Policy::kPrefix:
      return "prefix";
    case Policy::kAuto:
      return "auto";
  }
  return "?";
}

Result<Policy> parse_policy(std::string_view name) {
  if (name == "naive") return Policy::kNaive;
  if (name == "balanced") return Policy::kBalanced;
  if (name == "prefix") return Policy::kPrefix;
  if (name == "auto") return Policy::kAuto;
  return invalid_argument(
      "policy: expected one of \"naive\", \"balanced\", \"prefix\", \"auto\", got \"" +
      std::string(name) + "\"");
}

namespace {

Status check_options(const BatchLayout& layout, const DeviceShape& device,
                     const PlanOptions& options) {
  if (device.num_ctas < 1) {
    return invalid_argument("device.num_ctas: expected >= 1, got " +
                            std::to_string(device.num_ctas));
  }
  PS_RETURN_IF_ERROR(check_plan_options(options));
  const int64_t incidences = static_cast<int64_t>(layout.num_kv_heads) *
                             (static_cast<int64_t>(layout.total_rows()) +
                              static_cast<int64_t>(layout.kv_page_indices.size()));
  if (incidences > INT32_MAX) {
    return invalid_argument("layout: num_kv_heads * (total_rows + page refs) = " +
                            std::to_string(incidences) + " exceeds int32; split the batch");
  }
  if (static_cast<int64_t>(options.deterministic_kv_chunk_tokens) + layout.page_size > INT32_MAX) {
    return invalid_argument("options.deterministic_kv_chunk_tokens: " +
                            std::to_string(options.deterministic_kv_chunk_tokens) +
                            " is too large");
  }
  return ok_status();
}

std::string str(int64_t v) { return std::to_string(v); }

}  // namespace

Status check_plan_options(const PlanOptions& options) {
  const CostModel& cost = options.cost;
  for (const auto& [name, v] :
       {std::pair{"options.cost.alpha", cost.alpha}, std::pair{"options.cost.beta", cost.beta},
        std::pair{"options.cost.item", cost.item},
        std::pair{"options.cost.wide_key", cost.wide_key}}) {
    if (!std::isfinite(v) || v < 0.0) {
      return invalid_argument(std::string(name) + ": expected a finite value >= 0, got " +
                              std::to_string(v));
    }
  }
  if (cost.alpha == 0.0 && cost.beta == 0.0) {
    return invalid_argument(
        "options.cost.alpha, options.cost.beta: both are 0; at least one "
        "must be > 0 for the CTA assignment to balance anything");
  }
  if (options.deterministic_kv_chunk_tokens < 1) {
    return invalid_argument("options.deterministic_kv_chunk_tokens: expected >= 1, got " +
                            std::to_string(options.deterministic_kv_chunk_tokens));
  }
  if (options.policy != Policy::kNaive && options.policy != Policy::kBalanced &&
      options.policy != Policy::kPrefix && options.policy != Policy::kAuto) {
    return invalid_argument("options.policy: unknown value " +
                            std::to_string(static_cast<int>(options.policy)));
  }
  return ok_status();
}

Result<Plan> make_plan(const BatchLayout& layout, const DeviceShape& device,
                       const PlanOptions& options) {
  PS_RETURN_IF_ERROR(check_options(layout, device, options));
  switch (options.policy) {
    case Policy::kNaive:
      return internal::make_plan_naive(layout, device, options);
    case Policy::kBalanced:
      return internal::make_plan_balanced(layout, device, options);
    case Policy::kPrefix:
      return internal::make_plan_prefix(layout, device, options);
    case Policy::kAuto: {
      PlanOptions chosen = options;  // the plan names the policy that made it
      chosen.policy =
          auto_prefers_prefix(layout, options.deterministic) ? Policy::kPrefix : Policy::kBalanced;
      return make_plan(layout, device, chosen);
    }
  }
  return invalid_argument("options.policy: unknown value");
}

// Coverage is proved per row with intervals: every item row contributes the keys it sees,
// [kv_begin, min(kv_end, position + 1)); sorted by begin they must tile [0, position + 1)
// exactly, which is "every visible key exactly once" for all qo heads (items are run for
// every KV head, and GQA folds the group's qo heads into the item).
Status check_invariants(const Plan& plan, const BatchLayout& layout) {
  const int total_rows = layout.total_rows();
  const int batch = layout.batch_size();
  if (plan.group_size != layout.group_size() || plan.num_kv_heads != layout.num_kv_heads ||
      plan.head_dim != layout.head_dim) {
    return internal_error("plan shape (group_size " + str(plan.group_size) + ", num_kv_heads " +
                          str(plan.num_kv_heads) + ", head_dim " + str(plan.head_dim) +
                          ") differs from the layout's");
  }
  if (plan.num_ctas < 1 || plan.cta_indptr.size() != static_cast<size_t>(plan.num_ctas) + 1) {
    return internal_error("cta_indptr: length " + str(plan.cta_indptr.size()) +
                          ", expected num_ctas + 1 = " + str(plan.num_ctas + 1));
  }
  if (plan.num_kv_heads < 1 || plan.num_partial_slots < 0 ||
      static_cast<int64_t>(plan.num_partial_slots) * plan.num_kv_heads > INT32_MAX) {
    return internal_error("num_partial_slots " + str(plan.num_partial_slots) + " x " +
                          str(plan.num_kv_heads) + " heads does not fit int32");
  }
  auto in_set = [](int v, const auto& set) {
    return std::find(std::begin(set), std::end(set), v) != std::end(set);
  };
  struct Interval {
    int32_t row;
    int32_t begin, end, item, slot;  // slot -1: final
  };
  std::vector<Interval> intervals;
  intervals.reserve(plan.item_rows.size());
  std::vector<int32_t> slot_row(static_cast<size_t>(std::max(plan.num_partial_slots, 0)), -1);
  std::vector<int32_t> slot_kv_begin(slot_row.size(), 0);
  for (size_t i = 0; i < plan.items.size(); ++i) {
    const WorkItem& it = plan.items[i];
    const std::string where = "item " + str(i) + ": ";
    if (it.rows_begin < 0 || it.rows_end <= it.rows_begin ||
        it.rows_end > static_cast<int32_t>(plan.item_rows.size())) {
      return internal_error(where + "rows [" + str(it.rows_begin) + ", " + str(it.rows_end) +
                            ") empty or outside item_rows");
    }
    if (it.kv_request < 0 || it.kv_request >= batch) {
      return internal_error(where + "kv_request " + str(it.kv_request) + " out of range");
    }
    if (it.kv_begin < 0 || it.kv_end <= it.kv_begin || it.kv_end > layout.kv_len(it.kv_request)) {
      return internal_error(where + "kv range [" + str(it.kv_begin) + ", " + str(it.kv_end) +
                            ") empty or beyond kv_len " + str(layout.kv_len(it.kv_request)) +
                            " of request " + str(it.kv_request));
    }
    if (!in_set(it.tile.tile_q, kTileQSizes) || !in_set(it.tile.tile_kv, kTileKvSizes)) {
      return internal_error(where + "tile " + str(it.tile.tile_q) + "x" + str(it.tile.tile_kv) +
                            " is not compiled");
    }
    if (it.cta < 0 || it.cta >= plan.num_ctas) {
      return internal_error(where + "cta " + str(it.cta) + " out of range");
    }
    if (!it.writes_final &&
        (it.partial_begin < 0 || it.partial_begin + it.num_rows() > plan.num_partial_slots)) {
      return internal_error(where + "partial slots [" + str(it.partial_begin) + ", +" +
                            str(it.num_rows()) + ") outside num_partial_slots " +
                            str(plan.num_partial_slots));
    }
    const int32_t* ref_pages = layout.kv_page_indices.data() + layout.kv_page_indptr[it.kv_request];
    for (int32_t k = it.rows_begin; k < it.rows_end; ++k) {
      const int32_t row = plan.item_rows[k];
      if (row < 0 || row >= total_rows || (k > it.rows_begin && row <= plan.item_rows[k - 1])) {
        return internal_error(where + "row " + str(row) + " out of range or not ascending");
      }
      const int r = request_of_row(layout, row);
      const int64_t pos = layout.row_position(r, row - layout.qo_indptr[r]);
      if (pos < it.kv_begin) {
        return internal_error(where + "row " + str(row) + " at position " + str(pos) +
                              " sees none of its keys [" + str(it.kv_begin) + ", " +
                              str(it.kv_end) + ")");
      }
      const auto seen_end = static_cast<int32_t>(std::min<int64_t>(it.kv_end, pos + 1));
      const int32_t* row_pages = layout.kv_page_indices.data() + layout.kv_page_indptr[r];
      for (int32_t p = it.kv_begin / layout.page_size; p <= (seen_end - 1) / layout.page_size;
           ++p) {
        if (row_pages[p] != ref_pages[p]) {
          return internal_error(where + "row " + str(row) + " (request " + str(r) + ") has page " +
                                str(row_pages[p]) + " at page index " + str(p) + ", kv_request " +
                                str(it.kv_request) + " has " + str(ref_pages[p]) +
                                ": KV not physically shared");
        }
      }
      int32_t slot = -1;
      if (!it.writes_final) {
        slot = it.partial_begin + (k - it.rows_begin);
        if (slot_row[slot] != -1) {
          return internal_error("partial slot " + str(slot) + " written twice");
        }
        slot_row[slot] = row;
        slot_kv_begin[slot] = it.kv_begin;
      }
      intervals.push_back({row, it.kv_begin, seen_end, static_cast<int32_t>(i), slot});
    }
  }
  for (size_t s = 0; s < slot_row.size(); ++s) {
    if (slot_row[s] == -1) return internal_error("partial slot " + str(s) + " never written");
  }
  std::sort(intervals.begin(), intervals.end(), [](const Interval& a, const Interval& b) {
    return a.row != b.row ? a.row < b.row : a.begin < b.begin;
  });
  // Walk all rows in order against the sorted intervals.
  std::vector<char> row_needs_merge(static_cast<size_t>(total_rows), 0);
  size_t at = 0;
  for (int row = 0; row < total_rows; ++row) {
    const int r = request_of_row(layout, row);
    const int64_t visible_end = layout.row_position(r, row - layout.qo_indptr[r]) + 1;
    int64_t covered = 0;
    int count = 0;
    bool any_final = false;
    for (; at < intervals.size() && intervals[at].row == row; ++at, ++count) {
      if (intervals[at].begin != covered) {
        return internal_error("row " + str(row) + ": keys [" +
                              str(std::min<int64_t>(covered, intervals[at].begin)) + ", " +
                              str(std::max<int64_t>(covered, intervals[at].begin)) + ") " +
                              (intervals[at].begin > covered ? "not covered" : "covered twice") +
                              " (item " + str(intervals[at].item) + ")");
      }
      covered = intervals[at].end;
      any_final = any_final || intervals[at].slot == -1;
    }
    if (covered != visible_end) {
      return internal_error("row " + str(row) + ": keys [" + str(covered) + ", " +
                            str(visible_end) + ") not covered");
    }
    if (any_final && count != 1) {
      return internal_error("row " + str(row) +
                            ": a writes_final item shares the row with other items");
    }
    row_needs_merge[row] = any_final ? 0 : 1;
  }
  // Merge map.
  const size_t num_merges = plan.merge_row.size();
  if (plan.merge_indptr.size() != num_merges + 1 || plan.merge_indptr[0] != 0 ||
      plan.merge_indptr.back() != static_cast<int32_t>(plan.merge_slots.size())) {
    return internal_error("merge map arrays have inconsistent lengths");
  }
  std::vector<char> slot_merged(slot_row.size(), 0);
  for (size_t e = 0; e < num_merges; ++e) {
    const int32_t row = plan.merge_row[e];
    if (row < 0 || row >= total_rows) {
      return internal_error("merge " + str(e) + ": row " + str(row) + " out of range");
    }
    if (row_needs_merge[row] != 1) {
      return internal_error("merge " + str(e) + ": row " + str(row) +
                            " merged twice or has a final item");
    }
    row_needs_merge[row] = 2;
    if (plan.merge_indptr[e + 1] <= plan.merge_indptr[e]) {
      return internal_error("merge " + str(e) + ": no slots");
    }
    for (int32_t k = plan.merge_indptr[e]; k < plan.merge_indptr[e + 1]; ++k) {
      const int32_t s = plan.merge_slots[k];
      if (s < 0 || s >= plan.num_partial_slots || slot_merged[s]) {
        return internal_error("merge " + str(e) + ": slot " + str(s) +
                              " out of range or merged twice");
      }
      slot_merged[s] = 1;
      if (slot_row[s] != row) {
        return internal_error("merge " + str(e) + ": slot " + str(s) +
                              " was written for another row");
      }
      if (k > plan.merge_indptr[e] && slot_kv_begin[s] <= slot_kv_begin[plan.merge_slots[k - 1]]) {
        return internal_error("merge " + str(e) + ": slots not in ascending kv_begin order");
      }
    }
  }
  for (size_t row = 0; row < row_needs_merge.size(); ++row) {
    if (row_needs_merge[row] == 1) {
      return internal_error("row " + str(row) + " has partial states but no merge entry");
    }
  }
  // CTA queues.
  if (plan.cta_indptr[0] != 0 ||
      plan.cta_indptr.back() != static_cast<int32_t>(plan.cta_items.size()) ||
      plan.cta_items.size() != plan.items.size()) {
    return internal_error("cta queues: indptr/items lengths inconsistent with " +
                          str(plan.items.size()) + " items");
  }
  std::vector<char> queued(plan.items.size(), 0);
  for (int c = 0; c < plan.num_ctas; ++c) {
    if (plan.cta_indptr[c + 1] < plan.cta_indptr[c]) {
      return internal_error("cta_indptr decreases at " + str(c));
    }
    for (int32_t k = plan.cta_indptr[c]; k < plan.cta_indptr[c + 1]; ++k) {
      const int32_t i = plan.cta_items[k];
      if (i < 0 || i >= static_cast<int32_t>(plan.items.size()) || queued[i]) {
        return internal_error("cta " + str(c) + ": item " + str(i) + " invalid or queued twice");
      }
      queued[i] = 1;
      if (plan.items[i].cta != c) {
        return internal_error("item " + str(i) + " has cta " + str(plan.items[i].cta) +
                              " but sits in the queue of cta " + str(c));
      }
    }
  }
  return ok_status();
}

std::string to_text(const Plan& plan) {
  std::ostringstream out;
  out << "plan policy=" << policy_name(plan.policy) << " deterministic=" << plan.deterministic
      << " queues=" << plan.num_ctas << " group=" << plan.group_size
      << " kv_heads=" << plan.num_kv_heads << " head_dim=" << plan.head_dim
      << " partial_slots=" << plan.num_partial_slots << "\n";
  auto list = [&out](const std::vector<int32_t>& v, int32_t b, int32_t e) {
    out << "[";
    for (int32_t k = b; k < e; ++k) out << (k > b ? "," : "") << v[k];
    out << "]";
  };
  for (size_t i = 0; i < plan.items.size(); ++i) {
    const WorkItem& it = plan.items[i];
    out << "item " << i << ": cta=" << it.cta << " rows=";
    list(plan.item_rows, it.rows_begin, it.rows_end);
    out << " kv=r" << it.kv_request << "[" << it.kv_begin << "," << it.kv_end << ")"
        << " tile=" << it.tile.tile_q << "x" << it.tile.tile_kv;
    if (it.writes_final) {
      out << " final\n";
    } else {
      out << " partial@" << it.partial_begin << "\n";
    }
  }
  for (int e = 0; e < plan.num_merges(); ++e) {
    out << "merge " << e << ": row=" << plan.merge_row[e] << " slots=";
    list(plan.merge_slots, plan.merge_indptr[e], plan.merge_indptr[e + 1]);
    out << "\n";
  }
  for (int c = 0; c + 1 < static_cast<int>(plan.cta_indptr.size()); ++c) {
    out << "cta " << c << ": ";
    list(plan.cta_items, plan.cta_indptr[c], plan.cta_indptr[c + 1]);
    out << "\n";
  }
  return out.str();
}

std::vector<int32_t> dispatch_order(const Plan& plan) {
  struct Entry {
    double start;
    int32_t queue, position, item;
  };
  std::vector<Entry> entries;
  entries.reserve(plan.cta_items.size());
  for (int c = 0; c + 1 < static_cast<int>(plan.cta_indptr.size()); ++c) {
    double start = 0.0;
    for (int32_t k = plan.cta_indptr[c]; k < plan.cta_indptr[c + 1]; ++k) {
      const WorkItem& it = plan.items[plan.cta_items[k]];
      entries.push_back({start, c, k, plan.cta_items[k]});
      start += plan.cost(static_cast<int64_t>(it.num_rows()) * plan.group_size, it.kv_tokens());
    }
  }
  std::sort(entries.begin(), entries.end(), [](const Entry& a, const Entry& b) {
    if (a.start != b.start) return a.start < b.start;
    return a.queue != b.queue ? a.queue < b.queue : a.position < b.position;
  });
  std::vector<int32_t> order;
  order.reserve(entries.size());
  for (const Entry& e : entries) order.push_back(e.item);
  return order;
}

}  // namespace packserve::attention
