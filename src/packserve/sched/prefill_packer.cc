// prefill_packer.cc: next-fit, first-fit-decreasing and the exact subset DP (seed 001 §3.3);
// contract in prefill_packer.h.
#include "packserve/sched/prefill_packer.h"

#include <algorithm>
#include <cstdint>
#include <limits>
#include <numeric>

namespace packserve::sched {
namespace {

// The DP packs (bins, load) into one uint32 so that a lexicographic comparison is an integer
// comparison: bins in the top 5 bits (<= 20 bins), load in the low 27 bits.
constexpr int kLoadBits = 27;
constexpr int64_t kDpMaxCapacityTokens = (int64_t{1} << kLoadBits) - 1;
constexpr uint32_t kInf = std::numeric_limits<uint32_t>::max();

uint32_t encode(uint32_t bins, uint32_t load) { return (bins << kLoadBits) | load; }
uint32_t bins_of(uint32_t v) { return v >> kLoadBits; }
uint32_t load_of(uint32_t v) { return v & ((1u << kLoadBits) - 1u); }

void finish(PackResult& result, const PackLimits& limits) {
  for (PackedBin& bin : result.bins) std::sort(bin.item_indices.begin(), bin.item_indices.end());
  std::sort(result.bins.begin(), result.bins.end(), [](const PackedBin& a, const PackedBin& b) {
    return a.item_indices.front() < b.item_indices.front();
  });
  result.waste_tokens = 0;
  for (const PackedBin& bin : result.bins) {
    if (!bin.oversized) result.waste_tokens += limits.capacity_tokens - bin.load_tokens;
  }
}

bool has_room(const PackedBin& bin, int64_t length, const PackLimits& limits) {
  if (bin.oversized) return false;
  if (bin.load_tokens + length > limits.capacity_tokens) return false;
  return limits.max_items_per_bin == 0 ||
         static_cast<int32_t>(bin.item_indices.size()) < limits.max_items_per_bin;
}

PackedBin oversized_bin(int32_t index, int64_t length) {
  PackedBin bin;
  bin.item_indices.push_back(index);
  bin.load_tokens = length;
  bin.oversized = true;
  return bin;
}

PackResult next_fit(std::span<const int64_t> lengths, const PackLimits& limits) {
  // An oversized item is set aside in a bin of its own; the open bin stays open.
  PackResult result;
  size_t open = SIZE_MAX;
  for (size_t i = 0; i < lengths.size(); ++i) {
    const auto index = static_cast<int32_t>(i);
    if (lengths[i] > limits.capacity_tokens) {
      result.bins.push_back(oversized_bin(index, lengths[i]));
      continue;
    }
    if (open == SIZE_MAX || !has_room(result.bins[open], lengths[i], limits)) {
      result.bins.emplace_back();
      open = result.bins.size() - 1;
    }
    result.bins[open].item_indices.push_back(index);
    result.bins[open].load_tokens += lengths[i];
  }
  return result;
}

PackResult first_fit_decreasing(std::span<const int64_t> lengths, const PackLimits& limits) {
  std::vector<int32_t> order(lengths.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(),
                   [&](int32_t a, int32_t b) { return lengths[a] > lengths[b]; });
  PackResult result;
  for (int32_t index : order) {
    const int64_t length = lengths[index];
    if (length > limits.capacity_tokens) {
      result.bins.push_back(oversized_bin(index, length));
      continue;
    }
    auto it = std::find_if(result.bins.begin(), result.bins.end(),
                           [&](const PackedBin& bin) { return has_room(bin, length, limits); });
    if (it == result.bins.end()) {
      result.bins.emplace_back();
      it = result.bins.end() - 1;
    }
    it->item_indices.push_back(index);
    it->load_tokens += length;
  }
  return result;
}

// Exact minimum-bin packing of the items that fit a bin (n <= kDpMaxItems), see the header.
// dp[mask * slots + c - 1] = least (bins, open-bin load) over packings of `mask` whose open bin
// holds c items (count mode: slots = B_max) or any number of items (slots = 1, no B_max).
PackResult dp_pack(std::span<const int64_t> lengths, const PackLimits& limits) {
  PackResult result;
  std::vector<int32_t> items;  // original indices of the items the DP packs
  for (size_t i = 0; i < lengths.size(); ++i) {
    if (lengths[i] > limits.capacity_tokens) {
      result.bins.push_back(oversized_bin(static_cast<int32_t>(i), lengths[i]));
    } else {
      items.push_back(static_cast<int32_t>(i));
    }
  }
  const int n = static_cast<int>(items.size());
  if (n == 0) return result;
  const auto cap = static_cast<uint32_t>(limits.capacity_tokens);
  std::vector<uint32_t> len(n);
  for (int j = 0; j < n; ++j) len[j] = static_cast<uint32_t>(lengths[items[j]]);
  const bool count_mode = limits.max_items_per_bin > 0 && limits.max_items_per_bin < n;
  const int slots = count_mode ? limits.max_items_per_bin : 1;
  const uint32_t full = (1u << n) - 1u;
  std::vector<uint32_t> dp((static_cast<size_t>(full) + 1) * static_cast<size_t>(slots), kInf);
  auto at = [&](uint32_t mask, int c) -> uint32_t& {
    return dp[static_cast<size_t>(mask) * slots + static_cast<size_t>(c - 1)];
  };
  for (int j = 0; j < n; ++j) at(1u << j, 1) = std::min(at(1u << j, 1), encode(1, len[j]));
  for (uint32_t mask = 1; mask < full; ++mask) {
    for (int c = 1; c <= slots; ++c) {
      const uint32_t v = at(mask, c);
      if (v == kInf) continue;
      for (int j = 0; j < n; ++j) {
        const uint32_t bit = 1u << j;
        if (mask & bit) continue;
        const uint32_t next = mask | bit;
        const bool count_ok = !count_mode || c < slots;
        if (count_ok && load_of(v) + len[j] <= cap) {
          uint32_t& t = at(next, count_mode ? c + 1 : 1);
          t = std::min(t, encode(bins_of(v), load_of(v) + len[j]));
        }
        uint32_t& t = at(next, 1);
        t = std::min(t, encode(bins_of(v) + 1, len[j]));
      }
    }
  }
  // Best final state, then walk back choosing the smallest item index that explains each state.
  int best_c = 1;
  for (int c = 2; c <= slots; ++c) {
    if (at(full, c) < at(full, best_c)) best_c = c;
  }
  std::vector<std::vector<int32_t>> bins_rev;  // bins in reverse order of opening
  std::vector<int32_t> current;
  uint32_t mask = full;
  int c = best_c;
  while (mask != 0) {
    const uint32_t v = at(mask, c);
    bool found = false;
    for (int j = 0; j < n && !found; ++j) {
      const uint32_t bit = 1u << j;
      if (!(mask & bit)) continue;
      const uint32_t prev = mask ^ bit;
      if (prev == 0) {
        if (c == 1 && v == encode(1, len[j])) {
          current.push_back(items[j]);
          mask = prev;
          found = true;
        }
        continue;
      }
      // Same-bin transition: the open bin gained item j.
      const int pc = count_mode ? c - 1 : 1;
      if (pc >= 1) {
        const uint32_t pv = at(prev, pc);
        if (pv != kInf && load_of(pv) + len[j] <= cap &&
            v == encode(bins_of(pv), load_of(pv) + len[j])) {
          current.push_back(items[j]);
          mask = prev;
          c = pc;
          found = true;
          continue;
        }
      }
      // New-bin transition: item j opened the bin.
      if (c != 1) continue;
      for (int qc = 1; qc <= slots && !found; ++qc) {
        const uint32_t pv = at(prev, qc);
        if (pv != kInf && v == encode(bins_of(pv) + 1, len[j])) {
          current.push_back(items[j]);
          bins_rev.push_back(std::move(current));
          current.clear();
          mask = prev;
          c = qc;
          found = true;
        }
      }
    }
    PS_CHECK(found) << "prefill DP walk-back found no predecessor for mask " << mask;
  }
  bins_rev.push_back(std::move(current));
  for (auto& members : bins_rev) {
    PackedBin bin;
    bin.item_indices = std::move(members);
    for (int32_t index : bin.item_indices) bin.load_tokens += lengths[index];
    result.bins.push_back(std::move(bin));
  }
  return result;
}

}  // namespace

std::string_view packing_algorithm_name(PackingAlgorithm algorithm) {
  switch (algorithm) {
    case PackingAlgorithm::kNone:
      return "none";
    case PackingAlgorithm::kFirstFitDecreasing:
      return "ffd";
    case PackingAlgorithm::kDp:
      return "dp";
  }
  return "unknown";
}

Result<PackingAlgorithm> parse_packing_algorithm(std::string_view name) {
  if (name == "none") return PackingAlgorithm::kNone;
  if (name == "ffd") return PackingAlgorithm::kFirstFitDecreasing;
  if (name == "dp") return PackingAlgorithm::kDp;
  return invalid_argument("packing: expected one of none|ffd|dp, got \"" + std::string(name) +
                          "\"");
}

Status PackLimits::validate() const {
  if (capacity_tokens < 1 || capacity_tokens > kDpMaxCapacityTokens) {
    return invalid_argument("packing.capacity_tokens: expected in [1, " +
                            std::to_string(kDpMaxCapacityTokens) + "], got " +
                            std::to_string(capacity_tokens));
  }
  if (max_items_per_bin < 0) {
    return invalid_argument("packing.max_items_per_bin: expected >= 0 (0 = unlimited), got " +
                            std::to_string(max_items_per_bin));
  }
  return ok_status();
}

Result<PackResult> pack_prefill(PackingAlgorithm algorithm, std::span<const int64_t> lengths_tokens,
                                const PackLimits& limits) {
  PS_RETURN_IF_ERROR(limits.validate());
  for (size_t i = 0; i < lengths_tokens.size(); ++i) {
    if (lengths_tokens[i] < 0) {
      return invalid_argument("lengths_tokens[" + std::to_string(i) +
                              "] = " + std::to_string(lengths_tokens[i]) + ": expected >= 0");
    }
  }
  PackResult result;
  if (lengths_tokens.empty()) return result;
  switch (algorithm) {
    case PackingAlgorithm::kNone:
      result = next_fit(lengths_tokens, limits);
      break;
    case PackingAlgorithm::kFirstFitDecreasing:
      result = first_fit_decreasing(lengths_tokens, limits);
      break;
    case PackingAlgorithm::kDp:
      if (static_cast<int>(lengths_tokens.size()) > kDpMaxItems) {
        result = first_fit_decreasing(lengths_tokens, limits);
        result.used_fallback = true;
      } else {
        result = dp_pack(lengths_tokens, limits);
      }
      break;
  }
  finish(result, limits);
  return result;
}

Status check_packing(const PackResult& result, std::span<const int64_t> lengths_tokens,
                     const PackLimits& limits) {
  std::vector<int> seen(lengths_tokens.size(), 0);
  int32_t prev_first = -1;
  for (size_t b = 0; b < result.bins.size(); ++b) {
    const PackedBin& bin = result.bins[b];
    const std::string where = "bins[" + std::to_string(b) + "]";
    if (bin.item_indices.empty()) return internal_error(where + " is empty");
    if (bin.item_indices.front() <= prev_first) {
      return internal_error(where + ": bins not sorted by smallest item index");
    }
    prev_first = bin.item_indices.front();
    int64_t load = 0;
    for (size_t k = 0; k < bin.item_indices.size(); ++k) {
      const int32_t i = bin.item_indices[k];
      if (i < 0 || static_cast<size_t>(i) >= lengths_tokens.size()) {
        return internal_error(where + ": item index " + std::to_string(i) + " out of range");
      }
      if (k > 0 && i <= bin.item_indices[k - 1]) {
        return internal_error(where + ": item indices not ascending");
      }
      ++seen[i];
      load += lengths_tokens[i];
    }
    if (load != bin.load_tokens) {
      return internal_error(where + ": load_tokens " + std::to_string(bin.load_tokens) +
                            " != sum of lengths " + std::to_string(load));
    }
    if (bin.oversized) {
      if (bin.item_indices.size() != 1 || load <= limits.capacity_tokens) {
        return internal_error(where + ": oversized bin must hold one item longer than capacity");
      }
      continue;
    }
    if (load > limits.capacity_tokens) {
      return internal_error(where + ": load " + std::to_string(load) + " > capacity " +
                            std::to_string(limits.capacity_tokens));
    }
    if (limits.max_items_per_bin > 0 &&
        static_cast<int64_t>(bin.item_indices.size()) > limits.max_items_per_bin) {
      return internal_error(where + ": holds " + std::to_string(bin.item_indices.size()) +
                            " items > max_items_per_bin " +
                            std::to_string(limits.max_items_per_bin));
    }
  }
  for (size_t i = 0; i < seen.size(); ++i) {
    if (seen[i] != 1) {
      return internal_error("item " + std::to_string(i) + " packed " + std::to_string(seen[i]) +
                            " times");
    }
  }
  return ok_status();
}

}  // namespace packserve::sched
