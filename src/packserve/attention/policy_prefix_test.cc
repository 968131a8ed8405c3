// policy_prefix_test.cc: the prefix policy (seed 002): a golden plan of a small tree, KV
// traffic derived by hand from the tree and the query-tile capacity, the PAT §8.2
// configurations, equality with the balanced plan's traffic when nothing is shared,
// TreeHeuristic's merge scheme, and determinism across batches.
#include <gtest/gtest.h>

#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "packserve/attention/plan.h"
#include "packserve/attention/plan_stats.h"
#include "packserve/attention/plan_test_util.h"

namespace packserve::attention {
namespace {

using testing::LayoutBuilder;
using testing::pat_tree;
using testing::random_layout;
using testing::RandomLayoutOptions;
using testing::request_signature;

Plan plan_of(const BatchLayout& layout, Policy policy, int num_ctas, bool det = false,
             int det_chunk = 1024, const CostModel& cost = CostModel{}) {
  PlanOptions options;
  options.policy = policy;
  options.cost = cost;
  options.deterministic = det;
  options.deterministic_kv_chunk_tokens = det_chunk;
  Result<Plan> plan = make_plan(layout, DeviceShape{num_ctas}, options);
  EXPECT_TRUE(plan.ok()) << plan.status().to_string();
  if (!plan.ok()) return Plan{};
  const Status s = check_invariants(*plan, layout);
  EXPECT_TRUE(s.ok()) << s.to_string();
  return *plan;
}

// Bytes of K and V of one token of one KV head.
int64_t token_bytes(const BatchLayout& l) {
  return 2 * static_cast<int64_t>(l.head_dim) * static_cast<int64_t>(dtype_size_bytes(l.dtype));
}

TEST(PrefixPolicy, GoldenSmallTree) {
  // g = 1, 1 kv head, page 16, 2 CTAs. A 64-token (4-page) prefix shared by three decode
  // requests: r0 kv 84, r1 kv 104, r2 kv 80. Shareable pages (before the query row):
  // (84-1)/16 = 5, (104-1)/16 = 6, (80-1)/16 = 4: common run = pages [0,4) -> node [0,64);
  // leaves r0 [64,84), r1 [64,104), r2 [64,80).
  // TreeHeuristic: each child has 1 folded row; 4 * 1 > 64 is false -> scheme 1 (split):
  // the root pack holds rows 0,1,2 over [0,64), located through r0 (the group's first).
  // Mean pack length (64 + 20 + 40 + 16) / 4 = 35: the root (64) and r1 (40) exceed it, but
  // a part is at least 128 tokens, so nothing is cut.
  // LPT on 2 CTAs (kHandCost: folded rows + keys), longest first: root (cost 3 + 64 = 67) -> cta 0;
  // r1 (41) -> cta 1; r0 (21) -> cta 1 (41 < 67) = 62; r2 (17) -> cta 1 (62 < 67). Tiles: q 3 rows
  // -> 16; kv 64 -> 32 (2*64 > 64), 40 -> 32, 20 -> 32, 16 -> 32. Each row has two items ->
  // partial: root slots 0,1,2; r1 slot 3; r0 slot 4; r2 slot 5.
  LayoutBuilder b(1, 1, 64, 16);
  const std::vector<int32_t> prefix = b.new_pages(4);
  b.add(prefix, 84, 1);
  b.add(prefix, 104, 1);
  b.add(prefix, 80, 1);
  const std::string expected =
      "plan policy=prefix deterministic=0 queues=2 group=1 kv_heads=1 head_dim=64 "
      "partial_slots=6\n"
      "item 0: cta=0 rows=[0,1,2] kv=r0[0,64) tile=16x32 partial@0\n"
      "item 1: cta=1 rows=[1] kv=r1[64,104) tile=16x32 partial@3\n"
      "item 2: cta=1 rows=[0] kv=r0[64,84) tile=16x32 partial@4\n"
      "item 3: cta=1 rows=[2] kv=r2[64,80) tile=16x32 partial@5\n"
      "merge 0: row=0 slots=[0,4]\n"
      "merge 1: row=1 slots=[1,3]\n"
      "merge 2: row=2 slots=[2,5]\n"
      "cta 0: [0]\n"
      "cta 1: [1,2,3]\n";
  const Plan plan = plan_of(b.layout(), Policy::kPrefix, 2, false, 1024, testing::kHandCost);
  EXPECT_EQ(to_text(plan), expected);
  // Every token read exactly once: read == unique.
  const PlanStats stats = compute_plan_stats(plan, b.layout());
  EXPECT_EQ(stats.kv_bytes_read, 140 * token_bytes(b.layout()));
  EXPECT_EQ(stats.kv_bytes_unique, 140 * token_bytes(b.layout()));
}

TEST(PrefixPolicy, SharedNodeReadOncePerQueryTile) {
  // g = 8 (8 qo heads, 1 kv head), page 16: a 256-token prefix shared by 20 decode requests,
  // each with 10 own tokens (kv 266). 20 rows fold to 160 > 128 vectors, so the root pack
  // needs 2 query tiles (16 rows, then 4 rows): the node is read twice.
  // TreeHeuristic: each leaf has 8 folded rows, 4 * 8 = 32 <= 256 -> split.
  // Mean = (256 + 256 + 20 * 10) / 22 = 32.4: each root tile is cut into parts of
  // max(ceil(256 / 8), 128) = 128 tokens, which moves no byte.
  // kv read = 2 tiles * 256 + 20 * 10 = 712 tokens; unique = 256 + 20 * 10 = 456 tokens.
  LayoutBuilder b(8, 1, 128, 16);
  const std::vector<int32_t> prefix = b.new_pages(16);
  for (int i = 0; i < 20; ++i) b.add(prefix, 266, 1);
  const Plan plan = plan_of(b.layout(), Policy::kPrefix, 8, false, 1024, testing::kHandCost);
  const PlanStats stats = compute_plan_stats(plan, b.layout());
  EXPECT_EQ(stats.kv_bytes_read, 712 * token_bytes(b.layout()));
  EXPECT_EQ(stats.kv_bytes_unique, 456 * token_bytes(b.layout()));
  EXPECT_EQ(stats.num_work_items, 2 * 2 + 20);
}

TEST(PrefixPolicy, MergeSchemeWhenChildHasManyQueries) {
  // g = 4, page 16. Root 32 tokens (2 pages) shared by child A (16 more tokens) with 8 decode
  // leaves and by one request B whose next 64 tokens are its own. Every A leaf has 5 own
  // tokens (kv 53); B has kv 101, so B's leaf (no other request shares its pages) is
  // [32, 101).
  // At the root (len 32): A has 8 * 4 = 32 folded rows, 4 * 32 = 128 > 32 -> merge (scheme 2):
  // A's pack reads [0, 48). B's leaf has 4 folded rows, 16 > 32 is false -> split.
  // Inside A (pack len 48): each leaf has 4 folded rows, 16 > 48 false -> split.
  // Packs: root [0,32) rows {B}; A [0,48) rows {8 A leaves}; A leaves [48,53); B [32,101).
  // Mean (32 + 48 + 8 * 5 + 69) / 11 = 17.2, but parts are >= 128 tokens: no cut.
  // KV read = 32 + 48 + 8 * 5 + 69 = 189 tokens; unique = 32 + 16 + 8 * 5 + 69 = 157: the
  // root is read by the root pack and again by A's merged pack.
  LayoutBuilder b(4, 1, 64, 16);
  const std::vector<int32_t> root = b.new_pages(2);
  std::vector<int32_t> a = root;
  std::vector<int32_t> more = b.new_pages(1);
  a.insert(a.end(), more.begin(), more.end());
  std::vector<int32_t> c = root;
  more = b.new_pages(4);
  c.insert(c.end(), more.begin(), more.end());
  for (int i = 0; i < 8; ++i) b.add(a, 48 + 5, 1);
  const int leaf_b = b.add(c, 96 + 5, 1);
  const Plan plan = plan_of(b.layout(), Policy::kPrefix, 4);
  const PlanStats stats = compute_plan_stats(plan, b.layout());
  EXPECT_EQ(stats.kv_bytes_unique, 157 * token_bytes(b.layout()));
  EXPECT_EQ(stats.kv_bytes_read, 189 * token_bytes(b.layout()));
  // B's row is merged from [0,32) and [32,101): two slots; an A row from [0,48), [48,53).
  ASSERT_EQ(plan.num_merges(), 9);
  for (int e = 0; e < plan.num_merges(); ++e) {
    EXPECT_EQ(plan.merge_indptr[e + 1] - plan.merge_indptr[e], 2) << "row " << plan.merge_row[e];
  }
  EXPECT_EQ(plan.merge_row[8], leaf_b);
}

TEST(PrefixPolicy, PatTreeReadsAlmostOnlyUniqueKv) {
  // PAT §8.2 B = [1, 4, 16], L = [128, 256, 1024], 32/8 heads (g = 4), page 16. Every child
  // has 4 leaves (16 folded rows): 4 * 16 = 64 <= 128 -> split; every leaf: 16 <= 256 ->
  // split. So each node is read once: read = unique = 128 + 4 * 256 + 16 * 1024 tokens/head.
  const BatchLayout layout = pat_tree({{1, 128}, {4, 256}, {16, 1024}}, 32, 8, 128, 16);
  const Plan plan = plan_of(layout, Policy::kPrefix, 132);
  const PlanStats stats = compute_plan_stats(plan, layout);
  EXPECT_EQ(stats.kv_bytes_unique, (128 + 4 * 256 + 16 * 1024) * 8 * token_bytes(layout));
  EXPECT_LE(static_cast<double>(stats.kv_bytes_read),
            1.2 * static_cast<double>(stats.kv_bytes_unique));
}

// Step 5 cuts a pack to a queue's share of the cost. B = [1, 256], L = [4096, 128], g = 4:
// 8 root tiles of 32 rows (128 folded) and 256 leaves (4 folded, 128 keys).
// kHandCost (F + w len, w = 2 for a 128-row tile): total 8 (128 + 2 * 4096) + 256 (4 + 128)
// = 100352. On 33 queues (264 CTAs / 8 heads) the share is 3041, a root tile may take
// (3041 - 128) / 2 = 1456 keys -> 3 parts of 1376, 1376, 1344; on 132 queues the share is 760
// -> 316 keys -> 13 parts of 320 (the last 256).
// Default model (96 per item, w = 1.5): total 8 (96 + 128 + 1.5 * 4096) + 256 (96 + 4 + 128)
// = 109312. On 33 queues the share is 3312.5, a root tile may take (3312.5 - 224) / 1.5 =
// 2059 keys -> 2 parts of 2048 (3296 each), but the 256 leaves are quad items there (>= 4 per
// queue), which the makespan costs 12 + 4 + 128 = 144 (CostModel::quad): 2 parts' makespan is
// 3296, 0.8 times the share's 3 parts of 1376, 1376, 1344 (2288 each) 2864, kept (costed as
// single items, 228 each, 3524 and 3608 would keep 2 parts); on 132 queues 256 leaves are
// fewer than 4 per queue (no quad items), the share 828.1 -> 402.7 keys -> 11 parts of
// round_up(ceil(4096 / 11), 16) = 384 (the last 256), LPT makespan 1028, but 1.25 times the
// share gives 540.7 keys -> 8 parts of 512, makespan 992 (8 x 992 on 64 queues, four leaves
// of 228 on each other queue), which the search keeps. Leaves fit their share and stay whole.
// (With the hand model no other multiple has a shorter makespan: the share's cut stays.)
TEST(PrefixPolicy, LongKvSplitFollowsTheQueueShare) {
  const BatchLayout layout = pat_tree({{1, 4096}, {256, 128}}, 32, 8, 128, 16);
  struct Case {
    CostModel cost;
    int ctas;
    std::vector<int> bounds;
  };
  for (const Case& c :
       {Case{testing::kHandCost, 264, {0, 1376, 2752, 4096}},
        Case{testing::kHandCost,
             1056,
             {0, 320, 640, 960, 1280, 1600, 1920, 2240, 2560, 2880, 3200, 3520, 3840, 4096}},
        Case{CostModel{}, 264, {0, 1376, 2752, 4096}},
        Case{CostModel{}, 1056, {0, 512, 1024, 1536, 2048, 2560, 3072, 3584, 4096}}}) {
    const int ctas = c.ctas;
    const std::vector<int>& bounds = c.bounds;
    SCOPED_TRACE("ctas " + std::to_string(ctas) + " item cost " + std::to_string(c.cost.item));
    const Plan plan = plan_of(layout, Policy::kPrefix, ctas, false, 1024, c.cost);
    std::map<std::pair<int, int>, int> root_parts;  // [begin, end) -> items (one per tile)
    int leaves = 0;
    for (const WorkItem& it : plan.items) {
      if (it.num_rows() == 32) {
        ++root_parts[{it.kv_begin, it.kv_end}];
      } else {
        EXPECT_EQ(it.num_rows(), 1);
        EXPECT_EQ(it.kv_tokens(), 128);
        ++leaves;
      }
    }
    EXPECT_EQ(leaves, 256);

    ASSERT_EQ(root_parts.size(), bounds.size() - 1);
    size_t i = 0;
    for (const auto& [range, tiles] : root_parts) {
      EXPECT_EQ(range.first, bounds[i]);
      EXPECT_EQ(range.second, bounds[i + 1]);
      EXPECT_EQ(tiles, 8);
      ++i;
    }
  }
}

// The split searches multiples of the share for the least makespan. PAT B = [1, 4, 64],
// L = [2048, 512, 256], g = 4, 33 queues, default model: 2 root tiles (128 folded rows, cost
// 224 + 1.5 * 2048), 4 mid packs (64 folded, 512 keys: 672) and 64 leaves (4 folded, 256 keys:
// 356) total 32064, share 971.6. The share alone cuts each root tile into
// ceil(2048 / ((971.6 - 224) / 1.5)) = 5 parts of 410 keys (838 each): 10 parts and 4 mids
// fill 14 queues, the 64 leaves then leave a last round of leaves over half the queues
// (makespan 1194). 1.25 times the share cuts 4 parts of 512 (992 each): makespan 1068, kept.
TEST(PrefixPolicy, LongKvSplitTakesTheShareMultipleOfLeastMakespan) {
  const BatchLayout layout = pat_tree({{1, 2048}, {4, 512}, {64, 256}}, 32, 8, 128, 16);
  const Plan plan = plan_of(layout, Policy::kPrefix, 264);
  std::map<std::pair<int, int>, int> root_parts;  // [begin, end) -> items (one per tile)
  int mids = 0, leaves = 0;
  for (const WorkItem& it : plan.items) {
    if (it.num_rows() == 32) {
      ++root_parts[{it.kv_begin, it.kv_end}];
    } else if (it.num_rows() == 16) {
      EXPECT_EQ(it.kv_tokens(), 512);
      ++mids;
    } else {
      EXPECT_EQ(it.num_rows(), 1);
      EXPECT_EQ(it.kv_tokens(), 256);
      ++leaves;
    }
  }
  EXPECT_EQ(mids, 4);
  EXPECT_EQ(leaves, 64);
  const std::map<std::pair<int, int>, int> want = {
      {{0, 512}, 2}, {{512, 1024}, 2}, {{1024, 1536}, 2}, {{1536, 2048}, 2}};
  EXPECT_EQ(root_parts, want);
}

TEST(PrefixPolicy, WideTreeReadsAFractionOfBalanced) {
  // B = [1, 256], L = [4096, 128], g = 4: the root pack has 256 rows = 1024 folded -> 8 query
  // tiles -> 8 * 4096 + 256 * 128 = 65536 tokens/head; balanced reads 256 * 4224 = 1081344.
  const BatchLayout layout = pat_tree({{1, 4096}, {256, 128}}, 32, 8, 128, 16);
  const PlanStats prefix = compute_plan_stats(plan_of(layout, Policy::kPrefix, 132), layout);
  const PlanStats bal = compute_plan_stats(plan_of(layout, Policy::kBalanced, 132), layout);
  EXPECT_EQ(prefix.kv_bytes_read, 65536 * 8 * token_bytes(layout));
  EXPECT_EQ(bal.kv_bytes_read, 1081344 * 8 * token_bytes(layout));
  EXPECT_LE(static_cast<double>(prefix.kv_bytes_read),
            0.1 * static_cast<double>(bal.kv_bytes_read));
}

// Without shared pages both policies cut every request into the same causal query tiles
// (rows_per_tile rows) and a KV split moves no KV byte (every piece holds <= one query tile),
// so their KV traffic is equal. (Query and partial-state bytes differ: the policies split at
// different places — a queue's share of the row-weighted cost vs total work / CTAs.)
TEST(PrefixPolicy, NoSharingSameKvTrafficAsBalanced) {
  RandomLayoutOptions opt;
  opt.allow_sharing = false;
  for (uint64_t seed = 300; seed < 360; ++seed) {
    SCOPED_TRACE("seed " + std::to_string(seed));
    const BatchLayout layout = random_layout(seed, opt);
    const int num_ctas = 1 + static_cast<int>(seed % 40);
    const PlanStats prefix = compute_plan_stats(plan_of(layout, Policy::kPrefix, num_ctas), layout);
    const PlanStats bal = compute_plan_stats(plan_of(layout, Policy::kBalanced, num_ctas), layout);
    EXPECT_EQ(prefix.kv_bytes_read, bal.kv_bytes_read);
  }
}

TEST(PrefixPolicy, PrefillLeafOverALongerContextIsCutForTheQueues) {
  // The batch of BalancedPolicy.PrefillChunkOverALongerContextIsCutForTheQueues: one request,
  // q_len 16 over 256 keys (16 pages), page 16, 2 queues. Nothing is shared, so it is one leaf
  // [0, 256); its rows may see 1 + 16 / 16 = 2 pieces, so parts of 128 are allowed (they were
  // at least q_len * page = 256). The share rule cuts it at every multiple: T = (96 + 16 + 256)
  // / 2 = 184 leaves 72 keys -> 4 parts, raised to 128 -> 2 parts, one per queue.
  LayoutBuilder b(1, 1, 64, 16);
  b.add({}, 256, 16);
  const Plan plan = plan_of(b.layout(), Policy::kPrefix, 2);
  ASSERT_EQ(plan.items.size(), 2u);
  for (int i = 0; i < 2; ++i) {
    SCOPED_TRACE("item " + std::to_string(i));
    const WorkItem& it = plan.items[i];
    EXPECT_EQ(it.num_rows(), 16);
    EXPECT_FALSE(it.writes_final);
    EXPECT_EQ(it.kv_end - it.kv_begin, 128);
  }
  EXPECT_NE(plan.items[0].kv_begin, plan.items[1].kv_begin);
  EXPECT_NE(plan.items[0].cta, plan.items[1].cta);
  EXPECT_EQ(plan.num_merges(), 16);
}

TEST(PrefixPolicy, DeterministicPrefillChunkIsCutWithinTheBudget) {
  // One request, q_len 256 over 4096 keys (256 pages), page 16, deterministic chunks of 1024:
  // D = max(1024, min_piece_tokens) = max(1024, 4096 / (1 + 256 / 256)) = 2048 (it was
  // max(1024, q_len * page = 4096): one piece). Every query tile has the pieces [0, 2048) and
  // [2048, 4096) (its rows are at positions 3840..4095): two tiles of 128 rows (g = 1), and
  // each of the 256 rows merges two.
  LayoutBuilder b(1, 1, 64, 16);
  b.add({}, 4096, 256);
  const Plan plan = plan_of(b.layout(), Policy::kPrefix, 8, /*det=*/true);
  std::map<std::pair<int, int>, int> ranges;  // [kv_begin, kv_end) -> items
  for (const WorkItem& it : plan.items) {
    ++ranges[{it.kv_begin, it.kv_end}];
    EXPECT_EQ(it.num_rows(), 128);
  }
  const std::map<std::pair<int, int>, int> want = {{{0, 2048}, 2}, {{2048, 4096}, 2}};
  EXPECT_EQ(ranges, want);
  EXPECT_EQ(plan.num_merges(), 256);
}

TEST(PrefixPolicy, ChunksArePageAligned) {
  for (uint64_t seed = 400; seed < 440; ++seed) {
    SCOPED_TRACE("seed " + std::to_string(seed));
    const BatchLayout layout = random_layout(seed);
    for (bool det : {false, true}) {
      const Plan plan = plan_of(layout, Policy::kPrefix, 1 + static_cast<int>(seed % 50), det);
      for (const WorkItem& it : plan.items) EXPECT_EQ(it.kv_begin % layout.page_size, 0);
    }
  }
}

TEST(PrefixPolicy, DeterministicRequestIndependentOfBatch) {
  // Y (decode, kv 3001) shares a 1024-token prefix with Z in batch A only; X is a prefill
  // chunk (q_len 7) after a shared 512-token prefix. With deterministic chunks of 1024 tokens
  // the ranges, tile_kv and merge order of X and Y are the same in both batches.
  auto build = [](bool first) {
    LayoutBuilder b(8, 2, 128, 16);
    const std::vector<int32_t> sys = b.new_pages(64);
    const std::vector<int32_t> small(sys.begin(), sys.begin() + 32);
    int x = -1;
    int y = -1;
    if (first) {
      b.add(sys, 1500, 1);  // Z
      y = b.add(sys, 3001, 1);
      x = b.add(small, 2000, 7);
      b.add(small, 700, 3);
    } else {
      for (int i = 0; i < 12; ++i) b.add({}, 100 + 50 * i, 1 + i % 2);
      x = b.add(small, 2000, 7);
      y = b.add(sys, 3001, 1);
    }
    return std::make_tuple(b.layout(), x, y);
  };
  const auto [la, xa, ya] = build(true);
  const auto [lb, xb, yb] = build(false);
  const Plan pa = plan_of(la, Policy::kPrefix, 16, /*det=*/true);
  const Plan pb = plan_of(lb, Policy::kPrefix, 16, /*det=*/true);
  EXPECT_EQ(request_signature(pa, la, ya), request_signature(pb, lb, yb));
  EXPECT_EQ(request_signature(pa, la, xa), request_signature(pb, lb, xb));
  // Y's first chunk is shared with Z in batch A: one item holds both rows.
  bool shared = false;
  for (const WorkItem& it : pa.items) shared = shared || (it.kv_begin == 0 && it.num_rows() == 2);
  EXPECT_TRUE(shared);
}

TEST(PrefixPolicy, DeterministicRowsShareItemsOnlyWithTheirOwnTileQ) {
  // A (a 40-row prefill over 2048 keys) and six decode rows share a 1024-token prefix, so with
  // deterministic chunks of 1024 their chunks [0, 1024) have identical pages. A's 40 rows (160
  // folded at g = 4) take tile_q 128, a decode row 16: they may not share an item, since a
  // deterministic item's tile_q is the kernel's pass size (plan.h). Expected items over
  // [0, 1024): A's rows in tiles of 32 and 8 rows (tile_q 128 both), and the decode rows in
  // tiles of 16 / 4 = 4 rows (one pass each). Before tile_q joined the rule, A's last 8 rows
  // rode with the decode rows in a tile of tile_q 128, and alone in one of tile_q 32.
  auto build = [](bool with_decodes) {
    LayoutBuilder b(8, 2, 128, 16);
    const std::vector<int32_t> sys = b.new_pages(64);
    const int a = b.add(sys, 2048, 40);
    for (int i = 0; with_decodes && i < 6; ++i) b.add(sys, 1500 + 300 * i, 1);
    return std::make_pair(b.layout(), a);
  };
  const auto [mixed, a_mixed] = build(true);
  const Plan plan = plan_of(mixed, Policy::kPrefix, 16, /*det=*/true);
  std::multiset<std::pair<std::vector<int>, int>> first_chunk;  // (rows' requests, tile_q)
  for (const WorkItem& it : plan.items) {
    if (it.kv_begin != 0) continue;
    EXPECT_EQ(it.kv_end, 1024);
    std::vector<int> requests;
    for (int32_t k = it.rows_begin; k < it.rows_end; ++k) {
      requests.push_back(request_of_row(mixed, plan.item_rows[k]));
    }
    first_chunk.insert({requests, it.tile.tile_q});
  }
  const std::multiset<std::pair<std::vector<int>, int>> want = {{std::vector<int>(32, 0), 128},
                                                                {std::vector<int>(8, 0), 128},
                                                                {{1, 2, 3, 4}, 16},
                                                                {{5, 6}, 16}};
  EXPECT_EQ(first_chunk, want);
  const auto [alone, a_alone] = build(false);
  EXPECT_EQ(request_signature(plan, mixed, a_mixed),
            request_signature(plan_of(alone, Policy::kPrefix, 16, /*det=*/true), alone, a_alone));
}

}  // namespace
}  // namespace packserve::attention
