// plan_stats_test.cc: compute_plan_stats() against counts worked out by hand from the
// formulas of plan_stats.h.
#include "packserve/attention/plan_stats.h"

#include <gtest/gtest.h>

#include "packserve/attention/plan_test_util.h"

namespace packserve::attention {
namespace {

using testing::LayoutBuilder;

TEST(PlanStats, BalancedGoldenPlanByHand) {
  // The plan of BalancedPolicy.GoldenDecodeSplitAndLpt: g = 1, 2 kv heads, d = 64, bf16
  // (e = 2), decode rows with kv 300, 100, 40; per head items r0[0,224), r1[0,100),
  // r0[224,300), r2[0,40), each one query tile (head-implicit: 4 items and 2 queues, run for
  // both heads); 2 partial slots per head; 1 merge entry of 2 slots per head.
  const LayoutBuilder b = testing::golden_decode_batch();
  PlanOptions options;
  options.policy = Policy::kBalanced;
  options.cost = testing::kHandCost;
  const Result<Plan> plan = make_plan(b.layout(), DeviceShape{4}, options);
  ASSERT_TRUE(plan.ok());
  const PlanStats s = compute_plan_stats(*plan, b.layout());
  EXPECT_EQ(s.num_work_items, 8);
  EXPECT_EQ(s.num_merges, 2);
  // 2 heads * 440 keys * (K + V) 2 * 64 * 2 bytes.
  EXPECT_EQ(s.kv_bytes_read, 2 * 440 * 2 * 64 * 2);
  // Pages hold 300 + 100 + 40 tokens, all heads.
  EXPECT_EQ(s.kv_bytes_unique, 440 * 2 * 2 * 64 * 2);
  EXPECT_EQ(s.q_bytes_read, 8 * 1 * 64 * 2);                 // 8 item rows, g = 1
  EXPECT_EQ(s.output_bytes_written, 3 * 2 * 64 * 2);         // 3 rows * 2 qo heads
  EXPECT_EQ(s.partial_bytes_written, 4 * 1 * (64 * 2 + 4));  // 4 slots of bf16 o[64], f32 lse
  EXPECT_EQ(s.partial_bytes_read, 4 * 1 * (64 * 2 + 4));
  EXPECT_EQ(s.predicted_traffic_bytes, 1024 + 225280 + 768 + 528 + 528);
  // Queue costs (1 * folded rows + keys): queue 0 = 225, queue 1 = 101 + 77 + 41 = 219 (head
  // 1's CTAs run the same queues): mean 222.
  ASSERT_EQ(s.cta_cost.size(), 2u);
  EXPECT_DOUBLE_EQ(s.cta_cost[0], 225.0);
  EXPECT_DOUBLE_EQ(s.cta_cost[1], 219.0);
  EXPECT_DOUBLE_EQ(s.imbalance, 225.0 / 222.0);
  // A float8 KV cache: one byte per K/V element, the rest unchanged.
  BatchLayout fp8 = b.layout();
  fp8.kv_fp8 = true;
  const PlanStats f = compute_plan_stats(*plan, fp8);
  EXPECT_EQ(f.kv_bytes_read, s.kv_bytes_read / 2);
  EXPECT_EQ(f.kv_bytes_unique, s.kv_bytes_unique / 2);
  EXPECT_EQ(f.q_bytes_read, s.q_bytes_read);
  EXPECT_EQ(f.partial_bytes_written, s.partial_bytes_written);
}

TEST(PlanStats, UniqueBytesCountEachPageOnceAtItsMostUsedLength) {
  // Page 0 is full for both requests; page 1 holds 5 tokens for A (its last page) and 16 for
  // B; B's own last page holds 3. Unique tokens = 16 + 16 + 3 = 35; f32, d = 64, 1 kv head.
  LayoutBuilder b(1, 1, 64, 16);
  const std::vector<int32_t> shared = b.new_pages(2);
  b.add_pages(shared, 21, 1);
  std::vector<int32_t> pages = shared;
  pages.push_back(b.new_pages(1)[0]);
  b.add_pages(pages, 35, 1);
  BatchLayout layout = b.layout();
  layout.dtype = DType::kF32;
  PlanOptions options;
  options.policy = Policy::kNaive;
  const Result<Plan> plan = make_plan(layout, DeviceShape{2}, options);
  ASSERT_TRUE(plan.ok());
  const PlanStats s = compute_plan_stats(*plan, layout);
  EXPECT_EQ(s.kv_bytes_unique, 35 * 2 * 64 * 4);
  EXPECT_EQ(s.kv_bytes_read, (21 + 35) * 2 * 64 * 4);  // naive reads each request's keys
  // Naive: one item per CTA (round-robin), costs (default model) 96 + 1 + 21 and 96 + 1 + 35.
  EXPECT_DOUBLE_EQ(s.imbalance, 132.0 / ((118.0 + 132.0) / 2.0));
}

}  // namespace
}  // namespace packserve::attention
