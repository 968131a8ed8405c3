// prefill_packer.h: packs the prompts released by admission control into prefill chunks
// (seed 001 §3.3: greedy first-fit and the optimal DP; seed 001 §3.4 item 3).
//
// Problem: items i = 0..n-1 with lengths L_i (tokens still to prefill) go into bins of
// capacity_tokens (T_max) holding at most max_items_per_bin items (B_max; 0 = no limit). Every
// item is packed, so the seed's "maximize useful tokens" objective (eq. 2) is the same as
// minimizing the number of bins, i.e. the padding waste sum_k (T_max - load_k). An item longer
// than capacity_tokens gets a bin of its own (the scheduler chunks it across steps); it is
// reported in PackedBin::oversized.
//
// Algorithms:
//   kNone: next-fit in arrival (index) order: a bin closes when the next item does not fit.
//          This is what plain FCFS chunking does; the baseline. (Oversized items are set
//          aside without closing the open bin.)
//   kFirstFitDecreasing: items sorted by length descending (ties: smaller index first), each
//          placed in the first open bin with room.
//   kDp:   exact minimum number of bins for n <= kDpMaxItems: dynamic programming over subsets
//          of items (the seed's DP over "the first i requests into k bins" enumerates subsets;
//          we index the state by the packed subset instead, which is the same recurrence
//          without re-enumerating). State per subset: fewest bins, then the least-loaded open
//          bin for each open-bin item count. For n > kDpMaxItems it falls back to FFD
//          (PackResult::used_fallback).
// Output order (all algorithms): bins sorted by their smallest item index, items ascending
// inside a bin, so the oldest request's chunk runs first. Deterministic: same input, same bins.
// Thread-safety: pure functions.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "packserve/common/status.h"

namespace packserve::sched {

enum class PackingAlgorithm { kNone, kFirstFitDecreasing, kDp };
std::string_view packing_algorithm_name(PackingAlgorithm algorithm);  // "none" | "ffd" | "dp"
Result<PackingAlgorithm> parse_packing_algorithm(std::string_view name);

// The DP enumerates 2^n subsets; above this many items it falls back to FFD.
inline constexpr int kDpMaxItems = 20;

struct PackLimits {
  int64_t capacity_tokens = 8192;  // T_max, tokens per bin; >= 1
  int32_t max_items_per_bin = 0;   // B_max, items per bin; 0 = unlimited, else >= 1
  Status validate() const;
};

struct PackedBin {
  std::vector<int32_t> item_indices;  // ascending
  int64_t load_tokens = 0;            // sum of the items' lengths
  bool oversized = false;             // one item longer than capacity_tokens
};

struct PackResult {
  std::vector<PackedBin> bins;  // sorted by smallest item index
  bool used_fallback = false;   // kDp with n > kDpMaxItems ran FFD instead
  // sum over non-oversized bins of (capacity_tokens - load_tokens)
  int64_t waste_tokens = 0;
};

// lengths_tokens[i] >= 0 is item i's length. Errors: invalid limits or a negative length
// (kInvalidArgument, naming the index).
Result<PackResult> pack_prefill(PackingAlgorithm algorithm, std::span<const int64_t> lengths_tokens,
                                const PackLimits& limits);

// Checks that `result` is a valid packing of `lengths_tokens` under `limits`: every item in
// exactly one bin, loads correct, capacity and item-count limits respected (an oversized bin
// holds exactly one item), output order as documented. For tests and debug checks.
Status check_packing(const PackResult& result, std::span<const int64_t> lengths_tokens,
                     const PackLimits& limits);

}  // namespace packserve::sched
