// policy_balanced.cc: the `balanced` policy, seed 004 §3.3.1 Algorithm 1 (FlashInfer's
// load-balanced scheduling), planned once: the plan is head-implicit (plan.h).
//
// 1. Query tiles: the rows of each request are cut into tiles of rows_per_tile(group_size)
//    consecutive rows (GQA folds the group into the tile: rows * group_size <= 128 folded
//    vectors). A tile's KV length is causal: position of its last row + 1, from key 0.
// 2. Maximum chunk size (Algorithm 1 line 3): L_kv = ceil(sum of tile KV lengths / C), where
//    C = the CTAs one head gets (plan.h ctas_per_head, the plan's queues), floored at
//    kMinChunkTokens (one largest KV tile) and rounded up to a page, so chunk boundaries never
//    cut a page. With `deterministic`, L_kv = deterministic_kv_chunk_tokens rounded up to a
//    page, independent of the batch. Per request, L_r = max(L_kv, kv_len / (1 + pages / q_len)
//    rounded up to a page): a row then sees at most 1 + pages / q_len pieces, which keeps
//    every request within the plan-buffer budget q_len + pages (plan_buffer.cc). A long
//    prefill (q_len >= pages: many tiles, plenty of parallelism) is not split; a prefill chunk
//    over a longer context (q_len = 256 over 4096 keys: 2 pieces) is, so that its few tiles
//    fill the queues. L_r depends on the request only, so determinism holds.
// 2b. Chunk search (not deterministic; at most kChunkSearchTiles query tiles per queue, where
//    a few items per queue make the makespan lumpy): the candidate chunks
//    round_up(L_kv * s / 16, page) for s = 14..24, 28, 32 and, with at most C tiles, the
//    smallest page multiple whose pieces number at most C (FlashInfer's search: one piece per
//    queue) are each cut (step 3) and assigned (step 4); the least makespan under options.cost
//    wins (ties: the smaller chunk). The per-item cost makes it weigh a queue of short tails
//    against a longer piece. B = 32 decode (H100): the planned makespan's max/mean went from
//    1.11 to 1.04 and the kernel's span from 61.5 to 55.8 us.
// 3. Each tile's KV [0, l) is cut at multiples of L_r (absolute key positions); a chunk keeps
//    the tile rows whose position is >= its start.
// 4. Chunks sorted longest first (ties: request order, then tile, then chunk), each assigned
//    to the least-loaded CTA (tournament tree, ties to the lower CTA) with cost
//    options.cost (plan.h CostModel); a CTA runs its chunks in assignment order.
// 5. Heads: every head has the same chunks, so each queue runs once per head (FlashInfer's
//    2-D grid); merge entries list slots in ascending kv_begin (finalize_plan).
#include <algorithm>
#include <limits>
#include <numeric>

#include "packserve/attention/plan_internal.h"

namespace packserve::attention::internal {
namespace {

// Step 2b runs for batches of at most this many query tiles per queue (its cost: one LPT per
// candidate; larger batches balance well at L_kv).
constexpr int64_t kChunkSearchTiles = 4;

// Step 1's query tiles: f(r, a, b, kv) for rows [a, b) of request r, whose causal KV length
// is kv (the position of row b - 1, plus 1).
template <typename F>
void for_each_tile(const BatchLayout& layout, F&& f) {
  const int tile_rows = rows_per_tile(layout.group_size());
  for (int r = 0; r < layout.batch_size(); ++r) {
    const int q_len = layout.q_len(r);
    const int first_pos = layout.kv_len(r) - q_len;
    for (int a = 0; a < q_len; a += tile_rows) {
      const int b = std::min(a + tile_rows, q_len);
      f(r, a, b, static_cast<int64_t>(first_pos) + b);
    }
  }
}

// The smallest page-multiple chunk >= base whose pieces number at most `ctas` (one per queue),
// by bisection (FlashInfer's chunk search). Needs at most `ctas` query tiles (one piece per
// tile always fits).
int64_t one_piece_per_queue_chunk(const BatchLayout& layout, int ctas, int64_t base) {
  const int page = layout.page_size;
  auto pieces = [&](int64_t chunk) {
    int64_t n = 0;
    for_each_tile(layout, [&](int r, int, int, int64_t kv) {
      n += ceil_div(kv, request_piece_tokens(layout, r, chunk));
    });
    return n;
  };
  int64_t lo = base / page, hi = lo;
  while (pieces(hi * page) > ctas) hi *= 2;  // terminates: one piece per tile at most
  while (lo < hi) {
    const int64_t mid = (lo + hi) / 2;
    if (pieces(mid * page) <= ctas) {
      hi = mid;
    } else {
      lo = mid + 1;
    }
  }
  return hi * page;
}

}  // namespace

Result<Plan> make_plan_balanced(const BatchLayout& layout, const DeviceShape& device,
                                const PlanOptions& options) {
  Plan plan = empty_plan(layout, device, options);
  const int group = layout.group_size();
  const int page = layout.page_size;
  const int ctas = plan.num_ctas;

  int64_t total_kv = 0;  // sum over query tiles of their causal KV length
  int64_t max_kv = 0;    // the longest of them
  int64_t num_tiles = 0;
  for_each_tile(layout, [&](int, int, int, int64_t kv) {
    total_kv += kv;
    max_kv = std::max(max_kv, kv);
    ++num_tiles;
  });
  // The units of chunk size `chunk`: every tile's pieces (step 3).
  UnitList list;  // every tile's rows are a range of 0, 1, ..., total_rows - 1
  list.rows.resize(static_cast<size_t>(layout.total_rows()));
  std::iota(list.rows.begin(), list.rows.end(), 0);
  auto make_units = [&](int64_t chunk) {
    list.units.clear();
    for_each_tile(layout, [&](int r, int a, int b, int64_t kv) {
      append_causal_pieces(layout, r, r, 0, static_cast<int32_t>(kv),
                           request_piece_tokens(layout, r, chunk), layout.qo_indptr[r] + a,
                           layout.qo_indptr[r] + b, list);
    });
  };
  std::vector<int32_t> order;
  std::vector<int32_t> cta;
  if (options.deterministic) {
    make_units(round_up(options.deterministic_kv_chunk_tokens, page));
  } else {
    const int64_t base =
        round_up(std::max<int64_t>(ceil_div(total_kv, ctas), kMinChunkTokens), page);
    if (num_tiles > kChunkSearchTiles * static_cast<int64_t>(ctas)) {
      make_units(base);
    } else {
      // Step 2b: the candidate chunk sizes around L_kv and the smallest with at most one
      // piece per queue (FlashInfer's chunk search), each planned (LPT) and costed; the
      // least makespan wins (ties: the smaller chunk). A chunk that cuts no tile is tried
      // once (as round_up(longest tile, page)). Candidates ascend, and the search stops once
      // a piece of the candidate's length alone costs the best makespan found.
      const int64_t uncut = std::max<int64_t>(round_up(max_kv, page), kMinChunkTokens);
      std::vector<int64_t> candidates;
      for (const int sixteenths : {14, 15, 16, 17, 18, 19, 20, 21, 22, 23, 24, 28, 32}) {
        candidates.push_back(std::min(
            uncut, round_up(std::max<int64_t>(base * sixteenths / 16, kMinChunkTokens), page)));
      }
      if (num_tiles <= ctas) {
        candidates.push_back(std::min(uncut, one_piece_per_queue_chunk(layout, ctas, base)));
      }
      std::sort(candidates.begin(), candidates.end());
      candidates.erase(std::unique(candidates.begin(), candidates.end()), candidates.end());
      int64_t best = candidates.front();
      double best_makespan = std::numeric_limits<double>::infinity();
      const double min_key_cost = options.cost.beta * std::min(1.0, options.cost.wide_key);
      for (size_t i = 0; i < candidates.size() && candidates.size() > 1; ++i) {
        const int64_t chunk = candidates[i];
        const double piece = static_cast<double>(std::min(chunk, max_kv));
        if (options.cost.item + min_key_cost * piece >= best_makespan) break;
        make_units(chunk);
        const double makespan = assign_lpt(list, group, ctas, options.cost, order, cta);
        if (makespan < best_makespan) {
          best_makespan = makespan;
          best = chunk;
        }
      }
      make_units(best);
    }
  }
  assign_lpt(list, group, ctas, options.cost, order, cta);
  emit_and_finalize(list, order, cta, layout.total_rows(), plan);
  return plan;
}

}  // namespace packserve::attention::internal
