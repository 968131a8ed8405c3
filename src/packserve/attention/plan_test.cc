// plan_test.cc: make_plan() option checks, the naive policy's golden plan, the invariant
// checker (it must accept every policy's plans on random batches and reject broken plans),
// and the tile selectors.
#include "packserve/attention/plan.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>

#include "packserve/attention/plan_internal.h"
#include "packserve/attention/plan_test_util.h"

namespace packserve::attention {
namespace {

using testing::LayoutBuilder;
using testing::random_layout;

Plan must_plan(const BatchLayout& layout, int num_ctas, Policy policy, bool det = false) {
  PlanOptions options;
  options.policy = policy;
  options.deterministic = det;
  Result<Plan> plan = make_plan(layout, DeviceShape{num_ctas}, options);
  EXPECT_TRUE(plan.ok()) << plan.status().to_string();
  return plan.ok() ? *plan : Plan{};
}

BatchLayout two_requests() {
  // g = 2 (2 qo heads, 1 kv head), page 16. r0: q_len 1, kv_len 20 (pages 0,1; last holds 4).
  // r1: q_len 3, kv_len 40 (pages 2,3,4; last holds 8).
  LayoutBuilder b(2, 1, 64, 16);
  b.add({}, 20, 1);
  b.add({}, 40, 3);
  return b.layout();
}

TEST(MakePlan, NaiveGolden) {
  // One item per (request, kv head), dealt round-robin: item 0 -> cta 0, item 1 -> cta 1.
  // tile_q: r0 folds 1 * 2 = 2 rows -> 16; r1 folds 3 * 2 = 6 -> 16.
  // tile_kv (largest n with 2n <= kv): kv 20 -> none fits -> 32; kv 40 -> 2*32 = 64 > 40 -> 32.
  const std::string expected =
      "plan policy=naive deterministic=0 queues=2 group=2 kv_heads=1 head_dim=64 "
      "partial_slots=0\n"
      "item 0: cta=0 rows=[0] kv=r0[0,20) tile=16x32 final\n"
      "item 1: cta=1 rows=[1,2,3] kv=r1[0,40) tile=16x32 final\n"
      "cta 0: [0]\n"
      "cta 1: [1]\n";
  const Plan plan = must_plan(two_requests(), 2, Policy::kNaive);
  EXPECT_EQ(to_text(plan), expected);
  EXPECT_TRUE(check_invariants(plan, two_requests()).ok());
}

// dispatch_order by hand: group 2, cost = 10 + 1 * folded rows + 1 * keys (no wide keys).
// Queue 0 runs items 2 (1 row, 30 keys: cost 42) then 0 (cost 10 + 2 + 8 = 20), so item 0
// starts at 42; queue 1 runs 1 (1 row, 8 keys: 20) then 3 (start 20), then 4 (start 20 + 20
// = 40; item 3 is 1 row, 8 keys). Starts: 2@0 q0, 1@0 q1, 3@20, 4@40, 0@42.
TEST(DispatchOrder, ClaimsItemsByTheirQueueStartTimes) {
  Plan plan;
  plan.num_ctas = 2;
  plan.group_size = 2;
  plan.cost = CostModel{1.0, 1.0, 10.0, 1.5};
  auto item = [](int32_t row, int32_t keys) {
    WorkItem it;
    it.rows_begin = row;
    it.rows_end = row + 1;
    it.kv_end = keys;
    return it;
  };
  plan.items = {item(0, 8), item(1, 8), item(2, 30), item(3, 8), item(4, 8)};
  plan.cta_indptr = {0, 2, 5};
  plan.cta_items = {2, 0, 1, 3, 4};
  EXPECT_EQ(dispatch_order(plan), (std::vector<int32_t>{2, 1, 3, 4, 0}));
  // Equal start times go by queue: both queues' first items at 0, queue 0's first.
  plan.cta_items = {1, 0, 2, 3, 4};
  EXPECT_EQ(dispatch_order(plan), (std::vector<int32_t>{1, 2, 0, 3, 4}));
  // A permutation of the items on every policy's plans.
  for (uint64_t seed = 1; seed <= 40; ++seed) {
    const BatchLayout layout = random_layout(seed);
    for (Policy policy : {Policy::kNaive, Policy::kBalanced, Policy::kPrefix}) {
      const Plan p = must_plan(layout, 1 + static_cast<int>(seed % 20), policy);
      std::vector<int32_t> order = dispatch_order(p);
      std::sort(order.begin(), order.end());
      std::vector<int32_t> all(p.items.size());
      for (size_t i = 0; i < all.size(); ++i) all[i] = static_cast<int32_t>(i);
      EXPECT_EQ(order, all) << "seed " << seed << " policy " << policy_name(policy);
    }
  }
}

TEST(MakePlan, RejectsBadOptions) {
  const BatchLayout layout = two_requests();
  struct Case {
    const char* field;
    DeviceShape device;
    PlanOptions options;
  };
  std::vector<Case> cases;
  cases.push_back({"device.num_ctas", DeviceShape{0}, PlanOptions{}});
  cases.push_back({"device.num_ctas", DeviceShape{-3}, PlanOptions{}});
  PlanOptions o;
  o.cost.alpha = -1.0;
  cases.push_back({"options.cost.alpha", DeviceShape{4}, o});
  o = PlanOptions{};
  o.cost.beta = std::numeric_limits<double>::quiet_NaN();
  cases.push_back({"options.cost.beta", DeviceShape{4}, o});
  o = PlanOptions{};
  o.cost.item = -0.5;
  cases.push_back({"options.cost.item", DeviceShape{4}, o});
  o = PlanOptions{};
  o.cost.wide_key = std::numeric_limits<double>::infinity();
  cases.push_back({"options.cost.wide_key", DeviceShape{4}, o});
  o = PlanOptions{};
  o.cost.alpha = 0.0;
  o.cost.beta = 0.0;
  cases.push_back({"both are 0", DeviceShape{4}, o});
  o = PlanOptions{};
  o.deterministic_kv_chunk_tokens = 0;
  cases.push_back({"options.deterministic_kv_chunk_tokens", DeviceShape{4}, o});
  o = PlanOptions{};
  o.policy = static_cast<Policy>(7);
  cases.push_back({"options.policy", DeviceShape{4}, o});
  for (const Case& c : cases) {
    SCOPED_TRACE(c.field);
    const Result<Plan> plan = make_plan(layout, c.device, c.options);
    ASSERT_FALSE(plan.ok());
    EXPECT_EQ(plan.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(plan.status().message().find(c.field), std::string::npos) << plan.status().message();
    if (c.device.num_ctas >= 1) {  // the same error without a layout
      const Status s = check_plan_options(c.options);
      EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
      EXPECT_EQ(s.message(), plan.status().message());
    }
  }
}

TEST(MakePlan, ParsePolicyNames) {
  for (Policy p : {Policy::kNaive, Policy::kBalanced, Policy::kPrefix, Policy::kAuto}) {
    const Result<Policy> parsed = parse_policy(policy_name(p));
    ASSERT_TRUE(parsed.ok());
    EXPECT_EQ(*parsed, p);
  }
  EXPECT_EQ(parse_policy("fast").status().code(), StatusCode::kInvalidArgument);
}

// kAuto plans as the prefix policy when the shared pages it deduplicates reach
// kAutoPrefixMinTokens (12,288), else as balanced, and never as prefix in deterministic mode.
// Decode rows over a 512-token prefix (page 16), each after the first counting 512, beside 12
// rows over another 512-token prefix (11 x 512 = 5,632): 13 rows give 11,776 (balanced), 14
// give 12,288 (prefix); a 64-row prefill whose queries start at 512 adds 512 (prefix), one
// starting at 496 shares only the 31 pages before its queries, 496 (balanced).
TEST(MakePlan, AutoChoosesPrefixWhenItDeduplicatesEnough) {
  auto layout_of = [](int rows, int prefill_start) {
    LayoutBuilder b(32, 8, 128, 16);
    const std::vector<int32_t> prefix = b.new_pages(32);
    for (int i = 0; i < rows; ++i) b.add(prefix, 1000 + 37 * i, 1);
    const std::vector<int32_t> other = b.new_pages(32);
    for (int i = 0; i < 12; ++i) b.add(other, 900 + 11 * i, 1);  // 11 x 512 = 5,632 more
    if (prefill_start >= 0) b.add(prefix, prefill_start + 64, 64);
    return b.layout();
  };
  struct Case {
    int rows, prefill_start;
    bool prefix;
  };
  for (const Case c : {Case{13, -1, false}, Case{14, -1, true}, Case{13, 512, true},
                       Case{13, 496, false}, Case{1, -1, false}}) {
    SCOPED_TRACE("rows " + std::to_string(c.rows) + " prefill_start " +
                 std::to_string(c.prefill_start));
    const BatchLayout layout = layout_of(c.rows, c.prefill_start);
    ASSERT_TRUE(validate(layout).ok());
    EXPECT_EQ(auto_prefers_prefix(layout, false), c.prefix);
    EXPECT_FALSE(auto_prefers_prefix(layout, true));
    const Plan plan = must_plan(layout, 16, Policy::kAuto, false);
    EXPECT_EQ(plan.policy, c.prefix ? Policy::kPrefix : Policy::kBalanced);
    EXPECT_EQ(to_text(plan), to_text(must_plan(layout, 16, plan.policy, false)));
    EXPECT_EQ(must_plan(layout, 16, Policy::kAuto, true).policy, Policy::kBalanced);
  }
}

// Every policy, deterministic or not, on seeded random batches (STYLE.md §8 kind 2), and the
// same input twice gives the same plan.
TEST(CheckInvariants, HoldOnRandomBatches) {
  const int ctas[] = {1, 3, 16, 132};
  for (uint64_t seed = 1; seed <= 120; ++seed) {
    const BatchLayout layout = random_layout(seed);
    ASSERT_TRUE(validate(layout).ok()) << "seed " << seed;
    for (Policy policy : {Policy::kNaive, Policy::kBalanced, Policy::kPrefix, Policy::kAuto}) {
      for (bool det : {false, true}) {
        SCOPED_TRACE("seed " + std::to_string(seed) + " policy " +
                     std::string(policy_name(policy)) + " det " + std::to_string(det));
        const int num_ctas = ctas[seed % 4];
        const Plan plan = must_plan(layout, num_ctas, policy, det);
        const Status status = check_invariants(plan, layout);
        ASSERT_TRUE(status.ok()) << status.to_string();
        EXPECT_EQ(to_text(plan), to_text(must_plan(layout, num_ctas, policy, det)));
      }
    }
  }
}

// The checker must be able to fail: each mutation of a valid plan breaks one rule.
TEST(CheckInvariants, RejectsBrokenPlans) {
  LayoutBuilder b(1, 1, 64, 16);
  const std::vector<int32_t> prefix = b.new_pages(2);
  b.add(prefix, 300, 1);
  b.add(prefix, 60, 1);
  b.add({}, 50, 4);
  const BatchLayout layout = b.layout();
  const Plan good = must_plan(layout, 4, Policy::kBalanced);
  ASSERT_TRUE(check_invariants(good, layout).ok());
  ASSERT_GT(good.num_merges(), 0);  // r0 (300 keys) is split: total 410 / 4 CTAs -> 128

  auto expect_bad = [&](const Plan& p, const char* what) {
    const Status s = check_invariants(p, layout);
    EXPECT_FALSE(s.ok()) << what;
    EXPECT_EQ(s.code(), StatusCode::kInternal) << what;
  };
  Plan p = good;
  p.items[0].kv_end -= 1;  // a key of some row no longer covered
  expect_bad(p, "shortened range");
  p = good;
  p.items[0].tile.tile_q = 24;
  expect_bad(p, "tile not compiled");
  p = good;
  std::swap(p.merge_slots[0], p.merge_slots[1]);  // merge order no longer ascending kv_begin
  expect_bad(p, "merge order");
  p = good;
  p.cta_items.pop_back();
  p.cta_indptr.back() -= 1;
  expect_bad(p, "item missing from the CTA queues");
  p = good;
  p.items[0].cta = (p.items[0].cta + 1) % p.num_ctas;
  expect_bad(p, "item in the wrong queue");
  p = good;
  p.merge_row.pop_back();
  p.merge_indptr.pop_back();
  p.merge_slots.resize(static_cast<size_t>(p.merge_indptr.back()));
  expect_bad(p, "merge entry missing");

  // Rows of different requests in one item must share physical pages for the range: r0 and
  // r2 do not.
  const Plan naive = must_plan(layout, 1, Policy::kNaive);
  p = naive;
  p.items[2].kv_request = 0;  // r2's rows located through r0's page table
  p.items[2].kv_end = 50;
  expect_bad(p, "pages not shared");
  // A row that sees none of the item's keys: r2's rows sit at positions 46..49; a range
  // starting at 48 leaves rows 2 and 3 with no key.
  p = naive;
  p.items[2].kv_begin = 48;
  expect_bad(p, "row sees no key");
}

TEST(TileSelectors, SmallestCoveringQTileAndKvRule) {
  using internal::select_tile_kv;
  using internal::select_tile_q;
  // Seed 002 §5.2: q = 20 -> m = 32 (not 16, which would split the query into two CTAs).
  EXPECT_EQ(select_tile_q(20), 32);
  EXPECT_EQ(select_tile_q(1), 16);
  EXPECT_EQ(select_tile_q(16), 16);
  EXPECT_EQ(select_tile_q(17), 32);
  EXPECT_EQ(select_tile_q(128), 128);
  EXPECT_EQ(select_tile_q(500), 128);
  // KV 192 -> n = 64 (the paper's example: 128 would leave a 50% compute bubble).
  EXPECT_EQ(select_tile_kv(192), 64);
  EXPECT_EQ(select_tile_kv(10), 32);
  EXPECT_EQ(select_tile_kv(127), 32);
  EXPECT_EQ(select_tile_kv(128), 64);
  EXPECT_EQ(select_tile_kv(256), 128);
  EXPECT_EQ(select_tile_kv(100000), 128);
}

}  // namespace
}  // namespace packserve::attention
