// plan_buffer_test.cc: the flat plan buffer: region layout, exact round trip for every
// policy on random batches (which also proves the capacity bounds of plan_buffer.cc hold),
// and the error contract (capacity exceeded, bad capacity, mismatched CTA count, bad magic).
#include "packserve/attention/plan_buffer.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "packserve/attention/plan_test_util.h"

namespace packserve::attention {
namespace {

using testing::LayoutBuilder;
using testing::random_layout;

PlanCapacity capacity_of(const BatchLayout& layout, int num_ctas) {
  return PlanCapacity{layout.total_rows(), static_cast<int>(layout.kv_page_indices.size()),
                      num_ctas, layout.num_kv_heads};
}

// 5 requests of one decode row (kv 100..104), 2 KV heads, page 16: the naive plan on 4 CTAs
// (2 queues) has 5 items.
BatchLayout five_decode_requests() {
  LayoutBuilder b(4, 2, 64, 16);
  for (int i = 0; i < 5; ++i) b.add({}, 100 + i, 1);
  return b.layout();
}

Result<Plan> naive_plan(const BatchLayout& layout) {
  PlanOptions options;
  options.policy = Policy::kNaive;
  return make_plan(layout, DeviceShape{4}, options);
}

TEST(PlanBuffer, LayoutRegionsAreOrderedAlignedAndSized) {
  const PlanCapacity cap{100, 50, 7, 4};
  const Result<PlanBufferLayout> l = plan_buffer_layout(cap);
  ASSERT_TRUE(l.ok()) << l.status().to_string();
  // Bounds of plan_buffer.cc (items are head-implicit): item rows, items, merge slots <= R + P;
  // merges <= R. 7 CTAs over 4 heads: 1 queue per head.
  EXPECT_EQ(l->num_ctas, 1);
  EXPECT_EQ(l->max_item_rows, 150);
  EXPECT_EQ(l->max_items, 150);
  EXPECT_EQ(l->max_merge_slots, 150);
  EXPECT_EQ(l->max_merges, 100);
  EXPECT_EQ(plan_buffer_layout({100, 50, 132, 8})->num_ctas, 16);
  EXPECT_EQ(plan_buffer_layout({100, 50, 3, 8})->num_ctas, 1);
  const int starts[] = {l->off_cta_indptr, l->off_cta_items,  l->off_dispatch,
                        l->off_items,      l->off_item_rows,  l->off_merge_indptr,
                        l->off_merge_row,  l->off_merge_slots};
  const int sizes[] = {
      l->num_ctas + 1,  l->max_items,      l->max_items,  l->max_items * kItemFields,
      l->max_item_rows, l->max_merges + 1, l->max_merges, l->max_merge_slots};
  int end = kHeaderFields;
  for (int i = 0; i < 8; ++i) {
    EXPECT_EQ(starts[i] % kPlanBufferAlignInt32, 0) << "region " << i;
    EXPECT_GE(starts[i], end) << "region " << i << " overlaps the previous one";
    end = starts[i] + sizes[i];
  }
  EXPECT_GE(l->total_int32, end);
}

TEST(PlanBuffer, RejectsBadCapacity) {
  const char* names[] = {"max_rows", "max_pages", "num_ctas", "num_kv_heads"};
  for (int i = 0; i < 4; ++i) {
    PlanCapacity cap{10, 10, 10, 10};
    (i == 0 ? cap.max_rows : i == 1 ? cap.max_pages : i == 2 ? cap.num_ctas : cap.num_kv_heads) = 0;
    const Result<PlanBufferLayout> l = plan_buffer_layout(cap);
    ASSERT_FALSE(l.ok());
    EXPECT_EQ(l.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(l.status().message().find(names[i]), std::string::npos) << l.status().message();
  }
  const Result<PlanBufferLayout> huge = plan_buffer_layout({1 << 30, 1 << 30, 132, 64});
  EXPECT_EQ(huge.status().code(), StatusCode::kInvalidArgument);
}

// For every policy, deterministic or not: the plan fits the capacity computed from its own
// batch (the documented bounds hold) and reads back exactly.
TEST(PlanBuffer, RoundTripAndBoundsOnRandomBatches) {
  for (uint64_t seed = 500; seed < 580; ++seed) {
    const BatchLayout layout = random_layout(seed);
    const int num_ctas = 1 + static_cast<int>(seed % 133);
    for (Policy policy : {Policy::kNaive, Policy::kBalanced, Policy::kPrefix}) {
      for (bool det : {false, true}) {
        SCOPED_TRACE("seed " + std::to_string(seed) + " policy " +
                     std::string(policy_name(policy)) + " det " + std::to_string(det));
        PlanOptions options;
        options.policy = policy;
        options.deterministic = det;
        options.deterministic_kv_chunk_tokens = 64;  // small chunks: many items
        const Result<Plan> plan = make_plan(layout, DeviceShape{num_ctas}, options);
        ASSERT_TRUE(plan.ok());
        const PlanCapacity cap = capacity_of(layout, num_ctas);
        const Result<PlanBufferLayout> l = plan_buffer_layout(cap);
        ASSERT_TRUE(l.ok());
        std::vector<int32_t> buffer(static_cast<size_t>(l->total_int32), -7);
        const Status s = serialize_plan(*plan, cap, buffer);
        ASSERT_TRUE(s.ok()) << s.to_string();
        const Result<Plan> back = deserialize_plan(cap, buffer);
        ASSERT_TRUE(back.ok()) << back.status().to_string();
        EXPECT_EQ(back->items, plan->items);
        EXPECT_EQ(back->item_rows, plan->item_rows);
        EXPECT_EQ(back->cta_indptr, plan->cta_indptr);
        EXPECT_EQ(back->cta_items, plan->cta_items);
        EXPECT_EQ(back->merge_indptr, plan->merge_indptr);
        EXPECT_EQ(back->merge_row, plan->merge_row);
        EXPECT_EQ(back->merge_slots, plan->merge_slots);
        EXPECT_EQ(to_text(*back), to_text(*plan));
        int32_t wide = -1, quad = -1;
        const std::vector<int32_t> order = buffer_dispatch_order(*plan, &wide, &quad);
        EXPECT_TRUE(std::equal(order.begin(), order.end(), buffer.begin() + l->off_dispatch));
        ASSERT_EQ(buffer[kHdrNumWideItems], wide);
        ASSERT_EQ(buffer[kHdrNumQuadItems], quad);
        // dispatch_order() with (when runs_wide_phase(), tested below) its wide items first
        // and its quad items last, each kind in dispatch_order()'s order.
        const bool wide_phase = runs_wide_phase(*plan);
        std::vector<int32_t> expect_wide, expect_narrow, expect_quad;
        for (const int32_t i : dispatch_order(*plan)) {
          const WorkItem& it = plan->items[static_cast<size_t>(i)];
          if (wide_phase && is_wide_item(*plan, it)) {
            expect_wide.push_back(i);
          } else {
            (is_quad_item(*plan, it) ? expect_quad : expect_narrow).push_back(i);
          }
        }
        if (static_cast<int64_t>(expect_quad.size()) < int64_t{kQuadMinPerQueue} * plan->num_ctas) {
          expect_narrow = dispatch_order(*plan);  // no quad tickets: dispatch_order() after wide
          std::erase_if(expect_narrow, [&](int32_t i) {
            return std::find(expect_wide.begin(), expect_wide.end(), i) != expect_wide.end();
          });
          expect_quad.clear();
        }
        ASSERT_EQ(wide, static_cast<int>(expect_wide.size()));
        ASSERT_EQ(quad, static_cast<int>(expect_quad.size()));
        EXPECT_TRUE(std::equal(expect_wide.begin(), expect_wide.end(), order.begin()));
        EXPECT_TRUE(std::equal(expect_narrow.begin(), expect_narrow.end(), order.begin() + wide));
        EXPECT_TRUE(std::equal(expect_quad.begin(), expect_quad.end(), order.end() - quad));
        for (size_t j = 0; j < order.size(); ++j) {  // the items stored in dispatch order
          const WorkItem& it = plan->items[static_cast<size_t>(order[j])];
          const int32_t* f = buffer.data() + l->off_items + j * kItemFields;
          EXPECT_EQ(f[0], it.rows_begin);
          EXPECT_EQ(f[3], it.kv_begin);
          EXPECT_EQ(f[8], it.partial_begin);
        }
      }
    }
  }
}

// Head_dim 128, group 4: a 32-row prefill over 4096 keys (128 folded rows: wide; cost 6368 under
// the default CostModel) and two decode rows (4 folded: narrow) of `decode_kv` keys each (116
// each at 16 keys: the wide item's share is 0.96; 4196 each at 4096: 0.43).
BatchLayout prefill_and_decode(int decode_kv) {
  BatchLayout layout;
  layout.num_qo_heads = 8;
  layout.num_kv_heads = 2;
  layout.head_dim = 128;
  layout.page_size = 16;
  const int dp = decode_kv / 16;
  layout.qo_indptr = {0, 1, 2, 34};
  layout.kv_page_indptr = {0, dp, 2 * dp, 2 * dp + 256};
  layout.kv_last_page_len = {16, 16, 16};
  layout.num_pages = 2 * dp + 256;
  for (int i = 0; i < layout.num_pages; ++i) layout.kv_page_indices.push_back(i);
  return layout;
}

// `layout`'s naive plan on one CTA queue, serialized into a buffer of its capacity, with the
// buffer's dispatch region.
struct NaiveBuffer {
  Plan plan;
  PlanCapacity cap;
  std::vector<int32_t> buffer;
  std::vector<int32_t> order;
};
void serialize_naive(const BatchLayout& layout, bool deterministic, NaiveBuffer& out) {
  ASSERT_TRUE(validate(layout).ok());
  PlanOptions options;
  options.policy = Policy::kNaive;
  options.deterministic = deterministic;
  Result<Plan> plan = make_plan(layout, DeviceShape{1}, options);
  ASSERT_TRUE(plan.ok()) << plan.status().to_string();
  out.plan = std::move(*plan);
  out.cap = capacity_of(layout, 1);
  const Result<PlanBufferLayout> l = plan_buffer_layout(out.cap);
  ASSERT_TRUE(l.ok());
  out.buffer.assign(static_cast<size_t>(l->total_int32), 0);
  ASSERT_TRUE(serialize_plan(out.plan, out.cap, out.buffer).ok());
  out.order.assign(out.buffer.begin() + l->off_dispatch,
                   out.buffer.begin() + l->off_dispatch + out.plan.items.size());
}

// deserialize_plan rejects nb's buffer with header field `field` set to `value`, naming `what`.
void expect_rejected(NaiveBuffer nb, int field, int32_t value, const std::string& what) {
  nb.buffer[static_cast<size_t>(field)] = value;
  const Result<Plan> bad = deserialize_plan(nb.cap, nb.buffer);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find(what), std::string::npos) << bad.status().to_string();
}

// The wide item leads the dispatch region when it carries kWideKernelShare of the modelled
// cost (decode rows of 16 keys), and the order is dispatch_order()'s with num_wide_items 0
// when it does not (decode rows of 4096 keys) or the plan is deterministic; a buffer whose
// num_wide_items names a narrow item is rejected.
TEST(PlanBuffer, WideItemsLeadTheDispatchRegionWhenTheyCarryTheCost) {
  for (const int decode_kv : {16, 4096}) {
    for (const bool det : {false, true}) {
      SCOPED_TRACE("decode_kv " + std::to_string(decode_kv) + " det " + std::to_string(det));
      NaiveBuffer nb;
      ASSERT_NO_FATAL_FAILURE(serialize_naive(prefill_and_decode(decode_kv), det, nb));
      if (decode_kv == 4096 || det) {
        EXPECT_EQ(nb.buffer[kHdrNumWideItems], 0);
        EXPECT_EQ(nb.order, dispatch_order(nb.plan));
        continue;
      }
      ASSERT_EQ(nb.buffer[kHdrNumWideItems], 1);
      EXPECT_EQ(nb.plan.items[static_cast<size_t>(nb.order[0])].kv_request, 2);
      EXPECT_TRUE(deserialize_plan(nb.cap, nb.buffer).ok());
      expect_rejected(nb, kHdrNumWideItems, 2, "is not a wide item");
    }
  }
}

// A 1536-row prefill chunk over 2048 keys (48 wide items) beside 4 decode rows, balanced plan
// for 264 CTA queues. Rows of 64 keys: the wide phase runs (the rows' items are short). Rows of
// about 2000 keys: the wide items still carry over 0.9 of the cost, but alone after the phase
// each row's item would take longer than the phase saves, so one kernel runs everything. A
// deterministic plan never runs the phase.
TEST(PlanBuffer, WidePhaseOnlyWhenTheRestIsShorterThanItsSaving) {
  for (const int decode_kv : {64, 1930}) {
    for (const bool det : {false, true}) {
      SCOPED_TRACE("decode_kv " + std::to_string(decode_kv) + " det " + std::to_string(det));
      LayoutBuilder b(32, 8, 128, 16);
      for (int i = 0; i < 4; ++i) b.add({}, decode_kv - 7 * i, 1);
      b.add({}, 2048, 1536);
      PlanOptions options;
      options.deterministic = det;
      const Result<Plan> plan = make_plan(b.layout(), DeviceShape{264}, options);
      ASSERT_TRUE(plan.ok()) << plan.status().to_string();
      double wide_cost = 0.0, all_cost = 0.0;
      for (const WorkItem& it : plan->items) {
        const double c = plan->cost(int64_t{it.num_rows()} * plan->group_size, it.kv_tokens());
        all_cost += c;
        if (is_wide_item(*plan, it)) wide_cost += c;
      }
      if (!det) {
        EXPECT_GT(wide_cost, kWideKernelShare * all_cost);
      }
      EXPECT_EQ(runs_wide_phase(*plan), !det && decode_kv == 64);
      int32_t wide = -1;
      buffer_dispatch_order(*plan, &wide);
      EXPECT_EQ(wide, runs_wide_phase(*plan) ? 48 : 0);
    }
  }
}

// Group 4 or 2, head_dim 64, one CTA queue: single decode rows of 16, 128, 144, 64 and (short)
// 32 or (long) 160 keys and a 2-row request of 32 keys. The naive plan has one item per request;
// the single rows of at most kQuadMaxKeys keys are quad items (4 or 2 folded rows), the 2-row
// item never (the quad pass holds one row: at group 2 its 4 folded rows would fit). With four of
// them (kQuadMinPerQueue per queue) they trail the dispatch region in dispatch_order()'s order,
// num_quad_items 4; with three, or 2 KV heads (not a multiple of 4), or in a deterministic plan,
// the order is dispatch_order()'s and num_quad_items 0. A buffer whose num_quad_items names
// another item, or more than there are, is rejected.
TEST(PlanBuffer, QuadItemsTrailTheDispatchRegion) {
  for (const int group : {4, 2}) {
    for (const int kv_heads : {8, 2}) {
      for (const bool det : {false, true}) {
        for (const int last_kv : {32, 160}) {
          SCOPED_TRACE("group " + std::to_string(group) + " kv_heads " + std::to_string(kv_heads) +
                       " det " + std::to_string(det) + " last_kv " + std::to_string(last_kv));
          BatchLayout layout;
          layout.num_kv_heads = kv_heads;
          layout.num_qo_heads = group * kv_heads;
          layout.head_dim = 64;
          layout.page_size = 16;
          layout.qo_indptr = {0, 1, 2, 3, 4, 5, 7};
          const int last_pages = last_kv / 16;
          layout.kv_page_indptr = {0, 1, 9, 18, 22, 22 + last_pages, 24 + last_pages};
          layout.kv_last_page_len = {16, 16, 16, 16, 16, 16};
          layout.num_pages = 24 + last_pages;
          for (int i = 0; i < layout.num_pages; ++i) layout.kv_page_indices.push_back(i);
          NaiveBuffer nb;
          ASSERT_NO_FATAL_FAILURE(serialize_naive(layout, det, nb));
          ASSERT_EQ(nb.plan.items.size(), 6u);
          std::vector<int32_t> quad_requests;
          for (const int32_t i : dispatch_order(nb.plan)) {
            const int r = nb.plan.items[static_cast<size_t>(i)].kv_request;
            if (r == 0 || r == 1 || r == 3 || (r == 4 && last_kv == 32)) quad_requests.push_back(r);
          }
          if (kv_heads == 2 || det || last_kv == 160) {
            EXPECT_EQ(nb.buffer[kHdrNumQuadItems], 0);
            EXPECT_EQ(nb.order, dispatch_order(nb.plan));
            continue;
          }
          ASSERT_EQ(nb.buffer[kHdrNumQuadItems], 4);
          std::vector<int32_t> trailing;
          for (int k = 2; k < 6; ++k) {
            trailing.push_back(nb.plan.items[static_cast<size_t>(nb.order[k])].kv_request);
          }
          EXPECT_EQ(trailing, quad_requests);
          EXPECT_TRUE(deserialize_plan(nb.cap, nb.buffer).ok());
          expect_rejected(nb, kHdrNumQuadItems, 5, "is not a quad item");
          expect_rejected(nb, kHdrNumQuadItems, 7, "outside [0, 6]");
        }
      }
    }
  }
}

TEST(PlanBuffer, CapacityExceededLeavesBufferUnchanged) {
  const BatchLayout layout = five_decode_requests();
  const Result<Plan> plan = naive_plan(layout);
  ASSERT_TRUE(plan.ok());
  // Capacity for one row and one page: 1 + 1 = 2 items; the plan has 5 (one per request,
  // head-implicit).
  const PlanCapacity small{1, 1, 4, 2};
  const Result<PlanBufferLayout> l = plan_buffer_layout(small);
  ASSERT_TRUE(l.ok());
  std::vector<int32_t> buffer(static_cast<size_t>(l->total_int32), 3);
  const Status s = serialize_plan(*plan, small, buffer);
  EXPECT_EQ(s.code(), StatusCode::kResourceExhausted);
  EXPECT_NE(s.message().find("items: plan has 5, capacity 2"), std::string::npos) << s.message();
  EXPECT_EQ(buffer, std::vector<int32_t>(buffer.size(), 3));
  // A CTA queue count (8 CTAs / 2 heads = 4, the plan has 4 / 2 = 2) or a head count other
  // than the capacity's is a caller error.
  for (const PlanCapacity other : {PlanCapacity{5, 10, 8, 2}, PlanCapacity{5, 10, 4, 4}}) {
    const Result<PlanBufferLayout> lo = plan_buffer_layout(other);
    std::vector<int32_t> buffer2(static_cast<size_t>(lo->total_int32));
    const Status bad = serialize_plan(*plan, other, buffer2);
    EXPECT_EQ(bad.code(), StatusCode::kInvalidArgument);
    EXPECT_NE(bad.message().find(other.num_ctas == 8 ? "num_ctas" : "num_kv_heads"),
              std::string::npos)
        << bad.message();
  }
  // A buffer shorter than the layout.
  const PlanCapacity fit = capacity_of(layout, 4);
  std::vector<int32_t> short_buffer(10);
  EXPECT_EQ(serialize_plan(*plan, fit, short_buffer).code(), StatusCode::kInvalidArgument);
  // Malformed queues (dispatch_order walks them): an item index or a queue bound out of range.
  const Result<PlanBufferLayout> lf = plan_buffer_layout(fit);
  std::vector<int32_t> buffer3(static_cast<size_t>(lf->total_int32));
  Plan bad_item = *plan;
  bad_item.cta_items[0] = 5;
  Status st = serialize_plan(bad_item, fit, buffer3);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("cta_items[0] = 5"), std::string::npos) << st.message();
  Plan bad_bound = *plan;
  bad_bound.cta_indptr[1] = 9;
  st = serialize_plan(bad_bound, fit, buffer3);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("cta_indptr[1] = 9"), std::string::npos) << st.message();
}

TEST(PlanBuffer, DeserializeRejectsForeignBuffers) {
  const PlanCapacity cap{4, 4, 2, 1};
  const Result<PlanBufferLayout> l = plan_buffer_layout(cap);
  std::vector<int32_t> buffer(static_cast<size_t>(l->total_int32), 0);
  EXPECT_EQ(deserialize_plan(cap, buffer).status().code(), StatusCode::kInvalidArgument);
  buffer[kHdrMagic] = kPlanBufferMagic;
  buffer[kHdrVersion] = kPlanBufferVersion;
  buffer[kHdrNumCtas] = 2;
  buffer[kHdrNumKvHeads] = 1;
  buffer[kHdrNumItems] = l->max_items + 1;  // more items than the region holds
  EXPECT_EQ(deserialize_plan(cap, buffer).status().code(), StatusCode::kInvalidArgument);
}

// A dispatch region that is not a permutation of the items (one item twice) is rejected by
// name: a kernel claiming from it would run an item twice and another never.
TEST(PlanBuffer, DeserializeRejectsADispatchOrderThatIsNotAPermutation) {
  const BatchLayout layout = five_decode_requests();
  const Result<Plan> plan = naive_plan(layout);
  ASSERT_TRUE(plan.ok());
  const PlanCapacity cap = capacity_of(layout, 4);
  const Result<PlanBufferLayout> l = plan_buffer_layout(cap);
  std::vector<int32_t> buffer(static_cast<size_t>(l->total_int32));
  ASSERT_TRUE(serialize_plan(*plan, cap, buffer).ok());
  ASSERT_TRUE(deserialize_plan(cap, buffer).ok());
  buffer[l->off_dispatch + 1] = buffer[l->off_dispatch];
  const Result<Plan> back = deserialize_plan(cap, buffer);
  EXPECT_EQ(back.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(back.status().message().find("dispatch[1]"), std::string::npos)
      << back.status().message();
}

}  // namespace
}  // namespace packserve::attention
