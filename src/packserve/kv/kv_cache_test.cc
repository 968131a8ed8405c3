// kv_cache_test.cc: the KV-cache manager's states, invariants, prefix adoption, LRU eviction,
// copy-on-write, hit-rate accounting and all-or-nothing failures (kv_cache.h).
//
// The strongest oracle is PageMemory below: a fake KV memory that stores, for every page slot,
// the token whose KV was written there. The tests apply the manager's PageCopy records and
// write each computed token into the slot its page table names; then every request must read
// back exactly its own tokens through its table. A wrong adoption, a missed copy-on-write or a
// write into a shared page shows up as a wrong token.
#include "packserve/kv/kv_cache.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <vector>

#include "packserve/common/rng.h"

namespace packserve::kv {
namespace {

constexpr TokenId kEmptySlot = -1;

std::vector<TokenId> iota_tokens(int32_t n, TokenId first) {
  std::vector<TokenId> t(static_cast<size_t>(n));
  for (int32_t i = 0; i < n; ++i) t[static_cast<size_t>(i)] = first + i;
  return t;
}

KvCacheConfig small_config(int32_t num_pages, int32_t page_size = 4) {
  KvCacheConfig c;
  c.num_pages = num_pages;
  c.page_size = page_size;
  return c;
}

// Fake KV memory: slot contents are token ids.
class PageMemory {
 public:
  explicit PageMemory(const KvCacheConfig& c)
      : page_size_(c.page_size),
        slots_(static_cast<size_t>(c.num_pages) * static_cast<size_t>(c.page_size), kEmptySlot) {}
  void apply(const std::vector<PageCopy>& copies) {
    for (const PageCopy& c : copies) {
      for (int32_t s = 0; s < c.num_tokens; ++s) at(c.dst_page, s) = at(c.src_page, s);
    }
  }
  void write(std::span<const PageId> table, std::span<const TokenId> tokens, int32_t begin,
             int32_t end) {
    for (int32_t pos = begin; pos < end; ++pos) {
      at(table[static_cast<size_t>(pos / page_size_)], pos % page_size_) =
          tokens[static_cast<size_t>(pos)];
    }
  }
  // The first `n` tokens as read through `table`.
  std::vector<TokenId> read(std::span<const PageId> table, int32_t n) {
    std::vector<TokenId> out;
    for (int32_t pos = 0; pos < n; ++pos) {
      out.push_back(at(table[static_cast<size_t>(pos / page_size_)], pos % page_size_));
    }
    return out;
  }

 private:
  TokenId& at(PageId p, int32_t slot) {
    return slots_[static_cast<size_t>(p) * static_cast<size_t>(page_size_) +
                  static_cast<size_t>(slot)];
  }
  int32_t page_size_;
  std::vector<TokenId> slots_;
};

// The page table by value (a span into the manager, valid until its next mutation).
std::span<const PageId> table(const KvCacheManager& kv, RequestId id) {
  return kv.page_table(id).value();
}

// Admits `tokens` and computes all of them (writing PageMemory), as one prefill would.
int32_t admit_and_compute(KvCacheManager& kv, PageMemory& mem, RequestId id,
                          const std::vector<TokenId>& tokens) {
  std::vector<PageCopy> copies;
  Result<AdmitResult> r = kv.add_request(id, tokens, static_cast<int32_t>(tokens.size()), &copies);
  EXPECT_TRUE(r.ok()) << r.status().to_string();
  if (!r.ok()) return -1;
  mem.apply(copies);
  mem.write(table(kv, id), tokens, r->num_cached_tokens, r->num_cached_tokens + r->num_new_tokens);
  EXPECT_TRUE(kv.commit_computed(id, tokens, r->num_new_tokens).ok());
  return r->num_cached_tokens;
}

TEST(KvCacheConfigTest, ValidateNamesTheField) {
  KvCacheConfig c;
  EXPECT_TRUE(c.validate().ok());
  c.num_pages = 0;
  EXPECT_EQ(c.validate().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(c.validate().message().find("kv.num_pages"), std::string::npos);
  c = KvCacheConfig{};
  c.page_size = 0;
  EXPECT_NE(c.validate().message().find("kv.page_size"), std::string::npos);
  c.page_size = 257;
  EXPECT_NE(c.validate().message().find("kv.page_size"), std::string::npos);
}

TEST(KvCacheTest, AllocateCommitFreeMovesPagesThroughTheStates) {
  KvCacheManager kv(small_config(8));
  PageMemory mem(kv.config());
  const std::vector<TokenId> t = iota_tokens(10, 100);  // 2 full pages + 2 tokens
  EXPECT_EQ(admit_and_compute(kv, mem, 1, t), 0);
  KvCacheStats s = kv.stats();
  EXPECT_EQ(s.pages_in_use, 3);  // ceil(10 / 4)
  EXPECT_EQ(s.pages_free, 5);
  EXPECT_EQ(s.pages_cached, 0);
  EXPECT_EQ(s.num_pages_published, 2);  // the partial page is not published
  for (const PageId p : table(kv, 1)) EXPECT_EQ(kv.page_refcount(p), 1);
  EXPECT_EQ(mem.read(table(kv, 1), 10), t);
  ASSERT_TRUE(kv.check_invariants().ok()) << kv.check_invariants().to_string();

  ASSERT_TRUE(kv.free_request(1).ok());
  s = kv.stats();
  EXPECT_EQ(s.pages_cached, 2);
  EXPECT_EQ(s.pages_free, 6);
  EXPECT_EQ(s.pages_free + s.pages_cached, s.pages_total);
  EXPECT_TRUE(kv.check_invariants().ok());
}

TEST(KvCacheTest, AdoptsTheLongestCachedRunAndCountsHitTokens) {
  KvCacheManager kv(small_config(16));
  PageMemory mem(kv.config());
  const std::vector<TokenId> a = iota_tokens(12, 0);  // pages [0..3] [4..7] [8..11]
  admit_and_compute(kv, mem, 1, a);
  ASSERT_TRUE(kv.free_request(1).ok());

  // b shares the first two pages, then diverges inside the third.
  std::vector<TokenId> b = a;
  b[9] = 999;
  b.push_back(50);
  EXPECT_EQ(admit_and_compute(kv, mem, 2, b), 8);  // 2 pages * 4 tokens adopted
  EXPECT_EQ(mem.read(table(kv, 2), 13), b);
  const KvCacheStats s = kv.stats();
  // Lookups: 12 tokens (hit 0) + 13 tokens (hit 8).
  EXPECT_EQ(s.prefix_lookup_tokens, 25);
  EXPECT_EQ(s.prefix_hit_tokens, 8);
  EXPECT_DOUBLE_EQ(s.prefix_hit_rate(), 8.0 / 25.0);

  // A prompt whose first page differs adopts nothing even if later pages match: keys chain.
  std::vector<TokenId> c = a;
  c[0] = 777;
  EXPECT_EQ(admit_and_compute(kv, mem, 3, c), 0);
  EXPECT_TRUE(kv.check_invariants().ok());
}

// adopt_cached = false (a request whose every prompt row must be computed): nothing adopted,
// no lookup counted, its own full pages computed into private pages and not published again;
// the cached copies stay adoptable for the next request.
TEST(KvCacheTest, AddingWithoutAdoptionComputesEveryToken) {
  KvCacheManager kv(small_config(16));
  PageMemory mem(kv.config());
  const std::vector<TokenId> a = iota_tokens(10, 0);  // 2 full pages + 2 tokens
  admit_and_compute(kv, mem, 1, a);
  ASSERT_TRUE(kv.free_request(1).ok());
  const KvCacheStats before = kv.stats();
  ASSERT_EQ(before.pages_cached, 2);
  std::vector<PageCopy> copies;
  Result<AdmitResult> r = kv.add_request(2, a, 10, &copies, /*adopt_cached=*/false);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_EQ(r->num_cached_tokens, 0);
  EXPECT_EQ(r->num_new_tokens, 10);
  EXPECT_TRUE(copies.empty());
  mem.write(table(kv, 2), a, 0, 10);
  ASSERT_TRUE(kv.commit_computed(2, a, 10).ok());
  EXPECT_EQ(mem.read(table(kv, 2), 10), a);
  KvCacheStats s = kv.stats();
  EXPECT_EQ(s.prefix_lookup_tokens, before.prefix_lookup_tokens);
  EXPECT_EQ(s.prefix_hit_tokens, before.prefix_hit_tokens);
  EXPECT_EQ(s.pages_cached, 2);  // the old copies, untouched
  EXPECT_EQ(s.num_pages_published, before.num_pages_published);
  for (const PageId p : table(kv, 2)) EXPECT_EQ(kv.page_refcount(p), 1);
  ASSERT_TRUE(kv.check_invariants().ok()) << kv.check_invariants().to_string();
  EXPECT_EQ(admit_and_compute(kv, mem, 3, a), 8);  // the next one adopts as before
  ASSERT_TRUE(kv.free_request(2).ok());
  ASSERT_TRUE(kv.free_request(3).ok());
  s = kv.stats();
  EXPECT_EQ(s.pages_free + s.pages_cached, s.pages_total);
  EXPECT_TRUE(kv.check_invariants().ok());
}

TEST(KvCacheTest, SharedPagesCountOneReferencePerTable) {
  KvCacheManager kv(small_config(16));
  PageMemory mem(kv.config());
  const std::vector<TokenId> a = iota_tokens(9, 0);
  admit_and_compute(kv, mem, 1, a);
  admit_and_compute(kv, mem, 2, a);  // adopts pages 0 and 1 of request 1 while it is live
  admit_and_compute(kv, mem, 3, a);
  const std::span<const PageId> t1 = table(kv, 1);
  const std::span<const PageId> t2 = table(kv, 2);
  EXPECT_EQ(t1[0], t2[0]);
  EXPECT_EQ(t1[1], t2[1]);
  EXPECT_NE(t1[2], t2[2]);  // partial pages are never shared by adoption
  EXPECT_EQ(kv.page_refcount(t1[0]), 3);
  EXPECT_EQ(kv.page_refcount(t1[2]), 1);
  ASSERT_TRUE(kv.free_request(2).ok());
  EXPECT_EQ(kv.page_refcount(t1[0]), 2);
  EXPECT_TRUE(kv.check_invariants().ok());
}

TEST(KvCacheTest, FullyCachedPromptRecomputesItsLastTokenIntoACopy) {
  KvCacheManager kv(small_config(16));
  PageMemory mem(kv.config());
  const std::vector<TokenId> a = iota_tokens(8, 10);  // exactly 2 full pages
  admit_and_compute(kv, mem, 1, a);                   // stays live: the pages are shared

  std::vector<PageCopy> copies;
  Result<AdmitResult> r = kv.add_request(2, a, 100, &copies);
  ASSERT_TRUE(r.ok());
  // Every token is cached but one must be computed to sample from: 7 cached, 1 new.
  EXPECT_EQ(r->num_cached_tokens, 7);
  EXPECT_EQ(r->num_new_tokens, 1);
  // Position 7 lies in the second page, which is shared and published: copy its 3 computed
  // slots into a private page.
  const PageId shared = (table(kv, 1))[1];
  ASSERT_EQ(copies.size(), 1u);
  EXPECT_EQ(copies[0].src_page, shared);
  EXPECT_EQ(copies[0].num_tokens, 3);
  EXPECT_EQ(copies[0].dst_page, (table(kv, 2))[1]);
  EXPECT_NE(copies[0].dst_page, shared);
  EXPECT_EQ(kv.page_refcount(shared), 1);
  EXPECT_EQ(kv.stats().num_cow_copies, 1);
  mem.apply(copies);
  mem.write(table(kv, 2), a, 7, 8);
  ASSERT_TRUE(kv.commit_computed(2, a, 1).ok());
  EXPECT_EQ(mem.read(table(kv, 2), 8), a);
  EXPECT_EQ(mem.read(table(kv, 1), 8), a);
  EXPECT_TRUE(kv.check_invariants().ok());
}

// Pool of 2 pages, a fully cached 8-token prompt: adopting both pages leaves no page for the
// copy of the last one, so the last page is recomputed instead (its cached page is evicted
// for it) rather than failing a request that fits the pool.
TEST(KvCacheTest, FullyCachedPromptWithoutRoomForTheCopyRecomputesItsLastPage) {
  KvCacheManager kv(small_config(2));
  PageMemory mem(kv.config());
  const std::vector<TokenId> a = iota_tokens(8, 10);
  admit_and_compute(kv, mem, 1, a);
  ASSERT_TRUE(kv.free_request(1).ok());
  std::vector<PageCopy> copies;
  Result<AdmitResult> r = kv.add_request(2, a, 100, &copies);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_EQ(r->num_cached_tokens, 4);
  EXPECT_EQ(r->num_new_tokens, 4);
  EXPECT_TRUE(copies.empty());
  EXPECT_EQ(kv.stats().num_evictions, 1);
  mem.write(table(kv, 2), a, 4, 8);
  ASSERT_TRUE(kv.commit_computed(2, a, 4).ok());
  EXPECT_EQ(mem.read(table(kv, 2), 8), a);
  // The evicted key is free again, so the recomputed page is published under it.
  EXPECT_TRUE(kv.page_is_published(table(kv, 2)[1]));
  EXPECT_TRUE(kv.check_invariants().ok());
}

TEST(KvCacheTest, ForkSharesPagesAndTheFirstWriteIntoAPartialPageCopiesIt) {
  KvCacheManager kv(small_config(16));
  PageMemory mem(kv.config());
  std::vector<TokenId> a = iota_tokens(6, 0);  // 1 full page + 2 tokens in a partial page
  admit_and_compute(kv, mem, 1, a);
  ASSERT_TRUE(kv.fork(1, 2).ok());
  const PageId partial = (table(kv, 1))[1];
  EXPECT_EQ(kv.page_refcount(partial), 2);
  ASSERT_TRUE(kv.check_invariants().ok());

  // The child samples 100, the parent samples 200; both write position 6.
  std::vector<TokenId> child = a, parent = a;
  child.push_back(100);
  parent.push_back(200);
  std::vector<PageCopy> copies;
  ASSERT_TRUE(kv.allocate_slots(2, 1, &copies).ok());
  ASSERT_EQ(copies.size(), 1u);
  EXPECT_EQ(copies[0].src_page, partial);
  EXPECT_EQ(copies[0].num_tokens, 2);
  EXPECT_EQ(kv.page_refcount(partial), 1);  // now the parent's alone
  mem.apply(copies);
  mem.write(table(kv, 2), child, 6, 7);
  ASSERT_TRUE(kv.commit_computed(2, child, 1).ok());

  copies.clear();
  ASSERT_TRUE(kv.allocate_slots(1, 1, &copies).ok());
  EXPECT_TRUE(copies.empty());  // sole owner, unpublished: writes in place
  mem.write(table(kv, 1), parent, 6, 7);
  ASSERT_TRUE(kv.commit_computed(1, parent, 1).ok());

  EXPECT_EQ(mem.read(table(kv, 1), 7), parent);
  EXPECT_EQ(mem.read(table(kv, 2), 7), child);
  EXPECT_EQ((table(kv, 1))[0], (table(kv, 2))[0]);  // the full page stays shared
  EXPECT_TRUE(kv.check_invariants().ok());
}

TEST(KvCacheTest, EvictsLeastRecentlyUsedAndAChainTailBeforeItsHead) {
  KvCacheManager kv(small_config(4));
  PageMemory mem(kv.config());
  const std::vector<TokenId> a = iota_tokens(8, 0);    // 2 pages
  const std::vector<TokenId> b = iota_tokens(4, 100);  // 1 page
  admit_and_compute(kv, mem, 1, a);
  admit_and_compute(kv, mem, 2, b);
  const std::vector<PageId> ta(table(kv, 1).begin(), table(kv, 1).end());
  const PageId pb = (table(kv, 2))[0];
  ASSERT_TRUE(kv.free_request(1).ok());  // releases a's page 1, then page 0
  ASSERT_TRUE(kv.free_request(2).ok());
  EXPECT_EQ(kv.lru_order(), (std::vector<PageId>{ta[1], ta[0], pb}));

  // 4 pages total, 1 free: a 2-page request takes the free page, then evicts a's tail.
  admit_and_compute(kv, mem, 3, iota_tokens(8, 500));
  EXPECT_EQ(kv.stats().num_evictions, 1);
  EXPECT_EQ(kv.page_state(ta[0]), PageState::kCached);
  EXPECT_EQ(kv.page_state(pb), PageState::kCached);
  // The evicted page now holds request 3's second page.
  EXPECT_EQ(table(kv, 3)[1], ta[1]);
  // a's first page is still adoptable, its second is gone.
  EXPECT_EQ(admit_and_compute(kv, mem, 4, a), 4);
  // Adopting moved ta[0] out of the LRU list.
  EXPECT_EQ(kv.page_state(ta[0]), PageState::kInUse);
  EXPECT_TRUE(kv.check_invariants().ok());
}

TEST(KvCacheTest, AdoptionRefreshesRecency) {
  KvCacheManager kv(small_config(3));
  PageMemory mem(kv.config());
  const std::vector<TokenId> a = iota_tokens(4, 0), b = iota_tokens(4, 10);
  admit_and_compute(kv, mem, 1, a);
  admit_and_compute(kv, mem, 2, b);
  ASSERT_TRUE(kv.free_request(1).ok());
  ASSERT_TRUE(kv.free_request(2).ok());  // LRU: a, b
  std::vector<TokenId> a2 = a;
  a2.push_back(7);
  EXPECT_EQ(admit_and_compute(kv, mem, 3, a2), 4);  // uses a again
  ASSERT_TRUE(kv.free_request(3).ok());             // LRU now: b, a (a's extra page is free)
  const PageId pa = kv.lru_order().back();
  admit_and_compute(kv, mem, 4, iota_tokens(8, 40));  // 2 pages: 1 free + evict b
  EXPECT_EQ(kv.page_state(pa), PageState::kCached);
  ASSERT_TRUE(kv.free_request(4).ok());
  EXPECT_EQ(admit_and_compute(kv, mem, 5, a2), 4);
  EXPECT_TRUE(kv.check_invariants().ok());
}

TEST(KvCacheTest, OutOfPagesChangesNothing) {
  KvCacheManager kv(small_config(4));
  PageMemory mem(kv.config());
  const std::vector<TokenId> a = iota_tokens(8, 0);
  admit_and_compute(kv, mem, 1, a);
  ASSERT_TRUE(kv.free_request(1).ok());               // 2 cached, 2 free
  admit_and_compute(kv, mem, 2, iota_tokens(3, 90));  // 1 in use, 1 free, 2 cached
  const KvCacheStats before = kv.stats();
  const std::vector<PageId> lru_before = kv.lru_order();

  // a + 10 more tokens needs 2 adopted + 3 new pages; 3 allocatable minus 2 adopted = 1.
  std::vector<TokenId> big = a;
  for (int i = 0; i < 10; ++i) big.push_back(1000 + i);
  std::vector<PageCopy> copies;
  Result<AdmitResult> r = kv.add_request(3, big, 100, &copies);
  EXPECT_EQ(r.status().code(), StatusCode::kResourceExhausted);
  Status grow = kv.allocate_slots(2, 20, &copies);
  EXPECT_EQ(grow.code(), StatusCode::kResourceExhausted);

  const KvCacheStats after = kv.stats();
  EXPECT_FALSE(kv.contains(3));
  EXPECT_TRUE(copies.empty());
  EXPECT_EQ(after.pages_free, before.pages_free);
  EXPECT_EQ(after.pages_cached, before.pages_cached);
  EXPECT_EQ(after.prefix_lookup_tokens, before.prefix_lookup_tokens);
  EXPECT_EQ(after.prefix_hit_tokens, before.prefix_hit_tokens);
  EXPECT_EQ(kv.lru_order(), lru_before);
  EXPECT_EQ(kv.page_table(2)->size(), 1u);
  EXPECT_TRUE(kv.check_invariants().ok());
}

TEST(KvCacheTest, BadInputIsRejectedWithNothingChanged) {
  KvCacheManager kv(small_config(4));
  PageMemory mem(kv.config());
  admit_and_compute(kv, mem, 1, iota_tokens(5, 0));
  const KvCacheStats before = kv.stats();
  std::vector<PageCopy> copies;
  const std::vector<TokenId> none;
  EXPECT_EQ(kv.add_request(1, iota_tokens(3, 0), 3, &copies).status().code(),
            StatusCode::kInvalidArgument);  // duplicate
  EXPECT_EQ(kv.add_request(2, none, 3, &copies).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(kv.add_request(2, iota_tokens(3, 0), -1, &copies).status().code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(kv.allocate_slots(9, 1, &copies).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(kv.allocate_slots(1, -1, &copies).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(kv.free_request(9).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(kv.fork(9, 10).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(kv.fork(1, 1).code(), StatusCode::kInvalidArgument);
  EXPECT_FALSE(kv.page_table(9).ok());
  // Committing past the allocated slots or the known tokens.
  const std::vector<TokenId> t = iota_tokens(9, 0);
  EXPECT_EQ(kv.commit_computed(1, t, 4).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(kv.commit_computed(1, iota_tokens(5, 0), 1).code(), StatusCode::kInvalidArgument);
  const KvCacheStats after = kv.stats();
  EXPECT_EQ(after.pages_free, before.pages_free);
  EXPECT_EQ(after.prefix_lookup_tokens, before.prefix_lookup_tokens);
  EXPECT_EQ(*kv.num_computed_tokens(1), 5);
  EXPECT_EQ(kv.num_requests(), 1);
  EXPECT_TRUE(kv.check_invariants().ok());
}

TEST(KvCacheTest, PrefixCachingOffNeverCaches) {
  KvCacheConfig c = small_config(8);
  c.enable_prefix_caching = false;
  KvCacheManager kv(c);
  PageMemory mem(c);
  const std::vector<TokenId> a = iota_tokens(8, 0);
  admit_and_compute(kv, mem, 1, a);
  ASSERT_TRUE(kv.free_request(1).ok());
  EXPECT_EQ(kv.stats().pages_cached, 0);
  EXPECT_EQ(kv.stats().pages_free, 8);
  EXPECT_EQ(admit_and_compute(kv, mem, 2, a), 0);
  EXPECT_TRUE(kv.check_invariants().ok());
}

std::vector<PageKey> keys_of(const std::vector<TokenId>& tokens, int32_t page_size) {
  std::vector<PageKey> keys;
  full_page_keys(tokens, page_size, &keys);
  return keys;
}

void expect_probe(const KvCacheManager& kv, const std::vector<PageKey>& keys, int32_t cached,
                  int32_t pending) {
  const PrefixProbe probe = kv.probe_prefix(keys);
  EXPECT_EQ(probe.num_cached_pages, cached);
  EXPECT_EQ(probe.num_pending_pages, pending);
  EXPECT_TRUE(kv.check_invariants().ok()) << kv.check_invariants().to_string();
}

// A's full pages are pending from admission until it commits them; B (3 full pages, the first
// two A's) sees them move from pending to cached. A's partial third page is never pending.
TEST(KvCacheTest, PendingPagesLastUntilCommitted) {
  KvCacheManager kv(small_config(16));
  const std::vector<TokenId> a = iota_tokens(10, 1);
  const std::vector<PageKey> b = keys_of(iota_tokens(12, 1), 4);
  std::vector<PageCopy> copies;
  ASSERT_TRUE(kv.add_request(1, a, 10, &copies).ok());
  EXPECT_TRUE(kv.has_pending_pages());
  expect_probe(kv, b, 0, 2);
  ASSERT_TRUE(kv.commit_computed(1, a, 4).ok());
  EXPECT_TRUE(kv.has_pending_pages());
  expect_probe(kv, b, 1, 1);
  ASSERT_TRUE(kv.commit_computed(1, a, 6).ok());
  EXPECT_FALSE(kv.has_pending_pages());
  expect_probe(kv, b, 2, 0);
  // A second request over the same prompt adopts both pages and has nothing pending.
  ASSERT_TRUE(kv.add_request(2, a, 10, &copies).ok());
  EXPECT_FALSE(kv.has_pending_pages());
  ASSERT_TRUE(kv.free_request(1).ok());
  ASSERT_TRUE(kv.free_request(2).ok());
  expect_probe(kv, b, 2, 0);  // cached
}

// An owner that ends uncommitted takes its pending keys with it; a fork child owns none.
TEST(KvCacheTest, PendingPagesEndWithTheirOwnerNotWithAForkChild) {
  KvCacheManager kv(small_config(16));
  const std::vector<TokenId> c = iota_tokens(8, 100);
  const std::vector<PageKey> keys = keys_of(c, 4);
  std::vector<PageCopy> copies;
  ASSERT_TRUE(kv.add_request(1, c, 8, &copies).ok());
  ASSERT_TRUE(kv.fork(1, 2).ok());
  ASSERT_TRUE(kv.free_request(2).ok());
  expect_probe(kv, keys, 0, 2);
  ASSERT_TRUE(kv.free_request(1).ok());
  expect_probe(kv, keys, 0, 0);
  EXPECT_FALSE(kv.has_pending_pages());

  KvCacheConfig off = small_config(16);
  off.enable_prefix_caching = false;
  KvCacheManager uncached(off);
  ASSERT_TRUE(uncached.add_request(1, c, 8, &copies).ok());
  EXPECT_FALSE(uncached.has_pending_pages());
  expect_probe(uncached, keys, 0, 0);
}

// Random admissions, chunked computes, decodes, forks and frees over a small pool with shared
// prefixes. After every operation: invariants hold and every live request reads back its own
// tokens; after everything ends, free + cached = total.
TEST(KvCacheTest, RandomOperationsKeepInvariantsAndContents) {
  for (uint64_t seed = 1; seed <= 20; ++seed) {
    SCOPED_TRACE(testing::Message() << "seed=" << seed);
    Rng rng(seed);
    const int32_t page_size = static_cast<int32_t>(rng.uniform_int(1, 5));
    KvCacheManager kv(small_config(static_cast<int32_t>(rng.uniform_int(4, 40)), page_size));
    PageMemory mem(kv.config());
    // Three "system prompts" as shared prefixes of 0, 1 or a few pages.
    std::vector<std::vector<TokenId>> prefixes = {
        {}, iota_tokens(page_size, 1), iota_tokens(3 * page_size + 1, 50)};
    std::map<RequestId, std::vector<TokenId>> live;  // id -> known tokens
    RequestId next_id = 1;
    for (int op = 0; op < 400; ++op) {
      const int64_t kind = rng.uniform_int(0, 9);
      if (kind <= 2 || live.empty()) {
        std::vector<TokenId> t = prefixes[static_cast<size_t>(rng.uniform_int(0, 2))];
        const int64_t extra = rng.uniform_int(t.empty() ? 1 : 0, 2 * page_size);
        for (int64_t i = 0; i < extra; ++i)
          t.push_back(static_cast<TokenId>(rng.uniform_int(0, 3)));
        std::vector<PageCopy> copies;
        Result<AdmitResult> r =
            kv.add_request(next_id, t, static_cast<int32_t>(rng.uniform_int(0, 9)), &copies);
        if (r.ok()) {
          mem.apply(copies);
          mem.write(table(kv, next_id), t, r->num_cached_tokens,
                    r->num_cached_tokens + r->num_new_tokens);
          ASSERT_TRUE(kv.commit_computed(next_id, t, r->num_new_tokens).ok());
          live[next_id] = t;
        } else {
          ASSERT_EQ(r.status().code(), StatusCode::kResourceExhausted);
          ASSERT_FALSE(kv.contains(next_id));
        }
        ++next_id;
      } else {
        auto it = live.begin();
        std::advance(it, rng.uniform_int(0, static_cast<int64_t>(live.size()) - 1));
        const RequestId id = it->first;
        std::vector<TokenId>& t = it->second;
        const int32_t computed = *kv.num_computed_tokens(id);
        if (kind <= 5) {  // compute a chunk, or a decode step
          if (computed == static_cast<int32_t>(t.size()))
            t.push_back(static_cast<TokenId>(rng.uniform_int(0, 3)));
          const int32_t k =
              static_cast<int32_t>(rng.uniform_int(1, static_cast<int64_t>(t.size()) - computed));
          std::vector<PageCopy> copies;
          const Status s = kv.allocate_slots(id, k, &copies);
          if (s.ok()) {
            mem.apply(copies);
            mem.write(table(kv, id), t, computed, computed + k);
            ASSERT_TRUE(kv.commit_computed(id, t, k).ok());
          } else {
            ASSERT_EQ(s.code(), StatusCode::kResourceExhausted);
            ASSERT_TRUE(copies.empty());
          }
        } else if (kind == 6) {
          ASSERT_TRUE(kv.fork(id, next_id).ok());
          std::vector<TokenId> copy(t.begin(), t.begin() + computed);
          live[next_id++] = copy;
        } else {
          ASSERT_TRUE(kv.free_request(id).ok());
          live.erase(it);
        }
      }
      const Status inv = kv.check_invariants();
      ASSERT_TRUE(inv.ok()) << "op " << op << ": " << inv.to_string();
      for (const auto& [id, t] : live) {
        const int32_t computed = *kv.num_computed_tokens(id);
        ASSERT_EQ(mem.read(table(kv, id), computed),
                  std::vector<TokenId>(t.begin(), t.begin() + computed))
            << "op " << op << " req=" << id;
      }
    }
    for (const auto& [id, t] : live) ASSERT_TRUE(kv.free_request(id).ok());
    const KvCacheStats s = kv.stats();
    EXPECT_EQ(s.pages_free + s.pages_cached, s.pages_total);
    EXPECT_TRUE(kv.check_invariants().ok());
  }
}

}  // namespace
}  // namespace packserve::kv
