// policy_balanced.cc: the `balanced` policy, seed 004 §3.3.1 Algorithm 1 (FlashInfer's
// load-balanced scheduling), planned once: the plan is head-implicit (plan.h).
//
// 1. Query tiles: the rows of each request are cut into tiles of rows_per_tile(group_size)
//    consecutive rows (GQA folds the group into the tile: rows * group_size <= 128 folded
//    vectors). A tile's KV length is causal: position of its last row + 1, from key 0.
// 2. Maximum chunk size (Algorithm 1 line 3): L_kv = ceil(sum of tile KV lengths / C), where
//    C = the CTAs one head gets (plan.h ctas_per_head, the plan's queues), floored at
//    kMinChunkTokens (one largest KV tile) and rounded up to a page, so chunk boundaries never
//    cut a page. When there are at most C query tiles and the smallest page multiple whose
//    pieces number at most C (one per queue: no queue of short tails) exceeds L_kv by at most
//    kMinChunkTokens, L_kv is raised to it. With
//    `deterministic`, L_kv = deterministic_kv_chunk_tokens rounded up to a page, independent of the
//    batch. Per request, L_r = max(L_kv, q_len * page_size): a long prefill (many tiles, plenty of
//    parallelism) is split less, which keeps every request within the plan-buffer budget q_len +
//    pages (see append_causal_pieces). L_r depends on the request only, so determinism holds.
// 3. Each tile's KV [0, l) is cut at multiples of L_r (absolute key positions); a chunk keeps
//    the tile rows whose position is >= its start.
// 4. Chunks sorted longest first (ties: request order, then tile, then chunk), each assigned
//    to the least-loaded CTA (tournament tree, ties to the lower CTA) with cost
//    cost_alpha * folded rows + cost_beta * keys; a CTA runs its chunks in assignment order.
// 5. Heads: every head has the same chunks, so each queue runs once per head (FlashInfer's
//    2-D grid); merge entries list slots in ascending kv_begin (finalize_plan).
#include <algorithm>
#include <numeric>

#include "packserve/attention/plan_internal.h"

namespace packserve::attention::internal {

Result<Plan> make_plan_balanced(const BatchLayout& layout, const DeviceShape& device,
                                const PlanOptions& options) {
  Plan plan = empty_plan(layout, device, options);
  const int batch = layout.batch_size();
  const int group = layout.group_size();
  const int page = layout.page_size;
  const int tile_rows = rows_per_tile(group);
  const int ctas = plan.num_ctas;

  int64_t total_kv = 0;  // sum over query tiles of their causal KV length
  int64_t num_tiles = 0;
  for (int r = 0; r < batch; ++r) {
    const int first_pos = layout.kv_len(r) - layout.q_len(r);
    for (int a = 0; a < layout.q_len(r); a += tile_rows) {
      total_kv += first_pos + std::min(a + tile_rows, layout.q_len(r));
      ++num_tiles;
    }
  }
  int64_t chunk_tokens =
      options.deterministic
          ? round_up(options.deterministic_kv_chunk_tokens, page)
          : round_up(std::max<int64_t>(ceil_div(total_kv, ctas), kMinChunkTokens), page);
  if (!options.deterministic && num_tiles <= ctas) {
    // Fewer tiles than queues: the smallest page-multiple chunk >= L_kv whose pieces fit one
    // per queue (FlashInfer's chunk search), so no queue runs a row of short tail pieces
    // (32 tiles of 2048 keys on 33 queues: L_kv 1992 would leave 32 pieces of 56 keys on one
    // queue; the search keeps the 32 tiles whole). Bounded: at most `ctas` tiles.
    auto pieces = [&](int64_t chunk) {
      int64_t n = 0;
      for (int r = 0; r < batch; ++r) {
        const int q_len = layout.q_len(r);
        const int first_pos = layout.kv_len(r) - q_len;
        const int64_t part = std::max<int64_t>(chunk, static_cast<int64_t>(q_len) * page);
        for (int a = 0; a < q_len; a += tile_rows) {
          n += ceil_div(first_pos + std::min(a + tile_rows, q_len), part);
        }
      }
      return n;
    };
    int64_t lo = chunk_tokens / page, hi = lo;
    while (pieces(hi * page) > ctas) hi *= 2;  // terminates: one piece per tile at most
    while (lo < hi) {
      const int64_t mid = (lo + hi) / 2;
      if (pieces(mid * page) <= ctas) {
        hi = mid;
      } else {
        lo = mid + 1;
      }
    }
    // Only when that costs at most one largest KV tile more per piece: with skewed lengths
    // the search would leave the longest request whole on one queue (a makespan of its
    // length instead of about L_kv).
    if (hi * page <= chunk_tokens + kMinChunkTokens) chunk_tokens = hi * page;
  }

  UnitList list;  // every tile's rows are a range of 0, 1, ..., total_rows - 1
  list.rows.resize(static_cast<size_t>(layout.total_rows()));
  std::iota(list.rows.begin(), list.rows.end(), 0);
  list.units.reserve(static_cast<size_t>(batch) + static_cast<size_t>(ctas));
  for (int r = 0; r < batch; ++r) {
    const int q_len = layout.q_len(r);
    const int first_pos = layout.kv_len(r) - q_len;
    const int64_t part = std::max<int64_t>(chunk_tokens, static_cast<int64_t>(q_len) * page);
    for (int a = 0; a < q_len; a += tile_rows) {
      const int b = std::min(a + tile_rows, q_len);
      append_causal_pieces(layout, r, r, 0, first_pos + b, part, layout.qo_indptr[r] + a,
                           layout.qo_indptr[r] + b, list);
    }
  }
  std::vector<int32_t> order;
  std::vector<int32_t> cta;
  assign_lpt(list, group, ctas, options.cost_alpha, options.cost_beta, order, cta);
  emit_and_finalize(list, order, cta, layout.total_rows(), plan);
  return plan;
}

}  // namespace packserve::attention::internal
