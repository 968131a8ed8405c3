// policy_prefix.cc: the `prefix` policy, seed 002 (PAT) §5.1 pack scheduler + §5.2 tile
// selector + §6 long-KV split, executed on our persistent CTAs with seed 004's LPT.
//
// Non-deterministic mode:
// 1. Prefix forest (§5.1 "tree structure block table"). A request's *shareable* pages are
//    its full pages before its first query row: floor((kv_len - q_len) / page_size) of them,
//    so every row under a shared node sees the whole node (the prefix precedes its tokens).
//    Requests are grouped by their first page id, and each group is extended while all
//    members have the same page ids (memcmp against the group's first member): a node is a
//    maximal run of pages shared by the same set of requests. Members ending there become
//    leaves, the others are regrouped by their next page id. Each request's leaf is the rest
//    of its context: [leaf page * page_size, kv_len), including its partial last page.
//    Grouping counts page ids in a hash table (a linear scan when they already ascend) and
//    sorts only the ids held by two or more requests; a request alone on its page id becomes
//    a leaf at once. Cost: linear in the requests plus the shared page references compared
//    once.
// 2. Prefill rows (q_len > 1) stay under the shared nodes only when every internal node on
//    their path has >= q_len pages; otherwise the request is packed *solo* (its leaf reads
//    [0, kv_len)). That rule, with the split caps of step 5, keeps every request's (item, row)
//    incidences <= q_len + pages, which bounds the plan buffer (plan_buffer.cc).
// 3. TreeHeuristic (Algorithm 1), with the profit model of §5.1. Our reading: c.size = the
//    folded query vectors under child c (rows * group_size: each writes its own partial state,
//    while one KV load serves the group) and root.len = the tokens of the KV the parent's pack
//    reads (its own node plus the ancestors merged into it, `blocks` in Algorithm 1). Scheme 2
//    (merge the child's pack with the parent's blocks) is taken when 4 * c.size > root.len,
//    the strict form of the paper's "Scheme 2 is preferred when 4 s_i > l_u" (a tie keeps the
//    split, as the profits are equal). A node's remaining rows (those whose child on the path
//    was not merged) form its pack over [blocks_begin, node end).
// 4. Query tiles (§5.2 round-up rule): a pack's rows (ascending) are cut into tiles of
//    floor(128 / group_size) rows; tile_q = the smallest compiled tile covering each tile's
//    folded rows. A leaf's rows are causal tiles over [leaf begin, last row position + 1).
// 5. Long-KV split (§6), to each queue's share of the work rather than the paper's mean pack
//    length. Cost of a pack of F folded rows and len keys: the CTA assignment's
//    cost = item + alpha F + beta w len (plan.h CostModel; w = wide_key for a 128-row query
//    tile, which computes instead of streaming).
//    T = the packs' total cost / the plan's queues; a pack is cut into
//    n = ceil(len / ((T - item - alpha F) / (beta w))) page-aligned parts of at least
//    kMinChunkTokens, so no part costs more than a queue's share. Every part writes a partial
//    state for each of its rows (260 bytes per folded row and head at head_dim 128 on the GPU,
//    read again by the merge): the mean rule, blind to the number of queues and to rows, cut
//    the 4096-token root of the PAT tree B=[1,256] into 16 parts of 256 on 33 queues, 16x the
//    partial-state bytes of one part and more than the unique KV bytes; the share rule cuts it
//    into 3.
//    Caps: a shared pack holding prefill rows (max q_len q) is cut into at most
//    max(1, pages / q) parts; a leaf tile of request r uses parts that its rows see at most
//    1 + leaf pages / q_len of (plan_internal.h min_piece_tokens).
//    The cut is made for a few multiples of T (kShareMultiples) and the least LPT makespan
//    under the cost model wins, as in the balanced policy's chunk search. Where the units
//    include enough of a quad item's shape (plan_buffer.h uses_quad_tickets: short single-row
//    leaves, which the CUDA kernel runs eight KV heads per ticket), the makespan costs them by
//    CostModel::quad: PAT B=[1,256]'s 4096-token root is then cut into 3 parts instead of 2,
//    1.03x on the H100 (twenty-third session, docs/benchmarks.md).
// 6. CTAs: seed 004 Algorithm 1's longest-first least-loaded assignment (plan_internal.h) onto
//    the plan's CTA queues, each run once per KV head (plan.h).
//
// auto_prefers_prefix() (plan.h, the `auto` policy's choice) is defined at the end, beside
// the forest's grouping by first page that it estimates.
//
// Deterministic mode (PlanOptions::deterministic): request r's KV is cut at fixed multiples
// of D_r = request_piece_tokens(round_up(deterministic_kv_chunk_tokens, page_size)) from key 0
// (plan_internal.h: the balanced policy's L_r in deterministic mode). Rows share an item iff
// their chunks have the same [begin, end), the same "last chunk of its request" flag, identical
// page ids over the chunk and the same tile_q, select_tile_q(n * group_size) for the n rows of
// the request that see the chunk; the shared rows (ascending) are cut into query tiles of
// max(1, tile_q / group_size) rows, each with that tile_q (one kernel pass per item). A request's
// ranges, tile_q, tile_kv, writes_final and merge order then depend on the request alone; only
// which other rows ride in its tiles varies. (tile_q is the CUDA kernel's pass size in a
// deterministic plan: a decode row keeps its 16-row pass beside a prefill sharing its pages, and
// the prefill's rows take the 128-row pass.)
#include <algorithm>
#include <bit>
#include <climits>
#include <cmath>
#include <cstring>
#include <limits>
#include <numeric>
#include <unordered_map>

#include "packserve/attention/plan_buffer.h"
#include "packserve/attention/plan_internal.h"

namespace packserve::attention::internal {
namespace {

struct Node {
  int32_t begin_page = 0;  // first page (index in the context) of the node's own KV
  int32_t end_page = 0;    // internal: one past its last page; leaf: unused (kv_len)
  int32_t parent = -1;
  int32_t request = -1;     // leaf: its request; internal: -1
  int32_t ref_request = 0;  // a request whose page table holds the node's (and path's) pages
  int32_t under_begin = 0;  // internal: its requests are Forest::under[under_begin, under_end)
  int32_t under_end = 0;
};

struct Forest {
  std::vector<Node> nodes;
  std::vector<int32_t> leaf_of;  // per request: its leaf
  std::vector<int32_t> under;    // per internal node: the requests below it, ascending
};

// A pack before the long-KV split.
struct Pack {
  int32_t causal_request = -1;  // >= 0: a causal tile of this request (leaf)
  int32_t kv_request = 0;
  int32_t kv_begin = 0;
  int32_t kv_end = 0;
  int32_t rows_begin = 0;  // into the pack row list
  int32_t rows_end = 0;
  int64_t min_part_tokens = 0;  // split parts must be at least this long (budget caps)
};

const int32_t* pages_of(const BatchLayout& layout, int r) {
  return layout.kv_page_indices.data() + layout.kv_page_indptr[r];
}

// Step 1's shareable pages of request r: its full pages before its first query row.
int32_t shareable_pages(const BatchLayout& layout, int r) {
  return (layout.kv_len(r) - layout.q_len(r)) / layout.page_size;
}

// Step 1: the forest. Nodes are created parent before child; internal nodes depth first with
// children by ascending page id (the order of the internal packs), each leaf at some point
// after its parent (a leaf is only reached through leaf_of, so its index does not matter).
void build_forest(const BatchLayout& layout, const std::vector<int32_t>& shareable,
                  Forest& forest) {
  const int batch = layout.batch_size();
  std::vector<Node>& nodes = forest.nodes;
  nodes.reserve(static_cast<size_t>(batch) * 2);
  std::vector<int32_t>& leaf_of = forest.leaf_of;
  leaf_of.assign(static_cast<size_t>(batch), -1);
  auto make_leaf = [&](int32_t r, int32_t begin_page, int32_t parent) {
    Node leaf;
    leaf.begin_page = begin_page;
    leaf.parent = parent;
    leaf.request = r;
    leaf.ref_request = r;
    leaf_of[r] = static_cast<int32_t>(nodes.size());
    nodes.push_back(leaf);
  };
  std::vector<int32_t> members;
  members.reserve(static_cast<size_t>(batch));
  for (int r = 0; r < batch; ++r) {
    if (shareable[r] == 0) {
      make_leaf(r, 0, -1);
    } else {
      members.push_back(r);
    }
  }
  // A group: members [begin, end) (at least two, ascending requests) agree on pages
  // [0, depth] and are not yet split; parent is the node above them (-1: a root).
  struct Group {
    size_t begin, end;
    int32_t depth, parent;
  };
  std::vector<Group> stack;
  // Scratch of split_at.
  std::vector<uint32_t> key;           // per member: page id + 1 at index k, 0 when it ends at k
  std::vector<int32_t> slot;           // per member: its page's hash slot, -1 once a leaf
  std::vector<uint32_t> table;         // open addressing on key (0 = empty): page ids at k
  std::vector<int32_t> count;          // per slot: members with that page, then their next place
  std::vector<uint64_t> shared_pages;  // key << 32 | slot of pages held by >= 2 members
  std::vector<int32_t> placed;
  // Splits members [b, e) (ascending requests) below `parent` at page index k: a member that
  // ends at k, or that no other member joins on page k, becomes a leaf starting at page k;
  // the others form one group per page id, pushed so that the lowest page id pops first, each
  // listing its members in ascending request order.
  auto split_at = [&](size_t b, size_t e, int32_t k, int32_t parent) {
    const size_t n = e - b;
    key.resize(n);
    bool ascending = true;
    for (size_t i = 0; i < n; ++i) {
      const int32_t m = members[b + i];
      key[i] = shareable[m] > k ? static_cast<uint32_t>(pages_of(layout, m)[k]) + 1 : 0;
      ascending &= i == 0 || key[i - 1] <= key[i];
    }
    const size_t first = stack.size();
    if (ascending) {  // runs of one page id, in place
      for (size_t i = 0; i < n;) {
        size_t j = i + 1;
        while (j < n && key[j] == key[i]) ++j;
        if (key[i] != 0 && j - i > 1) {
          stack.push_back({b + i, b + j, k, parent});
        } else {
          for (size_t x = i; x < j; ++x) make_leaf(members[b + x], k, parent);
        }
        i = j;
      }
    } else {  // count members per page id in a hash table; sort only the shared page ids
      size_t cap = 16;
      while (cap < 2 * n) cap *= 2;
      const int shift = 32 - std::countr_zero(cap);
      table.assign(cap, 0);
      count.assign(cap, 0);
      slot.resize(n);
      for (size_t i = 0; i < n; ++i) {
        if (key[i] == 0) {
          slot[i] = -1;
          continue;
        }
        auto h = static_cast<size_t>((key[i] * 0x9e3779b1u) >> shift);
        while (table[h] != 0 && table[h] != key[i]) h = (h + 1) & (cap - 1);
        table[h] = key[i];
        ++count[h];
        slot[i] = static_cast<int32_t>(h);
      }
      shared_pages.clear();
      for (size_t i = 0; i < n; ++i) {
        const int32_t s = slot[i];
        if (s < 0 || count[s] == 1) {
          make_leaf(members[b + i], k, parent);
          slot[i] = -1;
        } else if (count[s] > 1) {  // first member of a shared page: count turns negative
          shared_pages.push_back(static_cast<uint64_t>(key[i]) << 32 | static_cast<uint32_t>(s));
          count[s] = -count[s];
        }
      }
      std::sort(shared_pages.begin(), shared_pages.end());
      int32_t at = 0;
      for (const uint64_t p : shared_pages) {
        const auto s = static_cast<int32_t>(p & 0xffffffffu);
        const int32_t size = -count[s];
        count[s] = at;
        stack.push_back(
            {b + static_cast<size_t>(at), b + static_cast<size_t>(at + size), k, parent});
        at += size;
      }
      placed.resize(static_cast<size_t>(at));
      for (size_t i = 0; i < n; ++i) {
        if (slot[i] >= 0) placed[count[slot[i]]++] = members[b + i];
      }
      std::copy(placed.begin(), placed.end(), members.begin() + static_cast<std::ptrdiff_t>(b));
    }
    std::reverse(stack.begin() + static_cast<std::ptrdiff_t>(first), stack.end());
  };
  split_at(0, members.size(), 0, -1);
  while (!stack.empty()) {
    const Group g = stack.back();
    stack.pop_back();
    const int32_t lead = members[g.begin];
    int32_t k = INT32_MAX;
    for (size_t i = g.begin; i < g.end; ++i) k = std::min(k, shareable[members[i]]);
    const int32_t* lead_pages = pages_of(layout, lead);
    for (size_t i = g.begin + 1; i < g.end && k > g.depth + 1; ++i) {
      const int32_t* other = pages_of(layout, members[i]);
      // Usually the whole run matches: one vectorized memcmp, the element walk only on a miss.
      const auto bytes = static_cast<size_t>(k - g.depth) * sizeof(int32_t);
      if (std::memcmp(lead_pages + g.depth, other + g.depth, bytes) == 0) continue;
      const auto mis = std::mismatch(lead_pages + g.depth, lead_pages + k, other + g.depth);
      k = static_cast<int32_t>(mis.first - lead_pages);
    }
    Node node;
    node.begin_page = g.depth;
    node.end_page = k;
    node.parent = g.parent;
    node.ref_request = lead;
    node.under_begin = static_cast<int32_t>(forest.under.size());
    forest.under.insert(forest.under.end(), members.begin() + static_cast<std::ptrdiff_t>(g.begin),
                        members.begin() + static_cast<std::ptrdiff_t>(g.end));
    node.under_end = static_cast<int32_t>(forest.under.size());
    const auto u = static_cast<int32_t>(nodes.size());
    nodes.push_back(node);
    split_at(g.begin, g.end, k, u);
  }
}

// Steps 1-4 (non-deterministic): packs of the forest after TreeHeuristic and query tiling.
void tree_packs(const BatchLayout& layout, std::vector<Pack>& packs,
                std::vector<int32_t>& pack_rows) {
  const int batch = layout.batch_size();
  const int page = layout.page_size;
  const int64_t group = layout.group_size();
  const int tile_rows = rows_per_tile(layout.group_size());
  std::vector<int32_t> shareable(static_cast<size_t>(batch));
  for (int r = 0; r < batch; ++r) shareable[r] = shareable_pages(layout, r);
  Forest forest;
  build_forest(layout, shareable, forest);
  const std::vector<Node>& nodes = forest.nodes;
  const std::vector<int32_t>& leaf_of = forest.leaf_of;
  const size_t n = nodes.size();

  // Step 2: fewest pages of an internal node on each path; attached requests.
  std::vector<int32_t> min_pages(n, INT32_MAX);
  for (size_t x = 0; x < n; ++x) {
    const int32_t p = nodes[x].parent;
    if (p >= 0) min_pages[x] = std::min(min_pages[p], nodes[p].end_page - nodes[p].begin_page);
  }
  std::vector<char> attached(static_cast<size_t>(batch));
  for (int r = 0; r < batch; ++r) attached[r] = layout.q_len(r) <= min_pages[leaf_of[r]];
  // Rows of attached requests under each node (children come after parents); folded rows
  // are group * rows.
  std::vector<int64_t> rows_under(n, 0);
  for (size_t x = n; x-- > 0;) {
    const Node& node = nodes[x];
    if (node.request >= 0 && attached[node.request]) rows_under[x] += layout.q_len(node.request);
    if (node.parent >= 0) rows_under[node.parent] += rows_under[x];
  }
  // Step 3: TreeHeuristic decisions, top-down.
  std::vector<int64_t> blocks_begin(n, 0);  // first token of the pack a node's KV joins
  std::vector<char> merged(n, 0);           // merged into its parent's pack (scheme 2)
  for (size_t x = 0; x < n; ++x) {
    const Node& node = nodes[x];
    blocks_begin[x] = static_cast<int64_t>(node.begin_page) * page;
    if (node.parent < 0) continue;
    const int64_t parent_len =
        static_cast<int64_t>(nodes[node.parent].end_page) * page - blocks_begin[node.parent];
    if (4 * group * rows_under[x] > parent_len) {
      merged[x] = 1;
      blocks_begin[x] = blocks_begin[node.parent];
    }
  }
  // Internal packs (step 4), in node order: request r joins the pack of ancestor p when its
  // child on the path was not merged into p, so p's pack is the attached requests below p
  // less those below its merged children (each child's requests marked for the scan of p).
  std::vector<int32_t> merged_indptr(n + 1, 0);  // merged children of each node (CSR)
  for (size_t x = 0; x < n; ++x) {
    if (merged[x]) ++merged_indptr[nodes[x].parent + 1];
  }
  for (size_t x = 0; x < n; ++x) merged_indptr[x + 1] += merged_indptr[x];
  std::vector<int32_t> merged_children(static_cast<size_t>(merged_indptr[n]));
  {
    std::vector<int32_t> fill(merged_indptr.begin(), merged_indptr.end() - 1);
    for (size_t x = 0; x < n; ++x) {
      if (merged[x]) merged_children[fill[nodes[x].parent]++] = static_cast<int32_t>(x);
    }
  }
  std::vector<char> excluded(static_cast<size_t>(batch), 0);
  auto mark_below = [&](int32_t c, char value) {
    if (nodes[c].request >= 0) {
      excluded[nodes[c].request] = value;
      return;
    }
    for (int32_t i = nodes[c].under_begin; i < nodes[c].under_end; ++i) {
      excluded[forest.under[i]] = value;
    }
  };
  const int32_t* const qo_indptr = layout.qo_indptr.data();
  packs.reserve(static_cast<size_t>(batch) + n);
  pack_rows.reserve(static_cast<size_t>(layout.total_rows()) * 2);
  for (size_t u = 0; u < n; ++u) {
    if (nodes[u].request >= 0) continue;
    const auto mb = merged_children.begin() + merged_indptr[u];
    const auto me = merged_children.begin() + merged_indptr[u + 1];
    for (auto c = mb; c != me; ++c) mark_below(*c, 1);
    const auto b = static_cast<int32_t>(pack_rows.size());
    int32_t qmax = 0;
    for (int32_t i = nodes[u].under_begin; i < nodes[u].under_end; ++i) {
      const int32_t r = forest.under[i];
      if (!attached[r] || excluded[r]) continue;
      for (int32_t row = qo_indptr[r]; row < qo_indptr[r + 1]; ++row) pack_rows.push_back(row);
      qmax = std::max(qmax, qo_indptr[r + 1] - qo_indptr[r]);
    }
    for (auto c = mb; c != me; ++c) mark_below(*c, 0);
    const auto e = static_cast<int32_t>(pack_rows.size());
    if (b == e) continue;
    Pack pack;
    pack.kv_request = nodes[u].ref_request;
    pack.kv_begin = static_cast<int32_t>(blocks_begin[u]);
    pack.kv_end = nodes[u].end_page * page;
    const int64_t pages = (pack.kv_end - pack.kv_begin) / page;
    const int64_t max_parts = std::max<int64_t>(1, pages / qmax);
    pack.min_part_tokens = ceil_div(pack.kv_end - pack.kv_begin, max_parts);
    for (int32_t a = b; a < e; a += tile_rows) {
      pack.rows_begin = a;
      pack.rows_end = std::min(a + tile_rows, e);
      packs.push_back(pack);
    }
  }
  // Leaf packs: causal tiles of each request's rows (they are the rows themselves, ascending).
  for (int r = 0; r < batch; ++r) {
    const int q_len = layout.q_len(r);
    const int first_pos = layout.kv_len(r) - q_len;
    Pack pack;
    pack.causal_request = r;
    pack.kv_request = r;
    pack.kv_begin = attached[r] ? static_cast<int32_t>(blocks_begin[leaf_of[r]]) : 0;
    pack.min_part_tokens =
        min_piece_tokens(layout.kv_len(r) - pack.kv_begin,
                         layout.num_pages_of(r) - pack.kv_begin / page, q_len, page);
    for (int a = 0; a < q_len; a += tile_rows) {
      const int b = std::min(a + tile_rows, q_len);
      pack.kv_end = first_pos + b;
      pack.rows_begin = static_cast<int32_t>(pack_rows.size());
      for (int i = a; i < b; ++i) pack_rows.push_back(layout.qo_indptr[r] + i);
      pack.rows_end = static_cast<int32_t>(pack_rows.size());
      packs.push_back(pack);
    }
  }
}

// Multiples of a queue's share tried by the long-KV split (step 5), in tie-break order.
constexpr double kShareMultiples[] = {1.0, 1.25, 1.5, 0.8};

// Step 5, the long-KV split. A queue's share of the packs' cost.
double queue_share(const BatchLayout& layout, const std::vector<Pack>& packs, int num_queues,
                   const CostModel& cost) {
  double total = 0.0;
  for (const Pack& p : packs) {
    total += cost((p.rows_end - p.rows_begin) * layout.group_size(), p.kv_end - p.kv_begin);
  }
  return total / num_queues;
}

// Each pack's part length in tokens (0: not cut) for a given share.
std::vector<int64_t> split_parts(const BatchLayout& layout, const std::vector<Pack>& packs,
                                 double share, const CostModel& cost) {
  std::vector<int64_t> parts(packs.size(), 0);
  for (size_t i = 0; i < packs.size(); ++i) {
    const Pack& p = packs[i];
    const int64_t folded = (p.rows_end - p.rows_begin) * layout.group_size();
    const int64_t len = p.kv_end - p.kv_begin;
    const double per_key = cost(folded, 1) - cost(folded, 0);
    const double key_budget = share - cost(folded, 0);
    // A pack is split when its keys alone exceed what the share leaves after its item and row
    // costs (with cost.beta = 0 keys cost nothing and nothing is split).
    if (per_key > 0.0 && static_cast<double>(len) * per_key > key_budget) {
      const double part_keys = std::max(key_budget / per_key, 1.0);
      const auto n = static_cast<int64_t>(std::ceil(static_cast<double>(len) / part_keys));
      const int64_t part =
          std::max({ceil_div(len, n), static_cast<int64_t>(kMinChunkTokens), p.min_part_tokens});
      parts[i] = round_up(part, layout.page_size);
    }
  }
  return parts;
}

// The units of the packs cut at `parts`, into out.units; they reference the packs' rows, which
// out.rows must already hold.
void cut_packs(const BatchLayout& layout, const std::vector<Pack>& packs,
               const std::vector<int64_t>& parts, UnitList& out) {
  out.units.clear();
  out.units.reserve(packs.size() * 2);
  for (size_t i = 0; i < packs.size(); ++i) {
    const Pack& p = packs[i];
    append_causal_pieces(layout, p.causal_request, p.kv_request, p.kv_begin, p.kv_end, parts[i],
                         p.rows_begin, p.rows_end, out);
  }
}

// The units of a quad item's shape (plan_buffer.h): with enough of them the CUDA kernel runs
// each for eight KV heads per ticket, so the split search costs them by CostModel::quad.
int64_t count_quad_shaped(const BatchLayout& layout, const UnitList& list) {
  return std::count_if(list.units.begin(), list.units.end(), [&](const Unit& u) {
    return is_quad_shape(u.num_rows(), layout.group_size(), u.kv_tokens());
  });
}

// Deterministic mode: fixed chunks per request, rows grouped by identical chunk pages.
void deterministic_units(const BatchLayout& layout, const PlanOptions& options, UnitList& out) {
  const int batch = layout.batch_size();
  const int page = layout.page_size;
  const int group = layout.group_size();
  const int64_t chunk = round_up(options.deterministic_kv_chunk_tokens, page);
  struct Chunk {
    int32_t request, begin, end;
    bool last;
    int16_t tile_q;  // of the request's rows that see the chunk
  };
  std::vector<Chunk> chunks;
  chunks.reserve(static_cast<size_t>(batch) * 2);
  for (int r = 0; r < batch; ++r) {
    const int64_t part = request_piece_tokens(layout, r, chunk);
    const int32_t kv_len = layout.kv_len(r);
    for (int64_t b = 0; b < kv_len; b += part) {
      const auto e = static_cast<int32_t>(std::min<int64_t>(b + part, kv_len));
      const int64_t rows = layout.qo_indptr[r + 1] - first_row_seeing(layout, r, b);
      chunks.push_back({r, static_cast<int32_t>(b), e, e == kv_len, select_tile_q(rows * group)});
    }
  }
  auto first_page = [&](const Chunk& c) { return layout.page_of(c.request, c.begin); };
  std::vector<int32_t> order(chunks.size());
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(), [&](int32_t x, int32_t y) {
    const Chunk& a = chunks[x];
    const Chunk& b = chunks[y];
    if (a.begin != b.begin) return a.begin < b.begin;
    if (a.end != b.end) return a.end < b.end;
    if (a.last != b.last) return a.last < b.last;
    const int32_t pa = first_page(a);
    const int32_t pb = first_page(b);
    return pa != pb ? pa < pb : a.request < b.request;
  });
  auto same_pages = [&](const Chunk& a, const Chunk& b) {
    const int32_t* pa = pages_of(layout, a.request) + a.begin / page;
    const int32_t* pb = pages_of(layout, b.request) + b.begin / page;
    return std::equal(pa, pa + ceil_div(a.end - a.begin, page), pb);
  };
  std::vector<char> taken(chunks.size(), 0);
  for (size_t i = 0; i < order.size();) {
    // A run of chunks with equal (begin, end, last, first page); classes by full page equality.
    size_t j = i + 1;
    const Chunk& head = chunks[order[i]];
    while (j < order.size() && chunks[order[j]].begin == head.begin &&
           chunks[order[j]].end == head.end && chunks[order[j]].last == head.last &&
           first_page(chunks[order[j]]) == first_page(head)) {
      ++j;
    }
    for (size_t k = i; k < j; ++k) {
      if (taken[k]) continue;
      const Chunk& rep = chunks[order[k]];
      const auto begin = static_cast<int32_t>(out.rows.size());
      for (size_t m = k; m < j; ++m) {  // requests ascending within the run: rows ascending
        const Chunk& c = chunks[order[m]];
        if (taken[m] || (m != k && (c.tile_q != rep.tile_q || !same_pages(rep, c)))) continue;
        taken[m] = 1;
        for (int32_t x = first_row_seeing(layout, c.request, c.begin);
             x < layout.qo_indptr[c.request + 1]; ++x) {
          out.rows.push_back(x);
        }
      }
      // One pass per item: the rows of a class walk the chunk side by side, not one pass
      // after another in one CTA.
      const auto end = static_cast<int32_t>(out.rows.size());
      const int tile_rows = std::max(1, rep.tile_q / group);
      for (int32_t a = begin; a < end; a += tile_rows) {
        out.units.push_back(
            {rep.request, rep.begin, rep.end, a, std::min(a + tile_rows, end), rep.tile_q});
      }
    }
    i = j;
  }
}

}  // namespace

Result<Plan> make_plan_prefix(const BatchLayout& layout, const DeviceShape& device,
                              const PlanOptions& options) {
  Plan plan = empty_plan(layout, device, options);
  UnitList list;
  std::vector<int32_t> order;
  std::vector<int32_t> cta;
  if (options.deterministic) {
    deterministic_units(layout, options, list);
    assign_lpt(list, layout.group_size(), plan.num_ctas, options.cost, order, cta);
  } else {
    std::vector<Pack> packs;
    std::vector<int32_t> pack_rows;
    tree_packs(layout, packs, pack_rows);
    // The split to each multiple of the share, the least LPT makespan under the cost model
    // wins (ties: the earlier multiple; a split already tried is skipped). The share rounds a
    // pack's parts up, which can leave the queues' last round of items half full (PAT
    // B=[1,4,64]: 5 root parts of 410 keys, makespan 1194; 4 parts of 512 at 1.25 shares: 1068).
    const double share = queue_share(layout, packs, plan.num_ctas, options.cost);
    std::vector<std::vector<int64_t>> tried;
    UnitList candidate;  // list and candidate swap, so both hold the packs' rows
    candidate.rows = pack_rows;
    list.rows = std::move(pack_rows);
    std::vector<int32_t> candidate_order;
    std::vector<int32_t> candidate_cta;
    double best = std::numeric_limits<double>::infinity();
    for (const double multiple : kShareMultiples) {
      std::vector<int64_t> parts = split_parts(layout, packs, multiple * share, options.cost);
      if (std::find(tried.begin(), tried.end(), parts) != tried.end()) continue;
      cut_packs(layout, packs, parts, candidate);
      tried.push_back(std::move(parts));
      const double makespan =
          assign_lpt(candidate, layout.group_size(), plan.num_ctas, options.cost, candidate_order,
                     candidate_cta, uses_quad_tickets(plan, count_quad_shaped(layout, candidate)));
      if (makespan < best) {
        best = makespan;
        std::swap(list, candidate);
        std::swap(order, candidate_order);
        std::swap(cta, candidate_cta);
      }
    }
  }
  emit_and_finalize(list, order, cta, layout.total_rows(), plan);
  return plan;
}

}  // namespace packserve::attention::internal

namespace packserve::attention {

bool auto_prefers_prefix(const BatchLayout& layout, bool deterministic) {
  using internal::pages_of;
  using internal::shareable_pages;
  if (deterministic) return false;
  std::unordered_map<int32_t, int> leader;  // first page id -> the group's first request
  int64_t tokens = 0;
  for (int r = 0; r < layout.batch_size(); ++r) {
    const int shareable = shareable_pages(layout, r);
    if (shareable < 1) continue;
    const int32_t* pages = pages_of(layout, r);
    const auto [it, first] = leader.emplace(pages[0], r);
    if (first) continue;
    const int32_t* lead = pages_of(layout, it->second);
    const int n = std::min(shareable, shareable_pages(layout, it->second));
    int common = 0;
    while (common < n && pages[common] == lead[common]) ++common;
    tokens += static_cast<int64_t>(common) * layout.page_size;
    if (tokens >= kAutoPrefixMinTokens) return true;
  }
  return false;
}

}  // namespace packserve::attention
