// policy_balanced_test.cc: the balanced policy (seed 004 Algorithm 1): golden plans worked
// out by hand, the list-scheduling bound of the CTA assignment, page-aligned chunks, the
// num_ctas < num_kv_heads case, and determinism across batches.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>

#include "packserve/attention/plan.h"
#include "packserve/attention/plan_stats.h"
#include "packserve/attention/plan_test_util.h"

namespace packserve::attention {
namespace {

using testing::golden_decode_batch;
using testing::LayoutBuilder;
using testing::random_layout;
using testing::request_signature;

Plan balanced(const BatchLayout& layout, int num_ctas, bool det = false, int det_chunk = 1024,
              const CostModel& cost = CostModel{}) {
  PlanOptions options;
  options.policy = Policy::kBalanced;
  options.cost = cost;
  options.deterministic = det;
  options.deterministic_kv_chunk_tokens = det_chunk;
  Result<Plan> plan = make_plan(layout, DeviceShape{num_ctas}, options);
  EXPECT_TRUE(plan.ok()) << plan.status().to_string();
  return plan.ok() ? *plan : Plan{};
}

TEST(BalancedPolicy, GoldenDecodeSplitAndLpt) {
  // g = 1, 2 kv heads, page 16, 4 CTAs -> C = 4 / 2 = 2 CTAs per head.
  // Decode requests: r0 kv 300, r1 kv 100, r2 kv 40 (one row each, one query tile each).
  // L_kv = ceil((300 + 100 + 40) / 2) = 220 -> >= 128 -> round up to a page: 224.
  // Chunks: u0 r0[0,224), u1 r0[224,300), u2 r1[0,100), u3 r2[0,40).
  // Longest first: u0 (224), u2 (100), u1 (76), u3 (40). Cost = 1 * 1 row + keys:
  //   u0 225 -> cta 0 (tie -> lower cta); u2 101 -> cta 1; u1 77 -> cta 1 (101 < 225) = 178;
  //   u3 41 -> cta 1 (178 < 225) = 219. 4 CTAs / 2 heads = 2 queues; head 1 runs the same
  //   queues (head-implicit items, plan.h).
  // tile_kv (largest n with 2n <= keys): 224 -> 64, 100 -> 32, 76 -> 32, 40 -> 32; tile_q 16.
  // r0 has two items -> partial slots in item order (0, 1); merges in row order with slots
  // by ascending kv_begin.
  const LayoutBuilder b = golden_decode_batch();
  const std::string expected =
      "plan policy=balanced deterministic=0 queues=2 group=1 kv_heads=2 head_dim=64 "
      "partial_slots=2\n"
      "item 0: cta=0 rows=[0] kv=r0[0,224) tile=16x64 partial@0\n"
      "item 1: cta=1 rows=[1] kv=r1[0,100) tile=16x32 final\n"
      "item 2: cta=1 rows=[0] kv=r0[224,300) tile=16x32 partial@1\n"
      "item 3: cta=1 rows=[2] kv=r2[0,40) tile=16x32 final\n"
      "merge 0: row=0 slots=[0,1]\n"
      "cta 0: [0]\n"
      "cta 1: [1,2,3]\n";
  const Plan plan = balanced(b.layout(), 4, false, 1024, testing::kHandCost);
  EXPECT_EQ(to_text(plan), expected);
  EXPECT_TRUE(check_invariants(plan, b.layout()).ok());
}

TEST(BalancedPolicy, GoldenDecodeDefaultCostKeepsTheLongRequestWhole) {
  // The batch of GoldenDecodeSplitAndLpt under the default cost model (96 per item + 1 per
  // folded row + keys). L_kv = 224; 3 tiles <= 4 per queue, so step 2b plans the chunks
  // round_up(224 * s / 16, 16) for s = 14..24, 28, 32 (at most 304, which cuts no tile) and
  // keeps the least makespan:
  //   208: pieces 208, 92 + r1 100 + r2 40, costs 305, 197, 189, 137 -> q0 305 + 137 = 442,
  //        q1 197 + 189 = 386: makespan 442
  //   224: 321 + 137 = 458;  240: 337 + 137 = 474;  256: 353 | 197 + 141 + 137 = 475;
  //   272: 369 | 197 + 137 + 125 = 459;  288: 385 | 197 + 137 + 109 = 443
  //   304: r0 whole, 397 | 197 + 137 = 334: makespan 397, the least.
  // So no split and no merge; tile_kv 300 -> 128.
  const LayoutBuilder b = golden_decode_batch();
  const std::string expected =
      "plan policy=balanced deterministic=0 queues=2 group=1 kv_heads=2 head_dim=64 "
      "partial_slots=0\n"
      "item 0: cta=0 rows=[0] kv=r0[0,300) tile=16x128 final\n"
      "item 1: cta=1 rows=[1] kv=r1[0,100) tile=16x32 final\n"
      "item 2: cta=1 rows=[2] kv=r2[0,40) tile=16x32 final\n"
      "cta 0: [0]\n"
      "cta 1: [1,2]\n";
  const Plan plan = balanced(b.layout(), 4);
  EXPECT_EQ(to_text(plan), expected);
  EXPECT_TRUE(check_invariants(plan, b.layout()).ok());
  const PlanStats stats = compute_plan_stats(plan, b.layout());
  EXPECT_DOUBLE_EQ(stats.cta_cost[0], 397.0);
  EXPECT_DOUBLE_EQ(stats.cta_cost[1], 334.0);
}

TEST(BalancedPolicy, GoldenCausalPrefillChunks) {
  // g = 1, 1 kv head, page 1, 2 CTAs. r0: q_len 6, kv_len 131 -> rows at positions 125..130,
  // one query tile (6 <= 128 rows), causal KV length 130 + 1 = 131.
  // L_kv = max(ceil(131 / 2) = 66, 128) = 128; L_r = max(128, 131 / (1 + 131 / 6) -> 6) = 128.
  // Chunks [0,128) (all rows) and [128,131): only rows at positions >= 128, i.e. local rows
  // 3, 4, 5. LPT: the 128-key chunk -> cta 0, the 3-key chunk -> cta 1.
  // Tiles: 6 rows -> 16, 128 keys -> 64; 3 rows -> 16, 3 keys -> 32.
  // Rows 0..2 sit in item 0 only, but item 0 is partial (rows 3..5 need item 1), so they get
  // one-slot merges.
  LayoutBuilder b(1, 1, 64, 1);
  b.add({}, 131, 6);
  const std::string expected =
      "plan policy=balanced deterministic=0 queues=2 group=1 kv_heads=1 head_dim=64 "
      "partial_slots=9\n"
      "item 0: cta=0 rows=[0,1,2,3,4,5] kv=r0[0,128) tile=16x64 partial@0\n"
      "item 1: cta=1 rows=[3,4,5] kv=r0[128,131) tile=16x32 partial@6\n"
      "merge 0: row=0 slots=[0]\n"
      "merge 1: row=1 slots=[1]\n"
      "merge 2: row=2 slots=[2]\n"
      "merge 3: row=3 slots=[3,6]\n"
      "merge 4: row=4 slots=[4,7]\n"
      "merge 5: row=5 slots=[5,8]\n"
      "cta 0: [0]\n"
      "cta 1: [1]\n";
  const Plan plan = balanced(b.layout(), 2);
  EXPECT_EQ(to_text(plan), expected);
  EXPECT_TRUE(check_invariants(plan, b.layout()).ok());
}

TEST(BalancedPolicy, PrefillChunkOverALongerContextIsCutForTheQueues) {
  // g = 1, 1 kv head, page 16, 2 CTAs. r0: q_len 16 over kv_len 256 (16 pages): one query
  // tile, causal KV length 256. L_kv = max(ceil(256 / 2), 128) = 128, and a row may see
  // 1 + pages / q_len = 2 pieces, so L_r = max(128, 256 / 2) = 128 (it was q_len * page = 256:
  // one piece on one queue). The chunk search keeps 128: two pieces of cost 96 + 16 + 128 =
  // 240, makespan 240 against 368 uncut (144: 256 | 224). Both pieces hold all 16 rows
  // (positions 240..255 >= 128); 128 keys -> tile_kv 64.
  LayoutBuilder b(1, 1, 64, 16);
  b.add({}, 256, 16);
  std::string expected =
      "plan policy=balanced deterministic=0 queues=2 group=1 kv_heads=1 head_dim=64 "
      "partial_slots=32\n"
      "item 0: cta=0 rows=[0,1,2,3,4,5,6,7,8,9,10,11,12,13,14,15] kv=r0[0,128) tile=16x64 "
      "partial@0\n"
      "item 1: cta=1 rows=[0,1,2,3,4,5,6,7,8,9,10,11,12,13,14,15] kv=r0[128,256) tile=16x64 "
      "partial@16\n";
  for (int k = 0; k < 16; ++k) {
    expected += "merge " + std::to_string(k) + ": row=" + std::to_string(k) + " slots=[" +
                std::to_string(k) + "," + std::to_string(16 + k) + "]\n";
  }
  expected += "cta 0: [0]\ncta 1: [1]\n";
  const Plan plan = balanced(b.layout(), 2);
  EXPECT_EQ(to_text(plan), expected);
  EXPECT_TRUE(check_invariants(plan, b.layout()).ok());

  // A prefill with at least as many rows as pages is not cut (1 + 16 / 32 = 1 piece per row):
  // its tiles are the parallelism, and the plan buffer's budget q_len + pages holds.
  LayoutBuilder whole(1, 1, 64, 16);
  whole.add({}, 256, 32);
  const Plan one = balanced(whole.layout(), 2);
  ASSERT_EQ(one.items.size(), 1u);
  EXPECT_TRUE(one.items[0].writes_final);
  EXPECT_EQ(one.items[0].kv_tokens(), 256);
}

// Greedy list scheduling (Graham): the busiest queue finishes by total / C + the largest item
// cost (every head runs the same queues); chunks start at page multiples.
TEST(BalancedPolicy, ListSchedulingBoundAndPageAlignedChunks) {
  for (uint64_t seed = 200; seed < 260; ++seed) {
    SCOPED_TRACE("seed " + std::to_string(seed));
    const BatchLayout layout = random_layout(seed);
    const int num_ctas = static_cast<int>(layout.num_kv_heads * (1 + seed % 20));
    const Plan plan = balanced(layout, num_ctas);
    ASSERT_TRUE(check_invariants(plan, layout).ok());
    const int per_head = num_ctas / layout.num_kv_heads;
    ASSERT_EQ(plan.num_ctas, per_head);
    EXPECT_EQ(plan.grid_ctas(), per_head * layout.num_kv_heads);
    const PlanStats stats = compute_plan_stats(plan, layout);
    ASSERT_EQ(stats.cta_cost.size(), static_cast<size_t>(per_head));
    double total = 0.0;
    double max_cta = 0.0;
    double max_item = 0.0;
    for (int c = 0; c < per_head; ++c) {
      total += stats.cta_cost[c];
      max_cta = std::max(max_cta, stats.cta_cost[c]);
    }
    for (const WorkItem& it : plan.items) {
      max_item =
          std::max(max_item, plan.cost(int64_t{it.num_rows()} * plan.group_size, it.kv_tokens()));
    }
    EXPECT_LE(max_cta, total / per_head + max_item + 1e-9);
    for (const WorkItem& it : plan.items) EXPECT_EQ(it.kv_begin % layout.page_size, 0);
  }
}

// The cost model weighs the keys of a 128-row query tile by wide_key (2 in kHandCost: it
// computes, a decode row streams). g = 4, 2 queues; L_kv = ceil(3724 / 2) = 1862 -> 1872.
// Step 2b's candidates (>= 1872 * 14 / 16) all exceed the longest tile (B, 1500 keys), so the
// one candidate is round_up(1500, 16): no split. LPT order B, A (a 32-row prefill tile over
// 1024 keys: 128 folded), C, D (600 each); costs B 1504, A 128 + 2 * 1024 = 2176, C = D 604:
// B -> q0, A -> q1, C -> q0 (1504 < 2176), D -> q0 (2108 < 2176).
TEST(BalancedPolicy, PrefillTileKeysAreWeighedByTheCostModel) {
  LayoutBuilder b(8, 2, 64, 16);
  const int a = b.add({}, 1024, 32);
  const int r_b = b.add({}, 1500, 1);
  b.add({}, 600, 1);
  b.add({}, 600, 1);
  const BatchLayout& layout = b.layout();
  const Plan plan = balanced(layout, 4, false, 1024, testing::kHandCost);
  ASSERT_EQ(plan.num_ctas, 2);
  ASSERT_EQ(plan.items.size(), 4u);
  int queue_of_a = -1, queue_of_b = -1;
  for (const WorkItem& it : plan.items) {
    EXPECT_TRUE(it.writes_final);
    const int32_t first_row = plan.item_rows[it.rows_begin];
    if (first_row == layout.qo_indptr[a]) queue_of_a = it.cta;
    if (first_row == layout.qo_indptr[r_b]) queue_of_b = it.cta;
  }
  EXPECT_EQ(queue_of_a, 1);
  EXPECT_EQ(queue_of_b, 0);
  EXPECT_EQ(plan.cta_indptr[2] - plan.cta_indptr[1], 1);  // A alone
  const PlanStats stats = compute_plan_stats(plan, layout);
  EXPECT_DOUBLE_EQ(stats.cta_cost[0], 1504.0 + 604.0 + 604.0);
  EXPECT_DOUBLE_EQ(stats.cta_cost[1], 128.0 + 2.0 * 1024.0);
  // With wide_key 1 A costs 1152: C joins A's queue (1152 < 1504), D goes to B's (1504 < 1756).
  CostModel flat = testing::kHandCost;
  flat.wide_key = 1.0;
  const Plan unweighted = balanced(layout, 4, false, 1024, flat);
  const PlanStats flat_stats = compute_plan_stats(unweighted, layout);
  EXPECT_DOUBLE_EQ(flat_stats.cta_cost[0], 1504.0 + 604.0);
  EXPECT_DOUBLE_EQ(flat_stats.cta_cost[1], 128.0 + 1024.0 + 604.0);
}

TEST(BalancedPolicy, FewTilesGetOnePiecePerQueueNotShortTails) {
  // 32 decode rows of 2048 keys on 33 queues: L_kv = ceil(65536 / 33) -> 1992 would cut every
  // request into 1992 + 56 keys and LPT would stack the 32 tails on the idle queue. The chunk
  // search keeps the 32 tiles whole: one item per request, no merges.
  LayoutBuilder b(1, 1, 64, 16);
  for (int i = 0; i < 32; ++i) b.add({}, 2048, 1);
  const Plan plan = balanced(b.layout(), 33);
  ASSERT_TRUE(check_invariants(plan, b.layout()).ok());
  EXPECT_EQ(plan.items.size(), 32u);
  EXPECT_EQ(plan.num_merges(), 0);
  // 8 such rows on 33 queues: pieces of 512 keys (4 per request, 32 <= 33), equal sizes.
  LayoutBuilder few(1, 1, 64, 16);
  for (int i = 0; i < 8; ++i) few.add({}, 2048, 1);
  const Plan split = balanced(few.layout(), 33);
  ASSERT_TRUE(check_invariants(split, few.layout()).ok());
  EXPECT_EQ(split.items.size(), 32u);
  for (const WorkItem& it : split.items) EXPECT_EQ(it.kv_tokens(), 512);
  // Skewed lengths: keeping the 8000-key request whole (the only chunk with <= 5 pieces)
  // would cost far more than L_kv = ceil(8900 / 5) = 1780 -> 1792. Step 2b's least makespan
  // (default costs, 96 per item) is the chunk round_up(1792 * 17 / 16, 16) = 1904: four
  // pieces of 1904 (2001 each) on four queues, the 384-key tail (481) and the three 300-key
  // requests (397 each) on the fifth, 1672; 1792 gives four pieces of 1889 and a fifth queue
  // of 929 + 3 * 397 = 2120.
  LayoutBuilder skew(1, 1, 64, 16);
  skew.add({}, 8000, 1);
  for (int i = 0; i < 3; ++i) skew.add({}, 300, 1);
  const Plan skewed = balanced(skew.layout(), 5);
  ASSERT_TRUE(check_invariants(skewed, skew.layout()).ok());
  int32_t longest = 0;
  for (const WorkItem& it : skewed.items) longest = std::max(longest, it.kv_tokens());
  EXPECT_EQ(longest, 1904);
}

TEST(BalancedPolicy, FewerCtasThanKvHeads) {
  // 4 kv heads on 3 CTAs: one queue, run by one CTA per head (a grid of 4).
  LayoutBuilder b(8, 4, 64, 16);
  b.add({}, 500, 1);
  b.add({}, 70, 2);
  const Plan plan = balanced(b.layout(), 3);
  ASSERT_TRUE(check_invariants(plan, b.layout()).ok());
  EXPECT_EQ(plan.num_ctas, 1);
  EXPECT_EQ(plan.grid_ctas(), 4);
  for (const WorkItem& it : plan.items) EXPECT_EQ(it.cta, 0);
}

TEST(BalancedPolicy, SkewedBatchIsBalancedBetterThanNaive) {
  // One 32k-token request among 100 short ones on 16 CTAs (1 kv head): the naive plan puts
  // the long request on one CTA; balanced chunks it.
  LayoutBuilder b(4, 1, 128, 16);
  b.add({}, 32768, 1);
  for (int i = 0; i < 100; ++i) b.add({}, 100 + 7 * i, 1);
  PlanOptions naive_options;
  naive_options.policy = Policy::kNaive;
  const Result<Plan> naive = make_plan(b.layout(), DeviceShape{16}, naive_options);
  ASSERT_TRUE(naive.ok());
  const Plan bal = balanced(b.layout(), 16);
  const double naive_imbalance = compute_plan_stats(*naive, b.layout()).imbalance;
  const double bal_imbalance = compute_plan_stats(bal, b.layout()).imbalance;
  EXPECT_GT(naive_imbalance, 4.0);
  EXPECT_LT(bal_imbalance, 1.1);
}

TEST(BalancedPolicy, DeterministicRequestIndependentOfBatch) {
  // X: prefill chunk (q_len 5) after 2595 cached tokens; Y: a long decode row. Placed in two
  // batches with different neighbours, order and sizes, the same CTA count.
  auto build = [](bool first) {
    LayoutBuilder b(8, 2, 128, 16);
    int x = -1;
    int y = -1;
    if (first) {
      b.add({}, 40, 1);
      x = b.add({}, 2600, 5);
      b.add({}, 9000, 1);
      y = b.add({}, 3001, 1);
    } else {
      y = b.add({}, 3001, 1);
      for (int i = 0; i < 30; ++i) b.add({}, 50 + 13 * i, 1 + i % 3);
      x = b.add({}, 2600, 5);
    }
    return std::make_tuple(b.layout(), x, y);
  };
  const auto [la, xa, ya] = build(true);
  const auto [lb, xb, yb] = build(false);
  const Plan pa = balanced(la, 16, /*det=*/true, 1000);
  const Plan pb = balanced(lb, 16, /*det=*/true, 1000);
  ASSERT_TRUE(check_invariants(pa, la).ok());
  ASSERT_TRUE(check_invariants(pb, lb).ok());
  // 1000 tokens round up to 1008 (63 pages): Y's keys cut at 1008, 2016.
  EXPECT_EQ(request_signature(pa, la, ya), request_signature(pb, lb, yb));
  EXPECT_NE(request_signature(pa, la, ya).find("[1008,2016)"), std::string::npos);
  EXPECT_EQ(request_signature(pa, la, xa), request_signature(pb, lb, xb));
  // Without `deterministic` the chunk size follows the batch, so Y's split differs.
  EXPECT_NE(request_signature(balanced(la, 16), la, ya),
            request_signature(balanced(lb, 16), lb, yb));
}

}  // namespace
}  // namespace packserve::attention
