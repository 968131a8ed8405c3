// plan.h: the attention plan (DESIGN.md "Plan / run", seed 004 §3.3.1, seed 002 §5-§7).
//
// A Plan is a value: the list of work items one step's attention is cut into, their
// assignment to persistent CTAs, and the merge map that combines partial states. It is made
// once per step on the CPU (make_plan) and reused by every layer; the CPU executor
// (run_cpu.h) and the CUDA kernels execute the same plan in the same merge order.
//
// Work item = (a set of query rows, possibly from several requests) x (a contiguous token
// range [kv_begin, kv_end) of one KV segment) + a tile configuration, run once per KV head
// (one GQA head group: its group_size qo heads are folded into the query tile). Items are
// head-implicit: every head has identical work, so the plan holds one head's items and
// queues, and the grid runs each CTA queue once per KV head (FlashInfer's 2-D grid: CTA
// (c, h) runs queue c for KV head h; on a device, block c + h * num_ctas).
//   * The KV range is located through a *reference request*: tokens kv_begin..kv_end-1 of
//     request `kv_request`'s page table. Every row of the item belongs to a request whose
//     pages for that range are physically identical (a shared prefix), so key positions are
//     the same for all of them and the causal rule (key position <= row position) applies
//     per row unchanged.
//   * Rows are listed in Plan::item_rows[rows_begin .. rows_end) (global query-row ids,
//     ascending). num_rows * group_size folded query vectors are processed tile_q at a time;
//     an item with more folded rows than tile_q reads its KV once per query tile.
//   * Every row of an item sees at least one key of the item's range (never an empty row).
//   * Output: when writes_final, the item covers all keys of each of its rows for this head
//     group and writes the normalised output directly; otherwise row k of the item writes
//     a partial state (o normalised, lse in base 2) to partial slot partial_begin + k of
//     each head: slot s of KV head h is storage slot h * num_partial_slots + s.
//     A partial slot holds [group_size][head_dim] o plus [group_size] f32 lse. The CUDA
//     executor stores o in the batch's dtype (rounded once, as the output is: half the bytes
//     the merge moves), the CPU executor in f32.
//
// Merge map (CSR): entry e merges, for query row merge_row[e] and every KV head h, the
// partial slots merge_slots[merge_indptr[e] .. merge_indptr[e+1]) of head h in that order
// (ascending kv_begin of the items that wrote them), with the LSE composition of merge.h,
// and writes the final output. Every row is either covered by exactly one writes_final item
// or is exactly one merge entry. The policies emit entries ordered by row.
//
// CTA queues: cta_indptr[c] .. cta_indptr[c+1] indexes cta_items, the work items queue c
// executes in order (for each head). num_ctas counts the queues: ctas_per_head() of the
// device's CTAs, so the grid has num_ctas * num_kv_heads CTAs (when the device has fewer
// CTAs than heads, one queue and num_kv_heads CTAs). Determinism: with PlanOptions::deterministic,
// every split boundary, tile_q, tile_kv and merge order of a request depends only on that request
// (its lengths and its page ids), never on the rest of the batch: an item holding rows of several
// requests (the prefix policy) holds only rows whose requests give the same tile_q, which the CUDA
// kernel then runs as its pass size. Thread-safety: a value.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "packserve/attention/batch_layout.h"
#include "packserve/common/status.h"

namespace packserve::attention {

enum class Policy : uint8_t {
  kNaive,     // one item per (request, KV head), the whole KV: padding-free, unbalanced
  kBalanced,  // seed 004 Algorithm 1: KV chunks from total work / CTAs, LPT onto CTAs
  kPrefix,    // seed 002: prefix forest, profit model + TreeHeuristic, long-KV split to mean
  kAuto,      // per batch: kPrefix when auto_prefers_prefix(), else kBalanced (the plan names it)
};
std::string_view policy_name(Policy policy);
Result<Policy> parse_policy(std::string_view name);  // "naive" | "balanced" | "prefix" | "auto"

// kAuto's choice. The prefix policy pays for its split (a root item, partial states, a merge)
// only when it deduplicates enough KV reads that the balanced plan would otherwise serve from
// L2 at best: at least kAutoPrefixMinTokens tokens, counted as, per group of requests whose
// shareable pages (full pages before their first query row) start with the same page, each
// member's run of pages in common with the group's first member. Never in deterministic mode
// (a request's bits would depend on the batch through the choice). H100, twenty-eighth session
// (docs/benchmarks.md): decode rows over a 512-token shared prefix, prefix vs balanced 0.79x
// at 8 rows (3,584 tokens deduplicated), 0.83x at 16 (7,680), level at 24 (11,776), 1.14x at
// 34 (16,896); 34 rows over 2,048 tokens 1.39x; the PAT trees 2.5x and 7x.
inline constexpr int64_t kAutoPrefixMinTokens = 12288;
bool auto_prefers_prefix(const BatchLayout& layout, bool deterministic);

// Compiled tile shapes: tile_q counts folded (row, qo head) pairs, tile_kv keys per step.
inline constexpr int kTileQSizes[] = {16, 32, 64, 128};
inline constexpr int kTileKvSizes[] = {32, 64, 128};
struct TileConfig {
  int16_t tile_q = 16;
  int16_t tile_kv = 64;
  friend bool operator==(const TileConfig&, const TileConfig&) = default;
};

// Cost of a work item in the CTA assignment (and the prefix policy's long-KV split), in units
// of one key streamed by a memory-bound item: seed 004 Algorithm 1's alpha * l_q + beta * l_kv
// with two terms that H100 timelines of the kernel call for (attention_bench --timeline,
// docs/benchmarks.md):
//   cost = item + alpha * folded rows + beta * w * keys,  w = wide_key for an item of more than
//   64 folded rows (a 128-row query tile), else 1.
// `item` is what an item costs besides its keys: its start-up (descriptor, row positions, page
// table and first KV stage are a chain of dependent loads) and its epilogue, about 3.8 us of a
// CTA, while a key streams at about 41 ns when every CTA streams (B = 32 decode): 96 keys.
// `wide_key` weighs a key of a 128-row tile, which computes instead of streaming: 38-47 ns
// per key with the Hopper (wgmma) pass beside 41 ns streamed keys, but a streamed key is
// cheaper when few CTAs stream (PAT leaves beside compute-bound root items). The defaults are
// the best of an H100 sweep of (item, wide_key) over the decode, PAT and mixed cases
// (docs/benchmarks.md); the mma.sync pass alone measured wide_key 2.
// A quad item (plan_buffer.h is_quad_item) runs in one ticket with up to seven other KV heads'
// and shares its start-up with them: quad() charges an eighth of `item` (H100: PAT [1,256]'s
// leaves take 22.9 us per eight-head ticket beside 46 us root parts of cost 2288, about 142 per
// head against quad()'s 144; twenty-third session, docs/benchmarks.md).
struct CostModel {
  double alpha = 1.0;
  double beta = 1.0;
  double item = 96.0;
  double wide_key = 1.5;
  double operator()(int64_t folded_rows, int64_t kv_tokens) const {  // the cost of one item
    const double w = folded_rows > 64 ? wide_key : 1.0;
    return item + alpha * static_cast<double>(folded_rows) +
           beta * w * static_cast<double>(kv_tokens);
  }
  double quad(int64_t folded_rows, int64_t kv_tokens) const {  // of one quad item, per KV head
    return item / 8 + alpha * static_cast<double>(folded_rows) +
           beta * static_cast<double>(kv_tokens);
  }
};

// The device as the planner sees it: passed in, never queried (STYLE.md §4).
struct DeviceShape {
  int num_ctas = 132;  // persistent CTAs in the grid (e.g. 1 per SM x 132 SMs on an H100)
};

struct PlanOptions {
  Policy policy = Policy::kBalanced;
  bool deterministic = false;  // a request's output bits independent of the rest of the batch
  // Cost of a work item for CTA assignment (seed 004 Algorithm 1's alpha * l_q + beta * l_kv,
  // plus a per-item cost, keys of a 128-row tile weighed).
  CostModel cost;
  // Deterministic mode's fixed KV chunk, in tokens (rounded up to a multiple of page_size).
  int deterministic_kv_chunk_tokens = 1024;
};

struct WorkItem {
  int32_t rows_begin = 0;  // range into Plan::item_rows
  int32_t rows_end = 0;
  int32_t kv_request = 0;  // reference request whose page table locates the KV range
  int32_t kv_begin = 0;    // first key position (token index in the context)
  int32_t kv_end = 0;      // one past the last key position
  TileConfig tile;
  int32_t cta = 0;            // CTA queue that runs this item (for every KV head)
  bool writes_final = false;  // true: writes the output; false: writes partial slots
  int32_t partial_begin = 0;  // first partial slot of row 0 (only when !writes_final)
  int num_rows() const { return rows_end - rows_begin; }
  int kv_tokens() const { return kv_end - kv_begin; }
  friend bool operator==(const WorkItem&, const WorkItem&) = default;
};

struct Plan {
  Policy policy = Policy::kBalanced;
  bool deterministic = false;
  int num_ctas = 0;  // CTA queues, each run once per KV head (grid_ctas() CTAs in all)
  int group_size = 0;
  int num_kv_heads = 0;
  int head_dim = 0;
  // The cost model the CTA assignment used (PlanOptions::cost), kept so that
  // plan_stats.h reports the same per-CTA cost the planner balanced.
  CostModel cost;
  std::vector<WorkItem> items;
  std::vector<int32_t> item_rows;     // global query rows, grouped per item
  std::vector<int32_t> cta_indptr;    // [num_ctas + 1] into cta_items
  std::vector<int32_t> cta_items;     // item indices, per CTA in execution order
  int32_t num_partial_slots = 0;      // per KV head
  std::vector<int32_t> merge_indptr;  // [num_merges + 1] into merge_slots
  std::vector<int32_t> merge_row;     // [num_merges]
  std::vector<int32_t> merge_slots;
  int num_merges() const { return static_cast<int>(merge_row.size()); }
  int grid_ctas() const { return num_ctas * num_kv_heads; }
};

// CTA queues of a plan for a device of num_ctas CTAs and num_kv_heads heads: the CTAs one
// head gets, num_ctas / num_kv_heads (the num_ctas % num_kv_heads leftover CTAs stay idle),
// at least 1.
inline int ctas_per_head(int num_ctas, int num_kv_heads) {
  return num_ctas >= num_kv_heads ? num_ctas / num_kv_heads : 1;
}

// Makes the plan of `options.policy` for a layout that passed validate(). Never queries a
// device; identical inputs give identical plans. Every plan it returns fits the plan
// buffer bounds of plan_buffer.h (item rows <= total_rows + total page refs).
// Errors: kInvalidArgument when device.num_ctas < 1, a cost term is negative or not finite,
// cost.alpha and cost.beta are both 0, deterministic_kv_chunk_tokens < 1, or the plan's sizes
// would not fit int32 (num_kv_heads * (total_rows + total page refs) >= 2^31: partial storage
// is per head).
Result<Plan> make_plan(const BatchLayout& layout, const DeviceShape& device,
                       const PlanOptions& options);
// The checks of make_plan that concern the options alone (cost terms, chunk, policy), for
// callers that keep options for later steps: kInvalidArgument naming "options.<field>".
Status check_plan_options(const PlanOptions& options);

// Proves the plan is complete and consistent for `layout`: every (row, visible key) is
// covered by exactly one item (so every (row, qo head, visible key), items being run for
// every head), no item holds a row that sees none of its keys, every
// item's rows share the item's KV pages physically, CTA queues list every item once, partial
// slots are written once and merged once, merge order is ascending kv_begin. Returns
// kInternal describing the first violation (this is the planner's bug, reported as a value
// so tests can print it).
Status check_invariants(const Plan& plan, const BatchLayout& layout);

// The order in which the CUDA kernel's CTAs claim the plan's items (cuda/persistent_kernel.cuh):
// every item by the start time its queue gives it under plan.cost (the cost of the items before
// it in its queue), ties by queue, then by position. Claiming in this order is list scheduling
// in the queues' own order: a CTA that finishes early takes the next item instead of idling
// while another queue runs past the cost model's estimate. A permutation of the item indices.
std::vector<int32_t> dispatch_order(const Plan& plan);

// Human-readable, stable text of a plan, for golden tests:
//   "plan policy=naive deterministic=0 queues=2 group=2 kv_heads=1 ...\n"
//   "item 0: cta=0 rows=[0,1] kv=r0[0,128) tile=16x64 final\n" ... (cta = the queue)
std::string to_text(const Plan& plan);

}  // namespace packserve::attention
