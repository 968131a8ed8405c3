// plan_internal.h: pieces shared by the planning policies (policy_*.cc) and plan.cc; not part
// of the attention API.
//
// Owns: the tile selectors (seed 002 §5.2), the causal query-tile cut shared by the balanced
// and prefix policies, the KV split helper, and finalize_plan(), which turns a list of work
// items (rows, KV range, tile, CTA) into a complete Plan (writes_final, partial slots, merge
// map in ascending kv_begin order, CTA queues).
//
// Budget invariant every policy keeps (it is what bounds the plan buffer, plan_buffer.cc):
// for every request r, the number of (item, row of r) incidences is at most
// q_len(r) + num_pages_of(r). The helpers below document which part of that proof they carry.
// Thread-safety: pure functions.
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

#include "packserve/attention/batch_layout.h"
#include "packserve/attention/plan.h"

namespace packserve::attention::internal {

// The largest query tile: an item never holds more folded (row, qo head) pairs than this
// (except in the naive policy, whose items re-read their KV once per query tile).
inline constexpr int kMaxTileQ = 128;
// Smallest KV split part, in tokens (rounded up to a page): one largest KV tile, so a split
// never produces an item shorter than one tile step.
inline constexpr int kMinChunkTokens = 128;

inline int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }
inline int64_t round_up(int64_t a, int64_t b) { return ceil_div(a, b) * b; }

// The shortest piece (a page multiple) that a causal tile's range of `tokens` keys over
// `pages` pages may be cut into (page-aligned from its start) when its request has q_len rows:
// a row then sees at most 1 + pages / q_len pieces, so the request's rows see at most
// q_len + pages (the plan buffer's budget, plan_buffer.cc). A prefill with at least as many
// rows as pages is not cut.
inline int64_t min_piece_tokens(int64_t tokens, int64_t pages, int64_t q_len, int page_size) {
  return round_up(ceil_div(tokens, 1 + pages / std::max<int64_t>(q_len, 1)), page_size);
}

// Request r's piece length for a page-multiple chunk size `chunk`: the chunk, raised to the
// budget's floor over the request's whole KV (the balanced policy's L_r, and both policies'
// chunks in deterministic mode).
inline int64_t request_piece_tokens(const BatchLayout& layout, int r, int64_t chunk) {
  return std::max(chunk, min_piece_tokens(layout.kv_len(r), layout.num_pages_of(r), layout.q_len(r),
                                          layout.page_size));
}

// Seed 002 §5.2 round-up rule: the smallest compiled query tile m >= folded rows (capped at
// the largest tile, which is then used several times).
int16_t select_tile_q(int64_t folded_rows);
// Seed 002 §5.2 "deriving n": short KV prefers a small KV tile (no compute bubble in the last
// tile), long KV a large one. The offline-profiled decision tree of the paper is replaced by
// the rule "largest n in {32, 64, 128} with 2n <= kv_tokens, else 32" (at least two KV tiles
// in flight; KV 192 -> n = 64 as in the paper's example).
int16_t select_tile_kv(int64_t kv_tokens);

// Rows per query tile: floor(kMaxTileQ / group_size) rows (>= 1), so rows * group_size folded
// vectors fit one tile.
inline int rows_per_tile(int group_size) {
  return group_size >= kMaxTileQ ? 1 : kMaxTileQ / group_size;
}

// First global row of request r whose position is >= kv_begin (rows see keys <= their own
// position, so rows before it see none of [kv_begin, ...)).
inline int32_t first_row_seeing(const BatchLayout& layout, int r, int64_t kv_begin) {
  const int64_t first_pos = layout.kv_len(r) - layout.q_len(r);
  const int64_t local = kv_begin > first_pos ? kv_begin - first_pos : 0;
  return static_cast<int32_t>(layout.qo_indptr[r] + local);
}

// A unit of work before it becomes a work item: a range of its list's rows and a KV range
// located through kv_request.
struct Unit {
  int32_t kv_request = 0;
  int32_t kv_begin = 0;
  int32_t kv_end = 0;
  int32_t rows_begin = 0;  // into a row list (see UnitList)
  int32_t rows_end = 0;
  // The item's tile_q; 0: select_tile_q(num_rows * group_size). The prefix policy sets it in
  // deterministic mode, where it must depend on the rows' own requests (plan.h).
  int16_t tile_q = 0;
  int32_t num_rows() const { return rows_end - rows_begin; }
  int32_t kv_tokens() const { return kv_end - kv_begin; }
};

// Unit u holds the global rows rows[u.rows_begin, u.rows_end) (ascending). Ranges may overlap:
// the pieces of one query tile share the tile's rows (each piece a suffix of them), so the
// rows are written once per tile, not once per piece.
struct UnitList {
  std::vector<Unit> units;
  std::vector<int32_t> rows;
};

// Appends the pieces of a KV range [kv_begin, kv_end), located through kv_request, for the
// rows out.rows[rows_begin, rows_end) (ascending, already in the list): the range is cut at
// kv_begin + k * part_tokens
// (part_tokens <= 0: no cut). When r >= 0 the rows are one causal query tile of request r and
// each piece keeps only the rows whose position is >= the piece's start (so no row sees zero
// keys); r < 0 means every row sees the whole range (rows under a shared prefix).
// Budget: with part_tokens >= (kv_end - kv_begin) / (1 + pages / q_len(r)) (pages of
// [kv_begin, kv_end)) and kv_begin page-aligned, a row sees at most 1 + pages / q_len pieces,
// so the rows of a request see at most q_len + pages pieces in total.
void append_causal_pieces(const BatchLayout& layout, int r, int32_t kv_request, int32_t kv_begin,
                          int32_t kv_end, int64_t part_tokens, int32_t rows_begin, int32_t rows_end,
                          UnitList& out);

// Assigns units to `num_queues` CTA queues by seed 004 Algorithm 1: units sorted by KV length
// descending (ties: lower unit index first), each popped onto the least-loaded CTA of a
// tournament tree (ties: lower queue index) with the cost model `cost` (plan.h); with `quad`,
// the units of a quad item's shape (plan_buffer.h is_quad_shape) cost cost.quad().
// Returns, in execution order, the unit indices and their queue, and the largest queue cost
// (the makespan under `cost`).
double assign_lpt(const UnitList& list, int group_size, int num_queues, const CostModel& cost,
                  std::vector<int32_t>& order, std::vector<int32_t>& queue, bool quad = false);

// Turns the units, in execution order with their CTA queue, into the plan's items (tiles
// from the selectors) and finalizes it. The plan is head-implicit (plan.h): these items are
// every head's.
void emit_and_finalize(const UnitList& list, const std::vector<int32_t>& order,
                       const std::vector<int32_t>& cta, int total_rows, Plan& plan);

// Completes a plan whose items have rows, KV range, tile and cta set: an item writes_final
// when every one of its rows is covered by it alone; other items get consecutive partial
// slots in item order; merge entries are ordered by row and list their slots by ascending
// kv_begin; CTA queue c executes its items in ascending item index.
void finalize_plan(Plan& plan, int total_rows);
// CTA queues from each item's cta: CTA c runs its items in ascending item index.
void build_cta_queues(Plan& plan);

// Plan fields copied from layout and options; num_ctas = ctas_per_head(device, heads).
Plan empty_plan(const BatchLayout& layout, const DeviceShape& device, const PlanOptions& options);

Result<Plan> make_plan_naive(const BatchLayout& layout, const DeviceShape& device,
                             const PlanOptions& options);
Result<Plan> make_plan_balanced(const BatchLayout& layout, const DeviceShape& device,
                                const PlanOptions& options);
Result<Plan> make_plan_prefix(const BatchLayout& layout, const DeviceShape& device,
                              const PlanOptions& options);

}  // namespace packserve::attention::internal
