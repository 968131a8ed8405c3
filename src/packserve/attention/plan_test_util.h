// plan_test_util.h: BatchLayout builders for the planner tests (plan_test.cc,
// policy_*_test.cc, plan_buffer_test.cc, plan_stats_test.cc). Test-only; header-only so the
// attention library does not compile it.
//
// LayoutBuilder hands out fresh page ids and appends requests whose page list is a shared
// prefix (page ids of an existing node) followed by fresh pages of their own.
// pat_tree() builds the PAT §8.2 configuration B = [b0, b1, ...], L = [l0, l1, ...]: level i
// has b_i nodes of l_i tokens, each level's nodes split evenly under the previous level's; the
// last level's nodes are the requests' own tokens (one decode row each).
// random_layout() draws seeded batches with the edges STYLE.md §8 asks for: q_len 1,
// kv_len = page_size +- 1, one very long request among short ones, prefix forests of depth
// 0..3, prefill chunks after cached context, and exact duplicates (query rows inside shared
// pages). Thread-safety: values.
#pragma once

#include <algorithm>
#include <cstdint>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "packserve/attention/batch_layout.h"
#include "packserve/attention/plan.h"
#include "packserve/common/rng.h"

namespace packserve::attention::testing {

// The cost model of the golden plans worked out by hand: seed 004's alpha * l_q + beta * l_kv
// with keys of a 128-row tile weighed 2x and no per-item cost (the planner's model before the
// H100 timelines; tests of the default model say so).
inline constexpr CostModel kHandCost{1.0, 1.0, 0.0, 2.0};

class LayoutBuilder {
 public:
  LayoutBuilder(int num_qo_heads, int num_kv_heads, int head_dim, int page_size) {
    layout_.num_qo_heads = num_qo_heads;
    layout_.num_kv_heads = num_kv_heads;
    layout_.head_dim = head_dim;
    layout_.page_size = page_size;
    layout_.dtype = DType::kBF16;
    layout_.qo_indptr = {0};
    layout_.kv_page_indptr = {0};
  }
  // `num_pages` fresh page ids.
  std::vector<int32_t> new_pages(int num_pages) {
    std::vector<int32_t> pages;
    for (int i = 0; i < num_pages; ++i) pages.push_back(layout_.num_pages++);
    return pages;
  }
  // A request whose first pages are `shared` (full pages) and whose remaining
  // kv_len - shared.size() * page_size tokens sit in fresh pages. Returns its index.
  int add(const std::vector<int32_t>& shared, int kv_len, int q_len) {
    const int ps = layout_.page_size;
    const int total_pages = (kv_len + ps - 1) / ps;
    std::vector<int32_t> pages = shared;
    const std::vector<int32_t> own = new_pages(total_pages - static_cast<int>(shared.size()));
    pages.insert(pages.end(), own.begin(), own.end());
    return add_pages(pages, kv_len, q_len);
  }
  // A request with exactly these pages.
  int add_pages(const std::vector<int32_t>& pages, int kv_len, int q_len) {
    const int ps = layout_.page_size;
    layout_.kv_page_indices.insert(layout_.kv_page_indices.end(), pages.begin(), pages.end());
    layout_.kv_page_indptr.push_back(static_cast<int32_t>(layout_.kv_page_indices.size()));
    layout_.kv_last_page_len.push_back(kv_len - (static_cast<int>(pages.size()) - 1) * ps);
    layout_.qo_indptr.push_back(layout_.qo_indptr.back() + q_len);
    return layout_.batch_size() - 1;
  }
  const BatchLayout& layout() const { return layout_; }

 private:
  BatchLayout layout_;
};

// The batch of the hand-worked decode goldens (BalancedPolicy.GoldenDecode*, PlanStats):
// g = 1, 2 kv heads, d = 64, page 16; decode rows with kv 300, 100, 40.
inline LayoutBuilder golden_decode_batch() {
  LayoutBuilder b(2, 2, 64, 16);
  b.add({}, 300, 1);
  b.add({}, 100, 1);
  b.add({}, 40, 1);
  return b;
}

// PAT §8.2 tree. levels[i] = {nodes at level i, tokens per node}; token counts of all but the
// last level are multiples of page_size. Every last-level node is one decode request.
inline BatchLayout pat_tree(const std::vector<std::pair<int, int>>& levels, int num_qo_heads,
                            int num_kv_heads, int head_dim, int page_size) {
  LayoutBuilder b(num_qo_heads, num_kv_heads, head_dim, page_size);
  std::vector<std::vector<int32_t>> prefixes = {{}};  // page lists of the previous level
  int prefix_tokens = 0;
  for (size_t level = 0; level + 1 < levels.size(); ++level) {
    const auto [count, tokens] = levels[level];
    std::vector<std::vector<int32_t>> next;
    for (int i = 0; i < count; ++i) {
      std::vector<int32_t> pages = prefixes[static_cast<size_t>(i) * prefixes.size() / count];
      const std::vector<int32_t> own = b.new_pages(tokens / page_size);
      pages.insert(pages.end(), own.begin(), own.end());
      next.push_back(pages);
    }
    prefixes = next;
    prefix_tokens += tokens;
  }
  const auto [leaves, leaf_tokens] = levels.back();
  for (int i = 0; i < leaves; ++i) {
    b.add(prefixes[static_cast<size_t>(i) * prefixes.size() / leaves], prefix_tokens + leaf_tokens,
          1);
  }
  return b.layout();
}

struct RandomLayoutOptions {
  bool allow_sharing = true;  // prefix forests and duplicates
  int max_batch = 24;
};

inline BatchLayout random_layout(uint64_t seed, const RandomLayoutOptions& opt = {}) {
  Rng rng(seed);
  const int page_sizes[] = {1, 4, 16, 16, 64};
  const int groups[] = {1, 4, 8};
  const int page = page_sizes[rng.uniform_int(0, 4)];
  const int kv_heads = static_cast<int>(rng.uniform_int(1, 3));
  const int group = groups[rng.uniform_int(0, 2)];
  LayoutBuilder b(kv_heads * group, kv_heads, 128, page);
  // Prefix forest: nodes as page lists, each child extends a random earlier node.
  std::vector<std::vector<int32_t>> nodes;
  if (opt.allow_sharing) {
    const int roots = static_cast<int>(rng.uniform_int(0, 3));
    for (int i = 0; i < roots; ++i)
      nodes.push_back(b.new_pages(static_cast<int>(rng.uniform_int(1, std::max(1, 256 / page)))));
    const int children = roots == 0 ? 0 : static_cast<int>(rng.uniform_int(0, 5));
    for (int i = 0; i < children; ++i) {
      std::vector<int32_t> pages = nodes[rng.uniform_int(0, static_cast<int>(nodes.size()) - 1)];
      const std::vector<int32_t> own =
          b.new_pages(static_cast<int>(rng.uniform_int(1, std::max(1, 128 / page))));
      pages.insert(pages.end(), own.begin(), own.end());
      nodes.push_back(pages);
    }
  }
  const int batch = static_cast<int>(rng.uniform_int(1, opt.max_batch));
  const int long_one = rng.uniform() < 0.3 ? static_cast<int>(rng.uniform_int(0, batch - 1)) : -1;
  std::vector<std::pair<std::vector<int32_t>, int>> made;  // (pages, kv_len) for duplicates
  for (int r = 0; r < batch; ++r) {
    if (opt.allow_sharing && !made.empty() && rng.uniform() < 0.1) {  // exact duplicate
      const auto& [pages, kv_len] = made[rng.uniform_int(0, static_cast<int>(made.size()) - 1)];
      b.add_pages(pages, kv_len, static_cast<int>(rng.uniform_int(1, kv_len)));
      continue;
    }
    std::vector<int32_t> shared;
    if (!nodes.empty() && rng.uniform() < 0.7) {
      shared = nodes[rng.uniform_int(0, static_cast<int>(nodes.size()) - 1)];
    }
    const double u = rng.uniform();
    const int q_len = u < 0.7 ? 1 : static_cast<int>(rng.uniform_int(2, u < 0.95 ? 40 : 300));
    int own;
    const double v = rng.uniform();
    if (r == long_one) {
      own = static_cast<int>(rng.uniform_int(3000, 6000));
    } else if (v < 0.2) {
      own = page + static_cast<int>(rng.uniform_int(-1, 1));  // page_size +- 1
    } else {
      own = static_cast<int>(std::min(2000.0, rng.lognormal(150.0, 1.0))) + 1;
    }
    own = std::max(own, q_len);
    const int kv_len = static_cast<int>(shared.size()) * page + own;
    const int idx = b.add(shared, kv_len, q_len);
    const BatchLayout& l = b.layout();
    made.emplace_back(std::vector<int32_t>(l.kv_page_indices.begin() + l.kv_page_indptr[idx],
                                           l.kv_page_indices.end()),
                      kv_len);
  }
  return b.layout();
}

// What determinism promises for request r (plan.h): per local row (items and merges are
// head-implicit: the same for every KV head), the KV ranges
// of its items with their tile_q and tile_kv, and the merge order (kv_begin of each merged slot),
// or "final" when one item writes the output. Independent of global row numbering and of which
// other rows share the items.
inline std::string request_signature(const Plan& plan, const BatchLayout& layout, int r) {
  std::map<int, std::vector<std::string>> per_row;  // local row
  std::vector<int32_t> slot_kv_begin(static_cast<size_t>(plan.num_partial_slots), -1);
  for (const WorkItem& it : plan.items) {
    for (int32_t k = it.rows_begin; k < it.rows_end; ++k) {
      if (!it.writes_final) slot_kv_begin[it.partial_begin + (k - it.rows_begin)] = it.kv_begin;
      const int32_t row = plan.item_rows[k];
      if (request_of_row(layout, row) != r) continue;
      std::ostringstream s;
      s << "[" << it.kv_begin << "," << it.kv_end << ")m" << it.tile.tile_q << "n"
        << it.tile.tile_kv << (it.writes_final ? " final" : "");
      per_row[row - layout.qo_indptr[r]].push_back(s.str());
    }
  }
  for (int e = 0; e < plan.num_merges(); ++e) {
    const int32_t row = plan.merge_row[e];
    if (request_of_row(layout, row) != r) continue;
    std::ostringstream s;
    s << "merge";
    for (int32_t k = plan.merge_indptr[e]; k < plan.merge_indptr[e + 1]; ++k) {
      s << " " << slot_kv_begin[plan.merge_slots[k]];
    }
    per_row[row - layout.qo_indptr[r]].push_back(s.str());
  }
  std::ostringstream out;
  for (auto& [row, parts] : per_row) {
    std::sort(parts.begin(), parts.end());
    out << "row " << row << ":";
    for (const std::string& p : parts) out << " " << p;
    out << "\n";
  }
  return out.str();
}

}  // namespace packserve::attention::testing
