// prefill_packer_test.cc: the packers of seed 001 §3.3 against hand-worked examples and a
// brute-force oracle (every set partition of the items).
#include "packserve/sched/prefill_packer.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>

#include "packserve/common/rng.h"

namespace packserve::sched {
namespace {

std::vector<std::vector<int32_t>> members(const PackResult& r) {
  std::vector<std::vector<int32_t>> out;
  for (const PackedBin& b : r.bins) out.push_back(b.item_indices);
  return out;
}

// Oracle: fewest bins over all assignments of items to bins (each item into an existing bin
// with room or a new bin); exponential, fine for n <= 9.
int brute_force_min_bins(const std::vector<int64_t>& len, const PackLimits& lim) {
  int best = static_cast<int>(len.size()) + 1;
  std::vector<int64_t> load;
  std::vector<int32_t> count;
  auto rec = [&](auto&& self, size_t i) -> void {
    if (static_cast<int>(load.size()) >= best) return;
    if (i == len.size()) {
      best = static_cast<int>(load.size());
      return;
    }
    for (size_t b = 0; b < load.size(); ++b) {
      if (load[b] + len[i] <= lim.capacity_tokens &&
          (lim.max_items_per_bin == 0 || count[b] < lim.max_items_per_bin)) {
        load[b] += len[i];
        ++count[b];
        self(self, i + 1);
        load[b] -= len[i];
        --count[b];
      }
    }
    load.push_back(len[i]);
    count.push_back(1);
    self(self, i + 1);
    load.pop_back();
    count.pop_back();
  };
  rec(rec, 0);
  return best;
}

TEST(PrefillPacker, SeedExampleDpTwoBinsNoWaste) {
  // Seed 001 §3.3: capacity 10, lengths [7, 6, 4, 3]: {7, 3} and {6, 4}, 0 tokens wasted.
  const std::vector<int64_t> len = {7, 6, 4, 3};
  const PackLimits lim{10, 0};
  auto r = pack_prefill(PackingAlgorithm::kDp, len, lim);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_TRUE(check_packing(*r, len, lim).ok());
  EXPECT_EQ(members(*r), (std::vector<std::vector<int32_t>>{{0, 3}, {1, 2}}));
  EXPECT_EQ(r->waste_tokens, 0);
}

TEST(PrefillPacker, SeedExampleNextFitThreeBinsWastesTen) {
  // The seed's greedy walk-through: {7} (waste 3), {6, 4} (0), {3} (7) = 3 bins, 10 wasted.
  const std::vector<int64_t> len = {7, 6, 4, 3};
  auto r = pack_prefill(PackingAlgorithm::kNone, len, PackLimits{10, 0});
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(members(*r), (std::vector<std::vector<int32_t>>{{0}, {1, 2}, {3}}));
  EXPECT_EQ(r->waste_tokens, 10);
}

TEST(PrefillPacker, SeedExampleFfd) {
  // Sorted 7, 6, 4, 3: 7 -> bin A, 6 -> bin B, 4 -> B (10), 3 -> A (10).
  const std::vector<int64_t> len = {7, 6, 4, 3};
  auto r = pack_prefill(PackingAlgorithm::kFirstFitDecreasing, len, PackLimits{10, 0});
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(members(*r), (std::vector<std::vector<int32_t>>{{0, 3}, {1, 2}}));
}

TEST(PrefillPacker, DpBeatsFfdWhereFfdIsSuboptimal) {
  // Capacity 10, lengths 5,4,3,3,3,2. FFD: 5 -> A, 4 -> A (9), 3,3,3 -> B (9), 2 fits neither
  // (11, 11) -> C: 3 bins. Optimum: {5, 3, 2} and {4, 3, 3} = 2 bins, 0 waste.
  const std::vector<int64_t> len = {5, 4, 3, 3, 3, 2};
  const PackLimits lim{10, 0};
  auto ffd = pack_prefill(PackingAlgorithm::kFirstFitDecreasing, len, lim);
  auto dp = pack_prefill(PackingAlgorithm::kDp, len, lim);
  ASSERT_TRUE(ffd.ok() && dp.ok());
  EXPECT_EQ(ffd->bins.size(), 3u);
  EXPECT_EQ(dp->bins.size(), 2u);
  EXPECT_EQ(dp->waste_tokens, 0);
}

TEST(PrefillPacker, DpOptimalAgainstBruteForceOnRandomInstances) {
  for (uint64_t seed = 1; seed <= 400; ++seed) {
    SCOPED_TRACE("seed " + std::to_string(seed));
    Rng rng(seed);
    const auto n = static_cast<size_t>(rng.uniform_int(1, 9));
    PackLimits lim;
    lim.capacity_tokens = rng.uniform_int(8, 64);
    lim.max_items_per_bin = static_cast<int32_t>(seed % 3 == 0 ? rng.uniform_int(1, 4) : 0);
    std::vector<int64_t> len(n);
    for (auto& l : len) l = rng.uniform_int(0, lim.capacity_tokens);
    auto r = pack_prefill(PackingAlgorithm::kDp, len, lim);
    ASSERT_TRUE(r.ok()) << r.status().to_string();
    const Status valid = check_packing(*r, len, lim);
    ASSERT_TRUE(valid.ok()) << valid.to_string();
    EXPECT_EQ(static_cast<int>(r->bins.size()), brute_force_min_bins(len, lim));
    auto ffd = pack_prefill(PackingAlgorithm::kFirstFitDecreasing, len, lim);
    ASSERT_TRUE(ffd.ok());
    ASSERT_TRUE(check_packing(*ffd, len, lim).ok());
    EXPECT_LE(r->bins.size(), ffd->bins.size());
  }
}

TEST(PrefillPacker, DpFindsPerfectPackingsOfTwentyItems) {
  // Oracle by construction: cut k bins of exactly `cap` tokens into pieces, shuffle; the
  // optimum is k bins (sum = k * cap, so fewer is impossible) with 0 waste.
  for (uint64_t seed = 1; seed <= 6; ++seed) {
    SCOPED_TRACE("seed " + std::to_string(seed));
    Rng rng(seed);
    const int64_t cap = 1000;
    std::vector<int64_t> len;
    int k = 0;
    while (len.size() < 20) {
      ++k;
      int64_t left = cap;
      while (left > 0 && len.size() < 20) {
        const int64_t piece = len.size() == 19 ? left : std::min(left, rng.uniform_int(50, 600));
        len.push_back(piece);
        left -= piece;
      }
    }
    for (size_t i = len.size() - 1; i > 0; --i) {
      std::swap(len[i], len[static_cast<size_t>(rng.uniform_int(0, static_cast<int64_t>(i)))]);
    }
    ASSERT_EQ(len.size(), 20u);
    auto r = pack_prefill(PackingAlgorithm::kDp, len, PackLimits{cap, 0});
    ASSERT_TRUE(r.ok());
    ASSERT_TRUE(check_packing(*r, len, PackLimits{cap, 0}).ok());
    EXPECT_FALSE(r->used_fallback);
    EXPECT_EQ(static_cast<int>(r->bins.size()), k);
    EXPECT_EQ(r->waste_tokens, 0);
  }
}

TEST(PrefillPacker, FfdAtMostOneBinHalfEmptyAndValid) {
  // First fit never leaves two bins both at most half full (the second's items would have
  // fit in the first), without an item-count limit.
  for (uint64_t seed = 1; seed <= 200; ++seed) {
    SCOPED_TRACE("seed " + std::to_string(seed));
    Rng rng(seed);
    const PackLimits lim{static_cast<int64_t>(rng.uniform_int(16, 4096)), 0};
    std::vector<int64_t> len(static_cast<size_t>(rng.uniform_int(1, 60)));
    for (auto& l : len) l = rng.uniform_int(1, lim.capacity_tokens);
    auto r = pack_prefill(PackingAlgorithm::kFirstFitDecreasing, len, lim);
    ASSERT_TRUE(r.ok());
    ASSERT_TRUE(check_packing(*r, len, lim).ok());
    int half_empty = 0;
    for (const PackedBin& b : r->bins) half_empty += 2 * b.load_tokens <= lim.capacity_tokens;
    EXPECT_LE(half_empty, 1);
    const int64_t total = std::accumulate(len.begin(), len.end(), int64_t{0});
    EXPECT_GE(static_cast<int64_t>(r->bins.size()) * lim.capacity_tokens, total);
  }
}

TEST(PrefillPacker, MaxItemsPerBinRespected) {
  const std::vector<int64_t> len = {1, 1, 1, 1, 1};
  const PackLimits lim{100, 2};
  for (auto algo :
       {PackingAlgorithm::kNone, PackingAlgorithm::kFirstFitDecreasing, PackingAlgorithm::kDp}) {
    auto r = pack_prefill(algo, len, lim);
    ASSERT_TRUE(r.ok());
    ASSERT_TRUE(check_packing(*r, len, lim).ok());
    EXPECT_EQ(r->bins.size(), 3u) << packing_algorithm_name(algo);  // ceil(5 / 2)
  }
}

TEST(PrefillPacker, OversizedItemGetsItsOwnBin) {
  const std::vector<int64_t> len = {3, 25, 4};
  const PackLimits lim{10, 0};
  for (auto algo :
       {PackingAlgorithm::kNone, PackingAlgorithm::kFirstFitDecreasing, PackingAlgorithm::kDp}) {
    auto r = pack_prefill(algo, len, lim);
    ASSERT_TRUE(r.ok());
    ASSERT_TRUE(check_packing(*r, len, lim).ok());
    ASSERT_EQ(r->bins.size(), 2u) << packing_algorithm_name(algo);
    EXPECT_TRUE(r->bins[1].oversized);
    EXPECT_EQ(r->bins[1].item_indices, std::vector<int32_t>{1});
    EXPECT_EQ(r->bins[0].item_indices, (std::vector<int32_t>{0, 2}));
  }
}

TEST(PrefillPacker, DpFallsBackToFfdAboveTwentyItems) {
  const std::vector<int64_t> len(21, 5);
  auto r = pack_prefill(PackingAlgorithm::kDp, len, PackLimits{10, 0});
  ASSERT_TRUE(r.ok());
  EXPECT_TRUE(r->used_fallback);
  EXPECT_EQ(r->bins.size(), 11u);  // ceil(21 * 5 / 10)
}

TEST(PrefillPacker, DeterministicAcrossCalls) {
  Rng rng(7);
  std::vector<int64_t> len(16);
  for (auto& l : len) l = rng.uniform_int(1, 9);  // many ties
  for (auto algo : {PackingAlgorithm::kFirstFitDecreasing, PackingAlgorithm::kDp}) {
    auto a = pack_prefill(algo, len, PackLimits{12, 0});
    auto b = pack_prefill(algo, len, PackLimits{12, 0});
    ASSERT_TRUE(a.ok() && b.ok());
    EXPECT_EQ(members(*a), members(*b));
  }
}

TEST(PrefillPacker, RejectsBadInput) {
  const std::vector<int64_t> neg = {3, -1};
  auto r = pack_prefill(PackingAlgorithm::kDp, neg, PackLimits{10, 0});
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("lengths_tokens[1]"), std::string::npos);
  auto c = pack_prefill(PackingAlgorithm::kDp, std::vector<int64_t>{1}, PackLimits{0, 0});
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.status().message().find("capacity_tokens"), std::string::npos);
  auto m = pack_prefill(PackingAlgorithm::kDp, std::vector<int64_t>{1}, PackLimits{10, -1});
  ASSERT_FALSE(m.ok());
  EXPECT_NE(m.status().message().find("max_items_per_bin"), std::string::npos);
  EXPECT_FALSE(parse_packing_algorithm("bestfit").ok());
  EXPECT_EQ(*parse_packing_algorithm("ffd"), PackingAlgorithm::kFirstFitDecreasing);
}

}  // namespace
}  // namespace packserve::sched
