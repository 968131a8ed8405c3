// run_cpu.h: the CPU executor of any Plan (DESIGN.md "Plan / run", seed 004 §3.3) and the
// plan coverage counter.
//
// run_cpu executes the plan's work items, then its merge map, exactly as plan.h defines them
// (each item and merge entry once per KV head):
//   phase 1, per (work item, KV head), per row of the item and per qo head of the group, over the
//     keys of [kv_begin, kv_end) located through kv_request's page table that the row may see
//     (position <= row position):
//       s_j = dot(q, k_j) * sm_scale * log2(e)        f32, dot in a fixed 8-lane order
//       m = max_j s_j,  w_j = 2^(s_j - m),  l = sum_j w_j  (keys in ascending position)
//       o = (sum_j w_j v_j) / l,  lse = m + log2(l)       (base 2, as merge.h)
//     writes_final items store o into out; the others store (o, lse) into partial slots;
//   phase 2, per merge entry, merge_states() of its slots in the listed order -> out.
// The arithmetic of one (row, head) depends only on its q, the keys of the item's range and
// their order, never on tile sizes, on the other rows of the item or on the thread count: a
// deterministic plan gives a request the same bits in any batch, and any num_threads gives
// the same bits. Tile configurations are ignored on the CPU.
// Inputs are converted to f32 exactly (f16/bf16 -> f32 is exact); a float8 page's byte b reads
// as e4m3_value(b) * k_scale (v_scale), that product rounded once to f32, through a 256-entry
// table per tensor (tensors.h); compute is f32.
//
// Preconditions: the layout passed validate(). The plan is bounds-checked before anything is
// computed (items, rows, KV ranges, slots, merge map, no output written twice), so a broken
// plan is an error, never an out-of-bounds access or a data race; whether it is *complete* is
// what check_invariants() (plan.h) and count_coverage() prove.
// Thread-safety: run_cpu may be called concurrently on distinct outputs; it starts and joins
// its own std::threads.
#pragma once

#include <span>

#include "packserve/attention/batch_layout.h"
#include "packserve/attention/plan.h"
#include "packserve/attention/tensors.h"
#include "packserve/common/status.h"

namespace packserve::attention {

struct RunCpuOptions {
  int num_threads = 1;  // worker threads over work items and merge entries, >= 1
};

// out: [total_rows, num_qo_heads, head_dim] f32, written entirely by a complete plan.
// Errors: kInvalidArgument for mismatched shapes/sizes, num_threads < 1, or a plan that fails
// the bounds checks above (the message names the item or merge entry).
Status run_cpu(const Plan& plan, const BatchLayout& layout, const AttentionTensors& tensors,
               std::span<float> out, const RunCpuOptions& options = {});

// Counting mode: counts, for every (row, qo head, key position <= row position), how many
// work items cover it (an item covers its rows x every qo head, being run once per KV head,
// x the keys of its range that the row sees, when the row's own page list holds the same
// physical pages there; so one count per (row, key) stands for all qo heads), and checks the
// output side: each row is produced by exactly one writes_final item or one merge entry, and
// each partial slot is merged exactly once, by the entry of its own row. Returns kInternal
// naming the first pair covered 0 or >= 2 times ("row 7 (request 2, position 40), every qo
// head, key 17: covered 2 times by items 3, 9") or the first output-side violation;
// kInvalidArgument when the plan fails the bounds checks.
Status count_coverage(const Plan& plan, const BatchLayout& layout);

}  // namespace packserve::attention
