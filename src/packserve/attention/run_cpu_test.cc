// run_cpu_test.cc: the CPU executor (run_cpu.h) on plans built by hand in this file (so the
// executor is tested independently of the planner; run_cpu_policy_test.cc covers make_plan's
// plans), against the float64 reference; the coverage counter on good and broken plans;
// bit-exactness across thread counts and across batches; rejection of malformed plans.
//
// Tolerance vs the reference (f32, f16 and bf16 inputs alike, since the reference reads the
// same rounded inputs and compute is f32 either way): |x - ref| <= 1e-6 + 1e-5 |ref|. The f32
// error sources are the 8-lane dot products (~1e-7 relative on scores of size ~1), exp2 and
// log2 (a few ulp), and sums of <= 6000 weights/weighted values whose rounding errors
// average out (~sqrt(n) ulp relative, < 1e-5 for n = 6000); 1e-6 absolute covers outputs
// near 0, which are averages of many values of size ~1.
#include "packserve/attention/run_cpu.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <map>
#include <set>
#include <string>

#include "packserve/attention/batch_spec.h"
#include "packserve/attention/reference.h"
#include "packserve/common/rng.h"
#include "testing/random_batch.h"

namespace packserve::attention {
namespace {

constexpr double kAtol = 1e-6;
constexpr double kRtol = 1e-5;

// --- Hand-built plans --------------------------------------------------------------------
Plan empty_plan_for(const BatchLayout& layout) {
  Plan plan;
  plan.policy = Policy::kNaive;
  plan.num_ctas = 1;
  plan.group_size = layout.group_size();
  plan.num_kv_heads = layout.num_kv_heads;
  plan.head_dim = layout.head_dim;
  plan.merge_indptr = {0};
  return plan;
}

// Adds an item over rows (global, ascending) and kv range via request kv_request.
void add_item(Plan& plan, const std::vector<int32_t>& rows, int kv_request, int kv_begin,
              int kv_end) {
  WorkItem item;
  item.rows_begin = static_cast<int32_t>(plan.item_rows.size());
  plan.item_rows.insert(plan.item_rows.end(), rows.begin(), rows.end());
  item.rows_end = static_cast<int32_t>(plan.item_rows.size());
  item.kv_request = kv_request;
  item.kv_begin = kv_begin;
  item.kv_end = kv_end;
  plan.items.push_back(item);
}

// Completes a plan whose items have rows and KV ranges (head-implicit, plan.h): an item
// writes_final when each of its rows has no other item; the others get partial slots (item
// order), and every row they touch gets a merge entry (by row) listing its slots in
// ascending kv_begin, possibly a single slot; all items on CTA 0.
void finish(Plan& plan, const BatchLayout& layout) {
  std::vector<std::vector<int>> items_of(static_cast<size_t>(layout.total_rows()));
  for (int i = 0; i < static_cast<int>(plan.items.size()); ++i) {
    const WorkItem& item = plan.items[i];
    for (int k = item.rows_begin; k < item.rows_end; ++k) {
      items_of[plan.item_rows[k]].push_back(i);
    }
  }
  std::vector<std::vector<int>> slot_of(plan.items.size());  // per item, per row
  for (int i = 0; i < static_cast<int>(plan.items.size()); ++i) {
    WorkItem& item = plan.items[i];
    item.writes_final = true;
    for (int k = item.rows_begin; k < item.rows_end; ++k) {
      item.writes_final = item.writes_final && items_of[plan.item_rows[k]].size() == 1;
    }
    if (!item.writes_final) {
      item.partial_begin = plan.num_partial_slots;
      plan.num_partial_slots += item.num_rows();
    }
  }
  for (size_t row = 0; row < items_of.size(); ++row) {
    std::vector<int> its = items_of[row];
    if (its.empty() || (its.size() == 1 && plan.items[its[0]].writes_final)) continue;
    std::sort(its.begin(), its.end(),
              [&](int a, int b) { return plan.items[a].kv_begin < plan.items[b].kv_begin; });
    plan.merge_row.push_back(static_cast<int32_t>(row));
    for (int i : its) {
      const WorkItem& item = plan.items[i];
      const auto row_it = std::find(plan.item_rows.begin() + item.rows_begin,
                                    plan.item_rows.begin() + item.rows_end, row);
      plan.merge_slots.push_back(item.partial_begin +
                                 static_cast<int32_t>(row_it - plan.item_rows.begin()) -
                                 item.rows_begin);
    }
    plan.merge_indptr.push_back(static_cast<int32_t>(plan.merge_slots.size()));
  }
  plan.cta_indptr = {0, static_cast<int32_t>(plan.items.size())};
  plan.cta_items.resize(plan.items.size());
  for (size_t i = 0; i < plan.items.size(); ++i) plan.cta_items[i] = static_cast<int32_t>(i);
}

// Rows of request r whose position is >= kv_begin (they see >= 1 key of a range from there).
std::vector<int32_t> rows_seeing(const BatchLayout& layout, int r, int kv_begin) {
  std::vector<int32_t> rows;
  for (int i = 0; i < layout.q_len(r); ++i) {
    if (layout.row_position(r, i) >= kv_begin) rows.push_back(layout.qo_indptr[r] + i);
  }
  return rows;
}

// Splits each request's KV at cut points that depend only on the request (seeded by its
// kv_len), `max_parts` pieces at most; max_parts 1 gives one whole-KV item per request.
Plan split_plan(const BatchLayout& layout, int max_parts) {
  Plan plan = empty_plan_for(layout);
  for (int r = 0; r < layout.batch_size(); ++r) {
    Rng rng(static_cast<uint64_t>(layout.kv_len(r)) * 7919u + 1u);
    const int kv_len = layout.kv_len(r);
    std::vector<int> cuts = {0, kv_len};
    const int parts = static_cast<int>(rng.uniform_int(1, std::min(max_parts, kv_len)));
    while (static_cast<int>(cuts.size()) < parts + 1) {
      const int c = static_cast<int>(rng.uniform_int(1, kv_len - 1));
      if (std::find(cuts.begin(), cuts.end(), c) == cuts.end()) cuts.push_back(c);
    }
    std::sort(cuts.begin(), cuts.end());
    for (size_t p = 0; p + 1 < cuts.size(); ++p) {
      const std::vector<int32_t> rows = rows_seeing(layout, r, cuts[p]);
      if (!rows.empty()) add_item(plan, rows, r, cuts[p], cuts[p + 1]);
    }
  }
  finish(plan, layout);
  return plan;
}

// Requests with the same first page share one item over their common leading pages (all
// their rows), then one item per request over the rest: the prefix-sharing shape.
Plan shared_prefix_plan(const BatchLayout& layout) {
  Plan plan = empty_plan_for(layout);
  std::vector<char> done(layout.batch_size(), 0);
  for (int r = 0; r < layout.batch_size(); ++r) {
    if (done[r]) continue;
    std::vector<int> group;
    for (int s = r; s < layout.batch_size(); ++s) {
      if (!done[s] && layout.kv_page_indices[layout.kv_page_indptr[s]] ==
                          layout.kv_page_indices[layout.kv_page_indptr[r]]) {
        group.push_back(s);
        done[s] = 1;
      }
    }
    // Shared tokens: common leading pages, within every member's first query position (so
    // every row sees the whole shared range).
    int shared_pages = layout.num_pages_of(r);
    for (int s : group) {
      int k = 0;
      while (k < std::min(shared_pages, layout.num_pages_of(s)) &&
             layout.kv_page_indices[layout.kv_page_indptr[s] + k] ==
                 layout.kv_page_indices[layout.kv_page_indptr[r] + k]) {
        ++k;
      }
      shared_pages = std::min(k, (layout.kv_len(s) - layout.q_len(s) + 1) / layout.page_size);
    }
    const int shared = group.size() >= 2 ? shared_pages * layout.page_size : 0;
    if (shared > 0) {
      std::vector<int32_t> rows;
      for (int s : group) {
        for (int i = 0; i < layout.q_len(s); ++i) rows.push_back(layout.qo_indptr[s] + i);
      }
      std::sort(rows.begin(), rows.end());
      add_item(plan, rows, group[0], 0, shared);
    }
    for (int s : group) {
      const std::vector<int32_t> rows = rows_seeing(layout, s, shared);
      if (!rows.empty() && shared < layout.kv_len(s)) {
        add_item(plan, rows, s, shared, layout.kv_len(s));
      }
    }
  }
  finish(plan, layout);
  return plan;
}

// --- Helpers --------------------------------------------------------------------------------
std::vector<float> run(const Plan& plan, const BatchData& data, int threads = 1) {
  std::vector<float> out(data.layout.q_elements(), std::numeric_limits<float>::quiet_NaN());
  const Status s = run_cpu(plan, data.layout, data.tensors(), out, RunCpuOptions{threads});
  EXPECT_TRUE(s.ok()) << s.to_string();
  return out;
}

BatchData build(const BatchSpec& spec) {
  Result<BatchData> data = build_batch(spec);
  PS_CHECK(data.ok()) << data.status().to_string() << " spec " << to_json(spec);
  return std::move(data).value();
}

void expect_matches_reference(const BatchData& data, const std::vector<float>& out) {
  const Result<std::vector<double>> ref = reference_attention(data.layout, data.tensors());
  ASSERT_TRUE(ref.ok()) << ref.status().to_string();
  const OutputComparison c = compare_with_reference(data.layout, out, *ref, kAtol, kRtol);
  EXPECT_TRUE(c.ok) << c.num_failed << " elements fail, first: " << c.first_failure;
}

constexpr int kNumRandomBatches = 24;

TEST(RunCpu, WholeKvPlanMatchesReference) {
  for (uint64_t seed = 1; seed <= kNumRandomBatches; ++seed) {
    const BatchSpec spec = testing::random_batch_spec(seed);
    SCOPED_TRACE("seed " + std::to_string(seed) + " spec " + to_json(spec));
    const BatchData data = build(spec);
    const Plan plan = split_plan(data.layout, 1);
    ASSERT_TRUE(count_coverage(plan, data.layout).ok());
    expect_matches_reference(data, run(plan, data));
  }
}

TEST(RunCpu, SplitKvPlanWithMergesMatchesReference) {
  for (uint64_t seed = 100; seed < 100 + kNumRandomBatches; ++seed) {
    const BatchSpec spec = testing::random_batch_spec(seed);
    SCOPED_TRACE("seed " + std::to_string(seed) + " spec " + to_json(spec));
    const BatchData data = build(spec);
    const Plan plan = split_plan(data.layout, 5);
    const Status coverage = count_coverage(plan, data.layout);
    ASSERT_TRUE(coverage.ok()) << coverage.to_string();
    expect_matches_reference(data, run(plan, data, 2));
  }
}

TEST(RunCpu, SharedPrefixPlanMatchesReference) {
  int shared_items = 0;
  for (uint64_t seed = 200; seed < 200 + kNumRandomBatches; ++seed) {
    const BatchSpec spec = testing::random_batch_spec(seed);
    SCOPED_TRACE("seed " + std::to_string(seed) + " spec " + to_json(spec));
    const BatchData data = build(spec);
    const Plan plan = shared_prefix_plan(data.layout);
    for (const WorkItem& item : plan.items) {
      const int r0 = request_of_row(data.layout, plan.item_rows[item.rows_begin]);
      const int r1 = request_of_row(data.layout, plan.item_rows[item.rows_end - 1]);
      shared_items += r0 != r1;
    }
    const Status coverage = count_coverage(plan, data.layout);
    ASSERT_TRUE(coverage.ok()) << coverage.to_string();
    expect_matches_reference(data, run(plan, data));
  }
  EXPECT_GT(shared_items, 0) << "the generator drew no shared prefix: the test is vacuous";
}

// A float8 KV cache: K and V are e4m3 bytes, which the executor reads exactly (as the
// reference does), so the tolerance is that of the 16-bit inputs.
TEST(RunCpu, Fp8KvPlanWithMergesMatchesReference) {
  testing::RandomBatchOptions fp8;
  fp8.kv_fp8 = true;
  for (uint64_t seed = 150; seed < 150 + kNumRandomBatches / 2; ++seed) {
    const BatchSpec spec = testing::random_batch_spec(seed, fp8);
    SCOPED_TRACE("seed " + std::to_string(seed) + " spec " + to_json(spec));
    const BatchData data = build(spec);
    ASSERT_TRUE(data.layout.kv_fp8);
    ASSERT_EQ(data.k_pages.size(), data.layout.kv_page_elements());  // one byte each
    expect_matches_reference(data, run(split_plan(data.layout, 3), data, 2));
  }
}

// The CPU backend's float8 KV cache: f32 queries over e4m3 pages with per-layer scales. Oracle:
// the reference over the unscaled bytes with sm_scale * k_scale, times v_scale (the scales
// folded by hand, as the CUDA kernel folds them), so the executor's scaled decoding table is
// checked against arithmetic that does not use it. Each table entry is the product rounded
// once to f32 (relative 2^-24), far inside the tolerance.
TEST(RunCpu, Fp8KvWithF32QueriesAndScalesMatchesFoldedReference) {
  testing::RandomBatchOptions fp8;
  fp8.kv_fp8 = true;
  const float k_scale = 0.37f, v_scale = 1.9f;
  for (uint64_t seed = 170; seed < 170 + kNumRandomBatches / 2; ++seed) {
    BatchSpec spec = testing::random_batch_spec(seed, fp8);
    spec.dtype = DType::kF32;
    SCOPED_TRACE("seed " + std::to_string(seed) + " spec " + to_json(spec));
    const BatchData data = build(spec);
    ASSERT_EQ(data.q.size(), data.layout.q_elements() * 4);
    AttentionTensors scaled = data.tensors();
    scaled.k_scale = k_scale;
    scaled.v_scale = v_scale;
    std::vector<float> out(data.layout.q_elements(), std::numeric_limits<float>::quiet_NaN());
    const Status s = run_cpu(split_plan(data.layout, 3), data.layout, scaled, out, {2});
    ASSERT_TRUE(s.ok()) << s.to_string();
    AttentionTensors folded = data.tensors();
    folded.sm_scale *= k_scale;
    Result<std::vector<double>> ref = reference_attention(data.layout, folded);
    ASSERT_TRUE(ref.ok()) << ref.status().to_string();
    for (double& x : *ref) x *= v_scale;
    const OutputComparison c = compare_with_reference(data.layout, out, *ref, kAtol, kRtol);
    EXPECT_TRUE(c.ok) << c.num_failed << " elements fail, first: " << c.first_failure;
    // The reference's own scales agree with the folded ones.
    const Result<std::vector<double>> direct = reference_attention(data.layout, scaled);
    ASSERT_TRUE(direct.ok());
    const OutputComparison d = compare_with_reference(
        data.layout, std::vector<float>(direct->begin(), direct->end()), *ref, kAtol, kRtol);
    EXPECT_TRUE(d.ok) << d.first_failure;
  }
}

TEST(RunCpu, ThreadCountDoesNotChangeBits) {
  for (uint64_t seed = 300; seed < 306; ++seed) {
    const BatchData data = build(testing::random_batch_spec(seed));
    const Plan plan = split_plan(data.layout, 4);
    const std::vector<float> one = run(plan, data, 1);
    for (int threads : {2, 3, 8}) {
      const std::vector<float> many = run(plan, data, threads);
      EXPECT_EQ(std::memcmp(one.data(), many.data(), one.size() * 4), 0)
          << "seed " << seed << " threads " << threads;
    }
  }
}

// A request's output bits do not depend on the rows around it: with splits depending only on
// the request, the same request inserted into different batches gives the same bits.
TEST(RunCpu, RequestBitsIndependentOfTheRestOfTheBatch) {
  for (uint64_t seed = 400; seed < 408; ++seed) {
    SCOPED_TRACE("seed " + std::to_string(seed));
    testing::RandomBatchOptions small;
    small.max_requests = 3;
    const BatchSpec alone_spec = testing::random_batch_spec(seed, small);
    testing::RandomBatchOptions same_shape;
    same_shape.num_qo_heads = alone_spec.num_qo_heads;
    same_shape.num_kv_heads = alone_spec.num_kv_heads;
    same_shape.head_dim = alone_spec.head_dim;
    same_shape.page_size = alone_spec.page_size;
    same_shape.dtypes = {alone_spec.dtype};
    const BatchSpec others_spec = testing::random_batch_spec(seed + 1000, same_shape);
    const BatchData alone = build(alone_spec);
    const BatchData others = build(others_spec);
    const int at = others.layout.batch_size() / 2;
    Result<BatchData> mixed = testing::insert_batch(others, alone, at);
    ASSERT_TRUE(mixed.ok()) << mixed.status().to_string();
    for (int max_parts : {1, 4}) {
      const std::vector<float> a = run(split_plan(alone.layout, max_parts), alone);
      const std::vector<float> b = run(split_plan(mixed->layout, max_parts), *mixed, 2);
      const size_t offset = static_cast<size_t>(mixed->layout.qo_indptr[at]) *
                            alone.layout.num_qo_heads * alone.layout.head_dim;
      EXPECT_EQ(std::memcmp(a.data(), b.data() + offset, a.size() * 4), 0)
          << "max_parts " << max_parts;
    }
  }
}

// The harness can fail: a plan that forgets a row leaves NaN, which the comparison reports
// with the coordinates of the first bad element.
TEST(RunCpu, UnwrittenRowIsReportedWithItsCoordinates) {
  const BatchData data = build(testing::random_batch_spec(7));
  Plan plan = split_plan(data.layout, 1);
  plan.items.pop_back();  // the last item writes the last request's rows of the last head
  finish(plan, data.layout);
  const std::vector<float> out = run(plan, data);
  const Result<std::vector<double>> ref = reference_attention(data.layout, data.tensors());
  ASSERT_TRUE(ref.ok());
  const OutputComparison c = compare_with_reference(data.layout, out, *ref, kAtol, kRtol);
  EXPECT_FALSE(c.ok);
  EXPECT_GT(c.num_nonfinite, 0);
  const int last = data.layout.batch_size() - 1;
  EXPECT_NE(c.first_failure.find("request " + std::to_string(last) + " row 0"), std::string::npos)
      << c.first_failure;
  const Status coverage = count_coverage(plan, data.layout);
  EXPECT_EQ(coverage.code(), StatusCode::kInternal);
  EXPECT_NE(coverage.message().find("covered 0 times"), std::string::npos) << coverage.message();
}

// --- Malformed plans and inputs: an error naming the culprit, and `out` left untouched.
BatchData tiny_batch() {
  BatchSpec spec;  // 2 requests, no sharing: r0 rows at positions 38, 39; r1 at 21..23
  spec.num_qo_heads = 2;
  spec.num_kv_heads = 1;
  spec.head_dim = 64;
  spec.page_size = 16;
  spec.dtype = DType::kF32;
  spec.seed = 9;
  spec.requests = {{2, 40, ""}, {3, 24, ""}};
  return build(spec);
}

void expect_run_rejected(const Plan& plan, const BatchData& data, const std::string& needle,
                         size_t out_size = 0, int threads = 1) {
  std::vector<float> out(out_size ? out_size : data.layout.q_elements(), -7.0f);
  const Status s = run_cpu(plan, data.layout, data.tensors(), out, RunCpuOptions{threads});
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s.to_string();
  EXPECT_NE(s.message().find(needle), std::string::npos)
      << "message \"" << s.message() << "\" does not name \"" << needle << "\"";
  EXPECT_TRUE(std::all_of(out.begin(), out.end(), [](float x) { return x == -7.0f; }));
}

TEST(RunCpuRejects, MalformedInputsAndPlans) {
  const BatchData data = tiny_batch();
  const Plan good = split_plan(data.layout, 3);
  ASSERT_TRUE(count_coverage(good, data.layout).ok());
  expect_run_rejected(good, data, "out: ", data.layout.q_elements() - 1);
  expect_run_rejected(good, data, "num_threads = 0", 0, 0);
  {
    BatchData short_k = tiny_batch();
    short_k.k_pages.pop_back();
    expect_run_rejected(good, short_k, "k_pages");
  }
  {
    AttentionTensors scaled = data.tensors();  // a scale over pages that are not float8
    scaled.v_scale = 0.5f;
    std::vector<float> out(data.layout.q_elements(), -7.0f);
    const Status s = run_cpu(good, data.layout, scaled, out);
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
    EXPECT_EQ(s.message(), "v_scale = 0.500000: expected 1 (the pages are not float8)");
  }
  Plan p = good;
  p.group_size = 1;
  expect_run_rejected(p, data, "plan: group_size");
  p = good;
  p.items[0].kv_end = data.layout.kv_len(p.items[0].kv_request) + 1;
  expect_run_rejected(p, data, "plan.items[0].kv = [");
  p = good;
  p.item_rows[0] = data.layout.total_rows();
  expect_run_rejected(p, data, "expected a query row");
  p = good;
  p.items[0].rows_end = static_cast<int32_t>(p.item_rows.size()) + 1;
  expect_run_rejected(p, data, "plan.items[0].rows");
  p = good;
  p.num_partial_slots = 0;
  expect_run_rejected(p, data, "num_partial_slots");
  p = good;
  ASSERT_GT(p.num_merges(), 0);
  p.merge_slots[0] = p.num_partial_slots;
  expect_run_rejected(p, data, "outside [0, num_partial_slots");
  p = good;
  p.merge_indptr.pop_back();
  expect_run_rejected(p, data, "merge_indptr must have");
  // The same (row, head) output produced twice: a data race if it ran, so it is refused.
  Plan twice = split_plan(data.layout, 1);
  twice.items.push_back(twice.items[0]);
  expect_run_rejected(twice, data, "written twice");
}

// count_coverage fails on each kind of incomplete or inconsistent plan, naming the culprit.
void expect_coverage_error(const Plan& plan, const BatchLayout& layout, const std::string& needle) {
  const Status s = count_coverage(plan, layout);
  EXPECT_EQ(s.code(), StatusCode::kInternal) << s.to_string();
  EXPECT_NE(s.message().find(needle), std::string::npos)
      << "message \"" << s.message() << "\" does not name \"" << needle << "\"";
}

TEST(CountCoverage, FindsEveryKindOfViolation) {
  const BatchData data = tiny_batch();
  const BatchLayout& l = data.layout;
  const std::vector<int32_t> r0 = {0, 1}, r1 = {2, 3, 4};
  {  // keys [10, 20) of request 0 covered twice
    Plan p = empty_plan_for(l);
    add_item(p, r0, 0, 0, 40);
    add_item(p, r0, 0, 10, 20);
    add_item(p, r1, 1, 0, 24);
    finish(p, l);
    expect_coverage_error(p, l,
                          "row 0 (request 0, position 38), every qo head, key 10: "
                          "covered 2 times by items 0, 1");
  }
  {  // request 1's rows read request 0's pages
    Plan p = empty_plan_for(l);
    add_item(p, r0, 0, 0, 40);
    add_item(p, r1, 0, 0, 24);
    finish(p, l);
    expect_coverage_error(p, l, "whose page at key 0");
  }
  {  // row 0 (position 38) sees none of [39, 40)
    Plan p = empty_plan_for(l);
    add_item(p, r0, 0, 0, 39);
    add_item(p, r0, 0, 39, 40);
    add_item(p, r1, 1, 0, 24);
    finish(p, l);
    expect_coverage_error(p, l, "sees none of its keys [39, 40)");
  }
  const Plan split = split_plan(l, 3);
  ASSERT_GT(split.num_merges(), 1);
  {  // the last merge entry dropped: its slots are never merged
    Plan p = split;
    p.merge_row.pop_back();
    p.merge_indptr.pop_back();
    p.merge_slots.resize(p.merge_indptr.back());
    expect_coverage_error(p, l, "is written but never merged");
  }
  {  // two merge entries swap their first slots: each reads another row's state
    Plan p = split;
    std::swap(p.merge_slots[p.merge_indptr[0]], p.merge_slots[p.merge_indptr[1]]);
    expect_coverage_error(p, l, "belongs to row");
  }
}

// The generator really draws the shapes and edges the property tests rely on.
TEST(RandomBatchGenerator, DrawsEveryShapeAndEdgeCase) {
  std::set<std::string> seen;
  for (uint64_t seed = 1; seed <= 300; ++seed) {
    const BatchSpec spec = testing::random_batch_spec(seed);
    ASSERT_TRUE(validate_spec(spec).ok())
        << "seed " << seed << ": " << validate_spec(spec).to_string();
    const int ps = spec.page_size;
    seen.insert("page_size " + std::to_string(ps));
    seen.insert("group " + std::to_string(spec.num_qo_heads / spec.num_kv_heads));
    seen.insert("head_dim " + std::to_string(spec.head_dim));
    seen.insert("dtype " + std::string(dtype_name(spec.dtype)));
    std::map<std::string, std::pair<std::string, int>> nodes;  // id -> (parent, len)
    for (const PrefixSpec& n : spec.prefixes) nodes[n.id] = {n.parent, n.len};
    const auto chain = [&](std::string id, int& depth) {
      int len = 0;
      for (depth = 0; !id.empty(); ++depth) {
        len += nodes[id].second;
        id = nodes[id].first;
      }
      return len;
    };
    for (const PrefixSpec& n : spec.prefixes) {
      int depth = 0;
      chain(n.id, depth);
      seen.insert("prefix depth " + std::to_string(depth));
      if (n.len == ps) seen.insert("one-page node");
    }
    int max_kv = 0, short_kv = 0;
    for (const RequestSpec& r : spec.requests) {
      int depth = 0;
      const int prefix_len = chain(r.prefix, depth);
      const int own = r.kv_len - prefix_len;
      if (r.q_len == 1) seen.insert("decode");
      if (r.q_len > 1 && r.q_len == own) seen.insert("full prefill");
      if (r.q_len < own && r.q_len > 1) seen.insert("chunked prefill");
      if (prefix_len > 0 && own == r.q_len) seen.insert("all pages shared");
      if (r.prefix.empty() && std::abs(r.kv_len - ps) <= 1 && ps > 1) {
        seen.insert("kv_len = page_size " + std::to_string(r.kv_len - ps));
      }
      if (r.kv_len > max_kv) {
        short_kv = std::max(short_kv, max_kv);
        max_kv = r.kv_len;
      } else {
        short_kv = std::max(short_kv, r.kv_len);
      }
    }
    if (spec.requests.size() >= 4 && max_kv >= 4 * short_kv) seen.insert("one long request");
  }
  for (const char* expected : {"page_size 1",
                               "page_size 16",
                               "page_size 64",
                               "group 1",
                               "group 4",
                               "group 8",
                               "head_dim 64",
                               "head_dim 128",
                               "head_dim 256",
                               "dtype f32",
                               "dtype f16",
                               "dtype bf16",
                               "prefix depth 1",
                               "prefix depth 2",
                               "prefix depth 3",
                               "one-page node",
                               "decode",
                               "full prefill",
                               "chunked prefill",
                               "all pages shared",
                               "kv_len = page_size -1",
                               "kv_len = page_size 0",
                               "kv_len = page_size 1",
                               "one long request"}) {
    EXPECT_TRUE(seen.count(expected)) << "never drawn in 300 seeds: " << expected;
  }
}

}  // namespace
}  // namespace packserve::attention
